#!/usr/bin/env bash
# --check-for-nan-in-loss-and-grad (Megatron's, on by default) names where a
# non-finite value arose (docs/reliability.md): a nan put into one rank's own
# gradient (PTDP_FAULT=nan@RANK:ITER, before the backward) or loss
# (nan-loss@RANK:ITER, after the forward) stops the job at that iteration;
# every rank exits non-zero with exactly one error line, and that line names
# the iteration and the world rank(s), with [dp,pp,tp], whose own value was
# non-finite before the data-parallel (and model-group) reductions, and no
# other rank, although after the reductions every rank holds the nan.
source "$PTDP_SRC/tests/parallel_lib.sh"

ARGS="train --mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16
 --vocab-size 128 --micro-batch-size 1 --global-batch-size 8 --lr 1e-3 --train-iters 5 --log-interval 1"

# nan_case NAME FAULT NP "error line regex" ptdp flags...: each of the NP ranks
# (each wrapped so that it reports its own exit status; mpirun must not end
# the others when the first exits) exits non-zero and prints exactly one
# error line, matching the regex
nan_case() {
    local name=$1 fault=$2 np=$3 re=$4
    shift 4
    PTDP_FAULT=$fault "$MPIRUN" --oversubscribe --mca orte_abort_on_non_zero_status 0 -np "$np" -x PTDP_FAULT \
        bash -c '"$0" "$@"; echo "exit status of world rank $OMPI_COMM_WORLD_RANK: $?"' "$PTDP" $ARGS "$@" \
        >"$TMP/$name.out" 2>&1
    local nz lines matching
    nz=$(grep -c "^exit status of world rank [0-9]*: [1-9]" "$TMP/$name.out")
    lines=$(grep -c "ptdp: error:" "$TMP/$name.out")
    matching=$(grep -Ec "ptdp: error: $re" "$TMP/$name.out")
    echo "$name ($fault, $np ranks): $(grep -m1 "ptdp: error:" "$TMP/$name.out")"
    [ "$nz" = "$np" ] && ok || { fail "$name: $nz of $np ranks exited non-zero"; grep "exit status" "$TMP/$name.out" >&2; }
    [ "$lines" = "$np" ] && [ "$matching" = "$np" ] && ok ||
        { fail "$name: expected one line matching '$re' from each of $np ranks (got $lines error lines, $matching matching)"; grep error "$TMP/$name.out" >&2; }
    # the iteration of the fault is logged (a nan iteration), none after it
    local it=${fault##*:}
    grep -q "iteration  *$it/.*number of nan iterations:   1 |" "$TMP/$name.out" &&
        ! grep -q "iteration  *$((it + 1))/" "$TMP/$name.out" && ok ||
        fail "$name: expected iteration $it logged as a nan iteration and the run stopped there"
}

TAIL='\(stopping; the step was not applied; --no-check-for-nan-in-loss-and-grad skips such iterations instead\)$'
# t=2 x d=2: rank 3 is dp 1, tp 1; the data-parallel all-reduce spreads its nan to rank 1, the
# norm's all-reduce to all four, but only rank 3 had it before
nan_case grad_t2d2 nan@3:2 4 \
    "iteration 2: the gradient norm is nan; non-finite before the reductions on world rank 3 \[1,0,1\] \(gradient\) $TAIL" \
    --tensor-model-parallel-size 2
# p=2 x d=2 with ZeRO-1 (reduce-scatter instead of all-reduce): rank 1 is dp 1 of the first stage
nan_case grad_p2d2_zero nan@1:3 4 \
    "iteration 3: the gradient norm is nan; non-finite before the reductions on world rank 1 \[1,0,0\] \(gradient\) $TAIL" \
    --pipeline-model-parallel-size 2 --use-distributed-optimizer
# the loss of the last stage's rank 3 (dp 1, pp 1)
nan_case loss_p2d2 nan-loss@3:2 4 \
    "iteration 2: the loss is nan; non-finite before the reductions on world rank 3 \[1,1,0\] \(loss\) $TAIL" \
    --pipeline-model-parallel-size 2
# two ranks at once, on different stages: both named, in world-rank order
nan_case two_ranks nan@0:2,nan@3:2 4 \
    "iteration 2: the gradient norm is nan; non-finite before the reductions on world rank 0 \[0,0,0\] \(gradient\), world rank 3 \[1,1,0\] \(gradient\) $TAIL" \
    --pipeline-model-parallel-size 2
finish
