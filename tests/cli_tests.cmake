# The dsv41 CLI end to end: exit codes and the figures it prints.
set(RUN_EXPECT ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
function(dsv41_cli_test name expect_rc regex)
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:dsv41_cli>;${ARGN}"
           -DEXPECT_RC=${expect_rc} "-DREGEX=${regex}" -P ${RUN_EXPECT})
endfunction()

dsv41_cli_test(cli_inspect_tiny_ced 0 "tensors checked \\(names, dtypes, shapes\\): ok"
               inspect ${DSV41_FIXTURES}/tiny-ced)
dsv41_cli_test(cli_inspect_release_config 1
               "activated per decode token +16\\.13 B.*activated per prefill token +8\\.28 B.*global KV per token +890\\.0 B"
               inspect ${DSV41_TEST_DATA}/release)
dsv41_cli_test(cli_inspect_missing_dir 1 "cannot open" inspect ${CMAKE_CURRENT_BINARY_DIR}/no-such-model)
dsv41_cli_test(cli_golden_tiny_ced 0 "result: PASS"
               golden ${DSV41_FIXTURES}/tiny-ced --dump ${CMAKE_CURRENT_BINARY_DIR}/tiny-ced-dump.safetensors)
