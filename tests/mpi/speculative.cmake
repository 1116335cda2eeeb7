# Speculative decoding with the MTP layer end to end (tests/mpi/speculative_test.sh): `numla run
# --speculative mtp:K` against the same run without it on models/kjv-v3 (greedy tokens equal,
# drafts accepted, preemption and a small budget, bad values refused), on 1 rank (label unit)
# and 2 ranks (label mpi).
add_test(NAME unit.speculative_run
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/speculative_test.sh $<TARGET_FILE:numla>
          ${MPIEXEC_EXECUTABLE} 1)
set_tests_properties(unit.speculative_run PROPERTIES LABELS unit TIMEOUT 300
  ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=detect_leaks=0")
add_test(NAME speculative-r2
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/speculative_test.sh $<TARGET_FILE:numla>
          ${MPIEXEC_EXECUTABLE} 2)
set_tests_properties(speculative-r2 PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
  ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=detect_leaks=0")
