// Byte-level BPE tokenizer against ids from the `tokenizers` package
// (data: tools/tokenizers/train_tokenizers.py and tools/tokenizers/gen_cases.py).
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include <dsv41/text/tokenizer.hpp>

#ifndef DSV41_TEST_DATA
#define DSV41_TEST_DATA "tests/data"
#endif

namespace {

using dsv41::Code;
using dsv41::text::Tokenizer;
namespace utf8 = dsv41::utf8;

const std::string kDir = std::string(DSV41_TEST_DATA) + "/tokenizers/";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Reader {
  const std::string& d;
  size_t p = 0;
  bool ok = true;
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= d.size()) {
        ok = false;
        return 0;
      }
      const auto b = static_cast<unsigned char>(d[p++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    ok = false;
    return 0;
  }
  uint32_t u32() {
    if (p + 4 > d.size()) {
      ok = false;
      return 0;
    }
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) v |= static_cast<uint32_t>(static_cast<unsigned char>(d[p + k])) << (8 * k);
    p += 4;
    return v;
  }
  std::string bytes(size_t n) {
    if (p + n > d.size()) {
      ok = false;
      return {};
    }
    std::string s = d.substr(p, n);
    p += n;
    return s;
  }
  bool magic(const char* m) { return bytes(8) == m; }
  std::vector<int32_t> ids(size_t n) {
    std::vector<int32_t> v(n);
    for (auto& x : v) x = static_cast<int32_t>(varint());
    return v;
  }
};

std::vector<std::string> load_cases() {
  const std::string d = read_file(kDir + "cases.bin");
  Reader r{d};
  std::vector<std::string> out;
  if (!r.magic("DSV41TC1")) return out;
  const uint32_t n = r.u32();
  for (uint32_t i = 0; i < n && r.ok; ++i) out.push_back(r.bytes(r.varint()));
  if (!r.ok) out.clear();
  return out;
}

struct Expected {
  std::vector<std::vector<int32_t>> with, without;
  struct Dec {
    std::vector<int32_t> ids;
    std::string text, text_skip;
  };
  std::vector<Dec> dec;
  bool ok = false;
};

Expected load_expected(const std::string& path) {
  const std::string d = read_file(path);
  Reader r{d};
  Expected e;
  if (!r.magic("DSV41TE1")) return e;
  const uint32_t n = r.u32();
  for (uint32_t i = 0; i < n && r.ok; ++i) e.with.push_back(r.ids(r.varint()));
  for (uint32_t i = 0; i < n && r.ok; ++i) {
    const uint64_t m = r.varint();
    e.without.push_back(m == 0 ? e.with[i] : r.ids(m - 1));
  }
  const uint32_t k = r.u32();
  for (uint32_t i = 0; i < k && r.ok; ++i) {
    Expected::Dec x;
    x.ids = r.ids(r.varint());
    x.text = r.bytes(r.varint());
    x.text_skip = r.bytes(r.varint());
    e.dec.push_back(std::move(x));
  }
  e.ok = r.ok && r.p == d.size();
  return e;
}

// The variant patch format of gen_cases.py: model_set, vocab_add, then set.
std::string patched_json(const std::string& patch_path) {
  const auto patch = nlohmann::json::parse(read_file(patch_path));
  auto base = nlohmann::json::parse(read_file(kDir + patch["base"].get<std::string>() + "/tokenizer.json"));
  if (patch.contains("model_set"))
    for (auto& [k, v] : patch["model_set"].items()) base["model"][k] = v;
  if (patch.contains("vocab_add"))
    for (auto& [k, v] : patch["vocab_add"].items()) base["model"]["vocab"][k] = v;
  if (patch.contains("set"))
    for (auto& [k, v] : patch["set"].items()) base[k] = v;
  return base.dump();
}

std::string show(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 40; ++i) {
    if (i) s += ' ';
    s += std::to_string(v[i]);
  }
  if (v.size() > 40) s += " ...";
  return s;
}

std::string escaped(const std::string& s) {
  std::string o;
  for (unsigned char c : s.substr(0, 120)) {
    if (c >= 32 && c < 127 && c != '\\') o.push_back(static_cast<char>(c));
    else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      o += b;
    }
  }
  return o;
}

struct Tally {
  size_t checked = 0, encode_bad = 0, nospecial_bad = 0, roundtrip_bad = 0, stream_bad = 0, decode_bad = 0;
  std::string first;
  void note(const std::string& what) {
    if (first.size() < 4000) first += what + "\n";
  }
};

// The stream decoder's pieces are valid UTF-8 and concatenate to decode().
bool stream_ok(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip) {
  auto sd = t.stream_decoder(skip);
  std::string all;
  for (int32_t id : ids) {
    const std::string piece = sd.push(id);
    if (!utf8::is_valid(piece)) return false;
    all += piece;
  }
  const std::string tail = sd.flush();
  if (!utf8::is_valid(tail)) return false;
  all += tail;
  return all == t.decode(ids, skip);
}

Tally run_cases(const Tokenizer& t, const std::vector<std::string>& cases, size_t stride, const Expected& e,
                bool roundtrip) {
  Tally y;
  for (size_t i = 0, k = 0; i < cases.size() && k < e.with.size(); i += stride, ++k) {
    const std::string& s = cases[i];
    ++y.checked;
    const auto ids = t.encode(s);
    if (ids != e.with[k]) {
      ++y.encode_bad;
      y.note("case " + std::to_string(i) + " '" + escaped(s) + "'\n  want " + show(e.with[k]) + "\n  got  " + show(ids));
    }
    const auto ids2 = t.encode(s, /*allow_special=*/false);
    if (ids2 != e.without[k]) {
      ++y.nospecial_bad;
      y.note("case " + std::to_string(i) + " (no special) '" + escaped(s) + "'\n  want " + show(e.without[k]) +
             "\n  got  " + show(ids2));
    }
    if (roundtrip && utf8::is_valid(s) && t.decode(ids) != s) {
      ++y.roundtrip_bad;
      y.note("case " + std::to_string(i) + " round trip: '" + escaped(t.decode(ids)) + "'");
    }
    if (!stream_ok(t, ids, false)) {
      ++y.stream_bad;
      y.note("case " + std::to_string(i) + " stream decode differs");
    }
  }
  for (size_t k = 0; k < e.dec.size(); ++k) {
    const auto& d = e.dec[k];
    if (t.decode(d.ids) != d.text || t.decode(d.ids, /*skip_special=*/true) != d.text_skip) {
      ++y.decode_bad;
      y.note("decode check " + std::to_string(k) + " [" + show(d.ids) + "]: want '" + escaped(d.text) + "' got '" +
             escaped(t.decode(d.ids)) + "'");
    }
    if (!stream_ok(t, d.ids, false) || !stream_ok(t, d.ids, true)) {
      ++y.stream_bad;
      y.note("decode check " + std::to_string(k) + " stream decode differs");
    }
  }
  return y;
}

void report(const std::string& name, const Tally& y) {
  INFO(name << ": " << y.checked << " cases, " << y.encode_bad << " encode mismatches, " << y.nospecial_bad
            << " without-special mismatches, " << y.roundtrip_bad << " round-trip failures, " << y.stream_bad
            << " stream-decoder failures, " << y.decode_bad << " decode mismatches\n"
            << y.first);
  CHECK(y.checked > 0);
  CHECK(y.encode_bad == 0);
  CHECK(y.nospecial_bad == 0);
  CHECK(y.roundtrip_bad == 0);
  CHECK(y.stream_bad == 0);
  CHECK(y.decode_bad == 0);
}

}  // namespace

TEST_CASE("tokenizer: ids equal the tokenizers package on every generated case", "[tokenizer]") {
  const auto cases = load_cases();
  REQUIRE(cases.size() >= 10000);
  for (const char* name : {"gpt2", "llama3", "dsv3"}) {
    DYNAMIC_SECTION(name) {
      auto t = Tokenizer::from_json_file(kDir + name + "/tokenizer.json");
      REQUIRE(t.ok());
      const Expected e = load_expected(kDir + name + "/expected.bin");
      REQUIRE(e.ok);
      REQUIRE(e.with.size() == cases.size());
      const Tally y = run_cases(*t, cases, 1, e, /*roundtrip=*/true);
      CHECK(y.checked == cases.size());
      report(name, y);
    }
  }
}

TEST_CASE("tokenizer: option variants (normalizers, split behaviors, added-token flags)", "[tokenizer]") {
  const auto cases = load_cases();
  REQUIRE(!cases.empty());
  const size_t stride = 6;  // gen_cases.py STRIDE
  for (const char* name : {"gpt2_prefix_nfkc", "llama3_splits", "dsv3_merged_next", "dsv3_o200k",
                           "gpt2_byte_fallback", "gpt2_unk", "gpt2_patterns"}) {
    DYNAMIC_SECTION(name) {
      auto t = Tokenizer::from_json_string(patched_json(kDir + "variants/" + name + ".json"));
      INFO(t.status().to_string());
      REQUIRE(t.ok());
      const Expected e = load_expected(kDir + "variants/" + name + ".bin");
      REQUIRE(e.ok);
      REQUIRE(e.with.size() == (cases.size() + stride - 1) / stride);
      const Tally y = run_cases(*t, cases, stride, e, /*roundtrip=*/false);
      CHECK(y.checked == e.with.size());
      report(name, y);
    }
  }
}

TEST_CASE("tokenizer: vocabulary lookups", "[tokenizer]") {
  auto t = Tokenizer::from_json_file(kDir + "dsv3/tokenizer.json");
  REQUIRE(t.ok());
  // Every added token keeps the id tokenizers wrote into the file.
  const auto j = nlohmann::json::parse(read_file(kDir + "dsv3/tokenizer.json"));
  for (const auto& a : j["added_tokens"]) {
    const auto id = a["id"].get<int32_t>();
    const auto content = a["content"].get<std::string>();
    CHECK(t->token_to_id(content) == id);
    CHECK(t->id_to_token(id) == content);
    CHECK(t->is_special(id) == a["special"].get<bool>());
  }
  CHECK(t->vocab_size() == 8016);  // get_vocab_size(with_added_tokens=True)
  CHECK(t->warnings().empty());
  CHECK(t->token_to_id("Ġthe").has_value());
  CHECK(!t->token_to_id("no such token").has_value());
  CHECK(!t->id_to_token(-1).has_value());
  CHECK(!t->id_to_token(1 << 20).has_value());
  CHECK(t->encode("").empty());
  CHECK(t->decode(std::vector<int32_t>{}).empty());
  const auto bos = *t->token_to_id("<｜begin▁of▁sentence｜>");
  const auto user = *t->token_to_id("<｜User｜>");
  const auto think = *t->token_to_id("<think>");
  const auto ids = t->encode("<｜begin▁of▁sentence｜><｜User｜>Hi<think>");
  REQUIRE(ids.size() >= 4);
  CHECK(ids[0] == bos);
  CHECK(ids[1] == user);
  CHECK(ids.back() == think);
  // Specials are dropped on request; <think> is a plain added token and stays.
  CHECK(t->decode(ids, /*skip_special=*/true) == "Hi<think>");
  CHECK(t->encode("<｜User｜>", /*allow_special=*/false).size() > 1);
}

TEST_CASE("tokenizer: stream decoder holds back partial characters", "[tokenizer]") {
  auto t = Tokenizer::from_json_file(kDir + "gpt2/tokenizer.json");
  REQUIRE(t.ok());
  const std::string text = "emoji 👨‍👩‍👧 and 漢字 and é";
  const auto ids = t->encode(text);
  auto sd = t->stream_decoder();
  std::string all;
  for (int32_t id : ids) {
    const std::string p = sd.push(id);
    CHECK(utf8::is_valid(p));
    all += p;
  }
  all += sd.flush();
  CHECK(all == text);
  // A lone lead byte is held, then flushed as one U+FFFD.
  const auto e0 = t->token_to_id("Ã");  // byte 0xC3
  REQUIRE(e0.has_value());
  auto sd2 = t->stream_decoder();
  CHECK(sd2.push(*e0).empty());
  CHECK(sd2.flush() == "\xEF\xBF\xBD");
}

TEST_CASE("tokenizer: malformed or unsupported files are rejected with a message", "[tokenizer]") {
  const std::string good = read_file(kDir + "gpt2/tokenizer.json");
  REQUIRE(Tokenizer::from_json_string(good).ok());
  auto base = nlohmann::json::parse(good);
  auto expect_error = [](const std::string& json, Code code, const std::string& needle) {
    auto r = Tokenizer::from_json_string(json);
    INFO(needle << " -> " << r.status().to_string());
    REQUIRE(!r.ok());
    CHECK(r.status().code() == code);
    CHECK(r.status().message().find(needle) != std::string::npos);
  };
  auto with = [&](auto edit) {
    auto j = base;
    edit(j);
    return j.dump();
  };
  expect_error("{not json", Code::format_error, "not valid JSON");
  expect_error("[1,2]", Code::format_error, "top level");
  expect_error(with([](auto& j) { j.erase("model"); }), Code::format_error, "\"model\" is missing");
  expect_error(with([](auto& j) { j["model"]["type"] = "WordPiece"; }), Code::unsupported, "WordPiece");
  expect_error(with([](auto& j) { j["model"]["vocab"] = 3; }), Code::format_error, "model.vocab");
  expect_error(with([](auto& j) { j["model"]["vocab"]["x"] = "seven"; }), Code::format_error, "integer id");
  expect_error(with([](auto& j) { j["model"]["merges"].push_back("Ġ nosuchtoken"); }), Code::format_error,
               "nosuchtoken");
  expect_error(with([](auto& j) { j["model"]["merges"].push_back("a b c"); }), Code::format_error, "merges[");
  expect_error(with([](auto& j) { j["model"]["merges"].push_back(42); }), Code::format_error, "merges[");
  expect_error(with([](auto& j) { j["model"]["dropout"] = 0.1; }), Code::unsupported, "dropout");
  expect_error(with([](auto& j) { j["model"]["unk_token"] = "<nope>"; }), Code::format_error, "unk_token");
  expect_error(with([](auto& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; }), Code::unsupported,
               "Metaspace");
  expect_error(with([](auto& j) {
                 j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(ab"}}}, {"behavior", "Isolated"}};
               }),
               Code::format_error, "(ab");
  if (!dsv41::text::Regex::have_oniguruma()) {  // the own engine lacks these; Oniguruma has them
    expect_error(with([](auto& j) {
                   j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(a)\\1"}}}, {"behavior", "Isolated"}};
                 }),
                 Code::unsupported, "escape");
    expect_error(with([](auto& j) {
                   j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\p{Han}"}}}, {"behavior", "Isolated"}};
                 }),
                 Code::unsupported, "han");
  }
  expect_error(with([](auto& j) {
                 j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(((a)"}}}, {"behavior", "Isolated"}};
               }),
               Code::format_error, "(((a)");
  expect_error(with([](auto& j) {
                 j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}};
               }),
               Code::format_error, "Sideways");
  expect_error(with([](auto& j) { j["normalizer"] = {{"type", "Precompiled"}}; }), Code::unsupported, "Precompiled");
  expect_error(with([](auto& j) { j["normalizer"] = {{"type", "Replace"}, {"content", "x"}}; }), Code::format_error,
               "pattern");
  expect_error(with([](auto& j) { j["decoder"] = {{"type", "WordPiece"}}; }), Code::unsupported, "WordPiece");
  expect_error(with([](auto& j) { j["added_tokens"] = "none"; }), Code::format_error, "added_tokens");
  expect_error(with([](auto& j) { j["added_tokens"][0].erase("content"); }), Code::format_error, "content");
  auto missing = Tokenizer::from_json_file(kDir + "no/such/tokenizer.json");
  REQUIRE(!missing.ok());
  CHECK(missing.status().code() == Code::io_error);
}

TEST_CASE("tokenizer: deep nesting and pathological split patterns", "[tokenizer]") {
  const std::string good = read_file(kDir + "gpt2/tokenizer.json");
  const auto base = nlohmann::json::parse(good);
  // Normalizer, pre-tokenizer and decoder Sequences nested 30,000 deep: refused, no stack overflow.
  const int d = 30000;
  auto nested = [&](const char* key, const char* list, nlohmann::json leaf) {
    std::string s = leaf.dump();
    std::string open, close;
    for (int i = 0; i < d; ++i) {
      open += std::string("{\"type\":\"Sequence\",\"") + list + "\":[";
      close += "]}";
    }
    auto j = base;
    j.erase(key);
    std::string txt = j.dump();
    txt.insert(1, std::string("\"") + key + "\":" + open + s + close + ",");
    return txt;
  };
  for (const auto& txt : {nested("normalizer", "normalizers", {{"type", "NFC"}}),
                          nested("pre_tokenizer", "pretokenizers", {{"type", "ByteLevel"}}),
                          nested("decoder", "decoders", {{"type", "ByteLevel"}})}) {
    auto r = Tokenizer::from_json_string(txt);
    INFO(r.status().to_string());
    REQUIRE(!r.ok());
    CHECK(r.status().code() == Code::format_error);
    CHECK(r.status().message().find("nested") != std::string::npos);
  }
  // A regex nested 30,000 deep in a Split pattern.
  {
    auto j = base;
    j["pre_tokenizer"] = {{"type", "Split"},
                          {"pattern", {{"Regex", std::string(d, '(') + "a" + std::string(d, ')')}}},
                          {"behavior", "Isolated"}};
    auto r = Tokenizer::from_json_string(j.dump());
    INFO(r.status().to_string());
    CHECK(!r.ok());
  }
  // A split pattern that backtracks exponentially: try_encode says so, encode still returns ids
  // (the refused piece unsplit), and ordinary text is unaffected.
  auto j = base;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"}, {"pattern", {{"Regex", "(\\s*)+$"}}}, {"behavior", "Isolated"}},
                          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}};
  auto t = Tokenizer::from_json_string(j.dump());
  INFO(t.status().to_string());
  REQUIRE(t.ok());
  const std::string bad = std::string(100000, ' ') + "x";
  auto r = t->try_encode(bad);
  REQUIRE(!r.ok());
  CHECK(r.status().code() == Code::resource_exhausted);
  CHECK(r.status().message().find("refused") != std::string::npos);
  CHECK(!t->encode(bad).empty());
  auto g = Tokenizer::from_json_string(good);
  REQUIRE(g.ok());
  auto ok = t->try_encode("Hello world  ");
  REQUIRE(ok.ok());
  CHECK(*ok == g->encode("Hello world  "));
}
