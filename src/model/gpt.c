/* gpt.c - a model chunk's forward and backward on one micro-batch: the
 * embedding (first stage), the layers, the loss head (last stage), in that
 * order, and activation recomputation (backward reruns a recompute group's
 * forward from its stored input). Stashed per micro-batch slot and layer: x,
 * ln1 (+stats), qkv, what attention saves (the backend's: a logsumexp per row
 * on the CPU), ctx, xm, ln2 (+stats), fc, gl. The loss head runs
 * its backward inside the forward (it needs nothing from later stages), so
 * the last stage keeps the [s, b, h] gradient of its last layer's output
 * instead of [s, b, V/t] logits. With sequence parallelism everything
 * between the embedding and the loss head's logits is this rank's sequence
 * shard (layer.c).
 * The backward also runs as two halves for zero-bubble schedules: B (input
 * gradients, the pipeline's critical path) and W (weight gradients), W
 * reading the GEMM output gradients B kept in the slot.
 * Not here: the layer (layer.c), the embedding and loss head (head.c), the
 * memory plan (chunk.c), pipeline communication (pipeline/). */
#include "model/model.h"
#include "model/model_internal.h"

void ptdp_gpt_chunk_logits(ptdp_gpt_chunk *c, const int32_t *tokens, int64_t ld, float *logits) {
    PTDP_ASSERT(c->p.pre && c->p.post);
    ptdp_backend *be = c->be;
    ptdp__slot_act *sa = &c->slots[0];
    const int64_t N = c->N, s = c->cfg->seq_length, b = c->job->micro_batch;
    sa->iteration = sa->microbatch = 0;
    for (int64_t bi = 0; bi < b; bi++)
        be->upload(be, sa->tokens + bi * (s + 1), tokens + bi * ld, sizeof(int32_t) * (size_t)s);
    ptdp__gpt_embed_fwd(c, sa);
    for (int64_t i = 0; i < c->nl; i++) ptdp__layer_fwd(c, sa, i, sa->x[i + 1]);
    ptdp__head_logits(c, sa->x[c->nl]);
    be->download(be, logits, c->logits, sizeof(float) * (size_t)(N * c->Vl));
}

void ptdp_gpt_chunk_fwd(ptdp_gpt_chunk *c, int slot, const int32_t *tokens, const float *x_in,
                        float *x_out, float loss_scale, double *loss_sum, int64_t iteration,
                        int64_t microbatch) {
    PTDP_ASSERT(slot >= 0 && slot < c->p.slots);
    ptdp_backend *be = c->be;
    ptdp__slot_act *sa = &c->slots[slot];
    const int64_t Ns = c->Ns, h = c->h, s = c->cfg->seq_length, b = c->job->micro_batch;
    sa->iteration = iteration;
    sa->microbatch = microbatch;
    if (sa->tokens) {
        PTDP_ASSERT(tokens);
        be->upload(be, sa->tokens, tokens, sizeof(int32_t) * (size_t)(b * (s + 1)));
    }
    if (c->p.pre) {
        ptdp__gpt_embed_fwd(c, sa);
        if (c->cfg->hidden_dropout > 0) /* an optional op: only runs that need it call it */
            be->dropout_fwd(
                be, sa->x[0], Ns * h,
                ptdp__dropout(c, c->cfg->hidden_dropout, PTDP__DROPOUT_EMBEDDING, -1, sa));
    } else {
        be->copy(be, sa->x[0], x_in, Ns * h);
    }
    for (int64_t i = 0; i < c->nl; i++) ptdp__layer_fwd(c, sa, i, sa->x[i + 1]);
    if (c->p.post)
        ptdp__head_fwd_bwd(c, sa, loss_scale, loss_sum);
    else
        be->copy(be, x_out, sa->x[c->nl], Ns * h);
}

/* The chunk's backward. split = 0: each layer's B and W back to back, the
 * GEMMs' output gradients in the workspace (and the layer's dead xm), and the gradient hook after
 * each layer. split = 1: B only, into the slot's per-layer buffers; W and the hook come with
 * ptdp_gpt_chunk_bwd_weight. */
static void chunk_bwd(ptdp_gpt_chunk *c, int slot, const float *dy, float *dx, int split) {
    PTDP_ASSERT(slot >= 0 && slot < c->p.slots);
    PTDP_ASSERT_MSG(c->grads, "backward on an inference chunk");
    ptdp_backend *be = c->be;
    ptdp__slot_act *sa = &c->slots[slot];
    const int64_t Ns = c->Ns, h = c->h;
    be->copy(be, c->dres, c->p.post ? sa->x[c->nl] : dy, Ns * h);
    for (int64_t i = c->nl - 1; i >= 0; i--) {
        /* entering a recompute group from its end: rerun its forward (same
         * dropout keys: the slot remembers iteration and micro-batch) */
        if (c->group[i] >= 0 && i == c->group_end[i] - 1)
            for (int64_t j = c->group[i]; j <= i; j++)
                ptdp__layer_fwd(c, sa, j, j == i ? c->ws_out : sa->x[j + 1]);
        if (split) {
            ptdp__layer_bwd_b(c, sa, i, &sa->wg[i]);
            continue;
        }
        ptdp__layer_wgrad wg = c->wg_ws;
        if (!c->sp) wg.dattn_out = sa->layer[i].xm; /* dead once B has read it */
        ptdp__layer_bwd_b(c, sa, i, &wg);
        ptdp__layer_bwd_w(c, sa, i, &wg);
        if (c->hook) c->hook(c->hook_ctx, c->layer_offset[i]);
    }
    if (c->p.pre) {
        if (c->cfg->hidden_dropout > 0)
            be->dropout_bwd(
                be, c->dres, Ns * h,
                ptdp__dropout(c, c->cfg->hidden_dropout, PTDP__DROPOUT_EMBEDDING, -1, sa));
        ptdp__gpt_embed_bwd(c, sa);
    } else {
        be->copy(be, dx, c->dres, Ns * h);
    }
    if (c->hook && !split) c->hook(c->hook_ctx, 0);
}

void ptdp_gpt_chunk_bwd(ptdp_gpt_chunk *c, int slot, const float *dy, float *dx) {
    chunk_bwd(c, slot, dy, dx, 0);
}

void ptdp_gpt_chunk_bwd_input(ptdp_gpt_chunk *c, int slot, const float *dy, float *dx) {
    PTDP_ASSERT_MSG(c->p.split_backward, "split backward on a chunk built without it");
    chunk_bwd(c, slot, dy, dx, 1);
}

/* The embedding's gradient came with B (a scatter-add with nothing after it
 * on the critical path), so after the last layer's W every gradient of the
 * micro-batch is in place and the hook may release the whole buffer. */
void ptdp_gpt_chunk_bwd_weight(ptdp_gpt_chunk *c, int slot) {
    PTDP_ASSERT_MSG(c->p.split_backward, "split backward on a chunk built without it");
    PTDP_ASSERT(slot >= 0 && slot < c->p.slots);
    ptdp__slot_act *sa = &c->slots[slot];
    for (int64_t i = c->nl - 1; i >= 0; i--) {
        ptdp__layer_bwd_w(c, sa, i, &sa->wg[i]);
        if (c->hook) c->hook(c->hook_ctx, c->layer_offset[i]);
    }
    if (c->hook) c->hook(c->hook_ctx, 0);
}
