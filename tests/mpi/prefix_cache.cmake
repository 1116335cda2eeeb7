# The prefix cache end to end (tests/mpi/prefix_cache_test.sh): `numla run` with the cache on and
# off give the same result lines (one token per step: byte for byte; batched, preempting and
# evicting: the same decisive tokens), bf16 and int8 weights, on 1 rank (label unit) and 3 ranks
# (label mpi).
add_test(NAME unit.prefix_cache_run
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/prefix_cache_test.sh $<TARGET_FILE:numla>
          ${MPIEXEC_EXECUTABLE} 1)
set_tests_properties(unit.prefix_cache_run PROPERTIES LABELS unit TIMEOUT 300
  ENVIRONMENT "OMP_NUM_THREADS=2;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=detect_leaks=0")
add_test(NAME prefix-cache-r3
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/prefix_cache_test.sh $<TARGET_FILE:numla>
          ${MPIEXEC_EXECUTABLE} 3)
set_tests_properties(prefix-cache-r3 PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 3
  ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=detect_leaks=0")
