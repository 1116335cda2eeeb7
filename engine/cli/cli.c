/* engine/cli/cli.c — the subcommand registry (see cli.h), and the start-up that keeps the CPU
 * mask numla was given (docs/design.md §1.1). */
#define _GNU_SOURCE /* setenv */
#include "engine/cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch/bind.h"

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

/* An Open MPI exclusion list ("^a,b") with each comma-separated name of `names` it lacks
 * appended. Returns a malloc'd list, or NULL (nothing to add, or out of memory). */
static char *numla_cli_exclude_more_(const char *have, const char *names)
{
    size_t cap = strlen(have) + strlen(names) + 2, used = strlen(have);
    char *out = malloc(cap);
    if (!out)
        return NULL;
    memcpy(out, have, used + 1);
    int added = 0;
    for (const char *n = names; *n;) {
        size_t len = strcspn(n, ",");
        int found = 0;
        for (const char *h = have + (*have == '^'); *h;) {
            size_t hl = strcspn(h, ",");
            found |= hl == len && !strncmp(h, n, len);
            h += hl;
            h += *h == ',';
        }
        if (!found) {
            used += (size_t)snprintf(out + used, cap - used, ",%.*s", (int)len, n);
            added = 1;
        }
        n += len;
        n += *n == ',';
    }
    if (!added) {
        free(out);
        return NULL;
    }
    return out;
}

/* Keep the CPU mask numla was given (docs/design.md §1.1, docs/launch.md), decided here once
 * at start-up, while the process has one thread:
 *  - record it (numla_bind_record_start_mask) before anything can move a thread, so every
 *    binding and check of launch/ stays inside it;
 *  - hwloc's x86 backend binds the calling thread to every PU in turn to read CPUID (PUs
 *    outside the mask included) in each topology load: the one in MPI_Init, the singleton's
 *    orted and its PMIx server. HWLOC_COMPONENTS gets "-x86" (numla's own load blacklists it
 *    in launch/topo.c); the Linux backend reads the same facts from sysfs. A list that names
 *    x86 itself is the user's choice and kept;
 *  - Open MPI's PSM transports (mtl psm, psm2, and ofi, whose libfabric links libpsm2 and
 *    libinfinipath on Debian) load libraries whose constructors move the calling thread to CPU
 *    0 for 0.1 s to time the clock. OMPI_MCA_mtl excludes them when unset or an exclusion
 *    list ("^..."); an OMPI_MCA_btl exclusion list gets ofi too. A list that names components
 *    to use (say OMPI_MCA_mtl=psm2 on Omni-Path) is the user's choice and kept.
 * Variables only numla's libraries read; the environment passes them to the singleton's
 * orted. */
static void numla_cli_keep_cpu_mask_(void)
{
    numla_bind_record_start_mask();
    const char *hw = getenv("HWLOC_COMPONENTS");
    if (!hw || !*hw)
        setenv("HWLOC_COMPONENTS", "-x86", 1);
    else if (!strstr(hw, "x86")) {
        char *v = malloc(strlen(hw) + sizeof ",-x86");
        if (v) {
            sprintf(v, "%s,-x86", hw);
            setenv("HWLOC_COMPONENTS", v, 1);
        }
        free(v);
    }
    const char *mtl = getenv("OMPI_MCA_mtl");
    if (!mtl || !*mtl)
        setenv("OMPI_MCA_mtl", "^ofi,psm,psm2", 1);
    else if (mtl[0] == '^') {
        char *v = numla_cli_exclude_more_(mtl, "ofi,psm,psm2");
        if (v)
            setenv("OMPI_MCA_mtl", v, 1);
        free(v);
    }
    const char *btl = getenv("OMPI_MCA_btl");
    if (btl && btl[0] == '^') {
        char *v = numla_cli_exclude_more_(btl, "ofi");
        if (v)
            setenv("OMPI_MCA_btl", v, 1);
        free(v);
    }
}

/* Open MPI 4.1 finalizes a singleton (a process not started by mpirun) by closing its
 * components before it stops its progress thread; an event still pending then calls into a
 * component already unloaded and the process dies of SIGSEGV on its way out (about one run in
 * 500 that fails at once, while orted is still starting, on a loaded machine). Components stay
 * loaded until exit (Open MPI's mca_base_component_disable_dlclose) unless the user says
 * otherwise. */
static void numla_cli_mpi_env_(void)
{
    if (!getenv("OMPI_MCA_mca_base_component_disable_dlclose"))
        setenv("OMPI_MCA_mca_base_component_disable_dlclose", "1", 1);
}

int numla_cli_main(int argc, char **argv);
int numla_cli_main(int argc, char **argv)
{
    numla_cli_keep_cpu_mask_();
    numla_cli_mpi_env_();
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
