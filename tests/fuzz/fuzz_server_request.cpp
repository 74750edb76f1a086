// The server's request parsing (examples/cli/server_request.hpp): body bytes → the chat or completions plan, its
// image URLs and data-URL payloads, the prompt rendering and the forced tool-call text. Only BadRequest (a 4xx)
// may leave the parser: any other exception is a finding (uncaught → libFuzzer reports it).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "../../examples/cli/server_request.hpp"

#include <dsv41/text/chat_format.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dsv41;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  cli::RequestLimits lim;
  lim.max_messages = 64;
  const GenerationDefaults gen;
  for (int endpoint = 0; endpoint < 2; ++endpoint) {
    try {
      const cli::ojson j = cli::parse_body(body, lim);
      if (endpoint == 0) {
        const cli::ChatPlan p = cli::plan_chat(j, lim, gen);
        const text::ChatTokens t;
        (void)text::render_prompt(p.render, t);
        (void)cli::forced_call_text(p, t);
        for (const std::string& url : cli::image_urls(p.render["messages"], lim)) {
          const size_t comma = url.find(',');
          if (url.rfind("data:", 0) == 0 && comma != std::string::npos)
            (void)cli::base64_decode(std::string_view(url).substr(comma + 1));
        }
      } else {
        (void)cli::plan_completion(j, lim, gen);
      }
    } catch (const cli::BadRequest&) {
    }
  }
  return 0;
}
