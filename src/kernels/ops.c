/* ops.c - what every compute backend must provide: ptdp_ops_check, the one
 * place that knows which ops of the table are required and which optional
 * ops a run needs. */
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
        PTDP__REQ(scale),
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
