# A V3-shaped published-format FP8 checkpoint served through numla-launch (tests/mpi/v3_fp8_test.sh;
# label slow: ~6.4 GB written once under build/test_models).
add_test(NAME slow.v3_fp8_launch
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/v3_fp8_test.sh $<TARGET_FILE:numla>
          ${CMAKE_BINARY_DIR}/test_models/v3-fp8)
set_tests_properties(slow.v3_fp8_launch PROPERTIES LABELS slow TIMEOUT 1200 PROCESSORS 2
  ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
