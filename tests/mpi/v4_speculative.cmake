# DeepSeek-V4 drafting with its MTP layer through `numla run --speculative mtp:K`
# (tests/mpi/v4_speculative_test.sh): transformers' greedy tokens for the tests/golden/v4 prompts
# with drafts rejected and rolled back, on 1 rank (label unit) and 2 ranks (label mpi).
add_test(NAME unit.v4_speculative
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/v4_speculative_test.sh $<TARGET_FILE:numla>
          ${MPIEXEC_EXECUTABLE} 1)
set_tests_properties(unit.v4_speculative PROPERTIES LABELS unit TIMEOUT 300
  ENVIRONMENT "OMP_NUM_THREADS=2;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=detect_leaks=0")
add_test(NAME v4-speculative-r2
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/v4_speculative_test.sh $<TARGET_FILE:numla>
          ${MPIEXEC_EXECUTABLE} 2)
set_tests_properties(v4-speculative-r2 PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
  ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=detect_leaks=0")
