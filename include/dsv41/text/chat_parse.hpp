// DeepSeek-V4.1 model output -> assistant message: reasoning, content and DSML tool calls.
//
// `text` is the decoded completion that follows the generation prompt (so in thinking mode it
// starts inside the reasoning, the prompt having opened it), including the final eos string when
// the model produced one. Without eos the output counts as truncated: what is complete is
// returned and `finish` says where generation stopped. Output that breaks the format (tool calls
// before the reasoning is closed, malformed DSML, text after eos, special tokens in the text)
// gives Code::format_error.
#pragma once
#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <dsv41/core/status.hpp>
#include <dsv41/text/chat_common.hpp>

namespace dsv41::text {

struct ToolCall {
  std::string id;  // empty from parse_completion; the server assigns ids
  std::string name;
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
};

enum class Finish {
  stop,                  // eos after the content
  tool_calls,            // eos after a complete tool-call block
  truncated_reasoning,   // no eos: stopped inside the reasoning
  truncated_content,     // no eos: stopped inside the content
  truncated_tool_calls,  // no eos: stopped inside (or right after) the tool-call block
};

struct ParsedMessage {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCall> tool_calls;  // complete calls only
  Finish finish = Finish::stop;
  bool truncated() const { return finish != Finish::stop && finish != Finish::tool_calls; }
};

// OpenAI finish_reason: "stop", "tool_calls" or "length".
inline const char* finish_reason(Finish f) {
  switch (f) {
    case Finish::stop: return "stop";
    case Finish::tool_calls: return "tool_calls";
    default: return "length";
  }
}

// Arguments as the OpenAI "arguments" string: json.dumps style (", " and ": ").
inline std::string arguments_text(const ToolCall& c) { return chat_detail::py_json_dumps(c.arguments); }

namespace chat_detail {

struct Found {
  size_t pos = std::string_view::npos;  // start of the match
  size_t which = 0;                      // index into the stop list
  bool ok() const { return pos != std::string_view::npos; }
};

inline Found find_first(std::string_view text, size_t from, std::initializer_list<std::string_view> stops) {
  Found f;
  size_t k = 0;
  for (auto s : stops) {
    const size_t p = text.find(s, from);
    if (p != std::string_view::npos && (!f.ok() || p < f.pos)) f = {p, k};
    ++k;
  }
  return f;
}

// Length of the longest suffix of s that is a proper prefix of lit and at least min_len long.
inline size_t partial_suffix(std::string_view s, std::string_view lit, size_t min_len) {
  for (size_t n = std::min(s.size(), lit.size() - 1); n >= min_len && n > 0; --n)
    if (s.substr(s.size() - n) == lit.substr(0, n)) return n;
  return 0;
}

// True when rest could still become one of the literals (the text ended inside it).
inline bool is_prefix_of_any(std::string_view rest, std::initializer_list<std::string_view> lits) {
  for (auto l : lits)
    if (l.starts_with(rest)) return true;
  return false;
}

inline std::string trim_utf8(std::string_view s) { return std::string(s.substr(0, s.size() - incomplete_utf8_tail(s))); }

// Header after "<DSML invoke": optional whitespace, name="NAME">\n (one more \n when the call has
// no parameters).
inline Result<std::string> invoke_name(std::string_view h) {
  size_t i = 0;
  while (i < h.size() && (h[i] == ' ' || h[i] == '\t' || h[i] == '\n' || h[i] == '\r')) ++i;
  std::string_view b = h.substr(i);
  if (!b.starts_with("name=\""))
    return error(Code::format_error, "tool call header is not name=\"...\": '" + std::string(h) + "'");
  b.remove_prefix(6);
  if (b.ends_with("\">\n\n")) b.remove_suffix(4);
  else if (b.ends_with("\">\n")) b.remove_suffix(3);
  else return error(Code::format_error, "tool call header does not end in \">\\n\": '" + std::string(h) + "'");
  if (b.empty()) return error(Code::format_error, "tool call with an empty name");
  return std::string(b);
}

struct RawParam {
  std::string name;
  bool is_string = false;
  std::string value;
};

// Body between "<DSML parameter" and "/DSML parameter": ' name="K" string="true|false">VALUE<'.
inline Result<RawParam> param_body(std::string_view c) {
  auto bad = [&] { return error(Code::format_error, "tool parameter is malformed: '" + std::string(c) + "'"); };
  if (!c.starts_with(" name=\"")) return bad();
  const size_t start = 7;
  const std::string_view mt = "\" string=\"true\">", mf = "\" string=\"false\">";
  size_t p = start;
  RawParam r;
  size_t vstart = 0;
  for (;; ++p) {
    p = c.find("\" string=\"", p);
    if (p == std::string_view::npos) return bad();
    if (c.substr(p).starts_with(mt)) { r.is_string = true; vstart = p + mt.size(); break; }
    if (c.substr(p).starts_with(mf)) { r.is_string = false; vstart = p + mf.size(); break; }
  }
  size_t vend;
  if (c.ends_with("<")) vend = c.size() - 1;
  else if (c.ends_with("<\n")) vend = c.size() - 2;
  else return bad();
  if (vend < vstart) return bad();
  r.name = std::string(c.substr(start, p - start));
  r.value = std::string(c.substr(vstart, vend - vstart));
  return r;
}

struct CallsResult {
  std::vector<ToolCall> calls;
  std::optional<ToolCall> partial;  // truncated inside a call whose name is known: it, with its complete parameters
  bool truncated = false;
  size_t end = 0;  // just after the closing calls tag
};

// Tool calls from just after "\n\n<DSML calls".
inline Result<CallsResult> parse_calls(std::string_view text, size_t p, const ChatTokens& t) {
  const std::string calls_end = "</" + t.dsml + " calls>";
  const std::string invoke_start = "<" + t.dsml + " invoke";
  const std::string invoke_end = "</" + t.dsml + " invoke";
  const std::string param_start = "<" + t.dsml + " parameter";
  const std::string param_end = "/" + t.dsml + " parameter";
  const std::string gap_invoke = ">\n" + invoke_start, gap_end = ">\n" + calls_end;
  CallsResult r;
  for (;;) {
    Found f = find_first(text, p, {invoke_start, calls_end});
    if (!f.ok()) {
      if (is_prefix_of_any(text.substr(p), {gap_invoke, gap_end})) { r.truncated = true; return r; }
      return error(Code::format_error, "tool-call block is malformed near '" + std::string(text.substr(p, 80)) + "'");
    }
    if (text.substr(p, f.pos - p) != ">\n")
      return error(Code::format_error, "expected '>\\n' in the tool-call block, got '" +
                                           std::string(text.substr(p, f.pos - p)) + "'");
    if (f.which == 1) {
      r.end = f.pos + calls_end.size();
      return r;
    }
    p = f.pos + invoke_start.size();
    Found g = find_first(text, p, {param_start, invoke_end});
    if (!g.ok()) {
      r.truncated = true;
      if (const size_t h = text.find("\">\n", p); h != std::string_view::npos)  // the header is complete
        if (auto name = invoke_name(text.substr(p, h + 3 - p)); name.ok()) {
          r.partial = ToolCall{};
          r.partial->name = std::move(name.value());
        }
      return r;
    }
    auto name = invoke_name(text.substr(p, g.pos - p));
    if (!name) return name.status();
    ToolCall call;
    call.name = std::move(name.value());
    while (g.which == 0) {
      p = g.pos + param_start.size();
      const size_t q = text.find(param_end, p);
      if (q == std::string_view::npos) {
        r.truncated = true;
        r.partial = std::move(call);
        return r;
      }
      auto prm = param_body(text.substr(p, q - p));
      if (!prm) return prm.status();
      if (call.arguments.contains(prm->name))
        return error(Code::format_error, "tool call " + call.name + " repeats parameter '" + prm->name + "'");
      if (prm->is_string) {
        call.arguments[prm->name] = prm->value;
      } else {
        // string="false" holds JSON; text that does not parse is kept as a string.
        auto v = nlohmann::ordered_json::parse(prm->value, nullptr, false);
        if (v.is_discarded()) call.arguments[prm->name] = prm->value;
        else call.arguments[prm->name] = std::move(v);
      }
      p = q + param_end.size();
      g = find_first(text, p, {param_start, invoke_end});
      if (!g.ok()) {
        r.truncated = true;
        r.partial = std::move(call);
        return r;
      }
      if (text.substr(p, g.pos - p) != ">\n")
        return error(Code::format_error, "expected '>\\n' after a tool parameter, got '" +
                                             std::string(text.substr(p, g.pos - p)) + "'");
    }
    r.calls.push_back(std::move(call));
    p = g.pos + invoke_end.size();
  }
}

inline Result<ParsedMessage> parse_completion_impl(std::string_view text, Mode mode, const ChatTokens& t) {
  DSV41_TRY(validate_tokens(t));
  const std::string calls_start = "\n\n<" + t.dsml + " calls";
  const size_t min_partial = 3 + t.dsml.size();  // "\n\n<" + marker: clearly the block starting
  ParsedMessage msg;
  size_t p = 0;
  bool in_calls = false, done = false;

  if (mode == Mode::thinking) {
    Found f = find_first(text, 0, {t.think_close, calls_start});
    if (!f.ok()) {
      std::string_view r = text;
      r.remove_suffix(partial_suffix(r, calls_start, min_partial));
      msg.reasoning_content = trim_utf8(r);
      msg.finish = Finish::truncated_reasoning;
      done = true;
    } else if (f.which == 1) {
      return error(Code::format_error, "tool calls inside the reasoning (no " + t.think_close + " before them)");
    } else {
      msg.reasoning_content = std::string(text.substr(0, f.pos));
      p = f.pos + t.think_close.size();
    }
  }
  if (!done) {
    Found f = find_first(text, p, {t.eos, calls_start});
    if (!f.ok()) {
      std::string_view r = text.substr(p);
      const size_t cut = partial_suffix(r, calls_start, min_partial);
      r.remove_suffix(cut);
      msg.content = trim_utf8(r);
      msg.finish = cut ? Finish::truncated_tool_calls : Finish::truncated_content;
      done = true;
    } else {
      msg.content = std::string(text.substr(p, f.pos - p));
      if (f.which == 0) {
        p = f.pos + t.eos.size();
        msg.finish = Finish::stop;
      } else {
        p = f.pos + calls_start.size();
        in_calls = true;
      }
    }
  }
  if (!done && in_calls) {
    auto cr = parse_calls(text, p, t);
    if (!cr) return cr.status();
    msg.tool_calls = std::move(cr->calls);
    if (cr->truncated) {
      msg.finish = Finish::truncated_tool_calls;
      done = true;
    } else {
      p = cr->end;
      const size_t e = text.find(t.eos, p);
      if (e == std::string_view::npos) {
        if (p != text.size())
          return error(Code::format_error, "unexpected text after the tool calls: '" + std::string(text.substr(p, 80)) + "'");
        msg.finish = Finish::truncated_tool_calls;
        done = true;
      } else {
        if (e != p)
          return error(Code::format_error, "unexpected text after the tool calls: '" + std::string(text.substr(p, e - p)) + "'");
        p = e + t.eos.size();
        msg.finish = Finish::tool_calls;
      }
    }
  }
  if (!done && p != text.size())
    return error(Code::format_error, "unexpected text after " + t.eos + ": '" + std::string(text.substr(p, 80)) + "'");

  for (const std::string* sp : {&t.bos, &t.eos, &t.think_open, &t.think_close, &t.dsml}) {
    if (msg.content.find(*sp) != std::string::npos)
      return error(Code::format_error, "special token " + *sp + " inside the content");
    if (msg.reasoning_content.find(*sp) != std::string::npos)
      return error(Code::format_error, "special token " + *sp + " inside the reasoning");
  }
  return msg;
}

}  // namespace chat_detail

// Splits a completion into reasoning, content and tool calls (see the top of this file).
inline Result<ParsedMessage> parse_completion(std::string_view text, Mode mode, const ChatTokens& toks = {}) {
  try {
    return chat_detail::parse_completion_impl(text, mode, toks);
  } catch (const std::exception& e) {
    return error(Code::internal, std::string("parse_completion: ") + e.what());
  }
}

// {"role":"assistant","content":..,"reasoning_content":..,"tool_calls":[{"type":"function",
// "function":{"name":..,"arguments":"<JSON text>"}}]} ("id" on a call only when set), the shape
// encoding.py's parser returns.
inline nlohmann::json to_openai_json(const ParsedMessage& m) {
  nlohmann::json j = nlohmann::json::object();
  j["role"] = "assistant";
  j["content"] = m.content;
  j["reasoning_content"] = m.reasoning_content;
  j["tool_calls"] = nlohmann::json::array();
  for (const auto& c : m.tool_calls) {
    nlohmann::json tc = {{"type", "function"},
                         {"function", {{"name", c.name}, {"arguments", arguments_text(c)}}}};
    if (!c.id.empty()) tc["id"] = c.id;
    j["tool_calls"].push_back(std::move(tc));
  }
  return j;
}

}  // namespace dsv41::text
