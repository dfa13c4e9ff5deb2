#!/bin/sh
# Makes the test images in /opt/tfc-images at a container's start (called by
# entrypoint.sh): busybox/ (a root directory: what the container stand-in
# enters) and busybox.sqsh (runc's bundle, Apptainer's sandbox), each with
# /etc/tfc-image naming it and /etc/environment from ./environment;
# busybox-no-gpus the same without the GPU lists.
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
    name=$1 drop=$2 root=$out/$1
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
    mksquashfs "$root" "$out/$name.sqsh" -noappend -all-root -quiet >/dev/null
}
make_one busybox NONE
make_one busybox-no-gpus 'CUDA_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|ZE_AFFINITY_MASK|GPU_DEVICE_ORDINAL'
