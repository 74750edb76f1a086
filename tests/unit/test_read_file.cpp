// Local files a hostile directory could hold (core/read_file.hpp and the loaders on it): a config.json or
// tokenizer.json that is /dev/zero, a FIFO, a directory, a symlink loop or too large is an error, never a hang, an
// unbounded read or an exception.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <dsv41/config/parse_config.hpp>
#include <dsv41/core/read_file.hpp>
#include <dsv41/text/tokenizer.hpp>

using namespace dsv41;
namespace fs = std::filesystem;

TEST_CASE("read_small_file: regular files only, bounded", "[files]") {
  const fs::path dir = fs::temp_directory_path() / ("dsv41_rf_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string ok = (dir / "ok.json").string();
  std::ofstream(ok) << R"({"a": 1})";
  auto r = read_small_file(ok, 100);
  REQUIRE(r.ok());
  CHECK(*r == R"({"a": 1})");
  CHECK(read_small_file(ok, 7).status().code() == Code::format_error);  // 8 bytes > 7
  CHECK(!read_small_file((dir / "missing").string(), 100).ok());
  CHECK(!read_small_file(dir.string(), 100).ok());  // a directory
  fs::create_symlink("/dev/zero", dir / "zero.json");
  CHECK(!read_small_file((dir / "zero.json").string(), 100).ok());
  REQUIRE(::mkfifo((dir / "fifo.json").c_str(), 0600) == 0);
  CHECK(!read_small_file((dir / "fifo.json").string(), 100).ok());  // refused before open: no blocking
  fs::create_symlink(dir / "loop.json", dir / "loop.json");
  CHECK(!read_small_file((dir / "loop.json").string(), 100).ok());
  // The loaders on it.
  for (const char* name : {"zero.json", "fifo.json", "loop.json"}) {
    INFO(name);
    CHECK(!load_config((dir / name).string()).ok());
    CHECK(!text::Tokenizer::from_json_file((dir / name).string()).ok());
  }
  fs::remove_all(dir);
}
