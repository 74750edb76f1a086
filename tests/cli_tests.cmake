# The dsv41 CLI end to end: exit codes and the figures it prints.
set(RUN_EXPECT ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
set(CLI_DATA ${DSV41_TEST_DATA}/cli)
# dsv41_cli_test(name rc regex [INPUT file] [EXPECTED file] ARGS args...)
function(dsv41_cli_test name expect_rc regex)
  cmake_parse_arguments(T "" "INPUT;EXPECTED" "ARGS" ${ARGN})
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:dsv41_cli>;${T_ARGS}"
           -DEXPECT_RC=${expect_rc} "-DREGEX=${regex}" -DINPUT=${T_INPUT} -DEXPECTED_FILE=${T_EXPECTED} -P ${RUN_EXPECT})
  dsv41_cli_test_env(${name})
endfunction()
# chat and serve keep sessions by default in $XDG_CACHE_HOME/dsv41/sessions: in the build tree, never in $HOME.
set(CLI_XDG_CACHE ${CMAKE_CURRENT_BINARY_DIR}/cli-xdg-cache)
function(dsv41_cli_test_env name)
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "XDG_CACHE_HOME=${CLI_XDG_CACHE}")
endfunction()

set(TINY ${DSV41_FIXTURES}/tiny-ced)
set(TINY_TOK ${DSV41_TEST_DATA}/tiny-text/tokenizer.json)

dsv41_cli_test(cli_inspect_tiny_ced 0 "tensors checked \\(names, dtypes, shapes\\): ok" ARGS inspect ${TINY})
dsv41_cli_test(cli_inspect_release_config 1
               "activated per decode token +16\\.13 B.*activated per prefill token +8\\.28 B.*global KV per token +890\\.0 B"
               ARGS inspect ${DSV41_TEST_DATA}/release)
dsv41_cli_test(cli_inspect_missing_dir 1 "cannot open" ARGS inspect ${CMAKE_CURRENT_BINARY_DIR}/no-such-model)
dsv41_cli_test(cli_golden_tiny_ced 0 "result: PASS"
               ARGS golden ${TINY} --dump ${CMAKE_CURRENT_BINARY_DIR}/tiny-ced-dump.safetensors)
dsv41_cli_test(cli_template 0 "" EXPECTED ${CLI_DATA}/template_expected.txt ARGS template ${CLI_DATA}/template_case.json)
dsv41_cli_test(cli_template_bad_request 1 "unknown role" ARGS template ${CLI_DATA}/bad_request.json)
dsv41_cli_test(cli_parse_tool_calls 0 "Let me check both.*get_weather.*search"
               INPUT ${CLI_DATA}/parse_input.txt ARGS parse --mode chat)
dsv41_cli_test(cli_tokenize_matches_tokenizers 0 "" INPUT ${CLI_DATA}/tokenize_input.txt
               EXPECTED ${CLI_DATA}/tokenize_expected.txt ARGS tokenize ${DSV41_TEST_DATA}/tokenizers/dsv3/tokenizer.json)
dsv41_cli_test(cli_generate_tiny 0 "def main\\(\\):.*prompt tokens, 8 generated, finish: length"
               ARGS generate --model ${TINY} --tokenizer ${TINY_TOK} --prompt "def main():" --max-tokens 8 --seed 5 --temperature 0.7)
dsv41_cli_test(cli_generate_speculative_tiny 0 "drafts accepted per verify step"
               ARGS generate --model ${TINY} --tokenizer ${TINY_TOK} --prompt "import os" --max-tokens 8 --speculative)
dsv41_cli_test(cli_generate_no_tokenizer 1 "no tokenizer" ARGS generate --model ${TINY} --prompt "x")
dsv41_cli_test(cli_chat_session 0 "dsv41 chat \\(chat mode\\)" INPUT ${CLI_DATA}/chat_input.txt
               ARGS chat --model ${TINY} --tokenizer ${TINY_TOK} --max-tokens 6)

# The OpenAI-compatible server, with the official openai client and curl: on the bundled model and on
# the golden fixture (with a 512-token tokenizer made for it).
find_package(Python3 COMPONENTS Interpreter)
set(BUNDLED ${PROJECT_SOURCE_DIR}/models/dsv41-tiny-py)
if(Python3_FOUND)
  add_test(NAME server_e2e_openai_client_and_curl_tiny_ced
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/test_server.py $<TARGET_FILE:dsv41_cli> ${TINY} ${TINY_TOK})
  set_tests_properties(server_e2e_openai_client_and_curl_tiny_ced PROPERTIES TIMEOUT 600)
  dsv41_cli_test_env(server_e2e_openai_client_and_curl_tiny_ced)
  if(EXISTS ${BUNDLED}/config.json)
    add_test(NAME server_e2e_openai_client_and_curl_bundled_model
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/test_server.py $<TARGET_FILE:dsv41_cli> ${BUNDLED}
                     ${BUNDLED}/tokenizer.json)
    set_tests_properties(server_e2e_openai_client_and_curl_bundled_model PROPERTIES TIMEOUT 600)
    dsv41_cli_test_env(server_e2e_openai_client_and_curl_bundled_model)
    # Sessions across requests and across a restart (serve --cache-dir), session ids, the default directory
    # (XDG_CACHE_HOME, set by the script) and --no-cache; needs the session headers' xxhash.h.
    include(CheckIncludeFileCXX)
    check_include_file_cxx(xxhash.h DSV41_CLI_HAVE_XXHASH_H)
    if(DSV41_CLI_HAVE_XXHASH_H)
      add_test(NAME server_e2e_sessions_bundled_model
               COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/test_server_sessions.py
                       $<TARGET_FILE:dsv41_cli> ${BUNDLED} ${CMAKE_CURRENT_BINARY_DIR}/session_cache_e2e)
      set_tests_properties(server_e2e_sessions_bundled_model PROPERTIES TIMEOUT 600)
      dsv41_cli_test_env(server_e2e_sessions_bundled_model)
      # Chat turns continue the earlier turn's live state (the active tier): turn 2 (408 tokens) reuses all that
      # turn 1 ran, its 392 prompt tokens and 8 - 1 generated ones (the last sampled token is not yet run).
      dsv41_cli_test(bundled_model_chat_sessions 0 "prompt tokens, [0-9]+ cached.*408 prompt tokens, 399 cached"
                     INPUT ${CLI_DATA}/chat_sessions_input.txt
                     ARGS chat --model ${BUNDLED} --max-tokens 8 --cache-dir ${CMAKE_CURRENT_BINARY_DIR}/chat_session_cache)
    endif()
    dsv41_cli_test(bundled_model_generate 0 "import os.*prompt tokens, 16 generated"
                   ARGS generate --model ${BUNDLED} --prompt "import os" --max-tokens 16 --speculative)
    # llama.cpp's short flags; -c caps prompt + completion (a single-digit count of generated tokens, ended by it).
    dsv41_cli_test(bundled_model_generate_short_flags 0 "\\[[0-9] prompt tokens, [0-9] generated, finish: length"
                   ARGS generate -m ${BUNDLED} -p "import os" -n 1000 -s 7 -c 10)
    dsv41_cli_test(bundled_model_chat 0 "dsv41 chat \\(chat mode\\)" INPUT ${CLI_DATA}/chat_input.txt
                   ARGS chat --model ${BUNDLED} --max-tokens 8)
  endif()
endif()

# The bundled model: perplexity equals the PyTorch implementation's (tools/train/perplexity.py: 23.8202).
if(Python3_FOUND AND EXISTS ${PROJECT_SOURCE_DIR}/models/dsv41-tiny-py/config.json)
  add_test(NAME bundled_model_perplexity_matches_pytorch
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/check_perplexity.py $<TARGET_FILE:dsv41_cli>
                   ${PROJECT_SOURCE_DIR}/models/dsv41-tiny-py ${PROJECT_SOURCE_DIR}/models/dsv41-tiny-py/heldout_sample.txt 23.8202)
  set_tests_properties(bundled_model_perplexity_matches_pytorch PROPERTIES TIMEOUT 900)
  dsv41_cli_test_env(bundled_model_perplexity_matches_pytorch)
  dsv41_cli_test(bundled_model_inspect 0 "3 shard\\(s\\), 1271 tensors checked" ARGS inspect ${PROJECT_SOURCE_DIR}/models/dsv41-tiny-py)
endif()

# Concurrency (issue 12): 16 concurrent openai streams equal their single outputs, a stalled reader and a
# client gone during prefill cost the others nothing, the API key, /metrics, SIGTERM drain.
if(Python3_FOUND AND EXISTS ${BUNDLED}/config.json)
  add_test(NAME server_e2e_concurrency_bundled_model
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/test_server_concurrency.py
                   $<TARGET_FILE:dsv41_cli> ${BUNDLED})
  set_tests_properties(server_e2e_concurrency_bundled_model PROPERTIES TIMEOUT 300)
  dsv41_cli_test_env(server_e2e_concurrency_bundled_model)
  # Soak (issue 14), short: 8 clients for 60 s mixing well-formed requests (each equal to its alone run) with
  # malformed, oversized (Content-Length, chunked, gzip), deeply nested, slow, idle, vanishing and cancelling
  # clients; /health within 2 s throughout, /metrics consistent, RSS within 25% of its value at 30 s (60 s is too
  # short for the 10% bound of the 10-minute run: malloc arenas still grow). The 10-minute run: bench/README.md.
  add_test(NAME server_e2e_soak_bundled_model
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/test_server_soak.py
                   $<TARGET_FILE:dsv41_cli> ${BUNDLED} --seconds 60 --clients 8 --rss-growth 0.25)
  set_tests_properties(server_e2e_soak_bundled_model PROPERTIES TIMEOUT 420 COST 300)  # started early: 60 s of load
  dsv41_cli_test_env(server_e2e_soak_bundled_model)
endif()

# Images through the server (issue 17): the span in the prompt tokens, the image changing the output, bad images.
if(Python3_FOUND AND TARGET dsv41_images)
  add_test(NAME server_e2e_images_vision_tiny
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/test_server_vision.py
                   $<TARGET_FILE:dsv41_cli> ${DSV41_FIXTURES}/vision-tiny ${TINY_TOK} ${DSV41_FIXTURES}/vision-tiny/image.png)
  set_tests_properties(server_e2e_images_vision_tiny PROPERTIES TIMEOUT 300)
  dsv41_cli_test_env(server_e2e_images_vision_tiny)
endif()
