# The sparse-attention goldens through `numla run` (tests/mpi/dsa_run_test.sh): transformers'
# greedy tokens under batching, chunked prefill, preemption and the prefix cache, on 1 rank
# (label unit) and 3 ranks (label mpi).
add_test(NAME unit.dsa_run
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/dsa_run_test.sh $<TARGET_FILE:numla>
          ${MPIEXEC_EXECUTABLE} 1)
set_tests_properties(unit.dsa_run PROPERTIES LABELS unit TIMEOUT 300
  ENVIRONMENT "OMP_NUM_THREADS=2;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=detect_leaks=0")
add_test(NAME dsa-run-r3
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/dsa_run_test.sh $<TARGET_FILE:numla>
          ${MPIEXEC_EXECUTABLE} 3)
set_tests_properties(dsa-run-r3 PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 3
  ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=detect_leaks=0")
