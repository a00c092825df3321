/* test_golden_llama.c - ptdp's Llama-family blocks against PyTorch
 * (scripts/reference/llama_reference.py: Hugging Face's LlamaForCausalLM with
 * RMSNorm, SwiGLU, rotary embeddings, 4 query heads over 2 key/value groups,
 * no biases, an untied output layer): logits, loss, every gradient of 10
 * AdamW iterations and the final weights within golden.h's tolerances, the
 * fixture's weights read through the Hugging Face Llama mapping (ckpt/hf.h);
 * then --bf16 and --fp16 within the unit roundoff as test_golden.c's (one
 * GEMM library: the GPT fixtures run both). */
#include "golden.h"

static void precision_run(ptdp_dtype dt, double rtol) {
    char path[512];
    golden_path("llama_a.safetensors", path, sizeof path);
    ptdp_st_file *f = NULL;
    CHECK_OK(ptdp_st_open(&f, path));
    if (!f) return;
    ptdp_comm comm;
    ptdp_comm_init_single(&comm);
    ptdp_trainer_params tp = golden_params(f, path, test_cpu_backend(PTDP_GEMM_ONEDNN, dt), &comm);
    if (dt == PTDP_DTYPE_FP16) tp.job.loss_scale = 1024.0;
    ptdp_trainer *tr = NULL;
    CHECK_OK(ptdp_trainer_init(&tr, &tp));
    const int64_t s = tp.job.model.seq_length, B = tp.job.global_batch;
    int64_t n;
    int32_t *tokens = malloc(sizeof(int32_t) * 10 * (size_t)(B * (s + 1)));
    CHECK_OK(ptdp_st_read_i32(f, "ref.tokens", tokens, 10 * B * (s + 1)));
    float *ref_losses = read_all(f, "ref.losses", &n),
          *ref_norms = read_all(f, "ref.grad_norms", &n);
    double worst_loss = 0, worst_norm = 0;
    for (int it = 0; tr && it < 10; it++) {
        ptdp_step_stats st;
        ptdp_trainer_step(tr, tokens + it * B * (s + 1), &st);
        CHECK(!st.skipped);
        worst_loss = fmax(worst_loss, fabs(st.loss - ref_losses[it]) / fabs(ref_losses[it]));
        worst_norm = fmax(worst_norm, fabs(st.grad_norm - ref_norms[it]) / fabs(ref_norms[it]));
    }
    printf("llama_a %s vs PyTorch fp32: worst relative loss error %.3g, gradient norm %.3g "
           "(tolerance %.3g)\n",
           ptdp_dtype_name(dt), worst_loss, worst_norm, rtol);
    CHECK(worst_loss <= rtol && worst_norm <= rtol);
    free(ref_losses);
    free(ref_norms);
    free(tokens);
    ptdp_trainer_free(tr);
    ptdp_st_close(f);
}

/* A backend that declares an op untested on its device (the CUDA backend's
 * PTDP_CAP_UNTESTED_*) refuses the run that needs it, naming the flag: here
 * the CPU backend's instance with each flag set in turn. */
static void refuse_untested(void) {
    char path[512];
    golden_path("llama_a.safetensors", path, sizeof path);
    ptdp_st_file *f = NULL;
    CHECK_OK(ptdp_st_open(&f, path));
    if (!f) return;
    const struct {
        unsigned cap;
        const char *flag;
    } c[] = {{PTDP_CAP_UNTESTED_RMSNORM, "without --normalization RMSNorm"},
             {PTDP_CAP_UNTESTED_SWIGLU, "without --swiglu"},
             {PTDP_CAP_UNTESTED_ROPE, "without --position-embedding-type rope"},
             {PTDP_CAP_UNTESTED_GQA, "without --group-query-attention"}};
    ptdp_backend *be = test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32);
    const unsigned caps = be->caps;
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        ptdp_comm comm;
        ptdp_comm_init_single(&comm);
        ptdp_trainer_params tp = golden_params(f, path, be, &comm);
        be->caps = caps | c[i].cap;
        ptdp_trainer *tr = NULL;
        CHECK(ptdp_trainer_init(&tr, &tp) == PTDP_EUNSUPPORTED && !tr);
        CHECK(strstr(ptdp_last_error(), c[i].flag) != NULL);
        ptdp_trainer_free(tr);
    }
    be->caps = caps;
    ptdp_st_close(f);
}

int main(void) {
    refuse_untested();
    golden_run_config("llama_a.safetensors", test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32));
    precision_run(PTDP_DTYPE_BF16, 1.0 / 256);
    precision_run(PTDP_DTYPE_FP16, 1.0 / 2048);
    return test_done("test_golden_llama");
}
