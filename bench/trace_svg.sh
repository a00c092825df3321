#!/usr/bin/env bash
# trace_svg.sh - draws one iteration of a `ptdp train --trace` file as an SVG
# timeline: one row per rank, its forward (blue), backward (green) and weight
# gradient W (orange, zb-h1) boxes at their measured times, the micro-batch
# number inside, idle time (the measured bubble) left empty; the title gives
# the iteration's window and idle fraction (idle / (ranks x window)).
# Only compute events are drawn (receive waits are the empty space).
#
# usage: bench/trace_svg.sh TRACE.json ITERATION [TITLE] > out.svg
set -u
[ $# -ge 2 ] || { echo "usage: $0 TRACE.json ITERATION [TITLE]" >&2; exit 1; }
awk -v want="$2" -v title="${3:-}" '
function num(key,   r) {
    if (!match($0, "\"" key "\":[-0-9.]+")) return -1
    r = substr($0, RSTART, RLENGTH); sub(/.*:/, "", r); return r + 0 }
/"cat":"(forward|backward|weight)"/ {
    if (num("iteration") != want) next
    n++; K[n] = /"cat":"forward"/ ? 0 : /"cat":"backward"/ ? 1 : 2
    R[n] = num("tid"); T[n] = num("ts"); D[n] = num("dur"); MB[n] = num("microbatch"); C[n] = num("chunk")
    if (lo == "" || T[n] < lo) lo = T[n]
    if (hi == "" || T[n] + D[n] > hi) hi = T[n] + D[n]
    if (R[n] + 1 > ranks) ranks = R[n] + 1
    busy[R[n]] += D[n]
}
END {
    if (!n) { print "trace_svg: no compute events in iteration " want > "/dev/stderr"; exit 1 }
    W = 1000; left = 70; top = 40; row = 34; box = 26
    sc = W / (hi - lo); idle = 0
    for (r = 0; r < ranks; r++) idle += (hi - lo) - busy[r]
    printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"11\">\n", left + W + 20, top + ranks * row + 40
    printf "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
    printf "<text x=\"%d\" y=\"20\" font-size=\"13\">%s iteration %d: %.1f ms, idle fraction %.3f (measured)</text>\n", left, title, want, (hi - lo) / 1000, idle / (ranks * (hi - lo))
    split("45,105,190 40,150,70 225,130,30", col, " ")
    for (r = 0; r < ranks; r++)
        printf "<text x=\"8\" y=\"%d\">rank %d</text>\n", top + r * row + 17, r
    for (i = 1; i <= n; i++) {
        split(col[K[i] + 1], c, ",")
        t = C[i] > 0 ? 0.45 : 0
        x = left + (T[i] - lo) * sc; w = D[i] * sc; y = top + R[i] * row
        printf "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"#%02x%02x%02x\" stroke=\"white\" stroke-width=\"0.5\"/>\n", x, y, w, box, c[1] + (255 - c[1]) * t, c[2] + (255 - c[2]) * t, c[3] + (255 - c[3]) * t
        if (w > 12) printf "<text x=\"%.2f\" y=\"%d\" fill=\"white\" text-anchor=\"middle\">%d</text>\n", x + w / 2, y + 17, MB[i]
    }
    y = top + ranks * row + 20
    printf "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"#2d69be\"/><text x=\"%d\" y=\"%d\">forward</text>\n", left, y, left + 16, y + 10
    printf "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"#289646\"/><text x=\"%d\" y=\"%d\">backward (B)</text>\n", left + 100, y, left + 116, y + 10
    printf "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"#e1821e\"/><text x=\"%d\" y=\"%d\">weight gradients (W)</text>\n", left + 220, y, left + 236, y + 10
    print "</svg>"
}' "$1"
