// The CLI's default session directory (session/cache_dir.hpp): XDG_CACHE_HOME first, else HOME/.cache; the
// environment's values are passed in, never set in this process.
#include <catch2/catch.hpp>

#include <dsv41/session/cache_dir.hpp>

using dsv41::session::default_cache_dir;

TEST_CASE("default cache dir: XDG_CACHE_HOME first, else HOME/.cache", "[session][cache_dir]") {
  auto a = default_cache_dir("/x/cache", "/home/u");
  REQUIRE(a.ok());
  CHECK(*a == "/x/cache/dsv41/sessions");
  auto b = default_cache_dir("/x/cache//", "/home/u");  // trailing slashes dropped
  REQUIRE(b.ok());
  CHECK(*b == "/x/cache/dsv41/sessions");
  auto c = default_cache_dir("", "/home/u");
  REQUIRE(c.ok());
  CHECK(*c == "/home/u/.cache/dsv41/sessions");
  auto d = default_cache_dir("relative/cache", "/home/u/");  // a relative XDG_CACHE_HOME is ignored
  REQUIRE(d.ok());
  CHECK(*d == "/home/u/.cache/dsv41/sessions");
  auto e = default_cache_dir("/", "");
  REQUIRE(e.ok());
  CHECK(*e == "/dsv41/sessions");
}

TEST_CASE("default cache dir: an error when neither variable is an absolute path", "[session][cache_dir]") {
  CHECK(default_cache_dir("", "").status().code() == dsv41::Code::invalid_argument);
  CHECK(default_cache_dir("rel", "also/rel").status().code() == dsv41::Code::invalid_argument);
}
