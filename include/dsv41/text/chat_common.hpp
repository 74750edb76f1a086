// DeepSeek-V4.1 chat format, shared pieces: special-token strings, thinking mode, and JSON text
// written the way Python's json.dumps(ensure_ascii=False) writes it (the prompt format embeds it).
#pragma once
#include <charconv>
#include <utility>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <dsv41/core/status.hpp>

namespace dsv41::text {

// Special-token strings of the prompt format. The defaults are the release's (SPEC §7); the library
// replaces them with the strings it reads from tokenizer.json.
struct ChatTokens {
  std::string bos = "<｜begin▁of▁sentence｜>";
  std::string eos = "<｜end▁of▁sentence｜>";
  std::string system = "<｜System｜>";
  std::string user = "<｜User｜>";
  std::string assistant = "<｜Assistant｜>";
  std::string think_open = "<think>";
  std::string think_close = "</think>";
  std::string dsml = "｜DSML｜";              // marker inside the tool-call tags
  std::string image = "<｜deepseek_image｜>";  // rejected in text; empty disables the check
};

enum class Mode { chat, thinking };

inline Status validate_tokens(const ChatTokens& t) {
  const std::pair<const char*, const std::string*> req[] = {
      {"bos", &t.bos},       {"eos", &t.eos},           {"system", &t.system},
      {"user", &t.user},     {"assistant", &t.assistant}, {"think_open", &t.think_open},
      {"think_close", &t.think_close}, {"dsml", &t.dsml}};
  for (const auto& [name, s] : req)
    if (s->empty()) return error(Code::invalid_argument, std::string("ChatTokens.") + name + " is empty");
  return Status::Ok();
}

namespace chat_detail {

// A JSON string literal as json.dumps(ensure_ascii=False) writes it: only '"', '\\' and control
// characters are escaped; other bytes (UTF-8) pass through.
inline void py_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

// A float as Python's repr writes it: shortest round-trip digits, exponent form when the decimal
// exponent is < -4 or >= 16, and a trailing ".0" on integral values.
inline void py_json_float(std::string& out, double v) {
  if (std::isnan(v)) { out += "NaN"; return; }
  if (std::isinf(v)) { out += v > 0 ? "Infinity" : "-Infinity"; return; }
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string_view s(buf, static_cast<size_t>(r.ptr - buf));
  if (!s.empty() && s[0] == '-') { out += '-'; s.remove_prefix(1); }
  const size_t e = s.find('e');
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (s[i] != '.') digits += s[i];
  std::string_view es = s.substr(e + 1);
  const bool eneg = !es.empty() && es[0] == '-';
  if (!es.empty() && (es[0] == '-' || es[0] == '+')) es.remove_prefix(1);
  int ex = 0;
  std::from_chars(es.data(), es.data() + es.size(), ex);
  if (eneg) ex = -ex;
  const int decpt = ex + 1;  // value = 0.<digits> * 10^decpt
  const int n = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (n > 1) { out += '.'; out.append(digits, 1, std::string::npos); }
    out += ex < 0 ? "e-" : "e+";
    const int ax = ex < 0 ? -ex : ex;
    if (ax < 10) out += '0';
    out += std::to_string(ax);
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (decpt >= n) {
    out += digits;
    out.append(static_cast<size_t>(decpt - n), '0');
    out += ".0";
  } else {
    out.append(digits, 0, static_cast<size_t>(decpt));
    out += '.';
    out.append(digits, static_cast<size_t>(decpt), std::string::npos);
  }
}

// json.dumps(value, ensure_ascii=False): separators ", " and ": ", keys in the value's own order
// (use nlohmann::ordered_json to keep a document's order).
template <class J>
void py_json_dump(std::string& out, const J& j) {
  using V = typename J::value_t;
  switch (j.type()) {
    case V::null: out += "null"; break;
    case V::boolean: out += j.template get<bool>() ? "true" : "false"; break;
    case V::number_integer: out += std::to_string(j.template get<std::int64_t>()); break;
    case V::number_unsigned: out += std::to_string(j.template get<std::uint64_t>()); break;
    case V::number_float: py_json_float(out, j.template get<double>()); break;
    case V::string: py_json_string(out, j.template get_ref<const typename J::string_t&>()); break;
    case V::array: {
      out += '[';
      bool first = true;
      for (const auto& x : j) {
        if (!first) out += ", ";
        first = false;
        py_json_dump(out, x);
      }
      out += ']';
      break;
    }
    case V::object: {
      out += '{';
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        py_json_string(out, it.key());
        out += ": ";
        py_json_dump(out, it.value());
      }
      out += '}';
      break;
    }
    default: out += "null"; break;  // binary / discarded: not produced by this library
  }
}

template <class J>
std::string py_json_dumps(const J& j) {
  std::string s;
  py_json_dump(s, j);
  return s;
}

inline bool starts_with_at(std::string_view text, size_t pos, std::string_view lit) {
  return pos <= text.size() && text.substr(pos).starts_with(lit);
}

// Bytes of an incomplete UTF-8 sequence at the end of s (0 when s ends on a boundary).
inline size_t incomplete_utf8_tail(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0) need = 4;
    return need > back ? back : 0;
  }
  return 0;
}

}  // namespace chat_detail
}  // namespace dsv41::text
