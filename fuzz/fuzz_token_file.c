/* fuzz_token_file.c - `--token-file` (train/batches.c): a flat file of
 * uint16 tokens. Input: 1 byte of --seq-length (1..64), 2 bytes of
 * --vocab-size (1..65536), the file. Samples of an accepted file are read
 * back and must hold tokens below the vocabulary size. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "train/train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    const int64_t s = 1 + data[0] % 64, V = 1 + (data[1] | data[2] << 8);
    const size_t n = size - 3;
    uint16_t *file = malloc(n + 2); /* aligned, as a mapping is */
    if (!file) return 0;
    memcpy(file, data + 3, n);
    ptdp_batches b;
    if (ptdp_batches_open_mem(&b, "fuzz.tokens", file, n, s, V) == PTDP_OK) {
        int32_t out[4 * 65];
        ptdp_batches_get(&b, 0, 4, out);
        for (int i = 0; i < 4 * (s + 1); i++) PTDP_FUZZ_CHECK(out[i] >= 0 && out[i] < V);
        ptdp_batches_get(&b, 1000003, 1, out); /* wraps around the file */
        for (int i = 0; i <= s; i++) PTDP_FUZZ_CHECK(out[i] >= 0 && out[i] < V);
        ptdp_batches_close(&b);
    }
    free(file);
    return 0;
}
