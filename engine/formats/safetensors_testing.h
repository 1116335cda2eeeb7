/* engine/formats/safetensors_testing.h — test-only knobs of the safetensors writer. Only tests
 * call them (tests/unit/engine/synth/test_synth.c); build/numla never does. */
#ifndef NUMLA_ENGINE_FORMATS_SAFETENSORS_TESTING_H
#define NUMLA_ENGINE_FORMATS_SAFETENSORS_TESTING_H

#include <stddef.h>

/* The writer's chunk size from now on (rounded down to a multiple of 4; values below 4 restore
 * the default of 4 MiB), so tests can make chunks that split rows. Process-wide, not
 * thread-safe. Local. */
void numla_safetensors_testing_set_chunk_bytes(size_t bytes);

#endif
