/* rope.c - rotary position embeddings (kernels.h's rope_fwd and rope_bwd) in
 * place on the query and key heads of a QKV buffer in the grouped layout
 * [s, b, gl, al/gl + 2, hd], rotate-half convention, from the fp32 cos/sin
 * table of ptdp_rope_table_init; one OpenMP thread per block of token rows.
 * The backward is the inverse rotation (the transpose: sin negated), so the
 * gradient of the unrotated q and k is the rotated one's, turned back. Not
 * here: the interleaved (GPT-J) convention, position ids other than the
 * row's sequence index plus an offset. */
#include "kernels/cpu/cpu.h"

/* dims i and i + half of one head: (x1, x2) -> (x1 c - x2 sn, x2 c + x1 sn) */
static inline void rotate(float *x, const float *c, const float *sn, int64_t half, float sign) {
    float *x2 = x + half;
#pragma omp simd
    for (int64_t i = 0; i < half; i++) {
        const float a = x[i], b = x2[i], si = sign * sn[i];
        x[i] = a * c[i] - b * si;
        x2[i] = b * c[i] + a * si;
    }
}

void ptdp__rope_r(float *qkv, const float *table, int64_t s, int64_t b, int64_t al, int64_t gl,
                  int64_t hd, int64_t rd, int64_t pos0, int inverse, ptdp__round_fn rnd) {
    PTDP_ASSERT(gl > 0 && al % gl == 0 && rd >= 2 && rd % 2 == 0 && rd <= hd);
    const int64_t hpg = al / gl, W = (al + 2 * gl) * hd, half = rd / 2;
    const float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < s * b; r++) {
        const float *c = table + (pos0 + r / b) * rd, *sn = c + half;
        for (int64_t gi = 0; gi < gl; gi++) {
            float *grp = qkv + r * W + gi * (hpg + 2) * hd;
            for (int64_t k = 0; k <= hpg; k++) rotate(grp + k * hd, c, sn, half, sign);
            /* the group's query and key heads: the rotated dims and those left as they
             * were, already on the grid (rounding them again changes nothing) */
            if (rnd) rnd(grp, (hpg + 1) * hd);
        }
    }
}
