/* xent_bf16.c - the bf16 backends' xent_max and xent_sums: embed_xent.c's
 * passes, each logit rounded to bf16 as it is read (ptdp__bf16_round), so
 * the loss head may leave its logits unrounded (head_logits: no pass over
 * the [N, Vl] logits rounds them first), and on logits already on the grid
 * rounding changes nothing. The forms over logits stored in bf16 are
 * bf16_blocked.c's. */
#include <math.h>

#include "kernels/cpu/fastmath.h"
#include "kernels/cpu/half/half.h"

/* a row's maximum of the rounded values, cloned for AVX-512 */
PTDP__ROW_CLONES static float max_row_bf16(const float *l, int64_t n) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t c = 0; c < n; c++) {
        const float x = ptdp__bf16_round(l[c]);
        m = x > m ? x : m;
    }
    return m;
}

void ptdp__xent_max_bf16(const float *logits, float *rowmax, int64_t N, int64_t Vl, int64_t v0,
                         int64_t V) {
    int64_t nv = ptdp__xent_valid_cols(Vl, v0, V);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) rowmax[n] = max_row_bf16(logits + n * Vl, nv);
}

/* l[c] <- exp(round(l[c]) - m) for c < n, returns their sum */
PTDP__ROW_CLONES static float exp_row_bf16(float *l, int64_t n, float m) {
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int64_t c = 0; c < n; c++) {
        float e = ptdp__expf(ptdp__bf16_round(l[c]) - m);
        l[c] = e;
        acc += e;
    }
    return acc;
}

void ptdp__xent_sums_bf16(float *logits, const float *gmax, const int32_t *targets, int64_t ld,
                          float *sumexp, float *tgt, int64_t s, int64_t b, int64_t Vl, int64_t v0,
                          int64_t V) {
    int64_t nv = ptdp__xent_valid_cols(Vl, v0, V);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < s * b; n++) {
        float *l = logits + n * Vl;
        int64_t t = (int64_t)targets[(n % b) * ld + n / b] - v0;
        tgt[n] = (t >= 0 && t < nv) ? ptdp__bf16_round(l[t]) : 0.0f; /* before l is overwritten */
        /* the exponentials stay in l for xent_bwd: exp runs once per logit */
        sumexp[n] = exp_row_bf16(l, nv, gmax[n]);
        for (int64_t c = nv; c < Vl; c++) l[c] = 0.0f;
    }
}
