/* golden.h - the golden test against PyTorch (scripts/reference/gpt_reference.py),
 * and the Llama reference (llama_reference.py), shared by test_golden.c (the
 * CPU backends), test_golden_llama.c and test_golden_cuda.c (the CUDA
 * table): logits, loss, the losses, gradient norms and every parameter's
 * gradient at each of 10 AdamW iterations and (config A) the final weights,
 * for two configurations, one with awkward sizes (h=48, 3 heads, V=201
 * padded to 256).
 * Tolerances (scripts/reference/README.md): PyTorch's own fp32 results differ
 * from fp64 by <= 2.3e-7 relative in loss and norms, <= 6e-7 normwise in
 * gradients; two fp32 implementations may differ by about twice that. We allow
 * 1e-5 relative on losses/norms, 1e-4 normwise (max |diff| / max |ref| per
 * tensor) on gradients, logits within 1e-5 + 1e-4 relative, final weights
 * within 1e-4 absolute, whatever the backend. */
#ifndef PTDP_TESTS_GOLDEN_H
#define PTDP_TESTS_GOLDEN_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/hf.h"
#include "train/train.h"
#include "backend_util.h"
#include "test.h"

static int64_t meta_i(ptdp_st_file *f, const char *k) { return atoll(ptdp_st_metadata(f, k)); }
static double meta_f(ptdp_st_file *f, const char *k) { return atof(ptdp_st_metadata(f, k)); }
/* the Llama fixtures (llama_reference.py) name a few keys their own way */
static int64_t meta_i_or(ptdp_st_file *f, const char *k, const char *k2) {
    return ptdp_st_metadata(f, k) ? meta_i(f, k) : meta_i(f, k2);
}

static float *read_all(ptdp_st_file *f, const char *name, int64_t *n) {
    const ptdp_st_tensor *t = ptdp_st_find(f, name);
    if (!t) {
        fprintf(stderr, "fixture lacks %s\n", name);
        exit(1);
    }
    *n = t->numel;
    float *v = malloc(sizeof(float) * (size_t)t->numel);
    if (ptdp_st_read_f32(f, name, v, t->numel)) exit(1);
    return v;
}

/* max |a - b| / max |b| */
static double normwise(const float *a, const float *b, int64_t n) {
    double md = 0, mb = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        md = d > md ? d : md;
        mb = fabs(b[i]) > mb ? fabs(b[i]) : mb;
    }
    return mb > 0 ? md / mb : md;
}

/* Compares every parameter (grads = 0) or gradient (grads = 1) of `chunk`
 * with the fixture's tensors PREFIX<hf name>; with iter >= 0 the fixture
 * tensor is [iters, *shape] and row `iter` is compared. Returns the worst
 * error / tolerance over the tensors. */
static double check_params_vs(ptdp_gpt_chunk *chunk, const ptdp_gpt_config *cfg, ptdp_st_file *f,
                              const char *prefix, int iter, int grads, double tol_normwise,
                              double tol_abs) {
    int n;
    const ptdp_param_spec *specs = ptdp_gpt_chunk_specs(chunk, &n);
    float *host = malloc(sizeof(float) * (size_t)ptdp_gpt_chunk_numel(chunk));
    double worst = 0;
    if (grads)
        ptdp_gpt_chunk_download_grads(chunk, host);
    else
        ptdp_gpt_chunk_download_params(chunk, host);
    for (int i = 0; i < n; i++)
        for (int part = 0; part < ptdp_hf_parts(&specs[i], cfg); part++) {
            char hfname[128], full[160];
            int64_t shape[2], cnt;
            ptdp_hf_name_part(&specs[i], cfg, part, hfname, sizeof hfname, shape);
            snprintf(full, sizeof full, "%s%s", prefix, hfname);
            float *all = read_all(f, full, &cnt), *ref = all;
            if (iter >= 0) {
                const int64_t iters = atoll(ptdp_st_metadata(f, "iters"));
                cnt /= iters;
                ref = all + iter * cnt;
            }
            float *mine = malloc(sizeof(float) * (size_t)cnt);
            ptdp_hf_from_global_part(&specs[i], cfg, part, host + specs[i].offset, mine);
            double e = normwise(mine, ref, cnt);
            if (tol_abs > 0) {
                double md = 0;
                for (int64_t k = 0; k < cnt; k++) md = fmax(md, fabs((double)mine[k] - ref[k]));
                e = md;
            }
            double tol = tol_abs > 0 ? tol_abs : tol_normwise;
            if (!(e <= tol))
                fprintf(stderr, "  %s (iteration %d): error %.3g > %.3g\n", full, iter, e, tol);
            CHECK(e <= tol);
            worst = fmax(worst, e / tol);
            free(all);
            free(mine);
        }
    free(host);
    return worst;
}

/* The fixture's path (PTDP_SOURCE_DIR in the environment: the fixtures were
 * carried elsewhere, a GPU machine). */
static void golden_path(const char *file, char *path, size_t cap) {
    const char *src = getenv("PTDP_SOURCE_DIR") ? getenv("PTDP_SOURCE_DIR") : PTDP_SOURCE_DIR;
    snprintf(path, cap, "%s/tests/fixtures/%s", src, file);
}

/* The trainer of a fixture's configuration, starting from its weights. */
static ptdp_trainer_params golden_params(ptdp_st_file *f, const char *path, ptdp_backend *ops,
                                         ptdp_comm *comm) {
    ptdp_trainer_params tp = ptdp_trainer_default_params();
    ptdp_job *job = &tp.job;
    job->model.num_layers = meta_i(f, "n_layer");
    job->model.hidden = meta_i_or(f, "n_embd", "hidden_size");
    job->model.heads = meta_i(f, "n_head");
    job->model.vocab = meta_i(f, "vocab_size");
    job->model.max_positions = meta_i_or(f, "n_positions", "seq_length");
    job->model.seq_length = meta_i(f, "seq_length");
    if (ptdp_st_metadata(f, "n_kv_groups")) { /* llama_reference.py's: LlamaForCausalLM */
        ptdp_gpt_config *m = &job->model;
        m->rmsnorm = m->swiglu = m->rope = m->untie = m->no_bias = 1;
        m->query_groups = meta_i(f, "n_kv_groups");
        m->ffn_hidden = meta_i(f, "ffn_hidden_size");
        m->rotary_base = meta_f(f, "rope_theta");
        m->ln_eps = (float)meta_f(f, "rms_norm_eps");
    }
    job->model.hidden_dropout = job->model.attention_dropout = 0.0f; /* the reference has none */
    job->model.seed = 1;
    job->micro_batch = meta_i(f, "micro_batch_size");
    job->global_batch = meta_i(f, "global_batch_size");
    job->train_iters = 10;
    job->lr = job->min_lr = meta_f(f, "lr");
    job->lr_decay_style = PTDP_LR_CONSTANT;
    job->adam = (ptdp_adamw_params){.beta1 = meta_f(f, "beta1"),
                                    .beta2 = meta_f(f, "beta2"),
                                    .eps = meta_f(f, "eps"),
                                    .weight_decay = meta_f(f, "weight_decay"),
                                    .clip_grad = meta_f(f, "clip_grad")};
    job->dtype = ops->dtype;
    tp.be = ops;
    tp.comm = comm;
    tp.init_from = path;
    return tp;
}

/* Runs one fixture's checks with the compute backend `ops` (any one: the
 * fixture's tokens and the results cross through the backend's upload and
 * download). */
static void golden_run_config(const char *file, ptdp_backend *ops) {
    char path[512];
    golden_path(file, path, sizeof path);
    printf("%s with the compute backend '%s'\n", file, ops->name);
    ptdp_st_file *f = NULL;
    CHECK_OK(ptdp_st_open(&f, path));
    if (!f) return;
    ptdp_comm comm;
    ptdp_comm_init_single(&comm);
    ptdp_trainer_params tp = golden_params(f, path, ops, &comm);
    ptdp_trainer *tr = NULL;
    CHECK_OK(ptdp_trainer_init(&tr, &tp));
    if (!tr) return;
    ptdp_gpt_chunk *chunk = ptdp_trainer_chunk(tr);
    const ptdp_job *job = ptdp_trainer_job(tr);
    const ptdp_gpt_config *cfg = &job->model;
    const int64_t s = cfg->seq_length, B = job->global_batch, V = cfg->vocab,
                  Vp = cfg->vocab_padded;
    int32_t *tokens = malloc(sizeof(int32_t) * 10 * (size_t)(B * (s + 1)));
    CHECK_OK(ptdp_st_read_i32(f, "ref.tokens", tokens, 10 * B * (s + 1)));

    /* logits of iteration 0's batch, one micro-batch at a time; [s, b, Vp] -> [B, s, V] */
    int64_t n;
    float *ref_logits = read_all(f, "ref.logits", &n);
    const int64_t b = job->micro_batch;
    float *lg = malloc(sizeof(float) * (size_t)(s * b * Vp));
    double worst = 0;
    for (int64_t k = 0; k < B / b; k++) {
        ptdp_gpt_chunk_logits(chunk, tokens + k * b * (s + 1), s + 1, lg);
        for (int64_t bi = 0; bi < b; bi++)
            for (int64_t si = 0; si < s; si++)
                for (int64_t v = 0; v < V; v++) {
                    double mine = lg[(si * b + bi) * Vp + v],
                           ref = ref_logits[((k * b + bi) * s + si) * V + v];
                    double e = fabs(mine - ref) / (1e-5 + 1e-4 * fabs(ref));
                    worst = e > worst ? e : worst;
                }
    }
    printf("%s: worst logit error / tolerance = %.3g\n", file, worst);
    CHECK(worst <= 1.0);
    free(lg);
    free(ref_logits);

    float *ref_losses = read_all(f, "ref.losses", &n);
    float *ref_norms = read_all(f, "ref.grad_norms", &n);
    float *ref_loss = read_all(f, "ref.loss", &n);
    /* 10 AdamW iterations from the initial weights; before each, its loss and
     * every gradient (before clipping) from the micro-batch loop run by hand,
     * since the step clips and updates in place */
    double worst_grad = 0;
    for (int it = 0; it < 10; it++) {
        const float scale = (float)(1.0 / ((double)B * s));
        const int32_t *batch = tokens + it * B * (s + 1);
        double total = 0;
        ptdp_gpt_chunk_zero_grads(chunk);
        for (int64_t k = 0; k < B / b; k++) {
            double ls = 0;
            ptdp_gpt_chunk_fwd(chunk, 0, batch + k * b * (s + 1), NULL, NULL, scale, &ls, 0, k);
            ptdp_gpt_chunk_bwd(chunk, 0, NULL, NULL);
            total += ls;
        }
        CHECK_CLOSE(total / ((double)B * s), it == 0 ? ref_loss[0] : ref_losses[it], 1e-5, 0);
        double g = check_params_vs(chunk, cfg, f, "ref.grads.", it, 1, 1e-4, 0);
        worst_grad = fmax(worst_grad, g);
        ptdp_step_stats st;
        CHECK_OK(ptdp_trainer_step(tr, tokens + it * B * (s + 1), &st));
        CHECK_CLOSE(st.loss, ref_losses[it], 1e-5, 0);
        CHECK_CLOSE(st.grad_norm, ref_norms[it], 1e-5, 0);
        printf("%s it %d: loss %.7f (ref %.7f)  norm %.7f (ref %.7f)\n", file, it, st.loss,
               ref_losses[it], st.grad_norm, ref_norms[it]);
    }
    printf("%s: worst gradient error / tolerance over 10 iterations = %.3g\n", file, worst_grad);
    if (ptdp_st_find(f, "ref.final.transformer.wte.weight") ||
        ptdp_st_find(f, "ref.final.model.embed_tokens.weight"))
        printf("%s: worst final weight error / tolerance = %.3g\n", file,
               check_params_vs(chunk, cfg, f, "ref.final.", -1, 0, 0, 1e-4));
    free(ref_losses);
    free(ref_norms);
    free(ref_loss);
    free(tokens);
    ptdp_trainer_free(tr);
    ptdp_st_close(f);
}

/* --bf16 / --fp16 against the same fp32 PyTorch fixtures: the 10 losses and
 * gradient norms within rtol. The 16-bit runs round every activation to 8
 * (bf16) or 11 (fp16) significant bits, so a loss, a mean of many token
 * losses, carries errors of the order of the unit roundoff u (2^-8, 2^-11)
 * and the tolerance is u; fp16 uses a constant loss scale of 1024 (its
 * dynamic scale would skip the first iterations). */
static inline void golden_run_precision(const char *file, ptdp_dtype dt, double rtol) {
    char path[512];
    golden_path(file, path, sizeof path);
    ptdp_st_file *f = NULL;
    CHECK_OK(ptdp_st_open(&f, path));
    if (!f) return;
    ptdp_comm comm;
    ptdp_comm_init_single(&comm);
    ptdp_trainer_params tp = golden_params(f, path, test_cpu_backend(PTDP_GEMM_ONEDNN, dt), &comm);
    if (dt == PTDP_DTYPE_FP16) tp.job.loss_scale = 1024.0;
    ptdp_trainer *tr = NULL;
    CHECK_OK(ptdp_trainer_init(&tr, &tp));
    int64_t n;
    const int64_t s = tp.job.model.seq_length, B = tp.job.global_batch;
    int32_t *tokens = malloc(sizeof(int32_t) * 10 * (size_t)(B * (s + 1)));
    CHECK_OK(ptdp_st_read_i32(f, "ref.tokens", tokens, 10 * B * (s + 1)));
    float *ref_losses = read_all(f, "ref.losses", &n),
          *ref_norms = read_all(f, "ref.grad_norms", &n);
    double worst_loss = 0, worst_norm = 0;
    for (int it = 0; tr && it < 10; it++) {
        ptdp_step_stats st;
        CHECK_OK(ptdp_trainer_step(tr, tokens + it * B * (s + 1), &st));
        CHECK(!st.skipped);
        worst_loss = fmax(worst_loss, fabs(st.loss - ref_losses[it]) / fabs(ref_losses[it]));
        worst_norm = fmax(worst_norm, fabs(st.grad_norm - ref_norms[it]) / fabs(ref_norms[it]));
    }
    printf("%s %s vs PyTorch fp32: worst relative loss error %.3g, gradient norm %.3g (tolerance "
           "%.3g)\n",
           file, ptdp_dtype_name(dt), worst_loss, worst_norm, rtol);
    CHECK(worst_loss <= rtol && worst_norm <= rtol);
    free(ref_losses);
    free(ref_norms);
    free(tokens);
    ptdp_trainer_free(tr);
    ptdp_st_close(f);
}

#endif
