// The C API (include/dsv41/c_api.h, src/c_api.cpp) called from C++ on the bundled model (CPU).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <dsv41/c_api.h>

#ifndef DSV41_TEST_DATA
#define DSV41_TEST_DATA "tests/data"
#endif
#ifndef DSV41_MODELS_DIR
#define DSV41_MODELS_DIR DSV41_TEST_DATA "/../../models"
#endif

namespace {

const std::string kTinyPy = DSV41_MODELS_DIR "/dsv41-tiny-py";

// Owns a model and one session on it.
struct Loaded {
  dsv41_model* model = nullptr;
  dsv41_session* session = nullptr;
  Loaded() {
    REQUIRE(dsv41_model_load(kTinyPy.c_str(), nullptr, &model) == DSV41_OK);
    REQUIRE(dsv41_session_create(model, nullptr, &session) == DSV41_OK);
  }
  ~Loaded() {
    dsv41_session_free(session);
    dsv41_model_free(model);
  }
  std::vector<int32_t> tokenize(const char* text) const {
    std::vector<int32_t> ids(256);
    size_t n = 0;
    REQUIRE(dsv41_model_tokenize(model, text, ids.data(), ids.size(), &n) == DSV41_OK);
    ids.resize(n);
    return ids;
  }
};

struct Completion {
  dsv41_completion c{};
  ~Completion() { dsv41_completion_free(&c); }
  std::vector<int32_t> tokens() const { return std::vector<int32_t>(c.tokens, c.tokens + c.n_tokens); }
};

dsv41_generate_options greedy(int max_tokens) {
  dsv41_generate_options o{};
  o.max_tokens = max_tokens;
  o.stop_ids = nullptr;
  return o;
}

}  // namespace

TEST_CASE("c api: a directory that is not a model is an error with a message", "[c_api]") {
  dsv41_model* m = nullptr;
  const std::string dir = std::string(DSV41_TEST_DATA) + "/no-such-model";
  CHECK(dsv41_model_load(dir.c_str(), nullptr, &m) == DSV41_IO_ERROR);
  REQUIRE(m != nullptr);
  CHECK(std::string(dsv41_model_last_error(m)).find("no-such-model") != std::string::npos);
  CHECK(dsv41_model_device(m) == nullptr);
  CHECK(dsv41_model_vocab_size(m) == 0);
  dsv41_session* s = nullptr;
  CHECK(dsv41_session_create(m, nullptr, &s) == DSV41_INVALID_ARGUMENT);
  CHECK(s == nullptr);
  dsv41_model_free(m);

  // A directory without config.json (the test data root) fails in the loader, not with a crash.
  m = nullptr;
  CHECK(dsv41_model_load(DSV41_TEST_DATA, nullptr, &m) != DSV41_OK);
  REQUIRE(m != nullptr);
  CHECK(std::string(dsv41_model_last_error(m)).size() > 0);
  dsv41_model_free(m);

  dsv41_load_options lo{};
  lo.device = "tpu";
  m = nullptr;
  CHECK(dsv41_model_load(kTinyPy.c_str(), &lo, &m) == DSV41_INVALID_ARGUMENT);
  CHECK(std::string(dsv41_model_last_error(m)).find("tpu") != std::string::npos);
  dsv41_model_free(m);
  CHECK(dsv41_model_load(kTinyPy.c_str(), nullptr, nullptr) == DSV41_INVALID_ARGUMENT);
}

TEST_CASE("c api: the load progress callback sees the stages and can cancel", "[c_api]") {
  struct Seen {
    std::vector<std::string> stages;
    std::vector<float> fractions;
    std::string cancel_at;
  } seen;
  dsv41_load_options lo{};
  lo.progress = [](void* ctx, float f, const char* stage) {
    auto* s = static_cast<Seen*>(ctx);
    s->stages.push_back(stage);
    s->fractions.push_back(f);
    return s->cancel_at != stage;
  };
  lo.progress_ctx = &seen;

  dsv41_model* m = nullptr;
  REQUIRE(dsv41_model_load(kTinyPy.c_str(), &lo, &m) == DSV41_OK);
  CHECK(std::string(dsv41_model_device(m)) == "cpu");
  dsv41_model_free(m);
  REQUIRE(seen.stages.size() >= 3);
  CHECK(seen.stages.back() == "ready");
  CHECK(seen.fractions.back() == 1.0f);
  for (size_t i = 1; i < seen.fractions.size(); ++i) CHECK(seen.fractions[i] > seen.fractions[i - 1]);

  const std::string middle = seen.stages[1];
  seen = Seen{};
  seen.cancel_at = middle;
  m = nullptr;
  CHECK(dsv41_model_load(kTinyPy.c_str(), &lo, &m) == DSV41_CANCELLED);
  CHECK(seen.stages.back() == middle);  // nothing reported after the cancel
  CHECK(dsv41_model_device(m) == nullptr);
  dsv41_model_free(m);
}

TEST_CASE("c api: device cuda loads or says why not", "[c_api]") {
  dsv41_load_options lo{};
  lo.device = "cuda";
  dsv41_model* m = nullptr;
  const dsv41_status rc = dsv41_model_load(kTinyPy.c_str(), &lo, &m);
  if (rc == DSV41_OK) {
    CHECK(std::string(dsv41_model_device(m)) == "cuda");
  } else {
    CHECK(rc == DSV41_UNSUPPORTED);
    CHECK(std::string(dsv41_model_last_error(m)).find("cuda") != std::string::npos);
  }
  dsv41_model_free(m);
}

TEST_CASE("c api: the per-token callback streams the text and can cancel", "[c_api]") {
  Loaded L;
  const std::vector<int32_t> prompt = L.tokenize("def add(a, b):");
  REQUIRE(prompt.size() > 2);

  struct Stream {
    std::vector<int32_t> ids;
    std::string text;
    size_t cancel_after = 0;
  } st;
  dsv41_generate_options o = greedy(12);
  o.ctx = &st;
  o.on_token = [](void* ctx, int32_t id, const char* piece, size_t n) {
    auto* s = static_cast<Stream*>(ctx);
    if (id >= 0) s->ids.push_back(id);
    s->text.append(piece, n);
    return s->cancel_after == 0 || s->ids.size() < s->cancel_after;
  };
  Completion full;
  REQUIRE(dsv41_session_complete(L.session, prompt.data(), prompt.size(), &o, &full.c) == DSV41_OK);
  REQUIRE(full.c.n_tokens > 3);
  CHECK(st.ids == full.tokens());
  CHECK(st.text == std::string(full.c.text, full.c.text_len));
  CHECK(full.c.message_json == nullptr);

  st = Stream{};
  st.cancel_after = 3;
  dsv41_session_reset(L.session);
  Completion cut;
  REQUIRE(dsv41_session_complete(L.session, prompt.data(), prompt.size(), &o, &cut.c) == DSV41_OK);
  CHECK(cut.c.finish == DSV41_FINISH_CANCELLED);
  REQUIRE(cut.c.n_tokens == 3);
  CHECK(cut.tokens() == std::vector<int32_t>(full.c.tokens, full.c.tokens + 3));
  // The sequence holds the prompt and the generated tokens but the last.
  CHECK(dsv41_session_position(L.session) == int64_t(prompt.size()) + 2);
}

TEST_CASE("c api: a prompt that extends the session's runs only its new tokens", "[c_api]") {
  Loaded L;
  std::vector<int32_t> prompt = L.tokenize("class Stack:\n    def push(self, x):");
  const dsv41_generate_options o = greedy(6);
  Completion first;
  REQUIRE(dsv41_session_complete(L.session, prompt.data(), prompt.size(), &o, &first.c) == DSV41_OK);
  CHECK(first.c.cached_tokens == 0);
  CHECK(first.c.prefilled_tokens == int64_t(prompt.size()));
  REQUIRE(first.c.n_tokens > 0);

  // The next turn: the previous prompt, its completion, and more.
  std::vector<int32_t> next = prompt;
  next.insert(next.end(), first.c.tokens, first.c.tokens + first.c.n_tokens);
  const std::vector<int32_t> more = L.tokenize("\n    def pop(self):");
  next.insert(next.end(), more.begin(), more.end());

  Completion second;
  REQUIRE(dsv41_session_complete(L.session, next.data(), next.size(), &o, &second.c) == DSV41_OK);
  const int64_t held = int64_t(prompt.size() + first.c.n_tokens) - 1;  // the last generated token was never run
  CHECK(second.c.cached_tokens == held);
  CHECK(second.c.prefilled_tokens == int64_t(next.size()) - held);
  CHECK(second.c.prompt_tokens == int64_t(next.size()));

  dsv41_session* fresh = nullptr;
  REQUIRE(dsv41_session_create(L.model, nullptr, &fresh) == DSV41_OK);
  Completion cold;
  REQUIRE(dsv41_session_complete(fresh, next.data(), next.size(), &o, &cold.c) == DSV41_OK);
  dsv41_session_free(fresh);
  CHECK(cold.c.cached_tokens == 0);
  CHECK(cold.tokens() == second.tokens());

  // A prompt that does not extend the held tokens starts over.
  Completion other;
  REQUIRE(dsv41_session_complete(L.session, more.data(), more.size(), &o, &other.c) == DSV41_OK);
  CHECK(other.c.cached_tokens == 0);
}

TEST_CASE("c api: poll keeps its token bound and gives the blocking call's tokens", "[c_api]") {
  Loaded L;
  const std::vector<int32_t> prompt = L.tokenize("import numpy as np\nx = np.zeros(3)\nfor i in range(");
  const dsv41_generate_options o = greedy(10);
  Completion blocking;
  REQUIRE(dsv41_session_complete(L.session, prompt.data(), prompt.size(), &o, &blocking.c) == DSV41_OK);
  REQUIRE(blocking.c.n_tokens > 2);

  for (const int bound : {1, 3}) {
    dsv41_session_reset(L.session);
    REQUIRE(dsv41_session_begin(L.session, prompt.data(), prompt.size(), nullptr, &o) == DSV41_OK);
    // A second generation while one is begun is refused.
    Completion busy;
    CHECK(dsv41_session_complete(L.session, prompt.data(), prompt.size(), &o, &busy.c) == DSV41_BUSY);
    CHECK(dsv41_session_begin(L.session, prompt.data(), prompt.size(), nullptr, &o) == DSV41_BUSY);
    std::vector<int32_t> got;
    int64_t last_done = 0;
    int polls = 0;
    dsv41_poll_result r{};
    do {
      int32_t out[8];
      // 1 µs: every poll does exactly one unit (a one-token prefill chunk once the cost is known, or one decode).
      REQUIRE(dsv41_session_poll(L.session, bound, 1, out, 8, &r) == DSV41_OK);
      CHECK(r.n_tokens <= size_t(bound));
      CHECK(r.n_tokens <= 1);
      CHECK(r.prompt_done >= last_done);
      last_done = r.prompt_done;
      got.insert(got.end(), out, out + r.n_tokens);
      REQUIRE(++polls < 1000);
    } while (r.finish == DSV41_FINISH_NONE);
    CHECK(polls > int(blocking.c.n_tokens));  // the prefill took polls of its own
    CHECK(r.prompt_done == int64_t(prompt.size()));
    Completion taken;
    REQUIRE(dsv41_session_take(L.session, &taken.c) == DSV41_OK);
    CHECK(got == blocking.tokens());
    CHECK(taken.tokens() == blocking.tokens());
    CHECK(taken.c.finish == blocking.c.finish);
  }

  // A time bound of several tokens' work: no poll starts a unit after its bound has passed, the same tokens.
  dsv41_session_reset(L.session);
  REQUIRE(dsv41_session_begin(L.session, prompt.data(), prompt.size(), nullptr, &o) == DSV41_OK);
  {
    std::vector<int32_t> got;
    dsv41_poll_result r{};
    const int64_t bound_us = 60000;
    do {
      int32_t out[16];
      REQUIRE(dsv41_session_poll(L.session, 0, bound_us, out, 16, &r) == DSV41_OK);
      CHECK(r.units >= 1);
      CHECK(r.last_unit_us <= r.elapsed_us);
      if (r.units > 1) CHECK(r.elapsed_us - r.last_unit_us <= bound_us);
      got.insert(got.end(), out, out + r.n_tokens);
    } while (r.finish == DSV41_FINISH_NONE);
    CHECK(got == blocking.tokens());
    REQUIRE(dsv41_session_take(L.session, nullptr) == DSV41_OK);
  }

  // Without a time bound, the token bound alone: at most 3 per poll, the same tokens.
  dsv41_session_reset(L.session);
  REQUIRE(dsv41_session_begin(L.session, prompt.data(), prompt.size(), nullptr, &o) == DSV41_OK);
  std::vector<int32_t> got;
  dsv41_poll_result r{};
  do {
    int32_t out[8];
    REQUIRE(dsv41_session_poll(L.session, 3, 0, out, 8, &r) == DSV41_OK);
    CHECK(r.n_tokens <= 3);
    got.insert(got.end(), out, out + r.n_tokens);
  } while (r.finish == DSV41_FINISH_NONE);
  CHECK(got == blocking.tokens());
  // take before the end cancels: a new begin, one poll, take.
  REQUIRE(dsv41_session_take(L.session, nullptr) == DSV41_OK);
  dsv41_session_reset(L.session);
  REQUIRE(dsv41_session_begin(L.session, prompt.data(), prompt.size(), nullptr, &o) == DSV41_OK);
  REQUIRE(dsv41_session_poll(L.session, 1, 0, nullptr, 0, &r) == DSV41_OK);
  Completion early;
  REQUIRE(dsv41_session_take(L.session, &early.c) == DSV41_OK);
  CHECK(early.c.finish == DSV41_FINISH_CANCELLED);
  CHECK(early.c.n_tokens == 1);
  CHECK(dsv41_session_poll(L.session, 1, 0, nullptr, 0, &r) == DSV41_INVALID_ARGUMENT);
}

TEST_CASE("c api: chat requests and bad input", "[c_api]") {
  Loaded L;
  const char* req = R"({"messages": [{"role": "user", "content": "Write a loop"}], "thinking_mode": "chat"})";
  Completion c;
  const dsv41_generate_options o = greedy(8);
  REQUIRE(dsv41_session_chat(L.session, req, &o, &c.c) == DSV41_OK);
  REQUIRE(c.c.message_json != nullptr);
  const auto msg = nlohmann::json::parse(c.c.message_json);
  CHECK(msg["role"] == "assistant");
  CHECK(msg.contains("content"));
  CHECK(c.c.prompt_tokens > 4);
  CHECK(c.c.n_tokens >= 1);
  CHECK(c.c.n_tokens <= 8);

  // The next turn in chat mode renders this one again: everything the session holds is reused.
  auto next = nlohmann::json::parse(req);
  next["messages"].push_back({{"role", "assistant"}, {"content", msg["content"]}});
  next["messages"].push_back({{"role", "user"}, {"content", "And a function"}});
  Completion turn2;
  REQUIRE(dsv41_session_chat(L.session, next.dump().c_str(), &o, &turn2.c) == DSV41_OK);
  CHECK(turn2.c.prompt_tokens > c.c.prompt_tokens + int64_t(c.c.n_tokens));
  CHECK(turn2.c.cached_tokens == c.c.prompt_tokens + int64_t(c.c.n_tokens) - 1);

  Completion bad;
  CHECK(dsv41_session_chat(L.session, "{not json", &o, &bad.c) == DSV41_INVALID_ARGUMENT);
  CHECK(std::string(dsv41_session_last_error(L.session)).find("JSON") != std::string::npos);
  CHECK(dsv41_session_chat(L.session, R"({"messages": []})", &o, &bad.c) == DSV41_INVALID_ARGUMENT);
  CHECK(std::string(dsv41_session_last_error(L.session)).find("messages") != std::string::npos);
  const int32_t outside[] = {1, dsv41_model_vocab_size(L.model)};
  CHECK(dsv41_session_complete(L.session, outside, 2, &o, &bad.c) == DSV41_INVALID_ARGUMENT);
  CHECK(std::string(dsv41_session_last_error(L.session)).find("vocabulary") != std::string::npos);
  CHECK(dsv41_session_complete(L.session, outside, 0, &o, &bad.c) == DSV41_INVALID_ARGUMENT);
  dsv41_generate_options neg = greedy(4);
  neg.top_p = 2.f;
  CHECK(dsv41_session_complete(L.session, outside, 1, &neg, &bad.c) == DSV41_INVALID_ARGUMENT);
  CHECK(std::string(dsv41_session_last_error(L.session)).find("top_p") != std::string::npos);
}

TEST_CASE("c api: stop strings end the text before their first occurrence, streamed text agrees", "[c_api]") {
  Loaded L;
  const std::vector<int32_t> prompt = L.tokenize("def add(a, b):");
  Completion full;
  dsv41_generate_options o = greedy(24);
  REQUIRE(dsv41_session_complete(L.session, prompt.data(), prompt.size(), &o, &full.c) == DSV41_OK);
  const std::string text(full.c.text, full.c.text_len);
  REQUIRE(text.size() >= 6);
  const std::string stop = text.substr(3, 2);
  const size_t at = text.find(stop);
  std::string streamed;
  o.ctx = &streamed;
  o.on_token = [](void* ctx, int32_t, const char* piece, size_t n) {
    static_cast<std::string*>(ctx)->append(piece, n);
    return true;
  };
  const char* stops[] = {"never appears \x01", stop.c_str()};
  o.stop_strings = stops;
  o.n_stop_strings = 2;
  dsv41_session_reset(L.session);
  Completion cut;
  REQUIRE(dsv41_session_complete(L.session, prompt.data(), prompt.size(), &o, &cut.c) == DSV41_OK);
  CHECK(cut.c.finish == DSV41_FINISH_STOP);
  CHECK(std::string(cut.c.text, cut.c.text_len) == text.substr(0, at));
  CHECK(streamed == text.substr(0, at));
  // An empty stop string is refused.
  const char* empty[] = {""};
  o.stop_strings = empty;
  o.n_stop_strings = 1;
  Completion bad;
  CHECK(dsv41_session_complete(L.session, prompt.data(), prompt.size(), &o, &bad.c) == DSV41_INVALID_ARGUMENT);
}
