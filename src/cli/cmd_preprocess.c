/* cmd_preprocess.c - `ptdp preprocess`: Megatron's tools/preprocess_data.py
 * for GPT-2 BPE without sentence splitting. Parses and checks the flags, then
 * runs data/preprocess.c. Not here: the conversion itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "cli/cli.h"
#include "data/data.h"

static void usage(FILE *f, const ptdp_opt *opts, int nopts) {
    fprintf(
        f,
        "usage: ptdp preprocess --input FILE --output-prefix P --vocab-file encoder.json\n"
        "                       --merge-file vocab.bpe [--append-eod] [--json-keys KEY ...]\n"
        "                       [--workers N] [--log-interval N]\n\n"
        "Writes P_KEY_document.bin/.idx for each KEY (Megatron indexed dataset, byte-identical to\n"
        "tools/preprocess_data.py with --tokenizer-type GPT2BPETokenizer). FILE is JSON lines (one\n"
        "document per line, the string under each key), as Megatron reads, when its name ends in .json\n"
        "or .jsonl or its first non-blank line starts with '{'; otherwise plain text whose documents\n"
        "are separated by blank lines. --input-format json|text says which.\n\n"
        "flags:\n");
    ptdp_opts_help(f, opts, nopts);
}

/* Megatron's --json-keys takes one or more keys: the values up to the next
 * flag. Takes them out of argv (into keys) so that the flag parser sees the
 * rest; returns the number of keys (0: not given), or -1 with a message. */
static int take_json_keys(int *argc, char **argv, const char **keys) {
    int n = 0, out = 0, given = 0;
    for (int i = 0; i < *argc; i++) {
        if (!strncmp(argv[i], "--json-keys=", 12)) {
            given = 1;
            n = 0;
            keys[n++] = argv[i] + 12;
            continue;
        }
        if (strcmp(argv[i], "--json-keys") != 0) {
            argv[out++] = argv[i];
            continue;
        }
        given = 1;
        n = 0;
        while (i + 1 < *argc && strncmp(argv[i + 1], "--", 2) != 0) {
            if (n == PTDP_PP_MAX_KEYS) {
                ptdp_log_error("--json-keys: at most %d keys", PTDP_PP_MAX_KEYS);
                return -1;
            }
            keys[n++] = argv[++i];
        }
    }
    *argc = out;
    for (int k = 0; k < n; k++)
        if (!*keys[k] || strpbrk(keys[k], " ,/")) {
            ptdp_log_error("--json-keys: '%s' is not a key (give the keys as separate words: "
                           "--json-keys text title)",
                           keys[k]);
            return -1;
        }
    if (given && n == 0) {
        ptdp_log_error("--json-keys needs at least one key (e.g. --json-keys text)");
        return -1;
    }
    return n;
}

int ptdp_cmd_preprocess(int argc, char **argv) {
    const char *input = NULL, *prefix = NULL, *vocab = NULL, *merges = NULL;
    const char *keys[PTDP_PP_MAX_KEYS] = {"text"};
    const char *tokenizer_type = "GPT2BPETokenizer", *format = "auto";
    int append_eod = 0, keep_newlines = 0, split_sentences = 0;
    int64_t workers = 1, log_interval = 0, partitions = 1;
    const char *keys_help = "text"; /* for --help: take_json_keys reads the flag */
    int nkeys = take_json_keys(&argc, argv, keys);
    if (nkeys < 0) return 2;
    if (nkeys == 0) nkeys = 1;
    ptdp_opt opts[] = {
        {"input", PTDP_OPT_STR, &input, "input file: JSON lines or plain text (required)", NULL, 0,
         0, 0},
        {"input-format", PTDP_OPT_STR, &format,
         "auto: JSON lines for .json/.jsonl or a first line starting "
         "with '{', else plain text",
         "auto|json|text", 0, 0, 0},
        {"output-prefix", PTDP_OPT_STR, &prefix, "output prefix (required)", NULL, 0, 0, 0},
        {"vocab-file", PTDP_OPT_STR, &vocab, "GPT-2 encoder.json (required)", NULL, 0, 0, 0},
        {"merge-file", PTDP_OPT_STR, &merges, "GPT-2 vocab.bpe (required)", NULL, 0, 0, 0},
        {"append-eod", PTDP_OPT_BOOL, &append_eod,
         "append <|endoftext|> to every non-empty document", NULL, 0, 0, 0},
        {"json-keys", PTDP_OPT_STR, &keys_help, "JSON keys holding the text, one dataset each",
         NULL, 0, 0, 0},
        {"workers", PTDP_OPT_INT, &workers, "tokenizing threads; the output does not depend on it",
         NULL, 1, 1024, 0},
        {"log-interval", PTDP_OPT_INT, &log_interval,
         "print 'Processed N documents' every this many documents (0: a progress bar on a terminal)",
         NULL, 0, 1e15, 0},
        {"partitions", PTDP_OPT_INT, &partitions,
         "accepted for Megatron compatibility: the output is the same for any value (Megatron "
         "merges its partitions in order); ptdp parallelises with --workers",
         NULL, 1, 1e6, 0},
        {"keep-newlines", PTDP_OPT_BOOL, &keep_newlines,
         "accepted for Megatron compatibility: without sentence splitting newlines are always "
         "kept in the text",
         NULL, 0, 0, 0},
        {"split-sentences", PTDP_OPT_BOOL, &split_sentences,
         "not supported (ptdp writes one sequence per document)", NULL, 0, 0, 0},
        {"tokenizer-type", PTDP_OPT_STR, &tokenizer_type, "accepted for Megatron compatibility",
         "GPT2BPETokenizer", 0, 0, 0},
    };
    int nopts = (int)(sizeof opts / sizeof opts[0]);
    int parsed = ptdp__cli_parse(opts, nopts, argc, argv, usage);
    if (parsed >= 0) return parsed;
    if (!input) {
        ptdp_log_error("--input is required (see ptdp preprocess --help)");
        return 2;
    }
    if (!prefix) {
        ptdp_log_error("--output-prefix is required (see ptdp preprocess --help)");
        return 2;
    }
    if (split_sentences) {
        ptdp_log_error("--split-sentences is not supported: ptdp writes one sequence per document "
                       "(Megatron's default without it)");
        return 2;
    }
    (void)keep_newlines;
    (void)partitions;
    struct stat st;
    if (stat(input, &st) != 0 || !S_ISREG(st.st_mode) || access(input, R_OK) != 0) {
        ptdp_log_error("--input: cannot read '%s'", input);
        return 2;
    }
    {
        /* the directory of the prefix must exist */
        char *dir = strdup(prefix);
        char *slash = dir ? strrchr(dir, '/') : NULL;
        int bad = 0;
        if (slash) {
            if (slash == dir)
                slash[1] = 0;
            else
                *slash = 0;
            bad = stat(dir, &st) != 0 || !S_ISDIR(st.st_mode);
            if (bad) ptdp_log_error("--output-prefix: directory '%s' does not exist", dir);
        }
        free(dir);
        if (bad) return 2;
    }
    ptdp_tokenizer *tok = NULL;
    int status = ptdp__cli_open_tokenizer(&tok, vocab, merges);
    if (status) return status;
    ptdp_preprocess_params p = ptdp_preprocess_default_params();
    p.input = input;
    p.format = !strcmp(format, "json")   ? PTDP_PP_JSON
               : !strcmp(format, "text") ? PTDP_PP_TEXT
                                         : PTDP_PP_AUTO;
    p.output_prefix = prefix;
    for (int k = 0; k < nkeys; k++) p.json_keys[k] = keys[k];
    p.n_keys = nkeys;
    p.log_interval = log_interval;
    p.append_eod = append_eod;
    p.workers = (int)workers;
    p.progress = isatty(2);
    int rc = ptdp_preprocess_run(tok, &p, NULL);
    ptdp_tokenizer_free(tok);
    if (rc) {
        ptdp_log_error("%s%s", rc == PTDP_EFORMAT ? "--input: " : "", ptdp_last_error());
        return rc == PTDP_EFORMAT || rc == PTDP_EINVAL ? 2 : 1;
    }
    return 0;
}
