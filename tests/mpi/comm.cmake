# comm/ multi-rank tests: the allreduce/bcast/gather checks on 1-4 ranks, and the failure
# tests (a rank killed or aborting, or stalling, must stop the whole job within seconds).
add_executable(numla_comm_test ${CMAKE_SOURCE_DIR}/tests/mpi/comm_test.c)
target_compile_options(numla_comm_test PRIVATE ${NUMLA_WARNINGS})
target_link_libraries(numla_comm_test PRIVATE numla_comm ${MATH_LIB})
foreach(ranks 1 2 3 4)
  numla_add_mpi_test(comm ${ranks} 1 COMMAND $<TARGET_FILE:numla_comm_test>)
endforeach()

foreach(mode kill-shm kill-mpi abort stall)
  add_test(NAME comm-${mode}-r3
    COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/comm_kill.sh ${MPIEXEC_EXECUTABLE}
            $<TARGET_FILE:numla_comm_test> ${mode} 3)
  set_tests_properties(comm-${mode}-r3 PROPERTIES LABELS mpi TIMEOUT 120 PROCESSORS 3
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;NUMLA_COMM_TIMEOUT=3")
endforeach()

# Under -DNUMLA_SANITIZE=ON, LeakSanitizer reports Open MPI's own allocations at exit (none
# from numla): keep address/UB checking, skip leak checking for the multi-rank tests.
foreach(ranks 1 2 3 4)
  set_property(TEST comm-r${ranks}-t1 APPEND PROPERTY ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
endforeach()
