/* Tests for engine/formats/map_release.h: pages of a read-only file mapping given back leave
 * the resident set, the bytes read back the same afterwards, and a range outside the mapping is
 * left alone. */
#include "test_util.h"

#include "engine/formats/map_release.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* This process's resident pages (/proc/self/statm), -1 when unreadable. */
static long resident_pages(void)
{
    long size = -1, res = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &size, &res) != 2)
        res = -1;
    fclose(f);
    return res;
}

static void test_release(void)
{
    const size_t bytes = 16u << 20, page = (size_t)sysconf(_SC_PAGESIZE);
    char path[512];
    snprintf(path, sizeof path, "%s/map-release.bin", numla_test_tmpdir());
    unsigned char *src = malloc(bytes);
    CU_ASSERT_PTR_NOT_NULL_FATAL(src);
    for (size_t i = 0; i < bytes; i++)
        src[i] = (unsigned char)(i * 2654435761u >> 13);
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL_FATAL(fwrite(src, 1, bytes, f), bytes);
    CU_ASSERT_EQUAL_FATAL(fclose(f), 0);
    int fd = open(path, O_RDONLY);
    CU_ASSERT_FATAL(fd >= 0);
    const unsigned char *map = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    CU_ASSERT_FATAL(map != MAP_FAILED);
    CU_ASSERT_EQUAL(memcmp(map, src, bytes), 0); /* every page resident now */
    const long before = resident_pages();

    /* the middle 12 MiB, from an unaligned start: the whole pages in it go */
    const size_t off = 2u << 20, n = 12u << 20;
    CU_ASSERT_EQUAL(numla_map_release(map, bytes, map + off + 100, n - 100), 1);
    const long after = resident_pages();
    /* 9/10 of the whole pages: the rest of the process (ASan's shadow memory, say) may grow a
     * little meanwhile; without the release nothing drops at all */
    const long dropped = before - after, want = (long)((n - 100 - page) / page);
    NUMLA_ASSERT_MSG(before > 0 && dropped >= want * 9 / 10, "resident %ld -> %ld pages, expected about -%ld",
                     before, after, want);
    /* the bytes are still there, those released included */
    CU_ASSERT_EQUAL(memcmp(map, src, bytes), 0);

    /* outside the mapping: refused, nothing released */
    const long again = resident_pages();
    CU_ASSERT_EQUAL(numla_map_release(map, bytes, src, 4096), 0);
    CU_ASSERT_EQUAL(numla_map_release(map, bytes, map + bytes, 4096), 0);
    CU_ASSERT_EQUAL(numla_map_release(NULL, 0, map, 4096), 0);
    CU_ASSERT(resident_pages() >= again - 4);
    /* a range running past the end is cut at the mapping */
    CU_ASSERT_EQUAL(numla_map_release(map, bytes, map + bytes - 10, 1u << 30), 1);
    CU_ASSERT_EQUAL(memcmp(map, src, bytes), 0);

    munmap((void *)map, bytes);
    unlink(path);
    free(src);
}

NUMLA_TEST_SUITE(map_release, NULL, NULL, NUMLA_TEST(test_release))
