/* test.h - the few checks ptdp's C tests use. Each test file is its own
 * process (CTest runs one per file, with a timeout); a failed check prints
 * where and what, the file keeps going, and main returns test_done(). */
#ifndef PTDP_TEST_H
#define PTDP_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"

static int test__fail, test__pass;

#define CHECK(cond)                                                         \
    do {                                                                    \
        if (cond) {                                                         \
            test__pass++;                                                   \
        } else {                                                            \
            test__fail++;                                                   \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                   \
    } while (0)

/* |a-b| <= atol + rtol*|b| */
#define CHECK_CLOSE(a, b, rtol, atol)                                                              \
    do {                                                                                           \
        double test__a = (double)(a), test__b = (double)(b);                                       \
        if (fabs(test__a - test__b) <= (atol) + (rtol)*fabs(test__b)) {                            \
            test__pass++;                                                                          \
        } else {                                                                                   \
            test__fail++;                                                                          \
            fprintf(stderr, "FAIL %s:%d: %s = %.9g, expected %s = %.9g (rtol %g, atol %g)\n",      \
                    __FILE__, __LINE__, #a, test__a, #b, test__b, (double)(rtol), (double)(atol)); \
        }                                                                                          \
    } while (0)

#define CHECK_OK(expr)                                                                     \
    do {                                                                                   \
        int test__rc = (expr);                                                             \
        if (test__rc == 0) {                                                               \
            test__pass++;                                                                  \
        } else {                                                                           \
            test__fail++;                                                                  \
            fprintf(stderr, "FAIL %s:%d: %s returned %d: %s\n", __FILE__, __LINE__, #expr, \
                    test__rc, ptdp_last_error());                                          \
        }                                                                                  \
    } while (0)

/* n floats (at least one), asserting on failure. */
static inline float *fmalloc(int64_t n) {
    float *p = malloc(sizeof(float) * (size_t)(n ? n : 1));
    PTDP_ASSERT(p);
    return p;
}

/* x[i] = scale * N(0, 1), element i drawn from (seed, "test", i). */
static inline void fill_normal(float *x, int64_t n, uint64_t seed, float scale) {
    ptdp_rng_key k = ptdp_rng_key_make(seed, "test");
    for (int64_t i = 0; i < n; i++) x[i] = scale * ptdp_rng_normal(k, (uint64_t)i);
}

/* x[i] = v */
static inline void fill_const(float *x, int64_t n, float v) {
    for (int64_t i = 0; i < n; i++) x[i] = v;
}

/* One check per array: all |got - want| <= atol + rtol |want|; prints the
 * first offender and the count. */
static inline void check_arr(const char *what, const float *got, const float *want, int64_t n,
                             double rtol, double atol) {
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        int ok =
            (isnan(w) && isnan(g)) || (isinf(w) && g == w) || fabs(g - w) <= atol + rtol * fabs(w);
        if (!ok) {
            if (first < 0) first = i;
            bad++;
        }
    }
    if (bad)
        fprintf(stderr, "  %s: %lld of %lld differ; first [%lld] got %.9g want %.9g\n", what,
                (long long)bad, (long long)n, (long long)first, got[first], want[first]);
    CHECK(bad == 0);
}

static inline int test_done(const char *name) {
    printf("%s: %d checks passed, %d failed\n", name, test__pass, test__fail);
    return test__fail ? 1 : (test__pass ? 0 : 1); /* a test that checked nothing fails */
}

#endif
