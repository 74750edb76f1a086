// The chat request → prompt renderer, and the completion → assistant message parser, on the same input: the
// bytes as a JSON request (or a test case's "request"), and as a completion in both modes.
// The rendered prompt's client-text ranges are checked for order and bounds.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include <dsv41/text/chat_format.hpp>
#include <dsv41/text/chat_parse.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto j = nlohmann::ordered_json::parse(in, nullptr, false);
  if (!j.is_discarded()) {
    if (j.is_object() && j.contains("request")) j = j["request"];
    // The literal ranges are sorted, disjoint, non-empty and inside the text, and the text is render_prompt's.
    auto p = dsv41::text::render_prompt_text(j);
    if (p.ok()) {
      size_t at = 0;
      for (const auto& r : p->literal) {
        if (r.begin < at || r.end <= r.begin || r.end > p->text.size()) __builtin_trap();
        at = r.end;
      }
      auto s = dsv41::text::render_prompt(j);
      if (!s.ok() || *s != p->text) __builtin_trap();
    }
    if (j.is_object() && j.contains("completion") && j["completion"].is_string()) {
      const std::string c = j["completion"].get<std::string>();
      (void)dsv41::text::parse_completion(c, dsv41::text::Mode::thinking);
    }
  }
  (void)dsv41::text::parse_completion(in, dsv41::text::Mode::thinking);
  (void)dsv41::text::parse_completion(in, dsv41::text::Mode::chat);
  return 0;
}
