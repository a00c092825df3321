/* batches.c - mock and token-file sample sources (see batches.h). */
#define _POSIX_C_SOURCE 200809L
#include "train/train.h"

#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

void ptdp_batches_mock(ptdp_batches *b, int64_t seq_length, int64_t vocab, uint64_t seed) {
    memset(b, 0, sizeof *b);
    b->seq_length = seq_length;
    b->vocab = vocab;
    b->seed = seed;
}

void ptdp_batches_gpt(ptdp_batches *b, const ptdp_gpt_data *gpt, int split, int64_t seq_length) {
    memset(b, 0, sizeof *b);
    b->seq_length = seq_length;
    b->gpt = gpt;
    b->split = split;
}

int ptdp_batches_open_mem(ptdp_batches *b, const char *name, const void *bytes, size_t nbytes,
                          int64_t seq_length, int64_t vocab) {
    memset(b, 0, sizeof *b);
    b->seq_length = seq_length;
    b->vocab = vocab;
    b->path = name;
    PTDP_ASSERT(((uintptr_t)bytes & 1) == 0);
    if (seq_length < 1 || vocab < 1)
        return ptdp_errorf(PTDP_EINVAL,
                           "--token-file %s: --seq-length and --vocab-size must be "
                           "positive",
                           name);
    if (nbytes % 2)
        return ptdp_errorf(PTDP_EFORMAT,
                           "--token-file %s: %zu bytes is not a whole number of uint16 tokens",
                           name, nbytes);
    if ((int64_t)(nbytes / 2) < seq_length + 1)
        return ptdp_errorf(
            PTDP_EFORMAT,
            "--token-file %s: holds %lld tokens, fewer than one sample (--seq-length + 1 = %lld)",
            name, (long long)(nbytes / 2), (long long)(seq_length + 1));
    const uint16_t *t = bytes;
    for (size_t i = 0; i < nbytes / 2; i++)
        if (t[i] >= vocab)
            return ptdp_errorf(
                PTDP_EFORMAT,
                "--token-file %s: token %lld at position %lld is not below the vocabulary size %lld (--vocab-size)",
                name, (long long)t[i], (long long)i, (long long)vocab);
    b->tokens = t;
    b->ntokens = (int64_t)(nbytes / 2);
    return PTDP_OK;
}

int ptdp_batches_open_file(ptdp_batches *b, const char *path, int64_t seq_length, int64_t vocab) {
    memset(b, 0, sizeof *b);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return ptdp_errorf(PTDP_EIO, "--token-file %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return ptdp_errorf(PTDP_EIO, "--token-file %s: %s", path, strerror(errno));
    }
    void *m = st.st_size > 0 ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (m == MAP_FAILED)
        return ptdp_errorf(PTDP_EIO, "--token-file %s: mmap: %s", path, strerror(errno));
    int rc = ptdp_batches_open_mem(b, path, m, (size_t)st.st_size, seq_length, vocab);
    if (rc) {
        if (m) munmap(m, (size_t)st.st_size);
        return rc;
    }
    b->map_bytes = (size_t)st.st_size; /* ptdp_batches_close unmaps */
    return PTDP_OK;
}

void ptdp_batches_close(ptdp_batches *b) {
    if (b->tokens && b->map_bytes) munmap((void *)b->tokens, b->map_bytes);
    b->tokens = NULL;
}

void ptdp_batches_get(const ptdp_batches *b, int64_t first, int64_t count, int32_t *out) {
    const int64_t s = b->seq_length;
    if (b->gpt) {
        for (int64_t k = 0; k < count; k++)
            PTDP_ASSERT(ptdp_gpt_data_sample(b->gpt, b->split, first + k, out + k * (s + 1)) ==
                        PTDP_OK);
        return;
    }
    for (int64_t k = 0; k < count; k++)
        for (int64_t q = 0; q <= s; q++) {
            uint64_t pos = (uint64_t)(first + k) * (uint64_t)s + (uint64_t)q;
            int32_t tok;
            if (b->tokens)
                tok = b->tokens[pos % (uint64_t)b->ntokens];
            else
                tok = (int32_t)(ptdp_hash_mix(b->seed, pos) % (uint64_t)b->vocab);
            out[k * (s + 1) + q] = tok;
        }
}
