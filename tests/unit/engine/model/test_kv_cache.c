/* Tests for engine/kv_cache: allocator order and exhaustion (KV_FULL, all or nothing), block
 * tables growing across blocks, slots, release returning every block, bad geometry. */
#include "test_util.h"

#include "engine/model/kv_cache.h"

static void test_alloc_and_slots(void)
{
    numla_kv_cache *c = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_kv_cache_create(2, 64, 16, 4, 5, NUMLA_DTYPE_BF16, &c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(c->layer_bytes % 4096, 0);
    CU_ASSERT_TRUE(c->layer_bytes >= (size_t)5 * 4 * 80 * 2);
    CU_ASSERT_PTR_EQUAL((char *)numla_kv_cache_layer(c, 1), (char *)c->data + c->layer_bytes);
    numla_kv_seq a = {0}, b = {0};
    CU_ASSERT_EQUAL(numla_kv_seq_reserve(c, &a, 9), NUMLA_STATUS_OK); /* 3 blocks */
    CU_ASSERT_EQUAL(a.num_blocks, 3);
    CU_ASSERT_EQUAL(c->num_free, 2);
    CU_ASSERT_EQUAL(numla_kv_seq_slot(c, &a, 5), (int64_t)a.block_table[1] * 4 + 1);
    /* 3 more blocks do not fit: nothing changes */
    CU_ASSERT_EQUAL(numla_kv_seq_reserve(c, &b, 12), NUMLA_STATUS_KV_FULL);
    CU_ASSERT_EQUAL(b.num_blocks, 0);
    CU_ASSERT_EQUAL(c->num_free, 2);
    CU_ASSERT_EQUAL(numla_kv_seq_reserve(c, &b, 8), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(c->num_free, 0);
    /* reserving what is already there is free */
    CU_ASSERT_EQUAL(numla_kv_seq_reserve(c, &a, 12), NUMLA_STATUS_OK);
    int32_t blk;
    CU_ASSERT_EQUAL(numla_kv_cache_alloc_block(c, &blk), NUMLA_STATUS_KV_FULL);
    /* every block distinct */
    int seen[5] = {0};
    for (int i = 0; i < a.num_blocks; i++) seen[a.block_table[i]]++;
    for (int i = 0; i < b.num_blocks; i++) seen[b.block_table[i]]++;
    for (int i = 0; i < 5; i++) CU_ASSERT_EQUAL(seen[i], 1);
    numla_kv_seq_release(c, &a);
    CU_ASSERT_EQUAL(c->num_free, 3);
    CU_ASSERT_PTR_NULL(a.block_table);
    numla_kv_seq_release(c, &b);
    CU_ASSERT_EQUAL(c->num_free, 5);
    /* a long sequence grows its table past the initial capacity */
    numla_kv_cache_destroy(&c);
    CU_ASSERT_PTR_NULL(c);
    CU_ASSERT_EQUAL_FATAL(numla_kv_cache_create(1, 32, 16, 1, 100, NUMLA_DTYPE_F32, &c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_kv_seq_reserve(c, &a, 100), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(a.num_blocks, 100);
    CU_ASSERT_TRUE(a.capacity >= 100);
    numla_kv_seq_release(c, &a);
    numla_kv_cache_destroy(&c);
}

static void test_bad_geometry(void)
{
    numla_kv_cache *c = NULL;
    CU_ASSERT_EQUAL(numla_kv_cache_create(0, 64, 16, 4, 5, NUMLA_DTYPE_BF16, &c), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_kv_cache_create(2, 64, 16, 0, 5, NUMLA_DTYPE_BF16, &c), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_kv_cache_create(2, 64, 16, 4, 0, NUMLA_DTYPE_BF16, &c), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NULL(c);
}

/* The pool is sized from free memory plus the page cache: both meminfo layouts are read, and a
 * field's absence or a missing number is -1, never a neighbour's value. */
static void test_meminfo(void)
{
    const char *node = "Node 12 MemTotal:       24731400 kB\nNode 12 MemFree:        11052980 kB\n"
                       "Node 12 Active(anon):       1460 kB\nNode 12 Active(file):   10769596 kB\n"
                       "Node 12 Inactive(file):  2454256 kB\n";
    CU_ASSERT_EQUAL(numla_kv_cache_meminfo_kib(node, "MemFree"), 11052980);
    CU_ASSERT_EQUAL(numla_kv_cache_meminfo_kib(node, "Active(file)"), 10769596);
    CU_ASSERT_EQUAL(numla_kv_cache_meminfo_kib(node, "Inactive(file)"), 2454256);
    CU_ASSERT_EQUAL(numla_kv_cache_meminfo_kib(node, "Active"), -1);
    const char *machine = "MemTotal:       24731400 kB\nMemFree:        11052980 kB\n"
                          "MemAvailable:   24148472 kB";
    CU_ASSERT_EQUAL(numla_kv_cache_meminfo_kib(machine, "MemAvailable"), 24148472);
    CU_ASSERT_EQUAL(numla_kv_cache_meminfo_kib(machine, "Mem"), -1);
    CU_ASSERT_EQUAL(numla_kv_cache_meminfo_kib("MemFree:\nCached: 5 kB\n", "MemFree"), -1);
    CU_ASSERT_EQUAL(numla_kv_cache_meminfo_kib("", "MemFree"), -1);
}

NUMLA_TEST_SUITE(kv_cache, NULL, NULL, NUMLA_TEST(test_alloc_and_slots), NUMLA_TEST(test_bad_geometry),
                  NUMLA_TEST(test_meminfo))
