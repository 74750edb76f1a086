// The Engram token map's view of a tokenizer: every id's raw token string and its text decoded
// alone with special tokens kept (SPEC §4.8). Host-only, like the tokenizer.
//
//   auto tm = dsv41::engram::build_token_map(dsv41::text::engram_vocabulary(tok), vocab_rows);
#pragma once
#include <cstdint>

#include <dsv41/engram/token_map.hpp>
#include <dsv41/text/tokenizer.hpp>

namespace dsv41::text {

inline engram::Vocabulary engram_vocabulary(const Tokenizer& tok) {
  engram::Vocabulary v;
  const int32_t n = int32_t(tok.vocab_size());
  v.raw.reserve(size_t(n));
  v.decoded.reserve(size_t(n));
  for (int32_t id = 0; id < n; ++id) {
    const int32_t one[1] = {id};
    v.raw.push_back(tok.id_to_token(id));
    v.decoded.push_back(tok.decode(one, /*skip_special=*/false));
  }
  return v;
}

}  // namespace dsv41::text
