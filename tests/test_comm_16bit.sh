#!/usr/bin/env bash
# The 16-bit activation collectives of --bf16/--fp16 (tests/tools/comm16.c)
# over 2, 3 and 4 ranks: all-gathers exact, sums rounded to the grid at each
# partial sum (bit for bit the rounded fp32 sum over two ranks, within their
# bound over more), fp16 overflow to inf, the same bits on every rank, 2
# bytes counted per value.
source "$PTDP_SRC/tests/parallel_lib.sh"
for np in 2 3 4; do
    out=$("$MPIRUN" --oversubscribe -np $np "$PTDP_TOOLS/comm16" 2>&1) && ok ||
        fail "comm16 on $np ranks: $out"
    echo "$out" | grep -q "over $np ranks: [1-9][0-9]* checks passed, 0 failed" && ok ||
        fail "comm16 on $np ranks checked nothing: $out"
done
finish
