# The sparse-attention model types end to end (tests/mpi/dsa_smoke_test.sh, issue 26): synthetic
# tiny-v32 and tiny-glm5 with a text tokenizer through numla run (chunked prefill, the selection
# against the dense MLA) and numla serve on one rank (label unit), and through numla-launch and
# numla serve on two ranks (label mpi). Skipped (77) without curl or jq.
add_test(NAME unit.dsa_smoke
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/dsa_smoke_test.sh $<TARGET_FILE:numla> one)
set_tests_properties(unit.dsa_smoke PROPERTIES LABELS unit TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "OMP_NUM_THREADS=1;ASAN_OPTIONS=detect_leaks=0")
add_test(NAME dsa-smoke-r2
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/dsa_smoke_test.sh $<TARGET_FILE:numla> ranks
          ${MPIEXEC_EXECUTABLE})
set_tests_properties(dsa-smoke-r2 PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
  SKIP_RETURN_CODE 77
  ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=detect_leaks=0")
