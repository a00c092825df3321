/* test_data_tokenizer.c - the GPT-2 BPE tokenizer against every r50k_base
 * vector of gpt-tokenizer's TestPlans.txt (tiktoken's GPT-2 encoding), a few
 * hand-checked pre-tokenizer splits, and encode/decode round trips on random
 * bytes (invalid UTF-8 included) and random valid Unicode. Fetches the data
 * with scripts/fetch_data.sh first. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "data/data.h"
#include "data/data_internal.h"
#include "test.h"

#ifndef PTDP_SOURCE_DIR
#define PTDP_SOURCE_DIR "."
#endif

static int roundtrip(const ptdp_tokenizer *tok, ptdp_tok_cache *c, const char *s, size_t n) {
    ptdp_tokens t = {0};
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int ok = ptdp_tokenizer_encode(tok, c, s, n, &t) == 0 &&
             ptdp_tokenizer_decode(tok, t.ids, t.n, &buf, &len, &cap) == 0 && len == n &&
             (n == 0 || memcmp(buf, s, n) == 0);
    free(buf);
    ptdp_tokens_free(&t);
    return ok;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 63));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63));
    o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

static void check_split(const char *s, const char *const *want, int nwant) {
    size_t n = strlen(s), pos = 0;
    int k = 0, ok = 1;
    while (pos < n) {
        size_t l = ptdp__pretok_next((const unsigned char *)s + pos, n - pos);
        if (k >= nwant || strlen(want[k]) != l || memcmp(want[k], s + pos, l) != 0) ok = 0;
        pos += l;
        k++;
    }
    if (!ok || k != nwant) fprintf(stderr, "split of \"%s\" differs\n", s);
    CHECK(ok && k == nwant);
}

int main(void) {
    if (system("bash " PTDP_SOURCE_DIR "/scripts/fetch_data.sh >&2") != 0) {
        fprintf(stderr, "fetch_data.sh failed\n");
        return 1;
    }
    /* pre-tokenizer, by hand from the regex */
    {
        const char *w[] = {"Hello", ",", " world", "!!", "  ", " x", "\n"};
        check_split("Hello, world!!   x\n", w, 7);
    }
    {
        const char *w[] = {"I", "'ll", " don", "'t", " 42", "abc", "'", "S"}; /* case-sensitive */
        check_split("I'll don't 42abc'S", w, 8);
    }
    {
        const char *w[] = {" ", "\t", "a", "   "};
        check_split(" \ta   ", w, 4);
    }
    {
        const char *w[] = {"\xff\xfe", " \xc3\xa9t\xc3\xa9", " \xe2\x82\xac", "5"};
        check_split("\xff\xfe \xc3\xa9t\xc3\xa9 \xe2\x82\xac"
                    "5",
                    w, 4);
    }

    ptdp_tokenizer *tok = NULL;
    CHECK_OK(ptdp_tokenizer_open(&tok, PTDP_SOURCE_DIR "/data/gpt2/encoder.json",
                                 PTDP_SOURCE_DIR "/data/gpt2/vocab.bpe"));
    if (!tok) return test_done("test_data_tokenizer");
    CHECK(ptdp_tokenizer_vocab_size(tok) == 50257);
    CHECK(ptdp_tokenizer_eod(tok) == PTDP_GPT2_EOD);
    ptdp_tok_cache *cache = ptdp_tok_cache_new();
    CHECK(cache != NULL);

    /* TestPlans.txt: blocks of "EncodingName: X", "Sample: TEXT", "Encoded: [ids]" */
    FILE *f = fopen(PTDP_SOURCE_DIR "/data/gpt-tokenizer/TestPlans.txt", "rb");
    CHECK(f != NULL);
    int nvec = 0, nbad = 0, r50k = 0;
    static char line[1 << 16], sample[1 << 16];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (strncmp(line, "EncodingName: ", 14) == 0) {
            r50k = strcmp(line + 14, "r50k_base") == 0;
        } else if (r50k && strncmp(line, "Sample: ", 8) == 0) {
            strcpy(sample, line + 8);
        } else if (r50k && strncmp(line, "Encoded: [", 10) == 0) {
            int32_t want[8192];
            int nw = 0;
            for (char *p = line + 10; *p && *p != ']';) {
                want[nw++] = (int32_t)strtol(p, &p, 10);
                while (*p == ',' || *p == ' ') p++;
            }
            for (int pass = 0; pass < 2; pass++) { /* with and without the cache */
                ptdp_tokens t = {0};
                int rc =
                    ptdp_tokenizer_encode(tok, pass ? cache : NULL, sample, strlen(sample), &t);
                int ok = rc == 0 && (int)t.n == nw &&
                         (nw == 0 || memcmp(t.ids, want, (size_t)nw * 4) == 0);
                if (!ok && pass == 0) {
                    nbad++;
                    fprintf(stderr, "vector %d differs: \"%s\"\n  got:", nvec, sample);
                    for (size_t i = 0; i < t.n; i++) fprintf(stderr, " %d", t.ids[i]);
                    fprintf(stderr, "\n want:");
                    for (int i = 0; i < nw; i++) fprintf(stderr, " %d", want[i]);
                    fprintf(stderr, "\n");
                }
                CHECK(ok);
                ptdp_tokens_free(&t);
            }
            CHECK(roundtrip(tok, cache, sample, strlen(sample)));
            nvec++;
        }
    }
    if (f) fclose(f);
    printf("TestPlans r50k_base vectors: %d, mismatches: %d\n", nvec, nbad);
    CHECK(nvec >= 60);

    /* "<|endoftext|>" in text is ordinary text; the id decodes to it */
    {
        int32_t eod = PTDP_GPT2_EOD;
        char *buf = NULL;
        size_t len = 0, cap = 0;
        CHECK_OK(ptdp_tokenizer_decode(tok, &eod, 1, &buf, &len, &cap));
        CHECK(len == 13 && memcmp(buf, "<|endoftext|>", 13) == 0);
        free(buf);
        int32_t bad = 50257;
        buf = NULL;
        len = cap = 0;
        CHECK(ptdp_tokenizer_decode(tok, &bad, 1, &buf, &len, &cap) == PTDP_EINVAL);
        free(buf);
    }

    /* round trips: random bytes (mostly invalid UTF-8) and random valid code points */
    ptdp_rng_key key = ptdp_rng_key_make(1234, "test_data_tokenizer");
    static char text[1 << 14];
    int bytes_ok = 1, uni_ok = 1;
    for (int it = 0; it < 300; it++) {
        uint32_t r[4];
        ptdp_rng_u32x4(key, (uint64_t)it * 100000, r);
        size_t n = r[0] % 2000;
        for (size_t i = 0; i < n; i++) {
            ptdp_rng_u32x4(key, (uint64_t)it * 100000 + 1 + i, r);
            /* bias towards spaces, ASCII and UTF-8 lead/continuation bytes */
            static const char pick[] = " a1'\n\t.\xc3\xa9\xe2\x80";
            text[i] = r[1] % 4 == 0 ? pick[r[2] % 11] : (char)(r[2] & 0xFF);
        }
        bytes_ok &= roundtrip(tok, it % 2 ? cache : NULL, text, n);
        size_t m = 0;
        for (size_t i = 0; i < 600; i++) {
            ptdp_rng_u32x4(key, (uint64_t)it * 100000 + 50000 + i, r);
            uint32_t cp = r[0] % 3 == 0   ? r[1] % 0x80
                          : r[0] % 3 == 1 ? r[1] % 0x3000
                                          : r[1] % 0x110000;
            if (cp >= 0xD800 && cp <= 0xDFFF) cp = ' ';
            m += put_utf8(text + m, cp);
        }
        uni_ok &= roundtrip(tok, it % 2 ? cache : NULL, text, m);
    }
    CHECK(bytes_ok);
    CHECK(uni_ok);

    /* bad files */
    ptdp_tokenizer *bad = NULL;
    CHECK(ptdp_tokenizer_open(&bad, "/nonexistent/encoder.json", "x") == PTDP_EIO);
    CHECK(strstr(ptdp_last_error(), "/nonexistent/encoder.json") != NULL);
    CHECK(ptdp_tokenizer_open(&bad, PTDP_SOURCE_DIR "/data/gpt2/vocab.bpe",
                              PTDP_SOURCE_DIR "/data/gpt2/vocab.bpe") == PTDP_EFORMAT);
    CHECK(ptdp_tokenizer_open(&bad, PTDP_SOURCE_DIR "/data/gpt2/encoder.json",
                              PTDP_SOURCE_DIR "/data/gpt2/encoder.json") == PTDP_EFORMAT);
    CHECK(bad == NULL);

    ptdp_tok_cache_free(cache);
    ptdp_tokenizer_free(tok);
    return test_done("test_data_tokenizer");
}
