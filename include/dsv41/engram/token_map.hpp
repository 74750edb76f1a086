// The Engram token map built from a tokenizer's vocabulary (SPEC §4.8), equal to the reference's
// build_compressed_token_map run with the `tokenizers` package. The vocabulary is a plain
// engram::Vocabulary; <dsv41/text/engram_vocabulary.hpp> makes one from a text::Tokenizer.
//
// For token id i < len(tokenizer): text = decode([i]) keeping special tokens; key = the raw token
// string (id_to_token) when text holds U+FFFD (a partial UTF-8 byte token), else
// normalize_token_text(text), or text itself when that is empty. Compressed ids are given to the
// keys in first-seen order. len(tokenizer) counts the tokens (model vocabulary plus added tokens),
// so it is one past the largest id only when the ids have no holes.
//
// normalize_token_text is the reference's normalizer Sequence: NFKC, NFD, StripAccents (drops every
// General_Category=Mark code point), Lowercase (per code point, full mapping: U+0130 -> "i\u0307";
// no final-sigma context), runs of [ \t\r\n] -> " ", a text that is exactly " " kept, Strip
// (White_Space at both ends), U+E000 -> " " (the reference's sentinel, so a U+E000 in a token
// becomes a space too). It is computed as NFKD plus canonical ordering from libutf8proc's data,
// corrected where the data `tokenizers` was built with differs (its normalization tables lack the
// marks and decompositions of recent Unicode versions, its lowercase follows Unicode 16). The
// tables below were derived against utf8proc's Unicode 15.0 by tools/gen_token_map_cases.py
// --print-tables; test_token_map checks every code point.
#pragma once
#include <utf8proc.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <dsv41/core/status.hpp>
#include <dsv41/core/utf8.hpp>

namespace dsv41::engram {

inline constexpr int32_t kNoEntry = -1;  // a token id the reference's map has no row for

struct TokenMap {
  // [vocab_rows]: compressed id per token id. Ids >= tokenizer_rows (embedding rows past
  // len(tokenizer), or past a holey vocabulary's token count) are kNoEntry: the reference's map
  // stops at len(tokenizer) and cannot hash them either. fill_missing() gives them an id.
  std::vector<int32_t> map;
  int64_t compressed_vocab_size = 0;  // keys over all tokenizer_rows ids, as the reference counts
  int64_t tokenizer_rows = 0;         // len(tokenizer)
};

// A tokenizer's vocabulary as the token map reads it, indexed by token id up to one past the
// largest id: raw[id] is the token string (Tokenizer::id_to_token; nullopt for an unused id) and
// decoded[id] the id decoded alone with special tokens kept. decoded has raw's size.
struct Vocabulary {
  std::vector<std::optional<std::string>> raw;
  std::vector<std::string> decoded;
};

namespace token_map_detail {

struct Range {
  uint32_t first, last;
};
struct LowerRange {
  uint32_t first, last;
  int32_t delta;
};

// Code points the normalization tables of `tokenizers` do not have (assigned after them): not
// decomposed, combining class 0, not stripped as marks.
inline constexpr Range kUnknown[] = {
    {0x07FD, 0x07FD},   {0x0898, 0x089F},   {0x08CA, 0x08D3},   {0x09FE, 0x09FE},   {0x0AFA, 0x0AFF},
    {0x0B55, 0x0B55},   {0x0C04, 0x0C04},   {0x0C3C, 0x0C3C},   {0x0CF3, 0x0CF3},   {0x0D00, 0x0D00},
    {0x0D3B, 0x0D3C},   {0x0D81, 0x0D81},   {0x0EBA, 0x0EBA},   {0x0ECE, 0x0ECE},   {0x1715, 0x1715},
    {0x180F, 0x180F},   {0x1ABF, 0x1ACE},   {0x1CF7, 0x1CF7},   {0x1DF6, 0x1DFA},   {0x32FF, 0x32FF},
    {0xA7F2, 0xA7F4},   {0xA82C, 0xA82C},   {0xA8FF, 0xA8FF},   {0xAB69, 0xAB69},   {0x10781, 0x10785},
    {0x10787, 0x107B0}, {0x107B2, 0x107BA}, {0x10D24, 0x10D27}, {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF},
    {0x10F46, 0x10F50}, {0x10F82, 0x10F85}, {0x11070, 0x11070}, {0x11073, 0x11074}, {0x110C2, 0x110C2},
    {0x11145, 0x11146}, {0x111C9, 0x111C9}, {0x111CE, 0x111CF}, {0x11241, 0x11241}, {0x1133B, 0x1133B},
    {0x1145E, 0x1145E}, {0x1182C, 0x1183A}, {0x11930, 0x11935}, {0x11937, 0x11938}, {0x1193B, 0x1193E},
    {0x11940, 0x11940}, {0x11942, 0x11943}, {0x119D1, 0x119D7}, {0x119DA, 0x119E0}, {0x119E4, 0x119E4},
    {0x11A01, 0x11A0A}, {0x11A33, 0x11A39}, {0x11A3B, 0x11A3E}, {0x11A47, 0x11A47}, {0x11A51, 0x11A5B},
    {0x11A8A, 0x11A99}, {0x11D31, 0x11D36}, {0x11D3A, 0x11D3A}, {0x11D3C, 0x11D3D}, {0x11D3F, 0x11D45},
    {0x11D47, 0x11D47}, {0x11D8A, 0x11D8E}, {0x11D90, 0x11D91}, {0x11D93, 0x11D97}, {0x11EF3, 0x11EF6},
    {0x11F00, 0x11F01}, {0x11F03, 0x11F03}, {0x11F34, 0x11F3A}, {0x11F3E, 0x11F42}, {0x13440, 0x13440},
    {0x13447, 0x13455}, {0x16F4F, 0x16F4F}, {0x16F7F, 0x16F87}, {0x16FE4, 0x16FE4}, {0x16FF0, 0x16FF1},
    {0x1CF00, 0x1CF2D}, {0x1CF30, 0x1CF46}, {0x1E030, 0x1E06D}, {0x1E08F, 0x1E08F}, {0x1E130, 0x1E136},
    {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF}, {0x1E4EC, 0x1E4EF}, {0x1F16C, 0x1F16C}, {0x1FBF0, 0x1FBF9},
};

// Marks in the older data of `tokenizers` (Lo now): StripAccents still drops them.
inline constexpr Range kStripExtra[] = {{0x1CF2, 0x1CF3}};

// Lowercase mappings (Unicode 16) that utf8proc's Unicode 15 lacks: lower = cp + delta.
inline constexpr LowerRange kLower[] = {
    {0x1C89, 0x1C89, 1},  {0xA7CB, 0xA7CB, -42343}, {0xA7CC, 0xA7CC, 1},     {0xA7CE, 0xA7CE, 1},
    {0xA7D2, 0xA7D2, 1},  {0xA7D4, 0xA7D4, 1},      {0xA7DA, 0xA7DA, 1},     {0xA7DC, 0xA7DC, -42561},
    {0x10D50, 0x10D65, 32}, {0x16EA0, 0x16EB8, 27},
};

template <class R, size_t N>
const R* find_range(const R (&table)[N], uint32_t cp) {
  auto it = std::upper_bound(std::begin(table), std::end(table), cp, [](uint32_t c, const R& r) { return c < r.first; });
  if (it == std::begin(table)) return nullptr;
  --it;
  return cp <= it->last ? &*it : nullptr;
}

inline bool unknown(uint32_t cp) { return find_range(kUnknown, cp) != nullptr; }

// Rust's char::is_whitespace (the White_Space property), which Strip uses.
inline bool white_space(uint32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

inline int ccc(uint32_t cp) { return unknown(cp) ? 0 : utf8proc_get_property(utf8proc_int32_t(cp))->combining_class; }

inline bool stripped(uint32_t cp) {
  if (find_range(kStripExtra, cp)) return true;
  if (unknown(cp)) return false;
  const auto c = utf8proc_category(utf8proc_int32_t(cp));
  return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

// Appends the lowercase of cp (Rust's char::to_lowercase).
inline void append_lower(std::vector<uint32_t>& out, uint32_t cp) {
  if (cp == 0x130) {
    out.push_back(0x69);
    out.push_back(0x307);
    return;
  }
  if (const LowerRange* r = find_range(kLower, cp)) {
    out.push_back(uint32_t(int64_t(cp) + r->delta));
    return;
  }
  out.push_back(uint32_t(utf8proc_tolower(utf8proc_int32_t(cp))));
}

}  // namespace token_map_detail

// The reference's key normalizer on valid UTF-8 (decode() output is); may return "".
inline std::string normalize_token_text(std::string_view utf8) {
  namespace d = token_map_detail;
  const auto* p = reinterpret_cast<const unsigned char*>(utf8.data());
  // NFKC then NFD = NFKD: full compatibility decomposition, then canonical ordering.
  std::vector<uint32_t> cps;
  cps.reserve(utf8.size() + 4);
  utf8proc_int32_t buf[32];
  for (size_t i = 0; i < utf8.size();) {
    const uint32_t cp = utf8::next(p, i);
    if (d::unknown(cp)) {
      cps.push_back(cp);
      continue;
    }
    int boundclass = 0;
    const utf8proc_ssize_t n = utf8proc_decompose_char(utf8proc_int32_t(cp), buf, 32,
                                                       utf8proc_option_t(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT), &boundclass);
    if (n < 1 || n > 32) {
      cps.push_back(cp);  // not reached for valid code points (longest decomposition: 18)
      continue;
    }
    for (utf8proc_ssize_t k = 0; k < n; ++k) cps.push_back(uint32_t(buf[k]));
  }
  for (size_t i = 0; i < cps.size();) {
    if (d::ccc(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && d::ccc(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + std::ptrdiff_t(i), cps.begin() + std::ptrdiff_t(j),
                     [](uint32_t a, uint32_t b) { return d::ccc(a) < d::ccc(b); });
    i = j;
  }
  // StripAccents, Lowercase.
  std::vector<uint32_t> low;
  low.reserve(cps.size() + 2);
  for (uint32_t cp : cps)
    if (!d::stripped(cp)) d::append_lower(low, cp);
  // Runs of [ \t\r\n] -> one space.
  std::vector<uint32_t> t;
  t.reserve(low.size());
  for (uint32_t cp : low) {
    if (cp == ' ' || cp == '\t' || cp == '\r' || cp == '\n') {
      if (t.empty() || t.back() != 0x20) t.push_back(0x20);  // a 0x20 in t always ends a run
    } else {
      t.push_back(cp);
    }
  }
  if (t.size() == 1 && t[0] == 0x20) return " ";  // ^ $ -> sentinel, survives Strip, back to " "
  size_t a = 0, b = t.size();
  while (a < b && d::white_space(t[a])) ++a;
  while (b > a && d::white_space(t[b - 1])) --b;
  std::string out;
  out.reserve(b - a + 8);
  for (size_t i = a; i < b; ++i) utf8::append(out, t[i] == 0xE000 ? 0x20 : t[i]);
  return out;
}

// The key of a token's decoded text (see the top of this file); `raw_token` is id_to_token.
inline std::string token_key(std::string_view decoded, std::string_view raw_token) {
  if (decoded.find("\xEF\xBF\xBD") != std::string_view::npos) return std::string(raw_token);
  std::string k = normalize_token_text(decoded);
  return k.empty() ? std::string(decoded) : k;
}

// The map for a model with `vocab_rows` embedding rows. When vocab_rows < len(tokenizer) the map
// is cut to vocab_rows, but compressed_vocab_size still counts every token, as the reference does.
inline Result<TokenMap> build_token_map(const Vocabulary& vocab, int32_t vocab_rows) {
  if (vocab_rows <= 0) return error(Code::invalid_argument, "engram token map: vocab_rows must be positive");
  if (vocab.decoded.size() != vocab.raw.size())
    return error(Code::invalid_argument, "engram token map: the vocabulary's raw and decoded lists differ in size");
  const int32_t top = int32_t(vocab.raw.size());
  // len(tokenizer) counts token strings; ids with a token are the same count unless two share an id
  int32_t rows = 0;
  for (int32_t id = 0; id < top; ++id) rows += vocab.raw[size_t(id)].has_value() ? 1 : 0;
  TokenMap m;
  m.tokenizer_rows = rows;
  m.map.assign(size_t(vocab_rows), kNoEntry);
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(size_t(rows));
  for (int32_t id = 0; id < rows; ++id) {
    const std::string& text = vocab.decoded[size_t(id)];
    const bool partial = text.find("\xEF\xBF\xBD") != std::string::npos;
    std::string key = token_key(text, partial ? vocab.raw[size_t(id)].value_or(std::string()) : std::string());
    const auto it = ids.try_emplace(std::move(key), int32_t(ids.size())).first;
    if (id < vocab_rows) m.map[size_t(id)] = it->second;
  }
  m.compressed_vocab_size = int64_t(ids.size());
  return m;
}

// Gives every kNoEntry row the compressed id of token_id (Model::load uses the Engram pad token,
// so ids past the tokenizer hash like padding).
inline Status fill_missing(TokenMap& m, int32_t token_id) {
  if (token_id < 0 || size_t(token_id) >= m.map.size() || m.map[size_t(token_id)] == kNoEntry)
    return error(Code::invalid_argument, "engram token map: token " + std::to_string(token_id) +
                                             " has no compressed id to fill the rows past the tokenizer with");
  const int32_t c = m.map[size_t(token_id)];
  for (int32_t& v : m.map)
    if (v == kNoEntry) v = c;
  return Status::Ok();
}

// Every hash multiplier derives from the compressed vocab size, so a map built from a different
// tokenizer than the model's would silently rehash every table.
inline Status check_compressed_size(const TokenMap& m, int64_t engram_compressed_vocab_size,
                                    std::string_view source = "tokenizer.json") {
  if (m.compressed_vocab_size == engram_compressed_vocab_size) return Status::Ok();
  return error(Code::mismatch, "engram token map built from " + std::string(source) + " has " +
                                   std::to_string(m.compressed_vocab_size) + " compressed ids (over " +
                                   std::to_string(m.tokenizer_rows) +
                                   " tokens), but config.json's engram_compressed_vocab_size is " +
                                   std::to_string(engram_compressed_vocab_size) +
                                   ": not the tokenizer this model was trained with");
}

}  // namespace dsv41::engram
