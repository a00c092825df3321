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
 * and the output is ids. The prompt comes from --prompt TEXT, standard input
 * (--prompt -), a file (--prompt-file) or, one prompt per line, Megatron's
 * --sample-input-file; rank 0 reads it and every rank gets the same bytes.
 * Rank 0 prints the prompt and the continuation on stdout (with
 * --sample-input-file one JSON line per prompt, on stdout or into
 * --sample-output-file) and a summary line (tokens/s) on stderr.
 * Weights from --init-from (HF safetensors) or --load (a ptdp checkpoint).
 * Not here: pipeline parallelism, batched prompts (they run one after the
 * other), stopping at <|endoftext|>. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt.h"
#include "ckpt/hf.h"
#include "cli/cli.h"
#include "data/data.h"
#include "model/model.h"

typedef struct {
    const char *init_from, *load, *prompt, *vocab_file, *merge_file, *gemm;
    const char *prompt_file, *sample_input_file, *sample_output_file;
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
        S("init-from", init_from,
          "Hugging Face GPT-2 or Llama safetensors weights (or --load); a Llama's blocks come "
          "from its config.json",
          NULL),
        S("load", load,
          "a ptdp checkpoint directory (any layout it was saved from; or --init-from)", NULL),
        {"allow-extra-tensors", PTDP_OPT_BOOL, &a->allow_extra_tensors,
         "with --init-from: ignore tensors of the file the model does not use", NULL, 0, 1, 0},
        S("prompt", prompt,
          "prompt text (with --vocab-file), else space-separated token ids; - reads it from "
          "standard input (one of --prompt, --prompt-file, --sample-input-file is required)",
          NULL),
        S("prompt-file", prompt_file,
          "read the prompt from this file (all of it, one prompt; a final newline is dropped)",
          NULL),
        S("sample-input-file", sample_input_file,
          "Megatron's: one prompt per line (empty lines skipped), each continued in turn; "
          "one JSON line {\"prompt\", \"text\"} per prompt",
          NULL),
        S("sample-output-file", sample_output_file,
          "with --sample-input-file: write the JSON lines here instead of standard output", NULL),
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
        "                     [--vocab-file encoder.json --merge-file vocab.bpe] [model flags]\n"
        "       ptdp generate ... --prompt - | --prompt-file FILE\n"
        "       ptdp generate ... --sample-input-file PROMPTS.txt [--sample-output-file OUT.jsonl]\n\n"
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
    return ptdp__cli_hf_fill_shape(weights, fields);
}

/* Ids of one prompt `text` (what: the prompt's name in messages), from text
 * or a list of ids; *ids malloc'd (caller frees, also on error). */
static int prompt_ids(const gen_args *a, const ptdp_tokenizer *tok, const char *text,
                      const char *what, int32_t **ids, int64_t *n) {
    *n = 0;
    if (tok) {
        ptdp_tokens t = {0};
        ptdp_tok_cache *cache = ptdp_tok_cache_new();
        int rc = ptdp_tokenizer_encode(tok, cache, text, strlen(text), &t);
        ptdp_tok_cache_free(cache);
        if (rc) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", ptdp_last_error());
            return ptdp_errorf(rc, "%s: %s", what, msg);
        }
        *ids = malloc(sizeof(int32_t) * (t.n ? t.n : 1));
        if (!*ids) return ptdp_errorf(PTDP_ENOMEM, "out of memory for the prompt");
        memcpy(*ids, t.ids, sizeof(int32_t) * t.n);
        *n = (int64_t)t.n;
        ptdp_tokens_free(&t);
        return PTDP_OK;
    }
    size_t cap = strlen(text) / 2 + 1;
    *ids = malloc(sizeof(int32_t) * cap);
    if (!*ids) return ptdp_errorf(PTDP_ENOMEM, "out of memory for the prompt");
    const char *p = text;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',') p++;
        if (!*p) break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || (*end && !strchr(" \t\n\r,", *end)))
            return ptdp_errorf(PTDP_EINVAL,
                               "%s: '%.20s' is not a token id (without --vocab-file the prompt "
                               "is a space-separated list of ids)",
                               what, p);
        if (v < 0 || v >= a->vocab_size)
            return ptdp_errorf(PTDP_EINVAL, "%s: token id %lld is outside the vocabulary [0, %lld)",
                               what, v, (long long)a->vocab_size);
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
    }
    return PTDP_OK;
}

/* The whole of f into a malloc'd, NUL-terminated *out. */
static int slurp(FILE *f, const char *name, char **out, int64_t *len) {
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - 1 - n, f);
        if (n < cap - 1) break;
        char *nb = realloc(b, cap *= 2);
        if (!nb) free(b);
        b = nb;
    }
    if (!b) return ptdp_errorf(PTDP_ENOMEM, "out of memory reading %s", name);
    if (ferror(f)) {
        free(b);
        return ptdp_errorf(PTDP_EIO, "cannot read %s: %s", name, strerror(errno));
    }
    b[n] = 0;
    if (strlen(b) != n) {
        free(b);
        return ptdp_errorf(PTDP_EINVAL, "%s holds a NUL byte: not a text prompt", name);
    }
    *out = b;
    *len = (int64_t)n;
    return PTDP_OK;
}

/* Every rank's verdict: rc where it is not PTDP_OK anywhere (a rank that
 * did not fail itself names the failure of another), else PTDP_OK.
 * Collective over the world. */
static int agree(ptdp_comm *comm, int rc) {
    int32_t worst = -rc;
    ptdp_allreduce_max_i32(&comm->world, &worst, 1);
    if (!worst || rc) return rc;
    return ptdp_errorf(-worst, "another rank failed (its message says why)");
}

/* The prompt source's text (--prompt, standard input, --prompt-file or
 * --sample-input-file) into a malloc'd *out, the same on every rank: rank 0
 * reads it (under mpirun only rank 0 has standard input) and the others get
 * its bytes and its verdict through zero-filled max all-reduces over the
 * world (a few kB once, so int32 lanes for bytes cost nothing). Collective. */
static int prompt_source(const gen_args *a, ptdp_comm *comm, const char **name, char **out) {
    *out = NULL;
    const char *file = a->prompt_file ? a->prompt_file : a->sample_input_file;
    *name = a->sample_input_file     ? "--sample-input-file"
            : a->prompt_file         ? "--prompt-file"
            : strcmp(a->prompt, "-") ? "--prompt"
                                     : "--prompt - (standard input)";
    int rc = PTDP_OK;
    int64_t len = 0;
    if (comm->world_rank == 0) {
        if (file) {
            FILE *f = fopen(file, "rb");
            if (!f)
                rc = ptdp_errorf(PTDP_EIO, "%s %s: %s", *name, file, strerror(errno));
            else {
                rc = slurp(f, file, out, &len);
                fclose(f);
            }
        } else if (!strcmp(a->prompt, "-")) {
            rc = slurp(stdin, "standard input", out, &len);
        } else {
            *out = strdup(a->prompt);
            if (!*out) rc = ptdp_errorf(PTDP_ENOMEM, "out of memory for the prompt");
            len = *out ? (int64_t)strlen(*out) : 0;
        }
        /* one final newline ends the text, it is not part of a single prompt */
        if (rc == PTDP_OK && !a->sample_input_file && len && (*out)[len - 1] == '\n') {
            (*out)[--len] = 0;
            if (len && (*out)[len - 1] == '\r') (*out)[--len] = 0;
        }
    }
    if (comm->world_size == 1) return rc;
    int32_t head[2] = {comm->world_rank == 0 ? -rc : -1, comm->world_rank == 0 ? (int32_t)len : -1};
    if (rc == PTDP_OK && len > INT32_MAX / 2)
        head[0] = -(rc = ptdp_errorf(PTDP_EINVAL, "%s: longer than 1 GiB", *name));
    ptdp_allreduce_max_i32(&comm->world, head, 2);
    if (head[0]) /* rank 0's message is rank 0's; the others say what failed */
        return comm->world_rank ? ptdp_errorf(-head[0], "%s: rank 0 could not read it", *name) : rc;
    len = head[1];
    int32_t *lanes = malloc(sizeof(int32_t) * (size_t)(len + 1));
    char *text = comm->world_rank == 0 ? *out : malloc((size_t)len + 1);
    rc = agree(comm,
               lanes && text ? PTDP_OK : ptdp_errorf(PTDP_ENOMEM, "out of memory for the prompt"));
    if (rc == PTDP_OK) {
        for (int64_t i = 0; i < len; i++)
            lanes[i] = comm->world_rank == 0 ? (unsigned char)text[i] : -1;
        ptdp_allreduce_max_i32(&comm->world, lanes, len);
        for (int64_t i = 0; i < len; i++) text[i] = (char)lanes[i];
        text[len] = 0;
        *out = text;
    } else if (text != *out) {
        free(text);
    }
    free(lanes);
    return rc;
}

/* The prompts of `text`: the whole text, or with --sample-input-file each
 * non-empty line (a final \r dropped). Cuts text in place; prompts[] point
 * into it. Returns the count, or -1 out of memory. */
static int64_t split_prompts(const gen_args *a, char *text, char ***prompts, int64_t **lines) {
    int64_t cap = 1;
    for (const char *p = text; *p; p++) cap += *p == '\n';
    *prompts = malloc(sizeof(char *) * (size_t)cap);
    *lines = malloc(sizeof(int64_t) * (size_t)cap);
    if (!*prompts || !*lines) return -1;
    if (!a->sample_input_file) {
        (*prompts)[0] = text;
        (*lines)[0] = 1;
        return 1;
    }
    int64_t n = 0, line = 0;
    for (char *p = text; p && *p;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0;
        size_t len = strlen(p);
        if (len && p[len - 1] == '\r') p[--len] = 0;
        line++;
        if (len) {
            (*prompts)[n] = p;
            (*lines)[n++] = line;
        }
        p = nl ? nl + 1 : NULL;
    }
    return n;
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

/* One JSON line {"prompt": ..., "text": ...} for --sample-input-file: the
 * prompt as given and the continuation as text (ids joined by spaces without
 * a tokenizer). */
static int write_sample(FILE *out, const char *path, const ptdp_tokenizer *tok, const char *prompt,
                        const int32_t *gen, int64_t n, char **buf, size_t *cap) {
    size_t len = 0;
    int rc = PTDP_OK;
    if (tok) {
        rc = ptdp_tokenizer_decode(tok, gen, (size_t)n, buf, &len, cap);
    } else {
        size_t need = (size_t)n * 12 + 1;
        if (*cap < need) {
            char *nb = realloc(*buf, need);
            if (!nb) return ptdp_errorf(PTDP_ENOMEM, "out of memory for a sample");
            *buf = nb, *cap = need;
        }
        for (int64_t k = 0; k < n; k++)
            len += (size_t)snprintf(*buf + len, *cap - len, k ? " %d" : "%d", gen[k]);
    }
    if (rc) return rc;
    cJSON *o = cJSON_CreateObject();
    char *line = NULL, *text = malloc(len + 1); /* the decoded text is not NUL-terminated */
    if (o && text) {
        memcpy(text, *buf, len);
        text[len] = 0;
        if (cJSON_AddStringToObject(o, "prompt", prompt) &&
            cJSON_AddStringToObject(o, "text", text))
            line = cJSON_PrintUnformatted(o);
    }
    free(text);
    cJSON_Delete(o);
    if (!line) return ptdp_errorf(PTDP_ENOMEM, "out of memory for a sample");
    int bad = fprintf(out, "%s\n", line) < 0 || fflush(out);
    free(line);
    if (bad)
        return ptdp_errorf(PTDP_EIO, "%s: %s", path ? path : "standard output", strerror(errno));
    return PTDP_OK;
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
    int nopts = table(&a, opts), help = 0, status = 0;
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
    int sources = (a.prompt != NULL) + (a.prompt_file != NULL) + (a.sample_input_file != NULL);
    if (rc == PTDP_OK && sources != 1)
        rc = ptdp_errorf(PTDP_EINVAL,
                         sources ? "give one of --prompt, --prompt-file and --sample-input-file"
                                 : "missing the prompt: give --prompt TEXT (- reads standard "
                                   "input), --prompt-file FILE or --sample-input-file FILE (see "
                                   "--help)");
    if (rc == PTDP_OK && a.sample_output_file && !a.sample_input_file)
        rc = ptdp_errorf(PTDP_EINVAL, "--sample-output-file goes with --sample-input-file (the "
                                      "other prompts print their continuation on stdout)");
    struct stat in_st, out_st;
    if (rc == PTDP_OK && a.sample_output_file && !stat(a.sample_input_file, &in_st) &&
        !stat(a.sample_output_file, &out_st) && in_st.st_dev == out_st.st_dev &&
        in_st.st_ino == out_st.st_ino)
        rc = ptdp_errorf(PTDP_EINVAL,
                         "--sample-output-file %s is the --sample-input-file: writing the samples "
                         "would destroy the prompts; name another file",
                         a.sample_output_file);
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
    ptdp_gpt_config cfg, blocks; /* blocks: the Llama family's, from the checkpoint or config */
    memset(&cfg, 0, sizeof cfg);
    memset(&blocks, 0, sizeof blocks);
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
            blocks = ck;
        }
    } else if (rc == PTDP_OK) {
        rc = model_shape(&a, a.init_from);
        if (rc == PTDP_OK) rc = ptdp__cli_hf_blocks(a.init_from, &blocks);
    }
    /* every prompt's ids first: the generator is sized for the longest */
    char *text = NULL, **prompts = NULL;
    const char *source = NULL;
    int64_t *lines = NULL, nprompts = 0, max_len = 0;
    int32_t **ids = NULL;
    int64_t *np = NULL;
    if (rc == PTDP_OK) rc = prompt_source(&a, &comm, &source, &text);
    if (rc == PTDP_OK && (nprompts = split_prompts(&a, text, &prompts, &lines)) < 0)
        rc = ptdp_errorf(PTDP_ENOMEM, "out of memory for the prompts");
    if (rc == PTDP_OK && nprompts == 0)
        rc = ptdp_errorf(PTDP_EINVAL, "%s %s: no prompts (every line is empty)", source,
                         a.sample_input_file);
    if (rc == PTDP_OK && (!(ids = calloc((size_t)nprompts, sizeof *ids)) ||
                          !(np = calloc((size_t)nprompts, sizeof *np))))
        rc = ptdp_errorf(PTDP_ENOMEM, "out of memory for the prompts");
    for (int64_t i = 0; rc == PTDP_OK && i < nprompts; i++) {
        char what[4200];
        if (a.sample_input_file)
            snprintf(what, sizeof what, "%s %s line %lld", source, a.sample_input_file,
                     (long long)lines[i]);
        else
            snprintf(what, sizeof what, "%s", source);
        rc = prompt_ids(&a, tok, prompts[i], what, &ids[i], &np[i]);
        if (rc == PTDP_OK && np[i] == 0) rc = ptdp_errorf(PTDP_EINVAL, "%s: no tokens", what);
        if (rc == PTDP_OK && np[i] + a.max_new_tokens > a.max_position_embeddings)
            rc = ptdp_errorf(PTDP_EINVAL,
                             "--max-new-tokens %lld: the prompt's %lld tokens (%s) plus the new "
                             "ones exceed the model's %lld positions",
                             (long long)a.max_new_tokens, (long long)np[i], what,
                             (long long)a.max_position_embeddings);
        if (rc == PTDP_OK && np[i] + a.max_new_tokens > max_len) max_len = np[i] + a.max_new_tokens;
    }
    /* the samples' file, opened by rank 0 before any work */
    FILE *out = stdout;
    if (rc == PTDP_OK && a.sample_output_file) {
        if (root && !(out = fopen(a.sample_output_file, "w")))
            rc = ptdp_errorf(PTDP_EIO, "--sample-output-file %s: %s", a.sample_output_file,
                             strerror(errno));
        rc = agree(&comm, rc);
    }
    if (rc == PTDP_OK) {
        cfg.num_layers = a.num_layers;
        cfg.hidden = a.hidden_size;
        cfg.heads = a.num_attention_heads;
        cfg.max_positions = a.max_position_embeddings;
        cfg.seq_length = 1; /* the chunk's own activations are not used */
        cfg.vocab = a.vocab_size;
        cfg.init_std = 0.02f;
        ptdp__cli_copy_blocks(&blocks, &cfg);
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
    ptdp_job job = ptdp_job_default_params(); /* one sequence at a time, forward only */
    job.model = cfg;
    if (rc == PTDP_OK) {
        ptdp_chunk_params cp = {.job = &job,
                                .layer_begin = 0,
                                .layer_end = cfg.num_layers,
                                .pre = 1,
                                .post = 1,
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
    if (rc == PTDP_OK) rc = ptdp_generator_init(&g, chunk, &cfg, &comm.tensor, max_len);
    if (rc) {
        if (root) ptdp_log_error("%s", ptdp_last_error());
        status = status_of(rc);
        goto done;
    }
    ptdp_gpt_chunk_set_training(chunk, 0);
    ptdp_sampling_params sp = ptdp_sampling_default_params();
    sp.temperature = (float)a.temperature;
    sp.top_k = a.top_k;
    sp.top_p = (float)a.top_p;
    sp.seed = (uint64_t)a.seed;

    char *buf = NULL;
    size_t cap = 0;
    int32_t *gen = malloc(sizeof(int32_t) * (size_t)a.max_new_tokens);
    if (!gen) rc = ptdp_errorf(PTDP_ENOMEM, "out of memory for the continuation");
    double t_prompt = 0, t_new = 0;
    int64_t n_prompt = 0, n_new = 0;
    /* each prompt from an empty cache with draws 0, 1, ...: a prompt's sample
     * does not depend on the prompts before it */
    for (int64_t i = 0; rc == PTDP_OK && i < nprompts; i++) {
        const int stream = !a.sample_input_file && root;
        ptdp_generator_reset(g);
        if (stream) emit(tok, ids[i], np[i], 1, &buf, &cap);
        const float *lg = NULL;
        double t0 = ptdp_now();
        rc = ptdp_generator_prefill(g, ids[i], np[i], &lg);
        double t1 = ptdp_now();
        for (int64_t k = 0; rc == PTDP_OK && k < a.max_new_tokens; k++) {
            gen[k] = ptdp_generator_sample(g, lg, &sp, (uint64_t)k);
            if (stream) emit(tok, &gen[k], 1, 0, &buf, &cap);
            if (k + 1 < a.max_new_tokens) rc = ptdp_generator_next_logits(g, gen[k], &lg);
        }
        t_prompt += t1 - t0;
        t_new += ptdp_now() - t1;
        n_prompt += np[i];
        n_new += a.max_new_tokens;
        if (stream) {
            printf("\n");
            fflush(stdout);
        } else if (root && rc == PTDP_OK) {
            rc = write_sample(out, a.sample_output_file, tok, prompts[i], gen, a.max_new_tokens,
                              &buf, &cap);
        }
    }
    free(gen);
    if (out != stdout && fclose(out) && rc == PTDP_OK)
        rc = ptdp_errorf(PTDP_EIO, "--sample-output-file %s: %s", a.sample_output_file,
                         strerror(errno));
    out = stdout;
    if (rc) {
        if (root) ptdp_log_error("%s", ptdp_last_error());
        status = status_of(rc);
    } else if (root) {
        char b[32];
        fprintf(
            stderr,
            "ptdp generate: l=%lld h=%lld a=%lld V=%lld, t=%d x %d thread(s); %lld prompt(s) of "
            "%lld tokens in %.3f s (%.1f tokens/s), %lld new tokens in %.3f s (%.2f tokens/s); KV "
            "cache %s per rank\n",
            (long long)cfg.num_layers, (long long)cfg.hidden, (long long)cfg.heads,
            (long long)cfg.vocab, comm.t, omp_get_max_threads(), (long long)nprompts,
            (long long)n_prompt, t_prompt, (double)n_prompt / t_prompt, (long long)n_new, t_new,
            (double)n_new / t_new,
            ptdp_fmt_bytes((double)ptdp_generator_cache_bytes(&cfg, comm.t, max_len), b));
    }
    free(buf);
done:
    if (out != stdout) fclose(out);
    ptdp_generator_free(g);
    ptdp_gpt_chunk_free(chunk);
    ptdp_backend_close(be);
    for (int64_t i = 0; ids && i < nprompts; i++) free(ids[i]);
    free(ids);
    free(np);
    free(prompts);
    free(lines);
    free(text);
    ptdp_tokenizer_free(tok);
    ptdp_comm_finalize(&comm);
    return status;
}
