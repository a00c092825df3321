# parallel_lib.sh - shared by the multi-rank script tests (sourced, not run).
# Needs PTDP, PTDP_SRC, PTDP_TOOLS, MPIRUN from CTest's environment; ok, fail,
# $TMP and finish come from script_lib.sh.
source "$PTDP_SRC/tests/script_lib.sh"
MPIRUN=${MPIRUN:-mpirun}
# run_np N args...: `ptdp args` on N ranks under mpirun. One rank runs ptdp
# directly: a job of one needs no MPI (comm.h) and mpirun's start-up costs
# more than a small test run; OMP_NUM_THREADS=1 as under mpirun, which binds a
# single rank to one core.
run_np() {
    local n=$1
    shift
    if [ "$n" = 1 ]; then
        OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$PTDP" "$@"
    else
        "$MPIRUN" --oversubscribe -np "$n" "$PTDP" "$@"
    fi
}

# run_vs_ref NAME NP args...: `ptdp train args` on NP ranks, logging to
# $TMP/NAME.{jsonl,safetensors,out}, must give the reference run's
# ($TMP/ref.*) loss and grad norm at every iteration (1e-5 relative) and its
# final weights (1e-5; the key bias lr x iterations = 2e-2). Returns 1 when
# the run itself failed (after a fail), else 0.
run_vs_ref() {
    local name=$1 np=$2
    shift 2
    if ! run_np "$np" train "$@" --log-jsonl "$TMP/$name.jsonl" --save-safetensors "$TMP/$name.safetensors" \
        >"$TMP/$name.out" 2>&1; then
        fail "$name: run failed"
        tail -5 "$TMP/$name.out" >&2
        return 1
    fi
    compare_jsonl "$TMP/ref.jsonl" "$TMP/$name.jsonl" lm_loss 1e-5 && ok || fail "$name: loss differs"
    compare_jsonl "$TMP/ref.jsonl" "$TMP/$name.jsonl" grad_norm 1e-5 && ok || fail "$name: grad norm differs"
    compare_weights "$TMP/ref.safetensors" "$TMP/$name.safetensors" 2e-2 && ok || fail "$name: final weights differ"
    return 0
}

# expect_np_error NP "message part" args...: `ptdp train args` on NP ranks is
# refused before any work: status 2, the message from every rank, no iteration.
expect_np_error() {
    local np=$1 msg=$2
    shift 2
    run_np "$np" train "$@" >"$TMP/err.out" 2>"$TMP/err.txt"
    local rc=$?
    [ "$rc" -eq 2 ] || { fail "expected status 2, got $rc for: $*"; cat "$TMP/err.txt" >&2; return; }
    local n
    n=$(grep -c "ptdp: error:.*$msg" "$TMP/err.txt")
    [ "$n" -eq "$np" ] && ok || { fail "expected '$msg' from each of $np ranks, got $n"; cat "$TMP/err.txt" >&2; }
    grep -q "iteration" "$TMP/err.out" && fail "training started despite: $msg" || ok
}

# compare_jsonl REF OTHER KEY RTOL: both files log KEY on the same number of
# lines, every value is a number, and each pair is within RTOL relative to REF
# (|ref - other| <= RTOL |ref|). Shown able to fail by test_compare_tools.sh.
compare_jsonl() {
    local ref=$1 other=$2 key=$3 rtol=$4
    local out
    out=$(paste -d' ' <(grep -o "\"$key\":[^,}]*" "$ref" | cut -d: -f2) <(grep -o "\"$key\":[^,}]*" "$other" | cut -d: -f2) |
        awk -v rtol="$rtol" 'function num(x) { return x ~ /^-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$/ }
             { n++; if (NF != 2 || !num($1) || !num($2)) { bad++; printf "line %d: \"%s\" vs \"%s\" (missing or not a number)\n", n, $1, $2; next }
               d = $1 - $2; if (d < 0) d = -d; r = $1 < 0 ? -$1 : $1;
               if (d > rtol * r) { bad++; printf "iteration %d: %s vs %s\n", n, $1, $2 } }
             END { if (n == 0) print "no lines"; exit (bad > 0 || n == 0) }')
    local rc=$?
    [ -n "$out" ] && echo "$out" | head -3 >&2
    return $rc
}

# compare_weights REF OTHER KEY_BIAS_ATOL: final weights (HF safetensors) within
# 1e-5 absolute, except the K third of every attn.c_attn.bias, within
# KEY_BIAS_ATOL = lr x iterations: its gradient is zero up to rounding, which
# AdamW with eps 1e-8 turns into steps of up to about lr (tests/tools/st_compare.c).
# Prints st_compare's summary lines prefixed with OTHER's name.
compare_weights() {
    local out rc
    out=$("$PTDP_TOOLS/st_compare" --key-bias-atol "$3" "$1" "$2" 1e-5 2>&1)
    rc=$?
    echo "$out" | sed "s|^|$(basename "$2"): |"
    return $rc
}

# check_plan OUTPUT STAGES: the run's memory plan tables (one per pipeline stage, printed by the
# first tensor and data rank of each stage) show allocated == predicted in every row, and no
# rank reported "memory plan MISMATCH" (at start-up, or at the end: a compute backend that
# allocated beyond its planned workspace). Returns 0 or 1 (prints what differs).
check_plan() {
    local out=$1 stages=$2 bad tables rows
    bad=$(grep -c "memory plan MISMATCH" "$out")
    tables=$(grep -c "memory plan (pipeline stage" "$out")
    # rows "    <category>  bytes  predicted  (human)": 9 per table (8 categories + total)
    rows=$(awk '/memory plan \(pipeline stage/ { n = 10; next } n-- > 0 && NF >= 4 && $0 !~ /category/ {
                  k++; if ($(NF-3) != $(NF-2)) d++ } END { printf "%d %d", k, d }' "$out")
    [ "$bad" = 0 ] && [ "$tables" = "$stages" ] && [ "$rows" = "$((9 * stages)) 0" ] && return 0
    echo "memory plan: $bad mismatch line(s), $tables table(s) (want $stages), rows/differing: $rows" >&2
    grep -A9 "memory plan" "$out" | head -24 >&2
    return 1
}

# moby_dick: the data files (scripts/fetch_data.sh; a test without them fails at
# once), Moby Dick preprocessed into $TMP/moby_text_document, and V set to the
# tokenizer flags (--vocab-file, --merge-file) for ptdp train.
moby_dick() {
    bash "$PTDP_SRC/scripts/fetch_data.sh" >/dev/null || { echo "FAIL: scripts/fetch_data.sh" >&2; exit 1; }
    local d="$PTDP_SRC/data"
    V="--vocab-file $d/gpt2/encoder.json --merge-file $d/gpt2/vocab.bpe"
    "$PTDP" preprocess --input "$d/moby-dick/data.txt" --output-prefix "$TMP/moby" $V --append-eod >/dev/null 2>&1 &&
        ok || fail "preprocess"
}

# same_final_checkpoint A B N: two checkpoint iteration directories hold identical
# manifests and N shards, each bitwise equal (weights and AdamW moments).
same_final_checkpoint() {
    local a=$1 b=$2 want=$3 n=0 f
    cmp "$a/manifest.json" "$b/manifest.json" && ok || fail "final manifests differ"
    for f in "$a"/rank_*.safetensors; do
        "$PTDP_TOOLS/st_compare" --bitwise "$f" "$b/${f##*/}" >/dev/null && n=$((n + 1)) || fail "${f##*/} differs"
    done
    [ "$n" -eq "$want" ] && ok || fail "expected $want bitwise-equal shards, got $n"
}
