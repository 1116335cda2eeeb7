/* kernels/isa.h — instruction-set levels, the CPU's feature bits, and the one dispatch every
 * kernel family uses.
 *
 * Levels (numla_isa) say which instructions a variant is compiled for; they include the ones
 * below (amx -> avx512bf16 -> avx512 -> avx2 -> ref). Kernels read no environment: callers pass
 * the level to run (the engine's from its settings, engine/cli/settings.h), so tests can loop
 * over every level the CPU supports.
 *
 * Dispatch (docs/design.md §4.2), BLIS's context in C: each family keeps one table
 *   static const numla_variant *const table[NUMLA_ISA_COUNT][kinds]
 * whose ref row names a variant for every kind and whose higher rows name only what a level
 * overrides (NULL inherits the level below). A kind is one job of the family (qlinear: one per
 * format; dsa: the int8 and float indexers; sink_attn: fp32 and bf16 rows; most families have
 * one). Each entry is the head of the family's own variant struct (its functions follow the
 * head) and says what it needs beyond its level: CPU features (numla_cpu_feature) and,
 * through applies(), the calls it takes.
 * numla_isa_pick walks down from the requested level to the first entry that runs the call;
 * ref runs every call. The CPU's features are read once here (numla_cpu_features), never by a
 * family.
 */
#ifndef NUMLA_KERNELS_ISA_H
#define NUMLA_KERNELS_ISA_H

#include <stddef.h>

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
/* The microarchitecture, where the best variant of a kernel depends on more than the ISA level.
 * A level says which instructions exist; how fast they issue differs between CPUs that share
 * it. The one difference numla's kernels act on (docs/decode.md, docs/linear.md):
 *   vdpbf16ps (32 bf16 MACs) issues at the fp32 FMA's instruction rate on AMD Zen 4 and Zen 5,
 *   so it doubles the multiply-add rate; on Intel (Cooper Lake, Sapphire Rapids) it issues at
 *   half that rate, so it only ties fp32 FMAs, and a kernel that splits an fp32 operand into
 *   two bf16 halves loses to the FMA kernel there.
 * Detected from CPUID (vendor, family); overridable (the settings' NUMLA_UARCH) and logged like
 * the ISA level. "generic" is any other CPU: the level's own variants run, as before. */
typedef enum numla_uarch {
    NUMLA_UARCH_GENERIC = 0,
    NUMLA_UARCH_ZEN4,  /* AMD family 19h with AVX-512 (Genoa, Bergamo, Siena, Ryzen 7000) */
    NUMLA_UARCH_ZEN5,  /* AMD family 1Ah (Turin, Ryzen 9000) */
    NUMLA_UARCH_INTEL, /* GenuineIntel */
    NUMLA_UARCH_COUNT,
} numla_uarch;

const char *numla_uarch_name(numla_uarch u);
/* Parse "generic", "zen4", "zen5", "intel". */
numla_status numla_uarch_parse(const char *name, numla_uarch *out);
/* The microarchitecture of a CPUID vendor string (12 characters, e.g. "AuthenticAMD"), display
 * family (base + extended) and whether the CPU has AVX-512F: a pure function, for the tests. */
numla_uarch numla_uarch_from_cpuid(const char *vendor, unsigned family, int avx512);
/* This CPU's (numla_uarch_from_cpuid of CPUID leaves 0, 1 and 7), read once with the feature
 * bits. */
numla_uarch numla_uarch_detect(void);
/* The microarchitecture to tune for, given a requested name (NULL, "" or "auto": detected) —
 * an unknown name is an error naming `what`. Any name is accepted on any CPU: it changes only
 * which of the level's own variants run, never the instructions used. Logs the choice at
 * debug level. */
numla_status numla_uarch_choose(const char *what, const char *name, numla_uarch detected,
                                numla_uarch *out);
/* Whether vdpbf16ps doubles the fp32 FMA multiply-add rate on u (see above; generic: assumed,
 * which is what the avx512bf16 variants were written for). */
int numla_uarch_bf16_dot_fast(numla_uarch u);

/* Features a variant may need beyond its level's instructions (numla_variant.needs). */
typedef enum numla_cpu_feature {
    NUMLA_CPU_VNNI = 1u << 0,     /* AVX512-VNNI (vpdpbusd): CPUID.(7,0):ECX bit 11 */
    NUMLA_CPU_VBMI = 1u << 1,     /* AVX512-VBMI (vpermb): CPUID.(7,0):ECX bit 1 */
    NUMLA_CPU_AMX_BF16 = 1u << 2, /* AMX-TILE + AMX-BF16 (EDX bits 24, 22) and the OS granted this
                                     process the tile state (arch_prctl, asked once) */
    NUMLA_CPU_AMX_INT8 = 1u << 3, /* NUMLA_CPU_AMX_BF16 and AMX-INT8 (EDX bit 25) */
} numla_cpu_feature;

/* This CPU's numla_cpu_feature bits, read once (thread-safe; CPUID traps to the hypervisor in
 * a VM, and dispatches ask on every call). */
unsigned numla_cpu_features(void);
/* Whether every feature bit in `needs` is present. */
static inline int numla_cpu_has(unsigned needs) { return (numla_cpu_features() & needs) == needs; }

/* The head of every kernel family's variant struct (the family's functions follow it). */
typedef struct numla_variant {
    const char *name; /* for reports and tests: "avx512", "amx", "i8-avx512vnni" ... */
    unsigned needs;   /* numla_cpu_feature bits beyond the level's instructions; 0: none */
    /* NULL: the variant takes every call; else whether it takes this one (`call`: the family's
     * call struct, e.g. the args, or the weight and M), and when not, the level below runs it */
    int (*applies)(const void *call);
} numla_variant;

/* The one walk down: the highest level at or below isa (ref when out of range) whose entry
 * table[level][kind] exists, whose CPU needs are met and that applies to `call`. table is a
 * family's [NUMLA_ISA_COUNT][kinds] table; its ref row must be complete (ref runs every call,
 * its applies is not asked). Per call, not per element: a few loads and at most one indirect
 * call per level. */
numla_isa numla_isa_pick(numla_isa isa, const numla_variant *const *table, int kinds, int kind,
                         const void *call);

/* The lower of a and b: a family whose faster path is turned off runs at
 * numla_isa_min(isa, NUMLA_ISA_AVX512BF16). */
static inline numla_isa numla_isa_min(numla_isa a, numla_isa b) { return a < b ? a : b; }

#endif
