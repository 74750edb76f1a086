/* The C API of dsv41: load a model directory, keep sessions on it, complete chat requests (JSON) or raw
 * token prompts, blocking or step by step from a frame loop. C11 and C++; link dsv41::c (a compiled library:
 * src/c_api.cpp, because a C program cannot instantiate the C++ templates behind it).
 *
 * Errors: every fallible call returns a dsv41_status; the message of the last failing call on a handle is
 * dsv41_model_last_error / dsv41_session_last_error (valid until the next call on that handle). There is
 * no process-wide error state. No C++ exception and no abort crosses this boundary.
 *
 * Threads (each function says which applies): "any thread" functions may run concurrently with anything but
 * the handle's free. "One thread per handle": calls on that handle must not overlap, because they write its
 * last error. Sessions of one model may run on different threads at once: their forwards take the model's
 * lock in turn (one forward at a time per model). Callbacks run on the calling thread, inside the call that
 * reports them; they must not call into the same session.
 *
 * Sessions keep their sequence between calls (an in-memory continuation, not the disk session store): when
 * a new prompt's tokens begin with every token the sequence already holds, only the rest is run
 * (dsv41_completion.cached_tokens says how many were reused); otherwise the sequence starts over. After a
 * completion the sequence holds the prompt and every generated token but the last, so a prompt that repeats
 * the previous prompt and completion and adds to it reuses everything before the last generated token. */
#ifndef DSV41_C_API_H
#define DSV41_C_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define DSV41_C_EXPORT __attribute__((visibility("default")))
#else
#define DSV41_C_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The library's dsv41::Code values, plus the C API's own. */
typedef enum dsv41_status {
  DSV41_OK = 0,
  DSV41_INVALID_ARGUMENT = 1,
  DSV41_IO_ERROR = 2,
  DSV41_FORMAT_ERROR = 3,
  DSV41_MISMATCH = 4,
  DSV41_OUT_OF_RANGE = 5,
  DSV41_OUT_OF_MEMORY = 6,
  DSV41_CANCELLED = 7, /* a callback returned false */
  DSV41_UNSUPPORTED = 8, /* e.g. device "cuda" in a build without CUDA */
  DSV41_INTERNAL = 9,
  DSV41_RESOURCE_EXHAUSTED = 10,
  DSV41_BUSY = 100 /* a session call while the session has a begun, unfinished generation */
} dsv41_status;

/* A short name for a status ("ok", "invalid_argument", ...). Any thread. */
DSV41_C_EXPORT const char* dsv41_status_name(dsv41_status s);

typedef struct dsv41_model dsv41_model;
typedef struct dsv41_session dsv41_session;

/* fraction in [0, 1] and a stage name; return false to cancel the load (DSV41_CANCELLED). */
typedef bool (*dsv41_progress_fn)(void* ctx, float fraction, const char* stage);

/* Zero-initialize ({0}) for the defaults. */
typedef struct dsv41_load_options {
  const char* device;         /* "cpu" (NULL or "" too) or "cuda" (builds with CUDA; DSV41_UNSUPPORTED otherwise) */
  const char* tokenizer_path; /* NULL: MODEL_DIR/tokenizer.json */
  dsv41_progress_fn progress; /* at the loader's stages (checkpoint, weights, engram, backend, ready) */
  void* progress_ctx;
} dsv41_load_options;

/* Loads a model directory. *out is always set: on failure to a handle that holds only the error
 * (dsv41_model_last_error), to be freed like any other; NULL only when not even that could be allocated
 * (DSV41_OUT_OF_MEMORY) or out is NULL. opt may be NULL. Any thread; several loads may run at once. */
DSV41_C_EXPORT dsv41_status dsv41_model_load(const char* model_dir, const dsv41_load_options* opt, dsv41_model** out);
/* Frees the model; its sessions must be freed first. NULL is ignored. No other call on m may overlap it. */
DSV41_C_EXPORT void dsv41_model_free(dsv41_model* m);
/* The message of the last failing call on m ("" when none). One thread per handle. */
DSV41_C_EXPORT const char* dsv41_model_last_error(const dsv41_model* m);
/* "cpu" or "cuda"; NULL for a failed load. Any thread. */
DSV41_C_EXPORT const char* dsv41_model_device(const dsv41_model* m);
/* Vocabulary size and context length (max positions); 0 for a failed load. Any thread. */
DSV41_C_EXPORT int32_t dsv41_model_vocab_size(const dsv41_model* m);
DSV41_C_EXPORT int64_t dsv41_model_context_length(const dsv41_model* m);
/* The end-of-sentence token id (a default stop id); -1 for a failed load. Any thread. */
DSV41_C_EXPORT int32_t dsv41_model_eos_id(const dsv41_model* m);
/* Tokenizes UTF-8 text (special-token text recognised) into out[0..capacity); *n_out = the token count,
 * which may exceed capacity (then DSV41_OUT_OF_RANGE and nothing beyond capacity is written). One thread
 * per handle (m's last error); it may overlap generation on m's sessions. */
DSV41_C_EXPORT dsv41_status dsv41_model_tokenize(dsv41_model* m, const char* text, int32_t* out, size_t capacity,
                                                 size_t* n_out);

/* Zero-initialize for the defaults. */
typedef struct dsv41_session_options {
  int64_t max_positions; /* the sequence's capacity; 0: min(context length, 8192) */
} dsv41_session_options;

/* A session on m; its sequence is allocated at its first prompt. opt may be NULL. Errors go to m's last
 * error: one thread per model handle; it may overlap generation on m's other sessions. */
DSV41_C_EXPORT dsv41_status dsv41_session_create(dsv41_model* m, const dsv41_session_options* opt,
                                                 dsv41_session** out);
/* Every function on a session from here on: one thread per session handle. */
DSV41_C_EXPORT void dsv41_session_free(dsv41_session* s); /* NULL is ignored; ends a begun generation */
/* Forgets the held sequence (and a begun generation): the next prompt runs from its first token. */
DSV41_C_EXPORT void dsv41_session_reset(dsv41_session* s);
DSV41_C_EXPORT const char* dsv41_session_last_error(const dsv41_session* s);
/* The tokens the session's sequence holds (its position). */
DSV41_C_EXPORT int64_t dsv41_session_position(const dsv41_session* s);

/* Each generated token, with the UTF-8 text that became final with it (never half a character; may be
 * empty). Return false to cancel: generation ends after this token (finish DSV41_FINISH_CANCELLED). */
typedef bool (*dsv41_token_fn)(void* ctx, int32_t token, const char* piece, size_t piece_len);

/* Zero-initialize for the defaults: greedy, 256 tokens, stop at the end-of-sentence token. */
typedef struct dsv41_generate_options {
  int32_t max_tokens;  /* 0: 256; < 0: prefill only */
  float temperature;   /* <= 0: greedy */
  int32_t top_k;       /* 0: all */
  float top_p;         /* 0: 1 */
  float min_p;
  uint64_t seed;
  const int32_t* stop_ids; /* extra stop ids (the end-of-sentence token always stops) */
  size_t n_stop_ids;
  int32_t prefill_chunk; /* most prompt tokens per forward; 0: 64 */
  dsv41_token_fn on_token;
  void* ctx;
  /* Stop strings (UTF-8, non-empty): generation ends before the first occurrence, which is not in the text
   * (finish STOP); text that may begin one is held back from on_token until it cannot. */
  const char* const* stop_strings;
  size_t n_stop_strings;
} dsv41_generate_options;

typedef enum dsv41_finish {
  DSV41_FINISH_NONE = 0,      /* not finished (poll) */
  DSV41_FINISH_STOP = 1,      /* a stop id (the end-of-sentence token or one of stop_ids) */
  DSV41_FINISH_LENGTH = 2,    /* max_tokens, or the session's capacity */
  DSV41_FINISH_CANCELLED = 3, /* on_token returned false, or dsv41_session_take before the end */
  DSV41_FINISH_ERROR = 4      /* see dsv41_session_last_error */
} dsv41_finish;

/* A finished completion. text and tokens are the library's: dsv41_completion_free releases them. */
typedef struct dsv41_completion {
  char* text;           /* the completion's UTF-8 text (stop token excluded), NUL-terminated */
  size_t text_len;
  char* message_json;   /* chat: the parsed assistant message {"role", "content", "reasoning_content",
                           "tool_calls", "finish_reason"} as JSON; raw completions: NULL */
  int32_t* tokens;      /* every generated id, a final stop id included */
  size_t n_tokens;
  int64_t prompt_tokens;  /* tokens of the prompt */
  int64_t cached_tokens;  /* of them, reused from the session's sequence (not run again) */
  int64_t prefilled_tokens; /* of them, run by this call: prompt_tokens - cached_tokens */
  dsv41_finish finish;
} dsv41_completion;

/* Frees what a completion holds and zeroes it. NULL is ignored. Any thread. */
DSV41_C_EXPORT void dsv41_completion_free(dsv41_completion* c);

/* Completes an OpenAI-style chat request ({"messages": [...], "tools", "thinking_mode": "chat" | "thinking",
 * ...}, rendered in the model's prompt format) in the session. Blocks until done. opt may be NULL; out is
 * filled on DSV41_OK (a cancelled generation is DSV41_OK with finish DSV41_FINISH_CANCELLED). Sampling and
 * length come from opt only (the request's max_tokens, temperature, stop are not read; opt.stop_strings are). The next turn (the
 * messages, this answer as an assistant message, a new user message) reuses the whole held sequence in
 * "chat" mode; in "thinking" mode the rendering drops earlier reasoning, so that turn starts over. */
DSV41_C_EXPORT dsv41_status dsv41_session_chat(dsv41_session* s, const char* request_json,
                                               const dsv41_generate_options* opt, dsv41_completion* out);
/* The same for a prompt of token ids. */
DSV41_C_EXPORT dsv41_status dsv41_session_complete(dsv41_session* s, const int32_t* prompt, size_t n_prompt,
                                                   const dsv41_generate_options* opt, dsv41_completion* out);
/* The same for prompt text (tokenized as dsv41_model_tokenize does). */
DSV41_C_EXPORT dsv41_status dsv41_session_complete_text(dsv41_session* s, const char* prompt,
                                                        const dsv41_generate_options* opt, dsv41_completion* out);

/* Non-blocking generation, for frame loops: begin, then poll until it reports a finish. Each poll does at
 * most max_new_tokens generated tokens (0: no bound) and stops starting work once max_microseconds have
 * passed or the next unit would pass them (0: no bound); it always does at least one unit of work (one
 * decode, or one prefill chunk sized to the time left), so a poll takes at most the bound plus one unit.
 * The prompt (ids, or chat request JSON with request_json != NULL and prompt NULL) is copied; opt's
 * callback runs inside poll. While begun, the other generation calls on the session return DSV41_BUSY. */
DSV41_C_EXPORT dsv41_status dsv41_session_begin(dsv41_session* s, const int32_t* prompt, size_t n_prompt,
                                                const char* request_json, const dsv41_generate_options* opt);

typedef struct dsv41_poll_result {
  size_t n_tokens;        /* tokens written to out_tokens by this poll */
  int64_t prompt_done;    /* prompt tokens the sequence holds so far (cached ones included) */
  int64_t prompt_tokens;
  int64_t completion_tokens; /* generated so far */
  int64_t elapsed_us;     /* this poll's wall time */
  int32_t units;          /* forwards run by this poll (prefill chunks and decodes) */
  int64_t last_unit_us;   /* the wall time of the last of them */
  dsv41_finish finish;    /* DSV41_FINISH_NONE while generation goes on */
} dsv41_poll_result;

/* Advances the begun generation (see above). Generated ids go to out_tokens[0..capacity) (may be NULL with
 * capacity 0); max_new_tokens is clamped to capacity when out_tokens is given. When finish is set, the
 * completion is complete: dsv41_session_take finalizes it. Returns an error status only for a bad call or
 * a failed forward (finish DSV41_FINISH_ERROR). */
DSV41_C_EXPORT dsv41_status dsv41_session_poll(dsv41_session* s, int32_t max_new_tokens, int64_t max_microseconds,
                                               int32_t* out_tokens, size_t capacity, dsv41_poll_result* out);
/* Ends a begun generation (cancelling it when unfinished) and fills out with its completion (out may be NULL). */
DSV41_C_EXPORT dsv41_status dsv41_session_take(dsv41_session* s, dsv41_completion* out);

#ifdef __cplusplus
}
#endif

#endif /* DSV41_C_API_H */
