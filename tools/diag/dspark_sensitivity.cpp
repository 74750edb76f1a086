// Diagnostic (CPU only): how much DSpark stage 0's output moves when one value of its attention input x_attn is
// moved by one BF16 step (the size of the rounding flips a reordered sum makes), at each odd shape
// (tests/gpu/odd_shape_model.hpp): each of the block's rows·d values in turn; counted are the steps that change
// the stage's output streams at all and those that move its median row by more than 1e-2.
//
//   g++ -std=c++20 -O2 -Iinclude -Itests/gpu tools/diag/dspark_sensitivity.cpp -lutf8proc -o /tmp/dspark_sens
//   /tmp/dspark_sens tests/data/golden/tiny-ced
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <dsv41/model/model.hpp>

#include "odd_shape_model.hpp"

using namespace dsv41;

namespace {
std::vector<double> row_rel(const std::vector<float>& a, const std::vector<float>& b, size_t w) {
  std::vector<double> r;
  for (size_t i = 0; i * w < a.size(); ++i) {
    double num = 0, den = 0;
    for (size_t k = i * w; k < (i + 1) * w; ++k) {
      num += (double(a[k]) - b[k]) * (double(a[k]) - b[k]);
      den += double(b[k]) * b[k];
    }
    r.push_back(std::sqrt(num / std::max(den, 1e-30)));
  }
  return r;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  namespace fs = std::filesystem;
  for (const auto& o : golden_tools::odd_shapes()) {
    const std::string dir = (fs::temp_directory_path() / ("dsv41_sens_" + o.name)).string();
    if (!golden_tools::write_odd_model(std::string(argv[1]), dir, o, 20261201).ok()) return 1;
    auto m = Model<>::load(dir);
    if (!m.ok()) return 1;
    const cpu::Ops& ops = (*m)->backend();
    const ModelShape& s = (*m)->shape();
    const int B = s.dspark_block_size, hc = s.hc_mult, d = s.hidden_size, l = s.num_hidden_layers;
    std::vector<int32_t> ids;
    for (int t = 0; t < 14; ++t) ids.push_back(3 + (t * 37) % 400);
    SequenceState st = (*m)->new_sequence(32);
    if (!(*m)->prefill(st, ids).ok()) return 1;
    // stage 0 with x_attn[flip] (flat index) moved by one BF16 step (flip < 0: unperturbed)
    auto run = [&](int flip) {
      auto dw = ops.draft_block(st, 17);
      auto w = ops.block_work(B);
      (void)ops.mhc_pre(l, dw->streams, *w);
      if (flip >= 0) {
        float& v = w->x_attn[size_t(flip)];
        v = num::bf16_to_f32(uint16_t(num::bf16_bits(v) + 1));  // the next BF16 value up in magnitude
      }
      (void)ops.draft_attention(st, l, w->x_attn, st.pos - 1, w->attn_out);
      (void)ops.mhc_seam(l, dw->streams, *w);
      (void)ops.moe(l, nullptr, w->x_ffn, w->ffn_out, B);
      (void)ops.mhc_post(l, dw->streams, *w);
      return dw->H;
    };
    const std::vector<float> base = run(-1);
    int moved = 0, big = 0;
    double worst_median = 0;
    for (int f = 0; f < B * d; ++f) {
      auto rel = row_rel(run(f), base, size_t(hc) * d);
      std::sort(rel.begin(), rel.end());
      moved += rel.back() > 0;
      big += rel[rel.size() / 2] > 1e-2;
      worst_median = std::max(worst_median, rel[rel.size() / 2]);
    }
    std::printf("%-14s hc %d: of %d single BF16 steps in x_attn, %d change the stage output, %d move the median "
                "row by > 1e-2 (largest median row change %.1e)\n", o.name.c_str(), hc, B * d, moved, big, worst_median);
    fs::remove_all(dir);
  }
  return 0;
}
