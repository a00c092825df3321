/* common.c - small pieces shared by the commands. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "cli/cli.h"

void ptdp__cli_set_threads(const ptdp_comm *c) {
    if (getenv("OMP_NUM_THREADS")) return;
    int local = ptdp_comm_node_size(c);
    int th = omp_get_num_procs() / local;
    omp_set_num_threads(th < 1 ? 1 : th);
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

int ptdp__cli_check_init_from(const char *weights, const ptdp_gpt_config *cfg, int allow_extra) {
    int rc = ptdp_hf_check(weights, cfg, allow_extra);
    if (rc) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ptdp_last_error());
        return ptdp_errorf(rc, "--init-from: %s", msg);
    }
    const char *keys[5] = {"n_head", "n_layer", "n_embd", "n_positions", "vocab_size"};
    const char *flags[5] = {"--num-attention-heads", "--num-layers", "--hidden-size",
                            "--max-position-embeddings", "--vocab-size"};
    const int64_t have[5] = {cfg->heads, cfg->num_layers, cfg->hidden, cfg->max_positions,
                             cfg->vocab};
    int64_t said[5] = {0, 0, 0, 0, 0}; /* 0: not stated */
    char path[4096];
    int from_config = 0;
    if (ptdp__cli_config_json_find(weights, path, sizeof path)) {
        char *text = NULL;
        size_t len = 0;
        cJSON *root = NULL;
        if (ptdp_read_file(path, "config", &text, &len) == PTDP_OK) root = cJSON_Parse(text);
        free(text);
        from_config = root != NULL;
        for (int k = 0; k < 5 && root; k++) {
            const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, keys[k]);
            if (cJSON_IsNumber(it)) said[k] = (int64_t)it->valuedouble;
        }
        cJSON_Delete(root);
    }
    if (!from_config) { /* no config: the file's own metadata, when it has the keys */
        ptdp_st_file *f = NULL;
        snprintf(path, sizeof path, "the metadata of %s", weights);
        if (ptdp_st_open(&f, weights) == PTDP_OK)
            for (int k = 0; k < 5; k++) {
                const char *m = ptdp_st_metadata(f, keys[k]);
                if (m) said[k] = atoll(m);
            }
        ptdp_st_close(f);
    }
    for (int k = 0; k < 5 && rc == PTDP_OK; k++) {
        if (k == 1 && allow_extra && have[k] < said[k]) continue; /* the first layers, as asked */
        if (said[k] > 0 && said[k] != have[k])
            rc = ptdp_errorf(
                PTDP_ECONFIG, "--init-from %s: %s %lld but %s says %s %lld; give %s %lld%s",
                weights, flags[k], (long long)have[k], path, keys[k], (long long)said[k], flags[k],
                (long long)said[k],
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
