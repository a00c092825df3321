/* attention.c - causal self-attention core, flash-attention style: per
 * (sequence, head) the [s, s] score matrix is visited in B x B tiles (query
 * rows x keys) and never stored. The forward keeps a running row max and sum
 * (online softmax), accumulates the context in place and saves only each
 * row's logsumexp; the backward recomputes every tile's probabilities from q,
 * k and that logsumexp (flash-attention-2's key-block-outer order, with
 * D_i = rowsum(dctx_i * ctx_i)). Tiles above the diagonal are skipped. The
 * per-tile products are GEMMs through the backend's library, single-threaded
 * inside the OpenMP loop over (sequence, head) pairs. Attention dropout is
 * drawn from the counter-based RNG with the element numbering of kernels.h,
 * so backward regenerates the mask instead of storing it. Grouped-query
 * attention is the same loops over a QKV layout of groups (a query head
 * reads its group's k and v); multi-head attention is the case of one head
 * per group. Not here: splitting one (sequence, head) over threads (a run
 * with fewer pairs than threads leaves cores idle; the backward's tasks are
 * (sequence, group) pairs, fewer still), reduced precision. */
#include <math.h>
#include <omp.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/fastmath.h"

/* Tile edge B (query rows and keys alike). Measured on this machine's two
 * cores (fwd + bwd of s = 256, 512, 1024, hd = 64): 128 matched the
 * previous probs-storing kernel's time, 64 was 20-40% slower (more, smaller
 * GEMM calls and more online-softmax rescaling), 256 slower in the backward
 * (more work wasted in the diagonal tiles). */
int64_t ptdp__attn_block(int64_t s) { return s < 128 ? s : 128; }

/* Per thread: three B x B tiles (scores/probabilities, dP, dropped P), two
 * [B] row statistics and D [s], rounded to 16 floats (64 bytes) so threads
 * never share a cache line. */
int64_t ptdp__attn_per_thread(int64_t s) {
    const int64_t B = ptdp__attn_block(s);
    return (3 * B * B + 2 * B + s + 15) / 16 * 16;
}

int64_t ptdp_attention_scratch_floats(int64_t s, int nthreads) {
    return ptdp__attn_per_thread(s) * (int64_t)nthreads;
}

int64_t ptdp_attention_saved_floats_cpu(int64_t s, int64_t b, int64_t al) { return b * al * s; }

/* the dropout block of (sequence bi, local head j): global head numbering (kernels.h) */
int64_t ptdp__attn_drop_block(ptdp_dropout drop, int64_t task, int64_t al) {
    const int64_t bi = task / al, j = task % al;
    return drop.b > 0 ? (drop.sample0 + bi) * (drop.heads ? drop.heads : al) + drop.head0 + j
                      : task;
}

ptdp__attn_task ptdp__attn_task_of(float *scratch, ptdp_dropout drop, int64_t task, int64_t al,
                                   int64_t gl, int64_t hd, int64_t s, const float *qkv,
                                   float *dqkv) {
    /* query head j is head j % hpg of group j / hpg: [hpg q heads, k, v] */
    const int64_t bi = task / al, j = task % al, hpg = al / gl;
    const int64_t grp = (bi * gl + j / hpg) * (hpg + 2) * hd, q = grp + (j % hpg) * hd,
                  k = grp + hpg * hd;
    const int64_t B = ptdp__attn_block(s);
    ptdp__attn_task t = {.blk = ptdp__attn_drop_block(drop, task, al), .co = (bi * al + j) * hd};
    t.q = qkv + q, t.k = qkv + k, t.v = t.k + hd;
    if (dqkv) t.dq = dqkv + q, t.dk = dqkv + k, t.dv = t.dk + hd;
    float *scr = scratch + ptdp__attn_per_thread(s) * omp_get_thread_num();
    for (int i = 0; i < 3; i++) t.tile[i] = scr + i * B * B;
    t.m = scr + 3 * B * B, t.l = t.m + B, t.D = t.l + B;
    return t;
}

/* One forward tile row: pr[0..n) holds raw scores q.k; turns it into
 * exp(scale * q.k - m_new) (zeros in [n, cb)), updates the running max m
 * (scaled units) and sum l, returns the factor the row's context so far must
 * be multiplied by. Out of line for the same reason as the old softmax row:
 * inlined into the tile loops gcc left the exp loop scalar. */
PTDP__ROW_CLONES static float online_row(float *pr, int64_t n, int64_t cb, float scale, float *m,
                                         float *l, int first) {
    float mx = pr[0];
#pragma omp simd reduction(max : mx)
    for (int64_t j = 1; j < n; j++) mx = pr[j] > mx ? pr[j] : mx;
    mx *= scale;
    const float mnew = first || mx > *m ? mx : *m;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; j++) {
        float e = ptdp__expf(scale * pr[j] - mnew);
        pr[j] = e;
        sum += e;
    }
    for (int64_t j = n; j < cb; j++) pr[j] = 0.0f;
    const float alpha = first ? 0.0f : ptdp__expf(*m - mnew);
    *l = first ? sum : *l * alpha + sum;
    *m = mnew;
    return alpha;
}

/* P = exp(scale * S - lse) on the first n entries of a tile row, zeros after. */
PTDP__ROW_CLONES static void recompute_row(float *pr, int64_t n, int64_t cb, float scale,
                                           float lse) {
#pragma omp simd
    for (int64_t j = 0; j < n; j++) pr[j] = ptdp__expf(scale * pr[j] - lse);
    for (int64_t j = n; j < cb; j++) pr[j] = 0.0f;
}

/* dS = scale * P * (dP - D) in place over dP on the first n entries, zeros after. */
PTDP__ROW_CLONES static void ds_row(const float *pr, float *dr, int64_t n, int64_t cb, float scale,
                                    float D) {
#pragma omp simd
    for (int64_t j = 0; j < n; j++) dr[j] = scale * pr[j] * (dr[j] - D);
    for (int64_t j = n; j < cb; j++) dr[j] = 0.0f;
}

/* A forward tile's rows once S = q k^T [rb, cb] is in St (query rows r0..,
 * keys c0..): St becomes P (online softmax over the keys each row sees, then
 * dropout; the running max m and sum l updated), and the context rows so far
 * rescaled to the new max. */
void ptdp__attn_fwd_rows(float *St, int64_t r0, int64_t rb, int64_t c0, int64_t cb, float scale,
                         float *m, float *l, float *C, int64_t ldc, int64_t hd, ptdp_dropout drop,
                         int64_t blk, int64_t s) {
    const int first = c0 == 0;
    for (int64_t i = 0; i < rb; i++) {
        const int64_t gi = r0 + i, n = ptdp__attn_row_keys(gi, c0, cb);
        float *pr = St + i * cb;
        const float alpha = online_row(pr, n, cb, scale, &m[i], &l[i], first);
        /* the row sum above is of the undropped probabilities */
        if (drop.p > 0.0f)
            ptdp__dropout_apply(pr, pr, n, drop, (uint64_t)(blk * s * s + gi * s + c0));
        if (!first) {
            float *cr = C + gi * ldc;
#pragma omp simd
            for (int64_t e = 0; e < hd; e++) cr[e] *= alpha;
        }
    }
}

/* A query block's end: context rows divided by their sums, logsumexp saved */
void ptdp__attn_fwd_finish(float *C, int64_t ldc, int64_t hd, int64_t r0, int64_t rb,
                           const float *m, const float *l, float *L) {
    for (int64_t i = 0; i < rb; i++) {
        float *cr = C + (r0 + i) * ldc;
        const float inv = 1.0f / l[i];
#pragma omp simd
        for (int64_t e = 0; e < hd; e++) cr[e] *= inv;
        L[r0 + i] = m[i] + logf(l[i]);
    }
}

/* A backward tile's rows once P = q k^T is in Pt and dP = dctx v^T in dPt:
 * P recomputed from the logsumexp L, with dropout P dropped into Pdt and dP
 * masked in place, then dP turned into dS (D = rowsum(dctx * ctx)). */
void ptdp__attn_bwd_rows(float *Pt, float *dPt, float *Pdt, int64_t r0, int64_t rb, int64_t c0,
                         int64_t cb, float scale, const float *L, const float *D, ptdp_dropout drop,
                         int64_t blk, int64_t s) {
    const int dropping = drop.p > 0.0f;
    for (int64_t i = 0; i < rb; i++) {
        const int64_t gi = r0 + i, n = ptdp__attn_row_keys(gi, c0, cb);
        const uint64_t base = (uint64_t)(blk * s * s + gi * s + c0);
        float *pr = Pt + i * cb, *dr = dPt + i * cb;
        recompute_row(pr, n, cb, scale, L[gi]);
        if (dropping) {
            float *qr = Pdt + i * cb;
            ptdp__dropout_apply(pr, qr, n, drop, base);
            for (int64_t k = n; k < cb; k++) qr[k] = 0.0f;
            ptdp__dropout_apply(dr, dr, n, drop, base);
        }
        ds_row(pr, dr, n, cb, scale, D[gi]);
    }
}

/* D_i = sum_k P_ik dP_ik = dctx_i . ctx_i (dropout included: both sides
 * carry the same mask), rows of ld */
void ptdp__attn_row_dots(float *D, const float *dC, const float *C, int64_t s, int64_t hd,
                         int64_t ld) {
    for (int64_t i = 0; i < s; i++) {
        const float *dr = dC + i * ld, *cr = C + i * ld;
        float d = 0.0f;
#pragma omp simd reduction(+ : d)
        for (int64_t e = 0; e < hd; e++) d += dr[e] * cr[e];
        D[i] = d;
    }
}

/* A tile on the diagonal (r0 == c0: row i sees keys 0..i) is split at H
 * rows: rows 0..H see only keys 0..H, so their products leave out the keys
 * from H on, a quarter of the tile. Those entries of P and dS are exact
 * zeros (the row functions write them so): their terms add nothing to the
 * fp32 sums, and leaving them out keeps the bits wherever the GEMM sums each
 * output over K in order (the tile kernels here do; so did oneDNN's sgemm in
 * bench_train's losses; the tests hold the results to the reference, not to
 * the unsplit bits). H = 0 (off the diagonal, or a tile too small to be
 * worth two calls): the whole tile in one product. */
static int64_t diag_split(int64_t rb) { return rb >= 32 ? rb / 2 / 16 * 16 : 0; }

/* S [rb, cb] = X Y^T (queries X, keys Y); split: rows 0..H get columns
 * 0..H only (their columns from H on are never read) */
static void scores(ptdp_backend *be, ptdp__gemm_fn gemm, int64_t H, int64_t rb, int64_t cb,
                   int64_t hd, const float *X, int64_t ldx, const float *Y, int64_t ldy, float *S) {
    if (H) gemm(be, 0, 1, H, H, hd, 1.0f, X, ldx, Y, ldy, 0.0f, S, cb);
    gemm(be, 0, 1, rb - H, cb, hd, 1.0f, X + H * ldx, ldx, Y, ldy, 0.0f, S + H * cb, cb);
}

/* O [rb, hd] (beta 0: =, 1: +=) T Z, T [rb, cb] = P or dS and Z the keys'
 * rows (the context P V, dQ = dS K); split: rows 0..H from keys 0..H */
static void per_query(ptdp_backend *be, ptdp__gemm_fn gemm, int64_t H, int64_t rb, int64_t cb,
                      int64_t hd, const float *T, const float *Z, int64_t ldz, float beta, float *O,
                      int64_t ldo) {
    if (H) gemm(be, 0, 0, H, hd, H, 1.0f, T, cb, Z, ldz, beta, O, ldo);
    gemm(be, 0, 0, rb - H, hd, cb, 1.0f, T + H * cb, cb, Z, ldz, beta, O + H * ldo, ldo);
}

/* G [cb, hd] (beta 0: =, 1: +=) T^T Z, Z the query rows (dV = P^T dC,
 * dK = dS^T Q); split: keys 0..H from every query row, keys H.. from the
 * rows H.. that see them */
static void per_key(ptdp_backend *be, ptdp__gemm_fn gemm, int64_t H, int64_t rb, int64_t cb,
                    int64_t hd, const float *T, const float *Z, int64_t ldz, float beta, float *G,
                    int64_t ldg) {
    if (H) gemm(be, 1, 0, H, hd, rb, 1.0f, T, cb, Z, ldz, beta, G, ldg);
    gemm(be, 1, 0, cb - H, hd, rb - H, 1.0f, T + H * cb + H, cb, Z + H * ldz, ldz, beta,
         G + H * ldg, ldg);
}

void ptdp__attention_fwd(ptdp_backend *be, ptdp__gemm_fn gemm, const float *qkv, float *ctx,
                         float *lse, float *scratch, int64_t s, int64_t b, int64_t al, int64_t gl,
                         int64_t hd, ptdp_dropout drop) {
    PTDP_ASSERT(gl > 0 && al % gl == 0);
    const int64_t ld3 = ptdp__attn_ld3(b, al, gl, hd), ldc = b * al * hd, B = ptdp__attn_block(s);
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t task = 0; task < b * al; task++) {
        const ptdp__attn_task t = ptdp__attn_task_of(scratch, drop, task, al, gl, hd, s, qkv, NULL);
        const int64_t blk = t.blk;
        float *St = t.tile[0], *m = t.m, *l = t.l, *C = ctx + t.co, *L = lse + task * s;
        const float *Q = t.q, *K = t.k, *V = t.v;
        for (int64_t r0 = 0; r0 < s; r0 += B) {
            const int64_t rb = r0 + B < s ? B : s - r0;
            /* key blocks up to and including the diagonal one */
            for (int64_t c0 = 0; c0 < r0 + rb; c0 += B) {
                const int64_t cb = c0 + B < s ? B : s - c0;
                const int first = c0 == 0;
                const int64_t H = c0 == r0 ? diag_split(rb) : 0;
                scores(be, gemm, H, rb, cb, hd, Q + r0 * ld3, ld3, K + c0 * ld3, ld3, St);
                ptdp__attn_fwd_rows(St, r0, rb, c0, cb, scale, m, l, C, ldc, hd, drop, blk, s);
                per_query(be, gemm, H, rb, cb, hd, St, V + c0 * ld3, ld3, first ? 0.0f : 1.0f,
                          C + r0 * ldc, ldc);
            }
            ptdp__attn_fwd_finish(C, ldc, hd, r0, rb, m, l, L);
        }
    }
}

void ptdp__attention_bwd(ptdp_backend *be, ptdp__gemm_fn gemm, const float *dctx, const float *qkv,
                         const float *ctx, const float *lse, float *dqkv, float *scratch, int64_t s,
                         int64_t b, int64_t al, int64_t gl, int64_t hd, ptdp_dropout drop) {
    PTDP_ASSERT(gl > 0 && al % gl == 0);
    const int64_t ld3 = ptdp__attn_ld3(b, al, gl, hd), ldc = b * al * hd, B = ptdp__attn_block(s);
    const int64_t hpg = al / gl;
    const float scale = 1.0f / sqrtf((float)hd);
    const int dropping = drop.p > 0.0f;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t grp = 0; grp < b * gl; grp++)
        for (int64_t jj = 0; jj < hpg; jj++) {   /* the group's query heads, in turn */
            const int64_t task = grp * hpg + jj; /* bi * al + j */
            const ptdp__attn_task t =
                ptdp__attn_task_of(scratch, drop, task, al, gl, hd, s, qkv, dqkv);
            float *Pt = t.tile[0], *dPt = t.tile[1], *Pdt = t.tile[2];
            const float *dC = dctx + t.co, *L = lse + task * s;
            ptdp__attn_row_dots(t.D, dC, ctx + t.co, s, hd, ldc);
            /* key block outer: dK, dV of the block accumulate over the query
             * tiles at and below the diagonal (and the group's earlier heads);
             * dQ of a tile over key blocks */
            for (int64_t c0 = 0; c0 < s; c0 += B) {
                const int64_t cb = c0 + B < s ? B : s - c0;
                for (int64_t r0 = c0; r0 < s; r0 += B) {
                    const int64_t rb = r0 + B < s ? B : s - r0;
                    const float kv_beta = r0 == c0 && jj == 0 ? 0.0f : 1.0f,
                                q_beta = c0 == 0 ? 0.0f : 1.0f;
                    const int64_t H = r0 == c0 ? diag_split(rb) : 0;
                    scores(be, gemm, H, rb, cb, hd, t.q + r0 * ld3, ld3, t.k + c0 * ld3, ld3, Pt);
                    scores(be, gemm, H, rb, cb, hd, dC + r0 * ldc, ldc, t.v + c0 * ld3, ld3, dPt);
                    ptdp__attn_bwd_rows(Pt, dPt, Pdt, r0, rb, c0, cb, scale, L, t.D, drop, t.blk,
                                        s);
                    per_key(be, gemm, H, rb, cb, hd, dropping ? Pdt : Pt, dC + r0 * ldc, ldc,
                            kv_beta, t.dv + c0 * ld3, ld3);
                    per_key(be, gemm, H, rb, cb, hd, dPt, t.q + r0 * ld3, ld3, kv_beta,
                            t.dk + c0 * ld3, ld3);
                    per_query(be, gemm, H, rb, cb, hd, dPt, t.k + c0 * ld3, ld3, q_beta,
                              t.dq + r0 * ld3, ld3);
                }
            }
        }
}
