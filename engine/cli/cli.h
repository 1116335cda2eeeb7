/* engine/cli/cli.h — subcommands of build/numla.
 * A subcommand registers itself with NUMLA_CLI_COMMAND(name, fn, "one-line help") in its own
 * file; main.c lists them and dispatches, so adding a command edits no shared file.
 * fn gets argc/argv starting at the subcommand name and returns a process exit code. */
#ifndef NUMLA_ENGINE_CLI_H
#define NUMLA_ENGINE_CLI_H

typedef int (*numla_cli_fn)(int argc, char **argv);

void numla_cli_register(const char *name, numla_cli_fn fn, const char *help);

#define NUMLA_CLI_COMMAND(cname, fn, help)                                            \
    __attribute__((constructor)) static void numla_cli_register_##fn(void)           \
    {                                                                                 \
        numla_cli_register(cname, fn, help);                                          \
    }

#endif
