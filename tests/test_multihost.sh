#!/usr/bin/env bash
# Two hosts on one machine (docs/cluster.md, "Two hosts on one machine"): two
# network namespaces joined by a veth pair, each a "host" with its own
# address and host name and 4 ranks; Open MPI between them over TCP only
# (btl tcp,self; its out-of-band channel on the veth), its remote launcher
# (plm_rsh_agent) a small script that runs the daemon inside the other
# namespace as ssh would run it on another node, mpirun itself inside the
# first. A t=2 x p=2 x d=2 job (ranks 0-3, pipeline stage 0, on host 1;
# ranks 4-7, stage 1, on host 2):
# - its losses and gradient norms (iterations 1-3) equal the single
#   process's, and its messages crossed the veth pair;
# - it writes a checkpoint from both hosts (--exit-interval 3): every rank's
#   shard, a manifest, `ptdp checkpoint verify` clean; a second two-host job
#   resumes from it and its iterations 4-6 and final weights equal the
#   single process's.
# Exits 77 (skipped) where namespaces cannot be made (not root, no iproute2,
# no permission). Removes the namespaces on exit.
source "$PTDP_SRC/tests/parallel_lib.sh"

command -v ip >/dev/null 2>&1 || { echo "skipped: no 'ip' (iproute2)"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "skipped: network namespaces need root"; exit 77; }
command -v unshare >/dev/null 2>&1 || { echo "skipped: no 'unshare' (util-linux)"; exit 77; }
H1=ptdp_h1_$$ H2=ptdp_h2_$$ A1=10.213.7.1 A2=10.213.7.2
cleanup() {
    ip netns del "$H1" 2>/dev/null
    ip netns del "$H2" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
if ! ip netns add "$H1" 2>"$TMP/ns.err" || ! ip netns add "$H2" 2>>"$TMP/ns.err"; then
    echo "skipped: cannot create network namespaces: $(head -1 "$TMP/ns.err")"
    exit 77
fi
ip link add "pv1_$$" type veth peer name "pv2_$$" &&
    ip link set "pv1_$$" netns "$H1" && ip link set "pv2_$$" netns "$H2" &&
    ip -n "$H1" addr add $A1/24 dev "pv1_$$" && ip -n "$H2" addr add $A2/24 dev "pv2_$$" &&
    ip -n "$H1" link set "pv1_$$" up && ip -n "$H2" link set "pv2_$$" up &&
    ip -n "$H1" link set lo up && ip -n "$H2" link set lo up || {
    echo "skipped: cannot set up the veth pair"
    exit 77
}
veth_bytes() { ip -n "$H1" -s link show "pv1_$$" | awk '/RX:/ { getline; rx = $1 } /TX:/ { getline; tx = $1 } END { print rx + tx }'; }

# The remote launcher: Open MPI calls it as it would call ssh, "AGENT [options] HOST COMMAND...",
# and the command is a line for the remote shell. It runs the line in HOST's namespace, with
# HOST's own host name (a UTS namespace: without it both "hosts" would share one name).
cat >"$TMP/netns_rsh" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
host=\$1
shift
case \$host in
$A1) ns=$H1 name=ptdp-host1 ;;
$A2) ns=$H2 name=ptdp-host2 ;;
*) echo "netns_rsh: unknown host \$host" >&2; exit 255 ;;
esac
exec ip netns exec \$ns unshare --uts sh -c "hostname \$name && \$*"
EOF
chmod +x "$TMP/netns_rsh"
printf '%s slots=4\n%s slots=4\n' $A1 $A2 >"$TMP/hostfile"
# mpirun runs in host 1's namespace (its own host name, like the remote one). It sees 4 slots on
# each host, not that both share this machine's cores, and would let waiting ranks spin:
# mpi_yield_when_idle makes them yield (10 times faster here under load).
mh_run() { # mh_run NAME ptdp flags...: the two-host job, output in $TMP/NAME.out
    local name=$1 t0=$(date +%s.%N) rc
    shift
    ip netns exec "$H1" unshare --uts sh -c 'hostname ptdp-host1 && exec "$@"' sh \
        "$MPIRUN" --hostfile "$TMP/hostfile" -np 8 --map-by slot \
        --mca plm_rsh_agent "$TMP/netns_rsh" --mca btl tcp,self --mca btl_tcp_if_include $A1/24 \
        --mca oob_tcp_if_include $A1/24 --mca mpi_yield_when_idle 1 -x PATH -x OMP_NUM_THREADS=1 \
        sh -c 'echo "world rank $OMPI_COMM_WORLD_RANK on $(hostname)"; exec "$0" "$@"' "$PTDP" train "$@" \
        >"$TMP/$name.out" 2>&1
    rc=$?
    echo "two-host job '$name': status $rc, $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
    return $rc
}

ARGS="--mock-data --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 128
 --micro-batch-size 1 --global-batch-size 8 --lr 1e-3 --lr-decay-iters 6 --train-iters 6 --log-interval 1"
MH="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --use-distributed-optimizer"
"$PTDP" train $ARGS --log-jsonl "$TMP/ref.jsonl" --save-safetensors "$TMP/ref.safetensors" >"$TMP/ref.out" 2>&1 &&
    ok || { fail "the single-process reference run"; tail -3 "$TMP/ref.out" >&2; }

# iterations 1-3 on two hosts, stopped by --exit-interval after writing a checkpoint from both
mh_run save $ARGS $MH --exit-interval 3 --save "$TMP/ck" --log-jsonl "$TMP/save.jsonl" && ok ||
    { fail "the two-host job with --save failed"; tail -20 "$TMP/save.out" >&2; }
for w in 0 1 2 3; do grep -q "^world rank $w on ptdp-host1$" "$TMP/save.out" || fail "world rank $w is not on host 1"; done
for w in 4 5 6 7; do grep -q "^world rank $w on ptdp-host2$" "$TMP/save.out" || fail "world rank $w is not on host 2"; done
[ "$(grep -c "^world rank [0-9] on ptdp-host" "$TMP/save.out")" = 8 ] && ok || fail "expected 8 ranks, 4 on each host"
# the pipeline's activations and gradients crossed the veth (3 iterations x 8 micro-batches x 2
# directions x 16 x 32 floats = 98,304 bytes of pipeline messages alone)
bytes=$(veth_bytes)
echo "bytes over the veth pair after the first job: $bytes"
[ "$bytes" -gt 98304 ] && ok || fail "only $bytes bytes crossed the veth pair"
compare_jsonl <(grep lm_loss "$TMP/ref.jsonl" | head -n 3) "$TMP/save.jsonl" lm_loss 1e-5 && ok ||
    fail "two hosts: loss differs from one process"
compare_jsonl <(grep lm_loss "$TMP/ref.jsonl" | head -n 3) "$TMP/save.jsonl" grad_norm 1e-5 && ok ||
    fail "two hosts: grad norm differs"
[ "$(cat "$TMP/ck/latest_checkpointed_iteration.txt" 2>/dev/null)" = 3 ] && ok || fail "no checkpoint of iteration 3"
[ "$(ls "$TMP/ck/iter_0000003/" | grep -c '^rank_0000[0-7].safetensors$')" = 8 ] && ok ||
    fail "expected the shards of all 8 ranks: $(ls "$TMP/ck/iter_0000003/")"
"$PTDP" checkpoint verify "$TMP/ck" >"$TMP/verify.out" 2>&1 && ok || { fail "checkpoint verify"; cat "$TMP/verify.out" >&2; }
mh_run resume $ARGS $MH --load "$TMP/ck" --log-jsonl "$TMP/res.jsonl" --save-safetensors "$TMP/res.safetensors" && ok ||
    { fail "the resumed two-host job failed"; tail -20 "$TMP/resume.out" >&2; }
grep -q "loaded checkpoint .*iteration 3" "$TMP/resume.out" && ok || fail "the second job did not resume from iteration 3"
compare_jsonl <(grep lm_loss "$TMP/ref.jsonl" | tail -n 3) "$TMP/res.jsonl" lm_loss 1e-5 && ok || fail "resumed: loss differs"
compare_jsonl <(grep lm_loss "$TMP/ref.jsonl" | tail -n 3) "$TMP/res.jsonl" grad_norm 1e-5 && ok || fail "resumed: grad norm differs"
compare_weights "$TMP/ref.safetensors" "$TMP/res.safetensors" 2e-2 && ok || fail "resumed: final weights differ"
finish
