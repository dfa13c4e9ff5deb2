#!/bin/bash
# Two PyTorch DDP steps at once on the same nodes of one allocation, e.g.
#
#   salloc -N3 --ntasks-per-node=1 examples/pytorch/two-steps.sh reserved
#   salloc -N3 --ntasks-per-node=1 examples/pytorch/two-steps.sh jobid
#   salloc -N3 --ntasks-per-node=1 examples/pytorch/two-steps.sh torchrun
#
# Step A trains and then keeps its process group (rank 0's store listening on
# MASTER_PORT) until step B has ended; B starts once A has trained. Both run
# with --torch-cluster; with `jobid` every task of both overrides MASTER_PORT
# with the port Lightning's SLURMEnvironment derives from the job id when
# MASTER_PORT is unset (15000 + the job id's last 4 digits; enroot's PyTorch
# hook: 61000 + id % 4536; JAX: 61440 + id % 4096): one port for every step of
# the job, so the two rank 0s on one node want the same port. With `torchrun`
# every task is a torchrun launcher starting one worker, its arguments the
# plugin's PET_* variables (each step's rendezvous on its own reserved port).
#
# Prints `JOB=id`, `A_ALIVE_WHEN_B_ENDED=0|1`, and for each step `STEP A rc=N`
# then its output lines prefixed `A|` (srun --label: `A|RANK: text`).
# PROBE (optional, a shell command) runs in every task before python3.
set -u
: "${SLURM_NTASKS:?not inside an allocation}"
mode=${1:?usage: two-steps.sh reserved|jobid|torchrun}
dir=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "$HOME/two-steps.XXXXXX")
case "$mode" in
reserved) fix= run=python3 ;;
jobid) fix='export MASTER_PORT=$((15000 + SLURM_JOB_ID % 10000));' run=python3 ;;
torchrun) fix= run='torchrun --nproc_per_node=1 --redirects=1 --tee=1' ;;
*) echo "two-steps.sh: mode must be reserved, jobid or torchrun" >&2; exit 2 ;;
esac
step() { # NAME [ddp.py args..]
    local name=$1
    shift
    srun --ntasks="$SLURM_NTASKS" --overlap --kill-on-bad-exit=1 --label --torch-cluster \
        bash -c "${PROBE:-}; $fix exec $run $dir/ddp.py $*" >"$work/$name.out" 2>&1
}
step A --wait-for "$work/B.done" &
a=$!
# B starts when A has trained (all its RESULT lines), A still holding its port.
want=$SLURM_NTASKS
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
echo "JOB=$SLURM_JOB_ID"
echo "A_ALIVE_WHEN_B_ENDED=$alive"
echo "STEP A rc=$ra"
sed 's/^/A|/' "$work/A.out"
echo "STEP B rc=$rb"
sed 's/^/B|/' "$work/B.out"
rm -rf "$work"
