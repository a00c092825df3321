/* cmd_tokenize.c - `ptdp tokenize`: GPT-2 BPE on stdin, one input line at a
 * time. Encoding prints one line of space-separated ids per input line; the
 * newline that ends a line is not encoded (so a text with newlines inside a
 * document cannot be tokenized exactly with this command: use `ptdp
 * preprocess` for documents). --decode reads lines of ids and prints the
 * decoded bytes of each followed by a newline. Not here: the tokenizer itself
 * (data/bpe.c). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cli/cli.h"
#include "data/data.h"

static void usage(FILE *f, const ptdp_opt *opts, int nopts) {
    fprintf(f,
            "usage: ptdp tokenize --vocab-file encoder.json --merge-file vocab.bpe [--decode]\n\n"
            "Reads stdin line by line. Encoding: prints the GPT-2 BPE ids of each line, space\n"
            "separated, one output line per input line; the line's newline is not encoded.\n"
            "--decode: each input line holds ids; prints their text followed by a newline.\n\n"
            "flags:\n");
    ptdp_opts_help(f, opts, nopts);
}

/* Declared in cli.h: shared with cmd_preprocess.c and cmd_train.c. */
int ptdp__cli_open_tokenizer(ptdp_tokenizer **tok, const char *vocab, const char *merges) {
    if (!vocab) {
        ptdp_log_error(
            "--vocab-file is required (GPT-2's encoder.json; see scripts/fetch_data.sh)");
        return 2;
    }
    if (!merges) {
        ptdp_log_error("--merge-file is required (GPT-2's vocab.bpe; see scripts/fetch_data.sh)");
        return 2;
    }
    int rc = ptdp_tokenizer_open(tok, vocab, merges);
    if (rc) {
        const char *msg = ptdp_last_error();
        ptdp_log_error("%s: %s", strstr(msg, "merge file") ? "--merge-file" : "--vocab-file", msg);
        return rc == PTDP_ENOMEM ? 1 : 2;
    }
    return 0;
}

static int encode_lines(const ptdp_tokenizer *tok) {
    ptdp_tok_cache *cache = ptdp_tok_cache_new();
    ptdp_tokens t = {0};
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int status = 0;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        if (n > 0 && line[n - 1] == '\n') n--;
        t.n = 0;
        if (ptdp_tokenizer_encode(tok, cache, line, (size_t)n, &t)) {
            ptdp_log_error("%s", ptdp_last_error());
            status = 1;
            break;
        }
        for (size_t i = 0; i < t.n; i++) printf(i ? " %d" : "%d", t.ids[i]);
        putchar('\n');
    }
    free(line);
    ptdp_tokens_free(&t);
    ptdp_tok_cache_free(cache);
    return status;
}

static int decode_lines(const ptdp_tokenizer *tok) {
    ptdp_tokens t = {0};
    char *line = NULL, *buf = NULL;
    size_t cap = 0, blen = 0, bcap = 0, lineno = 0;
    ssize_t n;
    int status = 0;
    while (!status && (n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        t.n = 0;
        int rc = ptdp_tokens_parse_ids(line, (size_t)n, ptdp_tokenizer_vocab_size(tok), &t);
        if (rc) {
            ptdp_log_error("--decode: stdin line %zu: %s", lineno, ptdp_last_error());
            status = rc == PTDP_EINVAL ? 2 : 1;
            break;
        }
        blen = 0;
        rc = ptdp_tokenizer_decode(tok, t.ids, t.n, &buf, &blen, &bcap);
        if (rc) {
            ptdp_log_error("--decode: stdin line %zu: %s", lineno, ptdp_last_error());
            status = rc == PTDP_EINVAL ? 2 : 1;
            break;
        }
        fwrite(buf, 1, blen, stdout);
        putchar('\n');
    }
    free(line);
    free(buf);
    ptdp_tokens_free(&t);
    return status;
}

int ptdp_cmd_tokenize(int argc, char **argv) {
    const char *vocab = NULL, *merges = NULL;
    int decode = 0;
    ptdp_opt opts[] = {
        {"vocab-file", PTDP_OPT_STR, &vocab,
         "GPT-2 vocabulary, encoder.json / vocab.json (required)", NULL, 0, 0, 0},
        {"merge-file", PTDP_OPT_STR, &merges, "GPT-2 merges, vocab.bpe / merges.txt (required)",
         NULL, 0, 0, 0},
        {"decode", PTDP_OPT_BOOL, &decode, "read lines of ids, print text", NULL, 0, 0, 0},
    };
    int nopts = (int)(sizeof opts / sizeof opts[0]);
    int parsed = ptdp__cli_parse(opts, nopts, argc, argv, usage);
    if (parsed >= 0) return parsed;
    ptdp_tokenizer *tok = NULL;
    int status = ptdp__cli_open_tokenizer(&tok, vocab, merges);
    if (status) return status;
    setvbuf(stdout, NULL, _IOFBF, 1 << 16); /* a 64 KiB buffer of stdio's own */
    status = decode ? decode_lines(tok) : encode_lines(tok);
    if (fflush(stdout) != 0 && !status) {
        ptdp_log_error("error writing stdout");
        status = 1;
    }
    ptdp_tokenizer_free(tok);
    return status;
}
