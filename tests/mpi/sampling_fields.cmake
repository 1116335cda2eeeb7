# presence/frequency/repetition_penalty, logit_bias and min_p end to end
# (tests/mpi/sampling_fields_test.sh, issue 40): numla run and numla serve on one rank (label
# unit; the serve part needs curl and jq), and 2 ranks under mpirun giving one rank's tokens
# (label mpi).
add_test(NAME unit.sampling_fields
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/sampling_fields_test.sh $<TARGET_FILE:numla> one)
set_tests_properties(unit.sampling_fields PROPERTIES LABELS unit TIMEOUT 300
  ENVIRONMENT "OMP_NUM_THREADS=1;ASAN_OPTIONS=detect_leaks=0")
add_test(NAME sampling-fields-r2
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/sampling_fields_test.sh $<TARGET_FILE:numla> ranks
          ${MPIEXEC_EXECUTABLE})
set_tests_properties(sampling-fields-r2 PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
  ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=detect_leaks=0")
