/* bf16_simd.h - internal: the AVX-512 pieces the bf16 kernels share
 * (attn_bf16.c's tile products, bf16_blocked.c's weight copies): lane
 * masks, the pairing of fp32 values into bf16 pairs along K (the layout
 * vdpbf16ps reads) and a 16 x 16 transpose of 32-bit elements (of pairs). x86-64 only; the callers
 * check AVX512_BF16 at run time. */
#ifndef PTDP_KERNELS_BF16_SIMD_H
#define PTDP_KERNELS_BF16_SIMD_H

#include <immintrin.h>
#include <stdint.h>

#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

/* the first min(16, max(0, left)) lanes */
static inline __mmask16 ptdp__lanes16(int64_t left) {
    return left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
}

/* the first min(32, max(0, left)) lanes of 16-bit elements */
static inline __mmask32 ptdp__lanes32(int64_t left) {
    return left >= 32 ? (__mmask32)0xffffffffu : left > 0 ? (__mmask32)((1u << left) - 1) : 0;
}

/* 16 pairs (w0[j], w1[j]) of bf16 values, w0's in the low half of each
 * 32-bit lane */
BF16_TARGET static inline __m512i ptdp__bf16_join16(__m256i w0, __m256i w1) {
    return _mm512_or_si512(_mm512_cvtepu16_epi32(w0),
                           _mm512_slli_epi32(_mm512_cvtepu16_epi32(w1), 16));
}

/* pairs (r0[j], r1[j]) rounded to bf16 for the lanes j of m, r0's in the low
 * half of each 32-bit lane; r1 NULL gives zeros there */
BF16_TARGET static inline __m512i ptdp__bf16_pairs16(const float *r0, const float *r1,
                                                     __mmask16 m) {
    const __m256i w0 = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, r0));
    const __m256i w1 =
        r1 ? (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, r1)) : _mm256_setzero_si256();
    return ptdp__bf16_join16(w0, w1);
}

/* the same pairs of values already stored in bf16 (r1 NULL: zeros) */
BF16_TARGET static inline __m512i ptdp__bf16_pairs16_b16(const uint16_t *r0, const uint16_t *r1,
                                                         __mmask16 m) {
    const __m256i w0 = _mm512_castsi512_si256(_mm512_maskz_loadu_epi16((__mmask32)m, r0));
    const __m256i w1 = r1 ? _mm512_castsi512_si256(_mm512_maskz_loadu_epi16((__mmask32)m, r1))
                          : _mm256_setzero_si256();
    return ptdp__bf16_join16(w0, w1);
}

/* pairs (x[2t], x[2t+1]) rounded to bf16 for t < 16, of a row with n
 * values left (x[j] for j >= n read as 0) */
BF16_TARGET static inline __m512i ptdp__bf16_row32(const float *x, int64_t n) {
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(ptdp__lanes16(n - 16), x + 16),
                                        _mm512_maskz_loadu_ps(ptdp__lanes16(n), x));
}

/* exp(x) in 16 lanes: fastmath.h's ptdp__expf step for step (the same
 * roundings, as gcc's vectorised loops compute it), so the two agree bit
 * for bit on [-87, 88]; past those bounds x is clamped to them */
BF16_TARGET static inline __m512 ptdp__exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    const __m512 kf =
        _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), magic), magic);
    __m512 r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.0f / 720.0f), r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i e =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(kf), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

/* 16 bf16 values at p (lanes of m; zeros elsewhere) as fp32. A full mask
 * takes a plain load: streaming a row from memory, the masked 16-bit load
 * made the loss head's max over its bf16 logits 2.4x slower on Zen 5. */
BF16_TARGET static inline __m512 ptdp__bf16_load16(const uint16_t *p, __mmask16 m) {
    const __m256i v = m == 0xffff ? _mm256_loadu_si256((const __m256i *)(const void *)p)
                                  : _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

/* r[i] <- the 16 x 16 transpose of r, 32-bit elements */
BF16_TARGET static inline void ptdp__transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* each 128-bit lane now holds a transposed 4 x 4 tile; the two lane
     * shuffles below move the tiles to their places */
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
        r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);
    }
}

/* r[t], lane i = pair t (values 2t and 2t + 1, rounded to bf16) of row i of
 * x (row stride ld), for 16 pairs of rows i < rows (zeros past them) with n
 * values left in each: 16 rows' next 32 values, transposed into pairs */
BF16_TARGET static inline void ptdp__bf16_rows_pairs16(__m512i r[16], const float *x, int64_t ld,
                                                       int64_t rows, int64_t n) {
    for (int i = 0; i < 16; i++)
        r[i] = i < rows ? ptdp__bf16_row32(x + i * ld, n) : _mm512_setzero_si512();
    ptdp__transpose16(r);
}

#endif
