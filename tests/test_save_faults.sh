#!/usr/bin/env bash
# Saving onto a full disk and into unwritable paths (docs/reliability.md), on a
# small tmpfs of its own (skipped, status 77, where mount is not allowed):
# - full disk: a run whose second checkpoint does not fit stops with one
#   "No space left on device" message on every rank and a non-zero status;
#   latest still names the first checkpoint, which verifies and loads, and no
#   temporary file is left behind;
# - the same file system remounted read-only (root writes anywhere else, so
#   chmod would prove nothing), and a file where --save expects a directory:
#   one message on every rank before training, non-zero status.
source "$PTDP_SRC/tests/parallel_lib.sh"

MNT="$TMP/mnt"
mkdir -p "$MNT"
if ! mount -t tmpfs -o size=64k tmpfs "$MNT" 2>/dev/null; then
    echo "test_save_faults: skipped: cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)"
    exit 77
fi
trap 'umount "$MNT" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT

ARGS="--mock-data --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
 --micro-batch-size 1 --global-batch-size 4 --vocab-size 200 --lr 1e-3 --lr-decay-iters 4 --log-interval 100
 --use-distributed-optimizer"
# the size of one checkpoint, to make the tmpfs hold one and a half
run_np 2 train $ARGS --train-iters 2 --save "$TMP/probe.ck" >"$TMP/probe.out" 2>&1 && ok ||
    { fail "probe run"; tail -5 "$TMP/probe.out" >&2; }
kb=$(du -sk "$TMP/probe.ck/iter_0000002" | cut -f1)
umount "$MNT"
mount -t tmpfs -o size=$((kb * 3 / 2))k tmpfs "$MNT" && ok || fail "mount a tmpfs of $((kb * 3 / 2)) KiB"

run_np 2 train $ARGS --train-iters 4 --save "$MNT/ck" --save-interval 2 >"$TMP/full.out" 2>"$TMP/full.err"
rc=$?
[ "$rc" -ne 0 ] && ok || fail "a save onto a full disk should fail the run"
[ "$(grep -c "ptdp: error:.*No space left on device" "$TMP/full.err")" -eq 2 ] && ok ||
    { fail "full disk: expected one 'No space left on device' message on each of 2 ranks"; cat "$TMP/full.err" >&2; }
[ "$(cat "$MNT/ck/latest_checkpointed_iteration.txt")" = 2 ] && [ ! -e "$MNT/ck/iter_0000004/manifest.json" ] && ok ||
    fail "full disk: latest moved or the failed checkpoint has a manifest"
[ -z "$(find "$MNT" -name '*.tmp.*')" ] && ok || { fail "full disk: temporary files left"; find "$MNT" >&2; }
"$PTDP" checkpoint verify "$MNT/ck" >"$TMP/v.out" 2>&1 && grep -q "iter_0000002: OK" "$TMP/v.out" && ok ||
    { fail "full disk: the previous checkpoint does not verify"; cat "$TMP/v.out" >&2; }
run_np 2 train $ARGS --train-iters 3 --load "$MNT/ck" >"$TMP/load.out" 2>&1 &&
    grep -q "loaded checkpoint .*iteration 2" "$TMP/load.out" && ok ||
    { fail "full disk: the previous checkpoint does not load"; grep error "$TMP/load.out" >&2; }

# read-only: the same file system, remounted
mount -o remount,ro "$MNT" && ok || fail "remount read-only"
run_np 2 train $ARGS --train-iters 3 --load "$MNT/ck" --save "$MNT/ck" >"$TMP/ro.out" 2>"$TMP/ro.err"
rc=$?
[ "$rc" -ne 0 ] && [ "$(grep -c "ptdp: error:.*--save $MNT/ck: the directory is not writable" "$TMP/ro.err")" -eq 2 ] &&
    ! grep -q "iteration .*/" "$TMP/ro.out" && ok ||
    { fail "read-only --save: expected a message on each of 2 ranks before training"; cat "$TMP/ro.err" >&2; }
# a file where the directory should be
: >"$TMP/afile"
run_np 2 train $ARGS --train-iters 1 --save "$TMP/afile/ck" >"$TMP/nd.out" 2>"$TMP/nd.err"
rc=$?
[ "$rc" -ne 0 ] && [ "$(grep -c "ptdp: error:.*cannot create directory .*afile.*Not a directory" "$TMP/nd.err")" -eq 2 ] && ok ||
    { fail "--save under a file: expected a message on each of 2 ranks"; cat "$TMP/nd.err" >&2; }
finish
