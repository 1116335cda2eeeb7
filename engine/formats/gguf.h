/* engine/formats/gguf.h — read-only access to GGUF files (llama.cpp's model format) through mmap.
 *
 * A GGUF file (versions 2 and 3, little-endian; both use 64-bit counts) is
 *   "GGUF"  u32 version  u64 tensor_count  u64 kv_count
 *   kv_count x  (string key, u32 value type, value)
 *   tensor_count x  (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset)
 *   padding to `general.alignment` (default 32), then the data section; each tensor's offset
 *   is relative to the data section and a multiple of the alignment.
 * A string is u64 length + bytes (no NUL); an array is u32 element type, u64 count, elements
 * (arrays of strings and arrays of arrays included).
 *
 * numla_gguf_open(path) maps the file, parses and validates everything up front: magic and
 * version, every length against the bytes left (a truncated file is an error, never a read
 * past the end), key and tensor names unique and free of NUL bytes, the alignment a power of
 * two, n_dims <= 4, every ne >= 0 with their product and the byte count free of overflow,
 * ne[0] a multiple of the type's block, a known ggml type, offsets aligned, every tensor inside
 * the data section and no two overlapping. Any violation is NUMLA_STATUS_FORMAT (or
 * UNSUPPORTED for version 1, big-endian files and newer versions) with a message naming the
 * file and the key or tensor; nothing is left open.
 *
 * Split files (llama.cpp's gguf-split: `NAME-00001-of-00009.gguf`, keys `split.no` (0-based),
 * `split.count`, `split.tensors.count`): opening any part opens every part next to it and
 * presents them as one set of tensors; the metadata is the first part's. A missing part is
 * NUMLA_STATUS_IO naming its path; a part whose split keys disagree is FORMAT.
 *
 * The mapped bytes are for copying out at load time (the engine runs from memory it owns,
 * docs/design.md §3). Not collective; every rank opens the files itself.
 */
#ifndef NUMLA_ENGINE_FORMATS_GGUF_H
#define NUMLA_ENGINE_FORMATS_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "common/ggml_types.h"
#include "common/status.h"

enum {
    NUMLA_GGUF_MAX_DIMS = 4,          /* ggml's GGML_MAX_DIMS */
    NUMLA_GGUF_DEFAULT_ALIGNMENT = 32,
    NUMLA_GGUF_MAX_NESTING = 8,       /* arrays of arrays deeper than this are rejected */
};

/* Metadata value types (the file's u32 codes). */
typedef enum numla_gguf_vtype {
    NUMLA_GGUF_UINT8 = 0,
    NUMLA_GGUF_INT8 = 1,
    NUMLA_GGUF_UINT16 = 2,
    NUMLA_GGUF_INT16 = 3,
    NUMLA_GGUF_UINT32 = 4,
    NUMLA_GGUF_INT32 = 5,
    NUMLA_GGUF_FLOAT32 = 6,
    NUMLA_GGUF_BOOL = 7,
    NUMLA_GGUF_STRING = 8,
    NUMLA_GGUF_ARRAY = 9,
    NUMLA_GGUF_UINT64 = 10,
    NUMLA_GGUF_INT64 = 11,
    NUMLA_GGUF_FLOAT64 = 12,
    NUMLA_GGUF_VTYPE_COUNT,
} numla_gguf_vtype;

/* The ggml tensor types (codes, names, block shapes) are common/ggml_types.h's one table. */


/* A string: NUL-terminated copy, len bytes (a value may hold NUL bytes; keys and names not). */
typedef struct numla_gguf_str {
    const char *s;
    uint64_t len;
} numla_gguf_str;

/* One metadata value. Arrays hold their elements in native form: uint8_t .. double for the
 * numeric types, uint8_t (0 or 1) for BOOL, numla_gguf_str for STRING, numla_gguf_value (each
 * itself an ARRAY) for ARRAY. */
typedef struct numla_gguf_value {
    numla_gguf_vtype type;
    union {
        uint64_t u;       /* UINT8 .. UINT64 */
        int64_t i;        /* INT8 .. INT64 */
        double f;         /* FLOAT32, FLOAT64 */
        int b;            /* BOOL: 0 or 1 */
        numla_gguf_str str;
        struct {
            numla_gguf_vtype type;
            uint64_t count;
            const void *items; /* (count) elements, see above */
        } arr;
    } v;
} numla_gguf_value;

typedef struct numla_gguf_kv {
    const char *key;
    numla_gguf_value value;
} numla_gguf_kv;

typedef struct numla_gguf_tensor {
    const char *name;    /* e.g. "blk.0.attn_kv_a_mqa.weight" */
    uint32_t type;       /* numla_ggml_type */
    int32_t ndim;
    int64_t ne[NUMLA_GGUF_MAX_DIMS]; /* ggml order: ne[0] is the contiguous (input) dimension;
                                        a weight (N, K) in PyTorch's order is ne = {K, N, 1, 1};
                                        dimensions past ndim are 1 */
    const void *data;    /* mapped, read-only, nbytes long, aligned as the file's alignment */
    size_t nbytes;
    uint64_t offset;     /* in its file's data section */
    const char *file;    /* path of the part that holds it */
} numla_gguf_tensor;

typedef struct numla_gguf numla_gguf; /* opaque: the mapped parts */

numla_status numla_gguf_open(const char *path, numla_gguf **out);
void numla_gguf_close(numla_gguf **g);
/* Drop the resident pages of bytes [p, p + n) of one of g's parts (a tensor's data, once the
 * loader has copied what it needs): they stay readable (engine/formats/map_release.h). A range
 * outside g's parts is ignored. Local. */
void numla_gguf_release(const numla_gguf *g, const void *p, size_t n);

/* The path the set was opened under (the first part of a split set). */
const char *numla_gguf_path(const numla_gguf *g);
uint32_t numla_gguf_version(const numla_gguf *g);
/* Number of parts (1 for an unsplit file) and the data alignment of the first. */
int32_t numla_gguf_part_count(const numla_gguf *g);
uint32_t numla_gguf_alignment(const numla_gguf *g);

int64_t numla_gguf_kv_count(const numla_gguf *g);
const numla_gguf_kv *numla_gguf_kv_at(const numla_gguf *g, int64_t i);
/* The value under `key`, or NULL. */
const numla_gguf_value *numla_gguf_find(const numla_gguf *g, const char *key);

/* Typed getters. A missing key, or a value of another kind, is NUMLA_STATUS_FORMAT naming the
 * file and the key. The integer getters take any integer type whose value fits the result;
 * get_f64 takes floats and integers; get_str takes STRING; get_array takes an ARRAY whose
 * elements are `elem` (NUMLA_GGUF_VTYPE_COUNT: any). */
numla_status numla_gguf_get_u32(const numla_gguf *g, const char *key, uint32_t *out);
numla_status numla_gguf_get_u64(const numla_gguf *g, const char *key, uint64_t *out);
numla_status numla_gguf_get_i64(const numla_gguf *g, const char *key, int64_t *out);
numla_status numla_gguf_get_f64(const numla_gguf *g, const char *key, double *out);
numla_status numla_gguf_get_f32(const numla_gguf *g, const char *key, float *out);
numla_status numla_gguf_get_bool(const numla_gguf *g, const char *key, int *out);
numla_status numla_gguf_get_str(const numla_gguf *g, const char *key, const char **out);
numla_status numla_gguf_get_array(const numla_gguf *g, const char *key, numla_gguf_vtype elem,
                                  const numla_gguf_value **out);

/* Name of a value type ("uint32", "array"); "?" when out of range. */
const char *numla_gguf_vtype_name(uint32_t t);

int64_t numla_gguf_tensor_count(const numla_gguf *g);
const numla_gguf_tensor *numla_gguf_tensor_at(const numla_gguf *g, int64_t i);
/* The tensor called `name`, or NULL. */
const numla_gguf_tensor *numla_gguf_tensor_find(const numla_gguf *g, const char *name);
/* The tensor `name` with ggml dims ne[0..ndim) (trailing 1s may be left out); FORMAT naming the
 * file, the tensor and both shapes when it is missing or shaped otherwise. */
numla_status numla_gguf_tensor_expect(const numla_gguf *g, const char *name, int32_t ndim,
                                      const int64_t *ne, const numla_gguf_tensor **out);

#endif
