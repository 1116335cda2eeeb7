/* kernels/ref/kv_write_ref.c — scalar reference of concat_and_cache_mla (kernels/kv_write.h):
 * element by element through the exact conversions of common/dtype.h. */
#include "kernels/kv_write_internal.h"

#include <string.h>

static void numla_kv_row_ref(void *dst, numla_dtype dt, const void *src, numla_dtype st, int64_t n)
{
    /* Same dtype is a byte copy: going through f32 would requiet signalling NaNs. */
    if (dt == st) {
        memcpy(dst, src, (size_t)n * numla_dtype_size(dt));
        return;
    }
    for (int64_t i = 0; i < n; i++)
        numla_store_f32(dst, dt, (size_t)i, numla_load_f32(src, st, (size_t)i));
}

void numla_kv_write_ref(const numla_kv_write_args *a, int64_t t_begin, int64_t t_end)
{
    const size_t ss = numla_dtype_size(a->src_dtype), ks = numla_dtype_size(a->kv_dtype);
    const size_t row = (size_t)a->kv_lora_rank + (size_t)a->rope_dim; /* elements per cache row */
    for (int64_t t = t_begin; t < t_end; t++) {
        int64_t slot = a->slot_mapping[t];
        if (slot < 0)
            continue;
        /* slot = block * block_size + offset, and the cache is dense in (block, offset), so the
         * row index is the slot itself; 64-bit throughout (docs/design.md §3). */
        char *dst = (char *)a->kv_cache + (size_t)slot * row * ks;
        const char *c = (const char *)a->kv_c + (size_t)t * (size_t)a->kv_c_stride * ss;
        numla_kv_row_ref(dst, a->kv_dtype, c, a->src_dtype, a->kv_lora_rank);
        if (a->rope_dim > 0) {
            const char *p = (const char *)a->k_pe + (size_t)t * (size_t)a->k_pe_stride * ss;
            numla_kv_row_ref(dst + (size_t)a->kv_lora_rank * ks, a->kv_dtype, p, a->src_dtype,
                             a->rope_dim);
        }
    }
}
