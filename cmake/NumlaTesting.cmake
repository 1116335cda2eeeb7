# numla_add_mpi_test(NAME ranks threads COMMAND exe args...)
# Registers "<NAME>-r<ranks>-t<threads>" with label mpi, launched through mpiexec with
# --oversubscribe (CI has 2 cores) and OMP_NUM_THREADS set; root is allowed, as CI runs as root.
function(numla_add_mpi_test name ranks threads)
  cmake_parse_arguments(ARG "" "" "COMMAND;LABELS" ${ARGN})
  set(test_name "${name}-r${ranks}-t${threads}")
  add_test(NAME ${test_name}
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${ranks} --oversubscribe
            --bind-to none ${MPIEXEC_PREFLAGS} ${ARG_COMMAND} ${MPIEXEC_POSTFLAGS})
  set(labels mpi ${ARG_LABELS})
  set_tests_properties(${test_name} PROPERTIES LABELS "${labels}" TIMEOUT 600
    PROCESSORS ${ranks}
    ENVIRONMENT "OMP_NUM_THREADS=${threads};OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;NUMLA_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
endfunction()
