/* ckpt_internal.h - what the files of src/ckpt share and nobody else sees:
 * the file primitives of files.c (each returns PTDP_OK or PTDP_EIO with a
 * message naming the path) and the manifest in memory (manifest.c). */
#ifndef PTDP_CKPT_INTERNAL_H
#define PTDP_CKPT_INTERNAL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#define LATEST "latest_checkpointed_iteration.txt"
#define MANIFEST "manifest.json"

/* What a shard record holds: parameters or one of AdamW's moments. */
enum { K_PARAM, K_EXP_AVG, K_EXP_AVG_SQ, K_COUNT };
extern const char *const ptdp__ckpt_kind_names[K_COUNT];

/* CRC-32 and size of a whole file. */
int ptdp__ckpt_file_crc(const char *path, uint32_t *crc, int64_t *size);
/* mkdir -p. */
int ptdp__ckpt_mkdir_p(const char *dir);
/* fsync of a directory, so a rename in it is durable (errors ignored). */
void ptdp__ckpt_fsync_dir(const char *dir);
/* Writes text to path through a temporary, fsync and rename. */
int ptdp__ckpt_write_atomic(const char *path, const char *text);

/* ---- the manifest in memory (manifest.c) ---- */

typedef struct {
    char name[96];
    int kind, file;
    char key[160];
    int64_t r0, r1, c0, c1, e0, e1;
} shard_rec;

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[2];
} tensor_rec;

typedef struct {
    char name[64];
    int rank;
    int64_t bytes;
    uint32_t crc;
} file_rec;

typedef struct {
    char dir[4096], path[4200]; /* iteration directory, manifest path */
    int version, has_optim;
    int64_t iteration, consumed, step;
    int64_t l, h, a, ffn, s, maxpos, V, Vp, seed;
    double init_std;
    int64_t t, p, d, v, zero, world;
    cJSON *root;
    file_rec *files;
    int nfiles;
    tensor_rec *tensors;
    int ntensors;
    shard_rec *shards;
    int nshards;
} manifest;

/* Reads DIR's manifest (through the latest file, or DIR itself): 1 when
 * found, 0 when DIR holds neither, or an error code. */
int ptdp__ckpt_manifest_read(manifest *M, const char *dir);
/* The same, with "no checkpoint" an error (PTDP_ENOTFOUND). */
int ptdp__ckpt_open_manifest(manifest *M, const char *dir);
void ptdp__ckpt_manifest_free(manifest *M);
/* An integer member of o; sets *bad when it is missing or not a number. */
int64_t ptdp__ckpt_jint(const cJSON *o, const char *key, int *bad);
const tensor_rec *ptdp__ckpt_find_tensor(const manifest *M, const char *name);

#endif
