/* bf16_blocked.c - the native bf16 backend's weight copies (gemm_bf16.c):
 * fp32 weights op(B) [K, N] converted into the blocked bf16 layout oneDNN's
 * bf16 matmul reads, in one pass, with AVX-512 (AVX512_BF16 for the
 * conversion). oneDNN's own reorder does the same job at 6-20 GB/s here; the
 * transposed orientation (B = W^T, the forward's) is the slow one for a
 * plain loop as well, since each pair of the output comes from another row
 * of W.
 *
 * The layout (oneDNN's tag BA16a64b2a on AVX512_BF16 machines; any
 * {kb/2}a{nb}b2a with nb a multiple of 16 is accepted): blocks of kb rows of
 * K by nb columns of N, each stored as kb/2 rows of nb pairs (the values at
 * k and k+1 side by side, the layout vdpbf16ps reads), blocks placed by the
 * descriptor's two outer strides. Element (k, n) sits at
 *
 *     (k / kb) sk + (n / nb) sn + ((k % kb) / 2) 2 nb + 2 (n % nb) + k % 2
 *
 * Entries past K or N (the layout pads both to whole blocks) are never
 * written: the caller zeroes the buffer once. Rounding is vcvtne2ps2bf16's:
 * to nearest even, fp32 subnormals flushed to zero, as oneDNN's reorder
 * rounds on these CPUs (test_bf16_native compares the two byte for byte).
 *
 *   - op(B) = W [K, N] (tb = 0, the input gradient's dY W): two rows of W
 *     side by side, 16 columns at a time;
 *   - op(B) = W^T (tb = 1, the forward's x W^T, W stored [N, K]): 16 rows of
 *     W, 32 values of K each, become 16 x 16 pairs, transposed in registers,
 *     so every store writes 16 pairs in a row of the block.
 *
 * Also here, for the weight gradients' C += A^T B (both operands stored
 * with K, the tokens, as rows): A^T into plain bf16 rows, the same register
 * transpose over pairs of A's rows (ptdp__bf16_pack_transposed); their B is
 * packed into the blocked layout like a weight. And the loss head's
 * cross-entropy on its bf16 logits: the row maxima, the sums of the
 * exponentials (ptdp__xent_max_b16, ptdp__xent_sums_b16) and the gradient
 * (ptdp__bf16_xent_grad): xent_bwd's values, the exponentials recomputed,
 * written in bf16, transposed and in rows, in one pass. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels/cpu/half/half.h"

int ptdp__bf16_blocking_of(const dnnl_memory_desc_t *md, ptdp__bf16_blocking *b) {
    memset(b, 0, sizeof *b);
    if (!ptdp__gemm_tile_bf16_available() || md->ndims != 2 || md->data_type != dnnl_bf16 ||
        md->format_kind != dnnl_blocked || md->offset0 != 0 || md->extra.flags != 0)
        return 0;
    const dnnl_blocking_desc_t *bd = &md->format_desc.blocking;
    if (bd->inner_nblks != 3 || bd->inner_idxs[0] != 0 || bd->inner_idxs[1] != 1 ||
        bd->inner_idxs[2] != 0 || bd->inner_blks[2] != 2 || bd->inner_blks[1] % 16 != 0)
        return 0;
    b->kb = 2 * bd->inner_blks[0];
    b->nb = bd->inner_blks[1];
    b->sk = bd->strides[0];
    b->sn = bd->strides[1];
    /* the blocks must not overlap (each holds kb nb values), and every 16
     * pairs of a block row start a 64-byte line (the stores are whole lines) */
    return b->kb > 0 && b->nb > 0 && b->sk % 32 == 0 && b->sn % 32 == 0 &&
           md->padded_dims[0] % b->kb == 0 && md->padded_dims[1] % b->nb == 0 &&
           (b->sk >= b->kb * b->nb || b->sn >= b->kb * b->nb);
}

/* where the pair of (k, n), k even, starts */
static inline int64_t at(const ptdp__bf16_blocking *b, int64_t k, int64_t n) {
    return (k / b->kb) * b->sk + (n / b->nb) * b->sn + ((k % b->kb) / 2) * 2 * b->nb +
           2 * (n % b->nb);
}

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/cpu/half/bf16_simd.h"

#define lanes ptdp__lanes16

/* how far ahead (floats) ptdp__bf16_xent_grad, reading 32 rows side by
 * side, prefetches each: 1 KiB, the best of 256 B to 2 KiB on 2 Zen 5
 * cores (without it the pass took twice as long: the 32 streams outrun the
 * hardware's prefetchers) */
#define PF 256

/* 16 pairs at dst (64-byte aligned where m is full: the layout's rows of
 * pairs are whole cache lines, and the copy's buffer is aligned). A copy is
 * made right before the GEMM that reads it, so a small one is stored
 * through the caches, where that GEMM finds it; one of more than STREAM
 * bytes, which would not stay there anyway, is stored past them. */
#define STREAM ((int64_t)8 << 20)
BF16_TARGET static inline void put16(uint16_t *dst, __mmask16 m, __m512i v, int stream) {
    if (stream && m == 0xffff)
        _mm512_stream_si512((void *)dst, v);
    else
        _mm512_mask_storeu_epi32(dst, m, v);
}

/* Sources: fp32 values (b16 0, rounded to bf16 as they are read) or values
 * already stored in bf16 (b16 1, the native backend's 16-bit activations:
 * gemm_bf16.c's typed GEMM); element i of a row at p */
static inline const void *elt(const void *p, int b16, int64_t i) {
    return (const char *)p + i * (b16 ? 2 : 4);
}
/* pairs (r0[j], r1[j]) for the lanes of m (r1 NULL: zeros) */
BF16_TARGET static inline __m512i pairs_of(const void *r0, const void *r1, __mmask16 m, int b16) {
    return b16 ? ptdp__bf16_pairs16_b16(r0, r1, m) : ptdp__bf16_pairs16(r0, r1, m);
}

/* tb = 0: the pair rows k, k + 1 (r1 NULL past K) for n0 <= n < n1, all in
 * one block column (16 | nb, so 16 values never straddle two blocks) */
BF16_TARGET static void pairs_of_rows(const ptdp__bf16_blocking *b, uint16_t *dst, const void *r0,
                                      const void *r1, int b16, int64_t k, int64_t n0, int64_t n1,
                                      int stream) {
    uint16_t *d = dst + at(b, k, n0); /* then 16 pairs (32 values) per 16 columns */
    for (int64_t n = n0; n < n1; n += 16, d += 32) {
        const __mmask16 m = lanes(n1 - n);
        const __m512i p = pairs_of(elt(r0, b16, n), r1 ? elt(r1, b16, n) : NULL, m, b16);
        put16(d, m, p, stream);
    }
}

/* tb = 1: rows n0 .. n0 + rows of W (rows <= 16, one block column), values
 * k0 .. k0 + 32 of each (K past k0 + kc not read; kc <= 32 within one block
 * row): pair (k0 + 2j, n0 + i) from row i's pair j */
BF16_TARGET static void tile_of_wt(const ptdp__bf16_blocking *b, uint16_t *dst, const float *W,
                                   int64_t ldw, int64_t n0, int rows, int64_t k0, int64_t kc,
                                   int stream) {
    __m512i r[16];
    ptdp__bf16_rows_pairs16(r, W + n0 * ldw + k0, ldw, rows, kc);
    const __mmask16 m = lanes(rows);
    const int pairs = (int)((kc + 1) / 2);
    uint16_t *d = dst + at(b, k0, n0); /* a row of pairs further per j */
    for (int j = 0; j < pairs; j++) put16(d + 2 * b->nb * j, m, r[j], stream);
}

BF16_TARGET static void pack_avx512(const ptdp__bf16_blocking *b, uint16_t *dst, const void *B,
                                    int b16, int tb, int64_t K, int64_t N, int64_t ldb) {
    const int stream = 2 * K * N > STREAM;
    /* streamed stores are weakly ordered, and an SFENCE orders only its own
     * thread's: each thread fences before the region's closing barrier */
    if (!tb) {
        const int64_t pairs = (K + 1) / 2;
#pragma omp parallel if (K * N > 65536)
        {
#pragma omp for schedule(static)
            for (int64_t t = 0; t < pairs; t++) {
                const void *r0 = elt(B, b16, 2 * t * ldb),
                           *r1 = 2 * t + 1 < K ? elt(r0, b16, ldb) : NULL;
                for (int64_t n0 = 0; n0 < N; n0 += b->nb) {
                    const int64_t n1 = n0 + b->nb < N ? n0 + b->nb : N;
                    pairs_of_rows(b, dst, r0, r1, b16, 2 * t, n0, n1, stream);
                }
            }
            _mm_sfence();
        }
        return;
    }
    /* tb = 1: one block column (nb rows of W) at a time, its blocks written
     * whole in turn; 32 values of K a step (kb is even; a step stops at each
     * block row's end when 32 does not divide kb) */
    const int64_t cols = (N + b->nb - 1) / b->nb;
#pragma omp parallel if (K * N > 65536)
    {
#pragma omp for schedule(static)
        for (int64_t c = 0; c < cols; c++) {
            const int64_t nend = (c + 1) * b->nb < N ? (c + 1) * b->nb : N;
            for (int64_t k0 = 0; k0 < K;) {
                const int64_t end_blk = (k0 / b->kb + 1) * b->kb, lim = end_blk < K ? end_blk : K;
                const int64_t kc = lim - k0 < 32 ? lim - k0 : 32;
                for (int64_t n0 = c * b->nb; n0 < nend; n0 += 16)
                    tile_of_wt(b, dst, (const float *)B, ldb, n0,
                               (int)(nend - n0 < 16 ? nend - n0 : 16), k0, kc, stream);
                k0 += kc;
            }
        }
        _mm_sfence();
    }
}

/* Both copies of W [R, C] (row stride ldw) in one pass over it: dt holds
 * op(B) = W^T (K = C, N = R) in layout bt, dw holds op(B) = W (K = R, N = C)
 * in layout bw. The threads split W's rows in groups of 16; each group goes
 * 32 columns at a time, read from memory for the W^T tile and again from L1
 * for the pairs of rows. Needs bt->kb and bw->nb multiples of 32, so that a
 * 32-column step stays inside a block of each (ptdp__bf16_pack_both_fits). */
BF16_TARGET static void pack_both_avx512(const ptdp__bf16_blocking *bt, uint16_t *dt,
                                         const ptdp__bf16_blocking *bw, uint16_t *dw,
                                         const float *W, int64_t R, int64_t C, int64_t ldw) {
    const int stream = 2 * R * C > STREAM;
    const int64_t groups = (R + 15) / 16;
#pragma omp parallel if (R * C > 65536)
    {
#pragma omp for schedule(static)
        for (int64_t gi = 0; gi < groups; gi++) {
            const int64_t r0 = 16 * gi;
            const int rows = (int)(R - r0 < 16 ? R - r0 : 16);
            for (int64_t c0 = 0; c0 < C; c0 += 32) {
                const int64_t kc = C - c0 < 32 ? C - c0 : 32;
                tile_of_wt(bt, dt, W, ldw, r0, rows, c0, kc, stream);
                for (int p = 0; 2 * p < rows; p++) {
                    const float *w0 = W + (r0 + 2 * p) * ldw;
                    pairs_of_rows(bw, dw, w0, 2 * p + 1 < rows ? w0 + ldw : NULL, 0, r0 + 2 * p, c0,
                                  c0 + kc, stream);
                }
            }
        }
        _mm_sfence();
    }
}

int ptdp__bf16_pack_both_fits(const ptdp__bf16_blocking *bt, const ptdp__bf16_blocking *bw) {
    return bt->kb > 0 && bw->kb > 0 && bt->kb % 32 == 0 && bw->nb % 32 == 0;
}

void ptdp__bf16_pack_both(const ptdp__bf16_blocking *bt, uint16_t *dt,
                          const ptdp__bf16_blocking *bw, uint16_t *dw, const float *W, int64_t R,
                          int64_t C, int64_t ldw) {
    PTDP_ASSERT_MSG(ptdp__bf16_pack_both_fits(bt, bw) && ((uintptr_t)dt & 63) == 0 &&
                        ((uintptr_t)dw & 63) == 0,
                    "bf16 pack of both orientations without fitting layouts");
    pack_both_avx512(bt, dt, bw, dw, W, R, C, ldw);
}

/* transpose_avx512 (below): dst [M, K] row-major = A^T rounded to bf16, A
 * stored [K, M] with row stride lda. The threads split A's columns evenly,
 * in units of 16 (whole 256-column blocks left 768 columns 2 : 1 between
 * two threads); a thread takes 256 of its columns at a time (one 1 KiB
 * piece of each row) and walks down the rows 32 at a time; each 16 columns
 * of those 32 rows are paired as rows k, k + 1 (the values of a row of dst
 * at k and k + 1, side by side), then transposed in registers, so that each
 * store writes 32 values of one row of dst. */
enum { TCOLS = 256 };
/* transpose_avx512's work on columns [mb, mend) */
BF16_TARGET static void transpose_cols(uint16_t *dst, const void *A, int b16, int64_t K,
                                       int64_t lda, int64_t mb, int64_t mend) {
    for (int64_t k0 = 0; k0 < K; k0 += 32) {
        const __mmask32 kmask = ptdp__lanes32(K - k0);
        for (int64_t m0 = mb; m0 < mend; m0 += 16) {
            const int rows = (int)(mend - m0 < 16 ? mend - m0 : 16);
            const __mmask16 m = lanes(rows);
            __m512i r[16];
            for (int j = 0; j < 16; j++) {
                const int64_t k = k0 + 2 * j;
                /* the same columns of the next 32 rows: with 32 rows read side by
                 * side the hardware's prefetchers fall behind (10-50% faster at
                 * the layers' shapes with this) */
                if (k + 33 < K) {
                    _mm_prefetch(elt(A, b16, (k + 32) * lda + m0), _MM_HINT_T0);
                    _mm_prefetch(elt(A, b16, (k + 33) * lda + m0), _MM_HINT_T0);
                }
                r[j] = k < K ? pairs_of(elt(A, b16, k * lda + m0),
                                        k + 1 < K ? elt(A, b16, (k + 1) * lda + m0) : NULL, m, b16)
                             : _mm512_setzero_si512();
            }
            ptdp__transpose16(r);
            for (int i = 0; i < rows; i++)
                _mm512_mask_storeu_epi16(dst + (m0 + i) * K + k0, kmask, r[i]);
        }
    }
}

BF16_TARGET static void transpose_avx512(uint16_t *dst, const void *A, int b16, int64_t K,
                                         int64_t M, int64_t lda) {
#pragma omp parallel if (K * M > 65536)
    {
        const int64_t nt = omp_get_num_threads(), units = (M + 15) / 16,
                      per = (units + nt - 1) / nt, lo = omp_get_thread_num() * per * 16,
                      hi = lo + per * 16 < M ? lo + per * 16 : M;
        for (int64_t mb = lo; mb < hi; mb += TCOLS)
            transpose_cols(dst, A, b16, K, lda, mb, mb + TCOLS < hi ? mb + TCOLS : hi);
    }
}

void ptdp__bf16_pack_transposed(uint16_t *dst, const float *A, int64_t K, int64_t M, int64_t lda) {
    transpose_avx512(dst, A, 0, K, M, lda);
}

void ptdp__bf16_pack_transposed_b16(uint16_t *dst, const uint16_t *A, int64_t K, int64_t M,
                                    int64_t lda) {
    transpose_avx512(dst, A, 1, K, M, lda);
}

/* ---- the loss head's cross-entropy on bf16 logits ------------------------
 * The logits [N, Vl] in bf16 (gemm_bf16.c's head): each pass reads 2 bytes
 * a logit, and the exponentials are made where they are used (ptdp__exp16,
 * the fp32 path's exp bit for bit) instead of stored. */

/* row n's max over its valid columns */
BF16_TARGET static float max_row_b16(const uint16_t *l, int64_t nv) {
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
    int64_t c = 0;
    for (; c + 32 <= nv; c += 32) {
        m0 = _mm512_max_ps(m0, ptdp__bf16_load16(l + c, 0xffff));
        m1 = _mm512_max_ps(m1, ptdp__bf16_load16(l + c + 16, 0xffff));
    }
    for (; c < nv; c += 16) {
        const __mmask16 k = lanes(nv - c);
        m0 = _mm512_mask_max_ps(m0, k, m0, ptdp__bf16_load16(l + c, k));
    }
    return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

/* the sum of exp(l - m) over the valid columns, in 4 x 16 partial sums */
BF16_TARGET static float sum_row_b16(const uint16_t *l, int64_t nv, float m) {
    const __m512 vm = _mm512_set1_ps(m);
    __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
    int64_t c = 0;
    for (; c + 64 <= nv; c += 64)
        for (int q = 0; q < 4; q++)
            a[q] = _mm512_add_ps(
                a[q], ptdp__exp16(_mm512_sub_ps(ptdp__bf16_load16(l + c + 16 * q, 0xffff), vm)));
    for (int q = 0; c < nv; c += 16, q++) {
        const __mmask16 k = lanes(nv - c);
        a[q] = _mm512_mask_add_ps(a[q], k, a[q],
                                  ptdp__exp16(_mm512_sub_ps(ptdp__bf16_load16(l + c, k), vm)));
    }
    return _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}

void ptdp__xent_max_b16(const uint16_t *logits, float *rowmax, int64_t N, int64_t Vl, int64_t v0,
                        int64_t V) {
    const int64_t nv = ptdp__xent_valid_cols(Vl, v0, V);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) rowmax[n] = nv ? max_row_b16(logits + n * Vl, nv) : -INFINITY;
}

void ptdp__xent_sums_b16(const uint16_t *logits, const float *gmax, const int32_t *targets,
                         int64_t ld, float *sumexp, float *tgt, int64_t s, int64_t b, int64_t Vl,
                         int64_t v0, int64_t V) {
    const int64_t nv = ptdp__xent_valid_cols(Vl, v0, V);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < s * b; n++) {
        const uint16_t *l = logits + n * Vl;
        const int64_t t = (int64_t)targets[(n % b) * ld + n / b] - v0;
        tgt[n] = t >= 0 && t < nv ? ptdp_bf16_to_f32(l[t]) : 0.0f;
        sumexp[n] = sum_row_b16(l, nv, gmax[n]);
    }
}

/* The gradient (ptdp__bf16_xent_grad below): rows k0 .. k0 + 32 of dl for
 * columns m0 .. m0 + 16, as xent_bwd computes them (exp(l - max) times
 * scale / sumexp, scale off the target's entry, zero past the valid columns
 * and in masked rows), rounded to bf16, the rows paired and transposed into
 * At; row i's 16 values as they are also into keep[i]. */
typedef struct {
    float inv[32], max[32];
    int64_t tgt[32]; /* the target's column here, -1 where not in [0, nv) */
    int live[32];    /* 0: past N, or a masked row */
} xent_rows;

BF16_TARGET static void xent_tile(uint16_t *At, const uint16_t *l, const xent_rows *r, int64_t k0,
                                  int64_t N, int64_t Vl, int64_t nv, int64_t m0, float scale,
                                  __m256i *keep) {
    const __mmask16 m = lanes(nv - m0);
    const __m512 sc = _mm512_set1_ps(scale);
    __m512i p[16];
    for (int j = 0; j < 16; j++) {
        __m256i h[2];
        for (int q = 0; q < 2; q++) {
            const int i = 2 * j + q;
            __m512 v = _mm512_setzero_ps();
            if (r->live[i]) {
                const uint16_t *row = l + (k0 + i) * Vl + m0;
                _mm_prefetch((const char *)(row + 2 * PF), _MM_HINT_T0);
                const __m512 x =
                    _mm512_sub_ps(ptdp__bf16_load16(row, m), _mm512_set1_ps(r->max[i]));
                v = _mm512_maskz_mul_ps(m, ptdp__exp16(x), _mm512_set1_ps(r->inv[i]));
                const int64_t t = r->tgt[i] - m0;
                if (t >= 0 && t < 16) v = _mm512_mask_sub_ps(v, (__mmask16)(1u << t), v, sc);
            }
            h[q] = (__m256i)_mm512_cvtneps_pbh(v);
            keep[i] = h[q];
        }
        p[j] = ptdp__bf16_join16(h[0], h[1]);
    }
    ptdp__transpose16(p);
    const int64_t left = N - k0;
    const __mmask32 km = ptdp__lanes32(left);
    const int cols = (int)(Vl - m0 < 16 ? Vl - m0 : 16);
    for (int i = 0; i < cols; i++) {
        uint16_t *d = At + (m0 + i) * N + k0;
        if (left >= 32 && ((uintptr_t)d & 63) == 0)
            _mm512_stream_si512((void *)d, p[i]);
        else
            _mm512_mask_storeu_epi16(d, km, p[i]);
    }
}

/* dl's rows k0 .. k0 + 32 (those below N), columns m0 .. m0 + 32 (below Vl),
 * from the two tiles' kept values, into rows (row i at rows + i Vl), 64
 * bytes a row: through the caches (stored past them, with the 32 streams
 * of dl^T beside them, the pass took 2 ms longer at GPT-2's head) */
BF16_TARGET static void put_rows(uint16_t *rows, __m256i kp[2][32], int64_t k0, int64_t N,
                                 int64_t Vl, int64_t m0) {
    const __mmask32 cm = ptdp__lanes32(Vl - m0);
    for (int i = 0; i < 32 && k0 + i < N; i++) {
        const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(kp[0][i]), kp[1][i], 1);
        _mm512_mask_storeu_epi16(rows + i * Vl + m0, cm, v);
    }
}

/* The threads take blocks of 32 rows; each 32 columns of a block become
 * dl^T in At and dl's rows over the same place in l, which the two tiles
 * have read by then. */
BF16_TARGET static void xent_grad_avx512(uint16_t *At, uint16_t *l, const ptdp_xent_grad *xg) {
    const int64_t N = xg->s * xg->b, Vl = xg->Vl;
    const int64_t nv = ptdp__xent_valid_cols(Vl, xg->v0, xg->V);
    const int64_t blocks = (N + 31) / 32;
#pragma omp parallel
    {
        const int64_t T = omp_get_num_threads(), t = omp_get_thread_num();
        for (int64_t bk = blocks * t / T; bk < blocks * (t + 1) / T; bk++) {
            const int64_t k0 = bk * 32;
            xent_rows r;
            for (int i = 0; i < 32; i++) {
                const int64_t n = k0 + i, si = n / xg->b, bi = n % xg->b;
                r.live[i] =
                    n < N && !(xg->mask_tokens && xg->mask_tokens[bi * xg->ld + si] == xg->mask_id);
                r.inv[i] = n < N ? xg->scale / xg->sumexp[n] : 0.0f;
                r.max[i] = n < N ? xg->gmax[n] : 0.0f;
                const int64_t tg = n < N ? (int64_t)xg->targets[bi * xg->ld + si] - xg->v0 : -1;
                r.tgt[i] = tg >= 0 && tg < nv ? tg : -1;
            }
            for (int64_t m0 = 0; m0 < Vl; m0 += 32) {
                __m256i kp[2][32];
                xent_tile(At, l, &r, k0, N, Vl, nv, m0, xg->scale, kp[0]);
                if (m0 + 16 < Vl) xent_tile(At, l, &r, k0, N, Vl, nv, m0 + 16, xg->scale, kp[1]);
                put_rows(l + k0 * Vl, kp, k0, N, Vl, m0);
            }
        }
        _mm_sfence(); /* this thread's streamed dl^T, as in pack_avx512 */
    }
}

void ptdp__bf16_xent_grad(uint16_t *At, uint16_t *logits, const ptdp_xent_grad *xg) {
    xent_grad_avx512(At, logits, xg);
}

void ptdp__bf16_pack_blocked(const ptdp__bf16_blocking *b, uint16_t *dst, const float *B, int tb,
                             int64_t K, int64_t N, int64_t ldb) {
    PTDP_ASSERT_MSG(b->kb > 0 && b->nb % 16 == 0 && ((uintptr_t)dst & 63) == 0,
                    "bf16 blocked pack without a layout or a 64-byte aligned buffer");
    pack_avx512(b, dst, B, 0, tb, K, N, ldb);
}

void ptdp__bf16_pack_blocked_b16(const ptdp__bf16_blocking *b, uint16_t *dst, const uint16_t *B,
                                 int64_t K, int64_t N, int64_t ldb) {
    PTDP_ASSERT_MSG(b->kb > 0 && b->nb % 16 == 0 && ((uintptr_t)dst & 63) == 0,
                    "bf16 blocked pack without a layout or a 64-byte aligned buffer");
    pack_avx512(b, dst, B, 1, 0, K, N, ldb);
}
#else
void ptdp__bf16_pack_transposed(uint16_t *dst, const float *A, int64_t K, int64_t M, int64_t lda) {
    (void)dst, (void)A, (void)K, (void)M, (void)lda;
    PTDP_ASSERT_MSG(0, "bf16 transposing pack without AVX512_BF16");
}
void ptdp__bf16_pack_transposed_b16(uint16_t *dst, const uint16_t *A, int64_t K, int64_t M,
                                    int64_t lda) {
    (void)dst, (void)A, (void)K, (void)M, (void)lda;
    PTDP_ASSERT_MSG(0, "bf16 transposing pack without AVX512_BF16");
}
void ptdp__bf16_pack_blocked_b16(const ptdp__bf16_blocking *b, uint16_t *dst, const uint16_t *B,
                                 int64_t K, int64_t N, int64_t ldb) {
    (void)b, (void)dst, (void)B, (void)K, (void)N, (void)ldb;
    PTDP_ASSERT_MSG(0, "bf16 blocked pack without AVX512_BF16");
}
void ptdp__xent_max_b16(const uint16_t *logits, float *rowmax, int64_t N, int64_t Vl, int64_t v0,
                        int64_t V) {
    (void)logits, (void)rowmax, (void)N, (void)Vl, (void)v0, (void)V;
    PTDP_ASSERT_MSG(0, "bf16 logits without AVX512_BF16");
}
void ptdp__xent_sums_b16(const uint16_t *logits, const float *gmax, const int32_t *targets,
                         int64_t ld, float *sumexp, float *tgt, int64_t s, int64_t b, int64_t Vl,
                         int64_t v0, int64_t V) {
    (void)logits, (void)gmax, (void)targets, (void)ld, (void)sumexp, (void)tgt, (void)s, (void)b;
    (void)Vl, (void)v0, (void)V;
    PTDP_ASSERT_MSG(0, "bf16 logits without AVX512_BF16");
}
void ptdp__bf16_xent_grad(uint16_t *At, uint16_t *logits, const ptdp_xent_grad *xg) {
    (void)At, (void)logits, (void)xg;
    PTDP_ASSERT_MSG(0, "bf16 cross-entropy gradient pack without AVX512_BF16");
}
int ptdp__bf16_pack_both_fits(const ptdp__bf16_blocking *bt, const ptdp__bf16_blocking *bw) {
    (void)bt, (void)bw;
    return 0;
}
void ptdp__bf16_pack_both(const ptdp__bf16_blocking *bt, uint16_t *dt,
                          const ptdp__bf16_blocking *bw, uint16_t *dw, const float *W, int64_t R,
                          int64_t C, int64_t ldw) {
    (void)bt, (void)dt, (void)bw, (void)dw, (void)W, (void)R, (void)C, (void)ldw;
    PTDP_ASSERT_MSG(0, "bf16 blocked pack without AVX512_BF16");
}
void ptdp__bf16_pack_blocked(const ptdp__bf16_blocking *b, uint16_t *dst, const float *B, int tb,
                             int64_t K, int64_t N, int64_t ldb) {
    (void)b, (void)dst, (void)B, (void)tb, (void)K, (void)N, (void)ldb;
    (void)at;
    PTDP_ASSERT_MSG(0, "bf16 blocked pack without AVX512_BF16");
}
#endif
