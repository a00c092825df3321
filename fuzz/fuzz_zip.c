/* fuzz_zip.c - the zip reader under torch.save files (format/zip.c): the
 * end records (zip64 included), every central and local header and every
 * entry's CRC-32. An accepted archive's entries must lie inside the input
 * and be found again by name. */
#include "format/torch.h"
#include "fuzz.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ptdp__zip z;
    memset(&z, 0, sizeof z);
    if (ptdp__zip_open_mem(&z, data, size, "fuzz zip") == PTDP_OK) {
        for (int i = 0; i < z.n; i++) {
            const ptdp__zip_entry *e = &z.entries[i];
            PTDP_FUZZ_CHECK(e->offset <= size && e->size <= size - e->offset);
            PTDP_FUZZ_CHECK(memchr(e->name, 0, sizeof e->name) != NULL);
        }
        ptdp__zip_close(&z);
    }
    return 0;
}
