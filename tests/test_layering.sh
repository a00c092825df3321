# test_layering.sh - the layers of docs/ARCHITECTURE.md, read from the
# #include lines: a folder of src/ includes only its own headers and those of
# the layers below it (plan: only pipeline/schedule.h of the pipeline), and
# the tests, tools, benchmarks and the embedding example use the library, not
# the command line's internals (cli/). Direct includes only: each header keeps
# to its own folder's rule, so the rule holds transitively.
source "$PTDP_SRC/tests/script_lib.sh"
cd "$PTDP_SRC" || exit 1

# One awk pass over every file. FOLDER's files may include the headers of the folders (or the
# single headers) listed for it.
files=$(find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \); ls tests/*.c tests/*.h tests/tools/*.c tests/embed/*.c bench/*.c 2>/dev/null)
# shellcheck disable=SC2086
awk '
    BEGIN {
        lib = "base kernels comm model pipeline optim data format ckpt plan train"
        rule["base"] = "base"
        rule["kernels"] = "base kernels"
        rule["comm"] = "base comm"
        rule["model"] = "base kernels comm model"
        rule["pipeline"] = "base kernels comm model pipeline"
        rule["optim"] = "base kernels comm optim"
        rule["data"] = "base data"
        rule["format"] = "base format"
        rule["plan"] = "base plan pipeline/schedule.h"
        rule["ckpt"] = "base kernels comm model pipeline optim data format ckpt"
        rule["train"] = lib
        rule["cli"] = lib " cli"
        rule["tests"] = lib  # tests, tools, benchmarks, the embedding example: the library only
    }
    FNR == 1 {
        n++
        split(FILENAME, part, "/")
        layer = part[1] == "src" ? part[2] : "tests"
        if (!(layer in rule)) { printf "%s: a folder the layering rule does not know\n", FILENAME; bad++ }
    }
    # "dir/x.h" (from src/), "../dir/x.h" (public headers: relative to the file), <ptdp/dir/x.h>
    # (the embedding example, as an installed program writes it); "x.h": a header of its own folder
    /^[ \t]*#[ \t]*include[ \t]*("[a-z_.]+\/|<ptdp\/)/ {
        inc = $0; sub(/^[^"<]*["<]/, "", inc); sub(/[">].*/, "", inc); sub(/^ptdp\//, "", inc)
        if (inc ~ /^\.\.\//) {
            dir = FILENAME; sub(/^src\//, "", dir); sub(/\/[^\/]*$/, "", dir)
            while (inc ~ /^\.\.\//) { sub(/^\.\.\//, "", inc); if (!sub(/\/[^\/]*$/, "", dir)) dir = "" }
            if (dir != "") inc = dir "/" inc
        }
        m = split(rule[layer], allowed, " ")
        fine = 0
        for (i = 1; i <= m; i++) if (inc == allowed[i] || index(inc, allowed[i] "/") == 1) fine = 1
        if (!fine) { printf "%s includes \"%s\": above its layer (docs/ARCHITECTURE.md)\n", FILENAME, inc; bad++ }
    }
    END { if (n < 100) { printf "only %d files checked\n", n; bad++ } exit bad > 0 }
' $files >"$tmp/layers" && ok || bad "$(cat "$tmp/layers")"
finish
