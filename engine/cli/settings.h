/* engine/cli/settings.h — the run-time settings of a numla process, read once at start-up.
 *
 * Every NUMLA_* environment variable the program honours is read here and nowhere else:
 * subcommands (numla run, numla bench ..., numla topo) fill one numla_settings with
 * numla_settings_load, apply their command-line overrides, and pass the parts down as plain
 * options (numla_engine_options, numla_comm_options, the launch plan); kernels, comm/ and
 * launch/ read no environment.
 *
 *   NUMLA_ISA            ref|avx2|avx512|avx512bf16|amx: the kernel level (default: the best
 *                        the CPU has; a level it lacks is an error)
 *   NUMLA_UARCH          auto|generic|zen4|zen5|intel: the CPU the kernels tune for (kernels/isa.h;
 *                        default auto = from CPUID; any value runs on any CPU)
 *   NUMLA_LOG            debug|info|warn|error|quiet (default info)
 *   NUMLA_LINEAR_AMX     0|1: the linear layers' AMX tile GEMM (default 1, where amx runs)
 *   NUMLA_MLA_AMX        0|1: MLA attention's AMX Q·K and P·V (default 1)
 *   NUMLA_MHA_AMX        0|1: mha_prefill's AMX scores and P·V (default 1)
 *   NUMLA_PREFILL_FORM   auto|absorbed|expanded (docs/prefill.md; default auto)
 *   NUMLA_ALLREDUCE      auto|mpi|shm (comm/comm.h; default auto)
 *   NUMLA_COMM_TIMEOUT   seconds a shm allreduce waits for a peer (default 60)
 *   NUMLA_COMM_SHM_BYTES, NUMLA_COMM_SHM_RS_BYTES, NUMLA_COMM_SHM_PAR_BYTES
 *                        positive byte counts of the shm allreduce (comm/comm.h)
 *   NUMLA_PLAN           the launcher's plan options (launch/plan.h), set by numla-launch
 *
 * and, not ours but read here for the same reason, the job size the MPI launcher announces
 * (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_SIZE or SLURM_NTASKS: the first that is a positive
 * number), which the launch plan needs.
 *
 * Unset or empty means the default; any other value that is not one of those listed is an
 * error naming the variable. (bench/ keeps NUMLA_BENCH_HUGEPAGES, a benchmark's own knob.)
 */
#ifndef NUMLA_ENGINE_CLI_SETTINGS_H
#define NUMLA_ENGINE_CLI_SETTINGS_H

#include "comm/comm.h"
#include "common/log.h"
#include "common/status.h"
#include "engine/model/model.h"
#include "engine/parallel/engine.h"
#include "kernels/isa.h"
#include "launch/plan.h"

typedef struct numla_settings {
    numla_isa isa;                /* NUMLA_ISA */
    numla_log_level log_level;    /* NUMLA_LOG */
    numla_model_options kernels;  /* NUMLA_UARCH, NUMLA_LINEAR_AMX, NUMLA_MLA_AMX, NUMLA_MHA_AMX,
                                     NUMLA_PREFILL_FORM */
    numla_comm_options comm;      /* NUMLA_ALLREDUCE, NUMLA_COMM_TIMEOUT, NUMLA_COMM_SHM_* */
    char launch_plan[256];        /* NUMLA_PLAN as written ("" when unset), for the log */
    int job_size;                 /* OMPI_COMM_WORLD_SIZE, ... (0: none announced) */
    int open_mpi;                 /* 1: OMPI_COMM_WORLD_SIZE is set: Open MPI's mpirun started
                                     this rank (it kills the ranks about a second after it
                                     forwards SIGTERM or SIGINT to them) */
    numla_launch_opts launch;     /* NUMLA_PLAN parsed once, ranks = job_size (launch/plan.h) */
} numla_settings;

/* Where the values come from: getenv, or a table in the tests. */
typedef const char *(*numla_settings_source)(const char *name);

/* Fill *out from source, validating every value; supported: the mask of ISA levels this CPU
 * runs (numla_isa_supported_mask()). On error *out is unspecified and the message names the
 * variable. No side effects. Local. */
numla_status numla_settings_read(numla_settings_source source, unsigned supported,
                                 numla_settings *out);

/* numla_settings_read from the environment and this CPU, then apply the log level and log
 * every setting at debug level. Call once per process, at start-up. Local. */
numla_status numla_settings_load(numla_settings *out);

/* numla_settings_load, then the process's MPI session with the settings' comm options
 * (numla_comm_world_init): what every subcommand that starts MPI does first. Collective over
 * MPI_COMM_WORLD. */
numla_status numla_settings_start(numla_settings *set, numla_comm_session *mpi);

/* Log every setting at debug level ("settings: NUMLA_ISA=avx512 ..."). Local. */
void numla_settings_log(const numla_settings *s);

/* The engine's share of the settings: kernel level, kernel options, the parsed launch plan
 * (o->launch points into s when NUMLA_PLAN is set, else NULL; the caller's other fields are
 * kept). s must outlive the engine's creation. Local. */
void numla_settings_engine_options(const numla_settings *s, numla_engine_options *o);

#endif
