#!/usr/bin/env bash
# The demo, a few minutes on a fresh machine: builds the plugin's Debian package,
# starts the 3-node Slurm testbed on the Slurm-only image (docker/node/Dockerfile's
# stage slurm: no TensorFlow, no accounting) with the package installed, and runs one
# step each with --tf-cluster, --torch-cluster and --jax-cluster, printing what every
# task got. The testbed stays up for your own steps (printed at the end).
#
# At once: the image (base image, Slurm from Debian) and the part of the Rust build
# that needs no Slurm header (the core, the CLI, bindgen and the other dependencies);
# then the plugin against the image's own Slurm headers (as docker/matrix.sh builds
# it), the package (packaging/deb.sh), `testbed.sh up`. Logs, builds: target/demo-SUITE/.
#
# Environment: TFC_SUITE (bookworm: Slurm 22.05; trixie 24.11, forky 26.05),
# TFC_PREFIX (tfc: the testbed's name, see docker/testbed.sh), TFC_BASE_IMAGE.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
suite=${TFC_SUITE:-bookworm}
dir=target/demo-$suite
export TFC_SUITE=$suite TFC_IMAGE_STAGE=slurm
export TFC_DEB_DIR=$repo/$dir/deb TFC_PLUGIN_DIR=$repo/$dir/release
t0=$SECONDS
times=()
took() { times+=("$(printf '%-48s %4ds' "$1" "$2")"); }
say() { echo "demo: $*" >&2; }
fail() { say "$1 FAILED; the end of $2:"; tail -n 30 "$2" >&2; exit 1; }

# Only what the demo needs: bindgen's libclang, debootstrap for the base image.
t=$SECONDS
bash docker/prerequisites.sh libclang1-14 libclang-common-14-dev debootstrap
took "prerequisites" $((SECONDS - t))
mkdir -p "$dir"

say "building the Slurm-only image tfc-node-slurm:$suite and the plugin side by side"
(
    s=$SECONDS
    bash docker/base-image.sh "$suite" "${TFC_BASE_IMAGE:-debian:$suite}"
    echo "$((SECONDS - s))" >"$dir/base.secs"
    s=$SECONDS
    docker/testbed.sh headers "$dir/include"
    echo "$((SECONDS - s))" >"$dir/image.secs"
) >"$dir/image.log" 2>&1 &
image_pid=$!
# Meanwhile all that needs no Slurm header: the core, the CLI, the plugin's
# dependencies and its build script (bindgen), which then stops for want of the
# headers (it runs again once they are there). Niced: the image is the longer path
# (measured: cargo done 100 s before it), so it gets the CPU first.
t=$SECONDS
nohdr=$repo/$dir/no-headers-yet
SLURM_INCLUDE_DIR=$nohdr CARGO_TARGET_DIR=$dir nice -n 10 cargo build --release --keep-going \
    >"$dir/cargo.log" 2>&1 || grep -qF "$nohdr/slurm/spank.h not found" "$dir/cargo.log" ||
    { kill "$image_pid"; fail "cargo build" "$dir/cargo.log"; }
took "cargo: all but the plugin" $((SECONDS - t))
t=$SECONDS
wait "$image_pid" || fail "the image build" "$dir/image.log"
took "  beside it: base image (debootstrap if absent)" "$(cat "$dir/base.secs")"
took "  beside it: image (stage slurm), Slurm headers" "$(cat "$dir/image.secs")"
took "then waited for the image" $((SECONDS - t))

# The plugin against the image's own Slurm, and the package every container installs.
t=$SECONDS
SLURM_INCLUDE_DIR=$dir/include CARGO_TARGET_DIR=$dir bash packaging/deb.sh "$dir/deb" \
    >"$dir/deb.log" 2>&1 || fail "packaging/deb.sh" "$dir/deb.log"
took "cargo: the plugin, and the .deb" $((SECONDS - t))
say "package: $(basename "$dir"/deb/tf-cluster_*.deb)"

t=$SECONDS
docker/testbed.sh up
took "testbed up (ctl, node1..3)" $((SECONDS - t))

# One step per framework, 2 nodes x 2 tasks, 4 (fake) GPUs per node: each task prints
# its host and its variables (srun --label: its rank first), sorted by rank.
show() {
    local re=$1
    shift
    echo
    echo "\$ srun $* sh -c 'hostname; env | grep -E \"$re\"'"
    # shellcheck disable=SC2016 # expanded by the task's shell
    docker/testbed.sh exec srun --label "$@" sh -c \
        'hostname; env | grep -E "$0" | sort | sed "s/^/    /"' "$re" </dev/null |
        sort -s -n -t: -k1,1
}
t=$SECONDS
show '^(TF_CONFIG|CUDA_VISIBLE_DEVICES)=' \
    -N2 --ntasks-per-node=2 --gres=gpu:4 --tf-cluster=chief:1,worker:3
show '^(MASTER_ADDR|MASTER_PORT|RANK|WORLD_SIZE|LOCAL_RANK|CUDA_VISIBLE_DEVICES)=' \
    -N2 --ntasks-per-node=2 --gres=gpu:4 --torch-cluster
show '^(JAX_[A-Z_]*|SLURM_PROCID|SLURM_NTASKS|CUDA_VISIBLE_DEVICES)=' \
    -N2 --ntasks-per-node=2 --gres=gpu:4 --jax-cluster
took "the three steps" $((SECONDS - t))

tb=docker/testbed.sh
[ "${TFC_PREFIX:-tfc}" = tfc ] || tb="TFC_PREFIX=$TFC_PREFIX docker/testbed.sh"
slurm=$(docker/testbed.sh exec srun --version </dev/null | awk '{ print $2 }')
cat <<EOF

The testbed stays up (Slurm $slurm, 3 nodes of 4 fake GPUs). Go on:
  $tb exec srun -N3 --ntasks-per-node=2 --tf-cluster=ps:1,worker:5 printenv TF_CONFIG
        (any srun, sbatch or salloc, as user alice on the submit host)
  $tb exec tf-cluster explain -N3 --ntasks-per-node=2 --tf-cluster=ps:1,worker:5
        (the CLI twin: what a step would get, before running it)
  $tb exec bash        (a shell on the submit host)
  $tb down             (removes the testbed)
The options: docs/user-guide.md. No TensorFlow, PyTorch or JAX in this image: the
test image has them (bash tests/run.sh; docs/testing.md).

Time:
EOF
took "total" $((SECONDS - t0))
printf '  %s\n' "${times[@]}"
