/* test_golden.c - ptdp against PyTorch with the CPU backends (both GEMM
 * libraries); the checks and tolerances are in golden.h, shared with
 * test_golden_cuda.c. */
#include "golden.h"

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
