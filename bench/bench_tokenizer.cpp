// Tokenizer encode throughput (MB/s of UTF-8 input) on a few MB of source text.
//
// Corpus: DSV41_TOKENIZER_CORPUS (a file, or a directory whose *.py files are read in sorted
// order), else the first Python standard library found under /usr/lib or
// /root/.pyenv/versions; 4 MiB are used. Tokenizers: tests/data/tokenizers/{gpt2,llama3,dsv3}
// (DSV41_TEST_DATA), or DSV41_TOKENIZER_JSON for one more file.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <dsv41/text/tokenizer.hpp>

#ifndef DSV41_TEST_DATA
#define DSV41_TEST_DATA "tests/data"
#endif

namespace {

namespace fs = std::filesystem;
constexpr size_t kCorpusBytes = size_t{4} << 20;

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string corpus_from(const fs::path& root) {
  std::error_code ec;
  if (fs::is_regular_file(root, ec)) return read_file(root).substr(0, kCorpusBytes);
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it->is_regular_file(ec) && it->path().extension() == ".py" &&
        it->path().string().find("site-packages") == std::string::npos)
      files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  std::string out;
  for (const auto& f : files) {
    if (out.size() >= kCorpusBytes) break;
    out += read_file(f);
  }
  return out.substr(0, std::min(out.size(), kCorpusBytes));
}

std::string load_corpus() {
  if (const char* env = std::getenv("DSV41_TOKENIZER_CORPUS")) return corpus_from(env);
  std::vector<fs::path> candidates;
  std::error_code ec;
  for (const char* base : {"/usr/lib", "/root/.pyenv/versions"}) {
    for (auto it = fs::directory_iterator(base, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
      const auto name = it->path().filename().string();
      if (name.rfind("python3", 0) == 0 && fs::exists(it->path() / "os.py")) candidates.push_back(it->path());
      if (fs::exists(it->path() / "lib")) {
        for (auto jt = fs::directory_iterator(it->path() / "lib", ec); !ec && jt != fs::directory_iterator();
             jt.increment(ec))
          if (fs::exists(jt->path() / "os.py")) candidates.push_back(jt->path());
      }
    }
  }
  std::sort(candidates.begin(), candidates.end());
  for (const auto& c : candidates) {
    std::string s = corpus_from(c);
    if (s.size() >= (size_t{1} << 20)) return s;
  }
  return {};
}

const std::string& corpus() {
  static const std::string c = load_corpus();  // benchmark-only cache, never written after init
  return c;
}

void BM_Encode(benchmark::State& state, std::string path) {
  auto t = dsv41::text::Tokenizer::from_json_file(path);
  if (!t.ok()) {
    state.SkipWithError(t.status().to_string().c_str());
    return;
  }
  const std::string& text = corpus();
  if (text.empty()) {
    state.SkipWithError("no corpus: set DSV41_TOKENIZER_CORPUS");
    return;
  }
  size_t tokens = 0;
  for (auto _ : state) {
    auto ids = t->encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(text.size()));
  state.counters["corpus_MB"] = static_cast<double>(text.size()) / 1e6;
  state.counters["tokens"] = static_cast<double>(tokens);
}

// Many short calls (chat-sized messages), where per-call setup matters.
void BM_EncodeShort(benchmark::State& state, std::string path) {
  auto t = dsv41::text::Tokenizer::from_json_file(path);
  if (!t.ok()) {
    state.SkipWithError(t.status().to_string().c_str());
    return;
  }
  const std::string& text = corpus();
  const size_t n = std::min<size_t>(text.size(), size_t{1} << 20);
  for (auto _ : state) {
    for (size_t off = 0; off + 200 <= n; off += 200) {
      auto ids = t->encode(std::string_view(text).substr(off, 200));
      benchmark::DoNotOptimize(ids.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n / 200 * 200));
}

void BM_Decode(benchmark::State& state, std::string path) {
  auto t = dsv41::text::Tokenizer::from_json_file(path);
  if (!t.ok()) {
    state.SkipWithError(t.status().to_string().c_str());
    return;
  }
  const auto ids = t->encode(corpus());
  for (auto _ : state) {
    auto s = t->decode(ids);
    benchmark::DoNotOptimize(s.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(corpus().size()));
}

int register_all() {
  const std::string dir = std::string(DSV41_TEST_DATA) + "/tokenizers/";
  std::vector<std::pair<std::string, std::string>> files = {
      {"gpt2", dir + "gpt2/tokenizer.json"}, {"llama3", dir + "llama3/tokenizer.json"}, {"dsv3", dir + "dsv3/tokenizer.json"}};
  if (const char* env = std::getenv("DSV41_TOKENIZER_JSON")) files.push_back({"custom", env});
  for (const auto& [name, path] : files) {
    benchmark::RegisterBenchmark(("encode/" + name).c_str(), BM_Encode, path)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("encode_200B_calls/" + name).c_str(), BM_EncodeShort, path)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("decode/" + name).c_str(), BM_Decode, path)->Unit(benchmark::kMillisecond);
  }
  return 0;
}

const int kRegistered = register_all();

}  // namespace

BENCHMARK_MAIN();
