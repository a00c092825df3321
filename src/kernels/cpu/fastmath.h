/* fastmath.h - exp and tanh for the kernels' inner loops (internal).
 * These bodies live in a header on purpose (the project otherwise keeps function bodies out of
 * headers): gcc vectorises a loop only when the callee is visible and inlinable, and libm's
 * expf/tanhf are scalar calls that cost more than the GEMMs around them on the softmax and GeLU
 * paths. Accuracy: relative error below 3e-7 over the ranges used (checked against libm in
 * test_kernels). */
#ifndef PTDP_KERNELS_FASTMATH_H
#define PTDP_KERNELS_FASTMATH_H

#include <stdint.h>
#include <string.h>

/* For the row functions of compute-bound loops (exp, tanh): an AVX-512 clone
 * beside the build's baseline, the CPU choosing at load time (GCC's
 * target_clones, x86-64 only). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PTDP__ROW_CLONES __attribute__((noinline, target_clones("avx512f", "default")))
#else
#define PTDP__ROW_CLONES __attribute__((noinline))
#endif

/* exp(x) = 2^k * exp(r), r = x - k ln2 in [-ln2/2, ln2/2], degree-6 poly. */
static inline float ptdp__expf(float x) {
    x = x < -87.0f ? -87.0f : x; /* exp underflows to ~1e-38: fine for softmax */
    x = x > 88.0f ? 88.0f : x;
    /* round to nearest by the 1.5*2^23 trick: plain float adds, so gcc
     * vectorises (roundf is a libm call) */
    float kf = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - kf * 0.693145751953125f;
    r = r - kf * 1.428606765330187045e-06f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t ki = (int32_t)kf;
    int32_t bits = (ki + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* x rounded to the bf16 grid (nearest even; a NaN stays a quiet NaN), the
 * value ptdp_round_bf16_n leaves: inline, so a loop that writes a 16-bit
 * value rounds it as it stores (gcc vectorises the integer steps) instead of
 * a second pass over memory. */
static inline float ptdp__bf16_round(float x) {
    uint32_t v;
    memcpy(&v, &x, sizeof v);
    v = ((v & 0x7fffffffu) > 0x7f800000u ? (v | 0x00400000u) : v + 0x7fffu + ((v >> 16) & 1u)) &
        0xffff0000u;
    memcpy(&x, &v, sizeof x);
    return x;
}

/* tanh(x) = sign(x) * (1 - e) / (1 + e), e = exp(-2|x|); for small |x| an odd
 * polynomial avoids the cancellation in 1 - e (worst relative error 1.7e-7). */
static inline float ptdp__tanhf(float x) {
    float ax = x < 0 ? -x : x;
    float big;
    {
        float e = ptdp__expf(-2.0f * ax);
        big = (1.0f - e) / (1.0f + e);
    }
    float x2 = ax * ax;
    /* Taylor to x^15: below 0.55 it beats (1-e)/(1+e), whose cancellation
     * magnifies exp's error by e/(1-e) for small |x| */
    float small =
        ax * (1.0f + x2 * (-1.0f / 3.0f +
                           x2 * (2.0f / 15.0f +
                                 x2 * (-17.0f / 315.0f +
                                       x2 * (62.0f / 2835.0f +
                                             x2 * (-1382.0f / 155925.0f +
                                                   x2 * (21844.0f / 6081075.0f +
                                                         x2 * (-929569.0f / 638512875.0f))))))));
    float t = ax < 0.55f ? small : big;
    return x < 0 ? -t : t;
}

#endif
