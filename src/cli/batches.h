/* batches.h - where training samples come from: --mock-data (deterministic
 * synthetic tokens) or --token-file (a raw little-endian uint16 stream). A
 * sample is s+1 tokens; sample k starts at token k*s (consecutive samples
 * overlap by one token, as in Megatron's GPT dataset); the stream wraps
 * around at the end of the file. Iteration i uses samples i*B .. i*B+B-1.
 * With --data-path the samples come from Megatron's GPT dataset indices
 * (src/data): shuffled documents, split train/valid/test, blended. */
#ifndef PTDP_CLI_BATCHES_H
#define PTDP_CLI_BATCHES_H

#include <stddef.h>
#include <stdint.h>

#include "data/data.h"

typedef struct {
    int64_t seq_length;
    int64_t vocab;    /* tokens must be below this */
    uint64_t seed;    /* mock data */
    const uint16_t *tokens; /* token file, mmap'd */
    int64_t ntokens;
    size_t map_bytes;
    const char *path;
    const ptdp_gpt_data *gpt; /* --data-path (not owned) */
    int split;                /* PTDP_SPLIT_TRAIN / _VALID / _TEST */
} ptdp_batches;

/* Samples of one split of an opened GPT dataset. */
void ptdp_batches_gpt(ptdp_batches *b, const ptdp_gpt_data *gpt, int split, int64_t seq_length);

/* Mock source: token at stream position q is a hash of (seed, q) modulo V. */
void ptdp_batches_mock(ptdp_batches *b, int64_t seq_length, int64_t vocab, uint64_t seed);
/* Maps and validates a token file: even length, at least s+1 tokens, every
 * token < vocab. PTDP_EIO / PTDP_EFORMAT naming the file and the problem. */
int ptdp_batches_open_file(ptdp_batches *b, const char *path, int64_t seq_length, int64_t vocab);
void ptdp_batches_close(ptdp_batches *b);
/* Samples first .. first+count-1 into out [count, s+1]. */
void ptdp_batches_get(const ptdp_batches *b, int64_t first, int64_t count, int32_t *out);

#endif
