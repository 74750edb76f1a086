// The on-disk form of one stored block (DiskStore): a fixed 88-byte little-endian header, then the payload.
//   0 magic "DSV41KV\0"   8 u32 disk format version   12 u32 header bytes (88)
//  16 u64 config digest   24 u64 weights digest       32 u32 cache format version   36 u32 reserved (0)
//  40 u64 key.hi          48 u64 key.lo               56 u64 payload bytes          64 u64 XXH3-64 of payload
//  72 f64 write time (seconds since the epoch, by the store's clock)                80 u64 XXH3-64 of bytes [0, 80)
// Plus the POSIX read/write helpers the store uses (EINTR and short transfers handled).
#pragma once
#include <array>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

#include <dsv41/core/status.hpp>
#include <dsv41/session/block_key.hpp>

namespace dsv41::session {

// Bumped whenever the header layout changes; a file of another version is never read as ours.
inline constexpr uint32_t kDiskFormatVersion = 1;
inline constexpr size_t kDiskHeaderBytes = 88;
inline constexpr char kDiskSuffix[] = ".dsv41kv";        // <32 hex of the key><suffix>
inline constexpr char kDiskTempPrefix[] = ".dsv41kv-tmp-";  // .dsv41kv-tmp-<pid>-<key hex>-XXXXXX

struct DiskHeader {
  uint32_t version = kDiskFormatVersion;
  ModelIdentity identity;
  Key key;
  uint64_t payload_bytes = 0, payload_checksum = 0;
  double write_time = 0;
};

// ok: a header of our version whose own checksum matches; other_version: our magic, another layout;
// damaged: anything else (too short, wrong magic, bad checksum, bad fields).
enum class HeaderState { ok, other_version, damaged };

namespace detail {
inline void put_le(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline uint64_t get_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline constexpr uint8_t kMagic[8] = {'D', 'S', 'V', '4', '1', 'K', 'V', 0};

inline std::string errno_text(int e) { return std::error_code(e, std::generic_category()).message(); }
inline Status io_fail(const std::string& what, const std::string& path, int e) {
  return error(Code::io_error, what + " " + path + ": " + errno_text(e));
}

// Reads exactly n bytes at offset; returns bytes read (< n at end of file) or -1 with errno set.
inline long long pread_full(int fd, void* buf, size_t n, uint64_t offset) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, static_cast<uint8_t*>(buf) + got, n - got, off_t(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += size_t(r);
  }
  return (long long)got;
}
}  // namespace detail

inline std::array<uint8_t, kDiskHeaderBytes> encode_header(const DiskHeader& h) {
  std::array<uint8_t, kDiskHeaderBytes> b{};
  std::memcpy(b.data(), detail::kMagic, 8);
  detail::put_le(&b[8], h.version, 4);
  detail::put_le(&b[12], kDiskHeaderBytes, 4);
  detail::put_le(&b[16], h.identity.config_digest, 8);
  detail::put_le(&b[24], h.identity.weights_digest, 8);
  detail::put_le(&b[32], h.identity.format_version, 4);
  detail::put_le(&b[36], 0, 4);
  detail::put_le(&b[40], h.key.hi, 8);
  detail::put_le(&b[48], h.key.lo, 8);
  detail::put_le(&b[56], h.payload_bytes, 8);
  detail::put_le(&b[64], h.payload_checksum, 8);
  detail::put_le(&b[72], std::bit_cast<uint64_t>(h.write_time), 8);
  detail::put_le(&b[80], checksum(std::span<const uint8_t>(b.data(), 80)), 8);
  return b;
}

inline HeaderState decode_header(std::span<const uint8_t> b, DiskHeader& h) {
  if (b.size() < 12 || std::memcmp(b.data(), detail::kMagic, 8) != 0) return HeaderState::damaged;
  h.version = uint32_t(detail::get_le(&b[8], 4));
  if (h.version != kDiskFormatVersion) return HeaderState::other_version;
  if (b.size() < kDiskHeaderBytes || detail::get_le(&b[12], 4) != kDiskHeaderBytes || detail::get_le(&b[36], 4) != 0)
    return HeaderState::damaged;
  if (detail::get_le(&b[80], 8) != checksum(b.subspan(0, 80))) return HeaderState::damaged;
  h.identity.config_digest = detail::get_le(&b[16], 8);
  h.identity.weights_digest = detail::get_le(&b[24], 8);
  h.identity.format_version = uint32_t(detail::get_le(&b[32], 4));
  h.key.hi = detail::get_le(&b[40], 8);
  h.key.lo = detail::get_le(&b[48], 8);
  h.payload_bytes = detail::get_le(&b[56], 8);
  h.payload_checksum = detail::get_le(&b[64], 8);
  h.write_time = std::bit_cast<double>(detail::get_le(&b[72], 8));
  return HeaderState::ok;
}

}  // namespace dsv41::session
