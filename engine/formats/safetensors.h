/* engine/formats/safetensors.h — read-only access to a model's safetensors files through mmap.
 *
 * numla_safetensors_open(dir) opens `dir/model.safetensors`, or (when that is absent, as transformers
 * does) every shard named by `dir/model.safetensors.index.json`, maps each file read-only and validates every header with
 * a JSON library: header length inside the file, every tensor's [begin, end) inside the data
 * section, no two tensors overlapping, byte count = product(shape) × dtype size, known dtype.
 * Any violation is NUMLA_STATUS_FORMAT with a message naming the file and the tensor.
 * The mapped bytes are for copying out at load time only: the engine runs from memory it owns
 * (docs/design.md §3). Not collective; every rank opens the files itself.
 * `dir` may also name a single .safetensors file, which is then opened on its own.
 */
#ifndef NUMLA_ENGINE_SAFETENSORS_H
#define NUMLA_ENGINE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"

enum { NUMLA_SAFETENSORS_MAX_DIMS = 8 };

typedef struct numla_safetensors_tensor {
    const char *name;                 /* e.g. "model.layers.0.self_attn.kv_a_proj_with_mqa.weight" */
    numla_dtype dtype;                /* F32, F16, BF16, F8_E4M3 or I8 (the 1-byte types are raw
                                       * codes; their scales are separate tensors) */
    int32_t ndim;
    int64_t shape[NUMLA_SAFETENSORS_MAX_DIMS];
    const void *data;                 /* mapped, read-only, nbytes long; not necessarily
                                       * aligned (tensors are packed back to back): memcpy out */
    size_t nbytes;
    const char *file;                 /* path of the file that holds it */
    uint32_t ggml_type;               /* views only (numla_safetensors_view_create): with dtype
                                       * NUMLA_DTYPE_END, a GGUF tensor's ggml block type
                                       * (common/ggml_types.h), rows of whole blocks; else 0 */
} numla_safetensors_tensor;

typedef struct numla_safetensors_model numla_safetensors_model; /* opaque: the set of mapped files */

numla_status numla_safetensors_open(const char *dir, numla_safetensors_model **out);
void numla_safetensors_close(numla_safetensors_model **m);
/* Drop the resident pages of bytes [p, p + n) of one of m's files (a tensor's data, once the
 * loader has copied what it needs): they stay readable (engine/formats/map_release.h). A range
 * outside m's files is ignored. Local. */
void numla_safetensors_release(const numla_safetensors_model *m, const void *p, size_t n);

/* A model over tensors another reader maps (a GGUF file's, under the names a safetensors loader
 * asks for: engine/formats/gguf_deepseek4.h): the n descriptors are copied (names included; the
 * data stays the caller's, which must outlive the model), `source` names it in messages. A
 * name given twice is FORMAT naming it. numla_safetensors_release does nothing on it. Local. */
numla_status numla_safetensors_view_create(const numla_safetensors_tensor *tensors, int64_t n,
                                           const char *source, numla_safetensors_model **out);

/* The tensor called `name`, or NULL. */
const numla_safetensors_tensor *numla_safetensors_find(const numla_safetensors_model *m, const char *name);
int64_t numla_safetensors_count(const numla_safetensors_model *m);
const numla_safetensors_tensor *numla_safetensors_at(const numla_safetensors_model *m, int64_t i);

/* Check that `name` exists with the given shape (ndim entries); NUMLA_STATUS_FORMAT naming the
 * tensor, the file and both shapes otherwise. */
numla_status numla_safetensors_expect(const numla_safetensors_model *m, const char *name, int32_t ndim,
                             const int64_t *shape, const numla_safetensors_tensor **out);

/* Writer, for `numla synth` and tests: collects tensors and writes one file.
 * Tensors are copied at add time. */
typedef struct numla_safetensors_writer numla_safetensors_writer;
numla_status numla_safetensors_writer_create(numla_safetensors_writer **out);
numla_status numla_safetensors_writer_add(numla_safetensors_writer *w, const char *name, numla_dtype dtype,
                                 int32_t ndim, const int64_t *shape, const void *data);
/* Like writer_add, but the bytes are produced at write time, a chunk at a time:
 * fill(ctx, dst, offset, nbytes) writes bytes [offset, offset + nbytes) of the tensor to dst
 * (offset and nbytes are multiples of the element size; dst is suitably aligned). A multi-GB
 * file is never held in memory (numla synth). ctx must stay valid until writer_write returns. */
typedef numla_status (*numla_safetensors_fill_fn)(void *ctx, void *dst, size_t offset, size_t nbytes);
numla_status numla_safetensors_writer_add_fill(numla_safetensors_writer *w, const char *name, numla_dtype dtype,
                                      int32_t ndim, const int64_t *shape, numla_safetensors_fill_fn fill,
                                      void *ctx);
numla_status numla_safetensors_writer_write(const numla_safetensors_writer *w, const char *path);
void numla_safetensors_writer_destroy(numla_safetensors_writer **w);

#endif
