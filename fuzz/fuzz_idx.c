/* fuzz_idx.c - Megatron's indexed dataset reader (data/indexed.c). Input:
 * the .idx bytes followed by the .bin bytes; the split point is the .idx
 * size its own header declares (34 + 12 S + 8 D), or the whole input when
 * that does not fit. Every sequence of an accepted pair is read back. */
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t idx_n = size;
    if (size >= 34) {
        uint64_t s, d;
        memcpy(&s, data + 18, 8);
        memcpy(&d, data + 26, 8);
        if (s < ((uint64_t)1 << 40) && d < ((uint64_t)1 << 40) && 34 + 12 * s + 8 * d <= size)
            idx_n = (size_t)(34 + 12 * s + 8 * d);
    }
    ptdp_idx_dataset *ds = NULL;
    if (ptdp_idx_open_mem(&ds, "fuzz", data, idx_n, data + idx_n, size - idx_n) != PTDP_OK)
        return 0;
    int32_t buf[256];
    int64_t total = 0;
    for (int64_t i = 0; i < ptdp_idx_num_sequences(ds); i++) {
        const int32_t len = ptdp_idx_sequence_length(ds, i);
        PTDP_FUZZ_CHECK(len >= 0);
        total += len;
        for (int64_t off = 0; off < len; off += 256) {
            const int64_t n = len - off < 256 ? len - off : 256;
            PTDP_FUZZ_CHECK(ptdp_idx_read(ds, i, off, n, buf) == PTDP_OK);
        }
        PTDP_FUZZ_CHECK(ptdp_idx_read(ds, i, len, 1, buf) != PTDP_OK); /* one past the end */
    }
    PTDP_FUZZ_CHECK(total * ptdp_idx_dtype_size(ptdp_idx_dtype(ds)) <= (int64_t)(size - idx_n));
    int64_t prev = 0;
    for (int64_t j = 0; j <= ptdp_idx_num_documents(ds); j++) {
        const int64_t b = ptdp_idx_document_index(ds, j);
        PTDP_FUZZ_CHECK(b >= prev && b <= ptdp_idx_num_sequences(ds));
        prev = b;
    }
    ptdp_idx_close(ds);
    return 0;
}
