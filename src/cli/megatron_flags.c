/* megatron_flags.c - Megatron-LM's flags that are not in ptdp's flag table
 * (args.c), so that a Megatron launch script runs or says at once everything
 * that stops it. Each such flag is one of:
 *   - inert: accepted because it changes nothing in ptdp (a fusion switch,
 *     the communication backend, loader workers, checkpoint machinery);
 *     `ptdp train` names each one once at start-up with the reason;
 *   - refused: with the reason and what to use instead.
 * Flags that ptdp implements, or accepts with their ptdp meaning
 * (--recompute-activations, --optimizer adam, --use-checkpoint-args), are
 * ordinary flags of args.c's table, and the table always wins: a row here
 * for a name the table has is never reached.
 * ptdp__megatron_scan reads a command line (or a --config file's keys)
 * against both and reports every unknown or refused flag in one message.
 * docs/megatron.md lists the same rows for users; tests/test_megatron_flags.sh
 * checks the two agree.
 *
 * Not here: flags of other commands (plan, generate, ...), which keep the
 * plain "unknown flag" message with a spelling guess. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

enum { INERT, REFUSED };

typedef struct {
    const char *name;   /* without the leading "--" */
    int nargs;          /* values it takes: 0 (a switch), 1, or more */
    int kind;           /* INERT or REFUSED */
    const char *values; /* INERT with a value: the values accepted ("a|b"), NULL: any */
    const char *say;    /* INERT: why it changes nothing; REFUSED: why, and what to use */
} megatron_flag;

#define INERT_SWITCH(flag, why) \
    { flag, 0, INERT, NULL, why }
#define INERT_VALUE(flag, vals, why) \
    { flag, 1, INERT, vals, why }
#define REFUSE(flag, n, why) \
    { flag, n, REFUSED, NULL, "--" flag " is not supported: " why }
/* What changes the model: ptdp's GPT is GPT-2's, nothing else. */
#define GPT2_ONLY(flag, n, what)                                                           \
    {                                                                                      \
        flag, n, REFUSED, NULL,                                                            \
            "--" flag " is not supported: ptdp's GPT is GPT-2's (" what "); drop the flag" \
    }

static const char fusion[] = "a kernel-fusion switch; ptdp's kernels compute the same values "
                             "either way";
static const char attention[] = "ptdp has one attention kernel per device (flash-style tiles; "
                                "no s x s scores kept on the CPU)";
static const char ckpt[] = "checkpoint machinery; ptdp writes its own format from every rank at "
                           "once, and any layout loads it (docs/checkpoint-format.md; `ptdp "
                           "checkpoint import-megatron` converts Megatron's --ckpt-format torch)";
static const char timing[] = "ptdp's timings are the iteration line, --log-timers-to-tensorboard "
                             "and --trace";
static const char one_gpt[] = "ptdp has one GPT implementation";
#define WANDB "see --tensorboard-dir or --log-jsonl (one JSON object per iteration)"
#define MOE "dense MLPs, no mixture of experts"
#define CONST_BATCH "the global batch is constant (--global-batch-size); drop the flag"
#define FSDP "ptdp shards the optimizer state with --use-distributed-optimizer (ZeRO-1), not FSDP"
#define NO_FP8 "ptdp trains in fp32, bf16 or fp16"
#define TPD "ptdp's parallelisms are tensor, pipeline and data (t x p x d)"

static const megatron_flag table[] = {
    /* ---- inert: accepted, noted once at start-up ---- */
    INERT_SWITCH("use-mcore-models", one_gpt),
    INERT_SWITCH("use-legacy-models", one_gpt),
    INERT_VALUE("transformer-impl", "local|transformer_engine",
                "ptdp's own layers compute the same GPT-2 model as either implementation"),
    INERT_VALUE("attention-backend", "auto|flash|fused|unfused|local", attention),
    INERT_SWITCH("use-flash-attn", attention),
    INERT_SWITCH("no-masked-softmax-fusion", fusion),
    INERT_SWITCH("no-bias-gelu-fusion", fusion),
    INERT_SWITCH("no-bias-dropout-fusion", fusion),
    INERT_SWITCH("no-bias-swiglu-fusion", fusion),
    INERT_SWITCH("no-persist-layer-norm", fusion),
    INERT_SWITCH("no-gradient-accumulation-fusion", fusion),
    INERT_SWITCH("no-rope-fusion", fusion),
    INERT_SWITCH("cross-entropy-loss-fusion", fusion),
    INERT_SWITCH("tp-comm-overlap", "Transformer Engine's communication overlap: ptdp's "
                                    "tensor-parallel collectives give the same values"),
    INERT_SWITCH("overlap-param-gather",
                 "ptdp all-gathers the ZeRO-1 parameters after the step (the same values, "
                 "not overlapped)"),
    INERT_VALUE("distributed-backend", "nccl|gloo", "ptdp's ranks communicate over MPI"),
    INERT_VALUE("DDP-impl", "local|torch", "ptdp has its own data-parallel reduction"),
    INERT_VALUE("num-workers", NULL,
                "ptdp reads its data in the training process (no loader workers)"),
    INERT_VALUE("data-cache-path", NULL,
                "ptdp builds the dataset's sample indices in memory at start-up and caches "
                "nothing on disk"),
    INERT_VALUE("data-impl", "mmap|infer|lazy|cached",
                "ptdp reads Megatron's .bin/.idx datasets by mapping them"),
    INERT_SWITCH("no-mmap-bin-files", "whether .bin files are mapped or read changes no value"),
    INERT_SWITCH("no-create-attention-mask-in-dataloader",
                 "ptdp's causal mask is implicit in the attention kernel"),
    INERT_SWITCH("deterministic-mode",
                 "ptdp is deterministic: a run repeats bit for bit for the same layout and "
                 "thread count"),
    INERT_SWITCH("use-cpu-initialization",
                 "ptdp's initial values are a function of (seed, tensor, element) wherever they "
                 "are computed"),
    INERT_VALUE("ckpt-format", NULL, ckpt),
    INERT_SWITCH("use-dist-ckpt", ckpt),
    INERT_SWITCH("auto-detect-ckpt-format", ckpt),
    INERT_SWITCH("async-save", "ptdp writes checkpoints synchronously (the same files)"),
    INERT_SWITCH("use-persistent-ckpt-worker",
                 "ptdp writes checkpoints synchronously (the same files)"),
    INERT_SWITCH("ckpt-fully-parallel-save", ckpt),
    INERT_SWITCH("no-ckpt-fully-parallel-save", ckpt),
    INERT_SWITCH("ckpt-fully-parallel-load", ckpt),
    INERT_SWITCH("ckpt-assume-constant-structure", ckpt),
    INERT_SWITCH("dist-ckpt-optim-fully-reshardable", ckpt),
    INERT_VALUE("dist-ckpt-strictness", NULL, ckpt),
    INERT_SWITCH("no-load-rng",
                 "ptdp draws its random numbers from counters (seed, iteration, position): a "
                 "checkpoint holds no RNG state"),
    INERT_SWITCH("no-save-rng",
                 "ptdp draws its random numbers from counters (seed, iteration, position): a "
                 "checkpoint holds no RNG state"),
    INERT_VALUE("timing-log-level", "0|1|2", timing),
    INERT_VALUE("timing-log-option", "max|minmax|all", timing),
    INERT_SWITCH("log-params-norm",
                 "logging only; ptdp does not compute the parameter norm (the iteration line "
                 "shows the gradient norm)"),
    INERT_SWITCH("log-num-zeros-in-grad", "logging only; ptdp does not count zero gradients"),
    INERT_SWITCH("log-memory-to-tensorboard",
                 "logging only; ptdp's memory is planned once and printed at start-up"),
    INERT_SWITCH("log-progress", "logging only; ptdp writes no progress.txt (see --log-jsonl)"),
    INERT_VALUE("empty-unused-memory-level", "0|1|2",
                "ptdp allocates nothing during training, so there is no cache to empty"),
    INERT_SWITCH("manual-gc", "ptdp has no garbage collector"),

    /* ---- refused: why, and what to use ---- */
    REFUSE("wandb-project", 1, WANDB),
    REFUSE("wandb-exp-name", 1, WANDB),
    REFUSE("wandb-save-dir", 1, WANDB),
    REFUSE("wandb-entity", 1, WANDB),
    REFUSE("rampup-batch-size", 3, CONST_BATCH),
    REFUSE("step-batch-size-schedule", 1, CONST_BATCH),
    REFUSE("context-parallel-size", 1, TPD),
    REFUSE("cp-comm-type", 1, TPD),
    REFUSE("fp8-format", 1, NO_FP8),
    REFUSE("fp8-recipe", 1, NO_FP8),
    REFUSE("fp8-param-gather", 0, NO_FP8),
    REFUSE("fp8-amax-history-len", 1, NO_FP8),
    REFUSE("fp8-amax-compute-algo", 1, NO_FP8),
    REFUSE("use-torch-fsdp2", 0, FSDP),
    REFUSE("use-megatron-fsdp", 0, FSDP),
    REFUSE("calculate-per-token-loss", 0,
           "ptdp averages each micro-batch's loss over its tokens (Megatron's default); drop "
           "the flag"),
    REFUSE("decoupled-lr", 1, "one learning rate for every parameter (--lr); drop the flag"),
    REFUSE("decoupled-min-lr", 1,
           "one learning rate for every parameter (--min-lr); drop the flag"),
    REFUSE("tokenizer-model", 1,
           "ptdp's tokenizer is GPT-2's BPE (--vocab-file and --merge-file), or give token ids "
           "with --token-file"),
    REFUSE("init-method-xavier-uniform", 0,
           "ptdp initialises from a normal distribution of --init-method-std"),
    /* older Megatron-LM names, which Megatron-LM itself now refuses */
    REFUSE("checkpoint-activations", 0,
           "Megatron-LM removed it too: use --recompute-activations (selective "
           "recomputation) or --recompute-granularity full --recompute-method uniform "
           "--recompute-num-layers 1"),
    REFUSE("activations-checkpoint-method", 1,
           "older Megatron-LM's name: use --recompute-granularity full --recompute-method "
           "uniform|block --recompute-num-layers N"),
    REFUSE("model-parallel-size", 1, "older Megatron-LM's name: use --tensor-model-parallel-size"),
    REFUSE("warmup", 1,
           "older Megatron-LM's name: use --lr-warmup-fraction or "
           "--lr-warmup-iters"),
    REFUSE("batch-size", 1, "older Megatron-LM's name: use --micro-batch-size"),
    /* the model: GPT-2's and nothing else */
    GPT2_ONLY("kv-channels", 1, "head size = --hidden-size / --num-attention-heads"),
    GPT2_ONLY("squared-relu", 0, "tanh-approximated GeLU"),
    GPT2_ONLY("openai-gelu", 0, "tanh-approximated GeLU, which is OpenAI's"),
    GPT2_ONLY("add-qkv-bias", 0, "every linear layer has a bias"),
    GPT2_ONLY("qk-layernorm", 0, "no LayerNorm on queries and keys"),
    GPT2_ONLY("apply-residual-connection-post-layernorm", 0, "pre-LayerNorm residual connections"),
    GPT2_ONLY("apply-layernorm-1p", 0, "LayerNorm weights start at 1"),
    GPT2_ONLY("apply-query-key-layer-scaling", 0, "attention scores scaled by 1/sqrt(head size)"),
    GPT2_ONLY("no-position-embedding", 0, "learned absolute position embeddings"),
    GPT2_ONLY("num-experts", 1, MOE),
    GPT2_ONLY("moe-router-topk", 1, MOE),
    GPT2_ONLY("moe-ffn-hidden-size", 1, MOE),
    GPT2_ONLY("moe-grouped-gemm", 0, MOE),
    GPT2_ONLY("moe-router-load-balancing-type", 1, MOE),
    GPT2_ONLY("moe-aux-loss-coeff", 1, MOE),
    GPT2_ONLY("moe-token-dispatcher-type", 1, MOE),
    GPT2_ONLY("expert-model-parallel-size", 1, MOE),
    GPT2_ONLY("expert-tensor-parallel-size", 1, MOE),
    /* older Megatron-LM's switch for what --position-embedding-type rope says now */
    REFUSE("use-rotary-position-embeddings", 0,
           "older Megatron-LM's name: use --position-embedding-type rope"),
};
#define NTABLE (int)(sizeof table / sizeof table[0])

/* Values of ptdp's own flags that Megatron-LM has and ptdp does not: the
 * reason, in place of "must be one of". value NULL: any value outside the
 * flag's choices. */
static const struct {
    const char *flag, *value, *say;
} refused_values[] = {
    /* others */
    {"position-embedding-type", NULL,
     "--position-embedding-type: ptdp has learned absolute position embeddings (GPT-2's) and "
     "rotary ones (rope); use learned_absolute or rope"},
    {"optimizer", NULL,
     "--optimizer: ptdp's optimizer is AdamW (Megatron-LM's adam, with decoupled "
     "--weight-decay); use --optimizer adam or drop the flag"},
    {"tokenizer-type", NULL,
     "--tokenizer-type: ptdp's tokenizer is GPT-2's BPE (GPT2BPETokenizer with --vocab-file and "
     "--merge-file); or give token ids with --token-file"},
};

static const megatron_flag *find(const char *name) {
    for (int i = 0; i < NTABLE; i++)
        if (!strcmp(table[i].name, name)) return &table[i];
    return NULL;
}

static int in_choices(const char *choices, const char *v) {
    const size_t n = strlen(v);
    for (const char *p = choices; *p;) {
        const char *e = strchr(p, '|');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, v, n)) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

/* Appends one problem to the report: its first line is kept whole for a
 * report of one; later ones add "  TEXT" lines. */
static void add_problem(ptdp__flag_report *r, const char *text) {
    if (r->count == 0) snprintf(r->first, sizeof r->first, "%s", text);
    size_t len = strlen(r->lines);
    if (len + strlen(text) + 64 < sizeof r->lines)
        snprintf(r->lines + len, sizeof r->lines - len, "\n  %s", text);
    else
        r->left_out++;
    r->count++;
}

static void add_note(ptdp_args *a, const megatron_flag *f, const char *value) {
    if (a->n_inert >= PTDP_ARGS_MAX_INERT) return;
    for (int i = 0; i < a->n_inert; i++) /* a flag given twice is noted once */
        if (!strcmp(a->inert[i].name, f->name)) return;
    a->inert[a->n_inert].name = f->name;
    a->inert[a->n_inert].value = value;
    a->inert[a->n_inert].why = f->say;
    a->n_inert++;
}

int ptdp__megatron_check(ptdp_opt *opts, int nopts, const char *name, const char *value,
                         const char *origin, ptdp_args *a, ptdp__flag_report *r) {
    char text[1024];
    const ptdp_opt *o = ptdp_opt_find(opts, nopts, name);
    if (o) {
        if (o->type != PTDP_OPT_STR || !o->choices || !value || in_choices(o->choices, value))
            return 0;
        for (size_t i = 0; r->megatron && i < sizeof refused_values / sizeof refused_values[0]; i++)
            if (!strcmp(refused_values[i].flag, name) &&
                (!refused_values[i].value || !strcmp(refused_values[i].value, value))) {
                if (refused_values[i].value)
                    snprintf(text, sizeof text, "%s", refused_values[i].say);
                else
                    snprintf(text, sizeof text, "%s (got '%s')", refused_values[i].say, value);
                add_problem(r, text);
                return 1;
            }
        return 0; /* the parser's "must be one of" */
    }
    const megatron_flag *f = r->megatron ? find(name) : NULL;
    if (f && f->kind == INERT && f->values && value && !in_choices(f->values, value)) {
        snprintf(text, sizeof text, "--%s %s is not supported: ptdp accepts %s (%s)", name, value,
                 f->values, f->say);
        add_problem(r, text);
    } else if (f && f->kind == INERT) {
        add_note(a, f, f->nargs ? value : NULL);
    } else if (f) {
        add_problem(r, f->say);
    } else {
        /* unknown: the option parser's message, with its spelling guess */
        ptdp_opt_set(opts, nopts, name, value, origin);
        snprintf(text, sizeof text, "%s", ptdp_last_error());
        add_problem(r, text);
    }
    return 1;
}

int ptdp__megatron_nargs(const char *name) {
    const megatron_flag *f = find(name);
    return f ? f->nargs : -1;
}

int ptdp__megatron_report(const ptdp__flag_report *r) {
    if (r->count == 0) return PTDP_OK;
    if (r->count == 1) return ptdp_errorf(PTDP_EINVAL, "%s", r->first);
    if (r->left_out)
        return ptdp_errorf(PTDP_EINVAL,
                           "%d flags are unknown or not supported (nothing was run):%s\n  ... and "
                           "%d more",
                           r->count, r->lines, r->left_out);
    return ptdp_errorf(PTDP_EINVAL, "%d flags are unknown or not supported (nothing was run):%s",
                       r->count, r->lines);
}
