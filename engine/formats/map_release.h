/* engine/formats/map_release.h — give back the resident pages of a read-only file mapping.
 *
 * The readers map whole checkpoint files (MAP_PRIVATE, PROT_READ) and the loader copies each
 * rank's shard out of them into its own memory; without this the file's pages stay in the
 * process's resident set until the file is closed, so loading peaks at the shard plus the
 * file. MADV_DONTNEED on such a mapping only drops the process's page references: the bytes
 * stay readable (a later access faults them in again from the page cache or the file), so
 * releasing a range that is still needed costs time, never data. Local. */
#ifndef NUMLA_ENGINE_FORMATS_MAP_RELEASE_H
#define NUMLA_ENGINE_FORMATS_MAP_RELEASE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/* The whole pages of [p, p + n) that lie inside the mapping [map, map + size); 1 when p lies
 * in it (whatever madvise says), 0 when it does not. */
static inline int numla_map_release(const void *map, size_t size, const void *p, size_t n)
{
    const uintptr_t m0 = (uintptr_t)map, m1 = m0 + size, a = (uintptr_t)p;
    if (!map || n == 0 || a < m0 || a >= m1)
        return 0;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = a & ~(page - 1), hi = a + n < m1 ? a + n : m1;
    hi = (hi + page - 1) & ~(page - 1); /* the mapping itself ends on a page boundary */
    if (lo < m0)
        lo = m0;
    (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
    return 1;
}

#endif
