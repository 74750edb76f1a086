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
//
// The parts: added_tokens.hpp, tokenizer_steps.hpp (state, normalization, pre-tokenizer
// splitting), tokenizer_json.hpp (loading); BPE merging is in bpe.hpp.
#pragma once
#include <utf8proc.h>

#include <algorithm>
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

#include <dsv41/core/read_file.hpp>
#include <dsv41/core/status.hpp>
#include <dsv41/text/added_tokens.hpp>
#include <dsv41/text/bpe.hpp>
#include <dsv41/text/prompt_text.hpp>
#include <dsv41/text/tokenizer_json.hpp>
#include <dsv41/text/tokenizer_steps.hpp>
#include <dsv41/text/unicode_regex.hpp>
#include <dsv41/core/utf8.hpp>

namespace dsv41::text {

class Tokenizer : private detail::TokenizerJson {
 public:
  static constexpr uintmax_t kMaxTokenizerJsonBytes = uintmax_t(256) << 20;  // the release's is ~8 MB
  static Result<Tokenizer> from_json_file(const std::string& path) {
    auto text = read_small_file(path, kMaxTokenizerJsonBytes);
    if (!text.ok()) return Status(text.status().code(), "tokenizer file: " + text.status().message());
    auto r = from_json_string(*text);
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
  // ordinary text (like `tokenizers`' encode_special_tokens = True). A pre-tokenizer or
  // normalizer regex search that its engine refuses (a pathological pattern on this input: see
  // Regex::step_budget and regex_onig.hpp) leaves the rest of that piece unsplit; try_encode
  // reports it instead.
  std::vector<int32_t> encode(std::string_view utf8, bool allow_special = true) const {
    Scratch sc;
    return encode_with(utf8, allow_special, {}, sc);
  }

  // Token ids of a rendered prompt: special-token text is recognised outside p.literal only (prompt_text.hpp).
  std::vector<int32_t> encode(const PromptText& p) const { return encode(p.text, p.literal); }
  std::vector<int32_t> encode(std::string_view utf8, std::span<const TextRange> literal) const {
    Scratch sc;
    if (literal.empty() || utf8::is_valid(utf8)) return encode_with(utf8, true, literal, sc);
    // Repaired piece by piece, so the ranges still hold the client's text.
    PromptText fixed;
    size_t at = 0;
    for (const TextRange& r : literal) {
      const size_t b = std::min(r.begin, utf8.size()), e = std::min(std::max(r.end, b), utf8.size());
      if (b < at) continue;  // not sorted and disjoint: that range is ignored
      fixed += utf8::to_valid(utf8.substr(at, b - at));
      fixed.add_literal(utf8::to_valid(utf8.substr(b, e - b)));
      at = e;
    }
    fixed += utf8::to_valid(utf8.substr(at));
    return encode_with(fixed.text, true, fixed.literal, sc);
  }

  // encode(), or the resource_exhausted Status of a refused regex search.
  Result<std::vector<int32_t>> try_encode(std::string_view utf8, bool allow_special = true) const {
    Scratch sc;
    std::vector<int32_t> ids = encode_with(utf8, allow_special, {}, sc);
    if (!sc.regex_error.ok()) return Status(sc.regex_error.code(), "tokenizer: " + sc.regex_error.message());
    return Result<std::vector<int32_t>>(std::move(ids));
  }

 private:
  // Byte ranges of the text split_added() scans in which special tokens are text.
  struct Literal {
    std::span<const TextRange> r;
    // The first range that overlaps [b, e) (offsets in the scanned text), or null.
    const TextRange* overlap(size_t b, size_t e) const {
      auto it = std::upper_bound(r.begin(), r.end(), b, [](size_t x, const TextRange& t) { return x < t.end; });
      return it != r.end() && it->begin < e ? &*it : nullptr;
    }
  };

  std::vector<int32_t> encode_with(std::string_view utf8, bool allow_special, std::span<const TextRange> literal,
                                   Scratch& sc) const {
    std::vector<int32_t> out;
    std::string repaired;
    if (!utf8::is_valid(utf8)) {  // (with literal ranges the caller repaired it)
      repaired = utf8::to_valid(utf8);
      utf8 = repaired;
    }
    out.reserve(utf8.size() / 3 + 4);
    const Literal lit{literal};
    split_added(utf8, raw_added_, allow_special, lit, [&](std::string_view piece, int32_t id) {
      if (id >= 0) {
        out.push_back(id);
        return;
      }
      // The second pass (normalized added tokens) finds no special token in a piece that holds client text.
      const size_t off = static_cast<size_t>(piece.data() - utf8.data());
      const bool special = allow_special && !lit.overlap(off, off + piece.size());
      if (normalizers_.empty()) {
        encode_normalized(piece, special, sc, out);
      } else {
        std::string norm = normalize(piece, sc);
        encode_normalized(norm, special, sc, out);
      }
    });
    return out;
  }

 public:
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

  // The bytes id decodes to (byte-level models: possibly part of a UTF-8 character), as decode() would add them;
  // nullopt for an unknown id.
  std::optional<std::string> token_bytes(int32_t id) const {
    const std::string* b = decoded(id, false);
    if (!b) return std::nullopt;
    return byte_level_decoder_ ? *b : *token_string(id);
  }

  // One past the largest id of the model vocabulary and the added tokens.
  size_t vocab_size() const { return id_kind_.size(); }

  bool is_special(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < id_kind_.size() && id_kind_[id] == kSpecial; }

  const std::vector<AddedToken>& added_tokens() const { return added_; }

  // Non-fatal remarks from loading (e.g. an added token whose id in the file differs from
  // the one `tokenizers` assigns, which is the one used).
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  // Splits `text` on added tokens the way `tokenizers` does (AddedVocabulary::find_matches);
  // calls f(piece, id) with id = -1 for text between added tokens.
  template <class F>
  void split_added(std::string_view text, const detail::AddedMatcher& m, bool allow_special, const Literal& lit,
                   F&& f) const {
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
      if (a.special && !lit.r.empty()) {
        if (const TextRange* t = lit.overlap(ms, me)) {
          // Client text: no control token. Scanning resumes where that text ends when the match ran past it.
          const size_t te = t->end;
          if (te > ms && te < me) pos = te;
          continue;
        }
      }
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
    split_added(text, norm_added_, allow_special, Literal{}, [&](std::string_view piece, int32_t id) {
      if (id >= 0) out.push_back(id);
      else if (!piece.empty()) encode_piece(piece, sc, out);
    });
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
};

}  // namespace dsv41::text
