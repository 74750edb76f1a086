// answer(model, ...): a prompt through the tokenizer and the chat format (TextModel) on either backend.
#pragma once
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include <dsv41/runtime/text_model.hpp>
#include <dsv41/text/tokenizer.hpp>

// The chat format: one user turn, answer without thinking; greedy, 16 tokens at most.
template <class M>
inline int answer(const M& model, const std::string& dir, const std::string& prompt, const char* device) {
  auto tok = dsv41::text::Tokenizer::from_json_file(dir + "/tokenizer.json");
  if (!tok.ok()) {
    std::fprintf(stderr, "tokenizer: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  auto tm = dsv41::text::TextModel<M>::make(model, std::move(tok).value());
  if (!tm.ok()) {
    std::fprintf(stderr, "text model: %s\n", tm.status().to_string().c_str());
    return 1;
  }
  const nlohmann::ordered_json user = {{"role", "user"}, {"content", prompt}};
  const nlohmann::ordered_json request = {{"messages", nlohmann::ordered_json::array({user})},
                                          {"thinking_mode", "chat"}};
  auto text = tm->render(request);
  if (!text.ok()) {
    std::fprintf(stderr, "render: %s\n", text.status().to_string().c_str());
    return 1;
  }
  dsv41::text::TextOptions opt;
  opt.max_tokens = 16;  // opt.sampling defaults to greedy
  auto r = tm->complete(*text, opt);
  if (!r.ok()) {
    std::fprintf(stderr, "complete: %s\n", r.status().to_string().c_str());
    return 1;
  }
  std::printf("[%s] %lld prompt tokens, %lld generated (%s)\n[%s] completion: %s\n", device,
              (long long)r->prompt_tokens, (long long)r->completion_tokens, dsv41::text::text_finish_name(r->finish),
              device, r->text.c_str());
  return 0;
}
