// Prompt text with the byte ranges that a client wrote (message content, reasoning, tool schemas, call
// arguments, tool results). Tokenizer::encode(const PromptText&) reads special-token text inside those
// ranges as ordinary text, so content cannot forge a turn (a "<｜User｜>" typed by a user stays text);
// the template's own tokens, outside them, are control tokens. Where the content holds no special-token
// text the ids equal those of encoding the whole text with special tokens recognised.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dsv41::text {

struct TextRange {
  size_t begin = 0, end = 0;  // bytes [begin, end)
};

struct PromptText {
  std::string text;
  std::vector<TextRange> literal;  // sorted, disjoint, non-empty

  PromptText& operator+=(std::string_view s) {  // template text
    text += s;
    return *this;
  }
  PromptText& add_literal(std::string_view s) {  // client text
    if (s.empty()) return *this;
    const size_t b = text.size();
    text += s;
    if (!literal.empty() && literal.back().end == b) literal.back().end = text.size();
    else literal.push_back({b, text.size()});
    return *this;
  }
};

}  // namespace dsv41::text
