// The C API with device "cuda" (dsv41::c built with CUDA) on the bundled model: load, blocking and polled
// generation agree, a prompt that extends the session's runs only its new tokens, a time-bounded poll never
// starts work past its bound.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <dsv41/c_api.h>

#ifndef DSV41_TEST_DATA
#define DSV41_TEST_DATA "tests/data"
#endif

namespace {
const std::string kTinyPyGpu = DSV41_TEST_DATA "/../../models/dsv41-tiny-py";

std::vector<int32_t> ids_of(const dsv41_completion& c) { return std::vector<int32_t>(c.tokens, c.tokens + c.n_tokens); }
}  // namespace

TEST_CASE("c api on the GPU: load, poll, prefix reuse", "[gpu][c_api]") {
  dsv41_load_options lo{};
  lo.device = "cuda";
  dsv41_model* m = nullptr;
  const dsv41_status rc = dsv41_model_load(kTinyPyGpu.c_str(), &lo, &m);
  INFO(dsv41_model_last_error(m));
  REQUIRE(rc == DSV41_OK);
  CHECK(std::string(dsv41_model_device(m)) == "cuda");
  dsv41_session* s = nullptr;
  REQUIRE(dsv41_session_create(m, nullptr, &s) == DSV41_OK);

  std::vector<int32_t> prompt(64);
  size_t n = 0;
  REQUIRE(dsv41_model_tokenize(m, "def fib(n):\n    if n < 2:", prompt.data(), prompt.size(), &n) == DSV41_OK);
  prompt.resize(n);
  dsv41_generate_options o{};
  o.max_tokens = 8;
  dsv41_completion blocking{};
  REQUIRE(dsv41_session_complete(s, prompt.data(), prompt.size(), &o, &blocking) == DSV41_OK);
  REQUIRE(blocking.n_tokens > 0);

  // Polled with a token bound (the same prefill chunks): the same tokens, at most 2 per poll.
  dsv41_session_reset(s);
  REQUIRE(dsv41_session_begin(s, prompt.data(), prompt.size(), nullptr, &o) == DSV41_OK);
  std::vector<int32_t> got;
  dsv41_poll_result r{};
  do {
    int32_t out[4];
    REQUIRE(dsv41_session_poll(s, 2, 0, out, 4, &r) == DSV41_OK);
    CHECK(r.n_tokens <= 2);
    got.insert(got.end(), out, out + r.n_tokens);
  } while (r.finish == DSV41_FINISH_NONE);
  dsv41_completion polled{};
  REQUIRE(dsv41_session_take(s, &polled) == DSV41_OK);
  CHECK(got == ids_of(blocking));

  // The next prompt extends the held sequence: only its new tokens run.
  std::vector<int32_t> next = prompt;
  next.insert(next.end(), polled.tokens, polled.tokens + polled.n_tokens);
  next.insert(next.end(), prompt.begin(), prompt.end());
  dsv41_completion second{};
  REQUIRE(dsv41_session_complete(s, next.data(), next.size(), &o, &second) == DSV41_OK);
  const int64_t held = int64_t(prompt.size() + polled.n_tokens) - 1;
  CHECK(second.cached_tokens == held);
  CHECK(second.prefilled_tokens == int64_t(next.size()) - held);

  // A 4 ms bound: every poll runs at least one unit and starts none after the bound.
  dsv41_session_reset(s);
  REQUIRE(dsv41_session_begin(s, next.data(), next.size(), nullptr, &o) == DSV41_OK);
  do {
    REQUIRE(dsv41_session_poll(s, 0, 4000, nullptr, 0, &r) == DSV41_OK);
    CHECK(r.units >= 1);
    if (r.units > 1) CHECK(r.elapsed_us - r.last_unit_us <= 4000);
  } while (r.finish == DSV41_FINISH_NONE);
  REQUIRE(dsv41_session_take(s, nullptr) == DSV41_OK);

  dsv41_completion_free(&blocking);
  dsv41_completion_free(&polled);
  dsv41_completion_free(&second);
  dsv41_session_free(s);
  dsv41_model_free(m);
}
