/* test_golden_llama.c - ptdp's Llama-family blocks against PyTorch
 * (scripts/reference/llama_reference.py: Hugging Face's LlamaForCausalLM with
 * RMSNorm, SwiGLU, rotary embeddings, 4 query heads over 2 key/value groups,
 * no biases, an untied output layer): logits, loss, every gradient of 10
 * AdamW iterations and the final weights within golden.h's tolerances, the
 * fixture's weights read through the Hugging Face Llama mapping (ckpt/hf.h);
 * then --bf16 and --fp16 within the unit roundoff as test_golden.c's (one
 * GEMM library: the GPT fixtures run both). */
#include "golden.h"

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
    golden_run_precision("llama_a.safetensors", PTDP_DTYPE_BF16, 1.0 / 256);
    golden_run_precision("llama_a.safetensors", PTDP_DTYPE_FP16, 1.0 / 2048);
    return test_done("test_golden_llama");
}
