#!/usr/bin/env bash
# test_slurm_script.sh - scripts/slurm/train.sbatch run with stand-ins for
# srun and scontrol that record what they were asked: srun gets the job's CPUs
# per task (Slurm >= 22.05 does not pass --cpus-per-task on), and the script
# requeues itself exactly when a run stopped early with a new checkpoint
# (time limit, preemption), never after the last iteration, a failure, or a
# run that saved nothing.
source "$PTDP_SRC/tests/script_lib.sh"
SCRIPT=$PTDP_SRC/scripts/slurm/train.sbatch

mkdir -p "$TMP/bin" "$TMP/ckpt"
# srun: logs its arguments and environment, then plays ptdp: writes
# FAKE_LATEST as the latest checkpoint (if set) and exits FAKE_STATUS
cat >"$TMP/bin/srun" <<'SH'
#!/bin/bash
{ echo "args: $*"; echo "SRUN_CPUS_PER_TASK=${SRUN_CPUS_PER_TASK:-}"; echo "OMP_NUM_THREADS=${OMP_NUM_THREADS:-}"; } >"$FAKE_LOG/srun.log"
[ -n "${FAKE_LATEST:-}" ] && echo "$FAKE_LATEST" >"$CKPT/latest_checkpointed_iteration.txt"
exit "${FAKE_STATUS:-0}"
SH
cat >"$TMP/bin/scontrol" <<'SH'
#!/bin/bash
echo "$*" >>"$FAKE_LOG/scontrol.log"
SH
chmod +x "$TMP/bin/srun" "$TMP/bin/scontrol"

# sbatch_run BEFORE FAKE_LATEST FAKE_STATUS: one run of the script in a job
# whose checkpoint says BEFORE (empty: none yet); sets $rc
sbatch_run() {
    rm -f "$TMP/srun.log" "$TMP/scontrol.log" "$TMP/ckpt/latest_checkpointed_iteration.txt"
    [ -n "$1" ] && echo "$1" >"$TMP/ckpt/latest_checkpointed_iteration.txt"
    PATH=$TMP/bin:$PATH FAKE_LOG=$TMP FAKE_LATEST=$2 FAKE_STATUS=$3 CKPT=$TMP/ckpt TRAIN_ITERS=5000 \
        SLURM_JOB_ID=42 SLURM_CPUS_PER_TASK=8 OMP_NUM_THREADS=1 \
        bash "$SCRIPT" >"$TMP/out.txt" 2>&1
    rc=$?
}

# 1. the time limit's SIGTERM: ptdp saved iteration 1000 and exited 0
sbatch_run "" 1000 0
[ "$rc" = 0 ] && ok || bad "time limit: status $rc"
[ "$(cat "$TMP/scontrol.log" 2>/dev/null)" = "requeue 42" ] && ok || bad "time limit: no 'scontrol requeue 42'"
grep -q -- "--cpus-per-task=8" "$TMP/srun.log" && ok || bad "srun did not get --cpus-per-task=8"
grep -q "^SRUN_CPUS_PER_TASK=8$" "$TMP/srun.log" && ok || bad "SRUN_CPUS_PER_TASK not exported"
grep -q "^OMP_NUM_THREADS=8$" "$TMP/srun.log" && ok || bad "OMP_NUM_THREADS is not the CPUs per task"
for f in "--load $TMP/ckpt" "--save $TMP/ckpt" "--exit-signal-handler" "--train-iters 5000"; do
    grep -q -- "$f" "$TMP/srun.log" && ok || bad "ptdp was not given $f"
done
# 2. a resumed run that reached the last iteration
sbatch_run 1000 5000 0
[ "$rc" = 0 ] && ok || bad "finished: status $rc"
[ ! -e "$TMP/scontrol.log" ] && ok || bad "finished job was requeued"
# 3. a failure (a crash, a bad flag): its status, no requeue
sbatch_run 1000 "" 2
[ "$rc" = 2 ] && ok || bad "failure: status $rc, not 2"
[ ! -e "$TMP/scontrol.log" ] && ok || bad "failed job was requeued"
# 4. status 0 but no new checkpoint: requeueing would loop forever
sbatch_run 1000 1000 0
[ "$rc" = 1 ] && ok || bad "no progress: status $rc, not 1"
[ ! -e "$TMP/scontrol.log" ] && ok || bad "job without progress was requeued"
grep -q "no new checkpoint" "$TMP/out.txt" && ok || bad "no progress: no message"
finish
