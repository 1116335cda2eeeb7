/* tests/unit/test_util.c — helpers shared by all suites (see test_util.h). */
#define _GNU_SOURCE
#include "test_util.h"

#include <mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint64_t numla_test_rng_u64(numla_test_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double numla_test_rng_uniform(numla_test_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * ((double)(numla_test_rng_u64(r) >> 11) * 0x1.0p-53);
}

double numla_test_rng_normal(numla_test_rng *r)
{
    double u1 = numla_test_rng_uniform(r, 1e-12, 1.0), u2 = numla_test_rng_uniform(r, 0.0, 1.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int numla_test_isas(numla_isa out[NUMLA_ISA_COUNT])
{
    int n = 0;
    for (int i = 0; i < NUMLA_ISA_COUNT; i++)
        if (numla_isa_supported((numla_isa)i))
            out[n++] = (numla_isa)i;
    return n;
}

int numla_test_mpi_init(void)
{
    int inited = 0;
    MPI_Initialized(&inited);
    return !inited && MPI_Init(NULL, NULL) != MPI_SUCCESS;
}

int numla_test_mpi_finalize(void)
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    return !finalized && MPI_Finalize() != MPI_SUCCESS;
}

char *numla_test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    char *b = n >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        if (len)
            *len = (size_t)n;
    }
    return b;
}

int numla_test_sweep_full(void)
{
    const char *v = getenv("NUMLA_TEST_SWEEP");
    return v && !strcmp(v, "full");
}

int numla_test_sweep_lean(void)
{
    const char *v = getenv("NUMLA_TEST_SWEEP");
    return v && !strcmp(v, "lean");
}

int numla_test_sweep_keep(unsigned *counter, unsigned stride)
{
    const unsigned i = (*counter)++;
    if (numla_test_sweep_full() || stride <= 1)
        return 1;
    return i % (numla_test_sweep_lean() ? 2 * stride + 1 : stride) == 0;
}

const char *numla_test_source_path(const char *rel)
{
    static char buf[4096];
    const char *root = getenv("NUMLA_SOURCE_DIR");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : NUMLA_SOURCE_DIR, rel);
    return buf;
}

static char numla_test_tmp_[256];

static void numla_test_tmp_cleanup(void)
{
    if (numla_test_tmp_[0] && !getenv("NUMLA_TEST_KEEP")) {
        char cmd[320];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", numla_test_tmp_);
        if (system(cmd) != 0)
            fprintf(stderr, "warning: could not remove %s\n", numla_test_tmp_);
    }
}

const char *numla_test_tmpdir(void)
{
    if (!numla_test_tmp_[0]) {
        snprintf(numla_test_tmp_, sizeof numla_test_tmp_, "/tmp/numla-test-XXXXXX");
        if (!mkdtemp(numla_test_tmp_)) {
            perror("mkdtemp");
            abort();
        }
        atexit(numla_test_tmp_cleanup);
    }
    return numla_test_tmp_;
}

size_t numla_test_mutate_json(uint8_t *buf, size_t len, size_t keep, numla_test_rng *rng)
{
    int edits = 1 + (int)(numla_test_rng_u64(rng) % 4);
    for (int e = 0; e < edits && len > keep + 1; e++) {
        size_t at = keep + (size_t)(numla_test_rng_u64(rng) % (len - keep));
        switch (numla_test_rng_u64(rng) % 5) {
        case 0: buf[at] ^= (uint8_t)(1u << (numla_test_rng_u64(rng) % 8)); break;
        case 1: buf[at] = (uint8_t)"0123456789-.e"[numla_test_rng_u64(rng) % 13]; break;
        case 2: buf[at] = (uint8_t)"{}[],:\" \\n"[numla_test_rng_u64(rng) % 10]; break;
        case 3: memmove(buf + at, buf + at + 1, len - at - 1); len--; break;
        default: len = at + 1; break;
        }
    }
    return len;
}
