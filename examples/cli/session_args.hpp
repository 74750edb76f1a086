// The session options of chat and serve (added by add_session_options in commands.hpp, used by start_sessions in
// text_loader.hpp). Sessions are on by default, in the per-user cache directory (session/cache_dir.hpp).
#pragma once
#include <string>

namespace dsv41::cli {

struct SessionArgs {
  std::string cache_dir;  // --cache-dir: explicit; empty: the default directory
  bool no_cache = false;  // --no-cache: sessions off
  int block = 128;        // --session-block: tokens per stored block
};

}  // namespace dsv41::cli
