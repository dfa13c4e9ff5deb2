#!/usr/bin/env bash
# Multi-node Slurm testbed for tf-cluster: one controller + three compute nodes in
# Docker containers (plain `docker`, no compose), Debian's Slurm, 4 fake GPUs per node.
#
#   docker/testbed.sh up          build image, (re)create network + containers, wait
#                                 until node[1-3] are idle (idempotent: running
#                                 containers with unchanged config are kept, drained
#                                 nodes resumed; any failure exits non-zero)
#   docker/testbed.sh down        remove containers and network (docker/run/ is kept)
#   docker/testbed.sh status      containers, sinfo, squeue
#   docker/testbed.sh exec CMD..  run CMD in tfc-ctl as alice, cwd /home/alice,
#                                 e.g. `docker/testbed.sh exec srun -N3 -n6 hostname`
#   docker/testbed.sh admin CMD.. run CMD in tfc-ctl as root (scontrol update ...)
#   docker/testbed.sh node-exec NODE CMD..  run CMD as root in tfc-NODE (NODE=node1..)
#   docker/testbed.sh logs [ctl|node1|..] [LINES]   tail slurmctld/slurmd logs
#   docker/testbed.sh plugstack FILE|default|empty   swap /etc/slurm/plugstack.conf
#   docker/testbed.sh headers DIR build the image and copy its Slurm's headers to
#                                 DIR/slurm: SLURM_INCLUDE_DIR=DIR builds the plugin for
#                                 exactly the Slurm of TFC_SUITE (docker/matrix.sh does)
#
# Containers: tfc-ctl (hostname ctl: munged + slurmctld, and MariaDB + slurmdbd
# for real accounting; the submit host, tests run srun/sbatch there) and tfc-node1..3 (hostnames node1..3: munged + slurmd -D,
# /dev/nvidia0..3 fake GPUs). Every name (ctl, node1..3) resolves in
# every container through the user-defined network `tfc` (eth0). A second network,
# `tfc-ib` (eth1 in every container: Docker names the interfaces), is the "fast
# network": only there do node1-ib..node3-ib (and ctl-ib) resolve, to the eth1
# addresses (host-template={}-ib; tests/testbed_network.rs disconnects a node from it).
#
# The Slurm configuration is in docker/config/ (slurm.conf, gres.conf, cgroup.conf,
# and topology/NAME/ for TFC_TOPOLOGY=NAME); `up` copies it to the run dir.
# Generated files (git-ignored) live in docker/run/ (TFC_RUN_DIR): etc/ is
# bind-mounted as /etc/slurm (slurm.conf, gres.conf, cgroup.conf, plugstack.conf)
# in every container, munge.key is the shared key, log/<host>/ holds each daemon's
# log (also readable after a container died), home/ is /home in every container
# (shared like NFS on a real cluster: /home/alice = docker/run/home/alice, uid 1000;
# sbatch output files land there; `down` deletes it).
#
# The nodes are NOT privileged: the default device cgroup already allows mknod of
# the fake GPUs and /sys/fs/cgroup is visible read-only, which is all slurmd needs
# with proctrack/linuxproc + task/none. (--privileged fails on a Docker daemon that
# lacks a capability itself, e.g. "unable to apply caps: operation not permitted".)
# The nodes run without Docker's seccomp filter (--security-opt seccomp=unconfined,
# no capability added): a container runtime (the tests' stand-in of pyxis, rootless
# runc) creates user and mount namespaces as the job's user, which that filter
# refuses without CAP_SYS_ADMIN.
# TFC_NODE_FLAGS adds `docker run` flags for the nodes, e.g. TFC_NODE_FLAGS=--privileged.
#
# The plugin, as admins install it: the Debian package in ${TFC_DEB_DIR:-<repo>/target/deb}
# (packaging/deb.sh; docker/matrix.sh builds one per suite) is mounted at
# /opt/tfc-deb and every container `apt-get install`s it at start (entrypoint.sh),
# so images stay shared and the package's own plugstack snippet enables it:
# /etc/slurm/plugstack.conf.d/ is a per-container directory
# (docker/run/plugstack.d/<host>, emptied when the container is created) mounted
# over the shared /etc/slurm, and the default plugstack.conf is the one
# slurm-wlm-basic-plugins ships (`include /etc/slurm/plugstack.conf.d/*.conf`).
# A new .deb recreates the containers at the next `up`.
# Without a .deb there (a development shortcut, e.g. docker/launch-bench.sh), the
# bare .so is used: the default plugstack.conf is then plugstack.conf.example with
# its path replaced by /opt/tf-cluster/libtf_cluster.so; with neither, an empty
# plugstack.conf (with a warning). ${TFC_PLUGIN_DIR:-<repo>/target/release} is
# mounted read-only at /opt/tf-cluster in all containers either way (it holds the
# fault-injection build tests/testbed_hardening.rs points plugstack lines at).
# TFC_PLUGSTACK=FILE|empty at `up` overrides the default.
#
# Swapping plugstack.conf at run time (no restart needed for srun/sbatch and new
# steps: srun and every slurmstepd read it afresh; slurmd itself only reads it at
# start, which matters only for job prolog/epilog callbacks):
#   docker/testbed.sh plugstack my-plugstack.conf   # copy FILE in (atomic rename)
#   docker/testbed.sh plugstack empty               # no plugin at all
#   docker/testbed.sh plugstack default             # back to the generated default
# or do the same from a test: write docker/run/etc/.plugstack.conf.XXXX, then
# rename(2) it onto docker/run/etc/plugstack.conf (same directory => atomic).
# Never rewrite the file in place: a step starting meanwhile could read half a file.
#
# Slurm versions: TFC_SUITE picks the Debian suite and so the Slurm (bookworm 22.05,
# trixie 24.11, forky 26.05). The config differs only where the version demands:
# from 24.11 on cgroup.conf says CgroupPlugin=disabled (nothing here needs cgroups,
# and an unprivileged container cannot manage them), before that autodetect (22.05
# always loads one). TFC_TOPOLOGY=tree adds TopologyPlugin=topology/tree with the
# switches s1 = node[1,3] and s2 = node2, under which Slurm 26.05 (not 22.05/24.11)
# lays block distributions out as node1, node3, node2 (tests/testbed_topology.rs).
# TFC_TOPOLOGY=tree2: switches s1 = node[2-3], s2 = node1; 26.05 starts block
# layouts on node2 (node2, node3, node1), so rank 0 is not on node1
# (tests/testbed_topology_tree2.rs). TFC_TOPOLOGY=block: topology/block with the
# one-node blocks b1 = node3, b2 = node1, b3 = node2; 26.05 lays blocks out as
# node3, node1, node2 (tests/testbed_topology_block.rs). Slurm before 23.11 has no
# topology/block: there `block` configures no topology plugin (with a warning).
#
# TFC_GRES=NAME: docker/config/gres/NAME.conf in place of gres.conf (vendors: each
# node another vendor's environment flag, tests/testbed_gpu_vendors.rs).
#
# Environment: TFC_PREFIX (tfc: containers tfc-ctl, tfc-node1..3, networks tfc and
# tfc-ib, run dir docker/run; another prefix P gives P-ctl …, networks P and P-ib,
# docker/run-P),
# TFC_SUITE (bookworm), TFC_IMAGE_STAGE (full, see below), TFC_IMAGE (tfc-node:$TFC_SUITE),
# TFC_BASE_IMAGE (debian:$TFC_SUITE: the base; another tag, e.g. a fresh one to time a build
# from nothing, is made by docker/base-image.sh too), TFC_TOPOLOGY, TFC_GRES, TFC_RUN_DIR,
# TFC_DEB_DIR, TFC_PLUGIN_DIR, TFC_PLUGSTACK, TFC_PLUGSTACK_EXAMPLE (<repo>/plugstack.conf.example),
# TFC_NODE_FLAGS, TFC_UP_TIMEOUT (seconds to wait for idle nodes, 120).
#
# TFC_IMAGE_STAGE=slurm builds and runs only the first stage of docker/node/Dockerfile
# (`docker build --target slurm`, image tfc-node-slurm:$TFC_SUITE): Slurm, munge and
# the small tools, a few minutes to build where the full image (the default stage, full:
# TensorFlow, PyTorch, JAX, MariaDB…) takes twenty; docker/demo.sh uses it. What that
# image lacks is left out at start-up: without slurmdbd and MariaDB, slurm.conf's
# accounting lines are dropped (no sacct; `up` waits for no database); without
# busybox-static and squashfs-tools the container tests' images are not made. The
# tests need the full image.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
SUITE=${TFC_SUITE:-bookworm}
# The stage of docker/node/Dockerfile: full (the tests') or slurm (the demo's).
STAGE=${TFC_IMAGE_STAGE:-full}
case "$STAGE" in
full) IMAGE=${TFC_IMAGE:-tfc-node:$SUITE} ;;
slurm) IMAGE=${TFC_IMAGE:-tfc-node-slurm:$SUITE} ;;
*) echo "testbed: error: TFC_IMAGE_STAGE must be full or slurm, not '$STAGE'" >&2; exit 1 ;;
esac
# The Debian image it is built on (docker/base-image.sh makes it when absent).
BASE=${TFC_BASE_IMAGE:-debian:$SUITE}
# Whether the image has slurmdbd and MariaDB (build_image tells): else no accounting.
ACCOUNTING=1
# TFC_PREFIX names an independent testbed (containers, network, run dir), so
# several can run side by side, e.g. one per Slurm version.
PREFIX=${TFC_PREFIX:-tfc}
NET=$PREFIX
# The second ("fast") network, eth1 in every container.
NET_IB=$PREFIX-ib
if [ "$PREFIX" = tfc ]; then RUN=${TFC_RUN_DIR:-$here/run}; else RUN=${TFC_RUN_DIR:-$here/run-$PREFIX}; fi
PLUGIN_DIR=${TFC_PLUGIN_DIR:-$repo/target/release}
DEB_DIR=${TFC_DEB_DIR:-$repo/target/deb}
UP_TIMEOUT=${TFC_UP_TIMEOUT:-120}
NODES=(node1 node2 node3)
CTL=$PREFIX-ctl
PLUGIN_SO=/opt/tf-cluster/libtf_cluster.so

die() { echo "testbed: error: $*" >&2; exit 1; }
note() { echo "testbed: $*" >&2; }
exists() { docker container inspect "$1" >/dev/null 2>&1; }
running() { [ "$(docker container inspect -f '{{.State.Running}}' "$1" 2>/dev/null)" = true ]; }
all_containers() { echo "$CTL"; for n in "${NODES[@]}"; do echo "$PREFIX-$n"; done; }
state_of() { local s; s=$(docker container inspect -f '{{.State.Status}} exit={{.State.ExitCode}}' "$1" 2>/dev/null) || s=absent; echo "$s"; }
host_of() { case "$1" in "$PREFIX"-*) echo "${1#"$PREFIX"-}" ;; *) echo "$1" ;; esac; }

command -v docker >/dev/null || die "docker is not installed"

# Atomically install $1 (a file) as $RUN/etc/plugstack.conf.
install_plugstack() {
    local src=$1 tmp
    mkdir -p "$RUN/etc"
    tmp=$(mktemp "$RUN/etc/.plugstack.conf.XXXXXX")
    cat "$src" >"$tmp" || { rm -f "$tmp"; die "cannot read $src"; }
    chmod 0644 "$tmp"
    mv -f "$tmp" "$RUN/etc/plugstack.conf"
}

# The tf-cluster .deb the containers install, if DEB_DIR holds exactly one.
deb_file() {
    local debs=("$DEB_DIR"/tf-cluster_*.deb)
    [ ${#debs[@]} = 1 ] && [ -f "${debs[0]}" ] && echo "${debs[0]}"
}

# Write the default plugstack.conf to stdout.
default_plugstack() {
    local example=${TFC_PLUGSTACK_EXAMPLE:-$repo/plugstack.conf.example}
    if [ -n "$(deb_file)" ]; then
        # What Debian's slurm-wlm-basic-plugins ships: the package's snippet is read.
        echo "# generated by docker/testbed.sh: Debian's default, the tf-cluster package enables itself"
        echo "include /etc/slurm/plugstack.conf.d/*.conf"
    elif [ ! -f "$example" ]; then
        note "warning: $example does not exist: using an EMPTY plugstack.conf (no plugin)"
        echo "# empty: $example did not exist when this was generated"
    elif [ ! -e "$PLUGIN_DIR/libtf_cluster.so" ]; then
        note "warning: $PLUGIN_DIR/libtf_cluster.so does not exist (cargo build --release?):" \
            "using an EMPTY plugstack.conf (no plugin)"
        echo "# empty: $PLUGIN_DIR/libtf_cluster.so did not exist when this was generated"
    else
        echo "# generated by docker/testbed.sh from plugstack.conf.example"
        sed -E "s#[^[:space:]]*tf_cluster\.so#$PLUGIN_SO#" "$example"
    fi
}

cmd_plugstack() {
    local what=${1:?usage: testbed.sh plugstack FILE|default|empty} tmp
    tmp=$(mktemp)
    case "$what" in
    default) default_plugstack >"$tmp" ;;
    empty) echo "# empty (testbed.sh plugstack empty)" >"$tmp" ;;
    *) [ -f "$what" ] || { rm -f "$tmp"; die "no such file: $what"; }; cat "$what" >"$tmp" ;;
    esac
    install_plugstack "$tmp"
    rm -f "$tmp"
    note "plugstack.conf is now:"
    sed 's/^/    /' "$RUN/etc/plugstack.conf" >&2
}

write_config() {
    mkdir -p "$RUN/etc" "$RUN/log"
    # A one-line .gitignore keeps the run dir out of git even without the top-level entry.
    [ -f "$RUN/.gitignore" ] || echo '*' >"$RUN/.gitignore"
    # /home is shared by all containers (like NFS on a real cluster): sbatch output
    # files written on a node are readable on ctl, and vice versa.
    if [ ! -d "$RUN/home/alice" ]; then
        mkdir -p "$RUN/home/alice"
        chown -R 1000:1000 "$RUN/home/alice"
        chmod 0755 "$RUN/home/alice"
    fi
    if [ ! -s "$RUN/munge.key" ]; then
        ( umask 077; head -c 1024 /dev/urandom >"$RUN/munge.key" )
    fi
    # The configuration is in docker/config/; only what depends on the Slurm
    # release or on TFC_TOPOLOGY is chosen here.
    local config=$here/config topology=${TFC_TOPOLOGY:-}
    if [ "$ACCOUNTING" = 1 ]; then
        cp "$config/slurm.conf" "$RUN/etc/slurm.conf.new"
    else
        # No slurmdbd in the image: no accounting (Slurm's default), said in the file.
        sed -E 's/^(AccountingStorage(Type|Host)=.*)/# \1   (not in this image: no accounting)/' \
            "$config/slurm.conf" >"$RUN/etc/slurm.conf.new"
    fi
    local gres=${TFC_GRES:-}
    if [ -n "$gres" ]; then
        # shellcheck disable=SC2012 # file names of our own config: no odd characters
        [ -f "$config/gres/$gres.conf" ] ||
            die "TFC_GRES must be empty or one of $(ls "$config/gres" | sed 's/\.conf$//' | tr '\n' ' '), not '$gres'"
        cp "$config/gres/$gres.conf" "$RUN/etc/gres.conf.new"
    else
        cp "$config/gres.conf" "$RUN/etc/gres.conf.new"
    fi
    rm -f "$RUN/etc/topology.conf"
    if [ -n "$topology" ]; then
        # shellcheck disable=SC2012 # file names of our own config: no odd characters
        [ -f "$config/topology/$topology/topology.conf" ] ||
            die "TFC_TOPOLOGY must be empty or one of $(ls "$config/topology" | tr '\n' ' '), not '$topology'"
        if [ "$topology" = block ] && ! version_at_least 23.11; then
            # topology/block came with Slurm 23.11: there is no such plugin to load.
            note "warning: Slurm $SLURM_VERSION has no topology/block (23.11+):" \
                "TFC_TOPOLOGY=block runs without a topology plugin"
            printf '\n# TFC_TOPOLOGY=block: Slurm %s has no topology/block (23.11+): no TopologyPlugin.\n' \
                "$SLURM_VERSION" >>"$RUN/etc/slurm.conf.new"
        else
            { echo; cat "$config/topology/$topology/slurm.conf"; } >>"$RUN/etc/slurm.conf.new"
            cp "$config/topology/$topology/topology.conf" "$RUN/etc/topology.conf"
        fi
    fi
    local cgroup_plugin=autodetect
    if version_at_least 24.11; then cgroup_plugin=disabled; fi
    sed "s/@CGROUP_PLUGIN@/$cgroup_plugin/" "$config/cgroup.conf" >"$RUN/etc/cgroup.conf.new"
    local f
    for f in slurm.conf gres.conf cgroup.conf; do
        mv -f "$RUN/etc/$f.new" "$RUN/etc/$f"
    done
    local tmp
    tmp=$(mktemp)
    if [ -n "${TFC_PLUGSTACK:-}" ]; then
        case "$TFC_PLUGSTACK" in
        empty) echo "# empty (TFC_PLUGSTACK=empty)" >"$tmp" ;;
        *) [ -f "$TFC_PLUGSTACK" ] || die "TFC_PLUGSTACK: no such file: $TFC_PLUGSTACK"
           cat "$TFC_PLUGSTACK" >"$tmp" ;;
        esac
    else
        default_plugstack >"$tmp"
    fi
    install_plugstack "$tmp"
    rm -f "$tmp"
}

# The lines of the Dockerfile's stage $2 (from its FROM line, that line excluded, to
# `# end of stage slurm`).
stage_lines() {
    awk -v s="$2" '$1 == "FROM" && $NF == s { on = 1; next } on && /^# end of stage slurm$/ { exit }
        on { print }' "$1"
}

build_image() {
    bash "$here/base-image.sh" "$SUITE" "$BASE" || die "base image $BASE is missing and could not be created"
    mkdir -p "$RUN"
    # Stage full repeats stage slurm's lines so that they find its layers in the cache
    # (docker/node/Dockerfile says why): a change to one copy only is refused.
    local first
    first=$(stage_lines "$here/node/Dockerfile" slurm)
    if [ -z "$first" ] || [ "$first" != "$(stage_lines "$here/node/Dockerfile" full)" ]; then
        die "docker/node/Dockerfile: stage full must begin with stage slurm's lines, word for word"
    fi
    note "building image $IMAGE (stage $STAGE)"
    # CA certificates the host added to its trust store (a TLS-inspecting proxy's,
    # say) reach pip's downloads from PyPI in the TensorFlow layer; none: no effect.
    local extra_ca
    extra_ca=$(find /usr/local/share/ca-certificates -name '*.crt' -type f -print0 2>/dev/null |
        sort -z | xargs -0r cat)
    # The build context: docker/node (test-tools.sh and tfc_libuv.py are copied in).
    local ctx
    ctx=$(mktemp -d "${TMPDIR:-/tmp}/tfc-node-context.XXXXXX")
    cp -a "$here/node/." "$ctx/"
    if ! docker build --network host --build-arg "SUITE=$SUITE" --build-arg "BASE=$BASE" \
        --build-arg "EXTRA_CA_CERTS=$extra_ca" \
        --target "$STAGE" -t "$IMAGE" "$ctx" >"$RUN/build.log" 2>&1; then
        rm -rf "$ctx"
        tail -n 30 "$RUN/build.log" >&2
        die "docker build of $IMAGE failed (full log: $RUN/build.log)"
    fi
    rm -rf "$ctx"
    # `slurm-wlm 24.11.5` -> 24.11.5: the config written depends on it, and on
    # whether the image can keep accounts (slurmdbd and MariaDB).
    local facts
    facts=$(docker run --rm --entrypoint /bin/sh "$IMAGE" -c \
        '/usr/sbin/slurmd -V; if [ -x /usr/sbin/slurmdbd ] && [ -x /usr/sbin/mariadbd ]; then
             echo accounting; fi')
    SLURM_VERSION=$(head -n 1 <<<"$facts" | awk '{ print $NF }')
    [[ $SLURM_VERSION =~ ^[0-9]+\.[0-9]+ ]] || die "cannot tell the Slurm version of $IMAGE ('$SLURM_VERSION')"
    if grep -qx accounting <<<"$facts"; then ACCOUNTING=1; else ACCOUNTING=0; fi
    note "$IMAGE runs Slurm $SLURM_VERSION$([ $ACCOUNTING = 1 ] || echo ', without accounting (no slurmdbd)')"
}

# True when the image's Slurm is at least major.minor $1 (e.g. 24.11).
version_at_least() {
    local want_major=${1%%.*} want_minor=${1#*.} major minor rest
    IFS=. read -r major minor rest <<<"$SLURM_VERSION"
    ((10#$major > 10#$want_major || (10#$major == 10#$want_major && 10#$minor >= 10#$want_minor)))
}

# Copies the headers of the image's own Slurm (libslurm-dev is installed in the
# image) to $1/slurm, so that the plugin is built for exactly the Slurm it runs
# under. Kept while the image is unchanged.
cmd_headers() {
    local dir=${1:?usage: testbed.sh headers DIR} id tmp
    build_image
    id=$(docker image inspect -f '{{.Id}}' "$IMAGE")
    mkdir -p "$dir" || die "cannot create $dir"
    if [ -f "$dir/slurm/spank.h" ] && [ "$(cat "$dir/.image-id" 2>/dev/null)" = "$id" ]; then
        note "headers of Slurm $SLURM_VERSION already in $dir/slurm"
        return 0
    fi
    tmp=$(mktemp -d "$dir/.slurm.XXXXXX")
    if ! docker run --rm --entrypoint tar "$IMAGE" -C /usr/include -c slurm | tar -C "$tmp" -x ||
        [ ! -f "$tmp/slurm/spank.h" ]; then
        rm -rf "$tmp"
        die "$IMAGE has no /usr/include/slurm/spank.h (libslurm-dev missing from docker/node/Dockerfile?)"
    fi
    rm -rf "$dir/slurm" "$dir/.image-id"
    mv "$tmp/slurm" "$dir/slurm"
    rmdir "$tmp"
    echo "$id" >"$dir/.image-id"
    note "headers of Slurm $SLURM_VERSION copied to $dir/slurm"
}

# Hash of everything that requires recreating the containers when it changes.
config_hash() {
    {
        docker image inspect -f '{{.Id}}' "$IMAGE"
        echo "$PLUGIN_DIR $RUN $here ${TFC_NODE_FLAGS-}"
        # A new package is installed by recreating the containers.
        if [ -n "$(deb_file)" ]; then sha256sum "$(deb_file)"; fi
        declare -f start_container
        cat "$RUN/etc/slurm.conf" "$RUN/etc/gres.conf" "$RUN/etc/cgroup.conf" \
            "$RUN/munge.key" "$here/node/entrypoint.sh" "$here"/node/images/*
        cat "$RUN/etc/topology.conf" 2>/dev/null || true
    } | sha256sum | cut -c1-16
}

start_container() {
    local name=$1 role=$2 hash=$3 host
    host=$(host_of "$name")
    local args=(
        -d --name "$name" --hostname "$host"
        --network "$NET" --network-alias "$host"
        --label tfc.testbed=1 --label "tfc.hash=$hash"
        -v "$RUN/etc:/etc/slurm:ro"
        -v "$RUN/munge.key:/tfc-run/munge.key:ro"
        -v "$RUN/log/$host:/var/log/slurm"
        -v "$RUN/home:/home"
        -v "$here/node:/opt/tfc-testbed:ro"
        -v "$PLUGIN_DIR:/opt/tf-cluster:ro"
        -v "$RUN/plugstack.d/$host:/etc/slurm/plugstack.conf.d"
        --shm-size 1g
    )
    # Container runtimes run as the job's user and create user and mount
    # namespaces: Docker's default seccomp profile refuses unshare(CLONE_NEWUSER)
    # without CAP_SYS_ADMIN; unconfined it works, and no capability is added.
    [ "$role" = node ] && args+=(--security-opt seccomp=unconfined)
    # The package (if any): entrypoint.sh installs /opt/tfc-deb/tf-cluster_*.deb.
    if [ -n "$(deb_file)" ]; then args+=(-v "$(dirname "$(deb_file)"):/opt/tfc-deb:ro"); fi
    # shellcheck disable=SC2206 # TFC_NODE_FLAGS: words, as documented
    [ "$role" = node ] && args+=(${TFC_NODE_FLAGS-})
    rm -rf "${RUN:?}/log/$host" "${RUN:?}/plugstack.d/$host"
    mkdir -p "$RUN/log/$host" "$RUN/plugstack.d/$host" "$RUN/etc/plugstack.conf.d"
    docker run "${args[@]}" "$IMAGE" /opt/tfc-testbed/entrypoint.sh "$role" >/dev/null ||
        die "docker run $name failed"
    # host-ib: the name on the fast network (host-template={}-ib), eth1.
    docker network connect --alias "$host-ib" "$NET_IB" "$name" ||
        die "docker network connect $NET_IB $name failed"
}

# Print diagnostics for a failed `up` (to stderr).
diagnose() {
    echo "---- sinfo ----" >&2
    docker exec "$CTL" sinfo -N -o '%N %T %E' >&2 2>&1 || true
    cmd_logs "" 20 >&2
}

wait_idle() {
    local deadline=$((SECONDS + UP_TIMEOUT)) out c idle n resumed=
    while :; do
        for c in $(all_containers); do
            running "$c" || { diagnose; die "container $c is not running (see above)"; }
        done
        out=$(docker exec "$CTL" sinfo -h -N -p debug -o '%N %T' 2>/dev/null || true)
        # Ready = responding and schedulable (busy counts when containers are reused).
        idle=$(awk '$2 ~ /^(idle|mixed|allocated|completing)$/ { n++ } END { print n + 0 }' <<<"$out")
        if [ "$idle" -eq "${#NODES[@]}" ]; then
            return 0
        fi
        # Reused containers: a node drained by an earlier test is put back into service.
        # shellcheck disable=SC2013 # node names: one word each
        for n in $(awk '$2 ~ /^drain/ { print $1 }' <<<"$out"); do
            case " $resumed " in *" $n "*) continue ;; esac
            note "warning: $n is drained ($(docker exec "$CTL" sinfo -h -n "$n" -o '%E')): resuming it"
            docker exec "$CTL" scontrol update nodename="$n" state=resume || true
            resumed="$resumed $n"
        done
        if [ $SECONDS -ge $deadline ]; then
            diagnose
            die "timed out after ${UP_TIMEOUT}s waiting for node[1-3] to be idle; sinfo said: $(tr '\n' ' ' <<<"$out")"
        fi
        sleep 0.5
    done
}

# Accounting answers: slurmctld registered the cluster with slurmdbd (it
# does so itself when it connects), so sacct and TorchX's status work.
wait_accounting() {
    local deadline=$((SECONDS + UP_TIMEOUT)) out
    while :; do
        out=$(docker exec "$CTL" sacctmgr -n -P list cluster format=cluster 2>&1 || true)
        grep -qx tfc <<<"$out" && return 0
        if [ $SECONDS -ge $deadline ]; then
            diagnose
            die "timed out after ${UP_TIMEOUT}s waiting for slurmdbd to list the cluster; sacctmgr said: $out"
        fi
        sleep 0.5
    done
}

cmd_up() {
    local t0=$SECONDS
    build_image
    write_config
    mkdir -p "$PLUGIN_DIR" 2>/dev/null || die "TFC_PLUGIN_DIR $PLUGIN_DIR does not exist and cannot be created"
    PLUGIN_DIR=$(cd "$PLUGIN_DIR" && pwd)
    if [ -d "$DEB_DIR" ]; then DEB_DIR=$(cd "$DEB_DIR" && pwd); fi
    if [ -n "$(deb_file)" ]; then note "package: $(deb_file)"; else note "no tf-cluster_*.deb in $DEB_DIR: the bare .so is used"; fi
    RUN=$(cd "$RUN" && pwd)
    local hash c role reuse=1
    hash=$(config_hash)
    for c in $(all_containers); do
        if ! running "$c" ||
            [ "$(docker container inspect -f '{{index .Config.Labels "tfc.hash"}}' "$c")" != "$hash" ]; then
            reuse=0
        fi
    done
    if [ $reuse = 0 ]; then
        # Recreate all together: a stale ctl must not answer for the name `ctl`.
        for c in $(all_containers); do
            if exists "$c"; then
                docker rm -f "$c" >/dev/null || die "cannot remove old container $c"
            fi
        done
        local net
        for net in "$NET" "$NET_IB"; do
            docker network inspect "$net" >/dev/null 2>&1 ||
                docker network create "$net" >/dev/null || die "cannot create docker network $net"
        done
        # Nodes first, so slurmctld finds their names resolvable when it starts.
        for c in "${NODES[@]/#/$PREFIX-}" "$CTL"; do
            role=node; [ "$c" = "$CTL" ] && role=ctl
            start_container "$c" "$role" "$hash"
        done
    fi
    wait_idle
    if [ "$ACCOUNTING" = 1 ]; then wait_accounting; fi
    note "up: node[1-3] idle ($((SECONDS - t0))s$([ $reuse = 0 ] || echo ', containers reused'))"
}

cmd_down() {
    local c
    for c in $(all_containers); do
        if exists "$c"; then
            docker rm -f "$c" >/dev/null || die "cannot remove container $c"
        fi
    done
    local net
    for net in "$NET" "$NET_IB"; do
        if docker network inspect "$net" >/dev/null 2>&1; then
            docker network rm "$net" >/dev/null || die "cannot remove docker network $net"
        fi
    done
    rm -rf "${RUN:?}/home"
    note "down: containers, network and the shared /home removed"
}

cmd_status() {
    local c rc=0
    for c in $(all_containers); do
        printf '%-10s %s\n' "$c" "$(state_of "$c")"
        running "$c" || rc=1
    done
    if running "$CTL"; then
        docker exec "$CTL" sinfo -N -o '%N %P %T %c %G %E' || rc=1
        docker exec "$CTL" squeue || rc=1
    fi
    return $rc
}

require_up() { running "$CTL" || die "$CTL is not running (docker/testbed.sh up)"; }

# -it on a terminal; -i (stdin forwarded, srun passes it to task 0) when stdin is
# a pipe or file; nothing when stdin is a terminal but stdout is not.
tty_flags() {
    if [ -t 0 ]; then
        if [ -t 1 ]; then echo -it; fi
    else
        echo -i
    fi
}

cmd_exec() {
    [ $# -gt 0 ] || die "usage: testbed.sh exec CMD [ARGS..]"
    require_up
    # shellcheck disable=SC2046 # tty_flags: zero or one word
    exec docker exec $(tty_flags) -u alice -w /home/alice \
        -e USER=alice -e LOGNAME=alice -e HOME=/home/alice "$CTL" "$@"
}

cmd_admin() {
    [ $# -gt 0 ] || die "usage: testbed.sh admin CMD [ARGS..]"
    require_up
    # shellcheck disable=SC2046 # tty_flags: zero or one word
    exec docker exec $(tty_flags) "$CTL" "$@"
}

cmd_node_exec() {
    [ $# -gt 1 ] || die "usage: testbed.sh node-exec NODE CMD [ARGS..]"
    local c=$PREFIX-${1#"$PREFIX"-}; shift
    running "$c" || die "$c is not running"
    # shellcheck disable=SC2046 # tty_flags: zero or one word
    exec docker exec $(tty_flags) "$c" "$@"
}

cmd_logs() {
    local which=${1:-} lines=${2:-50} c f
    for c in $(all_containers); do
        [ -z "$which" ] || [ "$(host_of "$which")" = "$(host_of "$c")" ] || continue
        echo "==== $c ($(state_of "$c"))"
        # The daemons' own lines are in the log files below; show the rest (munged,
        # start-up script, anything before the log file was opened).
        docker logs --tail "$((lines * 4))" "$c" 2>&1 | grep -Ev '^(slurmd|slurmctld): ' |
            tail -n "$lines" | sed 's/^/[console] /' || true
        for f in "$RUN/log/$(host_of "$c")"/*.log; do
            [ -f "$f" ] || continue
            echo "---- $f"
            tail -n "$lines" "$f"
        done
    done
}

sub=${1:-}
[ $# -gt 0 ] && shift
case "$sub" in
up) cmd_up "$@" ;;
down) cmd_down "$@" ;;
status) cmd_status "$@" ;;
exec) cmd_exec "$@" ;;
admin) cmd_admin "$@" ;;
node-exec) cmd_node_exec "$@" ;;
logs) cmd_logs "$@" ;;
plugstack) cmd_plugstack "$@" ;;
headers) cmd_headers "$@" ;;
help | -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' ;;
*) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
   die "unknown subcommand '${sub}' (see above)" ;;
esac
