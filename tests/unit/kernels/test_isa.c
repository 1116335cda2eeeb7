/* Tests for kernels/isa: parsing, the AMX level, the choice of a level by name, the CPU feature
 * bits and the one dispatch walk (numla_isa_pick). */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

static void test_parse(void)
{
    numla_isa isa;
    CU_ASSERT_EQUAL(numla_isa_parse("avx512bf16", &isa), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(isa, NUMLA_ISA_AVX512BF16);
    CU_ASSERT_EQUAL(numla_isa_parse("ref", &isa), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(isa, NUMLA_ISA_REF);
    CU_ASSERT_EQUAL(numla_isa_parse("sse9", &isa), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "sse9"));
}

static void test_choose_cpu(void)
{
    numla_isa isa;
    const unsigned cpu = numla_isa_supported_mask();
    CU_ASSERT_EQUAL(numla_isa_choose("NUMLA_ISA", "ref", cpu, &isa), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(isa, NUMLA_ISA_REF);
    CU_ASSERT_EQUAL(numla_isa_choose("NUMLA_ISA", "bogus", cpu, &isa), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "NUMLA_ISA=bogus"));
    /* A level the CPU lacks is an error, not a fallback. */
    for (int i = 0; i < NUMLA_ISA_COUNT; i++) {
        if (numla_isa_supported((numla_isa)i))
            continue;
        CU_ASSERT_EQUAL(numla_isa_choose("NUMLA_ISA", numla_isa_name((numla_isa)i), cpu, &isa),
                        NUMLA_STATUS_UNSUPPORTED);
    }
    CU_ASSERT_EQUAL(numla_isa_choose("NUMLA_ISA", NULL, cpu, &isa), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(isa, numla_isa_best());
}

/* AMX is the level above avx512bf16, named "amx", and needs it. */
static void test_amx_level(void)
{
    numla_isa isa;
    CU_ASSERT_EQUAL(numla_isa_parse("amx", &isa), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(isa, NUMLA_ISA_AMX);
    CU_ASSERT(NUMLA_ISA_AMX > NUMLA_ISA_AVX512BF16);
    CU_ASSERT_STRING_EQUAL(numla_isa_name(NUMLA_ISA_AMX), "amx");
    if (numla_isa_supported(NUMLA_ISA_AMX)) {
        CU_ASSERT(numla_isa_supported(NUMLA_ISA_AVX512BF16));
        CU_ASSERT_EQUAL(numla_isa_best(), NUMLA_ISA_AMX);
    }
    CU_ASSERT_EQUAL(numla_isa_min(NUMLA_ISA_AMX, NUMLA_ISA_AVX512BF16), NUMLA_ISA_AVX512BF16);
    CU_ASSERT_EQUAL(numla_isa_min(NUMLA_ISA_AVX2, NUMLA_ISA_AVX512BF16), NUMLA_ISA_AVX2);
}

/* The rule, on CPUs this one is not: a level missing from the mask is an
 * error naming it and the best level there is, never a quiet fallback. */
static void test_choose_masks(void)
{
    numla_isa isa = NUMLA_ISA_COUNT;
    const unsigned ref_avx2 = 1u << NUMLA_ISA_REF | 1u << NUMLA_ISA_AVX2;
    CU_ASSERT_EQUAL(numla_isa_choose("NUMLA_ISA", NULL, ref_avx2, &isa), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(isa, NUMLA_ISA_AVX2);
    CU_ASSERT_EQUAL(numla_isa_choose("NUMLA_ISA", "", 0, &isa), NUMLA_STATUS_OK); /* ref is always there */
    CU_ASSERT_EQUAL(isa, NUMLA_ISA_REF);
    CU_ASSERT_EQUAL(numla_isa_choose("NUMLA_ISA", "avx2", ref_avx2, &isa), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(isa, NUMLA_ISA_AVX2);
    isa = NUMLA_ISA_COUNT;
    CU_ASSERT_EQUAL(numla_isa_choose("NUMLA_ISA", "avx512bf16", ref_avx2, &isa), NUMLA_STATUS_UNSUPPORTED);
    CU_ASSERT_EQUAL(isa, NUMLA_ISA_COUNT); /* untouched on error */
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "does not support avx512bf16"));
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "best: avx2"));
    CU_ASSERT_EQUAL(numla_isa_choose("NUMLA_ISA", "avx512", 1u << NUMLA_ISA_REF, &isa), NUMLA_STATUS_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "best: ref"));
    CU_ASSERT_EQUAL(numla_isa_choose("NUMLA_ISA", "ref", 0, &isa), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(isa, NUMLA_ISA_REF);
    /* the mask agrees with the per-level check */
    unsigned m = numla_isa_supported_mask();
    for (int i = 0; i < NUMLA_ISA_COUNT; i++)
        CU_ASSERT_EQUAL(!!(m & (1u << i)), numla_isa_supported((numla_isa)i));
}

/* stderr of fn(arg) with the log at debug level, into buf (NUL-terminated). */
static void capture_stderr(void (*fn)(void *), void *arg, char *buf, size_t n)
{
    char path[] = "/tmp/numla_test_isa_XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    numla_log_level was = NUMLA_LOG_LEVEL_QUIET; /* the lowest level now enabled */
    for (int l = NUMLA_LOG_LEVEL_ERROR; l >= NUMLA_LOG_LEVEL_DEBUG; l--)
        if (numla_log_enabled((numla_log_level)l))
            was = (numla_log_level)l;
    numla_log_set_level(NUMLA_LOG_LEVEL_DEBUG);
    fn(arg);
    numla_log_set_level(was);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t got = pread(fd, buf, n - 1, 0);
    buf[got > 0 ? got : 0] = '\0';
    close(fd);
    unlink(path);
}

static void choose_avx2_forced(void *arg)
{
    (void)numla_isa_choose("NUMLA_ISA", "avx2", 1u << NUMLA_ISA_AVX2, arg);
}

static void choose_from_mask(void *arg)
{
    (void)numla_isa_choose("NUMLA_ISA", NULL, 1u << NUMLA_ISA_AVX2, arg);
}

/* The choice is logged at debug level, with where it came from. */
static void test_choice_logged(void)
{
    char buf[512];
    numla_isa isa;
    capture_stderr(choose_avx2_forced, &isa, buf, sizeof buf);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "kernel ISA: avx2 (forced by NUMLA_ISA)"));
    capture_stderr(choose_from_mask, &isa, buf, sizeof buf);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "kernel ISA: avx2 (from CPUID)"));
}

/* The microarchitecture from CPUID's vendor and family, and the choice by name. */
static void test_uarch(void)
{
    CU_ASSERT_EQUAL(numla_uarch_from_cpuid("AuthenticAMD", 0x19, 1), NUMLA_UARCH_ZEN4); /* Genoa */
    CU_ASSERT_EQUAL(numla_uarch_from_cpuid("AuthenticAMD", 0x19, 0), NUMLA_UARCH_GENERIC); /* Zen 3 */
    CU_ASSERT_EQUAL(numla_uarch_from_cpuid("AuthenticAMD", 0x1a, 1), NUMLA_UARCH_ZEN5); /* Turin */
    CU_ASSERT_EQUAL(numla_uarch_from_cpuid("AuthenticAMD", 0x17, 0), NUMLA_UARCH_GENERIC); /* Zen 2 */
    CU_ASSERT_EQUAL(numla_uarch_from_cpuid("GenuineIntel", 6, 1), NUMLA_UARCH_INTEL);
    CU_ASSERT_EQUAL(numla_uarch_from_cpuid("HygonGenuine", 0x18, 0), NUMLA_UARCH_GENERIC);
    CU_ASSERT(numla_uarch_bf16_dot_fast(NUMLA_UARCH_ZEN4));
    CU_ASSERT(numla_uarch_bf16_dot_fast(NUMLA_UARCH_ZEN5));
    CU_ASSERT(!numla_uarch_bf16_dot_fast(NUMLA_UARCH_INTEL));
    /* detection agrees with the level: a Zen 4 without AVX-512 cannot be reported */
    const numla_uarch here = numla_uarch_detect();
    CU_ASSERT((unsigned)here < NUMLA_UARCH_COUNT);
    if (here == NUMLA_UARCH_ZEN4)
        CU_ASSERT(numla_isa_supported(NUMLA_ISA_AVX512));

    numla_uarch u = NUMLA_UARCH_COUNT;
    CU_ASSERT_EQUAL(numla_uarch_choose("NUMLA_UARCH", NULL, NUMLA_UARCH_ZEN5, &u), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(u, NUMLA_UARCH_ZEN5);
    CU_ASSERT_EQUAL(numla_uarch_choose("NUMLA_UARCH", "auto", NUMLA_UARCH_ZEN4, &u), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(u, NUMLA_UARCH_ZEN4);
    CU_ASSERT_EQUAL(numla_uarch_choose("NUMLA_UARCH", "intel", NUMLA_UARCH_ZEN4, &u), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(u, NUMLA_UARCH_INTEL);
    CU_ASSERT_STRING_EQUAL(numla_uarch_name(u), "intel");
    u = NUMLA_UARCH_COUNT;
    CU_ASSERT_EQUAL(numla_uarch_choose("NUMLA_UARCH", "zen9", NUMLA_UARCH_ZEN4, &u), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(u, NUMLA_UARCH_COUNT); /* untouched on error */
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "NUMLA_UARCH=zen9"));
}

static void choose_uarch_forced(void *arg)
{
    (void)numla_uarch_choose("NUMLA_UARCH", "zen5", NUMLA_UARCH_INTEL, arg);
}

static void choose_uarch_detected(void *arg)
{
    (void)numla_uarch_choose("NUMLA_UARCH", NULL, NUMLA_UARCH_ZEN4, arg);
}

static void test_uarch_logged(void)
{
    char buf[512];
    numla_uarch u;
    capture_stderr(choose_uarch_forced, &u, buf, sizeof buf);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "kernel microarchitecture: zen5 (forced by NUMLA_UARCH; CPUID says intel)"));
    capture_stderr(choose_uarch_detected, &u, buf, sizeof buf);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "kernel microarchitecture: zen4 (from CPUID; CPUID says zen4)"));
}

/* numla_isa_pick over a two-kind table built like a family's: the ref row complete, the rows
 * above overriding some kinds, entries that need a CPU feature or take only some calls. */
typedef struct pick_call {
    int takes; /* what the applies() below answer */
    int asked; /* how many times one was asked */
} pick_call;

static int pick_applies(const void *call)
{
    pick_call *c = (pick_call *)call;
    c->asked++;
    return c->takes;
}

static void test_pick(void)
{
    enum { KINDS = 2, A = 0, B = 1 };
    const unsigned never = 1u << 31; /* a feature bit numla_cpu_features never sets */
    const numla_variant ref_a = {"ref-a", 0, pick_applies}, ref_b = {"ref-b", 0, NULL};
    const numla_variant avx2_b = {"avx2-b", 0, pick_applies};
    const numla_variant avx512_a = {"avx512-a", never, NULL};
    const numla_variant bf16_a = {"bf16-a", 0, pick_applies};
    const numla_variant *const table[NUMLA_ISA_COUNT][KINDS] = {
        [NUMLA_ISA_REF] = {&ref_a, &ref_b},
        [NUMLA_ISA_AVX2] = {NULL, &avx2_b},
        [NUMLA_ISA_AVX512] = {&avx512_a, NULL},
        [NUMLA_ISA_AVX512BF16] = {&bf16_a, NULL},
    };
    const numla_variant *const *t = &table[0][0];
    pick_call yes = {1, 0}, no = {0, 0};
    /* amx inherits; avx512bf16's entry takes the call */
    CU_ASSERT_EQUAL(numla_isa_pick(NUMLA_ISA_AMX, t, KINDS, A, &yes), NUMLA_ISA_AVX512BF16);
    CU_ASSERT_EQUAL(yes.asked, 1);
    /* it does not: avx512's needs a feature the CPU lacks, avx2 has none: ref, whose applies
     * is never asked */
    CU_ASSERT_EQUAL(numla_isa_pick(NUMLA_ISA_AMX, t, KINDS, A, &no), NUMLA_ISA_REF);
    CU_ASSERT_EQUAL(no.asked, 1);
    CU_ASSERT_EQUAL(numla_isa_pick(NUMLA_ISA_AVX512, t, KINDS, A, &yes), NUMLA_ISA_REF);
    CU_ASSERT_EQUAL(numla_isa_pick(NUMLA_ISA_REF, t, KINDS, A, &no), NUMLA_ISA_REF);
    CU_ASSERT_EQUAL(no.asked, 1);
    /* the other kind walks its own column */
    CU_ASSERT_EQUAL(numla_isa_pick(NUMLA_ISA_AMX, t, KINDS, B, &yes), NUMLA_ISA_AVX2);
    CU_ASSERT_EQUAL(numla_isa_pick(NUMLA_ISA_AVX512, t, KINDS, B, &no), NUMLA_ISA_REF);
    CU_ASSERT_EQUAL(numla_isa_pick(NUMLA_ISA_AVX2, t, KINDS, B, &yes), NUMLA_ISA_AVX2);
    /* a level out of range runs the reference */
    CU_ASSERT_EQUAL(numla_isa_pick(NUMLA_ISA_COUNT, t, KINDS, B, &yes), NUMLA_ISA_REF);
    CU_ASSERT_EQUAL(numla_isa_pick((numla_isa)-1, t, KINDS, A, &yes), NUMLA_ISA_REF);
}

/* The feature bits: none asked is always there, a bit never set is never there, and the
 * bits agree with each other and with the levels. */
static void test_cpu_features(void)
{
    const unsigned f = numla_cpu_features();
    CU_ASSERT(numla_cpu_has(0));
    CU_ASSERT(!numla_cpu_has(1u << 31));
    CU_ASSERT_EQUAL(f, numla_cpu_features()); /* read once */
    CU_ASSERT(!(f & NUMLA_CPU_AMX_INT8) || (f & NUMLA_CPU_AMX_BF16));
    CU_ASSERT_EQUAL(numla_isa_supported(NUMLA_ISA_AMX),
                    numla_isa_supported(NUMLA_ISA_AVX512BF16) && numla_cpu_has(NUMLA_CPU_AMX_BF16));
    CU_ASSERT(numla_cpu_has(NUMLA_CPU_VNNI | NUMLA_CPU_VBMI) ==
              (numla_cpu_has(NUMLA_CPU_VNNI) && numla_cpu_has(NUMLA_CPU_VBMI)));
}

NUMLA_TEST_SUITE(isa, NULL, NULL, NUMLA_TEST(test_parse), NUMLA_TEST(test_choose_cpu),
                 NUMLA_TEST(test_amx_level),
                 NUMLA_TEST(test_choose_masks), NUMLA_TEST(test_choice_logged),
                 NUMLA_TEST(test_uarch), NUMLA_TEST(test_uarch_logged), NUMLA_TEST(test_pick),
                 NUMLA_TEST(test_cpu_features))
