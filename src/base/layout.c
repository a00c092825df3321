/* layout.c - which global transformer layers each virtual pipeline stage
 * holds: the even split, Megatron's uneven first/last stages, the
 * embedding and loss counted as layers, and the explicit layout string
 * (--pipeline-model-parallel-layout). ptdp_stage_layout_range is the one
 * place that turns a layout into layer ranges; the trainer, the memory
 * model, the planner and the tests all ask it. A layout is part of the
 * job description (base/job.h).
 *
 * Deliberately not here: deriving v from the flags (cli/args.c), and MTP
 * ('m' in a layout string: ptdp has no multi-token prediction). Pure: no
 * MPI, no tensors; parsing allocates one temporary string. */
#include <stdlib.h>
#include <string.h>

#include "base/job.h"

#define FLAG "--pipeline-model-parallel-layout"
#define MAX_EXPANDED ((size_t)1 << 20) /* characters after unrolling repetitions */

/* Appends n copies of src[0..len) to out (cap MAX_EXPANDED); 0 when too long. */
static int repeat(char *out, size_t *pos, const char *src, size_t len, long n) {
    for (long k = 0; k < n; k++) {
        if (*pos + len >= MAX_EXPANDED) return 0;
        memcpy(out + *pos, src, len);
        *pos += len;
    }
    return 1;
}

/* Reads "*n" at s (n decimal, 0 .. 1e6); returns characters consumed or 0. */
static size_t read_times(const char *s, long *n) {
    if (s[0] != '*' || s[1] < '0' || s[1] > '9') return 0;
    char *end;
    *n = strtol(s + 1, &end, 10);
    if (*n > 1000000) return 0;
    return (size_t)(end - s);
}

/* Megatron's unrolling: commas dropped, then "(X)*n" (X without parentheses)
 * becomes n copies of X, then any "c*n" n copies of c. */
static int expand(const char *str, char **out) {
    char *a = malloc(MAX_EXPANDED), *b = malloc(MAX_EXPANDED);
    if (!a || !b) {
        free(a);
        free(b);
        return ptdp_errorf(PTDP_ENOMEM, "out of memory parsing " FLAG);
    }
    size_t n = 0;
    for (const char *s = str; *s; s++)
        if (*s != ',' && n + 1 < MAX_EXPANDED) a[n++] = *s;
    a[n] = 0;
    int rc = PTDP_OK;
    size_t m = 0;
    for (size_t i = 0; rc == PTDP_OK && i < n;) {
        if (a[i] == '(') {
            const char *close = strchr(a + i + 1, ')'), *open = strchr(a + i + 1, '(');
            long times;
            size_t k = close ? read_times(close + 1, &times) : 0;
            if (!close || close == a + i + 1 || (open && open < close) || !k)
                rc = ptdp_errorf(PTDP_EINVAL,
                                 FLAG " '%s': '(' must open a group like (t|t)*2: a non-empty "
                                      "group without nested parentheses, then ')*n'",
                                 str);
            else if (!repeat(b, &m, a + i + 1, (size_t)(close - (a + i + 1)), times))
                rc = ptdp_errorf(PTDP_EINVAL, FLAG " '%s' unrolls to more than %zu characters", str,
                                 MAX_EXPANDED);
            i = (size_t)(close ? close - a : (ptrdiff_t)n) + 1 + k;
        } else {
            if (m + 1 >= MAX_EXPANDED)
                rc = ptdp_errorf(PTDP_EINVAL, FLAG " '%s' is too long", str);
            else
                b[m++] = a[i++];
        }
    }
    b[m] = 0;
    n = 0;
    for (size_t i = 0; rc == PTDP_OK && i < m;) {
        long times;
        size_t k = i + 1 < m ? read_times(b + i + 1, &times) : 0;
        if (k) {
            if (!repeat(a, &n, b + i, 1, times))
                rc = ptdp_errorf(PTDP_EINVAL, FLAG " '%s' unrolls to more than %zu characters", str,
                                 MAX_EXPANDED);
            i += 1 + k;
        } else {
            a[n++] = b[i++];
        }
    }
    a[n] = 0;
    free(b);
    if (rc != PTDP_OK) {
        free(a);
        return rc;
    }
    *out = a;
    return PTDP_OK;
}

int ptdp_stage_layout_parse(const char *str, ptdp_stage_layout *L) {
    memset(L, 0, sizeof *L);
    char *x = NULL;
    int rc = expand(str, &x);
    if (rc != PTDP_OK) return rc;
    int stage = 0, ne = 0, nl = 0;
    const size_t n = strlen(x);
    for (size_t i = 0; rc == PTDP_OK && i <= n; i++) {
        const char ch = x[i];
        if (ch == '|' || ch == 0) {
            if (++stage > PTDP_LAYOUT_MAX_STAGES)
                rc = ptdp_errorf(PTDP_EINVAL, FLAG " '%s' has more than %d stages", str,
                                 PTDP_LAYOUT_MAX_STAGES);
        } else if (ch == 't') {
            L->stage_layers[stage]++;
        } else if (ch == 'E') {
            ne++;
            if (i != 0)
                rc = ptdp_errorf(PTDP_EINVAL,
                                 FLAG " '%s': the embedding E must be the first entry of the "
                                      "first stage (and appear once)",
                                 str);
        } else if (ch == 'L') {
            nl++;
            if (i != n - 1)
                rc = ptdp_errorf(PTDP_EINVAL,
                                 FLAG " '%s': the loss L must be the last entry of the last "
                                      "stage (and appear once)",
                                 str);
        } else if (ch == 'm') {
            rc = ptdp_errorf(PTDP_EUNSUPPORTED,
                             FLAG " '%s': 'm' (multi-token prediction layers) is not supported "
                                  "by ptdp; use E, t and L",
                             str);
        } else {
            rc = ptdp_errorf(PTDP_EINVAL,
                             FLAG " '%s': unknown character '%c'; a layout uses E (embedding), "
                                  "t (transformer layer), L (loss), '|' between stages, "
                                  "x*n and (..)*n repetitions",
                             str, ch);
        }
    }
    if (rc == PTDP_OK && (ne != 1 || nl != 1))
        rc = ptdp_errorf(PTDP_EINVAL,
                         FLAG " '%s': the embedding E (first) and the loss L (last) must each "
                              "appear exactly once, e.g. \"E|t*3|t*3|t*2,L\"",
                         str);
    free(x);
    if (rc != PTDP_OK) {
        memset(L, 0, sizeof *L);
        return rc;
    }
    L->nstages = stage;
    return PTDP_OK;
}

int ptdp_stage_layout_is_even(const ptdp_stage_layout *L) {
    return !L || (!L->first && !L->last && !L->embedding && !L->loss && !L->nstages);
}

/* Transformer layers of virtual stage k (assumes a checked layout). */
static int64_t stage_count(const ptdp_stage_layout *L, int64_t l, int p, int v, int k) {
    const int r = k % p;
    if (ptdp_stage_layout_is_even(L)) return l / ((int64_t)p * v);
    if (L->nstages) return L->stage_layers[k];
    if (L->first || L->last) {
        if (r == 0 && L->first) return L->first / v;
        if (r == p - 1 && L->last) return L->last / v;
        const int64_t mid_stages = p - (L->first > 0) - (L->last > 0);
        return (l - L->first - L->last) / mid_stages / v;
    }
    const int64_t per = (l + L->embedding + L->loss) / ((int64_t)p * v);
    return per - (k == 0 && L->embedding) - (k == p * v - 1 && L->loss);
}

void ptdp_stage_layout_range(const ptdp_stage_layout *L, int64_t l, int p, int v, int stage,
                             int64_t *begin, int64_t *end) {
    PTDP_ASSERT(stage >= 0 && stage < p * v);
    int64_t b = 0;
    for (int k = 0; k < stage; k++) b += stage_count(L, l, p, v, k);
    *begin = b;
    *end = b + stage_count(L, l, p, v, stage);
}

static int check_first_last(const ptdp_stage_layout *L, int64_t l, int p, int v) {
    if (p < 2)
        return ptdp_errorf(PTDP_ECONFIG, "--decoder-first/last-pipeline-num-layers need "
                                         "--pipeline-model-parallel-size > 1");
    const char *names[2] = {"--decoder-first-pipeline-num-layers",
                            "--decoder-last-pipeline-num-layers"};
    const int64_t n[2] = {L->first, L->last};
    for (int i = 0; i < 2; i++)
        if (n[i] && n[i] % v)
            return ptdp_errorf(PTDP_ECONFIG,
                               "%s %lld is not divisible by the virtual pipeline size %d (the "
                               "rank's layers are split into v model chunks)",
                               names[i], (long long)n[i], v);
    const int64_t rest = l - L->first - L->last, mid = p - (L->first > 0) - (L->last > 0);
    if (rest < 0)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--decoder-first/last-pipeline-num-layers (%lld, %lld) add up to more "
                           "than --num-layers %lld",
                           (long long)L->first, (long long)L->last, (long long)l);
    /* the ranks whose layers the flags leave to the split: "pipeline rank 1",
     * "pipeline ranks 1-2" (neither the first rank, when its count is given,
     * nor the last) */
    char others[96];
    const int lo = L->first > 0, hi = p - 1 - (L->last > 0);
    if (mid == 1)
        snprintf(others, sizeof others, "pipeline rank %d", lo);
    else
        snprintf(others, sizeof others, "the %lld pipeline ranks %d-%d", (long long)mid, lo, hi);
    if (rest > 0 && mid == 0)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--decoder-first/last-pipeline-num-layers (%lld, %lld) leave %lld of "
                           "--num-layers %lld to no pipeline rank (with p = %d both ranks have "
                           "their count); make them add up to --num-layers",
                           (long long)L->first, (long long)L->last, (long long)rest, (long long)l,
                           p);
    if (rest == 0 && mid > 0 && L->first && L->last)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--decoder-first/last-pipeline-num-layers (%lld, %lld) take all "
                           "--num-layers %lld and leave none for %s; give them fewer",
                           (long long)L->first, (long long)L->last, (long long)l, others);
    if (rest == 0 && mid > 0)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--decoder-%s-pipeline-num-layers %lld takes all --num-layers %lld and "
                           "leaves none for %s; give it fewer",
                           L->first ? "first" : "last", (long long)(L->first ? L->first : L->last),
                           (long long)l, others);
    if (mid == 1 && rest % v)
        return ptdp_errorf(PTDP_ECONFIG,
                           "the %lld layers --decoder-first/last-pipeline-num-layers leave for %s "
                           "must split evenly into its v = %d model chunks",
                           (long long)rest, others, v);
    if (mid > 1 && (rest % mid || (rest / mid) % v))
        return ptdp_errorf(PTDP_ECONFIG,
                           "the %lld layers --decoder-first/last-pipeline-num-layers leave for %s "
                           "must split evenly over them%s",
                           (long long)rest, others,
                           v > 1 ? " and then into v model chunks each" : "");
    return PTDP_OK;
}

int ptdp_stage_layout_check(const ptdp_stage_layout *L, int64_t l, int p, int v) {
    const int64_t stages = (int64_t)p * v;
    if (ptdp_stage_layout_is_even(L)) {
        if (l % stages)
            return ptdp_errorf(PTDP_ECONFIG,
                               "--num-layers %lld is not divisible by --pipeline-model-parallel-"
                               "size %d x virtual stages %d; give an uneven split with "
                               "--decoder-first/last-pipeline-num-layers or "
                               "--pipeline-model-parallel-layout",
                               (long long)l, p, v);
        return PTDP_OK;
    }
    const int fl = L->first || L->last, acc = L->embedding || L->loss;
    if (L->nstages && (fl || acc))
        return ptdp_errorf(PTDP_ECONFIG,
                           "--pipeline-model-parallel-layout cannot be combined with "
                           "--decoder-first/last-pipeline-num-layers or "
                           "--account-for-embedding/loss-in-pipeline-split; give one");
    if (fl && acc)
        return ptdp_errorf(PTDP_ECONFIG,
                           "--decoder-first/last-pipeline-num-layers cannot be combined with "
                           "--account-for-embedding/loss-in-pipeline-split; give one");
    if (L->nstages) {
        if (L->nstages != stages)
            return ptdp_errorf(PTDP_ECONFIG,
                               "--pipeline-model-parallel-layout has %d stages; it needs "
                               "--pipeline-model-parallel-size %d x virtual stages %d = %lld",
                               L->nstages, p, v, (long long)stages);
        int64_t sum = 0;
        for (int k = 0; k < L->nstages; k++) {
            sum += L->stage_layers[k];
            if (!L->stage_layers[k] && k != 0 && k != L->nstages - 1)
                return ptdp_errorf(PTDP_ECONFIG,
                                   "--pipeline-model-parallel-layout: stage %d is empty; ptdp "
                                   "needs a transformer layer in every stage but the first and "
                                   "the last (which hold E and L)",
                                   k);
        }
        if (sum != l)
            return ptdp_errorf(PTDP_ECONFIG,
                               "--pipeline-model-parallel-layout has %lld transformer layers t; "
                               "--num-layers is %lld",
                               (long long)sum, (long long)l);
        return PTDP_OK;
    }
    if (fl) return check_first_last(L, l, p, v);
    const int64_t total = l + L->embedding + L->loss;
    if (total % p || (total / p) % v)
        return ptdp_errorf(PTDP_ECONFIG,
                           "with --account-for-embedding/loss-in-pipeline-split, --num-layers "
                           "%lld + %d must be divisible by --pipeline-model-parallel-size %d x "
                           "virtual stages %d",
                           (long long)l, L->embedding + L->loss, p, v);
    return PTDP_OK;
}

char *ptdp_stage_layout_str(const ptdp_stage_layout *L, int64_t l, int p, int v, char *buf,
                            size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int k = 0; k < p * v && n + 32 < cap; k++) {
        int64_t b, e;
        ptdp_stage_layout_range(L, l, p, v, k, &b, &e);
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld",
                              k == 0  ? ""
                              : k % p ? " "
                                      : " | ",
                              (long long)(e - b));
    }
    return buf;
}
