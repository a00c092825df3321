/* st_compare.c - test tool: compares the tensors of two safetensors files.
 * usage: st_compare A B [max_abs_diff]   (default 0: bitwise equal)
 * Prints the worst tensor; exits 0 when every tensor is present in both with
 * the same shape and |a - b| <= max_abs_diff everywhere, 1 otherwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "base/base.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: st_compare A B [max_abs_diff]\n");
        return 2;
    }
    double tol = argc > 3 ? atof(argv[3]) : 0.0;
    ptdp_st_file *a = NULL, *b = NULL;
    if (ptdp_st_open(&a, argv[1]) || ptdp_st_open(&b, argv[2])) {
        fprintf(stderr, "st_compare: %s\n", ptdp_last_error());
        return 2;
    }
    int bad = ptdp_st_count(a) != ptdp_st_count(b);
    if (bad) fprintf(stderr, "st_compare: %d vs %d tensors\n", ptdp_st_count(a), ptdp_st_count(b));
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < ptdp_st_count(a); i++) {
        const ptdp_st_tensor *ta = ptdp_st_get(a, i), *tb = ptdp_st_find(b, ta->name);
        if (!tb || tb->numel != ta->numel) {
            fprintf(stderr, "st_compare: %s missing or of another size in %s\n", ta->name, argv[2]);
            bad = 1;
            continue;
        }
        float *x = malloc(sizeof(float) * (size_t)(ta->numel + 1)), *y = malloc(sizeof(float) * (size_t)(ta->numel + 1));
        ptdp_st_read_f32(a, ta->name, x, ta->numel);
        ptdp_st_read_f32(b, ta->name, y, ta->numel);
        for (int64_t k = 0; k < ta->numel; k++) {
            double d = fabs((double)x[k] - y[k]);
            if (!(d <= worst)) {
                worst = isnan(d) ? INFINITY : d;
                worst_name = ta->name;
            }
        }
        free(x);
        free(y);
    }
    printf("st_compare: max |diff| %.3g in %s (tolerance %.3g)\n", worst, worst_name, tol);
    bad |= !(worst <= tol);
    ptdp_st_close(a);
    ptdp_st_close(b);
    return bad;
}
