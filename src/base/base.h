/* base.h - the lowest layer of ptdp: error codes, rank-tagged logging, the
 * counter-based RNG, the arena allocator, timers and the command-line option
 * parser, and the description of a model parameter (role, split rule) that
 * the model, optimizer and checkpoints share, and the categories of a rank's
 * tensor memory. Uses libc only. Nothing here knows about MPI or a compute
 * backend (tensor blocks are allocated by a function the caller passes).
 *
 * Error convention: recoverable failures return a negative
 * PTDP_E* code; the function that detects the failure records one human
 * message with ptdp_errorf(), which the CLI prints. Broken internal contracts
 * hit PTDP_ASSERT, which is always on. */
#ifndef PTDP_BASE_H
#define PTDP_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A function that does not return, in the C11 spelling or C++'s (these
 * headers are C++-clean, for programs that embed ptdp). */
#ifdef __cplusplus
#define PTDP_NORETURN [[noreturn]]
#else
#define PTDP_NORETURN _Noreturn
#endif

/* ---- errors ------------------------------------------------------------ */
#define PTDP_ERRORS(X)                                \
    X(PTDP_OK, 0, "success")                          \
    X(PTDP_EINVAL, -1, "invalid argument")            \
    X(PTDP_ECONFIG, -2, "inconsistent configuration") \
    X(PTDP_EIO, -3, "input/output error")             \
    X(PTDP_EFORMAT, -4, "malformed file")             \
    X(PTDP_ENOMEM, -5, "out of memory")               \
    X(PTDP_ENOTFOUND, -6, "not found")                \
    X(PTDP_ECOMM, -7, "communication error")          \
    X(PTDP_EBACKEND, -8, "compute backend error")     \
    X(PTDP_EUNSUPPORTED, -9, "not supported")

enum {
#define PTDP__ERR_ENUM(name, val, msg) name = val,
    PTDP_ERRORS(PTDP__ERR_ENUM)
#undef PTDP__ERR_ENUM
};

/* Static description of an error code; never NULL. */
const char *ptdp_strerror(int code);

/* Records a formatted message for the calling thread and returns `code`, so
 * a failing function can `return ptdp_errorf(PTDP_EINVAL, "...", ...)`. */
int ptdp_errorf(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The last message recorded by ptdp_errorf on this thread ("" if none). */
const char *ptdp_last_error(void);

/* Called by PTDP_ASSERT after printing; defaults to abort(). The comm layer
 * installs one that takes the whole MPI job down. */
typedef void (*ptdp_abort_fn)(void);
void ptdp_set_abort_hook(ptdp_abort_fn fn);
PTDP_NORETURN void ptdp__assert_fail(const char *expr, const char *file, int line, const char *msg);

#define PTDP_ASSERT(expr)                                                \
    do {                                                                 \
        if (!(expr)) ptdp__assert_fail(#expr, __FILE__, __LINE__, NULL); \
    } while (0)
#define PTDP_ASSERT_MSG(expr, msg)                                        \
    do {                                                                  \
        if (!(expr)) ptdp__assert_fail(#expr, __FILE__, __LINE__, (msg)); \
    } while (0)

/* ---- logging ------------------------------------------------------------ */
/* Every line is prefixed "[dp,pp,tp]" once the rank is known. Rank-0 lines
 * (ptdp_log0) are printed only by the global rank 0. By default information
 * goes to stdout and errors to stderr, each line in one write(2); a program
 * embedding ptdp may take the lines instead (ptdp_log_set_sink) or keep
 * only the errors (ptdp_log_set_level). Internal-error (assertion) reports
 * always go to stderr. */
void ptdp_log_set_rank(int global_rank, int dp, int pp, int tp);
int ptdp_log_rank(void);
void ptdp_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ptdp_log0(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Error line to stderr: "ptdp: error: <msg>" with the rank prefix. */
void ptdp_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Levels of a line, most important first. */
typedef enum { PTDP_LOG_ERROR = 0, PTDP_LOG_INFO = 1 } ptdp_log_level;
#define PTDP_LOG_NONE (-1) /* ptdp_log_set_level: not even errors */
/* Receives each whole line, its rank prefix and "ptdp: error: " included,
 * without the newline; `line` is valid during the call only. It may be called
 * from any of ptdp's threads (the communication watchdog reports a hang from
 * its own), so it must be thread-safe. */
typedef void (*ptdp_log_fn)(void *user, ptdp_log_level level, const char *line);
/* Where lines go: fn(user, ...) instead of stdout/stderr; NULL restores the
 * default. Process-wide; set it before starting ptdp's work (ptdp_comm_init),
 * not while another thread logs. */
void ptdp_log_set_sink(ptdp_log_fn fn, void *user);
/* Lines above `level` are dropped (PTDP_LOG_INFO, the default, keeps all;
 * PTDP_LOG_ERROR only errors; PTDP_LOG_NONE nothing). Process-wide, as above. */
void ptdp_log_set_level(int level);

/* ---- RNG: Philox4x32-10, counter based ---------------------------------- */
/* A key is (seed, stream); streams are derived from names so every global
 * tensor / dropout site has its own independent sequence. Element i of a
 * stream is a pure function of (key, i): a shard can draw exactly the values
 * the full tensor would have at its indices. */
typedef struct {
    uint64_t seed;
    uint64_t stream;
} ptdp_rng_key;

void ptdp_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* FNV-1a 64 over n bytes, continuing from h (PTDP_FNV1A_INIT to start): the
 * one hash of the project (stream names, vocabulary tables, replica checks). */
#define PTDP_FNV1A_INIT 1469598103934665603ull
uint64_t ptdp_fnv1a(const void *data, size_t n, uint64_t h);
uint64_t ptdp_hash_str(const char *s); /* ptdp_fnv1a of the string's bytes */
uint64_t ptdp_hash_mix(uint64_t a, uint64_t b);
ptdp_rng_key ptdp_rng_key_make(uint64_t seed, const char *name);
/* Uniform in (0, 1], and standard normal (Box-Muller on one Philox block). */
float ptdp_rng_uniform(ptdp_rng_key k, uint64_t idx);
float ptdp_rng_normal(ptdp_rng_key k, uint64_t idx);
/* out[i] = scale * ptdp_rng_normal(k, idx0 + i) for i < n, bit for bit, with
 * the Philox blocks drawn many at a time (parameter initialisation). */
void ptdp_rng_normal_n(ptdp_rng_key k, uint64_t idx0, int64_t n, float scale, float *out);
/* Four uniform 32-bit words for counter idx (used by dropout kernels). */
void ptdp_rng_u32x4(ptdp_rng_key k, uint64_t idx, uint32_t out[4]);

/* ---- arena --------------------------------------------------------------- */
/* A block carved into aligned pieces (64 bytes). Three kinds:
 * - plan: no memory at all; carve() returns NULL and only sums the sizes, so
 *   the same carving code that hands out pieces also plans them;
 * - block: carves a block the caller allocated (backend memory, which may
 *   not be host-addressable: carve() never touches it; the owner zeroes it);
 * - host (ptdp_arena_init): the arena mallocs its own host block and zeroes
 *   each piece (scratch use, with mark and reset).
 * `peak` records the high-water mark. */
typedef enum { PTDP_ARENA_HOST, PTDP_ARENA_BLOCK, PTDP_ARENA_PLAN } ptdp_arena_kind;
typedef struct {
    const char *name;
    ptdp_arena_kind kind;
    char *base;
    size_t size;
    size_t used;
    size_t peak;
} ptdp_arena;

/* Host arena. Returns PTDP_ENOMEM (with message) when the block cannot be
 * allocated. */
int ptdp_arena_init(ptdp_arena *a, const char *name, size_t bytes);
/* Plan arena: sums carves, holds nothing. Cannot fail. */
void ptdp_arena_plan(ptdp_arena *a, const char *name);
/* Arena over `bytes` of caller memory at `block` (caller owns and frees it;
 * block may be NULL when bytes is 0). Cannot fail. */
void ptdp_arena_block(ptdp_arena *a, const char *name, void *block, size_t bytes);
/* Frees a host arena's block; plan and block arenas are only reset. */
void ptdp_arena_free(ptdp_arena *a);
/* Asserts on overflow: sizes are planned before carving, so running out is a
 * bug in the plan, not bad input. Host memory is zeroed; a plan arena
 * returns NULL. */
void *ptdp_arena_carve(ptdp_arena *a, size_t bytes);
size_t ptdp_arena_mark(const ptdp_arena *a);
void ptdp_arena_reset(ptdp_arena *a, size_t mark);
/* Bytes a carve of `bytes` consumes (alignment included); plans use it. */
size_t ptdp_arena_need(size_t bytes);

/* ---- a rank's tensor memory, by category ---------------------------------- */
/* Every tensor a training rank holds comes from one arena per category, and
 * each arena from one backend allocation. Subsystems carve their pieces in a
 * fixed order twice: first from plan arenas (this sums what they need), then,
 * once ptdp_mem_alloc has made the blocks, from block arenas over them.
 * src/plan/memory.c predicts every category from the configuration alone. */
#define PTDP_MEM_CATEGORIES(X)                                              \
    X(PTDP_MEM_WEIGHTS, "weights")              /* fp32 parameters */       \
    X(PTDP_MEM_GRADIENTS, "gradients")          /* fp32, same layout */     \
    X(PTDP_MEM_OPTIMIZER, "optimizer state")    /* AdamW m and v */         \
    X(PTDP_MEM_GRAD_SHARD, "ZeRO-1 grad shard") /* reduce-scatter output */ \
    X(PTDP_MEM_ACTIVATIONS, "activations")      /* per micro-batch slots */ \
    X(PTDP_MEM_WORKSPACE, "workspace")          /* shared by all slots */   \
    X(PTDP_MEM_PIPELINE, "pipeline buffers")    /* receive + send rings */  \
    X(PTDP_MEM_BACKEND, "backend workspace")    /* the compute backend's */
typedef enum {
#define PTDP__MEM_ENUM(e, s) e,
    PTDP_MEM_CATEGORIES(PTDP__MEM_ENUM)
#undef PTDP__MEM_ENUM
        PTDP_MEM_NCAT
} ptdp_mem_category;
const char *ptdp_mem_category_name(int category);

typedef struct {
    ptdp_arena cat[PTDP_MEM_NCAT];
} ptdp_mem;

/* Every category a plan arena (start of the planning pass). */
void ptdp_mem_plan(ptdp_mem *m);
/* Ends the planning pass: one allocation per non-empty category of the
 * planned size via `alloc` (the backend's, which zeroes), each category then
 * a block arena at offset 0. PTDP_ENOMEM naming the category on failure
 * (what was allocated is freed with `release`). */
int ptdp_mem_alloc(ptdp_mem *m, void *(*alloc)(void *ctx, size_t),
                   void (*release)(void *ctx, void *), void *ctx);
/* 1 when every block arena is carved to exactly its size (plans match). */
int ptdp_mem_exact(const ptdp_mem *m);
/* Frees the blocks with `release`; a zeroed or plan ptdp_mem is a no-op. */
void ptdp_mem_free(ptdp_mem *m, void (*release)(void *ctx, void *), void *ctx);
size_t ptdp_mem_total(const ptdp_mem *m); /* sum of the sizes (plan: used) */

/* ---- files -------------------------------------------------------------- */
/* Reads a whole file (regular file or pipe) into a NUL-terminated malloc'd
 * buffer (caller frees *out). Errors: PTDP_EIO "cannot open <what> '<path>':
 * <reason>" or "error reading ...", PTDP_ENOMEM. */
int ptdp_read_file(const char *path, const char *what, char **out, size_t *len);

/* Nesting bound of ptdp's own JSON files (manifests, safetensors headers,
 * --config, vocabularies, cluster files): they need 3 levels. */
#define PTDP_JSON_MAX_DEPTH 32
/* Refuses text[len] when its arrays and objects nest deeper than max_depth
 * (brackets inside strings do not count). Returns PTDP_OK or PTDP_EFORMAT
 * with "<what>: JSON nested deeper than N levels". Reads nothing else: the
 * text may still be invalid JSON. Call it before cJSON_Parse on untrusted
 * text. */
int ptdp_json_check(const char *text, size_t len, int max_depth, const char *what);

/* ---- activation recomputation --------------------------------------------- */
/* Here because the model runs it and the planner (which must not include the
 * model) predicts its memory: one list for both. */
/* Activation recomputation (Megatron's --recompute-method with
 * --recompute-granularity full): uniform reruns consecutive groups of
 * recompute_num_layers layers keeping only each group's input; block reruns
 * the first recompute_num_layers layers of the chunk one by one and stores
 * the rest. selective (--recompute-granularity selective) stores every layer
 * but not what core attention keeps for its backward (the backend's
 * attention_saved_floats: the s x s probabilities on CUDA, a logsumexp per
 * row on the CPU): the backward reruns the attention forward from the stored
 * QKV into a workspace shared by all micro-batches. */
#define PTDP_RECOMPUTE_METHODS(X)        \
    X(PTDP_RECOMPUTE_NONE, "none")       \
    X(PTDP_RECOMPUTE_UNIFORM, "uniform") \
    X(PTDP_RECOMPUTE_BLOCK, "block")     \
    X(PTDP_RECOMPUTE_SELECTIVE, "selective")
typedef enum {
#define PTDP__RC_ENUM(e, s) e,
    PTDP_RECOMPUTE_METHODS(PTDP__RC_ENUM)
#undef PTDP__RC_ENUM
} ptdp_recompute_method;
/* PTDP_RECOMPUTE_* for a name of the table ("uniform", ...), or -1. */
int ptdp_recompute_method_parse(const char *name);
const char *ptdp_recompute_method_name(int method);
/* Model FLOPs of one iteration of a GPT (global batch B, sequence s, l layers,
 * hidden h, padded vocabulary V), the paper's count: 72 B s l h^2 (1 + s/6h)
 * for the layers (96 with full recomputation, uniform or block; selective adds
 * core attention's rerun, 4 B s^2 h l) plus 6 B s h V for the logit layer,
 * which nothing recomputes. So the paper's eq. (3), 96 B s l h^2 (1 + s/6h +
 * V/16lh), with full recomputation and 72 B s l h^2 (1 + s/6h + V/12lh)
 * without. The one formula `ptdp train`, bench_train and the planner report. */
double ptdp_model_flops(double B, double s, double l, double h, double V, int recompute);

/* ---- fault injection (tests) -------------------------------------------- */
/* The one hook through which tests make ptdp fail on purpose. It is compiled
 * into every build and driven by one environment variable:
 *   PTDP_FAULT=NAME[@RANK][:ITER][,NAME[@RANK][:ITER]...]
 * ptdp_fault(NAME) is 1 when an entry names NAME and, if it gives @RANK, the
 * calling process is that global rank (ptdp_log_rank); ptdp_fault_at also
 * needs :ITER to equal `iteration` when the entry gives one. The points
 * (docs/testing.md lists them): start (a rank fails at start-up), die (a
 * rank aborts before training iteration ITER), perturb (a data-parallel
 * replica nudges one weight after iteration ITER), save (a rank's checkpoint
 * shard write fails), nan (a rank puts a nan into its gradients before the
 * backward of iteration ITER). Reads the environment on each call; keeps no state. */
int ptdp_fault(const char *name);
int ptdp_fault_at(const char *name, int64_t iteration);
/* Kills or stops this process at a named point, to test what the other ranks
 * do when a peer is lost: an entry kill.POINT[@RANK][:ITER] raises SIGKILL,
 * stop.POINT[@RANK][:ITER] raises SIGSTOP (a hung rank), each after one line
 * on stderr; ITER is compared with ptdp_activity_iteration(). POINT is
 * `what`, or `group-what` when group is not NULL (comm.c passes its group and
 * operation: "tensor-all-reduce", "pipeline-send", "data-all-gather", ...).
 * Returns at once when PTDP_FAULT is unset (read once, then cached). */
void ptdp_fault_point(const char *group, const char *what);

/* ---- what this process is doing ----------------------------------------- */
/* Process-wide, like the rank: the training iteration in progress (0 before
 * the first) and a phase name (a string literal: "forward", "checkpoint
 * save", ...). Written by the thread that runs the iterations; read by the
 * fault points and by comm's watchdog for its message (comm.h). */
void ptdp_activity_set(int64_t iteration, const char *phase);
void ptdp_activity_phase(const char *phase);
int64_t ptdp_activity_iteration(void);
const char *ptdp_activity_phase_name(void); /* "" before any */

/* ---- parameter description --------------------------------------------- */
/* What every layer above needs to know about one model parameter: its role,
 * how it is split over the tensor-parallel group, how it is initialised, and
 * where it sits. It lives here, the lowest layer, because model/ builds the
 * descriptions while optim/ (weight decay, norm counting) and ckpt/ (the
 * tied embedding) read them, and optim/ may not include model/. It is pure
 * data, so it does not belong in kernels.h (the compute backend's table).
 * Code that needs "the tied embedding" asks for PTDP_ROLE_EMBEDDING; no one
 * compares names. */

/* X(enum, name, weight_decay): decoupled weight decay applies to weight
 * matrices and embeddings, never to biases or LayerNorm parameters
 * (Megatron's rule). */
#define PTDP_PARAM_ROLES(X)                                                  \
    X(PTDP_ROLE_EMBEDDING, "embedding", 1) /* tied word embedding [Vp, h] */ \
    X(PTDP_ROLE_POSITION, "position", 1)   /* position embedding */          \
    X(PTDP_ROLE_LAYERNORM, "layernorm", 0) /* LayerNorm gain and bias */     \
    X(PTDP_ROLE_BIAS, "bias", 0)           /* a linear layer's bias */       \
    X(PTDP_ROLE_WEIGHT, "weight", 1)       /* a linear layer's weight */
typedef enum {
#define PTDP__ROLE_ENUM(e, s, wd) e,
    PTDP_PARAM_ROLES(PTDP__ROLE_ENUM)
#undef PTDP__ROLE_ENUM
} ptdp_param_role;

/* How a global parameter is split over the tensor-parallel group. */
#define PTDP_SPLITS(X)                                                       \
    X(PTDP_SPLIT_NONE, "replicated") /* every TP rank holds all of it */     \
    X(PTDP_SPLIT_DIM0, "dim0")       /* rows: column-parallel, vocabulary */ \
    X(PTDP_SPLIT_DIM1, "dim1")       /* columns: row-parallel weights */
typedef enum {
#define PTDP__SPLIT_ENUM(e, s) e,
    PTDP_SPLITS(PTDP__SPLIT_ENUM)
#undef PTDP__SPLIT_ENUM
} ptdp_split;

#define PTDP_INITS(X)                                                  \
    X(PTDP_INIT_NORMAL, "normal")        /* N(0, init_std) */          \
    X(PTDP_INIT_SCALED, "scaled-normal") /* N(0, init_std/sqrt(2l)) */ \
    X(PTDP_INIT_ZERO, "zero")                                          \
    X(PTDP_INIT_ONE, "one")
typedef enum {
#define PTDP__INIT_ENUM(e, s) e,
    PTDP_INITS(PTDP__INIT_ENUM)
#undef PTDP__INIT_ENUM
} ptdp_init;

typedef struct {
    char name[96]; /* global name, e.g. "layers.3.mlp.dense_h_to_4h.weight";
                      for files and RNG streams, never for finding roles */
    ptdp_param_role role;
    ptdp_split split;
    ptdp_init init;
    int ndim;           /* 1 or 2 */
    int64_t gshape[2];  /* global shape ([out, in] for weights) */
    int64_t lshape[2];  /* this rank's shape */
    int64_t offset;     /* element offset in the chunk's flat buffer */
    int64_t numel;      /* local elements */
    int64_t valid_rows; /* dim0 rows that hold real data (the vocabulary's
                           padding rows are excluded); = lshape[0] otherwise */
} ptdp_param_spec;

/* ---- 16-bit floats (half.c) ---------------------------------------------- */
/* bf16 (8-bit exponent, fp32's range) and IEEE fp16 (5-bit exponent, largest
 * finite 65504) as raw uint16_t bits. To fp32: exact. From fp32: round to
 * nearest, ties to even; NaN stays NaN (same sign, quiet, top payload bits);
 * fp16 subnormals are rounded correctly; beyond the range gives +-inf (fp16:
 * |x| >= 65520), so a caller that must refuse overflow checks for a finite
 * input with an infinite result. Pure functions, thread-safe. */
static inline float ptdp_bf16_to_f32(uint16_t h) { /* inline: kernels widen in their loops */
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
uint16_t ptdp_f32_to_bf16(float f);
float ptdp_f16_to_f32(uint16_t h);
uint16_t ptdp_f32_to_f16(float f);
/* The same over n elements, bit for bit, fast: F16C and AVX512_BF16 when the
 * CPU has them (checked at run time). The 16-bit side is n little-endian
 * values at any alignment (file data); dst and src must not overlap. */
void ptdp_bf16_to_f32_n(float *dst, const void *src, int64_t n);
void ptdp_f32_to_bf16_n(void *dst, const float *src, int64_t n);
void ptdp_f16_to_f32_n(float *dst, const void *src, int64_t n);
void ptdp_f32_to_f16_n(void *dst, const float *src, int64_t n);
/* In place over fp32 storage: x[i] becomes the nearest bf16 / fp16 value
 * (the same rounding as above, returned to fp32: what a 16-bit tensor would
 * hold; fp16 overflow gives +-inf). Parallel over OpenMP threads. */
void ptdp_round_bf16_n(float *x, int64_t n);
void ptdp_round_f16_n(float *x, int64_t n);

/* Training precision (Megatron's --bf16 / --fp16; fp32 by default): the grid
 * of activations and working weights, see kernels.h. */
#define PTDP_DTYPES(X)            \
    X(PTDP_DTYPE_FP32, "fp32", 4) \
    X(PTDP_DTYPE_BF16, "bf16", 2) \
    X(PTDP_DTYPE_FP16, "fp16", 2)
typedef enum {
#define PTDP__DTYPE_ENUM(e, s, b) e,
    PTDP_DTYPES(PTDP__DTYPE_ENUM)
#undef PTDP__DTYPE_ENUM
} ptdp_dtype;
const char *ptdp_dtype_name(ptdp_dtype d);

/* Messages of a 16-bit run: the n values of src (fp32 storage) as n
 * 16-bit values of dt at dst (bf16, fp16; fp32: the floats themselves),
 * rounded as ptdp_f32_to_bf16/f16 round (exact for values on the grid).
 * dst may overlap src if it does not start after it (packing in place:
 * dst == src). Single-threaded, fixed-size stack blocks, no allocation. */
void ptdp_pack_n(void *dst, const float *src, int64_t n, ptdp_dtype dt);
/* The inverse, exact: dst may overlap src if it does not start before it
 * (unpacking in place: dst == src, the 16-bit values in its first 2 n
 * bytes). */
void ptdp_unpack_n(float *dst, const void *src, int64_t n, ptdp_dtype dt);

/* Which instructions the bulk functions use on this CPU: "f16c+avx512bf16",
 * "f16c" or "portable" (for logs and tests). */
const char *ptdp_half_simd(void);

/* ---- time ------------------------------------------------------------- */
double ptdp_now(void); /* seconds, monotonic */

/* Human readable byte count, e.g. "12.5 MiB"; buf must hold 32 chars. */
const char *ptdp_fmt_bytes(double bytes, char *buf);

/* ---- command-line options ------------------------------------------------ */
/* A table-driven parser for Megatron-style flags (--name value, --flag).
 * Each option writes into caller-owned storage. */
typedef enum {
    PTDP_OPT_INT,     /* int64_t */
    PTDP_OPT_FLOAT,   /* double */
    PTDP_OPT_FLOAT32, /* float (checked against min/max as a double, then rounded) */
    PTDP_OPT_STR,     /* const char * (points into argv or the JSON config) */
    PTDP_OPT_BOOL,    /* int; "--name" sets 1 */
    PTDP_OPT_NEGBOOL  /* int; "--name" sets 0 (e.g. --no-overlap-grad-reduce) */
} ptdp_opt_type;

typedef struct {
    const char *name; /* without leading dashes, e.g. "num-layers" */
    ptdp_opt_type type;
    void *dst;
    const char *help;
    const char *choices; /* for STR: "a|b|c" or NULL */
    double min;          /* for INT/FLOAT: inclusive bounds */
    double max;
    int seen; /* set by the parser */
} ptdp_opt;

/* Parses argv[0..argc) (no program name). Returns PTDP_OK, or PTDP_EINVAL
 * with a message naming the flag and what is allowed. "--help"/"-h" sets
 * *want_help. Unknown flags suggest the closest known one. */
int ptdp_opts_parse(ptdp_opt *opts, int nopts, int argc, char **argv, int *want_help);
/* Sets one option from its name and textual value (used for JSON configs). */
int ptdp_opt_set(ptdp_opt *opts, int nopts, const char *name, const char *value,
                 const char *origin);
ptdp_opt *ptdp_opt_find(ptdp_opt *opts, int nopts, const char *name);
/* Prints "  --name VALUE   help (default: ...)" lines. */
void ptdp_opts_help(FILE *f, const ptdp_opt *opts, int nopts);

#ifdef __cplusplus
}
#endif

#endif
