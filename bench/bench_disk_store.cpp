// DiskStore throughput: writes then reads N blocks of T tokens x B bytes per token (default 2000 x 128 x 890, the
// release's global KV per token) and prints MB/s for writes (with and without fsync) and reads, and the header
// overhead. Reads come from the page cache when the blocks were just written (the usual case for a warm store).
// Usage: bench_disk_store [dir (default: a fresh one under the temp dir)] [blocks] [tokens/block] [bytes/token]
#include <dsv41/session/disk_store.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <stdlib.h>

using namespace dsv41::session;

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::string dir;
  bool made = false;
  if (argc > 1) {
    dir = argv[1];
  } else {
    std::string tmpl = (fs::temp_directory_path() / "dsv41_bench_disk_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) return std::perror("mkdtemp"), 1;
    dir = tmpl;
    made = true;
  }
  const int blocks = argc > 2 ? std::atoi(argv[2]) : 2000;
  const int tokens = argc > 3 ? std::atoi(argv[3]) : 128;
  const int per_token = argc > 4 ? std::atoi(argv[4]) : 890;
  const size_t P = size_t(tokens) * size_t(per_token);
  const ModelIdentity id{0xabc, 0xdef, kCacheFormatVersion};

  std::vector<uint8_t> payload(P);
  uint32_t x = 1;
  for (auto& v : payload) v = uint8_t((x = x * 1664525u + 1013904223u) >> 24);
  std::vector<Key> keys;
  Key parent;
  for (int i = 0; i < blocks; ++i) {
    const int32_t t[2] = {i, 7};
    keys.push_back(parent = block_key(parent, id, t));
  }
  using clk = std::chrono::steady_clock;
  auto secs = [](clk::time_point a) { return std::chrono::duration<double>(clk::now() - a).count(); };
  const double mb = double(P) * blocks / 1e6;

  std::printf("blocks %d x %d tokens x %d B/token = %zu B payload per block, %.1f MB in all, dir %s\n", blocks, tokens,
              per_token, P, mb, dir.c_str());
  for (bool sync : {true, false}) {
    DiskStoreOptions o;
    o.fsync = sync;
    auto s = DiskStore::open(dir + (sync ? "/sync" : "/nosync"), o);
    if (!s.ok()) return std::fprintf(stderr, "%s\n", s.status().to_string().c_str()), 1;
    const auto t0 = clk::now();
    for (const Key& k : keys) {
      // Vary the bytes per block so no layer below can deduplicate.
      payload[0] = uint8_t(k.lo);
      const dsv41::Status st = s->put(k, id, payload);
      if (!st.ok()) return std::fprintf(stderr, "%s\n", st.to_string().c_str()), 1;
    }
    const double tw = secs(t0);
    std::printf("write (fsync %s): %8.1f MB/s  (%.2f ms per block)\n", sync ? "on " : "off", mb / tw,
                1e3 * tw / blocks);
    if (sync) continue;
    const auto t1 = clk::now();
    size_t got = 0;
    for (const Key& k : keys) {
      auto r = s->get(k, id);
      if (!r.ok() || !r.value()) return std::fprintf(stderr, "read failed\n"), 1;
      got += r.value()->size();
    }
    const double tr = secs(t1);
    std::printf("read  (page cache):  %8.1f MB/s  (%.2f ms per block, %zu B checked)\n", mb / tr, 1e3 * tr / blocks,
                got);
    const auto t2 = clk::now();
    auto re = DiskStore::open(dir + "/nosync", o);
    if (!re.ok()) return 1;
    std::printf("reopen (index rebuild of %llu blocks): %.1f ms\n", (unsigned long long)re->stats().entries,
                1e3 * secs(t2));
  }
  std::printf("header overhead: %zu B per block, %.3f B per token (%.4f%% of the payload)\n", kDiskHeaderBytes,
              double(kDiskHeaderBytes) / tokens, 100.0 * double(kDiskHeaderBytes) / double(P));
  if (made) {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  return 0;
}
