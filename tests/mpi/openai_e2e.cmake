# numla serve driven by the official openai Python client (tests/mpi/openai_e2e.py, issue 40):
# the issue's 22 calls and their streamed variants on the tiny synth preset. Skipped (77) when
# the python3 on PATH cannot import openai, so the default run needs no Python package; with
# the venv first on PATH (PATH=/opt/venv/bin:$PATH ctest -R openai_e2e) it runs.
add_test(NAME unit.openai_e2e
  COMMAND sh -c "command -v python3 >/dev/null 2>&1 || exit 77; exec python3 \"$0\" \"$1\""
          ${CMAKE_SOURCE_DIR}/tests/mpi/openai_e2e.py $<TARGET_FILE:numla>)
set_tests_properties(unit.openai_e2e PROPERTIES LABELS unit TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "OMP_NUM_THREADS=1;ASAN_OPTIONS=detect_leaks=0")
