/* attention.c - causal self-attention core: per (sequence, head) GEMMs around
 * the fused scale + causal mask + softmax kernel, attention dropout drawn from
 * the counter-based RNG (so backward regenerates the mask instead of storing
 * it). OpenMP runs one (sequence, head) pair per thread; the GEMMs inside run
 * single-threaded. Not here: flash-style tiling (probabilities are stored, as
 * in Megatron without flash attention) or skipping the masked upper triangle
 * in the GEMMs. */
#include <math.h>
#include <omp.h>

#include "kernels/fastmath.h"
#include "kernels/cpu.h"

int64_t ptdp_attention_scratch_floats(int64_t s, int nthreads) { return 2 * s * s * (int64_t)nthreads; }

/* P[i, :] = softmax(scale * S[i, 0..i]), zero above the diagonal. */
void ptdp__scale_mask_softmax_fwd(const float *S, float *P, int64_t s, float scale) {
    for (int64_t i = 0; i < s; i++) {
        const float *sr = S + i * s;
        float *pr = P + i * s;
        float mx = sr[0];
#pragma omp simd reduction(max : mx)
        for (int64_t j = 1; j <= i; j++) mx = sr[j] > mx ? sr[j] : mx;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j <= i; j++) {
            float e = ptdp__expf(scale * (sr[j] - mx));
            pr[j] = e;
            sum += e;
        }
        float inv = 1.0f / sum;
        for (int64_t j = 0; j <= i; j++) pr[j] *= inv;
        for (int64_t j = i + 1; j < s; j++) pr[j] = 0.0f;
    }
}

/* dS = scale * P * (dP - rowsum(dP * P)); in place over dP. */
void ptdp__scale_mask_softmax_bwd(const float *P, float *dP, int64_t s, float scale) {
    for (int64_t i = 0; i < s; i++) {
        const float *pr = P + i * s;
        float *d = dP + i * s;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j <= i; j++) dot += d[j] * pr[j];
        for (int64_t j = 0; j <= i; j++) d[j] = scale * pr[j] * (d[j] - dot);
        for (int64_t j = i + 1; j < s; j++) d[j] = 0.0f;
    }
}

static void apply_dropout(const float *src, float *dst, int64_t n, ptdp_dropout drop, uint64_t base) {
    float sc = 1.0f / (1.0f - drop.p);
    for (int64_t e = 0; e < n; e++) dst[e] = ptdp__dropout_keep(drop, base + (uint64_t)e) ? src[e] * sc : 0.0f;
}

void ptdp__attention_fwd(const float *qkv, float *ctx, float *probs, float *scratch, int64_t s,
                         int64_t b, int64_t al, int64_t hd, ptdp_dropout drop) {
    const int64_t ld3 = b * al * 3 * hd, ldc = b * al * hd;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t task = 0; task < b * al; task++) {
        int64_t bi = task / al, j = task % al;
        float *S = scratch + 2 * s * s * omp_get_thread_num();
        float *Pd = S + s * s;
        const float *Q = qkv + bi * al * 3 * hd + j * 3 * hd, *K = Q + hd, *V = Q + 2 * hd;
        float *P = probs + task * s * s;
        ptdp_cpu_gemm_call(0, 1, s, s, hd, 1.0f, Q, ld3, K, ld3, 0.0f, S, s);
        ptdp__scale_mask_softmax_fwd(S, P, s, scale);
        const float *Puse = P;
        if (drop.p > 0.0f) {
            apply_dropout(P, Pd, s * s, drop, (uint64_t)(task * s * s));
            Puse = Pd;
        }
        ptdp_cpu_gemm_call(0, 0, s, hd, s, 1.0f, Puse, s, V, ld3, 0.0f, ctx + bi * al * hd + j * hd, ldc);
    }
}

void ptdp__attention_bwd(const float *dctx, const float *qkv, const float *probs, float *dqkv,
                         float *scratch, int64_t s, int64_t b, int64_t al, int64_t hd,
                         ptdp_dropout drop) {
    const int64_t ld3 = b * al * 3 * hd, ldc = b * al * hd;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t task = 0; task < b * al; task++) {
        int64_t bi = task / al, j = task % al;
        float *dP = scratch + 2 * s * s * omp_get_thread_num();
        float *Pd = dP + s * s;
        const int64_t off = bi * al * 3 * hd + j * 3 * hd;
        const float *Q = qkv + off, *K = Q + hd, *V = Q + 2 * hd;
        float *dQ = dqkv + off, *dK = dQ + hd, *dV = dQ + 2 * hd;
        const float *dC = dctx + bi * al * hd + j * hd;
        const float *P = probs + task * s * s;
        const float *Puse = P;
        if (drop.p > 0.0f) {
            apply_dropout(P, Pd, s * s, drop, (uint64_t)(task * s * s));
            Puse = Pd;
        }
        /* dV = Pd^T dC ; dPd = dC V^T */
        ptdp_cpu_gemm_call(1, 0, s, hd, s, 1.0f, Puse, s, dC, ldc, 0.0f, dV, ld3);
        ptdp_cpu_gemm_call(0, 1, s, s, hd, 1.0f, dC, ldc, V, ld3, 0.0f, dP, s);
        if (drop.p > 0.0f) apply_dropout(dP, dP, s * s, drop, (uint64_t)(task * s * s));
        ptdp__scale_mask_softmax_bwd(P, dP, s, scale);
        /* dQ = dS K ; dK = dS^T Q */
        ptdp_cpu_gemm_call(0, 0, s, hd, s, 1.0f, dP, s, K, ld3, 0.0f, dQ, ld3);
        ptdp_cpu_gemm_call(1, 0, s, hd, s, 1.0f, dP, s, Q, ld3, 0.0f, dK, ld3);
    }
}
