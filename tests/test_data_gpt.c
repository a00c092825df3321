/* test_data_gpt.c - GPT sample indexing and blending: samples are s+1
 * contiguous tokens that may span documents, each starting where the previous
 * one ended; deterministic for a seed and a pure function of the index
 * (wrapping); splits by Megatron's rounding rule; blending proportions; the
 * errors for a bad split, an empty split and out-of-vocabulary tokens.
 * Datasets are written with tokens that encode (dataset, document, position). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "data/data.h"
#include "test.h"

#define TAG_B (1 << 20)
static int tok_doc(int32_t t) { return (t & (TAG_B - 1)) / 64; }
static int tok_pos(int32_t t) { return t % 64; }

/* ndocs documents of lengths 1 + (d * 7) % maxlen; token = tag + d*64 + pos */
static void make_ds(const char *prefix, int ndocs, int maxlen, int32_t tag, int *lens) {
    ptdp_idx_writer *w = NULL;
    CHECK_OK(ptdp_idx_writer_open(&w, prefix, PTDP_IDX_I32));
    int32_t t[64];
    for (int d = 0; d < ndocs; d++) {
        int n = 1 + (d * 7) % maxlen;
        if (lens) lens[d] = n;
        for (int i = 0; i < n; i++) t[i] = tag + d * 64 + i;
        CHECK_OK(ptdp_idx_writer_add_document(w, t, (size_t)n));
    }
    CHECK_OK(ptdp_idx_writer_finish(w));
}

/* Every adjacent pair continues a document or jumps from a document's last
 * token to another's first. Returns 1 if so; *spans counts samples that cross. */
static int sample_ok(const int32_t *t, int64_t n, const int *lens, int *spans) {
    int crossed = 0;
    for (int64_t i = 0; i + 1 < n; i++) {
        int d0 = tok_doc(t[i]), p0 = tok_pos(t[i]), d1 = tok_doc(t[i + 1]), p1 = tok_pos(t[i + 1]);
        if (d0 == d1 && p1 == p0 + 1) continue;
        if (p0 != lens[d0] - 1 || p1 != 0) return 0;
        crossed = 1;
    }
    *spans += crossed;
    return 1;
}

int main(void) {
    char dir[] = "/tmp/ptdp_test_gpt_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char a[512], b[512], cmd[600];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    static int lens_a[1000], lens_b[1000];
    make_ds(a, 1000, 40, 0, lens_a);
    make_ds(b, 300, 40, TAG_B, lens_b);
    enum { S = 32 };
    int32_t x[S + 1], y[S + 1];

    /* single dataset: structure, chaining, determinism, wrap */
    ptdp_gpt_data_params p = ptdp_gpt_data_default_params();
    char *argv1[] = {a};
    CHECK_OK(ptdp_gpt_data_parse_paths(&p, 1, argv1));
    p.split = "949,50,1";
    p.seq_length = S;
    p.seed = 42;
    p.num_samples[0] = 3000; /* > 1 epoch (~20k tokens / 32 = ~640 per epoch) */
    p.num_samples[1] = 10;
    p.num_samples[2] = 0;
    p.vocab_size = 1 << 16;
    ptdp_gpt_data *g = NULL, *g2 = NULL;
    CHECK_OK(ptdp_gpt_data_open(&g, &p));
    CHECK_OK(ptdp_gpt_data_open(&g2, &p));
    if (!g || !g2) return test_done("test_data_gpt");
    int64_t n0 = ptdp_gpt_data_num_samples(g, 0);
    CHECK(n0 >= 3000);
    CHECK(ptdp_gpt_data_num_samples(g, 1) >= 10);
    CHECK(ptdp_gpt_data_num_samples(g, 2) >= 0);
    int ok = 1, spans = 0, same = 1, in_split = 1;
    for (int64_t i = 0; i < n0; i++) {
        ok &= ptdp_gpt_data_sample(g, 0, i, x) == 0;
        ok &= sample_ok(x, S + 1, lens_a, &spans);
        ok &= ptdp_gpt_data_sample(g2, 0, i, y) == 0;
        same &= memcmp(x, y, sizeof x) == 0;
        for (int k = 0; k <= S; k++) in_split &= tok_doc(x[k]) < 949;
    }
    CHECK(ok);
    CHECK(same);
    CHECK(in_split);
    CHECK(spans > n0 / 2); /* docs are <= 40 tokens, samples 33: most cross */
    /* sample i is a pure function of i: wraps and repeats */
    CHECK_OK(ptdp_gpt_data_sample(g, 0, 5, x));
    CHECK_OK(ptdp_gpt_data_sample(g, 0, 5 + 3 * n0, y));
    CHECK(memcmp(x, y, sizeof x) == 0);
    /* consecutive (unshuffled) samples chain: the set of first tokens and the
     * set of last tokens overlap in all but one sample per epoch group */
    {
        int64_t nv = ptdp_gpt_data_num_samples(g, 1);
        int vok = 1, vs = 0;
        for (int64_t i = 0; i < nv; i++) {
            vok &= ptdp_gpt_data_sample(g, 1, i, x) == 0 && sample_ok(x, S + 1, lens_a, &vs);
            for (int k = 0; k <= S; k++) vok &= tok_doc(x[k]) >= 949 && tok_doc(x[k]) < 999;
        }
        CHECK(vok);
    }
    {
        /* test split: 1 document of 1 + (999*7)%40 = 34 tokens -> exactly 1 sample */
        int64_t nt = ptdp_gpt_data_num_samples(g, 2);
        CHECK(nt == (lens_a[999] - 1) / S);
        if (nt > 0) {
            CHECK_OK(ptdp_gpt_data_sample(g, 2, 0, x));
            CHECK(tok_doc(x[0]) == 999 && tok_pos(x[0]) == 0 && tok_pos(x[S]) == S);
        }
    }
    /* a different seed gives a different order */
    ptdp_gpt_data_free(g2);
    p.seed = 43;
    CHECK_OK(ptdp_gpt_data_open(&g2, &p));
    int differs = 0;
    for (int64_t i = 0; g2 && i < 20; i++) {
        ptdp_gpt_data_sample(g, 0, i, x);
        ptdp_gpt_data_sample(g2, 0, i, y);
        differs |= memcmp(x, y, sizeof x) != 0;
    }
    CHECK(differs);
    ptdp_gpt_data_free(g2);
    ptdp_gpt_data_free(g);

    /* one epoch exactly: samples tile the shuffled concatenation, each token
     * except the shared boundaries appears once */
    {
        ptdp_gpt_data_params q = p;
        q.split = "1,0,0";
        q.num_samples[0] = 0;
        q.num_samples[1] = q.num_samples[2] = 0;
        CHECK_OK(ptdp_gpt_data_open(&g, &q));
        int64_t total = 0;
        for (int d = 0; d < 1000; d++) total += lens_a[d];
        int64_t n = g ? ptdp_gpt_data_num_samples(g, 0) : 0;
        CHECK(n == (total - 1) / S);
        CHECK(g && ptdp_gpt_data_num_samples(g, 1) == 0);
        CHECK(g && ptdp_gpt_data_sample(g, 1, 0, x) == PTDP_EINVAL);
        unsigned char *seen = calloc(64 * 1000, 1);
        int dup = 0;
        for (int64_t i = 0; g && i < n; i++) {
            ptdp_gpt_data_sample(g, 0, i, x);
            for (int k = 0; k < S; k++) dup |= seen[x[k]]++ != 0; /* last token is shared */
        }
        int64_t covered = 0;
        for (int k = 0; k < 64 * 1000; k++) covered += seen[k];
        CHECK(!dup);
        CHECK(covered == n * S);
        free(seen);
        ptdp_gpt_data_free(g);
    }

    /* split rounding: 10 documents "1,1,1" -> boundaries round(10/3) = 3 and
     * round(20/3) = 7: 3, 4, 3 documents (Megatron's cumulative rule) */
    {
        char c[512];
        snprintf(c, sizeof c, "%s/c", dir);
        static int lens_c[10];
        make_ds(c, 10, 40, 0, lens_c);
        ptdp_gpt_data_params q = ptdp_gpt_data_default_params();
        char *argv_c[] = {c};
        CHECK_OK(ptdp_gpt_data_parse_paths(&q, 1, argv_c));
        q.split = "1,1,1";
        q.seq_length = 8;
        q.num_samples[0] = q.num_samples[1] = q.num_samples[2] = 200;
        CHECK_OK(ptdp_gpt_data_open(&g, &q));
        int lo[3] = {99, 99, 99}, hi[3] = {-1, -1, -1};
        for (int k = 0; g && k < 3; k++)
            for (int64_t i = 0; i < 200; i++) {
                ptdp_gpt_data_sample(g, k, i, x);
                for (int j = 0; j <= 8; j++) {
                    int d = tok_doc(x[j]);
                    if (d < lo[k]) lo[k] = d;
                    if (d > hi[k]) hi[k] = d;
                }
            }
        CHECK(lo[0] == 0 && hi[0] == 2 && lo[1] == 3 && hi[1] == 6 && lo[2] == 7 && hi[2] == 9);
        ptdp_gpt_data_free(g);
        q.split = "1,x";
        CHECK(ptdp_gpt_data_open(&g, &q) == PTDP_EINVAL);
        CHECK(strstr(ptdp_last_error(), "--split") != NULL);
        /* a 0 validation part: no validation samples, no error (Megatron skips
         * validation); a part that rounds to no document: an error naming a
         * --split that works, which then does */
        q.split = "1,0,0";
        CHECK_OK(ptdp_gpt_data_open(&g, &q));
        CHECK(g && ptdp_gpt_data_num_samples(g, PTDP_SPLIT_VALID) == 0);
        ptdp_gpt_data_free(g);
        q.split = "969,30,1";
        CHECK(ptdp_gpt_data_open(&g, &q) == PTDP_ECONFIG);
        CHECK(strstr(ptdp_last_error(), "gets none of the 10 documents") &&
              strstr(ptdp_last_error(), "give it documents with --split 9,1,0 "));
        q.split = "9,1,0";
        CHECK_OK(ptdp_gpt_data_open(&g, &q));
        CHECK(g && ptdp_gpt_data_num_samples(g, PTDP_SPLIT_VALID) > 0);
        ptdp_gpt_data_free(g);
        q.split = "0,1,0";
        CHECK(ptdp_gpt_data_open(&g, &q) == PTDP_ECONFIG);
        CHECK(strstr(ptdp_last_error(), "the training split (part 0 of --split 0,1,0)"));
        q.split = "1";
        q.num_samples[1] = q.num_samples[2] = 0;
        q.vocab_size = 100;
        CHECK(ptdp_gpt_data_open(&g, &q) == PTDP_EINVAL);
        CHECK(strstr(ptdp_last_error(), "outside the vocabulary") && strstr(ptdp_last_error(), c));
        q.vocab_size = 0;
        q.seq_length = 0;
        CHECK(ptdp_gpt_data_open(&g, &q) == PTDP_EINVAL);
    }

    /* blending 0.3 A + 0.7 B */
    {
        ptdp_gpt_data_params q = ptdp_gpt_data_default_params();
        char *argv2[] = {"0.3", a, "0.7", b};
        CHECK_OK(ptdp_gpt_data_parse_paths(&q, 4, argv2));
        CHECK(q.num_paths == 2);
        q.split = "98,2,0";
        q.seq_length = S;
        q.num_samples[0] = 1000;
        q.num_samples[1] = 50;
        CHECK_OK(ptdp_gpt_data_open(&g, &q));
        CHECK_OK(ptdp_gpt_data_open(&g2, &q));
        if (g && g2) {
            CHECK(ptdp_gpt_data_num_samples(g, 0) == 1000);
            CHECK(ptdp_gpt_data_num_samples(g, 1) == 50);
            CHECK(ptdp_gpt_data_num_samples(g, 2) == 0);
            int from_a = 0, from_a_100 = 0, bok = 1, bs = 0, bsame = 1;
            for (int64_t i = 0; i < 1000; i++) {
                bok &= ptdp_gpt_data_sample(g, 0, i, x) == 0;
                ptdp_gpt_data_sample(g2, 0, i, y);
                bsame &= memcmp(x, y, sizeof x) == 0;
                int is_b = x[0] >= TAG_B;
                for (int k = 0; k <= S; k++) bok &= (x[k] >= TAG_B) == is_b;
                bok &= sample_ok(x, S + 1, is_b ? lens_b : lens_a, &bs);
                from_a += !is_b;
                if (i < 100) from_a_100 += !is_b;
            }
            CHECK(bok);
            CHECK(bsame);
            CHECK(from_a >= 299 && from_a <= 301);
            CHECK(from_a_100 >= 29 && from_a_100 <= 31);
        }
        ptdp_gpt_data_free(g);
        ptdp_gpt_data_free(g2);
        /* a weight of 0 is valid in any position: that dataset is never
         * read (it used to win the tie at sample 1 when it came first) */
        for (int first = 0; first < 2; first++) {
            char *zero[] = {first ? "0" : "1", a, first ? "1" : "0", b};
            CHECK_OK(ptdp_gpt_data_parse_paths(&q, 4, zero));
            CHECK_OK(ptdp_gpt_data_open(&g, &q));
            int only = 1;
            for (int64_t i = 0; g && i < 1000; i++) {
                only &= ptdp_gpt_data_sample(g, 0, i, x) == 0;
                only &= (x[0] >= TAG_B) == first; /* all from the weighted one */
            }
            CHECK(g && only);
            ptdp_gpt_data_free(g);
        }
        char *bad1[] = {"0.3", a, "x", b};
        CHECK(ptdp_gpt_data_parse_paths(&q, 4, bad1) == PTDP_EINVAL);
        char *bad2[] = {"0.3", a, "0.7"};
        CHECK(ptdp_gpt_data_parse_paths(&q, 3, bad2) == PTDP_EINVAL);
        char *missing[] = {"1", a, "1", "/nonexistent/prefix"};
        CHECK_OK(ptdp_gpt_data_parse_paths(&q, 4, missing));
        CHECK(ptdp_gpt_data_open(&g, &q) == PTDP_EIO);
        CHECK(strstr(ptdp_last_error(), "/nonexistent/prefix") != NULL);
    }

    /* prefixes without weights (Megatron's unweighted blend): each dataset
     * weighs its split's samples in one epoch, (tokens - 1) / S */
    {
        ptdp_gpt_data_params q = ptdp_gpt_data_default_params();
        char *argv2[] = {a, b};
        CHECK_OK(ptdp_gpt_data_parse_paths(&q, 2, argv2));
        CHECK(q.num_paths == 2 && q.by_size);
        q.split = "1";
        q.seq_length = S;
        q.num_samples[0] = 2000;
        int64_t ta = 0, tb = 0;
        for (int d = 0; d < 1000; d++) ta += lens_a[d];
        for (int d = 0; d < 300; d++) tb += lens_b[d];
        const double na = (double)((ta - 1) / S), nb = (double)((tb - 1) / S);
        const int want_a = (int)floor(2000.0 * na / (na + nb) + 0.5);
        CHECK_OK(ptdp_gpt_data_open(&g, &q));
        if (g) {
            int from_a = 0, bok = 1, bs = 0;
            for (int64_t i = 0; i < 2000; i++) {
                bok &= ptdp_gpt_data_sample(g, 0, i, x) == 0;
                int is_b = x[0] >= TAG_B;
                bok &= sample_ok(x, S + 1, is_b ? lens_b : lens_a, &bs);
                from_a += !is_b;
            }
            CHECK(bok);
            CHECK(want_a > 1000 && want_a < 2000 && abs(from_a - want_a) <= 1);
        }
        ptdp_gpt_data_free(g);
        char *three[] = {a, b, a};
        CHECK_OK(ptdp_gpt_data_parse_paths(&q, 3, three));
        CHECK(q.num_paths == 3 && q.by_size);
        char *one[] = {a};
        CHECK_OK(ptdp_gpt_data_parse_paths(&q, 1, one));
        CHECK(q.num_paths == 1 && !q.by_size);
        char *mixed[] = {a, "0.5"};
        CHECK(ptdp_gpt_data_parse_paths(&q, 2, mixed) == PTDP_EINVAL &&
              strstr(ptdp_last_error(), "looks like a weight"));
    }

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    return test_done("test_data_gpt");
}
