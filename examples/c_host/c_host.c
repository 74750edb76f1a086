/* c_host MODEL_DIR "PROMPT" [MAX_TOKENS] [DEVICE]: a C11 host of the dsv41 C API. Loads the model (progress on
 * stderr), asks PROMPT as one user turn in chat mode, streams the completion to stdout as it comes, then
 * prints the counts. Exit status 0 on success, 1 on an error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dsv41/c_api.h>

static bool on_progress(void* ctx, float fraction, const char* stage) {
  (void)ctx;
  fprintf(stderr, "loading: %3d%% %s\n", (int)(fraction * 100.f + 0.5f), stage);
  return true;
}

static bool on_token(void* ctx, int32_t token, const char* piece, size_t len) {
  (void)token;
  fwrite(piece, 1, len, stdout);
  fflush(stdout);
  ++*(int*)ctx;
  return true;
}

/* s as a JSON string literal (quotes and control characters escaped) into out of size n; false when too long. */
static bool json_string(const char* s, char* out, size_t n) {
  size_t j = 0;
  if (n < 3) return false;
  out[j++] = '"';
  for (; *s; ++s) {
    const unsigned char c = (unsigned char)*s;
    if (j + 8 >= n) return false;
    if (c == '"' || c == '\\') {
      out[j++] = '\\';
      out[j++] = (char)c;
    } else if (c < 0x20) {
      j += (size_t)snprintf(out + j, n - j, "\\u%04x", c);
    } else {
      out[j++] = (char)c;
    }
  }
  out[j++] = '"';
  out[j] = '\0';
  return true;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: c_host MODEL_DIR \"PROMPT\" [MAX_TOKENS] [cpu|cuda]\n");
    return 2;
  }
  dsv41_load_options lo = {0};
  lo.device = argc > 4 ? argv[4] : "cpu";
  lo.progress = on_progress;
  dsv41_model* model = NULL;
  dsv41_status rc = dsv41_model_load(argv[1], &lo, &model);
  if (rc != DSV41_OK) {
    fprintf(stderr, "load %s: %s: %s\n", argv[1], dsv41_status_name(rc), model ? dsv41_model_last_error(model) : "");
    dsv41_model_free(model);
    return 1;
  }
  dsv41_session* session = NULL;
  if ((rc = dsv41_session_create(model, NULL, &session)) != DSV41_OK) {
    fprintf(stderr, "session: %s: %s\n", dsv41_status_name(rc), dsv41_model_last_error(model));
    dsv41_model_free(model);
    return 1;
  }

  char content[8192], request[8448];
  if (!json_string(argv[2], content, sizeof content)) {
    fprintf(stderr, "prompt too long\n");
    return 1;
  }
  snprintf(request, sizeof request,
           "{\"messages\": [{\"role\": \"user\", \"content\": %s}], \"thinking_mode\": \"chat\"}", content);

  int streamed = 0;
  dsv41_generate_options go = {0};
  go.max_tokens = argc > 3 ? atoi(argv[3]) : 64;
  go.on_token = on_token;
  go.ctx = &streamed;
  dsv41_completion c = {0};
  printf("completion: ");
  rc = dsv41_session_chat(session, request, &go, &c);
  printf("\n");
  int status = 0;
  if (rc != DSV41_OK) {
    fprintf(stderr, "chat: %s: %s\n", dsv41_status_name(rc), dsv41_session_last_error(session));
    status = 1;
  } else {
    printf("[%s] %lld prompt tokens, %lld generated, finish %d, %d streamed callbacks\n", dsv41_model_device(model),
           (long long)c.prompt_tokens, (long long)c.n_tokens, (int)c.finish, streamed);
    printf("message: %s\n", c.message_json ? c.message_json : "(none)");
    if (c.n_tokens == 0) status = 1;
  }
  dsv41_completion_free(&c);
  dsv41_session_free(session);
  dsv41_model_free(model);
  return status;
}
