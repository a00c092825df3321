/* cmd_preprocess.c - placeholder until the command lands; says so and exits 2. */
#include <stdio.h>

#include "cli/cli.h"

int ptdp_cmd_preprocess(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ptdp: error: 'preprocess' is not available in this build yet\n");
    return 2;
}
