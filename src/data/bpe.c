/* bpe.c - the GPT-2 byte-level BPE tokenizer: loads encoder.json + vocab.bpe,
 * maps bytes to GPT-2's printable "byte unicode" alphabet, splits text with
 * the pre-tokenizer (pretok.c), merges each piece by rank, and decodes ids
 * back to bytes. Special tokens are not parsed out of text (Megatron's
 * GPT2BPETokenizer does not either); no other BPE flavour (no dropout, no
 * SentencePiece). */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/base.h"
#include "data/data_internal.h"

int ptdp_tokens_reserve(ptdp_tokens *t, size_t extra) {
    if (t->n + extra <= t->cap) return PTDP_OK;
    size_t cap = t->cap ? t->cap : 256;
    while (cap < t->n + extra) cap *= 2;
    int32_t *p = realloc(t->ids, cap * sizeof(int32_t));
    if (!p) return ptdp_errorf(PTDP_ENOMEM, "out of memory growing a token buffer to %zu", cap);
    t->ids = p;
    t->cap = cap;
    return PTDP_OK;
}

int ptdp_tokens_parse_ids(const char *text, size_t len, int32_t vocab_size, ptdp_tokens *out) {
    size_t i = 0;
    for (;;) {
        while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n'))
            i++;
        if (i == len) return PTDP_OK;
        const size_t word = i;
        int64_t v = 0;
        int ok = 1;
        for (;
             i < len && !(text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n');
             i++) {
            /* the bound keeps v far from overflow whatever the number of digits */
            if (text[i] < '0' || text[i] > '9' || v >= vocab_size)
                ok = 0;
            else
                v = 10 * v + (text[i] - '0');
        }
        if (!ok || v >= vocab_size) {
            const int shown = i - word > 40 ? 40 : (int)(i - word);
            char w[41];
            for (int k = 0; k < shown; k++) {
                const unsigned char c = (unsigned char)text[word + k];
                w[k] = c >= 0x20 && c < 0x7f ? (char)c : '?';
            }
            w[shown] = 0;
            return ptdp_errorf(PTDP_EINVAL, "'%s%s' is not a token id (0..%d)", w,
                               i - word > 40 ? "..." : "", vocab_size - 1);
        }
        int rc = ptdp_tokens_reserve(out, 1);
        if (rc) return rc;
        out->ids[out->n++] = (int32_t)v;
    }
}

void ptdp_tokens_free(ptdp_tokens *t) {
    if (!t) return;
    free(t->ids);
    t->ids = NULL;
    t->n = t->cap = 0;
}

static uint64_t ptdp__hash_bytes(const void *p, size_t n) {
    uint64_t h = ptdp_fnv1a(p, n, PTDP_FNV1A_INIT);
    return h ^ (h >> 29);
}

/* ---- pair map: (left id, right id) -> (rank, merged id), open addressing */
typedef struct {
    uint64_t key; /* (left << 32 | right) + 1; 0 = empty slot */
    int32_t rank;
    int32_t merged;
} ptdp__pair_slot;

struct ptdp_tokenizer {
    int32_t vocab_size;
    int32_t eod;
    int32_t byte_id[256];   /* id of the one-byte token of each byte */
    char *dec_bytes;        /* decoded bytes of every id, concatenated */
    uint32_t *dec_off;      /* [vocab_size + 1]; dec_off[i] == UINT32_MAX: no such id */
    ptdp__pair_slot *pairs; /* [pair_cap] */
    size_t pair_cap;
};

static uint64_t ptdp__pair_key(int32_t a, int32_t b) {
    return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
}

static ptdp__pair_slot *ptdp__pair_find(const ptdp_tokenizer *t, uint64_t key) {
    size_t mask = t->pair_cap - 1;
    size_t i = (size_t)(key * 0x9E3779B97F4A7C15ull >> 20) & mask;
    while (t->pairs[i].key && t->pairs[i].key != key) i = (i + 1) & mask;
    return &t->pairs[i];
}

/* ---- string map used only while loading: vocab string -> id */
typedef struct {
    const char *key;
    size_t len;
    int32_t id;
} ptdp__str_slot;

typedef struct {
    ptdp__str_slot *slots;
    size_t cap;
} ptdp__str_map;

static ptdp__str_slot *ptdp__str_find(const ptdp__str_map *m, const char *k, size_t n) {
    size_t mask = m->cap - 1;
    size_t i = (size_t)ptdp__hash_bytes(k, n) & mask;
    while (m->slots[i].key && !(m->slots[i].len == n && memcmp(m->slots[i].key, k, n) == 0))
        i = (i + 1) & mask;
    return &m->slots[i];
}

/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the
 * other 68 bytes to U+0100.. in byte order. */
static void ptdp__byte_unicode(uint32_t byte_cp[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_cp[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

/* Ids above this are refused before the decode tables (16 bytes per id) are
 * allocated: the largest vocabularies in use have about 2^18 entries. */
#define PTDP__MAX_VOCAB_ID (1 << 24)

static int ptdp__load_vocab(ptdp_tokenizer *t, const char *text, size_t len, const char *path,
                            ptdp__str_map *map, cJSON **json_out) {
    char what[300];
    snprintf(what, sizeof what, "vocabulary file '%s'", path);
    if (ptdp_json_check(text, len, PTDP_JSON_MAX_DEPTH, what)) return PTDP_EFORMAT;
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ptdp_errorf(PTDP_EFORMAT, "vocabulary file '%s' is not a JSON object", path);
    }
    *json_out = root;
    size_t count = (size_t)cJSON_GetArraySize(root);
    if (count < 256)
        return ptdp_errorf(PTDP_EFORMAT, "vocabulary file '%s' has %zu entries, fewer than 256",
                           path, count);
    map->cap = 1;
    while (map->cap < 2 * count) map->cap *= 2;
    map->slots = calloc(map->cap, sizeof(ptdp__str_slot));
    if (!map->slots) return ptdp_errorf(PTDP_ENOMEM, "out of memory loading '%s'", path);
    int32_t max_id = -1;
    for (cJSON *e = root->child; e; e = e->next) {
        double v = e->valuedouble;
        if (!cJSON_IsNumber(e) || v < 0 || v >= PTDP__MAX_VOCAB_ID || v != (double)(int32_t)v)
            return ptdp_errorf(PTDP_EFORMAT,
                               "vocabulary file '%s': entry \"%s\" is not an id (0 to %d)", path,
                               e->string, PTDP__MAX_VOCAB_ID - 1);
        ptdp__str_slot *s = ptdp__str_find(map, e->string, strlen(e->string));
        if (s->key)
            return ptdp_errorf(PTDP_EFORMAT, "vocabulary file '%s': duplicate entry \"%s\"", path,
                               e->string);
        s->key = e->string;
        s->len = strlen(e->string);
        s->id = (int32_t)v;
        if (s->id > max_id) max_id = s->id;
    }
    t->vocab_size = max_id + 1;
    /* Decode table: each entry's string is UTF-8 of byte-unicode characters. */
    uint32_t byte_cp[256];
    int32_t cp_byte[324];
    ptdp__byte_unicode(byte_cp);
    for (int i = 0; i < 324; i++) cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) cp_byte[byte_cp[b]] = b;
    t->dec_off = malloc(((size_t)t->vocab_size + 1) * sizeof(uint32_t));
    size_t total = 0;
    for (cJSON *e = root->child; e; e = e->next) total += strlen(e->string);
    t->dec_bytes = malloc(total + 1);
    if (!t->dec_off || !t->dec_bytes)
        return ptdp_errorf(PTDP_ENOMEM, "out of memory loading '%s'", path);
    /* Lay out in id order so dec_off[id + 1] - dec_off[id] is the length. */
    int rc = PTDP_OK;
    char **tmp_ptr = calloc((size_t)t->vocab_size, sizeof(char *));
    if (!tmp_ptr) return ptdp_errorf(PTDP_ENOMEM, "out of memory loading '%s'", path);
    /* one string per id: with two, encoding and decoding would disagree */
    for (cJSON *e = root->child; e; e = e->next) {
        const int32_t id = (int32_t)e->valuedouble;
        if (tmp_ptr[id]) {
            rc = ptdp_errorf(PTDP_EFORMAT,
                             "vocabulary file '%s': id %d is given to both \"%s\" and \"%s\"", path,
                             id, tmp_ptr[id], e->string);
            free(tmp_ptr);
            return rc;
        }
        tmp_ptr[id] = e->string;
    }
    size_t off = 0;
    for (int32_t id = 0; id < t->vocab_size && !rc; id++) {
        t->dec_off[id] = (uint32_t)off;
        const unsigned char *s = (const unsigned char *)tmp_ptr[id];
        if (!s) continue; /* a hole: decodes to nothing, rejected by decode */
        size_t n = strlen((const char *)s);
        for (size_t i = 0; i < n;) {
            int l;
            uint32_t cp = ptdp__utf8_next(s + i, n - i, &l);
            if (cp >= 324 || cp_byte[cp] < 0) {
                rc = ptdp_errorf(PTDP_EFORMAT,
                                 "vocabulary file '%s': entry \"%s\" is not byte-level BPE", path,
                                 (const char *)s);
                break;
            }
            t->dec_bytes[off++] = (char)cp_byte[cp];
            i += (size_t)l;
        }
    }
    t->dec_off[t->vocab_size] = (uint32_t)off;
    for (int32_t id = 0; id < t->vocab_size && !rc; id++)
        if (!tmp_ptr[id]) t->dec_off[id] = UINT32_MAX;
    free(tmp_ptr);
    if (rc) return rc;
    for (int b = 0; b < 256; b++) {
        char u[4];
        int n = 0;
        uint32_t cp = byte_cp[b];
        if (cp < 0x80) {
            u[n++] = (char)cp;
        } else {
            u[n++] = (char)(0xC0 | (cp >> 6));
            u[n++] = (char)(0x80 | (cp & 0x3F));
        }
        ptdp__str_slot *s = ptdp__str_find(map, u, (size_t)n);
        if (!s->key)
            return ptdp_errorf(PTDP_EFORMAT, "vocabulary file '%s' lacks the token of byte 0x%02x",
                               path, b);
        t->byte_id[b] = s->id;
    }
    ptdp__str_slot *eod = ptdp__str_find(map, "<|endoftext|>", 13);
    t->eod = eod->key ? eod->id : -1;
    return PTDP_OK;
}

static int ptdp__load_merges(ptdp_tokenizer *t, const char *text, size_t len, const char *path,
                             const ptdp__str_map *map) {
    int rc = PTDP_OK;
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    t->pair_cap = 1024;
    while (t->pair_cap < 2 * lines) t->pair_cap *= 2;
    t->pairs = calloc(t->pair_cap, sizeof(ptdp__pair_slot));
    char *cat = malloc(len + 1);
    if (!t->pairs || !cat) {
        free(cat);
        return ptdp_errorf(PTDP_ENOMEM, "out of memory loading '%s'", path);
    }
    int32_t rank = 0;
    size_t lineno = 0;
    for (const char *p = text, *end = text + len; p < end && !rc;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        lineno++;
        const char *line = p;
        p = nl ? nl + 1 : end;
        if (le > line && le[-1] == '\r') le--;
        if (le == line) continue;
        if (lineno == 1 && le - line >= 8 && memcmp(line, "#version", 8) == 0) continue;
        const char *sp = memchr(line, ' ', (size_t)(le - line));
        if (!sp || sp == line || sp + 1 == le || memchr(sp + 1, ' ', (size_t)(le - sp - 1))) {
            rc = ptdp_errorf(PTDP_EFORMAT, "merge file '%s' line %zu: expected two tokens 'A B'",
                             path, lineno);
            break;
        }
        size_t la = (size_t)(sp - line), lb = (size_t)(le - sp - 1);
        const ptdp__str_slot *a = ptdp__str_find(map, line, la);
        const ptdp__str_slot *b = ptdp__str_find(map, sp + 1, lb);
        memcpy(cat, line, la);
        memcpy(cat + la, sp + 1, lb);
        const ptdp__str_slot *ab = ptdp__str_find(map, cat, la + lb);
        if (!a->key || !b->key || !ab->key) {
            rc = ptdp_errorf(PTDP_EFORMAT,
                             "merge file '%s' line %zu: '%.*s' uses tokens missing from the "
                             "vocabulary",
                             path, lineno, (int)(le - line), line);
            break;
        }
        ptdp__pair_slot *s = ptdp__pair_find(t, ptdp__pair_key(a->id, b->id));
        /* A repeated pair keeps its last rank, like the dict GPT-2 builds. */
        s->key = ptdp__pair_key(a->id, b->id);
        s->rank = rank++;
        s->merged = ab->id;
    }
    free(cat);
    return rc;
}

void ptdp_tokenizer_free(ptdp_tokenizer *t) {
    if (!t) return;
    free(t->dec_bytes);
    free(t->dec_off);
    free(t->pairs);
    free(t);
}

int ptdp_tokenizer_open_mem(ptdp_tokenizer **out, const char *vocab, size_t vocab_len,
                            const char *vocab_name, const char *merges, size_t merges_len,
                            const char *merges_name) {
    *out = NULL;
    ptdp_tokenizer *t = calloc(1, sizeof(*t));
    if (!t) return ptdp_errorf(PTDP_ENOMEM, "out of memory creating a tokenizer");
    ptdp__str_map map = {0};
    cJSON *json = NULL;
    int rc = ptdp__load_vocab(t, vocab, vocab_len, vocab_name, &map, &json);
    if (!rc) rc = ptdp__load_merges(t, merges, merges_len, merges_name, &map);
    free(map.slots);
    cJSON_Delete(json);
    if (rc) {
        ptdp_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return PTDP_OK;
}

int ptdp_tokenizer_open(ptdp_tokenizer **out, const char *vocab_path, const char *merges_path) {
    *out = NULL;
    char *vocab = NULL, *merges = NULL;
    size_t vn = 0, mn = 0;
    int rc = ptdp_read_file(vocab_path, "vocabulary file", &vocab, &vn);
    if (!rc) rc = ptdp_read_file(merges_path, "merge file", &merges, &mn);
    if (!rc) rc = ptdp_tokenizer_open_mem(out, vocab, vn, vocab_path, merges, mn, merges_path);
    free(vocab);
    free(merges);
    return rc;
}

int32_t ptdp_tokenizer_vocab_size(const ptdp_tokenizer *t) { return t->vocab_size; }
int32_t ptdp_tokenizer_eod(const ptdp_tokenizer *t) { return t->eod; }

/* ---- word cache: piece bytes -> ids; cleared wholesale when full ---------- */
#define PTDP__CACHE_SLOTS (1u << 17)
#define PTDP__CACHE_MAX (1u << 16)
#define PTDP__CACHE_MAX_WORD 128

typedef struct {
    uint64_t hash; /* 0 = empty */
    uint32_t key_off, key_len, ids_off, ids_len;
} ptdp__cache_slot;

struct ptdp_tok_cache {
    ptdp__cache_slot *slots;
    uint32_t used;
    char *keys;
    size_t keys_len, keys_cap;
    int32_t *ids;
    size_t ids_len, ids_cap;
};

ptdp_tok_cache *ptdp_tok_cache_new(void) {
    ptdp_tok_cache *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->slots = calloc(PTDP__CACHE_SLOTS, sizeof(ptdp__cache_slot));
    c->keys_cap = (size_t)PTDP__CACHE_MAX * 16;
    c->ids_cap = (size_t)PTDP__CACHE_MAX * 4;
    c->keys = malloc(c->keys_cap);
    c->ids = malloc(c->ids_cap * sizeof(int32_t));
    if (!c->slots || !c->keys || !c->ids) {
        ptdp_tok_cache_free(c);
        return NULL;
    }
    return c;
}

void ptdp_tok_cache_free(ptdp_tok_cache *c) {
    if (!c) return;
    free(c->slots);
    free(c->keys);
    free(c->ids);
    free(c);
}

static ptdp__cache_slot *ptdp__cache_find(ptdp_tok_cache *c, uint64_t h, const void *k, size_t n) {
    uint32_t mask = PTDP__CACHE_SLOTS - 1, i = (uint32_t)h & mask;
    while (c->slots[i].hash && !(c->slots[i].hash == h && c->slots[i].key_len == n &&
                                 memcmp(c->keys + c->slots[i].key_off, k, n) == 0))
        i = (i + 1) & mask;
    return &c->slots[i];
}

/* Merges the piece's byte ids in place; returns the new count. */
static size_t ptdp__bpe(const ptdp_tokenizer *t, int32_t *w, size_t m) {
    while (m > 1) {
        int32_t best_rank = INT32_MAX, left = 0, right = 0, merged = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            const ptdp__pair_slot *s = ptdp__pair_find(t, ptdp__pair_key(w[i], w[i + 1]));
            if (s->key && s->rank < best_rank) {
                best_rank = s->rank;
                left = w[i];
                right = w[i + 1];
                merged = s->merged;
            }
        }
        if (best_rank == INT32_MAX) break;
        size_t o = 0;
        for (size_t i = 0; i < m;) {
            if (i + 1 < m && w[i] == left && w[i + 1] == right) {
                w[o++] = merged;
                i += 2;
            } else {
                w[o++] = w[i++];
            }
        }
        m = o;
    }
    return m;
}

int ptdp_tokenizer_encode(const ptdp_tokenizer *t, ptdp_tok_cache *c, const char *text, size_t len,
                          ptdp_tokens *out) {
    const unsigned char *s = (const unsigned char *)text;
    int32_t small[PTDP__CACHE_MAX_WORD];
    for (size_t pos = 0; pos < len;) {
        size_t n = ptdp__pretok_next(s + pos, len - pos);
        const unsigned char *piece = s + pos;
        pos += n;
        int rc = ptdp_tokens_reserve(out, n);
        if (rc) return rc;
        uint64_t h = 0;
        ptdp__cache_slot *slot = NULL;
        if (c && n <= PTDP__CACHE_MAX_WORD) {
            h = ptdp__hash_bytes(piece, n) | 1;
            slot = ptdp__cache_find(c, h, piece, n);
            if (slot->hash) {
                memcpy(out->ids + out->n, c->ids + slot->ids_off, slot->ids_len * sizeof(int32_t));
                out->n += slot->ids_len;
                continue;
            }
        }
        int32_t *w = n <= PTDP__CACHE_MAX_WORD ? small : out->ids + out->n;
        for (size_t i = 0; i < n; i++) w[i] = t->byte_id[piece[i]];
        size_t m = ptdp__bpe(t, w, n);
        if (w == small) memcpy(out->ids + out->n, small, m * sizeof(int32_t));
        if (slot) {
            if (c->used >= PTDP__CACHE_MAX || c->keys_len + n > c->keys_cap ||
                c->ids_len + m > c->ids_cap) {
                memset(c->slots, 0, PTDP__CACHE_SLOTS * sizeof(ptdp__cache_slot));
                c->used = 0;
                c->keys_len = c->ids_len = 0;
                slot = ptdp__cache_find(c, h, piece, n);
            }
            slot->hash = h;
            slot->key_off = (uint32_t)c->keys_len;
            slot->key_len = (uint32_t)n;
            slot->ids_off = (uint32_t)c->ids_len;
            slot->ids_len = (uint32_t)m;
            memcpy(c->keys + c->keys_len, piece, n);
            memcpy(c->ids + c->ids_len, out->ids + out->n, m * sizeof(int32_t));
            c->keys_len += n;
            c->ids_len += m;
            c->used++;
        }
        out->n += m;
    }
    return PTDP_OK;
}

int ptdp_tokenizer_decode(const ptdp_tokenizer *t, const int32_t *ids, size_t n, char **buf,
                          size_t *len, size_t *cap) {
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->vocab_size || t->dec_off[id] == UINT32_MAX)
            return ptdp_errorf(PTDP_EINVAL, "token id %d is not in the vocabulary (size %d)", id,
                               t->vocab_size);
        uint32_t a = t->dec_off[id], b = a;
        /* the next present id's offset ends this one */
        for (int32_t j = id + 1; j <= t->vocab_size; j++)
            if (t->dec_off[j] != UINT32_MAX) {
                b = t->dec_off[j];
                break;
            }
        size_t k = b - a;
        if (*len + k + 1 > *cap) {
            size_t nc = *cap ? *cap : 256;
            while (nc < *len + k + 1) nc *= 2;
            char *nb = realloc(*buf, nc);
            if (!nb) return ptdp_errorf(PTDP_ENOMEM, "out of memory decoding");
            *buf = nb;
            *cap = nc;
        }
        memcpy(*buf + *len, t->dec_bytes + a, k);
        *len += k;
    }
    return PTDP_OK;
}
