/* layer.c - one tensor-parallel transformer layer, forward and backward, on
 * N = s*b token rows in the paper's [s, b, h] layout (hl = h/t, fl = 4h/t,
 * al = a/t):
 *   ln1 = LN(x)                     qkv = ln1 Wqkv^T + bqkv      (column-parallel, f before)
 *   ctx = attention(qkv)            y = g(ctx Wo^T)              (row-parallel)
 *   xm = x + dropout(y + bo)        ln2 = LN(xm)
 *   fc = ln2 W1^T                   gl = gelu(fc + b1)           (column-parallel, f before)
 *   y = g(gl W2^T)                  out = xm + dropout(y + b2)   (row-parallel)
 * The Llama family (--normalization RMSNorm, --position-embedding-type rope,
 * --group-query-attention, --swiglu, --disable-bias-linear) changes the
 * pieces, not the order: RMSNorm for LN, the queries and keys of qkv rotated
 * in place before attention (and dqkv rotated back after its backward),
 * attention of a/t query heads over g/t key/value groups (qkv [s, b, q/t],
 * q = (a + 2g) h/a, per group its query heads, key and value), and
 *   fc = [ln2 Wg^T | ln2 Wu^T]      gl = silu(gate) * up         (two column-parallel GEMMs)
 * with zeros (and a sink for their gradients) standing in for absent biases.
 * f and g are the paper's conjugate operators (Megatron's
 * copy_to_tensor_model_parallel_region / reduce_from_...): g all-reduces in
 * the forward, f in the backward, after the input-gradient GEMMs of the
 * column-parallel layers. The dropout streams of every site live here too.
 * With sequence parallelism (Korthikanti et al. 2022; Megatron's
 * --sequence-parallel) x, the LayerNorms, the dropouts and the residual adds
 * work on this rank's Ns = s/t*b rows; f becomes an all-gather of the
 * LayerNorm output forward (and again in W, for the weight gradient: the
 * layer keeps only the shard) and a reduce-scatter of the input gradient
 * backward; g a reduce-scatter forward and an all-gather of the output
 * gradient backward. Same bytes as the two all-reduces.
 * The backward comes in two halves (zero-bubble schedules run them apart):
 * B, the input gradient, and W, the four weight GEMMs.
 * Not here: full recomputation (gpt.c decides what to rerun; selective
 * recomputation of core attention is in B below), memory (chunk.c). */
#include "model/model.h"
#include "model/model_internal.h"

/* per site: are its elements numbered by global attention head (the
 * attention probabilities: each tensor-parallel rank holds a/t heads) */
static const uint8_t site_by_head[] = {
#define PTDP__DROPOUT_BY_HEAD(e, s, by_head) by_head,
    PTDP__DROPOUT_SITES(PTDP__DROPOUT_BY_HEAD)
#undef PTDP__DROPOUT_BY_HEAD
};

ptdp_dropout ptdp__dropout(const ptdp_gpt_chunk *c, float p, ptdp__dropout_site site, int64_t layer,
                           const ptdp__slot_act *sa) {
    ptdp_dropout d = {.p = c->training ? p : 0.0f};
    if (d.p == 0.0f) return d;
    /* Keyed by (seed, iteration, layer, site) and, inside the site, by global
     * sample, token position, hidden index and global head (kernels.h), never
     * by this rank's micro-batch, tensor rank or micro-batch size: every
     * layout draws the single process's masks. */
    d.key.seed = ptdp_hash_mix(c->cfg->seed, (uint64_t)sa->iteration);
    d.key.stream = ptdp_hash_mix((uint64_t)site, (uint64_t)(layer + 1));
    d.b = c->job->micro_batch;
    d.sample0 = sa->microbatch * c->job->micro_batch;
    d.width = c->h;
    if (site_by_head[site]) {
        d.heads = c->cfg->heads;
        d.head0 = (int64_t)c->tp * (c->cfg->heads / c->t);
    } else if (c->sp) {
        /* a sequence shard starts at position s0: element (si, bi, j) of the
         * shard is the single process's (s0 + si, bi, j), whose number is
         * (s0 << 24) * width further on (kernels.h) */
        d.offset = ((uint64_t)c->s0 << 24) * (uint64_t)d.width;
    }
    return d;
}

/* The tensor group's collectives move the backend's precision: under
 * --bf16/--fp16 16-bit tensors (half the bytes), summed with each partial
 * sum rounded to the grid, so their results are on it (comm.h). */
void ptdp__tp_f_bwd(const ptdp_gpt_chunk *c, float *dx, int64_t n) {
    ptdp_allreduce_sum_act(c->p.tp, dx, n, c->be->dtype);
}
void ptdp__tp_g_fwd(const ptdp_gpt_chunk *c, float *x, int64_t n) {
    ptdp_allreduce_sum_act(c->p.tp, x, n, c->be->dtype);
}

void ptdp__sp_gather_into(const ptdp_gpt_chunk *c, const float *xs, float *out) {
    const int64_t n = c->Ns * c->h;
    c->be->copy(c->be, out + (int64_t)c->tp * n, xs, n);
    ptdp_allgather_act(c->p.tp, out, n, c->be->dtype);
}
float *ptdp__sp_gather(const ptdp_gpt_chunk *c, const float *xs) {
    ptdp__sp_gather_into(c, xs, c->gath);
    return c->gath;
}
void ptdp__sp_scatter(const ptdp_gpt_chunk *c, float *full, float *out) {
    ptdp_reduce_scatter_sum_act(c->p.tp, full, out, c->Ns * c->h, c->be->dtype);
}

/* g's forward after a row-parallel GEMM into c->tmp [s, b, h]: the summed
 * rows of this rank's residual stream ([s', b, h]). */
static const float *g_fwd(const ptdp_gpt_chunk *c) {
    if (!c->sp) {
        ptdp__tp_g_fwd(c, c->tmp, c->N * c->h);
        return c->tmp;
    }
    ptdp__sp_scatter(c, c->tmp, c->gath);
    return c->gath;
}
/* f's backward: the input-gradient GEMM of a column-parallel layer writes
 * into f_bwd_buf(c) [s, b, h]; f_bwd leaves its sum's rows in c->dtmp.
 * (c->gath, not c->tmp: when B and W run back to back c->tmp holds the MLP
 * output's gradient until W.) */
static float *f_bwd_buf(const ptdp_gpt_chunk *c) { return c->sp ? c->gath : c->dtmp; }
static void f_bwd(const ptdp_gpt_chunk *c) {
    if (c->sp)
        ptdp__sp_scatter(c, c->gath, c->dtmp);
    else
        ptdp__tp_f_bwd(c, c->dtmp, c->N * c->h);
}
/* f's forward and g's backward: a residual-stream tensor as the whole
 * sequence (an all-gather with sp, else the tensor itself). */
static const float *whole(const ptdp_gpt_chunk *c, const float *xs) {
    return c->sp ? ptdp__sp_gather(c, xs) : xs;
}

/* The Llama family's choices, made in one place each: the norm (LayerNorm
 * or RMSNorm, whose rstd goes where LayerNorm's does and whose mean stays
 * unused), a linear layer's bias or the zeros standing in for it, rotary
 * embeddings on the queries and keys, attention with key/value groups, and
 * the MLP (GeLU's fused op, or SwiGLU's gate and up GEMMs written into the
 * two halves of each fc row). */
void ptdp__norm_fwd(const ptdp_gpt_chunk *c, const float *x, const float *w, const float *b,
                    float *out, float *mean, float *rstd, int64_t rows) {
    ptdp_backend *be = c->be;
    if (c->cfg->rmsnorm)
        be->rmsnorm_fwd(be, x, w, out, rstd, rows, c->h, c->cfg->ln_eps);
    else
        be->layernorm_fwd(be, x, w, b, out, mean, rstd, rows, c->h, c->cfg->ln_eps);
}
void ptdp__norm_bwd(const ptdp_gpt_chunk *c, const float *dout, const float *x, const float *w,
                    const float *mean, const float *rstd, float *dx, float *dw, float *db,
                    int64_t rows) {
    ptdp_backend *be = c->be;
    if (c->cfg->rmsnorm)
        be->rmsnorm_bwd(be, dout, x, w, rstd, dx, dw, rows, c->h);
    else
        be->layernorm_bwd(be, dout, x, w, mean, rstd, dx, dw, db, rows, c->h);
}
static const float *bias_or_zero(const ptdp_gpt_chunk *c, const float *b) {
    return b ? b : c->zbias;
}
static float *dbias_or_sink(const ptdp_gpt_chunk *c, float *db) { return db ? db : c->jbias; }

static void attn_fwd(const ptdp_gpt_chunk *c, ptdp__layer_act *A, ptdp_dropout pd) {
    ptdp_backend *be = c->be;
    const int64_t s = c->cfg->seq_length, b = c->job->micro_batch;
    if (c->kvl != c->al)
        be->attention_gqa_fwd(be, A->qkv, A->ctx, A->attn_saved, c->attn_scratch, s, b, c->al,
                              c->kvl, c->hd, pd);
    else
        be->attention_fwd(be, A->qkv, A->ctx, A->attn_saved, c->attn_scratch, s, b, c->al, c->hd,
                          pd);
}

void ptdp__layer_fwd(ptdp_gpt_chunk *c, ptdp__slot_act *sa, int64_t i, float *y) {
    ptdp_backend *be = c->be;
    const ptdp_layer_ptrs *W = &c->P.layers[i];
    ptdp__layer_act *A = &sa->layer[i];
    const int64_t N = c->N, Ns = c->Ns, h = c->h, hl = c->hl, fl = c->fl, ql = c->ql,
                  s = c->cfg->seq_length, b = c->job->micro_batch;
    const int64_t gl = c->p.layer_begin + i;
    const float *x = sa->x[i];

    ptdp__norm_fwd(c, x, W->ln1_w, W->ln1_b, A->ln1, A->ln1_mean, A->ln1_rstd, Ns);
    be->gemm(be, 0, 1, N, ql, h, 1.0f, whole(c, A->ln1), h, W->qkv_w, h, 0.0f, A->qkv, ql);
    if (W->qkv_b) be->bias_add(be, A->qkv, W->qkv_b, N, ql);
    /* positions are the sequence's: the attention input is always the whole sequence */
    if (c->rd) be->rope_fwd(be, A->qkv, c->rope_table, s, b, c->al, c->kvl, c->hd, c->rd, 0);
    attn_fwd(c, A, ptdp__dropout(c, c->cfg->attention_dropout, PTDP__DROPOUT_ATTN_PROBS, gl, sa));
    be->gemm(be, 0, 1, N, h, hl, 1.0f, A->ctx, hl, W->proj_w, hl, 0.0f, c->tmp, h);
    be->bias_dropout_add_fwd(
        be, g_fwd(c), bias_or_zero(c, W->proj_b), x, A->xm, Ns, h,
        ptdp__dropout(c, c->cfg->hidden_dropout, PTDP__DROPOUT_ATTN_OUT, gl, sa));

    ptdp__norm_fwd(c, A->xm, W->ln2_w, W->ln2_b, A->ln2, A->ln2_mean, A->ln2_rstd, Ns);
    if (c->cfg->swiglu) {
        const float *ln2 = whole(c, A->ln2);
        const int64_t fc = c->fc_cols;
        be->gemm(be, 0, 1, N, fl, h, 1.0f, ln2, h, W->gate_w, h, 0.0f, A->fc, fc);
        be->gemm(be, 0, 1, N, fl, h, 1.0f, ln2, h, W->up_w, h, 0.0f, A->fc + fl, fc);
        be->swiglu_fwd(be, A->fc, NULL, A->gl, N, fl);
        be->gemm(be, 0, 1, N, h, fl, 1.0f, A->gl, fl, W->fc2_w, fl, 0.0f, c->tmp, h);
    } else {
        be->mlp_fwd(be, whole(c, A->ln2), W->fc1_w, bias_or_zero(c, W->fc1_b), W->fc2_w, A->fc,
                    A->gl, c->tmp, N, h, fl);
    }
    be->bias_dropout_add_fwd(
        be, g_fwd(c), bias_or_zero(c, W->fc2_b), A->xm, y, Ns, h,
        ptdp__dropout(c, c->cfg->hidden_dropout, PTDP__DROPOUT_MLP_OUT, gl, sa));
}

/* B: input gradient only. The weight GEMMs' output gradients go to wg (the
 * whole sequence's rows under sequence parallelism), not to a scratch
 * buffer, because W reads them later. */
void ptdp__layer_bwd_b(ptdp_gpt_chunk *c, ptdp__slot_act *sa, int64_t i,
                       const ptdp__layer_wgrad *wg) {
    ptdp_backend *be = c->be;
    const ptdp_layer_ptrs *W = &c->P.layers[i], *G = &c->G.layers[i];
    ptdp__layer_act *A = &sa->layer[i];
    const int64_t N = c->N, Ns = c->Ns, h = c->h, hl = c->hl, fl = c->fl, ql = c->ql,
                  s = c->cfg->seq_length, b = c->job->micro_batch;
    const int64_t gl = c->p.layer_begin + i;
    const float *x = sa->x[i];
    float *dres = c->dres, *dtmp = c->dtmp;

    /* MLP: dres holds d(out); g's backward (sp) gathers the branch's gradient */
    be->bias_dropout_add_bwd(
        be, dres, c->sp ? dtmp : wg->dmlp_out, dbias_or_sink(c, G->fc2_b), Ns, h,
        ptdp__dropout(c, c->cfg->hidden_dropout, PTDP__DROPOUT_MLP_OUT, gl, sa));
    if (c->sp) ptdp__sp_gather_into(c, dtmp, wg->dmlp_out);
    if (c->cfg->swiglu) {
        const int64_t fc = c->fc_cols;
        float *dx = f_bwd_buf(c);
        be->gemm(be, 0, 0, N, fl, h, 1.0f, wg->dmlp_out, h, W->fc2_w, fl, 0.0f, c->dgl, fl);
        be->swiglu_bwd(be, c->dgl, A->fc, NULL, wg->dfc, NULL, N, fl);
        be->gemm(be, 0, 0, N, h, fl, 1.0f, wg->dfc, fc, W->gate_w, h, 0.0f, dx, h);
        be->gemm(be, 0, 0, N, h, fl, 1.0f, wg->dfc + fl, fc, W->up_w, h, 1.0f, dx, h);
        be->quantize(be, dx, N * h); /* the sum of two GEMMs, on the grid */
    } else {
        be->mlp_bwd_b(be, wg->dmlp_out, W->fc2_w, A->fc, bias_or_zero(c, W->fc1_b), W->fc1_w,
                      wg->dfc, dbias_or_sink(c, G->fc1_b), f_bwd_buf(c), N, h, fl);
    }
    f_bwd(c);
    ptdp__norm_bwd(c, dtmp, A->xm, W->ln2_w, A->ln2_mean, A->ln2_rstd, dres, G->ln2_w, G->ln2_b,
                   Ns);

    /* attention: dres holds d(xm) */
    be->bias_dropout_add_bwd(
        be, dres, c->sp ? dtmp : wg->dattn_out, dbias_or_sink(c, G->proj_b), Ns, h,
        ptdp__dropout(c, c->cfg->hidden_dropout, PTDP__DROPOUT_ATTN_OUT, gl, sa));
    if (c->sp) ptdp__sp_gather_into(c, dtmp, wg->dattn_out);
    be->gemm(be, 0, 0, N, hl, h, 1.0f, wg->dattn_out, h, W->proj_w, hl, 0.0f, c->dctx, hl);
    const ptdp_dropout pd =
        ptdp__dropout(c, c->cfg->attention_dropout, PTDP__DROPOUT_ATTN_PROBS, gl, sa);
    if (c->job->recompute == PTDP_RECOMPUTE_SELECTIVE)
        /* selective recomputation: core attention reruns from the stored QKV
         * to rebuild its saved state in the shared workspace; same inputs,
         * masks and kernel, so the ctx it writes over is the same ctx */
        attn_fwd(c, A, pd);
    if (c->kvl != c->al)
        be->attention_gqa_bwd(be, c->dctx, A->qkv, A->ctx, A->attn_saved, wg->dqkv, c->attn_scratch,
                              s, b, c->al, c->kvl, c->hd, pd);
    else
        be->attention_bwd(be, c->dctx, A->qkv, A->ctx, A->attn_saved, wg->dqkv, c->attn_scratch, s,
                          b, c->al, c->hd, pd);
    if (c->rd) be->rope_bwd(be, wg->dqkv, c->rope_table, s, b, c->al, c->kvl, c->hd, c->rd, 0);
    if (G->qkv_b) be->bias_bwd(be, wg->dqkv, G->qkv_b, N, ql);
    be->gemm(be, 0, 0, N, h, ql, 1.0f, wg->dqkv, ql, W->qkv_w, h, 0.0f, f_bwd_buf(c), h);
    f_bwd(c);
    ptdp__norm_bwd(c, dtmp, x, W->ln1_w, A->ln1_mean, A->ln1_rstd, dres, G->ln1_w, G->ln1_b, Ns);
}

/* W: the weight gradients, from the GEMM inputs stashed in the slot and the
 * output gradients B left in wg. Under tensor parallelism each rank's weight
 * shard's gradient is local; with sequence parallelism the LayerNorm outputs
 * are gathered again (the slot keeps their shards). */
void ptdp__layer_bwd_w(ptdp_gpt_chunk *c, ptdp__slot_act *sa, int64_t i,
                       const ptdp__layer_wgrad *wg) {
    ptdp_backend *be = c->be;
    const ptdp_layer_ptrs *G = &c->G.layers[i];
    const ptdp__layer_act *A = &sa->layer[i];
    const int64_t N = c->N, h = c->h, hl = c->hl, fl = c->fl, ql = c->ql;
    if (c->cfg->swiglu) {
        const float *ln2 = whole(c, A->ln2);
        const int64_t fc = c->fc_cols;
        be->gemm(be, 1, 0, h, fl, N, 1.0f, wg->dmlp_out, h, A->gl, fl, 1.0f, G->fc2_w, fl);
        be->gemm(be, 1, 0, fl, h, N, 1.0f, wg->dfc, fc, ln2, h, 1.0f, G->gate_w, h);
        be->gemm(be, 1, 0, fl, h, N, 1.0f, wg->dfc + fl, fc, ln2, h, 1.0f, G->up_w, h);
    } else {
        be->mlp_bwd_w(be, wg->dmlp_out, A->gl, wg->dfc, whole(c, A->ln2), G->fc2_w, G->fc1_w, N, h,
                      fl);
    }
    be->gemm(be, 1, 0, h, hl, N, 1.0f, wg->dattn_out, h, A->ctx, hl, 1.0f, G->proj_w, hl);
    be->gemm(be, 1, 0, ql, h, N, 1.0f, wg->dqkv, ql, whole(c, A->ln1), h, 1.0f, G->qkv_w, h);
}
