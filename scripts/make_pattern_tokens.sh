#!/usr/bin/env bash
# make_pattern_tokens.sh - writes a small structured token stream for tests and
# the demo, in the format `ptdp train --token-file` reads: raw little-endian
# uint16 token ids, no header. Needs only bash and awk (no Python).
#
# usage: make_pattern_tokens.sh OUT NTOKENS count P
#            tokens 0 1 .. P-1 repeated (fully predictable after one period)
#        make_pattern_tokens.sh OUT NTOKENS phrases K L V [SEED]
#            K fixed phrases of L tokens each, tokens drawn from [0, V); the
#            stream is phrases in a pseudo-random order, so the tokens inside a
#            phrase are predictable and the phrase boundaries are not (the
#            best achievable loss is about ln(K)/L nats per token).
# Deterministic: the same arguments always write the same bytes.
set -eu
if [ $# -lt 4 ]; then
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
out=$1 n=$2 mode=$3
shift 3
case $mode in
count)
    [ $# -eq 1 ] || { echo "make_pattern_tokens: count takes P" >&2; exit 2; }
    awkprog='BEGIN { for (i = 0; i < n; i++) emit(i % a1) }'
    a1=$1 a2=0 a3=0 a4=0
    ;;
phrases)
    [ $# -ge 3 ] || { echo "make_pattern_tokens: phrases takes K L V [SEED]" >&2; exit 2; }
    a1=$1 a2=$2 a3=$3 a4=${4:-1}
    # A 32-bit LCG whose products stay below 2^53, so every awk computes it exactly.
    awkprog='function rnd() { st = (st * 69069 + 1) % 4294967296; return int(st / 65536) }
        BEGIN { st = a4
            for (k = 0; k < a1; k++) for (j = 0; j < a2; j++) ph[k, j] = rnd() % a3
            for (i = 0; i < n; ) { k = rnd() % a1; for (j = 0; j < a2 && i < n; j++) { emit(ph[k, j]); i++ } } }'
    ;;
*)
    echo "make_pattern_tokens: unknown pattern '$mode' (count or phrases)" >&2
    exit 2
    ;;
esac
# awk prints printf escapes (\xLO\xHI), 512 tokens a line; bash's printf turns
# them into bytes (awk's own %c cannot portably write a 0 byte).
awk -v n="$n" -v a1="$a1" -v a2="$a2" -v a3="$a3" -v a4="$a4" '
    function emit(t) { line = line sprintf("\\x%02x\\x%02x", t % 256, int(t / 256)); if (++c % 512 == 0) { print line; line = "" } }
    '"$awkprog"'
    END { if (line != "") print line }' |
    while IFS= read -r line; do printf "$line"; done >"$out"
