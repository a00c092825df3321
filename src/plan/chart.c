/* chart.c - line charts as hand-made SVG, in svg.c's style: panels two to a
 * row, each a box with y ticks, x ticks and one <polyline> per curve (a
 * <title> naming it), colours by run, a legend of the runs at the top.
 * `ptdp plot` draws training logs with it.
 *
 * Deliberately not here: log scales, interactivity, any layout engine; axes
 * are linear and span the data (with a margin), the drawing is a plain
 * function of the points. */
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

enum { PW = 440, PH = 230, ML = 72, MR = 20, MT = 34, MB = 44, TOP = 64 };

static const char *colour(int run) {
    static const char *const c[] = {"#2d69be", "#d9541e", "#28964a", "#8c3cb4",
                                    "#b4912d", "#2aa3b0", "#c03c78", "#555555"};
    return c[run % (int)(sizeof c / sizeof c[0])];
}

/* Writes text with &, <, > and " escaped (file names go into labels). */
static void put_text(FILE *f, const char *s) {
    for (; *s; s++) switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            fputc(*s, f);
        }
}

static void panel(FILE *f, const ptdp_chart_panel *p, const char *xlabel, int x0, int y0) {
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int s = 0; s < p->nseries; s++)
        for (int i = 0; i < p->series[s].n; i++) {
            double x = p->series[s].x[i], y = p->series[s].y[i];
            if (!isfinite(x) || !isfinite(y)) continue;
            xmin = fmin(xmin, x), xmax = fmax(xmax, x), ymin = fmin(ymin, y), ymax = fmax(ymax, y);
        }
    const int w = PW - ML - MR, h = PH - MT - MB, bx = x0 + ML, by = y0 + MT;
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"13\">", bx, y0 + 20);
    put_text(f, p->title);
    fprintf(f, "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#f4f4f4\"/>\n",
            bx, by, w, h);
    if (xmin > xmax) { /* no finite point */
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">no data</text>\n", bx + w / 2,
                by + h / 2);
        return;
    }
    if (xmax == xmin) xmin -= 0.5, xmax += 0.5;
    double pad = ymax > ymin ? 0.05 * (ymax - ymin) : fmax(fabs(ymax) * 0.05, 1e-12);
    ymin -= pad, ymax += pad;
    const double sx = w / (xmax - xmin), sy = h / (ymax - ymin);
    /* ticks: x below the box, y at its left with light grid lines */
    double step = ptdp__svg_tick_step(xmax - xmin, 6);
    for (double t = ceil(xmin / step) * step; t <= xmax + 1e-9 * step; t += step) {
        double x = bx + (t - xmin) * sx;
        fprintf(f,
                "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"black\"/>"
                "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n",
                x, by + h, x, by + h + 5, x, by + h + 17, t);
    }
    step = ptdp__svg_tick_step(ymax - ymin, 5);
    for (double t = ceil(ymin / step) * step; t <= ymax + 1e-9 * step; t += step) {
        double y = by + h - (t - ymin) * sy;
        fprintf(f,
                "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#dddddd\"/>"
                "<text x=\"%d\" y=\"%.2f\" text-anchor=\"end\">%.4g</text>\n",
                bx, y, bx + w, y, bx - 4, y + 4, fabs(t) < 1e-9 * step ? 0.0 : t);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", bx + w, by + h + 34);
    put_text(f, xlabel);
    fprintf(f, "</text>\n");
    for (int s = 0; s < p->nseries; s++) {
        const ptdp_chart_series *c = &p->series[s];
        if (c->n == 0) continue;
        if (c->markers_only) {
            for (int i = 0; i < c->n; i++)
                if (isfinite(c->y[i])) {
                    fprintf(
                        f,
                        "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"white\" stroke=\"%s\" "
                        "stroke-width=\"1.5\"><title>",
                        bx + (c->x[i] - xmin) * sx, by + h - (c->y[i] - ymin) * sy, colour(c->run));
                    put_text(f, c->name);
                    fprintf(f, ": %g at %g</title></circle>\n", c->y[i], c->x[i]);
                }
            continue;
        }
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s points=\"",
                colour(c->run), c->dashed ? " stroke-dasharray=\"5,3\"" : "");
        for (int i = 0; i < c->n; i++)
            if (isfinite(c->y[i]))
                fprintf(f, "%s%.2f,%.2f", i ? " " : "", bx + (c->x[i] - xmin) * sx,
                        by + h - (c->y[i] - ymin) * sy);
        fprintf(f, "\"><title>");
        put_text(f, c->name);
        fprintf(f, "</title></polyline>\n");
    }
}

int ptdp_chart_write(FILE *f, const char *title, const char *xlabel, const ptdp_chart_panel *panels,
                     int npanels, const char *const *runs, int nruns) {
    const int rows = (npanels + 1) / 2, width = 2 * PW, height = TOP + rows * PH;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "font-family=\"sans-serif\" font-size=\"11\">\n",
            width, height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%d\" y=\"20\" font-size=\"14\">", ML);
    put_text(f, title);
    fprintf(f, "</text>\n");
    /* legend: one swatch per run; solid = training, dashed = validation */
    int lx = ML;
    for (int r = 0; r < nruns; r++) {
        fprintf(f,
                "<line x1=\"%d\" y1=\"38\" x2=\"%d\" y2=\"38\" stroke=\"%s\" stroke-width=\"3\"/>"
                "<text x=\"%d\" y=\"42\">",
                lx, lx + 20, colour(r), lx + 24);
        put_text(f, runs[r]);
        fprintf(f, "</text>\n");
        lx += 40 + 7 * (int)strlen(runs[r]);
    }
    fprintf(f,
            "<text x=\"%d\" y=\"58\" fill=\"#555555\">solid: training; dashed: validation; "
            "circles: end-of-training evaluation</text>\n",
            ML);
    for (int i = 0; i < npanels; i++)
        panel(f, &panels[i], xlabel, (i % 2) * PW, TOP + (i / 2) * PH);
    fprintf(f, "</svg>\n");
    if (fflush(f) || ferror(f)) return ptdp_errorf(PTDP_EIO, "cannot write the SVG chart");
    return PTDP_OK;
}
