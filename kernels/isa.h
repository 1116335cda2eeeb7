/* kernels/isa.h — instruction-set levels and the run-time choice among them.
 *
 * Every kernel family keeps one table indexed by numla_isa. The table starts as the scalar
 * reference (kernels/ref/, always compiled) at every level; a level with a native variant
 * overrides its entry, and a level without one inherits the entry of the level below
 * (avx512bf16 -> avx512 -> avx2 -> ref). Callers pass the isa they were given by
 * numla_isa_select(), so tests can loop over every level the CPU supports.
 */
#ifndef NUMLA_KERNELS_ISA_H
#define NUMLA_KERNELS_ISA_H

#include "common/status.h"

typedef enum numla_isa {
    NUMLA_ISA_REF = 0,    /* portable scalar C */
    NUMLA_ISA_AVX2,       /* AVX2 + FMA + F16C */
    NUMLA_ISA_AVX512,     /* AVX-512 F/BW/VL/DQ */
    NUMLA_ISA_AVX512BF16, /* AVX-512 + AVX512_BF16 (vdpbf16ps) */
    NUMLA_ISA_COUNT,
} numla_isa;

const char *numla_isa_name(numla_isa isa);
/* Parse "ref", "avx2", "avx512", "avx512bf16". */
numla_status numla_isa_parse(const char *name, numla_isa *out);
/* Whether the CPU (and OS, via XGETBV) supports the level. NUMLA_ISA_REF is always supported. */
int numla_isa_supported(numla_isa isa);
/* The best supported level. */
numla_isa numla_isa_best(void);
/* The level to run: NUMLA_ISA from the environment when set (an unknown name, or a level the
 * CPU lacks, is an error, never a silent fallback), else numla_isa_best(). Logs the choice
 * at debug level. */
numla_status numla_isa_select(numla_isa *out);
/* Bit i set when level i is supported (numla_isa_supported). */
unsigned numla_isa_supported_mask(void);
/* numla_isa_select's rule for a given NUMLA_ISA value (NULL or "" when unset) and mask of
 * supported levels (ref is always added): what select runs with the CPU's own mask, and what
 * tests run with a smaller one to reach the "CPU lacks this level" error on any machine. */
numla_status numla_isa_choose(const char *env, unsigned supported, numla_isa *out);

#endif
