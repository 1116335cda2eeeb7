# The OpenAI API's echo, /tokenize, /detokenize and /v1/responses end to end
# (tests/mpi/openai_api_test.sh, issue 40): numla serve on one rank, the tiny synth preset with
# the bpe1k tokenizer, curl and jq (skipped, 77, without them).
add_test(NAME unit.openai_api
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/openai_api_test.sh $<TARGET_FILE:numla>)
set_tests_properties(unit.openai_api PROPERTIES LABELS unit TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "OMP_NUM_THREADS=1;ASAN_OPTIONS=detect_leaks=0")
