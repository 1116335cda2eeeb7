# numla run stopped from outside, then --resume (tests/faults/fault_test.sh): every way a job is
# stopped drains and exits 143 (numla-launch, plain mpirun + SIGUSR1, SIGTERM to every rank as
# scancel does, one rank), and seeded random SIGTERM/SIGKILL trials on one and two ranks lose
# and duplicate nothing (NUMLA_FAULT_SEED replays a run's trials).
set(_faults_env "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=detect_leaks=0")
foreach(mode drain random)
  add_test(NAME faults-${mode}
    COMMAND bash ${CMAKE_SOURCE_DIR}/tests/faults/fault_test.sh $<TARGET_FILE:numla> ${mode}
            ${MPIEXEC_EXECUTABLE})
  set_tests_properties(faults-${mode} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
    ENVIRONMENT "${_faults_env}")
endforeach()
