/* cmd_generate.c - `ptdp generate`: load HF GPT-2 safetensors, run a prompt
 * through the model with a KV cache and sample a continuation (greedy,
 * temperature, top-k, top-p), tensor parallel under `mpirun -np t`.
 *
 * The model shape comes from, in order of precedence: the flags, the
 * NAME.config.json beside NAME.safetensors (written by `ptdp train
 * --save-safetensors` and `ptdp export`), else config.json there (keys
 * vocab_size, n_positions, n_embd, n_layer, n_head),
 * the file's __metadata__ (the same keys), and the tensor shapes (all but the
 * number of heads). With --vocab-file/--merge-file the prompt is text and
 * the output is text; without, the prompt is a space-separated list of ids
 * and the output is ids. Rank 0 prints the prompt and the continuation on
 * stdout and a summary line (tokens/s) on stderr.
 * Weights from --init-from (HF safetensors) or --load (a ptdp checkpoint).
 * Not here: pipeline parallelism, batches of prompts, stopping at
 * <|endoftext|>. */
#define _POSIX_C_SOURCE 200809L
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "cli/cli.h"
#include "data/data.h"
#include "model/model.h"

typedef struct {
    const char *init_from, *load, *prompt, *vocab_file, *merge_file, *gemm;
    int64_t max_new_tokens, top_k, seed, t, divisible_by;
    int allow_extra_tensors, bf16, fp16;
    double temperature, top_p;
    /* model shape: 0 means "from config.json / the file" */
    int64_t num_layers, hidden_size, num_attention_heads, max_position_embeddings, vocab_size;
} gen_args;

#define I(name, field, help, lo, hi) \
    { name, PTDP_OPT_INT, &a->field, help, NULL, lo, hi, 0 }
#define F(name, field, help, lo, hi) \
    { name, PTDP_OPT_FLOAT, &a->field, help, NULL, lo, hi, 0 }
#define S(name, field, help, choices) \
    { name, PTDP_OPT_STR, &a->field, help, choices, 0, 0, 0 }

static int table(gen_args *a, ptdp_opt *opts) {
    const ptdp_opt t[] = {
        S("init-from", init_from, "Hugging Face GPT-2 safetensors weights (or --load)", NULL),
        S("load", load,
          "a ptdp checkpoint directory (any layout it was saved from; or --init-from)", NULL),
        {"allow-extra-tensors", PTDP_OPT_BOOL, &a->allow_extra_tensors,
         "with --init-from: ignore tensors of the file the model does not use", NULL, 0, 1, 0},
        S("prompt", prompt,
          "prompt text (with --vocab-file), else space-separated token ids (required)", NULL),
        I("max-new-tokens", max_new_tokens, "tokens to generate (prompt + these <= positions)", 1,
          1e9),
        F("temperature", temperature, "softmax temperature; 0 is greedy (argmax)", 0, 1e6),
        I("top-k", top_k, "sample among the k most likely tokens (0: off)", 0, 1e9),
        F("top-p", top_p, "nucleus: smallest set with probability >= p, in (0, 1] (1: off)", 0, 1),
        I("seed", seed, "sampling seed (the same stream on every rank)", 0, 1e15),
        S("vocab-file", vocab_file, "GPT-2 encoder.json: text prompt and output", NULL),
        S("merge-file", merge_file, "GPT-2 vocab.bpe merges", NULL),
        I("num-layers", num_layers, "l (default: config.json / the file)", 0, 100000),
        I("hidden-size", hidden_size, "h (default: config.json / the file)", 0, 1000000),
        I("num-attention-heads", num_attention_heads,
          "a (default: config.json / the file's metadata)", 0, 100000),
        I("max-position-embeddings", max_position_embeddings,
          "positions (default: config.json / the file)", 0, 1000000),
        I("vocab-size", vocab_size, "V (default: config.json / the file)", 0, 100000000),
        I("make-vocab-size-divisible-by", divisible_by, "pad V to a multiple of this x t", 1,
          1000000),
        I("tensor-model-parallel-size", t, "tensor-parallel size t (run under mpirun -np t)", 1,
          4096),
        S("gemm", gemm, "GEMM library", "onednn|openblas"),
        {"bf16", PTDP_OPT_BOOL, &a->bf16,
         "run in bf16 (weights and activations rounded to bf16, fp32 arithmetic; default fp32)",
         NULL, 0, 1, 0},
        {"fp16", PTDP_OPT_BOOL, &a->fp16, "run in fp16 likewise", NULL, 0, 1, 0},
    };
    memcpy(opts, t, sizeof t);
    return (int)(sizeof t / sizeof t[0]);
}

static void usage(FILE *f, const ptdp_opt *opts, int n) {
    fprintf(
        f,
        "usage: ptdp generate --init-from FILE.safetensors --prompt TEXT [--max-new-tokens N]\n"
        "                     [--temperature X] [--top-k K] [--top-p P] [--seed S]\n"
        "                     [--vocab-file encoder.json --merge-file vocab.bpe] [model flags]\n\n"
        "Samples a continuation of the prompt with a KV cache. Weights: --init-from (the model shape is\n"
        "read from NAME.config.json or config.json beside NAME.safetensors, or the file itself; flags\n"
        "override but must match the file) or --load DIR (a ptdp checkpoint, any layout; the shape comes\n"
        "from it). Tensor parallel: mpirun -np t ptdp generate ... --tensor-model-parallel-size t.\n\nflags:\n");
    ptdp_opts_help(f, opts, n);
}

static int status_of(int rc) {
    return rc == PTDP_EIO || rc == PTDP_ENOMEM || rc == PTDP_ECOMM || rc == PTDP_EBACKEND ? 1 : 2;
}

/* Fills the shape fields still 0 from config.json beside `weights`, then
 * from the file's metadata and tensor shapes. */
static int model_shape(gen_args *a, const char *weights) {
    int64_t *fields[PTDP_HF_NKEYS] = {&a->vocab_size, &a->max_position_embeddings, &a->hidden_size,
                                      &a->num_layers, &a->num_attention_heads};
    char cfgpath[4096], where[4096];
    int64_t said[PTDP_HF_NKEYS];
    int found = 0;
    for (int source = 0; source < 2; source++) { /* config.json, then the file's metadata */
        int rc = ptdp__cli_hf_shape(weights, source, said, &found, where, sizeof where);
        if (rc) return rc;
        if (source == 0) snprintf(cfgpath, sizeof cfgpath, "%s", where);
        for (int k = 0; k < PTDP_HF_NKEYS; k++)
            if (*fields[k] == 0) *fields[k] = said[k];
    }
    ptdp_st_file *st = NULL;
    int rc = ptdp_st_open(&st, weights);
    if (rc) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", ptdp_last_error());
        return ptdp_errorf(rc, "--init-from: %s", msg);
    }
    const char *prefix[2] = {"transformer.", ""};
    for (int p = 0; p < 2; p++) {
        char nm[128];
        snprintf(nm, sizeof nm, "%swte.weight", prefix[p]);
        const ptdp_st_tensor *wte = ptdp_st_find(st, nm);
        snprintf(nm, sizeof nm, "%swpe.weight", prefix[p]);
        const ptdp_st_tensor *wpe = ptdp_st_find(st, nm);
        if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2) continue;
        if (!a->vocab_size) a->vocab_size = wte->shape[0];
        if (!a->hidden_size) a->hidden_size = wte->shape[1];
        if (!a->max_position_embeddings) a->max_position_embeddings = wpe->shape[0];
        int64_t l = 0;
        for (;; l++) {
            snprintf(nm, sizeof nm, "%sh.%lld.ln_1.weight", prefix[p], (long long)l);
            if (!ptdp_st_find(st, nm)) break;
        }
        if (!a->num_layers) a->num_layers = l;
        break;
    }
    ptdp_st_close(st);
    for (int k = 0; k < PTDP_HF_NKEYS; k++)
        if (*fields[k] <= 0)
            return ptdp_errorf(PTDP_EINVAL, "%s: not in %s, nor in %s; give the flag",
                               ptdp__cli_hf_flags[k], cfgpath, weights);
    return PTDP_OK;
}

/* Prompt ids from text or a list of ids; *ids malloc'd (caller frees). */
static int prompt_ids(const gen_args *a, const ptdp_tokenizer *tok, int32_t **ids, int64_t *n) {
    *ids = NULL;
    *n = 0;
    if (tok) {
        ptdp_tokens t = {0};
        ptdp_tok_cache *cache = ptdp_tok_cache_new();
        int rc = ptdp_tokenizer_encode(tok, cache, a->prompt, strlen(a->prompt), &t);
        ptdp_tok_cache_free(cache);
        if (rc) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", ptdp_last_error());
            return ptdp_errorf(rc, "--prompt: %s", msg);
        }
        *ids = malloc(sizeof(int32_t) * (t.n ? t.n : 1));
        if (!*ids) return ptdp_errorf(PTDP_ENOMEM, "out of memory for the prompt");
        memcpy(*ids, t.ids, sizeof(int32_t) * t.n);
        *n = (int64_t)t.n;
        ptdp_tokens_free(&t);
        return PTDP_OK;
    }
    size_t cap = strlen(a->prompt) / 2 + 1;
    *ids = malloc(sizeof(int32_t) * cap);
    if (!*ids) return ptdp_errorf(PTDP_ENOMEM, "out of memory for the prompt");
    const char *p = a->prompt;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == ',') p++;
        if (!*p) break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != ','))
            return ptdp_errorf(
                PTDP_EINVAL,
                "--prompt: '%.20s' is not a token id (without --vocab-file the prompt "
                "is a space-separated list of ids)",
                p);
        if (v < 0 || v >= a->vocab_size)
            return ptdp_errorf(PTDP_EINVAL,
                               "--prompt: token id %lld is outside the vocabulary [0, %lld)", v,
                               (long long)a->vocab_size);
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
    }
    return PTDP_OK;
}

static void emit(const ptdp_tokenizer *tok, const int32_t *ids, int64_t n, int first, char **buf,
                 size_t *cap) {
    if (!tok) {
        for (int64_t i = 0; i < n; i++) printf(first && i == 0 ? "%d" : " %d", ids[i]);
    } else {
        size_t len = 0;
        if (ptdp_tokenizer_decode(tok, ids, (size_t)n, buf, &len, cap) == PTDP_OK)
            fwrite(*buf, 1, len, stdout);
    }
    fflush(stdout);
}

int ptdp_cmd_generate(int argc, char **argv) {
    gen_args a;
    memset(&a, 0, sizeof a);
    a.max_new_tokens = 32;
    a.temperature = 1.0;
    a.top_p = 1.0;
    a.seed = 1234;
    a.t = 1;
    a.divisible_by = 128;
    a.gemm = "onednn";
    ptdp_opt opts[32];
    int nopts = table(&a, opts), help = 0;
    int rc = ptdp_opts_parse(opts, nopts, argc, argv, &help);
    if (help) {
        usage(stdout, opts, nopts);
        return 0;
    }
    if (rc == PTDP_OK && !a.init_from && !a.load)
        rc = ptdp_errorf(
            PTDP_EINVAL,
            "missing the weights: give --init-from FILE.safetensors or --load DIR (see --help)");
    if (rc == PTDP_OK && a.init_from && a.load)
        rc = ptdp_errorf(PTDP_EINVAL, "--init-from and --load exclude each other; give one");
    if (rc == PTDP_OK && !a.prompt)
        rc = ptdp_errorf(PTDP_EINVAL, "missing required flag --prompt (see --help)");
    if (rc == PTDP_OK && !(a.top_p > 0.0))
        rc =
            ptdp_errorf(PTDP_EINVAL, "--top-p must be in (0, 1] (1 turns it off), got %g", a.top_p);
    if (rc == PTDP_OK && (a.vocab_file != NULL) != (a.merge_file != NULL))
        rc = ptdp_errorf(PTDP_EINVAL, "give --vocab-file and --merge-file together");
    if (rc == PTDP_OK && a.bf16 && a.fp16)
        rc = ptdp_errorf(PTDP_EINVAL, "give --bf16 or --fp16, not both");
    ptdp_gemm_lib lib = PTDP_GEMM_ONEDNN;
    if (rc == PTDP_OK) rc = ptdp_gemm_lib_parse(a.gemm, &lib);
    if (rc) {
        ptdp_log_error("%s", ptdp_last_error());
        return 2;
    }

    ptdp_comm comm;
    if (ptdp_comm_init(&comm, &argc, &argv)) {
        ptdp_log_error("%s", ptdp_last_error());
        return 1;
    }
    const int root = comm.world_rank == 0;
    ptdp_tokenizer *tok = NULL;
    if (a.vocab_file) {
        int st = ptdp__cli_open_tokenizer(&tok, a.vocab_file, a.merge_file);
        if (st) {
            ptdp_comm_finalize(&comm);
            return st;
        }
        if (!a.vocab_size) a.vocab_size = ptdp_tokenizer_vocab_size(tok);
    }
    ptdp_gpt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    int32_t *ids = NULL;
    int64_t np = 0;
    if (comm.world_size != a.t)
        rc =
            ptdp_errorf(PTDP_ECONFIG,
                        "--tensor-model-parallel-size %lld: generate runs on exactly t ranks, this "
                        "job has %d (mpirun -np %lld)",
                        (long long)a.t, comm.world_size, (long long)a.t);
    if (rc == PTDP_OK && a.load) { /* the model shape comes from the checkpoint's manifest */
        ptdp_gpt_config ck;
        rc = ptdp_ckpt_read_config(a.load, &ck);
        if (rc == PTDP_OK) {
            if (!a.num_layers) a.num_layers = ck.num_layers;
            if (!a.hidden_size) a.hidden_size = ck.hidden;
            if (!a.num_attention_heads) a.num_attention_heads = ck.heads;
            if (!a.max_position_embeddings) a.max_position_embeddings = ck.max_positions;
            if (!a.vocab_size) a.vocab_size = ck.vocab;
        }
    } else if (rc == PTDP_OK) {
        rc = model_shape(&a, a.init_from);
    }
    if (rc == PTDP_OK) rc = prompt_ids(&a, tok, &ids, &np);
    if (rc == PTDP_OK && np == 0) rc = ptdp_errorf(PTDP_EINVAL, "--prompt: no tokens");
    if (rc == PTDP_OK && np + a.max_new_tokens > a.max_position_embeddings)
        rc = ptdp_errorf(
            PTDP_EINVAL,
            "--max-new-tokens %lld: the prompt's %lld tokens plus the new ones exceed the model's %lld "
            "positions",
            (long long)a.max_new_tokens, (long long)np, (long long)a.max_position_embeddings);
    if (rc == PTDP_OK) {
        cfg.num_layers = a.num_layers;
        cfg.hidden = a.hidden_size;
        cfg.heads = a.num_attention_heads;
        cfg.max_positions = a.max_position_embeddings;
        cfg.seq_length = 1; /* the chunk's own activations are not used */
        cfg.vocab = a.vocab_size;
        cfg.init_std = 0.02f;
        rc = ptdp_gpt_config_finish(&cfg, a.divisible_by, (int)a.t);
    }
    if (rc == PTDP_OK) rc = ptdp_comm_setup(&comm, (int)a.t, 1, 1);
    ptdp_gpt_chunk *chunk = NULL;
    ptdp_generator *g = NULL;
    ptdp_backend *be = NULL;
    if (rc == PTDP_OK) {
        ptdp__cli_set_threads(&comm);
        ptdp_backend_params bp = ptdp_backend_default_params();
        bp.lib = lib;
        bp.dtype = a.bf16 ? PTDP_DTYPE_BF16 : a.fp16 ? PTDP_DTYPE_FP16 : PTDP_DTYPE_FP32;
        rc = ptdp_backend_open(&be, &bp);
    }
    if (rc == PTDP_OK) {
        ptdp_chunk_params cp = {.cfg = &cfg,
                                .layer_begin = 0,
                                .layer_end = cfg.num_layers,
                                .pre = 1,
                                .post = 1,
                                .micro_batch = 1,
                                .slots = 1,
                                .be = be,
                                .tp = &comm.tensor,
                                .inference = 1};
        rc = ptdp_gpt_chunk_init(&chunk, &cp);
    }
    if (rc == PTDP_OK && a.load) {
        ptdp_ckpt_loaded ld;
        rc = ptdp_ckpt_load(a.load, 0, &cfg, &chunk, NULL, 1, &comm, &ld);
        if (rc == PTDP_OK && !ld.found)
            rc = ptdp_errorf(PTDP_ENOTFOUND, "--load %s: no checkpoint there", a.load);
    } else if (rc == PTDP_OK) {
        rc = ptdp__cli_check_init_from(a.init_from, &cfg, a.allow_extra_tensors);
        if (rc == PTDP_OK) rc = ptdp_hf_load_chunk(chunk, &cfg, comm.tp, a.init_from);
    }
    if (rc == PTDP_OK) /* --bf16/--fp16: the weights on the backend's grid (fp32: nothing) */
        be->quantize(be, ptdp_gpt_chunk_params(chunk), ptdp_gpt_chunk_numel(chunk));
    if (rc == PTDP_OK)
        rc = ptdp_generator_init(&g, chunk, &cfg, &comm.tensor, np + a.max_new_tokens);
    if (rc) {
        if (root) ptdp_log_error("%s", ptdp_last_error());
        ptdp_generator_free(g);
        ptdp_gpt_chunk_free(chunk);
        ptdp_backend_close(be);
        free(ids);
        ptdp_tokenizer_free(tok);
        ptdp_comm_finalize(&comm);
        return status_of(rc);
    }
    ptdp_gpt_chunk_set_training(chunk, 0);
    ptdp_sampling_params sp = ptdp_sampling_default_params();
    sp.temperature = (float)a.temperature;
    sp.top_k = a.top_k;
    sp.top_p = (float)a.top_p;
    sp.seed = (uint64_t)a.seed;

    char *buf = NULL;
    size_t cap = 0;
    if (root) emit(tok, ids, np, 1, &buf, &cap);
    const float *lg = NULL;
    double t0 = ptdp_now();
    rc = ptdp_generator_prefill(g, ids, np, &lg);
    double t1 = ptdp_now();
    for (int64_t k = 0; rc == PTDP_OK && k < a.max_new_tokens; k++) {
        int32_t next = ptdp_generator_sample(g, lg, &sp, (uint64_t)k);
        if (root) emit(tok, &next, 1, 0, &buf, &cap);
        if (k + 1 < a.max_new_tokens) rc = ptdp_generator_next_logits(g, next, &lg);
    }
    double t2 = ptdp_now();
    if (root) {
        printf("\n");
        fflush(stdout);
    }
    int status = 0;
    if (rc) {
        if (root) ptdp_log_error("%s", ptdp_last_error());
        status = status_of(rc);
    } else if (root) {
        char b[32];
        fprintf(
            stderr,
            "ptdp generate: l=%lld h=%lld a=%lld V=%lld, t=%d x %d thread(s); prompt %lld tokens in %.3f s "
            "(%.1f tokens/s), %lld new tokens in %.3f s (%.2f tokens/s); KV cache %s per rank\n",
            (long long)cfg.num_layers, (long long)cfg.hidden, (long long)cfg.heads,
            (long long)cfg.vocab, comm.t, omp_get_max_threads(), (long long)np, t1 - t0,
            (double)np / (t1 - t0), (long long)a.max_new_tokens, t2 - t1,
            (double)a.max_new_tokens / (t2 - t1),
            ptdp_fmt_bytes((double)ptdp_generator_cache_bytes(&cfg, comm.t, np + a.max_new_tokens),
                           b));
    }
    free(buf);
    ptdp_generator_free(g);
    ptdp_gpt_chunk_free(chunk);
    ptdp_backend_close(be);
    free(ids);
    ptdp_tokenizer_free(tok);
    ptdp_comm_finalize(&comm);
    return status;
}
