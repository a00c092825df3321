/* fuzz_bpe.c - the GPT-2 tokenizer files (data/bpe.c): encoder.json and
 * vocab.bpe, then encoding and decoding with what was loaded. Input:
 * encoder.json bytes, a NUL byte, vocab.bpe bytes, a NUL byte, a text.
 * Byte-level BPE with every byte in the vocabulary must give the text back
 * exactly: decode(encode(text)) == text is checked. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *d = (const char *)data;
    const char *z1 = memchr(d, 0, size);
    if (!z1) return 0;
    const char *merges = z1 + 1;
    size_t rest = size - (size_t)(merges - d);
    const char *z2 = memchr(merges, 0, rest);
    const size_t merges_n = z2 ? (size_t)(z2 - merges) : rest;
    const char *text = z2 ? z2 + 1 : "hello the thing";
    const size_t text_n = z2 ? size - (size_t)(text - d) : strlen(text);
    ptdp_tokenizer *tok = NULL;
    if (ptdp_tokenizer_open_mem(&tok, d, (size_t)(z1 - d), "fuzz-vocab.json", merges, merges_n,
                                "fuzz-merges.txt") != PTDP_OK)
        return 0;
    ptdp_tok_cache *cache = ptdp_tok_cache_new();
    ptdp_tokens a = {0}, b = {0};
    char *buf = NULL;
    size_t len = 0, cap = 0;
    if (ptdp_tokenizer_encode(tok, cache, text, text_n, &a) == PTDP_OK &&
        ptdp_tokenizer_encode(tok, NULL, text, text_n, &b) == PTDP_OK) {
        PTDP_FUZZ_CHECK(a.n == b.n && (a.n == 0 || !memcmp(a.ids, b.ids, a.n * sizeof *a.ids)));
        for (size_t i = 0; i < a.n; i++)
            PTDP_FUZZ_CHECK(a.ids[i] >= 0 && a.ids[i] < ptdp_tokenizer_vocab_size(tok));
        PTDP_FUZZ_CHECK(ptdp_tokenizer_decode(tok, a.ids, a.n, &buf, &len, &cap) == PTDP_OK);
        PTDP_FUZZ_CHECK(len == text_n && (len == 0 || !memcmp(buf, text, len)));
    }
    free(buf);
    ptdp_tokens_free(&a);
    ptdp_tokens_free(&b);
    ptdp_tok_cache_free(cache);
    ptdp_tokenizer_free(tok);
    return 0;
}
