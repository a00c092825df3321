/* test_kernels.c - every fast CPU kernel in test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32)
 * against a plain reference (ptdp_ref_* or a double-precision loop written here): GEMM in all
 * transpose combinations with padded leading dimensions on both libraries,
 * LayerNorm, bias + GeLU, attention (context, saved logsumexp and the tiled
 * backward against double loops), embedding and
 * position lookups on a vocabulary slice, the vocabulary-parallel
 * cross-entropy pieces split over t = 2 and 3 slices with padded columns,
 * the fast exp/tanh, and the dropout masks (the optimizer's kernels:
 * test_optim_ops.c). Gradients are checked by finite differences in
 * test_kernels_grad.c, not here.
 *
 * Tolerances: fp32 kernels against double references. A length-K dot product
 * of O(1) values carries about K * 6e-8 relative error at worst, so GEMMs
 * (K <= 67) get 1e-5 + 2e-5 relative; element-wise kernels using fastmath get
 * 2e-6 (a few ulps, fastmath itself is < 3e-7 relative). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/half/half.h"
#include "kernels/cpu/fastmath.h"
#include "kernels/kernels.h"
#include "backend_util.h"
#include "test.h"

/* ---- the 16-bit backends (--bf16 / --fp16) ------------------------------------
 * Each 16-bit op computes in fp32 and rounds what it writes as an activation
 * to the 16-bit grid; it must equal the fp32 op on the same (on-grid) inputs
 * within half a 16-bit ulp: |got - want| <= u |want| with the unit roundoff
 * u = 2^-8 (bf16, 8 significant bits) or 2^-11 (fp16, 11 bits), for normal
 * values; plus an absolute 2^-24 for fp16 results in its subnormal range.
 * Outputs must lie on the grid (rounding again changes nothing), and
 * weight-gradient accumulations (beta = 1) must stay fp32 (test_off_grid,
 * backend_util.h, counts what is off the grid). */
static void test_precision_tables(void) {
    const ptdp_dtype dts[2] = {PTDP_DTYPE_BF16, PTDP_DTYPE_FP16};
    const ptdp_gemm_lib libs[2] = {PTDP_GEMM_ONEDNN, PTDP_GEMM_OPENBLAS};
    for (int k = 0; k < 4; k++) {
        /* bf16 over oneDNN runs its native bf16 matmul where the CPU has one */
        const ptdp_dtype dt = dts[k % 2];
        ptdp_backend *h = test_cpu_backend(libs[k / 2], dt),
                     *f = test_cpu_backend(libs[k / 2], PTDP_DTYPE_FP32);
        printf("16-bit backend %s\n", h->name);
        CHECK(h->dtype == dt && f->dtype == PTDP_DTYPE_FP32);
        CHECK(test_cpu_backend(PTDP_GEMM_OPENBLAS, dt)->dtype == dt);
        CHECK_OK(ptdp_backend_check(h, PTDP_NEED_DROPOUT | PTDP_NEED_ROW_MASK));
        const double u = dt == PTDP_DTYPE_BF16 ? 1.0 / 256 : 1.0 / 2048,
                     atol = dt == PTDP_DTYPE_FP16 ? 1.0 / (1 << 24) : 0.0;
        const int64_t M = 24, N = 40, K = 32, s = 16, b = 2, al = 2, hd = 8;
        float *A = fmalloc(M * K), *B = fmalloc(K * N), *C16 = fmalloc(M * N),
              *C32 = fmalloc(M * N);
        fill_normal(A, M * K, 11, 1.0f);
        fill_normal(B, K * N, 12, 1.0f);
        h->quantize(h, A, M * K); /* inputs on the grid, as the model's are */
        h->quantize(h, B, K * N);
        h->gemm(h, 0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C16, N);
        f->gemm(f, 0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C32, N);
        check_arr("16-bit gemm", C16, C32, M * N, u, atol);
        CHECK(test_off_grid(C16, M * N, dt) == 0);
        /* beta = 1: a weight gradient, accumulated in fp32 (not rounded): the
         * fp32 GEMM's result up to summation order (the GEMM tolerance) */
        fill_const(C16, M * N, 0.1f);
        fill_const(C32, M * N, 0.1f);
        for (int ta = 0; ta < 2; ta++) /* transposed operands as the wgrad GEMMs have them */
            for (int tb = 0; tb < 2; tb++) {
                h->gemm(h, ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, 1.0f, C16, N);
                f->gemm(f, ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, 1.0f, C32, N);
            }
        check_arr("16-bit gemm, beta = 1", C16, C32, M * N, 2e-5, 1e-5);
        CHECK(test_off_grid(C16, M * N, dt) > 0);
        /* LayerNorm: fp32 statistics, output on the grid */
        float *w = fmalloc(N), *bb = fmalloc(N), *o16 = fmalloc(M * N), *o32 = fmalloc(M * N);
        float mean[24], rstd[24], mean2[24], rstd2[24];
        fill_normal(w, N, 13, 1.0f);
        fill_normal(bb, N, 14, 1.0f);
        h->layernorm_fwd(h, A, w, bb, o16, mean, rstd, M, N < K ? N : K, 1e-5f);
        f->layernorm_fwd(f, A, w, bb, o32, mean2, rstd2, M, N < K ? N : K, 1e-5f);
        const int64_t nl = M * (N < K ? N : K);
        check_arr("16-bit layernorm", o16, o32, nl, u, atol);
        CHECK(test_off_grid(o16, nl, dt) == 0);
        CHECK(memcmp(mean, mean2, sizeof mean) == 0 && memcmp(rstd, rstd2, sizeof rstd) == 0);
        /* bias + GeLU */
        h->bias_gelu_fwd(h, C32, bb, o16, M, N);
        f->bias_gelu_fwd(f, C32, bb, o32, M, N);
        check_arr("16-bit bias_gelu", o16, o32, M * N, u, atol);
        CHECK(test_off_grid(o16, M * N, dt) == 0);
        /* attention: ctx on the grid; the saved logsumexp stays fp32 */
        float *qkv = fmalloc(s * b * al * 3 * hd), *c16 = fmalloc(s * b * al * hd),
              *c32 = fmalloc(s * b * al * hd), *sv16 = fmalloc(b * al * s),
              *sv32 = fmalloc(b * al * s),
              *scr = fmalloc(ptdp_attention_scratch_floats(s, omp_get_max_threads()));
        fill_normal(qkv, s * b * al * 3 * hd, 15, 1.0f);
        h->quantize(h, qkv, s * b * al * 3 * hd);
        ptdp_dropout nod = {0};
        h->attention_fwd(h, qkv, c16, sv16, scr, s, b, al, hd, nod);
        f->attention_fwd(f, qkv, c32, sv32, scr, s, b, al, hd, nod);
        /* bf16 tiles (AVX512_BF16) round the probabilities before P V: each
         * term P_k v_k moves by at most u P_k |v_k|, so ctx = sum P_k v_k / l
         * (sum P_k = l) by at most u max|v|, besides its own rounding; the
         * scores are the same exact products summed in another order */
        const int tiles = (h->caps & PTDP_CAP_ATTENTION16) != 0;
        double vmax = 0.0;
        for (int64_t e = 0; e < s * b * al; e++)
            for (int64_t d = 0; d < hd; d++) vmax = fmax(vmax, fabs(qkv[e * 3 * hd + 2 * hd + d]));
        check_arr("16-bit attention ctx", c16, c32, s * b * al * hd, u, atol + tiles * u * vmax);
        CHECK(test_off_grid(c16, s * b * al * hd, dt) == 0);
        if (tiles)
            check_arr("16-bit attention logsumexp", sv16, sv32, b * al * s, 1e-6, 1e-6);
        else
            CHECK(memcmp(sv16, sv32, sizeof(float) * (size_t)(b * al * s)) == 0);
        /* quantize is idempotent and rounds to nearest: 1 + 2^-10 is between
         * bf16 neighbours 1 and 1 + 2^-7 (-> 1) and exact in fp16 */
        float x[3] = {1.0f + 1.0f / 1024, 70000.0f, -3.0f};
        h->quantize(h, x, 3);
        CHECK(x[0] == (dt == PTDP_DTYPE_BF16 ? 1.0f : 1.0f + 1.0f / 1024));
        CHECK(dt == PTDP_DTYPE_BF16 ? x[1] == 70144.0f : isinf(x[1])); /* fp16 overflows */
        CHECK(x[2] == -3.0f);
        free(A), free(B), free(C16), free(C32), free(w), free(bb), free(o16), free(o32);
        free(qkv), free(c16), free(c32), free(sv16), free(sv32), free(scr);
    }
}

/* ---- GEMM --------------------------------------------------------------- */

static void test_gemm_case(ptdp_backend *o, int ta, int tb, int64_t M, int64_t N, int64_t K,
                           float alpha, float beta, uint64_t seed) {
    /* stored shapes: A is [M,K] or [K,M]; B is [K,N] or [N,K]; each row padded */
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int64_t lda = ac + 3, ldb = bc + 5, ldc = N + 2;
    float *A = fmalloc(ar * lda), *B = fmalloc(br * ldb), *C = fmalloc(M * ldc),
          *R = fmalloc(M * ldc);
    fill_normal(A, ar * lda, seed, 1.0f);
    fill_normal(B, br * ldb, seed + 1, 1.0f);
    if (beta == 0.0f) {
        /* beta = 0 must overwrite, whatever C held (BLAS semantics: NaN too) */
        fill_const(C, M * ldc, NAN);
        fill_const(R, M * ldc, NAN);
    } else {
        fill_normal(C, M * ldc, seed + 2, 1.0f);
        memcpy(R, C, sizeof(float) * (size_t)(M * ldc));
    }
    float pad_mark = 12345.0f;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = N; j < ldc; j++) C[i * ldc + j] = R[i * ldc + j] = pad_mark;
    o->gemm(o, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    ptdp_ref_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, R, ldc);
    char what[128];
    snprintf(what, sizeof what, "gemm %s ta=%d tb=%d M=%lld N=%lld K=%lld beta=%g", o->name, ta, tb,
             (long long)M, (long long)N, (long long)K, (double)beta);
    check_arr(what, C, R, M * ldc, 2e-5, 1e-5 * (double)K); /* padding columns compared too */
    free(A);
    free(B);
    free(C);
    free(R);
}

/* Sample keying (kernels.h): the masks of a [s, b, h] activation do not
 * depend on b, only on the global sample: b = 2 equals two b = 1 calls on
 * samples 0 and 1; and attention blocks by global head: two tensor ranks of
 * 2 heads draw the blocks of one rank of 4. */
static void test_dropout_keying(ptdp_backend *o) {
    const int64_t s = 5, h = 40;
    float x2[5 * 2 * 40], z2[5 * 2 * 40], out2[5 * 2 * 40], bias[40] = {0};
    for (int64_t i = 0; i < s * 2 * h; i++) x2[i] = 1.0f + (float)i, z2[i] = 0.0f;
    ptdp_dropout d = {
        .p = 0.3f, .key = ptdp_rng_key_make(3, "keying"), .b = 2, .sample0 = 6, .width = h};
    o->bias_dropout_add_fwd(o, x2, bias, z2, out2, s * 2, h, d);
    int same = 1;
    for (int64_t bi = 0; bi < 2; bi++) {
        float x1[5 * 40], z1[5 * 40], out1[5 * 40];
        for (int64_t si = 0; si < s; si++)
            for (int64_t j = 0; j < h; j++)
                x1[si * h + j] = x2[(si * 2 + bi) * h + j], z1[si * h + j] = 0.0f;
        ptdp_dropout d1 = d;
        d1.b = 1;
        d1.sample0 = 6 + bi;
        o->bias_dropout_add_fwd(o, x1, bias, z1, out1, s, h, d1);
        for (int64_t si = 0; si < s; si++)
            for (int64_t j = 0; j < h; j++) same &= out1[si * h + j] == out2[(si * 2 + bi) * h + j];
    }
    CHECK(same);
    /* attention: 4 heads on one rank vs 2 + 2 on two ranks, one sequence */
    const int64_t S = 9, hd = 4, a = 4;
    float qkv4[9 * 4 * 3 * 4], ctx4[9 * 4 * 4], p4[4 * 9 * 9]; /* p4, p2: saved, >= b*al*s*s */
    float *scratch =
        malloc(sizeof(float) * (size_t)ptdp_attention_scratch_floats(S, omp_get_max_threads()));
    for (int64_t i = 0; i < S * a * 3 * hd; i++) qkv4[i] = (float)((i * 37) % 11) * 0.1f;
    ptdp_dropout da = {
        .p = 0.3f, .key = ptdp_rng_key_make(4, "keying-attn"), .b = 1, .sample0 = 2, .heads = a};
    o->attention_fwd(o, qkv4, ctx4, p4, scratch, S, 1, a, hd, da);
    for (int64_t r = 0; r < 2; r++) {
        float qkv2[9 * 2 * 3 * 4], ctx2[9 * 2 * 4], p2[2 * 9 * 9];
        for (int64_t si = 0; si < S; si++)
            memcpy(qkv2 + si * 2 * 3 * hd, qkv4 + si * a * 3 * hd + r * 2 * 3 * hd,
                   sizeof(float) * 2 * 3 * hd);
        ptdp_dropout dr = da;
        dr.head0 = 2 * r;
        o->attention_fwd(o, qkv2, ctx2, p2, scratch, S, 1, 2, hd, dr);
        for (int64_t si = 0; si < S; si++)
            for (int64_t j = 0; j < 2 * hd; j++)
                same &= ctx2[si * 2 * hd + j] == ctx4[si * a * hd + r * 2 * hd + j];
    }
    CHECK(same);
    free(scratch);
}

/* ptdp_backend_check: the CPU backends are complete; a backend missing a required
 * op is refused naming it; the optional dropout op only when needed. */
static void test_ops_check(void) {
    /* opening: what a bad request says, and what the CPU backends declare */
    ptdp_backend *be = NULL;
    ptdp_backend_params bp = ptdp_backend_default_params();
    bp.lib = (ptdp_gemm_lib)7;
    CHECK(ptdp_backend_open(&be, &bp) == PTDP_EINVAL && !be &&
          strstr(ptdp_last_error(), "GEMM library"));
    bp = ptdp_backend_default_params();
    bp.device = PTDP_DEVICE_CUDA;
    bp.dtype = PTDP_DTYPE_BF16;
    CHECK(ptdp_backend_open(&be, &bp) == PTDP_EUNSUPPORTED && !be &&
          strstr(ptdp_last_error(), "fp32 only"));
    bp.dtype = PTDP_DTYPE_FP32; /* this program does not link the CUDA backend */
    CHECK(ptdp_backend_open(&be, &bp) == PTDP_EUNSUPPORTED && !be &&
          strstr(ptdp_last_error(), "without the CUDA backend"));
    ptdp_backend *f = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32);
    CHECK(f->device == PTDP_DEVICE_CPU && (f->caps & PTDP_CAP_FLASH_ATTENTION) &&
          !(f->caps & (PTDP_CAP_DEVICE_MEMORY | PTDP_CAP_NATIVE_GEMM16 | PTDP_CAP_WEIGHT_COPIES)));
    char desc[256];
    CHECK(!strcmp(ptdp_backend_describe(f, desc, sizeof desc), "cpu/onednn (flash-attention)"));
    CHECK(!(test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP16)->caps & PTDP_CAP_NATIVE_GEMM16));
    CHECK_OK(ptdp_backend_check(test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32), 1));
    CHECK_OK(ptdp_backend_check(test_cpu_backend(PTDP_GEMM_OPENBLAS, PTDP_DTYPE_FP32), 1));
    ptdp_backend t = *test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32);
    t.gemm = NULL;
    CHECK(ptdp_backend_check(&t, 0) == PTDP_EUNSUPPORTED && strstr(ptdp_last_error(), "gemm"));
    t = *test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32);
    t.dropout_fwd = NULL;
    CHECK_OK(ptdp_backend_check(&t, 0));
    CHECK(ptdp_backend_check(&t, PTDP_NEED_DROPOUT) == PTDP_EUNSUPPORTED &&
          strstr(ptdp_last_error(), "--hidden-dropout 0"));
    t = *test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32);
    t.mask_rows = NULL;
    CHECK_OK(ptdp_backend_check(&t, PTDP_NEED_DROPOUT));
    CHECK(ptdp_backend_check(&t, PTDP_NEED_ROW_MASK) == PTDP_EUNSUPPORTED &&
          strstr(ptdp_last_error(), "--eod-mask-loss"));
}

/* mask_rows (--eod-mask-loss): row si*b+bi is zeroed exactly when token
 * [bi, si] of the [b, ld] input is the id; the kept count is returned. */
static void test_mask_rows(ptdp_backend *o) {
    const int64_t s = 5, b = 3, ld = s + 1, w = 4;
    int32_t tok[3 * 6];
    float x[5 * 3 * 4];
    int64_t want = 0;
    for (int64_t i = 0; i < b * ld; i++) tok[i] = (int32_t)((i * 7) % 4); /* id 3: some rows */
    for (int64_t i = 0; i < s * b * w; i++) x[i] = 1.0f + (float)i;
    for (int64_t si = 0; si < s; si++)
        for (int64_t bi = 0; bi < b; bi++) want += tok[bi * ld + si] != 3;
    CHECK(want > 0 && want < s * b);
    CHECK(o->mask_rows(o, x, w, tok, ld, s, b, 3) == want);
    int exact = 1;
    for (int64_t si = 0; si < s; si++)
        for (int64_t bi = 0; bi < b; bi++)
            for (int64_t j = 0; j < w; j++) {
                const int64_t r = si * b + bi;
                const float v = x[r * w + j], orig = 1.0f + (float)(r * w + j);
                exact &= tok[bi * ld + si] == 3 ? v == 0.0f : v == orig;
            }
    CHECK(exact);
}

/* Two shapes with dense rows go to oneDNN's matmul primitive (gemm.c) where
 * oneDNN runs its AVX-512 brgemm on them: x W^T with K >= 2N and M >= 256
 * (beta 0, over NaN), and a weight gradient C += A^T B with N <= 256 and
 * 4N <= M; each against the double reference with test_gemm_case's bound,
 * twice (the second call reuses the primitive) */
static void test_gemm_matmul_case(int ta, int64_t M, int64_t N, int64_t K, float beta,
                                  uint64_t seed) {
    ptdp_backend *o = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32);
    const int tb = !ta;
    const int64_t lda = ta ? M : K, ldb = tb ? K : N;
    float *A = fmalloc(M * K), *B = fmalloc(N * K), *C = fmalloc(M * N), *R = fmalloc(M * N);
    const int64_t calls0 = ptdp__gemm_onednn_matmul_calls(o);
    for (int rep = 0; rep < 2; rep++) {
        fill_normal(A, M * K, seed + 3 * (uint64_t)rep, 1.0f);
        fill_normal(B, N * K, seed + 3 * (uint64_t)rep + 1, 1.0f);
        if (beta == 0.0f) {
            fill_const(C, M * N, NAN);
        } else {
            fill_normal(C, M * N, seed + 3 * (uint64_t)rep + 2, 1.0f);
        }
        memcpy(R, C, sizeof(float) * (size_t)(M * N));
        o->gemm(o, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, N);
        ptdp_ref_gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, R, N);
        check_arr("gemm on oneDNN's matmul", C, R, M * N, 2e-5, 1e-5 * (double)K);
    }
    const int64_t ran = ptdp__gemm_onednn_matmul_calls(o) - calls0;
    printf("gemm: ta=%d tb=%d M=%lld N=%lld K=%lld: %lld of 2 calls ran on oneDNN's matmul\n", ta,
           tb, (long long)M, (long long)N, (long long)K, (long long)ran);
    if (__builtin_cpu_supports("avx512f")) CHECK(ran == 2); /* where it was measured faster */
    free(A);
    free(B);
    free(C);
    free(R);
}

static void test_gemm(ptdp_backend *o) {
    const ptdp_gemm_lib libs[2] = {PTDP_GEMM_ONEDNN, PTDP_GEMM_OPENBLAS};
    const int64_t sizes[][3] = {{13, 7, 19}, {1, 9, 5}, {67, 45, 33}, {5, 64, 1}};
    for (int l = 0; l < 2; l++) {
        ptdp_backend *ol = test_cpu_backend(libs[l], PTDP_DTYPE_FP32);
        CHECK(ol->lib == libs[l] && strstr(ol->name, ptdp_gemm_lib_name(libs[l])) != NULL);
        uint64_t seed = 100;
        for (int sz = 0; sz < 4; sz++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++)
                    for (int bb = 0; bb < 2; bb++)
                        test_gemm_case(ol, ta, tb, sizes[sz][0], sizes[sz][1], sizes[sz][2],
                                       bb ? 1.0f : 0.75f, bb ? 1.0f : 0.0f, seed++);
    }
    test_gemm_matmul_case(0, 300, 40, 100, 0.0f, 160);
    test_gemm_matmul_case(1, 1024, 64, 100, 1.0f, 170);
    CHECK(test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32) ==
          test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32));
    ptdp_gemm_lib lib;
    CHECK_OK(ptdp_gemm_lib_parse("openblas", &lib));
    CHECK(lib == PTDP_GEMM_OPENBLAS);
    CHECK(ptdp_gemm_lib_parse("mkl", &lib) < 0);
}

/* ---- LayerNorm, GeLU, bias ------------------------------------------------ */

static void test_layernorm(ptdp_backend *o) {
    const int64_t N = 5, h = 37;
    const float eps = 1e-5f;
    float *x = fmalloc(N * h), *w = fmalloc(h), *b = fmalloc(h), *out = fmalloc(N * h),
          *ref = fmalloc(N * h), mean[5], rstd[5];
    fill_normal(x, N * h, 1, 2.0f);
    for (int64_t i = 0; i < N * h; i++) x[i] += 3.0f; /* nonzero mean */
    fill_normal(w, h, 2, 1.0f);
    fill_normal(b, h, 3, 1.0f);
    o->layernorm_fwd(o, x, w, b, out, mean, rstd, N, h, eps);
    ptdp_ref_layernorm_fwd(x, w, b, ref, N, h, eps);
    check_arr("layernorm_fwd out", out, ref, N * h, 2e-5, 2e-5);
    float mref[5], rref[5];
    for (int64_t n = 0; n < N; n++) {
        double m = 0, v = 0;
        for (int64_t i = 0; i < h; i++) m += x[n * h + i];
        m /= (double)h;
        for (int64_t i = 0; i < h; i++) v += (x[n * h + i] - m) * (x[n * h + i] - m);
        v /= (double)h;
        mref[n] = (float)m;
        rref[n] = (float)(1.0 / sqrt(v + eps));
    }
    check_arr("layernorm_fwd mean", mean, mref, N, 1e-5, 1e-6);
    check_arr("layernorm_fwd rstd", rstd, rref, N, 1e-5, 0);
    free(x);
    free(w);
    free(b);
    free(out);
    free(ref);
}

static void test_bias_gelu(ptdp_backend *o) {
    const int64_t N = 4, n = 33;
    float *x = fmalloc(N * n), *bias = fmalloc(n), *out = fmalloc(N * n), *ref = fmalloc(N * n);
    fill_normal(x, N * n, 4, 3.0f); /* covers the tails and the small-|u| tanh branch */
    fill_normal(bias, n, 5, 0.5f);
    x[0] = -bias[0]; /* u = 0 exactly */
    x[1] = 0.05f - bias[1];
    o->bias_gelu_fwd(o, x, bias, out, N, n);
    for (int64_t r = 0; r < N; r++)
        for (int64_t j = 0; j < n; j++) ref[r * n + j] = ptdp_ref_gelu(x[r * n + j] + bias[j]);
    /* for u << 0, 0.5 u (1 + tanh) cancels: tanh's fp32 ulp near -1 (6e-8)
     * times 0.5 |u| (|u| < 12 here) bounds the absolute error by ~4e-7 */
    check_arr("bias_gelu_fwd", out, ref, N * n, 2e-6, 5e-7);

    /* bias_add / bias_bwd: dbias accumulates */
    memcpy(out, x, sizeof(float) * (size_t)(N * n));
    o->bias_add(o, out, bias, N, n);
    for (int64_t r = 0; r < N; r++)
        for (int64_t j = 0; j < n; j++) ref[r * n + j] = x[r * n + j] + bias[j];
    check_arr("bias_add", out, ref, N * n, 0, 0);
    float db[33], dref[33];
    for (int64_t j = 0; j < n; j++) {
        double acc = 1.5;
        for (int64_t r = 0; r < N; r++) acc += x[r * n + j];
        db[j] = 1.5f;
        dref[j] = (float)acc;
    }
    o->bias_bwd(o, x, db, N, n);
    check_arr("bias_bwd", db, dref, n, 1e-6, 1e-6);
    free(x);
    free(bias);
    free(out);
    free(ref);
}

/* ---- attention ------------------------------------------------------------ */

/* The CPU backend saves the logsumexp of every row of scale * q k^T (causal):
 * lse[(bi*al + j)*s + i] = log sum_{k <= i} exp(scale q_i . k_k), in double. */
static void ref_lse(const float *qkv, double *lse, int64_t s, int64_t b, int64_t al, int64_t hd) {
    const int64_t ld3 = b * al * 3 * hd;
    const double scale = 1.0 / sqrt((double)hd);
    double *z = malloc(sizeof(double) * (size_t)s);
    for (int64_t task = 0; task < b * al; task++) {
        const float *Q = qkv + task * 3 * hd, *K = Q + hd; /* (bi*al + j)*3*hd */
        for (int64_t i = 0; i < s; i++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t k = 0; k <= i; k++) {
                double d = 0;
                for (int64_t e = 0; e < hd; e++) d += (double)Q[i * ld3 + e] * K[k * ld3 + e];
                z[k] = scale * d;
                mx = fmax(mx, z[k]);
            }
            for (int64_t k = 0; k <= i; k++) sum += exp(z[k] - mx);
            lse[task * s + i] = mx + log(sum);
        }
    }
    free(z);
}

/* saved (the CPU's logsumexp rows) against the double reference. The
 * scores are fp32 dot products of hd <= 16 terms of O(1) (error ~1e-6) and
 * lse = max + log(sum) adds a few ulps of an O(10) value: 1e-5 + 1e-5 rel. */
static void check_lse(const char *what, const float *saved, const float *qkv, int64_t s, int64_t b,
                      int64_t al, int64_t hd) {
    double *lse = malloc(sizeof(double) * (size_t)(b * al * s));
    float *want = fmalloc(b * al * s);
    ref_lse(qkv, lse, s, b, al, hd);
    for (int64_t i = 0; i < b * al * s; i++) want[i] = (float)lse[i];
    check_arr(what, saved, want, b * al * s, 1e-5, 1e-5);
    free(lse);
    free(want);
}

static void test_attention(ptdp_backend *o) {
    const int64_t s = 7, b = 2, al = 3, hd = 5;
    const int64_t ld3 = b * al * 3 * hd, ldc = b * al * hd;
    float *qkv = fmalloc(s * ld3), *ctx = fmalloc(s * ldc), *ref = fmalloc(s * ldc);
    CHECK(o->attention_saved_floats(o, s, b, al) == b * al * s);
    float *saved = fmalloc(b * al * s), *pref = fmalloc(b * al * s * s);
    float *scratch = fmalloc(ptdp_attention_scratch_floats(s, omp_get_max_threads()));
    float *S = fmalloc(s * s);
    fill_normal(qkv, s * ld3, 6, 1.5f);
    ptdp_dropout nodrop = {0};
    fill_const(saved, b * al * s, NAN);
    fill_const(ctx, s * ldc, NAN);
    o->attention_fwd(o, qkv, ctx, saved, scratch, s, b, al, hd, nodrop);
    ptdp_ref_attention_fwd(qkv, ref, s, b, al, hd);
    check_arr("attention_fwd ctx", ctx, ref, s * ldc, 1e-5, 1e-5);
    check_lse("attention_fwd saved logsumexp", saved, qkv, s, b, al, hd);
    /* pref[bi, j] = softmax_causal(q k^T / sqrt(hd)), for the dropout reference */
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t j = 0; j < al; j++) {
            const float *Q = qkv + bi * al * 3 * hd + j * 3 * hd, *K = Q + hd;
            for (int64_t i = 0; i < s; i++)
                for (int64_t k = 0; k < s; k++) {
                    double d = 0;
                    for (int64_t e = 0; e < hd; e++) d += (double)Q[i * ld3 + e] * K[k * ld3 + e];
                    S[i * s + k] = (float)d;
                }
            ptdp_ref_softmax_causal(S, pref + (bi * al + j) * s * s, s, 1.0f / sqrtf((float)hd));
        }

    /* With dropout the saved rows are unchanged (statistics of the undropped
     * probabilities) and ctx = dropout(P) V, the mask element of
     * (task = bi*al + j, i, k) being offset + task*s*s + i*s + k. */
    ptdp_dropout drop = {.p = 0.25f, .key = ptdp_rng_key_make(7, "attn"), .offset = 1000};
    o->attention_fwd(o, qkv, ctx, saved, scratch, s, b, al, hd, drop);
    check_lse("attention_fwd saved logsumexp (dropout)", saved, qkv, s, b, al, hd);
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t j = 0; j < al; j++) {
            int64_t task = bi * al + j;
            const float *V = qkv + bi * al * 3 * hd + j * 3 * hd + 2 * hd, *P = pref + task * s * s;
            for (int64_t i = 0; i < s; i++)
                for (int64_t e = 0; e < hd; e++) {
                    double acc = 0;
                    for (int64_t k = 0; k < s; k++)
                        if (ptdp__dropout_keep(drop, (uint64_t)(task * s * s + i * s + k)))
                            acc += (double)P[i * s + k] / (1.0 - drop.p) * V[k * ld3 + e];
                    ref[i * ldc + bi * al * hd + j * hd + e] = (float)acc;
                }
        }
    check_arr("attention_fwd ctx (dropout)", ctx, ref, s * ldc, 1e-5, 1e-5);
    free(qkv);
    free(ctx);
    free(ref);
    free(saved);
    free(pref);
    free(scratch);
    free(S);
}

/* The attention is tiled (128 x 128 tiles of query rows and keys at s > 128,
 * one tile at s <= 128) with an online softmax in the forward and the
 * probabilities recomputed tile by tile in the backward. Forward (ctx, saved
 * logsumexp) and backward (dqkv) are checked against plain double loops over
 * the full matrices, with and without dropout, for shapes that cover one
 * row (s = 1), one tile, exact multiples of the tile (128: one tile; 256:
 * two) and ragged last tiles (65 with one tile, 130, 300), several heads
 * and sequences. The dropout reference draws its mask with
 * ptdp__dropout_keep at element task*s*s + i*s + k, the numbering of
 * kernels.h that the previous probs-storing kernel used, so with p = 0.1 the
 * kernel equals that kernel's result up to fp32 rounding: a wrong mask
 * element would be off by O(1). Tolerance: sums of up to s = 300 products of
 * O(1) values in fp32 (relative error ~s * 6e-8 = 2e-5 at worst), so 1e-4
 * relative + 1e-5 absolute, the bound the probs-storing kernel was held to. */
static void check_attention_tiled(ptdp_backend *o, int64_t s, int64_t b, int64_t al, int64_t hd,
                                  float p) {
    const int64_t ld3 = b * al * 3 * hd, ldc = b * al * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float *qkv = fmalloc(s * ld3), *ctx = fmalloc(s * ldc), *ref = fmalloc(s * ldc);
    float *dctx = fmalloc(s * ldc), *dqkv = fmalloc(s * ld3), *dref = fmalloc(s * ld3);
    float *saved = fmalloc(o->attention_saved_floats(o, s, b, al)), *pref = fmalloc(s * s);
    float *scratch = fmalloc(ptdp_attention_scratch_floats(s, omp_get_max_threads()));
    float *S = fmalloc(s * s);
    double *dP = malloc(sizeof(double) * (size_t)(s * s));
    fill_normal(qkv, s * ld3, 16 + (uint64_t)s, 1.0f);
    fill_normal(dctx, s * ldc, 17 + (uint64_t)s, 1.0f);
    ptdp_dropout drop = {0};
    if (p > 0.0f) drop = (ptdp_dropout){.p = p, .key = ptdp_rng_key_make(3, "attn"), .offset = 5};
    fill_const(saved, o->attention_saved_floats(o, s, b, al), NAN);
    fill_const(ctx, s * ldc, NAN);
    fill_const(dqkv, s * ld3, NAN);
    o->attention_fwd(o, qkv, ctx, saved, scratch, s, b, al, hd, drop);
    o->attention_bwd(o, dctx, qkv, ctx, saved, dqkv, scratch, s, b, al, hd, drop);
    for (int64_t task = 0; task < b * al; task++) {
        int64_t bi = task / al, j = task % al;
        const float *Q = qkv + bi * al * 3 * hd + j * 3 * hd, *K = Q + hd, *V = Q + 2 * hd;
        const float *dC = dctx + bi * al * hd + j * hd;
        float *P = pref;
        for (int64_t i = 0; i < s; i++)
            for (int64_t k = 0; k < s; k++) {
                double d = 0;
                for (int64_t e = 0; e < hd; e++) d += (double)Q[i * ld3 + e] * K[k * ld3 + e];
                S[i * s + k] = (float)d;
            }
        ptdp_ref_softmax_causal(S, P, s, scale);
        /* keep-mask factor of element (i, k) */
#define MK(i, k)                                                                       \
    (drop.p > 0.0f ? (ptdp__dropout_keep(drop, (uint64_t)(task * s * s + (i)*s + (k))) \
                          ? 1.0 / (1.0 - drop.p)                                       \
                          : 0.0)                                                       \
                   : 1.0)
        for (int64_t i = 0; i < s; i++)
            for (int64_t e = 0; e < hd; e++) {
                double acc = 0;
                for (int64_t k = 0; k <= i; k++) acc += P[i * s + k] * MK(i, k) * V[k * ld3 + e];
                ref[i * ldc + bi * al * hd + j * hd + e] = (float)acc;
            }
        float *dQ = dref + bi * al * 3 * hd + j * 3 * hd, *dK = dQ + hd, *dV = dQ + 2 * hd;
        for (int64_t i = 0; i < s; i++) {
            double dot = 0;
            for (int64_t k = 0; k <= i; k++) {
                double d = 0;
                for (int64_t e = 0; e < hd; e++) d += (double)dC[i * ldc + e] * V[k * ld3 + e];
                dP[i * s + k] = d * MK(i, k);
                dot += dP[i * s + k] * P[i * s + k];
            }
            for (int64_t k = 0; k <= i; k++)
                dP[i * s + k] = scale * P[i * s + k] * (dP[i * s + k] - dot);
        }
        for (int64_t r = 0; r < s; r++)
            for (int64_t e = 0; e < hd; e++) {
                double q = 0, kk = 0, v = 0;
                for (int64_t k = 0; k <= r; k++) q += dP[r * s + k] * K[k * ld3 + e];
                for (int64_t i = r; i < s; i++) {
                    kk += dP[i * s + r] * Q[i * ld3 + e];
                    v += P[i * s + r] * MK(i, r) * dC[i * ldc + e];
                }
                dQ[r * ld3 + e] = (float)q, dK[r * ld3 + e] = (float)kk, dV[r * ld3 + e] = (float)v;
            }
#undef MK
    }
    char w[96];
    snprintf(w, sizeof w, "attention (s=%lld b=%lld al=%lld hd=%lld p=%g)", (long long)s,
             (long long)b, (long long)al, (long long)hd, (double)p);
    char w2[128];
    snprintf(w2, sizeof w2, "%s saved logsumexp", w);
    check_lse(w2, saved, qkv, s, b, al, hd);
    snprintf(w2, sizeof w2, "%s ctx", w);
    check_arr(w2, ctx, ref, s * ldc, 1e-4, 1e-5);
    snprintf(w2, sizeof w2, "%s dqkv", w);
    check_arr(w2, dqkv, dref, s * ld3, 1e-4, 1e-5);
    free(qkv), free(ctx), free(ref), free(dctx), free(dqkv), free(dref);
    free(saved), free(pref), free(scratch), free(S), free(dP);
}

static void test_attention_tiled(ptdp_backend *o) {
    const int64_t shapes[][4] = {/* s, b, al, hd */
                                 {1, 1, 1, 8},    {1, 2, 3, 4},    {7, 2, 3, 5},   {65, 1, 2, 8},
                                 {128, 1, 1, 16}, {130, 1, 2, 16}, {256, 2, 1, 8}, {300, 2, 1, 16}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int pass = 0; pass < 2; pass++)
            check_attention_tiled(o, shapes[k][0], shapes[k][1], shapes[k][2], shapes[k][3],
                                  pass ? 0.1f : 0.0f);
    /* the tiles' GEMMs through the other library's backend */
    check_attention_tiled(test_cpu_backend(PTDP_GEMM_OPENBLAS, PTDP_DTYPE_FP32), 300, 2, 1, 16,
                          0.1f);
}

/* Dropout masks are drawn 128 or 256 elements per Philox batch: odd offsets and
 * lengths must still give element e the mask ptdp__dropout_keep(e). */
static void test_dropout_batched(ptdp_backend *o) {
    const int64_t N = 7, h = 203, n = N * h;
    ptdp_dropout d = {.p = 0.1f, .key = ptdp_rng_key_make(99, "drop"), .offset = 3};
    float *x = fmalloc(n), *y = fmalloc(n), *db = fmalloc(h);
    fill_normal(x, n, 21, 1.0f);
    memcpy(y, x, sizeof(float) * (size_t)n);
    o->dropout_fwd(o, y, n, d);
    int64_t bad = 0;
    for (int64_t e = 0; e < n; e++)
        bad += y[e] != (ptdp__dropout_keep(d, (uint64_t)e) ? x[e] * (1.0f / (1.0f - d.p)) : 0.0f);
    fill_const(db, h, 0.0f);
    o->bias_dropout_add_bwd(o, x, y, db, N, h, d);
    for (int64_t e = 0; e < n; e++)
        bad += y[e] != (ptdp__dropout_keep(d, (uint64_t)e) ? x[e] * (1.0f / (1.0f - d.p)) : 0.0f);
    /* both widths of the Philox batch (32 blocks on AVX2, 64 with AVX-512) */
    for (int wide = 0; wide < 2; wide++) {
        ptdp__dropout_apply_path(x, y, n, d, 0, wide);
        for (int64_t e = 0; e < n; e++)
            bad +=
                y[e] != (ptdp__dropout_keep(d, (uint64_t)e) ? x[e] * (1.0f / (1.0f - d.p)) : 0.0f);
    }
    printf("dropout batched masks: %lld mismatches\n", (long long)bad);
    CHECK(bad == 0);
    free(x), free(y), free(db);
}

/* Parameter initialisation draws its normals 32 Philox blocks at a time:
 * every element must be ptdp_rng_normal's value at its index, bit for bit,
 * for odd lengths, and for indices that carry into the counter's high word. */
static void test_rng_normal_batched(void) {
    const ptdp_rng_key key = ptdp_rng_key_make(1234, "transformer.h.0.attn.c_attn.weight");
    const uint64_t starts[] = {0, 5, 4294967296ull - 40, 123456789012ull};
    const int64_t lens[] = {1, 31, 32, 33, 100};
    int64_t bad = 0, total = 0;
    float out[100];
    for (size_t a = 0; a < sizeof starts / sizeof starts[0]; a++)
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
            const float scale = a % 2 ? 0.02f : 1.0f;
            ptdp_rng_normal_n(key, starts[a], lens[l], scale, out);
            for (int64_t i = 0; i < lens[l]; i++, total++) {
                const float want = scale * ptdp_rng_normal(key, starts[a] + (uint64_t)i);
                bad += memcmp(&out[i], &want, sizeof want) != 0;
            }
        }
    printf("batched normals: %lld of %lld differ from ptdp_rng_normal\n", (long long)bad,
           (long long)total);
    CHECK(bad == 0 && total == 4 * (1 + 31 + 32 + 33 + 100));
}

/* ---- embeddings ----------------------------------------------------------- */

static void test_embed(ptdp_backend *o) {
    const int64_t s = 5, b = 2, ld = 7, h = 6, V = 10, v0 = 4, Vl = 3;
    int32_t tokens[2 * 7];
    for (int i = 0; i < b * ld; i++) tokens[i] = (int32_t)((i * 7 + 3) % V);
    tokens[0] = 4; /* first owned id */
    tokens[1] = 6; /* last owned id */
    tokens[2] = 7; /* just past the slice */
    tokens[3] = 3; /* just before */
    float *wte = fmalloc(Vl * h), *wpe = fmalloc(s * h), *out = fmalloc(s * b * h),
          *ref = fmalloc(s * b * h);
    fill_normal(wte, Vl * h, 8, 1.0f);
    fill_normal(wpe, s * h, 9, 1.0f);
    fill_const(out, s * b * h, NAN);
    o->embed_fwd(o, tokens, ld, wte, v0, Vl, out, s, b, h);
    int owned = 0, unowned = 0;
    for (int64_t si = 0; si < s; si++)
        for (int64_t bi = 0; bi < b; bi++) {
            int64_t t = tokens[bi * ld + si] - v0;
            int in = t >= 0 && t < Vl;
            owned += in;
            unowned += !in;
            for (int64_t i = 0; i < h; i++) ref[(si * b + bi) * h + i] = in ? wte[t * h + i] : 0.0f;
        }
    CHECK(owned > 0 && unowned > 0);
    check_arr("embed_fwd", out, ref, s * b * h, 0, 0);
    o->pos_add_fwd(o, out, wpe, s, b, h);
    for (int64_t si = 0; si < s; si++)
        for (int64_t bi = 0; bi < b; bi++)
            for (int64_t i = 0; i < h; i++) ref[(si * b + bi) * h + i] += wpe[si * h + i];
    check_arr("pos_add_fwd", out, ref, s * b * h, 0, 0);
    free(wte);
    free(wpe);
    free(out);
    free(ref);
}

/* ---- vocabulary-parallel cross-entropy ----------------------------------- */

static void test_xent_split(ptdp_backend *o, int T) {
    const int64_t s = 3, b = 4, ld = 5, N = s * b, V = 13, Vl = 8, Vpad = Vl * T;
    int32_t targets[4 * 5];
    for (int i = 0; i < b * ld; i++) targets[i] = (int32_t)((i * 5 + 1) % V);
    targets[0] = 0;
    targets[1] = (int32_t)(V - 1);
    targets[2] = (int32_t)Vl; /* first column of slice 1 */
    float *full = fmalloc(N * Vpad), *sl = fmalloc(N * Vl);
    fill_normal(full, N * Vpad, 10, 2.0f);
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = V; c < Vpad; c++) full[n * Vpad + c] = 100.0f; /* padding must not win */
    float gmax[12], sumexp[12], tgt[12], loss[12], part[12], part2[12];
    int32_t trow[12]; /* target of row n = si*b + bi */
    for (int64_t n = 0; n < N; n++) trow[n] = targets[(n % b) * ld + n / b];
    fill_const(gmax, N, -INFINITY);
    for (int k = 0; k < T; k++) {
        for (int64_t n = 0; n < N; n++)
            memcpy(sl + n * Vl, full + n * Vpad + k * Vl, sizeof(float) * Vl);
        o->xent_max(o, sl, part, N, Vl, k * Vl, V);
        if (k * Vl >= V)
            for (int64_t n = 0; n < N; n++) CHECK(isinf(part[n]) && part[n] < 0);
        for (int64_t n = 0; n < N; n++) gmax[n] = fmaxf(gmax[n], part[n]); /* all-reduce max */
    }
    fill_const(sumexp, N, 0.0f);
    fill_const(tgt, N, 0.0f);
    for (int k = 0; k < T; k++) {
        for (int64_t n = 0; n < N; n++)
            memcpy(sl + n * Vl, full + n * Vpad + k * Vl, sizeof(float) * Vl);
        o->xent_sums(o, sl, gmax, targets, ld, part, part2, s, b, Vl, k * Vl, V);
        /* the slice now holds exp(l - gmax), 0 at padding (xent_bwd's input) */
        int64_t ebad = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t c = 0; c < Vl; c++) {
                double l = full[n * Vpad + k * Vl + c];
                double want = k * Vl + c < V ? exp(l - gmax[n]) : 0.0;
                ebad += fabs(sl[n * Vl + c] - want) > 1e-6 * want; /* exactly 0 at padding */
            }
        CHECK(ebad == 0);
        for (int64_t n = 0; n < N; n++) { /* all-reduce sums */
            sumexp[n] += part[n];
            tgt[n] += part2[n];
        }
    }
    o->xent_loss(o, sumexp, gmax, tgt, loss, N);
    float lref[12], mref[12];
    for (int64_t n = 0; n < N; n++) {
        const float *l = full + n * Vpad;
        double mx = -INFINITY, sum = 0;
        for (int64_t c = 0; c < V; c++) mx = fmax(mx, l[c]);
        for (int64_t c = 0; c < V; c++) sum += exp(l[c] - mx);
        mref[n] = (float)mx;
        lref[n] = (float)(log(sum) + mx - l[trow[n]]);
    }
    check_arr("xent gmax", gmax, mref, N, 0, 0);
    check_arr("xent loss", loss, lref, N, 2e-6, 2e-6);
    double mean = 0;
    for (int64_t n = 0; n < N; n++) mean += loss[n];
    mean /= (double)N;
    CHECK_CLOSE(mean, ptdp_ref_xent(full, trow, N, Vpad, V), 2e-6, 2e-6);
    free(full);
    free(sl);
}

/* ---- fastmath -------------------------------------------------------------- */

/* fastmath.h promises < 3e-7 relative for exp and tanh (tanh uses a Taylor
 * series to x^15 below |x| = 0.55, where (1 - e)/(1 + e) would amplify exp's
 * error by e/(1-e); measured worst 1.7e-7). */
#define TANH_RTOL 3e-7

static void test_fastmath(void) {
    double worst_e = 0, worst_t = 0;
    float at_e = 0, at_t = 0;
    for (int64_t i = -2000000; i <= 2000000; i++) {
        float x = (float)i * 1e-5f;
        double e = exp((double)x), te = tanh((double)x);
        float fe = ptdp__expf(x), ft = ptdp__tanhf(x);
        if (fabs(e) > 1e-30) {
            double r = fabs(fe - e) / fabs(e);
            if (r > worst_e) worst_e = r, at_e = x;
        }
        if (fabs(te) > 1e-30) {
            double r = fabs(ft - te) / fabs(te);
            if (r > worst_t) worst_t = r, at_t = x;
        }
    }
    printf("fastmath: exp max rel err %.3g at %g, tanh max rel err %.3g at %g\n", worst_e,
           (double)at_e, worst_t, (double)at_t);
    CHECK(worst_e < 3e-7);
    CHECK(worst_t < TANH_RTOL);
    CHECK(ptdp__tanhf(0.0f) == 0.0f);
    CHECK(ptdp__tanhf(30.0f) == 1.0f && ptdp__tanhf(-30.0f) == -1.0f);
    CHECK(ptdp__expf(-200.0f) >= 0.0f && ptdp__expf(-200.0f) < 1e-37f);
    CHECK(isfinite(ptdp__expf(200.0f)));
}

/* ---- dropout ---------------------------------------------------------------- */

static void test_dropout(ptdp_backend *o) {
    const int64_t N = 100, h = 100, n = N * h;
    float *x = fmalloc(n), *bias = fmalloc(h), *zero = fmalloc(n), *out = fmalloc(n),
          *out2 = fmalloc(n);
    float *dx = fmalloc(n), *dout = fmalloc(n), *ones = fmalloc(n);
    fill_normal(x, n, 13, 1.0f);
    fill_normal(bias, h, 14, 1.0f);
    fill_const(zero, n, 0.0f);
    ptdp_dropout d = {.p = 0.3f, .key = ptdp_rng_key_make(1234, "drop"), .offset = 0};
    o->bias_dropout_add_fwd(o, x, bias, zero, out, N, h, d);
    int64_t kept = 0, badscale = 0;
    for (int64_t r = 0; r < N; r++)
        for (int64_t j = 0; j < h; j++) {
            float u = x[r * h + j] + bias[j], y = out[r * h + j];
            if (y != 0.0f) {
                kept++;
                if (fabsf(y - u / 0.7f) > 1e-6f * (1.0f + fabsf(u))) badscale++;
            }
            if ((y != 0.0f) != ptdp__dropout_keep(d, (uint64_t)(r * h + j))) badscale++;
        }
    double frac = (double)kept / (double)n;
    printf("dropout p=0.3: kept %.4f\n", frac);
    CHECK(fabs(frac - 0.7) < 0.02);
    CHECK(badscale == 0);
    /* same key and offset: same mask */
    o->bias_dropout_add_fwd(o, x, bias, zero, out2, N, h, d);
    CHECK(memcmp(out, out2, sizeof(float) * (size_t)n) == 0);
    /* other offset / other key: different masks */
    ptdp_dropout d_off = d, d_key = d;
    d_off.offset = 7;
    d_key.key = ptdp_rng_key_make(1235, "drop");
    int64_t diff = 0;
    o->bias_dropout_add_fwd(o, x, bias, zero, out2, N, h, d_off);
    for (int64_t e = 0; e < n; e++) diff += (out[e] == 0.0f) != (out2[e] == 0.0f);
    CHECK(diff > n / 10);
    diff = 0;
    o->bias_dropout_add_fwd(o, x, bias, zero, out2, N, h, d_key);
    for (int64_t e = 0; e < n; e++) diff += (out[e] == 0.0f) != (out2[e] == 0.0f);
    CHECK(diff > n / 10);
    /* the offset shifts the stream: element e at offset 7 is element e+7 at 0 */
    int64_t shift_bad = 0;
    for (int64_t e = 0; e + 7 < n; e++)
        shift_bad += (out[e + 7] == 0.0f) != !ptdp__dropout_keep(d_off, (uint64_t)e);
    CHECK(shift_bad == 0);
    /* residual is added */
    o->bias_dropout_add_fwd(o, x, bias, x, out2, N, h, d);
    int64_t rbad = 0;
    for (int64_t e = 0; e < n; e++)
        rbad += fabsf(out2[e] - (x[e] + out[e])) > 1e-6f * (1.0f + fabsf(out2[e]));
    CHECK(rbad == 0);
    /* p = 0: exact x + bias + resid */
    ptdp_dropout d0 = {0};
    o->bias_dropout_add_fwd(o, x, bias, x, out2, N, h, d0);
    rbad = 0;
    for (int64_t r = 0; r < N; r++)
        for (int64_t j = 0; j < h; j++)
            rbad += out2[r * h + j] != x[r * h + j] + (x[r * h + j] + bias[j]);
    CHECK(rbad == 0);

    /* backward: the same mask and scale; dbias accumulates column sums of dx */
    fill_normal(dout, n, 15, 1.0f);
    float db[100], dbref[100];
    fill_const(db, h, 0.5f);
    o->bias_dropout_add_bwd(o, dout, dx, db, N, h, d);
    int64_t mbad = 0;
    for (int64_t j = 0; j < h; j++) {
        double acc = 0.5;
        for (int64_t r = 0; r < N; r++) {
            int64_t e = r * h + j;
            float want = out[e] != 0.0f ? dout[e] / 0.7f : 0.0f;
            if (fabsf(dx[e] - want) > 1e-6f * (1.0f + fabsf(want))) mbad++;
            acc += dx[e];
        }
        dbref[j] = (float)acc;
    }
    CHECK(mbad == 0);
    check_arr("bias_dropout_add_bwd dbias", db, dbref, h, 1e-5, 1e-5);

    /* plain dropout: same mask for the same site, bwd == fwd */
    fill_const(ones, n, 1.0f);
    o->dropout_fwd(o, ones, n, d);
    mbad = 0;
    for (int64_t e = 0; e < n; e++) mbad += (ones[e] != 0.0f) != (out[e] != 0.0f);
    CHECK(mbad == 0);
    fill_const(ones, n, 1.0f);
    o->dropout_bwd(o, ones, n, d);
    mbad = 0;
    for (int64_t e = 0; e < n; e++) mbad += (ones[e] != 0.0f) != (out[e] != 0.0f);
    CHECK(mbad == 0);
    memcpy(out2, x, sizeof(float) * (size_t)n);
    o->dropout_fwd(o, out2, n, d0);
    CHECK(memcmp(out2, x, sizeof(float) * (size_t)n) == 0);
    free(x);
    free(bias);
    free(zero);
    free(out);
    free(out2);
    free(dx);
    free(dout);
    free(ones);
}

int main(void) {
    ptdp_backend *o = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32);
    CHECK(o && o->name && !strcmp(o->name, "cpu/onednn"));
    test_gemm(o);
    test_ops_check();
    test_mask_rows(o);
    test_precision_tables();
    test_dropout_keying(o);
    test_layernorm(o);
    test_bias_gelu(o);
    test_attention(o);
    test_attention_tiled(o);
    test_dropout_batched(o);
    test_rng_normal_batched();
    test_embed(o);
    test_xent_split(o, 2);
    test_xent_split(o, 3); /* third slice lies wholly in the padding */
    test_fastmath();
    test_dropout(o);
    return test_done("test_kernels");
}
