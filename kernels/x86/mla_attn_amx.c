/* kernels/x86/mla_attn_amx.c — AMX-BF16 Q·K for the MLA attention chunk kernel: per 16 keys,
 * C (16 keys x 16 rows, fp32) += A (16 cache rows x 32 bf16, loaded straight from the paged
 * cache with the row stride) · B (16 pairs x 16 rows of q, the VNNI layout the avx512bf16
 * kernel already packs). Up to four 16-key groups run as independent accumulator chains so the
 * TDPBF16PS latency is hidden. The tile permission and
 * configuration are shared with the linear GEMM (kernels/x86/amx.h). */
#include "kernels/x86/mla_attn_amx.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/x86/amx.h"

int numla_mla_amx_enabled(void)
{
    const char *e = getenv("NUMLA_MLA_AMX");
    if (e && strcmp(e, "0") == 0)
        return 0;
    return numla_amx_usable();
}

void numla_mla_amx_begin(void) { numla_amx_tiles_begin(); }

void numla_mla_amx_end(void) { numla_amx_tiles_end(); }

/* NG groups of 16 keys: tiles 0..NG-1 accumulate, 4 holds B, 5 and 6 alternate A. */
static inline __attribute__((always_inline)) void
numla_mla_qk_amx_ng(const uint32_t *qv, int64_t w, const char *const *base, const size_t *stride,
                    float *S, const int NG)
{
    _tile_zero(0);
    if (NG > 1)
        _tile_zero(1);
    if (NG > 2)
        _tile_zero(2);
    if (NG > 3)
        _tile_zero(3);
    for (int64_t s = 0; s < w / 32; s++) {
        _tile_loadd(4, qv + s * 256, 64);
        _tile_loadd(5, base[0] + s * 64, stride[0]);
        _tile_dpbf16ps(0, 5, 4);
        if (NG > 1) {
            _tile_loadd(6, base[1] + s * 64, stride[1]);
            _tile_dpbf16ps(1, 6, 4);
        }
        if (NG > 2) {
            _tile_loadd(5, base[2] + s * 64, stride[2]);
            _tile_dpbf16ps(2, 5, 4);
        }
        if (NG > 3) {
            _tile_loadd(6, base[3] + s * 64, stride[3]);
            _tile_dpbf16ps(3, 6, 4);
        }
    }
    _tile_stored(0, S, 64);
    if (NG > 1)
        _tile_stored(1, S + 256, 64);
    if (NG > 2)
        _tile_stored(2, S + 512, 64);
    if (NG > 3)
        _tile_stored(3, S + 768, 64);
}

void numla_mla_qk_amx(const uint32_t *qv, int64_t w, const char *const *rows, int64_t nt,
                      float *S, uint16_t *stage)
{
    const size_t rowbytes = (size_t)w * 2;
    const char *base[4];
    size_t stride[4];
    int ng = (int)((nt + 15) / 16);
    for (int g = 0; g < ng; g++) {
        const char *const *r = rows + 16 * g;
        int64_t n = nt - 16 * g < 16 ? nt - 16 * g : 16;
        int contig = n == 16;
        for (int64_t i = 1; contig && i < 16; i++)
            contig = r[i] == r[0] + (size_t)i * rowbytes;
        if (contig) {
            base[g] = r[0];
            stride[g] = rowbytes;
            continue;
        }
        /* Small or partial blocks: copy the group's rows (keys past nt get zeros, never NaN
         * from rows past the sequence end). */
        char *st = (char *)(stage + (size_t)g * 16 * (size_t)w);
        for (int64_t i = 0; i < 16; i++) {
            if (i < n)
                memcpy(st + (size_t)i * rowbytes, r[i], rowbytes);
            else
                memset(st + (size_t)i * rowbytes, 0, rowbytes);
        }
        base[g] = st;
        stride[g] = rowbytes;
    }
    if (ng == 4)
        numla_mla_qk_amx_ng(qv, w, base, stride, S, 4);
    else if (ng == 3)
        numla_mla_qk_amx_ng(qv, w, base, stride, S, 3);
    else if (ng == 2)
        numla_mla_qk_amx_ng(qv, w, base, stride, S, 2);
    else
        numla_mla_qk_amx_ng(qv, w, base, stride, S, 1);
}
