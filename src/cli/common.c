/* common.c - small pieces shared by the commands. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/hf.h"
#include "cli/cli.h"

/* OpenMP threads per rank: the cores this rank may run on (its affinity
 * mask, which the launcher's binding sets) shared by the node's ranks. Open
 * MPI binds each rank to one core when it starts 2 ranks or fewer, leaving
 * the rest of a many-core node idle: rank 0 says so once. */
void ptdp__cli_set_threads(const ptdp_comm *c) {
    const int local = ptdp_comm_node_size(c), mine = omp_get_num_procs();
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (!getenv("OMP_NUM_THREADS")) {
        int th = mine / local;
        omp_set_num_threads(th < 1 ? 1 : th);
    }
    if (local > 1 && mine == 1 && online >= 2L * local)
        ptdp_log0("note: each of the %d ranks on this node is bound to one core of its %ld "
                  "(the launcher's binding), so %ld cores stay idle; with Open MPI, `mpirun "
                  "--bind-to none` gives each rank %ld OpenMP threads",
                  local, online, online - local, online / local);
}

void ptdp__cli_config_json_path(const char *weights, char *buf, size_t cap) {
    /* NAME.safetensors -> NAME.config.json: one config per weights file, so
     * two exports into one folder keep their own */
    snprintf(buf, cap, "%s", weights);
    size_t n = strlen(buf), k = strlen(".safetensors");
    if (n > k && !strcmp(buf + n - k, ".safetensors")) buf[n - k] = 0;
    n = strlen(buf);
    snprintf(buf + n, cap - n, ".config.json");
}

int ptdp__cli_config_json_find(const char *weights, char *buf, size_t cap) {
    ptdp__cli_config_json_path(weights, buf, cap);
    if (access(buf, R_OK) == 0) return 1;
    /* Hugging Face's folder-wide name, and what exports wrote before */
    char own[4096];
    snprintf(own, sizeof own, "%s", buf);
    snprintf(buf, cap, "%s", weights);
    char *slash = strrchr(buf, '/');
    char *name = slash ? slash + 1 : buf;
    snprintf(name, cap - (size_t)(name - buf), "config.json");
    if (access(buf, R_OK) == 0) return 1;
    snprintf(buf, cap, "%s", own);
    return 0;
}

/* The config.json beside `weights` (ptdp__cli_config_json_find), parsed;
 * NULL when there is none or it cannot be read or parsed (callers treat a
 * config they cannot read as absent). src[cap] receives its path. The caller
 * frees the tree. */
static cJSON *config_json_beside(const char *weights, char *src, size_t cap) {
    if (!ptdp__cli_config_json_find(weights, src, cap)) return NULL;
    char *text = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    if (ptdp_read_file(src, "config.json", &text, &len) == PTDP_OK) root = cJSON_Parse(text);
    free(text);
    return root;
}

const char *const ptdp__cli_hf_keys[PTDP_HF_NKEYS] = {"vocab_size", "n_positions", "n_embd",
                                                      "n_layer", "n_head"};
const char *const ptdp__cli_hf_flags[PTDP_HF_NKEYS] = {"--vocab-size", "--max-position-embeddings",
                                                       "--hidden-size", "--num-layers",
                                                       "--num-attention-heads"};
static const double hf_limits[PTDP_HF_NKEYS] = {1e8, 1e6, 1e6, 1e5, 1e5};
/* LlamaForCausalLM's config.json names of the same numbers */
static const char *const hf_llama_keys[PTDP_HF_NKEYS] = {"vocab_size", "max_position_embeddings",
                                                         "hidden_size", "num_hidden_layers",
                                                         "num_attention_heads"};

static int hf_value(double d, int k, const char *text, const char *src, int64_t *out) {
    if (!(d >= 1 && d <= hf_limits[k] && d == (double)(int64_t)d))
        return ptdp_errorf(PTDP_ECONFIG, "%s: %s is %s; want a whole number from 1 to %.0f", src,
                           ptdp__cli_hf_keys[k], text, hf_limits[k]);
    *out = (int64_t)d;
    return PTDP_OK;
}

int ptdp__cli_hf_shape(const char *weights, int from_metadata, int64_t said[PTDP_HF_NKEYS],
                       int *found, char *src, size_t cap) {
    int rc = PTDP_OK;
    for (int k = 0; k < PTDP_HF_NKEYS; k++) said[k] = 0;
    *found = 0;
    if (from_metadata) {
        snprintf(src, cap, "the metadata of %s", weights);
        ptdp_st_file *f = NULL;
        if (ptdp_st_open(&f, weights) != PTDP_OK) return PTDP_OK;
        *found = 1;
        for (int k = 0; k < PTDP_HF_NKEYS && rc == PTDP_OK; k++) {
            const char *m = ptdp_st_metadata(f, ptdp__cli_hf_keys[k]);
            char *end = NULL;
            double d = m ? strtod(m, &end) : 0;
            if (m) rc = hf_value(end && *end == 0 && end != m ? d : -1, k, m, src, &said[k]);
        }
        ptdp_st_close(f);
        return rc;
    }
    cJSON *root = config_json_beside(weights, src, cap);
    *found = root != NULL;
    for (int k = 0; k < PTDP_HF_NKEYS && root && rc == PTDP_OK; k++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, ptdp__cli_hf_keys[k]);
        if (!it) it = cJSON_GetObjectItemCaseSensitive(root, hf_llama_keys[k]);
        if (!it || cJSON_IsNull(it)) continue;
        char shown[64];
        if (cJSON_IsNumber(it))
            snprintf(shown, sizeof shown, "%.15g", it->valuedouble);
        else
            snprintf(shown, sizeof shown, "not a number");
        rc = hf_value(cJSON_IsNumber(it) ? it->valuedouble : -1, k, shown, src, &said[k]);
    }
    cJSON_Delete(root);
    return rc;
}

int ptdp__cli_hf_fill_shape(const char *weights, int64_t *const fields[PTDP_HF_NKEYS]) {
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
        if (!*fields[PTDP_HF_VOCAB]) *fields[PTDP_HF_VOCAB] = wte->shape[0];
        if (!*fields[PTDP_HF_EMBD]) *fields[PTDP_HF_EMBD] = wte->shape[1];
        if (!*fields[PTDP_HF_POSITIONS]) *fields[PTDP_HF_POSITIONS] = wpe->shape[0];
        int64_t l = 0;
        for (;; l++) {
            snprintf(nm, sizeof nm, "%sh.%lld.ln_1.weight", prefix[p], (long long)l);
            if (!ptdp_st_find(st, nm)) break;
        }
        if (!*fields[PTDP_HF_LAYERS]) *fields[PTDP_HF_LAYERS] = l;
        break;
    }
    ptdp_st_close(st);
    for (int k = 0; k < PTDP_HF_NKEYS; k++)
        if (*fields[k] <= 0)
            return ptdp_errorf(PTDP_EINVAL, "%s: not in %s, nor in %s; give the flag",
                               ptdp__cli_hf_flags[k], cfgpath, weights);
    return PTDP_OK;
}

void ptdp__cli_copy_blocks(const ptdp_gpt_config *from, ptdp_gpt_config *to) {
    to->rmsnorm = from->rmsnorm;
    to->swiglu = from->swiglu;
    to->rope = from->rope;
    to->rotary_base = from->rotary_base;
    to->rotary_percent = from->rotary_percent;
    to->query_groups = from->query_groups;
    to->untie = from->untie;
    to->no_bias = from->no_bias;
    if (from->ffn_hidden) to->ffn_hidden = from->ffn_hidden;
    if (from->ln_eps > 0) to->ln_eps = from->ln_eps;
}

int ptdp__cli_hf_blocks(const char *weights, ptdp_gpt_config *cfg) {
    char src[4096];
    cJSON *root = config_json_beside(weights, src, sizeof src);
    const cJSON *mt = root ? cJSON_GetObjectItemCaseSensitive(root, "model_type") : NULL;
    if (!cJSON_IsString(mt) || strcmp(mt->valuestring, "llama")) {
        cJSON_Delete(root);
        return PTDP_OK;
    }
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(root, "num_key_value_heads"),
                *heads = cJSON_GetObjectItemCaseSensitive(root, "num_attention_heads"),
                *ffn = cJSON_GetObjectItemCaseSensitive(root, "intermediate_size"),
                *th = cJSON_GetObjectItemCaseSensitive(root, "rope_theta"),
                *eps = cJSON_GetObjectItemCaseSensitive(root, "rms_norm_eps"),
                *tie = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings");
    cfg->rmsnorm = cfg->swiglu = cfg->rope = cfg->no_bias = 1;
    cfg->rotary_base = cJSON_IsNumber(th) ? th->valuedouble : 10000.0;
    cfg->rotary_percent = 1.0f;
    cfg->untie = cJSON_IsBool(tie) && !cJSON_IsTrue(tie);
    if (cJSON_IsNumber(ffn) && ffn->valuedouble >= 1) cfg->ffn_hidden = (int64_t)ffn->valuedouble;
    if (cJSON_IsNumber(eps) && eps->valuedouble > 0) cfg->ln_eps = (float)eps->valuedouble;
    if (cJSON_IsNumber(kv) && kv->valuedouble >= 1 &&
        !(cJSON_IsNumber(heads) && heads->valuedouble == kv->valuedouble))
        cfg->query_groups = (int64_t)kv->valuedouble;
    cJSON_Delete(root);
    return PTDP_OK;
}

/* A Llama config.json beside the weights against the flags of the blocks
 * the file cannot tell (its key/value groups and SwiGLU width it can, its
 * tying it cannot). */
static int check_llama_config(const char *weights, const ptdp_gpt_config *cfg) {
    char src[4096];
    cJSON *root = config_json_beside(weights, src, sizeof src);
    if (!root) return PTDP_OK;
    int rc = PTDP_OK;
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(root, "num_key_value_heads"),
                *tie = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings"),
                *th = cJSON_GetObjectItemCaseSensitive(root, "rope_theta");
    if (cJSON_IsNumber(kv) && kv->valuedouble != (double)ptdp_gpt_groups(cfg))
        rc = ptdp_errorf(PTDP_ECONFIG,
                         "--init-from %s: %s says num_key_value_heads %.0f but the flags give %lld "
                         "key/value groups; give --group-query-attention --num-query-groups %.0f",
                         weights, src, kv->valuedouble, (long long)ptdp_gpt_groups(cfg),
                         kv->valuedouble);
    else if (cJSON_IsBool(tie) && !cJSON_IsTrue(tie) != !!cfg->untie)
        rc = ptdp_errorf(PTDP_ECONFIG, "--init-from %s: %s says tie_word_embeddings %s; %s",
                         weights, src, cJSON_IsTrue(tie) ? "true" : "false",
                         cfg->untie ? "drop --untie-embeddings-and-output-weights"
                                    : "give --untie-embeddings-and-output-weights");
    else if (cJSON_IsNumber(th) && th->valuedouble != cfg->rotary_base)
        rc = ptdp_errorf(PTDP_ECONFIG,
                         "--init-from %s: %s says rope_theta %.17g; give --rotary-base %.17g",
                         weights, src, th->valuedouble, th->valuedouble);
    cJSON_Delete(root);
    return rc;
}

int ptdp__cli_check_init_from(const char *weights, const ptdp_gpt_config *cfg, int allow_extra) {
    /* the config's statement of the blocks first: it names the flag to give */
    int rc = ptdp_hf_family(cfg) == 1 ? check_llama_config(weights, cfg) : PTDP_OK;
    if (rc) return rc;
    rc = ptdp_hf_check(weights, cfg, allow_extra);
    if (rc) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ptdp_last_error());
        return ptdp_errorf(rc, "--init-from: %s", msg);
    }
    const char *const *flags = ptdp__cli_hf_flags;
    const int64_t have[PTDP_HF_NKEYS] = {cfg->vocab, cfg->max_positions, cfg->hidden,
                                         cfg->num_layers, cfg->heads};
    int64_t said[PTDP_HF_NKEYS]; /* 0: not stated */
    char path[4096];
    int from_config = 0, found = 0;
    rc = ptdp__cli_hf_shape(weights, 0, said, &from_config, path, sizeof path);
    if (rc == PTDP_OK && !from_config) /* no config: the file's own metadata */
        rc = ptdp__cli_hf_shape(weights, 1, said, &found, path, sizeof path);
    if (rc) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ptdp_last_error());
        return ptdp_errorf(rc, "--init-from %s", msg);
    }
    for (int k = 0; k < PTDP_HF_NKEYS && rc == PTDP_OK; k++) {
        if (k == PTDP_HF_LAYERS && allow_extra && have[k] < said[k])
            continue; /* the first layers, as asked */
        if (said[k] > 0 && said[k] != have[k])
            rc = ptdp_errorf(
                PTDP_ECONFIG, "--init-from %s: %s %lld but %s says %s %lld; give %s %lld%s",
                weights, flags[k], (long long)have[k], path, ptdp__cli_hf_keys[k],
                (long long)said[k], flags[k], (long long)said[k],
                from_config ? " (or move that config away if it describes another model)" : "");
    }
    return rc;
}

int ptdp__cli_parse(ptdp_opt *opts, int nopts, int argc, char **argv,
                    void (*usage)(FILE *f, const ptdp_opt *opts, int nopts)) {
    int help = 0;
    if (ptdp_opts_parse(opts, nopts, argc, argv, &help)) {
        ptdp_log_error("%s", ptdp_last_error());
        return 2;
    }
    if (help) {
        usage(stdout, opts, nopts);
        return 0;
    }
    return -1;
}
