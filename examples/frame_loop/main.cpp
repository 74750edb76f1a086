// frame_loop MODEL_DIR [SECONDS] [BUDGET_US] [DEVICE]: a 60 Hz host loop that generates on the side without ever
// blocking a frame for long. Each frame gives dsv41_session_poll at most BUDGET_US (default 4000) of work,
// then sleeps to the next frame. Generation restarts whenever it finishes, for SECONDS (default 3).
// Prints the per-frame work time (p50, p99, max), tokens/s, and whether p99 stayed within the budget
// plus one token's work (p99 of the polls' single units: a decode or a prefill chunk) and no poll started work
// after its budget had passed. Exit 0 when so, 1 otherwise. DEVICE: cpu (default) or cuda.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <dsv41/c_api.h>

namespace {

using Clock = std::chrono::steady_clock;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5))];
}

const char* kRequest =
    R"({"messages": [{"role": "user", "content": "Write a Python function that sorts a list of numbers and explain it."}],)"
    R"( "thinking_mode": "chat"})";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: frame_loop MODEL_DIR [SECONDS] [BUDGET_US] [cpu|cuda]\n");
    return 2;
  }
  const double seconds = argc > 2 ? std::atof(argv[2]) : 3.0;
  const int64_t budget_us = argc > 3 ? std::atoll(argv[3]) : 4000;

  dsv41_load_options lo{};
  lo.device = argc > 4 ? argv[4] : "cpu";
  dsv41_model* model = nullptr;
  if (dsv41_status rc = dsv41_model_load(argv[1], &lo, &model); rc != DSV41_OK) {
    std::fprintf(stderr, "load: %s: %s\n", dsv41_status_name(rc), model ? dsv41_model_last_error(model) : "");
    dsv41_model_free(model);
    return 1;
  }
  dsv41_session* s = nullptr;
  if (dsv41_session_create(model, nullptr, &s) != DSV41_OK) {
    std::fprintf(stderr, "session: %s\n", dsv41_model_last_error(model));
    dsv41_model_free(model);
    return 1;
  }
  dsv41_generate_options go{};
  go.max_tokens = 96;
  go.temperature = 0.8f;  // varied text, so that generations do not end at once
  auto fail = [&](const char* what) {
    std::fprintf(stderr, "%s: %s\n", what, dsv41_session_last_error(s));
    dsv41_session_free(s);
    dsv41_model_free(model);
    return 1;
  };

  // The loop: 60 frames a second, at most budget_us of generation in each.
  const auto frame = std::chrono::microseconds(16667);
  std::vector<double> work, unit;
  int64_t late = 0;  // polls that started a unit after the budget had passed (never, by poll's contract)
  int64_t tokens = 0, generations = 0, prompt_tokens = 0;
  const auto start = Clock::now();
  auto next = start;
  bool begun = false;
  while (Clock::now() - start < std::chrono::duration<double>(seconds)) {
    next += frame;
    if (!begun) {
      dsv41_session_reset(s);  // run the prompt again: prefill is part of what the frames absorb
      go.seed = uint64_t(generations);
      if (dsv41_session_begin(s, nullptr, 0, kRequest, &go) != DSV41_OK) return fail("begin");
      begun = true;
    }
    int32_t out[64];
    dsv41_poll_result r{};
    if (dsv41_session_poll(s, 0, budget_us, out, 64, &r) != DSV41_OK) return fail("poll");
    work.push_back(double(r.elapsed_us));
    if (r.units > 0) unit.push_back(double(r.last_unit_us));
    if (r.units > 1 && r.elapsed_us - r.last_unit_us > budget_us) ++late;
    tokens += int64_t(r.n_tokens);
    if (r.finish != DSV41_FINISH_NONE) {
      prompt_tokens += r.prompt_tokens;
      dsv41_session_take(s, nullptr);
      begun = false;
      ++generations;
    }
    std::this_thread::sleep_until(next);
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  if (begun) dsv41_session_take(s, nullptr);
  dsv41_session_free(s);
  dsv41_model_free(model);

  const double p50 = percentile(work, 0.5), p99 = percentile(work, 0.99), mx = percentile(work, 1.0);
  const double one_token = percentile(unit, 0.99);  // one unit of work: a decode or a prefill chunk
  const int64_t over = std::count_if(work.begin(), work.end(), [&](double w) { return w > double(budget_us) + one_token; });
  const bool ok = p99 <= double(budget_us) + one_token && late == 0 && tokens > 0;
  std::printf("frames %zu in %.2f s (60 Hz), budget %lld us, one token's work %.0f us (p50 %.0f us)\n", work.size(), wall,
              (long long)budget_us, one_token, percentile(unit, 0.5));
  std::printf("frame work: p50 %.0f us, p99 %.0f us, max %.0f us; %lld frames over budget + one token, %lld started work late\n",
              p50, p99, mx, (long long)over, (long long)late);
  std::printf("generated %lld tokens in %lld generations (%lld prompt tokens prefilled): %.1f tokens/s\n",
              (long long)tokens, (long long)generations, (long long)prompt_tokens, double(tokens) / wall);
  std::printf("within budget + one token at p99: %s\n", ok ? "yes" : "no");
  return ok ? 0 : 1;
}
