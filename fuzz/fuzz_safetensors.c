/* fuzz_safetensors.c - the safetensors reader (format/safetensors.c): the
 * 8-byte header length, the JSON header and its tensor table, every
 * tensor's data read back as float and int32. Input: a whole .safetensors
 * file. */
#include <stdlib.h>
#include <string.h>

#include "format/format.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ptdp_st_file *f = NULL;
    if (ptdp_st_open_mem(&f, "fuzz.safetensors", data, size) != PTDP_OK) {
        PTDP_FUZZ_CHECK(f == NULL);
        return 0;
    }
    for (int i = 0; i < ptdp_st_metadata_count(f); i++) {
        const char *k, *v;
        ptdp_st_metadata_get(f, i, &k, &v);
        PTDP_FUZZ_CHECK(ptdp_st_metadata(f, k) != NULL);
    }
    for (int i = 0; i < ptdp_st_count(f); i++) {
        const ptdp_st_tensor *t = ptdp_st_get(f, i);
        PTDP_FUZZ_CHECK(ptdp_st_find(f, t->name) == t);
        /* accepted offsets lie inside the input */
        PTDP_FUZZ_CHECK((const uint8_t *)t->data >= data &&
                        (const uint8_t *)t->data + t->nbytes <= data + size);
        PTDP_FUZZ_CHECK(t->nbytes == (size_t)t->numel * ptdp_st_dtype_size(t->dtype));
        void *buf = malloc(4 * (size_t)t->numel + 4);
        if (!buf) continue;
        ptdp_st_read_f32(f, t->name, buf, t->numel);
        ptdp_st_read_i32(f, t->name, buf, t->numel);
        free(buf);
    }
    ptdp_st_close(f);
    return 0;
}
