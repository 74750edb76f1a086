// Where the CLI keeps sessions by default: $XDG_CACHE_HOME/dsv41/sessions, else $HOME/.cache/dsv41/sessions (the
// XDG base directory rules: an unset, empty or relative XDG_CACHE_HOME is ignored). Only the path is computed;
// DiskStore::open creates the directory.
#pragma once
#include <cstdlib>
#include <string>
#include <string_view>

#include <dsv41/core/status.hpp>

namespace dsv41::session {

// xdg_cache_home, home: the environment's values ("" when unset).
inline Result<std::string> default_cache_dir(std::string_view xdg_cache_home, std::string_view home) {
  auto under = [](std::string_view base, std::string_view rest) {
    std::string p(base);
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    if (p != "/") p += '/';
    return p + std::string(rest);
  };
  if (!xdg_cache_home.empty() && xdg_cache_home.front() == '/')
    return Result<std::string>(under(xdg_cache_home, "dsv41/sessions"));
  if (!home.empty() && home.front() == '/') return Result<std::string>(under(home, ".cache/dsv41/sessions"));
  return error(Code::invalid_argument, "no cache directory: neither XDG_CACHE_HOME nor HOME is an absolute path");
}

// The same from this process's environment (read, never changed).
inline Result<std::string> default_cache_dir() {
  const char* x = std::getenv("XDG_CACHE_HOME");
  const char* h = std::getenv("HOME");
  return default_cache_dir(x ? x : "", h ? h : "");
}

}  // namespace dsv41::session
