# numla run given unlucky inputs and options (tests/mpi/run_edge_test.sh, issue 19): pipe-like
# inputs, long ids on --resume, an output that is the input, unwritable outputs, duplicate ids,
# absurd thread counts (one rank, label unit); the KV pool of 3 ranks sharing a node (label mpi).
add_test(NAME unit.run_edge_files
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/run_edge_test.sh $<TARGET_FILE:numla> files)
set_tests_properties(unit.run_edge_files PROPERTIES LABELS unit TIMEOUT 300
  ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;ASAN_OPTIONS=detect_leaks=0")
add_test(NAME serve-kv-r3
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/run_edge_test.sh $<TARGET_FILE:numla> kv
          ${MPIEXEC_EXECUTABLE})
set_tests_properties(serve-kv-r3 PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 3
  ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=detect_leaks=0")
# Fast-failing one-rank runs exit cleanly under load, many times over (label slow).
add_test(NAME slow.run_exits
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/run_edge_test.sh $<TARGET_FILE:numla> exits)
set_tests_properties(slow.run_exits PROPERTIES LABELS slow TIMEOUT 1800
  ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;ASAN_OPTIONS=detect_leaks=0")
