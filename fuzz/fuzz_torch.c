/* fuzz_torch.c - a whole torch.save file (format/zip.c and format/pickle.c): the
 * zip's headers and central directory, the data.pkl inside, and every
 * storage the pickle names checked against the archive's entries. */
#include "format/torch.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)ptdp_torch_check(data, size);
    return 0;
}
