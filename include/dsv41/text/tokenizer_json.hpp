// Loading a Hugging Face tokenizer.json into a Tokenizer's configuration. Host only: uses
// nlohmann-json.
#pragma once
#include <utf8proc.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <dsv41/core/status.hpp>
#include <dsv41/text/added_tokens.hpp>
#include <dsv41/text/bpe.hpp>
#include <dsv41/text/tokenizer_steps.hpp>
#include <dsv41/text/unicode_regex.hpp>
#include <dsv41/core/utf8.hpp>

namespace dsv41::text {

namespace detail {

// Loads tokenizer.json into the configuration of TokenizerSteps; rejects what is not supported
// (see <dsv41/text/tokenizer.hpp>).
class TokenizerJson : protected TokenizerSteps {
 protected:
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

  // Sequences nest at most this deep (the loaders recurse; a hostile file may nest thousands).
  static constexpr int kMaxSequenceDepth = 64;

  Status load_normalizer(const json& o, const std::string& where, int depth = 0) {
    if (o.is_null()) return Status::Ok();
    if (depth > kMaxSequenceDepth) return bad(where + ": Sequences nested more than " + std::to_string(kMaxSequenceDepth) + " deep");
    std::string type;
    DSV41_TRY(get_type(o, type, where));
    NormStep n;
    if (type == "Sequence") {
      auto it = o.find("normalizers");
      if (it == o.end() || !it->is_array()) return bad(where + ".normalizers must be an array");
      for (size_t k = 0; k < it->size(); ++k) DSV41_TRY(load_normalizer((*it)[k], where + ".normalizers[" + std::to_string(k) + "]", depth + 1));
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

  Status load_pre_tokenizer(const json& o, const std::string& where, int depth = 0) {
    if (o.is_null()) return Status::Ok();
    if (depth > kMaxSequenceDepth) return bad(where + ": Sequences nested more than " + std::to_string(kMaxSequenceDepth) + " deep");
    std::string type;
    DSV41_TRY(get_type(o, type, where));
    if (!pre_.empty() && pre_.back().type == PreStep::ByteLevel)
      return unsupported(where + ": pre-tokenizers after ByteLevel are not supported");
    PreStep p;
    if (type == "Sequence") {
      auto it = o.find("pretokenizers");
      if (it == o.end() || !it->is_array()) return bad(where + ".pretokenizers must be an array");
      for (size_t k = 0; k < it->size(); ++k)
        DSV41_TRY(load_pre_tokenizer((*it)[k], where + ".pretokenizers[" + std::to_string(k) + "]", depth + 1));
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

  Status load_decoder(const json& o, int depth = 0) {
    if (o.is_null()) return Status::Ok();
    if (depth > kMaxSequenceDepth) return bad("decoder: Sequences nested more than " + std::to_string(kMaxSequenceDepth) + " deep");
    std::string type;
    DSV41_TRY(get_type(o, type, "decoder"));
    if (type == "ByteLevel") {
      byte_level_decoder_ = true;
      return Status::Ok();
    }
    if (type == "Sequence") {
      auto it = o.find("decoders");
      if (it != o.end() && it->is_array() && it->size() == 1) return load_decoder((*it)[0], depth + 1);
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
    const auto b2c = byte_to_codepoint();
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

}  // namespace detail

}  // namespace dsv41::text
