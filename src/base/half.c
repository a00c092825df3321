/* half.c - conversions between fp32 and the 16-bit floats safetensors files
 * hold: bfloat16 (1 sign, 8 exponent, 7 mantissa bits: fp32's range) and
 * IEEE binary16 (1, 5, 10: largest finite 65504, subnormals below 2^-14).
 * Widening is exact. Narrowing rounds to nearest, ties to even; a NaN stays a
 * NaN of the same sign, made quiet, with the top bits of its payload; values
 * too large for the format become inf (callers that must refuse them look
 * for a finite input with an infinite output).
 *
 * The scalar functions are the reference. The bulk (_n) functions give the
 * same bits, using F16C (vcvtph2ps/vcvtps2ph) and AVX512_BF16
 * (vcvtneps2bf16) when the CPU reports them at run time; the build assumes
 * neither (target attributes + __builtin_cpu_supports). vcvtneps2bf16
 * flushes fp32 subnormals to zero, so blocks holding one are redone by the
 * scalar path. Not here: conversion between bf16 and fp16 directly, big-endian
 * hosts (the 16-bit values are little-endian in memory, as in the files). */
#include <string.h>

#include "base/base.h"

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t ptdp_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x0040u); /* quiet NaN */
    /* adding 0x7fff (+1 when the kept part is odd) carries exactly when the
     * dropped half is above the halfway point (or at it, towards even); a
     * carry out of the mantissa bumps the exponent, up to inf */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float ptdp_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, ex = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (ex == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0));
    if (ex == 0) {
        if (man == 0) return bits_f32(sign);
        /* subnormal man * 2^-24: normalise so the leading 1 is implicit */
        ex = 113;
        while (!(man & 0x400u)) {
            man <<= 1;
            ex--;
        }
        return bits_f32(sign | (ex << 23) | ((man & 0x3ffu) << 13));
    }
    return bits_f32(sign | ((ex + 112) << 23) | (man << 13));
}

uint16_t ptdp_f32_to_f16(float f) {
    uint32_t x = f32_bits(f), a = x & 0x7fffffffu;
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    if (a > 0x7f800000u) return sign | 0x7e00u | (uint16_t)((a >> 13) & 0x3ffu); /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u; /* >= 65520 rounds to inf (and inf) */
    if (a >= 0x38800000u) {                      /* >= 2^-14: normal */
        a -= (127u - 15u) << 23;                 /* rebias the exponent */
        a += 0x0fffu + ((a >> 13) & 1u);         /* round to nearest even on 13 bits */
        return sign | (uint16_t)(a >> 13);
    }
    if (a <= 0x33000000u) return sign; /* <= 2^-25, half the smallest subnormal: 0 */
    /* subnormal result: round (1.m * 2^(e-127)) * 2^24 to an integer */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126u - e; /* 14..24 */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return sign | (uint16_t)r;
}

/* ---- bulk ----------------------------------------------------------------- */

static uint16_t load16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static void store16(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define PTDP__HALF_X86 1

__attribute__((target("avx,f16c"))) static void f16_to_f32_f16c(float *dst, const void *src,
                                                                int64_t n) {
    const unsigned char *s = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 2 * i))));
    for (; i < n; i++) dst[i] = ptdp_f16_to_f32(load16(s + 2 * i));
}

__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(void *dst, const float *src,
                                                                int64_t n) {
    unsigned char *d = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + 2 * i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) store16(d + 2 * i, ptdp_f32_to_f16(src[i]));
}

__attribute__((target("avx512f,avx512bf16"))) static void
f32_to_bf16_avx512(void *dst, const float *src, int64_t n) {
    unsigned char *d = dst;
    const __m512i expo = _mm512_set1_epi32(0x7f800000), mant = _mm512_set1_epi32(0x007fffff);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(src + i);
        __m512i u = _mm512_castps_si512(v);
        /* vcvtneps2bf16 flushes subnormal inputs to zero: take those blocks the scalar way */
        __mmask16 sub = _mm512_testn_epi32_mask(u, expo) & _mm512_test_epi32_mask(u, mant);
        if (sub) {
            for (int64_t j = i; j < i + 16; j++) store16(d + 2 * j, ptdp_f32_to_bf16(src[j]));
            continue;
        }
        __m256bh h = _mm512_cvtneps_pbh(v);
        _mm256_storeu_si256((__m256i *)(d + 2 * i), (__m256i)h);
    }
    for (; i < n; i++) store16(d + 2 * i, ptdp_f32_to_bf16(src[i]));
}

static int has_f16c(void) {
    __builtin_cpu_init();
#ifdef __clang__ /* clang 14 knows no "f16c" feature name: CPUID leaf 1, ECX bit 29 */
    unsigned a, b, c, d;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
#else
    return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
#endif
}
static int has_avx512bf16(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}
#endif

const char *ptdp_half_simd(void) {
#ifdef PTDP__HALF_X86
    if (has_avx512bf16()) return "f16c+avx512bf16";
    if (has_f16c()) return "f16c";
#endif
    return "portable";
}

void ptdp_bf16_to_f32_n(float *dst, const void *src, int64_t n) {
    /* a shift per element: the compiler vectorises it on every target */
    const unsigned char *s = src;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)load16(s + 2 * i) << 16;
        memcpy(dst + i, &u, 4);
    }
}

void ptdp_f32_to_bf16_n(void *dst, const float *src, int64_t n) {
#ifdef PTDP__HALF_X86
    if (has_avx512bf16()) {
        f32_to_bf16_avx512(dst, src, n);
        return;
    }
#endif
    unsigned char *d = dst;
    for (int64_t i = 0; i < n; i++) store16(d + 2 * i, ptdp_f32_to_bf16(src[i]));
}

void ptdp_f16_to_f32_n(float *dst, const void *src, int64_t n) {
#ifdef PTDP__HALF_X86
    if (has_f16c()) {
        f16_to_f32_f16c(dst, src, n);
        return;
    }
#endif
    const unsigned char *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = ptdp_f16_to_f32(load16(s + 2 * i));
}

void ptdp_f32_to_f16_n(void *dst, const float *src, int64_t n) {
#ifdef PTDP__HALF_X86
    if (has_f16c()) {
        f32_to_f16_f16c(dst, src, n);
        return;
    }
#endif
    unsigned char *d = dst;
    for (int64_t i = 0; i < n; i++) store16(d + 2 * i, ptdp_f32_to_f16(src[i]));
}

/* ---- rounding in place (mixed precision over fp32 storage) ------------------ */

/* Each rounds x[i0, i1). Up to 65536 values run on the calling thread
 * without entering OpenMP (callers inside a parallel region, such as the
 * optimizer's blocks, call them by the thousand). */
static void round_bf16_range(uint32_t *u, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) {
        uint32_t v = u[i];
        /* NaN: quiet, payload top bits kept (as ptdp_f32_to_bf16) */
        uint32_t r =
            (v & 0x7fffffffu) > 0x7f800000u ? (v | 0x00400000u) : v + 0x7fffu + ((v >> 16) & 1u);
        u[i] = r & 0xffff0000u;
    }
}

enum { ROUND_SERIAL = 65536, F16_BLK = 512 };

static void round_f16_blocks(float *x, int64_t n, int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; k++) {
        uint16_t h[F16_BLK];
        const int64_t i0 = k * F16_BLK, m = n - i0 < F16_BLK ? n - i0 : F16_BLK;
        ptdp_f32_to_f16_n(h, x + i0, m);
        ptdp_f16_to_f32_n(x + i0, h, m);
    }
}

void ptdp_round_bf16_n(float *x, int64_t n) {
    uint32_t *u = (uint32_t *)(void *)x;
    if (n <= ROUND_SERIAL) {
        round_bf16_range(u, 0, n);
        return;
    }
    const int64_t nb = (n + ROUND_SERIAL - 1) / ROUND_SERIAL;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < nb; k++)
        round_bf16_range(u, k * ROUND_SERIAL,
                         k * ROUND_SERIAL + ROUND_SERIAL < n ? k * ROUND_SERIAL + ROUND_SERIAL : n);
}

void ptdp_round_f16_n(float *x, int64_t n) {
    const int64_t nb = (n + F16_BLK - 1) / F16_BLK;
    if (n <= ROUND_SERIAL) {
        round_f16_blocks(x, n, 0, nb);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < nb; k++) round_f16_blocks(x, n, k, k + 1);
}

const char *ptdp_dtype_name(ptdp_dtype d) {
    static const char *const names[] = {
#define PTDP__DTYPE_NAME(e, s, b) s,
        PTDP_DTYPES(PTDP__DTYPE_NAME)
#undef PTDP__DTYPE_NAME
    };
    return d >= 0 && d < (int)(sizeof names / sizeof names[0]) ? names[d] : "?";
}

/* ---- packing 16-bit messages (in place) --------------------------------------- */

enum { PACK_BLK = 1024 };

void ptdp_pack_n(void *dst, const float *src, int64_t n, ptdp_dtype dt) {
    if (dt == PTDP_DTYPE_FP32) {
        if (dst != src && n > 0) memmove(dst, src, (size_t)n * 4);
        return;
    }
    /* forwards, a block at a time through the stack: block k is read before
     * any of it is written over, and the 16-bit output at dst + 2 i never
     * reaches the floats after i, which are still to be read */
    unsigned char *d = dst;
    for (int64_t i0 = 0; i0 < n; i0 += PACK_BLK) {
        uint16_t h[PACK_BLK];
        const int64_t m = n - i0 < PACK_BLK ? n - i0 : PACK_BLK;
        if (dt == PTDP_DTYPE_BF16)
            ptdp_f32_to_bf16_n(h, src + i0, m);
        else
            ptdp_f32_to_f16_n(h, src + i0, m);
        memcpy(d + 2 * i0, h, (size_t)m * 2);
    }
}

void ptdp_unpack_n(float *dst, const void *src, int64_t n, ptdp_dtype dt) {
    if (dt == PTDP_DTYPE_FP32) {
        if (dst != src && n > 0) memmove(dst, src, (size_t)n * 4);
        return;
    }
    /* backwards: the floats written at dst + 4 i lie above the 16-bit values
     * before i, which are still to be read */
    const unsigned char *s = src;
    for (int64_t i0 = (n - 1) / PACK_BLK * PACK_BLK; n > 0 && i0 >= 0; i0 -= PACK_BLK) {
        uint16_t h[PACK_BLK];
        const int64_t m = n - i0 < PACK_BLK ? n - i0 : PACK_BLK;
        memcpy(h, s + 2 * i0, (size_t)m * 2);
        if (dt == PTDP_DTYPE_BF16)
            ptdp_bf16_to_f32_n(dst + i0, h, m);
        else
            ptdp_f16_to_f32_n(dst + i0, h, m);
    }
}
