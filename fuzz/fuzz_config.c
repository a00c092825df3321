/* fuzz_config.c - `--config FILE.json` (cli/args.c): the JSON object of
 * flag names to values, applied to the training flags, then the same
 * cross-flag checks `ptdp train` runs (ptdp_args_job: the job's rules
 * included), for 1 and 8 ranks. */
#include <string.h>

#include "cli/cli.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static ptdp_args a; /* large (paths, flag storage): not on the stack */
    ptdp_args_defaults(&a);
    void *keep = NULL;
    if (ptdp_args_apply_config_text(&a, PTDP_ARGS_TRAIN, (const char *)data, size, "fuzz.json",
                                    &keep) == PTDP_OK) {
        ptdp_args_job(&a, PTDP_ARGS_TRAIN, 1);
        ptdp_args_job(&a, PTDP_ARGS_TRAIN, 8);
    }
    ptdp_args_free(keep);
    return 0;
}
