/* cmd_plan_calibrate.c - `ptdp plan --calibrate`. */
#include "cli/cli.h"

int ptdp__cli_plan_calibrate(const char *out) {
    (void)out;
    ptdp_log_error("--calibrate is not implemented yet");
    return 2;
}
