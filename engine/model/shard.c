/* engine/model/shard.c — the shard plan: which heads, MLP columns, experts and vocabulary rows
 * rank r of R holds (shard.h). */
#include "engine/model/shard.h"

void numla_shard_range(int64_t n, int32_t rank, int32_t nranks, int64_t *begin, int64_t *count)
{
    int64_t base = n / nranks, rem = n % nranks;
    *count = base + (rank < rem ? 1 : 0);
    *begin = (int64_t)rank * base + (rank < rem ? rank : rem);
}

numla_status numla_shard_plan(const numla_model_config *cfg, int32_t rank, int32_t nranks,
                              numla_shard *out)
{
    if (nranks < 1 || rank < 0 || rank >= nranks)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "shard: rank %d of %d is not valid", rank, nranks);
    if (nranks > cfg->num_attention_heads)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "shard: %d ranks for %lld attention heads leaves a rank without heads",
                   nranks, (long long)cfg->num_attention_heads);
    numla_shard s = {.rank = rank, .nranks = nranks};
    numla_shard_range(cfg->num_attention_heads, rank, nranks, &s.head_begin, &s.head_count);
    numla_shard_range(cfg->intermediate_size, rank, nranks, &s.inter_begin, &s.inter_count);
    numla_shard_range(cfg->n_shared_experts * cfg->moe_intermediate_size, rank, nranks,
                      &s.shared_begin, &s.shared_count);
    numla_shard_range(cfg->n_routed_experts, rank, nranks, &s.expert_begin, &s.expert_count);
    numla_shard_range(cfg->vocab_size, rank, nranks, &s.vocab_begin, &s.vocab_count);
    *out = s;
    return NUMLA_STATUS_OK;
}
