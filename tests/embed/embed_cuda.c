/* embed_cuda.c - what a program embedding ptdp's installed library gets when
 * it asks for the CUDA backend (tests/test_install.sh): linked with
 * `pkg-config --libs ptdp` it is told the backend is not in the program
 * (PTDP_EUNSUPPORTED, naming ptdp-cuda); linked with ptdp-cuda it reaches the
 * backend, which opens the GPU or says why not (PTDP_EBACKEND where there is
 * none). Prints "cuda: <status> <message>". */
#include <stdio.h>

#include <ptdp/kernels/kernels.h>

int main(void) {
    ptdp_backend_params p = ptdp_backend_default_params();
    p.device = PTDP_DEVICE_CUDA;
    ptdp_backend *be = NULL;
    int rc = ptdp_backend_open(&be, &p);
    printf("cuda: %s %s\n",
           rc == PTDP_OK             ? "opened"
           : rc == PTDP_EUNSUPPORTED ? "unsupported"
           : rc == PTDP_EBACKEND     ? "no-gpu"
                                     : "other",
           rc == PTDP_OK ? "" : ptdp_last_error());
    ptdp_backend_close(be);
    return 0;
}
