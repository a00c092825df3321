/* test_golden.c - ptdp against PyTorch with the CPU tables (both GEMM
 * libraries); the checks and tolerances are in golden.h, shared with
 * test_golden_cuda.c. */
#include "golden.h"

int main(void) {
    golden_run_config("gpt_a.safetensors", ptdp_cpu_ops_lib(PTDP_GEMM_ONEDNN));
    golden_run_config("gpt_b.safetensors", ptdp_cpu_ops_lib(PTDP_GEMM_ONEDNN));
    golden_run_config("gpt_b.safetensors", ptdp_cpu_ops_lib(PTDP_GEMM_OPENBLAS));
    return test_done("test_golden");
}
