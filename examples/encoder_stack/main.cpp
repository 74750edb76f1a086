// encoder_stack MODEL_DIR "PROMPT": a host assembling the model's order from the building blocks itself.
// It takes the CPU backend's ops from a loaded model, embeds the prompt, runs the encoder stack's layer units
// one by one (blocks::layer_unit) with a step of its own after each (the residual streams' RMS, its custom hook),
// reads the encoder's final hidden state straight from the batch, then finishes the decoder stack and the head
// and checks the logits against Model::forward on the same prompt.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <dsv41/blocks/stack.hpp>
#include <dsv41/model/model.hpp>
#include <dsv41/text/chat_common.hpp>
#include <dsv41/text/tokenizer.hpp>

using namespace dsv41;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: encoder_stack MODEL_DIR \"PROMPT\"\n");
    return 2;
  }
  const std::string dir = argv[1];
  auto model = Model<>::load(dir);
  auto tok = text::Tokenizer::from_json_file(dir + "/tokenizer.json");
  if (!model.ok() || !tok.ok()) {
    std::fprintf(stderr, "%s\n", (model.ok() ? tok.status() : model.status()).to_string().c_str());
    return 1;
  }
  const Model<>& m = **model;
  const cpu::Ops& ops = m.backend();  // the blocks' ops on the CPU
  const ModelShape& s = m.shape();
  const std::vector<int32_t> ids = tok->encode(text::ChatTokens{}.bos + argv[2]);
  const int S = int(ids.size()), hc = s.hc_mult, d = s.hidden_size;

  // The rows of one forward at positions 0..S−1 of a fresh sequence.
  SequenceState st = m.new_sequence(S);
  ForwardResult res;
  cpu::Ops::Batch b = ops.new_batch();
  if (Status e = ops.begin(b, st, ids, st.history, 0, nullptr, false, res); !e.ok()) {
    std::fprintf(stderr, "%s\n", e.to_string().c_str());
    return 1;
  }
  (void)ops.embed(b);

  // The encoder stack, unit by unit, with the host's own step after each.
  const blocks::Stack enc = blocks::encoder_stack(s), dec = blocks::decoder_stack(s);
  std::printf("encoder: layers %d..%d, decoder: %d..%d, %d prompt tokens\n", enc.first, enc.last - 1, dec.first,
              dec.last - 1, S);
  const StackPass pass;
  for (int l = enc.first; l < enc.last; ++l) {
    if (Status e = blocks::layer_unit(ops, l, b, pass); !e.ok()) {
      std::fprintf(stderr, "%s\n", e.to_string().c_str());
      return 1;
    }
    double ss = 0;
    for (float v : b.H) ss += double(v) * v;
    std::printf("after layer %d (%s): residual RMS %.4f\n", l, mode_name(m.schedule()[size_t(l)].mode),
                std::sqrt(ss / double(b.H.size())));
  }

  // The encoder's final hidden state: H [S, hc, d] collapsed with pre [S, hc] (SPEC §4.1 hc_pre).
  std::vector<std::vector<double>> x(size_t(S), std::vector<double>(size_t(d), 0.0));
  for (int t = 0; t < S; ++t)
    for (int j = 0; j < hc; ++j)
      for (int i = 0; i < d; ++i)
        x[size_t(t)][size_t(i)] += double(b.pre[size_t(t) * hc + j]) * b.H[(size_t(t) * hc + j) * d + i];
  for (int t = 0; t < S; ++t) {
    double n = 0;
    for (double v : x[size_t(t)]) n += v * v;
    std::printf("encoder state of row %d: norm %.4f\n", t, std::sqrt(n));
  }

  // The rest of the order: the decoder stack, the head, then the state's advance.
  for (int l = dec.first; l < dec.last; ++l)
    if (Status e = blocks::layer_unit(ops, l, b, pass); !e.ok()) return 1;
  (void)ops.head(b);
  (void)ops.advance(b);

  // The same prompt through the model's own entry point.
  SequenceState ref = m.new_sequence(S);
  ForwardResult want;
  if (Status e = m.forward(ref, ids, want); !e.ok()) return 1;
  bool same = want.logits.size() == res.logits.size();
  for (size_t i = 0; same && i < want.logits.size(); ++i) same = want.logits[i] == res.logits[i];
  std::printf("logits equal Model::forward's: %s\n", same ? "yes" : "no");
  return same ? 0 : 1;
}
