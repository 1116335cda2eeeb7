/* Tests for the DSA index-key cache of engine/model/kv_cache (numla_kv_cache_add_index): its
 * pools follow the latent cache's blocks, so a row written at a sequence's slot through
 * kv_write is where the indexer kernel reads that token (both go through the same block
 * table), layers do not overlap, and the error paths. */
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

#include "engine/model/kv_cache.h"
#include "kernels/dsa.h"
#include "kernels/kv_write.h"

static void test_index_pool_follows_blocks(void)
{
    enum { L = 2, DI = 16, BS = 4, NB = 9, HI = 16, TOPK = 3 };
    numla_kv_cache *c = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_kv_cache_create(L, 32, 16, BS, NB, NUMLA_DTYPE_BF16, &c), NUMLA_STATUS_OK);
    CU_ASSERT_PTR_NULL(numla_kv_cache_index_layer(c, 0));
    CU_ASSERT_EQUAL_FATAL(numla_kv_cache_add_index(c, DI, NUMLA_DTYPE_BF16), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_kv_cache_add_index(c, DI, NUMLA_DTYPE_BF16), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_kv_index_block_bytes(L, DI, BS, NUMLA_DTYPE_BF16), (size_t)L * BS * DI * 2);
    /* i8 rows: codes, fp32 scale, int32 code sum */
    CU_ASSERT_EQUAL(numla_kv_index_block_bytes(L, DI, BS, NUMLA_DTYPE_I8), (size_t)L * BS * (DI + 8));
    char *l0 = numla_kv_cache_index_layer(c, 0), *l1 = numla_kv_cache_index_layer(c, 1);
    CU_ASSERT_TRUE(l1 - l0 >= (ptrdiff_t)((size_t)NB * BS * DI * 2));
    /* a sequence of 10 tokens on blocks taken after two others, so its table is not 0, 1, 2 */
    int32_t spare[2];
    CU_ASSERT_EQUAL(numla_kv_cache_alloc_block(c, &spare[0]), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_kv_cache_alloc_block(c, &spare[1]), NUMLA_STATUS_OK);
    numla_kv_seq s = {0};
    CU_ASSERT_EQUAL_FATAL(numla_kv_seq_reserve(c, &s, 10), NUMLA_STATUS_OK);
    s.len = 10;
    /* token t's key: e_{t mod DI} scaled by (t + 1), written into layer 1 through the slots */
    float keys[10][DI];
    int64_t slots[10];
    memset(keys, 0, sizeof keys);
    for (int t = 0; t < 10; t++) {
        keys[t][t % DI] = (float)(t + 1);
        slots[t] = numla_kv_seq_slot(c, &s, t);
    }
    numla_kv_write_args w = {.num_tokens = 10, .kv_lora_rank = DI, .rope_dim = 0, .kv_c = keys,
                             .kv_c_stride = DI, .src_dtype = NUMLA_DTYPE_F32, .slot_mapping = slots,
                             .kv_cache = l1, .kv_dtype = NUMLA_DTYPE_BF16, .num_blocks = NB,
                             .block_size = BS};
    CU_ASSERT_EQUAL_FATAL(numla_concat_and_cache_mla(NUMLA_ISA_REF, &w), NUMLA_STATUS_OK);
    /* a query that is all ones with unit weights scores token t as (t + 1): the top 3 of 10
     * are tokens 7, 8, 9 only if every key was found where the table says */
    float q[HI * DI], wts[HI];
    for (int i = 0; i < HI * DI; i++)
        q[i] = 1.0f;
    for (int h = 0; h < HI; h++)
        wts[h] = 1.0f;
    int32_t lens[1] = {10}, ix[TOPK], cnt[1];
    numla_dsa_index_args a = {.num_seqs = 1, .num_heads = HI, .head_dim = DI, .block_size = BS,
                              .num_blocks = NB, .max_blocks_per_seq = s.num_blocks, .topk = TOPK,
                              .q = q, .q_dtype = NUMLA_DTYPE_F32, .w = wts, .kcache = l1,
                              .k_dtype = NUMLA_DTYPE_BF16, .block_tables = s.block_table,
                              .seq_lens = lens, .scale = 1.0f, .indices = ix, .counts = cnt};
    size_t wsb = numla_dsa_index_workspace_size(NUMLA_ISA_REF, &a, 64);
    void *ws = malloc(wsb);
    CU_ASSERT_EQUAL_FATAL(numla_dsa_index(NUMLA_ISA_REF, &a, ws, wsb), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(cnt[0], 3);
    CU_ASSERT_EQUAL(ix[0], 7);
    CU_ASSERT_EQUAL(ix[1], 8);
    CU_ASSERT_EQUAL(ix[2], 9);
    /* layer 0 was never written: its pool is zeros (fresh mapping), so scores tie at 0 and the
     * lowest positions win */
    a.kcache = l0;
    CU_ASSERT_EQUAL_FATAL(numla_dsa_index(NUMLA_ISA_REF, &a, ws, wsb), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(ix[0], 0);
    CU_ASSERT_EQUAL(ix[2], 2);
    free(ws);
    numla_kv_seq_release(c, &s);
    numla_kv_cache_destroy(&c);
    CU_ASSERT_PTR_NULL(c);
}

static void test_index_errors(void)
{
    numla_kv_cache *c = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_kv_cache_create(1, 32, 16, 4, 3, NUMLA_DTYPE_BF16, &c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_kv_cache_add_index(c, 0, NUMLA_DTYPE_BF16), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_kv_cache_add_index(c, 18, NUMLA_DTYPE_I8), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_kv_cache_add_index(c, 16, NUMLA_DTYPE_I32), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NULL(numla_kv_cache_index_layer(c, 0));
    /* i8 rows are Di + 8 bytes: a layer holds every slot's row */
    CU_ASSERT_EQUAL_FATAL(numla_kv_cache_add_index(c, 16, NUMLA_DTYPE_I8), NUMLA_STATUS_OK);
    CU_ASSERT_TRUE(c->index_layer_bytes >= (size_t)3 * 4 * 24);
    numla_kv_cache_destroy(&c);
}

NUMLA_TEST_SUITE(kv_index, NULL, NULL, NUMLA_TEST(test_index_pool_follows_blocks),
                 NUMLA_TEST(test_index_errors))
