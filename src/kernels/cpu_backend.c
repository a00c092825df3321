/* cpu_backend.c - the CPU compute backend: host memory and the table of CPU
 * kernels. A GPU backend is a second file like this one, with device memory
 * and CUDA kernels behind the same table. */
#define _DEFAULT_SOURCE /* madvise's MADV_HUGEPAGE */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/cpu.h"

/* One block per memory category, zeroed. Blocks of 2 MiB and more are
 * 2 MiB-aligned and asked for transparent huge pages: where the kernel gives
 * them only on request (THP "madvise", a common default), a GPT-2 124M rank
 * otherwise takes ~700,000 4 KiB page faults while zeroing its 2.6 GiB plan
 * (several seconds of start-up in a VM), and its GEMMs walk 4 KiB pages. */
static void *cpu_alloc(size_t bytes) {
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
static void cpu_free(void *p) { free(p); }
static void cpu_copy_bytes(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_download(void *host, const void *src, size_t bytes) { memcpy(host, src, bytes); }

static void cpu_zero(float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) x[i] = 0.0f;
}

static void cpu_quantize_none(float *x, int64_t n) { /* fp32: already on the grid */
    (void)x;
    (void)n;
}

static void cpu_copy(float *dst, const float *src, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) dst[i] = src[i];
}

/* One table per GEMM library: the library is the backend's state, chosen
 * when the table is chosen, not a process-wide switch. Attention's per-head
 * GEMMs go to the same library as the table's gemm. */
static void attn_fwd_onednn(const float *qkv, float *ctx, float *saved, float *scratch, int64_t s,
                            int64_t b, int64_t al, int64_t hd, ptdp_dropout drop) {
    ptdp__attention_fwd(ptdp__gemm_onednn, qkv, ctx, saved, scratch, s, b, al, hd, drop);
}
static void attn_bwd_onednn(const float *dctx, const float *qkv, const float *ctx,
                            const float *saved, float *dqkv, float *scratch, int64_t s, int64_t b,
                            int64_t al, int64_t hd, ptdp_dropout drop) {
    ptdp__attention_bwd(ptdp__gemm_onednn, dctx, qkv, ctx, saved, dqkv, scratch, s, b, al, hd,
                        drop);
}
static void attn_fwd_openblas(const float *qkv, float *ctx, float *saved, float *scratch, int64_t s,
                              int64_t b, int64_t al, int64_t hd, ptdp_dropout drop) {
    ptdp__attention_fwd(ptdp__gemm_openblas, qkv, ctx, saved, scratch, s, b, al, hd, drop);
}
static void attn_bwd_openblas(const float *dctx, const float *qkv, const float *ctx,
                              const float *saved, float *dqkv, float *scratch, int64_t s, int64_t b,
                              int64_t al, int64_t hd, ptdp_dropout drop) {
    ptdp__attention_bwd(ptdp__gemm_openblas, dctx, qkv, ctx, saved, dqkv, scratch, s, b, al, hd,
                        drop);
}

/* Every op but the GEMM-backed ones, shared by both tables. */
#define PTDP__CPU_COMMON_OPS                                                                      \
    .alloc = cpu_alloc, .free = cpu_free, .upload = cpu_copy_bytes, .download = cpu_download,     \
    .dtype = PTDP_DTYPE_FP32, .quantize = cpu_quantize_none, .zero = cpu_zero, .copy = cpu_copy,  \
    .layernorm_fwd = ptdp__layernorm_fwd, .layernorm_bwd = ptdp__layernorm_bwd,                   \
    .bias_add = ptdp__bias_add, .bias_bwd = ptdp__bias_bwd, .bias_gelu_fwd = ptdp__bias_gelu_fwd, \
    .bias_gelu_bwd = ptdp__bias_gelu_bwd, .bias_dropout_add_fwd = ptdp__bias_dropout_add_fwd,     \
    .bias_dropout_add_bwd = ptdp__bias_dropout_add_bwd, .dropout_fwd = ptdp__dropout_inplace,     \
    .dropout_bwd = ptdp__dropout_inplace, .embed_fwd = ptdp__embed_fwd,                           \
    .embed_bwd = ptdp__embed_bwd, .pos_add_fwd = ptdp__pos_add_fwd,                               \
    .pos_add_bwd = ptdp__pos_add_bwd, .xent_max = ptdp__xent_max, .xent_sums = ptdp__xent_sums,   \
    .xent_loss = ptdp__xent_loss, .xent_bwd = ptdp__xent_bwd, .adamw = ptdp__adamw,               \
    .sumsq = ptdp__sumsq, .sum = ptdp__sum, .mask_rows = ptdp__mask_rows,                         \
    .attention_saved_floats = ptdp__attention_saved_floats,

static const ptdp_ops cpu_ops[] = {
    [PTDP_GEMM_ONEDNN] = {.name = "cpu/onednn",
                          .gemm = ptdp__gemm_onednn,
                          .attention_fwd = attn_fwd_onednn,
                          .attention_bwd = attn_bwd_onednn,
                          PTDP__CPU_COMMON_OPS},
    [PTDP_GEMM_OPENBLAS] = {.name = "cpu/openblas",
                            .gemm = ptdp__gemm_openblas,
                            .attention_fwd = attn_fwd_openblas,
                            .attention_bwd = attn_bwd_openblas,
                            PTDP__CPU_COMMON_OPS},
};

const ptdp_ops *ptdp_cpu_ops_lib(ptdp_gemm_lib lib) {
    PTDP_ASSERT(lib >= 0 && lib < (int)(sizeof cpu_ops / sizeof cpu_ops[0]));
    return &cpu_ops[lib];
}
const ptdp_ops *ptdp_cpu_ops(void) { return &cpu_ops[PTDP_GEMM_ONEDNN]; }
