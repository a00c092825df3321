/* fuzz_decode_ids.c - the input of `ptdp tokenize --decode`: lines of
 * decimal token ids (data/bpe.c ptdp_tokens_parse_ids), decoded with the
 * tiny tokenizer; each line is also parsed against the largest vocabulary
 * size, where a long number must not overflow. Input: text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const ptdp_tokenizer *tok = ptdp_fuzz_tiny_tokenizer();
    const int32_t V = ptdp_tokenizer_vocab_size(tok);
    ptdp_tokens t = {0};
    char *buf = NULL;
    size_t cap = 0;
    const char *d = (const char *)data;
    for (size_t pos = 0; pos < size;) {
        const char *nl = memchr(d + pos, '\n', size - pos);
        const size_t n = nl ? (size_t)(nl - (d + pos)) + 1 : size - pos; /* getline keeps '\n' */
        t.n = 0;
        if (ptdp_tokens_parse_ids(d + pos, n, V, &t) == PTDP_OK) {
            size_t len = 0;
            for (size_t i = 0; i < t.n; i++) PTDP_FUZZ_CHECK(t.ids[i] >= 0 && t.ids[i] < V);
            PTDP_FUZZ_CHECK(ptdp_tokenizer_decode(tok, t.ids, t.n, &buf, &len, &cap) == PTDP_OK);
        }
        t.n = 0;
        if (ptdp_tokens_parse_ids(d + pos, n, INT32_MAX, &t) == PTDP_OK)
            for (size_t i = 0; i < t.n; i++) PTDP_FUZZ_CHECK(t.ids[i] >= 0);
        pos += n;
    }
    free(buf);
    ptdp_tokens_free(&t);
    return 0;
}
