// Tool calls streamed as they form (text/tool_call_stream.hpp): fed a completion one byte at a time, each call's
// header comes once with its whole name, and its argument deltas concatenate to the final arguments.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include <dsv41/text/chat_parse.hpp>
#include <dsv41/text/tool_call_stream.hpp>

using namespace dsv41;
using namespace dsv41::text;

namespace {
const ChatTokens kT;
const std::string kD = kT.dsml;
std::string param(const std::string& k, bool s, const std::string& v) {
  return "<" + kD + " parameter name=\"" + k + "\" string=\"" + (s ? "true" : "false") + "\">" + v + "</" + kD +
         " parameter>";
}
std::string invoke(const std::string& name, const std::vector<std::string>& ps) {
  std::string s = "<" + kD + " invoke name=\"" + name + "\">\n";
  for (const auto& p : ps) s += p + "\n";
  return s + "</" + kD + " invoke>";
}

struct Streamed {
  std::map<size_t, std::string> name, args;
  std::map<size_t, int> headers;
  std::vector<size_t> order;  // index of each delta
};
void collect(Streamed& s, const std::vector<ToolCallDelta>& ds) {
  for (const auto& d : ds) {
    if (d.header) {
      ++s.headers[d.index];
      s.name[d.index] = d.name;
    } else {
      CHECK(s.headers[d.index] == 1);  // arguments only after the header
    }
    s.args[d.index] += d.arguments;
    s.order.push_back(d.index);
  }
}
}  // namespace

TEST_CASE("tool call stream: byte by byte, headers once, argument deltas add up", "[chat_parse][stream]") {
  for (Mode mode : {Mode::chat, Mode::thinking}) {
    const std::string pre = mode == Mode::thinking ? "Think about <it>.</think>" : "";
    const std::string text = pre + "Checking." + "\n\n<" + kD + " calls>\n" +
                             invoke("get_weather", {param("city", true, "Paris"), param("days", false, "3"),
                                                    param("opts", false, R"({"units": "C", "hourly": [1, 2]})")}) +
                             "\n" + invoke("now", {}) + "\n</" + kD + " calls>" + kT.eos;
    auto final_msg = parse_completion(text, mode, kT);
    REQUIRE(final_msg.ok());
    REQUIRE(final_msg->tool_calls.size() == 2);
    ToolCallStream st(mode, kT);
    Streamed s;
    size_t first_header_at = 0;
    for (size_t n = 1; n <= text.size(); ++n) {
      collect(s, st.update(std::string_view(text).substr(0, n)));
      if (first_header_at == 0 && s.headers[0] == 1) first_header_at = n;
    }
    collect(s, st.finish(final_msg->tool_calls));
    INFO("mode " << int(mode));
    // The first header comes right after its name's closing `">\n`, not before.
    CHECK(text.substr(0, first_header_at).ends_with("get_weather\">\n"));
    for (size_t i = 0; i < 2; ++i) {
      CHECK(s.headers[i] == 1);
      CHECK(s.name[i] == final_msg->tool_calls[i].name);
      CHECK(s.args[i] == arguments_text(final_msg->tool_calls[i]));
    }
    // The first call's arguments arrive in several deltas (one per parameter, then the brace).
    size_t deltas0 = 0;
    for (size_t k : s.order) deltas0 += k == 0;
    CHECK(deltas0 >= 4);
    // Calls stream in order.
    CHECK(std::is_sorted(s.order.begin(), s.order.end()));
  }
  // Text without calls, or with a malformed block, streams nothing.
  ToolCallStream st(Mode::chat, kT);
  CHECK(st.update("plain text").empty());
  CHECK(st.update("x\n\n<" + kD + " calls>\n<oops>").empty());
}
