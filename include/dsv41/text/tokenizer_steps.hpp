// The state of a Tokenizer and the text steps before BPE (normalization, pre-tokenizer
// splitting), for <dsv41/text/tokenizer.hpp>.
#pragma once
#include <utf8proc.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <dsv41/core/status.hpp>
#include <dsv41/text/added_tokens.hpp>
#include <dsv41/text/bpe.hpp>
#include <dsv41/text/unicode_regex.hpp>
#include <dsv41/core/utf8.hpp>

namespace dsv41::text {

namespace detail {

// GPT-2's reversible byte <-> printable code point table.
inline std::array<uint32_t, 256> byte_to_codepoint() {
  std::array<uint32_t, 256> t{};
  uint32_t extra = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    t[b] = printable ? b : extra++;
  }
  return t;
}

// A growable array of trivially copyable values that does not zero new storage.
template <class T>
class PodBuffer {
 public:
  T* data() { return p_.get(); }
  const T* data() const { return p_.get(); }
  size_t size() const { return n_; }
  void clear() { n_ = 0; }
  void reserve(size_t n) {
    if (n <= cap_) return;
    const size_t c = std::max(n, cap_ * 2);
    auto q = std::make_unique_for_overwrite<T[]>(c);
    if (n_) std::memcpy(q.get(), p_.get(), n_ * sizeof(T));
    p_ = std::move(q);
    cap_ = c;
  }
  void resize_uninitialized(size_t n) {
    reserve(n);
    n_ = n;
  }
  void push_back(T v) {
    if (n_ == cap_) reserve(n_ + 1);
    p_[n_++] = v;
  }
  void pop_back() { --n_; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }

 private:
  std::unique_ptr<T[]> p_;
  size_t n_ = 0, cap_ = 0;
};

// The tokenizer's configuration (vocabulary, merges, added tokens, normalizer and pre-tokenizer
// steps, as loaded from tokenizer.json) and the steps run on text before BPE: normalization and
// regex splitting. Tokenizer derives from it through TokenizerJson.
class TokenizerSteps {
 protected:
  // ---- model and configuration ----
  enum Kind : uint8_t { kAbsent = 0, kModel = 1, kAdded = 2, kSpecial = 3 };
  enum class Behavior : uint8_t { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
  struct PreStep {
    enum Type { Split, ByteLevel } type = Split;
    Regex re;
    Behavior behavior = Behavior::Isolated;
    bool invert = false;
    bool add_prefix_space = false;
    bool use_regex = true;
  };
  struct NormStep {
    enum Type { NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace, Prepend } type = NFC;
    bool left = false, right = false;
    std::string content;
    Regex re;
  };

  StringMap<int32_t> vocab_;      // model vocabulary, as written in the file
  StringMap<int32_t> raw_vocab_;  // byte-level: raw bytes of a token -> id
  std::vector<std::string> model_tokens_; // id -> model token
  std::vector<std::string> decoded_;      // id -> bytes the decoder produces
  std::vector<uint8_t> id_kind_;
  std::vector<uint8_t> skippable_;  // decode(skip_special): the token's text is a special token's content
  MergeTable merges_;
  std::array<int32_t, 256> byte_ids_{};
  std::array<std::string, 256> byte_chars_{};
  bool byte_level_ = false;
  bool byte_level_decoder_ = false;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  int32_t unk_id_ = -1;

  std::vector<NormStep> normalizers_;
  std::vector<PreStep> pre_;

  std::vector<AddedToken> added_;  // in the order `tokenizers` matches them: special, then others
  StringMap<int32_t> added_map_;
  std::unordered_map<int32_t, size_t> added_by_id_;  // id -> index in added_
  std::vector<std::string> added_text_;  // what id_to_token/decode give: normalized content if normalized
  AddedMatcher raw_added_, norm_added_;
  std::vector<std::string> warnings_;

  struct Scratch {
    // The text as code points: [0, n_src) decodes `src`; code points after that are regions
    // added by ByteLevel's add_prefix_space, whose UTF-8 is in `extra`.
    PodBuffer<uint32_t> cp;
    PodBuffer<uint8_t> cat;
    std::string_view src;
    int n_src = 0;
    std::string extra;
    int walk_cp[2] = {0, 0};  // byte offsets found by walking forward, one walk per region
    size_t walk_byte[2] = {0, 0};
    std::vector<std::pair<int, int>> pieces, next;
    std::vector<std::pair<std::pair<int, int>, bool>> matches, merged;
    RegexScratch rx;
    // The first refused regex search (a limit of the engine); encoding went on with the rest of
    // that piece unsplit.
    Status regex_error;
    BpeScratch bpe;
    std::vector<int32_t> word;
    WordCache cache;
  };

  const std::string* token_string(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= id_kind_.size() || id_kind_[id] == kAbsent) return nullptr;
    if (id_kind_[id] != kModel) return &added_text_[added_by_id_.at(id)];
    return &model_tokens_[id];
  }
  const std::string* decoded(int32_t id, bool skip_special) const {
    if (id < 0 || static_cast<size_t>(id) >= id_kind_.size() || id_kind_[id] == kAbsent) return nullptr;
    if (skip_special && skippable_[id]) return nullptr;
    return &decoded_[id];
  }

  // Decodes s into sc.cp/sc.cat (s must stay alive while they are used).
  static void load_text(std::string_view s, Scratch& sc) {
    sc.src = s;
    sc.extra.clear();
    sc.cp.resize_uninitialized(s.size());
    sc.cat.resize_uninitialized(s.size());
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    uint32_t* cp = sc.cp.data();
    uint8_t* cat = sc.cat.data();
    size_t i = 0, n = 0;
    while (i < s.size()) {
      const uint32_t c = utf8::next(p, i);
      cp[n] = c;
      cat[n] = general_category(c);
      ++n;
    }
    sc.cp.resize_uninitialized(n);
    sc.cat.resize_uninitialized(n);
    sc.n_src = static_cast<int>(n);
    sc.walk_cp[0] = 0;
    sc.walk_byte[0] = 0;
    sc.walk_cp[1] = sc.n_src;
    sc.walk_byte[1] = 0;
  }

  // Byte offset of code point i within its region; successive calls per region must not go back.
  static size_t byte_at(Scratch& sc, int region, int i) {
    int& k = sc.walk_cp[region];
    size_t& b = sc.walk_byte[region];
    const uint32_t* cp = sc.cp.data();
    while (k < i) b += utf8::length_of(cp[k++]);
    return b;
  }

  // UTF-8 of the code points [b, e); pieces must be asked for in text order.
  static std::string_view piece_bytes(Scratch& sc, int b, int e) {
    const int region = b < sc.n_src ? 0 : 1;
    const size_t x = byte_at(sc, region, b), y = byte_at(sc, region, e);
    return (region == 0 ? sc.src : std::string_view(sc.extra)).substr(x, y - x);
  }

  // Appends " " + the code points [b, e) as a new region; returns its range.
  static std::pair<int, int> append_with_space(Scratch& sc, int b, int e) {
    const int start = static_cast<int>(sc.cp.size());
    sc.cp.reserve(sc.cp.size() + 1 + (e - b));  // the copies below read what they grow
    sc.cat.reserve(sc.cat.size() + 1 + (e - b));
    sc.cp.push_back(' ');
    sc.cat.push_back(general_category(' '));
    sc.extra.push_back(' ');
    for (int k = b; k < e; ++k) {
      sc.cp.push_back(sc.cp[k]);
      sc.cat.push_back(sc.cat[k]);
      utf8::append(sc.extra, sc.cp[k]);
    }
    return {start, static_cast<int>(sc.cp.size())};
  }

  static void note(Scratch& sc, Status s) {
    if (!s.ok() && sc.regex_error.ok()) detail::set_status(sc.regex_error, std::move(s));
  }

  // Splits every piece by `re` and passes the parts `behavior` keeps, in order, to
  // emit(begin, end) (NormalizedString::split; empty parts are dropped).
  template <class F>
  static void split_pieces(const Regex& re, Behavior behavior, bool invert, Scratch& sc, F&& emit) {
    for (const auto& [b, e] : sc.pieces) {
      int prev = b;
      const RegexInput in{sc.cp.data(), sc.cat.data(), b, e};
      if (behavior == Behavior::Isolated) {  // every part is kept: no bookkeeping needed
        note(sc, re.for_each_match(in, sc.rx, [&](int s, int t) {
          if (prev != s) emit(prev, s);
          if (t != s) emit(s, t);
          prev = t;
        }));
        if (prev != e) emit(prev, e);
        continue;
      }
      auto& m = sc.matches;
      m.clear();
      note(sc, re.for_each_match(in, sc.rx, [&](int s, int t) {
        if (prev != s) m.push_back({{prev, s}, false});
        m.push_back({{s, t}, true});
        prev = t;
      }));
      if (prev != e) m.push_back({{prev, e}, false});
      if (invert)
        for (auto& x : m) x.second = !x.second;
      auto& r = sc.merged;  // (range, remove)
      r.clear();
      bool previous = false;
      switch (behavior) {
        case Behavior::Isolated:
          for (auto& x : m) r.push_back({x.first, false});
          break;
        case Behavior::Removed:
          r = m;
          break;
        case Behavior::Contiguous:
          for (auto& x : m) {
            if (x.second == previous && !r.empty()) r.back().first.second = x.first.second;
            else r.push_back({x.first, false});
            previous = x.second;
          }
          break;
        case Behavior::MergedWithPrevious:
          for (auto& x : m) {
            if (x.second && !previous && !r.empty()) r.back().first.second = x.first.second;
            else r.push_back({x.first, false});
            previous = x.second;
          }
          break;
        case Behavior::MergedWithNext:
          for (size_t k = m.size(); k-- > 0;) {
            auto& x = m[k];
            if (x.second && !previous && !r.empty()) r.back().first.first = x.first.first;
            else r.push_back({x.first, false});
            previous = x.second;
          }
          std::reverse(r.begin(), r.end());
          break;
      }
      for (auto& x : r)
        if (!x.second && x.first.second > x.first.first) emit(x.first.first, x.first.second);
    }
  }

  // ---- normalization ----
  std::string normalize(std::string_view in, Scratch& sc) const {
    std::string s(in);
    for (const NormStep& n : normalizers_) {
      switch (n.type) {
        case NormStep::NFC: case NormStep::NFD: case NormStep::NFKC: case NormStep::NFKD: {
          int opt = UTF8PROC_STABLE;
          if (n.type == NormStep::NFC || n.type == NormStep::NFKC) opt |= UTF8PROC_COMPOSE;
          else opt |= UTF8PROC_DECOMPOSE;
          if (n.type == NormStep::NFKC || n.type == NormStep::NFKD) opt |= UTF8PROC_COMPAT;
          utf8proc_uint8_t* dst = nullptr;
          const auto len = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                        static_cast<utf8proc_ssize_t>(s.size()), &dst,
                                        static_cast<utf8proc_option_t>(opt));
          if (len >= 0 && dst) s.assign(reinterpret_cast<const char*>(dst), static_cast<size_t>(len));
          std::free(dst);
          break;
        }
        case NormStep::Lowercase: {
          std::string o;
          const auto* p = reinterpret_cast<const unsigned char*>(s.data());
          for (size_t i = 0; i < s.size();) {
            const uint32_t c = utf8::next(p, i);
            if (c == 0x130) {  // the one unconditional multi-character lowercase mapping
              o += "i\xCC\x87";
              continue;
            }
            utf8::append(o, c < 128 ? (c >= 'A' && c <= 'Z' ? c + 32 : c)
                                    : static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
          }
          s = std::move(o);
          break;
        }
        case NormStep::Strip: {
          const auto* p = reinterpret_cast<const unsigned char*>(s.data());
          size_t b = 0, e = s.size();
          if (n.left)
            while (b < e) {
              size_t k = b;
              if (!is_white_space(utf8::next(p, k))) break;
              b = k;
            }
          if (n.right)
            while (e > b) {
              size_t k = e - 1;
              while (k > b && (p[k] & 0xC0) == 0x80) --k;
              size_t kk = k;
              if (!is_white_space(utf8::next(p, kk))) break;
              e = k;
            }
          s = s.substr(b, e - b);
          break;
        }
        case NormStep::Replace: {
          load_text(s, sc);
          std::string o;
          size_t prev = 0;
          const RegexInput rin{sc.cp.data(), sc.cat.data(), 0, static_cast<int>(sc.cp.size())};
          note(sc, n.re.for_each_match(rin, sc.rx, [&](int a, int b) {
            const size_t x = byte_at(sc, 0, a);
            o.append(s, prev, x - prev);
            o += n.content;
            prev = byte_at(sc, 0, b);
          }));
          o.append(s, prev, std::string::npos);
          s = std::move(o);
          break;
        }
        case NormStep::Prepend:
          if (!s.empty()) s.insert(0, n.content);
          break;
      }
    }
    return s;
  }
};

}  // namespace detail

}  // namespace dsv41::text
