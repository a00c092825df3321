/* embed_xent.c - vocabulary-parallel embedding lookup and the pieces of the
 * vocabulary-parallel cross-entropy (Megatron's fused form: all-reduce the
 * max, the target logit and the sum of exponentials; never gather logits).
 * Padded vocabulary columns (global id >= V) never win the max, never enter
 * the sum and get zero gradient. exp(l - max) is computed once: xent_sums
 * leaves it in the logits buffer and xent_bwd scales it. Scatter-adds are split by columns so each
 * element is summed in token order: bitwise reproducible. */
#include <math.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/fastmath.h"

void ptdp__embed_fwd(const int32_t *tokens, int64_t ld, const float *wte, int64_t v0, int64_t Vl,
                     float *out, int64_t s, int64_t b, int64_t h) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < s * b; n++) {
        int64_t si = n / b, bi = n % b;
        int64_t t = (int64_t)tokens[bi * ld + si] - v0;
        float *o = out + n * h;
        if (t >= 0 && t < Vl)
            for (int64_t i = 0; i < h; i++) o[i] = wte[t * h + i];
        else
            for (int64_t i = 0; i < h; i++) o[i] = 0.0f;
    }
}

void ptdp__embed_bwd(const int32_t *tokens, int64_t ld, const float *dout, float *dwte, int64_t v0,
                     int64_t Vl, int64_t s, int64_t b, int64_t h) {
    const int64_t blk = 64;
    int64_t nblk = (h + blk - 1) / blk;
#pragma omp parallel for schedule(static)
    for (int64_t cb = 0; cb < nblk; cb++) {
        int64_t j0 = cb * blk, j1 = j0 + blk < h ? j0 + blk : h;
        for (int64_t n = 0; n < s * b; n++) {
            int64_t si = n / b, bi = n % b;
            int64_t t = (int64_t)tokens[bi * ld + si] - v0;
            if (t < 0 || t >= Vl) continue;
            for (int64_t j = j0; j < j1; j++) dwte[t * h + j] += dout[n * h + j];
        }
    }
}

void ptdp__pos_add_fwd(float *out, const float *wpe, int64_t s, int64_t b, int64_t h) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < s * b; n++) {
        const float *w = wpe + (n / b) * h;
        for (int64_t i = 0; i < h; i++) out[n * h + i] += w[i];
    }
}

void ptdp__pos_add_bwd(const float *dout, float *dwpe, int64_t s, int64_t b, int64_t h) {
#pragma omp parallel for schedule(static)
    for (int64_t si = 0; si < s; si++)
        for (int64_t bi = 0; bi < b; bi++)
            for (int64_t i = 0; i < h; i++) dwpe[si * h + i] += dout[(si * b + bi) * h + i];
}

/* a row's maximum, cloned for AVX-512 like exp_row below (one pass over
 * 4 bytes a logit: at GPT-2's head 206 MB, 15 ms on 2 Zen 5 cores in the
 * baseline's SSE code). The bf16 backends' forms, which round each logit
 * as they read it, are half/xent_bf16.c's. */
PTDP__ROW_CLONES static float max_row(const float *l, int64_t n) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t c = 0; c < n; c++) {
        const float x = l[c];
        m = x > m ? x : m;
    }
    return m;
}

void ptdp__xent_max(const float *logits, float *rowmax, int64_t N, int64_t Vl, int64_t v0,
                    int64_t V) {
    int64_t nv = ptdp__xent_valid_cols(Vl, v0, V);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) rowmax[n] = max_row(logits + n * Vl, nv);
}

/* l[c] <- exp(l[c] - m) for c < n, returns their sum (cloned for AVX-512:
 * exp is the cost of this pass) */
PTDP__ROW_CLONES static float exp_row(float *l, int64_t n, float m) {
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int64_t c = 0; c < n; c++) {
        float e = ptdp__expf(l[c] - m);
        l[c] = e;
        acc += e;
    }
    return acc;
}

void ptdp__xent_sums(float *logits, const float *gmax, const int32_t *targets, int64_t ld,
                     float *sumexp, float *tgt, int64_t s, int64_t b, int64_t Vl, int64_t v0,
                     int64_t V) {
    int64_t nv = ptdp__xent_valid_cols(Vl, v0, V);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < s * b; n++) {
        float *l = logits + n * Vl;
        int64_t t = (int64_t)targets[(n % b) * ld + n / b] - v0;
        tgt[n] = (t >= 0 && t < nv) ? l[t] : 0.0f; /* before l is overwritten */
        /* the exponentials stay in l for xent_bwd: exp runs once per logit */
        sumexp[n] = exp_row(l, nv, gmax[n]);
        for (int64_t c = nv; c < Vl; c++) l[c] = 0.0f;
    }
}

void ptdp__xent_loss(const float *sumexp, const float *gmax, const float *tgt, float *loss,
                     int64_t N) {
    for (int64_t n = 0; n < N; n++) loss[n] = logf(sumexp[n]) + gmax[n] - tgt[n];
}

void ptdp__xent_bwd(float *logits, const float *sumexp, const int32_t *targets, int64_t ld,
                    int64_t s, int64_t b, int64_t Vl, int64_t v0, int64_t V, float scale) {
    int64_t nv = ptdp__xent_valid_cols(Vl, v0, V);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < s * b; n++) {
        float *l = logits + n * Vl;
        float inv = scale / sumexp[n];
#pragma omp simd
        for (int64_t c = 0; c < nv; c++) l[c] *= inv;
        for (int64_t c = nv; c < Vl; c++) l[c] = 0.0f;
        int64_t t = (int64_t)targets[(n % b) * ld + n / b] - v0;
        if (t >= 0 && t < nv) l[t] -= scale;
    }
}
