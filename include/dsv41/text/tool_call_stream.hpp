// Tool calls streamed as they form (OpenAI's tool_calls deltas): a call's header (index, name) once its name is
// complete, then its arguments as text deltas, one per completed parameter: the JSON text without its closing
// brace until the call ends, so the deltas of a call concatenate to arguments_text() of the parsed call.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <dsv41/text/chat_parse.hpp>

namespace dsv41::text {

struct ToolCallDelta {
  size_t index = 0;
  bool header = false;   // first delta of the call: name is set
  std::string name;
  std::string arguments;  // text to append to the call's arguments (may be empty with a header)
};

class ToolCallStream {
 public:
  ToolCallStream(Mode mode, const ChatTokens& t) : mode_(mode), t_(t), calls_start_("\n\n<" + t.dsml + " calls") {}

  // The completion's whole text so far; returns what became final since the last call.
  std::vector<ToolCallDelta> update(std::string_view text) {
    size_t from = 0;
    if (mode_ == Mode::thinking) {
      from = text.find(t_.think_close);
      if (from == std::string_view::npos) return {};
    }
    const size_t at = text.find(calls_start_, from);
    if (at == std::string_view::npos) return {};
    auto r = chat_detail::parse_calls(text, at + calls_start_.size(), t_);
    if (!r.ok()) return {};  // malformed so far: the final parse decides
    std::vector<const ToolCall*> cs;
    for (const auto& c : r->calls) cs.push_back(&c);
    if (r->partial) cs.push_back(&*r->partial);
    return deltas(cs, r->partial.has_value());
  }

  // The calls of the final parse (parse_completion): whatever of them was not streamed yet.
  std::vector<ToolCallDelta> finish(const std::vector<ToolCall>& calls) {
    std::vector<const ToolCall*> cs;
    for (const auto& c : calls) cs.push_back(&c);
    return deltas(cs, false);
  }

 private:
  std::vector<ToolCallDelta> deltas(const std::vector<const ToolCall*>& cs, bool last_open) {
    std::vector<ToolCallDelta> out;
    for (size_t i = 0; i < cs.size(); ++i) {
      if (sent_.size() <= i) sent_.push_back({false, ""});
      std::string args = arguments_text(*cs[i]);
      if (last_open && i + 1 == cs.size()) args.pop_back();  // its closing brace comes with the call's end
      ToolCallDelta d;
      d.index = i;
      if (!sent_[i].first) {
        d.header = true;
        d.name = cs[i]->name;
        sent_[i].first = true;
      }
      std::string& done = sent_[i].second;
      if (args.size() > done.size() && args.compare(0, done.size(), done) == 0) {
        d.arguments = args.substr(done.size());
        done = std::move(args);
      }
      if (d.header || !d.arguments.empty()) out.push_back(std::move(d));
    }
    return out;
  }

  Mode mode_;
  ChatTokens t_;
  std::string calls_start_;
  std::vector<std::pair<bool, std::string>> sent_;  // per call: header sent, arguments sent
};

}  // namespace dsv41::text
