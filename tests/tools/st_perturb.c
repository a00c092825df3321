/* st_perturb.c - test tool for the comparisons' negative controls: copies a
 * safetensors file, adding DELTA to one element of one F32 tensor.
 * usage: st_perturb IN OUT NAME INDEX DELTA
 * Every tensor (any dtype, bytes copied unchanged) and every __metadata__
 * pair is kept; element INDEX (row-major) of NAME becomes value + DELTA,
 * rounded to float. Prints the old and new value; exits 0, or 2 on bad
 * arguments or unreadable/unwritable files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/format.h"
#include "base/base.h"

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: st_perturb IN OUT NAME INDEX DELTA\n");
        return 2;
    }
    const char *name = argv[3];
    long long index = atoll(argv[4]);
    double delta = atof(argv[5]);
    ptdp_st_file *in = NULL;
    ptdp_st_writer *w = NULL;
    if (ptdp_st_open(&in, argv[1]) || ptdp_st_writer_init(&w)) {
        fprintf(stderr, "st_perturb: %s\n", ptdp_last_error());
        return 2;
    }
    for (int i = 0; i < ptdp_st_metadata_count(in); i++) {
        const char *k, *v;
        ptdp_st_metadata_get(in, i, &k, &v);
        if (strcmp(k, "format") != 0) ptdp_st_writer_meta(w, k, v);
    }
    void **copies = calloc((size_t)ptdp_st_count(in), sizeof(void *));
    int found = 0;
    for (int i = 0; i < ptdp_st_count(in); i++) {
        const ptdp_st_tensor *t = ptdp_st_get(in, i);
        copies[i] = malloc(t->nbytes + 1);
        memcpy(copies[i], t->data, t->nbytes);
        if (strcmp(t->name, name) == 0) {
            if (t->dtype != PTDP_ST_F32 || index < 0 || index >= t->numel) {
                fprintf(stderr, "st_perturb: %s is not F32 or has no element %lld\n", name, index);
                return 2;
            }
            float v;
            memcpy(&v, (char *)copies[i] + 4 * index, 4);
            float nv = (float)(v + delta);
            memcpy((char *)copies[i] + 4 * index, &nv, 4);
            printf("st_perturb: %s[%lld] %.9g -> %.9g\n", name, index, v, nv);
            found = 1;
        }
        if (ptdp_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, copies[i])) {
            fprintf(stderr, "st_perturb: %s\n", ptdp_last_error());
            return 2;
        }
    }
    if (!found) {
        fprintf(stderr, "st_perturb: %s has no tensor %s\n", argv[1], name);
        return 2;
    }
    if (ptdp_st_write(w, argv[2])) {
        fprintf(stderr, "st_perturb: %s\n", ptdp_last_error());
        return 2;
    }
    for (int i = 0; i < ptdp_st_count(in); i++) free(copies[i]);
    free(copies);
    ptdp_st_writer_free(w);
    ptdp_st_close(in);
    return 0;
}
