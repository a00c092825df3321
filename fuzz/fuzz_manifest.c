/* fuzz_manifest.c - a checkpoint's manifest.json (ckpt/manifest.c). Besides
 * not crashing, an accepted manifest must keep the promises loading and
 * `ptdp checkpoint verify` index with: plain file names, shard rectangles
 * and element ranges inside their tensor, sizes whose sums cannot overflow. */
#include <stdio.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_internal.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    manifest M;
    memset(&M, 0, sizeof M);
    snprintf(M.dir, sizeof M.dir, "fuzz-ckpt");
    snprintf(M.path, sizeof M.path, "fuzz-ckpt/manifest.json");
    if (ptdp__ckpt_manifest_parse(&M, (const char *)data, size) == 1) {
        int64_t params = 0, bytes = 0; /* what `ptdp checkpoint info` sums */
        for (int i = 0; i < M.nfiles; i++) {
            PTDP_FUZZ_CHECK(ptdp__ckpt_safe_name(M.files[i].name));
            PTDP_FUZZ_CHECK(M.files[i].bytes >= 0 && M.files[i].bytes <= PTDP__CKPT_MAX_FILE_BYTES);
            bytes += M.files[i].bytes;
        }
        for (int i = 0; i < M.ntensors; i++) {
            const tensor_rec *T = &M.tensors[i];
            PTDP_FUZZ_CHECK(T->shape[0] >= 1 && T->shape[1] >= 1);
            PTDP_FUZZ_CHECK(T->shape[0] <= PTDP__CKPT_MAX_NUMEL / T->shape[1]);
            params += T->shape[0] * T->shape[1];
        }
        PTDP_FUZZ_CHECK(params >= 0 && bytes >= 0);
        for (int i = 0; i < M.nshards; i++) {
            const shard_rec *s = &M.shards[i];
            const tensor_rec *T = ptdp__ckpt_find_tensor(&M, s->name);
            PTDP_FUZZ_CHECK(T && s->file >= 0 && s->file < M.nfiles);
            PTDP_FUZZ_CHECK(s->kind >= 0 && s->kind < K_COUNT);
            PTDP_FUZZ_CHECK(0 <= s->r0 && s->r0 <= s->r1 && s->r1 <= T->shape[0]);
            PTDP_FUZZ_CHECK(0 <= s->c0 && s->c0 <= s->c1 && s->c1 <= T->shape[1]);
            PTDP_FUZZ_CHECK(0 <= s->e0 && s->e0 <= s->e1 &&
                            s->e1 <= (s->r1 - s->r0) * (s->c1 - s->c0));
            /* the element -> (row, col) mapping of verify and load stays inside */
            const int64_t w = s->c1 - s->c0;
            if (s->e1 > s->e0) {
                PTDP_FUZZ_CHECK(w > 0);
                const int64_t last = s->e1 - 1;
                PTDP_FUZZ_CHECK((s->r0 + last / w) * T->shape[1] + s->c0 + last % w <
                                T->shape[0] * T->shape[1]);
            }
        }
    }
    ptdp__ckpt_manifest_free(&M);
    return 0;
}
