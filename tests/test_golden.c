/* test_golden.c - ptdp against PyTorch with the CPU backends (both GEMM
 * libraries); the checks and tolerances are in golden.h, shared with
 * test_golden_cuda.c. */
#include "golden.h"

/* --bf16 / --fp16 against the same fp32 PyTorch fixtures: the 10 losses and
 * gradient norms within rtol. The 16-bit runs round every activation to 8
 * (bf16) or 11 (fp16) significant bits, so a loss, a mean of many token
 * losses, carries errors of the order of the unit roundoff u (2^-8, 2^-11)
 * and the tolerance is u; fp16 uses a constant loss scale of 1024 (its
 * dynamic scale would skip the first iterations). */
static void golden_run_precision(const char *file, ptdp_dtype dt, double rtol) {
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

int main(void) {
    golden_run_config("gpt_a.safetensors", test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32));
    golden_run_config("gpt_b.safetensors", test_cpu_backend(PTDP_GEMM_ONEDNN, PTDP_DTYPE_FP32));
    golden_run_config("gpt_b.safetensors", test_cpu_backend(PTDP_GEMM_OPENBLAS, PTDP_DTYPE_FP32));
    for (int k = 0; k < 2; k++) {
        const char *file = k ? "gpt_b.safetensors" : "gpt_a.safetensors";
        golden_run_precision(file, PTDP_DTYPE_BF16, 1.0 / 256);
        golden_run_precision(file, PTDP_DTYPE_FP16, 1.0 / 2048);
    }
    return test_done("test_golden");
}
