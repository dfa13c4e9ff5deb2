#!/bin/bash
# Two PyTorch DDP steps at once on the same nodes of one allocation, e.g.
#
#   salloc -N3 --ntasks-per-node=2 examples/pytorch/two-steps.sh reserved
#   salloc -N3 --ntasks-per-node=2 examples/pytorch/two-steps.sh jobid
#
# Step A trains and then keeps its process group (rank 0's store listening on
# MASTER_PORT) until step B has ended; B starts once A has trained. Both run
# with --torch-cluster; with `jobid` every task of both overrides MASTER_PORT
# with the port Lightning and enroot's hook derive from the job id
# (10000 + SLURM_JOB_ID % 20000), so the two rank 0s on one node want one port.
#
# Prints, for each step, `STEP A rc=N` then its output lines prefixed `A|`
# (srun --label: `A|RANK: text`), and `A_ALIVE_WHEN_B_ENDED=0|1`.
# PROBE (optional, a shell command) runs in every task before python3.
set -u
mode=${1:?usage: two-steps.sh reserved|jobid}
dir=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "$HOME/two-steps.XXXXXX")
case "$mode" in
reserved) fix= ;;
jobid) fix='export MASTER_PORT=$((10000 + SLURM_JOB_ID % 20000));' ;;
*) echo "two-steps.sh: mode must be reserved or jobid" >&2; exit 2 ;;
esac
step() { # NAME [ddp.py args..]
    local name=$1
    shift
    srun --overlap --kill-on-bad-exit=1 --label --torch-cluster \
        bash -c "${PROBE:-}; $fix exec python3 $dir/ddp.py $*" >"$work/$name.out" 2>&1
}
step A --wait-for "$work/B.done" &
a=$!
# B starts when A has trained (all its RESULT lines), A still holding its port.
want=${SLURM_NTASKS:?not inside an allocation}
for _ in $(seq 600); do
    [ "$(grep -c 'RESULT ' "$work/A.out")" -ge "$want" ] && break
    kill -0 "$a" 2>/dev/null || break
    sleep 0.2
done
step B
rb=$?
alive=0
kill -0 "$a" 2>/dev/null && alive=1
touch "$work/B.done"
wait "$a"
ra=$?
echo "A_ALIVE_WHEN_B_ENDED=$alive"
echo "STEP A rc=$ra"
sed 's/^/A|/' "$work/A.out"
echo "STEP B rc=$rb"
sed 's/^/B|/' "$work/B.out"
rm -rf "$work"
