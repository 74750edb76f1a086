// OpenAI request bodies for `dsv41 serve`, apart from HTTP: body text → the parsed plan of a chat or completions
// request (sampling options, prompt rendering input, tool choice, logprobs, streaming). Every malformed body ends
// in BadRequest (a 4xx with a message), never in another exception: fuzz_server_request drives these functions.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <dsv41/runtime/engine_types.hpp>
#include <dsv41/runtime/generation_config.hpp>
#include <dsv41/runtime/text_model.hpp>
#include <dsv41/text/chat_common.hpp>

namespace dsv41::cli {

using ojson = nlohmann::ordered_json;

struct BadRequest {
  int status;
  std::string message, code;
};

// The bounds a request body is held to (documented in README "Limits").
struct RequestLimits {
  int max_tokens_cap = 4096;   // max_tokens at most
  int64_t max_messages = 2048;
  int max_json_depth = 64;     // nesting of arrays and objects
  int max_tools = 128;
  int max_stop = 16;           // stop strings, each at most max_stop_bytes
  size_t max_stop_bytes = 1024;
  int max_images = 8;          // image parts per request
};


// The deepest nesting of arrays and objects in a JSON text (strings skipped), without parsing it.
inline int json_depth(std::string_view s) {
  int depth = 0, most = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      most = std::max(most, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return most;
}

inline ojson parse_body(std::string_view body, const RequestLimits& lim) {
  if (json_depth(body) > lim.max_json_depth)
    throw BadRequest{400, "request body nests deeper than " + std::to_string(lim.max_json_depth) + " levels",
                     "json_too_deep"};
  auto j = ojson::parse(body, nullptr, false);
  if (j.is_discarded()) throw BadRequest{400, "request body is not valid JSON", ""};
  if (!j.is_object()) throw BadRequest{400, "request body must be a JSON object", ""};
  return j;
}

// A field's value if present and not null.
inline const ojson* field(const ojson& j, const char* k) {
  auto it = j.find(k);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

inline bool bool_field(const ojson& j, const char* k, bool def, const std::string& where = "") {
  const ojson* v = field(j, k);
  if (!v) return def;
  if (!v->is_boolean()) throw BadRequest{400, where + k + " must be a boolean", ""};
  return v->get<bool>();
}

// Fields a request may hold; anything else is a 400 (never silently ignored).
inline void check_fields(const ojson& j, bool chat) {
  static const char* const common[] = {"model", "stream", "stream_options", "max_tokens", "temperature", "top_p",
                                       "top_k", "min_p", "seed", "n", "stop", "speculative", "user", "logprobs",
                                       "top_logprobs", "frequency_penalty", "presence_penalty", "store", "metadata"};
  static const char* const chat_only[] = {"messages", "tools", "tool_choice", "parallel_tool_calls",
                                          "reasoning_effort", "thinking_mode", "chat_template_kwargs",
                                          "session_id", "max_completion_tokens", "response_format"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    bool known = std::find_if(std::begin(common), std::end(common), [&](const char* c) { return k == c; }) != std::end(common);
    if (chat && !known)
      known = std::find_if(std::begin(chat_only), std::end(chat_only), [&](const char* c) { return k == c; }) != std::end(chat_only);
    if (!chat && k == "prompt") known = true;
    if (!known) throw BadRequest{400, "unsupported request field \"" + k + "\"", "unsupported_field"};
  }
  for (const char* k : {"frequency_penalty", "presence_penalty"})
    if (const ojson* v = field(j, k); v && !(v->is_number() && v->get<double>() == 0))
      throw BadRequest{400, std::string(k) + " is not supported (only 0)", "unsupported_field"};
  if (const ojson* rf = field(j, "response_format"); rf && !(rf->is_object() && rf->contains("type") &&
                                                             (*rf)["type"].is_string() && (*rf)["type"] == "text"))
    throw BadRequest{400, "response_format: only {\"type\": \"text\"} is supported", "unsupported_field"};
}

// OpenAI's reasoning_effort names onto the model's levels (chat_format.hpp: low 50, high 75, max 100, 1..100).
inline ojson effort_of(const ojson& v) {
  if (!v.is_string()) return v;  // integers 1..100 are the model's own scale (render checks them)
  const std::string s = v.get<std::string>();
  if (s == "minimal" || s == "low") return "low";
  if (s == "medium" || s == "high") return "high";
  if (s == "max" || s == "xhigh") return "max";
  throw BadRequest{400, "reasoning_effort \"" + s + "\" is not one of minimal, low, medium, high, xhigh, max or 1..100", ""};
}

// The number of alternatives to report per token, or -1 for no logprobs. Chat: logprobs true/false and
// top_logprobs 0..20 (only with logprobs). Completions (legacy): logprobs null or 0..5.
inline int top_logprobs_of(const ojson& j, bool chat) {
  const ojson* top = field(j, "top_logprobs");
  if (!chat) {
    if (top) throw BadRequest{400, "top_logprobs is a chat field; completions take logprobs 0..5", ""};
    const ojson* v = field(j, "logprobs");
    if (!v) return -1;
    if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > 5)
      throw BadRequest{400, "logprobs must be an integer 0..5", ""};
    return int(v->get<int64_t>());
  }
  const bool on = bool_field(j, "logprobs", false);
  if (!top) return on ? 0 : -1;
  if (!top->is_number_integer() || top->get<int64_t>() < 0 || top->get<int64_t>() > kMaxTopLogprobs)
    throw BadRequest{400, "top_logprobs must be an integer 0.." + std::to_string(kMaxTopLogprobs), ""};
  if (!on) throw BadRequest{400, "top_logprobs needs logprobs: true", ""};
  return int(top->get<int64_t>());
}

// The sampling fields shared by both endpoints. Fields the request leaves out take the model directory's
// generation_config.json values (g), then the API's. Counts must be integers (a fraction is a 400).
inline text::TextOptions sampling_of(const ojson& j, int default_max, const RequestLimits& lim,
                                     const GenerationDefaults& g) {
  text::TextOptions o;
  auto num = [&](const char* k, double lo, double hi, double def, bool integer = false) {
    const ojson* v = field(j, k);
    if (!v) return def;
    if (!v->is_number() || (integer && !v->is_number_integer()))
      throw BadRequest{400, std::string(k) + (integer ? " must be an integer" : " must be a number"), ""};
    const double x = v->get<double>();
    if (!(x >= lo && x <= hi))
      throw BadRequest{400, std::string(k) + " out of range (" + std::to_string(lo) + " to " + std::to_string(hi) + ")", ""};
    return x;
  };
  // max_completion_tokens (the newer name) when given, else max_tokens; null is "not given".
  const char* mt = field(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  o.max_tokens = int(num(mt, 0, lim.max_tokens_cap, default_max, true));
  o.sampling.temperature = float(num("temperature", 0, 2, g.temperature.value_or(1.f)));
  o.sampling.top_p = float(num("top_p", 0, 1, g.top_p.value_or(1.f)));
  o.sampling.top_k = int(num("top_k", 0, 1e9, g.top_k.value_or(0), true));
  o.sampling.min_p = float(num("min_p", 0, 1, g.min_p.value_or(0.f)));
  if (const ojson* v = field(j, "seed")) {
    if (!v->is_number_integer()) throw BadRequest{400, "seed must be an integer", ""};
    o.sampling.seed = v->is_number_unsigned() ? v->get<uint64_t>() : uint64_t(v->get<int64_t>());
  } else {
    o.sampling.seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  if (const ojson* v = field(j, "n"); v && !(v->is_number_integer() && v->get<int64_t>() == 1 &&
                                             (!v->is_number_unsigned() || v->get<uint64_t>() == 1)))
    throw BadRequest{400, "only n = 1 is supported", ""};
  if (const ojson* s = field(j, "stop")) {
    auto add = [&](const ojson& x) {
      if (!x.is_string() || x.get<std::string>().empty() || x.get<std::string>().size() > lim.max_stop_bytes)
        throw BadRequest{400, "stop must hold non-empty strings of at most " + std::to_string(lim.max_stop_bytes) + " bytes", ""};
      o.stop.push_back(x.get<std::string>());
    };
    if (s->is_string()) add(*s);
    else if (s->is_array()) {
      if (int(s->size()) > lim.max_stop) throw BadRequest{400, "at most " + std::to_string(lim.max_stop) + " stop strings", ""};
      for (const auto& x : *s) add(x);
    } else throw BadRequest{400, "stop must be a string or an array of strings", ""};
  }
  o.speculative = bool_field(j, "speculative", false);
  return o;
}

// The chat request's extension field "session_id": absent or null, or 1-256 bytes without control characters.
inline std::optional<std::string> session_id_of(const ojson& j) {
  const ojson* v = field(j, "session_id");
  if (!v) return std::nullopt;
  if (!v->is_string()) throw BadRequest{400, "session_id must be a string", "invalid_session_id"};
  std::string id = v->get<std::string>();
  if (id.empty() || id.size() > 256) throw BadRequest{400, "session_id must be 1 to 256 bytes", "invalid_session_id"};
  for (unsigned char c : id)
    if (c < 0x20 || c == 0x7f) throw BadRequest{400, "session_id must not hold control characters", "invalid_session_id"};
  return id;
}

inline bool want_stream(const ojson& j) { return bool_field(j, "stream", false); }

inline bool include_usage_of(const ojson& j) {
  const ojson* so = field(j, "stream_options");
  if (!so) return false;
  if (!so->is_object()) throw BadRequest{400, "stream_options must be an object", ""};
  return bool_field(*so, "include_usage", false, "stream_options.");
}

// A chat request, parsed: what to render, how to sample, what to force and report.
struct ChatPlan {
  ojson render;                 // the renderer's input (messages, tools, thinking_mode, reasoning_effort)
  bool thinking = false;
  std::string tool_choice = "auto";  // auto, none, required, named
  std::string forced_name;      // named: the function
  text::TextOptions options;
  int top_logprobs = -1;
  bool stream = false, include_usage = false;
  std::optional<std::string> session;
};

inline ChatPlan plan_chat(const ojson& j, const RequestLimits& lim, const GenerationDefaults& gen) {
  check_fields(j, true);
  ChatPlan p;
  p.session = session_id_of(j);
  const ojson* msgs = field(j, "messages");
  if (!msgs) throw BadRequest{400, "messages is required", ""};
  if (msgs->is_array() && int64_t(msgs->size()) > lim.max_messages)
    throw BadRequest{400, "too many messages: " + std::to_string(msgs->size()) + " (at most " +
                              std::to_string(lim.max_messages) + ")", "too_many_messages"};
  p.render = {{"messages", *msgs}};
  // tool_choice: "auto" (default), "none" (tools left out of the prompt), "required" (the answer starts a tool
  // call: the DSML call header is forced, after the reasoning in thinking mode) or
  // {"type": "function", "function": {"name": F}} (the header with F's name forced).
  const ojson* tools = field(j, "tools");
  if (tools && !tools->is_array()) throw BadRequest{400, "tools must be an array", ""};
  if (tools && int(tools->size()) > lim.max_tools)
    throw BadRequest{400, "at most " + std::to_string(lim.max_tools) + " tools", "too_many_tools"};
  const bool has_tools = tools && !tools->empty();
  if (const ojson* tc = field(j, "tool_choice")) {
    auto str = [](const ojson& o, const char* k) -> std::string {
      auto it = o.find(k);
      return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    if (tc->is_string() && (*tc == "auto" || *tc == "none" || *tc == "required")) {
      p.tool_choice = tc->get<std::string>();
    } else if (tc->is_object() && str(*tc, "type") == "function" && tc->contains("function") &&
               (*tc)["function"].is_object() && !str((*tc)["function"], "name").empty()) {
      p.tool_choice = "named";
      p.forced_name = str((*tc)["function"], "name");
      bool found = false;
      if (has_tools)
        for (const auto& t : *tools)
          found |= t.is_object() && t.contains("function") && t["function"].is_object() &&
                   str(t["function"], "name") == p.forced_name;
      if (!found) throw BadRequest{400, "tool_choice names \"" + p.forced_name + "\", which is not among tools", ""};
      if (p.forced_name.find_first_of("\"<>\n") != std::string::npos)
        throw BadRequest{400, "tool_choice: a tool name must not hold quotes, angle brackets or newlines", ""};
    } else {
      throw BadRequest{400, "tool_choice must be \"auto\", \"none\", \"required\" or "
                            "{\"type\": \"function\", \"function\": {\"name\": ...}}", ""};
    }
    if ((p.tool_choice == "required" || p.tool_choice == "named") && !has_tools)
      throw BadRequest{400, "tool_choice \"" + p.tool_choice + "\" needs tools", ""};
  }
  if (tools && p.tool_choice != "none") p.render["tools"] = *tools;
  std::string mode = "chat";
  if (const ojson* e = field(j, "reasoning_effort")) {
    mode = "thinking";
    p.render["reasoning_effort"] = effort_of(*e);
  }
  if (const ojson* m = field(j, "thinking_mode")) {
    if (!m->is_string() || (*m != "thinking" && *m != "chat"))
      throw BadRequest{400, "thinking_mode must be \"thinking\" or \"chat\"", ""};
    mode = m->get<std::string>();
  }
  if (const ojson* k = field(j, "chat_template_kwargs")) {
    if (!k->is_object()) throw BadRequest{400, "chat_template_kwargs must be an object", ""};
    if (field(*k, "thinking")) mode = bool_field(*k, "thinking", false, "chat_template_kwargs.") ? "thinking" : "chat";
  }
  p.render["thinking_mode"] = mode;
  p.thinking = mode == "thinking";
  p.options = sampling_of(j, 1024, lim, gen);
  p.top_logprobs = top_logprobs_of(j, true);
  p.stream = want_stream(j);
  p.include_usage = include_usage_of(j);
  if (p.top_logprobs >= 0 && p.options.speculative)
    throw BadRequest{400, "logprobs are not reported with speculative decoding", "unsupported_field"};
  if ((p.tool_choice == "required" || p.tool_choice == "named") && p.options.speculative)
    throw BadRequest{400, "tool_choice required or named does not combine with speculative", ""};
  return p;
}

// The text a required or named tool choice forces (the DSML call header), empty otherwise.
inline std::string forced_call_text(const ChatPlan& p, const text::ChatTokens& t) {
  if (p.tool_choice != "required" && p.tool_choice != "named") return "";
  std::string s = "\n\n<" + t.dsml + " calls>\n<" + t.dsml + " invoke name=\"";
  if (p.tool_choice == "named") s += p.forced_name + "\">\n";
  return s;
}

struct CompletionPlan {
  std::string prompt;  // as sent (the server adds BOS)
  text::TextOptions options;
  int top_logprobs = -1;
  bool stream = false;
};

inline CompletionPlan plan_completion(const ojson& j, const RequestLimits& lim, const GenerationDefaults& gen) {
  check_fields(j, false);
  CompletionPlan p;
  const ojson* pr = field(j, "prompt");
  if (pr && pr->is_string()) p.prompt = pr->get<std::string>();
  else if (pr && pr->is_array() && pr->size() == 1 && (*pr)[0].is_string()) p.prompt = (*pr)[0].get<std::string>();
  else throw BadRequest{400, "prompt must be a string", ""};
  if (p.prompt.empty()) throw BadRequest{400, "prompt is empty", ""};
  p.options = sampling_of(j, 16, lim, gen);
  p.top_logprobs = top_logprobs_of(j, false);
  p.stream = want_stream(j);
  if (p.top_logprobs >= 0 && p.options.speculative)
    throw BadRequest{400, "logprobs are not reported with speculative decoding", "unsupported_field"};
  return p;
}

// The image sources of a chat request's messages, in prompt order (the renderer puts one image placeholder per
// image part): OpenAI {"type": "image_url", "image_url": {"url": U}} or "image_url": U, Responses
// {"type": "input_image", "image_url": U}, Anthropic {"type": "image", "source": {"type": "base64",
// "media_type": M, "data": D}} (as a data URL).
inline std::vector<std::string> image_urls(const ojson& messages, const RequestLimits& lim) {
  std::vector<std::string> urls;
  if (!messages.is_array()) return urls;
  for (const auto& m : messages) {
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
    for (const auto& p : m["content"]) {
      if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) continue;
      const std::string type = p["type"].get<std::string>();
      std::string url;
      if (type == "image_url" || type == "input_image") {
        const ojson* u = field(p, "image_url");
        if (u && u->is_string()) url = u->get<std::string>();
        else if (u && u->is_object() && u->contains("url") && (*u)["url"].is_string()) url = (*u)["url"].get<std::string>();
        else throw BadRequest{400, type + " part without an image_url string or {\"url\": ...}", ""};
      } else if (type == "image") {
        const ojson* src = field(p, "source");
        if (!src || !src->is_object() || !src->contains("data") || !(*src)["data"].is_string())
          throw BadRequest{400, "image part without source.data", ""};
        const std::string mt = src->contains("media_type") && (*src)["media_type"].is_string()
                                   ? (*src)["media_type"].get<std::string>() : "image/png";
        url = "data:" + mt + ";base64," + (*src)["data"].get<std::string>();
      } else {
        continue;
      }
      if (url.empty()) throw BadRequest{400, "an image part has an empty URL", ""};
      urls.push_back(std::move(url));
      if (int(urls.size()) > lim.max_images)
        throw BadRequest{400, "at most " + std::to_string(lim.max_images) + " images per request", "too_many_images"};
    }
  }
  return urls;
}

// Standard base64 (RFC 4648, padding optional, whitespace skipped); nullopt on any other character.
inline std::optional<std::vector<uint8_t>> base64_decode(std::string_view s) {
  std::vector<uint8_t> out;
  out.reserve(s.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (char c : s) {
    int v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+') v = 62;
    else if (c == '/') v = 63;
    else if (c == '=') { ++pad; continue; }
    else if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    else return std::nullopt;
    if (pad) return std::nullopt;  // data after padding
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(uint8_t(acc >> bits));
    }
  }
  if (pad > 2) return std::nullopt;
  return out;
}

}  // namespace dsv41::cli
