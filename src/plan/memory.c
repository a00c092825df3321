/* memory.c - the planner's activation-memory model for one model chunk, from
 * the configuration alone (it must not depend on the model code: the train
 * run prints this prediction next to what the model actually held, and a test
 * holds the two together).
 *
 * ptdp's fp32 layout per layer per stashed micro-batch (N = s*b tokens,
 * hl = h/t, fl = 4h/t, al = a/t), in floats:
 *   LayerNorm outputs ln1, ln2 and the residual xm   3 N h
 *   QKV, attention context                            4 N hl
 *   MLP pre-activation and GeLU output                2 N fl  (= 8 N hl)
 *   attention probabilities                           b al s^2
 *   LayerNorm statistics                              4 N
 * plus the layer's input x (N h), i.e. 4 bytes x (N (4h + 12h/t) + 4N +
 * b (a/t) s^2). Dropout masks are regenerated from the counter-based RNG, so
 * unlike the paper's 16-bit count of s b h (34 + 5 a s / h) bytes none are
 * stored. With full recomputation a stashed micro-batch keeps only the
 * inputs of its recompute groups; one group's internals live in a workspace
 * shared by all micro-batches. Not modelled: the 64-byte alignment of each
 * buffer (a few hundred bytes). */
#include "plan/plan.h"

static double layer_floats(const ptdp_plan_mem *m) {
    const double N = (double)(m->s * m->b), h = (double)m->h, hl = h / (double)m->t;
    const double fl = (double)m->ffn / (double)m->t, al = (double)m->a / (double)m->t;
    return N * (3 * h + 4 * hl + 2 * fl) + 4 * N + (double)m->b * al * (double)(m->s * m->s);
}

void ptdp_plan_activation_bytes(const ptdp_plan_mem *m, double *per_slot, double *shared) {
    const double N = (double)(m->s * m->b), h = (double)m->h, hl = h / (double)m->t;
    const double fl = (double)m->ffn / (double)m->t, L = layer_floats(m);
    const int64_t n = m->recompute_num_layers < 1 ? 1 : m->recompute_num_layers, l = m->layers;
    double slot = (m->pre || m->post) ? (double)(m->b * (m->s + 1)) : 0; /* tokens (int32) */
    int64_t max_group = 0, stored_x = 0;
    for (int64_t i = 0; i <= l; i++) {
        int64_t g = -1, e = i + 1; /* recompute group of layer i (i < l) */
        if (i < l && m->recompute == PTDP_PLAN_RECOMPUTE_UNIFORM) {
            g = i / n * n;
            e = g + n < l ? g + n : l;
        } else if (i < l && m->recompute == PTDP_PLAN_RECOMPUTE_BLOCK && i < n) {
            g = i;
        }
        if (i == 0 || i == l || g < 0 || g == i) stored_x++;
        if (i < l && g < 0) slot += L;
        if (g >= 0 && e - g > max_group) max_group = e - g;
    }
    slot += (double)stored_x * N * h;
    double sh = (double)max_group * (L + N * h) + (max_group ? N * h : 0);
    sh += 3 * N * h + N * hl + 3 * N * hl + N * fl;               /* backward buffers */
    sh += 2.0 * (double)(m->s * m->s) * (double)m->threads;       /* attention scratch */
    if (m->post) sh += N * h + 2 * N + N * (double)m->vocab_padded / (double)m->t + 4 * N; /* loss head */
    *per_slot = 4 * slot;
    *shared = 4 * sh;
}
