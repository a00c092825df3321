/* fuzz_pickle.c - the pickle machine of the Megatron-LM import
 * (format/pickle.c): any bytes as a pickle stream. It builds a plain tree and
 * runs nothing; an accepted stream is freed, a refused one leaves a message. */
#include "format/torch.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)ptdp_pickle_check(data, size);
    return 0;
}
