/* kernels/blocking.h — the blocking of every kernel family in one table: tile sizes (rows of x
 * and of W per register tile), cache blocks (K and N blocks, bytes kept in L1 or L2), the row
 * counts from which a many-row path takes over, and the work split of the attention frames.
 * One section per family, each constant with its reason; figures in docs/linear.md,
 * docs/decode.md, docs/quantization.md. Constants that define a packed layout (a panel's rows,
 * a piece's byte offsets) stay with the layout's description in the family's _internal.h.
 * Included by the families' _internal.h; nothing outside kernels/ includes it. */
#ifndef NUMLA_KERNELS_BLOCKING_H
#define NUMLA_KERNELS_BLOCKING_H

/* ---- linear (kernels/linear.c; the packed panel of 16 rows: kernels/linear_internal.h) --- */

enum {
    NUMLA_LINEAR_AVX512_MR = 12,    /* avx512 tiles: rows of x per micro-kernel (x 2 panels);
                                       up to this many rows a row's bits do not depend on M */
    NUMLA_LINEAR_AVX512_ROW_GROUP = 6, /* avx512, M <= MR: rows per tile, each output in two
                                       accumulator chains (even and odd k) as the one-row GEMV
                                       has it; 6 rows x 2 panels x 2 chains = 24 zmm + 4 widened
                                       weights (x comes as the FMAs' broadcast operands). One
                                       tile widens each weight vector once for all its rows, a
                                       second group widens it again: 5-6 rows in one tile cost
                                       less than groups of 4 + 1-2 (docs/linear.md) */
    NUMLA_LINEAR_AVX2_MR = 4,       /* avx2 tiles: rows of x per micro-kernel (x 1 panel) */
    NUMLA_LINEAR_AVX2_ROW_GROUP = 2, /* avx2, 2 < M <= ROWS_MAX_M: rows per tile, each output in
                                       two accumulator chains (even and odd k) as the one-row
                                       GEMV has it: 2 rows x 2 halves x 2 chains = 8 ymm */
    NUMLA_LINEAR_AVX2_ROWS_MAX_M = 12, /* avx2: up to this many rows a row's bits do not depend
                                       on M (as avx512's up to NUMLA_LINEAR_AVX512_MR) */
    NUMLA_LINEAR_AMX_MIN_M = 13,    /* amx level, bf16 W, K % 32 == 0: M from this runs the
                                       split-bf16 tile GEMM (kernels/x86/linear_amx.c); fewer
                                       rows run avx512's few-row tiles, whose rows do not depend
                                       on M (a verify step's rows get a one-row step's bits) */
    NUMLA_LINEAR_AMX_KC = 2048,     /* AMX, M > 32: K block. Larger blocks won: C round trips
                                       through y cost more than A (32 rows x KC x hi/lo) leaving
                                       L1 for L2 (figures: docs/linear.md) */
    NUMLA_LINEAR_AMX_NC = 16,       /* AMX, M > 32: panels per N block: 16 x 16 x KC bf16 = 1 MiB
                                       of W and the block's C (M x 256 fp32) stay in L2 across
                                       the row blocks (figures: docs/linear.md) */
    NUMLA_LINEAR_AMX_PAIR_X_BYTES = 1 << 20, /* AMX, M > 32: when a thread's packed x (rows x
                                       K x hi/lo bf16) is at most this, it runs pair-major over
                                       all of K (the expert shapes: up to 128 rows at K = 2048);
                                       a larger bound makes 160-192 rows slower (docs/linear.md) */
    NUMLA_LINEAR_ROW_AHEAD = 4096,  /* avx512 tiles, one x row (decode): software prefetch
                                       distance in each panel's stream (bytes) */
    NUMLA_LINEAR_KC = 512,          /* K block of the GEMM paths (multiple of 2): 2 bf16 panels
                                       x 512 = 32 KiB stay in L1 while x rows stream from L2 */
};

/* ---- qlinear (kernels/qlinear.c: fp8-block, int8-row, W8A8) ------------------------------ */

/* Which path takes how many rows (kernels/qlinear_internal.h, numla_qlinear_gemm_applies). */
enum {
    NUMLA_QLINEAR_GEMM_MIN_M = 4,  /* int8-row: x-blocked 4 x 4 tiles from this many rows
                                      (fewer: the 4 x 2 few-row tiles; figures: docs/linear.md) */
    NUMLA_QLINEAR_PANEL_MIN_M = 13, /* fp8: the panel GEMM from this many rows (from 8 it beat
                                      the few-row tiles, docs/linear.md; up to 12 rows each row
                                      keeps the one-row bits, kernels/qlinear.h) */
    NUMLA_QLINEAR_ROW_PLANES_GEMM_MIN_M = 4, /* int8-row's planes (VNNI): the packed-panel GEMM
                                                 from this many rows (fewer: the few-row kernel,
                                                 which the amx level shares; docs/linear.md) */
    NUMLA_QLINEAR_ROW_PLANES_MR = 3,         /* ... whose x tile: 3 rows x 3 planes = 9 chains */
    NUMLA_QLINEAR_ROW_PLANES_LONG_K = 4096,  /* ... one x row past this K (packed bytes): */
    NUMLA_QLINEAR_ROW_PLANES_KB = 256,       /* K blocks of this many columns (their planes stay
                                                in L1) over */
    NUMLA_QLINEAR_ROW_PLANES_G = 8,          /* groups of this many weight rows (24 accumulators;
                                                one x row, one thread: 14.7-16.6 GB/s at K = 5632
                                                to 16384 against 10.2-14.4 one row at a time, at
                                                K = 4096 13.4-14.5 against 15-17; docs/linear.md) */
    NUMLA_QLINEAR_VNNI_GEMM_MIN_M = 32, /* W8A8 (VNNI): the packed-panel GEMM from this many rows,
                                           where repacking the weights per call pays (figures:
                                           docs/linear.md) */
    NUMLA_QLINEAR_VNNI_PANEL_BYTES = 256 << 10, /* W8A8 GEMM: packed weight columns per chunk
                                                   (per thread, in L2 while x runs over them) */
};

/* fp8's panel GEMM (kernels/x86/qlinear_avx512.c): per thread a KC x NC fp32 panel of
 * dequantized weights and an MR x KC micro-panel of x. */
enum {
    NUMLA_QLINEAR_PANEL_KC = 256, /* K block: two scale blocks; a multiple of 128 and 64 */
    NUMLA_QLINEAR_PANEL_NC = 512, /* N block: KC x NC fp32 = 512 KiB, half an L2 */
    NUMLA_QLINEAR_PANEL_NR = 32,  /* panel width: two zmm of weights per k */
    NUMLA_QLINEAR_PANEL_MR = 12,  /* x rows per micro-tile: 12 x 2 accumulators */
};

/* The avx512 tiles of fp8 and int8-row (kernels/x86/qlinear_avx512.c). */
enum {
    NUMLA_QLINEAR_NW = 4, /* weight rows per tile: each x load feeds 4 FMAs, so x (43 KiB at
                             K = 10944, past L1) is read from L2 once per 4 rows, not per row */
    NUMLA_QLINEAR_MR = 2, /* x rows per tile: 4 x 2 accumulators + 4 x 2 totals in registers */
    NUMLA_QLINEAR_WIDE_NW = 2, /* M in [WIDE_MR, WIDE_MAX_M]: 2 weight rows x 4 x rows, so */
    NUMLA_QLINEAR_WIDE_MR = 4, /* each widened weight feeds 4 FMAs (widening is the cost) */
    NUMLA_QLINEAR_WIDE_MAX_M = 12, /* past this, reading x from L2 once per 2 weight rows costs
                                      more than the widening saved (docs/linear.md) */
    NUMLA_QLINEAR_GEMM_XBYTES = 384 << 10, /* int8-row many rows: x block bytes kept in L2 */
    NUMLA_QLINEAR_GEMM_MIN_MB = 36,        /* ... but at least this many x rows per block */
};

/* fp8's GEMV (M = 1), one row at a time (kernels/x86/qlinear_avx512.c): software prefetch in
 * the weight stream (bytes ahead), and the 128-wide scale blocks of a row run interleaved. */
enum { NUMLA_QLINEAR_ROW_AHEAD = 8192, NUMLA_QLINEAR_ROW_BLOCKS = 4 };

/* W8A8 on vpdpbusd (kernels/x86/qlinear_avx512vnni.c): the few-row tiles, then the
 * packed-panel GEMM's micro-tile. */
enum {
    NUMLA_QLINEAR_VNNI_NW = 4, /* weight rows per tile */
    NUMLA_QLINEAR_VNNI_MR = 4, /* x rows per tile: 16 accumulators, 8 loads per 16 vpdpbusd */
};

enum {
    NUMLA_QLINEAR_VG_MR = 6, /* x rows per micro-tile */
    NUMLA_QLINEAR_VG_NR = 4, /* 16-column panels per micro-tile: 6 x 4 = 24 accumulators */
};

/* The avx2 level of fp8, int8-row and W8A8 (kernels/x86/qlinear_avx2.c; 16 ymm registers). */
enum {
    NUMLA_QLINEAR_AVX2_NW = 2,       /* few-row tiles: weight rows x ... */
    NUMLA_QLINEAR_AVX2_MR = 4,       /* ... x rows (8 accumulators, each widened weight feeds 4) */
    NUMLA_QLINEAR_AVX2_GEMV_NW = 4,  /* int8-row and W8A8 at M = 1: rows in flight */
    NUMLA_QLINEAR_AVX2_BLOCKS = 8,   /* fp8 at M = 1: 128-wide blocks of a row in flight (8
                                        FMA chains: 2 pipes x 4 cycles of latency) */
    NUMLA_QLINEAR_AVX2_AHEAD = 8192, /* M = 1: software prefetch distance in the weight stream */
    NUMLA_QLINEAR_AVX2_PANEL_MR = 6, /* fp8 panel GEMM: x rows x 16 columns (12 accumulators) */
};

/* fp8's GEMV on vdpbf16ps (kernels/x86/qlinear_fp8_avx512bf16.c). */
enum {
    NUMLA_QL16_MAX_K = 20480,   /* x packed on each thread's stack: 4 bytes per column; longer
                                   rows run the avx512 variant */
    NUMLA_QL16_AHEAD = 8192,    /* software prefetch distance in the weight stream, bytes */
    NUMLA_QL16_BLOCKS = 4,      /* 128-wide blocks of a row in flight */
    NUMLA_QL16_PAIR_K = 4096,   /* longer rows go two at a time (numla_ql16_row2) */
    NUMLA_QL16_MAX_M = 12,      /* 2 to this many x rows: the GEMV's arithmetic for each, every
                                   weight group widened once for a group of rows (numla_ql16_rows) */
    NUMLA_QL16_ROW_GROUP = 4,   /* x rows per group: 16 chains and 4 totals in registers */
    NUMLA_QL16_ROWS_RB = 16,    /* 2..MAX_M rows: weight rows per run, their totals kept between
                                   K-blocks (16 x MAX_M x 64 bytes on the stack) */
    NUMLA_QL16_ROWS_X_BYTES = 16384, /* ... packed x per K-block (m rows, 4 bytes a column): in L1
                                   beside the weight slices */
    NUMLA_QL16_ROWS_AHEAD = 8,  /* ... software prefetch: the same columns this many rows on */
    NUMLA_QL16_X_PAD = 32,      /* words after each packed hi and lo row (64 bytes) */
};

/* The amx level: W8A8 on TDPBSSD (kernels/x86/qlinear_amx.c), fp8 and int8-row on TDPBF16PS
 * (kernels/x86/qlinear_fp8_amx.c; int8-row: kernels/x86/qlinear_int8row_amx.c). */
enum {
    NUMLA_QLINEAR_AMX_MIN_M = 16,          /* amx level, W8A8: M from this (and N >= 16) runs the
                                              tiles; below, one x tile would be mostly padding
                                              and the VNNI GEMV is bandwidth-bound anyway */
    NUMLA_QLINEAR_AMX_X_BYTES = 1 << 20,   /* amx level: packed x rows per pass over the
                                              thread's weights, so they stay in L2 */
};

#define NUMLA_QLINEAR_AMX_FP8_X_ALL ((size_t)32 << 20) /* amx level, fp8 slabs: packed x of all K
                                              at once (more rows: passes that widen again) */
enum {
    NUMLA_QLINEAR_AMX_WIDE_MIN_M = 13,      /* amx level, fp8: M from this (and N >= 16) runs the
                                              tiles (13 to 15 rows pad one x tile and still beat
                                              avx512's M = 13-15 path: docs/linear.md); up to 12
                                              rows keep their one-row bits (kernels/qlinear.h) */
    NUMLA_QLINEAR_AMX_WIDE_MAX_CHUNK = 256, /* amx level: most x rows packed at once (its
                                              per-thread fp32 sums live on the stack) */
    NUMLA_QLINEAR_AMX_FP8_SLAB_MIN_K = 4096, /* amx level, fp8: larger K widens its weights a slab
                                              at a time, once per call (a chunk of all of K holds
                                              32-64 rows there, so per-chunk widening dominated:
                                              docs/linear.md) */
    NUMLA_QLINEAR_AMX_FP8_KS = 1024,       /* the slab's columns (its partial sums go into y) */
    NUMLA_QLINEAR_AMX_FP8_NB = 4096,       /* weight rows widened at once (8 MiB of bf16 of one
                                              slab in the workspace, each thread its rows) */
    NUMLA_QLINEAR_AMX_FP8_KC = 256,        /* amx level, fp8 slabs with power-of-two scales: k
                                              columns per C pass (C stored and reloaded between
                                              them); below the slabs a k block is one scale
                                              block, 4 weight tiles x 128 k: two 16 KiB A
                                              buffers stay in L1 */
    NUMLA_QLINEAR_AMX_ROW_TILE_MIN_M = 4,  /* amx level, int8-row: fewer rows run the same
                                              exact integer sums on VNNI (the same bits; a
                                              decode GEMV is faster there, docs/linear.md) */
    NUMLA_QLINEAR_ROW_PLANES_AHEAD = 8192, /* int8-row's planes, few rows: software prefetch
                                              distance in a thread's weight stream (bytes, as
                                              W8A8's GEMV) */
    NUMLA_QLINEAR_ROW_PLANES_MIN_WEIGHTS = 1 << 18, /* int8-row's planes: smaller weights (the
                                              absorbed attention's per-head W_UK, W_UV) keep
                                              avx512's path, whose per-call cost is lower */
};

/* ---- qblock (kernels/qblock.c: ggml block encodings; panel layouts: qblock_internal.h) --- */

/* F32 mode, the avx512 level (kernels/x86/qblock_avx512.c): rows per pass, then the many-row
 * path that decodes NW weight rows per KC columns into fp32 scratch once and runs NW x MR tiles
 * over a chunk of x rows, one of the GEMV's four accumulator sets a pass. */
enum {
    NUMLA_QBLOCK_MR = 2,                   /* x rows per pass over a weight row */
    NUMLA_QBLOCK_ROW_AHEAD = 8192,         /* rows pass: software prefetch distance in the
                                              thread's one stream of rows (bytes) */
};

enum {
    NUMLA_QBLOCK_MANY_MIN_M = 4,
    NUMLA_QBLOCK_MANY_NW = 4,     /* weight rows decoded together */
    NUMLA_QBLOCK_MANY_MR = 6,     /* x rows per tile: 4 x 6 pairs, one accumulator set a pass */
    NUMLA_QBLOCK_MANY_KC = 4096,  /* columns decoded per block (a multiple of 256): the sums are
                                     stored between blocks only past it (V4-Flash's experts
                                     have K 4096 and 2048); 64 KiB of weights in L2 */
    NUMLA_QBLOCK_MANY_CHUNK = 64, /* x rows whose sums a thread keeps (64 KiB) */
    NUMLA_QBLOCK_MANY_PAD = 16,   /* floats past each row of the decoded weights and of the
                                     thread's copy of the chunk's x rows: rows 16 KiB apart (K
                                     4096) put a tile's 10 streams in one L1 set of 8 ways */
};

/* F32 mode, the amx level (kernels/x86/qblock_f32_amx.c: MXFP4 decoded to bf16 tiles, x split
 * hi + lo): from AMX_F32_MIN_M rows (fewer run the avx512 many-row path, whose per-row FMAs
 * cost less than decoding a tile for one or two x tiles); x packed in chunks of AMX_F32_CHUNK
 * rows, the weights' tiles decoded per AMX_F32_KC columns, so a chunk's packed slice of x for
 * those columns (CHUNK x KC x 4 bytes: 1 MiB) stays in a Sapphire Rapids L2 (2 MiB) while a
 * thread's weight pairs run over it. */
enum {
    NUMLA_QBLOCK_AMX_F32_MIN_M = 8,
    NUMLA_QBLOCK_AMX_F32_CHUNK = 256, /* a multiple of 16 */
    NUMLA_QBLOCK_AMX_F32_KC = 1024,   /* a multiple of 32 */
};

/* Q8 mode, the vnni level: the row GEMM (kernels/x86/qblock_gemm_avx512vnni.c) from GEMM_MIN_M
 * rows, its x tile and the weight bytes a thread walks per pass of the x tiles (kept in L2); x
 * quantized by the calling team from QUANT_TEAM_GROUPS groups of 256 (fewer: on the calling
 * thread, which saves an OpenMP region per linear). */
enum { NUMLA_QBLOCK_GEMM_MIN_M = 1 }; /* every M: the tile of one row is the GEMV */

enum { NUMLA_QBLOCK_GEMM_MR = 6, NUMLA_QBLOCK_GEMM_CHUNK = 96 * 1024 };

enum { NUMLA_QBLOCK_QUANT_TEAM_GROUPS = 64 };

/* Q8 mode, the avx2 level (kernels/x86/qblock_avx2.c): x rows per tile (a weight block unpacked
 * once for them) and the weight bytes a thread walks per pass of the x tiles (kept in L2). */
enum { NUMLA_QBLOCK_AVX2_MR = 4, NUMLA_QBLOCK_AVX2_CHUNK = 96 * 1024 };
/* F32 mode at the avx2 level from AVX2_MANY_MIN_M rows (kernels/x86/qblock_f32_avx2.c):
 * the avx512 many-row path's structure (weight rows decoded per column block, sums per chunk of
 * NUMLA_QBLOCK_MANY_CHUNK x rows, one accumulator set a pass) in 16 ymm registers: 3 x 4
 * accumulators, 3 weight vectors, x from memory. A cache line holds two 8-float vectors of
 * different sets, so the block is short enough for a tile's weights and x (14 KiB) to stay in
 * L1 across the four passes. */
enum {
    NUMLA_QBLOCK_AVX2_MANY_MIN_M = 8, /* fewer x rows keep the tiles (faster there on Zen 4 at avx2) */
    NUMLA_QBLOCK_AVX2_MANY_NW = 3,
    NUMLA_QBLOCK_AVX2_MANY_MR = 4,
    NUMLA_QBLOCK_AVX2_MANY_KC = 512,
};

/* Q8 mode, the panel GEMM (kernels/x86/qblock_panel_avx512vnni.c, and the amx tiles) from
 * PANEL_MIN_M rows, NP panels packed at a time; its register tile. */
enum { NUMLA_QBLOCK_PANEL_MIN_M = 16, NUMLA_QBLOCK_PANEL_NP = 4 };

enum {
    NUMLA_QBLOCK_PN_MR = 4, /* x rows per register tile */
    NUMLA_QBLOCK_PN_NR = 2, /* 16-row panels per register tile: 4 x 2 int32 + 4 x 2 fp32 sums */
};

/* Q8 mode, the stored 16-row panels (PANEL16, kernels/x86/qblock_p16_avx512vnni.c). */
enum {
    NUMLA_QBLOCK_P16_MR = 3,            /* x rows per tile */
    NUMLA_QBLOCK_P16_CHUNK = 128 * 1024 /* panel bytes a thread walks per pass of the x tiles */
};

/* ---- MLA attention (kernels/mla_attn.c: the work split) ---------------------------------- */

/* Keys per chunk: a row's keys are cut at multiples of it from key 0 and the chunks' states
 * combined in a fixed tree (kernels/mla_attn.h, the bits contract), so it bounds how finely one
 * long sequence splits over threads (and how evenly a short one does) and sets how often a
 * state is combined (a pass over 16 x Dc fp32 a unit per chunk). A multiple of every chunk
 * kernel's key tile (NUMLA_MLA_KT, NUMLA_MLA16_KT, NUMLA_MLA_AVX2_KT). */
enum { NUMLA_MLA_ATTN_KEY_CHUNK = 128 };
enum { NUMLA_MLA_ATTN_VSHARE_KEYS = NUMLA_MLA_ATTN_KEY_CHUNK }; /* = the frame's chunk */

enum {
    NUMLA_MLA_ATTN_ITEMS_PER_THREAD = 8,
    NUMLA_MLA_ATTN_MIN_CHUNK = 256, /* (unit, key) pairs: below this an item costs more than it
                                       balances */
    NUMLA_MLA_ATTN_MAX_GROUP = 8,   /* units per head group: 8 x depth x 32 KiB of stack states */
};

/* The chunk kernels' key tiles (the tuning builds may override the #defines): avx2
 * (kernels/x86/mla_attn_avx2.c), avx512 and amx (kernels/x86/mla_attn_avx512.c),
 * avx512bf16 (kernels/x86/mla_attn_avx512bf16.c). */
enum { NUMLA_MLA_AVX2_KT = 32 }; /* keys per tile */
#ifndef NUMLA_MLA_KT
#define NUMLA_MLA_KT 64 /* avx512, amx: keys per tile */
#endif
#ifndef NUMLA_MLA_PREFETCH
#define NUMLA_MLA_PREFETCH 1 /* avx512, amx: Q·K prefetches the rows two keys ahead */
#endif
#ifndef NUMLA_MLA16_KT
#define NUMLA_MLA16_KT 64 /* avx512bf16: keys per tile, a multiple of NUMLA_MLA16_TB */
#endif
#ifndef NUMLA_MLA16_PREFETCH
#define NUMLA_MLA16_PREFETCH 1
#endif
enum { NUMLA_MLA16_TB = 16 }; /* avx512bf16: keys per Q·K register block */
#ifndef NUMLA_MLA16_PF_KEYS
#define NUMLA_MLA16_PF_KEYS 16 /* avx512bf16: Q·K prefetches the rows this many keys ahead */
#endif

/* ---- MHA prefill (kernels/mha_prefill.c: one table for every variant) -------------------- */

enum {
    NUMLA_MHA_PREFILL_QB = 32, /* query rows per task (one task = sequence × head × QB rows) */
    NUMLA_MHA_PREFILL_KB = 64, /* keys per online-softmax step */
};

/* ---- DSA (kernels/dsa.c: the indexer's and the sparse attention's work split) ------------ */

enum {
    NUMLA_DSA_KEY_BLOCK = 256, /* keys scored per inner call before they enter the heap */
    NUMLA_DSA_IX_KEYS = 4,     /* avx512 indexer: keys widened and scored together */
    NUMLA_DSA_BF_KEYS = 4,     /* avx512bf16 indexer: keys scored together */
    NUMLA_DSA_VN_KEYS = 4,     /* avx512vnni (int8) indexer: keys scored together */
    NUMLA_DSA_AVX2_KEYS = 4,   /* avx2 indexers (float, int8): keys scored together (the lane
                                  sums take four) */
};

enum {
    NUMLA_DSA_ITEMS_PER_THREAD = 8,
    NUMLA_DSA_INDEX_MIN_CHUNK = 2048, /* keys: a split costs a topk-sized candidate merge, so a
                                         part also has >= 2 · topk keys, and a query is cut in
                                         at most `threads` parts */
    NUMLA_DSA_ATTN_MIN_CHUNK = 256,   /* rows: below this a split costs more than it balances */
    NUMLA_DSA_INDEX_GROUP = 8,        /* multi-token: unsplit queries of a sequence per item, so
                                         each key block is read once for all of them */
};

/* ---- merge_attn, kv_write: below these sizes a thread team costs more than the work ------ */

enum {
    NUMLA_MERGE_ATTN_PARALLEL_ELEMS = 64 * 1024, /* elements merged */
    NUMLA_KV_WRITE_PARALLEL_BYTES = 256 * 1024,  /* bytes written to the cache */
};

#endif
