/* engine/cli/run_cmd.h — `numla run` as a function, so tests can drive it in-process.
 * argv[0] is the command name ("run"); returns the process exit code. Not collective. */
#ifndef NUMLA_ENGINE_RUN_H
#define NUMLA_ENGINE_RUN_H

int numla_run_main(int argc, char **argv);

#endif
