/* ckpt.h - the one public header of src/ckpt: the safetensors container,
 * layout-independent training checkpoints, and Hugging Face GPT-2 import and
 * export. The byte layouts are in docs/formats.md and
 * docs/checkpoint-format.md. */
#ifndef PTDP_CKPT_H
#define PTDP_CKPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "comm/comm.h"
#include "model/model.h"
#include "optim/optim.h"

/* ==== safetensors ========================================================= */
/* Safetensors: reading and writing the safetensors format (Hugging Face's
 * checkpoint container), the format ptdp's checkpoints, imports/exports and
 * golden test fixtures use.
 *
 * Byte layout (docs/formats.md):
 *   u64 little-endian N | N bytes UTF-8 JSON header, space padded | data buffer
 *   header = {"__metadata__":{"format":"pt",...},
 *             "NAME":{"dtype":"F32","shape":[d0,...],"data_offsets":[BEGIN,END]}, ...}
 *   offsets are relative to the data buffer, END exclusive; data is
 *   little-endian and row-major.
 *
 * The reader maps the whole file and validates everything before returning:
 * header length <= 100,000,000 and inside the file; the header is one JSON
 * object; every entry has a known dtype, a shape of at most 8 non-negative
 * dims and two data_offsets; END - BEGIN = prod(shape) * sizeof(dtype); the
 * entries sorted by offset tile the buffer from 0 with no hole or overlap;
 * 8 + N + last END = file size; no duplicate names; __metadata__ maps strings
 * to strings. Every error message names the file and what is wrong.
 *
 * Deliberately not here: sharded checkpoints (model.safetensors.index.json),
 * tensor-parallel slicing, UTF-8 validation of names, big-endian hosts (the
 * data pointers hand out little-endian bytes as they are in the file). */

/* dtypes: X(enum suffix, name in the header, bytes per element) */
#define PTDP_ST_DTYPES(X) \
    X(F64, "F64", 8)      \
    X(F32, "F32", 4)      \
    X(F16, "F16", 2)      \
    X(BF16, "BF16", 2)    \
    X(I64, "I64", 8)      \
    X(I32, "I32", 4)      \
    X(U16, "U16", 2)      \
    X(U8, "U8", 1)

typedef enum {
#define PTDP__ST_DT_ENUM(e, name, size) PTDP_ST_##e,
    PTDP_ST_DTYPES(PTDP__ST_DT_ENUM)
#undef PTDP__ST_DT_ENUM
        PTDP_ST_NDTYPES
} ptdp_st_dtype;

/* Header name ("F32") and element size of a dtype; asserts on a bad value. */
const char *ptdp_st_dtype_name(ptdp_st_dtype dt);
size_t ptdp_st_dtype_size(ptdp_st_dtype dt);

#define PTDP_ST_MAX_DIMS 8
#define PTDP_ST_MAX_HEADER 100000000ull

/* One tensor of an open file. Everything points into the file object and
 * lives until ptdp_st_close. `data` is NOT necessarily aligned (a header
 * length that is not a multiple of 8 shifts it): copy with memcpy, or use
 * ptdp_st_read_f32 / ptdp_st_read_i32. */
typedef struct {
    const char *name;
    ptdp_st_dtype dtype;
    int ndim; /* 0 for a scalar */
    int64_t shape[PTDP_ST_MAX_DIMS];
    int64_t numel;    /* prod(shape), 1 for a scalar */
    const void *data; /* nbytes little-endian bytes */
    size_t nbytes;
} ptdp_st_tensor;

typedef struct ptdp_st_file ptdp_st_file;

/* ---- reader --------------------------------------------------------------- */

/* Opens, maps and validates `path`. On success *out owns the mapping (free it
 * with ptdp_st_close). Errors: PTDP_EIO (cannot open/stat/map, errno text),
 * PTDP_EFORMAT (anything docs/formats.md forbids; the message names the file and
 * the problem), PTDP_ENOMEM. On error *out is NULL. Blocks on file I/O; any
 * rank may call it. */
int ptdp_st_open(ptdp_st_file **out, const char *path);
/* The same validation on bytes already in memory (fuzzing, tests): data[size]
 * must outlive *out, which does not copy it; `name` stands for the path in
 * messages. Errors as ptdp_st_open without PTDP_EIO. */
int ptdp_st_open_mem(ptdp_st_file **out, const char *name, const void *data, size_t size);
/* Unmaps and frees; tensors and strings obtained from f die with it. NULL is a
 * no-op. */
void ptdp_st_close(ptdp_st_file *f);

/* Number of tensors, and tensor i (0 <= i < count) in header order. */
int ptdp_st_count(const ptdp_st_file *f);
const ptdp_st_tensor *ptdp_st_get(const ptdp_st_file *f, int i);
/* Tensor by exact name (binary search), or NULL when absent; records no error. */
const ptdp_st_tensor *ptdp_st_find(const ptdp_st_file *f, const char *name);
/* __metadata__ value for key, or NULL when absent. Owned by f. */
const char *ptdp_st_metadata(const ptdp_st_file *f, const char *key);
/* Number of metadata pairs and pair i (in header order); for listing. */
int ptdp_st_metadata_count(const ptdp_st_file *f);
void ptdp_st_metadata_get(const ptdp_st_file *f, int i, const char **key, const char **value);
/* The path the file was opened with. */
const char *ptdp_st_path(const ptdp_st_file *f);

/* Copies tensor `name` into dst[n] as float, converting from F32, BF16, F16
 * or F64. Errors: PTDP_ENOTFOUND (no such tensor), PTDP_EFORMAT (its element
 * count is not n), PTDP_EUNSUPPORTED (an integer dtype). */
int ptdp_st_read_f32(const ptdp_st_file *f, const char *name, float *dst, int64_t n);
/* Same for integers: from I32, I64 (range-checked), U16 or U8 into int32. */
int ptdp_st_read_i32(const ptdp_st_file *f, const char *name, int32_t *dst, int64_t n);

/* ---- writer --------------------------------------------------------------- */

/* Collects tensors and metadata, then writes one file. The header starts with
 * "__metadata__":{"format":"pt", then the added pairs in order}, tensors
 * follow in the order added, packed from offset 0, and the header is space
 * padded to a multiple of 8 so the data is 8-aligned. */
typedef struct ptdp_st_writer ptdp_st_writer;

/* PTDP_ENOMEM on failure (*out NULL). */
int ptdp_st_writer_init(ptdp_st_writer **out);
/* NULL is a no-op. Does not touch the tensor data (the caller owns it). */
void ptdp_st_writer_free(ptdp_st_writer *w);
/* Adds a tensor. `name` and `shape` are copied; `data` (prod(shape) elements
 * of dtype, little-endian) is borrowed and must stay valid until
 * ptdp_st_write returns. Errors: PTDP_EINVAL (empty, duplicate or reserved
 * name "__metadata__", ndim outside 0..8, negative dim, NULL data with
 * non-zero size), PTDP_ENOMEM. */
int ptdp_st_writer_add(ptdp_st_writer *w, const char *name, ptdp_st_dtype dtype, int ndim,
                       const int64_t *shape, const void *data);
/* Adds or replaces a metadata pair (both copied). Key "format" is always
 * "pt": setting it to anything else is PTDP_EINVAL. */
int ptdp_st_writer_meta(ptdp_st_writer *w, const char *key, const char *value);
/* Writes the file atomically: path.tmp.PID, fflush, fsync, rename. On
 * failure the temporary file is removed and PTDP_EIO is returned with the
 * errno text; an existing file at path is left untouched. Blocks on I/O. */
int ptdp_st_write(const ptdp_st_writer *w, const char *path);

/* ==== training checkpoints ================================================ */
/* Training checkpoints that do not depend on the layout they
 * were written under (`ptdp train --save/--load`, `ptdp checkpoint`).
 *
 * On disk (docs/checkpoint-format.md has the full description):
 *   DIR/latest_checkpointed_iteration.txt   "100\n" (written last)
 *   DIR/iter_0000100/manifest.json           self-describing manifest (written after every shard)
 *   DIR/iter_0000100/rank_00003.safetensors  one file per rank that holds unique data
 * Every tensor is stored under its global name with its global shape; each
 * shard record says which rectangle [r0,r1)x[c0,c1) of the global tensor
 * (viewed as 2-D, 1-D tensors as [n,1]) the stored values belong to and
 * which elements [e0,e1) of that rectangle, in row-major order, it holds.
 * Parameters are stored as whole tensor-parallel shards; the AdamW moments
 * (exp_avg, exp_avg_sq) as the runs a rank updates, which under ZeRO-1 are
 * pieces of a shard. Any layout reads back exactly the elements it needs.
 * Each file carries a CRC-32 (IEEE 802.3 polynomial, as zlib's crc32) of its
 * bytes in the manifest.
 *
 * Whatever the precision of the run, the parameters are its fp32 master
 * weights (the trainer swaps them in, ptdp_trainer_full_precision) and the
 * moments are fp32; fp16's loss scaler state is in the manifest. Not here:
 * asynchronous saving, keeping only the last k checkpoints. */

#define PTDP_CKPT_VERSION 1

/* What a save records besides the tensors. */
typedef struct {
    int64_t iteration, consumed_samples, optimizer_step;
    const ptdp_gpt_config *cfg;
    int64_t micro_batch, global_batch;
    const ptdp_lr_schedule *lr;
    const ptdp_adamw_params *adam;
    int v, zero;                    /* model chunks per rank, ZeRO-1 */
    const ptdp_loss_scaler *scaler; /* fp16's dynamic scaler, or NULL */
    int no_optimizer;               /* weights only (an import): "has_optimizer": false */
} ptdp_ckpt_meta;

/* Writes DIR/iter_%07d/ (shards, then manifest) and then moves
 * DIR/latest_checkpointed_iteration.txt, only when every rank wrote its
 * shard. Collective over comm->world; every rank returns the same code
 * (PTDP_EIO with the message of the lowest failing rank). Blocks on I/O.
 * Only data-parallel rank 0 writes weights (ZeRO-1: every rank writes its
 * optimizer shard), only tensor-parallel rank 0 writes replicated tensors,
 * and the tied embedding is written by the first pipeline stage. */
int ptdp_ckpt_save(const char *dir, const ptdp_ckpt_meta *meta, ptdp_gpt_chunk *const *chunks,
                   ptdp_optimizer *opts, int nchunks, ptdp_comm *comm);

typedef struct ptdp_ckpt_loaded {
    int found; /* 0: DIR holds no checkpoint (nothing loaded) */
    int64_t iteration, consumed_samples, optimizer_step;
    int has_scaler; /* the manifest holds a dynamic loss scaler's state: */
    double loss_scale;
    int64_t growth_tracker, hysteresis_tracker;
    char path[4096]; /* the iteration directory loaded */
} ptdp_ckpt_loaded;

/* Creates DIR (and its parents) for --save and checks it is writable;
 * PTDP_EIO naming the flag otherwise. Any rank may call it. */
int ptdp_ckpt_prepare_dir(const char *dir);

/* Loads the checkpoint DIR points to (DIR/latest_checkpointed_iteration.txt,
 * or DIR itself when it holds manifest.json) into this rank's chunks: the
 * parameters, and with load_optim the AdamW moments of opts' runs and their
 * step counter. Reads only the shards it needs, whatever layout wrote them.
 * Everything is validated (format version, model shape against cfg,
 * checksums, every needed element present) before any chunk or optimizer is
 * touched. Collective over comm->world: all ranks return the same code and
 * message. *out->found = 0 and PTDP_OK when DIR has no latest file and no
 * manifest. Errors: PTDP_ENOTFOUND, PTDP_EFORMAT, PTDP_ECONFIG (shape does
 * not match the flags), PTDP_EIO, PTDP_ENOMEM. */
int ptdp_ckpt_load(const char *dir, int load_optim, const ptdp_gpt_config *cfg,
                   ptdp_gpt_chunk *const *chunks, ptdp_optimizer *opts, int nchunks,
                   ptdp_comm *comm, ptdp_ckpt_loaded *out);

/* The model configuration a checkpoint was saved with (for `ptdp export
 * --load`): fills l, h, a, ffn, s, max positions, V, init std and seed;
 * vocab_padded must be recomputed by ptdp_gpt_config_finish. */
int ptdp_ckpt_read_config(const char *dir, ptdp_gpt_config *cfg);

/* The learning-rate schedule a checkpoint was saved with (manifest.json's
 * training.lr, min_lr, lr_warmup_samples, lr_decay_samples, lr_decay_style, with
 * global_batch_size as samples per step; older manifests' lr_warmup_iters and
 * lr_decay_iters are converted).
 * *found = 0 when the manifest lacks one of them. Errors as
 * ptdp_ckpt_read_config. Any rank may call it. */
int ptdp_ckpt_read_lr(const char *dir, ptdp_lr_schedule *lr, int *found);

/* Whether the checkpoint holds AdamW state (*has = 0 for weights-only
 * checkpoints, such as `ptdp checkpoint import-megatron` writes). Errors as
 * ptdp_ckpt_read_config. Any rank may call it. */
int ptdp_ckpt_read_has_optimizer(const char *dir, int *has);

/* `ptdp checkpoint info/verify`: print a summary to f / check every file's
 * size and checksum, every shard record against its file, and that every
 * global tensor is fully covered. One process; PTDP_OK or an error whose
 * message names the file and the problem. */
int ptdp_ckpt_info(const char *dir, FILE *f);
int ptdp_ckpt_verify(const char *dir, FILE *f);

/* CRC-32 (IEEE, reflected 0xEDB88320, init and final xor 0xFFFFFFFF). */
uint32_t ptdp_crc32(uint32_t crc, const void *data, size_t n);

/* ==== Hugging Face GPT-2 ================================================== */
/* Hugging Face GPT-2: the mapping between ptdp's parameter specs and HF's
 * tensors, used by `ptdp train --init-from` and `ptdp export`.
 *
 * Mapping (ptdp spec, stored [out, in] -> HF GPT-2, stored [in, out]):
 *   embedding.word_embeddings.weight [Vp,h]   transformer.wte.weight [V,h] (padding rows
 * dropped/zeroed) embedding.position_embeddings.weight      transformer.wpe.weight
 *   layers.i.input_layernorm.*                transformer.h.i.ln_1.*
 *   layers.i.self_attention.query_key_value   transformer.h.i.attn.c_attn (transposed; ptdp's
 *       rows are per head [a][q|k|v][hd], HF's columns are [q|k|v][a][hd])
 *   layers.i.self_attention.dense             transformer.h.i.attn.c_proj (transposed)
 *   layers.i.post_attention_layernorm.*       transformer.h.i.ln_2.*
 *   layers.i.mlp.dense_h_to_4h                transformer.h.i.mlp.c_fc (transposed)
 *   layers.i.mlp.dense_4h_to_h                transformer.h.i.mlp.c_proj (transposed)
 *   final_layernorm.*                         transformer.ln_f.*
 * Files without the "transformer." prefix are accepted on import. */

/* HF name and shape of a spec's tensor; returns the number of dims. */
int ptdp_hf_name(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, char *name, size_t cap,
                 int64_t shape[2]);

/* Fills `global` (the spec's full tensor in ptdp's layout, gshape) from the
 * HF file. PTDP_ENOTFOUND / PTDP_EFORMAT with a message naming the file and
 * tensor when it is missing or its shape does not match the model flags. */
int ptdp_hf_read_global(const ptdp_st_file *f, const ptdp_param_spec *sp,
                        const ptdp_gpt_config *cfg, float *global);
/* Converts a full tensor in ptdp's layout to the HF layout (caller-owned
 * hf buffer of prod(shape) floats from ptdp_hf_name). */
void ptdp_hf_from_global(const ptdp_param_spec *sp, const ptdp_gpt_config *cfg, const float *global,
                         float *hf);

/* Loads this rank's shards of every parameter of `chunk` from an HF GPT-2
 * safetensors file. Errors as above; nothing is half-loaded into the chunk
 * when a tensor fails (all tensors are checked before any upload). */
int ptdp_hf_load_chunk(ptdp_gpt_chunk *chunk, const ptdp_gpt_config *cfg, int tp, const char *path);

/* Checks an HF GPT-2 safetensors file against the full model `cfg` before
 * any load: every tensor the model needs is present with its shape, and
 * (unless allow_extra) every tensor of the file is used, apart from the
 * causal-mask buffers (`*.attn.bias`, `*.attn.masked_bias`), a tied
 * `lm_head.weight` and names outside GPT-2's (`transformer.`, `h.`, `wte.`,
 * `wpe.`, `ln_f.`, `lm_head.`), e.g. reference data stored beside a model. The file cannot tell the
 * head count (QKV is [h, 3h] for any a): callers compare it with the config beside the file.
 * Errors: PTDP_ENOTFOUND / PTDP_EFORMAT naming the file, the tensor and the
 * flag to change; PTDP_EIO. Any rank may call it. */
int ptdp_hf_check(const char *path, const ptdp_gpt_config *cfg, int allow_extra);

/* Writes the whole model as an HF GPT-2 safetensors file plus config.json
 * beside it (when config_json is non-NULL), every tensor in `dtype`: F32,
 * BF16 or F16 (rounded to nearest even; F16 fails with PTDP_EINVAL, writing
 * nothing, when a value is beyond its range). Collective over `model` (the
 * tensor x pipeline group of one data-parallel replica): every member sends
 * the shards of its `nchunks` chunks (tensor-parallel rank `tp`, size `t`)
 * to the group's rank 0, which assembles the global tensors and writes.
 * PTDP_EIO / PTDP_ENOMEM on rank 0 when writing fails. */
int ptdp_hf_export(ptdp_gpt_chunk *const *chunks, int nchunks, const ptdp_gpt_config *cfg,
                   ptdp_group *model, int tp, int t, const char *path, const char *config_json,
                   ptdp_st_dtype dtype);

/* ==== Megatron-LM checkpoints ============================================ */
/* Megatron-LM's --ckpt-format torch checkpoints, in and out (docs/megatron.md):
 *   DIR/latest_checkpointed_iteration.txt         "N" or "release"
 *   DIR/iter_%07d/mp_rank_TT[_PPP]/model_optim_rng.pt
 * each a torch.save file: a zip of a protocol-2 pickle (data.pkl) and the
 * raw tensor storages (data/KEY), read by a pickle machine that builds data
 * and never imports or runs anything. Model weights, args, iteration; not
 * the optimizer or RNG states. One process, no MPI. */

typedef struct {
    /* > 0: override (or supply) the checkpoint's args; the tensor shapes are
     * checked against the result */
    int64_t num_layers, hidden_size, num_attention_heads, ffn_hidden_size;
    int64_t max_position_embeddings, seq_length;
    int64_t vocab_size; /* the real vocabulary; Megatron's padding rows are dropped */
    int64_t make_vocab_size_divisible_by; /* the ptdp checkpoint's padding (128) */
} ptdp_megatron_import_params;
ptdp_megatron_import_params ptdp_megatron_import_default_params(void);

/* Reads the Megatron checkpoint `src` (any tensor, pipeline and virtual
 * pipeline sizes; Megatron-Core names, Transformer Engine's fused-norm
 * names or legacy names) and writes a ptdp checkpoint (t=1, weights only,
 * "has_optimizer": false) to `dst`, which any layout can --load. Prints a
 * summary to log (may be NULL). Errors (each naming the file and the
 * problem): PTDP_ENOTFOUND, PTDP_EFORMAT (malformed zip or pickle, missing
 * or misshapen tensors), PTDP_EUNSUPPORTED (a model ptdp cannot represent:
 * GQA, SwiGLU, rotary, RMSNorm, no biases, untied output layer, MoE),
 * PTDP_ECONFIG, PTDP_EIO, PTDP_ENOMEM. */
int ptdp_megatron_import(const char *src, const char *dst, const ptdp_megatron_import_params *p,
                         FILE *log);

typedef struct {
    int t, p;                             /* Megatron's tensor and pipeline sizes to write */
    int64_t make_vocab_size_divisible_by; /* Megatron's padding: a multiple of this x t */
} ptdp_megatron_export_params;
ptdp_megatron_export_params ptdp_megatron_export_default_params(void);

/* Writes the weights of the ptdp checkpoint `src` (any layout) as a
 * Megatron-LM checkpoint in `dst` with Megatron-Core's local-spec names,
 * t x p files. Errors as above; PTDP_ECONFIG when t or p do not divide the
 * model. */
int ptdp_megatron_export(const char *src, const char *dst, const ptdp_megatron_export_params *p,
                         FILE *log);

/* Fuzzing entry points: parse data[n] as a pickle, or as a whole torch.save
 * zip (checking every storage), and free everything. PTDP_OK, or an error
 * with a message; never a crash, whatever the bytes. */
int ptdp_pickle_check(const void *data, size_t n);
int ptdp_torch_check(const void *data, size_t n);

#endif
