// Expert parallel, with the Engram tables split by rows and the head by vocabulary rows, on the CPU backend
// (issue 16): the tiny-ced model run as 1, 2 and 4 ranks on threads (parallel::ThreadComm) gives the bits of the
// one-rank model: logits of every prefill row, decode steps, a DSpark draft, and the caches.
#include <catch2/catch.hpp>

#include <thread>

#include <dsv41/backend/cpu/unit_ops.hpp>
#include <dsv41/model/model.hpp>
#include <dsv41/parallel/thread_comm.hpp>

#include "fixture.hpp"

using namespace dsv41;

namespace {

using Tiny = Model<configs::TinyCed>;
const char* const kDir = DSV41_FIXTURES "/tiny-ced";

// What one rank (or the one-rank model) computed.
struct Run {
  Status status;
  std::vector<float> prefill_logits;           // every row
  std::vector<std::vector<float>> decode_logits;
  DraftResult draft;
  SequenceState state;
};

Run run_model(const Tiny& m, const std::vector<int32_t>& prompt) {
  Run r;
  auto fail = [&](Status s) { r.status = std::move(s); return std::move(r); };
  SequenceState st = m.new_sequence(64);
  ForwardResult fr;
  if (Status s = m.forward(st, prompt, fr, /*all_logits=*/true); !s.ok()) return fail(s);
  r.prefill_logits = fr.logits;
  for (int i = 0; i < 3; ++i) {
    std::vector<float> l;
    Tiny::DecodeItem item{&st, int32_t(40 + 7 * i), &l};
    if (Status s = m.decode(std::span<Tiny::DecodeItem>(&item, 1)); !s.ok()) return fail(s);
    r.decode_logits.push_back(std::move(l));
  }
  if (Status s = m.draft(st, 77, r.draft); !s.ok()) return fail(s);
  r.state = std::move(st);
  return r;
}

// Every rank loads its share with its communicator and runs the same calls on its own thread.
std::vector<Run> run_ranks(int world, const std::vector<int32_t>& prompt, std::vector<std::string>* load_errors,
                           bool split_attention = false) {
  parallel::ThreadGroup group(world);
  auto comms = parallel::make_thread_comms(group);
  std::vector<Run> runs(static_cast<size_t>(world));
  std::vector<std::string> errs(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      LoadOptions opt;
      opt.comm = comms[size_t(r)].get();
      opt.split_attention = split_attention;
      auto m = Tiny::load(kDir, opt);  // a failed load on one rank would leave the others waiting: none here
      if (!m.ok()) { errs[size_t(r)] = m.status().to_string(); return; }
      runs[size_t(r)] = run_model(**m, prompt);
    });
  for (auto& t : threads) t.join();
  if (load_errors) *load_errors = errs;
  return runs;
}

bool same_caches(const SequenceState& a, const SequenceState& b) {
  if (a.pos != b.pos || a.history != b.history || a.layers.size() != b.layers.size()) return false;
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const auto &x = a.layers[l], &y = b.layers[l];
    if (x.ring != y.ring || x.comp != y.comp || x.ikeys != y.ikeys || x.pend_kv != y.pend_kv ||
        x.pend_score != y.pend_score || x.n_entries != y.n_entries)
      return false;
  }
  return true;
}

}  // namespace

TEST_CASE("expert parallel over 1, 2 and 4 thread ranks gives the one-rank model's bits", "[parallel][expert_parallel]") {
  const Tiny& one = test::tiny_ced();
  const auto prompt = test::tiny_prompt(21, 5);
  const Run ref = run_model(one, prompt);
  REQUIRE(ref.status.ok());
  REQUIRE(ref.prefill_logits.size() == prompt.size() * size_t(one.shape().vocab_size));
  // TinyCed: 4 heads in 2 output groups, so heads split over 2 ranks at most
  for (auto [world, split_attention] : {std::pair{1, false}, {2, false}, {4, false}, {1, true}, {2, true}}) {
    INFO("world " << world << (split_attention ? ", attention heads split" : ""));
    std::vector<std::string> errs;
    const auto runs = run_ranks(world, prompt, &errs, split_attention);
    for (int r = 0; r < world; ++r) {
      INFO("rank " << r << " " << errs[size_t(r)]);
      REQUIRE(errs[size_t(r)].empty());
      const Run& got = runs[size_t(r)];
      REQUIRE(got.status.ok());
      CHECK(got.prefill_logits == ref.prefill_logits);
      CHECK(got.decode_logits == ref.decode_logits);
      CHECK(got.draft.ids == ref.draft.ids);
      CHECK(got.draft.logits == ref.draft.logits);
      CHECK(got.draft.confidence == ref.draft.confidence);
      CHECK(same_caches(got.state, ref.state));
    }
  }
}

TEST_CASE("a rank's forward reaches its communicator", "[parallel][expert_parallel]") {
  using C = configs::TinyCed;
  struct Rank1Of4 final : parallel::Communicator {  // loading needs no collective
    int rank() const override { return 1; }
    int size() const override { return 4; }
    Status all_reduce_sum(void*, size_t, parallel::Elem, void*) override { return error(Code::internal, "unused"); }
    Status all_gather(const void*, void*, size_t, parallel::Elem, void*) override { return error(Code::internal, "unused"); }
  } comm;
  LoadOptions opt;
  opt.comm = &comm;
  auto m = Tiny::load(kDir, opt);
  REQUIRE(m.ok());
  const auto& plan = (*m)->backend().parallel_plan();
  CHECK(plan.world == 4);
  CHECK(plan.experts == parallel::Range{C::n_routed_experts / 4, 2 * C::n_routed_experts / 4});
  // The weights the CPU ops compute on are the plan's: a forward reaches the communicator (which fails here).
  SequenceState st = (*m)->new_sequence(8);
  ForwardResult fr;
  const std::vector<int32_t> ids = {5, 6};
  const Status s = (*m)->forward(st, ids, fr);
  CHECK(s.code() == Code::internal);
  CHECK(st.pos == 0);
}

TEST_CASE("bind_weights with a plan holds the plan's share", "[parallel][expert_parallel]") {
  using C = configs::TinyCed;
  const ModelShape s = configs::to_shape<C>();
  auto ck = st::Checkpoint::open(kDir);
  REQUIRE(ck.ok());
  auto full = bind_weights(*ck, s);
  REQUIRE(full.ok());
  for (int world : {2, 4})
    for (int r = 0; r < world; ++r) {
      auto plan = parallel::make_plan(s, world, r);
      REQUIRE(plan.ok());
      auto w = bind_weights(*ck, s, &*plan);
      REQUIRE(w.ok());
      CHECK(w->head_first == r * (C::vocab_size / world));
      CHECK(w->head.out == C::vocab_size / world);
      // row 0 of the rank's head is row head_first of the full head
      std::vector<float> a(size_t(C::hidden_size)), b(size_t(C::hidden_size));
      w->head.row(0, a.data());
      full->head.row(w->head_first, b.data());
      CHECK(a == b);
      const auto sched = make_schedule(s);
      for (size_t l = 0; l < sched.size(); ++l) {
        const int E = sched[l].n_experts, per = E / world;
        const LayerWeights& L = w->layers[l];
        if (sched[l].engram_slot >= 0) {  // rows ⌊n·r/w⌋ .. ⌊n·(r+1)/w⌋ of the table, viewed from there
          const int64_t n = s.engram_num_embeddings[size_t(sched[l].engram_slot)];
          CHECK(L.engram_row_first == n * r / world);
          CHECK(L.engram_rows == n * (r + 1) / world - n * r / world);
          CHECK(L.engram_table == full->layers[l].engram_table + size_t(L.engram_row_first) * s.engram_head_dim);
          CHECK(L.engram_table_scale ==
                full->layers[l].engram_table_scale + size_t(L.engram_row_first) * (s.engram_head_dim / 32));
        }
        CHECK(L.expert_first == r * per);
        REQUIRE(int(L.experts.size()) == per);
        for (int i = 0; i < per; ++i) CHECK(L.experts[size_t(i)][1].w == full->layers[l].experts[size_t(r * per + i)][1].w);
      }
    }
}

TEST_CASE("bind_weights with heads split holds the rank's query rows, sinks and output groups", "[parallel][expert_parallel]") {
  using C = configs::TinyCed;
  const ModelShape s = configs::to_shape<C>();
  auto ck = st::Checkpoint::open(kDir);
  REQUIRE(ck.ok());
  auto full = bind_weights(*ck, s);
  REQUIRE(full.ok());
  parallel::PlanSizes z = parallel::plan_sizes(s, 2, 1);
  z.split_attention = true;
  auto plan = parallel::make_plan(z);
  REQUIRE(plan.ok());
  auto w = bind_weights(*ck, s, &*plan);
  REQUIRE(w.ok());
  const int H = C::num_attention_heads, D = C::head_dim, G = C::o_groups, R = C::o_lora_rank;
  for (size_t l = 0; l < w->layers.size(); ++l) {
    const LayerWeights &L = w->layers[l], &F = full->layers[l];
    CHECK(L.head_first == H / 2);
    CHECK(L.group_first == G / 2);
    REQUIRE(L.wq_b.out == H / 2 * D);
    REQUIRE(L.wo_a.out == G / 2 * R);
    CHECK(L.attn_sink == std::vector<float>(F.attn_sink.begin() + H / 2, F.attn_sink.end()));
    std::vector<float> a(size_t(L.wq_b.in)), b(size_t(F.wq_b.in));
    for (int row : {0, 31, 32, H / 2 * D - 1}) {  // rows on both sides of an FP8 scale block
      L.wq_b.row(row, a.data());
      F.wq_b.row(H / 2 * D + row, b.data());
      CHECK(a == b);
    }
    std::vector<float> c(size_t(L.wo_a.in)), e(size_t(F.wo_a.in));
    L.wo_a.row(R - 1, c.data());
    F.wo_a.row(G / 2 * R + R - 1, e.data());
    CHECK(c == e);
  }
}

// The one-rank MoE (slots, then the combine in ascending expert id) against the accumulation the CPU reference
// used before expert parallel: y[t] += each expert's output, experts in ascending id, then + shared, one rounding.
TEST_CASE("cpu::moe at one rank equals the per-expert accumulation", "[parallel][expert_parallel]") {
  const Tiny& m = test::tiny_ced();
  const ModelShape& s = m.shape();
  const auto sched = make_schedule(s);
  auto ck = st::Checkpoint::open(kDir);
  REQUIRE(ck.ok());
  auto w = bind_weights(*ck, s);
  REQUIRE(w.ok());
  const int d = s.hidden_size, S = 9;
  std::vector<float> x(size_t(S) * d);
  uint32_t g = 12345;
  for (auto& v : x) {
    g = g * 1664525u + 1013904223u;
    v = num::round_bf16(float(int(g >> 9) % 2001 - 1000) / 500.f);
  }
  for (size_t l : {size_t(0), size_t(s.num_hidden_layers)}) {  // a backbone layer and a DSpark stage
    const LayerRole& role = sched[l];
    const LayerWeights& L = w->layers[l];
    const int E = role.n_experts, k = role.top_k;
    std::vector<float> got(size_t(S) * d);
    REQUIRE(cpu::moe(s, role, L, x.data(), nullptr, S, got.data()).ok());
    // the reference accumulation
    std::vector<float> logits(size_t(S) * E);
    cpu::linear(L.gate, x.data(), S, logits.data(), cpu::Lin::F32);
    std::vector<int> sel(size_t(S) * k);
    std::vector<float> wt(size_t(S) * k), y(size_t(S) * d, 0.f), sh(size_t(S) * d), want(size_t(S) * d);
    for (int t = 0; t < S; ++t)
      cpu::route(logits.data() + size_t(t) * E, L.gate_bias.data(), E, k, s.norm_topk_prob,
                 float(s.routed_scaling_factor), sel.data() + size_t(t) * k, wt.data() + size_t(t) * k);
    int routed = 0;
    for (int e = 0; e < E; ++e)
      for (int t = 0; t < S; ++t)
        for (int i = 0; i < k; ++i) {
          if (sel[size_t(t) * k + i] != e) continue;
          std::vector<float> ye(static_cast<size_t>(d));
          cpu::expert_ffn(L.experts[size_t(e)], x.data() + size_t(t) * d, 1, &wt[size_t(t) * k + i],
                          float(s.swiglu_limit), ye.data());
          for (int j = 0; j < d; ++j) y[size_t(t) * d + j] += ye[size_t(j)];
          ++routed;
        }
    CHECK(routed == S * k);
    cpu::expert_ffn(L.shared, x.data(), S, nullptr, float(s.swiglu_limit), sh.data());
    for (size_t i = 0; i < y.size(); ++i) want[i] = num::round_bf16(y[i] + sh[i]);
    INFO("layer " << l);
    CHECK(got == want);
  }
}

TEST_CASE("cpu::moe without a communicator refuses a share of the experts", "[parallel][expert_parallel]") {
  const ModelShape s = configs::to_shape<configs::TinyCed>();
  auto ck = st::Checkpoint::open(kDir);
  REQUIRE(ck.ok());
  auto plan = parallel::make_plan(s, 2, 1);
  REQUIRE(plan.ok());
  auto w = bind_weights(*ck, s, &*plan);
  REQUIRE(w.ok());
  const auto sched = make_schedule(s);
  std::vector<float> x(size_t(s.hidden_size), 0.25f), out(size_t(s.hidden_size));
  const Status st = cpu::moe(s, sched[0], w->layers[0], x.data(), nullptr, 1, out.data());
  CHECK(st.code() == Code::invalid_argument);
  CHECK(st.message().find("no communicator") != std::string::npos);
}

TEST_CASE("ThreadComm sums in rank order and gathers by rank", "[parallel][thread_comm]") {
  for (int n : {1, 2, 3, 4}) {
    parallel::ThreadGroup g(n);
    auto comms = parallel::make_thread_comms(g);
    std::vector<std::vector<float>> sums(static_cast<size_t>(n)), gathered(static_cast<size_t>(n));
    std::vector<std::vector<uint16_t>> bsums(static_cast<size_t>(n));
    std::vector<Status> st(static_cast<size_t>(n));
    std::vector<std::thread> th;
    for (int r = 0; r < n; ++r)
      th.emplace_back([&, r] {
        std::vector<float> v = {float(r + 1), float(10 * r), 0.5f};
        st[size_t(r)] = comms[size_t(r)]->all_reduce_sum(v.data(), v.size(), parallel::Elem::f32, nullptr);
        sums[size_t(r)] = v;
        std::vector<uint16_t> b = {num::bf16_bits(float(r)), num::bf16_bits(1.5f)};
        if (st[size_t(r)].ok()) st[size_t(r)] = comms[size_t(r)]->all_reduce_sum(b.data(), 2, parallel::Elem::bf16, nullptr);
        bsums[size_t(r)] = b;
        const float mine[2] = {float(r), -float(r)};
        gathered[size_t(r)].resize(size_t(2 * n));
        if (st[size_t(r)].ok())
          st[size_t(r)] = comms[size_t(r)]->all_gather(mine, gathered[size_t(r)].data(), 2, parallel::Elem::f32, nullptr);
      });
    for (auto& t : th) t.join();
    float s0 = 0, s1 = 0, sb = 0;
    for (int r = 0; r < n; ++r) { s0 += float(r + 1); s1 += float(10 * r); sb += float(r); }
    for (int r = 0; r < n; ++r) {
      INFO("n " << n << " rank " << r);
      REQUIRE(st[size_t(r)].ok());
      CHECK(sums[size_t(r)] == std::vector<float>{s0, s1, 0.5f * float(n)});
      CHECK(num::bf16_to_f32(bsums[size_t(r)][0]) == sb);
      CHECK(num::bf16_to_f32(bsums[size_t(r)][1]) == 1.5f * float(n));
      for (int q = 0; q < n; ++q) {
        CHECK(gathered[size_t(r)][size_t(2 * q)] == float(q));
        CHECK(gathered[size_t(r)][size_t(2 * q + 1)] == -float(q));
      }
    }
  }
}

TEST_CASE("ThreadComm reports ranks that disagree on the count", "[parallel][thread_comm]") {
  parallel::ThreadGroup g(2);
  auto comms = parallel::make_thread_comms(g);
  Status st[2];
  std::thread a([&] { float v[2] = {1, 2}; st[0] = comms[0]->all_reduce_sum(v, 2, parallel::Elem::f32, nullptr); });
  std::thread b([&] { float v[3] = {1, 2, 3}; st[1] = comms[1]->all_reduce_sum(v, 3, parallel::Elem::f32, nullptr); });
  a.join();
  b.join();
  CHECK(st[0].code() == Code::invalid_argument);
  CHECK(st[1].code() == Code::invalid_argument);
}
