/* cmd_checkpoint.c - `ptdp checkpoint info DIR` (what a checkpoint holds)
 * and `ptdp checkpoint verify DIR` (every file's size and CRC-32, every
 * shard against its file, every global tensor fully covered). One process,
 * no MPI. Exit status: 0 ok, 1 the checkpoint is bad or unreadable, 2 bad
 * usage. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "ckpt/ckpt.h"
#include "cli/cli.h"

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: ptdp checkpoint info DIR     print iteration, layout, model shape, tensors and files\n"
        "       ptdp checkpoint verify DIR   check every checksum and that every tensor is fully covered\n\n"
        "DIR is a --save directory (its latest_checkpointed_iteration.txt is followed) or one\n"
        "iter_NNNNNNN directory.\n");
}

int ptdp_cmd_checkpoint(int argc, char **argv) {
    if (argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        usage(stdout);
        return 0;
    }
    if (argc != 2 || (strcmp(argv[0], "info") && strcmp(argv[0], "verify"))) {
        fprintf(
            stderr,
            "ptdp: error: expected `ptdp checkpoint info DIR` or `ptdp checkpoint verify DIR`\n");
        usage(stderr);
        return 2;
    }
    int rc = !strcmp(argv[0], "info") ? ptdp_ckpt_info(argv[1], stdout)
                                      : ptdp_ckpt_verify(argv[1], stdout);
    if (rc) {
        ptdp_log_error("%s", ptdp_last_error());
        return 1;
    }
    return 0;
}
