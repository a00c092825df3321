/* dropout.c - keep masks for the counter-based dropout sites, many elements
 * per call. Element e of a site uses word (offset + e) & 3 of the Philox
 * block at counter (offset + e) >> 2 (exactly ptdp__dropout_keep's rule), so
 * masks are identical to the per-element path; here 16 Philox blocks are run
 * side by side in plain loops that gcc vectorises, instead of one scalar
 * Philox call per element. Not here: the RNG itself (base/rng.c). */
#include "kernels/cpu.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define LANES 16

/* out[4*k + w] = word w of Philox4x32-10 at counter ctr0 + k, k < LANES
 * (same as ptdp_rng_u32x4(key, ctr0 + k)). */
static void philox_lanes(ptdp_rng_key key, uint64_t ctr0, uint32_t out[4 * LANES]) {
    uint32_t c0[LANES], c1[LANES], c2[LANES], c3[LANES];
    for (int k = 0; k < LANES; k++) {
        uint64_t idx = ctr0 + (uint64_t)k;
        c0[k] = (uint32_t)idx;
        c1[k] = (uint32_t)(idx >> 32);
        c2[k] = (uint32_t)key.stream;
        c3[k] = (uint32_t)(key.stream >> 32);
    }
    uint32_t k0 = (uint32_t)key.seed, k1 = (uint32_t)(key.seed >> 32);
    for (int r = 0; r < 10; r++) {
#pragma omp simd
        for (int k = 0; k < LANES; k++) {
            uint64_t p0 = (uint64_t)PHILOX_M0 * c0[k];
            uint64_t p1 = (uint64_t)PHILOX_M1 * c2[k];
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[k] ^ k0;
            uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3[k] ^ k1;
            c1[k] = (uint32_t)p1;
            c3[k] = (uint32_t)p0;
            c0[k] = n0;
            c2[k] = n2;
        }
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    for (int k = 0; k < LANES; k++) {
        out[4 * k] = c0[k];
        out[4 * k + 1] = c1[k];
        out[4 * k + 2] = c2[k];
        out[4 * k + 3] = c3[k];
    }
}

void ptdp__dropout_apply(const float *src, float *dst, int64_t n, ptdp_dropout d, uint64_t base) {
    const uint32_t thr = (uint32_t)((double)d.p * 4294967296.0);
    const float sc = 1.0f / (1.0f - d.p);
    uint32_t r[4 * LANES];
    int64_t e = 0;
    while (e < n) {
        uint64_t a = d.offset + base + (uint64_t)e;
        philox_lanes(d.key, a >> 2, r);
        int64_t skip = (int64_t)(a & 3), m = 4 * LANES - skip;
        if (m > n - e) m = n - e;
        const uint32_t *rr = r + skip;
        const float *s = src + e;
        float *o = dst + e;
#pragma omp simd
        for (int64_t j = 0; j < m; j++) o[j] = rr[j] >= thr ? s[j] * sc : 0.0f;
        e += m;
    }
}
