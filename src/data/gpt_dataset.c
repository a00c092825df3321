/* gpt_dataset.c - GPT sample indexing in the manner of Megatron's
 * megatron/core/datasets/gpt_dataset.py + helpers.cpp, and blending as in
 * blended_dataset.py: per dataset the sequences are split by a "949,50,1"
 * string; per split a document index (the split's documents repeated for as
 * many epochs as the requested samples need, shuffled; the last epoch shuffled
 * on its own when it is needed for < 80% of its samples), a sample index of
 * (document position, offset) pairs where each sample holds s+1 tokens and the
 * next starts s tokens later, possibly spanning documents, and a shuffled
 * sample order. Blending assigns global sample i to the dataset whose share
 * is furthest behind its weight; a list of prefixes without weights weighs
 * each dataset's split by its size (its samples in one epoch), as Megatron's
 * unweighted blends do. The permutations come from ptdp's
 * counter-based RNG (Fisher-Yates keyed by seed, dataset and split), so they
 * are deterministic but not numpy's. Not here: mock datasets, caching the
 * indices on disk, the "drop last partial sequence = False" mode. */
#define _DEFAULT_SOURCE /* dirent's d_type-free listing, strdup */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "data/data.h"

typedef struct {
    int64_t n_samples; /* samples this split provides */
    int64_t n_docidx;
    int64_t *doc_index;  /* [n_docidx] sequence ids, shuffled per epoch group */
    int64_t *sample_idx; /* [(n_samples + 1) * 2]: (doc_index position, token offset) */
    int64_t *shuffle;    /* [n_samples] */
} ptdp__gpt_split;

struct ptdp_gpt_data {
    int64_t seq_length;
    int n;
    double weights[PTDP_NUM_SPLITS][PTDP_DATA_MAX_PATHS]; /* per split, summing to 1 */
    ptdp_idx_dataset *ds[PTDP_DATA_MAX_PATHS];
    ptdp__gpt_split sp[PTDP_DATA_MAX_PATHS][PTDP_NUM_SPLITS];
    int64_t blend_n[PTDP_NUM_SPLITS];
    uint8_t *blend_ds[PTDP_NUM_SPLITS];     /* [blend_n]: dataset of global sample i */
    int64_t *blend_sample[PTDP_NUM_SPLITS]; /* [blend_n]: its sample in that dataset */
};

ptdp_gpt_data_params ptdp_gpt_data_default_params(void) {
    ptdp_gpt_data_params p;
    memset(&p, 0, sizeof(p));
    p.split = "969,30,1";
    p.seq_length = 1024;
    p.seed = 1234;
    return p;
}

static int is_number(const char *s) {
    char *end;
    strtod(s, &end);
    return end != s && !*end;
}

int ptdp_gpt_data_parse_paths(ptdp_gpt_data_params *p, int argc, char **argv) {
    p->by_size = 0;
    if (argc >= 1 && (argc % 2 || !is_number(argv[0]))) { /* prefixes, no weights */
        if (argc > PTDP_DATA_MAX_PATHS)
            return ptdp_errorf(PTDP_EINVAL, "--data-path: at most %d datasets, got %d",
                               PTDP_DATA_MAX_PATHS, argc);
        for (int i = 0; i < argc; i++) {
            if (is_number(argv[i]))
                return ptdp_errorf(PTDP_EINVAL,
                                   "--data-path: '%s' looks like a weight in a list of prefixes; "
                                   "give a weight before every prefix ('W1 P1 W2 P2 ...') or none",
                                   argv[i]);
            p->weights[i] = 1.0;
            p->prefixes[i] = argv[i];
        }
        p->num_paths = argc;
        p->by_size = argc > 1;
        return PTDP_OK;
    }
    if (argc < 2 || argc / 2 > PTDP_DATA_MAX_PATHS)
        return ptdp_errorf(PTDP_EINVAL,
                           "--data-path: expected PREFIX..., or pairs 'WEIGHT PREFIX' "
                           "(at most %d), got %d entries",
                           PTDP_DATA_MAX_PATHS, argc);
    for (int i = 0; i < argc / 2; i++) {
        char *end;
        double w = strtod(argv[2 * i], &end);
        if (end == argv[2 * i] || *end || !(w >= 0) || !isfinite(w))
            return ptdp_errorf(PTDP_EINVAL, "--data-path: '%s' is not a weight >= 0", argv[2 * i]);
        p->weights[i] = w;
        p->prefixes[i] = argv[2 * i + 1];
    }
    p->num_paths = argc / 2;
    return PTDP_OK;
}

/* Megatron's split: fractions of the sequence count, rounded half-to-even,
 * with the rounding drift taken off every boundary after the first. */
static int ptdp__split_bounds(const char *split, int64_t size, int64_t bounds[PTDP_NUM_SPLITS + 1],
                              double w[PTDP_NUM_SPLITS]) {
    double sum = 0;
    for (int i = 0; i < PTDP_NUM_SPLITS; i++) w[i] = 0;
    const char *s = split;
    int k = 0;
    while (*s) {
        if (k == PTDP_NUM_SPLITS)
            return ptdp_errorf(PTDP_EINVAL, "--split '%s': more than 3 parts", split);
        char *end;
        w[k] = strtod(s, &end);
        if (end == s || !(w[k] >= 0) || !isfinite(w[k]) || (*end && *end != ',' && *end != '/'))
            return ptdp_errorf(PTDP_EINVAL,
                               "--split '%s': expected up to 3 numbers >= 0 "
                               "separated by ',' (e.g. 949,50,1)",
                               split);
        sum += w[k++];
        s = *end ? end + 1 : end;
    }
    if (!(sum > 0)) return ptdp_errorf(PTDP_EINVAL, "--split '%s': parts sum to 0", split);
    /* Megatron's current rule: boundaries at round(cumulative fraction *
     * size), rounding half to even like Python's round() */
    double cum = 0;
    bounds[0] = 0;
    for (int i = 0; i < PTDP_NUM_SPLITS; i++) {
        cum += w[i];
        bounds[i + 1] = (int64_t)nearbyint(cum / sum * (double)size);
    }
    bounds[PTDP_NUM_SPLITS] = size;
    return PTDP_OK;
}

/* Fisher-Yates over a[0..n) with the stream (seed, name). */
static void ptdp__shuffle(int64_t *a, int64_t n, uint64_t seed, const char *name) {
    ptdp_rng_key key = ptdp_rng_key_make(seed, name);
    for (int64_t i = n - 1; i > 0; i--) {
        uint32_t r[4];
        ptdp_rng_u32x4(key, (uint64_t)i, r);
        uint64_t x = ((uint64_t)r[0] << 32) | r[1];
        int64_t j = (int64_t)(((unsigned __int128)x * (uint64_t)(i + 1)) >> 64);
        int64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static const char *const split_names[PTDP_NUM_SPLITS] = {"training", "validation", "test"};

/* A --data-path prefix whose PREFIX.idx or PREFIX.bin does not exist: one
 * message saying the flag takes the prefix, and the datasets that exist in
 * that directory, those starting with the given name first (up to 6). */
static int missing_prefix(const char *prefix) {
    char dir[4096], listed[1200] = "";
    snprintf(dir, sizeof dir, "%s", prefix);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? prefix + (slash - dir) + 1 : prefix;
    if (slash) *slash = 0;
    const char *where = slash ? (dir[0] ? dir : "/") : ".";
    int n = 0;
    size_t off = 0;
    for (int pass = 0; pass < 2; pass++) { /* 0: names starting with base, 1: the others */
        DIR *dh = opendir(where);
        for (struct dirent *e; dh && (e = readdir(dh)) && n < 6 && off < sizeof listed;) {
            size_t len = strlen(e->d_name);
            if (len <= 4 || strcmp(e->d_name + len - 4, ".idx")) continue;
            if ((strncmp(e->d_name, base, strlen(base)) == 0) != (pass == 0)) continue;
            off += (size_t)snprintf(listed + off, sizeof listed - off, "%s%s%s%.*s", n ? ", " : "",
                                    slash ? dir : "", slash ? "/" : "", (int)(len - 4), e->d_name);
            n++;
        }
        if (dh) closedir(dh);
    }
    return ptdp_errorf(
        PTDP_EIO,
        "--data-path %s: no dataset with that prefix (--data-path takes the prefix of "
        "PREFIX.bin and PREFIX.idx, without the extension, as `ptdp preprocess "
        "--output-prefix` writes them); %s%s",
        prefix, n ? "datasets in that directory: " : "no .idx files in that directory", listed);
}

static int64_t ptdp__split_tokens(const ptdp_idx_dataset *ds, int64_t lo, int64_t hi) {
    int64_t tokens = 0;
    for (int64_t i = lo; i < hi; i++) tokens += ptdp_idx_sequence_length(ds, i);
    return tokens;
}

/* A --split that works for this dataset, in its document counts (as weights
 * they reproduce these boundaries exactly): the boundaries of b moved by as
 * few documents as needed for the training part, and the validation part
 * when `valid`, to hold more than one token (a sample needs two). Takes
 * validation documents from the end of the training part while it keeps
 * enough, else from the test part. 0 when the dataset is too small. */
static int ptdp__suggest_split(const ptdp_idx_dataset *ds, const int64_t b[PTDP_NUM_SPLITS + 1],
                               int valid, char *out, size_t cap) {
    const int64_t n = b[PTDP_NUM_SPLITS];
    int64_t b1 = b[1], b2 = b[2];
    while (ptdp__split_tokens(ds, 0, b1) <= 1 && b1 < n)
        if (++b1 > b2) b2 = b1;
    while (valid && ptdp__split_tokens(ds, b1, b2) <= 1) {
        if (b1 > 1 && ptdp__split_tokens(ds, 0, b1 - 1) > 1)
            b1--;
        else if (b2 < n)
            b2++;
        else
            break;
    }
    if (ptdp__split_tokens(ds, 0, b1) <= 1 || (valid && ptdp__split_tokens(ds, b1, b2) <= 1))
        return 0;
    snprintf(out, cap, "%lld,%lld,%lld", (long long)b1, (long long)(b2 - b1), (long long)(n - b2));
    return 1;
}

/* The error for a split k that must provide `need` samples and holds no
 * more than one token: what it got, and a --split that works. */
static int ptdp__split_error(const ptdp_idx_dataset *ds, const char *split,
                             const int64_t b[PTDP_NUM_SPLITS + 1], int k, int64_t need, int64_t s,
                             int valid) {
    const int64_t docs = b[k + 1] - b[k], n = b[PTDP_NUM_SPLITS];
    char got[128], fix[256];
    if (docs == 0)
        snprintf(got, sizeof got, "none of the %lld documents", (long long)n);
    else
        snprintf(got, sizeof got, "%lld of the %lld documents, %lld tokens", (long long)docs,
                 (long long)n, (long long)ptdp__split_tokens(ds, b[k], b[k + 1]));
    char works[96];
    const char *off = k == PTDP_SPLIT_VALID
                          ? ", or skip validation with a 0 validation part (e.g. --split 100,0,0) "
                            "or --eval-iters 0"
                          : "";
    if (ptdp__suggest_split(ds, b, valid, works, sizeof works))
        snprintf(fix, sizeof fix,
                 "give it documents with --split %s (this dataset's document "
                 "counts)%s",
                 works, off);
    else
        snprintf(fix, sizeof fix, "the dataset is too small for a %s split%s",
                 valid ? "training and a validation" : "training", off);
    return ptdp_errorf(PTDP_ECONFIG,
                       "'%s': the %s split (part %d of --split %s) gets %s, too few for %lld "
                       "samples of %lld tokens; %s",
                       ptdp_idx_prefix(ds), split_names[k], k, split, got, (long long)need,
                       (long long)s + 1, fix);
}

/* Builds split k's indices over sequences [lo, hi); one holding at most one
 * token provides no samples (the caller has refused it where samples are
 * needed). */
static int ptdp__build_split(ptdp__gpt_split *sp, const ptdp_idx_dataset *ds, int64_t lo,
                             int64_t hi, int64_t need, int64_t s, uint64_t seed, int di, int k) {
    int64_t ndocs = hi - lo, tokens = ptdp__split_tokens(ds, lo, hi);
    if (tokens <= 1) return PTDP_OK;
    int64_t epochs = 1;
    if (need > 0)
        while (epochs * tokens < need * s + 1) epochs++;
    int separate = 0;
    int64_t sans_final = 0;
    if (epochs > 1) {
        sans_final = ((epochs - 1) * tokens - 1) / s;
        int64_t from_final = need - sans_final, per_epoch = (tokens - 1) / s;
        separate = from_final < (int64_t)(0.8 * (double)per_epoch);
    }
    sp->n_docidx = epochs * ndocs;
    sp->n_samples = (epochs * tokens - 1) / s;
    sp->doc_index = malloc((size_t)sp->n_docidx * sizeof(int64_t));
    sp->sample_idx = malloc((size_t)(sp->n_samples + 1) * 2 * sizeof(int64_t));
    sp->shuffle = malloc((size_t)sp->n_samples * sizeof(int64_t));
    if (!sp->doc_index || !sp->sample_idx || !sp->shuffle)
        return ptdp_errorf(PTDP_ENOMEM, "out of memory building sample indices");
    for (int64_t e = 0; e < epochs; e++)
        for (int64_t i = 0; i < ndocs; i++) sp->doc_index[e * ndocs + i] = lo + i;
    char name[96];
    snprintf(name, sizeof name, "gpt_data/%d/%d/doc_index", di, k);
    if (separate) {
        ptdp__shuffle(sp->doc_index, (epochs - 1) * ndocs, seed, name);
        snprintf(name, sizeof name, "gpt_data/%d/%d/doc_index_final", di, k);
        ptdp__shuffle(sp->doc_index + (epochs - 1) * ndocs, ndocs, seed, name);
    } else {
        ptdp__shuffle(sp->doc_index, sp->n_docidx, seed, name);
    }
    /* helpers.cpp build_sample_idx: walk s+1 tokens, the last one shared */
    int64_t pos = 0, off = 0;
    sp->sample_idx[0] = 0;
    sp->sample_idx[1] = 0;
    for (int64_t i = 1; i <= sp->n_samples; i++) {
        int64_t remaining = s + 1;
        while (remaining != 0) {
            int64_t len = ptdp_idx_sequence_length(ds, sp->doc_index[pos]) - off;
            remaining -= len;
            if (remaining <= 0) {
                off += remaining + len - 1;
                remaining = 0;
            } else {
                pos++;
                off = 0;
                PTDP_ASSERT(pos < sp->n_docidx);
            }
        }
        sp->sample_idx[2 * i] = pos;
        sp->sample_idx[2 * i + 1] = off;
    }
    for (int64_t i = 0; i < sp->n_samples; i++) sp->shuffle[i] = i;
    snprintf(name, sizeof name, "gpt_data/%d/%d/shuffle", di, k);
    if (separate && sans_final < sp->n_samples) {
        ptdp__shuffle(sp->shuffle, sans_final, seed, name);
        snprintf(name, sizeof name, "gpt_data/%d/%d/shuffle_final", di, k);
        ptdp__shuffle(sp->shuffle + sans_final, sp->n_samples - sans_final, seed, name);
    } else {
        ptdp__shuffle(sp->shuffle, sp->n_samples, seed, name);
    }
    return PTDP_OK;
}

static int ptdp__check_tokens(const ptdp_idx_dataset *ds, int64_t vocab) {
    int32_t buf[4096];
    for (int64_t q = 0; q < ptdp_idx_num_sequences(ds); q++) {
        int64_t len = ptdp_idx_sequence_length(ds, q);
        for (int64_t o = 0; o < len; o += 4096) {
            int64_t c = len - o < 4096 ? len - o : 4096;
            int rc = ptdp_idx_read(ds, q, o, c, buf);
            if (rc) return rc;
            for (int64_t i = 0; i < c; i++)
                if (buf[i] < 0 || buf[i] >= vocab)
                    return ptdp_errorf(PTDP_EINVAL,
                                       "'%s': sequence %lld holds token %d, outside "
                                       "the vocabulary of %lld",
                                       ptdp_idx_prefix(ds), (long long)q, buf[i], (long long)vocab);
        }
    }
    return PTDP_OK;
}

void ptdp_gpt_data_free(ptdp_gpt_data *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) {
        for (int k = 0; k < PTDP_NUM_SPLITS; k++) {
            free(d->sp[i][k].doc_index);
            free(d->sp[i][k].sample_idx);
            free(d->sp[i][k].shuffle);
        }
        ptdp_idx_close(d->ds[i]);
    }
    for (int k = 0; k < PTDP_NUM_SPLITS; k++) {
        free(d->blend_ds[k]);
        free(d->blend_sample[k]);
    }
    free(d);
}

int ptdp_gpt_data_open(ptdp_gpt_data **out, const ptdp_gpt_data_params *p) {
    *out = NULL;
    if (p->num_paths < 1 || p->num_paths > PTDP_DATA_MAX_PATHS)
        return ptdp_errorf(PTDP_EINVAL, "--data-path: %d datasets (need 1..%d)", p->num_paths,
                           PTDP_DATA_MAX_PATHS);
    if (p->seq_length < 1)
        return ptdp_errorf(PTDP_EINVAL, "--seq-length must be >= 1, got %lld",
                           (long long)p->seq_length);
    double wsum = 0;
    for (int i = 0; i < p->num_paths; i++) {
        if (p->num_paths > 1 && (!(p->weights[i] >= 0) || !isfinite(p->weights[i])))
            return ptdp_errorf(PTDP_EINVAL, "--data-path: weight %g is not >= 0", p->weights[i]);
        wsum += p->num_paths > 1 ? p->weights[i] : 1.0;
    }
    if (!(wsum > 0)) return ptdp_errorf(PTDP_EINVAL, "--data-path: weights sum to 0");
    ptdp_gpt_data *d = calloc(1, sizeof(*d));
    if (!d) return ptdp_errorf(PTDP_ENOMEM, "out of memory");
    d->seq_length = p->seq_length;
    d->n = p->num_paths;
    int blended = d->n > 1, rc = PTDP_OK;
    int64_t bounds[PTDP_DATA_MAX_PATHS][PTDP_NUM_SPLITS + 1];
    double part[PTDP_NUM_SPLITS] = {0, 0, 0}; /* --split's weights */
    const char *split = p->split ? p->split : "969,30,1";
    for (int i = 0; i < d->n && !rc; i++) {
        {
            char idx[4200], bin[4200];
            snprintf(idx, sizeof idx, "%s.idx", p->prefixes[i]);
            snprintf(bin, sizeof bin, "%s.bin", p->prefixes[i]);
            rc = access(idx, F_OK) || access(bin, F_OK) ? missing_prefix(p->prefixes[i]) : PTDP_OK;
        }
        if (!rc) rc = ptdp_idx_open(&d->ds[i], p->prefixes[i]);
        if (!rc && p->vocab_size > 0) rc = ptdp__check_tokens(d->ds[i], p->vocab_size);
        if (!rc) rc = ptdp__split_bounds(split, ptdp_idx_num_sequences(d->ds[i]), bounds[i], part);
    }
    /* the blend's weights per split: the flags', or each split's samples in
     * one epoch (an unweighted list; equal weights where no dataset has any,
     * so that the split's error names a dataset) */
    for (int k = 0; k < PTDP_NUM_SPLITS && !rc; k++) {
        double sum = 0;
        for (int i = 0; i < d->n; i++) {
            double w = blended ? p->weights[i] / wsum : 1.0;
            if (p->by_size) {
                int64_t tokens = 0;
                for (int64_t j = bounds[i][k]; j < bounds[i][k + 1]; j++)
                    tokens += ptdp_idx_sequence_length(d->ds[i], j);
                w = tokens > 1 ? (double)((tokens - 1) / p->seq_length) : 0.0;
            }
            d->weights[k][i] = w;
            sum += w;
        }
        for (int i = 0; i < d->n; i++)
            d->weights[k][i] = sum > 0 ? d->weights[k][i] / sum : 1.0 / d->n;
    }
    /* samples from a split with no tokens: refused, except for the test split
     * (Megatron evaluates it only where it has documents) and a validation
     * split that --split gives a 0 part (no validation, as in Megatron) */
    const int valid = p->num_samples[PTDP_SPLIT_VALID] > 0 && part[PTDP_SPLIT_VALID] > 0;
    for (int i = 0; i < d->n && !rc; i++)
        for (int k = 0; k < PTDP_NUM_SPLITS && !rc; k++) {
            int64_t need = p->num_samples[k];
            if (blended) {
                need = (int64_t)ceil((double)need * d->weights[k][i] * 1.005);
                if (need == 0) continue; /* not used by the blend */
            }
            if (need > 0 && (k == PTDP_SPLIT_TRAIN || (k == PTDP_SPLIT_VALID && valid)) &&
                ptdp__split_tokens(d->ds[i], bounds[i][k], bounds[i][k + 1]) <= 1)
                rc = ptdp__split_error(d->ds[i], split, bounds[i], k, need, p->seq_length, valid);
            else
                rc = ptdp__build_split(&d->sp[i][k], d->ds[i], bounds[i][k], bounds[i][k + 1], need,
                                       p->seq_length, p->seed, i, k);
        }
    for (int k = 0; blended && k < PTDP_NUM_SPLITS && !rc; k++) {
        int64_t n = p->num_samples[k];
        for (int i = 0; i < d->n && k == PTDP_SPLIT_TEST; i++)
            if (d->sp[i][k].n_samples == 0) n = 0; /* a part without test documents: no test */
        if (k == PTDP_SPLIT_VALID && !(part[k] > 0)) n = 0; /* --split gives it nothing */
        d->blend_n[k] = n;
        if (n == 0) continue;
        d->blend_ds[k] = malloc((size_t)n);
        d->blend_sample[k] = malloc((size_t)n * sizeof(int64_t));
        if (!d->blend_ds[k] || !d->blend_sample[k]) {
            rc = ptdp_errorf(PTDP_ENOMEM, "out of memory building the blending index");
            break;
        }
        int64_t cur[PTDP_DATA_MAX_PATHS] = {0};
        for (int64_t i = 0; i < n; i++) {
            double x = i > 1 ? (double)i : 1.0;
            int best = -1;
            double best_err = 0;
            /* Megatron's rule, except that a dataset of weight 0 never wins a
             * tie (at sample 1 every error is 0): it was not built (need 0) */
            for (int j = 0; j < d->n; j++) {
                double e = d->weights[k][j] * x - (double)cur[j];
                if (d->weights[k][j] > 0 && (best < 0 || e > best_err)) {
                    best_err = e;
                    best = j;
                }
            }
            PTDP_ASSERT(best >= 0); /* the weights sum to 1 */
            d->blend_ds[k][i] = (uint8_t)best;
            d->blend_sample[k][i] = cur[best]++;
        }
    }
    if (rc) {
        ptdp_gpt_data_free(d);
        return rc;
    }
    *out = d;
    return PTDP_OK;
}

int64_t ptdp_gpt_data_num_samples(const ptdp_gpt_data *d, int split) {
    PTDP_ASSERT(split >= 0 && split < PTDP_NUM_SPLITS);
    return d->n > 1 ? d->blend_n[split] : d->sp[0][split].n_samples;
}

static int ptdp__read_sample(const ptdp_gpt_data *d, int di, int split, int64_t idx, int32_t *out) {
    const ptdp__gpt_split *sp = &d->sp[di][split];
    if (sp->n_samples == 0)
        return ptdp_errorf(PTDP_EINVAL, "'%s': split %d has no samples", ptdp_idx_prefix(d->ds[di]),
                           split);
    int64_t j = sp->shuffle[idx % sp->n_samples];
    int64_t pf = sp->sample_idx[2 * j], of = sp->sample_idx[2 * j + 1];
    int64_t pl = sp->sample_idx[2 * j + 2], ol = sp->sample_idx[2 * j + 3];
    const ptdp_idx_dataset *ds = d->ds[di];
    int64_t n = 0;
    for (int64_t pos = pf; pos <= pl; pos++) {
        int64_t seq = sp->doc_index[pos];
        int64_t a = pos == pf ? of : 0;
        int64_t b = pos == pl ? ol + 1 : ptdp_idx_sequence_length(ds, seq);
        int rc = ptdp_idx_read(ds, seq, a, b - a, out + n);
        if (rc) return rc;
        n += b - a;
    }
    PTDP_ASSERT(n == d->seq_length + 1);
    return PTDP_OK;
}

int ptdp_gpt_data_sample(const ptdp_gpt_data *d, int split, int64_t idx, int32_t *tokens) {
    if (split < 0 || split >= PTDP_NUM_SPLITS)
        return ptdp_errorf(PTDP_EINVAL, "split %d does not exist", split);
    int64_t n = ptdp_gpt_data_num_samples(d, split);
    if (n == 0) return ptdp_errorf(PTDP_EINVAL, "split %d has no samples", split);
    idx %= n;
    if (idx < 0) idx += n;
    if (d->n == 1) return ptdp__read_sample(d, 0, split, idx, tokens);
    return ptdp__read_sample(d, d->blend_ds[split][idx], split, d->blend_sample[split][idx],
                             tokens);
}
