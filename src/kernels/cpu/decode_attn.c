/* decode_attn.c - the offset-causal softmax for attention over a KV cache
 * (declared in kernels.h). The score and context GEMMs go through the backend's gemm in
 * src/model/generate.c; only the masked softmax lives here. Not here: the
 * full-sequence attention (attention.c), dropout (generation has none). */
#include "kernels/kernels.h"

#include <math.h>

void ptdp__decode_softmax(float *S, int64_t n, int64_t L, int64_t pos0, float scale) {
    for (int64_t i = 0; i < n; i++) {
        float *r = S + i * L;
        const int64_t valid = pos0 + i + 1;
        float mx = -INFINITY;
        for (int64_t j = 0; j < valid; j++) mx = fmaxf(mx, r[j] * scale);
        float sum = 0.0f;
        for (int64_t j = 0; j < valid; j++) {
            r[j] = expf(r[j] * scale - mx);
            sum += r[j];
        }
        const float inv = 1.0f / sum;
        for (int64_t j = 0; j < valid; j++) r[j] *= inv;
        for (int64_t j = valid; j < L; j++) r[j] = 0.0f;
    }
}
