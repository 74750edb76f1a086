// Unicode properties the regex engine and the tokenizer test: general category, simple case
// folding, White_Space, and general-category masks (from utf8proc).
#pragma once
#include <utf8proc.h>

#include <cstdint>
#include <utility>

namespace dsv41::text {

// Unicode general category, numbered as utf8proc does (0 = Cn, 1 = Lu, ..., 29 = Co).
inline uint8_t general_category(uint32_t cp) {
  static constexpr uint8_t kAscii[128] = {
      26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 26,
      26, 26, 26, 26, 26, 26, 26, 26, 26, 26, 23, 18, 18, 18, 20, 18, 18, 18, 14, 15, 18, 19,
      18, 13, 18, 18, 9,  9,  9,  9,  9,  9,  9,  9,  9,  9,  18, 18, 19, 19, 19, 18, 18, 1,
      1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,  1,
      1,  1,  1,  14, 18, 15, 21, 12, 21, 2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,
      2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  14, 19, 15, 19, 26};
  if (cp < 128) return kAscii[cp];
  return static_cast<uint8_t>(utf8proc_category(static_cast<utf8proc_int32_t>(cp)));
}

// Simple case folding (one code point to one), as used for (?i) comparisons.
inline uint32_t case_fold(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  utf8proc_int32_t buf[4];
  int last = 0;
  const auto n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), buf, 4, UTF8PROC_CASEFOLD, &last);
  if (n == 1) return static_cast<uint32_t>(buf[0]);
  return static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}

inline bool is_white_space(uint32_t c) {
  return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

namespace gc {
inline constexpr uint32_t bit(int c) { return 1u << c; }
inline constexpr uint32_t L = bit(UTF8PROC_CATEGORY_LU) | bit(UTF8PROC_CATEGORY_LL) | bit(UTF8PROC_CATEGORY_LT) |
                              bit(UTF8PROC_CATEGORY_LM) | bit(UTF8PROC_CATEGORY_LO);
inline constexpr uint32_t M = bit(UTF8PROC_CATEGORY_MN) | bit(UTF8PROC_CATEGORY_MC) | bit(UTF8PROC_CATEGORY_ME);
inline constexpr uint32_t N = bit(UTF8PROC_CATEGORY_ND) | bit(UTF8PROC_CATEGORY_NL) | bit(UTF8PROC_CATEGORY_NO);
inline constexpr uint32_t P = bit(UTF8PROC_CATEGORY_PC) | bit(UTF8PROC_CATEGORY_PD) | bit(UTF8PROC_CATEGORY_PS) |
                              bit(UTF8PROC_CATEGORY_PE) | bit(UTF8PROC_CATEGORY_PI) | bit(UTF8PROC_CATEGORY_PF) |
                              bit(UTF8PROC_CATEGORY_PO);
inline constexpr uint32_t S = bit(UTF8PROC_CATEGORY_SM) | bit(UTF8PROC_CATEGORY_SC) | bit(UTF8PROC_CATEGORY_SK) |
                              bit(UTF8PROC_CATEGORY_SO);
inline constexpr uint32_t Z = bit(UTF8PROC_CATEGORY_ZS) | bit(UTF8PROC_CATEGORY_ZL) | bit(UTF8PROC_CATEGORY_ZP);
inline constexpr uint32_t C = bit(UTF8PROC_CATEGORY_CN) | bit(UTF8PROC_CATEGORY_CC) | bit(UTF8PROC_CATEGORY_CF) |
                              bit(UTF8PROC_CATEGORY_CS) | bit(UTF8PROC_CATEGORY_CO);
// Oniguruma's \w (as the `tokenizers` build has it): letters, marks, Nd, Nl, Pc, plus the
// ranges below (Latin-1 superscripts and fractions, circled and squared Latin letters).
inline constexpr uint32_t Word = L | M | bit(UTF8PROC_CATEGORY_ND) | bit(UTF8PROC_CATEGORY_NL) | bit(UTF8PROC_CATEGORY_PC);
inline constexpr std::pair<uint32_t, uint32_t> kWordExtra[] = {
    {0xB2, 0xB3}, {0xB9, 0xB9}, {0xBC, 0xBE}, {0x24B6, 0x24E9}, {0x1F130, 0x1F149}, {0x1F150, 0x1F169}, {0x1F170, 0x1F189}};
inline bool is_word(uint32_t cp, uint8_t cat) {
  if ((Word >> cat) & 1u) return true;
  for (const auto& [lo, hi] : kWordExtra)
    if (cp >= lo && cp <= hi) return true;
  return false;
}
}  // namespace gc

}  // namespace dsv41::text
