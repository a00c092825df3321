/* mask.c - the loss mask of --eod-mask-loss (Megatron's): rows of a
 * per-token buffer whose input token is the end-of-document id take no part
 * in the loss. */
#include "kernels/cpu/cpu.h"

int64_t ptdp__mask_rows(float *x, int64_t width, const int32_t *tokens, int64_t ld, int64_t s,
                        int64_t b, int32_t id) {
    int64_t kept = 0;
#pragma omp parallel for reduction(+ : kept) schedule(static)
    for (int64_t r = 0; r < s * b; r++) {
        const int64_t si = r / b, bi = r % b;
        if (tokens[bi * ld + si] != id) {
            kept++;
            continue;
        }
        for (int64_t j = 0; j < width; j++) x[r * width + j] = 0.0f;
    }
    return kept;
}
