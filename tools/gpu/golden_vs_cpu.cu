// The golden check (../shared/golden/README.md) on the CUDA model, reported as `dsv41 golden` reports it,
// then the CUDA model's free-running logits against the CPU model's on the same fixture (a 45-token
// prefill + 5 decode steps), then decode timings.
//
//   golden_vs_cpu [MODEL_DIR] [--dump FILE] [--quick]
//
// --quick skips the golden check (the CPU comparison and one draft only: the compute-sanitizer run).
// Exit status 0 when the golden contract passes (or, with --quick, when the comparison ran).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <dsv41/model/cuda_model.hpp>
#include <dsv41/model/golden.hpp>
#include <dsv41/model/model.hpp>

using namespace dsv41;

namespace {

double secs_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct RelStats {
  double max = 0, median = 0;
  int rows = 0, argmax_same = 0;
};

RelStats compare_rows(const std::vector<float>& x, const std::vector<float>& g, int V) {
  RelStats r;
  std::vector<double> rel;
  for (size_t row = 0; (row + 1) * V <= g.size() && (row + 1) * V <= x.size(); ++row) {
    double num = 0, den = 0;
    for (int i = 0; i < V; ++i) {
      const double a = x[row * V + i], b = g[row * V + i];
      num += (a - b) * (a - b);
      den += b * b;
    }
    rel.push_back(den > 0 ? std::sqrt(num / den) : std::sqrt(num));
    const auto* xa = x.data() + row * V;
    const auto* ga = g.data() + row * V;
    if (std::max_element(xa, xa + V) - xa == std::max_element(ga, ga + V) - ga) ++r.argmax_same;
  }
  r.rows = int(rel.size());
  if (rel.empty()) return r;
  std::sort(rel.begin(), rel.end());
  r.median = rel[rel.size() / 2];
  r.max = rel.back();
  return r;
}

#define CHECK_OK(expr)                                                            \
  do {                                                                            \
    const ::dsv41::Status s_ = (expr);                                            \
    if (!s_.ok()) {                                                               \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, s_.to_string().c_str()); \
      return 2;                                                                   \
    }                                                                             \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "tests/data/golden/tiny-ced", dump;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--dump") && i + 1 < argc) dump = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else dir = argv[i];
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::printf("no CUDA device\n");
    return 2;
  }
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 2;

  auto t0 = std::chrono::steady_clock::now();
  auto cm = CudaModel<>::load(dir, stream);
  if (!cm.ok()) {
    std::fprintf(stderr, "error: %s\n", cm.status().to_string().c_str());
    return 2;
  }
  const ModelShape& s = (*cm)->shape();
  const int V = s.vocab_size;
  std::printf("CUDA model loaded in %.2f s: %.1f MB of weights on the device\n", secs_since(t0),
              double((*cm)->backend().weight_bytes()) / 1e6);

  bool pass = true;
  if (!quick) {
      const auto& gpu_model = **cm;
    std::vector<st::TensorToWrite> tensors;
    t0 = std::chrono::steady_clock::now();
    auto rep = golden::run(gpu_model, dir + "/golden.safetensors", dump.empty() ? nullptr : &tensors);
    if (!rep.ok()) {
      std::fprintf(stderr, "error: %s\n", rep.status().to_string().c_str());
      return 2;
    }
    std::printf("golden check on the CUDA model (%.2f s):\n%s", secs_since(t0), rep->summary().c_str());
    pass = rep->pass;
    if (!dump.empty()) {
      const Status ws = st::write(dump, tensors);
      std::printf("dump: %s\n", ws.ok() ? ("wrote " + std::to_string(tensors.size()) + " tensors to " + dump).c_str()
                                        : ws.to_string().c_str());
    }
  }

  // Free-running logits, CUDA vs CPU: 45-token prefill + 5 decode steps of sequence 0 of the fixture.
  auto gf = st::File::open(dir + "/golden.safetensors");
  if (!gf.ok()) {
    std::fprintf(stderr, "error: %s\n", gf.status().to_string().c_str());
    return 2;
  }
  const st::TensorView* idt = gf->find("input_ids");
  if (!idt || idt->shape.size() != 2 || idt->shape[1] < 50) {
    std::fprintf(stderr, "error: input_ids [B, T >= 50] needed\n");
    return 2;
  }
  auto idv = idt->to_vector<int32_t>();
  CHECK_OK(idv.status());
  std::vector<int32_t> all_ids = std::move(idv).value();
  std::vector<int32_t> ids(all_ids.begin(), all_ids.begin() + 50);
  const int P = 45, steps = 5;
  auto cpu_model = Model<>::load(dir);
  if (!cpu_model.ok()) {
    std::fprintf(stderr, "error: %s\n", cpu_model.status().to_string().c_str());
    return 2;
  }
  std::vector<float> lc, lg;
  {
    SequenceState st = (*cpu_model)->new_sequence(64);
    ForwardResult fr;
    CHECK_OK((*cpu_model)->forward(st, std::span<const int32_t>(ids.data(), P), fr, true));
    lc = fr.logits;
    for (int t = P; t < P + steps; ++t) {
      CHECK_OK((*cpu_model)->forward(st, std::span<const int32_t>(ids.data() + t, 1), fr));
      lc.insert(lc.end(), fr.logits.begin(), fr.logits.end());
    }
  }
  {
    auto sq = (*cm)->new_sequence(64);
    CHECK_OK(sq.status());
    ForwardResult fr;
    CHECK_OK((*cm)->forward(*sq, std::span<const int32_t>(ids.data(), P), fr, true));
    lg = fr.logits;
    for (int t = P; t < P + steps; ++t) {
      CHECK_OK((*cm)->forward(*sq, std::span<const int32_t>(ids.data() + t, 1), fr));
      lg.insert(lg.end(), fr.logits.begin(), fr.logits.end());
    }
    if (s.n_dspark() > 0) {
      DraftResult dr;
      CHECK_OK((*cm)->draft(*sq, all_ids[P + steps], dr));
      std::printf("one draft after the comparison: ids");
      for (int32_t v : dr.ids) std::printf(" %d", v);
      std::printf("\n");
    }
  }
  {
    std::vector<float> pc(lc.begin(), lc.begin() + size_t(P) * V), pg(lg.begin(), lg.begin() + size_t(P) * V);
    std::vector<float> dc(lc.begin() + size_t(P) * V, lc.end()), dg(lg.begin() + size_t(P) * V, lg.end());
    const RelStats all = compare_rows(lg, lc, V), pre = compare_rows(pg, pc, V), dec = compare_rows(dg, dc, V);
    std::printf("CUDA vs CPU logits, 45-token prefill + 5 decode steps (sequence 0):\n");
    std::printf("  all     rows %3d  median rel %.2e  max rel %.2e  argmax equal %d/%d\n", all.rows, all.median, all.max,
                all.argmax_same, all.rows);
    std::printf("  prefill rows %3d  median rel %.2e  max rel %.2e  argmax equal %d/%d\n", pre.rows, pre.median, pre.max,
                pre.argmax_same, pre.rows);
    std::printf("  decode  rows %3d  median rel %.2e  max rel %.2e  argmax equal %d/%d\n", dec.rows, dec.median, dec.max,
                dec.argmax_same, dec.rows);
  }

  // Decode timing: device logits, no synchronization per step (one at the end).
  if (!quick) {
    auto sq = (*cm)->new_sequence(128);
    CHECK_OK(sq.status());
    ForwardResult fr;
    CHECK_OK((*cm)->forward(*sq, std::span<const int32_t>(all_ids.data(), P), fr));
    float* d_logits = nullptr;
    if (cudaMalloc(&d_logits, size_t(V) * 4) != cudaSuccess) return 2;
    ForwardOptions o;
    const int n = 60;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0, stream);
    auto h0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      const int32_t tok = all_ids[size_t(P + i) % all_ids.size()];
      CHECK_OK((*cm)->forward(*sq, std::span<const int32_t>(&tok, 1), o, d_logits));
    }
    const double host_s = secs_since(h0);
    cudaEventRecord(e1, stream);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    std::printf("decode, tiny model: %d steps, %.3f ms/step on the stream, %.3f ms/step of host enqueue (no sync per step)\n",
                n, ms / n, 1e3 * host_s / n);
    cudaFree(d_logits);
  }
  const cudaError_t e = cudaDeviceSynchronize();
  std::printf("device status at exit: %s\n", cudaGetErrorString(e));
  if (e != cudaSuccess) return 2;
  return pass ? 0 : 1;
}
