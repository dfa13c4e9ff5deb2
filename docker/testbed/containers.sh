# shellcheck shell=bash
# docker/testbed.sh's containers: created (or kept, when nothing they depend on
# changed), waited for until the nodes are idle and accounting answers, removed,
# and what runs in them (exec, admin, node-exec, status, logs). Sourced by
# docker/testbed.sh, whose header documents it.

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
