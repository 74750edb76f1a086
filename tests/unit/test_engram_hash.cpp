// Engram hashing: numpy RNG bit-exactness, primes, multipliers, plans and the golden row ids.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <dsv41/engram/hash.hpp>
#include <dsv41/engram/numpy_rng.hpp>

#ifndef DSV41_TEST_DATA
#define DSV41_TEST_DATA "tests/data"
#endif

namespace {

using namespace dsv41::engram;
namespace nr = dsv41::engram::numpy_rng;

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  INFO("reading " << path);
  REQUIRE(f.good());
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);)
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  return lines;
}

// Tiny-ced fixture exported by tools/gen_engram_tables.py.
struct TinyData {
  int64_t B = 0, T = 0, L = 0, C = 0;
  int32_t image_token_id = -1;
  std::vector<int32_t> token_map;
  std::vector<std::vector<int32_t>> ids;      // [B][T]
  std::vector<std::vector<int64_t>> hash;     // [B][T·L·C]
  std::vector<int32_t> extra_ids;             // sequence with image tokens
  std::vector<int64_t> extra_hash;            // [T'·L·C]
};

TinyData load_tiny() {
  TinyData d;
  for (const auto& line : read_lines(std::string(DSV41_TEST_DATA) + "/engram/tiny_ced_hash.txt")) {
    std::istringstream s(line);
    std::string tag;
    s >> tag;
    if (tag == "dims") {
      s >> d.B >> d.T >> d.L >> d.C >> d.image_token_id;
      d.ids.assign(size_t(d.B), {});
      d.hash.assign(size_t(d.B), std::vector<int64_t>(size_t(d.T * d.L * d.C)));
    } else if (tag == "token_map") {
      for (int32_t v; s >> v;) d.token_map.push_back(v);
    } else if (tag == "ids") {
      size_t b;
      s >> b;
      for (int32_t v; s >> v;) d.ids.at(b).push_back(v);
    } else if (tag == "hash") {
      size_t b, t;
      s >> b >> t;
      for (int64_t k = 0; k < d.L * d.C; ++k) s >> d.hash.at(b).at(t * size_t(d.L * d.C) + size_t(k));
    } else if (tag == "extra_ids") {
      size_t n;
      s >> n;
      for (int32_t v; s >> v;) d.extra_ids.push_back(v);
      REQUIRE(d.extra_ids.size() == n);
    } else if (tag == "extra_hash") {
      size_t t;
      s >> t;
      REQUIRE(d.extra_hash.size() == t * size_t(d.L * d.C));
      for (int64_t v; s >> v;) d.extra_hash.push_back(v);
    }
  }
  return d;
}

HashParams tiny_params() {
  HashParams p;
  p.layer_ids = {1, 3};
  p.max_ngram_size = 3;
  p.n_heads = 2;
  p.vocab_start = 50;
  p.compressed_vocab_size = 300;
  p.pad_compressed_id = 2;  // token_map[2] of the fixture (checked below)
  p.num_embeddings = {240, 306};
  return p;
}

HashParams release_params() {
  HashParams p;
  p.layer_ids = {1, 14};
  p.max_ngram_size = 4;
  p.n_heads = 8;
  p.vocab_start = 16000000;
  p.compressed_vocab_size = 99092;
  p.pad_compressed_id = 2;
  p.num_embeddings = {384006168, 384016682};
  return p;
}

// Hashes `ids` in chunks of `chunk` tokens, each with the N-1 preceding ids as history.
std::vector<int64_t> hash_in_chunks(const HashPlan& plan, const std::vector<int32_t>& tm, int32_t image,
                                    const std::vector<int32_t>& ids, size_t chunk) {
  std::vector<int64_t> all;
  const size_t hist = size_t(plan.history_size());
  for (size_t t0 = 0; t0 < ids.size(); t0 += chunk) {
    const size_t t1 = std::min(ids.size(), t0 + chunk);
    const size_t h0 = t0 >= hist ? t0 - hist : 0;
    std::span<const int32_t> all_ids(ids);
    auto r = hash_ids(plan, tm, image, all_ids.subspan(t0, t1 - t0), all_ids.subspan(h0, t0 - h0));
    REQUIRE(r.ok());
    all.insert(all.end(), r->begin(), r->end());
  }
  return all;
}

}  // namespace

TEST_CASE("numpy SeedSequence and PCG64 state match numpy", "[engram]") {
  int checked = 0;
  for (const auto& line : read_lines(std::string(DSV41_TEST_DATA) + "/engram/numpy_rng.txt")) {
    if (line.rfind("S ", 0) != 0) continue;
    std::istringstream s(line.substr(2));
    uint64_t seed, pool[4], sh, sl, ih, il, u64[4];
    uint32_t u32[5];
    s >> seed >> pool[0] >> pool[1] >> pool[2] >> pool[3] >> sh >> sl >> ih >> il;
    for (auto& v : u64) s >> v;
    for (auto& v : u32) s >> v;
    REQUIRE(!s.fail());
    INFO("seed " << seed);
    nr::SeedSequence ss(seed);
    for (int i = 0; i < 4; ++i) CHECK(ss.pool()[size_t(i)] == pool[i]);
    nr::PCG64 g(ss);
    CHECK(uint64_t(g.state() >> 64) == sh);
    CHECK(uint64_t(g.state()) == sl);
    CHECK(uint64_t(g.inc() >> 64) == ih);
    CHECK(uint64_t(g.inc()) == il);
    for (auto v : u64) CHECK(g.next_u64() == v);
    nr::PCG64 g32(seed);
    for (auto v : u32) CHECK(g32.next_u32() == v);
    ++checked;
  }
  CHECK(checked >= 100);
}

TEST_CASE("numpy integers(low, high, n, int64) is bit-exact", "[engram]") {
  int cases = 0, values = 0, mismatches = 0;
  for (const auto& line : read_lines(std::string(DSV41_TEST_DATA) + "/engram/numpy_rng.txt")) {
    if (line.rfind("I ", 0) != 0) continue;
    std::istringstream s(line.substr(2));
    uint64_t seed;
    int64_t low, high;
    size_t n;
    s >> seed >> low >> high >> n;
    std::vector<int64_t> want(n);
    for (auto& v : want) s >> v;
    REQUIRE(!s.fail());
    auto got = nr::integers(seed, low, high, n);
    REQUIRE(got.ok());
    if (*got != want) {
      ++mismatches;
      UNSCOPED_INFO("mismatch: seed " << seed << " low " << low << " high " << high << " n " << n);
    }
    ++cases;
    values += int(n);
  }
  CHECK(mismatches == 0);
  CHECK(cases >= 1000);
  CHECK(values >= 10000);
}

TEST_CASE("numpy integers rejects an empty range", "[engram]") {
  auto r = nr::integers(uint64_t(1), 5, 5, 3);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == dsv41::Code::invalid_argument);
  CHECK(nr::integers(uint64_t(1), 0, 1, 3).value() == std::vector<int64_t>{0, 0, 0});
}

TEST_CASE("is_prime_u64", "[engram]") {
  // exhaustive against trial division below 20000
  for (uint64_t n = 0; n < 20000; ++n) {
    bool p = n >= 2;
    for (uint64_t d = 2; d * d <= n && p; ++d) p = n % d != 0;
    REQUIRE(is_prime_u64(n) == p);
  }
  for (uint64_t n : {561ull, 1105ull, 1729ull, 2465ull, 2821ull, 6601ull, 8911ull, 41041ull, 825265ull,
                     321197185ull, 5394826801ull, 232250619601ull, 9746347772161ull,  // Carmichael
                     2047ull, 3277ull, 4033ull, 4681ull, 8321ull,                         // spsp(2)
                     3215031751ull, 3825123056546413051ull,                               // spsp(2..7), (2..23)
                     18446744073709551615ull, 18446744030759878681ull /* (2^32-5)^2 */,
                     4611685975477714963ull /* (2^31-1)(2^31-19) */})
    CHECK_FALSE(is_prime_u64(n));
  for (uint64_t n : {2ull, 3ull, 37ull, 41ull, 1000000007ull, 998244353ull, 999999999989ull, 4294967291ull,
                     2147483647ull, 2305843009213693951ull /* 2^61-1 */, 9223372036854775783ull /* 2^63-25 */,
                     4611686018427387847ull, 18446744073709551533ull, 18446744073709551557ull /* 2^64-59 */})
    CHECK(is_prime_u64(n));
}

TEST_CASE("released Engram multipliers and table sizes", "[engram]") {
  auto m1 = hash_multipliers(1, 4, 99092);
  auto m14 = hash_multipliers(14, 4, 99092);
  REQUIRE(m1.ok());
  REQUIRE(m14.ok());
  CHECK(*m1 == std::vector<int64_t>{76632096046245, 4839876093313, 35959672319349, 73987337458391});
  CHECK(*m14 == std::vector<int64_t>{67716810739261, 51510806800915, 30921347202721, 82619226485591});

  auto plan = make_plan(release_params());
  INFO(plan.status().to_string());
  REQUIRE(plan.ok());
  REQUIRE(plan->n_layers() == 2);
  CHECK(plan->cols() == 24);
  CHECK(plan->layers[0].rows == 384006168);
  CHECK(plan->layers[1].rows == 384016682);
  CHECK(plan->layers[0].multipliers == *m1);
  CHECK(plan->layers[1].multipliers == *m14);
  for (const auto& L : plan->layers) {
    REQUIRE(L.primes.size() == 24);
    REQUIRE(L.offsets.size() == 24);
    CHECK(L.offsets[0] == 0);
    for (size_t k = 0; k < L.primes.size(); ++k) {
      CHECK(is_prime_u64(uint64_t(L.primes[k])));
      CHECK(L.primes[k] >= 16000000);
      if (k) CHECK(L.offsets[k] == L.offsets[k - 1] + L.primes[k - 1]);
    }
  }
  CHECK(plan->layers[0].prime(2, 0, 8) == 16000057);  // the first prime above 16,000,000
}

TEST_CASE("make_plan rejects a mismatching engram_num_embeddings", "[engram]") {
  auto p = release_params();
  p.num_embeddings[1] += 1;
  auto plan = make_plan(p);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.status().code() == dsv41::Code::mismatch);
  const std::string msg = plan.status().message();
  INFO(msg);
  CHECK(msg.find("layer 14") != std::string::npos);
  CHECK(msg.find("384016682") != std::string::npos);
  CHECK(msg.find("384016683") != std::string::npos);

  auto q = tiny_params();
  q.num_embeddings = {240};
  CHECK(make_plan(q).status().code() == dsv41::Code::mismatch);
  q = tiny_params();
  q.max_ngram_size = 1;
  CHECK(make_plan(q).status().code() == dsv41::Code::invalid_argument);
  q = tiny_params();
  q.pad_compressed_id = 300;
  CHECK(make_plan(q).status().code() == dsv41::Code::invalid_argument);
}

TEST_CASE("tiny-ced Engram row ids equal the golden fixture", "[engram]") {
  const TinyData d = load_tiny();
  REQUIRE(d.B == 2);
  REQUIRE(d.T == 64);
  REQUIRE(d.token_map.size() == 512);
  REQUIRE(d.token_map[2] == 2);

  auto plan_r = make_plan(tiny_params());
  INFO(plan_r.status().to_string());
  REQUIRE(plan_r.ok());
  const HashPlan& plan = *plan_r;
  REQUIRE(plan.n_layers() == d.L);
  REQUIRE(plan.cols() == d.C);
  CHECK(plan.layers[0].primes == std::vector<int64_t>{53, 59, 61, 67});
  CHECK(plan.layers[1].primes == std::vector<int64_t>{71, 73, 79, 83});
  CHECK(plan.layers[1].offsets == std::vector<int64_t>{0, 71, 144, 223});
  CHECK(check_token_map(plan, d.token_map).ok());

  for (int64_t b = 0; b < d.B; ++b) {
    INFO("sequence " << b);
    const auto& ids = d.ids[size_t(b)];
    auto whole = hash_ids(plan, d.token_map, d.image_token_id, ids);
    REQUIRE(whole.ok());
    CHECK(*whole == d.hash[size_t(b)]);
    CHECK(hash_in_chunks(plan, d.token_map, d.image_token_id, ids, 1) == d.hash[size_t(b)]);  // decode
    CHECK(hash_in_chunks(plan, d.token_map, d.image_token_id, ids, 37) == d.hash[size_t(b)]);  // prefill P
    CHECK(hash_in_chunks(plan, d.token_map, d.image_token_id, ids, 5) == d.hash[size_t(b)]);
  }

  // image tokens stop the look-back (ids from the generator's own hash, validated on the golden)
  REQUIRE(d.extra_hash.size() == d.extra_ids.size() * size_t(d.L * d.C));
  auto extra = hash_ids(plan, d.token_map, d.image_token_id, d.extra_ids);
  REQUIRE(extra.ok());
  CHECK(*extra == d.extra_hash);
  CHECK(hash_in_chunks(plan, d.token_map, d.image_token_id, d.extra_ids, 1) == d.extra_hash);
  CHECK(hash_in_chunks(plan, d.token_map, d.image_token_id, d.extra_ids, 3) == d.extra_hash);
}

TEST_CASE("hash_ids argument errors", "[engram]") {
  auto plan = make_plan(tiny_params());
  REQUIRE(plan.ok());
  std::vector<int32_t> tm(512);
  for (int i = 0; i < 512; ++i) tm[size_t(i)] = i % 300;
  const std::vector<int32_t> ids{5, 6, 7};
  const std::vector<int32_t> long_hist{1, 2, 3};
  CHECK(hash_ids(plan.value(), tm, 511, ids, long_hist).status().code() == dsv41::Code::invalid_argument);
  const std::vector<int32_t> bad{5, 512};
  CHECK(hash_ids(plan.value(), tm, 511, bad).status().code() == dsv41::Code::out_of_range);
  std::vector<int64_t> small(3);
  CHECK(hash_ids(plan.value(), tm, 511, ids, {}, small).code() == dsv41::Code::invalid_argument);
  std::vector<int32_t> short_map(300);
  CHECK(check_token_map(plan.value(), short_map).code() == dsv41::Code::mismatch);
}
