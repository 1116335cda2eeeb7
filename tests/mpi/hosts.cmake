# numla on several machines (tests/mpi/hosts_test.sh, issue 38).
# dry (label unit: no MPI job): numla-launch --hosts / --hostfile / --ranks-per-host /
# --mpirun-args print the right mpirun line and refuse what they must.
add_test(NAME unit.launch_hosts_dry
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/hosts_test.sh $<TARGET_FILE:numla> dry)
set_tests_properties(unit.launch_hosts_dry PROPERTIES LABELS unit TIMEOUT 60)
# run: network namespaces on this machine stand for a launcher and two hosts; Open MPI reaches
# them through an rsh agent that enters their namespaces. 2 hosts x 2 ranks give the 1-rank
# tokens over the shm+mpi allreduce, bench engine reports its cost, and a host killed mid-job
# stops the job within seconds and --resume finishes it. Skips (77) where namespaces cannot be
# made (not root, no CAP_NET_ADMIN).
add_test(NAME hosts-two-r4
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/mpi/hosts_test.sh $<TARGET_FILE:numla> run)
set_tests_properties(hosts-two-r4 PROPERTIES LABELS mpi TIMEOUT 180 PROCESSORS 2
  SKIP_RETURN_CODE 77
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;ASAN_OPTIONS=detect_leaks=0")
