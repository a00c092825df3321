/* ckpt_internal.h - what the files of src/ckpt (and src/ckpt/megatron)
 * share and nobody else sees: the latest file, shard paths and the manifest
 * in memory (manifest.c). The file primitives they use are format/format.h's. */
#ifndef PTDP_CKPT_INTERNAL_H
#define PTDP_CKPT_INTERNAL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include <stdio.h>

#include "model/model.h"

/* hf_llama.c: Hugging Face's LlamaForCausalLM names and layouts (hf.h's
 * functions dispatch here for the Llama family): HF tensors of a spec (3 for
 * the QKV weight), the name and shape of one, the conversion of one (to_ptdp:
 * hf -> ptdp's global tensor, else back), the check of a file, config.json. */
int ptdp__hf_llama_parts(const ptdp_param_spec *sp);
int ptdp__hf_llama_name(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, int part, char *name,
                        size_t cap, int64_t shape[2]);
void ptdp__hf_llama_convert(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, int part,
                            float *ptdp, float *hf, int to_ptdp);
int ptdp__hf_llama_check(const char *path, const ptdp_gpt_config *cfg, int allow_extra);
int ptdp__hf_llama_config_json(FILE *cf, const ptdp_gpt_config *cfg);

#define LATEST "latest_checkpointed_iteration.txt"
#define MANIFEST "manifest.json"

/* What a shard record holds: parameters or one of AdamW's moments. */
enum { K_PARAM, K_EXP_AVG, K_EXP_AVG_SQ, K_COUNT };
extern const char *const ptdp__ckpt_kind_names[K_COUNT];

/* DIR's latest file (Megatron's latest_checkpointed_iteration.txt, which
 * ptdp writes too): 0 when there is none, 1 with its iteration in *it, 2
 * when it says "release" and allow_release is set (Megatron's released
 * weights); anything else is PTDP_EFORMAT naming the file. Trailing blanks and
 * line ends are ignored. */
int ptdp__ckpt_read_latest(const char *dir, int allow_release, int64_t *it);
/* dir/name into path[cap] for a shard file named by a manifest, refusing
 * (PTDP_EFORMAT, naming the path) a name that is not plain, a symbolic link
 * that resolves outside dir, and anything but a regular file (a FIFO or a
 * device would hang or never end the checksum). A missing file is left to
 * the caller's open. */
int ptdp__ckpt_shard_path(const char *dir, const char *name, char *path, size_t cap);

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
    /* the Llama family's blocks ("model"."llama", absent in a GPT's: zeros,
     * groups = a) */
    int rmsnorm, swiglu, rope, untie, no_bias;
    int64_t groups;
    double rotary_base, rotary_percent;
    int64_t t, p, d, v, zero, world;
    cJSON *root;
    file_rec *files;
    int nfiles;
    tensor_rec *tensors;
    int ntensors;
    shard_rec *shards;
    int nshards;
} manifest;

/* Bounds on what a manifest may declare, checked before anything is
 * allocated or multiplied: sums and products of them fit in int64. */
#define PTDP__CKPT_MAX_FILES (1 << 20)
#define PTDP__CKPT_MAX_TENSORS (1 << 20)
#define PTDP__CKPT_MAX_NUMEL ((int64_t)1 << 40)      /* elements of one tensor */
#define PTDP__CKPT_MAX_FILE_BYTES ((int64_t)1 << 42) /* bytes of one shard file */

/* Parses and checks manifest text[len]; M->path (for messages) is set by the
 * caller, the rest is filled. Returns 1, or PTDP_EFORMAT / PTDP_ENOMEM with a
 * message naming M->path. Every record is checked: file names are plain names
 * inside the checkpoint directory, shapes and ranges are non-negative, in
 * bounds and small enough that no product overflows; a caller may index with
 * them without further checks. Free with ptdp__ckpt_manifest_free. */
int ptdp__ckpt_manifest_parse(manifest *M, const char *text, size_t len);
/* Whether name is a plain file name: not empty, ".", "..", no '/' or '\\',
 * no control characters. */
int ptdp__ckpt_safe_name(const char *name);
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
