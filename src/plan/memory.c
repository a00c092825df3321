/* memory.c - the planner's memory model of one training rank, from the
 * configuration alone: every tensor category of base/base.h (weights,
 * gradients, optimizer state, ZeRO-1 gradient shard, activations, workspace,
 * pipeline buffers (training and evaluation share them), the compute backend's own workspace). It
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

/* One model chunk as the model carves it: the job's shape and options at
 * one virtual stage, the backend's numbers. */
typedef struct {
    int64_t layers;          /* layers in the chunk */
    int64_t h, ffn, s, b, t; /* hidden, MLP width, sequence, micro-batch, tensor-parallel size */
    int64_t vocab_padded;
    int pre, post; /* first / last pipeline stage */
    int recompute; /* ptdp_recompute_method (base.h) */
    int64_t recompute_num_layers;
    int sequence_parallel; /* t > 1: the residual stream's tensors hold s/t positions */
    int split_backward;    /* zero-bubble schedule: each slot also keeps its layers'
                              weight-GEMM output gradients until W */
    int64_t attn_saved_floats, attn_scratch_floats;
    int mlp16;
    /* the Llama family's blocks (docs/llama.md): QKV columns per rank (3 h/t
     * without key/value groups), SwiGLU (gate|up and their product in fp32),
     * rotary dims (a table of s rows), no biases (zeros and a sink of
     * max(h, ffn/t) floats) */
    int64_t ql, rotary_dims;
    int swiglu, no_bias;
} chunk_mem;

static chunk_mem chunk_of(const ptdp_job *job, int64_t stage, const ptdp_plan_backend *be) {
    const ptdp_schedule_params sp = ptdp_schedule_of_job(job);
    int64_t begin, end;
    ptdp_job_stage_layers(job, stage, &begin, &end);
    return (chunk_mem){.layers = end - begin,
                       .h = job->model.hidden,
                       .ffn = job->model.ffn_hidden,
                       .s = job->model.seq_length,
                       .b = job->micro_batch,
                       .t = job->t,
                       .vocab_padded = job->model.vocab_padded,
                       .pre = stage == 0,
                       .post = stage == job->p * job->v - 1,
                       .recompute = job->recompute,
                       .recompute_num_layers = job->recompute_num_layers,
                       .sequence_parallel = ptdp_job_sequence_parallel(job),
                       .split_backward = ptdp_schedule_splits_backward(&sp),
                       .attn_saved_floats = be->attn_saved_floats,
                       .attn_scratch_floats = be->attn_scratch_floats,
                       .mlp16 = be->mlp16,
                       .ql = (job->model.heads + 2 * ptdp_gpt_groups(&job->model)) *
                             (job->model.hidden / job->model.heads) / job->t,
                       .rotary_dims = ptdp_gpt_rotary_dims(&job->model),
                       .swiglu = job->model.swiglu,
                       .no_bias = job->model.no_bias};
}

static size_t nf(double floats) { return ptdp_arena_need((size_t)floats * 4); }

/* floats of one of the MLP's N fl tensors (fc, gl, dfc) */
static double mlp_floats(const chunk_mem *m, int64_t N, int64_t fl) {
    return m->mlp16 ? (double)((N * fl + 1) / 2) : (double)(N * fl);
}
/* SwiGLU's fc and dfc hold gate and up (2 N fl), gl N fl, always fp32 */
static double fc_floats(const chunk_mem *m, int64_t N, int64_t fl) {
    return m->swiglu ? (double)(2 * N * fl) : mlp_floats(m, N, fl);
}
static double gl_floats(const chunk_mem *m, int64_t N, int64_t fl) {
    return m->swiglu ? (double)(N * fl) : mlp_floats(m, N, fl);
}

/* One layer's stored activations, piece by piece as the model carves them. */
static int64_t rows_of_stream(const chunk_mem *m) { /* Ns: the residual stream's rows */
    const int64_t N = m->s * m->b;
    return m->sequence_parallel && m->t > 1 ? N / m->t : N;
}

static size_t layer_bytes(const chunk_mem *m) {
    const int64_t N = m->s * m->b, Ns = rows_of_stream(m), h = m->h, hl = h / m->t,
                  fl = m->ffn / m->t;
    const int selective = m->recompute == PTDP_RECOMPUTE_SELECTIVE;
    return 3 * nf((double)(Ns * h)) + 4 * nf((double)Ns) + nf((double)(N * m->ql)) +
           (selective ? 0 : nf((double)m->attn_saved_floats)) + nf((double)(N * hl)) +
           nf(fc_floats(m, N, fl)) + nf(gl_floats(m, N, fl));
}

static void activation_bytes(const chunk_mem *m, double *per_slot, double *shared) {
    const int64_t N = m->s * m->b, Ns = rows_of_stream(m), h = m->h, hl = h / m->t,
                  fl = m->ffn / m->t;
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
            slot += XN + nf(fc_floats(m, N, fl)) + nf((double)(N * m->ql)) + (Ns < N ? XN : 0);
        if (g >= 0 && e - g > max_group) max_group = e - g;
    }
    size_t sh = (size_t)max_group * (L + X) + (max_group ? X : 0);
    /* the row-parallel output, the residual gradients, the gathered sequence
     * (sequence parallelism), the backward's tensor-parallel buffers, and with
     * sequence parallelism the attention output's gradient from B to W */
    sh += XN + 2 * X + (Ns < N ? 2 * XN : 0) + nf((double)(N * hl)) + nf((double)(N * m->ql)) +
          nf(fc_floats(m, N, fl));
    sh += nf((double)m->attn_scratch_floats); /* attention scratch */
    /* the Llama family's: rotary table [s, rd], zeros and sink for absent
     * biases, SwiGLU's gradient of gl */
    if (m->rotary_dims) sh += nf((double)(m->s * m->rotary_dims));
    if (m->no_bias) sh += 2 * nf((double)(h > fl ? h : fl));
    if (m->swiglu) sh += nf((double)(N * fl));
    if (m->recompute == PTDP_RECOMPUTE_SELECTIVE)
        sh += nf((double)m->attn_saved_floats); /* the one layer being recomputed */
    if (m->post) /* final LayerNorm (rows of the stream), logits and the loss's [s, b] */
        sh +=
            X + 2 * nf((double)Ns) + 4 * nf((double)N) + nf((double)(N * (m->vocab_padded / m->t)));
    *per_slot = (double)slot;
    *shared = (double)sh;
}

void ptdp_plan_activation_bytes(const ptdp_job *job, int64_t stage, const ptdp_plan_backend *be,
                                double *per_slot, double *shared) {
    const chunk_mem m = chunk_of(job, stage, be);
    activation_bytes(&m, per_slot, shared);
}

/* A chunk's parameter tensors in buffer order: local element counts. */
static int chunk_tensors(const ptdp_job *job, int64_t nl, int pre, int post, int64_t *numel) {
    const ptdp_gpt_config *c = &job->model;
    const int64_t h = c->hidden, t = job->t, f = c->ffn_hidden,
                  q = (c->heads + 2 * ptdp_gpt_groups(c)) * (h / c->heads) / t;
    const int bias = !c->no_bias, lnb = !c->rmsnorm, glu = c->swiglu;
    int n = 0;
    if (pre || (post && !c->untie)) numel[n++] = c->vocab_padded / t * h; /* word embedding */
    if (pre && !c->rope) numel[n++] = c->max_positions * h;               /* position embedding */
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
        if (c->untie) numel[n++] = c->vocab_padded / t * h;
    }
    return n;
}

/* Elements of the tensors' ranges data-parallel rank dp_rank updates
 * (ZeRO-1: its 1/d of every bucket, buckets cut from the end of the flat
 * buffer). */
static int64_t owned_state(const ptdp_job *job, int dp_rank, const int64_t *off,
                           const int64_t *numel, int n, int64_t total) {
    int64_t st = 0;
    if (!job->distributed_optimizer) {
        for (int i = 0; i < n; i++) st += numel[i];
        return st;
    }
    const int64_t d = job->d, bucket = job->ddp_bucket_size, size = bucket < d ? d : bucket / d * d;
    for (int64_t end = total; end > 0;) {
        const int64_t len = end >= size ? size : end, lo = end - len + dp_rank * (len / d),
                      hi = lo + len / d;
        for (int i = 0; i < n; i++) {
            const int64_t a = off[i] > lo ? off[i] : lo, e = off[i] + numel[i], b = e < hi ? e : hi;
            if (a < b) st += b - a;
        }
        end -= len;
    }
    return st;
}

/* Weights, gradients, the ZeRO-1 shard and the optimizer state of virtual
 * stage `stage`'s chunk, added to bytes[]. */
static int add_chunk_params(const ptdp_job *job, int dp_rank, int64_t stage,
                            size_t bytes[PTDP_MEM_NCAT]) {
    int64_t begin, end;
    ptdp_job_stage_layers(job, stage, &begin, &end);
    const int64_t per = end - begin, d = job->d;
    const int pre = stage == 0, post = stage == job->p * job->v - 1;
    int64_t *numel = malloc(sizeof(int64_t) * (size_t)(14 * per + 5) * 2);
    if (!numel) return ptdp_errorf(PTDP_ENOMEM, "out of memory for the memory plan");
    int64_t *off = numel + 14 * per + 5, total = 0;
    const int n = chunk_tensors(job, per, pre, post, numel);
    for (int i = 0; i < n; i++) {
        off[i] = total;
        total += (numel[i] + 15) / 16 * 16; /* every tensor 64-byte aligned */
    }
    const int64_t mult = 16 * d; /* data-parallel shards divide evenly */
    total = (total + mult - 1) / mult * mult;
    bytes[PTDP_MEM_WEIGHTS] += ptdp_arena_need(4 * (size_t)total);
    bytes[PTDP_MEM_GRADIENTS] += ptdp_arena_need(4 * (size_t)total);
    if (job->distributed_optimizer)
        bytes[PTDP_MEM_GRAD_SHARD] += ptdp_arena_need(4 * (size_t)(total / d));
    /* 16-bit jobs: fp32 master weights beside m and v */
    const size_t per_param = job->dtype != PTDP_DTYPE_FP32 ? 12 : 8;
    bytes[PTDP_MEM_OPTIMIZER] +=
        ptdp_arena_need(per_param * (size_t)owned_state(job, dp_rank, off, numel, n, total));
    free(numel);
    return PTDP_OK;
}

int ptdp_plan_rank_memory(const ptdp_job *job, int pp_rank, int dp_rank,
                          const ptdp_plan_backend *be, size_t bytes[PTDP_MEM_NCAT]) {
    memset(bytes, 0, sizeof(size_t) * PTDP_MEM_NCAT);
    const ptdp_schedule_params sp = ptdp_schedule_of_job(job);
    int rc = ptdp_stage_layout_check(&job->stages, job->model.num_layers, sp.p, sp.v);
    if (rc != PTDP_OK) return rc;
    size_t backend = be->ws_fixed; /* the compute backend's own memory, one block */
    for (int c = 0; c < sp.v; c++) {
        const int64_t stage = ptdp_schedule_stage(&sp, pp_rank, c);
        const chunk_mem m = chunk_of(job, stage, be);
        backend += (size_t)m.layers * be->ws_per_layer + (m.post ? be->ws_per_head : 0);
        rc = add_chunk_params(job, dp_rank, stage, bytes);
        if (rc != PTDP_OK) return rc;
        double slot, shared;
        activation_bytes(&m, &slot, &shared);
        bytes[PTDP_MEM_ACTIVATIONS] +=
            (size_t)slot * (size_t)ptdp_schedule_chunk_inflight(&sp, pp_rank, c);
        bytes[PTDP_MEM_WORKSPACE] += (size_t)shared;
    }
    bytes[PTDP_MEM_BACKEND] = ptdp_arena_need(backend);
    if (sp.p > 1) {
        /* one activation [s, b, h], or its sequence shard */
        const size_t msg = (size_t)(job->model.seq_length * job->micro_batch * job->model.hidden /
                                    (ptdp_job_sequence_parallel(job) ? job->t : 1));
        ptdp_schedule all;
        rc = ptdp_schedule_init(&all, &sp);
        if (rc != PTDP_OK) return rc;
        const int K = ptdp_schedule_send_buffers(&all); /* ring slots per direction */
        ptdp_schedule_free(&all);
        bytes[PTDP_MEM_PIPELINE] = ptdp_arena_need(4 * msg * (size_t)(2 + 2 * K));
    }
    return PTDP_OK;
}
