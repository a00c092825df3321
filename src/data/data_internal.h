/* data_internal.h - declarations shared by the files of src/data only: the
 * generated Unicode class table and the GPT-2 pre-tokenizer. Not a public API. */
#ifndef PTDP_DATA_INTERNAL_H
#define PTDP_DATA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "data/data.h"

enum { PTDP__UC_OTHER = 0, PTDP__UC_L = 1, PTDP__UC_N = 2, PTDP__UC_WS = 3 };

typedef struct {
    uint32_t lo, hi; /* inclusive */
    uint8_t cls;     /* PTDP__UC_* */
} ptdp__ucrange;

extern const char ptdp__unicode_version[];
extern const int ptdp__unicode_nranges;
extern const ptdp__ucrange ptdp__unicode_ranges[];

/* Class of a code point (binary search; ASCII is answered from a table). */
int ptdp__uc_class(uint32_t cp);

/* Decodes one code point at s[0..n) (n >= 1). Invalid or truncated UTF-8
 * (including overlongs and surrogates) yields *len = 1 and *cp = 0xFFFFFFFF,
 * which classifies as "other". Returns the code point. */
uint32_t ptdp__utf8_next(const unsigned char *s, size_t n, int *len);

/* The GPT-2 pre-tokenizer: returns the byte length (>= 1) of the piece that
 * the regex 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
 * \s+(?!\S)|\s+ matches at s[0..n), n >= 1. */
size_t ptdp__pretok_next(const unsigned char *s, size_t n);

/* ---- preprocess's input (preprocess.c) ---- */
typedef struct {
    size_t begin, end; /* byte range in the input: a JSON line, or a document */
    size_t lineno;     /* 1-based line of the range's start (for messages) */
} ptdp__item;

/* Documents are user data: deeper than ptdp's own files, as deep as cJSON
 * itself allows. */
#define PTDP__PP_MAX_DEPTH 1000

/* Finds the next item of d[n] at *pos (a JSON line, or a plain-text
 * document: non-blank lines up to a blank one), advancing *pos and *lineno;
 * returns 0 at the end of input. */
int ptdp__pp_next_item(const char *d, size_t n, int json, size_t *pos, size_t *lineno,
                       ptdp__item *it);
/* One JSON line line[line_n] -> out[0 .. n_keys): the tokens of the string
 * under each key (cleared first), plus eod (when >= 0) after a non-empty
 * one. PTDP_EFORMAT "input:lineno: ..." for a line that is not an object,
 * nests too deep or lacks a key; PTDP_ENOMEM. */
int ptdp__pp_json_line(const ptdp_tokenizer *tok, ptdp_tok_cache *cache, const char *line,
                       size_t line_n, const char *const *keys, int n_keys, int32_t eod,
                       ptdp_tokens *out, const char *input, size_t lineno);

#endif
