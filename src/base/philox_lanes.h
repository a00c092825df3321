/* philox_lanes.h - Philox4x32-10 (base/rng.c's generator) on many counters
 * side by side, in plain loops that gcc vectorises: the dropout kernels'
 * masks (kernels/cpu/dropout.c) and the normal draws of parameter initialisation
 * (ptdp_rng_normal_n) both come from it. Internal to those two files. */
#ifndef PTDP_PHILOX_LANES_H
#define PTDP_PHILOX_LANES_H

#include <stdint.h>

#include "base/base.h"

#define PTDP_PHILOX_M0 0xD2511F53u
#define PTDP_PHILOX_M1 0xCD9E8D57u
#define PTDP_PHILOX_W0 0x9E3779B9u
#define PTDP_PHILOX_W1 0xBB67AE85u
#define PTDP_PHILOX_MAX_LANES 64

/* out[4*k + w] = word w of Philox4x32-10 at counter ctr0 + k, k < lanes
 * (same as ptdp_rng_u32x4(key, ctr0 + k)). Always inlined with a constant
 * lanes, so each caller gets loops of its own width for its own target. */
static inline __attribute__((always_inline)) void
ptdp__philox_lanes(ptdp_rng_key key, uint64_t ctr0, uint32_t *out, const int lanes) {
    uint32_t c0[PTDP_PHILOX_MAX_LANES], c1[PTDP_PHILOX_MAX_LANES], c2[PTDP_PHILOX_MAX_LANES],
        c3[PTDP_PHILOX_MAX_LANES];
    for (int k = 0; k < lanes; k++) {
        uint64_t idx = ctr0 + (uint64_t)k;
        c0[k] = (uint32_t)idx;
        c1[k] = (uint32_t)(idx >> 32);
        c2[k] = (uint32_t)key.stream;
        c3[k] = (uint32_t)(key.stream >> 32);
    }
    uint32_t k0 = (uint32_t)key.seed, k1 = (uint32_t)(key.seed >> 32);
    for (int r = 0; r < 10; r++) {
#pragma omp simd
        for (int k = 0; k < lanes; k++) {
            uint64_t p0 = (uint64_t)PTDP_PHILOX_M0 * c0[k];
            uint64_t p1 = (uint64_t)PTDP_PHILOX_M1 * c2[k];
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[k] ^ k0;
            uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3[k] ^ k1;
            c1[k] = (uint32_t)p1;
            c3[k] = (uint32_t)p0;
            c0[k] = n0;
            c2[k] = n2;
        }
        k0 += PTDP_PHILOX_W0;
        k1 += PTDP_PHILOX_W1;
    }
    for (int k = 0; k < lanes; k++) {
        out[4 * k] = c0[k];
        out[4 * k + 1] = c1[k];
        out[4 * k + 2] = c2[k];
        out[4 * k + 3] = c3[k];
    }
}

#endif
