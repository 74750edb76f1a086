// UTF-8 helpers: validation, lossy repair with U+FFFD, code point encode/decode.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsv41::utf8 {

inline constexpr uint32_t kReplacement = 0xFFFD;

// Examines the sequence at s[i]. Returns its length when it is a complete, valid UTF-8
// sequence (and sets cp). Otherwise returns 0 and sets `consumed` to the length of its
// maximal subpart (>= 1), the unit that becomes one U+FFFD under the Unicode "best practice"
// (what Python's errors="replace" and Rust's from_utf8_lossy do); `truncated` says whether
// the subpart was cut short only by the end of the input (it could still become valid).
inline size_t decode_at(const unsigned char* s, size_t n, size_t i, uint32_t& cp, size_t& consumed,
                        bool& truncated) {
  const unsigned char b = s[i];
  truncated = false;
  if (b < 0x80) {
    cp = b;
    return 1;
  }
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    consumed = 1;
    return 0;
  }
  uint32_t v = b & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= n) {
      consumed = k;
      truncated = true;
      return 0;
    }
    const unsigned char c = s[i + k];
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (c < l || c > h) {
      consumed = k;
      return 0;
    }
    v = (v << 6) | (c & 0x3F);
  }
  cp = v;
  return len;
}

inline void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

inline bool is_valid(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    uint32_t cp;
    size_t consumed;
    bool trunc;
    const size_t len = decode_at(p, n, i, cp, consumed, trunc);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

// Appends s to out with every ill-formed subpart replaced by U+FFFD. When `hold_tail` is
// set, a final sequence that is only cut short by the end of s is not written; the return
// value is the number of bytes of s consumed (s.size() unless a tail was held back).
inline size_t append_lossy(std::string& out, std::string_view s, bool hold_tail = false) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    while (j < n && p[j] < 0x80) ++j;
    out.append(s.data() + i, j - i);
    i = j;
    if (i >= n) break;
    uint32_t cp;
    size_t consumed;
    bool trunc;
    const size_t len = decode_at(p, n, i, cp, consumed, trunc);
    if (len) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      if (trunc && hold_tail) return i;
      append(out, kReplacement);
      i += consumed;
    }
  }
  return n;
}

inline std::string to_valid(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  append_lossy(out, s);
  return out;
}

// Decodes valid UTF-8 (as produced by to_valid); one code point per call.
inline uint32_t next(const unsigned char* s, size_t& i) {
  const unsigned char b = s[i];
  if (b < 0x80) {
    ++i;
    return b;
  }
  if (b < 0xE0) {
    const uint32_t v = ((b & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu);
    i += 2;
    return v;
  }
  if (b < 0xF0) {
    const uint32_t v = ((b & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
    i += 3;
    return v;
  }
  const uint32_t v = ((b & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) |
                     (s[i + 3] & 0x3Fu);
  i += 4;
  return v;
}

inline size_t length_of(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

}  // namespace dsv41::utf8
