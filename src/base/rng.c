/* rng.c - Philox4x32-10 (Salmon et al., SC'11), the counter-based generator
 * behind every random number ptdp draws: parameter initialisation, dropout
 * masks and mock data. A value depends only on (seed, stream, index), which
 * is what lets a tensor-parallel shard initialise itself and a recomputed
 * forward reproduce its dropout masks without storing them. */
#include "base.h"

#include <math.h>
#include <string.h>

#include "base/philox_lanes.h"

void ptdp_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PTDP_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PTDP_PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += PTDP_PHILOX_W0;
        k1 += PTDP_PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

uint64_t ptdp_fnv1a(const void *data, size_t n, uint64_t h) {
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

uint64_t ptdp_hash_str(const char *s) { return ptdp_fnv1a(s, strlen(s), PTDP_FNV1A_INIT); }

uint64_t ptdp_hash_mix(uint64_t a, uint64_t b) {
    /* splitmix64 finaliser over a combination: cheap and well mixed */
    uint64_t z = a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

ptdp_rng_key ptdp_rng_key_make(uint64_t seed, const char *name) {
    ptdp_rng_key k = {seed, ptdp_hash_str(name)};
    return k;
}

void ptdp_rng_u32x4(ptdp_rng_key k, uint64_t idx, uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)idx, (uint32_t)(idx >> 32), (uint32_t)k.stream,
                       (uint32_t)(k.stream >> 32)};
    uint32_t key[2] = {(uint32_t)k.seed, (uint32_t)(k.seed >> 32)};
    ptdp_philox4x32(ctr, key, out);
}

static inline float u32_to_unit(uint32_t x) {
    /* (0, 1]: never 0 so log() in Box-Muller is finite */
    return ((float)(x >> 8) + 1.0f) * (1.0f / 16777216.0f);
}

float ptdp_rng_uniform(ptdp_rng_key k, uint64_t idx) {
    uint32_t o[4];
    ptdp_rng_u32x4(k, idx, o);
    return u32_to_unit(o[0]);
}

/* Box-Muller in double for accuracy on words 0 and 1 of a block; one normal
 * per index keeps element i independent of how a tensor is sharded. */
static inline double box_muller(uint32_t w0, uint32_t w1) {
    double u1 = ((double)w0 + 1.0) / 4294967296.0;
    double u2 = (double)w1 / 4294967296.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

float ptdp_rng_normal(ptdp_rng_key k, uint64_t idx) {
    uint32_t o[4];
    ptdp_rng_u32x4(k, idx, o);
    return (float)box_muller(o[0], o[1]);
}

void ptdp_rng_normal_n(ptdp_rng_key k, uint64_t idx0, int64_t n, float scale, float *out) {
    enum { LANES = 32 }; /* Philox blocks side by side (AVX2 baseline) */
    uint32_t r[4 * LANES];
    double u1[LANES], a2[LANES];
    for (int64_t i = 0; i < n; i += LANES) {
        ptdp__philox_lanes(k, idx0 + (uint64_t)i, r, LANES);
        const int m = n - i < LANES ? (int)(n - i) : LANES;
        /* box_muller's operations, each rounded as there, in three passes:
         * the conversions and the square root in vector loops, log and cos
         * glibc's scalar calls (the same bits as ptdp_rng_normal) */
        for (int j = 0; j < LANES; j++) {
            u1[j] = ((double)r[4 * j] + 1.0) / 4294967296.0;
            a2[j] = 6.283185307179586 * ((double)r[4 * j + 1] / 4294967296.0);
        }
        for (int j = 0; j < m; j++) {
            u1[j] = log(u1[j]);
            a2[j] = cos(a2[j]);
        }
        for (int j = 0; j < m; j++) out[i + j] = scale * (float)(sqrt(-2.0 * u1[j]) * a2[j]);
    }
}
