// DeepSeek-V4.1 chat prompt rendering and completion parsing (dsv41::text).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <dsv41/text/chat_format.hpp>

#ifndef DSV41_TEST_DATA
#define DSV41_TEST_DATA "tests/data"
#endif

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using namespace dsv41;
using namespace dsv41::text;

namespace {

std::vector<fs::path> json_files(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

ordered_json load(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ordered_json::parse(ss.str());
}

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::stop: return "stop";
    case Finish::tool_calls: return "tool_calls";
    case Finish::truncated_reasoning: return "truncated_reasoning";
    case Finish::truncated_content: return "truncated_content";
    case Finish::truncated_tool_calls: return "truncated_tool_calls";
  }
  return "?";
}

Status render_error(const ordered_json& req) {
  auto r = render_prompt(req);
  return r ? Status::Ok() : r.status();
}

Status parse_error(std::string_view text, Mode mode) {
  auto r = parse_completion(text, mode);
  return r ? Status::Ok() : r.status();
}

}  // namespace

TEST_CASE("chat: every render case matches its expected prompt exactly", "[chat]") {
  const auto files = json_files(std::string(DSV41_TEST_DATA) + "/chat/cases");
  REQUIRE(files.size() >= 15);
  for (const auto& f : files) {
    INFO("case " << f.filename().string());
    const ordered_json c = load(f);
    auto r = render_prompt(c.at("request"));
    INFO(r.status().to_string());
    REQUIRE(r.ok());
    CHECK(*r == c.at("expected_prompt").get<std::string>());
  }
}

TEST_CASE("chat: every parse case gives its expected message and finish state", "[chat]") {
  const auto files = json_files(std::string(DSV41_TEST_DATA) + "/chat/parse");
  REQUIRE(files.size() >= 10);
  for (const auto& f : files) {
    INFO("case " << f.filename().string());
    const ordered_json c = load(f);
    const Mode mode = c.at("mode").get<std::string>() == "thinking" ? Mode::thinking : Mode::chat;
    auto r = parse_completion(c.at("completion").get<std::string>(), mode);
    INFO(r.status().to_string());
    REQUIRE(r.ok());
    CHECK(to_openai_json(*r) == nlohmann::json(c.at("expected_message")));
    CHECK(std::string(finish_name(r->finish)) == c.at("expected_finish").get<std::string>());
  }
}

TEST_CASE("chat: an assistant turn renders and parses back to the same message", "[chat]") {
  const ordered_json tools = ordered_json::parse(R"([
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}])");
  struct Turn {
    const char* mode;
    bool with_tools;
    const char* assistant;
  };
  const Turn turns[] = {
      {"thinking", true, R"({"role": "assistant", "reasoning_content": "Look it up, then check the time.",
         "content": "Searching.", "tool_calls": [
           {"id": "x1", "type": "function", "function": {"name": "search", "arguments":
             {"query": "naïve \"quotes\"\nand <tags>", "limit": 5, "ratio": 0.25, "big": 1e300,
              "exact": true, "tags": ["α", "β"], "nested": {"a": [1, {"b": null}], "c": "d"}, "empty": ""}}},
           {"id": "x2", "type": "function", "function": {"name": "now", "arguments": "{}"}}]})"},
      {"chat", true, R"({"role": "assistant", "content": "", "tool_calls": [
           {"id": "y1", "type": "function", "function": {"name": "search", "arguments": "{\"query\": \"日本\", \"n\": -3}"}}]})"},
      {"thinking", false, R"({"role": "assistant", "reasoning_content": "Simple.", "content": "Hello 👋"})"},
      {"chat", false, R"({"role": "assistant", "content": "Line one.\n\nLine two."})"},
      {"thinking", false, R"({"role": "assistant", "reasoning_content": "", "content": "x", "tool_calls": [
           {"id": "z", "type": "function", "function": {"name": "now", "arguments": {}}}]})"},
  };
  for (const auto& t : turns) {
    const ordered_json asst = ordered_json::parse(t.assistant);
    INFO("mode " << t.mode << ", assistant " << asst.dump());
    ordered_json req = {{"thinking_mode", t.mode},
                        {"messages", ordered_json::array({{{"role", "user"}, {"content", "Go"}}})}};
    if (t.with_tools) req["tools"] = tools;
    auto head = render_prompt(req);
    req["messages"].push_back(asst);
    auto full = render_prompt(req);
    REQUIRE(head.ok());
    REQUIRE(full.ok());
    // The prompt without the assistant turn is a prefix of the one with it.
    REQUIRE(full->substr(0, head->size()) == *head);
    const std::string completion = full->substr(head->size());
    const Mode mode = std::string(t.mode) == "thinking" ? Mode::thinking : Mode::chat;
    auto p = parse_completion(completion, mode);
    INFO(p.status().to_string());
    REQUIRE(p.ok());
    CHECK(p->content == asst.value("content", std::string()));
    CHECK(p->reasoning_content == (mode == Mode::thinking ? asst.value("reasoning_content", std::string()) : ""));
    const ordered_json calls = asst.value("tool_calls", ordered_json::array());
    CHECK(p->finish == (calls.empty() ? Finish::stop : Finish::tool_calls));
    REQUIRE(p->tool_calls.size() == calls.size());
    for (size_t k = 0; k < calls.size(); ++k) {
      const auto& fn = calls[k]["function"];
      ordered_json args = fn["arguments"];
      if (args.is_string()) args = ordered_json::parse(args.get<std::string>());
      CHECK(p->tool_calls[k].name == fn["name"].get<std::string>());
      CHECK(p->tool_calls[k].arguments == args);  // ordered: same keys in the same order
    }
  }
}

TEST_CASE("chat: special tokens come from ChatTokens", "[chat]") {
  ChatTokens t;
  t.bos = "[BOS]";
  t.eos = "[EOS]";
  t.system = "[SYS]";
  t.user = "[USR]";
  t.assistant = "[AST]";
  t.think_open = "[T]";
  t.think_close = "[/T]";
  t.dsml = "|D|";
  t.image = "[IMG]";
  const ordered_json req = ordered_json::parse(R"({"thinking_mode": "thinking", "reasoning_effort": "low",
    "tools": [{"type": "function", "function": {"name": "f"}}],
    "messages": [{"role": "user", "content": "q"},
                 {"role": "assistant", "reasoning_content": "r", "content": "c", "tool_calls": [
                   {"type": "function", "function": {"name": "f", "arguments": "{\"k\": 1}"}}]}]})");
  auto r = render_prompt(req, t);
  REQUIRE(r.ok());
  const std::string expected_tail =
      "[USR]q[AST][T]r[/T]c\n\n<|D| calls>\n<|D| invoke name=\"f\">\n"
      "<|D| parameter name=\"k\" string=\"false\">1</|D| parameter>\n</|D| invoke>\n</|D| calls>[EOS]";
  CHECK(r->starts_with("[BOS][SYS]Reasoning Effort: 50 "));
  CHECK(r->find("triggered by [T]), you MUST output your complete reasoning inside [T]...[/T] BEFORE") !=
        std::string::npos);
  CHECK(r->ends_with(expected_tail));
  for (const char* def : {"｜", "<think>", "</think>"}) CHECK(r->find(def) == std::string::npos);
  auto p = parse_completion("r[/T]c\n\n<|D| calls>\n<|D| invoke name=\"f\">\n"
                            "<|D| parameter name=\"k\" string=\"false\">1</|D| parameter>\n</|D| invoke>\n"
                            "</|D| calls>[EOS]",
                            Mode::thinking, t);
  REQUIRE(p.ok());
  CHECK(p->reasoning_content == "r");
  REQUIRE(p->tool_calls.size() == 1);
  CHECK(arguments_text(p->tool_calls[0]) == "{\"k\": 1}");

  ChatTokens bad;
  bad.eos.clear();
  CHECK(render_prompt(req, bad).status().code() == Code::invalid_argument);
  CHECK(parse_completion("x", Mode::chat, bad).status().code() == Code::invalid_argument);
}

TEST_CASE("chat: the nlohmann::json overload renders with sorted keys", "[chat]") {
  const nlohmann::json req = nlohmann::json::parse(R"({"thinking_mode": "chat",
    "tools": [{"type": "function", "function": {"name": "f", "description": "d"}}],
    "messages": [{"role": "user", "content": "hi"}]})");
  auto r = render_prompt(req);
  REQUIRE(r.ok());
  CHECK(r->find("\n{\"description\": \"d\", \"name\": \"f\"}\n") != std::string::npos);
  CHECK(r->ends_with("<｜User｜>hi<｜Assistant｜></think>"));
}

TEST_CASE("chat: malformed requests give invalid_argument with a clear message", "[chat]") {
  struct Bad {
    const char* request;
    const char* says;
    Code code = Code::invalid_argument;
  };
  const Bad bad[] = {
      {R"([1, 2])", "JSON object"},
      {R"({})", "no \"messages\""},
      {R"({"messages": {"role": "user"}})", "must be an array"},
      {R"({"messages": []})", "empty"},
      {R"({"messages": [5]})", "messages[0] is not an object"},
      {R"({"messages": [{"content": "x"}]})", "no string \"role\""},
      {R"({"messages": [{"role": "developer", "content": "x"}]})", "unknown role \"developer\""},
      {R"({"messages": [{"role": "user", "content": 5}]})", "content must be"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", "no string \"text\""},
      {R"({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "a"}}]}]})",
       "only text parts", Code::unsupported},
      {R"({"messages": [{"role": "user", "content": "see <｜deepseek_image｜>"}]})", "image placeholder"},
      {R"({"messages": [{"role": "assistant", "reasoning_content": 3}]})", "reasoning_content must be a string"},
      {R"({"messages": [{"role": "assistant", "tool_calls": {}}]})", "tool_calls must be an array"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [7]}]})", "tool_calls[0] is not an object"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "a"}]}]})", "no \"function\" object"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]})",
       "function.name must be a non-empty string"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}]})",
       "arguments is missing"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}]})",
       "arguments must be a JSON string or an object"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "web", "function": {"name": "f", "arguments": "{}"}}]}]})",
       "type must be \"function\""},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"id": 4, "function": {"name": "f", "arguments": "{}"}}]}]})",
       ".id must be a string"},
      {R"({"messages": [{"role": "tool", "tool_call_id": 1, "content": "x"}]})", "tool_call_id must be a string"},
      {R"({"reasoning_effort": 0, "messages": [{"role": "user", "content": "x"}]})", "outside 1..100"},
      {R"({"reasoning_effort": 101, "messages": [{"role": "user", "content": "x"}]})", "outside 1..100"},
      {R"({"reasoning_effort": -5, "messages": [{"role": "user", "content": "x"}]})", "outside 1..100"},
      {R"({"reasoning_effort": "medium", "messages": [{"role": "user", "content": "x"}]})", "\"medium\""},
      {R"({"reasoning_effort": 50.5, "messages": [{"role": "user", "content": "x"}]})", "got 50.5"},
      {R"({"reasoning_effort": true, "messages": [{"role": "user", "content": "x"}]})", "got true"},
      {R"({"thinking_mode": "chat", "reasoning_effort": 200, "messages": [{"role": "user", "content": "x"}]})",
       "outside 1..100"},
      {R"({"thinking_mode": "fast", "messages": [{"role": "user", "content": "x"}]})", "thinking_mode"},
      {R"({"drop_thinking": "yes", "messages": [{"role": "user", "content": "x"}]})", "drop_thinking"},
      {R"({"tools": {}, "messages": [{"role": "user", "content": "x"}]})", "tools must be an array"},
      {R"({"tools": [{"type": "function"}], "messages": [{"role": "user", "content": "x"}]})",
       "tools[0] has no \"function\" object"},
      {R"({"tools": [{"function": {"description": "d"}}], "messages": [{"role": "user", "content": "x"}]})",
       "tools[0].function.name"},
  };
  for (const auto& b : bad) {
    INFO(b.request);
    const Status s = render_error(ordered_json::parse(b.request));
    INFO(s.to_string());
    CHECK(s.code() == b.code);
    CHECK(s.message().find(b.says) != std::string::npos);
  }
  // Boundaries of the integer effort are accepted.
  CHECK(render_prompt(ordered_json::parse(R"({"reasoning_effort": 1, "messages": [{"role": "user", "content": "x"}]})"))
            ->find("Reasoning Effort: 1 (") != std::string::npos);
  CHECK(render_prompt(ordered_json::parse(R"({"reasoning_effort": 100, "messages": [{"role": "user", "content": "x"}]})"))
            ->find("Reasoning Effort: 100 (") != std::string::npos);
}

TEST_CASE("chat: malformed completions give format_error", "[chat]") {
  const std::string calls = "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n";
  const std::string end = "</｜DSML｜ invoke>\n</｜DSML｜ calls><｜end▁of▁sentence｜>";
  struct Bad {
    std::string text;
    Mode mode;
    const char* says;
  };
  const Bad bad[] = {
      {"thinking" + calls + end, Mode::thinking, "tool calls inside the reasoning"},
      {"r</think>done<｜end▁of▁sentence｜>more", Mode::thinking, "unexpected text after"},
      {"</think>hello<｜end▁of▁sentence｜>", Mode::chat, "inside the content"},
      {"a<think>b</think>c<｜end▁of▁sentence｜>", Mode::thinking, "inside the reasoning"},
      {"never closed<｜end▁of▁sentence｜>", Mode::thinking, "inside the reasoning"},
      {calls + "<｜DSML｜ parameter name=\"k\">v</｜DSML｜ parameter>\n" + end, Mode::chat, "malformed"},
      {calls + "<｜DSML｜ parameter name=\"k\" string=\"maybe\">v</｜DSML｜ parameter>\n" + end, Mode::chat,
       "malformed"},
      {calls + "<｜DSML｜ parameter name=\"k\" string=\"true\">1</｜DSML｜ parameter>\n"
               "<｜DSML｜ parameter name=\"k\" string=\"true\">2</｜DSML｜ parameter>\n" + end,
       Mode::chat, "repeats parameter 'k'"},
      {calls + "<｜DSML｜ parameter name=\"k\" string=\"true\">1</｜DSML｜ parameter>xx\n" + end, Mode::chat,
       "after a tool parameter"},
      {"\n\n<｜DSML｜ calls>junk<｜DSML｜ invoke name=\"f\">\n\n" + end, Mode::chat, "expected '>\\n'"},
      {"\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke nom=\"f\">\n\n" + end, Mode::chat, "name=\"...\""},
      {"\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"\">\n\n" + end, Mode::chat, "empty name"},
      {"\n\n<｜DSML｜ calls>\nnot a call", Mode::chat, "malformed near"},
      {"\n\n<｜DSML｜ calls>\n</｜DSML｜ calls>tail<｜end▁of▁sentence｜>", Mode::chat, "after the tool calls"},
      {"\n\n<｜DSML｜ calls>\n</｜DSML｜ calls>tail", Mode::chat, "after the tool calls"},
  };
  for (const auto& b : bad) {
    INFO(b.text);
    const Status s = parse_error(b.text, b.mode);
    INFO(s.to_string());
    CHECK(s.code() == Code::format_error);
    CHECK(s.message().find(b.says) != std::string::npos);
  }
}

TEST_CASE("chat: truncation details", "[chat]") {
  // A cut inside a UTF-8 sequence drops the incomplete bytes.
  auto r = parse_completion("abc\xE4\xBD", Mode::thinking);
  REQUIRE(r.ok());
  CHECK(r->reasoning_content == "abc");
  CHECK(r->finish == Finish::truncated_reasoning);
  CHECK(r->truncated());
  CHECK(std::string(finish_reason(r->finish)) == "length");
  // Empty output in thinking mode: nothing yet.
  r = parse_completion("", Mode::thinking);
  REQUIRE(r.ok());
  CHECK(r->finish == Finish::truncated_reasoning);
  // A bare "\n\n<" may be content; once the DSML marker shows, it is the call block starting.
  r = parse_completion("x\n\n<", Mode::chat);
  REQUIRE(r.ok());
  CHECK(r->content == "x\n\n<");
  CHECK(r->finish == Finish::truncated_content);
  r = parse_completion("x\n\n<｜DSML｜ cal", Mode::chat);
  REQUIRE(r.ok());
  CHECK(r->content == "x");
  CHECK(r->finish == Finish::truncated_tool_calls);
  // Cut right after a complete invoke's end tag keeps the call.
  r = parse_completion("\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n\n</｜DSML｜ invoke", Mode::chat);
  REQUIRE(r.ok());
  REQUIRE(r->tool_calls.size() == 1);
  CHECK(r->finish == Finish::truncated_tool_calls);
  // Complete results are not truncated.
  r = parse_completion("ok<｜end▁of▁sentence｜>", Mode::chat);
  REQUIRE(r.ok());
  CHECK_FALSE(r->truncated());
  CHECK(std::string(finish_reason(r->finish)) == "stop");
  CHECK(std::string(finish_reason(Finish::tool_calls)) == "tool_calls");
}

TEST_CASE("chat: to_openai_json carries call ids when set", "[chat]") {
  ParsedMessage m;
  m.content = "c";
  ToolCall c;
  c.id = "call_9";
  c.name = "f";
  c.arguments = ordered_json::parse(R"({"b": 1, "a": [true, 1.0]})");
  m.tool_calls.push_back(c);
  const nlohmann::json j = to_openai_json(m);
  CHECK(j["tool_calls"][0]["id"] == "call_9");
  CHECK(j["tool_calls"][0]["function"]["arguments"] == "{\"b\": 1, \"a\": [true, 1.0]}");
  CHECK(j["role"] == "assistant");
}

TEST_CASE("chat: JSON text follows Python's json.dumps", "[chat]") {
  auto f = [](double v) {
    std::string s;
    chat_detail::py_json_float(s, v);
    return s;
  };
  CHECK(f(0.0) == "0.0");
  CHECK(f(-0.0) == "-0.0");
  CHECK(f(1.0) == "1.0");
  CHECK(f(0.1) == "0.1");
  CHECK(f(2.5) == "2.5");
  CHECK(f(123.456) == "123.456");
  CHECK(f(1e-4) == "0.0001");
  CHECK(f(1e-5) == "1e-05");
  CHECK(f(1.5e-7) == "1.5e-07");
  CHECK(f(1e15) == "1000000000000000.0");
  CHECK(f(1e16) == "1e+16");
  CHECK(f(1.5e16) == "1.5e+16");
  CHECK(f(1e300) == "1e+300");
  CHECK(f(-2.0e-10) == "-2e-10");
  CHECK(chat_detail::py_json_dumps(ordered_json::parse(R"({"s": "a\"b\\c\n\u0001é", "l": [], "o": {}, "n": -7})")) ==
        "{\"s\": \"a\\\"b\\\\c\\n\\u0001é\", \"l\": [], \"o\": {}, \"n\": -7}");
}

TEST_CASE("chat_format: image parts become the image placeholder, joined with the text parts", "[chat_format]") {
  const ChatTokens t;
  auto r = render_prompt(nlohmann::json::parse(R"({"thinking_mode": "chat", "messages": [{"role": "user", "content": [
      {"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": "data:x"}},
      {"type": "input_image", "image_url": "data:y"}]}]})"), t);
  REQUIRE(r.ok());
  CHECK(r->find(t.user + "What is this?\n\n" + t.image + "\n\n" + t.image + t.assistant) != std::string::npos);
  // Without a placeholder token the image part is refused.
  ChatTokens none = t;
  none.image.clear();
  auto n = render_prompt(nlohmann::json::parse(R"({"messages": [{"role": "user", "content": [
      {"type": "image_url", "image_url": {"url": "data:x"}}]}]})"), none);
  CHECK(n.status().code() == Code::unsupported);
}
