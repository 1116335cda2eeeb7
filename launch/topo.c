/* launch/topo.c — hwloc topology reading (see topo.h). */
#include "launch/topo.h"

#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The NUMA node local to `obj`: the best memory child of its nearest ancestor with memory. */
static hwloc_obj_t numla_topo_local_node_(hwloc_obj_t obj)
{
    hwloc_obj_t a = obj;
    while (a && a->memory_arity == 0)
        a = a->parent;
    if (!a)
        return NULL;
    hwloc_obj_t best = NULL;
    int best_dram = 0;
    for (hwloc_obj_t m = a->memory_first_child; m; m = m->next_sibling) {
        hwloc_obj_t n = m; /* memory-side caches sit between the parent and the node */
        while (n && n->type != HWLOC_OBJ_NUMANODE)
            n = n->memory_first_child;
        if (!n)
            continue;
        int dram = !n->subtype || !strcmp(n->subtype, "DRAM");
        if (!best || dram > best_dram || (dram == best_dram && n->os_index < best->os_index)) {
            best = n;
            best_dram = dram;
        }
    }
    return best;
}

void numla_topo_destroy(numla_topo **pt)
{
    if (!pt || !*pt)
        return;
    numla_topo *t = *pt;
    for (int i = 0; i < t->num_nodes; i++)
        free(t->nodes[i].cores);
    free(t->nodes);
    if (t->hw)
        hwloc_topology_destroy(t->hw);
    free(t);
    *pt = NULL;
}

numla_status numla_topo_load(const char *synthetic, const char *xml_path, numla_topo **out)
{
    if (!out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_topo_load: out is NULL");
    *out = NULL;
    numla_topo *t = calloc(1, sizeof *t);
    if (!t)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "topology: out of memory");
    if (hwloc_topology_init(&t->hw)) {
        free(t);
        NUMLA_FAIL(NUMLA_STATUS_INTERNAL, "hwloc_topology_init failed");
    }
    numla_status s = NUMLA_STATUS_OK;
    if (synthetic) {
        snprintf(t->source, sizeof t->source, "synthetic: %s", synthetic);
        if (hwloc_topology_set_synthetic(t->hw, synthetic)) {
            s = numla_error_set(NUMLA_STATUS_INVALID_ARG, __FILE__, __LINE__, __func__,
                                "invalid hwloc synthetic topology '%s'", synthetic);
            goto fail;
        }
    } else if (xml_path) {
        snprintf(t->source, sizeof t->source, "xml: %s", xml_path);
        if (hwloc_topology_set_xml(t->hw, xml_path)) {
            s = numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__,
                                "cannot read hwloc XML topology '%s'", xml_path);
            goto fail;
        }
    } else {
        snprintf(t->source, sizeof t->source, "this machine");
        /* hwloc's x86 backend reads CPUID on each PU by binding the calling thread to it in
         * turn, PUs outside the process's mask included (sched_setaffinity allows that under
         * taskset or mpirun's binding): that widens the CPU set numla was given (docs/design.md
         * §1.1). The Linux backend reads the same packages, cores, caches and NUMA nodes from
         * sysfs without moving any thread. */
#if HWLOC_API_VERSION >= 0x00020100
        hwloc_topology_set_components(t->hw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "x86");
#endif
    }
    if (hwloc_topology_load(t->hw)) {
        s = numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                            "hwloc could not load the topology (%s)", t->source);
        goto fail;
    }
    t->this_system = hwloc_topology_is_thissystem(t->hw);
    if (!synthetic && !xml_path && !t->this_system) /* hwloc took HWLOC_XMLFILE/_SYNTHETIC */
        snprintf(t->source, sizeof t->source, "another machine (hwloc's environment variables)");
    t->num_packages = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PACKAGE);
    t->num_pus = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PU);
    hwloc_obj_type_t core_type = HWLOC_OBJ_CORE;
    t->num_cores = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_CORE);
    if (t->num_cores <= 0) { /* no core level (some VMs, minimal synthetic strings) */
        core_type = HWLOC_OBJ_PU;
        t->num_cores = t->num_pus;
    }
    t->num_nodes = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_NUMANODE);
    if (t->num_nodes <= 0) {
        s = numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                            "topology (%s) has no NUMA node", t->source);
        goto fail;
    }
    t->nodes = calloc((size_t)t->num_nodes, sizeof *t->nodes);
    int *slot = calloc((size_t)t->num_cores, sizeof *slot);
    if (!t->nodes || !slot) {
        free(slot);
        s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                            "topology: out of memory");
        goto fail;
    }
    for (int i = 0; i < t->num_nodes; i++) {
        hwloc_obj_t n = hwloc_get_obj_by_type(t->hw, HWLOC_OBJ_NUMANODE, (unsigned)i);
        t->nodes[i].os_index = (int)n->os_index;
        t->nodes[i].memory_bytes = n->attr ? n->attr->numanode.local_memory : 0;
        t->nodes[i].subtype = n->subtype ? n->subtype : "";
        t->nodes[i].package = -1;
    }
    /* Two passes: count each node's cores, then fill them. */
    for (int pass = 0; pass < 2; pass++) {
        for (int c = 0; c < t->num_cores; c++) {
            hwloc_obj_t core = hwloc_get_obj_by_type(t->hw, core_type, (unsigned)c);
            hwloc_obj_t node = numla_topo_local_node_(core);
            if (!node)
                continue;
            numla_topo_node *tn = &t->nodes[node->logical_index];
            if (pass == 0) {
                slot[c] = tn->num_cores++;
                continue;
            }
            numla_topo_core *tc = &tn->cores[slot[c]];
            int pu;
            hwloc_bitmap_foreach_begin(pu, core->cpuset)
            {
                if (tc->num_pus < NUMLA_TOPO_MAX_SMT)
                    tc->pus[tc->num_pus++] = pu;
            }
            hwloc_bitmap_foreach_end();
            hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(t->hw, HWLOC_OBJ_PACKAGE, core);
            if (pkg && tn->package < 0)
                tn->package = (int)pkg->logical_index;
        }
        if (pass == 0)
            for (int i = 0; i < t->num_nodes; i++) {
                t->nodes[i].cores = calloc((size_t)t->nodes[i].num_cores + 1,
                                           sizeof *t->nodes[i].cores);
                if (!t->nodes[i].cores) {
                    free(slot);
                    s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                                        "topology: out of memory");
                    goto fail;
                }
            }
    }
    free(slot);
    *out = t;
    return NUMLA_STATUS_OK;

fail:
    numla_topo_destroy(&t);
    return s;
}

int numla_topo_compute_nodes(const numla_topo *t)
{
    int n = 0;
    for (int i = 0; i < t->num_nodes; i++)
        n += t->nodes[i].num_cores > 0;
    return n;
}

char *numla_topo_cpulist(const int *cpus, int n, char *buf, size_t cap)
{
    size_t used = 0;
    if (cap)
        buf[0] = '\0';
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && cpus[j + 1] == cpus[j] + 1)
            j++;
        int w = j > i ? snprintf(buf + used, cap - used, "%s%d-%d", used ? "," : "", cpus[i],
                                 cpus[j])
                      : snprintf(buf + used, cap - used, "%s%d", used ? "," : "", cpus[i]);
        if (w < 0 || (size_t)w >= cap - used) {
            if (cap > 4)
                strcpy(buf + cap - 4, "...");
            break;
        }
        used += (size_t)w;
        i = j + 1;
    }
    return buf;
}
