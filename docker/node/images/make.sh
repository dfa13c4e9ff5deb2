#!/bin/sh
# Makes the test images in /opt/tfc-images at a container's start (called by
# entrypoint.sh): busybox/ (a root directory: what the container stand-in
# enters) and busybox.sqsh (runc's bundle, Apptainer's sandbox), each with
# /etc/tfc-image naming it and /etc/environment from ./environment;
# busybox-no-gpus/ the same without the GPU lists; python-torch/ (below).
set -eu
here=$(dirname "$0")
out=/opt/tfc-images
rm -rf "$out"; install -d -m 755 "$out"
# The Slurm-only image (the Dockerfile's stage slurm, the demo's) has neither
# busybox-static nor squashfs-tools: no images there, which only the container
# tests need.
if [ ! -x /bin/busybox ] || ! command -v mksquashfs >/dev/null; then
    echo "make.sh: no busybox-static or squashfs-tools in this image: no test images (the" \
        "container tests need the full image)" >&2
    exit 0
fi
make_one() {
    drop=$2 root=$out/$1
    mkdir -p "$root/bin" "$root/etc" "$root/proc" "$root/sys" "$root/dev" "$root/tmp" "$root/home" "$root/run"
    # /usr/bin and /usr/sbin as /bin: a path resolved on a merged-/usr host
    # (/usr/bin/sh) runs in the image too.
    mkdir -p "$root/usr"; ln -s ../bin "$root/usr/bin"; ln -s ../bin "$root/usr/sbin"
    cp /bin/busybox "$root/bin/busybox"
    "$root/bin/busybox" --list | while read -r c; do [ "$c" = busybox ] || ln -s busybox "$root/bin/$c"; done
    echo busybox >"$root/etc/tfc-image"
    grep -v '^#' "$here/environment" | grep -Ev "^($drop)=" >"$root/etc/environment"
    echo 'alice:x:1000:1000::/home/alice:/bin/sh' >"$root/etc/passwd"
    chmod -R a+rX "$root"
}
make_one busybox NONE
make_one busybox-no-gpus 'CUDA_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|ZE_AFFINITY_MASK|GPU_DEVICE_ORDINAL'
# busybox.sqsh alone: runc's and Apptainer's tests unpack it, nothing reads
# another (each mksquashfs costs a third of a second at every container start).
mksquashfs "$out/busybox" "$out/busybox.sqsh" -noappend -all-root -quiet >/dev/null

# python-torch/: a root directory with the node's python3 and Debian's torch
# and no Slurm command, as a user's PyTorch image is: its own /usr/bin holds
# python3 and sh alone (no scontrol, srun, sbatch), its own /etc is the
# node's without /etc/slurm and /etc/munge (and /run is empty: no munge
# socket). The node's /usr/lib (the Python library, torch, the shared
# libraries; Slurm's libraries but no command) is too big to copy: a step
# binds it in, `--container-mounts=/usr/lib:/usr/lib` (the stand-in binds it
# in the task's own mount namespace; the node's paths are untouched).
make_python_torch() {
    root=$out/python-torch
    mkdir -p "$root/proc" "$root/sys" "$root/dev" "$root/tmp" "$root/home" "$root/run" \
        "$root/usr/bin" "$root/usr/sbin" "$root/usr/lib" "$root/etc"
    for d in bin lib lib64 sbin; do ln -s "usr/$d" "$root/$d"; done
    cp -a /usr/lib64 "$root/usr/"
    python=$(readlink -f /usr/bin/python3)
    cp "$python" "$root/usr/bin/"; ln -s "$(basename "$python")" "$root/usr/bin/python3"
    cp /usr/bin/dash "$root/usr/bin/"; ln -s dash "$root/usr/bin/sh"
    tar -C /etc --exclude=./slurm --exclude=./munge -cf - . | tar -C "$root/etc" -xf -
    echo python-torch >"$root/etc/tfc-image"
    # The image's values of what --torch-cluster sets, which must lose (not the
    # network's names: a step without --tf-network keeps an image's own).
    grep -E '^(MASTER_ADDR|MASTER_PORT|RANK|LOCAL_RANK|WORLD_SIZE|TF_CLUSTER_RUN_ID)=' \
        "$here/environment" >"$root/etc/environment"
    chmod a+rX "$root" "$root/etc/tfc-image" "$root/etc/environment"
}
make_python_torch
