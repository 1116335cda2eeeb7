/* engine/model/scratch.c — the model's scratch (model_internal.h): the table that lists every
 * scratch buffer once, so that create, grow and destroy agree, and the kernel workspaces grown
 * to the kernels' size queries. The blocks grow what a step needs here before they run. */
#include <stddef.h>
#include <stdlib.h>

#include "engine/model/model_internal.h"

/* Elements per unit of a buffer's dimension (numla_scratch_dim), from the config and shard. */
typedef enum {
    W_ONE, W_HIDDEN, W_QLORA, W_Q, W_LATENT, W_DC, W_DR, W_QABS, W_CTX, W_O, W_INTER,
    W_EXPERTS_1, W_EXPERTS_2, W_TOPK_1, W_ROUTE, W_MOE_INTER, W_HEADS, W_KVB, W_FOUR,
    W_IDX_Q, W_IDX_K, W_IDX_W, W_IDX_TOPK, W_CTX_BF, W_HIDDEN_2,
} scratch_width;

typedef struct scratch_buf {
    size_t field;          /* offsetof the pointer in numla_model */
    size_t elem;           /* bytes per element */
    numla_scratch_dim dim;
    scratch_width width;
} scratch_buf;

#define SB(f, e, d, w) {offsetof(numla_model, f), e, NUMLA_SCRATCH_##d, w}
static const scratch_buf scratch_table[] = {
    SB(h, 4, TOKENS, W_HIDDEN),           SB(x, 4, TOKENS, W_HIDDEN),
    SB(qa, 4, TOKENS, W_QLORA),           SB(q, 4, TOKENS, W_Q),
    SB(kva, 4, TOKENS, W_LATENT),         SB(ckv, 4, TOKENS, W_DC),
    SB(kpe, 4, TOKENS, W_DR),             SB(qabs, 4, TOKENS, W_QABS),
    SB(ctx, 4, TOKENS, W_CTX),            SB(o, 4, TOKENS, W_O),
    SB(g, 4, TOKENS, W_INTER),            SB(u, 4, TOKENS, W_INTER),
    SB(moe_out, 4, TOKENS, W_HIDDEN),     SB(ex_x, 4, TOKENS, W_HIDDEN),
    SB(ex_y, 4, TOKENS, W_HIDDEN),        SB(router, 4, TOKENS, W_EXPERTS_1),
    SB(topk_idx, 4, TOKENS, W_TOPK_1),    SB(topk_w, 4, TOKENS, W_TOPK_1),
    SB(ex_list, 4, TOKENS, W_TOPK_1),     SB(route_scratch, 1, TOKENS, W_ROUTE),
    SB(cos_sin, 4, TOKENS, W_DR),         SB(xl, 4, TOKENS, W_HIDDEN),
    SB(par_x, 4, PAR_ROWS, W_HIDDEN),     SB(par_y, 4, PAR_ROWS, W_HIDDEN),
    SB(par_g, 4, PAR_ROWS, W_MOE_INTER),  SB(par_u, 4, PAR_ROWS, W_MOE_INTER),
    SB(ex_count, 4, EXPERTS, W_EXPERTS_2), SB(ex_cursor, 4, EXPERTS, W_EXPERTS_2),
    SB(ex_act, 4, EXPERTS, W_EXPERTS_2),
    SB(ctx2, 4, ATTN_ROWS, W_CTX),        SB(lse_pre, 4, ATTN_ROWS, W_HEADS),
    SB(ctx_bf, 2, ATTN_ROWS, W_CTX_BF),   SB(ctx2_bf, 2, ATTN_ROWS, W_CTX_BF),
    SB(lse_new, 4, ATTN_ROWS, W_HEADS),   SB(pre_lens, 4, ATTN_ROWS, W_ONE),
    SB(new_lens, 4, ATTN_ROWS, W_ONE),    SB(new_tables, 4, NEW_TABLES, W_ONE),
    SB(new_kv, 1, NEW_KV, W_ONE),
    SB(sub_rows, 4, SUB_TOKENS, W_ONE),   SB(sub_slots, 8, SUB_TOKENS, W_ONE),
    SB(sub_q, 4, SUB_TOKENS, W_Q),        SB(sub_cs, 4, SUB_TOKENS, W_DR),
    SB(sub_o, 4, SUB_TOKENS, W_O),        SB(sub_meta, 4, SUB_META, W_ONE),
    SB(xp_lat, 4, XP_KEYS, W_LATENT),     SB(xp_kv, 4, XP_KEYS, W_KVB),
    SB(xp_k, 4, XP_KEYS, W_Q),            SB(xp_v, 4, XP_KEYS, W_O),
    SB(xp_q, 4, XP_TOKENS, W_Q),          SB(xp_seq, 4, XP_SEQS, W_FOUR),
    SB(idx_q, 4, DSA_TOKENS, W_IDX_Q),    SB(idx_k, 4, DSA_TOKENS, W_IDX_K),
    SB(idx_w, 4, DSA_TOKENS, W_IDX_W),    SB(idx_sel, 4, DSA_TOKENS, W_IDX_TOPK),
    SB(idx_cnt, 4, DSA_TOKENS, W_ONE),    SB(idx_qb, 2, DSA_TOKENS, W_IDX_Q),
    SB(mtp_hid, 4, MTP_HID, W_HIDDEN),    SB(mtp_out, 4, MTP_OUT, W_HIDDEN),
    SB(mtp_cat, 4, MTP_OUT, W_HIDDEN_2),
    /* kernel workspaces: grown by numla_model_grow_workspace to the kernels' size queries */
    SB(lin_ws, 1, WORKSPACE, W_ONE),      SB(par_ws, 1, WORKSPACE, W_ONE),
    SB(attn_ws, 1, WORKSPACE, W_ONE),     SB(xp_ws, 1, WORKSPACE, W_ONE),
    SB(dsa_ws, 1, WORKSPACE, W_ONE),
};
#undef SB

static void **scratch_ptr(numla_model *m, const scratch_buf *b)
{
    return (void **)((char *)m + b->field);
}

static int64_t scratch_elems(const numla_model *m, scratch_width w)
{
    const numla_model_config *c = &m->cfg;
    const numla_shard *sh = &m->w->shard;
    const int64_t Hr = sh->head_count, dc = c->kv_lora_rank, dr = c->qk_rope_head_dim;
    switch (w) {
    case W_ONE: return 1;
    case W_HIDDEN: return c->hidden_size;
    case W_QLORA: return c->q_lora_rank;
    case W_Q: return Hr * c->q_head_dim;
    case W_LATENT: return dc + dr;
    case W_DC: return dc;
    case W_DR: return dr;
    case W_QABS: return Hr * (dc + dr);
    case W_CTX: return Hr * dc;
    case W_O: return Hr * c->v_head_dim;
    case W_INTER: { /* the widest MLP: dense slice, shared slice or one routed expert */
        int64_t i = sh->inter_count;
        i = sh->shared_count > i ? sh->shared_count : i;
        return c->moe_intermediate_size > i ? c->moe_intermediate_size : i;
    }
    case W_EXPERTS_1: return c->n_routed_experts + 1;
    case W_EXPERTS_2: return c->n_routed_experts + 2;
    case W_TOPK_1: return c->num_experts_per_tok + 1;
    case W_ROUTE: return (int64_t)m->route_stride;
    case W_MOE_INTER: return c->moe_intermediate_size ? c->moe_intermediate_size : 1;
    case W_HEADS: return Hr;
    case W_KVB: return Hr * (c->qk_nope_head_dim + c->v_head_dim);
    case W_FOUR: return 4;
    case W_IDX_Q: return c->dsa.index_n_heads * c->dsa.index_head_dim;
    case W_IDX_K: return c->dsa.index_head_dim;
    case W_IDX_W: return c->dsa.index_n_heads;
    case W_IDX_TOPK: return c->dsa.index_topk;
    case W_CTX_BF: return m->attn_out_bf16 ? Hr * dc : 0;
    case W_HIDDEN_2: return 2 * c->hidden_size;
    }
    return 1;
}

numla_status numla_model_scratch_grow(numla_model *m, numla_scratch_dim d, int64_t cap,
                                      const char *what)
{
    int ok = 1;
    for (size_t i = 0; i < sizeof scratch_table / sizeof scratch_table[0]; i++) {
        const scratch_buf *b = &scratch_table[i];
        if (b->dim != d)
            continue;
        size_t bytes = (size_t)cap * (size_t)scratch_elems(m, b->width) * b->elem;
        void **p = scratch_ptr(m, b);
        void *n = realloc(*p, bytes ? bytes : 1);
        if (n)
            *p = n;
        ok &= n != NULL;
    }
    if (!ok)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "model: no memory for the %s (%lld rows)", what,
                   (long long)cap);
    m->cap[d] = cap;
    return NUMLA_STATUS_OK;
}

void numla_model_scratch_free(numla_model *m)
{
    for (size_t i = 0; i < sizeof scratch_table / sizeof scratch_table[0]; i++) {
        void **p = scratch_ptr(m, &scratch_table[i]);
        free(*p);
        *p = NULL;
    }
}

/* Grow a 64-byte aligned kernel workspace (*buf, *bytes) to at least need bytes; its old
 * contents are not kept. what names it in the error. */
numla_status numla_model_grow_workspace(void **buf, size_t *bytes, size_t need, const char *what)
{
    if (need <= *bytes)
        return NUMLA_STATUS_OK;
    free(*buf);
    *buf = aligned_alloc(64, need ? (need + 63) & ~(size_t)63 : 64);
    *bytes = *buf ? need : 0;
    if (!*buf)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "model: no memory for the %s (%zu bytes)", what, need);
    return NUMLA_STATUS_OK;
}

/* Linear calls made one per thread inside our own parallel region (each then runs on its
 * thread alone): nth workspaces of `each` bytes (rounded to 64) in m->par_ws. */
numla_status numla_model_par_workspace(numla_model *m, size_t each, int nth, size_t *stride)
{
    *stride = (each + 63) & ~(size_t)63;
    return numla_model_grow_workspace(&m->par_ws, &m->par_ws_bytes, *stride * (size_t)nth,
                                      "per-thread linear workspaces");
}
