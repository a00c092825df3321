/* target.c - what a checkpoint writer may write over. No command destroys or
 * rewinds a checkpoint the user already has unless told to
 * (--overwrite-checkpoints): `ptdp train --save` refuses at start-up a
 * directory holding a checkpoint at or after the iteration the run starts
 * from (unless it is the one the run resumes), import-megatron refuses a
 * directory holding any checkpoint, and ptdp_ckpt_save itself refuses an
 * iteration at or before the newest one there and never moves the latest
 * file back (checkpoint.c). docs/checkpoint-format.md says why.
 *
 * Not here: the Megatron export's rule (a non-empty directory, whatever it
 * holds: megatron/export.c). */
#define _XOPEN_SOURCE 700 /* realpath */
#include "ckpt/ckpt.h"
#include "ckpt/ckpt_internal.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* iter_ followed by digits only: the iteration, or -1. */
static int64_t iter_dir_number(const char *name) {
    if (strncmp(name, "iter_", 5) || !name[5]) return -1;
    int64_t v = 0;
    for (const char *c = name + 5; *c; c++) {
        if (*c < '0' || *c > '9' || v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (*c - '0');
    }
    return v;
}

int ptdp_ckpt_newest(const char *dir, int64_t *iteration) {
    int64_t best = -1, latest = 0;
    int rc = ptdp__ckpt_read_latest(dir, 0, &latest);
    if (rc < 0) return rc;
    if (rc == 1) best = latest;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        const int64_t it = iter_dir_number(e->d_name);
        if (it <= best) continue;
        char mp[4400];
        struct stat st;
        snprintf(mp, sizeof mp, "%s/%s/%s", dir, e->d_name, MANIFEST);
        if (stat(mp, &st) == 0 && S_ISREG(st.st_mode)) best = it; /* a save that finished */
    }
    if (d) closedir(d);
    if (best < 0) return 0;
    *iteration = best;
    return 1;
}

/* Whether paths a and b name the same existing file or directory. */
static int same_path(const char *a, const char *b) {
    char *ra = realpath(a, NULL), *rb = realpath(b, NULL);
    const int same = ra && rb && !strcmp(ra, rb);
    free(ra);
    free(rb);
    return same;
}

int ptdp_ckpt_check_save_dir(const char *save, const char *load, int finetune, int overwrite,
                             int *resumes) {
    *resumes = 0;
    int64_t newest = 0;
    int rc = ptdp_ckpt_newest(save, &newest);
    if (rc <= 0) return rc;
    int64_t start = 0;
    char loaded[4096] = "";
    if (load && !finetune) {
        manifest M;
        memset(&M, 0, sizeof M);
        rc = ptdp__ckpt_manifest_read(&M, load);
        if (rc == 1) {
            start = M.iteration;
            snprintf(loaded, sizeof loaded, "%s", M.dir);
        }
        ptdp__ckpt_manifest_free(&M);
        if (rc < 0) return PTDP_OK; /* --load reports it, on every rank */
    }
    if (newest < start) return PTDP_OK;
    char mine[4200];
    snprintf(mine, sizeof mine, "%s/iter_%07lld", save, (long long)newest);
    if (newest == start && loaded[0] && same_path(loaded, mine)) {
        *resumes = 1; /* it continues the checkpoint it saves after */
        return PTDP_OK;
    }
    if (overwrite) {
        ptdp_log0("--overwrite-checkpoints: --save %s holds iteration %lld; this run starts at "
                  "iteration %lld and replaces the iterations it saves there "
                  "(latest_checkpointed_iteration.txt never moves back)",
                  save, (long long)newest, (long long)start);
        return PTDP_OK;
    }
    return ptdp_errorf(
        PTDP_ECONFIG,
        "--save %s holds a checkpoint of iteration %lld, %s iteration %lld where this run starts: "
        "its saves would replace checkpoints there or move latest_checkpointed_iteration.txt "
        "back. Resume that run (--load %s), save into another directory, or add "
        "--overwrite-checkpoints to let this run replace the iterations it saves "
        "(latest_checkpointed_iteration.txt never moves back)",
        save, (long long)newest, newest > start ? "later than" : "the same as", (long long)start,
        save);
}
