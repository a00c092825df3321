/* cmd_checkpoint.c - `ptdp checkpoint info DIR` (what a checkpoint holds),
 * `ptdp checkpoint verify DIR` (every file's size and CRC-32, every shard
 * against its file, every global tensor fully covered), and the Megatron-LM
 * conversions `import-megatron MEGATRON_DIR OUT_DIR` and `export-megatron
 * PTDP_DIR OUT_DIR --tensor-model-parallel-size T
 * --pipeline-model-parallel-size P` (docs/megatron.md). One process, no MPI.
 * Exit status: 0 ok, 1 the checkpoint is bad or unreadable, 2 bad usage. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "ckpt/ckpt.h"
#include "ckpt/megatron/megatron.h"
#include "cli/cli.h"

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: ptdp checkpoint info DIR     print iteration, layout, model shape, tensors and files\n"
        "       ptdp checkpoint verify DIR   check every checksum and that every tensor is fully covered\n\n"
        "       ptdp checkpoint import-megatron MEGATRON_DIR OUT_DIR [--vocab-size N] [model flags]\n"
        "       ptdp checkpoint export-megatron PTDP_DIR OUT_DIR --tensor-model-parallel-size T\n"
        "                                       --pipeline-model-parallel-size P\n"
        "       (either: [--overwrite-checkpoints])\n\n"
        "DIR is a --save directory (its latest_checkpointed_iteration.txt is followed) or one\n"
        "iter_NNNNNNN directory. import-megatron reads Megatron-LM's --ckpt-format torch\n"
        "(mp_rank_TT[_PPP]/model_optim_rng.pt, any t, p and v) and writes a ptdp checkpoint of\n"
        "the weights (train from it with --load OUT_DIR --no-load-optim, or --finetune); the\n"
        "model flags override the checkpoint's args. export-megatron writes the weights of a\n"
        "ptdp checkpoint as Megatron-Core names, t x p files (see docs/megatron.md).\n"
        "Neither writes over what OUT_DIR holds (import: ptdp checkpoints; export: anything)\n"
        "unless --overwrite-checkpoints; latest_checkpointed_iteration.txt never moves back.\n");
}

/* import-megatron / export-megatron: two directories, then flags. */
static int megatron(int import, int argc, char **argv) {
    ptdp_megatron_import_params ip = ptdp_megatron_import_default_params();
    ptdp_megatron_export_params ep = ptdp_megatron_export_default_params();
    int64_t t = 1, p = 1;
    ptdp_opt imp[] = {
        {"num-layers", PTDP_OPT_INT, &ip.num_layers, "override args.num_layers", NULL, 1, 1e6, 0},
        {"hidden-size", PTDP_OPT_INT, &ip.hidden_size, "override args.hidden_size", NULL, 1, 1e7,
         0},
        {"num-attention-heads", PTDP_OPT_INT, &ip.num_attention_heads,
         "override args.num_attention_heads", NULL, 1, 1e5, 0},
        {"ffn-hidden-size", PTDP_OPT_INT, &ip.ffn_hidden_size, "override args.ffn_hidden_size",
         NULL, 1, 1e8, 0},
        {"max-position-embeddings", PTDP_OPT_INT, &ip.max_position_embeddings,
         "override args.max_position_embeddings", NULL, 1, 1e8, 0},
        {"seq-length", PTDP_OPT_INT, &ip.seq_length, "override args.seq_length", NULL, 1, 1e8, 0},
        {"vocab-size", PTDP_OPT_INT, &ip.vocab_size,
         "the real vocabulary size (args.vocab_size; needed when it is None)", NULL, 1, 1e9, 0},
        {"make-vocab-size-divisible-by", PTDP_OPT_INT, &ip.make_vocab_size_divisible_by,
         "the ptdp checkpoint's vocabulary padding", NULL, 1, 1e6, 0},
        {"overwrite-checkpoints", PTDP_OPT_BOOL, &ip.overwrite,
         "write into an OUT_DIR that holds ptdp checkpoints (an iteration it holds is replaced; "
         "latest_checkpointed_iteration.txt never moves back)",
         NULL, 0, 0, 0},
    };
    ptdp_opt exp[] = {
        {"tensor-model-parallel-size", PTDP_OPT_INT, &t, "Megatron's t to write", NULL, 1, 1024, 0},
        {"pipeline-model-parallel-size", PTDP_OPT_INT, &p, "Megatron's p to write", NULL, 1, 1024,
         0},
        {"make-vocab-size-divisible-by", PTDP_OPT_INT, &ep.make_vocab_size_divisible_by,
         "Megatron's padding: padded_vocab_size is a multiple of this x t", NULL, 1, 1e6, 0},
        {"overwrite-checkpoints", PTDP_OPT_BOOL, &ep.overwrite,
         "write into an OUT_DIR that is not empty (its iter_NNNNNNN is replaced whole; "
         "latest_checkpointed_iteration.txt never moves back)",
         NULL, 0, 0, 0},
    };
    ptdp_opt *opts = import ? imp : exp;
    int nopts = import ? (int)(sizeof imp / sizeof imp[0]) : (int)(sizeof exp / sizeof exp[0]);
    const char *cmd = import ? "import-megatron" : "export-megatron";
    if (argc < 2 || argv[0][0] == '-' || argv[1][0] == '-') {
        int help = argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"));
        if (help) {
            usage(stdout);
            ptdp_opts_help(stdout, opts, nopts);
            return 0;
        }
        fprintf(stderr, "ptdp: error: expected `ptdp checkpoint %s %s OUT_DIR [flags]`\n", cmd,
                import ? "MEGATRON_DIR" : "PTDP_DIR");
        return 2;
    }
    int help = 0;
    int rc = ptdp_opts_parse(opts, nopts, argc - 2, argv + 2, &help);
    if (help) {
        usage(stdout);
        ptdp_opts_help(stdout, opts, nopts);
        return 0;
    }
    if (rc) {
        ptdp_log_error("%s", ptdp_last_error());
        return 2;
    }
    ep.t = (int)t, ep.p = (int)p;
    rc = import ? ptdp_megatron_import(argv[0], argv[1], &ip, stdout)
                : ptdp_megatron_export(argv[0], argv[1], &ep, stdout);
    if (rc) {
        ptdp_log_error("%s", ptdp_last_error());
        return rc == PTDP_EINVAL || rc == PTDP_ECONFIG ? 2 : 1;
    }
    return 0;
}

int ptdp_cmd_checkpoint(int argc, char **argv) {
    if (argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        usage(stdout);
        return 0;
    }
    if (argc >= 1 && (!strcmp(argv[0], "import-megatron") || !strcmp(argv[0], "export-megatron")))
        return megatron(!strcmp(argv[0], "import-megatron"), argc - 1, argv + 1);
    if (argc != 2 || (strcmp(argv[0], "info") && strcmp(argv[0], "verify"))) {
        fprintf(stderr, "ptdp: error: expected `ptdp checkpoint info|verify DIR` or `ptdp "
                        "checkpoint import-megatron|export-megatron SRC OUT_DIR ...`\n");
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
