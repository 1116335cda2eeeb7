/* engine/cli/settings.c — the NUMLA_* environment, read and validated once (settings.h). */
#include "engine/cli/settings.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch/plan.h"

/* The value of name, or NULL when unset or empty. */
static const char *settings_get(numla_settings_source source, const char *name)
{
    const char *v = source(name);
    return v && *v ? v : NULL;
}

/* One of `names` (NULL-terminated) -> its index in *out; unset: *out untouched. */
static numla_status settings_choice(numla_settings_source source, const char *name,
                                    const char *const *names, const char *expected, int *out)
{
    const char *v = settings_get(source, name);
    if (!v)
        return NUMLA_STATUS_OK;
    for (int i = 0; names[i]; i++)
        if (!strcmp(v, names[i])) {
            *out = i;
            return NUMLA_STATUS_OK;
        }
    NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "%s=%s: expected %s", name, v, expected);
}

/* A positive integer -> *out; unset: *out untouched. */
static numla_status settings_count(numla_settings_source source, const char *name, size_t *out)
{
    const char *v = settings_get(source, name);
    if (!v)
        return NUMLA_STATUS_OK;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (*end || n == 0 || errno || v[0] == '-')
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "%s=%s: expected a positive whole number", name, v);
    *out = (size_t)n;
    return NUMLA_STATUS_OK;
}

static numla_status settings_switch(numla_settings_source source, const char *name, int *out)
{
    static const char *const off_on[] = {"0", "1", NULL};
    return settings_choice(source, name, off_on, "0 or 1", out);
}

numla_status numla_settings_read(numla_settings_source source, unsigned supported,
                                 numla_settings *out)
{
    numla_settings s = {
        .log_level = NUMLA_LOG_LEVEL_INFO,
        .kernels = numla_model_options_default(NUMLA_ISA_REF),
        .comm = {.allreduce = NUMLA_COMM_ALLREDUCE_PATH_AUTO},
    };
    NUMLA_CHECK(numla_isa_choose("NUMLA_ISA", settings_get(source, "NUMLA_ISA"), supported, &s.isa));
    s.kernels.isa = s.isa;

    static const char *const levels[] = {"debug", "info", "warn", "error", "quiet", NULL};
    int level = (int)s.log_level;
    NUMLA_CHECK(settings_choice(source, "NUMLA_LOG", levels, "debug, info, warn, error or quiet",
                                &level));
    s.log_level = (numla_log_level)level;

    NUMLA_CHECK(numla_uarch_choose("NUMLA_UARCH", settings_get(source, "NUMLA_UARCH"), numla_uarch_detect(),
                                    &s.kernels.uarch));
    NUMLA_CHECK(settings_switch(source, "NUMLA_LINEAR_AMX", &s.kernels.linear_amx));
    NUMLA_CHECK(settings_switch(source, "NUMLA_MLA_AMX", &s.kernels.mla_amx));
    NUMLA_CHECK(settings_switch(source, "NUMLA_MHA_AMX", &s.kernels.mha_amx));
    static const char *const forms[] = {"auto", "absorbed", "expanded", NULL};
    int form = (int)s.kernels.prefill_form;
    NUMLA_CHECK(settings_choice(source, "NUMLA_PREFILL_FORM", forms, "auto, absorbed or expanded",
                                &form));
    s.kernels.prefill_form = (numla_prefill_form)form;

    static const char *const paths[] = {"auto", "mpi", "shm", NULL};
    int path = (int)s.comm.allreduce;
    NUMLA_CHECK(settings_choice(source, "NUMLA_ALLREDUCE", paths, "auto, mpi or shm", &path));
    s.comm.allreduce = (numla_comm_allreduce_path)path;
    size_t timeout = 0;
    NUMLA_CHECK(settings_count(source, "NUMLA_COMM_TIMEOUT", &timeout));
    s.comm.timeout_s = (double)timeout;
    NUMLA_CHECK(settings_count(source, "NUMLA_COMM_SHM_BYTES", &s.comm.shm_bytes));
    NUMLA_CHECK(settings_count(source, "NUMLA_COMM_SHM_RS_BYTES", &s.comm.shm_rs_bytes));
    NUMLA_CHECK(settings_count(source, "NUMLA_COMM_SHM_PAR_BYTES", &s.comm.shm_par_bytes));

    const char *plan = settings_get(source, "NUMLA_PLAN");
    if (plan && strlen(plan) >= sizeof s.launch_plan)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "NUMLA_PLAN=%s: longer than %zu characters", plan,
                   sizeof s.launch_plan - 1);
    /* the launcher's job size: the first of these that is a positive number */
    static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
                                        "SLURM_NTASKS"};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0] && s.job_size == 0; i++) {
        const char *v = settings_get(source, sizes[i]);
        if (v && atoi(v) > 0)
            s.job_size = atoi(v);
    }
    s.open_mpi = settings_get(source, "OMPI_COMM_WORLD_SIZE") != NULL;
    NUMLA_CHECK(numla_launch_opts_from(plan, s.job_size, &s.launch));
    if (plan)
        snprintf(s.launch_plan, sizeof s.launch_plan, "%s", plan);
    *out = s;
    return NUMLA_STATUS_OK;
}

static const char *settings_env(const char *name) { return getenv(name); }

numla_status numla_settings_load(numla_settings *out)
{
    NUMLA_CHECK(numla_settings_read(settings_env, numla_isa_supported_mask(), out));
    numla_log_set_level(out->log_level);
    numla_settings_log(out);
    return NUMLA_STATUS_OK;
}

void numla_settings_log(const numla_settings *s)
{
    static const char *const levels[] = {"debug", "info", "warn", "error", "quiet"};
    static const char *const forms[] = {"auto", "absorbed", "expanded"};
    NUMLA_DEBUG("settings: NUMLA_ISA=%s NUMLA_UARCH=%s NUMLA_LOG=%s NUMLA_LINEAR_AMX=%d NUMLA_MLA_AMX=%d "
                "NUMLA_MHA_AMX=%d NUMLA_PREFILL_FORM=%s",
                numla_isa_name(s->isa), numla_uarch_name(s->kernels.uarch), levels[s->log_level],
                s->kernels.linear_amx,
                s->kernels.mla_amx, s->kernels.mha_amx, forms[s->kernels.prefill_form]);
    NUMLA_DEBUG("settings: NUMLA_ALLREDUCE=%s NUMLA_COMM_TIMEOUT=%.0f NUMLA_COMM_SHM_BYTES=%zu "
                "NUMLA_COMM_SHM_RS_BYTES=%zu NUMLA_COMM_SHM_PAR_BYTES=%zu NUMLA_PLAN=%s "
                "(0: the default)",
                numla_comm_allreduce_path_name(s->comm.allreduce), s->comm.timeout_s,
                s->comm.shm_bytes, s->comm.shm_rs_bytes, s->comm.shm_par_bytes,
                s->launch_plan[0] ? s->launch_plan : "(unset)");
}

void numla_settings_engine_options(const numla_settings *s, numla_engine_options *o)
{
    o->isa = s->isa;
    /* the settings' share of the model options; the caller's others (threads, ...) stay */
    o->kernels.linear_amx = s->kernels.linear_amx;
    o->kernels.mla_amx = s->kernels.mla_amx;
    o->kernels.mha_amx = s->kernels.mha_amx;
    o->kernels.uarch = s->kernels.uarch;
    o->kernels.prefill_form = s->kernels.prefill_form;
    o->launch = s->launch_plan[0] ? &s->launch : NULL;
}

numla_status numla_settings_start(numla_settings *set, numla_comm_session *mpi)
{
    mpi->comm = NULL;
    mpi->owns_mpi = 0;
    NUMLA_CHECK(numla_settings_load(set));
    return numla_comm_world_init(mpi, &set->comm);
}
