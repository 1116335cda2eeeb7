/* engine/cli/cli.c — the subcommand registry (see cli.h). */
#include "engine/cli/cli.h"

#include <stdio.h>
#include <string.h>

enum { NUMLA_CLI_MAX = 64 };

typedef struct numla_cli_entry {
    const char *name;
    numla_cli_fn fn;
    const char *help;
} numla_cli_entry;

static numla_cli_entry numla_cli_table_[NUMLA_CLI_MAX];
static int numla_cli_count_;

void numla_cli_register(const char *name, numla_cli_fn fn, const char *help)
{
    if (numla_cli_count_ < NUMLA_CLI_MAX)
        numla_cli_table_[numla_cli_count_++] = (numla_cli_entry){name, fn, help};
}

int numla_cli_main(int argc, char **argv);
int numla_cli_main(int argc, char **argv)
{
    if (argc >= 2) {
        /* Two-word commands ("bench decode-kernel") are registered with their space. */
        char two[128];
        if (argc >= 3) {
            snprintf(two, sizeof two, "%s %s", argv[1], argv[2]);
            for (int i = 0; i < numla_cli_count_; i++)
                if (!strcmp(numla_cli_table_[i].name, two))
                    return numla_cli_table_[i].fn(argc - 2, argv + 2);
        }
        for (int i = 0; i < numla_cli_count_; i++)
            if (!strcmp(numla_cli_table_[i].name, argv[1]))
                return numla_cli_table_[i].fn(argc - 1, argv + 1);
    }
    FILE *f = argc >= 2 && strcmp(argv[1], "help") && strcmp(argv[1], "--help") ? stderr : stdout;
    if (argc >= 2 && f == stderr)
        fprintf(f, "numla: unknown command '%s'\n\n", argv[1]);
    fprintf(f, "usage: numla <command> [options]\n\ncommands:\n");
    for (int i = 0; i < numla_cli_count_; i++)
        fprintf(f, "  %-22s %s\n", numla_cli_table_[i].name, numla_cli_table_[i].help);
    return f == stderr ? 2 : 0;
}
