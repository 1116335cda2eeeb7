# numla serve end to end with curl (tests/mpi/http_serve_test.sh, issue 18): one rank against
# numla run's tokens, concurrency, disconnects, the error answers and SIGTERM (label unit); two
# ranks under mpirun, and a worker rank that dies (build/numla_faulty) (label mpi). Skipped
# (77) without curl or jq.
add_test(NAME unit.http_serve
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/http_serve_test.sh $<TARGET_FILE:numla> one)
set_tests_properties(unit.http_serve PROPERTIES LABELS unit TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "OMP_NUM_THREADS=1;ASAN_OPTIONS=detect_leaks=0")
add_test(NAME http-serve-r2
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/http_serve_test.sh $<TARGET_FILE:numla> ranks
          ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:numla_faulty>)
set_tests_properties(http-serve-r2 PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
  SKIP_RETURN_CODE 77
  ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=detect_leaks=0")
