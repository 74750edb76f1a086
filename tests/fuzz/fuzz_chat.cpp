// The chat request → prompt renderer, and the completion → assistant message parser, on the same input: the
// bytes as a JSON request (or a test case's "request"), and as a completion in both modes.
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
    (void)dsv41::text::render_prompt(j);
    if (j.is_object() && j.contains("completion") && j["completion"].is_string()) {
      const std::string c = j["completion"].get<std::string>();
      (void)dsv41::text::parse_completion(c, dsv41::text::Mode::thinking);
    }
  }
  (void)dsv41::text::parse_completion(in, dsv41::text::Mode::thinking);
  (void)dsv41::text::parse_completion(in, dsv41::text::Mode::chat);
  return 0;
}
