// stack_hooks MODEL_DIR "PROMPT": observes a forward pass through ForwardHooks (function pointer + ctx).
// unit_output at the last encoder layer gives its hidden state H [rows, hc, d] and pre [rows, hc]; collapsed
// over the streams (SPEC §4.1 hc_pre: Σ_j pre_j·H_j) that is one d-vector per token. unit_input counts the
// calls of every layer unit, over the prefill and a few greedy decode steps.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <dsv41/blocks/hooks.hpp>
#include <dsv41/config/schedule.hpp>
#include <dsv41/model/model.hpp>
#include <dsv41/text/chat_common.hpp>
#include <dsv41/text/tokenizer.hpp>

struct Probe {
  int layer = 0, hc = 0, d = 0;       // the layer read, its streams and width
  std::vector<std::vector<float>> x;  // collapsed state per position
  std::vector<int> calls, rows;       // per layer unit
};

void on_output(void* ctx, int layer, int64_t start, int rows, const float* H, const float* pre) {
  auto& p = *static_cast<Probe*>(ctx);
  if (layer != p.layer) return;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> y(size_t(p.d), 0.f);
    for (int j = 0; j < p.hc; ++j)
      for (int i = 0; i < p.d; ++i) y[size_t(i)] += pre[r * p.hc + j] * H[(size_t(r) * p.hc + j) * p.d + i];
    if (p.x.size() <= size_t(start + r)) p.x.resize(size_t(start + r + 1));
    p.x[size_t(start + r)] = std::move(y);
  }
}

void on_input(void* ctx, int layer, int64_t, int rows, float*, float*) {
  auto& p = *static_cast<Probe*>(ctx);
  p.calls[size_t(layer)] += 1;
  p.rows[size_t(layer)] += rows;
}

static double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: stack_hooks MODEL_DIR \"PROMPT\"\n");
    return 2;
  }
  const std::string dir = argv[1];
  auto model = dsv41::Model<>::load(dir);  // configs::Dynamic: the shape of config.json
  auto tok = dsv41::text::Tokenizer::from_json_file(dir + "/tokenizer.json");
  if (!model.ok() || !tok.ok()) {
    std::fprintf(stderr, "%s\n", (model.ok() ? tok.status() : model.status()).to_string().c_str());
    return 1;
  }
  const dsv41::Model<>& m = **model;
  const dsv41::ModelShape& s = m.shape();
  const int dec = dsv41::first_decoder_layer(s);
  if (dec == 0) {
    std::fprintf(stderr, "this model has no encoder layers\n");
    return 1;
  }
  const std::vector<int32_t> ids = tok->encode(dsv41::text::ChatTokens{}.bos + argv[2]);

  Probe probe;
  probe.layer = dec - 1;
  probe.hc = s.hc_mult;
  probe.d = s.hidden_size;
  probe.calls.assign(size_t(s.num_hidden_layers), 0);
  probe.rows.assign(size_t(s.num_hidden_layers), 0);
  dsv41::ForwardHooks hooks;
  hooks.ctx = &probe;
  hooks.unit_output = on_output;
  hooks.unit_input = on_input;

  const int steps = 3;
  auto st = m.new_sequence(int64_t(ids.size()) + steps);
  dsv41::ForwardResult out;
  if (auto e = m.forward(st, ids, out, /*all_logits=*/false, &hooks); !e.ok()) {
    std::fprintf(stderr, "%s\n", e.to_string().c_str());
    return 1;
  }
  std::printf("prompt: %zu tokens; encoder layers 0..%d, decoder layers %d..%d\n", ids.size(), dec - 1, dec,
              s.num_hidden_layers - 1);
  std::printf("encoder output (layer %d, %d streams collapsed by pre): %zu rows of %d\n", dec - 1, s.hc_mult,
              probe.x.size(), s.hidden_size);
  for (size_t t = 0; t < probe.x.size(); ++t)
    std::printf("  row %zu  token %6d  norm %.4f\n", t, ids[t], std::sqrt(dot(probe.x[t], probe.x[t])));
  const auto &a = probe.x.front(), &b = probe.x.back();
  std::printf("cosine(first, last) = %.4f\n", dot(a, b) / std::sqrt(dot(a, a) * dot(b, b)));

  // Greedy decode steps: each runs every layer unit once more, one row.
  std::vector<int32_t> next;
  for (int i = 0; i < steps; ++i) {
    int32_t best = 0;
    for (int32_t v = 1; v < s.vocab_size; ++v)
      if (out.logits[size_t(v)] > out.logits[size_t(best)]) best = v;
    next.push_back(best);
    if (auto e = m.forward(st, std::span<const int32_t>(&best, 1), out, false, &hooks); !e.ok()) {
      std::fprintf(stderr, "%s\n", e.to_string().c_str());
      return 1;
    }
  }
  std::string text = tok->decode(next);
  for (size_t at = 0; (at = text.find('\n', at)) != std::string::npos; at += 2) text.replace(at, 1, "\\n");
  std::printf("after %d greedy decode steps (\"%s\"):\n", steps, text.c_str());
  for (int l = 0; l < s.num_hidden_layers; ++l)
    std::printf("  layer %d (%s): %d calls, %d rows\n", l, l < dec ? "encoder" : "decoder", probe.calls[size_t(l)],
                probe.rows[size_t(l)]);
  return 0;
}
