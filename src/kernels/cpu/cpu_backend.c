/* cpu_backend.c - the CPU compute backend: ptdp__cpu_backend_open makes an
 * instance (ptdp__cpu) with host memory and the fp32 ops of its GEMM
 * library, then, for a 16-bit dtype, precision.c's ops over them. The ops
 * here adapt the plain kernels (norm.c, act.c, attention.c, rope.c,
 * embed_xent.c, optim_ops.c, ...), which take no instance, to the backend's calls. A GPU
 * backend is a second file like this one (cuda/cuda_backend.cu), with
 * device memory and CUDA kernels behind the same struct. */
#define _DEFAULT_SOURCE /* madvise's MADV_HUGEPAGE */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/cpu/cpu.h"

/* One block per memory category, zeroed. Blocks of 2 MiB and more are
 * 2 MiB-aligned and asked for transparent huge pages: where the kernel gives
 * them only on request (THP "madvise", a common default), a GPT-2 124M rank
 * otherwise takes ~700,000 4 KiB page faults while zeroing its 2.6 GiB plan
 * (several seconds of start-up in a VM), and its GEMMs walk 4 KiB pages. */
static void *cpu_alloc(ptdp_backend *be, size_t bytes) {
    (void)be;
    const size_t huge = (size_t)2 << 20;
    size_t n = (bytes + 63) & ~(size_t)63;
    if (n < huge) {
        void *p = aligned_alloc(64, n ? n : 64);
        if (p) memset(p, 0, n ? n : 64);
        return p;
    }
    n = (n + huge - 1) & ~(huge - 1);
    char *p = aligned_alloc(huge, n);
    if (!p) return NULL;
    (void)madvise(p, n, MADV_HUGEPAGE); /* a hint: without THP, 4 KiB pages */
    const int64_t pages = (int64_t)(n / huge);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < pages; i++) memset(p + (size_t)i * huge, 0, huge);
    return p;
}
static void cpu_free(ptdp_backend *be, void *p) {
    (void)be;
    free(p);
}
static void cpu_upload(ptdp_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    memcpy(dst, src, bytes);
}
static void cpu_download(ptdp_backend *be, void *host, const void *src, size_t bytes) {
    (void)be;
    memcpy(host, src, bytes);
}

static void cpu_zero(ptdp_backend *be, float *x, int64_t n) {
    (void)be;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) x[i] = 0.0f;
}

static void cpu_quantize_none(ptdp_backend *be, float *x, int64_t n) { /* fp32: on the grid */
    (void)be, (void)x, (void)n;
}

static void cpu_copy(ptdp_backend *be, float *dst, const float *src, int64_t n) {
    (void)be;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) dst[i] = src[i];
}

/* ---- the fp32 ops: the plain kernels, the instance unused ----------------- */

static void cpu_layernorm_fwd(ptdp_backend *be, const float *x, const float *w, const float *b,
                              float *out, float *mean, float *rstd, int64_t N, int64_t h,
                              float eps) {
    (void)be;
    ptdp__layernorm_fwd(x, w, b, out, mean, rstd, N, h, eps);
}
static void cpu_layernorm_bwd(ptdp_backend *be, const float *dout, const float *x, const float *w,
                              const float *mean, const float *rstd, float *dx, float *dw, float *db,
                              int64_t N, int64_t h) {
    (void)be;
    ptdp__layernorm_bwd(dout, x, w, mean, rstd, dx, dw, db, N, h);
}
static void cpu_bias_add(ptdp_backend *be, float *y, const float *bias, int64_t N, int64_t n) {
    (void)be;
    ptdp__bias_add(y, bias, N, n);
}
static void cpu_bias_bwd(ptdp_backend *be, const float *dy, float *dbias, int64_t N, int64_t n) {
    (void)be;
    ptdp__bias_bwd(dy, dbias, N, n);
}
static void cpu_bias_gelu_fwd(ptdp_backend *be, const float *x, const float *bias, float *out,
                              int64_t N, int64_t n) {
    (void)be;
    ptdp__bias_gelu_fwd(x, bias, out, N, n);
}
static void cpu_bias_gelu_bwd(ptdp_backend *be, const float *dout, const float *x,
                              const float *bias, float *dx, float *dbias, int64_t N, int64_t n) {
    (void)be;
    ptdp__bias_gelu_bwd(dout, x, bias, dx, dbias, N, n);
}
static void cpu_bias_dropout_add_fwd(ptdp_backend *be, const float *x, const float *bias,
                                     const float *resid, float *out, int64_t N, int64_t h,
                                     ptdp_dropout drop) {
    (void)be;
    ptdp__bias_dropout_add_fwd(x, bias, resid, out, N, h, drop);
}
static void cpu_bias_dropout_add_bwd(ptdp_backend *be, const float *dout, float *dx, float *dbias,
                                     int64_t N, int64_t h, ptdp_dropout drop) {
    (void)be;
    ptdp__bias_dropout_add_bwd(dout, dx, dbias, N, h, drop);
}
static void cpu_dropout(ptdp_backend *be, float *x, int64_t n, ptdp_dropout drop) {
    (void)be;
    ptdp__dropout_inplace(x, n, drop);
}
static int64_t cpu_attention_saved_floats(ptdp_backend *be, int64_t s, int64_t b, int64_t al) {
    (void)be;
    return ptdp_attention_saved_floats_cpu(s, b, al);
}
static int64_t cpu_attention_scratch_floats(ptdp_backend *be, int64_t s) {
    (void)be;
    return ptdp_attention_scratch_floats(s, omp_get_max_threads());
}
static void cpu_embed_fwd(ptdp_backend *be, const int32_t *tokens, int64_t ld, const float *wte,
                          int64_t v0, int64_t Vl, float *out, int64_t s, int64_t b, int64_t h) {
    (void)be;
    ptdp__embed_fwd(tokens, ld, wte, v0, Vl, out, s, b, h);
}
static void cpu_embed_bwd(ptdp_backend *be, const int32_t *tokens, int64_t ld, const float *dout,
                          float *dwte, int64_t v0, int64_t Vl, int64_t s, int64_t b, int64_t h) {
    (void)be;
    ptdp__embed_bwd(tokens, ld, dout, dwte, v0, Vl, s, b, h);
}
static void cpu_pos_add_fwd(ptdp_backend *be, float *out, const float *wpe, int64_t s, int64_t b,
                            int64_t h) {
    (void)be;
    ptdp__pos_add_fwd(out, wpe, s, b, h);
}
static void cpu_pos_add_bwd(ptdp_backend *be, const float *dout, float *dwpe, int64_t s, int64_t b,
                            int64_t h) {
    (void)be;
    ptdp__pos_add_bwd(dout, dwpe, s, b, h);
}
static void cpu_xent_max(ptdp_backend *be, const float *logits, float *rowmax, int64_t N,
                         int64_t Vl, int64_t v0, int64_t V) {
    (void)be;
    ptdp__xent_max(logits, rowmax, N, Vl, v0, V);
}
static void cpu_xent_sums(ptdp_backend *be, float *logits, const float *gmax,
                          const int32_t *targets, int64_t ld, float *sumexp, float *tgt, int64_t s,
                          int64_t b, int64_t Vl, int64_t v0, int64_t V) {
    (void)be;
    ptdp__xent_sums(logits, gmax, targets, ld, sumexp, tgt, s, b, Vl, v0, V);
}
static void cpu_xent_loss(ptdp_backend *be, const float *sumexp, const float *gmax,
                          const float *tgt, float *loss, int64_t N) {
    (void)be;
    ptdp__xent_loss(sumexp, gmax, tgt, loss, N);
}
static void cpu_xent_bwd(ptdp_backend *be, float *logits, const float *sumexp,
                         const int32_t *targets, int64_t ld, int64_t s, int64_t b, int64_t Vl,
                         int64_t v0, int64_t V, float scale) {
    (void)be;
    ptdp__xent_bwd(logits, sumexp, targets, ld, s, b, Vl, v0, V, scale);
}
static int64_t cpu_mask_rows(ptdp_backend *be, float *x, int64_t width, const int32_t *tokens,
                             int64_t ld, int64_t s, int64_t b, int32_t id) {
    (void)be;
    return ptdp__mask_rows(x, width, tokens, ld, s, b, id);
}
static void cpu_adamw(ptdp_backend *be, float *param, const float *grad, float gscale, float *m,
                      float *v, int64_t n, float lr, float beta1, float beta2, float eps, float wd,
                      int64_t step) {
    (void)be;
    ptdp__adamw(param, grad, gscale, m, v, n, lr, beta1, beta2, eps, wd, step);
}
static double cpu_sumsq(ptdp_backend *be, const float *x, int64_t n) {
    (void)be;
    return ptdp__sumsq(x, n);
}
static double cpu_sum(ptdp_backend *be, const float *x, int64_t n) {
    (void)be;
    return ptdp__sum(x, n);
}

static void cpu_rmsnorm_fwd(ptdp_backend *be, const float *x, const float *w, float *out,
                            float *rstd, int64_t N, int64_t h, float eps) {
    (void)be;
    ptdp__rmsnorm_fwd(x, w, out, rstd, N, h, eps);
}
static void cpu_rmsnorm_bwd(ptdp_backend *be, const float *dout, const float *x, const float *w,
                            const float *rstd, float *dx, float *dw, int64_t N, int64_t h) {
    (void)be;
    ptdp__rmsnorm_bwd(dout, x, w, rstd, dx, dw, N, h);
}
static void cpu_swiglu_fwd(ptdp_backend *be, const float *x, const float *bias, float *out,
                           int64_t N, int64_t fl) {
    (void)be;
    ptdp__swiglu_fwd(x, bias, out, N, fl);
}
static void cpu_swiglu_bwd(ptdp_backend *be, const float *dout, const float *x, const float *bias,
                           float *dx, float *dbias, int64_t N, int64_t fl) {
    (void)be;
    ptdp__swiglu_bwd(dout, x, bias, dx, dbias, N, fl);
}
static void cpu_rope_fwd(ptdp_backend *be, float *qkv, const float *table, int64_t s, int64_t b,
                         int64_t al, int64_t gl, int64_t hd, int64_t rd, int64_t pos0) {
    (void)be;
    ptdp__rope_r(qkv, table, s, b, al, gl, hd, rd, pos0, 0, NULL);
}
static void cpu_rope_bwd(ptdp_backend *be, float *dqkv, const float *table, int64_t s, int64_t b,
                         int64_t al, int64_t gl, int64_t hd, int64_t rd, int64_t pos0) {
    (void)be;
    ptdp__rope_r(dqkv, table, s, b, al, gl, hd, rd, pos0, 1, NULL);
}

/* Attention's per-tile GEMMs go to the library of the instance's gemm;
 * multi-head attention is the grouped one with a group per head (gl = al):
 * one code path. */
#define PTDP__CPU_ATTN(L)                                                                          \
    static void attn_gqa_fwd_##L(ptdp_backend *be, const float *qkv, float *ctx, float *saved,     \
                                 float *scratch, int64_t s, int64_t b, int64_t al, int64_t gl,     \
                                 int64_t hd, ptdp_dropout drop) {                                  \
        ptdp__attention_fwd(be, ptdp__gemm_##L, qkv, ctx, saved, scratch, s, b, al, gl, hd, drop); \
    }                                                                                              \
    static void attn_gqa_bwd_##L(ptdp_backend *be, const float *dctx, const float *qkv,            \
                                 const float *ctx, const float *saved, float *dqkv,                \
                                 float *scratch, int64_t s, int64_t b, int64_t al, int64_t gl,     \
                                 int64_t hd, ptdp_dropout drop) {                                  \
        ptdp__attention_bwd(be, ptdp__gemm_##L, dctx, qkv, ctx, saved, dqkv, scratch, s, b, al,    \
                            gl, hd, drop);                                                         \
    }                                                                                              \
    static void attn_fwd_##L(ptdp_backend *be, const float *qkv, float *ctx, float *saved,         \
                             float *scratch, int64_t s, int64_t b, int64_t al, int64_t hd,         \
                             ptdp_dropout drop) {                                                  \
        ptdp__attention_fwd(be, ptdp__gemm_##L, qkv, ctx, saved, scratch, s, b, al, al, hd, drop); \
    }                                                                                              \
    static void attn_bwd_##L(ptdp_backend *be, const float *dctx, const float *qkv,                \
                             const float *ctx, const float *saved, float *dqkv, float *scratch,    \
                             int64_t s, int64_t b, int64_t al, int64_t hd, ptdp_dropout drop) {    \
        ptdp__attention_bwd(be, ptdp__gemm_##L, dctx, qkv, ctx, saved, dqkv, scratch, s, b, al,    \
                            al, hd, drop);                                                         \
    }
PTDP__CPU_ATTN(onednn)
PTDP__CPU_ATTN(openblas)

static void cpu_close(ptdp_backend *be) {
    ptdp__cpu *cs = ptdp__cpu_of(be);
    ptdp__cpu_half_free(cs);
    ptdp__gemm_free(cs);
    free(cs);
}

/* The fp32 backend over library lib; precision.c turns it into a 16-bit one. */
static void fp32_ops(ptdp_backend *be, ptdp_gemm_lib lib) {
    const int dn = lib == PTDP_GEMM_ONEDNN;
    *be = (ptdp_backend){
        .name = dn ? "cpu/onednn" : "cpu/openblas",
        .device = PTDP_DEVICE_CPU,
        .dtype = PTDP_DTYPE_FP32,
        .lib = lib,
        .caps = PTDP_CAP_FLASH_ATTENTION,
        .mlp_store = PTDP_DTYPE_FP32,
        .impl = be->impl,
        .alloc = cpu_alloc,
        .free = cpu_free,
        .upload = cpu_upload,
        .download = cpu_download,
        .zero = cpu_zero,
        .copy = cpu_copy,
        .quantize = cpu_quantize_none,
        .gemm = dn ? ptdp__gemm_onednn : ptdp__gemm_openblas,
        .layernorm_fwd = cpu_layernorm_fwd,
        .layernorm_bwd = cpu_layernorm_bwd,
        .bias_add = cpu_bias_add,
        .bias_bwd = cpu_bias_bwd,
        .bias_gelu_fwd = cpu_bias_gelu_fwd,
        .bias_gelu_bwd = cpu_bias_gelu_bwd,
        .bias_dropout_add_fwd = cpu_bias_dropout_add_fwd,
        .bias_dropout_add_bwd = cpu_bias_dropout_add_bwd,
        .dropout_fwd = cpu_dropout,
        .dropout_bwd = cpu_dropout,
        .attention_fwd = dn ? attn_fwd_onednn : attn_fwd_openblas,
        .attention_bwd = dn ? attn_bwd_onednn : attn_bwd_openblas,
        .attention_gqa_fwd = dn ? attn_gqa_fwd_onednn : attn_gqa_fwd_openblas,
        .attention_gqa_bwd = dn ? attn_gqa_bwd_onednn : attn_gqa_bwd_openblas,
        .rmsnorm_fwd = cpu_rmsnorm_fwd,
        .rmsnorm_bwd = cpu_rmsnorm_bwd,
        .swiglu_fwd = cpu_swiglu_fwd,
        .swiglu_bwd = cpu_swiglu_bwd,
        .rope_fwd = cpu_rope_fwd,
        .rope_bwd = cpu_rope_bwd,
        .attention_saved_floats = cpu_attention_saved_floats,
        .attention_scratch_floats = cpu_attention_scratch_floats,
        .embed_fwd = cpu_embed_fwd,
        .embed_bwd = cpu_embed_bwd,
        .pos_add_fwd = cpu_pos_add_fwd,
        .pos_add_bwd = cpu_pos_add_bwd,
        .xent_max = cpu_xent_max,
        .xent_sums = cpu_xent_sums,
        .xent_loss = cpu_xent_loss,
        .xent_bwd = cpu_xent_bwd,
        .mask_rows = cpu_mask_rows,
        .head_logits = ptdp_head_logits_composed,
        .head_bwd = ptdp_head_bwd_composed,
        .mlp_fwd = ptdp_mlp_fwd_composed,
        .mlp_bwd_b = ptdp_mlp_bwd_b_composed,
        .mlp_bwd_w = ptdp_mlp_bwd_w_composed,
        .adamw = cpu_adamw,
        .adamw_master = NULL, /* fp32: no master weights */
        .sumsq = cpu_sumsq,
        .sum = cpu_sum,
        .close = cpu_close,
    };
}

int ptdp__cpu_backend_open(ptdp_backend **out, const ptdp_backend_params *p) {
    PTDP_ASSERT(p->lib == PTDP_GEMM_ONEDNN || p->lib == PTDP_GEMM_OPENBLAS);
    PTDP_ASSERT(p->dtype == PTDP_DTYPE_FP32 || p->dtype == PTDP_DTYPE_BF16 ||
                p->dtype == PTDP_DTYPE_FP16);
    ptdp__cpu *cs = calloc(1, sizeof *cs);
    if (!cs) return ptdp_errorf(PTDP_ENOMEM, "out of memory for the CPU backend");
    cs->be.impl = cs;
    const char *c = getenv("PTDP_CHECK_WEIGHT_COPIES");
    cs->check_weights = c && c[0] && strcmp(c, "0") != 0;
    fp32_ops(&cs->be, p->lib);
    /* oneDNN's engine for its matmul primitives (and the native bf16 GEMM);
     * without one the library's GEMM runs through dnnl_sgemm alone */
    if (p->lib == PTDP_GEMM_ONEDNN) (void)ptdp__gemm_init(cs);
    if (p->dtype != PTDP_DTYPE_FP32) ptdp__cpu_set_precision(cs, p->dtype);
    *out = &cs->be;
    return PTDP_OK;
}
