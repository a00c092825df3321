/* test_bf16_native.c - the native bf16 backend's own pieces, where the CPU has
 * them (skipped, exit 77, elsewhere): attention's bf16 tile products
 * (src/kernels/cpu/half/attn_bf16.c, AVX512_BF16) and the bf16 copies of the weights
 * that its oneDNN GEMM keeps while the weights stay as they are
 * (src/kernels/cpu/half/gemm_bf16.c).
 *
 * The tile GEMM rounds both operands to bf16 and sums the exact products in
 * fp32: it must equal an fp32 GEMM of the bf16-rounded operands up to the
 * order of the sums. Each order's error is at most (K + 1) 2^-24 times the
 * sum of |terms| (K products and beta C), so the two differ by at most twice
 * that. The attention forward and backward through the tile GEMM are checked
 * the same way against the fp32 attention whose tile GEMM rounds its
 * operands first (the same semantics: probabilities and dS rounded to bf16),
 * and the bf16 backend's attention must be exactly that, rounded to bf16 (it
 * converts each head's q, k, v and dctx once instead of at every tile:
 * ptdp__attention_fwd_bf16 and _bwd_bf16, which must keep the tile GEMM's
 * order of sums), with key/value groups as without.
 *
 * Weight copies: a GEMM on registered weights (either orientation, at an
 * offset inside the registered range) equals the same GEMM on unregistered
 * ones up to summation order (the same bound); it reuses its copy until the
 * instance writes into the range (any of its writing ops) or a write is
 * announced, and then follows the new values (kernels.h's weights contract;
 * PTDP_CHECK_WEIGHT_COPIES=1, set for every other test, turns a stale copy
 * into an error).
 *
 * The copies are written by ptdp's own packer (src/kernels/cpu/half/bf16_blocked.c)
 * where the matmul's layout is one it writes: for the model's shapes and
 * odd ones (tails of 16 lanes, of 32-value steps of K, K and N not whole
 * blocks, a row stride longer than the row), both orientations, its bytes
 * must equal oneDNN's reorder of the same weights, padding included. The
 * weight gradients' packs (A^T into plain rows, B blocked) put every value
 * where it belongs, and those GEMMs keep the summation-order bound. The
 * loss head's one-op backward (head_bwd) is held to the composition it
 * replaces (test_head_bwd). */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/half/half.h"
#include "kernels/kernels.h"
#include "backend_util.h"
#include "test.h"

static float frand(uint64_t *st) { /* deterministic normal-ish values */
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    const double u = (double)(*st >> 11) / 9007199254740992.0;
    return (float)(2.0 * (u - 0.5) * (1.0 + 3.0 * u * u));
}
static float *filled(int64_t n, uint64_t seed) {
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = frand(&seed);
    return x;
}

/* the reference: round copies of op(A) and op(B) to bf16, then the fp32 GEMM */
#define RMAX (320 * 320)
static _Thread_local float ra[RMAX], rb[RMAX];
static void round_gemm(ptdp_backend *be, int ta, int tb, int64_t M, int64_t N, int64_t K,
                       float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float beta, float *C, int64_t ldc) {
    const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    PTDP_ASSERT(ar * ac <= RMAX && br * bc <= RMAX);
    for (int64_t i = 0; i < ar; i++) memcpy(ra + i * ac, A + i * lda, sizeof(float) * (size_t)ac);
    for (int64_t i = 0; i < br; i++) memcpy(rb + i * bc, B + i * ldb, sizeof(float) * (size_t)bc);
    ptdp_round_bf16_n(ra, ar * ac);
    ptdp_round_bf16_n(rb, br * bc);
    ptdp__gemm_onednn(be, ta, tb, M, N, K, alpha, ra, ac, rb, bc, beta, C, ldc);
}

static void check_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, float beta) {
    const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
    const int64_t na = (ta ? K : M) * lda, nb = (tb ? N : K) * ldb, nc = M * ldc;
    float *A = filled(na, 1 + M), *B = filled(nb, 2 + N), *C0 = filled(nc, 3 + K);
    float *C = malloc(sizeof(float) * (size_t)nc), *R = malloc(sizeof(float) * (size_t)nc);
    memcpy(C, C0, sizeof(float) * (size_t)nc);
    memcpy(R, C0, sizeof(float) * (size_t)nc);
    ptdp_backend *f = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32);
    ptdp__gemm_tile_bf16(f, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    round_gemm(f, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, R, ldc);
    float *Ar = malloc(sizeof(float) * (size_t)na), *Br = malloc(sizeof(float) * (size_t)nb);
    memcpy(Ar, A, sizeof(float) * (size_t)na);
    memcpy(Br, B, sizeof(float) * (size_t)nb);
    ptdp_round_bf16_n(Ar, na);
    ptdp_round_bf16_n(Br, nb);
    int64_t bad = 0, outside = 0;
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            double mag = fabs((double)beta * C0[i * ldc + j]);
            for (int64_t k = 0; k < K; k++)
                mag += fabs((double)alpha * (ta ? Ar[k * lda + i] : Ar[i * lda + k]) *
                            (tb ? Br[j * ldb + k] : Br[k * ldb + j]));
            const double bound = 2.0 * (double)(K + 1) * ldexp(1.0, -24) * mag;
            if (!(fabs((double)C[i * ldc + j] - R[i * ldc + j]) <= bound)) {
                if (!bad)
                    printf("  tile gemm ta=%d tb=%d %lldx%lldx%lld: [%lld,%lld] got %.9g want %.9g "
                           "(bound %.3g)\n",
                           ta, tb, (long long)M, (long long)N, (long long)K, (long long)i,
                           (long long)j, C[i * ldc + j], R[i * ldc + j], bound);
                bad++;
            }
        }
        for (int64_t j = N; j < ldc; j++) outside += C[i * ldc + j] != C0[i * ldc + j];
    }
    CHECK(bad == 0);
    CHECK(outside == 0);
    free(A), free(B), free(C0), free(C), free(R), free(Ar), free(Br);
}

/* The two attentions differ by the order of fp32 sums (|got - want| <=
 * rtol |want| + atol), except where that order decides how a probability or
 * dS rounds to bf16: a flip moves it by one bf16 ulp (at most 2^-7 of it),
 * which happens for the rare values within the sums' noise (~1e-7 relative)
 * of a rounding midpoint. So: at most 1% of the elements beyond the order
 * tolerance, and none beyond 2^-7 of the array's largest magnitude (the
 * terms' weights sum to at most 1 per row for ctx; a loose guard against
 * structural errors for the gradients). */
static void check_close(const char *what, const float *got, const float *want, int64_t n,
                        double rtol, double atol) {
    double wmax = 0.0;
    for (int64_t i = 0; i < n; i++) wmax = fmax(wmax, fabs((double)want[i]));
    int64_t flips = 0, bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - want[i]);
        if (d <= rtol * fabs((double)want[i]) + atol) continue;
        flips++;
        if (!(d <= ldexp(wmax, -7) + atol)) bad++, first = first < 0 ? i : first;
    }
    printf("  %s: %lld of %lld beyond the summation-order tolerance\n", what, (long long)flips,
           (long long)n);
    if (bad)
        printf("  %s: %lld differ by more than 2^-7 max|want|; first [%lld] got %.9g want %.9g\n",
               what, (long long)bad, (long long)first, got[first], want[first]);
    CHECK(bad == 0);
    CHECK(flips <= n / 100);
}

static int64_t differ(const float *a, const float *b, int64_t n, double tol) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += !(fabs((double)a[i] - b[i]) <= tol * (1.0 + fabs(b[i])));
    return k;
}

/* al query heads over gl key/value groups (gl = al: multi-head attention) */
static void check_attention(int64_t s, int64_t b, int64_t al, int64_t gl, int64_t hd, float p) {
    const int64_t nq = s * ptdp__attn_ld3(b, al, gl, hd), nc = s * b * al * hd, ns = b * al * s;
    float *qkv = filled(nq, 7), *dctx = filled(nc, 8);
    ptdp_round_bf16_n(qkv, nq); /* activations are on the bf16 grid */
    ptdp_round_bf16_n(dctx, nc);
    float *ctx[2], *lse[2], *dqkv[2];
    for (int v = 0; v < 2; v++) {
        ctx[v] = calloc((size_t)nc, sizeof(float));
        lse[v] = calloc((size_t)ns, sizeof(float));
        dqkv[v] = calloc((size_t)nq, sizeof(float));
    }
    float *scr =
        malloc(sizeof(float) * (size_t)ptdp_attention_scratch_floats(s, omp_get_max_threads()));
    ptdp_dropout drop = {0};
    if (p > 0.0f)
        drop = (ptdp_dropout){.p = p, .key = ptdp_rng_key_make(5, "attn-bf16"), .offset = 3};
    const ptdp__gemm_fn g[2] = {ptdp__gemm_tile_bf16, round_gemm};
    ptdp_backend *f = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32);
    for (int v = 0; v < 2; v++)
        ptdp__attention_fwd(f, g[v], qkv, ctx[v], lse[v], scr, s, b, al, gl, hd, drop);
    for (int v = 0; v < 2; v++) /* both from the reference's forward */
        ptdp__attention_bwd(f, g[v], dctx, qkv, ctx[1], lse[1], dqkv[v], scr, s, b, al, gl, hd,
                            drop);
    char w[112];
    snprintf(w, sizeof w, "s=%lld b=%lld al=%lld gl=%lld hd=%lld p=%g", (long long)s, (long long)b,
             (long long)al, (long long)gl, (long long)hd, p);
    printf("attention with bf16 tiles, %s\n", w);
    /* sums of up to max(s, hd) exact products of O(1) values in two orders */
    check_close("ctx", ctx[0], ctx[1], nc, 1e-5, 1e-5);
    check_close("logsumexp", lse[0], lse[1], ns, 1e-6, 1e-5);
    check_close("dqkv", dqkv[0], dqkv[1], nq, 1e-4, 1e-5);
    /* the backend: the same sums (operands packed once per head), outputs
     * rounded to bf16 */
    ptdp_backend *h = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_BF16);
    if (h->caps & PTDP_CAP_ATTENTION16) {
        float *c = malloc(sizeof(float) * (size_t)nc), *l = malloc(sizeof(float) * (size_t)ns),
              *d = malloc(sizeof(float) * (size_t)nq);
        if (gl == al) {
            h->attention_fwd(h, qkv, c, l, scr, s, b, al, hd, drop);
            h->attention_bwd(h, dctx, qkv, ctx[1], lse[1], d, scr, s, b, al, hd, drop);
        } else {
            h->attention_gqa_fwd(h, qkv, c, l, scr, s, b, al, gl, hd, drop);
            h->attention_gqa_bwd(h, dctx, qkv, ctx[1], lse[1], d, scr, s, b, al, gl, hd, drop);
        }
        ptdp_round_bf16_n(ctx[0], nc);
        ptdp_round_bf16_n(dqkv[0], nq);
        if (p > 0.0f) {
            CHECK(memcmp(c, ctx[0], sizeof(float) * (size_t)nc) == 0);
            CHECK(memcmp(l, lse[0], sizeof(float) * (size_t)ns) == 0);
        } else {
            /* without dropout the rows are made in 16 lanes as they are
             * packed: the same probabilities, their sum in another order
             * (s terms of at most 1: a few 2^-24 of the sum apart), so the
             * context before its rounding is a few 2^-24 apart, and after it
             * at most one bf16 step */
            CHECK(differ(l, lse[0], ns, 1e-6) == 0);
            int64_t far = 0, moved = 0;
            for (int64_t i = 0; i < nc; i++) {
                far += fabsf(c[i] - ctx[0][i]) >
                       0x1p-7f * fabsf(ctx[0][i]); /* a step: 2^-8 to 2^-7 of it */
                moved += c[i] != ctx[0][i];
            }
            if (moved)
                printf("  ctx: %lld of %lld a bf16 step apart\n", (long long)moved, (long long)nc);
            CHECK(far == 0);
            CHECK(moved <= nc / 100);
        }
        CHECK(memcmp(d, dqkv[0], sizeof(float) * (size_t)nq) == 0); /* P and dS are the same */
        free(c), free(l), free(d);
    }
    for (int v = 0; v < 2; v++) free(ctx[v]), free(lse[v]), free(dqkv[v]);
    free(qkv), free(dctx), free(scr);
}

/* C [M, N] = 0 + X W-op, as a GEMM with beta = 1 (no output rounding) */
static void wgemm(ptdp_backend *h, int tb, int64_t M, int64_t N, int64_t K, const float *X,
                  const float *W, float *C) {
    memset(C, 0, sizeof(float) * (size_t)(M * N));
    h->gemm(h, 0, tb, M, N, K, 1.0f, X, K, W, tb ? K : N, 1.0f, C, N);
}

/* C with W at an address no range covers (a fresh conversion at every call):
 * the reference for a GEMM on the registered W */
static void fresh_gemm(ptdp_backend *h, int tb, int64_t M, int64_t N, int64_t K, const float *X,
                       const float *W, float *C) {
    float *Wc = malloc(sizeof(float) * (size_t)(N * K));
    memcpy(Wc, W, sizeof(float) * (size_t)(N * K));
    wgemm(h, tb, M, N, K, X, Wc, C);
    free(Wc);
}

/* The weights contract (kernels.h): a copy is made per orientation of a
 * registered weight and reused until the instance writes into its range
 * (copy, zero, upload, quantize, adamw: no call from the writer) or a write
 * behind its back is announced (weights_written); forgetting the range
 * (n = 0) or registering an overlapping one drops the copies. */
static void test_weight_copies(void) {
    ptdp_backend *h = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_BF16);
    CHECK(h->caps & PTDP_CAP_WEIGHT_COPIES);
    const int64_t M = 40, N = 72, K = 96, np = 3 * N * K, nw = N * K;
    float *P = filled(np, 21), *X = filled(M * K, 22), *Y = filled(M * N, 23);
    ptdp_round_bf16_n(P, np);
    ptdp_round_bf16_n(X, M * K);
    ptdp_round_bf16_n(Y, M * N);
    float *W = P + N * K + 5; /* [N, K] inside the range, not at its start */
    float *ref = malloc(sizeof(float) * (size_t)(M * N)),
          *got = malloc(sizeof(float) * (size_t)(M * N)),
          *refx = malloc(sizeof(float) * (size_t)(M * K)),
          *gotx = malloc(sizeof(float) * (size_t)(M * K)), *H = filled(nw, 24);
    ptdp_round_bf16_n(H, nw);
    /* K products of O(1) values in two orders: 2 K 2^-24 of about K */
    const double tol = 2.0 * K * K * ldexp(1.0, -24);
    wgemm(h, 1, M, N, K, X, W, ref);  /* forward use, W^T: not registered yet */
    wgemm(h, 0, M, K, N, Y, W, refx); /* input-gradient use, W */
    const int64_t c0 = ptdp__gemm_bf16_conversions(h);
    ptdp_backend_weights_register(h, P, np);
    wgemm(h, 1, M, N, K, X, W, got);
    wgemm(h, 0, M, K, N, Y, W, gotx);
    CHECK(ptdp__gemm_bf16_conversions(h) == c0 + 2); /* a copy per orientation */
    CHECK(differ(got, ref, M * N, tol) == 0);
    CHECK(differ(gotx, refx, M * K, tol) == 0);
    wgemm(h, 1, M, N, K, X, W, got); /* the copy again, not converted */
    wgemm(h, 0, M, K, N, Y, W, gotx);
    CHECK(ptdp__gemm_bf16_conversions(h) == c0 + 2);
    CHECK(differ(got, ref, M * N, tol) == 0);
    /* each writer of the instance makes the copies stale: followed at once */
    for (int w = 0; w < 5; w++) {
        static const char *what[] = {"copy", "zero", "upload", "quantize", "adamw"};
        const int64_t before = ptdp__gemm_bf16_conversions(h);
        for (int64_t i = 0; i < nw; i++) H[i] = -H[i];
        if (w == 0) h->copy(h, W, H, nw);
        if (w == 1) h->zero(h, W, nw);
        if (w == 2) h->upload(h, W, H, sizeof(float) * (size_t)nw);
        if (w == 3) h->quantize(h, W, nw); /* on the grid already: new version, same values */
        if (w == 4) {
            float *g = filled(nw, 25), *m = calloc((size_t)nw, sizeof(float)),
                  *v = calloc((size_t)nw, sizeof(float));
            h->adamw(h, W, g, 1.0f, m, v, nw, 0.5f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
            ptdp_round_bf16_n(W, nw); /* a working copy on the grid (host: announced below) */
            ptdp_backend_weights_written(h, W, nw);
            free(g), free(m), free(v);
        }
        wgemm(h, 1, M, N, K, X, W, got);
        fresh_gemm(h, 1, M, N, K, X, W, ref);
        const int64_t d = differ(got, ref, M * N, tol);
        if (d) printf("  weight copies: stale after %s (%lld differ)\n", what[w], (long long)d);
        CHECK(d == 0);
        CHECK(ptdp__gemm_bf16_conversions(h) > before);
    }
    /* a write outside every registered range leaves the copies valid */
    {
        const int64_t before = ptdp__gemm_bf16_conversions(h);
        h->copy(h, H, W, nw);
        wgemm(h, 1, M, N, K, X, W, got);
        CHECK(ptdp__gemm_bf16_conversions(h) == before);
    }
    /* written behind the instance's back (the host writing CPU memory): the
     * copy stays (what PTDP_CHECK_WEIGHT_COPIES=1 catches) until announced */
    fresh_gemm(h, 1, M, N, K, X, W, ref);
    for (int64_t i = 0; i < nw; i++) W[i] = 0.0f;
    wgemm(h, 1, M, N, K, X, W, got);
    CHECK(differ(got, ref, M * N, tol) == 0);
    ptdp_backend_weights_written(h, W, nw);
    wgemm(h, 1, M, N, K, X, W, got);
    int64_t nz = 0; /* zero weights now: a zero product */
    for (int64_t i = 0; i < M * N; i++) nz += got[i] != 0.0f;
    CHECK(nz == 0);
    /* forgotten (n = 0, as a chunk does when it is freed): the weights are
     * converted at every call again, so a change shows at once */
    ptdp_backend_weights_register(h, P, 0);
    for (int64_t i = 0; i < nw; i++) W[i] = 1.0f;
    wgemm(h, 1, M, N, K, X, W, got);
    nz = 0;
    for (int64_t i = 0; i < M * N; i++) nz += got[i] == 0.0f;
    CHECK(nz < M * N / 10); /* sums of K values of x, hardly ever exactly 0 */
    /* a range overlapping a registered one replaces it */
    ptdp_backend_weights_register(h, P, np);
    wgemm(h, 1, M, N, K, X, W, ref);
    ptdp_backend_weights_register(h, P + 1, np - 1);
    for (int64_t i = 0; i < nw; i++) W[i] = 2.0f;
    ptdp_backend_weights_register(h, P + 1, np - 1);
    wgemm(h, 1, M, N, K, X, W, got);
    for (int64_t i = 0; i < M * N; i++) ref[i] *= 2.0f; /* exact: powers of 2 */
    CHECK(differ(got, ref, M * N, 0.0) == 0);
    ptdp_backend_weights_register(h, P + 1, 0);
    free(P), free(X), free(Y), free(ref), free(got), free(refx), free(gotx), free(H);
}

static void test_own_pack(void) {
    ptdp_backend *h = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_BF16);
    /* {M, N, K}: layers of configs (b) (c) (d), their heads, odd shapes */
    const int64_t shapes[][3] = {{1024, 768, 256},  {1024, 256, 1024}, {1024, 1152, 384},
                                 {1024, 384, 1536}, {1024, 2304, 768}, {1024, 768, 3072},
                                 {1024, 8192, 256}, {1024, 256, 8192}, {512, 50304, 384},
                                 {64, 37, 29},      {64, 13, 131},     {33, 100, 65},
                                 {16, 1, 1},        {128, 17, 33},     {256, 200, 300}};
    int checked = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int tb = 0; tb < 2; tb++)
            for (int pad = 0; pad < 2; pad++) {
                const int64_t M = shapes[i][0], N = shapes[i][1], K = shapes[i][2];
                const int64_t rows = tb ? N : K, cols = tb ? K : N, ldb = cols + 3 * pad;
                float *B = filled(rows * ldb, 77 + i);
                size_t n_own = 0, n_ref = 0;
                if (ptdp__gemm_bf16_pack_probe(h, tb, M, N, K, B, ldb, 1, NULL, 0, &n_own, NULL, 1,
                                               NULL, NULL)) {
                    free(B);
                    continue;
                }
                uint8_t *own = malloc(n_own), *ref = malloc(n_own);
                CHECK(ptdp__gemm_bf16_pack_probe(h, tb, M, N, K, B, ldb, 1, own, n_own, NULL, NULL,
                                                 1, NULL, NULL) == 0);
                CHECK(ptdp__gemm_bf16_pack_probe(h, tb, M, N, K, B, ldb, 0, ref, n_own, &n_ref,
                                                 NULL, 1, NULL, NULL) == 0);
                const int r = n_ref == n_own && memcmp(own, ref, n_own) == 0;
                free(own), free(ref);
                checked++;
                if (r != 1)
                    printf("own bf16 pack differs from oneDNN's reorder: tb %d, M %lld N %lld K "
                           "%lld ldb %lld\n",
                           tb, (long long)M, (long long)N, (long long)K, (long long)ldb);
                CHECK(r == 1);
                free(B);
            }
    /* where AVX512_BF16 is there, oneDNN's layout here is one the packer writes */
    if (ptdp__gemm_tile_bf16_available()) CHECK(checked > 0);
    printf("test_bf16_native: own weight packer checked against oneDNN's reorder on %d cases\n",
           checked);
}

/* Both orientations of a weight in one pass (ptdp__bf16_pack_both, what a
 * step's first GEMM on a weight uses once both copies exist) write the bytes
 * of the two single-orientation packs (ptdp__bf16_pack_blocked, itself held
 * to oneDNN's reorder above): oneDNN's layout on AVX512_BF16 (blocks of 32 x
 * 64) and one with other block sizes, shapes with padding in both
 * dimensions and a row stride past the columns. */
static ptdp__bf16_blocking blocking(int64_t K, int64_t N, int64_t kb, int64_t nb, size_t *bytes) {
    const int64_t Kp = (K + kb - 1) / kb * kb, Np = (N + nb - 1) / nb * nb;
    *bytes = sizeof(uint16_t) * (size_t)(Kp * Np);
    return (ptdp__bf16_blocking){kb, nb, kb * nb, Kp * nb};
}

static void test_pack_both(void) {
    const int64_t shapes[][2] = {{3072, 768}, {768, 2304}, {384, 384}, {77, 45},
                                 {33, 100},   {1, 1},      {50, 16},   {200, 300}};
    const int64_t blocks[][2] = {{32, 64}, {64, 32}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (size_t k = 0; k < sizeof blocks / sizeof blocks[0]; k++) {
            const int64_t R = shapes[i][0], C = shapes[i][1], ldw = C + 5;
            const int64_t kb = blocks[k][0], nb = blocks[k][1];
            float *W = filled(R * ldw, 300 + i);
            size_t st, sw;
            const ptdp__bf16_blocking bt = blocking(C, R, kb, nb, &st),
                                      bw = blocking(R, C, kb, nb, &sw);
            CHECK(ptdp__bf16_pack_both_fits(&bt, &bw));
            uint16_t *t1 = aligned_alloc(64, st), *w1 = aligned_alloc(64, sw);
            uint16_t *t2 = aligned_alloc(64, st), *w2 = aligned_alloc(64, sw);
            memset(t1, 0, st), memset(w1, 0, sw), memset(t2, 0xff, st), memset(w2, 0xff, sw);
            ptdp__bf16_pack_blocked(&bt, t1, W, 1, C, R, ldw);
            ptdp__bf16_pack_blocked(&bw, w1, W, 0, R, C, ldw);
            memcpy(t2, t1, st), memcpy(w2, w1, sw); /* the padding, which neither writes */
            for (size_t j = 0; j < st / 2; j++)
                t2[j] ^= 0x5a5a; /* every written value must change */
            for (size_t j = 0; j < sw / 2; j++) w2[j] ^= 0x5a5a;
            ptdp__bf16_pack_both(&bt, t2, &bw, w2, W, R, C, ldw);
            int64_t wrong = 0;
            for (size_t j = 0; j < st / 2; j++)
                wrong += t2[j] != t1[j] && t2[j] != (t1[j] ^ 0x5a5a);
            for (size_t j = 0; j < sw / 2; j++)
                wrong += w2[j] != w1[j] && w2[j] != (w1[j] ^ 0x5a5a);
            /* the values past R or C (padding) are not written: they keep the flipped bits; every
             * value inside is written: it matches the single packs' */
            int64_t missed = 0;
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < C; c++) {
                    /* W^T copy: K = C (pairs along c), N = R; W copy: K = R, N = C */
                    const int64_t it = (c / kb) * bt.sk + (r / nb) * bt.sn +
                                       ((c % kb) / 2) * 2 * nb + 2 * (r % nb) + c % 2;
                    const int64_t iw = (r / kb) * bw.sk + (c / nb) * bw.sn +
                                       ((r % kb) / 2) * 2 * nb + 2 * (c % nb) + r % 2;
                    missed += t2[it] != t1[it] || w2[iw] != w1[iw];
                    missed += t1[it] != ptdp_f32_to_bf16(W[r * ldw + c]);
                    missed += w1[iw] != ptdp_f32_to_bf16(W[r * ldw + c]);
                }
            if (wrong || missed)
                printf("  pack both: R %lld C %lld blocks %lld x %lld: %lld wrong, %lld missed\n",
                       (long long)R, (long long)C, (long long)kb, (long long)nb, (long long)wrong,
                       (long long)missed);
            CHECK(wrong == 0);
            CHECK(missed == 0);
            free(W), free(t1), free(w1), free(t2), free(w2);
        }
}

/* A^T into plain bf16 rows: each value where it belongs, rounded as the
 * scalar conversion rounds it; and the weight gradients C += A^T B that use
 * it (with B in the blocked layout) equal the fp32 GEMM of the rounded
 * operands up to summation order. */
static void test_wgrad_packs(void) {
    const int64_t shapes[][3] = {{37, 29, 13},     {16, 64, 32}, {100, 300, 65},
                                 {768, 256, 1024}, {1, 1, 1},    {33, 17, 2}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t M = shapes[i][0], N = shapes[i][1], K = shapes[i][2];
        const int64_t lda = M + 3, ldb = N + 5;
        float *A = filled(K * lda, 90 + i), *B = filled(K * ldb, 91 + i);
        uint16_t *T = malloc(sizeof(uint16_t) * (size_t)(M * K));
        ptdp__bf16_pack_transposed(T, A, K, M, lda);
        int64_t wrong = 0;
        for (int64_t m = 0; m < M; m++)
            for (int64_t k = 0; k < K; k++)
                wrong += T[m * K + k] != ptdp_f32_to_bf16(A[k * lda + m]);
        if (wrong)
            printf("A^T pack: %lld of %lld wrong at M %lld K %lld\n", (long long)wrong,
                   (long long)(M * K), (long long)M, (long long)K);
        CHECK(wrong == 0);
        /* the GEMM: operands on the grid, as the model's are */
        for (int64_t e = 0; e < K * lda; e++) A[e] = ptdp_bf16_to_f32(ptdp_f32_to_bf16(A[e]));
        for (int64_t e = 0; e < K * ldb; e++) B[e] = ptdp_bf16_to_f32(ptdp_f32_to_bf16(B[e]));
        ptdp_backend *h = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_BF16),
                     *f = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32);
        float *got = malloc(sizeof(float) * (size_t)(M * N)),
              *ref = malloc(sizeof(float) * (size_t)(M * N));
        for (int64_t e = 0; e < M * N; e++) got[e] = ref[e] = 0.25f;
        const int64_t before = ptdp__gemm_bf16_wgrad_calls(h);
        h->gemm(h, 1, 0, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, got, N);
        f->gemm(f, 1, 0, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, ref, N);
        CHECK(ptdp__gemm_bf16_wgrad_calls(h) == before + 1);
        /* each: K products and C, summed in some order in fp32 */
        int64_t bad = 0;
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double mag = 0.25;
                for (int64_t k = 0; k < K; k++)
                    mag += fabs((double)A[k * lda + m] * B[k * ldb + n]);
                bad +=
                    fabs((double)got[m * N + n] - ref[m * N + n]) > 2.0 * (K + 1) * 0x1p-24 * mag;
            }
        CHECK(bad == 0);
        free(A), free(B), free(T), free(got), free(ref);
    }
}

static float *bf16_values(const uint16_t *v, int64_t n) { /* into fp32, exactly */
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) f[i] = ptdp_bf16_to_f32(v[i]);
    return f;
}

/* The loss head with its logits in bf16 (head_logits, xent_sums, head_bwd
 * of the native backend), held to the fp32-logits composition it replaces:
 *   - the logits: the matmul's bf16 output must be the fp32 GEMM's rounded
 *     to bf16 up to the order of its sums: at most one bf16 step apart
 *     (the two fp32 sums differ by far less than a bf16 step, so rounding
 *     them can only split at a tie boundary);
 *   - on those same values in fp32, the fp32 path's max and target logit
 *     (xent_max_bf16, xent_sums_bf16) bit for bit, and its sum of
 *     exponentials up to the order of the sums (the same positive terms:
 *     each order's error is at most nv 2^-24 times the sum);
 *   - dl: ptdp__bf16_xent_grad's dl^T and its rows over the logits exactly
 *     xent_bwd's values (then mask_rows') rounded to bf16, given the same
 *     sums (its exponentials are the fp32 path's bit for bit), and the op's
 *     dwte and dx those of the composition's GEMMs bit for bit.
 * Shapes: rows not a multiple of 32, columns not of 16 nor of the 256
 * columns the pass takes at a time, padding columns past the vocabulary, a
 * shard at v0 > 0 (targets outside it), masked rows. */
static void test_head_bwd(void) {
    const struct {
        int64_t s, b, Vl, v0, V, h;
        int mask;
    } cases[] = {{7, 3, 77, 10, 80, 24, 1},      {32, 2, 160, 0, 160, 64, 0},
                 {50, 1, 700, 350, 1000, 48, 1}, {1, 1, 16, 0, 5, 16, 0},
                 {40, 5, 96, 0, 96, 32, 1},      {33, 2, 1030, 0, 1000, 40, 0}};
    ptdp_backend *t = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_BF16);
    CHECK(t->head_bwd != NULL && t->head_logits != NULL);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t s = cases[c].s, b = cases[c].b, Vl = cases[c].Vl, h = cases[c].h, N = s * b;
        const int64_t v0 = cases[c].v0, V = cases[c].V, NV = N * Vl;
        const int64_t nv = V - v0 < Vl ? V - v0 : Vl; /* the shard's valid columns */
        uint64_t st = 500 + c;
        int32_t *tok = malloc(sizeof(int32_t) * (size_t)(b * (s + 1)));
        for (int64_t i = 0; i < b * (s + 1); i++) /* targets in and out of the shard */
            tok[i] = (int32_t)((st = st * 6364136223846793005ull + 1) >> 33) % (int32_t)V;
        const int32_t id = tok[1]; /* a token that occurs: its rows are masked */
        float *x = filled(N * h, 600 + c), *wte = filled(Vl * h, 700 + c),
              *dw0 = filled(Vl * h, 800 + c);
        ptdp_round_bf16_n(x, N * h);
        ptdp_round_bf16_n(wte, Vl * h);
        ptdp_backend_weights_register(t, wte, Vl * h); /* the model's wte is a weight */
        float *L = malloc(sizeof(float) * (size_t)NV), *Lg = malloc(sizeof(float) * (size_t)NV);
        float *st1 = malloc(sizeof(float) * (size_t)(4 * N)), *st2 = malloc(sizeof(float) * 4 * N);
        float *m1 = st1, *sum1 = st1 + N, *tg1 = st1 + 2 * N; /* [N] each */
        float *m2 = st2, *sum2 = st2 + N, *tg2 = st2 + 2 * N;
        float *dw1 = malloc(sizeof(float) * (size_t)(Vl * h)),
              *dw2 = malloc(sizeof(float) * (size_t)(Vl * h));
        float *dx1 = malloc(sizeof(float) * (size_t)(N * h)),
              *dx2 = malloc(sizeof(float) * (size_t)(N * h));
        memcpy(dw1, dw0, sizeof(float) * (size_t)(Vl * h));
        memcpy(dw2, dw0, sizeof(float) * (size_t)(Vl * h));
        /* the op's logits, in bf16 over the start of L */
        t->head_logits(t, x, wte, h, L, m2, N, Vl, v0, V);
        CHECK(ptdp__gemm_bf16_logits_b16(t, L, N, Vl));
        float *Lf = bf16_values((const uint16_t *)L, NV); /* the same values in fp32 */
        t->gemm(t, 0, 1, N, Vl, h, 1.0f, x, h, wte, h, 0.0f, Lg, Vl);
        CHECK(!ptdp__gemm_bf16_logits_b16(t, L, N, Vl) || Lg + NV <= L || L + NV <= Lg);
        int64_t far = 0;
        for (int64_t i = 0; i < NV; i++) {
            const float step = fabsf(Lg[i]) * (1.0f / 128); /* a bf16 step or more */
            far += fabsf(Lf[i] - Lg[i]) > step;
        }
        if (far)
            printf("  head logits: %lld more than a bf16 step off (case %zu)\n", (long long)far, c);
        CHECK(far == 0);
        /* the fp32 path on those values: max, sums, then the composition */
        ptdp__xent_max_bf16(Lf, m1, N, Vl, v0, V);
        CHECK(memcmp(m1, m2, sizeof(float) * (size_t)N) == 0);
        uint16_t *lb = malloc(sizeof(uint16_t) * (size_t)NV); /* for the pass on its own */
        memcpy(lb, L, sizeof(uint16_t) * (size_t)NV);
        ptdp__xent_sums_bf16(Lf, m1, tok + 1, s + 1, sum1, tg1, s, b, Vl, v0, V);
        t->xent_sums(t, L, m2, tok + 1, s + 1, sum2, tg2, s, b, Vl, v0, V);
        int64_t off = 0; /* the sums of the same nv positive terms in two orders */
        for (int64_t n = 0; n < N; n++)
            off += fabsf(sum1[n] - sum2[n]) > 2.0f * (float)nv * 0x1p-24f * sum1[n];
        CHECK(off == 0);
        CHECK(memcmp(tg1, tg2, sizeof(float) * (size_t)N) == 0);
        CHECK(memcmp(lb, L, sizeof(uint16_t) * (size_t)NV) == 0); /* the logits only read */
        /* from here both sides divide by the op's sums */
        const ptdp_xent_grad xg1 = {
            sum2, m1, tok + 1, s + 1, s, b, Vl, v0, V, 0.125f, cases[c].mask ? tok : NULL, id};
        const ptdp_xent_grad xg2 = {
            sum2, m2, tok + 1, s + 1, s, b, Vl, v0, V, 0.125f, cases[c].mask ? tok : NULL, id};
        ptdp_head_bwd_composed(t, Lf, &xg1, x, wte, h, dw1, dx1); /* dl (rounded) into Lf */
        /* the pass on its own: dl^T, and dl's rows over the logits */
        uint16_t *At = malloc(sizeof(uint16_t) * (size_t)NV);
        ptdp__bf16_xent_grad(At, lb, &xg2);
        int64_t wrong_t = 0, wrong_r = 0, masked = 0;
        for (int64_t n = 0; n < N; n++) {
            masked += cases[c].mask && tok[(n % b) * (s + 1) + n / b] == id;
            for (int64_t v = 0; v < Vl; v++) {
                const float d = Lf[n * Vl + v];
                /* vcvtneps2bf16 takes an fp32 subnormal as zero, as the GEMMs'
                 * conversion of the composition's dl does (dwte, dx below),
                 * where the composition's rounding keeps it, or takes the
                 * largest ones up to FLT_MIN */
                const uint16_t want = ptdp_f32_to_bf16(d), gt = At[v * N + n], gr = lb[n * Vl + v];
                const int flushed = fabsf(d) <= FLT_MIN;
                wrong_t += gt != want && !(flushed && (gt & 0x7fff) == 0);
                wrong_r += gr != want && !(flushed && (gr & 0x7fff) == 0);
            }
        }
        if (wrong_t || wrong_r)
            printf("  head dl: %lld of dl^T, %lld of dl's rows wrong (case %zu)\n",
                   (long long)wrong_t, (long long)wrong_r, c);
        CHECK(wrong_t == 0);
        CHECK(wrong_r == 0);
        if (cases[c].mask) CHECK(masked > 0);
        /* the op */
        const int64_t before = ptdp__gemm_bf16_head_calls(t);
        t->head_bwd(t, L, &xg2, x, wte, h, dw2, dx2);
        CHECK(ptdp__gemm_bf16_head_calls(t) == before + 1);
        CHECK(memcmp(L, lb, sizeof(uint16_t) * (size_t)NV) == 0); /* dl's rows */
        CHECK(memcmp(dw1, dw2, sizeof(float) * (size_t)(Vl * h)) == 0);
        CHECK(memcmp(dx1, dx2, sizeof(float) * (size_t)(N * h)) == 0);
        int64_t offgrid = 0;
        for (int64_t i = 0; i < N * h; i++)
            offgrid += dx2[i] != ptdp_bf16_to_f32(ptdp_f32_to_bf16(dx2[i]));
        CHECK(offgrid == 0);
        /* a GEMM writing over the logits ends their bf16 state */
        t->head_logits(t, x, wte, h, L, m2, N, Vl, v0, V);
        CHECK(ptdp__gemm_bf16_logits_b16(t, L, N, Vl));
        t->gemm(t, 0, 1, N, Vl, h, 1.0f, x, h, wte, h, 0.0f, L, Vl);
        CHECK(!ptdp__gemm_bf16_logits_b16(t, L, N, Vl));
        t->head_logits(t, x, wte, h, L, m2, N, Vl, v0, V); /* and so does a write into wte */
        t->quantize(t, wte, Vl * h);
        CHECK(!ptdp__gemm_bf16_logits_b16(t, L, N, Vl));
        ptdp_backend_weights_register(t, wte, 0);
        free(tok), free(x), free(wte), free(dw0), free(L), free(Lg), free(Lf), free(st1);
        free(st2), free(dw1), free(dw2), free(dx1), free(dx2), free(lb), free(At);
    }
}

/* The native backend's MLP (kernels.h's mlp ops: fc, gl and dfc stored in
 * bf16, precision.c) against the composition it replaces, the same backend's
 * gemm and bias_gelu ops over fp32 storage: the same values bit for bit,
 * fc, gl and dfc widened from their bf16 storage included (the bf16
 * matmul's output is its fp32 sums rounded to nearest even, as the rounding
 * pass rounds them; bias + GeLU runs the same row functions on the same
 * values). Shapes: fl past the GeLU's 512-value chunks and not a multiple
 * of 16, odd row counts, one row. Then the typed GEMM's fallback (the fp32
 * GEMM on widened operands, for a shape the native matmul cannot run) on
 * the same calls: the same values up to the order of the sums. */
static void check_mlp(ptdp_backend *n, ptdp_backend *c, int64_t N, int64_t h, int64_t fl,
                      uint64_t seed, int fallback) {
    float *w1 = filled(fl * h, seed), *w2 = filled(h * fl, seed + 1), *b1 = filled(fl, seed + 2);
    float *x = filled(N * h, seed + 3), *dy = filled(N * h, seed + 4);
    for (int64_t e = 0; e < N * h; e++) dy[e] *= 0.01f;
    float *ws[] = {w1, w2, b1, x, dy};
    const int64_t wn[] = {fl * h, h * fl, fl, N * h, N * h};
    for (int i = 0; i < 5; i++) ptdp_round_bf16_n(ws[i], wn[i]);
    const int64_t nf = N * fl, nh = N * h;
    float *fc[2], *gl[2], *dfc[2], *y[2], *dx[2], *db[2], *dw1[2], *dw2[2];
    for (int k = 0; k < 2; k++) {
        fc[k] = filled(nf, 7), gl[k] = filled(nf, 8), dfc[k] = filled(nf, 9);
        y[k] = filled(nh, 10), dx[k] = filled(nh, 11), db[k] = filled(fl, 12);
        dw1[k] = filled(fl * h, 13), dw2[k] = filled(h * fl, 14);
    }
    const int64_t before = ptdp__gemm_bf16_typed_fallbacks(n, fallback);
    ptdp_backend *t[2] = {c, n};
    for (int k = 0; k < 2; k++) {
        t[k]->mlp_fwd(t[k], x, w1, b1, w2, fc[k], gl[k], y[k], N, h, fl);
        t[k]->mlp_bwd_b(t[k], dy, w2, fc[k], b1, w1, dfc[k], db[k], dx[k], N, h, fl);
        t[k]->mlp_bwd_w(t[k], dy, gl[k], dfc[k], x, dw2[k], dw1[k], N, h, fl);
    }
    CHECK(ptdp__gemm_bf16_typed_fallbacks(n, 0) == before + (fallback ? 6 : 0));
    /* fc, gl and dfc: bf16 in the first half of the native backend's buffers */
    float *f16[3] = {bf16_values((uint16_t *)fc[1], nf), bf16_values((uint16_t *)gl[1], nf),
                     bf16_values((uint16_t *)dfc[1], nf)};
    float *f32[3] = {fc[0], gl[0], dfc[0]};
    const char *names[] = {"fc", "gl", "dfc", "y", "dx", "db1", "dW2", "dW1"};
    float *got[8] = {f16[0], f16[1], f16[2], y[1], dx[1], db[1], dw2[1], dw1[1]};
    float *want[8] = {f32[0], f32[1], f32[2], y[0], dx[0], db[0], dw2[0], dw1[0]};
    const int64_t len[8] = {nf, nf, nf, nh, nh, fl, h * fl, fl * h};
    for (int i = 0; i < 8; i++) {
        /* the fallback sums in another order, so its bf16 outputs may sit a
         * bf16 step (0.4%) from the matmul's and what follows inherits
         * that: within 2% of 1 + |value| there, a check of its plumbing
         * (widening, strides, narrowing), not of its last bit */
        const int64_t d = differ(got[i], want[i], len[i], fallback ? 2e-2 : 0.0);
        if (d)
            printf("mlp %s (N %lld h %lld fl %lld%s): %lld of %lld differ\n", names[i],
                   (long long)N, (long long)h, (long long)fl, fallback ? ", fallback" : "",
                   (long long)d, (long long)len[i]);
        CHECK(d == 0);
    }
    for (int i = 0; i < 3; i++) free(f16[i]);
    for (int k = 0; k < 2; k++) {
        free(fc[k]), free(gl[k]), free(dfc[k]), free(y[k]), free(dx[k]), free(db[k]);
        free(dw1[k]), free(dw2[k]);
    }
    for (int i = 0; i < 5; i++) free(ws[i]);
}

static void test_mlp(void) {
    ptdp_backend *n = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_BF16);
    CHECK(n->mlp_fwd && n->mlp_bwd_b && n->mlp_bwd_w);
    ptdp_backend c = *n; /* the same instance with the compositions as its MLP ops */
    c.mlp_fwd = ptdp_mlp_fwd_composed, c.mlp_bwd_b = ptdp_mlp_bwd_b_composed;
    c.mlp_bwd_w = ptdp_mlp_bwd_w_composed, c.mlp_store = PTDP_DTYPE_FP32;
    const int64_t shapes[][3] = {
        {64, 64, 256}, {37, 24, 100}, {1, 16, 64}, {130, 48, 600}, {5, 16, 37}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int fb = 0; fb < 2; fb++)
            check_mlp(n, &c, shapes[i][0], shapes[i][1], shapes[i][2], 100 + 10 * i, fb);
}

int main(void) {
    unsetenv("PTDP_CHECK_WEIGHT_COPIES"); /* this test reads a stale copy on purpose */
    const int tiles = ptdp__gemm_tile_bf16_available(),
              copies = (test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_BF16)->caps &
                        PTDP_CAP_NATIVE_GEMM16) != 0;
    if (!tiles && !copies) {
        printf("test_bf16_native: skipped (no AVX512_BF16 and no native bf16 matmul in oneDNN on "
               "this CPU: the bf16 backend emulates bf16 with fp32 GEMMs)\n");
        return 77;
    }
    if (copies) test_weight_copies();
    if (copies) test_own_pack();
    if (tiles) test_pack_both();
    if (copies && tiles) test_wgrad_packs();
    if (copies && tiles) test_head_bwd();
    if (copies && tiles) test_mlp();
    if (!tiles) {
        printf("test_bf16_native: attention's bf16 tiles skipped (no AVX512_BF16)\n");
        return test_done("test_bf16_native");
    }
    CHECK(test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_BF16)->caps & PTDP_CAP_ATTENTION16);
    /* the attention's shapes, then odd ones: tails of 16 lanes, of the 6-row
     * block and of K pairs, K and N past one 128 block */
    const int64_t shapes[][3] = {{128, 128, 64}, {128, 64, 128}, {37, 29, 13},   {7, 70, 131},
                                 {1, 1, 1},      {6, 64, 2},     {200, 300, 260}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                check_gemm(ta, tb, shapes[k][0], shapes[k][1], shapes[k][2], 1.0f, 0.0f);
                check_gemm(ta, tb, shapes[k][0], shapes[k][1], shapes[k][2], 0.5f, 1.0f);
            }
    check_attention(300, 2, 2, 2, 24, 0.0f); /* tiles of 128 and a tail of 44 */
    check_attention(300, 2, 2, 2, 24, 0.1f);
    check_attention(64, 1, 3, 3, 64, 0.0f);
    /* odd lengths: a last key block of one (an unpaired row), head dims odd
     * and past one chunk of K pairs (the packed attention's tails) */
    check_attention(257, 1, 2, 2, 13, 0.1f);
    check_attention(131, 2, 1, 1, 160, 0.0f);
    /* key/value groups: the backward's task a (sequence, group), its k and v
     * packed once for the group's query heads, must keep the tile path's sums */
    check_attention(300, 2, 6, 2, 24, 0.1f);
    check_attention(130, 1, 4, 1, 16, 0.0f);
    return test_done("test_bf16_native");
}
