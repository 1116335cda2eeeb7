# comm/ multi-rank tests: the allreduce/bcast/gather checks on 1-4 ranks, and the failure
# tests (a rank killed or aborting, or stalling, must stop the whole job within seconds).
add_executable(numla_comm_test ${CMAKE_SOURCE_DIR}/tests/mpi/comm_test.c)
target_compile_options(numla_comm_test PRIVATE ${NUMLA_WARNINGS})
target_link_libraries(numla_comm_test PRIVATE numla_comm ${MATH_LIB})
foreach(ranks 1 2 3 4)
  numla_add_mpi_test(comm ${ranks} 1 COMMAND $<TARGET_FILE:numla_comm_test>)
endforeach()
# Two OpenMP threads per rank: large shm steps are copied and summed by the team. It needs
# the passive waiting every test gets (tests/CMakeLists.txt): with ranks x threads > cores,
# libgomp's spinning idle threads would starve the peers (minutes instead of seconds).
numla_add_mpi_test(comm 2 2 COMMAND $<TARGET_FILE:numla_comm_test>)

foreach(mode kill-shm kill-mpi abort stall)
  add_test(NAME comm-${mode}-r3
    COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/comm_kill.sh ${MPIEXEC_EXECUTABLE}
            $<TARGET_FILE:numla_comm_test> ${mode} 3)
  set_tests_properties(comm-${mode}-r3 PROPERTIES LABELS mpi TIMEOUT 120 PROCESSORS 3
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
endforeach()

# Under -DNUMLA_SANITIZE=ON, LeakSanitizer reports Open MPI's own allocations at exit (none
# from numla): keep address/UB checking, skip leak checking for the multi-rank tests.
foreach(test comm-r1-t1 comm-r2-t1 comm-r3-t1 comm-r4-t1 comm-r2-t2)
  set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
endforeach()
