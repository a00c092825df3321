/* ops.c - what every compute backend must provide: ptdp_ops_check, the one
 * place that knows which ops of the table are required and which optional
 * ops a run needs; and the compositions that stand in for optional ops a
 * table leaves out (ptdp_head_bwd, ptdp_head_logits). */
#include <stddef.h>

#include "kernels/kernels.h"

int ptdp_ops_check(const ptdp_ops *o, int needs) {
#define PTDP__REQ(f) \
    { #f, o->f == NULL }
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
        PTDP__REQ(embed_fwd),
        PTDP__REQ(embed_bwd),
        PTDP__REQ(pos_add_fwd),
        PTDP__REQ(pos_add_bwd),
        PTDP__REQ(xent_max),
        PTDP__REQ(xent_sums),
        PTDP__REQ(xent_loss),
        PTDP__REQ(xent_bwd),
        PTDP__REQ(adamw),
        PTDP__REQ(sumsq),
        PTDP__REQ(sum),
    };
#undef PTDP__REQ
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (req[i].missing)
            return ptdp_errorf(PTDP_EUNSUPPORTED, "compute backend '%s' lacks the required op %s",
                               o->name, req[i].name);
    if ((needs & PTDP_NEED_ROW_MASK) && !o->mask_rows)
        return ptdp_errorf(PTDP_EUNSUPPORTED,
                           "compute backend '%s' has no loss-mask op: run without --eod-mask-loss",
                           o->name);
    if ((needs & PTDP_NEED_DROPOUT) && (!o->dropout_fwd || !o->dropout_bwd))
        return ptdp_errorf(PTDP_EUNSUPPORTED,
                           "compute backend '%s' has no dropout op: run with --hidden-dropout 0",
                           o->name);
    return PTDP_OK;
}

void ptdp_head_bwd_composed(const ptdp_ops *o, float *logits, const ptdp_xent_grad *xg,
                            const float *x, const float *wte, int64_t h, float *dwte, float *dx) {
    const int64_t N = xg->s * xg->b, Vl = xg->Vl;
    o->xent_bwd(logits, xg->sumexp, xg->targets, xg->ld, xg->s, xg->b, Vl, xg->v0, xg->V,
                xg->scale);
    if (xg->mask_tokens)
        o->mask_rows(logits, Vl, xg->mask_tokens, xg->ld, xg->s, xg->b, xg->mask_id);
    o->gemm(1, 0, Vl, h, N, 1.0f, logits, Vl, x, h, 1.0f, dwte, h);
    o->gemm(0, 0, N, h, Vl, 1.0f, logits, Vl, wte, h, 0.0f, dx, h);
}

void ptdp_head_bwd(const ptdp_ops *o, float *logits, const ptdp_xent_grad *xg, const float *x,
                   const float *wte, int64_t h, float *dwte, float *dx) {
    if (o->head_bwd)
        o->head_bwd(logits, xg, x, wte, h, dwte, dx);
    else
        ptdp_head_bwd_composed(o, logits, xg, x, wte, h, dwte, dx);
}

void ptdp_head_logits(const ptdp_ops *o, const float *x, const float *wte, int64_t h, float *logits,
                      float *rowmax, int64_t N, int64_t Vl, int64_t v0, int64_t V) {
    if (o->head_logits) {
        o->head_logits(x, wte, h, logits, rowmax, N, Vl, v0, V);
        return;
    }
    o->gemm(0, 1, N, Vl, h, 1.0f, x, h, wte, h, 0.0f, logits, Vl);
    o->xent_max(logits, rowmax, N, Vl, v0, V);
}

void ptdp_mlp_fwd(const ptdp_ops *o, const float *x, const float *w1, const float *b1,
                  const float *w2, float *fc, float *gl, float *y, int64_t N, int64_t h,
                  int64_t fl) {
    if (o->mlp_fwd) {
        o->mlp_fwd(x, w1, b1, w2, fc, gl, y, N, h, fl);
        return;
    }
    o->gemm(0, 1, N, fl, h, 1.0f, x, h, w1, h, 0.0f, fc, fl);
    o->bias_gelu_fwd(fc, b1, gl, N, fl);
    o->gemm(0, 1, N, h, fl, 1.0f, gl, fl, w2, fl, 0.0f, y, h);
}

void ptdp_mlp_bwd_b(const ptdp_ops *o, const float *dy, const float *w2, const float *fc,
                    const float *b1, const float *w1, float *dfc, float *db1, float *dx, int64_t N,
                    int64_t h, int64_t fl) {
    if (o->mlp_bwd_b) {
        o->mlp_bwd_b(dy, w2, fc, b1, w1, dfc, db1, dx, N, h, fl);
        return;
    }
    o->gemm(0, 0, N, fl, h, 1.0f, dy, h, w2, fl, 0.0f, dfc, fl);
    o->bias_gelu_bwd(dfc, fc, b1, dfc, db1, N, fl);
    o->gemm(0, 0, N, h, fl, 1.0f, dfc, fl, w1, h, 0.0f, dx, h);
}

void ptdp_mlp_bwd_w(const ptdp_ops *o, const float *dy, const float *gl, const float *dfc,
                    const float *x, float *dw2, float *dw1, int64_t N, int64_t h, int64_t fl) {
    if (o->mlp_bwd_w) {
        o->mlp_bwd_w(dy, gl, dfc, x, dw2, dw1, N, h, fl);
        return;
    }
    o->gemm(1, 0, h, fl, N, 1.0f, dy, h, gl, fl, 1.0f, dw2, fl);
    o->gemm(1, 0, fl, h, N, 1.0f, dfc, fl, x, h, 1.0f, dw1, h);
}
