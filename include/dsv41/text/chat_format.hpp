// DeepSeek-V4.1 chat prompt: an OpenAI-style request rendered into the text the model was trained
// on (the official encoding/encoding.py, V4.1 DSML tool format). Parsing of model output lives in
// chat_parse.hpp, included here.
//
// Request keys (others are ignored):
//   messages          array, required, non-empty; roles system | user | assistant | tool.
//                     content: string, null, or an array of {"type":"text","text":...} parts
//                     (joined with "\n\n"); assistant: reasoning_content, tool_calls (OpenAI form,
//                     arguments a JSON string or an object); tool: tool_call_id, content.
//   tools             OpenAI function schemas; rendered into the first system message (an empty
//                     system message is put first when the conversation has none at index 0).
//   thinking_mode     "thinking" (default) | "chat".
//   reasoning_effort  "low" (50) | "high" (75, default) | "max" (100) | integer 1..100.
//   drop_thinking     bool, default true: reasoning of turns before the last user turn is not
//                     rendered (always off when tools are given, as in encoding.py).
// A trailing assistant message is rendered complete (ending in eos) with no generation prompt;
// otherwise the prompt ends with assistant + think_open (thinking) or think_close (chat).
// Pass nlohmann::ordered_json to keep the key order of tool schemas and arguments as sent.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <dsv41/core/status.hpp>
#include <dsv41/text/chat_common.hpp>
#include <dsv41/text/chat_parse.hpp>
#include <dsv41/text/prompt_text.hpp>

namespace dsv41::text {

inline constexpr int kReasoningEffortLow = 50;
inline constexpr int kReasoningEffortHigh = 75;  // the default
inline constexpr int kReasoningEffortMax = 100;

namespace chat_detail {

enum class Role { system, user, assistant };

struct Block {               // one part of a (merged) user turn
  bool tool_result = false;  // a tool message's content, wrapped in <tool_result>
  std::string text;
  std::string tool_call_id;
};

struct DsmlParam {
  std::string key;
  bool is_string = false;
  std::string value;  // raw text for strings, Python-style JSON otherwise
};

struct CallIn {
  std::string id;
  std::string name;
  std::vector<DsmlParam> params;
};

struct Msg {
  Role role = Role::user;
  std::string content;                // system, assistant
  std::string reasoning;              // assistant
  std::vector<Block> blocks;          // user
  std::vector<CallIn> calls;          // assistant
  std::vector<std::string> tools;     // system: JSON text of each function schema
};

inline std::string where(size_t i) { return "messages[" + std::to_string(i) + "]"; }

inline Status check_no_image_token(std::string_view s, const std::string& what, const ChatTokens& t) {
  if (!t.image.empty() && s.find(t.image) != std::string_view::npos)
    return error(Code::invalid_argument, what + " contains the image placeholder token " + t.image +
                                             " (images are not supported)");
  return Status::Ok();
}

// Whether a content part is an image (OpenAI image_url, Responses input_image, Anthropic image).
template <class J>
bool is_image_part(const J& p) {
  auto ty = p.find("type");
  if (ty == p.end() || !ty->is_string()) return false;
  const std::string type = ty->template get<std::string>();
  return type == "image_url" || type == "input_image" || type == "image";
}

// Text parts of a content field: string -> {s}; null/absent -> {""}; array of text parts -> each. An image part
// becomes the image placeholder (as the reference's encoder does); the host supplies the images in that order.
template <class J>
Result<std::vector<std::string>> content_parts(const J& m, const char* key, const std::string& what,
                                               const ChatTokens& t) {
  std::vector<std::string> parts;
  std::vector<size_t> image_parts;  // indices of parts that are image placeholders
  auto it = m.find(key);
  if (it == m.end() || it->is_null()) {
    parts.emplace_back();
  } else if (it->is_string()) {
    parts.push_back(it->template get<std::string>());
  } else if (it->is_array()) {
    for (size_t k = 0; k < it->size(); ++k) {
      const auto& p = (*it)[k];
      const std::string pw = what + "." + key + "[" + std::to_string(k) + "]";
      if (!p.is_object()) return error(Code::invalid_argument, pw + " is not an object");
      auto ty = p.find("type");
      if (ty == p.end() || !ty->is_string())
        return error(Code::invalid_argument, pw + " has no string \"type\"");
      const std::string type = ty->template get<std::string>();
      if (is_image_part(p)) {
        if (t.image.empty()) return error(Code::unsupported, pw + " is an image; this tokenizer has no image placeholder");
        parts.push_back(t.image);
        image_parts.push_back(parts.size() - 1);
        continue;
      }
      if (type != "text")
        return error(Code::unsupported, pw + " has type \"" + type + "\"; only text parts are supported");
      auto tx = p.find("text");
      if (tx == p.end() || !tx->is_string())
        return error(Code::invalid_argument, pw + " has no string \"text\"");
      parts.push_back(tx->template get<std::string>());
    }
  } else {
    return error(Code::invalid_argument, what + "." + key + " must be a string, null or an array of text parts");
  }
  for (size_t k = 0; k < parts.size(); ++k)
    if (std::find(image_parts.begin(), image_parts.end(), k) == image_parts.end())
      DSV41_TRY(check_no_image_token(parts[k], what + "." + key, t));
  return parts;
}

inline std::string join(const std::vector<std::string>& v, std::string_view sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += sep;
    s += v[i];
  }
  return s;
}

template <class J>
void params_from_object(const J& obj, std::vector<DsmlParam>& out) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    DsmlParam p;
    p.key = it.key();
    p.is_string = it.value().is_string();
    p.value = p.is_string ? it.value().template get<std::string>() : py_json_dumps(it.value());
    out.push_back(std::move(p));
  }
}

// encoding.py's argument handling: an object is used as is; a string is JSON-decoded (twice at
// most, for double-encoded arguments); anything that does not end up an object is passed as a
// single string parameter named "arguments".
template <class J>
Result<std::vector<DsmlParam>> call_params(const J& args, const std::string& what) {
  std::vector<DsmlParam> out;
  if (args.is_object()) {
    params_from_object(args, out);
    return out;
  }
  if (!args.is_string())
    return error(Code::invalid_argument, what + ".function.arguments must be a JSON string or an object");
  const std::string raw = args.template get<std::string>();
  nlohmann::ordered_json v = nlohmann::ordered_json::parse(raw, nullptr, false);
  if (v.is_string()) v = nlohmann::ordered_json::parse(v.get<std::string>(), nullptr, false);
  if (v.is_object()) {
    params_from_object(v, out);
  } else {
    out.push_back({"arguments", true, raw});
  }
  return out;
}

template <class J>
Result<std::vector<CallIn>> tool_calls_of(const J& m, const std::string& what) {
  std::vector<CallIn> calls;
  auto it = m.find("tool_calls");
  if (it == m.end() || it->is_null()) return calls;
  if (!it->is_array()) return error(Code::invalid_argument, what + ".tool_calls must be an array");
  for (size_t k = 0; k < it->size(); ++k) {
    const auto& tc = (*it)[k];
    const std::string w = what + ".tool_calls[" + std::to_string(k) + "]";
    if (!tc.is_object()) return error(Code::invalid_argument, w + " is not an object");
    auto ty = tc.find("type");
    if (ty != tc.end() && !(ty->is_string() && ty->template get<std::string>() == "function"))
      return error(Code::invalid_argument, w + ".type must be \"function\"");
    auto fn = tc.find("function");
    if (fn == tc.end() || !fn->is_object())
      return error(Code::invalid_argument, w + " has no \"function\" object");
    auto nm = fn->find("name");
    if (nm == fn->end() || !nm->is_string() || nm->template get<std::string>().empty())
      return error(Code::invalid_argument, w + ".function.name must be a non-empty string");
    auto ar = fn->find("arguments");
    if (ar == fn->end()) return error(Code::invalid_argument, w + ".function.arguments is missing");
    CallIn c;
    c.name = nm->template get<std::string>();
    // The id orders tool results; encoding.py also looks at function.id.
    for (const auto* holder : {&tc, &*fn}) {
      auto id = holder->find("id");
      if (id == holder->end() || id->is_null()) continue;
      if (!id->is_string()) return error(Code::invalid_argument, w + ".id must be a string");
      if (c.id.empty()) c.id = id->template get<std::string>();
    }
    auto ps = call_params(*ar, w);
    if (!ps) return ps.status();
    c.params = std::move(ps.value());
    calls.push_back(std::move(c));
  }
  return calls;
}

template <class J>
Result<std::vector<std::string>> tools_of(const J& req) {
  std::vector<std::string> tools;
  auto it = req.find("tools");
  if (it == req.end() || it->is_null()) return tools;
  if (!it->is_array()) return error(Code::invalid_argument, "tools must be an array");
  for (size_t k = 0; k < it->size(); ++k) {
    const auto& tool = (*it)[k];
    const std::string w = "tools[" + std::to_string(k) + "]";
    if (!tool.is_object()) return error(Code::invalid_argument, w + " is not an object");
    auto ty = tool.find("type");
    if (ty != tool.end() && !(ty->is_string() && ty->template get<std::string>() == "function"))
      return error(Code::invalid_argument, w + ".type must be \"function\"");
    auto fn = tool.find("function");
    if (fn == tool.end() || !fn->is_object())
      return error(Code::invalid_argument, w + " has no \"function\" object");
    auto nm = fn->find("name");
    if (nm == fn->end() || !nm->is_string() || nm->template get<std::string>().empty())
      return error(Code::invalid_argument, w + ".function.name must be a non-empty string");
    tools.push_back(py_json_dumps(*fn));
  }
  return tools;
}

template <class J>
Result<int> effort_of(const J& req) {
  auto it = req.find("reasoning_effort");
  if (it == req.end() || it->is_null()) return kReasoningEffortHigh;
  if (it->is_string()) {
    const std::string s = it->template get<std::string>();
    if (s == "low") return kReasoningEffortLow;
    if (s == "high") return kReasoningEffortHigh;
    if (s == "max") return kReasoningEffortMax;
    return error(Code::invalid_argument,
                 "reasoning_effort \"" + s + "\" is not one of \"low\", \"high\", \"max\" or an integer 1..100");
  }
  if (it->is_number_integer()) {
    if (it->is_number_unsigned()) {
      const auto u = it->template get<std::uint64_t>();
      if (u >= 1 && u <= 100) return static_cast<int>(u);
    } else {
      const auto v = it->template get<std::int64_t>();
      if (v >= 1 && v <= 100) return static_cast<int>(v);
    }
    return error(Code::invalid_argument, "reasoning_effort " + py_json_dumps(*it) + " is outside 1..100");
  }
  return error(Code::invalid_argument,
               "reasoning_effort must be \"low\", \"high\", \"max\" or an integer 1..100, got " + py_json_dumps(*it));
}

// The "## Tools" section of the system prompt.
inline void tools_text(PromptText& out, const std::vector<std::string>& schemas, const ChatTokens& t) {
  const std::string calls = t.dsml + " calls", invoke = t.dsml + " invoke", param = t.dsml + " parameter";
  std::string s;
  s += "## Tools\n\nYou have access to a set of tools to help answer the user's question. "
       "You can invoke tools by writing a \"<" + calls + ">\" block like the following:\n\n";
  s += "<" + calls + ">\n";
  s += "<" + invoke + " name=\"$TOOL_NAME\">\n";
  s += "<" + param + " name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + param + ">\n";
  s += "...\n";
  s += "</" + invoke + ">\n";
  s += "<" + invoke + " name=\"$TOOL_NAME2\">\n";
  s += "...\n";
  s += "</" + invoke + ">\n";
  s += "</" + calls + ">\n\n";
  s += "String parameters should be specified as is and set `string=\"true\"`. For all other types "
       "(numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n";
  s += "If thinking_mode is enabled (triggered by " + t.think_open + "), you MUST output your complete "
       "reasoning inside " + t.think_open + "..." + t.think_close + " BEFORE any tool calls or final response.\n\n";
  s += "Otherwise, output directly after " + t.think_close + " with tool calls or final response.\n\n";
  s += "### Available Tool Schemas\n\n";
  out += s;
  for (size_t i = 0; i < schemas.size(); ++i) {
    if (i) out += "\n";
    out.add_literal(schemas[i]);
  }
  out += "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
}

// Client text as literal, except the image placeholders that image parts became (content_parts; the client's own
// text may not hold one: check_no_image_token), which stay the control token.
inline void add_content(PromptText& out, std::string_view s, const ChatTokens& t) {
  if (t.image.empty()) {
    out.add_literal(s);
    return;
  }
  for (size_t at = 0;;) {
    const size_t f = s.find(t.image, at);
    if (f == std::string_view::npos) {
      out.add_literal(s.substr(at));
      return;
    }
    out.add_literal(s.substr(at, f - at));
    out += t.image;
    at = f + t.image.size();
  }
}

// "\n\n<calls>\n<invoke name=..>\n<parameter ..>v</parameter>\n...\n</invoke>\n...\n</calls>"
inline void tool_calls_text(PromptText& out, const std::vector<CallIn>& calls, const ChatTokens& t) {
  const std::string callsn = t.dsml + " calls", invoke = t.dsml + " invoke", param = t.dsml + " parameter";
  out += "\n\n<" + callsn + ">\n";
  for (size_t i = 0; i < calls.size(); ++i) {
    const CallIn& c = calls[i];
    if (i) out += "\n";
    out += "<" + invoke + " name=\"";
    out.add_literal(c.name);
    out += "\">\n";
    for (size_t k = 0; k < c.params.size(); ++k) {
      const DsmlParam& p = c.params[k];
      if (k) out += "\n";
      out += "<" + param + " name=\"";
      out.add_literal(p.key);
      out += std::string("\" string=\"") + (p.is_string ? "true" : "false") + "\">";
      out.add_literal(p.value);
      out += "</" + param + ">";
    }
    out += "\n</" + invoke + ">";
  }
  out += "\n</" + callsn + ">";
}

inline std::string effort_text(int effort) {
  return "Reasoning Effort: " + std::to_string(effort) +
         " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
}

template <class J>
Result<PromptText> render_prompt_impl(const J& req, const ChatTokens& t) {
  DSV41_TRY(validate_tokens(t));
  if (!req.is_object()) return error(Code::invalid_argument, "request must be a JSON object");

  Mode mode = Mode::thinking;
  if (auto it = req.find("thinking_mode"); it != req.end() && !it->is_null()) {
    const std::string s = it->is_string() ? it->template get<std::string>() : py_json_dumps(*it);
    if (s == "thinking") mode = Mode::thinking;
    else if (s == "chat") mode = Mode::chat;
    else return error(Code::invalid_argument, "thinking_mode must be \"thinking\" or \"chat\", got " + s);
  }
  auto effort = effort_of(req);  // checked in both modes, as encoding.py does
  if (!effort) return effort.status();
  bool drop_thinking = true;
  if (auto it = req.find("drop_thinking"); it != req.end() && !it->is_null()) {
    if (!it->is_boolean()) return error(Code::invalid_argument, "drop_thinking must be a boolean");
    drop_thinking = it->template get<bool>();
  }

  auto mit = req.find("messages");
  if (mit == req.end()) return error(Code::invalid_argument, "request has no \"messages\"");
  if (!mit->is_array()) return error(Code::invalid_argument, "messages must be an array");
  if (mit->empty()) return error(Code::invalid_argument, "messages is empty");

  // Normalize, merging tool results and consecutive user messages into one user turn.
  std::vector<Msg> msgs;
  for (size_t i = 0; i < mit->size(); ++i) {
    const auto& m = (*mit)[i];
    const std::string w = where(i);
    if (!m.is_object()) return error(Code::invalid_argument, w + " is not an object");
    auto rit = m.find("role");
    if (rit == m.end() || !rit->is_string()) return error(Code::invalid_argument, w + " has no string \"role\"");
    const std::string role = rit->template get<std::string>();
    auto parts = content_parts(m, "content", w, t);
    if (!parts) return parts.status();
    if (role == "user" || role == "tool") {
      if (msgs.empty() || msgs.back().role != Role::user) msgs.push_back(Msg{});
      Msg& u = msgs.back();
      if (role == "user") {
        for (auto& p : parts.value()) u.blocks.push_back({false, std::move(p), {}});
      } else {
        Block b;
        b.tool_result = true;
        b.text = join(parts.value(), "\n\n");
        if (auto id = m.find("tool_call_id"); id != m.end() && !id->is_null()) {
          if (!id->is_string()) return error(Code::invalid_argument, w + ".tool_call_id must be a string");
          b.tool_call_id = id->template get<std::string>();
        }
        u.blocks.push_back(std::move(b));
      }
    } else if (role == "system") {
      Msg s;
      s.role = Role::system;
      s.content = join(parts.value(), "\n\n");
      msgs.push_back(std::move(s));
    } else if (role == "assistant") {
      Msg a;
      a.role = Role::assistant;
      a.content = join(parts.value(), "\n\n");
      if (auto rc = m.find("reasoning_content"); rc != m.end() && !rc->is_null()) {
        if (!rc->is_string()) return error(Code::invalid_argument, w + ".reasoning_content must be a string");
        a.reasoning = rc->template get<std::string>();
        DSV41_TRY(check_no_image_token(a.reasoning, w + ".reasoning_content", t));
      }
      auto calls = tool_calls_of(m, w);
      if (!calls) return calls.status();
      a.calls = std::move(calls.value());
      msgs.push_back(std::move(a));
    } else {
      return error(Code::invalid_argument,
                   w + " has unknown role \"" + role + "\" (expected system, user, assistant or tool)");
    }
  }

  auto tools = tools_of(req);
  if (!tools) return tools.status();
  if (!tools->empty()) {
    if (msgs.front().role != Role::system) {
      Msg s;
      s.role = Role::system;
      msgs.insert(msgs.begin(), std::move(s));
    }
    msgs.front().tools = std::move(tools.value());
  }
  const bool drop = drop_thinking && msgs.front().tools.empty();

  // Tool results follow the order of the calls in the latest assistant turn that made calls.
  std::map<std::string, size_t> order;
  for (auto& m : msgs) {
    if (m.role == Role::assistant && !m.calls.empty()) {
      order.clear();
      for (size_t k = 0; k < m.calls.size(); ++k)
        if (!m.calls[k].id.empty()) order[m.calls[k].id] = k;
    } else if (m.role == Role::user && !order.empty()) {
      std::vector<Block> tr;
      for (const auto& b : m.blocks)
        if (b.tool_result) tr.push_back(b);
      if (tr.size() < 2) continue;
      auto rank = [&](const Block& b) {
        auto f = order.find(b.tool_call_id);
        return f == order.end() ? size_t{0} : f->second;
      };
      std::stable_sort(tr.begin(), tr.end(), [&](const Block& a, const Block& b) { return rank(a) < rank(b); });
      size_t k = 0;
      for (auto& b : m.blocks)
        if (b.tool_result) b = tr[k++];
    }
  }

  // The last user turn; a system message after the first counts as one.
  std::ptrdiff_t last_user = -1;
  for (std::ptrdiff_t i = static_cast<std::ptrdiff_t>(msgs.size()) - 1; i >= 0; --i) {
    const Role r = msgs[static_cast<size_t>(i)].role;
    if (r == Role::user || (r == Role::system && i > 0)) {
      last_user = i;
      break;
    }
  }

  const bool thinking = mode == Mode::thinking;
  PromptText out;
  out += t.bos;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const Msg& m = msgs[i];
    const auto si = static_cast<std::ptrdiff_t>(i);
    if (i == 0 && (thinking || m.role == Role::system)) out += t.system;
    if (i == 0 && thinking) out += effort_text(effort.value());
    switch (m.role) {
      case Role::system:
        if (i > 0) out += t.system;
        add_content(out, m.content, t);
        if (!m.tools.empty()) {
          out += "\n\n";
          tools_text(out, m.tools, t);
        }
        break;
      case Role::user: {
        out += t.user;
        for (size_t k = 0; k < m.blocks.size(); ++k) {
          const Block& b = m.blocks[k];
          if (k) out += "\n\n";
          if (b.tool_result) out += "<tool_result>";
          add_content(out, b.text, t);
          if (b.tool_result) out += "</tool_result>";
        }
        break;
      }
      case Role::assistant:
        if (thinking && (!drop || si > last_user)) {
          out.add_literal(m.reasoning);
          out += t.think_close;
        }
        add_content(out, m.content, t);
        if (!m.calls.empty()) tool_calls_text(out, m.calls, t);
        out += t.eos;
        break;
    }
    // Generation header after a user turn (or mid-conversation system) that an assistant turn
    // follows, or that ends the conversation.
    if (i + 1 < msgs.size() && msgs[i + 1].role != Role::assistant) continue;
    if (m.role == Role::user || (m.role == Role::system && i > 0)) {
      out += t.assistant;
      out += thinking && (!drop || si >= last_user) ? t.think_open : t.think_close;
    }
  }
  return out;
}

}  // namespace chat_detail

// The prompt for an OpenAI-style chat request (see the top of this file), with the ranges the client wrote
// (prompt_text.hpp): encode it with Tokenizer::encode(const PromptText&) so that content cannot forge turns.
// A nlohmann::json request has its object keys sorted, so tool schemas and object arguments render in sorted
// key order; nlohmann::ordered_json keeps them as sent.
template <class J>
  requires std::is_same_v<J, nlohmann::json> || std::is_same_v<J, nlohmann::ordered_json>
Result<PromptText> render_prompt_text(const J& request, const ChatTokens& toks = {}) {
  try {
    return chat_detail::render_prompt_impl(request, toks);
  } catch (const std::exception& e) {
    return error(Code::internal, std::string("render_prompt: ") + e.what());
  }
}

// The prompt's text alone (what encoding.py produces). Tokenizing it whole reads special-token text in the
// content as control tokens; render_prompt_text keeps the content apart.
inline Result<std::string> render_prompt(const nlohmann::ordered_json& request, const ChatTokens& toks = {}) {
  auto r = render_prompt_text(request, toks);
  if (!r.ok()) return r.status();
  return std::move(r->text);
}
inline Result<std::string> render_prompt(const nlohmann::json& request, const ChatTokens& toks = {}) {
  auto r = render_prompt_text(request, toks);
  if (!r.ok()) return r.status();
  return std::move(r->text);
}

}  // namespace dsv41::text
