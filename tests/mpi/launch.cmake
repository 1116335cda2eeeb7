# launch/numla-launch end to end: dry-run plans for synthetic/XML machines (label unit: no
# MPI job), and a real launch whose ranks check their own binding (label mpi).
add_test(NAME unit.launch_dry
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/launch_test.sh $<TARGET_FILE:numla> dry)
set_tests_properties(unit.launch_dry PROPERTIES LABELS unit TIMEOUT 120)
add_test(NAME launch-run
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/launch_test.sh $<TARGET_FILE:numla> run)
set_tests_properties(launch-run PROPERTIES LABELS mpi TIMEOUT 180 PROCESSORS 2
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;ASAN_OPTIONS=detect_leaks=0")
# The binding stays inside a restricted CPU mask (taskset; label unit: one process).
add_test(NAME unit.launch_mask
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/launch_test.sh $<TARGET_FILE:numla> mask)
set_tests_properties(unit.launch_mask PROPERTIES LABELS unit TIMEOUT 120
  ENVIRONMENT "OMP_NUM_THREADS=2;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;ASAN_OPTIONS=detect_leaks=0")
