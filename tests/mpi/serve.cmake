# numla run as a batch job (tests/mpi/serve_test.sh): one-rank resume / signal / per-request
# error checks (label unit), and 3 ranks giving the same tokens as one, with a pool small
# enough to preempt (label mpi).
add_test(NAME unit.serve_run
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/serve_test.sh $<TARGET_FILE:numla> run)
set_tests_properties(unit.serve_run PROPERTIES LABELS unit TIMEOUT 300
  ENVIRONMENT "OMP_NUM_THREADS=2;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;ASAN_OPTIONS=detect_leaks=0")
add_test(NAME serve-r3
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/serve_test.sh $<TARGET_FILE:numla> ranks
          ${MPIEXEC_EXECUTABLE} 3)
set_tests_properties(serve-r3 PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 3
  ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=detect_leaks=0")
