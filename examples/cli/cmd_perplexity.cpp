// dsv41 perplexity --model DIR --text FILE: perplexity of a UTF-8 text under the model.
// The text is [BOS] + its tokens, cut into consecutive windows of at most --context tokens; each window
// is one exact prefill (a fresh sequence) and predicts its tokens after the first. tools/train/
// perplexity.py computes the same quantity with the PyTorch implementation.
#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <string>

#include <fmt/core.h>

#include "commands.hpp"
#include "text_loader.hpp"

namespace dsv41::cli {
namespace {

struct PerplexityOpts {
  LoadArgs load;
  std::string text_file;
  int context = 1024;
  bool bounded_replay = false;
};

int run_perplexity(void* p) {
  const auto& o = *static_cast<PerplexityOpts*>(p);
  std::ifstream f(o.text_file, std::ios::binary);
  if (!f) {
    fmt::print(stderr, "error: cannot open {}\n", o.text_file);
    return 1;
  }
  const std::string text{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  auto l = load_text_model(o.load);
  if (!l.ok()) {
    fmt::print(stderr, "error: {}\n", l.status().to_string());
    return 1;
  }
  const auto& tm = **l;
  std::vector<int32_t> ids = {*tm.tokenizer().token_to_id(tm.chat_tokens().bos)};
  const auto body = tm.tokenizer().encode(text, /*allow_special=*/false);
  ids.insert(ids.end(), body.begin(), body.end());
  const int V = tm.shape().vocab_size;
  const int ctx = std::max(2, std::min<int>(o.context, int(std::min<int64_t>(tm.shape().max_position_embeddings, 1 << 30))));
  double nll = 0;
  int64_t count = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t start = 0; start + 1 < ids.size(); start += size_t(ctx)) {
    const size_t n = std::min(size_t(ctx), ids.size() - start);
    if (n < 2) break;
    ForwardResult r;
    Status s = tm.score(std::span<const int32_t>(ids.data() + start, n), o.bounded_replay, r.logits);
    if (!s.ok()) {
      fmt::print(stderr, "error: {}\n", s.to_string());
      return 1;
    }
    const size_t rows = r.logits.size() / size_t(V), first = n - rows;  // bounded replay: only the tail
    for (size_t t = first; t + 1 < n; ++t) {
      const float* lg = r.logits.data() + (t - first) * size_t(V);
      double mx = lg[0];
      for (int v = 1; v < V; ++v) mx = std::max(mx, double(lg[v]));
      double se = 0;
      for (int v = 0; v < V; ++v) se += std::exp(double(lg[v]) - mx);
      nll += (mx + std::log(se)) - double(lg[ids[start + t + 1]]);
      ++count;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (count == 0) {
    fmt::print(stderr, "error: the text has fewer than one predicted token\n");
    return 1;
  }
  fmt::print("tokens {}  predicted {}  windows of {}  mean NLL {:.6f} nats  perplexity {:.4f}  ({:.0f} tokens/s)\n",
             ids.size(), count, ctx, nll / count, std::exp(nll / count), double(count) / secs);
  return 0;
}

}  // namespace

Command add_perplexity(CLI::App& app) {
  auto o = std::make_shared<PerplexityOpts>();
  auto* sub = app.add_subcommand("perplexity", "Perplexity of a UTF-8 text file under the model");
  sub->add_option("--model", o->load.model_dir, "model directory")->required();
  sub->add_option("--tokenizer", o->load.tokenizer, "tokenizer.json (default MODEL/tokenizer.json)");
  sub->add_option("--device", o->load.device, "cpu (reference) or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--text", o->text_file, "UTF-8 text file")->required();
  sub->add_option("--context", o->context, "tokens per window")->check(CLI::Range(2, 1 << 30));
  sub->add_flag("--bounded-replay", o->bounded_replay, "score only each window's last W tokens via decoder bounded replay");
  return {sub, run_perplexity, o};
}

}  // namespace dsv41::cli
