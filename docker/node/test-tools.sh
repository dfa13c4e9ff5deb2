#!/usr/bin/env bash
# The test tools of image tfc-node:SUITE (stage full of docker/node/Dockerfile), all in
# one RUN: with Docker's fuse-overlayfs storage driver (this project's machines) every
# layer's commit walks the whole image tree through FUSE, so nine layers of these
# cost about nine walks of a 4 GB tree. One layer costs one. Editing any part rebuilds
# all of it (about 12 minutes per suite); a fresh machine builds it all anyway.
# The build's ARGs arrive as environment variables: SUITE, TF_VERSION, JAX_VERSION,
# LIGHTNING_VERSION, ACCELERATE_VERSION, RAY_VERSION, PY_SPY_VERSION, EXTRA_CA_CERTS.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
say() { echo "test-tools: $*"; }

# EXTRA_CA_CERTS (PEM, from docker/testbed.sh: the host's own additions to its trust
# store) is trusted by pip for the downloads only; the image keeps Debian's.
{ cat /etc/ssl/certs/ca-certificates.crt; printf '%s\n' "${EXTRA_CA_CERTS:-}"; } >/tmp/pip-ca.pem
pip_install() { # VENV PIP-ARGS…
    local venv=$1
    shift
    "$venv/bin/pip" install --no-cache-dir --disable-pip-version-check --cert /tmp/pip-ca.pem "$@"
}

# TensorFlow for the real clients of tests/testbed/tensorflow.rs: tensorflow-cpu from
# PyPI in the venv /opt/tf (outside /root: tasks run as alice). tensorflow-cpu 2.21.0
# has wheels for CPython 3.10-3.13 only, so the venv uses the newest of those the suite
# ships: bookworm 3.11, trixie 3.13, forky 3.13 (beside its default 3.14). A suite with
# none of them fails here, naming the reason.
say "TensorFlow $TF_VERSION"
apt-get update
py=
for v in 3.13 3.12 3.11 3.10; do
    # grep reads it all (no -q): an early exit would fail apt-cache on SIGPIPE (pipefail).
    if apt-cache policy "python$v-venv" | grep 'Candidate: [0-9]' >/dev/null; then py=python$v; break; fi
done
[ -n "$py" ] || { echo "debian:$SUITE has no python3.10-3.13: no tensorflow-cpu==$TF_VERSION wheel" >&2; exit 1; }
apt-get install -y --no-install-recommends "$py" "$py-venv"
"$py" -m venv /opt/tf
pip_install /opt/tf "tensorflow-cpu==$TF_VERSION"
/opt/tf/bin/python -c 'import tensorflow as tf; print("tensorflow", tf.__version__)'

# PyTorch: Debian's own python3-torch (CPU-only; bookworm 1.13, trixie 2.6, forky 2.14)
# for the system python3. PyPI's torch wheels pull gigabytes of CUDA.
say "PyTorch"
apt-get install -y --no-install-recommends python3-torch
python3 -c 'import torch, torch.distributed as d; assert d.is_gloo_available(); print("torch", torch.__version__)'

# JAX: jax[cpu] from PyPI in the venv /opt/jax, on the interpreter of /opt/tf (jax
# 0.10.2 is the newest release with wheels for bookworm's 3.11 too, so every suite runs
# the same JAX).
say "JAX $JAX_VERSION"
"$(readlink -f /opt/tf/bin/python)" -m venv /opt/jax
pip_install /opt/jax "jax[cpu]==$JAX_VERSION"
/opt/jax/bin/python -c 'import jax; print("jax", jax.__version__, jax.devices())'

# torchrun, PyTorch Lightning and Hugging Face Accelerate for the real clients of
# tests/testbed/launchers.rs.
# torchrun: Debian's torch 2.4 on is built without libuv, yet torchrun's rendezvous
# stores ask for it whatever USE_LIBUV says (init_process_group's env:// alone reads
# it; the Dockerfile sets USE_LIBUV=0 for that): tfc_libuv.py (loaded by a .pth file)
# makes USE_LIBUV=0 their default too. Not needed with PyPI's torch, which has libuv.
# Lightning and Accelerate: in the venv /opt/pt on the system python3 with its site
# packages (Debian's torch, numpy, yaml, psutil, fsspec, requests…): the packages
# themselves from PyPI with --no-deps, so pip never pulls PyPI's CUDA torch, their
# remaining pure-Python dependencies from Debian. Only where Debian's torch is recent
# enough for them (Lightning 2.6 needs torch 2.1): trixie (2.6) and forky; bookworm's
# 1.13 gets neither. pip is removed once done.
if python3 -c 'import sys, torch; sys.exit(tuple(map(int, torch.__version__.split(".")[:2])) < (2, 4))'; then
    say "Lightning $LIGHTNING_VERSION, Accelerate $ACCELERATE_VERSION"
    site=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
    cp "$here/tfc_libuv.py" "$site/"
    echo 'import tfc_libuv' >"$site/tfc-libuv.pth"
    apt-get install -y --no-install-recommends python3-venv python3-tqdm python3-safetensors
    python3 -m venv --system-site-packages /opt/pt
    pip_install /opt/pt --no-deps \
        "pytorch-lightning==$LIGHTNING_VERSION" lightning-utilities==0.15.3 torchmetrics==1.9.0 \
        "accelerate==$ACCELERATE_VERSION" huggingface-hub==0.36.0
    /opt/pt/bin/pip uninstall -y --disable-pip-version-check pip
    /opt/pt/bin/python -c 'import pytorch_lightning as pl, accelerate; print("lightning", pl.__version__, "accelerate", accelerate.__version__)'
    USE_LIBUV=0 python3 -c 'import torch.distributed as d; d.TCPStore("127.0.0.1", 0, 1, True); print("TCPStore without libuv")'
else
    say "torch $(python3 -c 'import torch; print(torch.__version__)'): no Lightning/Accelerate"
fi

# Container runtimes the project may ship tests with, all Debian's: runc for Slurm's
# own `srun --container=BUNDLE` (oci.conf), squashfs-tools to pack the images, and
# busybox-static, whose root (made at node start by entrypoint.sh from
# docker/node/images/, so that editing an image never rebuilds the image) is the image
# of the container stand-in (tests/container_standin/: a SPANK plugin written for the
# tests that does what pyxis's task_init does) and of the runc and Apptainer tests.
say "container runtimes"
apt-get install -y --no-install-recommends squashfs-tools busybox-static runc jq

# Real accounting for the testbed (sacct; TorchX asks it every job's state,
# tests/testbed/launchers_torchx.rs): slurmdbd and MariaDB from Debian, run on ctl by
# entrypoint.sh. forky's MariaDB (11.8) leaves the data directory empty when its service
# may not start (policy-rc.d): made here then, as its postinst would.
say "slurmdbd and MariaDB"
apt-get install -y --no-install-recommends mariadb-server slurmdbd
[ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql --datadir=/var/lib/mysql \
    --skip-test-db --auth-root-authentication-method=socket >/dev/null
test -d /var/lib/mysql/mysql

# Apptainer, for the Apptainer mirror's test (tests/testbed/containers.rs): Debian
# packages it only in sid (glibc >= 2.38); forky takes that one package from sid
# (pinned low, so nothing else comes from there). Other suites: none. The last apt
# install: sid's package lists stay until the end, without the pin.
if [ "$SUITE" = forky ]; then
    say "Apptainer from sid"
    echo 'deb http://deb.debian.org/debian sid main' >/etc/apt/sources.list.d/sid.list
    printf 'Package: *\nPin: release a=unstable\nPin-Priority: 100\n' >/etc/apt/preferences.d/sid
    apt-get update
    apt-get install -y --no-install-recommends apptainer
    rm /etc/apt/sources.list.d/sid.list /etc/apt/preferences.d/sid
    apptainer --version
fi

# Ray for the real clients of tests/testbed/ray.rs: ray[default] from PyPI (the
# dashboard agent and its ports too, as sites install it) in the venv /opt/ray on the
# python of /opt/tf (ray 2.60.0 has wheels for CPython 3.10-3.13). Bookworm's image
# only: Ray's clusters train on that suite alone (tests/where.tsv, the
# same PyPI release on every suite), so the other images build without it.
if [ "$SUITE" = bookworm ]; then
    say "Ray $RAY_VERSION"
    "$(readlink -f /opt/tf/bin/python)" -m venv /opt/ray
    pip_install /opt/ray "ray[default]==$RAY_VERSION"
    /opt/ray/bin/python -c 'import ray; print("ray", ray.__version__)'
fi

# py-spy for the Python stacks of `tf-cluster hang` (tests/testbed/hang.rs): PyPI's
# wheel (one static binary) in the venv /opt/py-spy, linked into /usr/local/bin so that
# the probe finds it on the PATH of the job's user. Bookworm's image only: the hang
# unit runs on that suite alone (tests/where.tsv). It reads another process's memory
# with process_vm_readv, which the kernel allows between processes of one user (no
# capability: the tasks and the probe are both the job's user) unless Yama's
# ptrace_scope is 1 or more (then only a process's ancestors, or CAP_SYS_PTRACE).
if [ "$SUITE" = bookworm ]; then
    say "py-spy $PY_SPY_VERSION"
    "$(readlink -f /opt/tf/bin/python)" -m venv /opt/py-spy
    pip_install /opt/py-spy "py-spy==$PY_SPY_VERSION"
    ln -s /opt/py-spy/bin/py-spy /usr/local/bin/py-spy
    py-spy --version
fi

apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /tmp/pip-ca.pem
say "done"
