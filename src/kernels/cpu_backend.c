/* cpu_backend.c - the CPU compute backend: host memory and the table of CPU
 * kernels. A GPU backend is a second file like this one, with device memory
 * and CUDA kernels behind the same table. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"

static void *cpu_alloc(size_t bytes) {
    size_t n = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, n ? n : 64);
    if (p) memset(p, 0, n ? n : 64);
    return p;
}
static void cpu_free(void *p) { free(p); }
static void cpu_copy_bytes(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_download(void *host, const void *src, size_t bytes) { memcpy(host, src, bytes); }

static void cpu_zero(float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) x[i] = 0.0f;
}

static void cpu_copy(float *dst, const float *src, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) dst[i] = src[i];
}

static const ptdp_ops cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy_bytes,
    .download = cpu_download,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .gemm = ptdp_cpu_gemm_call,
    .layernorm_fwd = ptdp__layernorm_fwd,
    .layernorm_bwd = ptdp__layernorm_bwd,
    .bias_add = ptdp__bias_add,
    .bias_bwd = ptdp__bias_bwd,
    .bias_gelu_fwd = ptdp__bias_gelu_fwd,
    .bias_gelu_bwd = ptdp__bias_gelu_bwd,
    .bias_dropout_add_fwd = ptdp__bias_dropout_add_fwd,
    .bias_dropout_add_bwd = ptdp__bias_dropout_add_bwd,
    .dropout_fwd = ptdp__dropout_inplace,
    .dropout_bwd = ptdp__dropout_inplace,
    .attention_fwd = ptdp__attention_fwd,
    .attention_bwd = ptdp__attention_bwd,
    .embed_fwd = ptdp__embed_fwd,
    .embed_bwd = ptdp__embed_bwd,
    .pos_add_fwd = ptdp__pos_add_fwd,
    .pos_add_bwd = ptdp__pos_add_bwd,
    .xent_max = ptdp__xent_max,
    .xent_sums = ptdp__xent_sums,
    .xent_loss = ptdp__xent_loss,
    .xent_bwd = ptdp__xent_bwd,
    .adamw = ptdp__adamw,
    .sumsq = ptdp__sumsq,
    .scale = ptdp__scale,
    .sum = ptdp__sum,
};

const ptdp_ops *ptdp_cpu_ops(void) { return &cpu_ops; }
