/* launch/plan.c — binding plans and the mpirun line (see plan.h). */
#include "launch/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void numla_launch_plan_destroy(numla_launch_plan **pp)
{
    if (!pp || !*pp)
        return;
    numla_launch_plan *p = *pp;
    for (int r = 0; r < p->num_ranks; r++)
        free(p->ranks[r].cpus);
    free(p->ranks);
    free(p);
    *pp = NULL;
}

static int numla_plan_cmp_int_(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

numla_status numla_launch_plan_make(const numla_topo *t, const numla_launch_opts *o,
                                    numla_launch_plan **out)
{
    if (!t || !o || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_launch_plan_make: NULL argument");
    *out = NULL;
    if (o->ranks < 0 || o->threads_per_rank < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "ranks (%d) and threads per rank (%d) must be >= 0",
                   o->ranks, o->threads_per_rank);
    int nc = numla_topo_compute_nodes(t);
    if (nc == 0)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "topology (%s) has no NUMA node with cores",
                   t->source);
    const int H = o->hosts > 1 ? o->hosts : 1;
    if (o->hosts < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "hosts (%d) must be >= 0", o->hosts);
    if (o->ranks % H)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "%d ranks over %d hosts: the rank count must be a "
                   "multiple of the host count (every host gets the same plan)", o->ranks, H);
    int R = o->ranks > 0 ? o->ranks / H : nc; /* ranks of one host */
    if (R > nc && !o->oversubscribe)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "%d ranks%s requested but the machine (%s) has only %d NUMA node%s with cores "
                   "(one rank per node); use fewer ranks or --oversubscribe",
                   R, H > 1 ? " per host" : "", t->source, nc, nc == 1 ? "" : "s");

    int *slots = malloc((size_t)nc * sizeof *slots);
    numla_launch_plan *p = calloc(1, sizeof *p);
    if (p)
        p->ranks = calloc((size_t)R * (size_t)H, sizeof *p->ranks);
    if (!slots || !p || !p->ranks) {
        free(slots);
        if (p)
            free(p->ranks);
        free(p);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "plan: out of memory");
    }
    p->num_ranks = R; /* the first host's; the others are copies (below) */
    p->num_hosts = H;
    p->ranks_per_host = R;
    p->opts = *o;
    for (int i = 0, k = 0; i < t->num_nodes; i++)
        if (t->nodes[i].num_cores > 0)
            slots[k++] = i;

    numla_status s = NUMLA_STATUS_OK;
    p->uniform = 1;
    for (int r = 0; r < R; r++) {
        numla_launch_rank *rk = &p->ranks[r];
        int j = r % nc, pos = r / nc;
        int share = R / nc + (j < R % nc); /* ranks on this node */
        const numla_topo_node *node = &t->nodes[slots[j]];
        int C = node->num_cores, lo, hi;
        if (share <= C) { /* contiguous, even split of the node's cores */
            lo = (int)((long)pos * C / share);
            hi = (int)((long)(pos + 1) * C / share);
        } else { /* more ranks than cores: ranks share cores */
            lo = pos % C;
            hi = lo + 1;
            p->oversubscribed = 1;
        }
        if (share > p->ranks_per_node)
            p->ranks_per_node = share;
        if (share > 1)
            p->oversubscribed = 1;
        rk->node = node->os_index;
        rk->node_slot = slots[j];
        rk->num_cores = hi - lo;
        int ncpu = 0;
        for (int c = lo; c < hi; c++)
            ncpu += o->hyperthreads ? node->cores[c].num_pus : (node->cores[c].num_pus > 0);
        rk->cpus = malloc((size_t)(ncpu ? ncpu : 1) * sizeof *rk->cpus);
        if (!rk->cpus) {
            s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                                "plan: out of memory");
            goto fail;
        }
        for (int c = lo; c < hi; c++)
            for (int u = 0; u < node->cores[c].num_pus && (o->hyperthreads || u < 1); u++)
                rk->cpus[rk->num_cpus++] = node->cores[c].pus[u];
        qsort(rk->cpus, (size_t)rk->num_cpus, sizeof *rk->cpus, numla_plan_cmp_int_);
        rk->threads = o->threads_per_rank ? o->threads_per_rank : rk->num_cpus;
        if (rk->threads > rk->num_cpus) {
            if (!o->oversubscribe) {
                s = numla_error_set(NUMLA_STATUS_INVALID_ARG, __FILE__, __LINE__, __func__,
                                    "%d threads per rank requested but rank %d (NUMA node %d) "
                                    "has only %d CPUs; use fewer threads or --oversubscribe",
                                    rk->threads, r, rk->node, rk->num_cpus);
                goto fail;
            }
            p->oversubscribed = 1;
        }
        if (r == 0 || rk->num_cores < p->cores_per_rank)
            p->cores_per_rank = rk->num_cores;
        if (r == 0 || rk->threads < p->threads_per_rank)
            p->threads_per_rank = rk->threads;
        if (r > 0 && (rk->num_cores != p->ranks[0].num_cores || rk->threads != p->ranks[0].threads))
            p->uniform = 0;
    }
    /* Every other host runs the same plan (each is assumed to have this topology). */
    for (int r = R; r < R * H; r++) {
        numla_launch_rank *rk = &p->ranks[r];
        *rk = p->ranks[r % R];
        rk->cpus = malloc((size_t)(rk->num_cpus ? rk->num_cpus : 1) * sizeof *rk->cpus);
        if (!rk->cpus) {
            s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                                "plan: out of memory");
            goto fail;
        }
        memcpy(rk->cpus, p->ranks[r % R].cpus, (size_t)rk->num_cpus * sizeof *rk->cpus);
        p->num_ranks = r + 1;
    }
    free(slots);
    *out = p;
    return NUMLA_STATUS_OK;

fail:
    free(slots);
    numla_launch_plan_destroy(&p);
    return s;
}

static int numla_plan_in_(const int *set, int n, int cpu)
{
    for (int i = 0; i < n; i++)
        if (set[i] == cpu)
            return 1;
    return 0;
}

numla_status numla_launch_plan_restrict(const numla_topo *t, numla_launch_plan *p, int rank,
                                        const int *allowed, int num_allowed, int *changed)
{
    if (changed)
        *changed = 0;
    if (!t || !p || (num_allowed > 0 && !allowed))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_launch_plan_restrict: NULL argument");
    if (rank < 0 || rank >= p->num_ranks)
        NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE, "cannot restrict rank %d: the plan has %d ranks",
                   rank, p->num_ranks);
    numla_launch_rank *rk = &p->ranks[rank];
    int ht = p->opts.hyperthreads;
    /* Walk the machine's cores once per pass: pass 0 keeps the plan's allowed CPUs, pass 1
     * (only when pass 0 kept none) takes the allowed CPUs wherever they are. */
    int *cpus = malloc((size_t)(t->num_pus > 0 ? t->num_pus : 1) * sizeof *cpus);
    if (!cpus)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "plan: out of memory");
    int n = 0, cores = 0, node = -1, slot = -1;
    for (int pass = 0; pass < 2 && n == 0; pass++) {
        cores = 0;
        for (int i = 0; i < t->num_nodes; i++)
            for (int c = 0; c < t->nodes[i].num_cores; c++) {
                const numla_topo_core *core = &t->nodes[i].cores[c];
                int took = 0;
                for (int u = 0; u < core->num_pus && (ht || !took) && n < t->num_pus; u++) {
                    int pu = core->pus[u];
                    if (!numla_plan_in_(allowed, num_allowed, pu) ||
                        (pass == 0 && !numla_plan_in_(rk->cpus, rk->num_cpus, pu)))
                        continue;
                    cpus[n++] = pu;
                    took = 1;
                    if (node < 0) {
                        node = t->nodes[i].os_index;
                        slot = i;
                    }
                }
                cores += took;
            }
    }
    if (n == 0) {
        free(cpus);
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "rank %d: none of its %d allowed CPUs is a core's "
                   "CPU of the topology (%s)", rank, num_allowed, t->source);
    }
    qsort(cpus, (size_t)n, sizeof *cpus, numla_plan_cmp_int_);
    int same = n == rk->num_cpus && !memcmp(cpus, rk->cpus, (size_t)n * sizeof *cpus);
    if (same) {
        free(cpus);
        return NUMLA_STATUS_OK;
    }
    free(rk->cpus);
    rk->cpus = cpus;
    rk->num_cpus = n;
    rk->num_cores = cores;
    if (node != rk->node) {
        rk->node = node;
        rk->node_slot = slot;
    }
    if (!p->opts.threads_per_rank)
        rk->threads = n;
    if (changed)
        *changed = 1;
    return NUMLA_STATUS_OK;
}

numla_status numla_launch_plan_mpirun(const numla_launch_plan *p,
                                      const numla_launch_mpirun_opts *mo, int argc,
                                      char *const *argv, char ***out_argv, int *out_argc)
{
    if (!p || !mo || !mo->exe || !out_argv || !out_argc || (argc && !argv))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_launch_plan_mpirun: NULL argument");
    if (mo->hosts && mo->num_hosts != p->num_hosts)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "mpirun line: %d host names for a plan over %d hosts",
                   mo->num_hosts, p->num_hosts);
    if (!mo->hosts && p->num_hosts > 1)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "mpirun line: a plan over %d hosts needs their names",
                   p->num_hosts);
    enum { MAX_OWN = 26, WORD = 64 };
    char own[MAX_OWN][WORD];
    const char *word[MAX_OWN]; /* own[i], or the host list (longer than a WORD) */
    char *host_arg = NULL;
    int n = 0;
#define NUMLA_PLAN_ARG(...) (word[n] = own[n], snprintf(own[n++], WORD, __VA_ARGS__))
    NUMLA_PLAN_ARG("%s", mo->mpirun ? mo->mpirun : "mpirun");
    NUMLA_PLAN_ARG("-n");
    NUMLA_PLAN_ARG("%d", p->num_ranks);
    if (mo->hosts) { /* --host h1:K,h2:K: K slots on each, the ranks of one host's plan */
        size_t len = 1;
        for (int h = 0; h < mo->num_hosts; h++)
            len += strlen(mo->hosts[h]) + 16;
        host_arg = malloc(len);
        if (!host_arg)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "mpirun line: out of memory");
        size_t used = 0;
        for (int h = 0; h < mo->num_hosts; h++)
            used += (size_t)snprintf(host_arg + used, len - used, "%s%s:%d", h ? "," : "",
                                     mo->hosts[h], p->ranks_per_host);
        NUMLA_PLAN_ARG("--host");
        word[n++] = host_arg;
    }
    NUMLA_PLAN_ARG("--map-by");
    NUMLA_PLAN_ARG("ppr:%d:numa:PE=%d", p->ranks_per_node, p->cores_per_rank);
    NUMLA_PLAN_ARG("--bind-to");
    NUMLA_PLAN_ARG(p->oversubscribed ? "core:overload-allowed" : "core");
    if (p->oversubscribed)
        NUMLA_PLAN_ARG("--oversubscribe");
    if (mo->as_root)
        NUMLA_PLAN_ARG("--allow-run-as-root");
    if (mo->report_bindings)
        NUMLA_PLAN_ARG("--report-bindings");
    if (p->opts.threads_per_rank || p->opts.oversubscribe || p->opts.hyperthreads ||
        p->num_hosts > 1) {
        char plan[WORD - 16] = "";
        size_t used = 0;
        if (p->opts.threads_per_rank)
            used += (size_t)snprintf(plan + used, sizeof plan - used, "threads=%d,",
                                     p->opts.threads_per_rank);
        if (p->opts.oversubscribe)
            used += (size_t)snprintf(plan + used, sizeof plan - used, "oversubscribe=1,");
        if (p->opts.hyperthreads)
            used += (size_t)snprintf(plan + used, sizeof plan - used, "hyperthreads=1,");
        if (p->num_hosts > 1)
            used += (size_t)snprintf(plan + used, sizeof plan - used, "hosts=%d,",
                                     p->num_hosts);
        plan[used - 1] = '\0'; /* drop the trailing comma */
        NUMLA_PLAN_ARG("-x");
        NUMLA_PLAN_ARG("NUMLA_PLAN=%s", plan);
    }
    NUMLA_PLAN_ARG("-x");
    NUMLA_PLAN_ARG("OMP_NUM_THREADS=%d", p->threads_per_rank);
    NUMLA_PLAN_ARG("-x");
    if (mo->keep_omp_places) {
        NUMLA_PLAN_ARG("OMP_PLACES");
        NUMLA_PLAN_ARG("-x");
        NUMLA_PLAN_ARG("OMP_PROC_BIND");
    } else {
        int ht = p->num_ranks > 0 && p->ranks[0].num_cpus > p->ranks[0].num_cores;
        NUMLA_PLAN_ARG(ht ? "OMP_PLACES=threads" : "OMP_PLACES=cores");
        NUMLA_PLAN_ARG("-x");
        NUMLA_PLAN_ARG("OMP_PROC_BIND=close");
    }
#undef NUMLA_PLAN_ARG
    int total = n + 1 + argc;
    size_t bytes = (size_t)(total + 1) * sizeof(char *);
    for (int i = 0; i < n; i++)
        bytes += strlen(word[i]) + 1;
    bytes += strlen(mo->exe) + 1;
    for (int i = 0; i < argc; i++)
        bytes += strlen(argv[i]) + 1;
    char **v = malloc(bytes);
    if (!v) {
        free(host_arg);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "mpirun line: out of memory");
    }
    char *dst = (char *)(v + total + 1);
    for (int i = 0; i < total; i++) {
        const char *src = i < n ? word[i] : i == n ? mo->exe : argv[i - n - 1];
        size_t len = strlen(src) + 1;
        memcpy(dst, src, len);
        v[i] = dst;
        dst += len;
    }
    v[total] = NULL;
    free(host_arg);
    *out_argv = v;
    *out_argc = total;
    return NUMLA_STATUS_OK;
}

numla_status numla_launch_opts_from(const char *plan, int job_size, numla_launch_opts *o)
{
    if (!o)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_launch_opts_from: NULL");
    if (job_size > 0)
        o->ranks = job_size;
    if (!plan || !*plan)
        return NUMLA_STATUS_OK;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", plan);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '='), *end = NULL;
        long v = eq ? strtol(eq + 1, &end, 10) : -1;
        if (!eq || *end || v < 0)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "NUMLA_PLAN='%s': bad item '%s' (expected "
                       "threads=N, oversubscribe=0|1, hyperthreads=0|1, hosts=N)", plan, tok);
        *eq = '\0';
        if (!strcmp(tok, "threads")) o->threads_per_rank = (int)v;
        else if (!strcmp(tok, "oversubscribe")) o->oversubscribe = v != 0;
        else if (!strcmp(tok, "hyperthreads")) o->hyperthreads = v != 0;
        else if (!strcmp(tok, "hosts")) o->hosts = (int)v;
        else
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "NUMLA_PLAN='%s': unknown key '%s'", plan, tok);
    }
    return NUMLA_STATUS_OK;
}

/* names[n] (each a malloc'd copy) into one NULL-terminated allocation. */
static numla_status numla_plan_hosts_pack_(char **names, int n, char ***out_hosts, int *out_n)
{
    size_t bytes = (size_t)(n + 1) * sizeof(char *);
    for (int i = 0; i < n; i++)
        bytes += strlen(names[i]) + 1;
    char **v = malloc(bytes);
    if (!v)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "host list: out of memory");
    char *dst = (char *)(v + n + 1);
    for (int i = 0; i < n; i++) {
        size_t len = strlen(names[i]) + 1;
        memcpy(dst, names[i], len);
        v[i] = dst;
        dst += len;
    }
    v[n] = NULL;
    *out_hosts = v;
    *out_n = n;
    return NUMLA_STATUS_OK;
}

/* Split text into host names: sep ',' (a list) or '\n' (a hostfile, first word of each line,
 * '#' to the end of the line ignored). */
static numla_status numla_plan_hosts_split_(const char *text, int hostfile, const char *what,
                                            char ***out_hosts, int *out_n)
{
    if (!text || !out_hosts || !out_n)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "%s: NULL argument", what);
    *out_hosts = NULL;
    *out_n = 0;
    char *buf = strdup(text);
    size_t cap = strlen(text) / 2 + 2;
    char **names = malloc(cap * sizeof *names);
    numla_status s = NUMLA_STATUS_OK;
    int n = 0, line = 0;
    if (!buf || !names) {
        s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                            "%s: out of memory", what);
        goto done;
    }
    for (char *cur = buf; cur;) {
        char *item = cur, *next = strchr(cur, hostfile ? '\n' : ',');
        if (next)
            *next++ = '\0';
        cur = next;
        line++;
        if (hostfile) {
            char *hash = strchr(item, '#');
            if (hash)
                *hash = '\0';
            item += strspn(item, " \t\r");
            item[strcspn(item, " \t\r")] = '\0';
            if (!*item)
                continue;
        }
        if (!*item || strchr(item, ':') || strchr(item, ' ')) {
            s = numla_error_set(NUMLA_STATUS_INVALID_ARG, __FILE__, __LINE__, __func__,
                                "%s: %s %d: bad host name '%s' (a name without ':slots'; "
                                "--ranks-per-host says how many ranks each host gets)",
                                what, hostfile ? "line" : "entry", line, item);
            goto done;
        }
        for (int i = 0; i < n; i++)
            if (!strcmp(names[i], item)) {
                s = numla_error_set(NUMLA_STATUS_INVALID_ARG, __FILE__, __LINE__, __func__,
                                    "%s: host '%s' is named twice (one entry per host)", what,
                                    item);
                goto done;
            }
        names[n++] = item;
    }
    if (n == 0)
        s = numla_error_set(NUMLA_STATUS_INVALID_ARG, __FILE__, __LINE__, __func__,
                            "%s: no host named", what);
    else
        s = numla_plan_hosts_pack_(names, n, out_hosts, out_n);
done:
    free(names);
    free(buf);
    return s;
}

numla_status numla_launch_hosts_parse(const char *list, char ***out_hosts, int *out_n)
{
    NUMLA_CHECK(numla_plan_hosts_split_(list, 0, "--hosts", out_hosts, out_n));
    return NUMLA_STATUS_OK;
}

numla_status numla_launch_hostfile_parse(const char *text, char ***out_hosts, int *out_n)
{
    NUMLA_CHECK(numla_plan_hosts_split_(text, 1, "hostfile", out_hosts, out_n));
    return NUMLA_STATUS_OK;
}

char *numla_launch_shell_join(int argc, char *const *argv)
{
    size_t cap = 1;
    for (int i = 0; i < argc; i++)
        cap += 4 * strlen(argv[i]) + 3;
    char *out = malloc(cap), *d = out;
    if (!out)
        return NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int plain = *a != '\0';
        for (const char *q = a; *q; q++)
            if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:=,@%+-",
                        *q))
                plain = 0;
        if (i)
            *d++ = ' ';
        if (plain) {
            d += sprintf(d, "%s", a);
            continue;
        }
        *d++ = '\'';
        for (const char *q = a; *q; q++) {
            if (*q == '\'') {
                memcpy(d, "'\\''", 4);
                d += 4;
            } else {
                *d++ = *q;
            }
        }
        *d++ = '\'';
    }
    *d = '\0';
    return out;
}
