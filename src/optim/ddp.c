/* ddp.c - data-parallel gradient reduction in buckets, optionally overlapped
 * with the last micro-batch's backward, and ZeRO-1's reduce-scatter /
 * all-gather. On CPU, Open MPI progresses non-blocking collectives inside
 * MPI calls, so the overlap is partial; the bucket structure is the same one
 * NCCL will run fully in the background. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"

typedef struct {
    int64_t off, len; /* flat range; len is a multiple of d */
    int started;
    ptdp_comm_req req;
} bucket;

struct ptdp_ddp {
    ptdp_ddp_params p;
    int d, r;
    bucket *b;
    int nb;
    float *shard;       /* ZeRO-1: [numel/d] summed gradients of this rank's shards,
                           from the ZeRO-1 gradient-shard arena */
    int64_t *shard_off; /* [nb]: where bucket k's shard sits in `shard` */
    int nonfinite;      /* check_finite: a bucket held nan/inf before its reduction */
};

ptdp_ddp_params ptdp_ddp_default_params(void) {
    ptdp_ddp_params p = {.data = NULL,
                         .be = NULL,
                         .params = NULL,
                         .grads = NULL,
                         .numel = 0,
                         .bucket_floats = 40000000,
                         .zero = 0,
                         .hold_below = 0,
                         .mem = NULL,
                         .check_finite = 0};
    return p;
}

int ptdp_ddp_init(ptdp_ddp **out, const ptdp_ddp_params *p) {
    *out = NULL;
    ptdp_ddp *d = calloc(1, sizeof *d);
    if (!d) return ptdp_errorf(PTDP_ENOMEM, "out of memory for the gradient buckets");
    PTDP_ASSERT_MSG(p->be, "the data-parallel reducer needs the buffers' backend");
    d->p = *p;
    d->d = p->data->size;
    d->r = p->data->rank;
    PTDP_ASSERT(p->numel % d->d == 0);
    int64_t size = p->bucket_floats < d->d ? d->d : p->bucket_floats / d->d * d->d;
    int nb = (int)((p->numel + size - 1) / size);
    d->b = calloc((size_t)nb + 1, sizeof(bucket));
    d->shard_off = calloc((size_t)nb + 1, sizeof(int64_t));
    if (!d->b || !d->shard_off) {
        ptdp_ddp_free(d);
        return ptdp_errorf(PTDP_ENOMEM, "out of memory for the gradient buckets");
    }
    /* buckets from the end of the buffer: the last layers' gradients are
     * final first */
    int64_t end = p->numel, soff = 0;
    for (int k = 0; end > 0; k++) {
        int64_t len = end >= size ? size : end;
        d->b[k] = (bucket){.off = end - len, .len = len, .started = 0, .req = PTDP_COMM_REQ_NULL};
        d->shard_off[k] = soff;
        soff += len / d->d;
        end -= len;
        d->nb = k + 1;
    }
    PTDP_ASSERT(soff == p->numel / d->d);
    ptdp_ddp_bind(d, p->params, p->grads, p->mem);
    *out = d;
    return PTDP_OK;
}

void ptdp_ddp_bind(ptdp_ddp *d, float *params, float *grads, ptdp_mem *m) {
    d->p.params = params;
    d->p.grads = grads;
    if (d->p.zero)
        d->shard = ptdp_arena_carve(&m->cat[PTDP_MEM_GRAD_SHARD],
                                    sizeof(float) * (size_t)(d->p.numel / d->d));
}

void ptdp_ddp_free(ptdp_ddp *d) {
    if (!d) return;
    free(d->b);
    free(d->shard_off);
    free(d);
}

/* check_finite: the sum of squares (in double) of fp32 values is finite
 * exactly when every value is */
static void check_bucket(ptdp_ddp *d, int k) {
    const bucket *b = &d->b[k];
    if (d->p.check_finite && !isfinite(d->p.be->sumsq(d->p.be, d->p.grads + b->off, b->len)))
        d->nonfinite = 1;
}

static void start(ptdp_ddp *d, int k) {
    bucket *b = &d->b[k];
    b->started = 1;
    if (d->p.zero && d->d == 1) {
        /* a group of one: the shard is the bucket, copied by the backend (the
         * local collective would memmove, and backend memory may not be host
         * memory); the in-place call keeps the communication counters */
        float *shard = d->shard + d->shard_off[k];
        d->p.be->copy(d->p.be, shard, d->p.grads + b->off, b->len);
        ptdp_ireduce_scatter_f32(d->p.data, shard, shard, b->len, &b->req);
    } else if (d->p.zero)
        ptdp_ireduce_scatter_f32(d->p.data, d->p.grads + b->off, d->shard + d->shard_off[k],
                                 b->len / d->d, &b->req);
    else
        ptdp_iallreduce_sum_f32(d->p.data, d->p.grads + b->off, b->len, &b->req);
}

void ptdp_ddp_grads_ready(void *ddp, int64_t offset) {
    ptdp_ddp *d = ddp;
    if (offset < d->p.hold_below) offset = d->p.hold_below;
    for (int k = 0; k < d->nb; k++)
        if (!d->b[k].started && d->b[k].off >= offset) {
            check_bucket(d, k);
            start(d, k);
        }
    /* called after every layer of the last backward: poke the buckets in
     * flight so the transfers advance while the next layers compute */
    for (int k = 0; k < d->nb; k++)
        if (d->b[k].started) ptdp_test(&d->b[k].req);
}

void ptdp_ddp_finish(ptdp_ddp *d) {
    for (int k = 0; k < d->nb; k++)
        if (!d->b[k].started) start(d, k);
    for (int k = 0; k < d->nb; k++) {
        ptdp_wait(&d->b[k].req);
        d->b[k].started = 0;
    }
}

int ptdp_ddp_local_nonfinite(ptdp_ddp *d) {
    for (int k = 0; k < d->nb; k++)
        if (!d->b[k].started) check_bucket(d, k);
    const int bad = d->nonfinite;
    d->nonfinite = 0;
    return bad;
}

void ptdp_ddp_gather_params(ptdp_ddp *d) {
    if (!d->p.zero) return;
    for (int k = 0; k < d->nb; k++)
        ptdp_allgather_f32(d->p.data, d->p.params + d->b[k].off, d->b[k].len / d->d);
    ptdp_backend_weights_written(d->p.be, d->p.params, d->p.numel);
}

int ptdp_ddp_num_owned(const ptdp_ddp *d) { return d->p.zero ? d->nb : 1; }

void ptdp_ddp_owned(const ptdp_ddp *d, int i, int64_t *off, int64_t *len) {
    if (!d->p.zero) {
        *off = 0;
        *len = d->p.numel;
        return;
    }
    *len = d->b[i].len / d->d;
    *off = d->b[i].off + (int64_t)d->r * *len;
}

float *ptdp_ddp_grad_at(ptdp_ddp *d, int64_t off, int64_t len) {
    if (!d->p.zero) return d->p.grads + off;
    for (int k = 0; k < d->nb; k++) {
        int64_t n = d->b[k].len / d->d, o = d->b[k].off + (int64_t)d->r * n;
        if (off >= o && off + len <= o + n) return d->shard + d->shard_off[k] + (off - o);
    }
    return NULL;
}

int ptdp_ddp_replicas_identical(ptdp_ddp *const *ddp, int n, float *host, int64_t host_floats) {
    uint64_t h = PTDP_FNV1A_INIT;
    /* FNV-1a runs byte by byte: hashing piece after piece through the host
     * buffer gives the hash of the whole */
    for (int c = 0; c < n; c++) {
        const ptdp_ddp_params *p = &ddp[c]->p;
        for (int64_t i = 0; i < p->numel; i += host_floats) {
            const int64_t k = p->numel - i < host_floats ? p->numel - i : host_floats;
            p->be->download(p->be, host, p->params + i, sizeof(float) * (size_t)k);
            h = ptdp_fnv1a(host, sizeof(float) * (size_t)k, h);
        }
    }
    uint64_t mm[2] = {h, ~h}; /* max of h and of ~h: equal iff all equal */
    ptdp_allreduce_max_u64(ddp[0]->p.data, mm, 2);
    return mm[0] == h && mm[1] == ~h;
}
