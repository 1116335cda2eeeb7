/* engine/formats/safetensors_internal.h — what the safetensors reader (safetensors.c) and writer
 * (safetensors_writer.c) share. Included only by engine/formats/safetensors*.c. */
#ifndef NUMLA_ENGINE_FORMATS_SAFETENSORS_INTERNAL_H
#define NUMLA_ENGINE_FORMATS_SAFETENSORS_INTERNAL_H

/* Formats for file and tensor names inside error messages: hostile names can be huge. */
#define P_ "%.300s"
#define T_ "%.200s"

#endif
