// GPU checks of expert parallel (issue 16) on tiny-ced:
//  - a 1-rank NCCL communicator through the same path gives the plain single-GPU run's bits;
//  - the sharded MoE on one GPU: two ranks' shares (each rank's experts only), summed as a communicator would,
//    give the one-rank MoE's bits (record the rows each rank sends, then replay their rank-order sum);
//  - with 2 or more GPUs, one thread per GPU over ncclCommInitAll gives the single-GPU run's bits.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cstring>
#include <thread>
#include <vector>

#include <dsv41/backend/cuda/nccl_comm.hpp>
#include <dsv41/model/cuda_model.hpp>
#include <dsv41/numeric/formats.hpp>

using namespace dsv41;

namespace {

const std::string kDir = std::string(DSV41_TEST_DATA) + "/golden/tiny-ced";
using Gpu = CudaModel<>;

struct Outputs {
  std::vector<float> prefill;
  std::vector<std::vector<float>> decode;
  DraftResult draft;
};

Status run(const Gpu& m, Outputs& o) {
  const std::vector<int32_t> prompt = {11, 57, 203, 9, 88, 301, 4, 150, 77, 42, 19, 260, 33, 5, 402, 17, 64};
  auto st = m.new_sequence(64);
  if (!st.ok()) return st.status();
  ForwardResult fr;
  DSV41_TRY(m.forward(*st, prompt, fr, /*all_logits=*/true));
  o.prefill = fr.logits;
  for (int i = 0; i < 3; ++i) {
    std::vector<float> l;
    Gpu::DecodeItem item{&*st, int32_t(30 + 11 * i), &l};
    DSV41_TRY(m.decode(std::span<Gpu::DecodeItem>(&item, 1)));
    o.decode.push_back(std::move(l));
  }
  return m.draft(*st, 99, o.draft);
}

void check_same(const Outputs& got, const Outputs& want) {
  CHECK(got.prefill == want.prefill);
  CHECK(got.decode == want.decode);
  CHECK(got.draft.ids == want.draft.ids);
  CHECK(got.draft.logits == want.draft.logits);
  CHECK(got.draft.confidence == want.draft.confidence);
}

// Rank r of 2 on one GPU: first records what the MoE sends (bf16 rows), then replays the rank-order sum of both
// ranks' recordings as the all-reduce's result.
struct RecordReplay final : parallel::Communicator {
  int r = 0;
  bool replay = false;
  std::vector<uint16_t>* mine = nullptr;
  const std::vector<uint16_t>* other = nullptr;
  int rank() const override { return r; }
  int size() const override { return 2; }
  Status all_reduce_sum(void* buf, size_t n, parallel::Elem t, void* stream) override {
    if (t != parallel::Elem::bf16) return error(Code::internal, "expected bf16 rows");
    auto s = static_cast<cudaStream_t>(stream);
    if (!replay) {
      mine->resize(n);
      if (cudaMemcpyAsync(mine->data(), buf, n * 2, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
          cudaStreamSynchronize(s) != cudaSuccess)
        return error(Code::internal, "record");
      return Status::Ok();
    }
    std::vector<uint16_t> sum(n);
    const std::vector<uint16_t>& a = r == 0 ? *mine : *other;
    const std::vector<uint16_t>& b = r == 0 ? *other : *mine;
    if (a.size() != n || b.size() != n) return error(Code::internal, "replay of another size");
    for (size_t i = 0; i < n; ++i) sum[i] = num::bf16_bits(num::bf16_to_f32(a[i]) + num::bf16_to_f32(b[i]));
    if (cudaMemcpyAsync(buf, sum.data(), n * 2, cudaMemcpyHostToDevice, s) != cudaSuccess ||
        cudaStreamSynchronize(s) != cudaSuccess)
      return error(Code::internal, "replay");
    return Status::Ok();
  }
  Status all_gather(const void*, void*, size_t, parallel::Elem, void*) override {
    return error(Code::internal, "the CUDA backend gathers nothing");
  }
};

}  // namespace

TEST_CASE("the sharded MoE of two ranks on one GPU sums to the one-rank MoE", "[gpu][parallel]") {
  auto full = Gpu::load(kDir);
  REQUIRE(full.ok());
  std::vector<uint16_t> rec[2];
  RecordReplay comm[2];
  std::unique_ptr<Gpu> part[2];
  for (int r = 0; r < 2; ++r) {
    comm[r].r = r;
    comm[r].mine = &rec[r];
    comm[r].other = &rec[1 - r];
    LoadOptions opt;
    opt.comm = &comm[r];
    auto m = Gpu::load(kDir, opt);
    REQUIRE(m.ok());
    CHECK((*m)->backend().parallel_plan().experts.size() == (*full)->shape().n_routed_experts / 2);
    part[r] = std::move(m).value();
  }
  const ModelShape& s = (*full)->shape();
  const int d = s.hidden_size, T = 7;
  std::vector<uint16_t> x(size_t(T) * d);
  uint32_t g = 99;
  for (auto& v : x) {
    g = g * 1664525u + 1013904223u;
    v = num::bf16_bits(float(int(g >> 9) % 2001 - 1000) / 400.f);
  }
  gpu::bf16_t *dx = nullptr, *dout = nullptr;
  REQUIRE(cudaMalloc(&dx, x.size() * 2) == cudaSuccess);
  REQUIRE(cudaMalloc(&dout, x.size() * 2) == cudaSuccess);
  REQUIRE(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess);
  auto moe_of = [&](const Gpu& m, int l, std::vector<uint16_t>& out) {
    REQUIRE(m.backend().moe(l, nullptr, dx, dout, T).ok());
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    out.resize(x.size());
    REQUIRE(cudaMemcpy(out.data(), dout, out.size() * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
  };
  for (int l : {0, s.num_hidden_layers - 1, s.num_hidden_layers}) {  // backbone layers and a DSpark stage
    INFO("layer " << l);
    std::vector<uint16_t> want, got[2];
    moe_of(**full, l, want);
    for (int r = 0; r < 2; ++r) {
      comm[r].replay = false;
      moe_of(*part[r], l, got[r]);
    }
    // each rank sent only its experts' rows: together every row once
    REQUIRE(rec[0].size() == rec[1].size());
    size_t both = 0, none = 0;
    for (size_t i = 0; i < rec[0].size(); ++i) {
      const bool a = rec[0][i] != 0, b = rec[1][i] != 0;
      both += a && b;
      none += !a && !b;
    }
    CHECK(both == 0);
    CHECK(none < rec[0].size() / 4);  // zeros are exact products of rare underflow or zero inputs
    for (int r = 0; r < 2; ++r) {
      comm[r].replay = true;
      moe_of(*part[r], l, got[r]);
      CHECK(got[r] == want);
    }
  }
  cudaFree(dx);
  cudaFree(dout);
}

#ifdef DSV41_HAVE_NCCL

TEST_CASE("a 1-rank NCCL communicator gives the single-GPU run's bits", "[gpu][parallel]") {
  auto plain = Gpu::load(kDir);
  REQUIRE(plain.ok());
  Outputs want;
  REQUIRE(run(**plain, want).ok());
  ncclComm_t nc = nullptr;
  int dev = 0;
  REQUIRE(cudaGetDevice(&dev) == cudaSuccess);
  REQUIRE(ncclCommInitAll(&nc, 1, &dev) == ncclSuccess);
  {
    auto comm = gpu::NcclComm::wrap(nc);
    REQUIRE(comm.ok());
    CHECK(comm->size() == 1);
    CHECK(comm->rank() == 0);
    LoadOptions opt;
    opt.comm = &*comm;
    auto m = Gpu::load(kDir, opt);
    REQUIRE(m.ok());
    CHECK((*m)->backend().parallel_plan().world == 1);
    Outputs got;
    REQUIRE(run(**m, got).ok());
    check_same(got, want);
  }
  ncclCommDestroy(nc);
}

// Runs only where 2 or more GPUs are visible (the lent machine of one GPU skips it).
TEST_CASE("expert parallel over every visible GPU gives the single-GPU run's bits", "[gpu][parallel][multi_gpu]") {
  int n = 0;
  REQUIRE(cudaGetDeviceCount(&n) == cudaSuccess);
  if (n < 2) {
    WARN("one GPU: expert parallel over several GPUs not run");
    return;
  }
  // tiny-ced: 8 experts, 4 in the DSpark stages: 2 or 4 ranks
  const int world = n >= 4 ? 4 : 2;
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  auto plain = Gpu::load(kDir);
  REQUIRE(plain.ok());
  Outputs want;
  REQUIRE(run(**plain, want).ok());
  std::vector<int> devs(static_cast<size_t>(world));
  for (int i = 0; i < world; ++i) devs[size_t(i)] = i;
  std::vector<ncclComm_t> nc(static_cast<size_t>(world));
  REQUIRE(ncclCommInitAll(nc.data(), world, devs.data()) == ncclSuccess);
  std::vector<Outputs> got(static_cast<size_t>(world));
  std::vector<std::string> err(static_cast<size_t>(world));
  std::vector<std::thread> th;
  for (int r = 0; r < world; ++r)
    th.emplace_back([&, r] {
      if (cudaSetDevice(r) != cudaSuccess) { err[size_t(r)] = "set device"; return; }
      auto comm = gpu::NcclComm::wrap(nc[size_t(r)]);
      if (!comm.ok()) { err[size_t(r)] = comm.status().to_string(); return; }
      LoadOptions opt;
      opt.comm = &*comm;
      auto m = Gpu::load(kDir, opt);
      if (!m.ok()) { err[size_t(r)] = m.status().to_string(); return; }
      if (Status s = run(**m, got[size_t(r)]); !s.ok()) err[size_t(r)] = s.to_string();
    });
  for (auto& t : th) t.join();
  for (auto c : nc) ncclCommDestroy(c);
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << " of " << world << ": " << err[size_t(r)]);
    REQUIRE(err[size_t(r)].empty());
    check_same(got[size_t(r)], want);
  }
}

#endif
