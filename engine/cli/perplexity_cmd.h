/* engine/cli/perplexity_cmd.h — `numla perplexity` as a function, so tests can drive it
 * in-process. argv[0] is the command name ("perplexity"); returns the process exit code.
 * Collective over MPI_COMM_WORLD (as numla run). */
#ifndef NUMLA_ENGINE_PERPLEXITY_CMD_H
#define NUMLA_ENGINE_PERPLEXITY_CMD_H

int numla_perplexity_main(int argc, char **argv);

#endif
