/* test.h - the few checks ptdp's C tests use. Each test file is its own
 * process (CTest runs one per file, with a timeout); a failed check prints
 * where and what, the file keeps going, and main returns test_done(). */
#ifndef PTDP_TEST_H
#define PTDP_TEST_H

#include <math.h>
#include <stdio.h>

static int test__fail, test__pass;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (cond) {                                                              \
            test__pass++;                                                        \
        } else {                                                                 \
            test__fail++;                                                        \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);      \
        }                                                                        \
    } while (0)

/* |a-b| <= atol + rtol*|b| */
#define CHECK_CLOSE(a, b, rtol, atol)                                                          \
    do {                                                                                       \
        double test__a = (double)(a), test__b = (double)(b);                                   \
        if (fabs(test__a - test__b) <= (atol) + (rtol) * fabs(test__b)) {                      \
            test__pass++;                                                                      \
        } else {                                                                               \
            test__fail++;                                                                      \
            fprintf(stderr, "FAIL %s:%d: %s = %.9g, expected %s = %.9g (rtol %g, atol %g)\n", \
                    __FILE__, __LINE__, #a, test__a, #b, test__b, (double)(rtol), (double)(atol)); \
        }                                                                                      \
    } while (0)

#define CHECK_OK(expr)                                                                    \
    do {                                                                                  \
        int test__rc = (expr);                                                            \
        if (test__rc == 0) {                                                              \
            test__pass++;                                                                 \
        } else {                                                                          \
            test__fail++;                                                                 \
            fprintf(stderr, "FAIL %s:%d: %s returned %d: %s\n", __FILE__, __LINE__, #expr, \
                    test__rc, ptdp_last_error());                                         \
        }                                                                                 \
    } while (0)

static inline int test_done(const char *name) {
    printf("%s: %d checks passed, %d failed\n", name, test__pass, test__fail);
    return test__fail ? 1 : (test__pass ? 0 : 1); /* a test that checked nothing fails */
}

#endif
