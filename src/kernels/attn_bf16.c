/* attn_bf16.c - the tile products of flash attention (attention.c) for the
 * bf16 table on CPUs with AVX512_BF16: C[M, N] = alpha op(A) op(B) + beta C
 * with op(A) and op(B) rounded to bf16 (round to nearest even; exact for
 * values already on the bf16 grid: q, k, v and dctx) and products summed in
 * fp32 by vdpbf16ps, as oneDNN's bf16 matmul sums them. The probabilities
 * and dS are rounded here, as Megatron rounds them before its bf16 batched
 * GEMMs and flash attention before its tile products. Both operands are
 * packed per call into per-thread buffers as pairs along K (the layout
 * vdpbf16ps reads): A as [M][K/2] (or [K/2][M] when transposed), op(B) as
 * [K/2][N]; a 6 x 64 register block then runs over K/2 pairs. */
#include <stdint.h>

#include "kernels/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/bf16_simd.h"

#define MR 6
#define KC 128 /* K per pass: 64 pairs */
#define MC 128
#define NC 128
#define K2C (KC / 2)

static _Thread_local uint32_t pa[MC * K2C] __attribute__((aligned(64)));
static _Thread_local uint32_t pb[K2C * NC] __attribute__((aligned(64)));
static _Thread_local uint32_t pt[NC * K2C] __attribute__((aligned(64)));

#define lanes ptdp__lanes16

/* dst[t] = pair (x[2t], x[2t+1]) for t < ceil(n/2): a row contiguous in K */
BF16_TARGET static void pack_k_row(uint32_t *dst, const float *x, int64_t n) {
    for (int64_t j = 0; j < n; j += 32)
        _mm512_mask_storeu_epi32(dst + j / 2, lanes((n - j + 1) / 2),
                                 ptdp__bf16_row32(x + j, n - j));
}

/* dst[t] = pair (r0[t], r1[t]) for t < n: two rows, K = their index; r1 may be NULL (zero) */
BF16_TARGET static void pack_row_pair(uint32_t *dst, const float *r0, const float *r1, int64_t n) {
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 m = lanes(n - j);
        _mm512_mask_storeu_epi32(dst + j, m, ptdp__bf16_pairs16(r0 + j, r1 ? r1 + j : NULL, m));
    }
}

BF16_TARGET __attribute__((always_inline)) static inline void
block(int mr, int64_t K2, const uint32_t *A, int64_t ars, int64_t aks, const uint32_t *B,
      int64_t ldb, const __mmask16 *m, float alpha, float beta, float *C, int64_t ldc) {
    __m512 acc[MR][4];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) acc[r][c] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K2; k++) {
        const uint32_t *br = B + k * ldb;
        const __m512bh b0 = (__m512bh)_mm512_maskz_loadu_epi32(m[0], br),
                       b1 = (__m512bh)_mm512_maskz_loadu_epi32(m[1], br + 16),
                       b2 = (__m512bh)_mm512_maskz_loadu_epi32(m[2], br + 32),
                       b3 = (__m512bh)_mm512_maskz_loadu_epi32(m[3], br + 48);
        const uint32_t *ak = A + k * aks;
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            if (r >= mr) break;
            const __m512bh a = (__m512bh)_mm512_set1_epi32((int)ak[r * ars]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
            acc[r][2] = _mm512_dpbf16_ps(acc[r][2], a, b2);
            acc[r][3] = _mm512_dpbf16_ps(acc[r][3], a, b3);
        }
    }
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        if (r >= mr) break;
        float *cr = C + r * ldc;
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            if (!m[c]) continue;
            __m512 v = alpha == 1.0f ? acc[r][c] : _mm512_mul_ps(va, acc[r][c]);
            if (beta != 0.0f) v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m[c], cr + 16 * c), v);
            _mm512_mask_storeu_ps(cr + 16 * c, m[c], v);
        }
    }
}

/* C[M, N] (+)= A-pairs x B-pairs over K2 pairs; B rows of ldb pairs */
BF16_TARGET static void panel(int64_t M, int64_t N, int64_t K2, const uint32_t *A, int64_t ars,
                              int64_t aks, const uint32_t *B, int64_t ldb, float alpha, float beta,
                              float *C, int64_t ldc) {
    for (int64_t j0 = 0; j0 < N; j0 += 64) {
        const __mmask16 m[4] = {lanes(N - j0), lanes(N - j0 - 16), lanes(N - j0 - 32),
                                lanes(N - j0 - 48)};
        int64_t i0 = 0;
        for (; i0 + MR <= M; i0 += MR)
            block(MR, K2, A + i0 * ars, ars, aks, B + j0, ldb, m, alpha, beta, C + i0 * ldc + j0,
                  ldc);
        const uint32_t *Ai = A + i0 * ars;
        float *Ci = C + i0 * ldc + j0;
        /* the tail's row count as a constant, so each block keeps its registers */
#define TAIL(r)                                                           \
    case r:                                                               \
        block(r, K2, Ai, ars, aks, B + j0, ldb, m, alpha, beta, Ci, ldc); \
        break
        switch (M - i0) {
            TAIL(5);
            TAIL(4);
            TAIL(3);
            TAIL(2);
            TAIL(1);
        default:
            break;
        }
#undef TAIL
    }
}

BF16_TARGET void ptdp__gemm_tile_bf16(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                                      const float *A, int64_t lda, const float *B, int64_t ldb,
                                      float beta, float *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    if (K == 0) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
        const int64_t kc = K - k0 < KC ? K - k0 : KC, k2 = (kc + 1) / 2;
        const float bt = k0 == 0 ? beta : 1.0f;
        for (int64_t n0 = 0; n0 < N; n0 += NC) {
            const int64_t nc = N - n0 < NC ? N - n0 : NC;
            /* op(B) [kc, nc] as [k2][nc] pairs */
            if (tb) { /* B is [N][K]: rows contiguous in K, then transposed */
                for (int64_t j = 0; j < nc; j++)
                    pack_k_row(pt + j * k2, B + (n0 + j) * ldb + k0, kc);
                for (int64_t t = 0; t < k2; t++)
                    for (int64_t j = 0; j < nc; j++) pb[t * nc + j] = pt[j * k2 + t];
            } else {
                for (int64_t t = 0; t < k2; t++) {
                    const float *r0 = B + (k0 + 2 * t) * ldb + n0;
                    pack_row_pair(pb + t * nc, r0, 2 * t + 1 < kc ? r0 + ldb : NULL, nc);
                }
            }
            for (int64_t m0 = 0; m0 < M; m0 += MC) {
                const int64_t mc = M - m0 < MC ? M - m0 : MC;
                if (!ta) { /* A [M][K]: [mc][k2] */
                    for (int64_t i = 0; i < mc; i++)
                        pack_k_row(pa + i * k2, A + (m0 + i) * lda + k0, kc);
                    panel(mc, nc, k2, pa, k2, 1, pb, nc, alpha, bt, C + m0 * ldc + n0, ldc);
                } else { /* A [K][M]: [k2][mc] */
                    for (int64_t t = 0; t < k2; t++) {
                        const float *r0 = A + (k0 + 2 * t) * lda + m0;
                        pack_row_pair(pa + t * mc, r0, 2 * t + 1 < kc ? r0 + lda : NULL, mc);
                    }
                    panel(mc, nc, k2, pa, 1, mc, pb, nc, alpha, bt, C + m0 * ldc + n0, ldc);
                }
            }
        }
    }
}

int ptdp__gemm_tile_bf16_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512bf16");
}
#else
void ptdp__gemm_tile_bf16(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                          const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                          float *C, int64_t ldc) {
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B;
    (void)ldb, (void)beta, (void)C, (void)ldc;
    PTDP_ASSERT_MSG(0, "bf16 tile GEMM without AVX512_BF16");
}
int ptdp__gemm_tile_bf16_available(void) { return 0; }
#endif
