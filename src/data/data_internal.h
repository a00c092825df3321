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

#endif
