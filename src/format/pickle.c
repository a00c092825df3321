/* pickle.c - a reader of the pickles torch.save writes: a stack machine over
 * the protocol 0-2 opcodes (and the few of 3-4 a newer pickler may emit)
 * that builds a plain tree of ptdp__pk_node and never imports or runs
 * anything. The torch.save file on top of it (zip + data.pkl + storages) is
 * torch.c.
 *
 * A pickle is a program: each opcode byte pushes or combines values on a
 * stack (MARK opens a group, TUPLE/LIST/DICT/SETITEMS/APPENDS consume up to
 * it), PUT/GET keep values in a memo, STOP returns the top. torch.save adds
 * two things: tensors are REDUCE(torch._utils._rebuild_tensor_v2, (storage,
 * offset, size, stride, requires_grad, hooks[, metadata])), and a storage is
 * BINPERSID of ('storage', torch.FloatStorage, key, location, numel), its
 * bytes in the zip entry data/KEY.
 *
 * Here a GLOBAL is a name, REDUCE/NEWOBJ/INST/OBJ make an opaque OBJECT
 * holding its class and arguments, BUILD stores the state on it, and
 * APPEND/SETITEM on an object keep the items: argparse.Namespace, RNG
 * states and optimizer internals all stay inspectable data. Every length,
 * count and index is checked against the input and against fixed bounds.
 * Not here: protocol 5 out-of-band buffers, EXT registries, the text forms
 * STRING/UNICODE/PERSID (torch never writes them). */
#include "format/torch.h"

#include "base/base.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NODES (1 << 24)
#define MAX_MEMO (1 << 22)
#define MAX_BYTES (1ull << 30)
#define BLOCK (1 << 16)

typedef struct block {
    struct block *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
} block;

struct ptdp__pk {
    block *blocks;
    uint64_t bytes, nodes;
    ptdp__pk_node *storages; /* a LIST of every STORAGE node, for the checks at open */
};

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
#define PTDP__TD_ROW(e, name, size, st) {name, size},
    PTDP__TORCH_DTYPES(PTDP__TD_ROW)
#undef PTDP__TD_ROW
};

const char *ptdp__torch_dtype_name(int dt) {
    PTDP_ASSERT(dt >= 0 && dt < PTDP_TD_COUNT);
    return dtypes[dt].name;
}
size_t ptdp__torch_dtype_size(int dt) {
    PTDP_ASSERT(dt >= 0 && dt < PTDP_TD_COUNT);
    return dtypes[dt].size;
}

/* Arena allocation, NULL past the budget or out of memory. */
static void *pk_alloc(ptdp__pk *p, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (p->bytes + n > MAX_BYTES) return NULL;
    if (!p->blocks || p->blocks->cap - p->blocks->used < n) {
        size_t cap = n > BLOCK ? n : BLOCK;
        block *b = malloc(sizeof(block) + cap);
        if (!b) return NULL;
        b->next = p->blocks, b->used = 0, b->cap = cap;
        p->blocks = b;
    }
    void *r = p->blocks->mem + p->blocks->used;
    p->blocks->used += n;
    p->bytes += n;
    memset(r, 0, n);
    return r;
}

void ptdp__pk_free(ptdp__pk *p) {
    if (!p) return;
    for (block *b = p->blocks, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    free(p);
}

/* ---- the machine -------------------------------------------------------------- */

typedef struct {
    ptdp__pk *p;
    const uint8_t *d;
    size_t n, pos, op_at;
    const char *what;
    ptdp__pk_node **stack;
    int64_t sp, scap;
    int64_t *marks;
    int64_t nmarks, mcap;
    ptdp__pk_node **memo;
    int64_t memo_cap, memo_next;
    int err;
} vm;

static int fail(vm *m, int code, const char *fmt, const char *a) {
    if (m->err) return m->err;
    char msg[256];
    snprintf(msg, sizeof msg, fmt, a ? a : "");
    m->err = ptdp_errorf(code, "%s: pickle byte %zu (opcode 0x%02x): %s", m->what, m->op_at,
                         m->op_at < m->n ? m->d[m->op_at] : 0, msg);
    return m->err;
}
#define BAD(m, msg) fail((m), PTDP_EFORMAT, "%s", (msg))

static ptdp__pk_node *node(vm *m, ptdp__pk_kind k) {
    if (m->p->nodes >= MAX_NODES) {
        fail(m, PTDP_EFORMAT, "more than %s objects", "16,777,216");
        return NULL;
    }
    ptdp__pk_node *x = pk_alloc(m->p, sizeof *x);
    if (!x) {
        fail(m, PTDP_ENOMEM, "out of memory (or past the 1 GiB bound)%s", NULL);
        return NULL;
    }
    m->p->nodes++;
    x->kind = k;
    return x;
}

static int push(vm *m, ptdp__pk_node *x) {
    if (!x) return m->err;
    if (m->sp == m->scap) {
        int64_t cap = m->scap ? 2 * m->scap : 64;
        if (cap > MAX_NODES) return BAD(m, "the stack grows past 16,777,216 entries");
        void *s = realloc(m->stack, (size_t)cap * sizeof *m->stack);
        if (!s) return fail(m, PTDP_ENOMEM, "out of memory%s", NULL);
        m->stack = s, m->scap = cap;
    }
    m->stack[m->sp++] = x;
    return PTDP_OK;
}

/* The bottom of the current mark group (the whole stack without a mark). */
static int64_t floor_(const vm *m) { return m->nmarks ? m->marks[m->nmarks - 1] : 0; }

static ptdp__pk_node *pop(vm *m) {
    if (m->sp <= floor_(m)) {
        BAD(m, "stack underflow (a malformed pickle)");
        return NULL;
    }
    return m->stack[--m->sp];
}

static ptdp__pk_node *top(vm *m) {
    if (m->sp <= floor_(m)) {
        BAD(m, "stack underflow (a malformed pickle)");
        return NULL;
    }
    return m->stack[m->sp - 1];
}

/* Pops the mark; the group is stack[*from .. sp). */
static int pop_mark(vm *m, int64_t *from) {
    if (!m->nmarks) return BAD(m, "no MARK on the stack for this opcode");
    *from = m->marks[--m->nmarks];
    return PTDP_OK;
}

static int add_item(vm *m, ptdp__pk_node *c, ptdp__pk_node *x) {
    if (c->n == c->cap) {
        int64_t cap = c->cap ? 2 * c->cap : 4;
        if (cap > MAX_NODES) return BAD(m, "a container grows past 16,777,216 items");
        ptdp__pk_node **it = pk_alloc(m->p, (size_t)cap * sizeof *it);
        if (!it) return fail(m, PTDP_ENOMEM, "out of memory (or past the 1 GiB bound)%s", NULL);
        if (c->n) memcpy(it, c->items, (size_t)c->n * sizeof *it);
        c->items = it, c->cap = cap;
    }
    c->items[c->n++] = x;
    return PTDP_OK;
}

static int need(vm *m, size_t k) {
    if (k > m->n - m->pos)
        return BAD(m, "the pickle ends inside an opcode's argument (truncated?)");
    return PTDP_OK;
}

static uint64_t le(const uint8_t *p, int k) {
    uint64_t v = 0;
    for (int i = k - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static ptdp__pk_node *str_node(vm *m, const uint8_t *s, uint64_t len) {
    ptdp__pk_node *x = node(m, PTDP_PK_STR);
    if (!x) return NULL;
    char *c = pk_alloc(m->p, (size_t)len + 1);
    if (!c) {
        fail(m, PTDP_ENOMEM, "out of memory (or past the 1 GiB bound)%s", NULL);
        return NULL;
    }
    memcpy(c, s, (size_t)len);
    x->s = c, x->len = (int64_t)len;
    return x;
}

/* A newline-terminated argument (GLOBAL, INST, PUT, GET, INT, ...), at most
 * 255 bytes. */
static int line(vm *m, char *out) {
    const uint8_t *nl = memchr(m->d + m->pos, '\n', m->n - m->pos);
    if (!nl || nl - (m->d + m->pos) > 255)
        return BAD(m, "a text argument without its newline within 255 bytes");
    size_t k = (size_t)(nl - (m->d + m->pos));
    memcpy(out, m->d + m->pos, k);
    out[k] = 0;
    if (memchr(out, 0, k)) return BAD(m, "a text argument holds a NUL byte");
    m->pos += k + 1;
    return PTDP_OK;
}

static int text_int(vm *m, const char *t, int64_t *v) {
    char *end;
    long long x = strtoll(t, &end, 10);
    if (end == t || (*end && strcmp(end, "L"))) return BAD(m, "a malformed decimal argument");
    *v = x;
    return PTDP_OK;
}

static ptdp__pk_node *global(vm *m, const char *mod, const char *name) {
    ptdp__pk_node *g = node(m, PTDP_PK_GLOBAL);
    if (!g) return NULL;
    size_t k = strlen(mod) + strlen(name) + 2;
    char *s = pk_alloc(m->p, k);
    if (!s) {
        fail(m, PTDP_ENOMEM, "out of memory%s", NULL);
        return NULL;
    }
    snprintf(s, k, "%s.%s", mod, name);
    g->s = s, g->len = (int64_t)k - 1;
    return g;
}

static int memo_put(vm *m, int64_t idx) {
    ptdp__pk_node *x = top(m);
    if (!x) return m->err;
    if (idx < 0 || idx >= MAX_MEMO) return BAD(m, "a memo index beyond 4,194,304");
    if (idx >= m->memo_cap) {
        int64_t cap = m->memo_cap ? m->memo_cap : 256;
        while (cap <= idx) cap *= 2;
        void *mm = realloc(m->memo, (size_t)cap * sizeof *m->memo);
        if (!mm) return fail(m, PTDP_ENOMEM, "out of memory%s", NULL);
        memset((ptdp__pk_node **)mm + m->memo_cap, 0,
               (size_t)(cap - m->memo_cap) * sizeof *m->memo);
        m->memo = mm, m->memo_cap = cap;
    }
    m->memo[idx] = x;
    if (idx >= m->memo_next) m->memo_next = idx + 1;
    return PTDP_OK;
}

static int memo_get(vm *m, int64_t idx) {
    if (idx < 0 || idx >= m->memo_cap || !m->memo[idx])
        return BAD(m, "GET of a memo slot never PUT");
    return push(m, m->memo[idx]);
}

static int storage_dtype(const ptdp__pk_node *g) {
    if (!g || g->kind != PTDP_PK_GLOBAL || strncmp(g->s, "torch.", 6)) return -1;
    for (int i = 0; i < PTDP_TD_COUNT; i++)
        if (!strcmp(g->s + 6, dtypes[i].name)) return i;
    return -1;
}

/* BINPERSID: ('storage', torch.XStorage, key, location, numel). */
static int persistent(vm *m) {
    ptdp__pk_node *pid = pop(m);
    if (!pid) return m->err;
    if (pid->kind != PTDP_PK_TUPLE || pid->n != 5 || pid->items[0]->kind != PTDP_PK_STR ||
        strcmp(pid->items[0]->s, "storage") || pid->items[2]->kind != PTDP_PK_STR ||
        pid->items[4]->kind != PTDP_PK_INT || pid->items[4]->big || pid->items[4]->i < 0)
        return BAD(m,
                   "a persistent id that is not torch's ('storage', type, key, location, numel)");
    int dt = storage_dtype(pid->items[1]);
    if (dt < 0)
        return fail(m, PTDP_EFORMAT, "storage type %s is not one ptdp reads",
                    pid->items[1]->kind == PTDP_PK_GLOBAL ? pid->items[1]->s : "(not a class)");
    const char *key = pid->items[2]->s;
    if (!*key || strlen(key) > 64 || strchr(key, '/') || strstr(key, ".."))
        return BAD(m, "a storage key that is not a plain name");
    if (pid->items[4]->i > (int64_t)(MAX_BYTES * 64))
        return BAD(m, "a storage of more than 2^36 elements");
    ptdp__pk_node *s = node(m, PTDP_PK_STORAGE);
    if (!s) return m->err;
    s->s = key, s->len = pid->items[2]->len, s->dtype = dt, s->i = pid->items[4]->i;
    if (!m->p->storages && !(m->p->storages = node(m, PTDP_PK_LIST))) return m->err;
    if (add_item(m, m->p->storages, s)) return m->err;
    return push(m, s);
}

static int int_of(const ptdp__pk_node *x, int64_t *v) {
    if (!x || (x->kind != PTDP_PK_INT && x->kind != PTDP_PK_BOOL) || x->big) return 0;
    *v = x->i;
    return 1;
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]) */
static ptdp__pk_node *rebuild_tensor(vm *m, const ptdp__pk_node *a) {
    if (a->kind != PTDP_PK_TUPLE || a->n < 4 || a->items[0]->kind != PTDP_PK_STORAGE) {
        BAD(m, "_rebuild_tensor_v2 without (storage, offset, size, stride, ...)");
        return NULL;
    }
    const ptdp__pk_node *st = a->items[0], *sz = a->items[2], *sd = a->items[3];
    int64_t off;
    if (!int_of(a->items[1], &off) || off < 0 || sz->kind != PTDP_PK_TUPLE ||
        sd->kind != PTDP_PK_TUPLE || sz->n != sd->n || sz->n > PTDP_PK_MAX_DIMS) {
        BAD(m, "a tensor whose offset, size or stride is malformed (or more than 8 dims)");
        return NULL;
    }
    ptdp__pk_node *t = node(m, PTDP_PK_TENSOR);
    if (!t) return NULL;
    t->storage = (ptdp__pk_node *)st, t->dtype = st->dtype, t->offset = off;
    t->ndim = (int)sz->n;
    int64_t numel = 1, last = off;
    for (int i = 0; i < t->ndim; i++) {
        if (!int_of(sz->items[i], &t->shape[i]) || !int_of(sd->items[i], &t->stride[i]) ||
            t->shape[i] < 0 || t->stride[i] < 0 || t->shape[i] > ((int64_t)1 << 40) ||
            t->stride[i] > ((int64_t)1 << 40)) {
            BAD(m, "a tensor dimension or stride that is negative or beyond 2^40");
            return NULL;
        }
        if (t->shape[i] && numel > (((int64_t)1 << 40) / t->shape[i])) {
            BAD(m, "a tensor of more than 2^40 elements");
            return NULL;
        }
        numel *= t->shape[i];
        int64_t ext = 0;
        if (t->shape[i] && (__builtin_mul_overflow(t->shape[i] - 1, t->stride[i], &ext) ||
                            __builtin_add_overflow(last, ext, &last))) {
            BAD(m, "a tensor whose extent overflows 64 bits");
            return NULL;
        }
    }
    t->numel = numel;
    if (numel && last >= st->i) {
        BAD(m, "a tensor that reaches past the end of its storage");
        return NULL;
    }
    return t;
}

/* REDUCE / NEWOBJ of callable c with arguments a. */
static int reduce(vm *m, ptdp__pk_node *c, ptdp__pk_node *a) {
    const char *name = c->kind == PTDP_PK_GLOBAL ? c->s : "";
    if (!strcmp(name, "torch._utils._rebuild_tensor_v2")) return push(m, rebuild_tensor(m, a));
    if (!strcmp(name, "torch._utils._rebuild_parameter")) {
        if (a->kind != PTDP_PK_TUPLE || a->n < 1 || a->items[0]->kind != PTDP_PK_TENSOR)
            return BAD(m, "_rebuild_parameter without a tensor");
        return push(m, a->items[0]);
    }
    if (!strcmp(name, "collections.OrderedDict") && a->kind == PTDP_PK_TUPLE && a->n == 0)
        return push(m, node(m, PTDP_PK_DICT));
    ptdp__pk_node *o = node(m, PTDP_PK_OBJECT);
    if (!o) return m->err;
    o->cls = c, o->args = a;
    return push(m, o);
}

/* Pops the group above the mark into container kind k. */
static int collect(vm *m, ptdp__pk_kind k) {
    int64_t from = 0;
    if (pop_mark(m, &from)) return m->err;
    ptdp__pk_node *c = node(m, k);
    if (!c) return m->err;
    if (k == PTDP_PK_DICT && (m->sp - from) % 2) return BAD(m, "DICT with an odd number of items");
    for (int64_t i = from; i < m->sp; i++)
        if (add_item(m, c, m->stack[i])) return m->err;
    m->sp = from;
    return push(m, c);
}

static int tuple_n(vm *m, int k) {
    ptdp__pk_node *t = node(m, PTDP_PK_TUPLE), *x[3];
    if (!t) return m->err;
    for (int i = k - 1; i >= 0; i--)
        if (!(x[i] = pop(m))) return m->err;
    for (int i = 0; i < k; i++)
        if (add_item(m, t, x[i])) return m->err;
    return push(m, t);
}

/* APPEND(S) / SETITEM(S): items above `from` into the container below. */
static int extend(vm *m, int64_t from, int pairs) {
    if (from <= floor_(m)) return BAD(m, "no container below the items");
    ptdp__pk_node *c = m->stack[from - 1];
    int ok = pairs ? (c->kind == PTDP_PK_DICT || c->kind == PTDP_PK_OBJECT)
                   : (c->kind == PTDP_PK_LIST || c->kind == PTDP_PK_OBJECT);
    if (!ok)
        return BAD(m, pairs ? "SETITEM(S) on something that is not a dict"
                            : "APPEND(S) on something that is not a list");
    if (pairs && (m->sp - from) % 2) return BAD(m, "SETITEMS with an odd number of items");
    for (int64_t i = from; i < m->sp; i++)
        if (add_item(m, c, m->stack[i])) return m->err;
    m->sp = from;
    return PTDP_OK;
}

static int step(vm *m, int *stop) {
    m->op_at = m->pos;
    uint8_t op = m->d[m->pos++];
    ptdp__pk_node *x, *y;
    int64_t from = 0, v = 0;
    char t1[256], t2[256];
    const uint8_t *a = m->d + m->pos;
    switch (op) {
    case 0x80: /* PROTO */
        if (need(m, 1)) return m->err;
        if (m->d[m->pos++] > 5) return BAD(m, "a pickle protocol above 5");
        return PTDP_OK;
    case 0x95: /* FRAME (protocol 4): a length hint only */
        if (need(m, 8)) return m->err;
        m->pos += 8;
        return PTDP_OK;
    case '.':
        *stop = 1;
        return PTDP_OK;
    case '(':
        if (m->nmarks == m->mcap) {
            int64_t cap = m->mcap ? 2 * m->mcap : 32;
            if (cap > MAX_NODES) return BAD(m, "too many nested MARKs");
            void *mk = realloc(m->marks, (size_t)cap * sizeof *m->marks);
            if (!mk) return fail(m, PTDP_ENOMEM, "out of memory%s", NULL);
            m->marks = mk, m->mcap = cap;
        }
        m->marks[m->nmarks++] = m->sp;
        return PTDP_OK;
    case '0': /* POP: an item, or an empty mark group */
        if (m->nmarks && m->marks[m->nmarks - 1] == m->sp) {
            m->nmarks--;
            return PTDP_OK;
        }
        return pop(m) ? PTDP_OK : m->err;
    case '1': /* POP_MARK */
        if (pop_mark(m, &from)) return m->err;
        m->sp = from;
        return PTDP_OK;
    case '2': /* DUP */
        return (x = top(m)) ? push(m, x) : m->err;
    case 'N':
        return push(m, node(m, PTDP_PK_NONE));
    case 0x88:
    case 0x89:
        if ((x = node(m, PTDP_PK_BOOL))) x->i = op == 0x88;
        return push(m, x);
    case 'I': /* INT text; "01"/"00" are protocol 0's booleans */
    case 'L':
        if (line(m, t1) || text_int(m, t1, &v)) return m->err;
        if ((x = node(m, (op == 'I' && (!strcmp(t1, "01") || !strcmp(t1, "00"))) ? PTDP_PK_BOOL
                                                                                 : PTDP_PK_INT)))
            x->i = v;
        return push(m, x);
    case 'J':
    case 'K':
    case 'M': {
        int k = op == 'J' ? 4 : op == 'K' ? 1 : 2;
        if (need(m, (size_t)k)) return m->err;
        uint64_t u = le(a, k);
        m->pos += (size_t)k;
        if ((x = node(m, PTDP_PK_INT)))
            x->i = op == 'J' ? (int64_t)(int32_t)(uint32_t)u : (int64_t)u;
        return push(m, x);
    }
    case 0x8a: /* LONG1 */
    case 0x8b: /* LONG4 */ {
        int k = op == 0x8a ? 1 : 4;
        if (need(m, (size_t)k)) return m->err;
        uint64_t len = le(a, k);
        m->pos += (size_t)k;
        if (need(m, (size_t)len)) return m->err;
        const uint8_t *b = m->d + m->pos;
        m->pos += (size_t)len;
        if (!(x = node(m, PTDP_PK_INT))) return m->err;
        if (len > 8) {
            x->big = 1; /* beyond int64: kept as a marker, never used as a number */
        } else if (len) {
            uint64_t u = le(b, (int)len);
            if (len < 8 && (b[len - 1] & 0x80)) u |= ~(uint64_t)0 << (8 * len);
            x->i = (int64_t)u;
        }
        return push(m, x);
    }
    case 'G':
        if (need(m, 8)) return m->err;
        {
            uint64_t u = 0;
            for (int i = 0; i < 8; i++) u = u << 8 | a[i];
            m->pos += 8;
            if ((x = node(m, PTDP_PK_FLOAT))) memcpy(&x->f, &u, 8);
        }
        return push(m, x);
    case 'F':
        if (line(m, t1)) return m->err;
        {
            char *end;
            double f = strtod(t1, &end);
            if (end == t1) return BAD(m, "a malformed FLOAT");
            if ((x = node(m, PTDP_PK_FLOAT))) x->f = f;
        }
        return push(m, x);
    case 'X':  /* BINUNICODE */
    case 'T':  /* BINSTRING */
    case 'B':  /* BINBYTES */
    case 'U':  /* SHORT_BINSTRING */
    case 'C':  /* SHORT_BINBYTES */
    case 0x8c: /* SHORT_BINUNICODE */
    case 0x8d: /* BINUNICODE8 */
    case 0x8e: /* BINBYTES8 */ {
        int k = (op == 'U' || op == 'C' || op == 0x8c) ? 1 : (op == 0x8d || op == 0x8e) ? 8 : 4;
        if (need(m, (size_t)k)) return m->err;
        uint64_t len = le(a, k);
        if (op == 'T' && len > 0x7fffffffu) return BAD(m, "a negative BINSTRING length");
        m->pos += (size_t)k;
        if (need(m, (size_t)len)) return m->err;
        x = str_node(m, m->d + m->pos, len);
        m->pos += (size_t)len;
        return push(m, x);
    }
    case ')':
        return push(m, node(m, PTDP_PK_TUPLE));
    case ']':
        return push(m, node(m, PTDP_PK_LIST));
    case '}':
        return push(m, node(m, PTDP_PK_DICT));
    case 0x8f: /* EMPTY_SET */
        return push(m, node(m, PTDP_PK_LIST));
    case 't':
        return collect(m, PTDP_PK_TUPLE);
    case 'l':
        return collect(m, PTDP_PK_LIST);
    case 'd':
        return collect(m, PTDP_PK_DICT);
    case 0x91: /* FROZENSET */
        return collect(m, PTDP_PK_LIST);
    case 0x85:
    case 0x86:
    case 0x87:
        return tuple_n(m, op - 0x84);
    case 'a':
    case 's':
        if (m->sp - (op == 's' ? 2 : 1) < floor_(m)) return BAD(m, "stack underflow");
        return extend(m, m->sp - (op == 's' ? 2 : 1), op == 's');
    case 'e':
    case 'u':
    case 0x90: /* ADDITEMS */
        if (pop_mark(m, &from)) return m->err;
        return extend(m, from, op == 'u');
    case 'c': /* GLOBAL module\nname\n */
        if (line(m, t1) || line(m, t2)) return m->err;
        return push(m, global(m, t1, t2));
    case 0x93: /* STACK_GLOBAL */
        if (!(y = pop(m)) || !(x = pop(m))) return m->err;
        if (x->kind != PTDP_PK_STR || y->kind != PTDP_PK_STR || x->len > 255 || y->len > 255)
            return BAD(m, "STACK_GLOBAL without two short strings");
        return push(m, global(m, x->s, y->s));
    case 'R':
    case 0x81: /* NEWOBJ */
        if (!(y = pop(m)) || !(x = pop(m))) return m->err;
        return reduce(m, x, y);
    case 0x92: /* NEWOBJ_EX: cls, args, kwargs */
        if (!pop(m) || !(y = pop(m)) || !(x = pop(m))) return m->err;
        return reduce(m, x, y);
    case 'i': /* INST module\nname\n over a mark group */
        if (line(m, t1) || line(m, t2)) return m->err;
        if (collect(m, PTDP_PK_TUPLE)) return m->err;
        y = pop(m);
        return (x = global(m, t1, t2)) ? reduce(m, x, y) : m->err;
    case 'o': /* OBJ: mark, cls, args... */
        if (collect(m, PTDP_PK_TUPLE)) return m->err;
        y = pop(m);
        if (y->n < 1) return BAD(m, "OBJ without a class");
        x = y->items[0];
        y->items++, y->n--, y->cap--;
        return reduce(m, x, y);
    case 'b': /* BUILD: the state goes on the object; elsewhere it is dropped */
        if (!(y = pop(m)) || !(x = top(m))) return m->err;
        if (x->kind == PTDP_PK_OBJECT) x->state = y;
        return PTDP_OK;
    case 'p':
        if (line(m, t1) || text_int(m, t1, &v)) return m->err;
        return memo_put(m, v);
    case 'q':
    case 'r': {
        int k = op == 'q' ? 1 : 4;
        if (need(m, (size_t)k)) return m->err;
        m->pos += (size_t)k;
        return memo_put(m, (int64_t)le(a, k));
    }
    case 0x94: /* MEMOIZE */
        return memo_put(m, m->memo_next);
    case 'g':
        if (line(m, t1) || text_int(m, t1, &v)) return m->err;
        return memo_get(m, v);
    case 'h':
    case 'j': {
        int k = op == 'h' ? 1 : 4;
        if (need(m, (size_t)k)) return m->err;
        m->pos += (size_t)k;
        return memo_get(m, (int64_t)le(a, k));
    }
    case 'Q':
        return persistent(m);
    default:
        return BAD(m, "not an opcode of the pickles torch.save writes");
    }
}

int ptdp__pk_parse(ptdp__pk **out, const ptdp__pk_node **root, const void *data, size_t n,
                   const char *what) {
    *out = NULL;
    *root = NULL;
    vm m = {.d = data, .n = n, .what = what};
    m.p = calloc(1, sizeof *m.p);
    if (!m.p) return ptdp_errorf(PTDP_ENOMEM, "out of memory reading %s", what);
    int stop = 0;
    while (!m.err && !stop) {
        if (m.pos >= m.n) {
            m.op_at = m.pos;
            BAD(&m, "the pickle ends without STOP (truncated?)");
            break;
        }
        step(&m, &stop);
    }
    const ptdp__pk_node *r = NULL;
    if (!m.err && (m.sp != 1 || m.nmarks)) {
        BAD(&m, "STOP with other than one value on the stack");
    } else if (!m.err) {
        r = m.stack[0];
    }
    free(m.stack);
    free(m.marks);
    free(m.memo);
    if (m.err) {
        ptdp__pk_free(m.p);
        return m.err;
    }
    *out = m.p;
    *root = r;
    return PTDP_OK;
}

/* ---- lookups -------------------------------------------------------------------- */

const ptdp__pk_node *ptdp__pk_get(const ptdp__pk_node *d, const char *key) {
    if (!d || (d->kind != PTDP_PK_DICT && d->kind != PTDP_PK_OBJECT)) return NULL;
    for (int64_t i = 0; i + 1 < d->n; i += 2)
        if (d->items[i]->kind == PTDP_PK_STR && !strcmp(d->items[i]->s, key))
            return d->items[i + 1];
    return NULL;
}

const ptdp__pk_node *ptdp__pk_storages(const ptdp__pk *p) { return p ? p->storages : NULL; }

const ptdp__pk_node *ptdp__pk_attr(const ptdp__pk_node *o, const char *key) {
    if (!o || o->kind != PTDP_PK_OBJECT) return NULL;
    const ptdp__pk_node *st = o->state;
    /* (dict, slots) states: the dict is the first item */
    if (st && st->kind == PTDP_PK_TUPLE && st->n == 2) st = st->items[0];
    return st && st->kind == PTDP_PK_DICT ? ptdp__pk_get(st, key) : NULL;
}

int ptdp_pickle_check(const void *data, size_t n) {
    ptdp__pk *p;
    const ptdp__pk_node *root;
    int rc = ptdp__pk_parse(&p, &root, data, n, "pickle");
    ptdp__pk_free(p);
    return rc;
}
