# `numla perplexity` on several ranks (tests/mpi/perplexity_test.sh): the perplexity of the golden
# text equals transformers' to 1e-3 relative at 2 and 3 ranks, and a run on N ranks against the
# base file saved on 1 rank has a KL divergence of ~0 and the same top-1 everywhere.
foreach(r 2 3)
  add_test(NAME perplexity-r${r}
    COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/perplexity_test.sh $<TARGET_FILE:numla>
            ${MPIEXEC_EXECUTABLE} ${r} ${CMAKE_SOURCE_DIR})
  set_tests_properties(perplexity-r${r} PROPERTIES LABELS mpi TIMEOUT 120 PROCESSORS ${r}
    ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=detect_leaks=0")
endforeach()
