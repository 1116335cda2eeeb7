/* kernels/kv_write_internal.h — private to the kv_write family: the variant signature shared by
 * kernels/ref/kv_write_ref.c and kernels/x86/kv_write_<isa>.c, and the table the dispatcher
 * (kernels/kv_write.c) fills from them. Not part of the public contract (kernels/kv_write.h).
 */
#ifndef NUMLA_KERNELS_KV_WRITE_INTERNAL_H
#define NUMLA_KERNELS_KV_WRITE_INTERNAL_H

#include "kernels/kv_write.h"
#include "kernels/blocking.h"

/* Write tokens [t_begin, t_end) of validated args. Variants neither validate nor open
 * OpenMP regions: the dispatcher does both, once, for every variant. */
typedef void (*numla_kv_write_fn)(const numla_kv_write_args *a, int64_t t_begin, int64_t t_end);

void numla_kv_write_ref(const numla_kv_write_args *a, int64_t t_begin, int64_t t_end);
void numla_kv_write_avx2(const numla_kv_write_args *a, int64_t t_begin, int64_t t_end);
void numla_kv_write_avx512(const numla_kv_write_args *a, int64_t t_begin, int64_t t_end);

#endif
