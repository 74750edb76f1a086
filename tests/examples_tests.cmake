# The example programs of examples/ (custom_config, stack_hooks, encoder_stack) on the bundled model, CPU only.
set(BUNDLED ${PROJECT_SOURCE_DIR}/models/dsv41-tiny-py)
if(EXISTS ${BUNDLED}/config.json)
  # Model<TinyPy> answers in the chat format (a non-empty completion), the GPU half runs or says it skipped,
  # and a directory of another shape is refused naming the fields that differ.
  add_test(NAME example_custom_config_bundled_model
           COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:custom_config>;${BUNDLED};Write a loop;${DSV41_FIXTURES}/tiny-ced"
                   -DEXPECT_RC=0
                   "-DREGEX=\\[cpu\\] [0-9]+ prompt tokens, [1-9][0-9]* generated.*\\[cpu\\] completion: *[^ ].*\\[gpu\\] (skipped|[0-9]+ prompt tokens).*refused.*mismatch.*vocab_size differs from the compiled configuration.*sliding_window differs.*engram_num_embeddings differs"
                   -P ${RUN_EXPECT})
  # The compiled TinyPy refuses the other shape as the model directory itself: load fails, exit code 1.
  add_test(NAME example_custom_config_wrong_shape
           COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:custom_config>;${DSV41_FIXTURES}/tiny-ced;x" -DEXPECT_RC=1
                   "-DREGEX=load .*tiny-ced: .*hidden_size differs from the compiled configuration" -P ${RUN_EXPECT})
  # The encoder ends before the first ratio-1 layer: layer 3 of the bundled model's 8 (compress_ratios 0 0 2 2 1 ...).
  add_test(NAME example_stack_hooks_bundled_model
           COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:stack_hooks>;${BUNDLED};def main(): return 0"
                   -DLAST_ENCODER_LAYER=3 -DLAST_LAYER=7 -P ${CMAKE_CURRENT_SOURCE_DIR}/check_stack_hooks.cmake)
  # A stack assembled from the blocks by the host: encoder layers 0..3 unit by unit, then the decoder and the head
  # give exactly Model::forward's logits.
  add_test(NAME example_encoder_stack_bundled_model
           COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:encoder_stack>;${BUNDLED};def main(): return 0" -DEXPECT_RC=0
                   "-DREGEX=encoder: layers 0..3, decoder: 4..7.*after layer 3 \\([a-z]+\\): residual RMS [0-9.]+.*encoder state of row 0: norm [0-9.]+.*logits equal Model::forward's: yes"
                   -P ${RUN_EXPECT})
endif()

# The C API hosts on the bundled model (CPU).
if(EXISTS ${BUNDLED}/config.json)
  # c_host: a chat completion of 8 tokens at most, streamed, then its counts (stdout), the load stages (stderr); exit 0.
  add_test(NAME example_c_host_bundled_model
           COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:c_host>;${BUNDLED};Write a loop;8" -DEXPECT_RC=0
                   "-DREGEX=completion: [^ ].*\\[cpu\\] [1-9][0-9]* prompt tokens, [1-8] generated.*message: \\{\"role\":\"assistant\".*loading: 100% ready"
                   -P ${RUN_EXPECT})
  # c_host on a directory that is not a model: an error naming it, exit 1.
  add_test(NAME example_c_host_bad_model_dir
           COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:c_host>;${CMAKE_CURRENT_SOURCE_DIR}/no-such-model;hi" -DEXPECT_RC=1
                   "-DREGEX=load .*no-such-model: io_error: .*no-such-model" -P ${RUN_EXPECT})
  # frame_loop for 2 s at 60 Hz with 4 ms per frame: p99 of the frame work within budget + one token.
  add_test(NAME example_frame_loop_bundled_model
           COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:frame_loop>;${BUNDLED};2;4000" -DEXPECT_RC=0
                   "-DREGEX=budget 4000 us, one token's work [0-9]+ us.*frame work: p50 [0-9]+ us, p99 [0-9]+ us.*[1-9][0-9.]* tokens/s.*within budget \\+ one token at p99: yes"
                   -P ${RUN_EXPECT})
  set_tests_properties(example_frame_loop_bundled_model PROPERTIES RUN_SERIAL ON)
endif()
