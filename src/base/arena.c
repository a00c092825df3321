/* arena.c - the few big allocations a run makes. Sizes come from the memory
 * plan; carving past the end is a planning bug and asserts. */
#include "base.h"

#include <stdlib.h>
#include <string.h>

#define PTDP__ALIGN 64

size_t ptdp_arena_need(size_t bytes) { return (bytes + PTDP__ALIGN - 1) & ~(size_t)(PTDP__ALIGN - 1); }

int ptdp_arena_init(ptdp_arena *a, const char *name, size_t bytes) {
    memset(a, 0, sizeof *a);
    a->name = name;
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

void ptdp_arena_free(ptdp_arena *a) {
    if (!a) return;
    free(a->base);
    a->base = NULL;
    a->size = a->used = 0;
}

void *ptdp_arena_carve(ptdp_arena *a, size_t bytes) {
    size_t n = ptdp_arena_need(bytes);
    PTDP_ASSERT_MSG(a->used + n <= a->size, a->name);
    void *p = a->base + a->used;
    a->used += n;
    if (a->used > a->peak) a->peak = a->used;
    memset(p, 0, n);
    return p;
}

size_t ptdp_arena_mark(const ptdp_arena *a) { return a->used; }

void ptdp_arena_reset(ptdp_arena *a, size_t mark) {
    PTDP_ASSERT(mark <= a->used);
    a->used = mark;
}
