// tokenizer.json → Tokenizer (from_json_string), then encode/decode of fixed text and of the input itself, whole
// and with a literal (client text) range.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include <dsv41/text/tokenizer.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto tok = dsv41::text::Tokenizer::from_json_string(in);
  if (!tok.ok()) return 0;
  for (std::string_view text : {std::string_view("Hello, world! 123 def f(x):\n\treturn x"), in.substr(0, 256)}) {
    const auto ids = tok->encode(text);
    (void)tok->decode(ids);
    // The middle third as client text (text/prompt_text.hpp), the rest as template text.
    const std::vector<dsv41::text::TextRange> lit = {{text.size() / 3, 2 * text.size() / 3}};
    (void)tok->encode(text, lit);
  }
  return 0;
}
