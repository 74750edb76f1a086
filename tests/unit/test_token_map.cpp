// The Engram token map built from tokenizer.json (SPEC §4.8) against the reference's, computed with
// the `tokenizers` package by tools/gen_token_map_cases.py; loading a model without its map file.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <dsv41/engram/token_map.hpp>
#include <dsv41/text/engram_vocabulary.hpp>
#include <dsv41/io/safetensors.hpp>
#include <dsv41/model/model.hpp>
#include <dsv41/text/tokenizer.hpp>

#include "fixture.hpp"

#ifndef DSV41_TEST_DATA
#define DSV41_TEST_DATA "tests/data"
#endif
#ifndef DSV41_MODELS_DIR
#define DSV41_MODELS_DIR DSV41_TEST_DATA "/../../models"
#endif

using namespace dsv41;
namespace fs = std::filesystem;

namespace {
const std::string kMaps = DSV41_TEST_DATA "/engram/token_maps";
const std::string kTinyPy = DSV41_MODELS_DIR "/dsv41-tiny-py";

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Reader {
  const std::string& s;
  size_t i = 0;
  uint32_t u32() {
    REQUIRE(i + 4 <= s.size());
    uint32_t v;
    std::memcpy(&v, s.data() + i, 4);
    i += 4;
    return v;
  }
  uint64_t u64() {
    REQUIRE(i + 8 <= s.size());
    uint64_t v;
    std::memcpy(&v, s.data() + i, 8);
    i += 8;
    return v;
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      REQUIRE(i < s.size());
      const auto b = uint8_t(s[i++]);
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
  }
  std::string bytes(size_t n) {
    REQUIRE(i + n <= s.size());
    std::string r = s.substr(i, n);
    i += n;
    return r;
  }
  void magic(const char* m) { REQUIRE(bytes(8) == m); }
};

struct Expected {
  std::vector<int32_t> map;
  int64_t compressed = 0;
};

Expected read_map(const std::string& path) {
  const std::string data = slurp(path);
  Reader r{data};
  r.magic("DSV41TM1");
  Expected e;
  e.map.resize(r.u32());
  e.compressed = r.u32();
  int32_t next = 0;
  for (auto& v : e.map) {
    const uint64_t x = r.varint();
    v = x == 0 ? next++ : int32_t(x - 1);
  }
  CHECK(r.i == data.size());
  CHECK(next == e.compressed);
  return e;
}

struct Case {
  std::string name, path;
  int64_t rows = 0, compressed = 0;
};

std::vector<Case> read_cases() {
  std::ifstream f(kMaps + "/cases.txt");
  REQUIRE(f.good());
  std::vector<Case> out;
  for (std::string line; std::getline(f, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    Case c;
    std::string root, rel;
    ls >> c.name >> root >> rel >> c.rows >> c.compressed;
    REQUIRE(!ls.fail());
    c.path = (root == "models" ? std::string(DSV41_MODELS_DIR) : std::string(DSV41_TEST_DATA)) + "/" + rel;
    out.push_back(c);
  }
  return out;
}

std::vector<int32_t> shipped_tiny_py_map() {
  auto f = st::File::open(kTinyPy + "/engram_token_map.safetensors");
  REQUIRE(f.ok());
  const st::TensorView* t = f->find("token_map");
  REQUIRE(t);
  auto v = t->to_vector<int32_t>();
  REQUIRE(v.ok());
  return std::move(v).value();
}

uint64_t fnv1a(uint64_t h, std::string_view s) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

std::string utf8_of(uint32_t cp) {
  std::string s;
  utf8::append(s, cp);
  return s;
}

std::vector<float> logits_of(const std::string& dir, const std::vector<int32_t>& ids) {
  auto m = Model<>::load(dir);
  REQUIRE(m.ok());
  auto st = (*m)->new_sequence(64);
  std::vector<float> logits;
  REQUIRE((*m)->prefill(st, ids, &logits).ok());
  return logits;
}

// A copy of dsv41-tiny-py without engram_token_map.safetensors.
fs::path copy_without_map(const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / ("dsv41_token_map_" + tag);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(kTinyPy))
    if (e.path().filename() != "engram_token_map.safetensors") fs::copy_file(e.path(), dir / e.path().filename());
  return dir;
}
}  // namespace

TEST_CASE("token maps built from tokenizer.json equal the reference's", "[engram][token_map]") {
  const auto cases = read_cases();
  REQUIRE(cases.size() >= 8);
  for (const Case& c : cases) {
    INFO(c.name << " " << c.path);
    if (!fs::exists(c.path)) {
      WARN("missing " << c.path << ": case " << c.name << " skipped");
      continue;
    }
    const Expected want = read_map(kMaps + "/" + c.name + ".bin");
    REQUIRE(int64_t(want.map.size()) == c.rows);
    REQUIRE(want.compressed == c.compressed);
    auto tok = text::Tokenizer::from_json_file(c.path);
    REQUIRE(tok.ok());
    auto got = engram::build_token_map(text::engram_vocabulary(*tok), int32_t(c.rows));
    REQUIRE(got.ok());
    CHECK(got->tokenizer_rows == c.rows);
    CHECK(got->compressed_vocab_size == c.compressed);
    size_t bad = 0, first_bad = 0;
    for (size_t i = 0; i < want.map.size(); ++i)
      if (got->map[i] != want.map[i] && bad++ == 0) first_bad = i;
    INFO("first differing id " << first_bad << ": " << got->map[first_bad] << " vs " << want.map[first_bad]);
    CHECK(bad == 0);
    CHECK(engram::check_compressed_size(*got, c.compressed).ok());
  }
}

TEST_CASE("the key normalizer equals tokenizers' on every code point and on mixed strings", "[engram][token_map]") {
  const std::string data = slurp(kMaps + "/normalize.bin");
  Reader r{data};
  r.magic("DSV41NK1");
  const uint32_t block = r.u32(), n_blocks = r.u32();
  REQUIRE(uint64_t(block) * n_blocks == 0x110000);
  std::string bad_blocks;
  for (uint32_t b = 0; b < n_blocks; ++b) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (uint32_t cp = b * block; cp < (b + 1) * block; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      h = fnv1a(h, engram::normalize_token_text(utf8_of(cp)));
      h = fnv1a(h, "\xff");
    }
    if (h != r.u64()) {
      char name[16];
      std::snprintf(name, sizeof name, " U+%04X", b * block);
      bad_blocks += name;
    }
  }
  INFO("blocks that differ (first code point):" << bad_blocks);
  CHECK(bad_blocks.empty());
  const uint32_t n = r.u32();
  size_t bad = 0;
  for (uint32_t k = 0; k < n; ++k) {
    const std::string in = r.bytes(r.varint());
    const std::string want = r.bytes(r.varint());
    const std::string got = engram::normalize_token_text(in);
    if (got != want && bad++ < 5) CHECK(got == want);
  }
  CHECK(bad == 0);
  CHECK(r.i == data.size());
}

TEST_CASE("the key normalizer's paths", "[engram][token_map]") {
  using engram::normalize_token_text;
  CHECK(normalize_token_text("\xC4\xB0") == "i");                    // İ: NFD, accent stripped
  CHECK(normalize_token_text("\xC3\x9F") == "\xC3\x9F");             // ß stays
  CHECK(normalize_token_text("\xE1\xBA\x9E") == "\xC3\x9F");         // ẞ -> ß
  CHECK(normalize_token_text("\xC7\x85") == "dz");                   // ǅ -> Dž -> dz
  CHECK(normalize_token_text("\xCE\xA3\xCE\x91\xCE\xA3") == "\xCF\x83\xCE\xB1\xCF\x83");  // ΣΑΣ -> σασ
  CHECK(normalize_token_text("\xEF\xAC\x81") == "fi");                // ﬁ
  CHECK(normalize_token_text("\xEF\xBC\xA1\xEF\xBD\x82") == "ab");    // full-width Ａｂ
  CHECK(normalize_token_text("\xCC\x81").empty());                    // a lone mark vanishes
  CHECK(normalize_token_text(" ") == " ");                            // a lone space is kept
  CHECK(normalize_token_text("\t\n") == " ");
  CHECK(normalize_token_text("\xC2\xA0") == " ");                     // NBSP -> NFKC space
  CHECK(normalize_token_text("  x ") == "x");
  CHECK(normalize_token_text("x\t\t y") == "x y");
  CHECK(normalize_token_text("\xE2\x80\xA8").empty());                // U+2028: stripped, not collapsed
  CHECK(normalize_token_text("x\xE2\x80\xA8 ") == "x");
  CHECK(normalize_token_text("\xEE\x80\x80") == " ");                 // U+E000, the reference's sentinel
  CHECK(normalize_token_text("\xE2\x80\x8B") == "\xE2\x80\x8B");       // ZWSP is not White_Space
  CHECK(normalize_token_text("\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9") ==
        "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9");                 // emoji with ZWJ unchanged
  CHECK(normalize_token_text("\xEA\x9F\x8B") == "\xC9\xA4");           // U+A7CB: Unicode 16 lowercase
  CHECK(normalize_token_text("\xF0\x9F\x85\xAC") == "\xF0\x9F\x85\xAC");  // U+1F16C: NFKC of tokenizers' age
  // keys: a byte fragment by its raw token, an empty normalization by the text
  CHECK(engram::token_key("\xEF\xBF\xBD", "\xC3\xA2\xC4\xA2") == "\xC3\xA2\xC4\xA2");
  CHECK(engram::token_key("\xCC\x81", "x") == "\xCC\x81");
  CHECK(engram::token_key(" The", "x") == "the");
}

TEST_CASE("token ids past the tokenizer and a smaller model vocabulary", "[engram][token_map]") {
  auto tok = text::Tokenizer::from_json_file(kMaps + "/synthetic_holes.json");
  REQUIRE(tok.ok());
  REQUIRE(tok->vocab_size() == 13);  // ids 5..7 unused: len(tokenizer) is 10
  const Expected want = read_map(kMaps + "/synthetic_holes.bin");
  auto big = engram::build_token_map(text::engram_vocabulary(*tok), 16);
  REQUIRE(big.ok());
  CHECK(big->tokenizer_rows == 10);
  CHECK(big->compressed_vocab_size == want.compressed);
  for (size_t i = 0; i < 16; ++i) CHECK(big->map[i] == (i < 10 ? want.map[i] : engram::kNoEntry));
  engram::TokenMap filled = *big;
  REQUIRE(engram::fill_missing(filled, 3).ok());
  for (size_t i = 10; i < 16; ++i) CHECK(filled.map[i] == want.map[3]);
  CHECK(!engram::fill_missing(*big, 12).ok());  // no compressed id to copy
  CHECK(!engram::fill_missing(*big, 16).ok());
  auto small = engram::build_token_map(text::engram_vocabulary(*tok), 4);
  REQUIRE(small.ok());
  CHECK(small->map == std::vector<int32_t>(want.map.begin(), want.map.begin() + 4));
  CHECK(small->compressed_vocab_size == want.compressed);  // counted over every token, as the reference
  CHECK(!engram::build_token_map(text::engram_vocabulary(*tok), 0).ok());
  const Status s = engram::check_compressed_size(*big, want.compressed + 1);
  CHECK(s.code() == Code::mismatch);
  CHECK(s.message().find("engram_compressed_vocab_size") != std::string::npos);
}

TEST_CASE("dsv41-tiny-py: the built map is the shipped one", "[engram][token_map][tiny-py]") {
  if (!fs::exists(kTinyPy + "/tokenizer.json")) {
    WARN("no " << kTinyPy << ": skipped");
    return;
  }
  auto shape = load_config(kTinyPy + "/config.json");
  REQUIRE(shape.ok());
  auto tok = text::Tokenizer::from_json_file(kTinyPy + "/tokenizer.json");
  REQUIRE(tok.ok());
  auto got = engram::build_token_map(text::engram_vocabulary(*tok), shape->vocab_size);
  REQUIRE(got.ok());
  CHECK(got->compressed_vocab_size == shape->engram_compressed_vocab_size);
  CHECK(engram::check_compressed_size(*got, shape->engram_compressed_vocab_size).ok());
  CHECK(got->map == shipped_tiny_py_map());
}

TEST_CASE("dsv41-tiny-py loads without engram_token_map.safetensors", "[engram][token_map][tiny-py][model]") {
  if (!fs::exists(kTinyPy + "/engram_token_map.safetensors")) {
    WARN("no " << kTinyPy << ": skipped");
    return;
  }
  const fs::path dir = copy_without_map("built");
  const std::vector<int32_t> ids = {0, 517, 73, 4021, 12000, 9, 9, 300, 11876, 2};
  const auto want = logits_of(kTinyPy, ids);
  const auto got = logits_of(dir.string(), ids);
  REQUIRE(!want.empty());
  CHECK(got == want);

  SECTION("a compressed size that disagrees with config.json is an error") {
    std::string cfg = slurp((dir / "config.json").string());
    const std::string key = "\"engram_compressed_vocab_size\": 7497";
    const size_t at = cfg.find(key);
    REQUIRE(at != std::string::npos);
    cfg.replace(at, key.size(), "\"engram_compressed_vocab_size\": 7498");
    std::ofstream(dir / "config.json", std::ios::binary | std::ios::trunc) << cfg;
    auto m = Model<>::load(dir.string());
    REQUIRE(!m.ok());
    CHECK(m.status().code() == Code::mismatch);
    CHECK(m.status().message().find("7497") != std::string::npos);
    CHECK(m.status().message().find("7498") != std::string::npos);
  }
  SECTION("neither the map nor tokenizer.json") {
    fs::remove(dir / "tokenizer.json");
    auto m = Model<>::load(dir.string());
    REQUIRE(!m.ok());
    CHECK(m.status().message().find("engram_token_map.safetensors") != std::string::npos);
    CHECK(m.status().message().find("tokenizer.json") != std::string::npos);
  }
  fs::remove_all(dir);
}
