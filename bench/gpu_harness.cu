// GPU harness for the device machine, where Catch2 is absent: runs every row of the op table
// (tests/gpu/op_cases.cuh, the same rows as the Catch2 op suite, against the CPU reference linked from tests/gpu/ref_cpu.cpp), then
// times the kernels at the released shapes and prints the table (bench/gpu_bench.cuh).
// Usage: harness [--checks-only | --bench-only] [--only=op] [--md=FILE] [--mhc-t=T,T,...] [--moe-t=T,T,...]
#include <cstdlib>
#include <cstring>
#include <functional>

#include "gpu_bench.cuh"
#include "../tests/gpu/op_cases.cuh"

using namespace dsv41;

int main(int argc, char** argv) {
  bool checks = true, bench = true;
  std::string only, md;
  std::vector<int> mhc_t{1, 4, 8, 64, 2048};  // token counts of the mhc bench (--mhc-t: e.g. one for ncu)
  std::vector<int> moe_t;                     // --moe-t: only these token counts (automatic kernel) in the moe bench
  auto counts = [](const char* q, std::vector<int>& out) {
    out.clear();
    while (*q) {
      char* end = nullptr;
      const long v = std::strtol(q, &end, 10);
      if (end == q || v < 1 || v > 1 << 20) return false;
      out.push_back(int(v));
      q = *end == ',' ? end + 1 : end;
    }
    return !out.empty();
  };
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--checks-only")) bench = false;
    else if (!std::strcmp(argv[i], "--bench-only")) checks = false;
    else if (!std::strncmp(argv[i], "--only=", 7)) only = argv[i] + 7;
    else if (!std::strncmp(argv[i], "--md=", 5)) md = argv[i] + 5;
    else if (!std::strncmp(argv[i], "--mhc-t=", 8) || !std::strncmp(argv[i], "--moe-t=", 8)) {
      if (!counts(argv[i] + 8, argv[i][3] == 'h' ? mhc_t : moe_t)) {
        std::printf("%.7s: positive token counts, comma-separated\n", argv[i]);
        return 2;
      }
    }
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::printf("no CUDA device\n");
    return 2;
  }
  std::printf("device: %s, %d SMs, L2 %d MB, cc %d.%d\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20,
              prop.major, prop.minor);
  int failed = 0, passed = 0;
  std::vector<std::string> lines;
  if (checks) {
    for (const auto& c : gputest::op_cases()) {
      if (!only.empty() && only != c.op) continue;
      try {
        const gputest::CheckResult r = c.run();
        std::printf("%s\n", r.summary().c_str());
        std::fflush(stdout);
        lines.push_back(r.summary());
        (r.pass ? passed : failed)++;
      } catch (const std::exception& e) {
        std::printf("%-10s ERROR [%s] %s\n", c.op, c.shape, e.what());
        lines.push_back(std::string(c.op) + " ERROR [" + c.shape + "] " + e.what());
        ++failed;
        cudaGetLastError();
      }
    }
    std::printf("checks: %d passed, %d failed\n", passed, failed);
  }
  std::vector<gpubench::Row> rows;
  if (bench) {
    auto run = [&](const char* name, const std::function<void()>& f) {
      if (!only.empty() && only != name) return;
      try { f(); } catch (const std::exception& e) {
        std::printf("bench %s ERROR %s\n", name, e.what());
        ++failed;
        cudaGetLastError();
      }
      std::fflush(stdout);
    };
    using namespace gpubench;
    run("copy", [&] { rows.push_back(bench_copy()); });
    run("rmsnorm", [&] { rows.push_back(bench_rmsnorm(4, 5120)); rows.push_back(bench_rmsnorm(2048, 5120)); });
    run("act_quant", [&] { rows.push_back(bench_act_quant(2048, 5120)); });
    run("gemm", [&] {
      rows.push_back(bench_gemm("wq_a", 4, 1280, 5120));
      rows.push_back(bench_gemm("wq_b", 4, 32768, 1280));
      rows.push_back(bench_gemm("wkv", 4, 512, 5120));
      rows.push_back(bench_gemm("wo_b", 4, 5120, 8192));
      rows.push_back(bench_gemm("wq_b", 64, 32768, 1280));
      rows.push_back(bench_gemm("wq_a", 2048, 1280, 5120));
      rows.push_back(bench_gemm("wq_b", 2048, 32768, 1280));
      rows.push_back(bench_gemm("wo_b", 2048, 5120, 8192));
      for (int S : {1, 8, 16, 32, 64}) {
        rows.push_back(bench_wo_a(S, 0));
        rows.push_back(bench_wo_a(S, 1));
        if (S >= 32) rows.push_back(bench_wo_a(S, 2));
      }
      for (int S : {128, 512, 2048}) {
        rows.push_back(bench_wo_a(S, 2));
        rows.push_back(bench_wo_a(S, 3));
      }
    });
    run("attention", [&] { for (int R : {1, 4, 16, 64, 128, 2048}) rows.push_back(bench_attention(R)); });
    run("indexer", [&] {
      for (auto& r : bench_indexer(4, 65536)) rows.push_back(r);
      for (auto& r : bench_indexer(256, 65536)) rows.push_back(r);
    });
    run("mhc", [&] { for (int T : mhc_t) rows.push_back(bench_mhc(T)); });
    run("moe", [&] {
      MoeBench mb;
      if (!moe_t.empty()) {
        for (int T : moe_t) {
          rows.push_back(mb.run(T));
          if (T * mb.k < gpu::detail::kMoeSmallThreads) rows.push_back(mb.run(T, 0, gpu::SkinnyKernel::automatic, false));
          rows.push_back(mb.run(T, 0, gpu::SkinnyKernel::automatic, true, true));
          rows.push_back(mb.run(T, 0, gpu::SkinnyKernel::automatic, true, false, true));
          rows.push_back(mb.run(T, 0, gpu::SkinnyKernel::automatic, true, true, true));
          for (int z : {1, 2, 4}) rows.push_back(mb.run(T, 0, gpu::SkinnyKernel::automatic, true, true, false, z));
          rows.push_back(mb.run(T, 0, gpu::SkinnyKernel::registers));
          rows.push_back(mb.run(T, 0, gpu::SkinnyKernel::staged));
          rows.push_back(mb.run(T, 0, gpu::SkinnyKernel::wgmma));
          rows.push_back(mb.run(T, 0, gpu::SkinnyKernel::wgmma_bf16));
        }
        return;
      }
      rows.push_back(mb.run(1));
      rows.push_back(mb.run(8));
      rows.push_back(mb.run(64));
      rows.push_back(mb.run(2048));
      rows.push_back(mb.run(4096));
      for (int T : {128, 512, 1024, 2048}) {
        rows.push_back(mb.run(T, 16, gpu::SkinnyKernel::registers));
        for (int tile : {16, 32, 64}) rows.push_back(mb.run(T, tile, gpu::SkinnyKernel::staged));
        for (int tile : {16, 32, 64}) rows.push_back(mb.run(T, tile, gpu::SkinnyKernel::wgmma));
        for (int tile : {16, 32, 64}) rows.push_back(mb.run(T, tile, gpu::SkinnyKernel::wgmma_bf16));
      }
    });
    std::printf("\n");
    print_rows(rows, stdout);
  }
  if (!md.empty()) {  // appended: run_all.sh runs one op per process (a device fault stays in its process)
    if (FILE* f = std::fopen(md.c_str(), "a")) {
      for (const auto& l : lines) std::fprintf(f, "    %s\n", l.c_str());
      if (!rows.empty()) {
        std::fseek(f, 0, SEEK_END);
        gpubench::print_rows(rows, f);
      }
      std::fclose(f);
    }
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
