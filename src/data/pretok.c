/* pretok.c - UTF-8 decoding that never fails (an invalid byte is one code
 * point of class "other"), Unicode class lookup over the generated table, and
 * the GPT-2 pre-tokenizer regex implemented by hand:
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * with \s = White_Space. Alternatives are tried in order and the first that
 * matches wins, as in Python's `regex` module. No other regex is supported. */
#include "data/data_internal.h"

#define PTDP__CP_INVALID 0xFFFFFFFFu

uint32_t ptdp__utf8_next(const unsigned char *s, size_t n, int *len) {
    unsigned c = s[0];
    if (c < 0x80) {
        *len = 1;
        return c;
    }
    int need;
    uint32_t cp;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        cp = c & 0x0F;
        if (c == 0xE0) lo = 0xA0; /* no overlongs */
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        cp = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F; /* <= U+10FFFF */
    } else {
        *len = 1;
        return PTDP__CP_INVALID;
    }
    if ((size_t)need >= n) {
        *len = 1;
        return PTDP__CP_INVALID;
    }
    for (int k = 1; k <= need; k++) {
        unsigned b = s[k];
        unsigned blo = k == 1 ? lo : 0x80, bhi = k == 1 ? hi : 0xBF;
        if (b < blo || b > bhi) {
            *len = 1;
            return PTDP__CP_INVALID;
        }
        cp = (cp << 6) | (b & 0x3F);
    }
    *len = need + 1;
    return cp;
}

int ptdp__uc_class(uint32_t cp) {
    if (cp < 0x80) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return PTDP__UC_L;
        if (cp >= '0' && cp <= '9') return PTDP__UC_N;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return PTDP__UC_WS;
        return PTDP__UC_OTHER;
    }
    int lo = 0, hi = ptdp__unicode_nranges - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const ptdp__ucrange *r = &ptdp__unicode_ranges[mid];
        if (cp < r->lo)
            hi = mid - 1;
        else if (cp > r->hi)
            lo = mid + 1;
        else
            return r->cls;
    }
    return PTDP__UC_OTHER;
}

static int ptdp__class_at(const unsigned char *s, size_t n, int *len) {
    return ptdp__uc_class(ptdp__utf8_next(s, n, len));
}

/* Bytes of the longest run starting at s whose code points all have class c. */
static size_t ptdp__run(const unsigned char *s, size_t n, int c) {
    size_t i = 0;
    while (i < n) {
        int l;
        if (ptdp__class_at(s + i, n - i, &l) != c) break;
        i += (size_t)l;
    }
    return i;
}

size_t ptdp__pretok_next(const unsigned char *s, size_t n) {
    if (s[0] == '\'' && n >= 2) {
        unsigned c = s[1];
        if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
        if (n >= 3 &&
            ((c == 'r' && s[2] == 'e') || (c == 'v' && s[2] == 'e') || (c == 'l' && s[2] == 'l')))
            return 3;
    }
    int l0;
    int c0 = ptdp__class_at(s, n, &l0);
    if (s[0] == ' ' && n > 1) {
        int l1;
        int c1 = ptdp__class_at(s + 1, n - 1, &l1);
        if (c1 != PTDP__UC_WS) return 1 + ptdp__run(s + 1, n - 1, c1);
    }
    if (c0 != PTDP__UC_WS) return ptdp__run(s, n, c0);
    /* Whitespace: \s+(?!\S) backs off one code point when the run is
     * followed by a non-space, unless that would leave it empty (then \s+). */
    size_t i = 0, last = 0;
    int count = 0;
    while (i < n) {
        int l;
        if (ptdp__class_at(s + i, n - i, &l) != PTDP__UC_WS) break;
        last = i;
        i += (size_t)l;
        count++;
    }
    if (i == n || count == 1) return i;
    return last;
}
