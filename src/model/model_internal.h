/* model_internal.h - shared by the .c files of src/model only. */
#ifndef PTDP_MODEL_INTERNAL_H
#define PTDP_MODEL_INTERNAL_H

#include "model/model.h"

#define PTDP__MAX_SPECS 4096

/* The parameters of one transformer layer, in flat-buffer order:
 * X(ptdp_layer_ptrs field, name after "layers.i.", role, ndim, global dim0,
 *   global dim1, split, init, present), reading the caller's ptdp__layer_dims D.
 *   spec.c builds the specs from it, chunk.c the pointers; a tensor that is
 *   not present has no spec and a NULL pointer. */
#define PTDP__LAYER_PARAMS(X)                                                                      \
    X(ln1_w, "input_layernorm.weight", PTDP_ROLE_LAYERNORM, 1, D.h, 0, PTDP_SPLIT_NONE,            \
      PTDP_INIT_ONE, 1)                                                                            \
    X(ln1_b, "input_layernorm.bias", PTDP_ROLE_LAYERNORM, 1, D.h, 0, PTDP_SPLIT_NONE,              \
      PTDP_INIT_ZERO, D.lnb)                                                                       \
    X(qkv_w, "self_attention.query_key_value.weight", PTDP_ROLE_WEIGHT, 2, D.q, D.h,               \
      PTDP_SPLIT_DIM0, PTDP_INIT_NORMAL, 1)                                                        \
    X(qkv_b, "self_attention.query_key_value.bias", PTDP_ROLE_BIAS, 1, D.q, 0, PTDP_SPLIT_DIM0,    \
      PTDP_INIT_ZERO, D.bias)                                                                      \
    X(proj_w, "self_attention.dense.weight", PTDP_ROLE_WEIGHT, 2, D.h, D.h, PTDP_SPLIT_DIM1,       \
      PTDP_INIT_SCALED, 1)                                                                         \
    X(proj_b, "self_attention.dense.bias", PTDP_ROLE_BIAS, 1, D.h, 0, PTDP_SPLIT_NONE,             \
      PTDP_INIT_ZERO, D.bias)                                                                      \
    X(ln2_w, "post_attention_layernorm.weight", PTDP_ROLE_LAYERNORM, 1, D.h, 0, PTDP_SPLIT_NONE,   \
      PTDP_INIT_ONE, 1)                                                                            \
    X(ln2_b, "post_attention_layernorm.bias", PTDP_ROLE_LAYERNORM, 1, D.h, 0, PTDP_SPLIT_NONE,     \
      PTDP_INIT_ZERO, D.lnb)                                                                       \
    X(fc1_w, "mlp.dense_h_to_4h.weight", PTDP_ROLE_WEIGHT, 2, D.f, D.h, PTDP_SPLIT_DIM0,           \
      PTDP_INIT_NORMAL, !D.glu)                                                                    \
    X(fc1_b, "mlp.dense_h_to_4h.bias", PTDP_ROLE_BIAS, 1, D.f, 0, PTDP_SPLIT_DIM0, PTDP_INIT_ZERO, \
      D.bias && !D.glu)                                                                            \
    X(gate_w, "mlp.gate_proj.weight", PTDP_ROLE_WEIGHT, 2, D.f, D.h, PTDP_SPLIT_DIM0,              \
      PTDP_INIT_NORMAL, D.glu)                                                                     \
    X(up_w, "mlp.up_proj.weight", PTDP_ROLE_WEIGHT, 2, D.f, D.h, PTDP_SPLIT_DIM0,                  \
      PTDP_INIT_NORMAL, D.glu)                                                                     \
    X(fc2_w, "mlp.dense_4h_to_h.weight", PTDP_ROLE_WEIGHT, 2, D.h, D.f, PTDP_SPLIT_DIM1,           \
      PTDP_INIT_SCALED, 1)                                                                         \
    X(fc2_b, "mlp.dense_4h_to_h.bias", PTDP_ROLE_BIAS, 1, D.h, 0, PTDP_SPLIT_NONE, PTDP_INIT_ZERO, \
      D.bias)
/* The sizes and conditions PTDP__LAYER_PARAMS reads (as D.field). */
typedef struct {
    int64_t h, q, f;    /* hidden, query+key+value rows (a + 2g) h/a, MLP width */
    int bias, lnb, glu; /* linear biases, LayerNorm biases, SwiGLU's gate and up */
} ptdp__layer_dims;
ptdp__layer_dims ptdp__layer_dims_of(const ptdp_gpt_config *cfg);
/* Parameters of one layer under cfg. */
int ptdp__layer_nparams(const ptdp_gpt_config *cfg);

typedef struct {
    ptdp_param_spec v[PTDP__MAX_SPECS];
    int n;
    int64_t total;          /* floats, aligned per tensor */
    int wte, wpe, lnf, out; /* spec indices or -1 (lnf: the final norm's weight; its
                               bias, when there is one, follows) */
    int layer0;             /* spec index of the first layer's first parameter; layer i's
                               parameters are per_layer specs from layer0 + i * per_layer, in
                               PTDP__LAYER_PARAMS order (the present ones) */
    int per_layer;          /* ptdp__layer_nparams */
} ptdp__spec_list;

/* ---- a chunk's state (chunk.c plans it; layer.c, head.c, gpt.c run it) ---- */

/* What one layer stashes for its backward. N = s*b token rows; with
 * sequence parallelism the tensors marked [s', b, ...] hold this rank's
 * sequence shard, s' = s/t (Ns = s'*b rows), else s' = s. */
typedef struct {
    float *ln1;                 /* [s', b, h] LN(x) */
    float *ln1_mean, *ln1_rstd; /* [s', b] */
    float *qkv;                 /* [s, b, q/t] per head [a/t][q|k|v][h/a], with query groups
                                   [g/t][a/g q heads, k, v][h/a]; rotated (rope) */
    float *attn_saved;          /* [be->attention_saved_floats(s, b, a/t)] what attention_fwd keeps
                                   for its backward (CPU: logsumexp [b, a/t, s]) */
    float *ctx;                 /* [s, b, h/t] attention output */
    float *xm;                  /* [s', b, h] x + dropout(attention out + bo) */
    float *ln2;                 /* [s', b, h] LN(xm) */
    float *ln2_mean, *ln2_rstd; /* [s', b] */
    float *fc;                  /* [s, b, 4h/t] ln2 W1^T (before bias and GeLU); SwiGLU:
                                   [s, b, 2 ffn/t], each row gate then up */
    float *gl;                  /* [s, b, 4h/t] gelu(fc + b1); SwiGLU [s, b, ffn/t] */
} ptdp__layer_act;

/* The output gradients of one layer's four weight GEMMs for one micro-batch:
 * with the stashed inputs of those GEMMs (ln1, ctx, ln2, gl), all the weight
 * gradients W needs. Without sequence parallelism dattn_out is the layer's
 * own stashed xm: B's last reader of xm (the MLP LayerNorm's backward) runs
 * before B writes the attention projection's output gradient, and W never
 * reads xm, so the buffer costs no memory; with it xm is only this rank's
 * sequence shard [s/t, b, h], and dattn_out [s, b, h] is a buffer of its
 * own (chunk.c). */
typedef struct {
    float *dmlp_out;  /* [s, b, h] gradient of the MLP's output GEMM (fc2) */
    float *dfc;       /* [s, b, 4h/t] gradient of fc (the GeLU's input; SwiGLU 2 ffn/t) */
    float *dattn_out; /* [s, b, h] gradient of the attention projection's output (xm, or its own) */
    float *dqkv;      /* [s, b, q/t] gradient of qkv */
} ptdp__layer_wgrad;

typedef struct {
    float **x;              /* [nl+1] -> [s', b, h]: input of each layer, then the chunk
                               output (on the last stage: the gradient of the output
                               after fwd). Inner inputs of a recompute group point
                               into the shared recompute workspace. */
    ptdp__layer_act *layer; /* [nl]; recomputed layers point into the workspace */
    ptdp__layer_wgrad *wg;  /* [nl] with split_backward (kept from B to W), else the
                               chunk's workspace wg for every layer */
    int32_t *tokens;        /* [b, s+1] (first and last stage) */
    int64_t iteration, microbatch;
} ptdp__slot_act;

struct ptdp_gpt_chunk {
    ptdp_chunk_params p;
    ptdp_comm solo;             /* p.tp points at its tensor group when the caller gave none */
    const ptdp_job *job;        /* p.job: b, recomputation, --eod-mask-loss */
    const ptdp_gpt_config *cfg; /* &job->model */
    ptdp_backend *be;
    int own_be; /* be was opened by the chunk (p.be NULL): closed with it */
    int t, tp;
    int64_t nl, N, h, hl, fl, al, hd, Vl, v0; /* layers, s*b, h, h/t, 4h/t, a/t, h/a, V/t, tp*V/t */
    int64_t kvl, ql, rd; /* key/value groups g/t, QKV rows (a + 2g) hd/t, rotary dims */
    int64_t fc_cols;     /* columns of fc: fl, 2 fl with SwiGLU */
    int sp;              /* sequence parallelism (t > 1): the residual stream is sharded */
    int64_t Ns, s0;      /* rows of the residual stream (N/t with sp, else N); first position */
    int training;        /* 0: no dropout, the loss head skips its backward */
    int64_t *group;      /* [nl]: first layer of layer i's recompute group, -1 if stored */
    int64_t *group_end;  /* [nl]: one past the group's last layer */
    int64_t max_group;   /* layers in the largest recompute group */
    ptdp__layer_act *ws_layer; /* [max_group] recompute workspace */
    float **ws_x;  /* [max_group] -> [s', b, h]: inner inputs of a group being recomputed */
    float *ws_out; /* [s', b, h] a recomputed group's output (discarded) */
    size_t slot_bytes, shared_bytes; /* activation plan: per slot, shared */
    ptdp_grad_hook hook;
    void *hook_ctx;
    int64_t *layer_offset; /* [nl]: flat offset of layer i's first parameter */
    ptdp__spec_list specs;
    float *params, *grads; /* [specs.total] each, from the weights and gradients arenas */
    ptdp_model_ptrs P, G;
    ptdp_layer_ptrs *lp_storage; /* 2*nl */
    ptdp_mem own;                /* the blocks, when the caller gave no ptdp_mem */
    size_t param_bytes, act_bytes;
    ptdp__slot_act *slots; /* [slots] */
    /* workspace shared by all slots */
    float *tmp;              /* [s, b, h] row-parallel GEMM output before the all-reduce (or
                                reduce-scatter) */
    float *dres, *dtmp;      /* [s', b, h] residual-stream gradient, its branch's gradient */
    float *gath;             /* [s, b, h] (sp only): a gathered sequence (the LayerNorm output
                                entering a column-parallel GEMM), the reduce-scatter's
                                [s', b, h] result in the forward, and the input gradient of
                                a column-parallel GEMM before its reduce-scatter */
    float *dctx;             /* [s, b, h/t] */
    float *dqkv;             /* [s, b, q/t] */
    float *dfc;              /* [s, b, fc_cols] */
    ptdp__layer_wgrad wg_ws; /* {tmp, dfc, -, dqkv}: one layer's wgrad when B and W run
                                back to back (dattn_out: that layer's xm; with sp, whose
                                xm is a shard, a workspace buffer of its own) */
    float *attn_scratch;     /* [be->attention_scratch_floats(s)] */
    float *rope_table;       /* [ptdp_rope_table_floats(s, rd)] (rope only) */
    float *zbias, *jbias;    /* [max(h, fl)] zeros, and a sink for the gradient, standing in for
                                the biases --disable-bias-linear removes */
    float *dgl;              /* [s, b, fl] SwiGLU: gradient of gl */
    /* loss head (last stage) */
    float *lnf_out;             /* [s', b, h] */
    float *lnf_mean, *lnf_rstd; /* [s', b] */
    float *logits; /* [s, b, V/t] this rank's vocabulary slice; its gradient after backward */
    float *gmax, *sumexp, *tgt,
        *loss; /* [s, b] row max, sum of exponentials, target logit, token loss */
};

/* Dropout sites: X(enum, name, numbered by global head). The enum value
 * keys the site's RNG stream, so the order is fixed. Attention-probability
 * dropout is inside the tensor-parallel region: each rank draws the blocks of
 * its own global heads from the one stream, so the masks are the single
 * process's whatever t is. The others act on replicated activations and are
 * identical on all TP ranks. */
#define PTDP__DROPOUT_SITES(X)                        \
    X(PTDP__DROPOUT_EMBEDDING, "embedding", 0)        \
    X(PTDP__DROPOUT_ATTN_PROBS, "attention-probs", 1) \
    X(PTDP__DROPOUT_ATTN_OUT, "after-attention", 0)   \
    X(PTDP__DROPOUT_MLP_OUT, "after-mlp", 0)
typedef enum {
#define PTDP__DROPOUT_ENUM(e, s, by_head) e,
    PTDP__DROPOUT_SITES(PTDP__DROPOUT_ENUM)
#undef PTDP__DROPOUT_ENUM
} ptdp__dropout_site;

/* layer.c: the dropout stream of a site (layer -1: not in a layer); p = 0
 * when the chunk is not training. */
ptdp_dropout ptdp__dropout(const ptdp_gpt_chunk *c, float p, ptdp__dropout_site site, int64_t layer,
                           const ptdp__slot_act *sa);
/* layer.c: the paper's conjugate tensor-parallel operators. f is the
 * identity forward and an all-reduce of the input gradient backward (before
 * a column-parallel GEMM); g is an all-reduce forward (after a row-parallel
 * GEMM, and after the vocabulary-parallel embedding lookup) and the identity
 * backward. Only their non-identity halves exist as code. Collective over
 * the tensor group: every TP rank of the chunk calls them in the same order.
 * x: [s, b, h] (n floats), reduced in place. */
void ptdp__tp_f_bwd(const ptdp_gpt_chunk *c, float *dx, int64_t n);
void ptdp__tp_g_fwd(const ptdp_gpt_chunk *c, float *x, int64_t n);
/* layer.c: their sequence-parallel forms (Korthikanti et al.), used when
 * c->sp. gather: this rank's shard xs [s/t, b, h] -> the whole sequence
 * c->gath [s, b, h] (f's forward, g's backward). scatter: the partial sums
 * full [s, b, h] -> their sum's shard out [s/t, b, h] (g's forward, f's
 * backward; out must not overlap full; under --bf16/--fp16 full's contents
 * are lost, packed to 16 bits in place). Collective over the tensor group. */
float *ptdp__sp_gather(const ptdp_gpt_chunk *c, const float *xs);
/* the same gather into out [s, b, h] (which must not be xs) */
void ptdp__sp_gather_into(const ptdp_gpt_chunk *c, const float *xs, float *out);
void ptdp__sp_scatter(const ptdp_gpt_chunk *c, float *full, float *out);
/* layer.c: layer i of the chunk on slot sa; forward writes its output to y
 * (normally sa->x[i+1]). The backward in two halves: _b takes d(out) in
 * c->dres and leaves d(x) there, accumulating the bias and LayerNorm
 * gradients and writing the output gradients of the four weight GEMMs to wg;
 * _w runs those GEMMs (weight gradients, accumulated). _b then _w is the
 * layer's whole backward. */
void ptdp__layer_fwd(ptdp_gpt_chunk *c, ptdp__slot_act *sa, int64_t i, float *y);
void ptdp__layer_bwd_b(ptdp_gpt_chunk *c, ptdp__slot_act *sa, int64_t i,
                       const ptdp__layer_wgrad *wg);
void ptdp__layer_bwd_w(ptdp_gpt_chunk *c, ptdp__slot_act *sa, int64_t i,
                       const ptdp__layer_wgrad *wg);
/* layer.c: the chunk's norm (LayerNorm, or RMSNorm with --normalization
 * RMSNorm: b, db and mean unused) over rows of [rows, h]; bwd: dx and the
 * weight gradients accumulate. */
void ptdp__norm_fwd(const ptdp_gpt_chunk *c, const float *x, const float *w, const float *b,
                    float *out, float *mean, float *rstd, int64_t rows);
void ptdp__norm_bwd(const ptdp_gpt_chunk *c, const float *dout, const float *x, const float *w,
                    const float *mean, const float *rstd, float *dx, float *dw, float *db,
                    int64_t rows);
/* head.c: the first stage's embedding into sa->x[0] without its dropout
 * (and its backward from c->dres, after the dropout's), the last stage's loss head with its
 * backward (leaves d(loss)/d(x_L) in sa->x[nl]). */
void ptdp__gpt_embed_fwd(ptdp_gpt_chunk *c, ptdp__slot_act *sa);
void ptdp__gpt_embed_bwd(ptdp_gpt_chunk *c, ptdp__slot_act *sa);
void ptdp__head_fwd_bwd(ptdp_gpt_chunk *c, ptdp__slot_act *sa, float loss_scale, double *loss_sum);
/* head.c: final LayerNorm of xL [s, b, h] and this rank's logits into c->logits. */
void ptdp__head_logits(ptdp_gpt_chunk *c, const float *xL);

void ptdp__build_specs(ptdp__spec_list *L, const ptdp_gpt_config *cfg, int64_t l0, int64_t l1,
                       int pre, int post, int t, int tp, int64_t numel_multiple);
void ptdp__init_spec(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, int tp, float *dst);

#endif
