// The model over every visible GPU (issue 16): one host thread per GPU, one NCCL communicator per GPU from
// ncclCommInitAll, each rank loading only its share of the routed experts (LoadOptions::comm), all ranks running
// the same prefill and greedy decode. Every rank ends with the same logits, so each picks the same next token.
//   multi_gpu MODEL_DIR [decode_tokens=32] [prompt_tokens=64] [gpus=all]
// The host, not the library, owns the communicators and threads. On the lent H200 machines NCCL_NVLS_ENABLE must
// stay 0 (NVLink multicast can put the shared host's GPUs out of service); this program sets it when unset.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <dsv41/backend/cuda/nccl_comm.hpp>
#include <dsv41/model/cuda_model.hpp>

namespace {

using GpuModel = dsv41::Model<dsv41::configs::Dynamic, dsv41::Cuda>;

struct RankResult {
  std::string error;
  std::vector<int32_t> tokens;
  double load_s = 0, prefill_s = 0, decode_s = 0;
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// One rank: its GPU, its stream, its communicator. A rank that fails after loading leaves the others waiting in
// their next collective (as with any NCCL program); a failed load fails on every rank alike (same shape, same plan).
void run_rank(int rank, ncclComm_t nc, const std::string& dir, int n_prompt, int n_decode, RankResult& out) {
  auto fail = [&](const std::string& what) { out.error = what; };
  if (cudaSetDevice(rank) != cudaSuccess) return fail("cudaSetDevice");
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return fail("cudaStreamCreate");
  auto comm = dsv41::gpu::NcclComm::wrap(nc);
  if (!comm.ok()) return fail(comm.status().to_string());
  dsv41::LoadOptions opt;
  opt.comm = &*comm;
  auto t0 = std::chrono::steady_clock::now();
  auto m = GpuModel::load(dir, stream, opt);
  if (!m.ok()) return fail("load: " + m.status().to_string());
  out.load_s = seconds_since(t0);
  const GpuModel& model = **m;
  const int V = model.shape().vocab_size;
  std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
  for (int i = 0; i < n_prompt; ++i) prompt[size_t(i)] = int32_t(3 + (i * 7919) % std::max(V - 3, 1));
  auto st = model.new_sequence(n_prompt + n_decode + 1);
  if (!st.ok()) return fail(st.status().to_string());
  std::vector<float> logits;
  t0 = std::chrono::steady_clock::now();
  if (auto s = model.prefill(*st, prompt, &logits); !s.ok()) return fail("prefill: " + s.to_string());
  out.prefill_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n_decode; ++i) {
    const int32_t next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.tokens.push_back(next);
    GpuModel::DecodeItem item{&*st, next, &logits};
    if (auto s = model.decode(std::span<GpuModel::DecodeItem>(&item, 1)); !s.ok()) return fail("decode: " + s.to_string());
  }
  out.decode_s = seconds_since(t0);
  cudaStreamDestroy(stream);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [decode_tokens=32] [prompt_tokens=64] [gpus=all]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int n_decode = argc > 2 ? std::atoi(argv[2]) : 32, n_prompt = argc > 3 ? std::atoi(argv[3]) : 64;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("no CUDA device: built, not run\n");
    return 0;
  }
  if (argc > 4) n = std::min(n, std::max(1, std::atoi(argv[4])));
  if (const char* v = std::getenv("NCCL_NVLS_ENABLE"); !v) setenv("NCCL_NVLS_ENABLE", "0", 0);
  else if (std::strcmp(v, "0") != 0)
    std::fprintf(stderr, "warning: NCCL_NVLS_ENABLE=%s; the lent machines need 0 (NVLink multicast off)\n", v);

  std::vector<int> devs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) devs[size_t(i)] = i;
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  if (ncclResult_t r = ncclCommInitAll(comms.data(), n, devs.data()); r != ncclSuccess) {
    std::fprintf(stderr, "ncclCommInitAll: %s\n", ncclGetErrorString(r));
    return 1;
  }
  std::vector<RankResult> res(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back(run_rank, r, comms[size_t(r)], std::cref(dir), n_prompt, n_decode, std::ref(res[size_t(r)]));
  for (auto& t : threads) t.join();
  for (auto c : comms) ncclCommDestroy(c);

  int rc = 0;
  for (int r = 0; r < n; ++r)
    if (!res[size_t(r)].error.empty()) {
      std::fprintf(stderr, "rank %d: %s\n", r, res[size_t(r)].error.c_str());
      rc = 1;
    }
  if (rc) return rc;
  for (int r = 1; r < n; ++r)
    if (res[size_t(r)].tokens != res[0].tokens) {
      std::fprintf(stderr, "rank %d decoded other tokens than rank 0\n", r);
      return 1;
    }
  const RankResult& a = res[0];
  std::printf("%d GPU(s), expert parallel: load %.1f s, prefill %d tokens %.3f s (%.1f tokens/s), decode %d tokens "
              "%.3f s (%.2f tokens/s)\ntokens:",
              n, a.load_s, n_prompt, a.prefill_s, a.prefill_s > 0 ? n_prompt / a.prefill_s : 0.0, n_decode, a.decode_s,
              a.decode_s > 0 ? n_decode / a.decode_s : 0.0);
  for (int32_t t : a.tokens) std::printf(" %d", t);
  std::printf("\n");
  return 0;
}
