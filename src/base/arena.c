/* arena.c - the few big allocations a run makes, and the per-category plan
 * of a rank's tensor memory. Sizes come from the memory plan; carving past
 * the end is a planning bug and asserts. Not here: knowledge of any backend
 * (ptdp_mem_alloc takes the backend's allocator as a function). */
#include "base.h"

#include <stdlib.h>
#include <string.h>

#define PTDP__ALIGN 64

size_t ptdp_arena_need(size_t bytes) {
    return (bytes + PTDP__ALIGN - 1) & ~(size_t)(PTDP__ALIGN - 1);
}

int ptdp_arena_init(ptdp_arena *a, const char *name, size_t bytes) {
    memset(a, 0, sizeof *a);
    a->name = name;
    a->kind = PTDP_ARENA_HOST;
    if (bytes == 0) return PTDP_OK;
    a->base = aligned_alloc(PTDP__ALIGN, ptdp_arena_need(bytes));
    if (!a->base) {
        char b[32];
        return ptdp_errorf(PTDP_ENOMEM, "cannot allocate the %s arena (%s)", name,
                           ptdp_fmt_bytes((double)bytes, b));
    }
    a->size = ptdp_arena_need(bytes);
    return PTDP_OK;
}

void ptdp_arena_plan(ptdp_arena *a, const char *name) {
    memset(a, 0, sizeof *a);
    a->name = name;
    a->kind = PTDP_ARENA_PLAN;
}

void ptdp_arena_block(ptdp_arena *a, const char *name, void *block, size_t bytes) {
    memset(a, 0, sizeof *a);
    a->name = name;
    a->kind = PTDP_ARENA_BLOCK;
    a->base = block;
    a->size = bytes;
}

void ptdp_arena_free(ptdp_arena *a) {
    if (!a) return;
    if (a->kind == PTDP_ARENA_HOST) free(a->base);
    a->base = NULL;
    a->size = a->used = 0;
}

void *ptdp_arena_carve(ptdp_arena *a, size_t bytes) {
    size_t n = ptdp_arena_need(bytes);
    if (a->kind == PTDP_ARENA_PLAN) {
        a->used += n;
        a->peak = a->used > a->peak ? a->used : a->peak;
        return NULL;
    }
    PTDP_ASSERT_MSG(a->used + n <= a->size, a->name);
    void *p = a->base + a->used;
    a->used += n;
    if (a->used > a->peak) a->peak = a->used;
    if (a->kind == PTDP_ARENA_HOST) memset(p, 0, n);
    return p;
}

size_t ptdp_arena_mark(const ptdp_arena *a) { return a->used; }

void ptdp_arena_reset(ptdp_arena *a, size_t mark) {
    PTDP_ASSERT(mark <= a->used);
    a->used = mark;
}

/* ---- per-category memory ----------------------------------------------- */

static const char *const mem_names[] = {
#define PTDP__MEM_NAME(e, s) s,
    PTDP_MEM_CATEGORIES(PTDP__MEM_NAME)
#undef PTDP__MEM_NAME
};

const char *ptdp_mem_category_name(int category) {
    return category >= 0 && category < PTDP_MEM_NCAT ? mem_names[category] : "?";
}

void ptdp_mem_plan(ptdp_mem *m) {
    for (int k = 0; k < PTDP_MEM_NCAT; k++) ptdp_arena_plan(&m->cat[k], mem_names[k]);
}

int ptdp_mem_alloc(ptdp_mem *m, void *(*alloc)(void *ctx, size_t),
                   void (*release)(void *ctx, void *), void *ctx) {
    for (int k = 0; k < PTDP_MEM_NCAT; k++) PTDP_ASSERT(m->cat[k].kind == PTDP_ARENA_PLAN);
    for (int k = 0; k < PTDP_MEM_NCAT; k++) {
        const size_t bytes = m->cat[k].used;
        void *block = bytes ? alloc(ctx, bytes) : NULL;
        if (bytes && !block) {
            char b[32];
            int rc = ptdp_errorf(PTDP_ENOMEM, "cannot allocate %s of %s",
                                 ptdp_fmt_bytes((double)bytes, b), mem_names[k]);
            ptdp_mem_free(m, release, ctx); /* the blocks of categories 0..k-1 */
            return rc;
        }
        ptdp_arena_block(&m->cat[k], mem_names[k], block, bytes);
    }
    return PTDP_OK;
}

int ptdp_mem_exact(const ptdp_mem *m) {
    for (int k = 0; k < PTDP_MEM_NCAT; k++)
        if (m->cat[k].kind != PTDP_ARENA_BLOCK || m->cat[k].used != m->cat[k].size) return 0;
    return 1;
}

void ptdp_mem_free(ptdp_mem *m, void (*release)(void *ctx, void *), void *ctx) {
    if (!m) return;
    for (int k = 0; k < PTDP_MEM_NCAT; k++) {
        if (m->cat[k].kind == PTDP_ARENA_BLOCK && m->cat[k].base) release(ctx, m->cat[k].base);
        m->cat[k].base = NULL;
        m->cat[k].size = m->cat[k].used = 0;
    }
}

size_t ptdp_mem_total(const ptdp_mem *m) {
    size_t n = 0;
    for (int k = 0; k < PTDP_MEM_NCAT; k++)
        n += m->cat[k].kind == PTDP_ARENA_PLAN ? m->cat[k].used : m->cat[k].size;
    return n;
}
