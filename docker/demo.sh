#!/usr/bin/env bash
# The demo: builds the plugin's Debian package, starts the 3-node Slurm testbed
# with it installed, and runs one `srun --tf-cluster` step that prints each
# task's TF_CONFIG and CUDA_VISIBLE_DEVICES.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

bash docker/prerequisites.sh
# The Debian package for this host's Slurm (target/deb), which every container installs.
bash packaging/deb.sh >/dev/null
docker/testbed.sh up

step=(srun -N3 -n6 --ntasks-per-node=2 --gres=gpu:4 --tf-cluster=chief:1,ps:1,worker:4)
echo
echo "\$ ${step[*]} python3 -c '…print TF_CONFIG…'"
docker/testbed.sh exec "${step[@]}" --label python3 -c '
import json, os, socket
tf = json.loads(os.environ["TF_CONFIG"])
print(socket.gethostname(), "task", tf["task"], "CUDA_VISIBLE_DEVICES=" + os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
print("   TF_CONFIG=" + os.environ["TF_CONFIG"])' | sort -s -t: -k1,1n
