// GPU checks of images in the CUDA model (Model<_, Cuda>, SPEC §4.10) on vision-tiny:
//  1. encode_image (blocks::vision_encode over the CUDA vision ops) meets the fixture's contract for
//     vision_tower / vision_embeds; the span's rows merged on the device are h.0's: exact with the golden's
//     aligner rows, START/NEWLINE/END and text rows exact with the GPU's own;
//  2. the golden check (golden::run) with the image: units on golden inputs, own top-k, head, Engram ids and
//     the vision additions, as the other goldens are judged (DSpark reported: it fails on the CPU too);
//  3. a chunked prefill with the image through Model<Dynamic, Cuda>, layer by layer against the CPU model's
//     forward of the same prompt and image rows (each unit on the CPU's input and top-k lists: median
//     rel ≤ 1e-3, at most 5% of rows above 1e-2), the merged embeddings equal, the Engram ids equal.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <dsv41/io/safetensors.hpp>
#include <dsv41/model/cuda_model.hpp>
#include <dsv41/model/golden.hpp>
#include <dsv41/model/model.hpp>

#ifndef DSV41_TEST_DATA
#define DSV41_TEST_DATA "tests/data"
#endif

using namespace dsv41;

namespace {

const std::string kDir = std::string(DSV41_TEST_DATA) + "/golden/vision-tiny";

#define VM_OK(expr)                       \
  do {                                    \
    const ::dsv41::Status vm_s_ = (expr); \
    INFO(vm_s_.to_string());              \
    REQUIRE(vm_s_.ok());                  \
  } while (0)

// The golden's tensors these checks read.
struct Golden {
  std::vector<uint16_t> patches;
  std::vector<int32_t> grid, ids, types;
  std::vector<float> tower, embeds, h0;
  int B = 0, T = 0, P = 0;
};

Golden read_golden() {
  Golden r;
  auto f = st::File::open(kDir + "/golden.safetensors");
  REQUIRE(f.ok());
  const st::File& file = *f;
  auto find = [&](const char* n) {
    const st::TensorView* t = file.find(n);
    INFO(n);
    REQUIRE(t);
    return t;
  };
  const st::TensorView* p = find("image_patches");
  REQUIRE(p->dtype == st::DType::BF16);
  r.patches.resize(size_t(p->numel()));
  std::memcpy(r.patches.data(), p->data, r.patches.size() * 2);
  r.grid = golden::detail::to_int<int32_t>(*find("image_grid"));
  r.ids = golden::detail::to_int<int32_t>(*find("input_ids"));
  r.types = golden::detail::to_int<int32_t>(*find("token_types"));
  r.tower = golden::detail::to_f32(*find("vision_tower"));
  r.embeds = golden::detail::to_f32(*find("vision_embeds"));
  r.h0 = golden::detail::to_f32(*find("h.0"));
  r.B = int(find("input_ids")->shape[0]);
  r.T = int(find("input_ids")->shape[1]);
  r.P = golden::detail::to_int<int32_t>(*find("prefill_length"))[0];
  REQUIRE(r.grid.size() == 6);
  return r;
}

ImageInput image_of(const Golden& g) {
  ImageInput in;
  in.patches = g.patches;
  in.n_vit_h = g.grid[2];
  in.n_vit_w = g.grid[3];
  in.n_llm_h = g.grid[4];
  in.n_llm_w = g.grid[5];
  return in;
}

// The image's span (types from token_types) over the given aligner rows.
struct Span {
  std::vector<int8_t> types;
  ImageSpan span;
};
Span span_of(const Golden& g, const std::vector<float>& embeds) {
  Span s;
  const int n = g.grid[4] * (g.grid[5] + 1) + 2;
  for (int i = 0; i < n; ++i) s.types.push_back(int8_t(g.types[size_t(g.grid[0]) * g.P + size_t(g.grid[1] + i)]));
  s.span.start = g.grid[1];
  s.span.types = s.types;
  s.span.embeds = embeds;
  return s;
}

golden::Stat rel(const std::vector<float>& x, const std::vector<float>& ref, size_t w) {
  bool nan = false;
  golden::Stat s = golden::detail::rel_stat("", x, ref, w, &nan);
  CHECK_FALSE(nan);
  return s;
}

// Unit 0's input rows [rows, hc, d] of one forward or prefill.
struct EmbedTap {
  size_t hw = 0;
  std::vector<float> H;
  static void on_input(void* c, int l, int64_t, int rows, float* H, float*) {
    auto& t = *static_cast<EmbedTap*>(c);
    if (l == 0) t.H.insert(t.H.end(), H, H + size_t(rows) * t.hw);
  }
};

// One run's layer records over P rows: each unit's input and output streams, the index sources' top-k
// lists, the Engram ids. With `from` set, every unit's input and every top-k list are replaced by from's
// (the golden check's substitution), after unit 0's own input was kept in `embed`.
struct Layers {
  int P = 0, hc = 0, d = 0;
  const Layers* from = nullptr;
  std::map<int, std::vector<float>> in, pre_in, out, pre_out;
  std::map<int, std::vector<int32_t>> topk;
  std::vector<float> embed;
  std::vector<int64_t> engram;
  int engram_n = 0;

  size_t hw() const { return size_t(hc) * d; }
  static void put(std::vector<float>& v, size_t total, size_t off, const float* src, size_t n) {
    v.resize(total);
    std::copy_n(src, n, v.begin() + std::ptrdiff_t(off));
  }
  static void on_input(void* c, int l, int64_t start, int rows, float* H, float* pre) {
    auto& r = *static_cast<Layers*>(c);
    const size_t hw = r.hw(), n = size_t(rows);
    if (l == 0) put(r.embed, size_t(r.P) * hw, size_t(start) * hw, H, n * hw);
    put(r.in[l], size_t(r.P) * hw, size_t(start) * hw, H, n * hw);
    put(r.pre_in[l], size_t(r.P) * r.hc, size_t(start) * r.hc, pre, n * r.hc);
    if (!r.from) return;
    std::copy_n(r.from->in.at(l).begin() + std::ptrdiff_t(size_t(start) * hw), n * hw, H);
    std::copy_n(r.from->pre_in.at(l).begin() + std::ptrdiff_t(size_t(start) * r.hc), n * r.hc, pre);
  }
  static void on_output(void* c, int l, int64_t start, int rows, const float* H, const float* pre) {
    auto& r = *static_cast<Layers*>(c);
    const size_t hw = r.hw(), n = size_t(rows);
    put(r.out[l], size_t(r.P) * hw, size_t(start) * hw, H, n * hw);
    put(r.pre_out[l], size_t(r.P) * r.hc, size_t(start) * r.hc, pre, n * r.hc);
  }
  static void on_topk(void* c, int l, int64_t start, int rows, int k, int32_t* lists) {
    auto& r = *static_cast<Layers*>(c);
    auto& v = r.topk[l];
    v.resize(size_t(r.P) * k, -1);
    std::copy_n(lists, size_t(rows) * k, v.begin() + std::ptrdiff_t(size_t(start) * k));
    if (r.from) std::copy_n(r.from->topk.at(l).begin() + std::ptrdiff_t(size_t(start) * k), size_t(rows) * k, lists);
  }
  static void on_engram(void* c, int64_t start, int rows, int n, const int64_t* ids) {
    auto& r = *static_cast<Layers*>(c);
    r.engram_n = n;
    r.engram.resize(size_t(r.P) * n);
    std::copy_n(ids, size_t(rows) * n, r.engram.begin() + std::ptrdiff_t(size_t(start) * n));
  }
  ForwardHooks hooks() {
    ForwardHooks h;
    h.ctx = this;
    h.unit_input = on_input;
    h.unit_output = on_output;
    h.topk = on_topk;
    h.engram_ids = on_engram;
    return h;
  }
};

}  // namespace

TEST_CASE("CUDA model: encode_image meets vision-tiny's contract; the span's rows merged on the device are h.0's",
          "[gpu][vision]") {
  const Golden g = read_golden();
  auto m = CudaModel<>::load(kDir);
  INFO((m.ok() ? std::string() : m.status().to_string()));
  REQUIRE(m.ok());
  const auto& gm = **m;
  const ModelShape& s = gm.shape();
  const int hc = s.hc_mult, d = s.hidden_size, dv = s.vision.hidden_size;
  VisionResult r;
  VM_OK(gm.encode_image(image_of(g), r));
  const golden::Stat tower = rel(r.tower, g.tower, size_t(dv)), embeds = rel(r.embeds, g.embeds, size_t(d));
  INFO("tower median " << tower.median << " max " << tower.max << "; embeds median " << embeds.median << " max "
                       << embeds.max);
  CHECK(tower.rows == int64_t(g.grid[2]) * g.grid[3]);
  CHECK(embeds.rows == int64_t(g.grid[4]) * g.grid[5]);
  CHECK(tower.median <= 1e-2);
  CHECK(tower.max <= 3e-2);
  CHECK(embeds.median <= 1e-2);
  CHECK(embeds.max <= 3e-2);

  // The CPU model's encoder on the same patches: the same contract between the two backends.
  auto cm = Model<>::load(kDir);
  REQUIRE(cm.ok());
  VisionResult cr;
  VM_OK((*cm)->encode_image(image_of(g), cr));
  CHECK(rel(r.embeds, cr.embeds, size_t(d)).max <= 3e-2);

  const int b = g.grid[0];
  const std::span<const int32_t> ids(g.ids.data() + size_t(b) * g.T, size_t(g.P));
  const size_t hw = size_t(hc) * d;
  const std::vector<float> want(g.h0.begin() + std::ptrdiff_t(size_t(b) * g.T * hw),
                                g.h0.begin() + std::ptrdiff_t((size_t(b) * g.T + g.P) * hw));
  // With the golden's aligner rows every merged row is h.0's, bit for bit; with the GPU's own rows the
  // IMAGE slots are within the vision contract and every other row is exact.
  for (const bool own : {false, true}) {
    CAPTURE(own);
    const Span sp = span_of(g, own ? r.embeds : g.embeds);
    const ImageSpan one[] = {sp.span};
    EmbedTap tap;
    tap.hw = hw;
    ForwardHooks hooks;
    hooks.ctx = &tap;
    hooks.unit_input = EmbedTap::on_input;
    auto st = gm.new_sequence(g.T);
    REQUIRE(st.ok());
    ForwardOptions fo;
    fo.hooks = &hooks;
    fo.images = one;
    ForwardResult fr;
    VM_OK(gm.forward(*st, ids, fr, fo));
    REQUIRE(tap.H.size() == want.size());
    int differ = 0, image_rows = 0;
    for (int t = 0; t < g.P; ++t) {
      const int off = t - int(sp.span.start);
      const bool slot = off >= 0 && off < int(sp.types.size()) && sp.types[size_t(off)] == ImageSpan::kImage;
      image_rows += slot;
      if (own && slot) continue;
      bool same = true;
      for (size_t i = 0; i < hw; ++i) same = same && tap.H[size_t(t) * hw + i] == want[size_t(t) * hw + i];
      differ += !same;
    }
    CHECK(image_rows == g.grid[4] * g.grid[5]);
    CHECK(differ == 0);
    const golden::Stat all = rel(tap.H, want, hw);
    CHECK(all.max <= (own ? 3e-2 : 0.0));
  }

  // A text-only model takes no images.
  auto tiny = CudaModel<>::load(std::string(DSV41_TEST_DATA) + "/golden/tiny-ced");
  REQUIRE(tiny.ok());
  CHECK((*tiny)->encode_image(image_of(g), r).code() == Code::unsupported);
}

TEST_CASE("CUDA model passes the vision-tiny golden check: units, top-k, head, Engram and the vision additions",
          "[gpu][vision][golden]") {
  auto m = CudaModel<>::load(kDir);
  REQUIRE(m.ok());
  auto rep = golden::run(**m, kDir + "/golden.safetensors");
  INFO((rep.ok() ? rep->summary() : rep.status().to_string()));
  REQUIRE(rep.ok());
  CHECK(rep->has_image);
  CHECK_FALSE(rep->has_nan);
  CHECK(rep->engram_mismatches == 0);
  CHECK(rep->engram_total > 0);
  for (const auto& u : rep->units) {
    CAPTURE(u.name);
    CHECK(u.median <= 1e-3);
    CHECK(u.frac_above <= 0.05);
  }
  CHECK(rep->mean_unit_frac <= 0.02);
  for (const auto& t : rep->topk) CHECK(t.frac_above <= 0.05);
  CHECK(rep->head.max <= 1e-3);
  CHECK(rep->vision_tower.pass);
  CHECK(rep->vision_embeds.pass);
  CHECK(rep->patch_mismatches <= 0);
  CHECK(rep->merged_embeds.max <= 3e-2);  // the free run's unit-0 input: IMAGE rows from the GPU's aligner
  CHECK(rep->dspark.median <= 1e-3);      // its share of rows above 1e-2 fails on the CPU too (reported)
}

TEST_CASE("CUDA prefill with an image follows the CPU model layer by layer", "[gpu][vision]") {
  const Golden g = read_golden();
  auto gm = CudaModel<>::load(kDir);
  auto cm = Model<>::load(kDir);
  REQUIRE(gm.ok());
  REQUIRE(cm.ok());
  const ModelShape& s = (*cm)->shape();
  const int b = g.grid[0], P = g.P;
  const std::span<const int32_t> ids(g.ids.data() + size_t(b) * g.T, size_t(P));
  // Both backends take the CPU encoder's rows, so the merged embeddings must agree exactly.
  VisionResult cr;
  VM_OK((*cm)->encode_image(image_of(g), cr));
  const Span sp = span_of(g, cr.embeds);
  const ImageSpan one[] = {sp.span};

  Layers cpu;
  cpu.P = P;
  cpu.hc = s.hc_mult;
  cpu.d = s.hidden_size;
  const ForwardHooks ch = cpu.hooks();
  {
    SequenceState st = (*cm)->new_sequence(g.T);
    ForwardOptions fo;
    fo.hooks = &ch;
    fo.images = one;
    ForwardResult fr;
    VM_OK((*cm)->forward(st, ids, fr, fo));
  }
  Layers gpu;
  gpu.P = P;
  gpu.hc = cpu.hc;
  gpu.d = cpu.d;
  gpu.from = &cpu;
  const ForwardHooks gh = gpu.hooks();
  std::vector<float> last;
  {
    auto st = (*gm)->new_sequence(g.T);
    REQUIRE(st.ok());
    PrefillOptions po;
    po.chunk = 20;  // the span [6, 16) lies in the first of three chunks
    po.images = one;
    po.hooks = &gh;
    VM_OK((*gm)->prefill(*st, ids, &last, po));
    CHECK(st->pos == P);
  }
  REQUIRE(last.size() == size_t(s.vocab_size));
  CHECK(std::all_of(last.begin(), last.end(), [](float v) { return std::isfinite(v); }));

  // Unit 0's own input: the merged embeddings, equal bit for bit.
  REQUIRE(gpu.embed.size() == cpu.embed.size());
  CHECK(gpu.embed == cpu.embed);
  CHECK(gpu.engram == cpu.engram);  // hashed on the host for both; pads from the image positions on
  // Each unit on the CPU's input: the golden contract's bounds against the CPU's output.
  const size_t hw = cpu.hw();
  for (int l = 0; l < s.num_hidden_layers; ++l) {
    CAPTURE(l);
    REQUIRE(gpu.out.count(l));
    const golden::Stat o = rel(gpu.out[l], cpu.out[l], hw), p = rel(gpu.pre_out[l], cpu.pre_out[l], size_t(cpu.hc));
    INFO("out median " << o.median << " max " << o.max << " >1e-2 " << o.frac_above << "; pre median " << p.median);
    CHECK(o.median <= 1e-3);
    CHECK(o.frac_above <= 0.05);
    CHECK(p.median <= 1e-3);
    CHECK(p.frac_above <= 0.05);
    // The span's rows alone (MoE with bias_vl, Engram gate off there): the median bound.
    const size_t r0 = size_t(sp.span.start), n = sp.types.size();
    const std::vector<float> go(gpu.out[l].begin() + std::ptrdiff_t(r0 * hw), gpu.out[l].begin() + std::ptrdiff_t((r0 + n) * hw));
    const std::vector<float> co(cpu.out[l].begin() + std::ptrdiff_t(r0 * hw), cpu.out[l].begin() + std::ptrdiff_t((r0 + n) * hw));
    CHECK(rel(go, co, hw).median <= 1e-3);
  }
  for (const auto& [l, lists] : cpu.topk) {
    CAPTURE(l);
    CHECK(gpu.topk.count(l));
  }
}
