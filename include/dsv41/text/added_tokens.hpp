// Added tokens of a tokenizer.json (special and user tokens) and the leftmost-longest byte trie
// that finds them in text, for <dsv41/text/tokenizer.hpp>.
#pragma once
#include <utf8proc.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <dsv41/text/unicode_props.hpp>

namespace dsv41::text {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
};

namespace detail {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// Rust regex's \w (used by single_word): alphabetic, marks, decimal digits, connectors.
inline bool is_rust_word(uint32_t cp) {
  if (cp == 0x200C || cp == 0x200D) return true;
  const uint32_t mask = gc::L | gc::M | gc::bit(UTF8PROC_CATEGORY_ND) | gc::bit(UTF8PROC_CATEGORY_NL) |
                        gc::bit(UTF8PROC_CATEGORY_PC);
  return (mask >> general_category(cp)) & 1u;
}

// Leftmost-longest matcher over the added tokens (a byte trie).
class AddedMatcher {
 public:
  void add(std::string_view s, int32_t token) {
    if (s.empty()) return;
    if (nodes_.empty()) nodes_.emplace_back();
    int cur = 0;
    for (unsigned char c : s) {
      int nxt = -1;
      for (auto [b, child] : nodes_[cur].next)
        if (b == c) nxt = child;
      if (nxt < 0) {
        nxt = static_cast<int>(nodes_.size());
        nodes_[cur].next.push_back({c, nxt});
        nodes_.emplace_back();
      }
      cur = nxt;
    }
    nodes_[cur].token = token;
    first_[static_cast<unsigned char>(s[0])] = 1;
  }
  bool empty() const { return nodes_.empty(); }
  // Next match at or after `from`: earliest start, then longest.
  bool find(std::string_view t, size_t from, size_t& ms, size_t& me, int32_t& token) const {
    if (nodes_.empty()) return false;
    const auto* p = reinterpret_cast<const unsigned char*>(t.data());
    const size_t n = t.size();
    for (size_t s = from; s < n; ++s) {
      while (s < n && !first_[p[s]]) ++s;
      if (s >= n) break;
      int cur = 0, best = -1;
      size_t best_end = 0;
      for (size_t i = s; i < t.size(); ++i) {
        int nxt = -1;
        for (auto [b, child] : nodes_[cur].next)
          if (b == p[i]) {
            nxt = child;
            break;
          }
        if (nxt < 0) break;
        cur = nxt;
        if (nodes_[cur].token >= 0) {
          best = nodes_[cur].token;
          best_end = i + 1;
        }
      }
      if (best >= 0) {
        ms = s;
        me = best_end;
        token = best;
        return true;
      }
    }
    return false;
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int>> next;
    int32_t token = -1;
  };
  std::vector<Node> nodes_;
  std::array<uint8_t, 256> first_{};  // bytes that start some token
};

}  // namespace detail

}  // namespace dsv41::text
