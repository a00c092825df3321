/* preprocess.c - Megatron's tools/preprocess_data.py without sentence
 * splitting: each input document becomes one sequence of GPT-2 BPE ids (plus
 * the EOD id when asked and the document is not empty) in
 * OUTPUT_PREFIX_KEY_document.{bin,idx}. Input is JSON lines (one object per
 * line, the document is the string under the key; blank lines are skipped),
 * as Megatron always reads, or plain text (documents are separated by one or
 * more blank lines - lines of only spaces, tabs or CR - and keep their inner
 * newlines but not the final one). By default a file is JSON lines when its
 * name ends in .json/.jsonl or its first non-blank line starts with '{'. Documents are tokenized in
 * parallel batches with OpenMP and written in input order, so the output does not depend on the
 * number of workers. Several JSON keys write one dataset each, from one pass over the input.
 * Not supported: sentence splitting. As with Python's
 * json.loads, the last of duplicate keys wins, and "\u0000" escapes are kept as NUL bytes (see
 * ptdp__json_nul); as json.loads and Megatron's tokenizer do between them, an escape JSON lacks,
 * a \u without 4 hex digits and half a surrogate pair are refused, naming the escape and its
 * column (ptdp__bad_escape). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <omp.h>

#include "base/base.h"
#include "data/data.h"
#include "data/data_internal.h"

ptdp_preprocess_params ptdp_preprocess_default_params(void) {
    ptdp_preprocess_params p = {0};
    p.json_keys[0] = "text";
    p.n_keys = 1;
    p.workers = 1;
    return p;
}

typedef struct {
    const ptdp_tokenizer *tok;
    const ptdp_preprocess_params *p;
    const char *data;
    int json;
    int32_t eod;
} ptdp__pp_ctx;

static int ptdp__ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* cJSON returns NUL-terminated strings, so a "\u0000" escape would end the
 * string early. When the line has such an escape (and, being valid UTF-8, no
 * 0xFF byte), *copy gets the line with each escape replaced by the byte 0xFF,
 * which cJSON passes through and the caller turns back into NUL. Returns 1 if
 * a copy was made, 0 if none is needed, -1 on error. */
static int ptdp__json_nul(const char *d, size_t n, char **copy, size_t *copy_n) {
    int found = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        if (d[i] != '\\') continue;
        if (i + 5 < n && memcmp(d + i + 1, "u0000", 5) == 0) found = 1;
        i++; /* the escaped character */
    }
    if (!found) return 0;
    if (memchr(d, 0xFF, n)) return -1;
    char *o = malloc(n + 1);
    if (!o) return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (d[i] == '\\' && i + 5 < n && memcmp(d + i + 1, "u0000", 5) == 0) {
            o[k++] = (char)0xFF;
            i += 5;
        } else if (d[i] == '\\' && i + 1 < n) {
            o[k++] = d[i++];
            o[k++] = d[i];
        } else {
            o[k++] = d[i];
        }
    }
    o[k] = 0;
    *copy = o;
    *copy_n = k;
    return 1;
}

static int ptdp__hex4(const char *d, size_t n, size_t i, unsigned *u) {
    *u = 0;
    if (i + 4 > n) return 0;
    for (size_t k = i; k < i + 4; k++) {
        const char c = d[k];
        const int v = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
        if (v < 0) return 0;
        *u = *u * 16 + (unsigned)v;
    }
    return 1;
}

/* Why a line is not JSON, where a string's escape is the reason: the first
 * escape that JSON does not have (\x), a \u without four hex digits, or half
 * of a UTF-16 surrogate pair without the other (Python's json.loads takes
 * that one, but it is no Unicode text: its UTF-8 encoding, which the
 * tokenizer needs, fails in Megatron too). Writes the message into msg and
 * returns 1; 0 when the escapes are all fine. */
static int ptdp__bad_escape(const char *d, size_t n, char *msg, size_t cap) {
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        if (d[i] == '"') in_str = !in_str;
        if (!in_str || d[i] != '\\') continue;
        const size_t col = i + 1;
        if (i + 1 >= n) break;
        const char c = d[++i];
        if (strchr("\"\\/bfnrt", c)) continue;
        unsigned u, lo;
        if (c != 'u') {
            snprintf(msg, cap,
                     "column %zu: \\%c is not a JSON escape (\\\" \\\\ \\/ \\b \\f \\n "
                     "\\r \\t \\uXXXX)",
                     col, c);
            return 1;
        }
        if (!ptdp__hex4(d, n, i + 1, &u)) {
            snprintf(msg, cap, "column %zu: \\u%.*s is not a \\u escape of 4 hex digits", col,
                     (int)(n - i - 1 < 4 ? n - i - 1 : 4), d + i + 1);
            return 1;
        }
        const int high = u >= 0xD800 && u <= 0xDBFF, low = u >= 0xDC00 && u <= 0xDFFF;
        const int paired = high && i + 6 < n && d[i + 5] == '\\' && d[i + 6] == 'u' &&
                           ptdp__hex4(d, n, i + 7, &lo) && lo >= 0xDC00 && lo <= 0xDFFF;
        if ((high && !paired) || low) {
            snprintf(msg, cap,
                     "column %zu: \\u%.4s is a lone UTF-16 surrogate, half of a pair without the "
                     "other (a character above U+FFFF is escaped as a %s surrogate and a %s one, "
                     "e.g. \\ud83d\\ude00); it is no Unicode text",
                     col, d + i + 1, "high", "low");
            return 1;
        }
        i += paired ? 10 : 4;
    }
    return 0;
}

/* Appends the EOD id to a non-empty document when asked. */
static int ptdp__pp_eod(const ptdp__pp_ctx *c, ptdp_tokens *out) {
    int rc = PTDP_OK;
    if (c->p->append_eod && out->n > 0) {
        rc = ptdp_tokens_reserve(out, 1);
        if (!rc) out->ids[out->n++] = c->eod;
    }
    return rc;
}

int ptdp__pp_json_line(const ptdp_tokenizer *tok, ptdp_tok_cache *cache, const char *line,
                       size_t line_n, const char *const *keys, int n_keys, int32_t eod,
                       ptdp_tokens *out, const char *input, size_t lineno) {
    for (int k = 0; k < n_keys; k++) out[k].n = 0;
    /* before cJSON, which reads a \u without 4 hex digits as \u0000 and so
     * would cut the text there */
    char why[256];
    if (memchr(line, '\\', line_n) && ptdp__bad_escape(line, line_n, why, sizeof why))
        return ptdp_errorf(PTDP_EFORMAT, "%s:%zu: %s", input, lineno, why);
    char *copy = NULL;
    int nul = ptdp__json_nul(line, line_n, &copy, &line_n);
    if (nul < 0)
        return ptdp_errorf(PTDP_EFORMAT, "%s:%zu: cannot decode \\u0000 in this line", input,
                           lineno);
    char what[300];
    snprintf(what, sizeof what, "%s:%zu", input, lineno);
    int rc = ptdp_json_check(nul ? copy : line, line_n, PTDP__PP_MAX_DEPTH, what);
    const char *text = nul ? copy : line, *end = text;
    cJSON *obj = rc ? NULL : cJSON_ParseWithLengthOpts(text, line_n, &end, 0);
    /* what follows the object must be blank, as Python's json.loads wants it
     * (cJSON stops after the first value and would ignore the rest) */
    size_t tail = obj ? (size_t)(end - text) : line_n;
    while (tail < line_n && (text[tail] == ' ' || text[tail] == '\t' || text[tail] == '\r'))
        tail++;
    free(copy);
    if (rc) return rc;
    if (!obj || !cJSON_IsObject(obj)) {
        cJSON_Delete(obj);
        return ptdp_errorf(PTDP_EFORMAT, "%s:%zu: not a JSON object", input, lineno);
    }
    if (tail < line_n) {
        cJSON_Delete(obj);
        return ptdp_errorf(PTDP_EFORMAT,
                           "%s:%zu: text after the JSON object (byte %zu): one object per line "
                           "(--json-keys reads JSON lines)",
                           input, lineno, tail + 1);
    }
    for (int k = 0; k < n_keys && !rc; k++) {
        const char *key = keys[k];
        const cJSON *v = NULL; /* the last member with the key, as json.loads keeps */
        for (const cJSON *e = obj->child; e; e = e->next)
            if (e->string && strcmp(e->string, key) == 0) v = e;
        if (!cJSON_IsString(v)) {
            rc =
                ptdp_errorf(PTDP_EFORMAT, "%s:%zu: no string under key \"%s\"", input, lineno, key);
            break;
        }
        size_t len = strlen(v->valuestring);
        if (nul)
            for (size_t i = 0; i < len; i++)
                if ((unsigned char)v->valuestring[i] == 0xFF) v->valuestring[i] = 0;
        rc = ptdp_tokenizer_encode(tok, cache, v->valuestring, len, &out[k]);
        if (!rc && eod >= 0 && out[k].n > 0) {
            rc = ptdp_tokens_reserve(&out[k], 1);
            if (!rc) out[k].ids[out[k].n++] = eod;
        }
    }
    cJSON_Delete(obj);
    return rc;
}

/* Tokenizes one item into out[0 .. n_keys) (cleared first): one document per
 * JSON key, or the plain-text document. */
static int ptdp__pp_item(const ptdp__pp_ctx *c, ptdp_tok_cache *cache, const ptdp__item *it,
                         ptdp_tokens *out) {
    if (c->json)
        return ptdp__pp_json_line(c->tok, cache, c->data + it->begin, it->end - it->begin,
                                  c->p->json_keys, c->p->n_keys, c->p->append_eod ? c->eod : -1,
                                  out, c->p->input, it->lineno);
    out->n = 0;
    int rc = ptdp_tokenizer_encode(c->tok, cache, c->data + it->begin, it->end - it->begin, out);
    if (!rc) rc = ptdp__pp_eod(c, out);
    return rc;
}

static int ptdp__blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

int ptdp__pp_next_item(const char *d, size_t n, int json, size_t *pos, size_t *lineno,
                       ptdp__item *it) {
    while (*pos < n) {
        const char *nl = memchr(d + *pos, '\n', n - *pos);
        size_t le = nl ? (size_t)(nl - d) : n, next = nl ? le + 1 : n;
        size_t start = *pos;
        (*lineno)++;
        if (ptdp__blank(d + start, le - start)) {
            *pos = next;
            continue;
        }
        it->begin = start;
        it->lineno = *lineno;
        if (json) {
            it->end = le;
            *pos = next;
            return 1;
        }
        /* plain text: extend over following non-blank lines */
        size_t end = le;
        *pos = next;
        while (*pos < n) {
            nl = memchr(d + *pos, '\n', n - *pos);
            le = nl ? (size_t)(nl - d) : n;
            next = nl ? le + 1 : n;
            if (ptdp__blank(d + *pos, le - *pos)) break;
            (*lineno)++;
            end = le;
            *pos = next;
        }
        it->end = end;
        return 1;
    }
    return 0;
}

#define PTDP__BATCH_ITEMS 4096
#define PTDP__BATCH_BYTES ((size_t)16 << 20)

/* PTDP_PP_AUTO: JSON lines when the first non-blank line starts with '{'
 * (after spaces); Megatron reads nothing but JSON lines. */
static int ptdp__looks_json(const char *d, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (d[i] == ' ' || d[i] == '\t' || d[i] == '\r' || d[i] == '\n') continue;
        return d[i] == '{';
    }
    return 0;
}

int ptdp_preprocess_run(const ptdp_tokenizer *tok, const ptdp_preprocess_params *p,
                        ptdp_preprocess_stats *stats) {
    if (p->workers < 1) return ptdp_errorf(PTDP_EINVAL, "workers must be >= 1, got %d", p->workers);
    ptdp__pp_ctx c = {tok, p, NULL,
                      p->format == PTDP_PP_JSON || ptdp__ends_with(p->input, ".json") ||
                          ptdp__ends_with(p->input, ".jsonl"),
                      ptdp_tokenizer_eod(tok)};
    if (p->format == PTDP_PP_TEXT) c.json = 0;
    if (p->append_eod && c.eod < 0)
        return ptdp_errorf(PTDP_EINVAL, "the vocabulary has no <|endoftext|> to append");
    int fd = open(p->input, O_RDONLY);
    if (fd < 0) return ptdp_errorf(PTDP_EIO, "cannot open '%s': %s", p->input, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ptdp_errorf(PTDP_EIO, "'%s' is not a regular file", p->input);
    }
    size_t n = (size_t)st.st_size;
    void *map = n ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (map == MAP_FAILED) return ptdp_errorf(PTDP_EIO, "cannot map '%s'", p->input);
    c.data = map;
    if (p->format == PTDP_PP_AUTO && !c.json) c.json = ptdp__looks_json(c.data, n);

    const int nk = p->n_keys;
    int rc = nk < 1 || nk > PTDP_PP_MAX_KEYS
                 ? ptdp_errorf(PTDP_EINVAL, "--json-keys: give 1 to %d keys", PTDP_PP_MAX_KEYS)
             : nk > 1 && !c.json
                 ? ptdp_errorf(PTDP_EINVAL,
                               "--json-keys with %d keys needs JSON lines; '%s' is read as plain "
                               "text (one document per paragraph, one dataset)",
                               nk, p->input)
                 : PTDP_OK;
    size_t plen = strlen(p->output_prefix) + 256;
    char *prefix = malloc(plen * (size_t)nk);
    ptdp__item *items = malloc(PTDP__BATCH_ITEMS * sizeof(ptdp__item));
    ptdp_tokens *toks = calloc((size_t)PTDP__BATCH_ITEMS * (size_t)nk, sizeof(ptdp_tokens));
    int *rcs = malloc(PTDP__BATCH_ITEMS * sizeof(int));
    ptdp_tok_cache **caches = calloc((size_t)p->workers, sizeof(*caches));
    if (!rc && (!prefix || !items || !toks || !rcs || !caches))
        rc = ptdp_errorf(PTDP_ENOMEM, "out of memory");
    for (int w = 0; !rc && w < p->workers; w++)
        if (!(caches[w] = ptdp_tok_cache_new())) rc = ptdp_errorf(PTDP_ENOMEM, "out of memory");
    ptdp_idx_writer *wr[PTDP_PP_MAX_KEYS] = {NULL};
    for (int k = 0; !rc && k < nk; k++) {
        snprintf(prefix + plen * (size_t)k, plen, "%s_%s_document", p->output_prefix,
                 p->json_keys[k]);
        rc = ptdp_idx_writer_open(&wr[k], prefix + plen * (size_t)k,
                                  ptdp_idx_dtype_for_vocab(ptdp_tokenizer_vocab_size(tok)));
    }
    ptdp_preprocess_stats s = {0}; /* all keys together */
    int64_t tokens[PTDP_PP_MAX_KEYS] = {0}, empty[PTDP_PP_MAX_KEYS] = {0};
    double t0 = ptdp_now(), last_print = t0;
    size_t pos = 0, lineno = 0;
    while (!rc) {
        int nb = 0;
        size_t bytes = 0;
        while (nb < PTDP__BATCH_ITEMS && bytes < PTDP__BATCH_BYTES &&
               ptdp__pp_next_item(c.data, n, c.json, &pos, &lineno, &items[nb])) {
            bytes += items[nb].end - items[nb].begin;
            nb++;
        }
        if (nb == 0) break;
#pragma omp parallel for schedule(dynamic, 8) num_threads(p->workers)
        for (int i = 0; i < nb; i++)
            rcs[i] = ptdp__pp_item(&c, caches[omp_get_thread_num()], &items[i], &toks[i * nk]);
        for (int i = 0; i < nb && !rc; i++) {
            if (rcs[i]) {
                /* redo the first failure on this thread so its message is the one recorded */
                rc = ptdp__pp_item(&c, caches[0], &items[i], &toks[i * nk]);
                if (!rc)
                    rc = ptdp_errorf(PTDP_EIO, "%s:%zu: tokenizing failed", p->input,
                                     items[i].lineno);
                break;
            }
            for (int k = 0; k < nk && !rc; k++) {
                const ptdp_tokens *t = &toks[i * nk + k];
                rc = ptdp_idx_writer_add_document(wr[k], t->ids, t->n);
                empty[k] += t->n == 0;
                tokens[k] += (int64_t)t->n;
                s.empty_documents += t->n == 0;
                s.tokens += (int64_t)t->n;
            }
            s.documents++;
            if (p->log_interval > 0 && s.documents % p->log_interval == 0) {
                /* Megatron's preprocess_data.py progress line */
                const double el = ptdp_now() - t0 + 1e-9;
                fprintf(stderr, "Processed %lld documents (%.1f docs/s, %.2f MB/s).\n",
                        (long long)s.documents, (double)s.documents / el,
                        (double)items[i].end / 1e6 / el);
            }
        }
        s.bytes_in = (int64_t)pos;
        double now = ptdp_now();
        if (p->progress && now - last_print > 0.2) {
            last_print = now;
            fprintf(stderr, "\rpreprocess: %5.1f%%  %lld docs  %.1f MB/s ",
                    n ? 100.0 * (double)pos / (double)n : 100.0, (long long)s.documents,
                    (double)pos / 1e6 / (now - t0 + 1e-9));
        }
    }
    /* datasets are renamed into place only after the whole input was read */
    for (int k = 0; k < nk && !rc; k++) {
        rc = ptdp_idx_writer_finish(wr[k]);
        wr[k] = NULL;
    }
    s.seconds = ptdp_now() - t0;
    if (p->progress) fprintf(stderr, "\n");
    for (int k = 0; k < nk && !rc; k++)
        fprintf(stderr,
                "preprocess: %lld documents (%lld empty), %lld tokens, %.1f MB in %.2f s "
                "(%.1f MB/s, %d workers, %s) -> %s.bin/.idx\n",
                (long long)s.documents, (long long)empty[k], (long long)tokens[k],
                (double)s.bytes_in / 1e6, s.seconds, (double)s.bytes_in / 1e6 / (s.seconds + 1e-9),
                p->workers, c.json ? "JSON lines" : "plain text", prefix + plen * (size_t)k);
    if (stats) *stats = s;
    for (int k = 0; k < nk; k++) ptdp_idx_writer_free(wr[k]);
    for (int i = 0; toks && i < PTDP__BATCH_ITEMS * nk; i++) ptdp_tokens_free(&toks[i]);
    for (int w = 0; caches && w < p->workers; w++) ptdp_tok_cache_free(caches[w]);
    free(caches);
    free(rcs);
    free(toks);
    free(items);
    free(prefix);
    if (map) munmap(map, n);
    return rc;
}
