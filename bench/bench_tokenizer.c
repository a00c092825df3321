/* bench_tokenizer.c - GPT-2 BPE tokenizer throughput (MB/s on one core, with
 * and without the word cache) on the Moby Dick text, and `preprocess` wall
 * time for the same text at 1 and N workers. Prints JSON lines; asserts
 * nothing. Usage (after scripts/fetch_data.sh):
 *   bench_tokenizer [DATA_DIR=data] [REPEATS=3] [WORKERS=2] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "data/data.h"

int main(int argc, char **argv) {
    const char *data = argc > 1 ? argv[1] : "data";
    int repeats = argc > 2 ? atoi(argv[2]) : 3, workers = argc > 3 ? atoi(argv[3]) : 2;
    char v[1024], m[1024], txt[1024];
    snprintf(v, sizeof v, "%s/gpt2/encoder.json", data);
    snprintf(m, sizeof m, "%s/gpt2/vocab.bpe", data);
    snprintf(txt, sizeof txt, "%s/moby-dick/data.txt", data);
    double t0 = ptdp_now();
    ptdp_tokenizer *tok = NULL;
    if (ptdp_tokenizer_open(&tok, v, m)) {
        fprintf(stderr, "bench_tokenizer: %s (run scripts/fetch_data.sh)\n", ptdp_last_error());
        return 1;
    }
    printf("{\"bench\":\"tokenizer_load\",\"ms\":%.1f}\n", (ptdp_now() - t0) * 1e3);
    FILE *f = fopen(txt, "rb");
    if (!f) {
        fprintf(stderr, "bench_tokenizer: cannot open %s\n", txt);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n);
    if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) return 1;
    fclose(f);
    for (int cached = 0; cached < 2; cached++) {
        double best = 1e30;
        size_t ntok = 0;
        for (int r = 0; r < repeats; r++) {
            ptdp_tok_cache *c = cached ? ptdp_tok_cache_new() : NULL;
            ptdp_tokens t = {0};
            double s = ptdp_now();
            if (ptdp_tokenizer_encode(tok, c, text, (size_t)n, &t)) return 1;
            double e = ptdp_now() - s;
            if (e < best) best = e;
            ntok = t.n;
            ptdp_tokens_free(&t);
            ptdp_tok_cache_free(c);
        }
        printf("{\"bench\":\"tokenizer_encode\",\"cache\":%s,\"threads\":1,\"bytes\":%ld,"
               "\"tokens\":%zu,\"ms\":%.1f,\"MB_per_s\":%.2f,\"tokens_per_s\":%.0f}\n",
               cached ? "true" : "false", n, ntok, best * 1e3, (double)n / 1e6 / best,
               (double)ntok / best);
    }
    char prefix[] = "/tmp/ptdp_bench_tok_XXXXXX";
    if (!mkdtemp(prefix)) return 1;
    char out[1100];
    snprintf(out, sizeof out, "%s/moby", prefix);
    for (int w = 1; w <= workers;
         w = w == workers ? workers + 1 : (w * 2 > workers ? workers : w * 2)) {
        ptdp_preprocess_params p = ptdp_preprocess_default_params();
        p.input = txt;
        p.output_prefix = out;
        p.append_eod = 1;
        p.workers = w;
        ptdp_preprocess_stats st;
        if (ptdp_preprocess_run(tok, &p, &st)) {
            fprintf(stderr, "bench_tokenizer: %s\n", ptdp_last_error());
            return 1;
        }
        printf("{\"bench\":\"preprocess\",\"workers\":%d,\"documents\":%lld,\"tokens\":%lld,"
               "\"bytes\":%lld,\"ms\":%.1f,\"MB_per_s\":%.2f}\n",
               w, (long long)st.documents, (long long)st.tokens, (long long)st.bytes_in,
               st.seconds * 1e3, (double)st.bytes_in / 1e6 / st.seconds);
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", prefix);
    if (system(cmd) != 0) fprintf(stderr, "bench_tokenizer: could not remove %s\n", prefix);
    free(text);
    ptdp_tokenizer_free(tok);
    return 0;
}
