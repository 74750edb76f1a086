// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json.
//
// encode() reproduces `tokenizers` (Tokenizer.encode(text, add_special_tokens=False)):
// added tokens are split out first (leftmost-longest; lstrip/rstrip/single_word/normalized
// as `tokenizers` applies them), then each remaining piece is normalized, split by the
// pre-tokenizers and merged by the BPE model. Post-processors are not applied (no BOS is
// added). Input that is not valid UTF-8 is first repaired the way Python's
// bytes.decode("utf-8", "replace") and Rust's from_utf8_lossy do (each maximal ill-formed
// subpart becomes U+FFFD), so its ids are those `tokenizers` gives for the repaired text.
//
// Supported: normalizers NFC/NFD/NFKC/NFKD, Lowercase, Strip, Replace, Prepend, Sequence;
// pre-tokenizers Split (Regex or String, all behaviors, invert), ByteLevel (last in the
// sequence), Digits, Sequence; model BPE (merges as "a b" or ["a","b"], ignore_merges,
// unk_token/fuse_unk, byte_fallback); decoder ByteLevel or none. Anything else is rejected
// with Code::unsupported when the file is loaded.
//
// Ids follow `tokenizers`: an added token whose content is in the model vocabulary takes that
// id, any other gets the next free one (a differing "id" in the file is reported in
// warnings()). decode() keeps special tokens unless asked (Python's default is to skip them).
// encode/decode are const and keep no state between calls, so one Tokenizer can serve many
// threads; a StreamDecoder refers to its Tokenizer, which must outlive it and not move.
//
//   auto tok = dsv41::text::Tokenizer::from_json_file("tokenizer.json");
//   if (!tok.ok()) return tok.status();
//   std::vector<int32_t> ids = tok->encode("Hello");
//   auto sd = tok->stream_decoder();
//   for (int32_t id : ids) std::cout << sd.push(id);
//   std::cout << sd.flush();
#pragma once
#include <utf8proc.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <dsv41/core/status.hpp>
#include <dsv41/text/bpe.hpp>
#include <dsv41/text/unicode_regex.hpp>
#include <dsv41/text/utf8.hpp>

namespace dsv41::text {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
};

namespace detail {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

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

// Rust regex's \w (used by single_word): alphabetic, marks, decimal digits, connectors.
inline bool is_rust_word(uint32_t cp) {
  if (cp == 0x200C || cp == 0x200D) return true;
  const uint32_t mask = gc::L | gc::M | gc::bit(UTF8PROC_CATEGORY_ND) | gc::bit(UTF8PROC_CATEGORY_NL) |
                        gc::bit(UTF8PROC_CATEGORY_PC);
  return (mask >> general_category(cp)) & 1u;
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

// Leftmost-longest matcher over the added tokens (a byte trie).
class AddedMatcher {
 public:
  void add(std::string_view s, int32_t token) {
    if (s.empty()) return;
    if (nodes_.empty()) nodes_.emplace_back();
    int cur = 0;
    for (unsigned char c : s) {
      int nxt = -1;
      for (auto [b, child] : nodes_[cur].next)
        if (b == c) nxt = child;
      if (nxt < 0) {
        nxt = static_cast<int>(nodes_.size());
        nodes_[cur].next.push_back({c, nxt});
        nodes_.emplace_back();
      }
      cur = nxt;
    }
    nodes_[cur].token = token;
    first_[static_cast<unsigned char>(s[0])] = 1;
  }
  bool empty() const { return nodes_.empty(); }
  // Next match at or after `from`: earliest start, then longest.
  bool find(std::string_view t, size_t from, size_t& ms, size_t& me, int32_t& token) const {
    if (nodes_.empty()) return false;
    const auto* p = reinterpret_cast<const unsigned char*>(t.data());
    const size_t n = t.size();
    for (size_t s = from; s < n; ++s) {
      while (s < n && !first_[p[s]]) ++s;
      if (s >= n) break;
      int cur = 0, best = -1;
      size_t best_end = 0;
      for (size_t i = s; i < t.size(); ++i) {
        int nxt = -1;
        for (auto [b, child] : nodes_[cur].next)
          if (b == p[i]) {
            nxt = child;
            break;
          }
        if (nxt < 0) break;
        cur = nxt;
        if (nodes_[cur].token >= 0) {
          best = nodes_[cur].token;
          best_end = i + 1;
        }
      }
      if (best >= 0) {
        ms = s;
        me = best_end;
        token = best;
        return true;
      }
    }
    return false;
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int>> next;
    int32_t token = -1;
  };
  std::vector<Node> nodes_;
  std::array<uint8_t, 256> first_{};  // bytes that start some token
};

}  // namespace detail

class Tokenizer {
 public:
  static Result<Tokenizer> from_json_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return error(Code::io_error, "cannot open tokenizer file '" + path + "'");
    std::ostringstream ss;
    ss << f.rdbuf();
    if (f.bad()) return error(Code::io_error, "cannot read tokenizer file '" + path + "'");
    auto r = from_json_string(ss.str());
    if (!r.ok()) return Status(r.status().code(), path + ": " + r.status().message());
    return r;
  }

  static Result<Tokenizer> from_json_string(std::string_view json) {
    try {
      Tokenizer t;
      Status s = t.load(json);
      if (!s.ok()) return s;
      return t;
    } catch (const std::exception& e) {
      return error(Code::format_error, std::string("tokenizer.json: ") + e.what());
    }
  }

  // Token ids of `utf8`. allow_special = false treats the text of special added tokens as
  // ordinary text (like `tokenizers`' encode_special_tokens = True).
  std::vector<int32_t> encode(std::string_view utf8, bool allow_special = true) const {
    std::vector<int32_t> out;
    std::string repaired;
    if (!utf8::is_valid(utf8)) {
      repaired = utf8::to_valid(utf8);
      utf8 = repaired;
    }
    Scratch sc;
    out.reserve(utf8.size() / 3 + 4);
    split_added(utf8, raw_added_, allow_special, [&](std::string_view piece, int32_t id) {
      if (id >= 0) {
        out.push_back(id);
        return;
      }
      if (normalizers_.empty()) {
        encode_normalized(piece, allow_special, sc, out);
      } else {
        std::string norm = normalize(piece, sc);
        encode_normalized(norm, allow_special, sc, out);
      }
    });
    return out;
  }

  // Text of `ids`; unknown ids are skipped, special tokens too when skip_special is set.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const {
    std::string out;
    if (byte_level_decoder_) {
      std::string bytes;
      for (int32_t id : ids)
        if (const std::string* b = decoded(id, skip_special)) bytes += *b;
      utf8::append_lossy(out, bytes);
      return out;
    }
    bool first = true;
    for (int32_t id : ids) {
      if (!decoded(id, skip_special)) continue;
      if (!first) out.push_back(' ');
      out += *token_string(id);
      first = false;
    }
    return out;
  }

  // Incremental decode: the concatenation of push() and flush() results equals decode()
  // of all pushed ids, and every returned piece is valid UTF-8 (an incomplete character
  // is held back until it completes or turns out to be malformed).
  class StreamDecoder {
   public:
    explicit StreamDecoder(const Tokenizer& t, bool skip_special = false) : t_(&t), skip_(skip_special) {}
    std::string push(int32_t id) {
      std::string out;
      if (!t_->decoded(id, skip_)) return out;
      if (!t_->byte_level_decoder_) {
        if (!first_) out.push_back(' ');
        out += *t_->token_string(id);
        first_ = false;
        return out;
      }
      pending_ += *t_->decoded(id, skip_);
      const size_t used = utf8::append_lossy(out, pending_, /*hold_tail=*/true);
      pending_.erase(0, used);
      return out;
    }
    std::string flush() {
      std::string out;
      utf8::append_lossy(out, pending_);
      pending_.clear();
      return out;
    }

   private:
    const Tokenizer* t_;
    bool skip_;
    bool first_ = true;
    std::string pending_;
  };

  StreamDecoder stream_decoder(bool skip_special = false) const { return StreamDecoder(*this, skip_special); }

  std::optional<int32_t> token_to_id(std::string_view token) const {
    if (auto it = added_map_.find(token); it != added_map_.end()) return it->second;
    if (auto it = vocab_.find(token); it != vocab_.end()) return it->second;
    return std::nullopt;
  }

  // The token's text: the model's token, or an added token's content (normalized first
  // when the token is `normalized`, as `tokenizers` reports it).
  std::optional<std::string> id_to_token(int32_t id) const {
    const std::string* s = token_string(id);
    if (!s) return std::nullopt;
    return *s;
  }

  // One past the largest id of the model vocabulary and the added tokens.
  size_t vocab_size() const { return id_kind_.size(); }

  bool is_special(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < id_kind_.size() && id_kind_[id] == kSpecial; }

  const std::vector<AddedToken>& added_tokens() const { return added_; }

  // Non-fatal remarks from loading (e.g. an added token whose id in the file differs from
  // the one `tokenizers` assigns, which is the one used).
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
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

  detail::StringMap<int32_t> vocab_;      // model vocabulary, as written in the file
  detail::StringMap<int32_t> raw_vocab_;  // byte-level: raw bytes of a token -> id
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
  detail::StringMap<int32_t> added_map_;
  std::unordered_map<int32_t, size_t> added_by_id_;  // id -> index in added_
  std::vector<std::string> added_text_;  // what id_to_token/decode give: normalized content if normalized
  detail::AddedMatcher raw_added_, norm_added_;
  std::vector<std::string> warnings_;

  // ---- encoding ----
  struct Scratch {
    // The text as code points: [0, n_src) decodes `src`; code points after that are regions
    // added by ByteLevel's add_prefix_space, whose UTF-8 is in `extra`.
    detail::PodBuffer<uint32_t> cp;
    detail::PodBuffer<uint8_t> cat;
    std::string_view src;
    int n_src = 0;
    std::string extra;
    int walk_cp[2] = {0, 0};  // byte offsets found by walking forward, one walk per region
    size_t walk_byte[2] = {0, 0};
    std::vector<std::pair<int, int>> pieces, next;
    std::vector<std::pair<std::pair<int, int>, bool>> matches, merged;
    RegexScratch rx;
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

  // Splits `text` on added tokens the way `tokenizers` does (AddedVocabulary::find_matches);
  // calls f(piece, id) with id = -1 for text between added tokens.
  template <class F>
  void split_added(std::string_view text, const detail::AddedMatcher& m, bool allow_special, F&& f) const {
    if (text.empty()) return;
    if (m.empty()) {
      f(text, -1);
      return;
    }
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    size_t start_offset = 0, pos = 0, ms, me;
    int32_t tok;
    while (m.find(text, pos, ms, me, tok)) {
      pos = me;
      const AddedToken& a = added_[tok];
      if (!allow_special && a.special) continue;
      if (a.single_word) {
        bool start_space = true, stop_space = true;
        if (ms > 0) {
          size_t k = ms - 1;
          while (k > 0 && (p[k] & 0xC0) == 0x80) --k;
          size_t kk = k;
          start_space = !detail::is_rust_word(utf8::next(p, kk));
        }
        if (me < text.size()) {
          size_t k = me;
          stop_space = !detail::is_rust_word(utf8::next(p, k));
        }
        if (!start_space || !stop_space) continue;
      }
      size_t s = ms, e = me;
      if (a.lstrip) {
        size_t k = s;  // start of the white space run that ends at s
        while (k > 0) {
          size_t b = k - 1;
          while (b > 0 && (p[b] & 0xC0) == 0x80) --b;
          size_t bb = b;
          if (!is_white_space(utf8::next(p, bb))) break;
          k = b;
        }
        s = std::max(k, start_offset);
      }
      if (a.rstrip) {
        size_t k = e;
        while (k < text.size()) {
          size_t kk = k;
          if (!is_white_space(utf8::next(p, kk))) break;
          k = kk;
        }
        e = k;
      }
      if (start_offset < s) f(text.substr(start_offset, s - start_offset), -1);
      f(text.substr(s, e - s), a.id);
      start_offset = e;
    }
    if (start_offset < text.size()) f(text.substr(start_offset), -1);
  }

  void encode_normalized(std::string_view text, bool allow_special, Scratch& sc, std::vector<int32_t>& out) const {
    split_added(text, norm_added_, allow_special, [&](std::string_view piece, int32_t id) {
      if (id >= 0) out.push_back(id);
      else if (!piece.empty()) encode_piece(piece, sc, out);
    });
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

  // Splits every piece by `re` and passes the parts `behavior` keeps, in order, to
  // emit(begin, end) (NormalizedString::split; empty parts are dropped).
  template <class F>
  static void split_pieces(const Regex& re, Behavior behavior, bool invert, Scratch& sc, F&& emit) {
    for (const auto& [b, e] : sc.pieces) {
      int prev = b;
      const RegexInput in{sc.cp.data(), sc.cat.data(), b, e};
      if (behavior == Behavior::Isolated) {  // every part is kept: no bookkeeping needed
        re.for_each_match(in, sc.rx, [&](int s, int t) {
          if (prev != s) emit(prev, s);
          if (t != s) emit(s, t);
          prev = t;
        });
        if (prev != e) emit(prev, e);
        continue;
      }
      auto& m = sc.matches;
      m.clear();
      re.for_each_match(in, sc.rx, [&](int s, int t) {
        if (prev != s) m.push_back({{prev, s}, false});
        m.push_back({{s, t}, true});
        prev = t;
      });
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

  void encode_piece(std::string_view text, Scratch& sc, std::vector<int32_t>& out) const {
    if (pre_.empty()) {
      encode_word(text, sc, out);
      return;
    }
    load_text(text, sc);
    sc.pieces.clear();
    sc.pieces.push_back({0, static_cast<int>(sc.cp.size())});
    // The last step hands its pieces straight to the model instead of listing them.
    auto to_model = [&](int b, int e) { encode_word(piece_bytes(sc, b, e), sc, out); };
    auto to_next = [&](int b, int e) { sc.next.push_back({b, e}); };
    for (size_t i = 0; i < pre_.size(); ++i) {
      const PreStep& st = pre_[i];
      const bool last = i + 1 == pre_.size();
      if (st.type == PreStep::Split) {
        if (last) {
          split_pieces(st.re, st.behavior, st.invert, sc, to_model);
        } else {
          sc.next.clear();
          split_pieces(st.re, st.behavior, st.invert, sc, to_next);
          std::swap(sc.pieces, sc.next);
        }
        continue;
      }
      // ByteLevel, always the last step.
      if (st.add_prefix_space) {
        for (auto& pc : sc.pieces)
          if (sc.cp[pc.first] != ' ') pc = append_with_space(sc, pc.first, pc.second);
      }
      if (st.use_regex) {
        split_pieces(st.re, Behavior::Isolated, false, sc, to_model);
      } else {
        for (const auto& [b, e] : sc.pieces) to_model(b, e);
      }
    }
  }

  // Initial symbols of one character (model-space string `ch`) that has no vocabulary id.
  void unknown_char(std::string_view ch, std::vector<int32_t>& word, bool& last_unk) const {
    if (byte_fallback_) {
      std::vector<int32_t> ids;
      for (unsigned char b : ch) {
        static constexpr char kHex[] = "0123456789ABCDEF";
        const char name[7] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', 0};
        auto it = vocab_.find(std::string_view(name, 6));
        if (it == vocab_.end()) {
          ids.clear();
          break;
        }
        ids.push_back(it->second);
      }
      if (!ids.empty()) {
        word.insert(word.end(), ids.begin(), ids.end());
        last_unk = false;
        return;
      }
    }
    if (unk_id_ < 0) return;  // dropped, as `tokenizers` does without an unk token
    if (fuse_unk_ && last_unk) return;
    word.push_back(unk_id_);
    last_unk = true;
  }

  void encode_word(std::string_view w, Scratch& sc, std::vector<int32_t>& out) const {
    if (w.empty()) return;
    if (byte_level_ && w.size() <= 2) {  // short words: cheaper than the cache
      const int32_t a = byte_ids_[static_cast<unsigned char>(w[0])];
      if (w.size() == 1 && a >= 0) {
        out.push_back(a);  // also what ignore_merges finds
        return;
      }
      const int32_t b = w.size() == 2 ? byte_ids_[static_cast<unsigned char>(w[1])] : -1;
      if (a >= 0 && b >= 0 && !ignore_merges_) {
        if (const auto* m = merges_.find(a, b)) {
          out.push_back(m->id);
        } else {
          out.push_back(a);
          out.push_back(b);
        }
        return;
      }
    }
    const bool cacheable = w.size() < 256;
    uint64_t h = 0;
    if (cacheable) {
      h = WordCache::hash(w);
      uint32_t n;
      if (const int32_t* ids = sc.cache.find(w, h, n)) {
        out.insert(out.end(), ids, ids + n);
        return;
      }
    }
    auto& word = sc.word;
    word.clear();
    const auto& whole = byte_level_ ? raw_vocab_ : vocab_;
    auto hit = ignore_merges_ ? whole.find(w) : whole.end();
    if (hit != whole.end()) {
      word.push_back(hit->second);
    } else if (byte_level_) {
      bool last_unk = false;
      for (unsigned char b : w) {
        if (byte_ids_[b] >= 0) {
          word.push_back(byte_ids_[b]);
          last_unk = false;
        } else {
          unknown_char(byte_chars_[b], word, last_unk);
        }
      }
      bpe_merge(merges_, word, sc.bpe);
    } else {
      bool last_unk = false;
      const auto* p = reinterpret_cast<const unsigned char*>(w.data());
      size_t i = 0;
      while (i < w.size()) {
        const size_t s = i;
        utf8::next(p, i);
        const std::string_view ch = w.substr(s, i - s);
        if (auto it = vocab_.find(ch); it != vocab_.end()) {
          word.push_back(it->second);
          last_unk = false;
        } else {
          unknown_char(ch, word, last_unk);
        }
      }
      bpe_merge(merges_, word, sc.bpe);
    }
    out.insert(out.end(), word.begin(), word.end());
    if (cacheable) sc.cache.insert(w, h, word.data(), word.size());
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
          n.re.for_each_match(rin, sc.rx, [&](int a, int b) {
            const size_t x = byte_at(sc, 0, a);
            o.append(s, prev, x - prev);
            o += n.content;
            prev = byte_at(sc, 0, b);
          });
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

  // ---- loading ----
  using json = nlohmann::json;

  static Status bad(const std::string& m) { return error(Code::format_error, "tokenizer.json: " + m); }
  static Status unsupported(const std::string& m) { return error(Code::unsupported, "tokenizer.json: " + m); }

  static Status get_bool(const json& o, const char* key, bool def, bool& out, const std::string& where) {
    out = def;
    auto it = o.find(key);
    if (it == o.end() || it->is_null()) return Status::Ok();
    if (!it->is_boolean()) return bad(where + "." + key + " must be a boolean");
    out = it->get<bool>();
    return Status::Ok();
  }
  static Status get_string(const json& o, const char* key, std::string& out, const std::string& where, bool required) {
    auto it = o.find(key);
    if (it == o.end() || it->is_null()) {
      if (required) return bad(where + "." + key + " is missing");
      return Status::Ok();
    }
    if (!it->is_string()) return bad(where + "." + key + " must be a string");
    out = it->get<std::string>();
    return Status::Ok();
  }
  static Status get_type(const json& o, std::string& type, const std::string& where) {
    if (!o.is_object()) return bad(where + " must be an object or null");
    return get_string(o, "type", type, where, true);
  }
  static Status get_pattern(const json& o, Regex& re, const std::string& where) {
    auto it = o.find("pattern");
    if (it == o.end() || !it->is_object()) return bad(where + ".pattern must be an object");
    std::string pat;
    if (auto r = it->find("Regex"); r != it->end() && r->is_string()) {
      pat = r->get<std::string>();
    } else if (auto s = it->find("String"); s != it->end() && s->is_string()) {
      pat = Regex::escape(s->get<std::string>());
    } else {
      return bad(where + ".pattern needs a \"Regex\" or \"String\" string");
    }
    auto c = Regex::compile(pat);
    if (!c.ok()) return Status(c.status().code(), "tokenizer.json: " + where + ": " + c.status().message());
    re = std::move(c).value();
    return Status::Ok();
  }

  Status load_normalizer(const json& o, const std::string& where) {
    if (o.is_null()) return Status::Ok();
    std::string type;
    DSV41_TRY(get_type(o, type, where));
    NormStep n;
    if (type == "Sequence") {
      auto it = o.find("normalizers");
      if (it == o.end() || !it->is_array()) return bad(where + ".normalizers must be an array");
      for (size_t k = 0; k < it->size(); ++k) DSV41_TRY(load_normalizer((*it)[k], where + ".normalizers[" + std::to_string(k) + "]"));
      return Status::Ok();
    }
    if (type == "NFC") n.type = NormStep::NFC;
    else if (type == "NFD") n.type = NormStep::NFD;
    else if (type == "NFKC") n.type = NormStep::NFKC;
    else if (type == "NFKD") n.type = NormStep::NFKD;
    else if (type == "Lowercase") n.type = NormStep::Lowercase;
    else if (type == "Strip") {
      n.type = NormStep::Strip;
      DSV41_TRY(get_bool(o, "strip_left", true, n.left, where));
      DSV41_TRY(get_bool(o, "strip_right", true, n.right, where));
    } else if (type == "Replace") {
      n.type = NormStep::Replace;
      DSV41_TRY(get_pattern(o, n.re, where));
      DSV41_TRY(get_string(o, "content", n.content, where, true));
    } else if (type == "Prepend") {
      n.type = NormStep::Prepend;
      DSV41_TRY(get_string(o, "prepend", n.content, where, true));
    } else {
      return unsupported(where + ": normalizer type '" + type + "' is not supported");
    }
    normalizers_.push_back(std::move(n));
    return Status::Ok();
  }

  Status load_pre_tokenizer(const json& o, const std::string& where) {
    if (o.is_null()) return Status::Ok();
    std::string type;
    DSV41_TRY(get_type(o, type, where));
    if (!pre_.empty() && pre_.back().type == PreStep::ByteLevel)
      return unsupported(where + ": pre-tokenizers after ByteLevel are not supported");
    PreStep p;
    if (type == "Sequence") {
      auto it = o.find("pretokenizers");
      if (it == o.end() || !it->is_array()) return bad(where + ".pretokenizers must be an array");
      for (size_t k = 0; k < it->size(); ++k)
        DSV41_TRY(load_pre_tokenizer((*it)[k], where + ".pretokenizers[" + std::to_string(k) + "]"));
      return Status::Ok();
    }
    if (type == "Split") {
      p.type = PreStep::Split;
      DSV41_TRY(get_pattern(o, p.re, where));
      std::string b;
      DSV41_TRY(get_string(o, "behavior", b, where, true));
      if (b == "Removed") p.behavior = Behavior::Removed;
      else if (b == "Isolated") p.behavior = Behavior::Isolated;
      else if (b == "MergedWithPrevious") p.behavior = Behavior::MergedWithPrevious;
      else if (b == "MergedWithNext") p.behavior = Behavior::MergedWithNext;
      else if (b == "Contiguous") p.behavior = Behavior::Contiguous;
      else return bad(where + ".behavior '" + b + "' is not a split behavior");
      DSV41_TRY(get_bool(o, "invert", false, p.invert, where));
    } else if (type == "Digits") {
      bool individual;
      DSV41_TRY(get_bool(o, "individual_digits", false, individual, where));
      p.type = PreStep::Split;
      p.re = std::move(Regex::compile("\\p{N}")).value();
      p.behavior = individual ? Behavior::Isolated : Behavior::Contiguous;
    } else if (type == "ByteLevel") {
      p.type = PreStep::ByteLevel;
      DSV41_TRY(get_bool(o, "add_prefix_space", true, p.add_prefix_space, where));
      DSV41_TRY(get_bool(o, "use_regex", true, p.use_regex, where));
      if (p.use_regex) {
        auto r = Regex::compile(
            "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+");
        if (!r.ok()) return r.status();
        p.re = std::move(r).value();
      }
      byte_level_ = true;
    } else {
      return unsupported(where + ": pre_tokenizer type '" + type + "' is not supported");
    }
    pre_.push_back(std::move(p));
    return Status::Ok();
  }

  Status load_decoder(const json& o) {
    if (o.is_null()) return Status::Ok();
    std::string type;
    DSV41_TRY(get_type(o, type, "decoder"));
    if (type == "ByteLevel") {
      byte_level_decoder_ = true;
      return Status::Ok();
    }
    if (type == "Sequence") {
      auto it = o.find("decoders");
      if (it != o.end() && it->is_array() && it->size() == 1) return load_decoder((*it)[0]);
    }
    return unsupported("decoder type '" + type + "' is not supported (ByteLevel or none)");
  }

  Status load_model(const json& m) {
    if (!m.is_object()) return bad("\"model\" must be an object");
    std::string type = "BPE";
    DSV41_TRY(get_string(m, "type", type, "model", false));
    if (type != "BPE") return unsupported("model type '" + type + "' is not supported (only BPE)");
    auto v = m.find("vocab");
    if (v == m.end() || !v->is_object()) return bad("model.vocab must be an object");
    auto mg = m.find("merges");
    if (mg == m.end() || !mg->is_array()) return bad("model.merges must be an array");
    if (auto d = m.find("dropout"); d != m.end() && !d->is_null()) {
      if (!d->is_number()) return bad("model.dropout must be a number or null");
      if (d->get<double>() != 0.0) return unsupported("BPE dropout is not supported");
    }
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      std::string s;
      DSV41_TRY(get_string(m, k, s, "model", false));
      if (!s.empty()) return unsupported(std::string("model.") + k + " is not supported");
    }
    DSV41_TRY(get_bool(m, "ignore_merges", false, ignore_merges_, "model"));
    DSV41_TRY(get_bool(m, "byte_fallback", false, byte_fallback_, "model"));
    DSV41_TRY(get_bool(m, "fuse_unk", false, fuse_unk_, "model"));

    int64_t max_id = -1;
    vocab_.reserve(v->size());
    for (auto it = v->begin(); it != v->end(); ++it) {
      if (!it.value().is_number_integer()) return bad("model.vocab['" + it.key() + "'] must be an integer id");
      const int64_t id = it.value().get<int64_t>();
      if (id < 0 || id >= (int64_t{1} << 30)) return bad("model.vocab['" + it.key() + "'] has id out of range");
      vocab_[it.key()] = static_cast<int32_t>(id);
      max_id = std::max(max_id, id);
    }
    model_tokens_.assign(static_cast<size_t>(max_id + 1), std::string());
    id_kind_.assign(static_cast<size_t>(max_id + 1), kAbsent);
    for (const auto& [tok, id] : vocab_) {
      if (id_kind_[id] == kModel) warnings_.push_back("model.vocab has two tokens with id " + std::to_string(id));
      model_tokens_[id] = tok;
      id_kind_[id] = kModel;
    }
    std::string unk;
    DSV41_TRY(get_string(m, "unk_token", unk, "model", false));
    if (!unk.empty()) {
      auto it = vocab_.find(unk);
      if (it == vocab_.end()) return bad("model.unk_token '" + unk + "' is not in the vocabulary");
      unk_id_ = it->second;
    }

    merges_.reserve(mg->size());
    std::string joined;
    for (size_t r = 0; r < mg->size(); ++r) {
      const json& e = (*mg)[r];
      std::string a, b;
      if (e.is_string()) {
        const std::string& s = e.get_ref<const std::string&>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          return bad("model.merges[" + std::to_string(r) + "] '" + s + "' is not two tokens separated by a space");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        a = e[0].get<std::string>();
        b = e[1].get<std::string>();
      } else {
        return bad("model.merges[" + std::to_string(r) + "] must be \"a b\" or [\"a\", \"b\"]");
      }
      auto ia = vocab_.find(a), ib = vocab_.find(b);
      if (ia == vocab_.end() || ib == vocab_.end())
        return bad("model.merges[" + std::to_string(r) + "]: token '" + (ia == vocab_.end() ? a : b) +
                   "' is not in the vocabulary");
      joined = a + b;
      auto ij = vocab_.find(joined);
      if (ij == vocab_.end())
        return bad("model.merges[" + std::to_string(r) + "]: merged token '" + joined + "' is not in the vocabulary");
      merges_.insert(ia->second, ib->second, static_cast<int32_t>(r), ij->second);  // first rank wins
    }
    return Status::Ok();
  }

  Status load_added(const json& arr) {
    if (arr.is_null()) return Status::Ok();
    if (!arr.is_array()) return bad("\"added_tokens\" must be an array");
    std::vector<AddedToken> specials, others;
    std::unordered_set<std::string> special_set, other_set;
    std::unordered_map<int32_t, AddedToken> by_id;
    for (size_t k = 0; k < arr.size(); ++k) {
      const json& o = arr[k];
      const std::string where = "added_tokens[" + std::to_string(k) + "]";
      if (!o.is_object()) return bad(where + " must be an object");
      AddedToken t;
      DSV41_TRY(get_string(o, "content", t.content, where, true));
      if (!utf8::is_valid(t.content)) return bad(where + ".content is not valid UTF-8");
      DSV41_TRY(get_bool(o, "special", false, t.special, where));
      DSV41_TRY(get_bool(o, "single_word", false, t.single_word, where));
      DSV41_TRY(get_bool(o, "lstrip", false, t.lstrip, where));
      DSV41_TRY(get_bool(o, "rstrip", false, t.rstrip, where));
      DSV41_TRY(get_bool(o, "normalized", !t.special, t.normalized, where));
      int64_t file_id = -1;
      if (auto it = o.find("id"); it != o.end() && !it->is_null()) {
        if (!it->is_number_integer()) return bad(where + ".id must be an integer");
        file_id = it->get<int64_t>();
      }
      if (t.content.empty()) continue;
      // AddedVocabulary::add_tokens: a known content keeps its id, a new one gets the next.
      int32_t id;
      if (auto it = added_map_.find(t.content); it != added_map_.end()) {
        id = it->second;
      } else if (auto iv = vocab_.find(t.content); iv != vocab_.end()) {
        id = iv->second;
      } else {
        const int32_t model_size = static_cast<int32_t>(vocab_.size());
        int32_t mx = -1;
        for (const auto& [c, i] : added_map_) mx = std::max(mx, i);
        id = mx < 0 ? model_size : (mx >= model_size || model_size == 0 ? mx + 1 : model_size);
      }
      if (file_id != id)
        warnings_.push_back("added token '" + t.content + "' has id " + std::to_string(file_id) +
                            " in the file; tokenizers assigns " + std::to_string(id));
      t.id = id;
      added_map_[t.content] = id;
      by_id[id] = t;
      if (t.special && special_set.insert(t.content).second) specials.push_back(t);
      else if (!special_set.count(t.content) && other_set.insert(t.content).second) others.push_back(t);
    }
    // Matching order: special tokens, then the others (refresh_added_tokens), each entry
    // carrying the final flags stored for its id.
    for (auto* list : {&specials, &others})
      for (AddedToken& t : *list) {
        const AddedToken& cur = by_id.at(added_map_.at(t.content));
        added_.push_back(cur);
      }
    return Status::Ok();
  }

  Status load(std::string_view text) {
    json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return bad("not valid JSON");
    if (!j.is_object()) return bad("top level must be an object");
    auto model = j.find("model");
    if (model == j.end()) return bad("\"model\" is missing");
    DSV41_TRY(load_model(*model));
    if (auto it = j.find("normalizer"); it != j.end()) DSV41_TRY(load_normalizer(*it, "normalizer"));
    if (auto it = j.find("pre_tokenizer"); it != j.end()) DSV41_TRY(load_pre_tokenizer(*it, "pre_tokenizer"));
    if (auto it = j.find("decoder"); it != j.end()) DSV41_TRY(load_decoder(*it));
    if (auto it = j.find("added_tokens"); it != j.end()) DSV41_TRY(load_added(*it));

    // Ids: model vocabulary plus added tokens.
    for (size_t k = 0; k < added_.size(); ++k) {
      const int32_t id = added_[k].id;
      if (static_cast<size_t>(id) >= id_kind_.size()) {
        id_kind_.resize(id + 1, kAbsent);
        model_tokens_.resize(id + 1);
      }
      id_kind_[id] = added_[k].special ? kSpecial : kAdded;
      added_by_id_[id] = k;
    }
    // Matchers: non-normalized tokens on the raw text, the others on normalized text.
    // tokenizers also reports a normalized token by its normalized content.
    Scratch sc;
    added_text_.resize(added_.size());
    for (size_t k = 0; k < added_.size(); ++k) {
      if (!added_[k].normalized) {
        raw_added_.add(added_[k].content, static_cast<int32_t>(k));
        added_text_[k] = added_[k].content;
      } else {
        added_text_[k] = normalizers_.empty() ? added_[k].content : normalize(added_[k].content, sc);
        norm_added_.add(added_text_[k], static_cast<int32_t>(k));
      }
    }
    // Byte-level tables.
    const auto b2c = detail::byte_to_codepoint();
    std::unordered_map<uint32_t, unsigned char> c2b;
    for (int b = 0; b < 256; ++b) {
      c2b[b2c[b]] = static_cast<unsigned char>(b);
      byte_chars_[b].clear();
      utf8::append(byte_chars_[b], b2c[b]);
      auto it = vocab_.find(byte_chars_[b]);
      byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
    }
    auto unmap = [&](const std::string& tok, std::string& raw) {
      raw.clear();
      const auto* p = reinterpret_cast<const unsigned char*>(tok.data());
      for (size_t i = 0; i < tok.size();) {
        auto it = c2b.find(utf8::next(p, i));
        if (it == c2b.end()) return false;
        raw.push_back(static_cast<char>(it->second));
      }
      return true;
    };
    std::string raw;
    if (byte_level_) {
      raw_vocab_.reserve(vocab_.size());
      for (const auto& [tok, id] : vocab_)
        if (unmap(tok, raw)) raw_vocab_.emplace(raw, id);
    }
    // Like tokenizers, skipping tests the token's text against the special contents (so a
    // special token reported by a normalized text that differs is not skipped).
    std::unordered_set<std::string_view> special_text;
    for (const AddedToken& a : added_)
      if (a.special) special_text.insert(a.content);
    decoded_.assign(id_kind_.size(), std::string());
    skippable_.assign(id_kind_.size(), 0);
    for (size_t id = 0; id < id_kind_.size(); ++id) {
      const std::string* s = token_string(static_cast<int32_t>(id));
      if (!s) continue;
      decoded_[id] = byte_level_decoder_ && unmap(*s, raw) ? raw : *s;
      skippable_[id] = special_text.count(*s) ? 1 : 0;
    }
    return Status::Ok();
  }
};

}  // namespace dsv41::text
