/* comm/allreduce_shm.c — symmetric shared-memory allreduce for the ranks of one machine, and
 * the hierarchical allreduce over several machines built on it (docs/design.md §6). Owns the
 * shared window and its flag protocol; knows nothing of models.
 *
 * Several machines (the same number of ranks on each, more than one): the window spans the
 * ranks of this machine (MPI_COMM_TYPE_SHARED) and every step below runs inside each machine;
 * where a step has its machine's sum of a range (all of it in the small case, the rank's own
 * slice in the large case), the ranks holding that range on every machine (node rank j of each:
 * the "cross" communicator) MPI_Allgather their host sums and each adds them in machine order,
 * so the MPI traffic of a large message is split over the machine's ranks and the result stays
 * bitwise identical on every rank. Then the step goes on as on one machine.
 *
 * Window: MPI_Win_allocate_shared over the communicator, one segment per rank, each segment
 * page-aligned (alloc_shared_noncontig) and first written by its owner (and, on multi-node
 * machines, mbind-ed to the owner's node before any page exists) so it lives on the owner's
 * memory. (Open MPI 4.1 backs the window with one ftruncate-d /dev/shm file and allocates no
 * page up front, checked with strace, so placement is decided at first touch / by the mbind.)
 *
 *   segment of rank q:  [flag[0], total[0] | flag[1], total[1] | aborted (rank 0's segment)]
 *                       4 KiB header; total[p] is the message size of the step using set p and
 *                       shares flag[p]'s cache line, so a peer's wait brings it along
 *                       [ buf[0]: buf_bytes ][ buf[1]: buf_bytes ]
 * "Set p" is buf[p] of every segment (one slot per rank).
 *
 * Step s (one per chunk of at most buf_bytes, from 1) uses buffer set p = s & 1; rank q's data
 * goes to slot (q + (s-1)/2) mod R of the set (a rotation; d_q below is rank q's data, and a rank's
 * own d_me is always read from its private input, never from its shared slot):
 *   small (chunk <= rs_bytes): copy my data into my slot; flag[p] = 2s (release); wait for
 *     every peer's flag[p] >= 2s (acquire); out = d_0 + d_1 + ... in rank order.
 *   large: copy my data, except my own slice, into my slot; flag[p] = 2s-1; wait all >= 2s-1;
 *     reduce my slice (rank order) into x and publish it in my slot's slice; flag[p] = 2s; for
 *     each peer wait >= 2s and copy its slice from its slot.
 * Why slots rotate: the copy is bound by cache-line transfers between cores. A core that reads
 * a line another core modified takes it over (the writer's copy is invalidated, measured), so
 * with fixed slots every step paid two transfers per line and rank: the peer's data coming in,
 * and my own slot's lines coming back before I could overwrite them. With the rotation, two
 * ranks write each step into the slot they read two steps ago, whose lines they already hold:
 * one transfer per line (figures: docs/scaling.md). For the same
 * reason my own data is summed from my input: re-reading my slot while a peer reads it
 * bounces its lines. With more ranks a slot's lines have several readers; the rotation then
 * costs what fixed slots did. A small chunk stays in cache, so the slot's home node hardly
 * matters; large chunks are written to other ranks' nodes every other step.
 * Why no closing barrier: a rank reaching step s+2 (same buffer set as s) has seen every
 * peer's flag of step s+1, so every peer has finished reading the buffers of step s; within a
 * step the rotation gives every rank a different slot.
 * Why bitwise identical: every element is summed in rank order by exactly one code path
 * (every rank in the small case, the slice owner in the large case) and then copied.
 *
 * Large messages (>= par_bytes, default 256 KiB) are copied and summed by the calling rank's
 * OpenMP team when the call is made outside a parallel region: one core cannot pull a node's
 * memory bandwidth. Threads split elements, never the rank order of one element's sum, so the
 * result stays bitwise identical.
 *
 * Liveness: waits spin with _mm_pause (then sched_yield, for oversubscribed machines), watch
 * the shared "aborted" word numla_comm_abort raises, and give up after timeout_s with
 * NUMLA_STATUS_MPI — never an endless hang.
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <numa.h>
#include <numaif.h>
#include <omp.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "common/clock.h"
#include "common/log.h"

enum {
    NUMLA_SHM_HEADER = 4096,    /* header bytes; keeps the data buffers page-aligned */
    NUMLA_SHM_FLAG_STRIDE = 128, /* flags on separate cache-line pairs (adjacent prefetch) */
    NUMLA_SHM_TOTAL_OFF = 8,     /* total elements of the step, in the flag's cache line */
    NUMLA_SHM_ABORT_OFF = 256,
    NUMLA_SHM_SLICE_ALIGN = 16,  /* slices of whole cache lines (16 floats) */
    NUMLA_SHM_SUM_BLOCK = 4096,  /* elements per block of the rank-order sum (stays in L1/L2) */
};

static _Atomic uint64_t *numla_shm_flag_(const numla_comm_shm *sh, int q, int parity)
{
    return (_Atomic uint64_t *)(void *)(sh->segs[q] + (size_t)parity * NUMLA_SHM_FLAG_STRIDE);
}

static _Atomic uint64_t *numla_shm_abort_word_(const numla_comm_shm *sh)
{
    return (_Atomic uint64_t *)(void *)(sh->segs[0] + NUMLA_SHM_ABORT_OFF);
}

static uint64_t *numla_shm_total_(const numla_comm_shm *sh, int q, int parity)
{
    return (uint64_t *)(void *)(sh->segs[q] + (size_t)parity * NUMLA_SHM_FLAG_STRIDE +
                                NUMLA_SHM_TOTAL_OFF);
}

static float *numla_shm_buf_(const numla_comm_shm *sh, int q, int parity)
{
    return (float *)(void *)(sh->segs[q] + NUMLA_SHM_HEADER + (size_t)parity * sh->buf_bytes);
}

/* Place my own segment on my node when this process runs on exactly one NUMA node of a
 * multi-node machine. First touch by the owner does the same for untouched pages; MPOL_MF_MOVE
 * also fixes pages the MPI library may have touched already. Best effort: failure is logged. */
static void numla_shm_place_local_(void *base, size_t bytes)
{
    if (numa_available() < 0 || numa_max_node() < 1)
        return;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set))
        return;
    int node = -1;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set))
            continue;
        int n = numa_node_of_cpu(cpu);
        if (node >= 0 && n != node)
            return; /* spans nodes: no single local node to prefer */
        node = n;
    }
    if (node < 0)
        return;
    unsigned long mask[16] = {0};
    if (node >= (int)(8 * sizeof mask))
        return;
    mask[node / (8 * sizeof mask[0])] |= 1UL << (node % (8 * sizeof mask[0]));
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)base + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t hi = ((uintptr_t)base + bytes) & ~((uintptr_t)page - 1);
    if (hi > lo && mbind((void *)lo, hi - lo, MPOL_PREFERRED, mask, 8 * sizeof mask,
                         MPOL_MF_MOVE))
        NUMLA_DEBUG("shm allreduce: mbind of own segment to node %d failed", node);
}

numla_status numla_comm_shm_create(numla_comm *c, const numla_comm_options *o)
{
    /* The ranks of this machine; tests split the ranks into o->test_fake_machines contiguous
     * groups instead (several machines simulated on one). */
    MPI_Comm node = MPI_COMM_NULL;
    if (o->test_fake_machines > 1 && c->size > 1) {
        int k = o->test_fake_machines < c->size ? o->test_fake_machines : c->size;
        NUMLA_MPI_CHECK(MPI_Comm_split(c->comm, (int)((long)c->rank * k / c->size), c->rank,
                                       &node));
    } else {
        NUMLA_MPI_CHECK(
            MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    }
    int node_rank = 0, node_size = 0, lead = 0, counts[2] = {0, 0};
    int rc = MPI_Comm_rank(node, &node_rank);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_size(node, &node_size);
    /* machines = ranks that lead their machine; fewest and most ranks on one machine */
    if (rc == MPI_SUCCESS) {
        int leader = node_rank == 0;
        rc = MPI_Allreduce(&leader, &lead, 1, MPI_INT, MPI_SUM, c->comm);
    }
    if (rc == MPI_SUCCESS) {
        int mine[2] = {-node_size, node_size};
        rc = MPI_Allreduce(mine, counts, 2, MPI_INT, MPI_MAX, c->comm);
    }
    if (rc != MPI_SUCCESS) {
        MPI_Comm_free(&node);
        return numla_comm_mpi_error_(rc, "MPI_Comm_size/MPI_Allreduce(machines)", __FILE__,
                                     __LINE__, __func__);
    }
    c->machines = lead;
    c->machine_ranks_min = -counts[0];
    c->machine_ranks_max = counts[1];
    /* Over several machines, one rank per machine has nothing to share and unequal machines
     * cannot pair their ranks up: MPI path only (decided identically on every rank). */
    if (c->machines > 1 &&
        (c->machine_ranks_max == 1 || c->machine_ranks_min != c->machine_ranks_max)) {
        MPI_Comm_free(&node);
        return NUMLA_STATUS_OK;
    }

    numla_comm_shm *sh = calloc(1, sizeof *sh);
    if (!sh) {
        MPI_Comm_free(&node);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "shm allreduce: out of memory");
    }
    sh->win = MPI_WIN_NULL;
    sh->node = node;
    sh->cross = MPI_COMM_NULL;
    sh->rank = node_rank;
    sh->size = node_size;
    sh->machines = c->machines;
    sh->segs = calloc((size_t)sh->size, sizeof *sh->segs);
    sh->srcs = calloc((size_t)sh->size, sizeof *sh->srcs);
    sh->world = calloc((size_t)sh->size, sizeof *sh->world);
    sh->host_srcs = calloc((size_t)sh->machines, sizeof *sh->host_srcs);
    c->shm = sh; /* from here numla_comm_shm_destroy cleans up */
    if (!sh->segs || !sh->srcs || !sh->world || !sh->host_srcs)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "shm allreduce: out of memory");
    MPI_Group ng, wg;
    NUMLA_MPI_CHECK(MPI_Comm_group(node, &ng));
    NUMLA_MPI_CHECK(MPI_Comm_group(c->comm, &wg));
    int *idx = malloc((size_t)sh->size * sizeof *idx);
    for (int q = 0; idx && q < sh->size; q++)
        idx[q] = q;
    rc = idx ? MPI_Group_translate_ranks(ng, sh->size, idx, wg, sh->world) : MPI_ERR_NO_MEM;
    free(idx);
    MPI_Group_free(&ng);
    MPI_Group_free(&wg);
    if (rc != MPI_SUCCESS)
        return numla_comm_mpi_error_(rc, "MPI_Group_translate_ranks", __FILE__, __LINE__,
                                     __func__);
    if (sh->machines > 1) {
        /* Node rank j of every machine, machines ordered by their first rank: every cross
         * communicator lists the machines in the same order, so every rank sums the host sums
         * in the same order. */
        int first = sh->world[0];
        NUMLA_MPI_CHECK(MPI_Comm_split(c->comm, sh->rank, first, &sh->cross));
    }

    sh->buf_bytes = o->shm_bytes ? o->shm_bytes : (size_t)4 << 20;
    if (sh->buf_bytes > ((size_t)1 << 30)) {
        NUMLA_WARN("shm allreduce buffer of %zu bytes (NUMLA_COMM_SHM_BYTES) is above 1 GiB; "
                   "using 1 GiB", sh->buf_bytes);
        sh->buf_bytes = (size_t)1 << 30;
    }
    sh->buf_bytes = (sh->buf_bytes + 4095) & ~(size_t)4095;
    sh->rs_bytes = o->shm_rs_bytes ? o->shm_rs_bytes : (size_t)1 << 20;
    sh->par_bytes = o->shm_par_bytes ? o->shm_par_bytes : (size_t)256 << 10;
    sh->timeout_s = o->timeout_s > 0 ? o->timeout_s : 60;
    /* On an oversubscribed machine (more ranks x threads than CPUs: CI, laptops) a spinning
     * rank steals the core its peer needs: yield almost at once there; otherwise spin a while
     * first (latency matters more than a core that has nothing else to do). */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    sh->spin_limit = (long)sh->size * omp_get_max_threads() > ncpu ? 16 : 4096;

    MPI_Info info;
    NUMLA_MPI_CHECK(MPI_Info_create(&info));
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    size_t seg_bytes = NUMLA_SHM_HEADER + 2 * sh->buf_bytes;
    void *mine = NULL;
    rc = MPI_Win_allocate_shared((MPI_Aint)seg_bytes, 1, info, sh->node, &mine, &sh->win);
    MPI_Info_free(&info);
    if (rc != MPI_SUCCESS)
        return numla_comm_mpi_error_(rc, "MPI_Win_allocate_shared", __FILE__, __LINE__, __func__);
    for (int q = 0; q < sh->size; q++) {
        MPI_Aint sz;
        int disp;
        void *base;
        NUMLA_MPI_CHECK(MPI_Win_shared_query(sh->win, q, &sz, &disp, &base));
        if ((size_t)sz < seg_bytes)
            NUMLA_FAIL(NUMLA_STATUS_MPI, "shm allreduce: segment of rank %d has %zu bytes, "
                       "expected %zu", q, (size_t)sz, seg_bytes);
        sh->segs[q] = base;
    }
    NUMLA_MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, sh->win));
    numla_shm_place_local_(mine, seg_bytes);
    /* The owner zeroes its header (the data pages are first touched by its own writes). */
    for (int p = 0; p < 2; p++)
        atomic_store_explicit(numla_shm_flag_(sh, sh->rank, p), 0, memory_order_relaxed);
    if (sh->rank == 0)
        atomic_store_explicit(numla_shm_abort_word_(sh), 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    NUMLA_MPI_CHECK(MPI_Barrier(sh->node));
    NUMLA_DEBUG("shm allreduce: %d ranks on this machine (%d machine%s), %zu-byte buffers, "
                "reduce-scatter above %zu bytes", sh->size, sh->machines,
                sh->machines == 1 ? "" : "s", sh->buf_bytes, sh->rs_bytes);
    return NUMLA_STATUS_OK;
}

void numla_comm_shm_destroy(numla_comm *c)
{
    numla_comm_shm *sh = c->shm;
    if (!sh)
        return;
    if (sh->win != MPI_WIN_NULL) {
        MPI_Win_unlock_all(sh->win);
        MPI_Win_free(&sh->win);
    }
    if (sh->cross != MPI_COMM_NULL)
        MPI_Comm_free(&sh->cross);
    if (sh->node != MPI_COMM_NULL)
        MPI_Comm_free(&sh->node);
    free(sh->segs);
    free(sh->srcs);
    free(sh->world);
    free(sh->host_srcs);
    free(sh->gather);
    free(sh);
    c->shm = NULL;
}

void numla_comm_shm_mark_aborted(numla_comm *c)
{
    if (c && c->shm && c->shm->segs && c->shm->segs[0])
        atomic_store_explicit(numla_shm_abort_word_(c->shm), (uint64_t)c->rank + 1,
                              memory_order_release);
}

/* Wait until rank q's flag[parity] >= target. */
static numla_status numla_shm_wait_(numla_comm *c, int q, int parity, uint64_t target)
{
    numla_comm_shm *sh = c->shm;
    _Atomic uint64_t *f = numla_shm_flag_(sh, q, parity);
    if (atomic_load_explicit(f, memory_order_acquire) >= target)
        return NUMLA_STATUS_OK;
    uint64_t spin_limit = sh->spin_limit;
    double deadline = 0.0;
    for (uint64_t i = 1;; i++) {
        if (atomic_load_explicit(f, memory_order_acquire) >= target)
            return NUMLA_STATUS_OK;
        if (i < spin_limit)
            _mm_pause();
        else
            sched_yield();
        if ((i & 255) == 0) {
            uint64_t who = atomic_load_explicit(numla_shm_abort_word_(sh), memory_order_acquire);
            if (who)
                NUMLA_FAIL(NUMLA_STATUS_MPI, "shm allreduce: rank %d aborted the job (rank %d "
                           "stopped waiting for rank %d)", (int)who - 1, c->rank, sh->world[q]);
            double now = numla_now_s();
            if (deadline == 0.0)
                deadline = now + sh->timeout_s;
            else if (now > deadline) {
                numla_comm_shm_mark_aborted(c);
                NUMLA_FAIL(NUMLA_STATUS_MPI, "shm allreduce: rank %d gave up after %.0f s "
                           "waiting for rank %d (step %llu): that rank died or is stuck "
                           "(limit %.0f s, NUMLA_COMM_TIMEOUT)", c->rank, sh->timeout_s,
                           sh->world[q],
                           (unsigned long long)sh->step, sh->timeout_s);
            }
        }
    }
}

/* o[i] = srcs[0][b+i] + srcs[1][b+i] + ... + srcs[R-1][b+i], left to right. o may be one of
 * the sources at the same index (the caller's own data is its output): every source of a
 * vector is loaded before the vector is stored, so any aliasing of that kind is safe. */
static void numla_shm_sum_block_(float *o, float *o2, const float *const *srcs, int nsrc,
                                 size_t b, size_t m)
{
    size_t i = 0;
    for (; i + 16 <= m; i += 16) {
        const float *s = srcs[0] + b + i;
        __m128 a0 = _mm_loadu_ps(s), a1 = _mm_loadu_ps(s + 4);
        __m128 a2 = _mm_loadu_ps(s + 8), a3 = _mm_loadu_ps(s + 12);
        for (int q = 1; q < nsrc; q++) {
            s = srcs[q] + b + i;
            a0 = _mm_add_ps(a0, _mm_loadu_ps(s));
            a1 = _mm_add_ps(a1, _mm_loadu_ps(s + 4));
            a2 = _mm_add_ps(a2, _mm_loadu_ps(s + 8));
            a3 = _mm_add_ps(a3, _mm_loadu_ps(s + 12));
        }
        _mm_storeu_ps(o + i, a0);
        _mm_storeu_ps(o + i + 4, a1);
        _mm_storeu_ps(o + i + 8, a2);
        _mm_storeu_ps(o + i + 12, a3);
        if (o2) {
            _mm_storeu_ps(o2 + i, a0);
            _mm_storeu_ps(o2 + i + 4, a1);
            _mm_storeu_ps(o2 + i + 8, a2);
            _mm_storeu_ps(o2 + i + 12, a3);
        }
    }
    for (; i < m; i++) { /* same IEEE additions in the same order as the vector lanes */
        float a = srcs[0][b + i];
        for (int q = 1; q < nsrc; q++)
            a += srcs[q][b + i];
        o[i] = a;
        if (o2)
            o2[i] = a;
    }
}

/* out = rank-order sum of srcs (see the block function); also stored to out2 unless NULL. */
static void numla_shm_sum_(float *out, float *out2, const float *const *srcs, int nsrc, size_t n,
                           int nt)
{
    if (nt <= 1) { /* an if(0) parallel region still costs libgomp a team set-up */
        numla_shm_sum_block_(out, out2, srcs, nsrc, 0, n);
        return;
    }
    size_t nblocks = (n + NUMLA_SHM_SUM_BLOCK - 1) / NUMLA_SHM_SUM_BLOCK;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t k = 0; k < nblocks; k++) {
        size_t b = k * NUMLA_SHM_SUM_BLOCK;
        size_t m = n - b < NUMLA_SHM_SUM_BLOCK ? n - b : NUMLA_SHM_SUM_BLOCK;
        numla_shm_sum_block_(out + b, out2 ? out2 + b : NULL, srcs, nsrc, b, m);
    }
}

static void numla_shm_copy_(float *dst, const float *src, size_t n, int nt)
{
    if (nt <= 1) {
        memcpy(dst, src, n * sizeof *dst);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        size_t lo = n * (size_t)t / (size_t)T, hi = n * (size_t)(t + 1) / (size_t)T;
        memcpy(dst + lo, src + lo, (hi - lo) * sizeof *dst);
    }
}

/* Threads for a step of n floats: the caller's team for large messages outside parallel
 * regions, else just the caller. */
static int numla_shm_threads_(const numla_comm_shm *sh, size_t n)
{
    if (n * sizeof(float) < sh->par_bytes || omp_in_parallel())
        return 1;
    return omp_get_max_threads();
}

static void numla_shm_slice_(size_t n, int nranks, int q, size_t *lo, size_t *hi)
{
    size_t per = (n + (size_t)nranks - 1) / (size_t)nranks;
    per = (per + NUMLA_SHM_SLICE_ALIGN - 1) / NUMLA_SHM_SLICE_ALIGN * NUMLA_SHM_SLICE_ALIGN;
    size_t a = (size_t)q * per;
    *lo = a < n ? a : n;
    *hi = *lo + per < n ? *lo + per : n;
}

/* Several machines: x[n] holds this machine's sum; replace it with the sum over machines, in
 * machine order, identical on every rank (an allgather of the host sums over the cross
 * communicator, then the same ordered sum everywhere: no dependence on MPI's reduction order).
 * Collective over sh->cross: every member passes the same n. */
static numla_status numla_shm_cross_(numla_comm *c, float *x, size_t n, int nt)
{
    numla_comm_shm *sh = c->shm;
    if (sh->cross == MPI_COMM_NULL || n == 0)
        return NUMLA_STATUS_OK;
    const int H = sh->machines;
    if (n * (size_t)H > sh->gather_cap) {
        float *g = malloc(n * (size_t)H * sizeof *g);
        if (!g)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "allreduce across machines: out of memory "
                       "(%zu floats)", n * (size_t)H);
        free(sh->gather);
        sh->gather = g;
        sh->gather_cap = n * (size_t)H;
    }
    NUMLA_MPI_CHECK(MPI_Allgather(x, (int)n, MPI_FLOAT, sh->gather, (int)n, MPI_FLOAT,
                                  sh->cross));
    for (int h = 0; h < H; h++)
        sh->host_srcs[h] = sh->gather + (size_t)h * n;
    numla_shm_sum_(x, NULL, sh->host_srcs, H, n, nt);
    return NUMLA_STATUS_OK;
}

/* Every rank must pass the same total size; a mismatch would silently mix data (or hang on
 * a missing chunk), so each rank publishes its total with its flag and checks its peers'. */
static numla_status numla_shm_check_total_(numla_comm *c, int q, int p, size_t total)
{
    uint64_t theirs = *numla_shm_total_(c->shm, q, p);
    if (theirs != total)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "allreduce size mismatch: rank %d passed %zu "
                   "elements, rank %d passed %llu (every rank must pass the same size)",
                   c->rank, total, c->shm->world[q], (unsigned long long)theirs);
    return NUMLA_STATUS_OK;
}

static numla_status numla_shm_step_(numla_comm *c, float *x, size_t n, size_t total)
{
    numla_comm_shm *sh = c->shm;
    uint64_t s = ++sh->step;
    int p = (int)(s & 1);
    int me = sh->rank, R = sh->size, nt = numla_shm_threads_(sh, n);
    /* Rank q writes slot (q + rot) mod R; rot advances by one per use of a set and is 0 on the
     * first use of each, so every slot is first touched by its owner (page placement). */
    int rot = (int)(((s - 1) >> 1) % (uint64_t)R);
    float *slot = numla_shm_buf_(sh, (me + rot) % R, p);
    for (int q = 0; q < R; q++)
        sh->srcs[q] = q == me ? x : numla_shm_buf_(sh, (q + rot) % R, p);

    if (n * sizeof *x <= sh->rs_bytes) {
        numla_shm_copy_(slot, x, n, nt);
        /* Right before the flag: peers poll that line, a store any earlier costs a transfer. */
        *numla_shm_total_(sh, me, p) = total; /* published by the release store of the flag */
        atomic_store_explicit(numla_shm_flag_(sh, me, p), 2 * s, memory_order_release);
        numla_status bad = NUMLA_STATUS_OK;
        for (int q = 0; q < R; q++)
            if (q != me) {
                NUMLA_CHECK(numla_shm_wait_(c, q, p, 2 * s));
                if (bad == NUMLA_STATUS_OK)
                    bad = numla_shm_check_total_(c, q, p, total);
            }
        if (bad != NUMLA_STATUS_OK) { /* after waiting for all: every rank stays in step */
            numla_error_frame(__FILE__, __LINE__, __func__);
            return bad;
        }
        numla_shm_sum_(x, NULL, sh->srcs, R, n, nt);
        NUMLA_CHECK(numla_shm_cross_(c, x, n, nt)); /* every rank: the host sums of x */
        return NUMLA_STATUS_OK;
    }

    /* Peers read only their own slices of my slot: my slice is summed from x, not copied. */
    size_t lo, hi;
    numla_shm_slice_(n, R, me, &lo, &hi);
    numla_shm_copy_(slot, x, lo, nt);
    numla_shm_copy_(slot + hi, x + hi, n - hi, nt);
    *numla_shm_total_(sh, me, p) = total;
    atomic_store_explicit(numla_shm_flag_(sh, me, p), 2 * s - 1, memory_order_release);
    numla_status bad = NUMLA_STATUS_OK;
    for (int q = 0; q < R; q++)
        if (q != me) {
            NUMLA_CHECK(numla_shm_wait_(c, q, p, 2 * s - 1));
            if (bad == NUMLA_STATUS_OK)
                bad = numla_shm_check_total_(c, q, p, total);
        }
    if (bad != NUMLA_STATUS_OK) {
        /* Finish the step's protocol (peers wait for our second flag) before failing. */
        atomic_store_explicit(numla_shm_flag_(sh, me, p), 2 * s, memory_order_release);
        for (int q = 0; q < R; q++)
            if (q != me)
                NUMLA_CHECK(numla_shm_wait_(c, q, p, 2 * s));
        numla_error_frame(__FILE__, __LINE__, __func__);
        return bad;
    }
    if (hi > lo) {
        const float *slice[R];
        for (int q = 0; q < R; q++)
            slice[q] = sh->srcs[q] + lo;
        /* Reduce into x (my own source is x itself) and publish in my slot's slice in the same
         * pass (one read of the sources); no peer reads that slice before my second flag. Over
         * several machines, the slice's host sum is first joined with the same slice of the
         * other machines (the node ranks j of all machines hold the same slice). */
        if (sh->cross == MPI_COMM_NULL) {
            numla_shm_sum_(x + lo, slot + lo, slice, R, hi - lo, nt);
        } else {
            numla_shm_sum_(x + lo, NULL, slice, R, hi - lo, nt);
            NUMLA_CHECK(numla_shm_cross_(c, x + lo, hi - lo, nt));
            numla_shm_copy_(slot + lo, x + lo, hi - lo, nt);
        }
    }
    atomic_store_explicit(numla_shm_flag_(sh, me, p), 2 * s, memory_order_release);
    for (int k = 1; k < R; k++) {
        int q = (me + k) % R; /* start at different peers: spreads the reads over the nodes */
        NUMLA_CHECK(numla_shm_wait_(c, q, p, 2 * s));
        size_t qlo, qhi;
        numla_shm_slice_(n, R, q, &qlo, &qhi);
        if (qhi > qlo)
            numla_shm_copy_(x + qlo, sh->srcs[q] + qlo, qhi - qlo, nt);
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_comm_shm_allreduce_sum_f32(numla_comm *c, float *buf, size_t n)
{
    size_t chunk = c->shm->buf_bytes / sizeof *buf;
    for (size_t off = 0; off < n; off += chunk)
        NUMLA_CHECK(numla_shm_step_(c, buf + off, n - off < chunk ? n - off : chunk, n));
    return NUMLA_STATUS_OK;
}
