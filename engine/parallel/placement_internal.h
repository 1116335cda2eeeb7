/* engine/parallel/placement_internal.h — placing one rank of the collective engine: its threads
 * (the launcher's binding plan) and its KV pool (sized from its NUMA node's free memory).
 * Included only by engine/parallel/{sharded_engine,placement}.c. */
#ifndef NUMLA_ENGINE_PLACEMENT_INTERNAL_H
#define NUMLA_ENGINE_PLACEMENT_INTERNAL_H

#include "comm/comm.h"
#include "common/status.h"
#include "engine/model/config.h"
#include "engine/model/kv_cache.h"
#include "engine/parallel/engine.h"

/* Apply the launch/ plan for rank of size (docs/design.md §1) when one can be made for this job on
 * this machine; otherwise rank 0 says why once (a warning when the job was started by
 * numla-launch, else a debug note) and the rank runs as placed by mpirun. Local. */
void numla_placement_bind(int rank, int size, const numla_engine_options *o);

/* The KV pool of this rank (*out), after the weights (so "free memory" excludes them); the
 * sizing rules are numla_engine_options' (num_blocks, kv_memory_bytes, kv_memory_fraction).
 * Collective over comm when sized from memory: every rank takes part, even one that failed
 * before (*failed set: it offers no memory and creates nothing). An explicit size the ranks of
 * a node cannot all have, or a share too small for one block, is an error rank 0 reports. */
numla_status numla_placement_kv_create(numla_comm *comm, const numla_model_config *cfg,
                                       const numla_engine_options *o, int *failed,
                                       numla_kv_cache **out);

#endif
