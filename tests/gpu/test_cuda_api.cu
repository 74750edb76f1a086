// GPU checks of Model<Config, Cuda> beyond the golden: chunked prefill, batched decode, graph capture of a
// decode step, snapshots and rollback, speculative generation, bounded replay. Run on the device machine
// from the repository root (paths fall back to ./tests/data and ./models when the build's are absent).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <dsv41/model/cuda_model.hpp>
#include <dsv41/runtime/generate.hpp>
#include <dsv41/model/golden.hpp>
#include <dsv41/model/model.hpp>
#include <dsv41/runtime/text_model.hpp>
#include <dsv41/text/tokenizer.hpp>

#include "cpu_golden.hpp"
#include "model_dirs.hpp"

using namespace dsv41;
using GModel = Model<configs::Dynamic, Cuda>;

namespace {

using gputest::kPy;
using gputest::kTiny;
using gputest::prompt;

// ||a − b|| / ||b||
double rel(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}
int argmax_of(std::span<const float> v) { return int(std::max_element(v.begin(), v.end()) - v.begin()); }

std::vector<float> to_host(const float* d, size_t n) {
  std::vector<float> h(n);
  REQUIRE(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  return h;
}

}  // namespace

// The fixture contract, layer by layer, on the bundled trained model: the golden file is the CPU reference's
// own run (tests/gpu/cpu_golden.hpp), the CUDA model must meet it as the CPU meets DeepSeek's goldens.
TEST_CASE("CUDA model passes a CPU-made golden of dsv41-tiny-py", "[gpu][cuda_api]") {
  const std::string path = "/tmp/dsv41_tiny_py_cpu_golden.safetensors";
  REQUIRE(golden_tools::write_cpu_golden(kPy, path, 2, 96, 80, 20261130).ok());
  auto g = GModel::load(kPy);
  REQUIRE(g.ok());
  const auto& gpu_model = **g;
  auto rep = golden::run(gpu_model, path);
  REQUIRE(rep.ok());
  std::printf("dsv41-tiny-py, CUDA model vs the CPU's golden:\n%s", rep->summary().c_str());
  INFO(rep->summary());
  CHECK(rep->pass);
  CHECK(!rep->has_nan);
  CHECK(rep->engram_mismatches == 0);
}

// Held-out perplexity (the CLI's procedure: [BOS] + text, windows of 1024, every row's logits) on the GPU
// equals the PyTorch implementation's 23.8202 within the 1% that CTest allows the CPU path.
TEST_CASE("CUDA perplexity of the bundled model matches PyTorch", "[gpu][cuda_api]") {
  auto g = GModel::load(kPy);
  REQUIRE(g.ok());
  auto tok = text::Tokenizer::from_json_file(kPy + "/tokenizer.json");
  REQUIRE(tok.ok());
  std::ifstream f(kPy + "/heldout_sample.txt");
  REQUIRE(f.good());
  const std::string textv{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  std::vector<int32_t> ids{0};
  const auto body = tok->encode(textv, false);
  ids.insert(ids.end(), body.begin(), body.end());
  const int V = (*g)->shape().vocab_size, ctx = 1024;
  double nll = 0;
  int64_t count = 0;
  for (size_t start = 0; start + 1 < ids.size(); start += ctx) {
    const size_t n = std::min(size_t(ctx), ids.size() - start);
    if (n < 2) break;
    auto st = (*g)->new_sequence(int64_t(n));
    REQUIRE(st.ok());
    ForwardResult r;
    REQUIRE((*g)->forward(*st, std::span<const int32_t>(ids.data() + start, n), r, true).ok());
    for (size_t t = 0; t + 1 < n; ++t) {
      const float* lg = r.logits.data() + t * size_t(V);
      double mx = lg[0], se = 0;
      for (int v = 1; v < V; ++v) mx = std::max(mx, double(lg[v]));
      for (int v = 0; v < V; ++v) se += std::exp(double(lg[v]) - mx);
      nll += mx + std::log(se) - double(lg[ids[start + t + 1]]);
      ++count;
    }
  }
  const double ppl = std::exp(nll / double(count));
  std::printf("dsv41-tiny-py held-out perplexity on the GPU: %.4f over %lld tokens (PyTorch 23.8202)\n", ppl,
              (long long)count);
  INFO("GPU perplexity " << ppl << " over " << count << " tokens (PyTorch 23.8202, CPU 23.853)");
  CHECK(std::abs(ppl / 23.8202 - 1.0) < 0.01);
}

// Chunk sizes change only which GEMM kernels run (skinny, split-K, wide) and so the order of long FP32 sums:
// the logits may move by rounding, not more (bound: 1e-3 relative, ~100x the 1e-5 such reorderings give on
// this model; a path error gives O(1)).
TEST_CASE("CUDA prefill: chunked equals one chunk", "[gpu][cuda_api]") {
  auto g = GModel::load(kPy);
  REQUIRE(g.ok());
  const int V = (*g)->shape().vocab_size;
  const auto ids = prompt(200, V, 7);
  std::vector<float> one;
  {
    auto st = (*g)->new_sequence(256);
    REQUIRE(st.ok());
    REQUIRE((*g)->prefill(*st, ids, &one).ok());
    CHECK(st->pos == 200);
  }
  for (int chunk : {1, 7, 64, 130}) {
    auto st = (*g)->new_sequence(256);
    REQUIRE(st.ok());
    std::vector<float> got;
    int calls = 0;
    PrefillOptions po;
    po.chunk = chunk;
    po.ctx = &calls;
    po.on_chunk = [](void* c, int64_t, int64_t) { return ++*static_cast<int*>(c) > 0; };
    REQUIRE((*g)->prefill(*st, ids, &got, po).ok());
    INFO("chunk " << chunk << " rel " << rel(got, one));
    CHECK(calls == (200 + chunk - 1) / chunk);
    CHECK(rel(got, one) < 1e-3);
  }
  // Cancel after the first chunk: the state keeps it.
  auto st = (*g)->new_sequence(256);
  REQUIRE(st.ok());
  PrefillOptions po;
  po.chunk = 50;
  po.on_chunk = [](void*, int64_t, int64_t) { return false; };
  auto r = (*g)->prefill(*st, ids, nullptr, po);
  CHECK(r.code() == Code::cancelled);
  CHECK(st->pos == 50);
  // Too long a prompt: an error, nothing run.
  std::vector<float> lg;
  CHECK((*g)->prefill(*st, prompt(300, V, 1), &lg).code() == Code::out_of_range);
  CHECK(st->pos == 50);
}

// A batch of sequences at different positions in one forward gives each the logits it gets alone.
TEST_CASE("CUDA batched decode equals decoding each sequence alone", "[gpu][cuda_api]") {
  for (const std::string& dir : {kTiny, kPy}) {
    auto g = GModel::load(dir);
    REQUIRE(g.ok());
    const int V = (*g)->shape().vocab_size, B = 5;
    std::vector<GModel::State> a, b;
    for (int i = 0; i < B; ++i) {
      const auto ids = prompt(10 + 9 * i, V, 100 + i);  // different lengths: different positions and groups
      for (auto* v : {&a, &b}) {
        auto st = (*g)->new_sequence(128);
        REQUIRE(st.ok());
        REQUIRE((*g)->prefill(*st, ids).ok());
        v->push_back(std::move(st).value());
      }
    }
    for (int step = 0; step < 3; ++step) {
      std::vector<std::vector<float>> batched(B), alone(B);
      std::vector<GModel::DecodeItem> items;
      for (int i = 0; i < B; ++i) items.push_back({&a[i], int32_t((step * 31 + i * 7) % V), &batched[i]});
      REQUIRE((*g)->decode(items).ok());
      for (int i = 0; i < B; ++i) {
        GModel::DecodeItem one{&b[i], items[i].token, &alone[i]};
        REQUIRE((*g)->decode(std::span(&one, 1)).ok());
        INFO(dir << " step " << step << " seq " << i << " rel " << rel(batched[i], alone[i]));
        CHECK(a[i].pos == b[i].pos);
        CHECK(rel(batched[i], alone[i]) < 1e-3);
        CHECK(argmax_of(batched[i]) == argmax_of(alone[i]));
      }
    }
    // Bad batches are errors that change nothing.
    std::vector<GModel::State*> twice{&a[0], &a[0]};
    std::vector<int32_t> toks{1, 2};
    const int64_t p = a[0].pos;
    CHECK((*g)->decode(twice, toks, nullptr).code() == Code::invalid_argument);
    std::vector<int32_t> bad{V, 1};
    std::vector<GModel::State*> two{&a[0], &a[1]};
    CHECK((*g)->decode(two, bad, nullptr).code() == Code::invalid_argument);
    CHECK(a[0].pos == p);
  }
}

// A decode step captured in a CUDA graph: capture succeeds (no sync, no pageable copy inside), the graph
// computes what the stream computes, bit for bit (same kernels, same order).
TEST_CASE("CUDA decode step is capturable in a CUDA graph", "[gpu][cuda_api]") {
  cudaStream_t s;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  {
    auto g = GModel::load(kPy, s);
    REQUIRE(g.ok());
    const int V = (*g)->shape().vocab_size, B = 3;
    std::vector<GModel::State> a, b;
    for (int i = 0; i < B; ++i)
      for (auto* v : {&a, &b}) {
        auto st = (*g)->new_sequence(64);
        REQUIRE(st.ok());
        REQUIRE((*g)->prefill(*st, prompt(20 + i, V, 9 + i)).ok());
        v->push_back(std::move(st).value());
      }
    float* d_logits = nullptr;
    REQUIRE(cudaMalloc(&d_logits, size_t(2) * B * V * 4) == cudaSuccess);
    std::vector<GModel::State*> pa, pb;
    for (int i = 0; i < B; ++i) {
      pa.push_back(&a[i]);
      pb.push_back(&b[i]);
    }
    const std::vector<int32_t> toks{5, 77, 1000};
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    Status cap = (*g)->decode(pa, toks, d_logits);
    cudaGraph_t graph = nullptr;
    REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
    REQUIRE(cap.ok());
    cudaGraphExec_t exec = nullptr;
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    REQUIRE((*g)->decode(pb, toks, d_logits + size_t(B) * V).ok());
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    const auto h = to_host(d_logits, size_t(2) * B * V);
    CHECK(std::equal(h.begin(), h.begin() + size_t(B) * V, h.begin() + size_t(B) * V));
    for (int i = 0; i < B; ++i) CHECK(a[i].pos == b[i].pos);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaFree(d_logits);
  }
  cudaStreamDestroy(s);
}

// Snapshot, run a block, roll back to every keep: the next step's logits equal those of a sequence that ran
// only the kept ids (exact restore or re-run; same bound as chunking).
TEST_CASE("CUDA snapshot and rollback", "[gpu][cuda_api]") {
  auto g = GModel::load(kPy);
  REQUIRE(g.ok());
  const int V = (*g)->shape().vocab_size;
  const auto base = prompt(33, V, 3), block = prompt(6, V, 4);
  for (int keep = 0; keep <= 6; ++keep) {
    auto a = (*g)->new_sequence(64), b = (*g)->new_sequence(64);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    REQUIRE((*g)->prefill(*a, base).ok());
    REQUIRE((*g)->prefill(*b, base).ok());
    auto sn = take_snapshot(**g, *a, block);
    REQUIRE(sn.ok());
    ForwardResult fr;
    REQUIRE((*g)->forward(*a, block, fr, true).ok());
    REQUIRE(rollback(**g, *a, *sn, keep).ok());
    CHECK(a->pos == 33 + keep);
    if (keep > 0) REQUIRE((*g)->forward(*b, std::span(block.data(), size_t(keep)), fr).ok());
    std::vector<float> la, lb;
    GModel::DecodeItem ia{&*a, 11, &la}, ib{&*b, 11, &lb};
    REQUIRE((*g)->decode(std::span(&ia, 1)).ok());
    REQUIRE((*g)->decode(std::span(&ib, 1)).ok());
    INFO("keep " << keep << " rel " << rel(la, lb));
    CHECK(rel(la, lb) < 1e-3);
    CHECK(a->history == b->history);
  }
}

// Generation on the GPU: greedy speculative returns the tokens of plain greedy (both on the GPU: the CPU's
// free run leaves the GPU's after a few tokens, as the reference's own CPU and GPU runs do).
TEST_CASE("CUDA generate: speculative greedy equals greedy", "[gpu][cuda_api]") {
  auto g = GModel::load(kPy);
  REQUIRE(g.ok());
  const int V = (*g)->shape().vocab_size;
  const auto p = prompt(40, V, 21);
  GenerateOptions o;
  o.max_tokens = 24;
  auto s1 = (*g)->new_sequence(128), s2 = (*g)->new_sequence(128);
  REQUIRE(s1.ok());
  REQUIRE(s2.ok());
  auto plain = generate(**g, *s1, p, o);
  REQUIRE(plain.ok());
  o.speculative = true;
  auto spec = generate(**g, *s2, p, o);
  REQUIRE(spec.ok());
  CHECK(spec->tokens == plain->tokens);
  CHECK(spec->spec_steps > 0);
  CHECK(s1->pos == s2->pos);
  // Sampling with a seed is reproducible on the GPU.
  o.speculative = true;
  o.sampling.temperature = 0.8f;
  o.sampling.seed = 42;
  auto s3 = (*g)->new_sequence(128), s4 = (*g)->new_sequence(128);
  REQUIRE(s3.ok());
  REQUIRE(s4.ok());
  auto r3 = generate(**g, *s3, p, o), r4 = generate(**g, *s4, p, o);
  REQUIRE(r3.ok());
  REQUIRE(r4.ok());
  CHECK(r3->tokens == r4->tokens);
}

// Layer by layer between the backends (the golden contract's method): the CPU run records every unit's
// inputs, outputs and top-k lists; the GPU run takes the CPU's inputs at each unit and its lists (so a rounding
// flip cannot spread), and its unit outputs must meet the golden limits (median ≤ 1e-3, ≤ 5% of rows above
// 1e-2; top-k lists: ≤ 5% of rows differ).
struct UnitCheck {
  std::map<int, std::vector<float>> in_H, in_pre, out_H, gpu_H;
  std::map<int, std::vector<int32_t>> lists;
  int64_t list_rows = 0, list_differ = 0;
  int hcd = 0, hc = 0;

  ForwardHooks record() {
    ForwardHooks h;
    h.ctx = this;
    h.unit_input = [](void* c, int l, int64_t, int rows, float* H, float* pre) {
      auto& u = *static_cast<UnitCheck*>(c);
      u.in_H[l].assign(H, H + size_t(rows) * u.hcd);
      u.in_pre[l].assign(pre, pre + size_t(rows) * u.hc);
    };
    h.unit_output = [](void* c, int l, int64_t, int rows, const float* H, const float*) {
      auto& u = *static_cast<UnitCheck*>(c);
      u.out_H[l].assign(H, H + size_t(rows) * u.hcd);
    };
    h.topk = [](void* c, int l, int64_t, int rows, int k, int32_t* lists) {
      static_cast<UnitCheck*>(c)->lists[l].assign(lists, lists + size_t(rows) * k);
    };
    return h;
  }
  ForwardHooks force() {
    ForwardHooks h;
    h.ctx = this;
    h.unit_input = [](void* c, int l, int64_t, int rows, float* H, float* pre) {
      auto& u = *static_cast<UnitCheck*>(c);
      if (u.in_H[l].size() != size_t(rows) * u.hcd) return;  // a shape mismatch shows up as missing outputs
      std::copy(u.in_H[l].begin(), u.in_H[l].end(), H);
      std::copy(u.in_pre[l].begin(), u.in_pre[l].end(), pre);
    };
    h.unit_output = [](void* c, int l, int64_t, int rows, const float* H, const float*) {
      auto& u = *static_cast<UnitCheck*>(c);
      u.gpu_H[l].assign(H, H + size_t(rows) * u.hcd);
    };
    h.topk = [](void* c, int l, int64_t, int rows, int k, int32_t* lists) {
      auto& u = *static_cast<UnitCheck*>(c);
      const auto& ref = u.lists[l];
      if (ref.size() != size_t(rows) * k) return;
      for (int r = 0; r < rows; ++r) {
        ++u.list_rows;
        if (!std::equal(lists + size_t(r) * k, lists + size_t(r + 1) * k, ref.begin() + size_t(r) * k)) ++u.list_differ;
      }
      std::copy(ref.begin(), ref.end(), lists);
    };
    return h;
  }
  void check(int n_layers) const {
    bool nan = false;
    for (int l = 0; l < n_layers; ++l) {
      REQUIRE(out_H.count(l));
      REQUIRE(gpu_H.count(l));
      REQUIRE(gpu_H.at(l).size() == out_H.at(l).size());
      const auto st = golden::detail::rel_stat("unit " + std::to_string(l), gpu_H.at(l), out_H.at(l), size_t(hcd), &nan);
      INFO(st.name << ": rows " << st.rows << " median " << st.median << " max " << st.max << " >1e-2 "
                   << 100 * st.frac_above << "%");
      CHECK(st.median <= 1e-3);
      CHECK(st.frac_above <= 0.05);
      std::printf("  %-8s rows %4lld  median %.2e  max %.2e  >1e-2 %5.2f%%\n", st.name.c_str(), (long long)st.rows,
                  st.median, st.max, 100 * st.frac_above);
    }
    CHECK(!nan);
    INFO("top-k rows differing: " << list_differ << " of " << list_rows);
    CHECK(list_differ <= list_rows / 20);
    std::printf("  top-k rows differing: %lld of %lld\n", (long long)list_differ, (long long)list_rows);
  }
};

// SPEC §5 on the GPU, checked unit by unit against the CPU: decoder bounded replay from an empty state, and
// encoder window replay from one state uploaded to both (the caches have the same bytes on both backends).
TEST_CASE("CUDA bounded replay and window replay meet the CPU unit by unit", "[gpu][cuda_api]") {
  auto g = GModel::load(kPy);
  REQUIRE(g.ok());
  auto c = Model<>::load(kPy);
  REQUIRE(c.ok());
  const ModelShape& s = (*g)->shape();
  const int V = s.vocab_size, L = s.num_hidden_layers;
  const auto ids = prompt(300, V, 5);
  {
    UnitCheck u;
    u.hcd = s.hc_mult * s.hidden_size;
    u.hc = s.hc_mult;
    ForwardHooks rec = u.record(), frc = u.force();
    SequenceState cs = (*c)->new_sequence(512);
    ForwardResult fr;
    ForwardOptions fo;
    fo.bounded_replay = true;
    fo.hooks = &rec;
    REQUIRE((*c)->forward(cs, ids, fr, fo).ok());
    auto gs = (*g)->new_sequence(512);
    REQUIRE(gs.ok());
    fo.hooks = &frc;
    REQUIRE((*g)->forward(*gs, ids, fo, nullptr).ok());
    CHECK(gs->pos == 300);
    std::printf("bounded replay, GPU vs CPU with the CPU's unit inputs:\n");
    u.check(L);
    // The flag took effect: exact prefill on the GPU gives other logits (the same kernels give identical ones).
    std::vector<float> bounded, exact;
    auto a = (*g)->new_sequence(512), b = (*g)->new_sequence(512);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    PrefillOptions po;
    po.bounded_replay = true;
    REQUIRE((*g)->prefill(*a, ids, &bounded, po).ok());
    REQUIRE((*g)->prefill(*b, ids, &exact).ok());
    CHECK(rel(bounded, exact) > 0);
  }
  {
    SequenceState cs = (*c)->new_sequence(512);
    REQUIRE((*c)->prefill(cs, ids).ok());
    auto gs = (*g)->new_sequence(512);
    REQUIRE(gs.ok());
    REQUIRE(gpu::upload_state(s, cs, *gs, (*g)->stream()).ok());
    SequenceState back = (*c)->new_sequence(512);
    REQUIRE(gpu::download_state(s, *gs, back, (*g)->stream()).ok());
    for (size_t l = 0; l < cs.layers.size(); ++l) {  // the round trip keeps every byte
      CHECK(back.layers[l].ring == cs.layers[l].ring);
      CHECK(back.layers[l].comp == cs.layers[l].comp);
      CHECK(back.layers[l].ikeys == cs.layers[l].ikeys);
      CHECK(back.layers[l].pend_kv == cs.layers[l].pend_kv);
    }
    REQUIRE((*g)->backend().drop_windows(*gs).ok());
    cs.drop_windows();
    UnitCheck u;
    u.hcd = s.hc_mult * s.hidden_size;
    u.hc = s.hc_mult;
    ForwardHooks rec = u.record(), frc = u.force();
    const auto recent = std::span(ids).subspan(300 - 160);
    std::vector<float> rc, rg;
    REQUIRE((*c)->replay_window(cs, recent, &rc, &rec).ok());
    REQUIRE((*g)->replay_window(*gs, recent, &rg, &frc).ok());
    CHECK(gs->pos == 300);
    std::printf("window replay, GPU vs CPU with the CPU's unit inputs:\n");
    u.check(L);
  }
}

// Text in, text out on the GPU: TextModel over Model<Config, Cuda> streams what it returns; speculative greedy
// returns plain greedy's text.
TEST_CASE("CUDA TextModel completes a chat prompt", "[gpu][cuda_api]") {
  auto g = GModel::load(kPy);
  REQUIRE(g.ok());
  auto tok = text::Tokenizer::from_json_file(kPy + "/tokenizer.json");
  REQUIRE(tok.ok());
  auto lm = text::TextModel<GModel>::make(**g, std::move(*tok));
  REQUIRE(lm.ok());
  nlohmann::ordered_json req = {{"messages", {{{"role", "user"}, {"content", "Write a Python function."}}}},
                                {"thinking_mode", "chat"}};
  auto prompt_text = lm->render(req);
  REQUIRE(prompt_text.ok());
  text::TextOptions o;
  o.max_tokens = 32;
  std::string streamed;
  o.ctx = &streamed;
  o.on_text = [](void* c, int32_t, std::string_view piece) {
    static_cast<std::string*>(c)->append(piece);
    return true;
  };
  auto plain = lm->complete(*prompt_text, o);
  REQUIRE(plain.ok());
  CHECK(plain->completion_tokens > 0);
  CHECK(streamed == plain->text);
  o.speculative = true;
  streamed.clear();
  auto spec = lm->complete(*prompt_text, o);
  REQUIRE(spec.ok());
  CHECK(spec->ids == plain->ids);
  CHECK(spec->text == plain->text);
  CHECK(spec->spec_steps > 0);
  std::printf("GPU completion (%lld tokens, %lld drafts accepted of %lld): %s\n", (long long)spec->completion_tokens,
              (long long)spec->accepted, (long long)spec->drafted, spec->text.c_str());
}
