/* st_compare.c - test tool: compares the tensors of two safetensors files.
 * usage: st_compare [--bitwise] [--key-bias-atol X] A B [max_abs_diff]
 *
 * Default: both files hold the same tensor names with the same shapes, and
 * |a - b| <= max_abs_diff (default 0) for every element of the float tensors
 * (read as float; a NaN anywhere fails); integer tensors must be equal.
 * --bitwise: same names, dtypes and shapes, and every tensor's bytes equal
 *   (memcmp: tells -0 from +0 and compares NaN payloads), and the same
 *   __metadata__ pairs.
 * --key-bias-atol X: in Hugging Face GPT-2 tensors named *attn.c_attn.bias
 *   ([3h], columns Q | K | V), the K third (elements [h, 2h)) is compared
 *   with absolute tolerance X instead of max_abs_diff; every other element,
 *   including the Q and V thirds of the same tensor, keeps max_abs_diff. The
 *   key bias adds q.b_k to every attention score of a query row, which the
 *   softmax cancels, so its gradient is zero up to rounding and AdamW (eps
 *   1e-8) turns that rounding noise into steps of up to about lr each: two
 *   equally correct runs may differ there by up to lr x iterations.
 * Prints the worst tensor (and the worst key-bias element); exits 0 when
 * everything is within tolerance, 1 when not, 2 on usage or unreadable files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/format.h"
#include "base/base.h"

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int same_shape(const ptdp_st_tensor *a, const ptdp_st_tensor *b) {
    if (a->ndim != b->ndim || a->numel != b->numel) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

static int same_metadata(const ptdp_st_file *a, const ptdp_st_file *b) {
    if (ptdp_st_metadata_count(a) != ptdp_st_metadata_count(b)) return 0;
    for (int i = 0; i < ptdp_st_metadata_count(a); i++) {
        const char *k, *v;
        ptdp_st_metadata_get(a, i, &k, &v);
        const char *w = ptdp_st_metadata(b, k);
        if (!w || strcmp(v, w) != 0) return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    int bitwise = 0;
    double key_bias_atol = -1;
    int argi = 1;
    for (; argi < argc && strncmp(argv[argi], "--", 2) == 0; argi++) {
        if (strcmp(argv[argi], "--bitwise") == 0)
            bitwise = 1;
        else if (strcmp(argv[argi], "--key-bias-atol") == 0 && argi + 1 < argc)
            key_bias_atol = atof(argv[++argi]);
        else
            argi = argc; /* unknown flag: usage */
    }
    if (argc - argi < 2 || argc - argi > 3) {
        fprintf(stderr, "usage: st_compare [--bitwise] [--key-bias-atol X] A B [max_abs_diff]\n");
        return 2;
    }
    const char *pa = argv[argi], *pb = argv[argi + 1];
    double tol = argc - argi > 2 ? atof(argv[argi + 2]) : 0.0;
    ptdp_st_file *a = NULL, *b = NULL;
    if (ptdp_st_open(&a, pa) || ptdp_st_open(&b, pb)) {
        fprintf(stderr, "st_compare: %s\n", ptdp_last_error());
        return 2;
    }
    int bad = ptdp_st_count(a) != ptdp_st_count(b);
    if (bad) fprintf(stderr, "st_compare: %d vs %d tensors\n", ptdp_st_count(a), ptdp_st_count(b));
    if (bitwise && !same_metadata(a, b)) {
        fprintf(stderr, "st_compare: __metadata__ differs\n");
        bad = 1;
    }
    double worst = 0, worst_k = 0;
    const char *worst_name = "", *worst_k_name = "";
    int64_t nbitdiff = 0;
    for (int i = 0; i < ptdp_st_count(a); i++) {
        const ptdp_st_tensor *ta = ptdp_st_get(a, i), *tb = ptdp_st_find(b, ta->name);
        if (!tb || !same_shape(ta, tb) || (bitwise && ta->dtype != tb->dtype)) {
            fprintf(stderr, "st_compare: %s missing or of another shape or dtype in %s\n", ta->name,
                    pb);
            bad = 1;
            continue;
        }
        const int integer = ta->dtype == PTDP_ST_I64 || ta->dtype == PTDP_ST_I32 ||
                            ta->dtype == PTDP_ST_U16 || ta->dtype == PTDP_ST_U8;
        if (bitwise || integer) {
            if (ta->dtype != tb->dtype || ta->nbytes != tb->nbytes ||
                memcmp(ta->data, tb->data, ta->nbytes) != 0) {
                if (nbitdiff++ < 5) fprintf(stderr, "st_compare: %s differs bitwise\n", ta->name);
                bad = 1;
            }
            continue;
        }
        float *x = malloc(sizeof(float) * (size_t)(ta->numel + 1)),
              *y = malloc(sizeof(float) * (size_t)(ta->numel + 1));
        if (!x || !y || ptdp_st_read_f32(a, ta->name, x, ta->numel) ||
            ptdp_st_read_f32(b, ta->name, y, ta->numel)) {
            fprintf(stderr, "st_compare: %s: cannot read as float\n", ta->name);
            return 2;
        }
        /* the K third of an HF c_attn bias ([3h]: Q | K | V) */
        int64_t k0 = 0, k1 = 0;
        if (key_bias_atol >= 0 && ends_with(ta->name, "attn.c_attn.bias") && ta->ndim == 1 &&
            ta->numel % 3 == 0) {
            k0 = ta->numel / 3;
            k1 = 2 * k0;
        }
        for (int64_t k = 0; k < ta->numel; k++) {
            double d = fabs((double)x[k] - y[k]);
            if (isnan(d)) d = INFINITY;
            if (k >= k0 && k < k1) {
                if (!(d <= worst_k)) {
                    worst_k = d;
                    worst_k_name = ta->name;
                }
            } else if (!(d <= worst)) {
                worst = d;
                worst_name = ta->name;
            }
        }
        free(x);
        free(y);
    }
    if (bitwise) {
        printf("st_compare: %s\n", bad ? "files differ" : "bitwise equal");
    } else {
        printf("st_compare: max |diff| %.3g in %s (tolerance %.3g)\n", worst, worst_name, tol);
        bad |= !(worst <= tol);
        if (key_bias_atol >= 0) {
            printf("st_compare: key-bias thirds: max |diff| %.3g in %s (tolerance %.3g)\n", worst_k,
                   worst_k_name, key_bias_atol);
            bad |= !(worst_k <= key_bias_atol);
        }
    }
    ptdp_st_close(a);
    ptdp_st_close(b);
    return bad;
}
