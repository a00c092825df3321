/* replay_main.c - runs a harness without libFuzzer: every file named on the
 * command line, and every file inside each directory named (sorted by name,
 * not recursive), goes once through LLVMFuzzerTestOneInput. Built with
 * -fsanitize=address,undefined -fno-sanitize-recover, so an input that
 * misbehaves stops the run with the sanitizer's report; exit 0 and a count
 * otherwise. This is what CI runs (any compiler, no libFuzzer needed).
 * With PTDP_FUZZ_VERBOSE=1 it prints each input's name and the last error
 * message the parsers recorded for it ("" when the input was accepted). */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    size_t cap = 4096, n = 0;
    unsigned char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            unsigned char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "replay: out of memory reading %s\n", path);
        return 1;
    }
    /* an exact-size copy, so ASan sees a read one byte past the input */
    unsigned char *in = malloc(n ? n : 1);
    if (!in) return 1;
    memcpy(in, buf, n);
    free(buf);
    ptdp_errorf(PTDP_OK, "%s", ""); /* so the message below is this input's */
    LLVMFuzzerTestOneInput(in, n);
    free(in);
    if (getenv("PTDP_FUZZ_VERBOSE")) printf("%s: %s\n", path, ptdp_last_error());
    return 0;
}

int main(int argc, char **argv) {
    int files = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: no such file or directory: %s\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad |= run_file(argv[i]);
            files++;
            continue;
        }
        struct dirent **list;
        int n = scandir(argv[i], &list, NULL, alphasort);
        if (n < 0) {
            fprintf(stderr, "replay: cannot list %s\n", argv[i]);
            return 1;
        }
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], list[k]->d_name);
            if (list[k]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                bad |= run_file(path);
                files++;
            }
            free(list[k]);
        }
        free(list);
    }
    printf("replay: %d inputs, %s\n", files, bad ? "some could not be read" : "all passed");
    return bad;
}
