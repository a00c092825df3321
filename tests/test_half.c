/* test_half.c - the fp32 <-> bf16/fp16 conversions of src/base/half.c.
 * - widening: all 65536 bit patterns of each format, scalar against an
 *   independent reference (fp16: the compiler's _Float16; bf16: the bits
 *   shifted up) and bulk against scalar, bit for bit;
 * - narrowing: a large set of fp32 values (every 16-bit value, the midpoints
 *   between neighbours and one ulp either side of them, subnormals, inf,
 *   NaNs with payloads, overflow, 4M random bit patterns), scalar against a
 *   reference that picks the nearer neighbour in double (ties to even), and
 *   bulk against scalar at several lengths and misalignments (SIMD body and
 *   scalar tail). */
#include <float.h>
#include <string.h>

#include "test.h"

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- references ------------------------------------------------------------ */

static float ref_f16_to_f32(uint16_t h) {
    _Float16 x;
    memcpy(&x, &h, 2);
    float f = (float)x;
    if (isnan(f)) /* NaN: sign, quiet bit, payload shifted up */
        return bitsf(((uint32_t)(h & 0x8000) << 16) | 0x7fc00000u | ((uint32_t)(h & 0x1ff) << 13));
    return f;
}

/* The 16-bit value nearest to finite f among the two neighbours lo, lo+1 ulp
 * (magnitudes), ties to the even one. to_f32 widens a 16-bit value; max is
 * the largest finite magnitude's bits, inf its infinity. */
static uint16_t ref_narrow(float f, int bf16) {
    uint32_t x = fbits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    if (isnan(f)) return bf16 ? (uint16_t)((x >> 16) | 0x40) : sign | 0x7e00 | ((x >> 13) & 0x3ff);
    double a = fabs((double)f);
    uint16_t inf = bf16 ? 0x7f80 : 0x7c00;
    if (isinf(f)) return sign | inf;
    /* binary search for the largest 16-bit magnitude <= a */
    uint16_t lo = 0, hi = inf; /* magnitude bit patterns are ordered like values */
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        double v = bf16 ? ptdp_bf16_to_f32(mid) : (double)ref_f16_to_f32(mid);
        if (v <= a)
            lo = mid;
        else
            hi = mid;
    }
    double vlo = bf16 ? ptdp_bf16_to_f32(lo) : ref_f16_to_f32(lo);
    if (vlo == a) return sign | lo;
    /* the next value up; for the largest finite one it is the one an
     * unbounded exponent would give (2^128 or 65536): overflow when nearer */
    double vhi = hi == inf ? (bf16 ? ldexp(1.0, 128) : 65536.0)
                           : (bf16 ? ptdp_bf16_to_f32(hi) : ref_f16_to_f32(hi));
    double dl = a - vlo, dh = vhi - a;
    if (dl < dh) return sign | lo;
    if (dh < dl) return sign | hi;
    return sign | ((lo & 1) ? hi : lo);
}

/* ---- widening --------------------------------------------------------------- */

static void test_widen(int bf16) {
    uint16_t *all = malloc(2 * 65536 + 2);
    float *bulk = fmalloc(65536), *bulk_odd = fmalloc(65536);
    PTDP_ASSERT(all);
    for (uint32_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    int64_t bad_ref = 0, bad_bulk = 0;
    if (bf16)
        ptdp_bf16_to_f32_n(bulk, all, 65536);
    else
        ptdp_f16_to_f32_n(bulk, all, 65536);
    /* the same from an odd address (file data need not be aligned) */
    unsigned char *odd = malloc(2 * 65536 + 1);
    PTDP_ASSERT(odd);
    memcpy(odd + 1, all, 2 * 65536);
    if (bf16)
        ptdp_bf16_to_f32_n(bulk_odd, odd + 1, 65536);
    else
        ptdp_f16_to_f32_n(bulk_odd, odd + 1, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        float s = bf16 ? ptdp_bf16_to_f32((uint16_t)i) : ptdp_f16_to_f32((uint16_t)i);
        float r = bf16 ? bitsf(i << 16) : ref_f16_to_f32((uint16_t)i);
        if (fbits(s) != fbits(r)) {
            if (!bad_ref++)
                fprintf(stderr, "%s 0x%04x: scalar 0x%08x, reference 0x%08x\n",
                        bf16 ? "bf16" : "fp16", i, fbits(s), fbits(r));
        }
        if (fbits(bulk[i]) != fbits(s) || fbits(bulk_odd[i]) != fbits(s)) {
            if (!bad_bulk++)
                fprintf(stderr, "%s 0x%04x: bulk 0x%08x / 0x%08x, scalar 0x%08x\n",
                        bf16 ? "bf16" : "fp16", i, fbits(bulk[i]), fbits(bulk_odd[i]), fbits(s));
        }
    }
    printf("%s -> fp32: 65536 patterns, %lld differ from the reference, %lld bulk from scalar\n",
           bf16 ? "bf16" : "fp16", (long long)bad_ref, (long long)bad_bulk);
    CHECK(bad_ref == 0);
    CHECK(bad_bulk == 0);
    free(all), free(bulk), free(bulk_odd), free(odd);
}

/* ---- narrowing -------------------------------------------------------------- */

static int64_t push(float *v, int64_t n, float f) {
    v[n++] = f;
    v[n++] = -f;
    return n;
}

/* Every 16-bit value of both formats, midpoints and their neighbours,
 * specials, then random patterns. Returns the count. */
static int64_t narrowing_inputs(float *v, int64_t cap) {
    int64_t n = 0;
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (uint32_t h = 0; h < 0x7c00u + (bf16 ? 0x380u : 0); h++) { /* finite magnitudes */
            float a = bf16 ? ptdp_bf16_to_f32((uint16_t)h) : ptdp_f16_to_f32((uint16_t)h);
            float b =
                bf16 ? ptdp_bf16_to_f32((uint16_t)(h + 1)) : ptdp_f16_to_f32((uint16_t)(h + 1));
            if (isinf(b)) b = bf16 ? FLT_MAX : 65536.0f;
            float mid = (float)(((double)a + (double)b) / 2); /* exact: 16-bit values are short */
            n = push(v, n, a);
            n = push(v, n, mid);
            n = push(v, n, nextafterf(mid, 0.0f));
            n = push(v, n, nextafterf(mid, INFINITY));
        }
    const float specials[] = {0.0f,         INFINITY,   FLT_MAX,    FLT_MIN,        1e-45f,
                              1e-40f,       65504.0f,   65519.996f, 65520.0f,       65536.0f,
                              1e5f,         1e38f,      5.96e-8f,   2.98e-8f,       2.9802322e-8f,
                              6.1e-5f,      6.1035e-5f, 3.0e-38f,   1.1754942e-38f, 3.3895314e38f,
                              3.4028235e38f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) n = push(v, n, specials[i]);
    const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0x7fa00000u, 0x7fffffffu,
                             0x7f802000u, 0x7fbfe000u, 0x7f801fffu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) n = push(v, n, bitsf(nans[i]));
    for (uint32_t s = 1; s < 0x800000u; s = s * 3 + 1) n = push(v, n, bitsf(s)); /* subnormals */
    ptdp_rng_key k = ptdp_rng_key_make(7, "half");
    for (uint64_t i = 0; n + 4 <= cap; i++) {
        uint32_t w[4];
        ptdp_rng_u32x4(k, i, w);
        for (int j = 0; j < 4; j++) v[n++] = bitsf(w[j]);
    }
    return n;
}

static void test_narrow(int bf16, const float *v, int64_t n) {
    uint16_t *scalar = malloc(2 * (size_t)n), *bulk = malloc(2 * (size_t)n + 16);
    PTDP_ASSERT(scalar && bulk);
    int64_t bad_ref = 0, bad_bulk = 0;
    for (int64_t i = 0; i < n; i++) {
        scalar[i] = bf16 ? ptdp_f32_to_bf16(v[i]) : ptdp_f32_to_f16(v[i]);
        uint16_t r = ref_narrow(v[i], bf16);
        if (scalar[i] != r && !bad_ref++)
            fprintf(stderr, "fp32 %.9g (0x%08x) -> %s: scalar 0x%04x, reference 0x%04x\n", v[i],
                    fbits(v[i]), bf16 ? "bf16" : "fp16", scalar[i], r);
    }
    /* bulk: whole array, then short lengths at odd element offsets and an odd byte address */
    if (bf16)
        ptdp_f32_to_bf16_n(bulk, v, n);
    else
        ptdp_f32_to_f16_n(bulk, v, n);
    for (int64_t i = 0; i < n; i++)
        if (bulk[i] != scalar[i] && !bad_bulk++)
            fprintf(stderr, "fp32 0x%08x -> %s: bulk 0x%04x, scalar 0x%04x\n", fbits(v[i]),
                    bf16 ? "bf16" : "fp16", bulk[i], scalar[i]);
    unsigned char *odd = (unsigned char *)bulk + 1;
    for (int64_t len = 0; len < 40; len++)
        for (int64_t off = 0; off < 3; off++) {
            if (bf16)
                ptdp_f32_to_bf16_n(odd, v + off * 12345, len);
            else
                ptdp_f32_to_f16_n(odd, v + off * 12345, len);
            for (int64_t i = 0; i < len; i++) {
                uint16_t got = (uint16_t)(odd[2 * i] | odd[2 * i + 1] << 8);
                if (got != scalar[off * 12345 + i] && !bad_bulk++)
                    fprintf(stderr, "short bulk len %lld: element %lld differs\n", (long long)len,
                            (long long)i);
            }
        }
    printf("fp32 -> %s: %lld values, %lld differ from the reference, %lld bulk from scalar\n",
           bf16 ? "bf16" : "fp16", (long long)n, (long long)bad_ref, (long long)bad_bulk);
    CHECK(bad_ref == 0);
    CHECK(bad_bulk == 0);
    free(scalar), free(bulk);
}

/* A few values worked by hand. */
static void test_known(void) {
    CHECK(ptdp_f32_to_f16(1.0f) == 0x3c00);
    CHECK(ptdp_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(ptdp_f32_to_f16(65519.0f) == 0x7bff);
    CHECK(ptdp_f32_to_f16(65520.0f) == 0x7c00); /* the tie rounds to even: inf */
    CHECK(ptdp_f32_to_f16(-1e6f) == 0xfc00);
    CHECK(ptdp_f32_to_f16(5.9604645e-8f) == 0x0001); /* 2^-24, smallest subnormal */
    CHECK(ptdp_f32_to_f16(2.9802322e-8f) == 0x0000); /* 2^-25: tie to even (0) */
    CHECK(ptdp_f32_to_f16(2.9802326e-8f) == 0x0001); /* just above the tie */
    CHECK(ptdp_f32_to_f16(8.940697e-8f) == 0x0002);  /* 1.5 * 2^-24: tie to even (2) */
    CHECK(ptdp_f32_to_f16(6.097555e-5f) == 0x03ff);  /* largest subnormal */
    CHECK(ptdp_f16_to_f32(0x0001) == 5.9604645e-8f);
    CHECK(ptdp_f16_to_f32(0x3555) == 0.333251953125f);
    CHECK(ptdp_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(ptdp_f32_to_bf16(1.00390625f) == 0x3f80);        /* 1 + 2^-8: tie to even (1) */
    CHECK(ptdp_f32_to_bf16(1.01171875f) == 0x3f82);        /* 1 + 3 * 2^-8: tie to even (up) */
    CHECK(ptdp_f32_to_bf16(FLT_MAX) == 0x7f80);            /* rounds past the largest bf16 */
    CHECK(ptdp_f32_to_bf16(bitsf(0x00010000u)) == 0x0001); /* fp32 subnormal kept */
    CHECK(ptdp_f32_to_bf16(bitsf(0x7f800001u)) == 0x7fc0); /* signalling NaN made quiet */
    CHECK(ptdp_f32_to_bf16(bitsf(0xffc00000u)) == 0xffc0);
    CHECK(isnan(ptdp_bf16_to_f32(0x7fc1)));
    CHECK(ptdp_f32_to_f16(bitsf(0x7f802000u)) == 0x7e01);
}

/* ptdp_pack_n / ptdp_unpack_n (the 16-bit messages of --bf16/--fp16): in
 * place, and into an overlapping place below the source (the all-gather's
 * block r moves from 4 r n to 2 r n bytes), bit for bit the scalar
 * conversions, for lengths around the 1024-value blocks. */
static void test_pack(ptdp_dtype dt) {
    const int64_t lens[] = {0, 1, 1023, 1024, 1025, 3000};
    const int bf16 = dt == PTDP_DTYPE_BF16;
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        const int64_t n = lens[k];
        float *x = fmalloc(2 * n + 1), *src = fmalloc(n + 1);
        uint64_t st = 12345 + (uint64_t)n;
        for (int64_t i = 0; i < n; i++) { /* off-grid values of many magnitudes */
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            const float m = (float)((st >> 40) & 0xffffff) / 16777216.0f - 0.5f;
            src[i] = ldexpf(m, (int)((st >> 20) % 40) - 20);
        }
        int bad = 0;
        for (int pass = 0; pass < 2; pass++) {
            /* pass 0: in place; pass 1: from x + n floats to x + n/2 */
            float *from = x + (pass ? n : 0);
            void *to = pass ? (void *)((uint16_t *)(void *)x + n) : (void *)from;
            memcpy(from, src, (size_t)n * 4);
            ptdp_pack_n(to, from, n, dt);
            for (int64_t i = 0; i < n; i++) {
                const uint16_t want = bf16 ? ptdp_f32_to_bf16(src[i]) : ptdp_f32_to_f16(src[i]);
                uint16_t got;
                memcpy(&got, (char *)to + 2 * i, 2);
                bad += got != want;
            }
            ptdp_unpack_n(from, to, n, dt);
            for (int64_t i = 0; i < n; i++) {
                const uint16_t h = bf16 ? ptdp_f32_to_bf16(src[i]) : ptdp_f32_to_f16(src[i]);
                const float want = bf16 ? ptdp_bf16_to_f32(h) : ptdp_f16_to_f32(h);
                bad += fbits(from[i]) != fbits(want);
            }
        }
        CHECK(bad == 0);
        free(x);
        free(src);
    }
    float one = 1.5f; /* fp32: a no-op in place */
    ptdp_pack_n(&one, &one, 1, PTDP_DTYPE_FP32);
    ptdp_unpack_n(&one, &one, 1, PTDP_DTYPE_FP32);
    CHECK(one == 1.5f);
}

int main(void) {
    printf("bulk conversions use: %s\n", ptdp_half_simd());
    test_pack(PTDP_DTYPE_BF16);
    test_pack(PTDP_DTYPE_FP16);
    test_known();
    test_widen(0);
    test_widen(1);
    const int64_t cap = 6 * 1000 * 1000;
    float *v = fmalloc(cap);
    int64_t n = narrowing_inputs(v, cap);
    test_narrow(0, v, n);
    test_narrow(1, v, n);
    free(v);
    return test_done("test_half");
}
