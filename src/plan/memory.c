/* memory.c - the planner's memory model of one training rank, from the
 * configuration alone: every tensor category of base/base.h (weights,
 * gradients, optimizer state, ZeRO-1 gradient shard, activations, workspace,
 * pipeline and evaluation buffers, the compute backend's own workspace). It
 * must not depend on the model,
 * optimizer or pipeline code (only on base and pipeline/schedule.h): the
 * train run prints this prediction next to what the rank actually carved,
 * and tests/test_memory_plan.sh holds the two equal, byte for byte. So the
 * model below is exact, including the 64-byte alignment of every piece
 * (ptdp_arena_need) and the 16-float alignment of every parameter tensor.
 *
 * ptdp's fp32 activations per layer per stashed micro-batch (N = s*b tokens,
 * hl = h/t, fl = 4h/t, al = a/t), in floats:
 *   LayerNorm outputs ln1, ln2 and the residual xm   3 N h
 *   QKV, attention context                            4 N hl
 *   MLP pre-activation and GeLU output                2 N fl  (= 8 N hl)
 *   what attention saves for its backward             the backend's count:
 *                                                     b al s (CPU: a logsumexp
 *                                                     per row), b al s^2 (CUDA:
 *                                                     the probabilities)
 *   LayerNorm statistics                              4 N
 * plus the layer's input x (N h), i.e. on the CPU 4 bytes x (N (4h + 12h/t) +
 * 4N + b (a/t) s). Dropout masks are regenerated from the counter-based RNG, so
 * unlike the paper's 16-bit count of s b h (34 + 5 a s / h) bytes none are
 * stored. With sequence parallelism (Korthikanti et al.) x, ln1, ln2, xm and
 * the LayerNorm statistics hold s/t positions (the LayerNorm outputs are
 * gathered again for the backward instead of being kept whole), so a layer
 * stashes 4 bytes x (N (4h/t + 12h/t) + 4N/t + b (a/t) s): every term of the
 * t = 1 count divided by t, as in the paper's (s b h / t)(34 + 5 a s / h).
 * With full recomputation a stashed micro-batch keeps only the inputs of its
 * recompute groups; one group's internals live in a workspace shared by all
 * micro-batches. Selective recomputation stores every layer but what
 * attention saves for its backward, which one workspace copy holds for the
 * layer whose backward reruns core attention.
 * Zero-bubble schedules (split backward) keep, per layer and stashed
 * micro-batch, the output gradients of the four weight GEMMs from B to W:
 * N h + N fl + 3 N hl more floats (= N (h + 7h/t)); the fourth, N h, reuses
 * the layer's stashed xm, dead by then, except with sequence parallelism,
 * where xm is a shard and the slot carves N h more. With sequence
 * parallelism and B, W back to back the workspace holds that fourth one
 * ([s, b, h]) instead. The native bf16 backend keeps the MLP's three
 * (fc, gl and dfc, N fl values each) in bf16: N fl / 2 floats (mlp16).
 *
 * The compute backend's own memory (scratch, GEMM workspace, the native
 * bf16 GEMMs' weight copies, CUDA's attention workspace) is one block:
 * fixed + per_layer x (layers of the rank's chunks) + per_head x (loss heads
 * among them), where only the backend knows its three numbers for the
 * configuration's shapes (the layouts oneDNN picks) and hands them over as
 * it hands over attention's. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

static size_t nf(double floats) { return ptdp_arena_need((size_t)floats * 4); }

/* floats of one of the MLP's N fl tensors (fc, gl, dfc) */
static double mlp_floats(const ptdp_plan_mem *m, int64_t N, int64_t fl) {
    return m->mlp16 ? (double)((N * fl + 1) / 2) : (double)(N * fl);
}
/* SwiGLU's fc and dfc hold gate and up (2 N fl), gl N fl, always fp32 */
static double fc_floats(const ptdp_plan_mem *m, int64_t N, int64_t fl) {
    return m->blocks.swiglu ? (double)(2 * N * fl) : mlp_floats(m, N, fl);
}
static double gl_floats(const ptdp_plan_mem *m, int64_t N, int64_t fl) {
    return m->blocks.swiglu ? (double)(N * fl) : mlp_floats(m, N, fl);
}
/* QKV's columns per rank: (a + 2g) hd / t, 3 h/t without groups */
static int64_t qkv_cols(int64_t h, int64_t a, int64_t t, const ptdp_plan_blocks *bl) {
    const int64_t g = bl->groups ? bl->groups : a;
    return (a + 2 * g) * (h / a) / t;
}

/* One layer's stored activations, piece by piece as the model carves them. */
static int64_t rows_of_stream(const ptdp_plan_mem *m) { /* Ns: the residual stream's rows */
    const int64_t N = m->s * m->b;
    return m->sequence_parallel && m->t > 1 ? N / m->t : N;
}

static size_t layer_bytes(const ptdp_plan_mem *m) {
    const int64_t N = m->s * m->b, Ns = rows_of_stream(m), h = m->h, hl = h / m->t,
                  fl = m->ffn / m->t, ql = qkv_cols(h, m->a, m->t, &m->blocks);
    const int selective = m->recompute == PTDP_RECOMPUTE_SELECTIVE;
    return 3 * nf((double)(Ns * h)) + 4 * nf((double)Ns) + nf((double)(N * ql)) +
           (selective ? 0 : nf((double)m->attn_saved_floats)) + nf((double)(N * hl)) +
           nf(fc_floats(m, N, fl)) + nf(gl_floats(m, N, fl));
}

void ptdp_plan_activation_bytes(const ptdp_plan_mem *m, double *per_slot, double *shared) {
    const int64_t N = m->s * m->b, Ns = rows_of_stream(m), h = m->h, hl = h / m->t,
                  fl = m->ffn / m->t, ql = qkv_cols(h, m->a, m->t, &m->blocks);
    const size_t L = layer_bytes(m), X = nf((double)(Ns * h)), XN = nf((double)(N * h));
    const int64_t n = m->recompute_num_layers < 1 ? 1 : m->recompute_num_layers, l = m->layers;
    size_t slot =
        (m->pre || m->post) ? ptdp_arena_need(4 * (size_t)(m->b * (m->s + 1))) : 0; /* tokens */
    int64_t max_group = 0;
    for (int64_t i = 0; i <= l; i++) {
        int64_t g = -1, e = i + 1; /* recompute group of layer i (i < l) */
        if (i < l && m->recompute == PTDP_RECOMPUTE_UNIFORM) {
            g = i / n * n;
            e = g + n < l ? g + n : l;
        } else if (i < l && m->recompute == PTDP_RECOMPUTE_BLOCK && i < n) {
            g = i;
        }
        if (i == 0 || i == l || g < 0 || g == i) slot += X; /* stored input */
        if (i < l && g < 0) slot += L;
        /* kept from B to W; with sequence parallelism also the attention
         * output's gradient (xm, which holds it otherwise, is only a shard) */
        if (i < l && g < 0 && m->split_backward)
            slot += XN + nf(fc_floats(m, N, fl)) + nf((double)(N * ql)) + (Ns < N ? XN : 0);
        if (g >= 0 && e - g > max_group) max_group = e - g;
    }
    size_t sh = (size_t)max_group * (L + X) + (max_group ? X : 0);
    /* the row-parallel output, the residual gradients, the gathered sequence
     * (sequence parallelism), the backward's tensor-parallel buffers, and with
     * sequence parallelism the attention output's gradient from B to W */
    sh += XN + 2 * X + (Ns < N ? 2 * XN : 0) + nf((double)(N * hl)) + nf((double)(N * ql)) +
          nf(fc_floats(m, N, fl));
    sh += nf((double)m->attn_scratch_floats); /* attention scratch */
    /* the Llama family's: rotary table [s, rd], zeros and sink for absent
     * biases, SwiGLU's gradient of gl */
    if (m->blocks.rotary_dims) sh += nf((double)(m->s * m->blocks.rotary_dims));
    if (m->blocks.no_bias) sh += 2 * nf((double)(h > fl ? h : fl));
    if (m->blocks.swiglu) sh += nf((double)(N * fl));
    if (m->recompute == PTDP_RECOMPUTE_SELECTIVE)
        sh += nf((double)m->attn_saved_floats); /* the one layer being recomputed */
    if (m->post) /* final LayerNorm (rows of the stream), logits and the loss's [s, b] */
        sh +=
            X + 2 * nf((double)Ns) + 4 * nf((double)N) + nf((double)(N * (m->vocab_padded / m->t)));
    *per_slot = (double)slot;
    *shared = (double)sh;
}

ptdp_plan_rank ptdp_plan_rank_default_params(void) {
    return (ptdp_plan_rank){.layers = 0,
                            .h = 0,
                            .a = 0,
                            .ffn = 0,
                            .s = 0,
                            .b = 1,
                            .vocab_padded = 0,
                            .max_positions = 0,
                            .t = 1,
                            .d = 1,
                            .pp_rank = 0,
                            .dp_rank = 0,
                            .sched = ptdp_schedule_default_params(),
                            .zero = 0,
                            .bucket_floats = 40000000,
                            .recompute = PTDP_RECOMPUTE_NONE,
                            .recompute_num_layers = 0,
                            .attn_saved_floats = 0,
                            .attn_scratch_floats = 0,
                            .backend_fixed = 0,
                            .backend_per_layer = 0,
                            .backend_per_head = 0,
                            .master_weights = 0,
                            .sequence_parallel = 0};
}

/* A chunk's parameter tensors in buffer order: local element counts. */
static int chunk_tensors(const ptdp_plan_rank *r, int64_t nl, int pre, int post, int64_t *numel) {
    const int64_t h = r->h, t = r->t, f = r->ffn, q = qkv_cols(h, r->a, t, &r->blocks);
    const ptdp_plan_blocks *bl = &r->blocks;
    const int bias = !bl->no_bias, lnb = !bl->rmsnorm, glu = bl->swiglu;
    int n = 0;
    if (pre || (post && !bl->untie)) numel[n++] = r->vocab_padded / t * h; /* word embedding */
    if (pre && !bl->rotary_dims) numel[n++] = r->max_positions * h;        /* position embedding */
    for (int64_t i = 0; i < nl; i++) {
        /* model_internal.h's PTDP__LAYER_PARAMS, in its order, where present */
        const int64_t layer[14] = {h, h,         q * h, q,         h * (h / t), h,           h,
                                   h, f / t * h, f / t, f / t * h, f / t * h,   h * (f / t), h};
        const int present[14] = {1,    lnb,          1,   bias, 1, bias, 1, lnb,
                                 !glu, bias && !glu, glu, glu,  1, bias};
        for (int k = 0; k < 14; k++)
            if (present[k]) numel[n++] = layer[k];
    }
    if (post) { /* final norm (and its bias), the untied output layer */
        numel[n++] = h;
        if (lnb) numel[n++] = h;
        if (bl->untie) numel[n++] = r->vocab_padded / t * h;
    }
    return n;
}

/* Elements of the tensors' ranges this rank updates (ZeRO-1: its 1/d of
 * every bucket, buckets cut from the end of the flat buffer). */
static int64_t owned_state(const ptdp_plan_rank *r, const int64_t *off, const int64_t *numel, int n,
                           int64_t total) {
    int64_t st = 0;
    if (!r->zero) {
        for (int i = 0; i < n; i++) st += numel[i];
        return st;
    }
    const int64_t d = r->d, size = r->bucket_floats < d ? d : r->bucket_floats / d * d;
    for (int64_t end = total; end > 0;) {
        const int64_t len = end >= size ? size : end, lo = end - len + r->dp_rank * (len / d),
                      hi = lo + len / d;
        for (int i = 0; i < n; i++) {
            const int64_t a = off[i] > lo ? off[i] : lo, e = off[i] + numel[i], b = e < hi ? e : hi;
            if (a < b) st += b - a;
        }
        end -= len;
    }
    return st;
}

int ptdp_plan_rank_memory(const ptdp_plan_rank *r, size_t bytes[PTDP_MEM_NCAT]) {
    memset(bytes, 0, sizeof(size_t) * PTDP_MEM_NCAT);
    const ptdp_schedule_params *sp = &r->sched;
    const int64_t stages = (int64_t)sp->p * sp->v;
    int rc = ptdp_stage_layout_check(&r->layout, r->layers, sp->p, sp->v);
    if (rc != PTDP_OK) return rc;
    size_t backend = r->backend_fixed; /* the compute backend's own memory, one block */
    for (int c = 0; c < sp->v; c++) {
        const int64_t stage = ptdp_schedule_stage(sp, r->pp_rank, c);
        int64_t begin, end;
        ptdp_stage_layout_range(&r->layout, r->layers, sp->p, sp->v, (int)stage, &begin, &end);
        const int64_t per = end - begin;
        const int pre = stage == 0, post = stage == stages - 1;
        backend += (size_t)per * r->backend_per_layer + (post ? r->backend_per_head : 0);
        int64_t *numel = malloc(sizeof(int64_t) * (size_t)(14 * per + 5) * 2);
        if (!numel) return ptdp_errorf(PTDP_ENOMEM, "out of memory for the memory plan");
        int64_t *off = numel + 14 * per + 5, total = 0;
        const int n = chunk_tensors(r, per, pre, post, numel);
        for (int i = 0; i < n; i++) {
            off[i] = total;
            total += (numel[i] + 15) / 16 * 16; /* every tensor 64-byte aligned */
        }
        const int64_t mult = 16 * (int64_t)r->d; /* data-parallel shards divide evenly */
        total = (total + mult - 1) / mult * mult;
        bytes[PTDP_MEM_WEIGHTS] += ptdp_arena_need(4 * (size_t)total);
        bytes[PTDP_MEM_GRADIENTS] += ptdp_arena_need(4 * (size_t)total);
        if (r->zero) bytes[PTDP_MEM_GRAD_SHARD] += ptdp_arena_need(4 * (size_t)(total / r->d));
        bytes[PTDP_MEM_OPTIMIZER] += ptdp_arena_need((r->master_weights ? 12 : 8) *
                                                     (size_t)owned_state(r, off, numel, n, total));
        free(numel);
        const ptdp_plan_mem m = {.layers = per,
                                 .h = r->h,
                                 .a = r->a,
                                 .ffn = r->ffn,
                                 .s = r->s,
                                 .b = r->b,
                                 .t = r->t,
                                 .vocab_padded = r->vocab_padded,
                                 .pre = pre,
                                 .post = post,
                                 .recompute = r->recompute,
                                 .recompute_num_layers = r->recompute_num_layers,
                                 .sequence_parallel = r->sequence_parallel,
                                 .split_backward = ptdp_schedule_splits_backward(sp),
                                 .attn_saved_floats = r->attn_saved_floats,
                                 .attn_scratch_floats = r->attn_scratch_floats,
                                 .mlp16 = r->mlp16,
                                 .blocks = r->blocks};
        double slot, shared;
        ptdp_plan_activation_bytes(&m, &slot, &shared);
        bytes[PTDP_MEM_ACTIVATIONS] +=
            (size_t)slot * (size_t)ptdp_schedule_chunk_inflight(sp, r->pp_rank, c);
        bytes[PTDP_MEM_WORKSPACE] += (size_t)shared;
    }
    bytes[PTDP_MEM_BACKEND] = ptdp_arena_need(backend);
    if (sp->p > 1) {
        /* one activation [s, b, h], or its sequence shard */
        const size_t msg =
            (size_t)(r->s * r->b * r->h / (r->sequence_parallel && r->t > 1 ? r->t : 1));
        ptdp_schedule all;
        rc = ptdp_schedule_init(&all, sp);
        if (rc != PTDP_OK) return rc;
        const int K = ptdp_schedule_send_buffers(&all); /* ring slots per direction */
        ptdp_schedule_free(&all);
        bytes[PTDP_MEM_PIPELINE] = ptdp_arena_need(4 * msg * (size_t)(2 + 2 * K));
        bytes[PTDP_MEM_EVAL] = ptdp_arena_need(4 * msg * 2);
    }
    return PTDP_OK;
}
