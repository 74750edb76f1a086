// The engine's public types (runtime/engine.hpp): options, requests, what a request and a step report.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include <dsv41/core/status.hpp>
#include <dsv41/runtime/sampler.hpp>

namespace dsv41 {

using RequestId = uint64_t;

// The model's log-probabilities at a returned token: log_softmax of the raw logits (temperature 1, before top-k,
// top-p and min-p), in FP64 rounded to float, as OpenAI's logprobs report them. top: the n most likely ids, most
// likely first (ties: lower id first).
struct TokenLogprobs {
  int32_t token = -1;
  float logprob = 0;
  std::span<const int32_t> top_ids;
  std::span<const float> top_logprobs;
};
inline constexpr int kMaxTopLogprobs = 20;

// An image of a request's prompt (SPEC §4.10): its span at prompt index `start` (every span position carries
// image_token_id in the prompt), the span's token types and the ViT's input (vision::ProcessedImage's fields).
struct RequestImage {
  int64_t start = 0;
  std::vector<int8_t> types;
  std::vector<uint16_t> patches;
  int n_vit_h = 0, n_vit_w = 0, n_llm_h = 0, n_llm_w = 0;
};

struct EngineOptions {
  int step_tokens = 256;        // tokens one step runs: one per decoding request, prefill in the rest
  int max_running = 8;          // admitted requests (prefilling or decoding); must be below step_tokens
  int max_queued = 64;          // requests waiting for admission beyond the free running slots
  int64_t max_cache_bytes = 0;  // estimated cache bytes of the admitted sequences; 0 = no bound
  int64_t max_positions = 0;    // a sequence's capacity at most; 0 = the model's max_position_embeddings
  int prefill_chunk = 0;        // most prompt tokens of one request per forward; 0 = what the budget leaves
  bool round_robin_prefill = false;  // prefill order: false = first admitted first, true = rotate each step
  // A step's prefill chunks (those without images) in one forward where the backend batches sequences (the
  // GPU's; Model::prefill_batch), and its speculative verify blocks in another; false: one forward each. The CPU
  // runs them one by one either way. An invalid chunk fails its request alone; an error inside the shared
  // forward (out of memory) fails every request of that forward, and the engine goes on.
  bool batch_prefill = true;
  // Threads a decode step may use where the backend runs sequences one by one (the CPU's): the step's sequences
  // in up to this many contiguous groups, the first on the stepping thread. Results do not depend on it.
  int threads = 1;
};

struct Request {
  std::vector<int32_t> prompt;
  int max_tokens = 256;           // completion tokens at most (0: prefill only)
  SamplingParams sampling;        // temperature 0 = greedy; the request's RNG starts from sampling.seed
  std::vector<int32_t> stop_ids;  // generation ends after returning one of these
  int priority = 0;               // admission order: higher first, then arrival
  // Each returned token (then not kept for take_tokens); false cancels after it.
  bool (*on_token)(void* ctx, RequestId id, int32_t token) = nullptr;
  void (*on_finish)(void* ctx, RequestId id) = nullptr;  // once, when the request finishes for any reason
  void* ctx = nullptr;
  // With top_logprobs >= 0 (at most kMaxTopLogprobs), called with each returned token's log-probabilities just
  // before on_token; false cancels. Not with speculative decoding (refused).
  // Forced continuation (tool_choice "required"/named): once the request returns force_after (or from its first
  // token when force_after < 0), its next tokens are `forced` in order instead of samples; they are run and
  // returned like generated ones (logprobs included). Not with speculative decoding (refused).
  std::vector<int32_t> forced;
  int32_t force_after = -1;
  // Images in the prompt: encoded when the request's prefill starts, each span kept inside one prefill chunk.
  // A request with images neither resumes from nor records into the session store (its ids do not identify it).
  std::vector<RequestImage> images;
  int top_logprobs = -1;
  bool (*on_logprobs)(void* ctx, RequestId id, const TokenLogprobs& lp) = nullptr;
  bool release_when_done = false;  // forget the request after on_finish (poll then reports it unknown)
  bool use_session = true;         // resume from and record into the engine's session store, if it has one
  // DSpark drafts verified in one forward of the request's own (SPEC §4.9, lossless; the tokens equal
  // generate()'s speculative ones). Needs DSpark stages or a drafter, and step_tokens above
  // max_running × (dspark_block_size + 1) so that verify blocks never starve prefill.
  bool speculative = false;
  int (*drafter)(void* ctx, std::span<const int32_t> generated, int k, int32_t* out) = nullptr;  // as in generate()
};

enum class RequestPhase { queued, prefilling, decoding, finished };
enum class RequestFinish { none, stop, length, cancelled, error };

inline const char* request_finish_name(RequestFinish f) {
  switch (f) {
    case RequestFinish::none: return "none";
    case RequestFinish::stop: return "stop";
    case RequestFinish::length: return "length";
    case RequestFinish::cancelled: return "cancelled";
    case RequestFinish::error: return "error";
  }
  return "?";
}

struct RequestInfo {
  RequestPhase phase = RequestPhase::queued;
  RequestFinish finish = RequestFinish::none;  // length: max_tokens reached or the sequence is full
  Status status;                 // why, when finish == error
  int32_t stop_id = -1;          // the stop id when finish == stop
  int64_t prompt_tokens = 0, prompt_done = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;     // prompt tokens resumed from the session store (not recomputed)
  size_t unread = 0;             // tokens take_tokens() would return
  int64_t cache_bytes = 0;       // the estimate reserved for its sequence
  int64_t spec_steps = 0, drafted = 0, accepted = 0;  // speculative requests
};

struct StepStats {
  int admitted = 0;     // requests given a sequence
  int decoded = 0;      // decode tokens (requests in the batched decode)
  int verified = 0;     // tokens of speculative verify blocks
  int prefilled = 0;    // prompt tokens run
  int finished = 0;     // requests that finished during the step
};

struct EngineCounts {
  int queued = 0, prefilling = 0, decoding = 0;
  int64_t cache_bytes = 0;  // reserved by admitted sequences
  uint64_t steps = 0;
};

}  // namespace dsv41
