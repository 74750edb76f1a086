// dsv41::st: the safetensors reader (valid files, every malformed file of the corpus, the golden
// fixture, random corruption) and the writer (round trips, bad input).
#include <dsv41/io/safetensors.hpp>

#include <catch2/catch.hpp>

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#ifndef DSV41_TEST_DATA
#define DSV41_TEST_DATA "tests/data"
#endif

namespace st = dsv41::st;
namespace fs = std::filesystem;
using dsv41::Code;

namespace {

std::string corpus(const std::string& rel) {
  return std::string(DSV41_TEST_DATA) + "/safetensors/" + rel;
}
std::string golden(const std::string& rel) {
  return std::string(DSV41_TEST_DATA) + "/golden/tiny-ced/" + rel;
}

bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

// A fresh directory under /tmp, removed with its contents at scope exit.
struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "dsv41_st_XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

std::vector<std::byte> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(c.size());
  if (!c.empty()) std::memcpy(b.data(), c.data(), c.size());
  return b;
}

void write_all(const std::string& path, const std::vector<std::byte>& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  REQUIRE(out.good());
}

template <class T>
std::vector<std::byte> to_bytes(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

template <class T>
std::vector<T> values(const st::TensorView& t) {
  auto r = t.to_vector<T>();
  REQUIRE(r.ok());
  return r.value();
}

const st::TensorView& need(const st::File& f, std::string_view name) {
  const st::TensorView* t = f.find(name);
  INFO("tensor " << std::string(name));
  REQUIRE(t != nullptr);
  return *t;
}

// Views must lie inside the mapping, and their sizes must match shape x dtype.
void check_views_inside(const st::File& f) {
  const auto raw = f.raw_bytes();
  for (const auto& n : f.names()) {
    const st::TensorView& t = need(f, n);
    REQUIRE(t.nbytes == static_cast<size_t>(t.numel()) * st::dtype_size(t.dtype));
    REQUIRE(t.data >= raw.data() + f.data_offset());
    REQUIRE(t.data + t.nbytes <= raw.data() + raw.size());
    REQUIRE(t.name == n);
    REQUIRE(t.file == &f.path());
  }
}

}  // namespace

TEST_CASE("dtype names, sizes and parsing", "[safetensors]") {
  const std::map<std::string, size_t> expect = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},   {"I16", 2}, {"I32", 4},     {"I64", 8},
      {"F16", 2},  {"BF16", 2}, {"F32", 4}, {"F64", 8}, {"F8_E4M3", 1}, {"F8_E8M0", 1}};
  REQUIRE(std::size(st::kAllDTypes) == expect.size());
  for (st::DType t : st::kAllDTypes) {
    INFO(st::dtype_name(t));
    REQUIRE(expect.count(st::dtype_name(t)) == 1);
    CHECK(st::dtype_size(t) == expect.at(st::dtype_name(t)));
    auto p = st::parse_dtype(st::dtype_name(t));
    REQUIRE(p.has_value());
    CHECK(*p == t);
  }
  for (const char* bad : {"", "f32", "F33", "U32", "F8_E5M2", "F32 ", "float32"})
    CHECK_FALSE(st::parse_dtype(bad).has_value());
}

TEST_CASE("valid: every dtype reads back exactly", "[safetensors]") {
  const std::string path = corpus("valid/all_dtypes.safetensors");
  auto r = st::File::open(path);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  const st::File& f = *r;
  CHECK(f.path() == path);
  CHECK(f.size() == fs::file_size(path));
  CHECK(f.data_offset() % 8 == 0);
  CHECK(f.metadata() == std::map<std::string, std::string>{
                            {"format", "pt"}, {"source", "gen_malformed_safetensors.py"}});
  std::vector<std::string> want;
  for (st::DType t : st::kAllDTypes) want.push_back(std::string("t.") + st::dtype_name(t));
  std::sort(want.begin(), want.end());
  CHECK(f.names() == want);
  CHECK(f.num_tensors() == 12);
  check_views_inside(f);
  for (st::DType t : st::kAllDTypes) {
    const auto& v = need(f, std::string("t.") + st::dtype_name(t));
    CHECK(v.dtype == t);
  }

  const auto& f64 = need(f, "t.F64");
  CHECK(f64.shape == std::vector<int64_t>{2});
  auto d = values<double>(f64);
  CHECK(d[0] == 3.141592653589793);
  CHECK(d[1] == 0.0);
  CHECK(std::signbit(d[1]));
  CHECK(values<int64_t>(need(f, "t.I64")) ==
        std::vector<int64_t>{std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()});
  const auto& f32 = need(f, "t.F32");
  CHECK(f32.shape == std::vector<int64_t>{2, 2});
  CHECK(f32.numel() == 4);
  CHECK(values<float>(f32) == std::vector<float>{0.5f, -1.25f, 3.0f, 1024.0f});
  CHECK(values<int32_t>(need(f, "t.I32")) ==
        std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 0, std::numeric_limits<int32_t>::max()});
  CHECK(values<uint16_t>(need(f, "t.F16")) == std::vector<uint16_t>{0x3C00, 0xC000, 0x3800});
  CHECK(values<uint16_t>(need(f, "t.BF16")) == std::vector<uint16_t>{0x3F80, 0xC000, 0x3F00});
  CHECK(values<int16_t>(need(f, "t.I16")) == std::vector<int16_t>{-32768, 32767});
  CHECK(values<uint8_t>(need(f, "t.BOOL")) == std::vector<uint8_t>{1, 0, 1});
  CHECK(values<uint8_t>(need(f, "t.U8")) == std::vector<uint8_t>{0, 1, 127, 255});
  CHECK(values<int8_t>(need(f, "t.I8")) == std::vector<int8_t>{-128, -1, 0, 127});
  CHECK(values<uint8_t>(need(f, "t.F8_E4M3")) == std::vector<uint8_t>{0x38, 0xB8, 0x7E, 0x00});
  CHECK(need(f, "t.F8_E4M3").shape == std::vector<int64_t>{2, 2});
  CHECK(values<uint8_t>(need(f, "t.F8_E8M0")) == std::vector<uint8_t>{127, 128, 0});

  // In-place views: aligned here, so as<T>() works; the wrong element size is refused.
  auto sp = f32.as<float>();
  REQUIRE(sp.size() == 4);
  CHECK(static_cast<const void*>(sp.data()) == static_cast<const void*>(f32.data));
  CHECK(sp[3] == 1024.0f);
  CHECK(f32.as<uint16_t>().empty());
  CHECK(f32.as<double>().empty());
  auto bad = f32.try_as<uint16_t>();
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == Code::mismatch);
  CHECK(contains(bad.status().message(), "'t.F32'"));
  CHECK(contains(bad.status().message(), "all_dtypes.safetensors"));
  auto good = f32.try_as<float>();
  REQUIRE(good.ok());
  CHECK(good->size() == 4);
  CHECK_FALSE(f32.to_vector<int64_t>().ok());
  CHECK(f.find("t.f32") == nullptr);
  CHECK(f.find("") == nullptr);
}

TEST_CASE("valid: views survive moving the File", "[safetensors]") {
  auto r = st::File::open(corpus("valid/all_dtypes.safetensors"));
  REQUIRE(r.ok());
  const st::TensorView* p = r->find("t.U8");
  REQUIRE(p != nullptr);
  st::File f = std::move(r).value();
  st::File g = std::move(f);
  CHECK(g.find("t.U8") == p);
  CHECK(p->name == "t.U8");
  CHECK(*p->file == corpus("valid/all_dtypes.safetensors"));
  CHECK(values<uint8_t>(*p) == std::vector<uint8_t>{0, 1, 127, 255});
}

TEST_CASE("valid: empty tensors and a 0-d scalar", "[safetensors]") {
  auto r = st::File::open(corpus("valid/empty_and_scalar.safetensors"));
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  check_views_inside(*r);
  CHECK(r->names() == std::vector<std::string>{"after", "empty", "empty1d", "empty_end", "scalar"});
  const auto& s = need(*r, "scalar");
  CHECK(s.shape.empty());
  CHECK(s.numel() == 1);
  CHECK(s.nbytes == 8);
  CHECK(values<double>(s) == std::vector<double>{42.5});
  for (const char* n : {"empty", "empty1d", "empty_end"}) {
    const auto& e = need(*r, n);
    CHECK(e.numel() == 0);
    CHECK(e.nbytes == 0);
    CHECK(e.bytes().empty());
  }
  CHECK(need(*r, "empty").shape == std::vector<int64_t>{0, 3});
  CHECK(need(*r, "empty").as<float>().empty());
  CHECK(need(*r, "empty_end").shape == std::vector<int64_t>{5, 0});
  CHECK(values<int32_t>(need(*r, "after")) == std::vector<int32_t>{7, -7});
}

TEST_CASE("valid: no tensors, metadata only, unordered offsets, padding", "[safetensors]") {
  auto none = st::File::open(corpus("valid/no_tensors.safetensors"));
  REQUIRE(none.ok());
  CHECK(none->num_tensors() == 0);
  CHECK(none->names().empty());
  CHECK(none->metadata().empty());

  auto meta = st::File::open(corpus("valid/metadata_only.safetensors"));
  REQUIRE(meta.ok());
  CHECK(meta->num_tensors() == 0);
  CHECK(meta->metadata() == std::map<std::string, std::string>{{"k", "v"}});

  auto un = st::File::open(corpus("valid/unordered_offsets.safetensors"));
  REQUIRE(un.ok());
  CHECK(values<uint8_t>(need(*un, "a_second")) == std::vector<uint8_t>{1, 2});
  CHECK(values<uint8_t>(need(*un, "z_first")) == std::vector<uint8_t>{3, 4});

  auto sp = st::File::open(corpus("valid/trailing_spaces.safetensors"));
  INFO(sp.status().to_string());
  REQUIRE(sp.ok());
  CHECK(values<uint8_t>(need(*sp, "x")) == std::vector<uint8_t>{5});
}

TEST_CASE("valid: misaligned data is refused in place but copies", "[safetensors]") {
  auto r = st::File::open(corpus("valid/unaligned.safetensors"));
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  const auto& f = need(*r, "f");
  REQUIRE(reinterpret_cast<std::uintptr_t>(f.data) % alignof(float) != 0);  // the point of the file
  CHECK_FALSE(f.viewable_as<float>());
  CHECK(f.as<float>().empty());
  auto t = f.try_as<float>();
  REQUIRE_FALSE(t.ok());
  CHECK(t.status().code() == Code::mismatch);
  CHECK(contains(t.status().message(), "not aligned"));
  CHECK(values<float>(f) == std::vector<float>{1.0f, 2.0f, 3.0f});
  CHECK(values<uint8_t>(need(*r, "u")) == std::vector<uint8_t>{9});
  CHECK(need(*r, "u").as<uint8_t>().size() == 1);  // bytes are always aligned
}

TEST_CASE("valid: checkpoints (sharded, single-file directory, file)", "[safetensors]") {
  auto r = st::Checkpoint::open(corpus("valid/sharded"));
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  const st::Checkpoint& c = *r;
  CHECK(c.num_shards() == 2);
  CHECK(c.names() == std::vector<std::string>{"a", "b", "c"});
  CHECK(c.contains("a"));
  CHECK_FALSE(c.contains("d"));
  auto a = c.get("a");
  REQUIRE(a.ok());
  CHECK(values<float>(*a) == std::vector<float>{1.0f, 2.0f});
  CHECK(contains(*a->file, "model-00001-of-00002.safetensors"));
  auto b = c.get("b");
  REQUIRE(b.ok());
  CHECK(values<int32_t>(*b) == std::vector<int32_t>{3});
  auto cc = c.get("c");
  REQUIRE(cc.ok());
  CHECK(cc->dtype == st::DType::BF16);
  CHECK(values<uint16_t>(*cc) == std::vector<uint16_t>{0x3F80, 0xC000});
  CHECK(contains(*cc->file, "model-00002-of-00002.safetensors"));

  auto missing = c.get("d");
  REQUIRE_FALSE(missing.ok());
  CHECK(contains(missing.status().message(), "'d'"));
  CHECK(contains(missing.status().message(), "not found"));

  auto typed = c.get("a", st::DType::F32, {2});
  CHECK(typed.ok());
  auto wrong = c.get("a", st::DType::BF16, {2});
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.status().code() == Code::mismatch);
  CHECK(contains(wrong.status().message(), "'a'"));
  CHECK(contains(wrong.status().message(), "model-00001-of-00002.safetensors"));
  CHECK(contains(wrong.status().message(), "expected BF16 [2], found F32 [2]"));
  auto wrong_shape = c.get("a", st::DType::F32, {1, 2});
  REQUIRE_FALSE(wrong_shape.ok());
  CHECK(wrong_shape.status().code() == Code::mismatch);

  // Moving the checkpoint keeps views valid.
  st::Checkpoint moved = std::move(r).value();
  auto a2 = moved.get("a");
  REQUIRE(a2.ok());
  CHECK(a2->data == a->data);

  auto single = st::Checkpoint::open(corpus("valid/single_dir"));
  REQUIRE(single.ok());
  CHECK(single->num_shards() == 1);
  auto x = single->get("x");
  REQUIRE(x.ok());
  CHECK(values<uint8_t>(*x) == std::vector<uint8_t>{9, 8});

  auto file = st::Checkpoint::open(corpus("valid/all_dtypes.safetensors"));
  REQUIRE(file.ok());
  CHECK(file->num_shards() == 1);
  CHECK(file->names().size() == 12);
  CHECK(file->get("t.I8").ok());
}

namespace {
struct Bad {
  const char* name;
  Code code;
  const char* reason;
};
// Every entry of tests/data/safetensors/malformed/ and the reason its message must contain.
const Bad kMalformed[] = {
    {"empty_file.safetensors", Code::format_error, "shorter than the 8-byte header length prefix"},
    {"short_length_prefix.safetensors", Code::format_error, "shorter than the 8-byte"},
    {"header_length_over_limit.safetensors", Code::format_error, "header length 100000001 exceeds the 100000000-byte limit"},
    {"header_length_u64_max.safetensors", Code::format_error, "header length 18446744073709551615 exceeds the 100000000-byte limit"},
    {"header_length_past_eof.safetensors", Code::format_error, "header length 64 extends past the end of the file (16 bytes)"},
    {"header_length_zero.safetensors", Code::format_error, "header length is 0"},
    {"header_not_json.safetensors", Code::format_error, "header: not valid JSON"},
    {"header_truncated_json.safetensors", Code::format_error, "header: not valid JSON"},
    {"header_not_object.safetensors", Code::format_error, "header does not begin with '{'"},
    {"header_leading_space.safetensors", Code::format_error, "header does not begin with '{'"},
    {"header_nul_padding.safetensors", Code::format_error, "header: not valid JSON: NUL byte at offset 54"},
    {"header_nul_then_garbage.safetensors", Code::format_error, "header: not valid JSON: NUL byte at offset 54"},
    {"header_invalid_utf8.safetensors", Code::format_error, "header: not valid JSON"},
    {"header_trailing_garbage.safetensors", Code::format_error, "header: not valid JSON"},
    {"duplicate_tensor_key.safetensors", Code::format_error, "duplicate key 'w' at the top level"},
    {"duplicate_field_key.safetensors", Code::format_error, "duplicate key 'dtype' inside 'w'"},
    {"duplicate_metadata_key.safetensors", Code::format_error, "duplicate key 'a' inside '__metadata__'"},
    {"metadata_not_object.safetensors", Code::format_error, "__metadata__ must be an object of string -> string, got string"},
    {"metadata_null.safetensors", Code::format_error, "__metadata__ must be an object of string -> string, got null"},
    {"metadata_value_not_string.safetensors", Code::format_error, "__metadata__ value for key 'k' is not a string"},
    {"entry_not_object.safetensors", Code::format_error, "tensor 'w': entry is not an object"},
    {"missing_dtype.safetensors", Code::format_error, "tensor 'w': missing 'dtype'"},
    {"missing_shape.safetensors", Code::format_error, "tensor 'w': missing 'shape'"},
    {"missing_data_offsets.safetensors", Code::format_error, "tensor 'w': missing 'data_offsets'"},
    {"extra_field.safetensors", Code::format_error, "tensor 'w': unexpected field 'offsets'"},
    {"dtype_unknown.safetensors", Code::format_error, "tensor 'w': unknown or unsupported dtype 'F33'"},
    {"dtype_lowercase.safetensors", Code::format_error, "tensor 'w': unknown or unsupported dtype 'f32'"},
    {"dtype_unsupported_u32.safetensors", Code::format_error, "tensor 'w': unknown or unsupported dtype 'U32'"},
    {"dtype_not_string.safetensors", Code::format_error, "tensor 'w': 'dtype' is not a string"},
    {"shape_not_array.safetensors", Code::format_error, "tensor 'w': 'shape' must be an array"},
    {"shape_negative.safetensors", Code::format_error, "tensor 'w': 'shape' entries must be non-negative integers, got -2"},
    {"shape_float.safetensors", Code::format_error, "tensor 'w': 'shape' entries must be non-negative integers, got 2.0"},
    {"shape_string_dim.safetensors", Code::format_error, "tensor 'w': 'shape' entries must be non-negative integers, got \"2\""},
    {"shape_dim_over_int64.safetensors", Code::format_error, "tensor 'w': shape dimension 9223372036854775808 overflows int64"},
    {"shape_numel_overflow.safetensors", Code::format_error, "tensor 'w': shape [4294967296,4294967296,2] x U8 overflows"},
    {"shape_bytes_overflow.safetensors", Code::format_error, "tensor 'w': shape [4611686018427387904] x F64 overflows"},
    {"offsets_not_pair.safetensors", Code::format_error, "tensor 'w': 'data_offsets' must be an array [begin, end]"},
    {"offsets_negative.safetensors", Code::format_error, "tensor 'w': 'data_offsets' must be non-negative integers"},
    {"offsets_float.safetensors", Code::format_error, "tensor 'w': 'data_offsets' must be non-negative integers"},
    {"offsets_over_u64.safetensors", Code::format_error, "tensor 'w': 'data_offsets' must be non-negative integers"},
    {"offsets_begin_after_end.safetensors", Code::format_error, "tensor 'w': data_offsets [8,0] have begin > end"},
    {"size_mismatch.safetensors", Code::format_error, "tensor 'w': shape [2,2] x F32 is 16 bytes but data_offsets span 8 bytes"},
    {"offsets_past_end.safetensors", Code::format_error, "tensor 'w': data_offsets [0,16] run past the end of the data section (8 bytes)"},
    {"offsets_huge.safetensors", Code::format_error, "tensor 'w': shape [8] x U8 is 8 bytes but data_offsets span 7 bytes"},
    {"offsets_far_past_end.safetensors", Code::format_error, "tensor 'w': data_offsets [9223372036854775808,9223372036854775816] run past the end"},
    {"empty_tensor_past_end.safetensors", Code::format_error, "tensor 'e': data_offsets [100,100] run past the end of the data section"},
    {"overlapping_tensors.safetensors", Code::format_error, "tensors 'a' and 'b' overlap in the data section (at byte 4)"},
    {"aliased_tensors.safetensors", Code::format_error, "tensors 'a' and 'b' overlap in the data section (at byte 0)"},
    {"hole_between_tensors.safetensors", Code::format_error, "hole in the data section: bytes [8,12) before tensor 'b'"},
    {"hole_at_start.safetensors", Code::format_error, "hole in the data section: bytes [0,4) before tensor 'w'"},
    {"trailing_bytes.safetensors", Code::format_error, "data section not fully covered: 8 trailing bytes after byte 8"},
    {"no_tensors_with_data.safetensors", Code::format_error, "data section not fully covered: 8 trailing bytes after byte 0"},
    {"truncated_data.safetensors", Code::format_error, "tensor 'b': data_offsets [8,16] run past the end of the data section (11 bytes)"},
    // directories, opened as checkpoints
    {"sharded_missing_shard", Code::io_error, "shard 'model-00002-of-00002.safetensors': cannot open"},
    {"sharded_bad_shard", Code::format_error, "shard 'model-00002-of-00002.safetensors': "},
    {"sharded_tensor_not_in_shard", Code::format_error, "tensor 'c' is listed in model.safetensors.index.json for shard 'model-00001-of-00002.safetensors' but that shard does not contain it"},
    {"sharded_duplicate_tensor", Code::format_error, "tensor 'a' appears in both shard 'model-00001-of-00002.safetensors' and shard 'model-00002-of-00002.safetensors'"},
    {"sharded_unindexed_tensor", Code::format_error, "tensor 'b' in shard 'model-00001-of-00002.safetensors' is not listed in model.safetensors.index.json"},
    {"sharded_path_traversal", Code::format_error, "shard name '../model-00001-of-00002.safetensors' for tensor 'a' is not a plain file name"},
    {"sharded_index_not_json", Code::format_error, "model.safetensors.index.json: not valid JSON"},
    {"sharded_index_empty", Code::format_error, "model.safetensors.index.json: not valid JSON: empty"},
    {"sharded_index_not_object", Code::format_error, "model.safetensors.index.json is not a JSON object"},
    {"sharded_no_weight_map", Code::format_error, "model.safetensors.index.json has no 'weight_map' object"},
    {"sharded_empty_weight_map", Code::format_error, "'weight_map' is empty"},
    {"sharded_weight_map_not_string", Code::format_error, "weight_map entry for 'a' is not a string"},
    {"sharded_index_duplicate_key", Code::format_error, "duplicate key 'a' inside 'weight_map'"},
    {"dir_without_model", Code::io_error, "has neither model.safetensors.index.json nor model.safetensors"},
};
}  // namespace

TEST_CASE("malformed: every file and directory is refused with its reason", "[safetensors]") {
  std::set<std::string> on_disk, listed;
  for (const auto& e : fs::directory_iterator(corpus("malformed"))) on_disk.insert(e.path().filename().string());
  for (const Bad& b : kMalformed) listed.insert(b.name);
  CHECK(on_disk == listed);  // nothing in the corpus escapes the test
  CHECK(on_disk.size() >= 28);

  for (const Bad& b : kMalformed) {
    const std::string path = corpus("malformed/") + b.name;
    INFO(b.name);
    const bool dir = fs::is_directory(path);
    dsv41::Status s;
    if (dir) {
      auto r = st::Checkpoint::open(path);
      REQUIRE_FALSE(r.ok());
      s = r.status();
    } else {
      auto r = st::File::open(path);
      REQUIRE_FALSE(r.ok());
      s = r.status();
      // The same file as a single-file checkpoint fails the same way.
      auto c = st::Checkpoint::open(path);
      REQUIRE_FALSE(c.ok());
      CHECK(c.status().message() == s.message());
    }
    INFO(s.to_string());
    CHECK(s.code() == b.code);
    CHECK(contains(s.message(), b.name));  // names the file or directory
    CHECK(contains(s.message(), b.reason));
  }
}

TEST_CASE("malformed: a bad shard's message names the shard file and the reason", "[safetensors]") {
  auto r = st::Checkpoint::open(corpus("malformed/sharded_bad_shard"));
  REQUIRE_FALSE(r.ok());
  const std::string& m = r.status().message();
  INFO(m);
  CHECK(contains(m, "sharded_bad_shard/model-00002-of-00002.safetensors'"));
  CHECK(contains(m, "tensor 'c': data_offsets [0,4] run past the end of the data section (2 bytes)"));
}

TEST_CASE("io errors: missing paths, directories, non-regular files", "[safetensors]") {
  auto nf = st::File::open(corpus("does_not_exist.safetensors"));
  REQUIRE_FALSE(nf.ok());
  CHECK(nf.status().code() == Code::io_error);
  CHECK(contains(nf.status().message(), "does_not_exist.safetensors"));

  auto dir = st::File::open(corpus("valid"));
  REQUIRE_FALSE(dir.ok());
  CHECK(dir.status().code() == Code::io_error);
  CHECK(contains(dir.status().message(), "is not a regular file"));

  auto nc = st::Checkpoint::open(corpus("no_such_dir"));
  REQUIRE_FALSE(nc.ok());
  CHECK(nc.status().code() == Code::io_error);
  CHECK(contains(nc.status().message(), "no_such_dir"));

  auto devnull = st::File::open("/dev/null");  // a character device, not a file
  REQUIRE_FALSE(devnull.ok());
  CHECK(devnull.status().code() == Code::io_error);
}

TEST_CASE("golden fixture: tiny-ced opens and every tensor is consistent", "[safetensors]") {
  auto r = st::Checkpoint::open(golden(""));  // a directory with model.safetensors, no index
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  const st::Checkpoint& c = *r;
  CHECK(c.num_shards() == 1);
  const st::File& f = c.shard(0);
  CHECK(f.metadata().empty());
  const auto names = c.names();
  CHECK(names.size() == 815);
  CHECK(names == f.names());
  check_views_inside(f);
  std::map<st::DType, int> counts;
  size_t total = 0;
  std::vector<std::pair<const std::byte*, size_t>> spans;
  for (const auto& n : names) {
    auto t = c.get(n);
    REQUIRE(t.ok());
    INFO(n);
    CHECK(t->nbytes == static_cast<size_t>(t->numel()) * st::dtype_size(t->dtype));
    for (int64_t d : t->shape) CHECK(d >= 0);
    ++counts[t->dtype];
    total += t->nbytes;
    spans.emplace_back(t->data, t->nbytes);
  }
  // The tensors tile the data section exactly.
  CHECK(total == f.size() - f.data_offset());
  std::sort(spans.begin(), spans.end());
  const std::byte* cursor = f.raw_bytes().data() + f.data_offset();
  for (const auto& [p, n] : spans) {
    CHECK(p == cursor);
    cursor = p + n;
  }
  CHECK(cursor == f.raw_bytes().data() + f.size());
  CHECK(counts == std::map<st::DType, int>{{st::DType::F8_E8M0, 324}, {st::DType::I8, 228},
                                           {st::DType::F8_E4M3, 96}, {st::DType::F32, 88},
                                           {st::DType::BF16, 79}});
  CHECK(c.get("layers.0.attn.attn_sink", st::DType::F32, {4}).ok());
  CHECK(c.get("layers.0.hc_attn_fn", st::DType::F32, {24, 512}).ok());

  for (const char* other : {"golden.safetensors", "engram_token_map.safetensors"}) {
    auto g = st::File::open(golden(other));
    INFO(other << ": " << g.status().to_string());
    REQUIRE(g.ok());
    check_views_inside(*g);
  }
  auto map = st::File::open(golden("engram_token_map.safetensors"));
  REQUIRE(map.ok());
  const auto& tm = need(*map, "token_map");
  CHECK(tm.dtype == st::DType::I32);
  CHECK(tm.shape.size() == 1);
}

TEST_CASE("write: round trip of every dtype, empty and scalar tensors, metadata", "[safetensors]") {
  TempDir tmp;
  const std::vector<double> f64 = {1.5, -2.5, 1e300};
  const std::vector<float> f32 = {0.25f, -8.0f, 3.5f, 7.0f, -0.0f, 1e-30f};
  const std::vector<int64_t> i64 = {std::numeric_limits<int64_t>::min(), 5};
  std::vector<st::TensorToWrite> ts;
  ts.push_back({"f64", st::DType::F64, {3}, to_bytes(f64), {}});
  ts.push_back({"i64", st::DType::I64, {2, 1}, to_bytes(i64), {}});
  ts.push_back({"f32", st::DType::F32, {2, 3}, to_bytes(f32), {}});
  ts.push_back({"scalar", st::DType::I32, {}, to_bytes(std::vector<int32_t>{-42}), {}});
  ts.push_back({"empty", st::DType::F32, {3, 0}, {}, {}});
  ts.push_back({"bf16", st::DType::BF16, {2}, to_bytes(std::vector<uint16_t>{0x3F80, 0x4000}), {}});
  ts.push_back({"f16", st::DType::F16, {1}, to_bytes(std::vector<uint16_t>{0x3C00}), {}});
  ts.push_back({"i16", st::DType::I16, {1}, to_bytes(std::vector<int16_t>{-3}), {}});
  ts.push_back({"bool", st::DType::BOOL, {2}, to_bytes(std::vector<uint8_t>{0, 1}), {}});
  ts.push_back({"u8", st::DType::U8, {3}, to_bytes(std::vector<uint8_t>{1, 2, 3}), {}});
  ts.push_back({"i8", st::DType::I8, {1}, to_bytes(std::vector<int8_t>{-1}), {}});
  ts.push_back({"e4m3", st::DType::F8_E4M3, {2}, to_bytes(std::vector<uint8_t>{0x38, 0xFE}), {}});
  const std::vector<uint8_t> scales = {127, 130, 1};
  const auto scale_bytes = to_bytes(scales);
  st::TensorToWrite borrowed;  // data borrowed through a span
  borrowed.name = "scale";
  borrowed.dtype = st::DType::F8_E8M0;
  borrowed.shape = {3};
  borrowed.view = std::span<const std::byte>(scale_bytes);
  ts.push_back(borrowed);
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "round trip \xC3\xA9"}};

  const std::string path = tmp / "model.safetensors";
  auto s = st::write(path, ts, meta);
  INFO(s.to_string());
  REQUIRE(s.ok());
  CHECK_FALSE(fs::exists(path + ".tmp"));

  // Byte layout: u64 N, N-byte header padded to 8, then the data in the given order.
  const auto raw = read_all(path);
  REQUIRE(raw.size() >= 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(raw[i]);
  CHECK((8 + n) % 8 == 0);
  std::vector<std::byte> expect_data;
  for (const auto& t : ts) expect_data.insert(expect_data.end(), t.data().begin(), t.data().end());
  REQUIRE(raw.size() == 8 + n + expect_data.size());
  CHECK(std::equal(expect_data.begin(), expect_data.end(), raw.begin() + 8 + static_cast<long>(n)));

  auto r = st::File::open(path);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  check_views_inside(*r);
  CHECK(r->metadata() == meta);
  CHECK(r->num_tensors() == ts.size());
  for (const auto& t : ts) {
    INFO(t.name);
    const auto& v = need(*r, t.name);
    CHECK(v.dtype == t.dtype);
    CHECK(v.shape == t.shape);
    REQUIRE(v.nbytes == t.data().size());
    CHECK(std::equal(t.data().begin(), t.data().end(), v.bytes().begin()));
  }
  CHECK(need(*r, "f64").as<double>().size() == 3);  // widest first: everything aligned
  CHECK(values<float>(need(*r, "f32")) == f32);

  // The written directory opens as a checkpoint, too.
  auto c = st::Checkpoint::open(tmp.path);
  REQUIRE(c.ok());
  CHECK(c->names().size() == ts.size());

  // Overwriting an existing file replaces it.
  REQUIRE(st::write(path, {{"only", st::DType::U8, {1}, {std::byte{7}}, {}}}).ok());
  auto r2 = st::File::open(path);
  REQUIRE(r2.ok());
  CHECK(r2->names() == std::vector<std::string>{"only"});
  CHECK(r2->metadata().empty());

  // No tensors at all.
  REQUIRE(st::write(tmp / "none.safetensors", {}).ok());
  auto r3 = st::File::open(tmp / "none.safetensors");
  REQUIRE(r3.ok());
  CHECK(r3->num_tensors() == 0);
  CHECK(fs::file_size(tmp / "none.safetensors") == 16);
}

TEST_CASE("write: round trip of the golden fixture, byte for byte per tensor", "[safetensors]") {
  auto src = st::File::open(golden("model.safetensors"));
  REQUIRE(src.ok());
  std::vector<st::TensorToWrite> ts;
  for (const auto& n : src->names()) {
    const auto& v = need(*src, n);
    st::TensorToWrite t;
    t.name = n;
    t.dtype = v.dtype;
    t.shape = v.shape;
    t.view = v.bytes();
    ts.push_back(std::move(t));
  }
  TempDir tmp;
  REQUIRE(st::write(tmp / "copy.safetensors", ts).ok());
  auto back = st::File::open(tmp / "copy.safetensors");
  REQUIRE(back.ok());
  REQUIRE(back->names() == src->names());
  for (const auto& n : src->names()) {
    const auto& a = need(*src, n);
    const auto& b = need(*back, n);
    INFO(n);
    CHECK(a.dtype == b.dtype);
    CHECK(a.shape == b.shape);
    REQUIRE(a.nbytes == b.nbytes);
    CHECK(std::memcmp(a.data, b.data, a.nbytes) == 0);
  }
}

TEST_CASE("write: bad input is refused and leaves no file", "[safetensors]") {
  TempDir tmp;
  const std::string path = tmp / "bad.safetensors";
  auto refuse = [&](std::vector<st::TensorToWrite> ts, Code code, const std::string& reason) {
    auto s = st::write(path, ts);
    INFO(s.to_string());
    CHECK(s.code() == code);
    CHECK(contains(s.message(), reason));
    CHECK_FALSE(fs::exists(path));
    CHECK_FALSE(fs::exists(path + ".tmp"));
  };
  refuse({{"w", st::DType::F32, {2}, std::vector<std::byte>(7), {}}}, Code::invalid_argument,
         "tensor 'w': shape [2] x F32 needs 8 bytes, got 7");
  refuse({{"w", st::DType::U8, {1}, std::vector<std::byte>(1), {}},
          {"w", st::DType::U8, {1}, std::vector<std::byte>(1), {}}},
         Code::invalid_argument, "tensor 'w': duplicate name");
  refuse({{"w", st::DType::U8, {-1}, {}, {}}}, Code::invalid_argument, "negative dimension");
  refuse({{"w", st::DType::U8, {int64_t(1) << 40, int64_t(1) << 40}, {}, {}}},
         Code::invalid_argument, "overflows");
  refuse({{"__metadata__", st::DType::U8, {0}, {}, {}}}, Code::invalid_argument, "reserved");
  refuse({{"bad\xFF", st::DType::U8, {0}, {}, {}}}, Code::invalid_argument, "cannot encode the header");
  auto s = st::write(tmp / "no_such_dir/x.safetensors", {});
  CHECK(s.code() == Code::io_error);
  CHECK(contains(s.message(), "no_such_dir/x.safetensors"));
}

TEST_CASE("robustness: truncated and corrupted files never crash or read out of bounds",
          "[safetensors]") {
  TempDir tmp;
  const auto good = read_all(corpus("valid/all_dtypes.safetensors"));
  REQUIRE(good.size() > 100);
  const std::string path = tmp / "x.safetensors";

  // Every proper prefix is refused (the tensors must cover the file exactly).
  for (size_t len = 0; len < good.size(); ++len) {
    write_all(path, std::vector<std::byte>(good.begin(), good.begin() + static_cast<long>(len)));
    auto r = st::File::open(path);
    INFO("prefix " << len);
    REQUIRE_FALSE(r.ok());
    REQUIRE(r.status().code() == Code::format_error);
  }

  // Random corruption: whatever the verdict, no crash, and accepted files stay in bounds.
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  int accepted = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    auto b = good;
    const int flips = 1 + static_cast<int>(next() % 4);
    for (int k = 0; k < flips; ++k) {
      // Mostly the length prefix and the header, where the structure lives.
      const size_t hdr_end = std::min<size_t>(b.size(), 8 + 200 + (next() % 2) * 1000);
      const size_t pos = next() % hdr_end;
      const char printable[] = "{}[],:\"0123456789-.e ";
      b[pos] = (next() % 2) ? std::byte(printable[next() % (sizeof(printable) - 1)])
                            : std::byte(next() & 0xFF);
    }
    write_all(path, b);
    auto r = st::File::open(path);
    if (r.ok()) {
      ++accepted;
      check_views_inside(*r);
      for (const auto& n : r->names()) {
        const auto& v = need(*r, n);
        volatile std::byte sink{};
        for (size_t i = 0; i < v.nbytes; ++i) sink = v.data[i];  // ASan checks these reads
        (void)sink;
      }
    } else {
      CHECK(!r.status().message().empty());
    }
  }
  // Some corruptions keep the file valid (e.g. a flipped data byte); both paths get exercised.
  CHECK(accepted > 0);
  CHECK(accepted < 1500);
}

TEST_CASE("robustness: a header that ends exactly at a page boundary", "[safetensors]") {
  // Files of exactly one page: a read past the header's end would fault instead of reading
  // zero fill, so these prove the parser stops at the declared length.
  TempDir tmp;
  const std::string path = tmp / "page.safetensors";
  auto make = [&](const std::string& head) {
    std::string h = head;
    h.resize(4096 - 8, ' ');
    std::vector<std::byte> b(8 + h.size());
    const uint64_t n = h.size();
    for (int i = 0; i < 8; ++i) b[i] = std::byte(static_cast<uint8_t>(n >> (8 * i)));
    std::memcpy(b.data() + 8, h.data(), h.size());
    write_all(path, b);
    REQUIRE(fs::file_size(path) == 4096);
  };
  make("{}");
  auto ok = st::File::open(path);
  CHECK(ok.ok());
  for (const char* truncated : {"{\"a\":", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1", "{\"abc", "{\"a\":\"\\u00"}) {
    make(truncated);
    auto r = st::File::open(path);
    INFO(truncated);
    REQUIRE_FALSE(r.ok());
    CHECK(contains(r.status().message(), "not valid JSON"));
  }
  // A string running to the last byte of the page.
  make(std::string("{\"") + std::string(4096 - 8 - 2, 'x'));
  auto r = st::File::open(path);
  REQUIRE_FALSE(r.ok());
  CHECK(contains(r.status().message(), "not valid JSON"));
}
