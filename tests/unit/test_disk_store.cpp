// DiskStore (session/disk_store.hpp): round trips, rebuild at reopen, retention and capacity eviction, damaged and
// mismatching files as misses, injected write failures, a writer killed mid-write, two processes on one directory.
// The store needs xxhash.h (libxxhash-dev); without it this file compiles to nothing.
#if __has_include(<xxhash.h>)
#include <catch2/catch.hpp>

#include <dsv41/session/disk_store.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace dsv41;
using namespace dsv41::session;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "dsv41_disk_XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

struct FakeClock {
  double t = 1000;
  static double now(void* c) { return static_cast<FakeClock*>(c)->t; }
  Clock clock() { return Clock{&FakeClock::now, this}; }
};

const ModelIdentity kId{0x1111, 0x2222, kCacheFormatVersion};

Key key_of(int i, const ModelIdentity& id = kId) {
  const int32_t toks[3] = {i, i * 7 + 1, 42};
  return block_key(Key{}, id, toks);
}

std::vector<uint8_t> payload_of(uint32_t seed, size_t n) {
  std::vector<uint8_t> b(n);
  uint32_t x = seed * 2654435761u + 12345u;
  for (auto& v : b) {
    x = x * 1664525u + 1013904223u;
    v = uint8_t(x >> 24);
  }
  return b;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}
size_t temp_files_in(const std::string& dir) {
  size_t n = 0;
  for (const auto& s : names_in(dir)) n += s.rfind(kDiskTempPrefix, 0) == 0;
  return n;
}

void flip_bit(const std::string& path, uint64_t offset, int bit) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f.good());
  f.seekg(std::streamoff(offset));
  char c = 0;
  f.read(&c, 1);
  c = char(uint8_t(c) ^ uint8_t(1u << bit));
  f.seekp(std::streamoff(offset));
  f.write(&c, 1);
  REQUIRE(f.good());
}

DiskStore open_store(const std::string& dir, DiskStoreOptions o = {}) {
  auto r = DiskStore::open(dir, o);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  return std::move(r).value();
}

std::optional<std::vector<uint8_t>> get_ok(DiskStore& s, const Key& k, const ModelIdentity& id = kId) {
  auto r = s.get(k, id);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  return std::move(r).value();
}

// contains() must answer (an error fails the test); its answer.
bool has(const DiskStore& s, const Key& k, const ModelIdentity& id = kId) {
  auto r = s.contains(k, id);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  return *r;
}

// Waits for a child at most timeout_s seconds (SIGKILL after that); returns its wait status, or -1 on timeout.
int wait_child(pid_t pid, double timeout_s = 30) {
  const auto t0 = std::chrono::steady_clock::now();
  int st = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) return st;
    if (r < 0) return -1;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

struct FailAt {
  int calls = 0, fail_at = -1;  // the fail_at-th write (0-based) is refused
  static bool hook(void* c, uint64_t, size_t) {
    auto* f = static_cast<FailAt*>(c);
    return f->calls++ != f->fail_at;
  }
};

}  // namespace

TEST_CASE("disk store: round trip, overwrite, stats", "[disk_store]") {
  TempDir td;
  DiskStore s = open_store(td.path);
  const auto a = payload_of(1, 5000), b = payload_of(2, 1), c = payload_of(3, 0);
  REQUIRE(s.put(key_of(1), kId, a).ok());
  REQUIRE(s.put(key_of(2), kId, b).ok());
  REQUIRE(s.put(key_of(3), kId, c).ok());
  CHECK(get_ok(s, key_of(1)) == a);
  CHECK(get_ok(s, key_of(2)) == b);
  CHECK(get_ok(s, key_of(3)) == c);
  CHECK_FALSE(get_ok(s, key_of(4)).has_value());
  CHECK(fs::file_size(s.path_of(key_of(1))) == kDiskHeaderBytes + a.size());
  auto st = s.stats();
  CHECK(st.entries == 3);
  CHECK(st.bytes == 3 * kDiskHeaderBytes + a.size() + b.size() + c.size());
  CHECK(st.hits == 3);
  CHECK(st.misses == 1);
  CHECK(st.damaged == 0);
  const auto a2 = payload_of(9, 300);
  REQUIRE(s.put(key_of(1), kId, a2).ok());
  CHECK(get_ok(s, key_of(1)) == a2);
  st = s.stats();
  CHECK(st.entries == 3);
  CHECK(st.bytes == 3 * kDiskHeaderBytes + a2.size() + b.size() + c.size());
  CHECK(temp_files_in(td.path) == 0);
}

TEST_CASE("disk store: contains checks the header only", "[disk_store]") {
  TempDir td;
  DiskStore s = open_store(td.path);
  const ModelIdentity other{0x1111, 0x2223, kCacheFormatVersion};
  CHECK_FALSE(has(s, key_of(1), kId));
  const auto a = payload_of(1, 3000);
  REQUIRE(s.put(key_of(1), kId, a).ok());
  CHECK(has(s, key_of(1), kId));
  CHECK_FALSE(has(s, key_of(2), kId));   // another key
  CHECK_FALSE(has(s, key_of(1), other));  // another model identity
  const auto before = s.stats();
  CHECK(has(s, key_of(1), kId));
  CHECK(s.stats().hits == before.hits);  // not a get
  // A damaged payload is still "present" (the payload is not read); get finds it a miss and removes the file.
  flip_bit(s.path_of(key_of(1)), kDiskHeaderBytes + 100, 3);
  CHECK(has(s, key_of(1), kId));
  CHECK_FALSE(get_ok(s, key_of(1)).has_value());
  CHECK_FALSE(has(s, key_of(1), kId));
  // A damaged header is absent.
  REQUIRE(s.put(key_of(3), kId, a).ok());
  flip_bit(s.path_of(key_of(3)), 20, 0);
  CHECK_FALSE(has(s, key_of(3), kId));
}

TEST_CASE("disk store: index rebuilt at reopen; garbage and stale temp files handled", "[disk_store]") {
  TempDir td;
  std::vector<std::vector<uint8_t>> p;
  {
    DiskStore s = open_store(td.path);
    for (int i = 0; i < 5; ++i) {
      p.push_back(payload_of(uint32_t(i), 100 + 37 * size_t(i)));
      REQUIRE(s.put(key_of(i), kId, p.back()).ok());
    }
  }
  const std::string garbage = td.path + "/" + key_of(77).hex() + kDiskSuffix;
  std::ofstream(garbage) << "not a block at all";
  std::ofstream(td.path + "/notes.txt") << "foreign";
  const std::string dead_tmp = td.path + "/" + kDiskTempPrefix + "999999999-" + key_of(5).hex() + "-abcdef";
  const std::string live_tmp =
      td.path + "/" + kDiskTempPrefix + std::to_string(::getpid()) + "-" + key_of(6).hex() + "-abcdef";
  std::ofstream(dead_tmp) << "half";
  std::ofstream(live_tmp) << "half";

  DiskStore s2 = open_store(td.path);
  const auto st = s2.stats();
  CHECK(st.entries == 5);
  uint64_t bytes = 0;
  for (const auto& v : p) bytes += kDiskHeaderBytes + v.size();
  CHECK(st.bytes == bytes);
  CHECK(st.damaged == 1);
  CHECK_FALSE(fs::exists(garbage));
  CHECK(fs::exists(td.path + "/notes.txt"));
  CHECK_FALSE(fs::exists(dead_tmp));
  CHECK(fs::exists(live_tmp));  // its writer (this process) is alive and the file is fresh
  for (int i = 0; i < 5; ++i) CHECK(get_ok(s2, key_of(i)) == p[size_t(i)]);
}

TEST_CASE("disk store: retention expiry by the injected clock", "[disk_store]") {
  TempDir td;
  FakeClock fc;
  DiskStoreOptions o;
  o.clock = fc.clock();
  o.retention_s = 72 * 3600;
  DiskStore s = open_store(td.path, o);
  const auto a = payload_of(1, 64), b = payload_of(2, 64);
  REQUIRE(s.put(key_of(1), kId, a).ok());
  fc.t += 50 * 3600;
  REQUIRE(s.put(key_of(2), kId, b).ok());
  CHECK(s.stats().entries == 2);
  fc.t += 23 * 3600;  // block 1 is 73 h old, block 2 23 h
  CHECK_FALSE(has(s, key_of(1)));
  CHECK(has(s, key_of(2)));
  REQUIRE(s.evict().ok());
  CHECK(s.stats().entries == 1);
  CHECK(s.stats().evicted == 1);
  CHECK_FALSE(fs::exists(s.path_of(key_of(1))));
  CHECK_FALSE(get_ok(s, key_of(1)).has_value());
  CHECK(get_ok(s, key_of(2)) == b);
  fc.t += 50 * 3600;  // block 2 is 73 h old too: get sees it expired and removes it
  CHECK_FALSE(get_ok(s, key_of(2)).has_value());
  CHECK_FALSE(fs::exists(s.path_of(key_of(2))));
  CHECK(s.stats().entries == 0);

  // At open: a block past retention is removed during the rebuild.
  REQUIRE(s.put(key_of(3), kId, a).ok());
  fc.t += 73 * 3600;
  DiskStore s2 = open_store(td.path, o);
  CHECK(s2.stats().entries == 0);
  CHECK_FALSE(fs::exists(s2.path_of(key_of(3))));
}

TEST_CASE("disk store: over capacity, oldest by write time goes first", "[disk_store]") {
  TempDir td;
  FakeClock fc;
  DiskStoreOptions o;
  o.clock = fc.clock();
  const size_t P = 1000, F = kDiskHeaderBytes + P;
  o.capacity_bytes = 3 * F + F / 2;
  DiskStore s = open_store(td.path, o);
  // Written out of time order: the write time, not the order of puts, decides.
  for (int t : {5, 1, 3}) {
    fc.t = t;
    REQUIRE(s.put(key_of(t), kId, payload_of(uint32_t(t), P)).ok());
  }
  CHECK(s.stats().entries == 3);
  fc.t = 9;
  REQUIRE(s.put(key_of(9), kId, payload_of(9, P)).ok());
  auto st = s.stats();
  CHECK(st.entries == 3);
  CHECK(st.bytes == 3 * F);
  CHECK(st.evicted == 1);
  CHECK_FALSE(has(s, key_of(1)));
  CHECK_FALSE(fs::exists(s.path_of(key_of(1))));
  for (int t : {3, 5, 9}) CHECK(get_ok(s, key_of(t)) == payload_of(uint32_t(t), P));
  fc.t = 10;
  REQUIRE(s.put(key_of(10), kId, payload_of(10, 2 * P)).ok());  // needs two blocks' room: 3 and 5 go
  CHECK_FALSE(has(s, key_of(3)));
  CHECK_FALSE(has(s, key_of(5)));
  CHECK(has(s, key_of(9)));
  CHECK(has(s, key_of(10)));
  CHECK(s.stats().bytes == F + kDiskHeaderBytes + 2 * P);
  // A block larger than the whole capacity is refused without touching the others.
  const Status big = s.put(key_of(11), kId, payload_of(11, 4 * F));
  CHECK(big.code() == Code::invalid_argument);
  CHECK(has(s, key_of(9)));
  // Reopening with a smaller capacity evicts down to it, oldest first.
  o.capacity_bytes = 2 * F + F / 2;
  DiskStore s2 = open_store(td.path, o);
  CHECK(s2.stats().entries == 1);
  CHECK(has(s2, key_of(10)));
}

TEST_CASE("disk store: a flipped payload bit is a miss and the file is removed", "[disk_store]") {
  TempDir td;
  DiskStore s = open_store(td.path);
  const auto a = payload_of(1, 4096);
  for (uint64_t off : {uint64_t(0), uint64_t(100), uint64_t(4095)}) {
    REQUIRE(s.put(key_of(1), kId, a).ok());
    flip_bit(s.path_of(key_of(1)), kDiskHeaderBytes + off, int(off % 8));
    CHECK(has(s, key_of(1)));  // contains reads the header only
    CHECK_FALSE(get_ok(s, key_of(1)).has_value());
    CHECK_FALSE(fs::exists(s.path_of(key_of(1))));
    CHECK(s.stats().entries == 0);
  }
  CHECK(s.stats().damaged == 3);
  REQUIRE(s.put(key_of(1), kId, a).ok());
  CHECK(get_ok(s, key_of(1)) == a);
}

TEST_CASE("disk store: a flipped header bit is a miss", "[disk_store]") {
  TempDir td;
  DiskStore s = open_store(td.path);
  const auto a = payload_of(1, 256);
  for (uint64_t off = 0; off < kDiskHeaderBytes; off += 3) {
    INFO("header byte " << off);
    REQUIRE(s.put(key_of(1), kId, a).ok());
    flip_bit(s.path_of(key_of(1)), off, int(off % 8));
    CHECK_FALSE(has(s, key_of(1)));
    CHECK_FALSE(get_ok(s, key_of(1)).has_value());
    // A flip in the version field reads as another format (left alone); anywhere else as damage (removed).
    const bool version_field = off >= 8 && off < 12;
    CHECK(fs::exists(s.path_of(key_of(1))) == version_field);
  }
}

TEST_CASE("disk store: a truncated or extended file is a miss", "[disk_store]") {
  TempDir td;
  DiskStore s = open_store(td.path);
  const auto a = payload_of(1, 2000);
  for (uint64_t len : {kDiskHeaderBytes + 1999, kDiskHeaderBytes + 1000, kDiskHeaderBytes, uint64_t(40), uint64_t(0),
                       kDiskHeaderBytes + 2001}) {
    INFO("length " << len);
    REQUIRE(s.put(key_of(1), kId, a).ok());
    fs::resize_file(s.path_of(key_of(1)), len);
    CHECK_FALSE(has(s, key_of(1)));
    CHECK_FALSE(get_ok(s, key_of(1)).has_value());
    CHECK_FALSE(fs::exists(s.path_of(key_of(1))));
  }
  CHECK(s.stats().damaged == 6);
}

TEST_CASE("disk store: another model identity or format version is a miss", "[disk_store]") {
  TempDir td;
  DiskStore s = open_store(td.path);
  const auto a = payload_of(1, 128);
  REQUIRE(s.put(key_of(1), kId, a).ok());
  ModelIdentity other_weights = kId, other_config = kId, other_format = kId;
  other_weights.weights_digest ^= 1;
  other_config.config_digest ^= 1;
  other_format.format_version += 1;
  for (const auto& id : {other_weights, other_config, other_format}) {
    CHECK_FALSE(has(s, key_of(1), id));
    CHECK_FALSE(get_ok(s, key_of(1), id).has_value());
  }
  CHECK(get_ok(s, key_of(1)) == a);  // the block itself was not touched
  CHECK(s.stats().damaged == 0);

  // A file of another disk format version under our name: a miss, left alone, not indexed at reopen.
  DiskHeader h;
  h.version = kDiskFormatVersion + 1;
  h.identity = kId;
  h.key = key_of(2);
  h.payload_bytes = a.size();
  h.payload_checksum = checksum(a);
  const auto head = encode_header(h);
  {
    std::ofstream f(s.path_of(key_of(2)), std::ios::binary);
    f.write(reinterpret_cast<const char*>(head.data()), std::streamsize(head.size()));
    f.write(reinterpret_cast<const char*>(a.data()), std::streamsize(a.size()));
  }
  CHECK_FALSE(get_ok(s, key_of(2)).has_value());
  CHECK(fs::exists(s.path_of(key_of(2))));
  DiskStore s2 = open_store(td.path);
  CHECK(s2.stats().entries == 1);
  CHECK(s2.stats().damaged == 0);
  CHECK(fs::exists(s.path_of(key_of(2))));
}

TEST_CASE("disk store: an injected write failure leaves nothing half-written", "[disk_store]") {
  TempDir td;
  FailAt fa;
  DiskStoreOptions o;
  o.write_hook = WriteHook{&FailAt::hook, &fa};
  DiskStore s = open_store(td.path, o);
  const auto old = payload_of(1, 3000), neu = payload_of(2, 3000);
  REQUIRE(s.put(key_of(1), kId, old).ok());
  for (int at : {0, 1}) {  // the header's write, then the payload's
    fa.calls = 0;
    fa.fail_at = at;
    const Status e = s.put(key_of(2), kId, neu);
    CHECK(e.code() == Code::io_error);
    CHECK(e.message().find(td.path) != std::string::npos);
    CHECK_FALSE(has(s, key_of(2)));
    CHECK_FALSE(get_ok(s, key_of(2)).has_value());
    fa.calls = 0;
    CHECK_FALSE(s.put(key_of(1), kId, neu).ok());  // a failed overwrite keeps the old block
    CHECK(get_ok(s, key_of(1)) == old);
    CHECK(names_in(td.path).size() == 1);
    CHECK(temp_files_in(td.path) == 0);
  }
  fa.fail_at = -1;
  REQUIRE(s.put(key_of(2), kId, neu).ok());
  CHECK(get_ok(s, key_of(2)) == neu);
  CHECK(s.stats().entries == 2);
}

TEST_CASE("disk store: threads of one process share a store", "[disk_store][tsan]") {
  TempDir td;
  DiskStoreOptions o;
  o.fsync = false;
  DiskStore s = open_store(td.path, o);
  constexpr int T = 4, N = 30;
  auto body = [](int i) { return payload_of(uint32_t(i), 500 + size_t(i)); };
  std::vector<int> bad(T, 0);
  std::vector<std::thread> th;
  for (int t = 0; t < T; ++t)
    th.emplace_back([&, t] {
      for (int i = 0; i < N; ++i) {
        const int own = t * N + i, shared = 1000 + i;  // every thread also writes and reads the shared keys
        if (!s.put(key_of(own), kId, body(own)).ok() || !s.put(key_of(shared), kId, body(shared)).ok()) ++bad[t];
        auto r = s.get(key_of(shared), kId);
        if (!r.ok() || !r.value() || *r.value() != body(shared)) ++bad[t];
      }
    });
  for (auto& x : th) x.join();
  for (int t = 0; t < T; ++t) CHECK(bad[size_t(t)] == 0);
  CHECK(s.stats().entries == T * N + N);
  CHECK(s.stats().hits == T * N);
  for (int i = 0; i < T * N; ++i) CHECK(get_ok(s, key_of(i)) == body(i));
  CHECK(temp_files_in(td.path) == 0);
}

namespace {
struct ExitAt {
  uint64_t offset;
  static bool hook(void* c, uint64_t off, size_t) {
    if (off >= static_cast<ExitAt*>(c)->offset) ::_exit(1);
    return true;
  }
};
struct SignalAt {
  uint64_t offset;
  int fd;
  static bool hook(void* c, uint64_t off, size_t) {
    auto* s = static_cast<SignalAt*>(c);
    if (off >= s->offset) {
      const char b = 'w';
      if (::write(s->fd, &b, 1) != 1) ::_exit(3);
      for (;;) ::pause();  // killed here
    }
    return true;
  }
};
}  // namespace

TEST_CASE("disk store: a writer killed mid-write leaves no partial block", "[disk_store]") {
  TempDir td;
  const auto old = payload_of(1, 1000), big = payload_of(2, 4 << 20);
  {
    DiskStore s = open_store(td.path);
    REQUIRE(s.put(key_of(1), kId, old).ok());
  }
  SECTION("the writer exits partway (_exit from the write hook)") {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ExitAt ea{2 << 20};
      DiskStoreOptions o;
      o.write_hook = WriteHook{&ExitAt::hook, &ea};
      auto r = DiskStore::open(td.path, o);
      if (!r.ok()) ::_exit(2);
      (void)r.value().put(key_of(2), kId, big);
      (void)r.value().put(key_of(1), kId, big);
      ::_exit(0);  // not reached when the hook fires
    }
    const int st = wait_child(pid);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 1);
  }
  SECTION("the writer is killed by SIGKILL while it writes") {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(fds[0]);
      SignalAt sa{1 << 20, fds[1]};
      DiskStoreOptions o;
      o.write_hook = WriteHook{&SignalAt::hook, &sa};
      auto r = DiskStore::open(td.path, o);
      if (!r.ok()) ::_exit(2);
      (void)r.value().put(key_of(1), kId, big);  // an overwrite of block 1, killed midway
      ::_exit(0);
    }
    ::close(fds[1]);
    pollfd pfd{fds[0], POLLIN, 0};
    const int ready = ::poll(&pfd, 1, 20000);
    char b = 0;
    const bool signalled = ready == 1 && ::read(fds[0], &b, 1) == 1 && b == 'w';
    ::close(fds[0]);
    ::kill(pid, SIGKILL);
    const int st = wait_child(pid);
    REQUIRE(signalled);
    REQUIRE(WIFSIGNALED(st));
    CHECK(WTERMSIG(st) == SIGKILL);
  }
  CHECK(temp_files_in(td.path) == 1);  // the dead writer's temp file is there before the reopen
  DiskStore s = open_store(td.path);
  CHECK(temp_files_in(td.path) == 0);
  CHECK(s.stats().entries == 1);
  CHECK(s.stats().damaged == 0);
  CHECK_FALSE(get_ok(s, key_of(2)).has_value());
  CHECK(get_ok(s, key_of(1)) == old);
}

TEST_CASE("disk store: two processes write one directory at once", "[disk_store]") {
  TempDir td;
  constexpr int N = 40, Shared = 10;
  DiskStore s = open_store(td.path);
  auto body = [](int i) { return payload_of(uint32_t(i), 2000 + size_t(i) * 13); };
  // Keys [0, N): the child; [N, 2N): the parent; [2N, 2N+Shared): both (same content, last rename wins).
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    auto r = DiskStore::open(td.path, {});
    if (!r.ok()) ::_exit(2);
    for (int i = 0; i < N; ++i)
      if (!r.value().put(key_of(i), kId, body(i)).ok()) ::_exit(3);
    for (int i = 2 * N; i < 2 * N + Shared; ++i)
      if (!r.value().put(key_of(i), kId, body(i)).ok()) ::_exit(4);
    ::_exit(0);
  }
  bool parent_ok = true;
  for (int i = 2 * N + Shared - 1; i >= 2 * N; --i) parent_ok = parent_ok && s.put(key_of(i), kId, body(i)).ok();
  for (int i = N; i < 2 * N; ++i) parent_ok = parent_ok && s.put(key_of(i), kId, body(i)).ok();
  const int st = wait_child(pid);
  CHECK(parent_ok);
  REQUIRE(WIFEXITED(st));
  REQUIRE(WEXITSTATUS(st) == 0);
  // The parent's store finds the child's blocks on disk, though they were not in its index.
  for (int i = 0; i < 2 * N + Shared; ++i) CHECK(get_ok(s, key_of(i)) == body(i));
  DiskStore s2 = open_store(td.path);
  CHECK(s2.stats().entries == 2 * N + Shared);
  CHECK(s2.stats().damaged == 0);
  for (int i = 0; i < 2 * N + Shared; ++i) CHECK(get_ok(s2, key_of(i)) == body(i));
  CHECK(temp_files_in(td.path) == 0);
}

#endif  // __has_include(<xxhash.h>)
