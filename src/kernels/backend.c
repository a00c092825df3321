/* backend.c - a compute backend's life: ptdp_backend_open picks the device's
 * backend (CPU: cpu/cpu_backend.c; CUDA: cuda/cuda_backend.cu), close frees
 * it; the names of devices and capabilities; the weights and memory
 * contracts' entry points (kernels.h), which do nothing for a backend
 * without copies or memory of its own. Not here: any op. */
#include <stdio.h>
#include <string.h>

#include "kernels/kernels.h"

/* The CUDA backend lives in library ptdpcuda, which only the ptdp binary
 * and the CUDA tests link: a weak reference, NULL in every other program
 * (and in a build without CUDA), so the core library links without it. */
extern int ptdp__cuda_backend_open(ptdp_backend **out, const ptdp_backend_params *p)
    __attribute__((weak));
int ptdp__cpu_backend_open(ptdp_backend **out, const ptdp_backend_params *p);

static const char *const device_names[] = {
#define PTDP__DEVICE_NAME(e, s) s,
    PTDP_DEVICES(PTDP__DEVICE_NAME)
#undef PTDP__DEVICE_NAME
};

const char *ptdp_device_name(ptdp_device d) {
    return d >= 0 && d < (int)(sizeof device_names / sizeof device_names[0]) ? device_names[d]
                                                                             : "?";
}

int ptdp_device_parse(const char *name, ptdp_device *out) {
    for (int i = 0; i < (int)(sizeof device_names / sizeof device_names[0]); i++)
        if (!strcmp(name, device_names[i])) {
            *out = (ptdp_device)i;
            return PTDP_OK;
        }
    return ptdp_errorf(PTDP_EINVAL, "unknown device '%s' (cpu|cuda)", name);
}

static const char *const cap_names[] = {
#define PTDP__CAP_NAME(e, s) s,
    PTDP_BACKEND_CAPS(PTDP__CAP_NAME)
#undef PTDP__CAP_NAME
};

const char *ptdp_backend_cap_name(int i) {
    return i >= 0 && i < PTDP_CAP_COUNT ? cap_names[i] : "?";
}

const char *ptdp_backend_describe(const ptdp_backend *be, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "%s", be->name);
    const char *sep = " (";
    for (int i = 0; i < PTDP_CAP_COUNT && k < n; i++) {
        if (!(be->caps & (1u << i))) continue;
        k += (size_t)snprintf(buf + k, n - k, "%s%s", sep, cap_names[i]);
        sep = ", ";
    }
    if (k < n && be->caps) snprintf(buf + k, n - k, ")");
    return buf;
}

ptdp_backend_params ptdp_backend_default_params(void) {
    return (ptdp_backend_params){
        .device = PTDP_DEVICE_CPU, .dtype = PTDP_DTYPE_FP32, .lib = PTDP_GEMM_ONEDNN, .gpu = 0};
}

int ptdp_backend_open(ptdp_backend **out, const ptdp_backend_params *p) {
    *out = NULL;
    int rc;
    if (p->device != PTDP_DEVICE_CPU && p->device != PTDP_DEVICE_CUDA)
        return ptdp_errorf(PTDP_EINVAL, "compute backend: unknown device %d", (int)p->device);
    if (p->dtype != PTDP_DTYPE_FP32 && p->dtype != PTDP_DTYPE_BF16 && p->dtype != PTDP_DTYPE_FP16)
        return ptdp_errorf(PTDP_EINVAL, "compute backend: unknown precision %d", (int)p->dtype);
    if (p->lib != PTDP_GEMM_ONEDNN && p->lib != PTDP_GEMM_OPENBLAS)
        return ptdp_errorf(PTDP_EINVAL, "compute backend: unknown GEMM library %d", (int)p->lib);
    if (p->device == PTDP_DEVICE_CUDA) {
        if (p->dtype != PTDP_DTYPE_FP32)
            return ptdp_errorf(PTDP_EUNSUPPORTED,
                               "the CUDA backend computes in fp32 only so far (asked for %s)",
                               ptdp_dtype_name(p->dtype));
        if (!ptdp__cuda_backend_open)
            return ptdp_errorf(PTDP_EUNSUPPORTED,
                               "this program was built without the CUDA backend (no nvcc found, "
                               "-DPTDP_CUDA=OFF, or a program that does not link ptdpcuda: an "
                               "installed ptdp's is `pkg-config --libs ptdp-cuda`)");
        rc = ptdp__cuda_backend_open(out, p);
    } else {
        rc = ptdp__cpu_backend_open(out, p);
    }
    PTDP_ASSERT(rc != PTDP_OK || (*out && ptdp_backend_check(*out, 0) == PTDP_OK));
    return rc;
}

void ptdp_backend_close(ptdp_backend *be) {
    if (be) be->close(be);
}

void ptdp_backend_weights_register(ptdp_backend *be, const float *w, int64_t n) {
    if (be->weights_register) be->weights_register(be, w, n);
}

void ptdp_backend_weights_written(ptdp_backend *be, const float *w, int64_t n) {
    if (be->weights_written) be->weights_written(be, w, n);
}

int ptdp_backend_workspace_size(ptdp_backend *be, const ptdp_backend_job *job,
                                ptdp_backend_workspace *ws) {
    *ws = (ptdp_backend_workspace){.fixed = 0, .per_layer = 0, .per_head = 0};
    return be->workspace_size ? be->workspace_size(be, job, ws) : PTDP_OK;
}

size_t ptdp_backend_workspace_bytes(const ptdp_backend_workspace *ws, int64_t layers,
                                    int64_t heads) {
    return ws->fixed + (size_t)layers * ws->per_layer + (size_t)heads * ws->per_head;
}

int ptdp_backend_workspace_set(ptdp_backend *be, const ptdp_backend_job *job, void *block,
                               size_t bytes) {
    if (!be->workspace_set) {
        PTDP_ASSERT_MSG(bytes == 0, "a workspace for a backend that takes none");
        return PTDP_OK;
    }
    return be->workspace_set(be, job, block, bytes);
}

static void *mem_alloc(void *ctx, size_t bytes) {
    ptdp_backend *be = ctx;
    return be->alloc(be, bytes);
}
static void mem_release(void *ctx, void *p) {
    ptdp_backend *be = ctx;
    be->free(be, p);
}

int ptdp_backend_mem_alloc(ptdp_backend *be, ptdp_mem *m) {
    return ptdp_mem_alloc(m, mem_alloc, mem_release, be);
}

void ptdp_backend_mem_free(ptdp_backend *be, ptdp_mem *m) {
    if (be) ptdp_mem_free(m, mem_release, be);
}
