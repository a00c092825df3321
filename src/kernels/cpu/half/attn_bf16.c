/* attn_bf16.c - the tile products of flash attention (attention.c) for the
 * bf16 backend on CPUs with AVX512_BF16: C[M, N] = alpha op(A) op(B) + beta C
 * with op(A) and op(B) rounded to bf16 (round to nearest even; exact for
 * values already on the bf16 grid: q, k, v and dctx) and products summed in
 * fp32 by vdpbf16ps, as oneDNN's bf16 matmul sums them. The probabilities
 * and dS are rounded here, as Megatron rounds them before its bf16 batched
 * GEMMs and flash attention before its tile products. Both operands are
 * packed per call into buffers on the calling thread's stack as pairs along
 * K (the layout vdpbf16ps reads): A as [M][K/2] (or [K/2][M] when
 * transposed), op(B) as [K/2][N]; a 6 x 64 register block then runs over
 * K/2 pairs. The packed attention below keeps its per-thread packs in the
 * instance (ptdp__attn_packs). */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cpu/half/half.h"
#include "kernels/cpu/fastmath.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/cpu/half/bf16_simd.h"

#define MR 6
#define KC 128 /* K per pass: 64 pairs */
#define MC 128
#define NC 128
#define K2C (KC / 2)

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

/* dst[t][j] = pair t of row j of B (B[j][2t], B[j][2t + 1]) for j < nc, t <
 * k2 = ceil(kc / 2): rows of B contiguous in K, 16 rows and 16 pairs at a
 * time transposed in registers (op(B) = B^T as [k2][nc] pairs) */
BF16_TARGET static void pack_kt(uint32_t *dst, const float *B, int64_t ldb, int64_t nc,
                                int64_t kc) {
    const int64_t k2 = (kc + 1) / 2;
    for (int64_t j0 = 0; j0 < nc; j0 += 16) {
        const __mmask16 jm = lanes(nc - j0);
        for (int64_t t0 = 0; t0 < k2; t0 += 16) {
            __m512i r[16];
            ptdp__bf16_rows_pairs16(r, B + j0 * ldb + 2 * t0, ldb, nc - j0, kc - 2 * t0);
            for (int64_t t = 0; t < 16 && t0 + t < k2; t++)
                _mm512_mask_storeu_epi32(dst + (t0 + t) * nc + j0, jm, r[t]);
        }
    }
}

/* C's block of mr rows by 64 columns (lanes m) from pairs k0 .. k1 of K */
BF16_TARGET __attribute__((always_inline)) static inline void
block(int mr, int64_t k0, int64_t k1, const uint32_t *A, int64_t ars, int64_t aks,
      const uint32_t *B, int64_t ldb, const __mmask16 *m, float alpha, float beta, float *C,
      int64_t ldc) {
    __m512 acc[MR][4];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) acc[r][c] = _mm512_setzero_ps();
    for (int64_t k = k0; k < k1; k++) {
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

/* What of a tile product the causal mask makes zero, so that the product
 * may skip it (the packed attention below; none for ptdp__gemm_tile_bf16).
 * Row i of a tile sees key j where j <= i + d (d = r0 - c0; only a tile on
 * the diagonal, d < cb, has masked entries):
 *   - OUT_MASKED: C = S or dP [queries, keys]; C's masked entries are never
 *     read, so 64-column groups wholly masked for a block of rows are left;
 *   - A_TAIL: A = P or dS rows [queries][key pairs], zero past the keys a
 *     row sees: a block of rows stops at its last visible key's pair;
 *   - A_HEAD: A = P^T or dS^T [keys][query pairs], zero before the first
 *     query that sees the key: a block of rows starts at that query's pair.
 * The entries skipped are exact zeros (the softmax rows write them so), and
 * adding zero products to an fp32 sum, or starting the sum later past them,
 * gives the same bits, so the results are the unmasked products'. */
enum { CAUSAL_NONE, OUT_MASKED, A_TAIL, A_HEAD };
typedef struct {
    int kind;
    int64_t d;     /* row i sees key j <= i + d */
    int64_t kbase; /* the pair of K at which this call's K2 pairs start (A_TAIL, A_HEAD) */
} causal;

/* Whether the block of rows i0 .. i0 + mr by columns j0 .. j0 + 64 is
 * computed (OUT_MASKED: not where none of its rows sees column j0), and if
 * so the pairs [*k0, *k1) of K2 it needs */
static inline int causal_pairs(const causal *cz, int64_t i0, int mr, int64_t j0, int64_t K2,
                               int64_t *k0, int64_t *k1) {
    *k0 = 0, *k1 = K2;
    if (cz->kind == OUT_MASKED) {
        return j0 <= i0 + mr - 1 + cz->d;
    } else if (cz->kind == A_TAIL) { /* keys up to i0 + mr - 1 + d: their pairs */
        const int64_t hi = (i0 + mr - 1 + cz->d) / 2 + 1 - cz->kbase;
        *k1 = hi < 0 ? 0 : hi < K2 ? hi : K2;
    } else if (cz->kind == A_HEAD && i0 > cz->d) { /* queries from i0 - d on */
        const int64_t lo = (i0 - cz->d) / 2 - cz->kbase;
        *k0 = lo < 0 ? 0 : lo < K2 ? lo : K2;
    }
    if (*k1 < *k0) *k1 = *k0;
    return 1;
}

/* C[M, N] (+)= A-pairs x B-pairs over K2 pairs; B rows of ldb pairs */
BF16_TARGET static void panel(int64_t M, int64_t N, int64_t K2, const uint32_t *A, int64_t ars,
                              int64_t aks, const uint32_t *B, int64_t ldb, float alpha, float beta,
                              float *C, int64_t ldc, const causal *cz) {
    for (int64_t j0 = 0; j0 < N; j0 += 64) {
        const __mmask16 m[4] = {lanes(N - j0), lanes(N - j0 - 16), lanes(N - j0 - 32),
                                lanes(N - j0 - 48)};
        int64_t i0 = 0, k0, k1;
        for (; i0 + MR <= M; i0 += MR)
            if (causal_pairs(cz, i0, MR, j0, K2, &k0, &k1))
                block(MR, k0, k1, A + i0 * ars, ars, aks, B + j0, ldb, m, alpha, beta,
                      C + i0 * ldc + j0, ldc);
        if (i0 == M || !causal_pairs(cz, i0, (int)(M - i0), j0, K2, &k0, &k1)) continue;
        const uint32_t *Ai = A + i0 * ars;
        float *Ci = C + i0 * ldc + j0;
        /* the tail's row count as a constant, so each block keeps its registers */
#define TAIL(r)                                                               \
    case r:                                                                   \
        block(r, k0, k1, Ai, ars, aks, B + j0, ldb, m, alpha, beta, Ci, ldc); \
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

BF16_TARGET void ptdp__gemm_tile_bf16(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N,
                                      int64_t K, float alpha, const float *A, int64_t lda,
                                      const float *B, int64_t ldb, float beta, float *C,
                                      int64_t ldc) {
    (void)be;
    if (M == 0 || N == 0) return;
    uint32_t pa[MC * K2C] __attribute__((aligned(64))); /* 32 KiB each, this call's */
    uint32_t pb[K2C * NC] __attribute__((aligned(64)));
    if (K == 0) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
    const causal none = {CAUSAL_NONE, 0, 0};
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
        const int64_t kc = K - k0 < KC ? K - k0 : KC, k2 = (kc + 1) / 2;
        const float bt = k0 == 0 ? beta : 1.0f;
        for (int64_t n0 = 0; n0 < N; n0 += NC) {
            const int64_t nc = N - n0 < NC ? N - n0 : NC;
            /* op(B) [kc, nc] as [k2][nc] pairs */
            if (tb) { /* B is [N][K]: rows contiguous in K, transposed */
                pack_kt(pb, B + n0 * ldb + k0, ldb, nc, kc);
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
                    panel(mc, nc, k2, pa, k2, 1, pb, nc, alpha, bt, C + m0 * ldc + n0, ldc, &none);
                } else { /* A [K][M]: [k2][mc] */
                    for (int64_t t = 0; t < k2; t++) {
                        const float *r0 = A + (k0 + 2 * t) * lda + m0;
                        pack_row_pair(pa + t * mc, r0, 2 * t + 1 < kc ? r0 + lda : NULL, mc);
                    }
                    panel(mc, nc, k2, pa, 1, mc, pb, nc, alpha, bt, C + m0 * ldc + n0, ldc, &none);
                }
            }
        }
    }
}

/* ---- attention with operands packed once per (sequence, head) ----------
 * ptdp__attention_fwd/_bwd through ptdp__gemm_tile_bf16 convert both
 * operands of every tile product: a query block's q once per key block, a
 * key block's k and v once per query block. Here each task (a sequence and
 * a head) converts q, k, v (and dctx) once, into each layout its products
 * read (the backward's task, a sequence and a key/value group, its k and v
 * once for all the group's query heads), and only the probabilities and dS
 * are packed per tile. The sums run
 * in the tile GEMM's order (pairs of K in chunks of K2C, 64-column groups,
 * 6-row blocks), so the results are its bits. */

/* dst [n][ceil(w / 2)]: row i's values as pairs along the row */
BF16_TARGET static void pack_rows(uint32_t *dst, const float *x, int64_t ld, int64_t n, int64_t w) {
    const int64_t w2 = (w + 1) / 2;
    for (int64_t i = 0; i < n; i++) pack_k_row(dst + i * w2, x + i * ld, w);
}

/* dst [ceil(n / 2)][w]: rows 2t and 2t + 1 paired (a missing last row as 0) */
BF16_TARGET static void pack_pairs(uint32_t *dst, const float *x, int64_t ld, int64_t n,
                                   int64_t w) {
    for (int64_t t = 0; 2 * t < n; t++)
        pack_row_pair(dst + t * w, x + 2 * t * ld, 2 * t + 1 < n ? x + (2 * t + 1) * ld : NULL, w);
}

/* C [M, N] (beta 0: =, 1: +=) A-pairs x B-pairs over K2 pairs, in chunks of
 * K2C pairs as ptdp__gemm_tile_bf16 sums them; kind: the causal structure
 * of the tile, d = r0 - c0 (off the diagonal, d >= cb, it skips nothing) */
BF16_TARGET static void mm(int64_t M, int64_t N, int64_t K2, const uint32_t *A, int64_t ars,
                           int64_t aks, const uint32_t *B, int64_t ldb, float beta, float *C,
                           int64_t ldc, int kind, int64_t d) {
    causal cz = {kind, d, 0};
    for (int64_t k = 0; k < K2; k += K2C) {
        const int64_t k2 = K2 - k < K2C ? K2 - k : K2C;
        cz.kbase = k;
        panel(M, N, k2, A + k * aks, ars, aks, B + k * ldb, ldb, 1.0f, k ? 1.0f : beta, C, ldc,
              &cz);
    }
}

/* The instance's per-thread packs: in its workspace (own 0) for the job's
 * shape, or grown before a parallel loop that needs more (the first call at
 * a shape, counted beyond a workspace), kept for the next, freed at close;
 * more than MAX_THREADS threads take the per-tile path. */
enum { MAX_THREADS = 256 };
struct ptdp__attn_packs {
    struct {
        uint32_t *p;
        size_t cap; /* uint32 values */
        int own;
    } t[MAX_THREADS];
};

ptdp__attn_packs *ptdp__attn_packs_new(void) { return calloc(1, sizeof(ptdp__attn_packs)); }

void ptdp__attn_packs_free(ptdp__attn_packs *pk) {
    for (int t = 0; pk && t < MAX_THREADS; t++)
        if (pk->t[t].own) free(pk->t[t].p);
    free(pk);
}

static size_t pack_need(int64_t s, int64_t hd, int nq, int np);

/* per thread: the backward's packs (the larger), in whole 64-byte lines */
static size_t thread_bytes(int64_t s, int64_t hd) {
    return (pack_need(s, hd, 4, 3) * sizeof(uint32_t) + 63) / 64 * 64;
}

size_t ptdp__attn_packs_bytes(int64_t s, int64_t hd, int threads) {
    return threads <= MAX_THREADS ? (size_t)threads * thread_bytes(s, hd) : 0;
}

void ptdp__attn_packs_set(ptdp__attn_packs *pk, void *block, int64_t s, int64_t hd, int threads) {
    for (int t = 0; t < MAX_THREADS; t++)
        if (!pk->t[t].own) pk->t[t].p = NULL, pk->t[t].cap = 0;
    if (!block || threads > MAX_THREADS) return;
    const size_t each = thread_bytes(s, hd);
    for (int t = 0; t < threads; t++) {
        if (pk->t[t].own) free(pk->t[t].p);
        pk->t[t].p = (uint32_t *)((char *)block + (size_t)t * each);
        pk->t[t].cap = each / sizeof(uint32_t), pk->t[t].own = 0;
    }
}

static int packs_ready(ptdp__cpu *cs, ptdp__attn_packs *pk, size_t n) {
    const int nt = omp_get_max_threads();
    if (nt > MAX_THREADS) return 0;
    for (int t = 0; t < nt; t++) {
        if (pk->t[t].cap >= n) continue;
        const size_t bytes = (n * sizeof(uint32_t) + 63) / 64 * 64;
        uint32_t *q = aligned_alloc(64, bytes);
        if (!q) return 0;
        cs->be.ondemand_bytes += bytes;
        if (pk->t[t].own) free(pk->t[t].p);
        pk->t[t].p = q, pk->t[t].cap = n, pk->t[t].own = 1;
    }
    return 1;
}

/* the pack space of one task: nq [s][ceil(hd/2)] layouts, np [ceil(s/2)][hd]
 * ones and a tile's (the backward's three: P^T and dS^T as pairs of rows,
 * dS in rows, each at most ceil(B/2) B pairs) */
static size_t pack_need(int64_t s, int64_t hd, int nq, int np) {
    const int64_t B = ptdp__attn_block(s);
    return (size_t)(nq * s * ((hd + 1) / 2) + np * ((s + 1) / 2) * hd + 3 * ((B + 1) / 2) * B);
}

/* ---- a tile's softmax rows straight into the packs (no dropout) --------
 * With dropout the rows go through attention.c's row functions, as the
 * fp32 attention's do, and are packed after. Without it they are made here
 * in 16 lanes and packed as they are made: P in bf16 for the product with v
 * (forward); P and dS as pairs of rows and dS in rows for the three
 * products (backward). The exponentials are ptdp__expf's bit for bit
 * (ptdp__exp16, the fused multiply-subtract gcc makes of the rows' scale *
 * s - max), so the backward's P and dS are attention.c's; the forward's
 * row sums add the same terms in another order. */

/* 16 values of a row with n left, zeros past them */
BF16_TARGET static inline __m512 load_left(const float *p, int64_t n) {
    return n >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(lanes(n), p);
}

/* 16 bf16 values (the low half of v) at dst, of which n are kept */
BF16_TARGET static inline void store_bf16(uint16_t *dst, __m256i v, int64_t n) {
    if (n >= 16)
        _mm256_storeu_si256((__m256i *)(void *)dst, v);
    else
        _mm512_mask_storeu_epi16(dst, ptdp__lanes32(n), _mm512_castsi256_si512(v));
}

/* The forward tile's rows (ptdp__attn_fwd_rows' online softmax without
 * dropout) from S = q k^T in St [rb, cb]: P rounded to bf16 into Pa [rb][c2]
 * pairs along the keys (zeros past the keys a row sees, and in the pad of
 * an odd cb), the running max m and sum l updated, the context rows so far
 * rescaled. */
BF16_TARGET static void fwd_rows_packed(const float *St, int64_t r0, int64_t rb, int64_t c0,
                                        int64_t cb, float scale, float *m, float *l, float *C,
                                        int64_t ldc, int64_t hd, uint32_t *Pa, int64_t c2) {
    const int first = c0 == 0;
    const __m512 vs = _mm512_set1_ps(scale);
    for (int64_t i = 0; i < rb; i++) {
        const int64_t n = ptdp__attn_row_keys(r0 + i, c0, cb);
        const float *pr = St + i * cb;
        __m512 mx = _mm512_set1_ps(-INFINITY);
        for (int64_t j = 0; j < n; j += 16)
            mx = _mm512_mask_max_ps(mx, lanes(n - j), mx, load_left(pr + j, n - j));
        const float mxs = _mm512_reduce_max_ps(mx) * scale;
        const float mnew = first || mxs > m[i] ? mxs : m[i];
        const __m512 vm = _mm512_set1_ps(mnew);
        __m512 acc = _mm512_setzero_ps();
        uint16_t *dst = (uint16_t *)(Pa + i * c2);
        for (int64_t j = 0; j < 2 * c2; j += 16) {
            const __mmask16 k = lanes(n - j);
            if (!k) { /* keys this row does not see: zeros, no exponentials */
                store_bf16(dst + j, _mm256_setzero_si256(), 2 * c2 - j);
                continue;
            }
            const __m512 e = _mm512_maskz_mov_ps(
                k, ptdp__exp16(_mm512_fmsub_ps(vs, load_left(pr + j, n - j), vm)));
            acc = _mm512_add_ps(acc, e);
            store_bf16(dst + j, (__m256i)_mm512_cvtneps_pbh(e), 2 * c2 - j);
        }
        const float sum = _mm512_reduce_add_ps(acc);
        const float alpha = first ? 0.0f : ptdp__expf(m[i] - mnew);
        l[i] = first ? sum : l[i] * alpha + sum;
        m[i] = mnew;
        if (!first) {
            float *cr = C + (r0 + i) * ldc;
            const __m512 va = _mm512_set1_ps(alpha);
            for (int64_t e = 0; e < hd; e += 16) {
                const __mmask16 k = lanes(hd - e);
                _mm512_mask_storeu_ps(cr + e, k,
                                      _mm512_mul_ps(_mm512_maskz_loadu_ps(k, cr + e), va));
            }
        }
    }
}

/* The backward tile's rows without dropout (ptdp__attn_bwd_rows): from
 * S = q k^T in Pt and dP = dctx v^T in dPt [rb, cb], P = exp(scale S - L)
 * and dS = scale P (dP - D) on the keys each row sees (zeros after), packed
 * as Tp [r2][cb] pairs of P's rows (dV += P^T dctx), Ts [r2][cb] pairs of
 * dS's rows (dK += dS^T q) and Tr [rb][c2] dS's rows in pairs along the
 * keys (dQ += dS k; the pad of an odd cb written as a zero); a missing
 * last row of a pair is zeros. */
BF16_TARGET static void bwd_rows_packed(const float *Pt, const float *dPt, int64_t r0, int64_t rb,
                                        int64_t c0, int64_t cb, float scale, const float *L,
                                        const float *D, uint32_t *Tp, uint32_t *Ts, uint32_t *Tr,
                                        int64_t c2) {
    const __m512 vs = _mm512_set1_ps(scale);
    for (int64_t i = 0; i < rb; i += 2) {
        const int two = i + 1 < rb;
        const int64_t n0 = ptdp__attn_row_keys(r0 + i, c0, cb),
                      n1 = two ? ptdp__attn_row_keys(r0 + i + 1, c0, cb) : 0;
        const __m512 l0 = _mm512_set1_ps(L[r0 + i]),
                     l1 = _mm512_set1_ps(two ? L[r0 + i + 1] : 0.0f);
        const __m512 d0 = _mm512_set1_ps(D[r0 + i]),
                     d1 = _mm512_set1_ps(two ? D[r0 + i + 1] : 0.0f);
        const float *s0 = Pt + i * cb, *s1 = s0 + cb, *g0 = dPt + i * cb, *g1 = g0 + cb;
        uint16_t *q0 = (uint16_t *)(Tr + i * c2), *q1 = (uint16_t *)(Tr + (i + 1) * c2);
        for (int64_t j = 0; j < cb; j += 16) {
            const __mmask16 k0 = lanes(n0 - j), k1 = lanes(n1 - j), km = lanes(cb - j);
            __m256i hp0 = _mm256_setzero_si256(), hp1 = hp0, hs0 = hp0, hs1 = hp0;
            if (k0 || k1) { /* else keys neither row sees: zeros, no exponentials */
                const __m512 p0 = _mm512_maskz_mov_ps(
                    k0, ptdp__exp16(_mm512_fmsub_ps(vs, load_left(s0 + j, n0 - j), l0)));
                const __m512 p1 =
                    two ? _mm512_maskz_mov_ps(
                              k1, ptdp__exp16(_mm512_fmsub_ps(vs, load_left(s1 + j, n1 - j), l1)))
                        : _mm512_setzero_ps();
                const __m512 ds0 = _mm512_maskz_mul_ps(
                    k0, _mm512_mul_ps(vs, p0), _mm512_sub_ps(load_left(g0 + j, n0 - j), d0));
                const __m512 ds1 =
                    two ? _mm512_maskz_mul_ps(k1, _mm512_mul_ps(vs, p1),
                                              _mm512_sub_ps(load_left(g1 + j, n1 - j), d1))
                        : _mm512_setzero_ps();
                hp0 = (__m256i)_mm512_cvtneps_pbh(p0), hp1 = (__m256i)_mm512_cvtneps_pbh(p1);
                hs0 = (__m256i)_mm512_cvtneps_pbh(ds0), hs1 = (__m256i)_mm512_cvtneps_pbh(ds1);
            }
            _mm512_mask_storeu_epi32(Tp + i / 2 * cb + j, km, ptdp__bf16_join16(hp0, hp1));
            _mm512_mask_storeu_epi32(Ts + i / 2 * cb + j, km, ptdp__bf16_join16(hs0, hs1));
            store_bf16(q0 + j, hs0, 2 * c2 - j);
            if (two) store_bf16(q1 + j, hs1, 2 * c2 - j);
        }
    }
}

BF16_TARGET int ptdp__attention_fwd_bf16(ptdp_backend *be, const float *qkv, float *ctx, float *lse,
                                         float *scratch, int64_t s, int64_t b, int64_t al,
                                         int64_t gl, int64_t hd, ptdp_dropout drop) {
    ptdp__attn_packs *pk = ptdp__cpu_of(be)->packs;
    if (!packs_ready(ptdp__cpu_of(be), pk, pack_need(s, hd, 2, 1))) return 0;
    PTDP_ASSERT(gl > 0 && al % gl == 0);
    const int64_t ld3 = ptdp__attn_ld3(b, al, gl, hd), ldc = b * al * hd, B = ptdp__attn_block(s);
    const int64_t h2 = (hd + 1) / 2;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t task = 0; task < b * al; task++) {
        const ptdp__attn_task t = ptdp__attn_task_of(scratch, drop, task, al, gl, hd, s, qkv, NULL);
        float *St = t.tile[0], *m = t.m, *l = t.l, *C = ctx + t.co;
        uint32_t *Qa = pk->t[omp_get_thread_num()].p; /* [s][h2]: q rows, pairs along hd */
        uint32_t *Kt = Qa + s * h2;                   /* [h2][s]: k^T */
        uint32_t *Vb = Kt + s * h2;                   /* [s/2][hd]: v, pairs of rows */
        uint32_t *Pa = Vb + (s + 1) / 2 * hd;         /* a tile's P, pairs along keys */
        pack_rows(Qa, t.q, ld3, s, hd);
        pack_kt(Kt, t.k, ld3, s, hd);
        pack_pairs(Vb, t.v, ld3, s, hd);
        for (int64_t r0 = 0; r0 < s; r0 += B) {
            const int64_t rb = r0 + B < s ? B : s - r0;
            for (int64_t c0 = 0; c0 < r0 + rb; c0 += B) {
                const int64_t cb = c0 + B < s ? B : s - c0, c2 = (cb + 1) / 2;
                const int first = c0 == 0;
                const int64_t d = r0 - c0;
                mm(rb, cb, h2, Qa + r0 * h2, h2, 1, Kt + c0, s, 0.0f, St, cb, OUT_MASKED, d);
                if (drop.p > 0.0f) {
                    ptdp__attn_fwd_rows(St, r0, rb, c0, cb, scale, m, l, C, ldc, hd, drop, t.blk,
                                        s);
                    pack_rows(Pa, St, cb, rb, cb);
                } else {
                    fwd_rows_packed(St, r0, rb, c0, cb, scale, m, l, C, ldc, hd, Pa, c2);
                }
                mm(rb, hd, c2, Pa, c2, 1, Vb + c0 / 2 * hd, hd, first ? 0.0f : 1.0f, C + r0 * ldc,
                   ldc, A_TAIL, d);
            }
            ptdp__attn_fwd_finish(C, ldc, hd, r0, rb, m, l, lse + task * s);
        }
    }
    return 1;
}

BF16_TARGET int ptdp__attention_bwd_bf16(ptdp_backend *be, const float *dctx, const float *qkv,
                                         const float *ctx, const float *lse, float *dqkv,
                                         float *scratch, int64_t s, int64_t b, int64_t al,
                                         int64_t gl, int64_t hd, ptdp_dropout drop) {
    ptdp__attn_packs *pk = ptdp__cpu_of(be)->packs;
    if (!packs_ready(ptdp__cpu_of(be), pk, pack_need(s, hd, 4, 3))) return 0;
    PTDP_ASSERT(gl > 0 && al % gl == 0);
    const int64_t ld3 = ptdp__attn_ld3(b, al, gl, hd), ldc = b * al * hd, B = ptdp__attn_block(s);
    const int64_t h2 = (hd + 1) / 2, s2 = (s + 1) / 2, hpg = al / gl;
    const float scale = 1.0f / sqrtf((float)hd);
    const int dropping = drop.p > 0.0f;
    /* a task per (sequence, group), its query heads in turn (ptdp__attention_bwd's order) */
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t grp = 0; grp < b * gl; grp++)
        for (int64_t jj = 0; jj < hpg; jj++) {
            const int64_t task = grp * hpg + jj; /* bi * al + j */
            const ptdp__attn_task t =
                ptdp__attn_task_of(scratch, drop, task, al, gl, hd, s, qkv, dqkv);
            float *Pt = t.tile[0], *dPt = t.tile[1], *Pdt = t.tile[2];
            const float *dC = dctx + t.co, *L = lse + task * s;
            uint32_t *Qa = pk->t[omp_get_thread_num()].p; /* [s][h2] layouts: q, dctx */
            uint32_t *dCa = Qa + s * h2;
            uint32_t *Kt = dCa + s * h2; /* [h2][s]: k^T, v^T */
            uint32_t *Vt = Kt + s * h2;
            uint32_t *Qb = Vt + s * h2; /* [s2][hd]: q, k, dctx as pairs of rows */
            uint32_t *Kb = Qb + s2 * hd;
            uint32_t *dCb = Kb + s2 * hd;
            uint32_t *Ta = dCb + s2 * hd; /* a tile's P^T, dS^T or dS */
            pack_rows(Qa, t.q, ld3, s, hd);
            pack_rows(dCa, dC, ldc, s, hd);
            if (jj == 0) { /* the group's k and v, once */
                pack_kt(Kt, t.k, ld3, s, hd);
                pack_kt(Vt, t.v, ld3, s, hd);
                pack_pairs(Kb, t.k, ld3, s, hd);
            }
            pack_pairs(Qb, t.q, ld3, s, hd);
            pack_pairs(dCb, dC, ldc, s, hd);
            ptdp__attn_row_dots(t.D, dC, ctx + t.co, s, hd, ldc);
            for (int64_t c0 = 0; c0 < s; c0 += B) {
                const int64_t cb = c0 + B < s ? B : s - c0, c2 = (cb + 1) / 2;
                for (int64_t r0 = c0; r0 < s; r0 += B) {
                    const int64_t rb = r0 + B < s ? B : s - r0, r2 = (rb + 1) / 2;
                    const float kv_beta = r0 == c0 && jj == 0 ? 0.0f : 1.0f,
                                q_beta = c0 == 0 ? 0.0f : 1.0f;
                    const int64_t d = r0 - c0;
                    mm(rb, cb, h2, Qa + r0 * h2, h2, 1, Kt + c0, s, 0.0f, Pt, cb, OUT_MASKED, d);
                    mm(rb, cb, h2, dCa + r0 * h2, h2, 1, Vt + c0, s, 0.0f, dPt, cb, OUT_MASKED, d);
                    /* P^T, dS^T as pairs of rows; dS in rows */
                    uint32_t *Tp = Ta, *Ts = Tp + r2 * cb, *Tr = Ts + r2 * cb;
                    if (dropping) {
                        ptdp__attn_bwd_rows(Pt, dPt, Pdt, r0, rb, c0, cb, scale, L, t.D, drop,
                                            t.blk, s);
                        pack_pairs(Tp, Pdt, cb, rb, cb);
                        pack_pairs(Ts, dPt, cb, rb, cb);
                        pack_rows(Tr, dPt, cb, rb, cb);
                    } else {
                        bwd_rows_packed(Pt, dPt, r0, rb, c0, cb, scale, L, t.D, Tp, Ts, Tr, c2);
                    }
                    /* dV += P^T dctx, dK += dS^T q, dQ += dS k */
                    mm(cb, hd, r2, Tp, 1, cb, dCb + r0 / 2 * hd, hd, kv_beta, t.dv + c0 * ld3, ld3,
                       A_HEAD, d);
                    mm(cb, hd, r2, Ts, 1, cb, Qb + r0 / 2 * hd, hd, kv_beta, t.dk + c0 * ld3, ld3,
                       A_HEAD, d);
                    mm(rb, hd, c2, Tr, c2, 1, Kb + c0 / 2 * hd, hd, q_beta, t.dq + r0 * ld3, ld3,
                       A_TAIL, d);
                }
            }
        }
    return 1;
}

int ptdp__gemm_tile_bf16_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512bf16");
}
#else
ptdp__attn_packs *ptdp__attn_packs_new(void) { return NULL; }
void ptdp__attn_packs_free(ptdp__attn_packs *pk) { (void)pk; }
size_t ptdp__attn_packs_bytes(int64_t s, int64_t hd, int threads) {
    (void)s, (void)hd, (void)threads;
    return 0;
}
void ptdp__attn_packs_set(ptdp__attn_packs *pk, void *block, int64_t s, int64_t hd, int threads) {
    (void)pk, (void)block, (void)s, (void)hd, (void)threads;
}
void ptdp__gemm_tile_bf16(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                          float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                          float beta, float *C, int64_t ldc) {
    (void)be, (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda,
        (void)B;
    (void)ldb, (void)beta, (void)C, (void)ldc;
    PTDP_ASSERT_MSG(0, "bf16 tile GEMM without AVX512_BF16");
}
int ptdp__gemm_tile_bf16_available(void) { return 0; }
int ptdp__attention_fwd_bf16(ptdp_backend *be, const float *qkv, float *ctx, float *lse,
                             float *scratch, int64_t s, int64_t b, int64_t al, int64_t gl,
                             int64_t hd, ptdp_dropout drop) {
    (void)be, (void)qkv, (void)ctx, (void)lse, (void)scratch, (void)s, (void)b, (void)al, (void)hd;
    (void)gl, (void)drop;
    return 0;
}
int ptdp__attention_bwd_bf16(ptdp_backend *be, const float *dctx, const float *qkv,
                             const float *ctx, const float *lse, float *dqkv, float *scratch,
                             int64_t s, int64_t b, int64_t al, int64_t gl, int64_t hd,
                             ptdp_dropout drop) {
    (void)be, (void)dctx, (void)qkv, (void)ctx, (void)lse, (void)dqkv, (void)scratch, (void)s,
        (void)b;
    (void)al, (void)gl, (void)hd, (void)drop;
    return 0;
}
#endif
