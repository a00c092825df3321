/* svg.c - draws a simulated pipeline schedule as an SVG timeline, in the
 * manner of the paper's Figures 3 and 4: one row per pipeline rank, a box per
 * action at its simulated time, forwards blue, backwards green and weight
 * gradients (W, zero-bubble schedules) orange, lighter
 * shades for later chunks, the micro-batch number inside each box, and a
 * time axis. Idle time (the pipeline bubble) is left empty.
 *
 * Deliberately not here: interactivity, communication arrows, or any layout
 * engine; the drawing is a plain function of the simulation result. */
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

enum { LEFT = 70, RIGHT = 20, TOP = 40, ROW = 34, BOX = 26, AXIS = 40, LEGEND = 24 };

/* Base colours (forward blue, backward green, weight gradients orange) blended towards white by the
 * chunk index, so chunk 0 is darkest. */
static void box_colour(int kind, int chunk, int v, char *buf) {
    static const int base[PTDP_ACT_COUNT][3] = {{45, 105, 190}, {40, 150, 70}, {225, 130, 30}};
    const int *c = base[kind >= 0 && kind < PTDP_ACT_COUNT ? kind : 0];
    double t = v > 1 ? 0.55 * chunk / (v - 1) : 0.0;
    snprintf(buf, 16, "#%02x%02x%02x", (int)(c[0] + (255 - c[0]) * t),
             (int)(c[1] + (255 - c[1]) * t), (int)(c[2] + (255 - c[2]) * t));
}

/* A generous width for text at font size `px`: 0.65 em a character, above
 * the average of common sans-serif faces, so text placed by it is not cut. */
static double text_width(const char *s, double px) { return 0.65 * px * (double)strlen(s); }

/* The legend: a swatch and a name per action kind and chunk, left to right
 * from x = LEFT, a new row of LEGEND pixels whenever the next entry would
 * pass the right margin. Writes nothing when f is NULL; returns the rows. */
static int legend(FILE *f, const ptdp_schedule_params *sp, int top, int width, int *one_row) {
    const int kinds = ptdp_schedule_splits_backward(sp) ? PTDP_ACT_COUNT : PTDP_ACT_WGT;
    int lx = LEFT, ly = top, rows = 1;
    char col[16], name[64];
    for (int kind = 0; kind < kinds; kind++)
        for (int c = 0; c < sp->v; c++) {
            if (sp->v > 1)
                snprintf(name, sizeof name, "%s chunk %d", ptdp_action_kind_name(kind), c);
            else
                snprintf(name, sizeof name, "%s", ptdp_action_kind_name(kind));
            const int w = 16 + (int)ceil(text_width(name, 11));
            if (lx > LEFT && lx + w > width - RIGHT) {
                lx = LEFT;
                ly += LEGEND;
                rows++;
            }
            if (f) {
                box_colour(kind, c, sp->v, col);
                fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", lx,
                        ly, col);
                fprintf(f, "<text x=\"%d\" y=\"%d\">%s</text>\n", lx + 16, ly + 10, name);
            }
            lx += w + 14;
            *one_row += w + 14;
        }
    *one_row += LEFT + RIGHT - 14;
    return rows;
}

double ptdp__svg_tick_step(double span, int ticks) {
    if (span <= 0) return 1;
    double raw = span / ticks, mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

int ptdp_svg_write(FILE *f, const ptdp_schedule *s, const ptdp_sim_result *res, const char *title) {
    const ptdp_schedule_params *sp = &s->params;
    int p = sp->p;
    /* About 24 px per action on the busiest rank keeps labels readable. */
    double plot_w = 24.0 * s->len * (res->makespan / (res->ideal > 0 ? res->ideal : 1));
    if (plot_w < 400) plot_w = 400;
    if (plot_w > 4000) plot_w = 4000;
    char col[16], buf[32], heading[256];
    snprintf(heading, sizeof heading, "%s: p=%d, m=%d, v=%d; makespan %g, bubble %.4g",
             title ? title : ptdp_schedule_kind_name(sp->kind), p, sp->m, sp->v, res->makespan,
             res->bubble_fraction);
    /* wide enough for the heading and, up to 1000 pixels, the legend in one
     * row (beyond, it wraps); the timeline takes the width */
    const int ay = TOP + p * ROW + 4; /* the time axis */
    int width = LEFT + (int)plot_w + RIGHT, legend_w = 0;
    legend(NULL, sp, 0, width, &legend_w);
    const int need = LEFT + (int)ceil(text_width(heading, 14)) + RIGHT;
    if (width < need) width = need;
    if (width < legend_w) width = legend_w < 1000 ? legend_w : width < 1000 ? 1000 : width;
    plot_w = width - LEFT - RIGHT;
    const double scale = res->makespan > 0 ? plot_w / res->makespan : 1;
    const int height =
        TOP + p * ROW + AXIS + LEGEND * legend(NULL, sp, ay + AXIS - 6, width, &legend_w);

    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "font-family=\"sans-serif\" font-size=\"11\">\n",
            width, height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%d\" y=\"20\" font-size=\"14\">%s</text>\n", LEFT, heading);
    for (int r = 0; r < p; r++) {
        int y = TOP + r * ROW;
        fprintf(f, "<text x=\"8\" y=\"%d\">rank %d</text>\n", y + BOX / 2 + 4, r);
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"#f4f4f4\"/>\n",
                LEFT, y, plot_w, BOX);
        const ptdp_action *acts = ptdp_schedule_rank(s, r);
        for (int i = 0; i < s->len; i++) {
            const ptdp_sim_span *span = &res->spans[(size_t)r * s->len + i];
            double x = LEFT + span->start * scale, w = (span->end - span->start) * scale;
            box_colour(acts[i].kind, acts[i].chunk, sp->v, col);
            fprintf(
                f,
                "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\" stroke=\"white\" "
                "stroke-width=\"0.5\"><title>rank %d %s %s</title></rect>\n",
                x, y, w, BOX, col, r, ptdp_action_kind_name(acts[i].kind),
                ptdp_action_str(sp, &acts[i], buf));
            if (w >= 10)
                fprintf(f,
                        "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\" fill=\"%s\">%d</text>\n",
                        x + w / 2, y + BOX / 2 + 4, acts[i].chunk * 2 < sp->v ? "white" : "black",
                        acts[i].microbatch);
        }
    }
    /* Time axis. */
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"black\"/>\n", LEFT, ay,
            LEFT + plot_w, ay);
    double step = ptdp__svg_tick_step(res->makespan, 10);
    for (double t = 0; t <= res->makespan + 1e-9 * step; t += step) {
        double x = LEFT + t * scale;
        fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"black\"/>\n", x, ay,
                x, ay + 5);
        fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", x, ay + 17, t);
    }
    fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"end\">time</text>\n", LEFT + plot_w,
            ay + 30);
    legend(f, sp, ay + AXIS - 6, width, &legend_w);
    fprintf(f, "</svg>\n");
    if (fflush(f) || ferror(f)) return ptdp_errorf(PTDP_EIO, "cannot write the SVG timeline");
    return PTDP_OK;
}
