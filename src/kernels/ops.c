/* ops.c - what every compute backend must provide: ptdp_backend_check, the
 * one place that knows which ops are required and which optional ops a run
 * needs; and the compositions a backend may use for its head and MLP ops
 * (ptdp_head_logits_composed and the others), which run the instance's own
 * gemm, bias_gelu and cross-entropy ops. */
#include <stddef.h>

#include "kernels/kernels.h"

int ptdp_backend_check(const ptdp_backend *be, int needs) {
#define PTDP__REQ(f) \
    { #f, be->f == NULL }
    const struct {
        const char *name;
        int missing;
    } req[] = {
        PTDP__REQ(alloc),
        PTDP__REQ(free),
        PTDP__REQ(upload),
        PTDP__REQ(download),
        PTDP__REQ(zero),
        PTDP__REQ(copy),
        PTDP__REQ(quantize),
        PTDP__REQ(gemm),
        PTDP__REQ(layernorm_fwd),
        PTDP__REQ(layernorm_bwd),
        PTDP__REQ(bias_add),
        PTDP__REQ(bias_bwd),
        PTDP__REQ(bias_gelu_fwd),
        PTDP__REQ(bias_gelu_bwd),
        PTDP__REQ(bias_dropout_add_fwd),
        PTDP__REQ(bias_dropout_add_bwd),
        PTDP__REQ(attention_fwd),
        PTDP__REQ(attention_bwd),
        PTDP__REQ(attention_saved_floats),
        PTDP__REQ(attention_scratch_floats),
        PTDP__REQ(embed_fwd),
        PTDP__REQ(embed_bwd),
        PTDP__REQ(pos_add_fwd),
        PTDP__REQ(pos_add_bwd),
        PTDP__REQ(xent_max),
        PTDP__REQ(xent_sums),
        PTDP__REQ(xent_loss),
        PTDP__REQ(xent_bwd),
        PTDP__REQ(head_logits),
        PTDP__REQ(head_bwd),
        PTDP__REQ(mlp_fwd),
        PTDP__REQ(mlp_bwd_b),
        PTDP__REQ(mlp_bwd_w),
        PTDP__REQ(adamw),
        PTDP__REQ(sumsq),
        PTDP__REQ(sum),
        PTDP__REQ(close),
    };
#undef PTDP__REQ
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (req[i].missing)
            return ptdp_errorf(PTDP_EUNSUPPORTED, "compute backend '%s' lacks the required op %s",
                               be->name, req[i].name);
    if ((needs & PTDP_NEED_ROW_MASK) && !be->mask_rows)
        return ptdp_errorf(PTDP_EUNSUPPORTED,
                           "compute backend '%s' has no loss-mask op: run without --eod-mask-loss",
                           be->name);
    if ((needs & PTDP_NEED_DROPOUT) && (!be->dropout_fwd || !be->dropout_bwd))
        return ptdp_errorf(PTDP_EUNSUPPORTED,
                           "compute backend '%s' has no dropout op: run with --hidden-dropout 0",
                           be->name);
    /* the Llama family's ops: present, and run on the backend's device */
    const struct {
        int need;
        unsigned untested;
        int missing;
        const char *op, *flag;
    } llama[] = {
        {PTDP_NEED_RMSNORM, PTDP_CAP_UNTESTED_RMSNORM, !be->rmsnorm_fwd || !be->rmsnorm_bwd,
         "RMSNorm", "--normalization RMSNorm"},
        {PTDP_NEED_SWIGLU, PTDP_CAP_UNTESTED_SWIGLU, !be->swiglu_fwd || !be->swiglu_bwd, "SwiGLU",
         "--swiglu"},
        {PTDP_NEED_ROPE, PTDP_CAP_UNTESTED_ROPE, !be->rope_fwd || !be->rope_bwd, "rotary embedding",
         "--position-embedding-type rope"},
        {PTDP_NEED_GQA, PTDP_CAP_UNTESTED_GQA, !be->attention_gqa_fwd || !be->attention_gqa_bwd,
         "grouped-query attention", "--group-query-attention"},
    };
    for (size_t i = 0; i < sizeof llama / sizeof llama[0]; i++) {
        if (!(needs & llama[i].need)) continue;
        if (llama[i].missing)
            return ptdp_errorf(PTDP_EUNSUPPORTED,
                               "compute backend '%s' has no %s op: run without %s", be->name,
                               llama[i].op, llama[i].flag);
        if (be->caps & llama[i].untested)
            return ptdp_errorf(PTDP_EUNSUPPORTED,
                               "compute backend '%s' has a %s op that has not yet run on its "
                               "device against the CPU backend (tests/test_cuda_ops.c): run "
                               "without %s, or on --device cpu",
                               be->name, llama[i].op, llama[i].flag);
    }
    return PTDP_OK;
}

void ptdp_head_bwd_composed(ptdp_backend *be, float *logits, const ptdp_xent_grad *xg,
                            const float *x, const float *wte, int64_t h, float *dwte, float *dx) {
    const int64_t N = xg->s * xg->b, Vl = xg->Vl;
    be->xent_bwd(be, logits, xg->sumexp, xg->targets, xg->ld, xg->s, xg->b, Vl, xg->v0, xg->V,
                 xg->scale);
    if (xg->mask_tokens)
        be->mask_rows(be, logits, Vl, xg->mask_tokens, xg->ld, xg->s, xg->b, xg->mask_id);
    be->gemm(be, 1, 0, Vl, h, N, 1.0f, logits, Vl, x, h, 1.0f, dwte, h);
    be->gemm(be, 0, 0, N, h, Vl, 1.0f, logits, Vl, wte, h, 0.0f, dx, h);
}

void ptdp_head_logits_composed(ptdp_backend *be, const float *x, const float *wte, int64_t h,
                               float *logits, float *rowmax, int64_t N, int64_t Vl, int64_t v0,
                               int64_t V) {
    be->gemm(be, 0, 1, N, Vl, h, 1.0f, x, h, wte, h, 0.0f, logits, Vl);
    be->xent_max(be, logits, rowmax, N, Vl, v0, V);
}

void ptdp_mlp_fwd_composed(ptdp_backend *be, const float *x, const float *w1, const float *b1,
                           const float *w2, float *fc, float *gl, float *y, int64_t N, int64_t h,
                           int64_t fl) {
    be->gemm(be, 0, 1, N, fl, h, 1.0f, x, h, w1, h, 0.0f, fc, fl);
    be->bias_gelu_fwd(be, fc, b1, gl, N, fl);
    be->gemm(be, 0, 1, N, h, fl, 1.0f, gl, fl, w2, fl, 0.0f, y, h);
}

void ptdp_mlp_bwd_b_composed(ptdp_backend *be, const float *dy, const float *w2, const float *fc,
                             const float *b1, const float *w1, float *dfc, float *db1, float *dx,
                             int64_t N, int64_t h, int64_t fl) {
    be->gemm(be, 0, 0, N, fl, h, 1.0f, dy, h, w2, fl, 0.0f, dfc, fl);
    be->bias_gelu_bwd(be, dfc, fc, b1, dfc, db1, N, fl);
    be->gemm(be, 0, 0, N, h, fl, 1.0f, dfc, fl, w1, h, 0.0f, dx, h);
}

void ptdp_mlp_bwd_w_composed(ptdp_backend *be, const float *dy, const float *gl, const float *dfc,
                             const float *x, float *dw2, float *dw1, int64_t N, int64_t h,
                             int64_t fl) {
    be->gemm(be, 1, 0, h, fl, N, 1.0f, dy, h, gl, fl, 1.0f, dw2, fl);
    be->gemm(be, 1, 0, fl, h, N, 1.0f, dfc, fl, x, h, 1.0f, dw1, h);
}
