// The disk tier for stored session blocks: one file per block (<key hex>.dsv41kv, layout in disk_format.hpp),
// written to a temp file, fsynced and renamed into place, so a reader (in any process) sees a whole file or none.
// The directory is the truth; the in-memory index is this process's view of it (rebuilt by open and evict) and
// drives eviction. Any damaged or mismatching file reads as a miss, never as wrong bytes; damaged files are removed.
// Thread-safe: put, get, contains, evict and stats may be called from several threads at once (files are written
// to unique temp names and renamed; the index and counters are under one mutex). Several processes may share one
// directory. A moved-from DiskStore must not be used.
#pragma once
#include <algorithm>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dsv41/core/status.hpp>
#include <dsv41/session/block_key.hpp>
#include <dsv41/session/disk_format.hpp>

namespace dsv41::session {

// Called before each write(2) of a put with the file offset and length about to be written; returning false
// makes that write fail as a full disk would (fault injection for tests).
struct WriteHook {
  bool (*fn)(void* ctx, uint64_t offset, size_t bytes) = nullptr;
  void* ctx = nullptr;
  bool operator()(uint64_t offset, size_t bytes) const { return fn == nullptr || fn(ctx, offset, bytes); }
};

struct DiskStoreOptions {
  uint64_t capacity_bytes = 0;  // files' total size (headers included); 0: no limit
  double retention_s = 72 * 3600;  // blocks older than this (by write time) are removed; <= 0: kept forever
  Clock clock;
  WriteHook write_hook;
  bool fsync = true;  // fsync each file and the directory; off only for benchmarks of the bare write path
};

struct DiskStoreStats {
  uint64_t entries = 0, bytes = 0;  // this process's index (bytes: file sizes)
  uint64_t hits = 0, misses = 0, damaged = 0, evicted = 0;  // counted by this DiskStore since open
};

// Temp files whose writer is gone (its pid no longer exists) or older than this are removed by open/evict.
inline constexpr double kDiskStaleTempSeconds = 600;

class DiskStore {
 public:
  using Stats = DiskStoreStats;

  static Result<DiskStore> open(std::string dir, DiskStoreOptions opt = {}) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return error(Code::io_error, "cannot create directory " + dir + ": " + ec.message());
    if (!std::filesystem::is_directory(dir, ec)) return error(Code::io_error, "not a directory: " + dir);
    auto impl = std::make_unique<Impl>();
    impl->dir = std::move(dir);
    impl->opt = opt;
    impl->dir_fd = ::open(impl->dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (impl->dir_fd < 0) return detail::io_fail("cannot open directory", impl->dir, errno);
    DiskStore s(std::move(impl));
    {
      std::lock_guard<std::mutex> lk(s.p_->mu);
      DSV41_TRY(s.rescan_locked());
      DSV41_TRY(s.evict_locked());
    }
    return Result<DiskStore>(std::move(s));
  }

  const std::string& dir() const { return p_->dir; }
  std::string path_of(const Key& k) const { return p_->dir + "/" + k.hex() + kDiskSuffix; }

  Status put(const Key& key, const ModelIdentity& id, std::span<const uint8_t> payload) {
    const uint64_t file_bytes = kDiskHeaderBytes + payload.size();
    if (p_->opt.capacity_bytes != 0 && file_bytes > p_->opt.capacity_bytes)
      return error(Code::invalid_argument, "block of " + std::to_string(file_bytes) + " bytes exceeds the capacity " +
                                               std::to_string(p_->opt.capacity_bytes) + " of " + p_->dir);
    DiskHeader h;
    h.identity = id;
    h.key = key;
    h.payload_bytes = payload.size();
    h.payload_checksum = checksum(payload);
    h.write_time = p_->opt.clock();
    const auto head = encode_header(h);
    DSV41_TRY(write_file(key, head, payload));
    std::lock_guard<std::mutex> lk(p_->mu);
    set_entry_locked(key, Entry{id, file_bytes, h.write_time});
    // The block is stored; a failure to remove some other file is not this put's failure (evict() reports it).
    (void)evict_locked();
    return Status::Ok();
  }

  // A hit only when magic, version, key, identity, size and checksum all match and the block has not expired.
  Result<std::optional<std::vector<uint8_t>>> get(const Key& key, const ModelIdentity& id) {
    using R = Result<std::optional<std::vector<uint8_t>>>;
    const std::string path = path_of(key);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      if (e != ENOENT) return detail::io_fail("cannot open", path, e);
      std::lock_guard<std::mutex> lk(p_->mu);
      drop_entry_locked(key);
      ++p_->misses;
      return R(std::nullopt);
    }
    std::vector<uint8_t> payload;
    const Verdict v = read_block(fd, path, key, id, &payload);
    struct stat st {};
    const bool have_st = ::fstat(fd, &st) == 0;
    ::close(fd);
    std::lock_guard<std::mutex> lk(p_->mu);
    switch (v.kind) {
      case Verdict::hit:
        ++p_->hits;
        set_entry_locked(key, Entry{id, kDiskHeaderBytes + payload.size(), v.write_time});
        return R(std::optional<std::vector<uint8_t>>(std::move(payload)));
      case Verdict::io:
        return v.status;
      case Verdict::damaged:
        ++p_->damaged;
        [[fallthrough]];
      case Verdict::expired:
        if (v.kind == Verdict::expired) ++p_->evicted;
        // Remove only the file we read: another writer may have renamed a fresh one into place meanwhile.
        if (have_st) unlink_if_same(path, st);
        drop_entry_locked(key);
        break;
      case Verdict::mismatch:
        break;
    }
    ++p_->misses;
    return R(std::nullopt);
  }

  // Whether the block is stored for id, judged from the header and file size only (the payload is not read, so
  // this is cheap). A file whose payload is damaged still reads as present here; get() then finds it a miss and
  // removes it. An error only when the file exists but cannot be opened or read.
  Result<bool> contains(const Key& key, const ModelIdentity& id) const {
    const std::string path = path_of(key);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      if (e == ENOENT) return Result<bool>(false);
      return detail::io_fail("cannot open", path, e);
    }
    const Verdict v = read_block(fd, path, key, id, nullptr);
    ::close(fd);
    if (v.kind == Verdict::io) return v.status;
    return Result<bool>(v.kind == Verdict::hit);
  }

  // Rescans the directory (picking up other processes' blocks, dropping vanished ones), then removes blocks
  // past retention and, over capacity, the oldest by write time until under.
  Status evict() {
    std::lock_guard<std::mutex> lk(p_->mu);
    DSV41_TRY(rescan_locked());
    return evict_locked();
  }

  Stats stats() const {
    std::lock_guard<std::mutex> lk(p_->mu);
    Stats s;
    s.entries = p_->index.size();
    s.bytes = p_->bytes;
    s.hits = p_->hits;
    s.misses = p_->misses;
    s.damaged = p_->damaged;
    s.evicted = p_->evicted;
    return s;
  }

 private:
  struct Entry {
    ModelIdentity identity;
    uint64_t file_bytes = 0;
    double write_time = 0;
  };
  struct Impl {
    std::string dir;
    DiskStoreOptions opt;
    int dir_fd = -1;
    mutable std::mutex mu;
    std::unordered_map<Key, Entry, KeyHash> index;
    uint64_t bytes = 0, hits = 0, misses = 0, damaged = 0, evicted = 0;
    Impl() = default;
    Impl(const Impl&) = delete;
    Impl& operator=(const Impl&) = delete;
    ~Impl() {
      if (dir_fd >= 0) ::close(dir_fd);
    }
  };
  struct Verdict {
    enum Kind { hit, mismatch, damaged, expired, io } kind = damaged;
    double write_time = 0;
    Status status;
  };

  explicit DiskStore(std::unique_ptr<Impl> p) : p_(std::move(p)) {}

  bool expired(double write_time, double now) const {
    return p_->opt.retention_s > 0 && now - write_time > p_->opt.retention_s;
  }

  // Judges the open file fd at path; reads the payload into *out when out is given and the header fits.
  Verdict read_block(int fd, const std::string& path, const Key& key, const ModelIdentity& id,
                     std::vector<uint8_t>* out) const {
    Verdict v;
    struct stat st {};
    if (::fstat(fd, &st) != 0) return Verdict{Verdict::io, 0, detail::io_fail("cannot stat", path, errno)};
    std::array<uint8_t, kDiskHeaderBytes> b{};
    const long long n = detail::pread_full(fd, b.data(), b.size(), 0);
    if (n < 0) return Verdict{Verdict::io, 0, detail::io_fail("cannot read", path, errno)};
    DiskHeader h;
    const HeaderState hs = decode_header(std::span<const uint8_t>(b.data(), size_t(n)), h);
    if (hs == HeaderState::other_version) return Verdict{Verdict::mismatch, 0, {}};
    if (hs == HeaderState::damaged || !(h.key == key) || uint64_t(st.st_size) != kDiskHeaderBytes + h.payload_bytes)
      return v;  // damaged (truncated, overwritten, misnamed)
    v.write_time = h.write_time;
    if (!(h.identity == id)) return Verdict{Verdict::mismatch, h.write_time, {}};
    if (expired(h.write_time, p_->opt.clock())) return Verdict{Verdict::expired, h.write_time, {}};
    if (out != nullptr) {
      out->resize(h.payload_bytes);
      const long long r = detail::pread_full(fd, out->data(), out->size(), kDiskHeaderBytes);
      if (r < 0) return Verdict{Verdict::io, 0, detail::io_fail("cannot read", path, errno)};
      if (uint64_t(r) != h.payload_bytes || checksum(*out) != h.payload_checksum) {
        out->clear();
        return v;  // damaged payload
      }
    }
    v.kind = Verdict::hit;
    return v;
  }

  Status write_file(const Key& key, std::span<const uint8_t> head, std::span<const uint8_t> payload) {
    const std::string final_path = path_of(key);
    std::string tmp = p_->dir + "/" + kDiskTempPrefix + std::to_string(::getpid()) + "-" + key.hex() + "-XXXXXX";
    const int fd = ::mkstemp(tmp.data());
    if (fd < 0) return detail::io_fail("cannot create temp file", tmp, errno);
    auto fail = [&](const std::string& what, int e) {
      ::close(fd);
      ::unlink(tmp.c_str());
      return detail::io_fail(what, tmp, e);
    };
    constexpr size_t kChunk = size_t(1) << 20;
    uint64_t offset = 0;
    for (std::span<const uint8_t> part : {head, payload}) {
      while (!part.empty()) {
        const size_t n = std::min(part.size(), kChunk);
        if (!p_->opt.write_hook(offset, n)) return fail("cannot write (write hook refused)", ENOSPC);
        const ssize_t w = ::write(fd, part.data(), n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return fail("cannot write", w < 0 ? errno : EIO);
        part = part.subspan(size_t(w));
        offset += uint64_t(w);
      }
    }
    if (p_->opt.fsync && ::fsync(fd) != 0) return fail("cannot fsync", errno);
    if (::close(fd) != 0) {
      const int e = errno;
      ::unlink(tmp.c_str());
      return detail::io_fail("cannot close", tmp, e);
    }
    if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
      const int e = errno;
      ::unlink(tmp.c_str());
      return detail::io_fail("cannot rename " + tmp + " to", final_path, e);
    }
    if (p_->opt.fsync && ::fsync(p_->dir_fd) != 0) return detail::io_fail("cannot fsync directory", p_->dir, errno);
    return Status::Ok();
  }

  static void unlink_if_same(const std::string& path, const struct stat& was) {
    struct stat now {};
    if (::stat(path.c_str(), &now) == 0 && now.st_ino == was.st_ino && now.st_dev == was.st_dev)
      ::unlink(path.c_str());
  }

  void set_entry_locked(const Key& k, const Entry& e) {
    auto [it, inserted] = p_->index.try_emplace(k, e);
    if (!inserted) {
      p_->bytes -= it->second.file_bytes;
      it->second = e;
    }
    p_->bytes += e.file_bytes;
  }
  void drop_entry_locked(const Key& k) {
    auto it = p_->index.find(k);
    if (it == p_->index.end()) return;
    p_->bytes -= it->second.file_bytes;
    p_->index.erase(it);
  }

  // Removes the file of k (already gone is fine) and its entry.
  Status remove_locked(const Key& k) {
    drop_entry_locked(k);
    ++p_->evicted;
    const std::string path = path_of(k);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return detail::io_fail("cannot remove", path, errno);
    return Status::Ok();
  }

  Status evict_locked() {
    Status first;
    auto note = [&](Status s) {
      if (first.ok() && !s.ok()) std::swap(first, s);
    };
    const double now = p_->opt.clock();
    std::vector<Key> old;
    for (const auto& [k, e] : p_->index)
      if (expired(e.write_time, now)) old.push_back(k);
    for (const Key& k : old) note(remove_locked(k));
    const uint64_t cap = p_->opt.capacity_bytes;
    if (cap != 0 && p_->bytes > cap) {
      std::vector<std::pair<double, Key>> order;
      order.reserve(p_->index.size());
      for (const auto& [k, e] : p_->index) order.emplace_back(e.write_time, k);
      std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first < b.first : (a.second.hi != b.second.hi ? a.second.hi < b.second.hi
                                                                                      : a.second.lo < b.second.lo);
      });
      for (size_t i = 0; i < order.size() && p_->bytes > cap; ++i) note(remove_locked(order[i].second));
    }
    return first;
  }

  // Rebuilds the index from the directory: our files with a sound header are indexed, damaged ones removed,
  // other versions and foreign files left alone, stale temp files removed.
  Status rescan_locked() {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::directory_iterator it(p_->dir, ec), end;
    if (ec) return error(Code::io_error, "cannot list " + p_->dir + ": " + ec.message());
    std::unordered_map<Key, Entry, KeyHash> index;
    uint64_t bytes = 0;
    const std::string suffix = kDiskSuffix, tmp_prefix = kDiskTempPrefix;
    for (; it != end; it.increment(ec)) {
      if (ec) return error(Code::io_error, "cannot list " + p_->dir + ": " + ec.message());
      const std::string name = it->path().filename().string();
      const std::string path = p_->dir + "/" + name;
      struct stat st {};
      if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (name.rfind(tmp_prefix, 0) == 0) {
        if (stale_temp(name.substr(tmp_prefix.size()), st)) ::unlink(path.c_str());
        continue;
      }
      if (name.size() != 32 + suffix.size() || name.compare(32, suffix.size(), suffix) != 0) continue;
      const std::optional<Key> key = Key::from_hex(std::string_view(name).substr(0, 32));
      if (!key) continue;
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;  // vanished meanwhile, or unreadable: not ours to judge
      std::array<uint8_t, kDiskHeaderBytes> b{};
      const long long n = detail::pread_full(fd, b.data(), b.size(), 0);
      ::close(fd);
      if (n < 0) continue;
      DiskHeader h;
      const HeaderState hs = decode_header(std::span<const uint8_t>(b.data(), size_t(n)), h);
      if (hs == HeaderState::other_version) continue;
      if (hs == HeaderState::damaged || !(h.key == *key) ||
          uint64_t(st.st_size) != kDiskHeaderBytes + h.payload_bytes) {
        ++p_->damaged;
        unlink_if_same(path, st);
        continue;
      }
      index[*key] = Entry{h.identity, uint64_t(st.st_size), h.write_time};
      bytes += uint64_t(st.st_size);
    }
    p_->index = std::move(index);
    p_->bytes = bytes;
    return Status::Ok();
  }

  // rest: "<pid>-<key hex>-XXXXXX". Stale when that process is gone or the file is old (by real mtime).
  static bool stale_temp(const std::string& rest, const struct stat& st) {
    const double age = double(::time(nullptr)) - double(st.st_mtime);
    if (age > kDiskStaleTempSeconds) return true;
    long long pid = 0;
    size_t i = 0;
    for (; i < rest.size() && rest[i] >= '0' && rest[i] <= '9' && i < 12; ++i) pid = pid * 10 + (rest[i] - '0');
    if (i == 0 || i >= rest.size() || rest[i] != '-' || pid <= 0) return age > 1;  // not a name we write
    return ::kill(pid_t(pid), 0) != 0 && errno == ESRCH;
  }

  std::unique_ptr<Impl> p_;
};

}  // namespace dsv41::session
