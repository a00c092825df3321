/* ckpt.h - training checkpoints that do not depend on the layout they
 * were written under (`ptdp train --save/--load`, `ptdp checkpoint`).
 * The Hugging Face mapping is ckpt/hf.h, Megatron-LM's checkpoints
 * ckpt/megatron/megatron.h, the containers format/format.h.
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
#ifndef PTDP_CKPT_H
#define PTDP_CKPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../comm/comm.h"
#include "../model/model.h"
#include "../optim/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

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
    int overwrite; /* may replace an iteration DIR holds, or save one before its newest */
} ptdp_ckpt_meta;

/* Writes DIR/iter_%07d/ (shards, then manifest) and then moves
 * DIR/latest_checkpointed_iteration.txt, only when every rank wrote its
 * shard. Collective over comm->world; every rank returns the same code
 * (PTDP_EIO with the message of the lowest failing rank). Blocks on I/O.
 * Never destroys or rewinds a checkpoint DIR holds unless meta->overwrite:
 * PTDP_ECONFIG, nothing written, when DIR's newest checkpoint
 * (ptdp_ckpt_newest) is of this iteration or a later one. The latest file
 * never moves back, even with meta->overwrite (the save then sits beside
 * the newer checkpoint, loadable by its iteration directory).
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

/* The newest checkpoint DIR holds: the larger of the iteration its latest
 * file names and those of its iter_NNNNNNN directories that hold a
 * manifest.json (saves that finished). Returns 1 with *iteration, 0 when DIR
 * holds none (or does not exist), or PTDP_EFORMAT naming a latest file that
 * is not an iteration. Any rank may call it. */
int ptdp_ckpt_newest(const char *dir, int64_t *iteration);

/* Before a run saves into `save` (`ptdp train --save`), at start-up: the
 * run starts from iteration S (the checkpoint `load` points to, or 0 without
 * `load` or with `finetune`); if `save` holds a checkpoint later than S, or
 * of S itself that is not the one loaded, its saves would replace or rewind
 * it: PTDP_ECONFIG naming --overwrite-checkpoints, or with `overwrite` a
 * note on rank 0 and PTDP_OK. *resumes = 1 when the run continues
 * `save`'s own newest checkpoint (S need not be saved again). A --load that
 * cannot be read is left to the load to report (PTDP_OK). Reads files only;
 * every rank may call it and gets the same answer from the same files. */
int ptdp_ckpt_check_save_dir(const char *save, const char *load, int finetune, int overwrite,
                             int *resumes);

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

#ifdef __cplusplus
}
#endif

#endif
