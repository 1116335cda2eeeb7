# DeepSeek-V4 through `numla serve` (tests/mpi/v4_serve_test.sh): transformers' greedy tokens
# over /v1/completions and an OpenAI chat/completions request, on 1 rank (label unit) and 2
# ranks (label mpi). Skipped (77) without curl or jq.
add_test(NAME unit.v4_serve
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/v4_serve_test.sh $<TARGET_FILE:numla>
          ${MPIEXEC_EXECUTABLE} 1)
set_tests_properties(unit.v4_serve PROPERTIES LABELS unit TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "OMP_NUM_THREADS=1;ASAN_OPTIONS=detect_leaks=0")
add_test(NAME v4-serve-r2
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/v4_serve_test.sh $<TARGET_FILE:numla>
          ${MPIEXEC_EXECUTABLE} 2)
set_tests_properties(v4-serve-r2 PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
  SKIP_RETURN_CODE 77
  ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=detect_leaks=0")
