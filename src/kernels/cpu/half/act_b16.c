/* act_b16.c - bias + GeLU and its backward on values stored in bf16, for
 * the native bf16 backend's MLP (precision.c, whose fc, gl and dfc live in
 * bf16): act.c's row functions on rows widened exactly, results narrowed to
 * nearest even, so the values are those of act.c's _r forms with the bf16
 * rounding; the bias gradient sums the bf16 values in act.c's order. */
#include "kernels/cpu/half/half.h"

/* each row GELU_CHUNK values at a time through fp32 rows on the stack */
enum { GELU_CHUNK = 512 };

void ptdp__bias_gelu_fwd_b16(const uint16_t *x, const float *bias, uint16_t *out, int64_t N,
                             int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
        float u[GELU_CHUNK], o[GELU_CHUNK];
        for (int64_t j0 = 0; j0 < n; j0 += GELU_CHUNK) {
            const int64_t m = n - j0 < GELU_CHUNK ? n - j0 : GELU_CHUNK;
            ptdp_bf16_to_f32_n(u, x + r * n + j0, m);
            ptdp__gelu_fwd_row(u, bias + j0, o, m);
            ptdp_f32_to_bf16_n(out + r * n + j0, o, m);
        }
    }
}

/* act.c's column sums over bf16 values: the same sums in the same order */
__attribute__((always_inline)) static inline void bias_cols(const uint16_t *dy, float *dbias,
                                                            int64_t N, int64_t n, int64_t j0) {
    const int64_t j1 = j0 + 64 < n ? j0 + 64 : n;
    float acc[64] = {0};
    for (int64_t r = 0; r < N; r++)
        for (int64_t j = j0; j < j1; j++) acc[j - j0] += ptdp_bf16_to_f32(dy[r * n + j]);
    for (int64_t j = j0; j < j1; j++) dbias[j] += acc[j - j0];
}

void ptdp__bias_bwd_b16(const uint16_t *dy, float *dbias, int64_t N, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t j0 = 0; j0 < n; j0 += 64) bias_cols(dy, dbias, N, n, j0);
}

void ptdp__bias_gelu_bwd_b16(const uint16_t *dout, const uint16_t *x, const float *bias,
                             uint16_t *dx, float *dbias, int64_t N, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
        float gr[GELU_CHUNK], u[GELU_CHUNK], d[GELU_CHUNK];
        for (int64_t j0 = 0; j0 < n; j0 += GELU_CHUNK) {
            const int64_t m = n - j0 < GELU_CHUNK ? n - j0 : GELU_CHUNK, e = r * n + j0;
            ptdp_bf16_to_f32_n(gr, dout + e, m);
            ptdp_bf16_to_f32_n(u, x + e, m);
            ptdp__gelu_bwd_row(gr, u, bias + j0, d, m);
            ptdp_f32_to_bf16_n(dx + e, d, m);
        }
    }
    ptdp__bias_bwd_b16(dx, dbias, N, n);
}
