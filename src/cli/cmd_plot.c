/* cmd_plot.c - `ptdp plot LOG.jsonl [LOG2.jsonl ...] -o FILE.svg`: draws
 * the --log-jsonl files of training runs (train/log.c writes them) as one SVG
 * (src/plan/chart.c): training and validation loss, learning rate, gradient
 * norm and tokens/s against the iteration, runs overlaid and labelled by file
 * name. Lines with "final":true (the end-of-training validation and test
 * losses) are circles; values a line leaves out (a skipped iteration's grad
 * norm) or writes as null are left out of the curves, and so are the nan/inf
 * of logs from before ptdp wrote only valid JSON. A log that goes back in
 * iterations (a run resumed from a checkpoint by a ptdp that kept the
 * records after it) is drawn as one run: each iteration once, the later
 * record winning. */
#define _POSIX_C_SOURCE 200809L /* getline */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/cli.h"
#include "plan/plan.h"

/* The columns of one run: training points (x: iteration), validation
 * points, end-of-training evaluations. */
enum { IT, LOSS, GNORM, LR, TPS, VAL_IT, VAL, FIN_IT, FIN, NCOL };

typedef struct {
    const char *path, *label;
    double *col[NCOL];
    int n[NCOL], cap[NCOL];
} run;

static int push(run *r, int c, double v) {
    if (r->n[c] == r->cap[c]) {
        int cap = r->cap[c] ? 2 * r->cap[c] : 256;
        double *p = realloc(r->col[c], sizeof(double) * (size_t)cap);
        if (!p) return ptdp_errorf(PTDP_ENOMEM, "out of memory reading %s", r->path);
        r->col[c] = p;
        r->cap[c] = cap;
    }
    r->col[c][r->n[c]++] = v;
    return PTDP_OK;
}

/* 1 with *out (NAN for null), 0 when absent, -1 when not a number. */
static int number(const cJSON *o, const char *key, double *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!it) return 0;
    if (cJSON_IsNull(it))
        *out = NAN;
    else if (cJSON_IsNumber(it))
        *out = it->valuedouble;
    else
        return -1;
    return 1;
}

/* A training line at iteration `it` that is not past the last one: the run
 * restarted from a checkpoint there, so the points from `it` on (training
 * and validation) give way to the new ones. */
static void restart_at(run *r, double it) {
    static const int xcol[NCOL] = {IT, IT, IT, IT, IT, VAL_IT, VAL_IT, FIN_IT, FIN_IT};
    int keep[NCOL];
    for (int c = 0; c < NCOL; c++) {
        const int x = xcol[c];
        int k = r->n[x];
        while (k > 0 && r->col[x][k - 1] >= it) k--;
        keep[c] = k;
    }
    for (int c = 0; c < NCOL; c++) r->n[c] = keep[c];
}

/* Old logs printed non-finite values as nan/inf, which JSON lacks: copies s to
 * out (room for 2 x strlen(s) + 1) with them as null (left out of the
 * curves). */
static void nonfinite_to_null(const char *s, char *out) {
    static const char *const bad[] = {":-nan", ":nan", ":-inf", ":inf"};
    while (*s) {
        int k = 0;
        size_t n = 0;
        for (; k < 4; k++) {
            n = strlen(bad[k]);
            if (!strncmp(s, bad[k], n) && (s[n] == ',' || s[n] == '}')) break;
        }
        if (k < 4) {
            memcpy(out, ":null", 5);
            out += 5;
            s += n;
        } else {
            *out++ = *s++;
        }
    }
    *out = 0;
}

static int read_run(run *r) {
    FILE *f = fopen(r->path, "r");
    if (!f) return ptdp_errorf(PTDP_EIO, "%s: cannot open", r->path);
    char *line = NULL, *text = NULL;
    size_t cap = 0, text_cap = 0;
    int rc = PTDP_OK;
    long lineno = 0;
    while (rc == PTDP_OK && getline(&line, &cap, f) >= 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == strlen(line)) continue;
        if (2 * strlen(line) + 1 > text_cap) {
            free(text);
            text_cap = 2 * strlen(line) + 1;
            if (!(text = malloc(text_cap))) {
                rc = ptdp_errorf(PTDP_ENOMEM, "out of memory reading %s", r->path);
                break;
            }
        }
        nonfinite_to_null(line, text);
        cJSON *o = cJSON_Parse(text);
        double it, v[4] = {NAN, NAN, NAN, NAN};
        static const char *const train_keys[] = {"lm_loss", "grad_norm", "lr", "tokens_per_s"};
        if (!o || !cJSON_IsObject(o)) {
            rc = ptdp_errorf(PTDP_EFORMAT, "%s:%ld: not a JSON object (a --log-jsonl line)",
                             r->path, lineno);
        } else if (number(o, "iteration", &it) != 1 || !isfinite(it)) {
            rc = ptdp_errorf(PTDP_EFORMAT, "%s:%ld: no number \"iteration\"", r->path, lineno);
        } else {
            const int final = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "final"));
            double loss = NAN;
            int has_val = number(o, "val_loss", &loss), has_test = 0;
            if (has_val == 0) has_test = number(o, "test_loss", &loss);
            /* a non-finite evaluation loss is left out of its line */
            if (has_val == 0 && has_test == 0)
                has_val = cJSON_GetObjectItemCaseSensitive(o, "val_ppl") ||
                          cJSON_GetObjectItemCaseSensitive(o, "test_ppl");
            int has_train = 0;
            for (int k = 0; k < 4; k++) {
                int got = number(o, train_keys[k], &v[k]);
                if (got < 0) {
                    rc = ptdp_errorf(PTDP_EFORMAT, "%s:%ld: \"%s\" is not a number", r->path,
                                     lineno, train_keys[k]);
                    break;
                }
                has_train |= k == 0 && got;
            }
            if (rc) {
            } else if (has_val < 0 || has_test < 0) {
                rc = ptdp_errorf(PTDP_EFORMAT, "%s:%ld: \"%s_loss\" is not a number", r->path,
                                 lineno, has_val < 0 ? "val" : "test");
            } else if (has_train) {
                if (r->n[IT] && it <= r->col[IT][r->n[IT] - 1]) restart_at(r, it);
                rc = push(r, IT, it);
                for (int k = 0; k < 4 && rc == PTDP_OK; k++) rc = push(r, LOSS + k, v[k]);
            } else if (has_val || has_test) {
                rc = push(r, final ? FIN_IT : VAL_IT, it);
                if (rc == PTDP_OK) rc = push(r, final ? FIN : VAL, loss);
            } else {
                rc = ptdp_errorf(PTDP_EFORMAT,
                                 "%s:%ld: neither \"lm_loss\", \"val_loss\" nor \"test_loss\"",
                                 r->path, lineno);
            }
        }
        cJSON_Delete(o);
    }
    free(line);
    free(text);
    fclose(f);
    if (rc == PTDP_OK && r->n[IT] == 0)
        rc = ptdp_errorf(PTDP_EFORMAT, "%s: no training lines (\"lm_loss\") to plot", r->path);
    return rc;
}

static void usage(FILE *f) {
    fprintf(f, "usage: ptdp plot LOG.jsonl [LOG2.jsonl ...] -o FILE.svg\n\n"
               "Draws --log-jsonl files of `ptdp train` as one SVG: training and validation loss,\n"
               "learning rate, gradient norm and tokens/s against the iteration; several runs\n"
               "are overlaid in different colours, labelled by file name. End-of-training\n"
               "evaluations (\"final\":true) are circles. Where a log goes back in iterations\n"
               "(a run resumed from a checkpoint), each iteration is drawn once, the later\n"
               "record winning.\n\n"
               "  -o, --output FILE.svg    the drawing to write (required; SVG, so the name\n"
               "                           must end in .svg)\n");
}

int ptdp_cmd_plot(int argc, char **argv) {
    const char *out = NULL;
    int nruns = 0, status = 0;
    run *runs = calloc((size_t)argc + 1, sizeof *runs);
    if (!runs) {
        ptdp_log_error("out of memory");
        return 1;
    }
    for (int i = 0; i < argc && !status; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            free(runs);
            return 0;
        } else if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
            if (i + 1 >= argc) {
                ptdp_log_error("ptdp plot: %s needs a file name", argv[i]);
                status = 2;
            } else {
                out = argv[++i];
            }
        } else if (argv[i][0] == '-' && argv[i][1]) {
            ptdp_log_error("ptdp plot: unknown flag '%s' (see ptdp plot --help)", argv[i]);
            status = 2;
        } else {
            runs[nruns++].path = argv[i];
        }
    }
    if (!status && (!nruns || !out)) {
        ptdp_log_error("ptdp plot: give %s (see ptdp plot --help)",
                       !nruns ? "at least one LOG.jsonl file" : "-o FILE.svg");
        status = 2;
    }
    /* the drawing is SVG: a .png or .pdf name would hold SVG text */
    const char *dot = out ? strrchr(out, '.') : NULL;
    if (!status && (!dot || strchr(dot, '/') || strcasecmp(dot, ".svg"))) {
        ptdp_log_error("ptdp plot: -o %s: ptdp plot writes SVG; give a name ending in .svg "
                       "(convert it with e.g. `rsvg-convert -o X.png X.svg` for a PNG)",
                       out);
        status = 2;
    }
    for (int r = 0; r < nruns && !status; r++) {
        int rc = read_run(&runs[r]);
        if (rc) {
            ptdp_log_error("%s", ptdp_last_error());
            status = rc == PTDP_EIO ? 1 : 2;
        }
        /* label: the file name, or the whole path when two runs share a name */
        const char *base = strrchr(runs[r].path, '/');
        runs[r].label = base ? base + 1 : runs[r].path;
    }
    for (int r = 0; r < nruns; r++)
        for (int q = 0; q < nruns; q++)
            if (q != r && !strcmp(runs[q].label, runs[r].label)) runs[r].label = runs[r].path;
    /* five curves per run (training loss, validation loss, lr, grad norm,
     * tokens/s) and the end-of-training circles */
    ptdp_chart_series *ser = calloc((size_t)(6 * nruns + 1), sizeof *ser);
    const char **labels = calloc((size_t)nruns + 1, sizeof *labels);
    char(*names)[600] = calloc((size_t)(6 * nruns + 1), sizeof *names);
    if (!status && (!ser || !labels || !names)) {
        ptdp_log_error("out of memory");
        status = 1;
    }
    if (!status) {
        static const char *const what[6] = {
            "lm loss",       "validation loss", "end-of-training loss",
            "learning rate", "grad norm",       "tokens/s"};
        for (int r = 0; r < nruns; r++) {
            run *R = &runs[r];
            labels[r] = R->label;
            const struct {
                int x, y, dashed, markers;
            } cols[6] = {{IT, LOSS, 0, 0}, {VAL_IT, VAL, 1, 0}, {FIN_IT, FIN, 0, 1},
                         {IT, LR, 0, 0},   {IT, GNORM, 0, 0},   {IT, TPS, 0, 0}};
            for (int k = 0; k < 6; k++) {
                /* series k of run r sits at k*nruns + r: the panels take runs in order */
                ptdp_chart_series *s = &ser[k * nruns + r];
                snprintf(names[k * nruns + r], sizeof names[0], "%s: %s", R->label, what[k]);
                *s = (ptdp_chart_series){.name = names[k * nruns + r],
                                         .n = R->n[cols[k].y],
                                         .x = R->col[cols[k].x],
                                         .y = R->col[cols[k].y],
                                         .run = r,
                                         .dashed = cols[k].dashed,
                                         .markers_only = cols[k].markers};
            }
        }
        const ptdp_chart_panel panels[4] = {
            {.title = "loss (training, validation)", .nseries = 3 * nruns, .series = ser},
            {.title = "learning rate", .nseries = nruns, .series = ser + 3 * nruns},
            {.title = "gradient norm (before clipping)",
             .nseries = nruns,
             .series = ser + 4 * nruns},
            {.title = "tokens/s", .nseries = nruns, .series = ser + 5 * nruns},
        };
        FILE *f = fopen(out, "w");
        int rc = f ? ptdp_chart_write(f, "ptdp training runs", "iteration", panels, 4,
                                      (const char *const *)labels, nruns)
                   : ptdp_errorf(PTDP_EIO, "cannot open for writing");
        if (f && fclose(f) && rc == PTDP_OK) rc = ptdp_errorf(PTDP_EIO, "cannot write");
        if (rc) {
            ptdp_log_error("ptdp plot: -o %s: %s", out, ptdp_last_error());
            status = 1;
        } else {
            printf("wrote %s (%d run%s)\n", out, nruns, nruns == 1 ? "" : "s");
        }
    }
    for (int r = 0; r < nruns; r++)
        for (int c = 0; c < NCOL; c++) free(runs[r].col[c]);
    free(runs);
    free(ser);
    free(labels);
    free(names);
    return status;
}
