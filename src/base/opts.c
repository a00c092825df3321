/* opts.c - Megatron-style flag parsing from a table. Every failure names the
 * flag and says what is allowed; the CLI prints it and exits with status 2. */
#include "base.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

ptdp_opt *ptdp_opt_find(ptdp_opt *opts, int nopts, const char *name) {
    for (int i = 0; i < nopts; i++)
        if (strcmp(opts[i].name, name) == 0) return &opts[i];
    return NULL;
}

static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63 || lb > 63) return 99;
    int d[64][64];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            d[i][j] = c;
        }
    return d[la][lb];
}

static int choice_ok(const char *choices, const char *v) {
    size_t n = strlen(v);
    const char *p = choices;
    while (*p) {
        const char *e = strchr(p, '|');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

int ptdp_opt_set(ptdp_opt *opts, int nopts, const char *name, const char *value,
                 const char *origin) {
    ptdp_opt *o = ptdp_opt_find(opts, nopts, name);
    /* Megatron-LM's flags that ptdp lacks get their own message in
     * `ptdp train` (cli/megatron_flags.c), never a spelling guess */
    if (!o) {
        const char *best = NULL;
        int bd = 4;
        for (int i = 0; i < nopts; i++) {
            int dd = edit_distance(name, opts[i].name);
            if (dd < bd) {
                bd = dd;
                best = opts[i].name;
            }
        }
        if (best)
            return ptdp_errorf(PTDP_EINVAL, "unknown %s '--%s'; did you mean '--%s'? (see --help)",
                               origin, name, best);
        return ptdp_errorf(PTDP_EINVAL, "unknown %s '--%s' (see --help for the list)", origin,
                           name);
    }
    o->seen = 1;
    switch (o->type) {
    case PTDP_OPT_BOOL:
    case PTDP_OPT_NEGBOOL: {
        int on = o->type == PTDP_OPT_BOOL;
        if (value) {
            if (!strcmp(value, "true") || !strcmp(value, "1")) {
            } else if (!strcmp(value, "false") || !strcmp(value, "0")) {
                on = !on;
            } else {
                return ptdp_errorf(PTDP_EINVAL,
                                   "--%s takes no value here, or true/false in a config (got '%s')",
                                   name, value);
            }
        }
        *(int *)o->dst = on;
        return PTDP_OK;
    }
    default:
        break;
    }
    if (!value) return ptdp_errorf(PTDP_EINVAL, "--%s needs a value", name);
    char *end = NULL;
    errno = 0;
    if (o->type == PTDP_OPT_INT) {
        long long v = strtoll(value, &end, 10);
        if (errno || end == value || *end)
            return ptdp_errorf(PTDP_EINVAL, "--%s expects an integer, got '%s'", name, value);
        if ((double)v < o->min || (double)v > o->max)
            return ptdp_errorf(PTDP_EINVAL, "--%s must be between %.0f and %.0f, got %lld", name,
                               o->min, o->max, v);
        *(int64_t *)o->dst = v;
    } else if (o->type == PTDP_OPT_FLOAT || o->type == PTDP_OPT_FLOAT32) {
        double v = strtod(value, &end);
        if (errno || end == value || *end || !isfinite(v))
            return ptdp_errorf(PTDP_EINVAL, "--%s expects a number, got '%s'", name, value);
        if (v < o->min || v > o->max)
            return ptdp_errorf(PTDP_EINVAL, "--%s must be between %g and %g, got %g", name, o->min,
                               o->max, v);
        if (o->type == PTDP_OPT_FLOAT32)
            *(float *)o->dst = (float)v;
        else
            *(double *)o->dst = v;
    } else {
        if (o->choices && !choice_ok(o->choices, value))
            return ptdp_errorf(PTDP_EINVAL, "--%s must be one of %s, got '%s'", name, o->choices,
                               value);
        *(const char **)o->dst = value;
    }
    return PTDP_OK;
}

int ptdp_opts_parse(ptdp_opt *opts, int nopts, int argc, char **argv, int *want_help) {
    *want_help = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            *want_help = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || !a[2])
            return ptdp_errorf(PTDP_EINVAL,
                               "unexpected argument '%s' (flags look like --name value)", a);
        char name[128];
        const char *eq = strchr(a + 2, '=');
        size_t len = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
        if (len >= sizeof name) return ptdp_errorf(PTDP_EINVAL, "flag '%s' is too long", a);
        memcpy(name, a + 2, len);
        name[len] = 0;
        for (char *c = name; *c; c++)
            if (*c == '_') *c = '-';
        ptdp_opt *o = ptdp_opt_find(opts, nopts, name);
        const char *val = NULL;
        if (eq) {
            val = eq + 1;
        } else if (o && o->type != PTDP_OPT_BOOL && o->type != PTDP_OPT_NEGBOOL) {
            if (i + 1 >= argc) return ptdp_errorf(PTDP_EINVAL, "--%s needs a value", name);
            val = argv[++i];
        }
        int rc = ptdp_opt_set(opts, nopts, name, val, "flag");
        if (rc) return rc;
    }
    return PTDP_OK;
}

void ptdp_opts_help(FILE *f, const ptdp_opt *opts, int nopts) {
    for (int i = 0; i < nopts; i++) {
        const ptdp_opt *o = &opts[i];
        char lhs[96];
        const char *meta = o->type == PTDP_OPT_INT                                    ? " N"
                           : o->type == PTDP_OPT_FLOAT || o->type == PTDP_OPT_FLOAT32 ? " X"
                           : o->type == PTDP_OPT_STR ? (o->choices ? " {..}" : " S")
                                                     : "";
        snprintf(lhs, sizeof lhs, "--%s%s", o->name, meta);
        fprintf(f, "  %-40s %s", lhs, o->help ? o->help : "");
        switch (o->type) {
        case PTDP_OPT_INT:
            fprintf(f, " (default %lld)", (long long)*(int64_t *)o->dst);
            break;
        case PTDP_OPT_FLOAT:
            fprintf(f, " (default %g)", *(double *)o->dst);
            break;
        case PTDP_OPT_FLOAT32:
            fprintf(f, " (default %g)", (double)*(float *)o->dst);
            break;
        case PTDP_OPT_STR:
            if (o->choices) fprintf(f, " [%s]", o->choices);
            if (*(const char **)o->dst) fprintf(f, " (default %s)", *(const char **)o->dst);
            break;
        default:
            break;
        }
        fputc('\n', f);
    }
}

static const char *const recompute_names[] = {
#define PTDP__RC_NAME(e, s) s,
    PTDP_RECOMPUTE_METHODS(PTDP__RC_NAME)
#undef PTDP__RC_NAME
};

int ptdp_recompute_method_parse(const char *name) {
    for (int i = 0; i < (int)(sizeof recompute_names / sizeof recompute_names[0]); i++)
        if (name && !strcmp(name, recompute_names[i])) return i;
    return -1;
}

const char *ptdp_recompute_method_name(int method) {
    PTDP_ASSERT(method >= 0 && method < (int)(sizeof recompute_names / sizeof recompute_names[0]));
    return recompute_names[method];
}

double ptdp_model_flops(double B, double s, double l, double h, double V, int recompute) {
    const int full = recompute == PTDP_RECOMPUTE_UNIFORM || recompute == PTDP_RECOMPUTE_BLOCK;
    /* selective reruns core attention's two s x s GEMMs: 72 B s l h^2 * s / (18 h) */
    const double rerun = recompute == PTDP_RECOMPUTE_SELECTIVE ? s / (18.0 * h) : 0.0;
    return (full ? 96.0 : 72.0) * B * s * l * h * h * (1.0 + s / (6.0 * h) + rerun) +
           6.0 * B * s * h * V;
}
