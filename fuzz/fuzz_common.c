/* fuzz_common.c - the tiny tokenizer and the invariant check of fuzz.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "fuzz.h"

_Noreturn void ptdp_fuzz_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "fuzz: invariant `%s' broken at %s:%d\n", expr, file, line);
    abort();
}

/* GPT-2's byte -> printable code point map (as bpe.c builds it). */
static unsigned byte_cp(int b) {
    int n = 0;
    for (int c = 0; c < 256; c++) {
        int keep = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
        if (c == b) return keep ? (unsigned)c : (unsigned)(256 + n);
        if (!keep) n++;
    }
    return 0;
}

/* Appends the JSON string of a code point sequence (as UTF-8). */
static size_t put_cp(char *o, unsigned cp) {
    if (cp == '"' || cp == '\\') {
        o[0] = '\\';
        o[1] = (char)cp;
        return 2;
    }
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

const ptdp_tokenizer *ptdp_fuzz_tiny_tokenizer(void) {
    static ptdp_tokenizer *tok;
    if (tok) return tok;
    static const char *const merges[] = {"h e", "he l",  "hel l", "t h",  "th e",
                                         "Ġ t", "Ġt he", "i n",   "in g", "Ġ a"};
    const int nm = (int)(sizeof merges / sizeof merges[0]);
    char vocab[8192], mtext[1024];
    size_t n = 0, m = 0;
    vocab[n++] = '{';
    int id = 0;
    for (int b = 0; b < 256; b++) {
        vocab[n++] = '"';
        n += put_cp(vocab + n, byte_cp(b));
        n += (size_t)snprintf(vocab + n, sizeof vocab - n, "\":%d,", id++);
    }
    for (int i = 0; i < nm; i++) { /* the merged token: both parts without the space */
        char merged[32];
        const char *sp = strchr(merges[i], ' ');
        snprintf(merged, sizeof merged, "%.*s%s", (int)(sp - merges[i]), merges[i], sp + 1);
        n += (size_t)snprintf(vocab + n, sizeof vocab - n, "\"%s\":%d,", merged, id++);
        m += (size_t)snprintf(mtext + m, sizeof mtext - m, "%s\n", merges[i]);
    }
    n += (size_t)snprintf(vocab + n, sizeof vocab - n, "\"<|endoftext|>\":%d}", id++);
    if (ptdp_tokenizer_open_mem(&tok, vocab, n, "tiny-vocab.json", mtext, m, "tiny-merges.txt")) {
        fprintf(stderr, "fuzz: tiny tokenizer: %s\n", ptdp_last_error());
        abort();
    }
    return tok;
}
