/* attention.c - causal self-attention core: per (sequence, head) GEMMs around
 * the fused scale + causal mask + softmax kernel, attention dropout drawn from
 * the counter-based RNG (so backward regenerates the mask instead of storing
 * it). OpenMP runs one (sequence, head) pair per thread; the GEMMs inside run
 * single-threaded and skip the masked upper triangle block by block. Not here:
 * flash-style tiling (probabilities are stored, as in Megatron without flash
 * attention). */
#include <math.h>
#include <omp.h>

#include "kernels/fastmath.h"
#include "kernels/cpu.h"

int64_t ptdp_attention_scratch_floats(int64_t s, int nthreads) {
    return 2 * s * s * (int64_t)nthreads;
}

/* One causal row: p[0..n) = softmax(scale * sr[0..n)), zeros in p[n..zend).
 * Kept out of line: inlined into the row loops gcc left the exp loop scalar
 * (if-conversion of fastmath's clamps failed there). */
static __attribute__((noinline)) void softmax_row_fwd(const float *sr, float *pr, int64_t n,
                                                      int64_t zend, float scale) {
    float mx = sr[0];
#pragma omp simd reduction(max : mx)
    for (int64_t j = 1; j < n; j++) mx = sr[j] > mx ? sr[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; j++) {
        float e = ptdp__expf(scale * (sr[j] - mx));
        pr[j] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t j = 0; j < n; j++) pr[j] *= inv;
    for (int64_t j = n; j < zend; j++) pr[j] = 0.0f;
}

/* One causal row of dS = scale * P * (dP - rowsum(dP * P)) in place over d,
 * zeros in d[n..zend). */
static __attribute__((noinline)) void softmax_row_bwd(const float *pr, float *d, int64_t n,
                                                      int64_t zend, float scale) {
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < n; j++) dot += d[j] * pr[j];
#pragma omp simd
    for (int64_t j = 0; j < n; j++) d[j] = scale * pr[j] * (d[j] - dot);
    for (int64_t j = n; j < zend; j++) d[j] = 0.0f;
}

/* Rows [i0, i1) of the causal softmax of a [s, s] matrix: row i reads
 * S[i, 0..i] and writes P[i, 0..zend). */
static void softmax_rows_fwd(const float *S, float *P, int64_t s, int64_t i0, int64_t i1,
                             int64_t zend, float scale) {
    for (int64_t i = i0; i < i1; i++) softmax_row_fwd(S + i * s, P + i * s, i + 1, zend, scale);
}

static void softmax_rows_bwd(const float *P, float *dP, int64_t s, int64_t i0, int64_t i1,
                             int64_t zend, float scale) {
    for (int64_t i = i0; i < i1; i++) softmax_row_bwd(P + i * s, dP + i * s, i + 1, zend, scale);
}

/* P[i, :] = softmax(scale * S[i, 0..i]), zero above the diagonal. */
void ptdp__scale_mask_softmax_fwd(const float *S, float *P, int64_t s, float scale) {
    softmax_rows_fwd(S, P, s, 0, s, s, scale);
}

/* dS = scale * P * (dP - rowsum(dP * P)); in place over dP. */
void ptdp__scale_mask_softmax_bwd(const float *P, float *dP, int64_t s, float scale) {
    softmax_rows_bwd(P, dP, s, 0, s, s, scale);
}

/* Causal blocking: rows are taken in blocks of ATT_BLK and block [r0, r1)
 * only multiplies against keys [0, r1), so the GEMMs skip the masked upper
 * triangle except inside the diagonal blocks (work s^2/2 + s*ATT_BLK/2 instead
 * of s^2). The key-side gradients (dV, dK) use the same block edges by
 * columns: key block [c0, c1) only sees query rows [c0, s). Every entry these
 * GEMMs read lies in a computed block (zeros above the diagonal inside it). */
/* 64 measured best at s = 256 and 1024 (32 and 128 within noise or worse);
 * at s <= 128 one block (the plain full GEMMs) was as fast. */
static int64_t att_blk(int64_t s) { return s <= 128 ? s : 64; }

/* Dropout on rows [i0, i1), columns [0, cend) of a [s, s] matrix of task
 * `task`: element (i, j) is site element task*s*s + i*s + j. */
static void dropout_rows(const float *src, float *dst, int64_t s, int64_t i0, int64_t i1,
                         int64_t cend, ptdp_dropout drop, int64_t task) {
    for (int64_t i = i0; i < i1; i++)
        ptdp__dropout_apply(src + i * s, dst + i * s, cend, drop, (uint64_t)(task * s * s + i * s));
}

void ptdp__attention_fwd(ptdp__gemm_fn gemm, const float *qkv, float *ctx, float *probs,
                         float *scratch, int64_t s, int64_t b, int64_t al, int64_t hd,
                         ptdp_dropout drop) {
    const int64_t ld3 = b * al * 3 * hd, ldc = b * al * hd, B = att_blk(s);
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t task = 0; task < b * al; task++) {
        int64_t bi = task / al, j = task % al;
        /* the dropout block of this (sequence, head): global head numbering */
        const int64_t blk =
            drop.b > 0 ? (drop.sample0 + bi) * (drop.heads ? drop.heads : al) + drop.head0 + j
                       : task;
        float *S = scratch + 2 * s * s * omp_get_thread_num();
        float *Pd = S + s * s;
        const float *Q = qkv + bi * al * 3 * hd + j * 3 * hd, *K = Q + hd, *V = Q + 2 * hd;
        float *P = probs + task * s * s;
        float *C = ctx + bi * al * hd + j * hd;
        for (int64_t r0 = 0; r0 < s; r0 += B) {
            int64_t r1 = r0 + B < s ? r0 + B : s, rb = r1 - r0;
            gemm(0, 1, rb, r1, hd, 1.0f, Q + r0 * ld3, ld3, K, ld3, 0.0f, S + r0 * s, s);
            /* the saved probs keep their documented zeros above the diagonal */
            softmax_rows_fwd(S, P, s, r0, r1, s, scale);
            const float *Puse = P;
            if (drop.p > 0.0f) {
                dropout_rows(P, Pd, s, r0, r1, r1, drop, blk);
                Puse = Pd;
            }
            gemm(0, 0, rb, hd, r1, 1.0f, Puse + r0 * s, s, V, ld3, 0.0f, C + r0 * ldc, ldc);
        }
    }
}

void ptdp__attention_bwd(ptdp__gemm_fn gemm, const float *dctx, const float *qkv,
                         const float *probs, float *dqkv, float *scratch, int64_t s, int64_t b,
                         int64_t al, int64_t hd, ptdp_dropout drop) {
    const int64_t ld3 = b * al * 3 * hd, ldc = b * al * hd, B = att_blk(s);
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t task = 0; task < b * al; task++) {
        int64_t bi = task / al, j = task % al;
        /* the dropout block of this (sequence, head): global head numbering */
        const int64_t blk =
            drop.b > 0 ? (drop.sample0 + bi) * (drop.heads ? drop.heads : al) + drop.head0 + j
                       : task;
        float *dP = scratch + 2 * s * s * omp_get_thread_num();
        float *Pd = dP + s * s;
        const int64_t off = bi * al * 3 * hd + j * 3 * hd;
        const float *Q = qkv + off, *K = Q + hd, *V = Q + 2 * hd;
        float *dQ = dqkv + off, *dK = dQ + hd, *dV = dQ + 2 * hd;
        const float *dC = dctx + bi * al * hd + j * hd;
        const float *P = probs + task * s * s;
        const float *Puse = drop.p > 0.0f ? Pd : P;
        /* by query rows: dPd = dC V^T, dropout', softmax', dQ = dS K */
        for (int64_t r0 = 0; r0 < s; r0 += B) {
            int64_t r1 = r0 + B < s ? r0 + B : s, rb = r1 - r0;
            if (drop.p > 0.0f) dropout_rows(P, Pd, s, r0, r1, r1, drop, blk);
            gemm(0, 1, rb, r1, hd, 1.0f, dC + r0 * ldc, ldc, V, ld3, 0.0f, dP + r0 * s, s);
            if (drop.p > 0.0f) dropout_rows(dP, dP, s, r0, r1, r1, drop, blk);
            softmax_rows_bwd(P, dP, s, r0, r1, r1, scale);
            gemm(0, 0, rb, hd, r1, 1.0f, dP + r0 * s, s, K, ld3, 0.0f, dQ + r0 * ld3, ld3);
        }
        /* by key columns: dV = Pd^T dC, dK = dS^T Q over rows [c0, s) */
        for (int64_t c0 = 0; c0 < s; c0 += B) {
            int64_t c1 = c0 + B < s ? c0 + B : s, cb = c1 - c0, kn = s - c0;
            gemm(1, 0, cb, hd, kn, 1.0f, Puse + c0 * s + c0, s, dC + c0 * ldc, ldc, 0.0f,
                 dV + c0 * ld3, ld3);
            gemm(1, 0, cb, hd, kn, 1.0f, dP + c0 * s + c0, s, Q + c0 * ld3, ld3, 0.0f,
                 dK + c0 * ld3, ld3);
        }
    }
}
