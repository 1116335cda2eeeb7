# DeepSeek-V4 through `numla run` (tests/mpi/v4_run_test.sh): transformers' greedy tokens for
# the tests/golden/v4 prompts under batching, chunked prefill, continuous batching and
# preemption, fp32 and FP8 + FP4 weights, on 1 rank (label unit) and 2 and 3 ranks (label mpi).
add_test(NAME unit.v4_run
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/v4_run_test.sh $<TARGET_FILE:numla>
          ${MPIEXEC_EXECUTABLE} 1)
set_tests_properties(unit.v4_run PROPERTIES LABELS unit TIMEOUT 300
  ENVIRONMENT "OMP_NUM_THREADS=2;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=detect_leaks=0")
foreach(r 2 3)
  add_test(NAME v4-run-r${r}
    COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/v4_run_test.sh $<TARGET_FILE:numla>
            ${MPIEXEC_EXECUTABLE} ${r})
  set_tests_properties(v4-run-r${r} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS ${r}
    ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=detect_leaks=0")
endforeach()
