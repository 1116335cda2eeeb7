/* kernels/isa.h — instruction-set levels and the run-time choice among them.
 *
 * Every kernel family keeps one table indexed by numla_isa. The table starts as the scalar
 * reference (kernels/ref/, always compiled) at every level; a level with a native variant
 * overrides its entry, and a level without one inherits the entry of the level below
 * (amx -> avx512bf16 -> avx512 -> avx2 -> ref). Kernels read no environment: callers pass the
 * level to run (the engine's from its settings, engine/cli/settings.h), so tests can loop over
 * every level the CPU supports.
 */
#ifndef NUMLA_KERNELS_ISA_H
#define NUMLA_KERNELS_ISA_H

#include "common/status.h"

typedef enum numla_isa {
    NUMLA_ISA_REF = 0,    /* portable scalar C */
    NUMLA_ISA_AVX2,       /* AVX2 + FMA + F16C */
    NUMLA_ISA_AVX512,     /* AVX-512 F/BW/VL/DQ */
    NUMLA_ISA_AVX512BF16, /* AVX-512 + AVX512_BF16 (vdpbf16ps) */
    NUMLA_ISA_AMX,        /* avx512bf16 + AMX-TILE/AMX-BF16 granted by the OS (kernels/x86/amx.h) */
    NUMLA_ISA_COUNT,
} numla_isa;

const char *numla_isa_name(numla_isa isa);
/* Parse "ref", "avx2", "avx512", "avx512bf16", "amx". */
numla_status numla_isa_parse(const char *name, numla_isa *out);
/* Whether the CPU (and OS, via XGETBV) supports the level. NUMLA_ISA_REF is always supported. */
int numla_isa_supported(numla_isa isa);
/* The best supported level. */
numla_isa numla_isa_best(void);
/* Bit i set when level i is supported (numla_isa_supported). */
unsigned numla_isa_supported_mask(void);
/* The level to run, given a requested name (NULL or "" when none: the best level in the mask)
 * and a mask of supported levels (ref is always added). An unknown name, or a level outside
 * the mask, is an error naming `what` (e.g. "NUMLA_ISA"), never a silent fallback. The
 * settings (engine/cli/settings.c) call it with the CPU's mask; tests with a smaller one to
 * reach the "CPU lacks this level" error on any machine. Logs the choice at debug level. */
numla_status numla_isa_choose(const char *what, const char *name, unsigned supported,
                              numla_isa *out);
/* The lower of a and b: a family whose faster path is turned off runs at
 * numla_isa_min(isa, NUMLA_ISA_AVX512BF16). */
static inline numla_isa numla_isa_min(numla_isa a, numla_isa b) { return a < b ? a : b; }

#endif
