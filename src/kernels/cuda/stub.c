/* stub.c - ptdp_cuda_ops() in a build without CUDA (-DPTDP_CUDA=OFF or no
 * nvcc found): there is no GPU backend, say so. */
#include <stddef.h>

#include "kernels/kernels.h"

const ptdp_ops *ptdp_cuda_ops(void) {
    ptdp_errorf(PTDP_EUNSUPPORTED,
                "this ptdp was built without CUDA (no nvcc found, or -DPTDP_CUDA=OFF)");
    return NULL;
}
