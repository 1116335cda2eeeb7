/* launch/topo.h — the machine as numla sees it (docs/design.md §1): NUMA nodes (sub-NUMA clusters
 * count as nodes), the physical cores local to each, each node's memory, packages. Read
 * through hwloc from this machine, an hwloc XML file or a synthetic description, so plans for
 * other machines can be computed and tested here. Decides nothing; launch/plan.h does.
 *
 * A core belongs to the NUMA node attached to its nearest ancestor that has memory children
 * (preferring ordinary DRAM, then the lowest OS index): that is how hwloc 2 places local
 * memory. A node no core belongs to — CXL or HBM memory, attached higher up or next to DRAM —
 * is memory-only (num_cores == 0) and gets no rank.
 */
#ifndef NUMLA_LAUNCH_TOPO_H
#define NUMLA_LAUNCH_TOPO_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

struct hwloc_topology;

enum { NUMLA_TOPO_MAX_SMT = 8 };

typedef struct numla_topo_core {
    int num_pus;
    int pus[NUMLA_TOPO_MAX_SMT]; /* (num_pus) OS indices of the core's hardware threads */
} numla_topo_core;

typedef struct numla_topo_node {
    int os_index;            /* node number as the OS / libnuma / mpirun see it */
    int package;             /* logical index of the package holding its cores; -1: none */
    uint64_t memory_bytes;   /* local memory of the node */
    const char *subtype;     /* hwloc subtype ("HBM", ...) or "" */
    int num_cores;
    numla_topo_core *cores;  /* (num_cores) in hwloc logical order */
} numla_topo_node;

typedef struct numla_topo {
    int num_nodes;
    numla_topo_node *nodes;  /* (num_nodes) in hwloc logical order */
    int num_packages;
    int num_cores;           /* physical cores of the machine */
    int num_pus;             /* hardware threads of the machine */
    int this_system;         /* 1 when loaded from this machine (binding is meaningful) */
    char source[256];        /* "this machine", "synthetic: ...", "xml: path" */
    struct hwloc_topology *hw;
} numla_topo;

/* Load a topology. synthetic (an hwloc synthetic string) or xml_path select another machine;
 * both NULL means this machine, where hwloc itself honours HWLOC_XMLFILE and HWLOC_SYNTHETIC
 * from the environment (the source string then says another machine; `numla topo` passes
 * them explicitly so it can name them). Reads no environment itself. Local. */
numla_status numla_topo_load(const char *synthetic, const char *xml_path, numla_topo **out);
/* Sets *t to NULL; NULL is a no-op. */
void numla_topo_destroy(numla_topo **t);

/* Number of nodes with at least one core. */
int numla_topo_compute_nodes(const numla_topo *t);

/* Format an ascending list of CPU numbers as "0-3,8,10-11" into buf; returns buf. */
char *numla_topo_cpulist(const int *cpus, int n, char *buf, size_t cap);

#endif
