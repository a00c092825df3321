/* cli.h - the one header of src/cli: the `ptdp <command>` entry points and
 * the flag table they share. Each command parses its own
 * flags, prints one clear message on bad input and returns the process exit
 * status (0 ok, 1 runtime failure, 2 bad usage). Only cli/ exits. */
#ifndef PTDP_CLI_H
#define PTDP_CLI_H

#include <stdio.h>

#include <stdint.h>

#include "base/base.h"
#include "comm/comm.h"
#include "model/model.h"
#include "optim/optim.h"
#include "pipeline/schedule.h"
#include "train/train.h"

int ptdp_cmd_train(int argc, char **argv);
int ptdp_cmd_export(int argc, char **argv);
int ptdp_cmd_tokenize(int argc, char **argv);
int ptdp_cmd_preprocess(int argc, char **argv);
int ptdp_cmd_schedule(int argc, char **argv);
int ptdp_cmd_generate(int argc, char **argv);
int ptdp_cmd_checkpoint(int argc, char **argv);
int ptdp_cmd_plot(int argc, char **argv);
int ptdp_cmd_plan(int argc, char **argv);

/* `ptdp plan --calibrate`: measures this machine (GEMM rate by shape, memory
 * bandwidth, MPI all-reduce and point-to-point between the job's ranks) and
 * writes a cluster description to `out` (NULL: stdout, rank 0). Returns the
 * exit status; every rank of the job must call it. */
int ptdp__cli_plan_calibrate(const char *out);
/* This machine as --calibrate records it in a description's "machine":
 * the CPU's model name, the online cores and the memory, e.g. "AMD EPYC, 2
 * cores, 23 GiB". */
void ptdp__cli_machine(char *buf, size_t cap);

/* Opens the GPT-2 BPE tokenizer from --vocab-file/--merge-file, printing
 * one error naming the flag; returns an exit status (0 ok). */
struct ptdp_tokenizer;
int ptdp__cli_open_tokenizer(struct ptdp_tokenizer **tok, const char *vocab, const char *merges);

/* Unless OMP_NUM_THREADS is set, shares the node's cores between the ranks
 * running on it (every rank would otherwise start one thread per core). */
void ptdp__cli_set_threads(const ptdp_comm *comm);
/* Parses a command's flags: returns -1 to go on, or the exit status after
 * printing the usage (--help: 0) or one error line (2). */
int ptdp__cli_parse(ptdp_opt *opts, int nopts, int argc, char **argv,
                    void (*usage)(FILE *f, const ptdp_opt *opts, int nopts));
/* The config written beside a weights file: NAME.safetensors ->
 * NAME.config.json (same directory). */
void ptdp__cli_config_json_path(const char *weights, char *buf, size_t cap);
/* The config to read for a weights file: NAME.config.json, else config.json
 * in the same directory (Hugging Face's name, and older exports'). Returns 1
 * with its path in buf, 0 when neither exists (buf: the first name). */
int ptdp__cli_config_json_find(const char *weights, char *buf, size_t cap);
/* GPT-2's shape keys, in this order, with the largest value each may hold
 * (the limits of the matching flags). */
enum {
    PTDP_HF_VOCAB,
    PTDP_HF_POSITIONS,
    PTDP_HF_EMBD,
    PTDP_HF_LAYERS,
    PTDP_HF_HEADS,
    PTDP_HF_NKEYS
};
extern const char *const ptdp__cli_hf_keys[PTDP_HF_NKEYS];
extern const char *const ptdp__cli_hf_flags[PTDP_HF_NKEYS]; /* --vocab-size, ... */
/* Reads the shape keys that a weights file's config.json states
 * (ptdp__cli_config_json_find; from_metadata = 0) or that its safetensors
 * metadata states (from_metadata = 1) into said[], 0 where a key is absent;
 * *found is 1 when the source exists (a config that parses, a file that
 * opens). A stated value that is not a whole number from 1 to the key's
 * limit is PTDP_ECONFIG naming the key, the value and where it was read. */
int ptdp__cli_hf_shape(const char *weights, int from_metadata, int64_t said[PTDP_HF_NKEYS],
                       int *found, char *src, size_t cap);
/* Fills the shape values still 0 (fields in the order of the keys above)
 * from the weights' config.json, then their safetensors metadata, then their
 * tensors' shapes (`ptdp generate` and `ptdp export --init-from`). Errors as
 * ptdp__cli_hf_shape, the file's own (named by --init-from), and
 * PTDP_EINVAL naming the flag to give where no source states a value. */
int ptdp__cli_hf_fill_shape(const char *weights, int64_t *const fields[PTDP_HF_NKEYS]);
/* The Llama family's fields of cfg (the blocks, ffn_hidden, the norm's eps)
 * copied from another configuration (a checkpoint's); and read from the
 * LlamaForCausalLM config.json beside Hugging Face weights (model_type
 * "llama": RMSNorm, SwiGLU of intermediate_size, rope_theta,
 * num_key_value_heads, tie_word_embeddings, rms_norm_eps; nothing changes
 * for another or no config). Local. */
void ptdp__cli_copy_blocks(const ptdp_gpt_config *from, ptdp_gpt_config *to);
int ptdp__cli_hf_blocks(const char *weights, ptdp_gpt_config *cfg);
/* Checks --init-from weights against the full model before loading them
 * (ptdp_hf_check), then the config beside them (if any): its n_head,
 * n_layer, n_embd, n_positions and vocab_size must match cfg. PTDP_ECONFIG /
 * PTDP_EFORMAT / PTDP_ENOTFOUND naming the flag to change; any rank. */
int ptdp__cli_check_init_from(const char *weights, const ptdp_gpt_config *cfg, int allow_extra);

/* ---- flags ------------------------------------------------------------------ */
/* Room for the inert Megatron-LM flags one command line names. */
#define PTDP_ARGS_MAX_INERT 64
/* The flags shared by `ptdp train`, `ptdp export` and friends:
 * Megatron-LM's names and defaults, one table, `--config FILE.json` with the
 * same keys. Most flags set a field of the job description or of the run
 * directly (the table points into `job` and `run`); the others are the
 * command line's own or resolve into the job together (ptdp_args_job).
 * Parsing validates everything before any work starts. */
typedef struct {
    ptdp_job job;        /* the job (base/job.h): model, layout, optimizer, batch */
    ptdp_run_params run; /* the run (train.h): data, logging, checkpoints; its trainer.job
                            is `job` once resolved */
    /* the model's blocks: GPT-2's or the Llama family's (resolved into job.model by
       ptdp_args_job: --normalization, --position-embedding-type, and
       --num-query-groups, read only with --group-query-attention) */
    const char *normalization, *position_embedding_type;
    int group_query_attention;
    int64_t num_query_groups;
    /* resolved into the job by ptdp_args_job */
    int64_t virtual_pipeline_model_parallel_size, num_layers_per_virtual_pipeline_stage;
    const char *pipeline_model_parallel_layout;
    const char *pipeline_schedule, *zb_costs;
    const char *recompute_granularity, *recompute_method;
    int recompute_activations; /* Megatron's --recompute-activations (selective) */
    int scatter_gather, no_scatter_gather;
    int bf16, fp16;
    int accumulate_allreduce_grads_in_fp32, attention_softmax_in_fp32;
    const char *lr_decay_style;
    const char *optimizer; /* --optimizer (adam only: AdamW with --weight-decay) */
    /* data */
    int mock_data;
    const char *data_path;       /* first value (presence); all values below */
    const char *data_paths[128]; /* "PREFIX" or "W1 P1 W2 P2 ..." */
    int n_data_paths;
    char data_path_buf[4096]; /* storage when the list came from --config as one string */
    int data_path_list;       /* --config gave a JSON list (data_paths point into it) */
    const char *vocab_file, *merge_file, *tokenizer_type;
    /* the command line's own */
    const char *config, *gemm, *device, *out;
    const char *export_dtype; /* export: fp32, bf16 or fp16 */
    int allow_extra_tensors;
    int64_t tensorboard_queue_size;
    double distributed_timeout_minutes; /* the watchdog's bound (comm.h) */
    int use_checkpoint_args; /* fill the model flags not given from --load's checkpoint */
    /* Megatron-LM flags accepted because they change nothing in ptdp
     * (megatron_flags.c): the flag's name without "--", its value (NULL for
     * a switch) and why; `ptdp train` names each once at start-up */
    struct {
        const char *name, *value, *why;
    } inert[PTDP_ARGS_MAX_INERT];
    int n_inert;
} ptdp_args;

/* Which flags a command takes. */
#define PTDP_ARGS_TRAIN 1
#define PTDP_ARGS_EXPORT 2

/* Megatron's defaults. */
void ptdp_args_defaults(ptdp_args *a);
/* Fills opts (capacity `cap`) with the flags of `which`; returns the count. */
int ptdp_args_table(ptdp_args *a, int which, ptdp_opt *opts, int cap);
/* The same table; titles (capacity `cap`, may be NULL) gets the title of
 * the argument group (Megatron's groups: network size, training, learning
 * rate, distributed, ...) at the first flag of each group, NULL elsewhere. */
int ptdp_args_table_groups(ptdp_args *a, int which, ptdp_opt *opts, int cap, const char **titles);
/* Every flag of `which` with its value in `a`, as the text of a --config
 * JSON object (keys: the flag names with underscores; flags without a value,
 * such as an absent --load, are left out, and so are --config and
 * --dump-config). `global_batch` replaces a --global-batch-size of 0 (b x d)
 * by the run's value. Returns a malloc'd string (the caller frees it), NULL
 * when out of memory. */
char *ptdp_args_config_json(ptdp_args *a, int which, int64_t global_batch);
/* Parses argv (after the command name), applying --config FILE.json first so
 * flags on the command line win. Sets *want_help. PTDP_EINVAL/PTDP_EIO with
 * one message naming the flag or file. *json_keep receives the parsed JSON
 * tree whose strings the args point into (free with ptdp_args_free). */
int ptdp_args_parse(ptdp_args *a, int which, int argc, char **argv, int *want_help,
                    void **json_keep);
void ptdp_args_free(void *json_keep);
/* The --config part of ptdp_args_parse on text[len] already in memory
 * (`name` stands for the file in messages): checks the nesting, the object
 * and every key's type and value. Errors and *json_keep as ptdp_args_parse. */
int ptdp_args_apply_config_text(ptdp_args *a, int which, const char *text, size_t len,
                                const char *name, void **json_keep);
/* For `which` = PTDP_ARGS_TRAIN: resolves the flags that set a field of
 * the job together (v and the stage layout, the schedule and zb-v's costs,
 * recomputation, precision, scatter/gather, the LR style) into a->job, sets
 * its data-parallel size d = world_size / (t p), and checks everything the
 * way `ptdp train` always has: the command line's own rules (what excludes
 * what, the data source, the launch), then the job's (ptdp_job_check).
 * Leaves the job as given otherwise (the derived fields are the trainer's:
 * ptdp_job_finish). For PTDP_ARGS_EXPORT: the model's shape, finished in
 * place. PTDP_ECONFIG/PTDP_EINVAL/PTDP_EUNSUPPORTED naming the flag.
 * Idempotent. */
int ptdp_args_job(ptdp_args *a, int which, int world_size);
/* Room for every flag of one command (ptdp_args_table's cap). */
#define PTDP_ARGS_MAX_FLAGS 128

/* ---- Megatron-LM's flags that are not in the table (megatron_flags.c) ---------- */
/* Every unknown or refused flag of one command line, for one message. */
typedef struct {
    int megatron; /* 1: the command takes Megatron-LM's training flags (train) */
    int count, left_out;
    char first[1024]; /* the first problem: the whole message when it is the only one */
    char lines[3072]; /* "\n  PROBLEM" for each one */
} ptdp__flag_report;
/* Looks at one flag `name` (no "--"; `value` NULL when it has none) that
 * `origin` ("flag", or "key in FILE:") gave: returns 0 when the option table
 * opts takes it as it is (the parser then sets it), 1 when it is dealt with
 * here: an inert Megatron-LM flag is recorded in a->inert, a refused one, a
 * refused value of a flag of the table (--normalization RMSNorm) or an
 * unknown flag is added to the report. Without r->megatron every flag the
 * table lacks is unknown. */
int ptdp__megatron_check(ptdp_opt *opts, int nopts, const char *name, const char *value,
                         const char *origin, ptdp_args *a, ptdp__flag_report *r);
/* Values a Megatron-LM flag of the table above takes (0: a switch), -1 when
 * the name is not there. */
int ptdp__megatron_nargs(const char *name);
/* PTDP_OK for an empty report, else PTDP_EINVAL with one message naming
 * every flag of the report (a lone problem keeps its own one-line text). */
int ptdp__megatron_report(const ptdp__flag_report *r);

#endif
