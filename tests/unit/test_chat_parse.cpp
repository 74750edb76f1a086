// Completion parsing (dsv41::text::parse_completion): model output in chat and thinking mode, with
// and without DSML tool calls, to the assistant message's fields and finish state.
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include <dsv41/text/chat_parse.hpp>

using namespace dsv41;
using namespace dsv41::text;
using nlohmann::ordered_json;

namespace {

const std::string kEos = "<｜end▁of▁sentence｜>";

// One DSML invoke with its parameters (name, string flag, value), as the model writes it.
std::string invoke(const std::string& name, std::initializer_list<std::tuple<std::string, bool, std::string>> params) {
  std::string s = "<｜DSML｜ invoke name=\"" + name + "\">\n";
  for (const auto& [k, is_string, v] : params)
    s += "<｜DSML｜ parameter name=\"" + k + "\" string=\"" + (is_string ? "true" : "false") + "\">" + v +
         "</｜DSML｜ parameter>\n";
  return s + "</｜DSML｜ invoke>\n";
}
std::string calls(const std::string& invokes) { return "\n\n<｜DSML｜ calls>\n" + invokes + "</｜DSML｜ calls>"; }

}  // namespace

TEST_CASE("chat_parse: plain chat and thinking completions", "[chat_parse]") {
  auto r = parse_completion("Hello there." + kEos, Mode::chat);
  REQUIRE(r.ok());
  CHECK(r->content == "Hello there.");
  CHECK(r->reasoning_content.empty());
  CHECK(r->tool_calls.empty());
  CHECK(r->finish == Finish::stop);

  // Thinking mode: the prompt opened the reasoning, so the text starts inside it.
  r = parse_completion("2 + 2 is 4.</think>The answer is 4." + kEos, Mode::thinking);
  REQUIRE(r.ok());
  CHECK(r->reasoning_content == "2 + 2 is 4.");
  CHECK(r->content == "The answer is 4.");
  CHECK(r->finish == Finish::stop);

  // In chat mode "</think>" is not a separator but a special token in the content.
  CHECK(parse_completion("a</think>b" + kEos, Mode::chat).status().code() == Code::format_error);

  // No eos: truncated where it stopped.
  r = parse_completion("still thinking", Mode::thinking);
  REQUIRE(r.ok());
  CHECK(r->reasoning_content == "still thinking");
  CHECK(r->finish == Finish::truncated_reasoning);
  r = parse_completion("done</think>half an ans", Mode::thinking);
  REQUIRE(r.ok());
  CHECK(r->reasoning_content == "done");
  CHECK(r->content == "half an ans");
  CHECK(r->finish == Finish::truncated_content);
  CHECK(std::string(finish_reason(r->finish)) == "length");
}

TEST_CASE("chat_parse: tool calls in thinking and chat mode", "[chat_parse]") {
  const std::string text = "Need the weather.</think>Checking." +
                           calls(invoke("get_weather", {{"city", true, "Paris"}, {"days", false, "3"}})) + kEos;
  auto r = parse_completion(text, Mode::thinking);
  REQUIRE(r.ok());
  CHECK(r->reasoning_content == "Need the weather.");
  CHECK(r->content == "Checking.");
  CHECK(r->finish == Finish::tool_calls);
  CHECK(std::string(finish_reason(r->finish)) == "tool_calls");
  REQUIRE(r->tool_calls.size() == 1);
  const ToolCall& c = r->tool_calls[0];
  CHECK(c.id.empty());
  CHECK(c.name == "get_weather");
  CHECK(c.arguments == ordered_json::parse(R"({"city": "Paris", "days": 3})"));
  CHECK(c.arguments["days"].is_number_integer());  // string="false": JSON
  CHECK(c.arguments["city"].is_string());          // string="true": the text itself
  CHECK(arguments_text(c) == R"({"city": "Paris", "days": 3})");

  // Two calls, no content, chat mode; string="false" values that are not JSON stay strings,
  // string="true" values that look like JSON stay strings too.
  const std::string two = calls(invoke("a", {{"opts", false, R"({"k": [1, 2]})"}, {"raw", false, "not json"}}) +
                                invoke("b", {{"n", true, "42"}})) +
                          kEos;
  r = parse_completion(two, Mode::chat);
  REQUIRE(r.ok());
  CHECK(r->content.empty());
  CHECK(r->finish == Finish::tool_calls);
  REQUIRE(r->tool_calls.size() == 2);
  CHECK(r->tool_calls[0].name == "a");
  CHECK(r->tool_calls[0].arguments["opts"] == ordered_json::parse(R"({"k": [1, 2]})"));
  CHECK(r->tool_calls[0].arguments["raw"] == "not json");
  CHECK(r->tool_calls[1].name == "b");
  CHECK(r->tool_calls[1].arguments["n"] == "42");

  // The OpenAI shape of the message.
  const nlohmann::json j = to_openai_json(*r);
  CHECK(j["role"] == "assistant");
  CHECK(j["content"] == "");
  REQUIRE(j["tool_calls"].size() == 2);
  CHECK(j["tool_calls"][1]["type"] == "function");
  CHECK(j["tool_calls"][1]["function"]["name"] == "b");
  CHECK(j["tool_calls"][1]["function"]["arguments"] == R"({"n": "42"})");
  CHECK_FALSE(j["tool_calls"][1].contains("id"));

  // A call with no parameters has empty arguments.
  r = parse_completion(calls(invoke("ping", {})) + kEos, Mode::chat);
  REQUIRE(r.ok());
  REQUIRE(r->tool_calls.size() == 1);
  CHECK(r->tool_calls[0].arguments == ordered_json::object());
  CHECK(arguments_text(r->tool_calls[0]) == "{}");
}

TEST_CASE("chat_parse: truncated tool calls keep the complete ones", "[chat_parse]") {
  const std::string first = invoke("a", {{"x", true, "1"}});
  // Stopped inside the second invoke: the first call is kept.
  auto r = parse_completion("\n\n<｜DSML｜ calls>\n" + first + "<｜DSML｜ invoke name=\"b\">\n<｜DSML｜ param",
                            Mode::chat);
  REQUIRE(r.ok());
  CHECK(r->finish == Finish::truncated_tool_calls);
  REQUIRE(r->tool_calls.size() == 1);
  CHECK(r->tool_calls[0].name == "a");
  // Stopped right after the closing calls tag (no eos yet).
  r = parse_completion("ok" + calls(first), Mode::chat);
  REQUIRE(r.ok());
  CHECK(r->content == "ok");
  CHECK(r->finish == Finish::truncated_tool_calls);
  CHECK(r->tool_calls.size() == 1);
  // Tool calls must come after the reasoning is closed.
  CHECK(parse_completion("hmm" + calls(first) + kEos, Mode::thinking).status().code() == Code::format_error);
}

TEST_CASE("chat_parse: the special tokens come from ChatTokens", "[chat_parse]") {
  ChatTokens t;
  t.eos = "</s>";
  t.think_close = "[/THINK]";
  t.dsml = "|D|";
  const std::string text = "r[/THINK]c\n\n<|D| calls>\n<|D| invoke name=\"f\">\n"
                           "<|D| parameter name=\"q\" string=\"true\">v</|D| parameter>\n</|D| invoke>\n</|D| calls></s>";
  auto r = parse_completion(text, Mode::thinking, t);
  REQUIRE(r.ok());
  CHECK(r->reasoning_content == "r");
  CHECK(r->content == "c");
  CHECK(r->finish == Finish::tool_calls);
  REQUIRE(r->tool_calls.size() == 1);
  CHECK(r->tool_calls[0].arguments["q"] == "v");
  // With the default tokens the same text has no eos and no reasoning end.
  r = parse_completion(text, Mode::thinking);
  REQUIRE(r.ok());
  CHECK(r->finish == Finish::truncated_reasoning);
  t.eos.clear();
  CHECK(parse_completion("x", Mode::chat, t).status().code() == Code::invalid_argument);
}
