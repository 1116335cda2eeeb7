# response_format end to end (tests/mpi/response_format_test.sh, issue 40 item 2): numla run and
# numla serve on one rank, the tiny synth preset with the bpe1k tokenizer (the serve part needs
# curl and jq).
add_test(NAME unit.response_format
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/response_format_test.sh $<TARGET_FILE:numla>)
set_tests_properties(unit.response_format PROPERTIES LABELS unit TIMEOUT 300
  ENVIRONMENT "OMP_NUM_THREADS=1;ASAN_OPTIONS=detect_leaks=0")
