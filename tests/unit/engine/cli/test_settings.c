/* Tests for engine/cli/settings.c: the NUMLA_* variables read from a table standing in for the
 * environment — defaults, every accepted value, errors naming the variable, the CPU mask, and
 * what reaches the engine's options. */
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

#include "engine/cli/settings.h"

/* The stand-in environment: up to 8 name=value pairs. */
static const char *fake_names[8], *fake_values[8];
static int fake_n;

static const char *fake_get(const char *name)
{
    for (int i = 0; i < fake_n; i++)
        if (!strcmp(fake_names[i], name))
            return fake_values[i];
    return NULL;
}

static void fake_set(const char *name, const char *value)
{
    fake_names[fake_n] = name;
    fake_values[fake_n++] = value;
}

static const unsigned all_levels = (1u << NUMLA_ISA_COUNT) - 1;

/* Settings from one variable, or the status. */
static numla_status read_one(const char *name, const char *value, numla_settings *s)
{
    fake_n = 0;
    if (name)
        fake_set(name, value);
    return numla_settings_read(fake_get, all_levels, s);
}

static void test_defaults(void)
{
    numla_settings s;
    CU_ASSERT_EQUAL_FATAL(read_one(NULL, NULL, &s), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(s.isa, NUMLA_ISA_AMX); /* the best of the mask */
    CU_ASSERT_EQUAL(s.log_level, NUMLA_LOG_LEVEL_INFO);
    CU_ASSERT(s.kernels.linear_amx && s.kernels.mla_amx && s.kernels.mha_amx);
    CU_ASSERT_EQUAL(s.kernels.prefill_form, NUMLA_PREFILL_FORM_AUTO);
    CU_ASSERT_EQUAL(s.comm.allreduce, NUMLA_COMM_ALLREDUCE_PATH_AUTO);
    CU_ASSERT(s.comm.timeout_s == 0 && s.comm.shm_bytes == 0 && s.comm.shm_rs_bytes == 0 &&
              s.comm.shm_par_bytes == 0 && s.comm.test_fake_machines == 0);
    CU_ASSERT_STRING_EQUAL(s.launch_plan, "");
    CU_ASSERT(s.job_size == 0 && s.launch.ranks == 0 && s.launch.threads_per_rank == 0 &&
              !s.launch.oversubscribe && !s.launch.hyperthreads && !s.open_mpi);
    /* empty is unset */
    CU_ASSERT_EQUAL(read_one("NUMLA_ALLREDUCE", "", &s), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(s.comm.allreduce, NUMLA_COMM_ALLREDUCE_PATH_AUTO);
}

static void test_values(void)
{
    numla_settings s;
    CU_ASSERT_EQUAL(read_one("NUMLA_ISA", "avx2", &s), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(s.isa, NUMLA_ISA_AVX2);
    CU_ASSERT_EQUAL(read_one("NUMLA_LOG", "debug", &s), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(s.log_level, NUMLA_LOG_LEVEL_DEBUG);
    CU_ASSERT_EQUAL(read_one("NUMLA_LOG", "quiet", &s), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(s.log_level, NUMLA_LOG_LEVEL_QUIET);
    CU_ASSERT_EQUAL(read_one("NUMLA_LINEAR_AMX", "0", &s), NUMLA_STATUS_OK);
    CU_ASSERT(!s.kernels.linear_amx && s.kernels.mla_amx && s.kernels.mha_amx);
    CU_ASSERT_EQUAL(read_one("NUMLA_MLA_AMX", "0", &s), NUMLA_STATUS_OK);
    CU_ASSERT(s.kernels.linear_amx && !s.kernels.mla_amx && s.kernels.mha_amx);
    CU_ASSERT_EQUAL(read_one("NUMLA_MHA_AMX", "0", &s), NUMLA_STATUS_OK);
    CU_ASSERT(s.kernels.linear_amx && s.kernels.mla_amx && !s.kernels.mha_amx);
    CU_ASSERT_EQUAL(read_one("NUMLA_MHA_AMX", "1", &s), NUMLA_STATUS_OK);
    CU_ASSERT(s.kernels.mha_amx);
    CU_ASSERT_EQUAL(read_one("NUMLA_PREFILL_FORM", "expanded", &s), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(s.kernels.prefill_form, NUMLA_PREFILL_FORM_EXPANDED);
    CU_ASSERT_EQUAL(read_one("NUMLA_PREFILL_FORM", "absorbed", &s), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(s.kernels.prefill_form, NUMLA_PREFILL_FORM_ABSORBED);
    CU_ASSERT_EQUAL(read_one("NUMLA_ALLREDUCE", "shm", &s), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(s.comm.allreduce, NUMLA_COMM_ALLREDUCE_PATH_SHM);
    CU_ASSERT_EQUAL(read_one("NUMLA_ALLREDUCE", "mpi", &s), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(s.comm.allreduce, NUMLA_COMM_ALLREDUCE_PATH_MPI);
    CU_ASSERT_EQUAL(read_one("NUMLA_COMM_TIMEOUT", "5", &s), NUMLA_STATUS_OK);
    CU_ASSERT(s.comm.timeout_s == 5.0);
    fake_n = 0;
    fake_set("NUMLA_COMM_SHM_BYTES", "4096");
    fake_set("NUMLA_COMM_SHM_RS_BYTES", "1024");
    fake_set("NUMLA_COMM_SHM_PAR_BYTES", "2048");
    fake_set("NUMLA_PLAN", "threads=4,oversubscribe=1");
    CU_ASSERT_EQUAL_FATAL(numla_settings_read(fake_get, all_levels, &s), NUMLA_STATUS_OK);
    CU_ASSERT(s.comm.shm_bytes == 4096 && s.comm.shm_rs_bytes == 1024 &&
              s.comm.shm_par_bytes == 2048);
    CU_ASSERT_STRING_EQUAL(s.launch_plan, "threads=4,oversubscribe=1");
    /* parsed once, here */
    CU_ASSERT(s.launch.threads_per_rank == 4 && s.launch.oversubscribe && !s.launch.hyperthreads);
}

/* The job size the MPI launcher announces: the first of its variables that is a positive
 * number becomes the launch plan's rank count; Open MPI's own variable says mpirun started
 * the job (it kills the ranks a second after passing SIGTERM on). */
static void test_job_size(void)
{
    numla_settings s;
    CU_ASSERT_EQUAL_FATAL(read_one("OMPI_COMM_WORLD_SIZE", "6", &s), NUMLA_STATUS_OK);
    CU_ASSERT(s.job_size == 6 && s.launch.ranks == 6 && s.open_mpi);
    CU_ASSERT_EQUAL_FATAL(read_one("SLURM_NTASKS", "3", &s), NUMLA_STATUS_OK);
    CU_ASSERT(s.job_size == 3 && s.launch.ranks == 3 && !s.open_mpi);
    fake_n = 0;
    fake_set("OMPI_COMM_WORLD_SIZE", "0");
    fake_set("PMI_SIZE", "5");
    fake_set("SLURM_NTASKS", "7");
    CU_ASSERT_EQUAL_FATAL(numla_settings_read(fake_get, all_levels, &s), NUMLA_STATUS_OK);
    CU_ASSERT(s.job_size == 5 && s.launch.ranks == 5);
}

/* Every value not accepted is an error naming the variable and the value. */
static void test_errors(void)
{
    static const char *const bad[][2] = {
        {"NUMLA_ISA", "sse9"},         {"NUMLA_LOG", "verbose"},
        {"NUMLA_LINEAR_AMX", "off"},   {"NUMLA_MLA_AMX", "2"},
        {"NUMLA_MHA_AMX", "yes"},      {"NUMLA_PREFILL_FORM", "both"},
        {"NUMLA_ALLREDUCE", "bogus"},  {"NUMLA_COMM_TIMEOUT", "0"},
        {"NUMLA_COMM_TIMEOUT", "-3"},  {"NUMLA_COMM_SHM_BYTES", "4k"},
        {"NUMLA_COMM_SHM_RS_BYTES", "x"}, {"NUMLA_COMM_SHM_PAR_BYTES", "99999999999999999999999"},
        {"NUMLA_PLAN", "colour=1"},    {"NUMLA_UARCH", "zen9"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        numla_settings s;
        numla_status st = read_one(bad[i][0], bad[i][1], &s);
        const char *msg = numla_error_message();
        NUMLA_ASSERT_MSG(st == NUMLA_STATUS_INVALID_ARG && strstr(msg, bad[i][0]) &&
                             strstr(msg, bad[i][1]),
                         "%s=%s: status %d, message '%s'", bad[i][0], bad[i][1], st, msg);
    }
}

/* A level outside the supported mask is refused; the default is the best in it. */
static void test_cpu_mask(void)
{
    numla_settings s;
    const unsigned avx2 = 1u << NUMLA_ISA_REF | 1u << NUMLA_ISA_AVX2;
    fake_n = 0;
    CU_ASSERT_EQUAL(numla_settings_read(fake_get, avx2, &s), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(s.isa, NUMLA_ISA_AVX2);
    fake_set("NUMLA_ISA", "amx");
    CU_ASSERT_EQUAL(numla_settings_read(fake_get, avx2, &s), NUMLA_STATUS_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "NUMLA_ISA=amx"));
}

/* What the engine gets: the level, the kernel switches and the plan. */
static void test_engine_options(void)
{
    numla_settings s;
    fake_n = 0;
    fake_set("NUMLA_ISA", "avx512");
    fake_set("NUMLA_MLA_AMX", "0");
    fake_set("NUMLA_PREFILL_FORM", "expanded");
    fake_set("NUMLA_PLAN", "threads=2");
    CU_ASSERT_EQUAL_FATAL(numla_settings_read(fake_get, all_levels, &s), NUMLA_STATUS_OK);
    numla_engine_options o = numla_engine_options_default();
    o.num_threads = 3;
    numla_settings_engine_options(&s, &o);
    CU_ASSERT_EQUAL(o.isa, NUMLA_ISA_AVX512);
    CU_ASSERT(o.kernels.linear_amx && !o.kernels.mla_amx && o.kernels.mha_amx);
    CU_ASSERT_EQUAL(o.kernels.prefill_form, NUMLA_PREFILL_FORM_EXPANDED);
    CU_ASSERT_PTR_EQUAL(o.launch, &s.launch);
    CU_ASSERT_EQUAL_FATAL(o.launch != NULL, 1);
    CU_ASSERT_EQUAL(o.launch->threads_per_rank, 2);
    CU_ASSERT_EQUAL(o.num_threads, 3); /* other fields kept */
    fake_n = 0;
    CU_ASSERT_EQUAL_FATAL(numla_settings_read(fake_get, all_levels, &s), NUMLA_STATUS_OK);
    numla_settings_engine_options(&s, &o);
    CU_ASSERT_PTR_NULL(o.launch);
}

/* The model's per-family levels from the settings' switches: off = capped below amx. */
static void test_model_levels(void)
{
    numla_settings s;
    fake_n = 0;
    fake_set("NUMLA_LINEAR_AMX", "0");
    fake_set("NUMLA_MHA_AMX", "0");
    fake_set("NUMLA_PREFILL_FORM", "absorbed");
    CU_ASSERT_EQUAL_FATAL(numla_settings_read(fake_get, all_levels, &s), NUMLA_STATUS_OK);
    numla_engine_options o = numla_engine_options_default();
    numla_settings_engine_options(&s, &o);
    numla_model_options m = o.kernels;
    m.isa = NUMLA_ISA_AMX;
    CU_ASSERT_EQUAL(numla_model_options_level(&m, NUMLA_MODEL_KERNELS_LINEAR),
                    NUMLA_ISA_AVX512BF16);
    CU_ASSERT_EQUAL(numla_model_options_level(&m, NUMLA_MODEL_KERNELS_MLA), NUMLA_ISA_AMX);
    CU_ASSERT_EQUAL(numla_model_options_level(&m, NUMLA_MODEL_KERNELS_MHA), NUMLA_ISA_AVX512BF16);
    CU_ASSERT_EQUAL(m.prefill_form, NUMLA_PREFILL_FORM_ABSORBED);
    /* below amx a switch changes nothing */
    m.isa = NUMLA_ISA_AVX2;
    CU_ASSERT(numla_model_options_level(&m, NUMLA_MODEL_KERNELS_LINEAR) == NUMLA_ISA_AVX2 &&
              numla_model_options_level(&m, NUMLA_MODEL_KERNELS_MLA) == NUMLA_ISA_AVX2 &&
              numla_model_options_level(&m, NUMLA_MODEL_KERNELS_MHA) == NUMLA_ISA_AVX2);
}

/* The microarchitecture: detected by default, forced by NUMLA_UARCH, passed to the engine, and
 * where vdpbf16ps is slow (intel) MLA attention and the 8-bit linears drop from avx512bf16 to
 * the FMA kernels. */
static void test_uarch(void)
{
    numla_settings s;
    fake_n = 0;
    CU_ASSERT_EQUAL_FATAL(numla_settings_read(fake_get, all_levels, &s), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(s.kernels.uarch, numla_uarch_detect());
    fake_set("NUMLA_UARCH", "intel");
    fake_set("NUMLA_MLA_AMX", "0");
    CU_ASSERT_EQUAL_FATAL(numla_settings_read(fake_get, all_levels, &s), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(s.kernels.uarch, NUMLA_UARCH_INTEL);
    numla_engine_options o = numla_engine_options_default();
    numla_settings_engine_options(&s, &o);
    CU_ASSERT_EQUAL(o.kernels.uarch, NUMLA_UARCH_INTEL);
    numla_model_options m = o.kernels;
    m.isa = NUMLA_ISA_AMX;
    CU_ASSERT_EQUAL(numla_model_options_level(&m, NUMLA_MODEL_KERNELS_MLA), NUMLA_ISA_AVX512);
    CU_ASSERT_EQUAL(numla_model_options_level(&m, NUMLA_MODEL_KERNELS_LINEAR), NUMLA_ISA_AMX);
    m.mla_amx = 1; /* the AMX kernel is unaffected */
    CU_ASSERT_EQUAL(numla_model_options_level(&m, NUMLA_MODEL_KERNELS_MLA), NUMLA_ISA_AMX);
    m.mla_amx = 0;
    m.isa = NUMLA_ISA_AVX512BF16;
    CU_ASSERT_EQUAL(numla_model_options_level(&m, NUMLA_MODEL_KERNELS_MLA), NUMLA_ISA_AVX512);
    /* the 8-bit linears (the fp8 GEMV of 1-12 rows) likewise, the float ones not */
    CU_ASSERT_EQUAL(numla_model_options_level(&m, NUMLA_MODEL_KERNELS_QLINEAR), NUMLA_ISA_AVX512);
    CU_ASSERT_EQUAL(numla_model_options_level(&m, NUMLA_MODEL_KERNELS_LINEAR), NUMLA_ISA_AVX512BF16);
    m.uarch = NUMLA_UARCH_ZEN4;
    CU_ASSERT_EQUAL(numla_model_options_level(&m, NUMLA_MODEL_KERNELS_MLA), NUMLA_ISA_AVX512BF16);
    CU_ASSERT_EQUAL(numla_model_options_level(&m, NUMLA_MODEL_KERNELS_QLINEAR), NUMLA_ISA_AVX512BF16);
    m.uarch = NUMLA_UARCH_GENERIC;
    CU_ASSERT_EQUAL(numla_model_options_level(&m, NUMLA_MODEL_KERNELS_MLA), NUMLA_ISA_AVX512BF16);
    CU_ASSERT_EQUAL(numla_model_options_level(&m, NUMLA_MODEL_KERNELS_QLINEAR), NUMLA_ISA_AVX512BF16);
    /* on Intel with AMX the 8-bit linears keep the amx level (its fp8 tiles from 16 rows, the
     * FMA GEMV below), and follow the linears' AMX switch */
    m.uarch = NUMLA_UARCH_INTEL;
    m.isa = NUMLA_ISA_AMX;
    CU_ASSERT_EQUAL(numla_model_options_level(&m, NUMLA_MODEL_KERNELS_QLINEAR), NUMLA_ISA_AMX);
    m.linear_amx = 0;
    CU_ASSERT_EQUAL(numla_model_options_level(&m, NUMLA_MODEL_KERNELS_QLINEAR), NUMLA_ISA_AVX512);
    m.uarch = NUMLA_UARCH_ZEN4;
    CU_ASSERT_EQUAL(numla_model_options_level(&m, NUMLA_MODEL_KERNELS_QLINEAR), NUMLA_ISA_AVX512BF16);
    fake_n = 0;
    fake_set("NUMLA_UARCH", "auto");
    CU_ASSERT_EQUAL_FATAL(numla_settings_read(fake_get, all_levels, &s), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(s.kernels.uarch, numla_uarch_detect());
}

NUMLA_TEST_SUITE(settings, NULL, NULL, NUMLA_TEST(test_defaults), NUMLA_TEST(test_values),
                 NUMLA_TEST(test_job_size),
                 NUMLA_TEST(test_errors), NUMLA_TEST(test_cpu_mask),
                 NUMLA_TEST(test_engine_options), NUMLA_TEST(test_model_levels),
                 NUMLA_TEST(test_uarch))
