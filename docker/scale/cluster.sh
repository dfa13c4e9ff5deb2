# An emulated Slurm cluster of many nodes on one machine, for
# docker/scale-bench.sh and tests/scale-smoke.sh (sourced by both).
#
# Debian's Slurm is built without multiple-slurmd support (one slurmd per host
# name), so every node is a real slurmd in namespaces of its own: a network
# namespace (its own address, port 6818 free for each) and a UTS namespace
# (its own host name, which is how slurmd knows which NodeName it is) and a
# PID namespace (its own /proc, which slurmstepd scans for the step's tasks). The
# controller (slurmctld, host name ctl) and the submit side (srun, salloc)
# share a "hub" network namespace that holds a bridge; one veth pair per node
# joins each node to it. Addresses are 10.213.0.0/16, and exist only inside
# these namespaces. No container: a slurmd costs ~5 MB and starts in
# milliseconds, so 256 nodes start in seconds on 2 cores.
#
# The whole run lives in a private mount namespace (scale_enter re-executes the
# calling script under `unshare --mount`): the network namespaces are mounted
# only there, and /etc/hosts, /etc/slurm and /run/munge are bind mounts of the
# run directory's files, so nothing on the host changes and everything goes
# away with the script's processes. scale_down (on EXIT) kills every process in
# every namespace the run made.
#
# Variables: SCALE_NODES (node count), SCALE_TPN (CPUs per node, at least the
# tasks per node), SCALE_RUN (run directory), SCALE_PREFIX (namespace names).
# The nodes are node1..nodeN; the partition is `scale`.

scale_note() { echo "${SCALE_NAME:-scale}: $*" >&2; }
scale_die() { scale_note "error: $*"; exit 1; }

# Installs what the cluster needs when it is missing (CI is a fresh Debian 12).
scale_install() {
    local missing=()
    command -v slurmctld >/dev/null || missing+=(slurmctld)
    command -v slurmd >/dev/null || missing+=(slurmd)
    command -v srun >/dev/null || missing+=(slurm-client)
    command -v munged >/dev/null || missing+=(munge)
    command -v ip >/dev/null || missing+=(iproute2)
    command -v nsenter >/dev/null || missing+=(util-linux)
    command -v cc >/dev/null || missing+=(gcc libc6-dev)
    [ -f /usr/include/slurm/spank.h ] || missing+=(libslurm-dev)
    [ ${#missing[@]} -eq 0 ] && return 0
    scale_note "installing ${missing[*]}"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}"; } >&2 || scale_die "apt-get install ${missing[*]} failed"
}

# Re-executes the calling script in a private mount namespace (once).
scale_enter() {
    [ "$(id -u)" = 0 ] || scale_die "must run as root (namespaces, daemons)"
    if [ -z "${SCALE_IN_NS:-}" ]; then
        SCALE_IN_NS=1 exec unshare --mount --propagation private "$SCALE_SELF" "$@"
    fi
}

scale_addr() { echo "10.213.$(($1 / 250)).$(($1 % 250 + 2))"; }
scale_hub() { nsenter --net="/run/netns/$SCALE_PREFIX-hub" "$@"; }
scale_ctl_addr=10.213.255.254

# Writes the configuration; $1: the plugin's .so.
scale_config() {
    local so=$1 i
    mkdir -p "$SCALE_RUN"/{etc,log,spool,state,munge,probe,out}
    cat >"$SCALE_RUN/etc/slurm.conf" <<EOF
ClusterName=tfcscale
SlurmctldHost=ctl($scale_ctl_addr)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MailProg=/bin/true
StateSaveLocation=$SCALE_RUN/state
SlurmdSpoolDir=$SCALE_RUN/spool/%n
SlurmctldPidFile=$SCALE_RUN/slurmctld.pid
SlurmdPidFile=$SCALE_RUN/spool/slurmd-%n.pid
SlurmctldLogFile=$SCALE_RUN/log/slurmctld.log
SlurmdLogFile=$SCALE_RUN/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MpiParams=ports=12000-12999
PlugStackConfig=/etc/slurm/plugstack.conf
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MessageTimeout=30
SlurmctldTimeout=60
SlurmdTimeout=120
KillWait=5
InactiveLimit=0
MinJobAge=60
ReturnToService=2
SlurmdParameters=config_overrides
PartitionName=scale Nodes=node[1-$SCALE_NODES] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
    local gres=
    if ((${SCALE_GPUS:-0})); then
        echo "GresTypes=gpu" >>"$SCALE_RUN/etc/slurm.conf"
        gres=" Gres=gpu:$SCALE_GPUS"
        scale_gpu_fixture
    fi
    for ((i = 1; i <= SCALE_NODES; i++)); do
        echo "NodeName=node$i NodeAddr=$(scale_addr "$i") CPUs=$SCALE_TPN$gres State=UNKNOWN"
    done >>"$SCALE_RUN/etc/slurm.conf"
    echo "CgroupPlugin=autodetect" >"$SCALE_RUN/etc/cgroup.conf"
    {
        printf '127.0.0.1 localhost\n%s ctl\n' "$scale_ctl_addr"
        for ((i = 1; i <= SCALE_NODES; i++)); do echo "$(scale_addr "$i") node$i"; done
    } >"$SCALE_RUN/hosts"
    # The plugstack variants scale_plugstack switches between.
    cc -O2 -shared -fPIC -o "$SCALE_RUN/tfcs_start.so" "$SCALE_HERE/timer.c" &&
        cc -O2 -shared -fPIC -DSTOP -o "$SCALE_RUN/tfcs_stop.so" "$SCALE_HERE/timer.c" &&
        cc -O2 -shared -fPIC -o "$SCALE_RUN/tfcs_floor.so" "$SCALE_HERE/floor.c" ||
        scale_die "cannot build the probe plugins (docker/scale/timer.c, floor.c)"
    # A private copy: a build elsewhere during the run cannot change it.
    cp "$so" "$SCALE_RUN/libtf_cluster.so"
    echo "# absent: no plugin" >"$SCALE_RUN/etc/plugstack.absent"
    echo "required $SCALE_RUN/libtf_cluster.so" >"$SCALE_RUN/etc/plugstack.plugin"
    printf 'required %s\nrequired %s\nrequired %s dir=%s\n' "$SCALE_RUN/tfcs_start.so" \
        "$SCALE_RUN/libtf_cluster.so" "$SCALE_RUN/tfcs_stop.so" "$SCALE_RUN/probe" \
        >"$SCALE_RUN/etc/plugstack.timed"
    printf 'required %s\nrequired %s dir=%s\n' "$SCALE_RUN/tfcs_start.so" \
        "$SCALE_RUN/tfcs_stop.so" "$SCALE_RUN/probe" >"$SCALE_RUN/etc/plugstack.timed-absent"
    # Slurm's floor (docker/scale/floor.c) in the plugin's place: the same
    # variables set with spank_setenv, nothing computed; one per framework.
    local fw
    for fw in tf torch; do
        printf 'required %s\nrequired %s dir=%s\nrequired %s dir=%s\n' "$SCALE_RUN/tfcs_start.so" \
            "$SCALE_RUN/tfcs_floor.so" "$SCALE_RUN/floor-$fw" "$SCALE_RUN/tfcs_stop.so" "$SCALE_RUN/probe" \
            >"$SCALE_RUN/etc/plugstack.timed-floor-$fw"
    done
    cp "$SCALE_RUN/etc/plugstack.plugin" "$SCALE_RUN/etc/plugstack.conf"
}

# SCALE_GPUS=G: every node has G GPUs, as the NVIDIA driver and sysfs show
# them, written here (no GPU, no driver): gres.conf's /dev/nvidiaI (character
# devices of NVIDIA's major 195, minor I), /proc/driver/nvidia/gpus/PCI/
# information (minor i at PCI 0000:0i:00.0) and /sys/bus/pci/devices/PCI/
# local_cpulist and numa_node: the first half of the GPUs near CPU 0, the rest
# near CPU 1 (on one CPU, all near CPU 0; SCALE_GPU_NEAR=all: every GPU near
# every CPU, so that binding does all its work but moves no task off the CPUs
# it had, which on this one machine all nodes share). scale_up mounts the PCI
# tree over sysfs's in the run's mount namespace; each node, in its own mount
# namespace (it has its own /proc), mounts the driver's tree over /proc/driver
# and an overlay on /dev holding the device nodes (scale_node_gpus): what
# slurmd, the preflight and the binding read; nothing changes on the host.
scale_gpu_fixture() {
    local i pci near=0 k=$SCALE_RUN/kernel
    mkdir -p "$SCALE_RUN/dev" "$k/pci" "$k/driver/nvidia/gpus"
    ((SCALE_GPUS <= 10)) || scale_die "SCALE_GPUS: at most 10"
    echo "Name=gpu File=/dev/nvidia[0-$((SCALE_GPUS - 1))]" >"$SCALE_RUN/etc/gres.conf"
    for ((i = 0; i < SCALE_GPUS; i++)); do
        mknod "$SCALE_RUN/dev/nvidia$i" c 195 "$i" || scale_die "cannot create the fixture's device files"
        pci=0000:0$i:00.0
        mkdir -p "$k/driver/nvidia/gpus/$pci" "$k/pci/$pci"
        printf 'Model: \t\t Fixture\nDevice Minor: \t %s\nBus Location: \t %s\n' "$i" "$pci" \
            >"$k/driver/nvidia/gpus/$pci/information"
        if [ "$(nproc)" -ge 2 ] && ((i >= SCALE_GPUS / 2)); then near=1; fi
        if [ "${SCALE_GPU_NEAR:-split}" = all ]; then near=0-$(($(nproc) - 1)); fi
        echo "$near" >"$k/pci/$pci/local_cpulist"
        echo 0 >"$k/pci/$pci/numa_node"
    done
}

# The commands a node runs first (NODE: its name) with SCALE_GPUS: the
# driver's tree over /proc/driver; /dev as an overlay (its upper layer on a
# tmpfs of the node's, holding the fixture's device nodes) over the host's
# /dev, whose submounts (pts, shm, mqueue) are bound back on top.
scale_node_gpus() {
    local o=$SCALE_RUN/devov/NODE
    printf '%s' "mount --bind $SCALE_RUN/kernel/driver /proc/driver && mkdir -p $o && mount -t tmpfs tfcs $o &&
        mkdir $o/up $o/work $o/stage && cp -a $SCALE_RUN/dev/. $o/up/ && mount --rbind /dev $o/stage &&
        mount -t overlay tfcs -o lowerdir=/dev,upperdir=$o/up,workdir=$o/work /dev &&
        for m in pts shm mqueue hugepages; do [ ! -d $o/stage/\$m ] || mount --rbind $o/stage/\$m /dev/\$m || exit 1; done &&
        [ -c /dev/nvidia0 ] || exit 1;"
}

# absent | plugin | timed | timed-absent | timed-floor-tf | timed-floor-torch: srun and every new slurmstepd read
# plugstack.conf afresh, so a rename switches the next step.
scale_plugstack() {
    cp "$SCALE_RUN/etc/plugstack.$1" "$SCALE_RUN/etc/.plugstack.new"
    mv -f "$SCALE_RUN/etc/.plugstack.new" "$SCALE_RUN/etc/plugstack.conf"
}

# The network: a bridge in the hub, a veth pair per node.
scale_network() {
    local i ns addr
    ip netns add "$SCALE_PREFIX-hub" || scale_die "ip netns add failed"
    ip -n "$SCALE_PREFIX-hub" link set lo up
    ip -n "$SCALE_PREFIX-hub" link add br0 type bridge
    ip -n "$SCALE_PREFIX-hub" addr add "$scale_ctl_addr/16" dev br0
    ip -n "$SCALE_PREFIX-hub" link set br0 up
    # srun accepts one I/O connection per node at once from every
    # slurmstepd: on a loaded machine a short accept queue made some of them
    # fail ("Slurmd could not connect IO") at 256 nodes.
    scale_hub sysctl -q -w net.core.somaxconn=65535 net.ipv4.tcp_max_syn_backlog=65535 ||
        scale_die "cannot raise the hub's accept queue"
    {
        for ((i = 1; i <= SCALE_NODES; i++)); do echo "netns add $SCALE_PREFIX-n$i"; done
    } | ip -batch - || scale_die "cannot create the nodes' network namespaces"
    {
        for ((i = 1; i <= SCALE_NODES; i++)); do
            echo "link add v$i type veth peer name eth0 netns $SCALE_PREFIX-n$i"
            echo "link set v$i master br0 up"
        done
    } | ip -n "$SCALE_PREFIX-hub" -batch - || scale_die "cannot create the veth pairs"
    for ((i = 1; i <= SCALE_NODES; i++)); do
        ns=$SCALE_PREFIX-n$i addr=$(scale_addr "$i")
        printf 'link set lo up\naddr add %s/16 dev eth0\nlink set eth0 up\n' "$addr" |
            ip -n "$ns" -batch - || scale_die "cannot configure $ns"
    done
}

# Starts munged, slurmctld and one slurmd per node, and waits until every node
# is idle (SCALE_UP_TIMEOUT seconds, default 120); dies loudly otherwise.
scale_up() {
    local so=$1 t0=$SECONDS i deadline idle
    scale_install
    scale_config "$so"
    mount --bind "$SCALE_RUN/hosts" /etc/hosts || scale_die "cannot bind /etc/hosts"
    mkdir -p /etc/slurm /run/munge
    mount --bind "$SCALE_RUN/etc" /etc/slurm || scale_die "cannot bind /etc/slurm"
    chmod 700 "$SCALE_RUN/munge"
    mount --bind "$SCALE_RUN/munge" /run/munge || scale_die "cannot bind /run/munge"
    if ((${SCALE_GPUS:-0})); then
        mount --bind "$SCALE_RUN/kernel/pci" /sys/bus/pci/devices || scale_die "cannot bind the PCI fixture"
    fi
    dd if=/dev/urandom of="$SCALE_RUN/munge.key" bs=1024 count=1 status=none
    chmod 400 "$SCALE_RUN/munge.key"
    munged --force --num-threads=8 --key-file="$SCALE_RUN/munge.key" \
        --pid-file="$SCALE_RUN/munged.pid" --log-file="$SCALE_RUN/log/munged.log" \
        --seed-file="$SCALE_RUN/munge.seed" 2>>"$SCALE_RUN/log/munged.log" || scale_die "munged did not start"
    scale_network
    scale_hub unshare --uts sh -c 'hostname ctl && exec slurmctld -D -i' \
        >>"$SCALE_RUN/log/slurmctld.out" 2>&1 &
    disown
    local driver=
    ((${SCALE_GPUS:-0} == 0)) || driver=$(scale_node_gpus)
    for ((i = 1; i <= SCALE_NODES; i++)); do
        # A PID namespace (and its /proc) per node too: slurmstepd's
        # proctrack/linuxproc scans /proc, which must hold one node's
        # processes as on a real node, not the whole cluster's. Its PID 1 is
        # a shell that reaps the orphans (slurmstepd is one).
        nsenter --net="/run/netns/$SCALE_PREFIX-n$i" unshare --uts --pid --fork --mount-proc \
            sh -c "hostname node$i || exit 1; ${driver//NODE/node$i} slurmd -D & while :; do wait; sleep 1; done" \
            >>"$SCALE_RUN/log/slurmd.out" 2>&1 &
        disown
    done
    deadline=$((SECONDS + ${SCALE_UP_TIMEOUT:-120}))
    while :; do
        idle=$(scale_hub sinfo -h -N -o '%T' 2>/dev/null | grep -c '^idle$' || true)
        [ "$idle" = "$SCALE_NODES" ] && break
        if [ $SECONDS -ge $deadline ]; then
            tail -n 20 "$SCALE_RUN/log/slurmctld.log" "$SCALE_RUN/log/slurmd.out" >&2 || true
            scale_hub sinfo -N -o '%N %T %E' 2>&1 | head -20 >&2 || true
            scale_die "timed out: $idle of $SCALE_NODES nodes idle after ${SCALE_UP_TIMEOUT:-120}s (logs in $SCALE_RUN/log)"
        fi
        sleep 0.5
    done
    scale_note "up: $SCALE_NODES slurmd nodes idle in $((SECONDS - t0)) s"
}

# Kills every process in the run's namespaces and munged, removes the
# namespaces (EXIT trap; also fine when scale_up stopped half way).
scale_down() {
    local ns pids
    for ns in $(ip netns list 2>/dev/null | awk -v p="$SCALE_PREFIX-" 'index($1, p) == 1 { print $1 }'); do
        pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
        # shellcheck disable=SC2086 # a list of pids
        [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
    done
    if [ -f "$SCALE_RUN/munged.pid" ]; then kill "$(cat "$SCALE_RUN/munged.pid")" 2>/dev/null || true; fi
    for ns in $(ip netns list 2>/dev/null | awk -v p="$SCALE_PREFIX-" 'index($1, p) == 1 { print $1 }'); do
        ip netns del "$ns" 2>/dev/null || true
    done
}

# Runs CMD.. on the submit side (the hub namespace).
scale_run() { scale_hub "$@"; }

# Starts an allocation of every node (TPN tasks each) and prints its job id.
scale_alloc() {
    local out
    local -a gpus=()
    ((${SCALE_GPUS:-0} == 0)) || gpus=(--gres="gpu:$SCALE_GPUS")
    out=$(scale_hub salloc --no-shell -N "$SCALE_NODES" --ntasks-per-node="$SCALE_TPN" "${gpus[@]}" 2>&1) ||
        scale_die "salloc failed: $out"
    sed -n 's/.*Granted job allocation \([0-9]*\).*/\1/p' <<<"$out"
}

# One step in allocation $SCALE_JOB: scale_step DIST SRUN-ARGS.. -- CMD..
# (with SCALE_GPUS, every GPU of each node: a task sees them all)
scale_step() {
    local dist=$1
    local -a gpus=()
    shift
    ((${SCALE_GPUS:-0} == 0)) || gpus=(--gres="gpu:$SCALE_GPUS")
    scale_hub env SLURM_JOB_ID="$SCALE_JOB" srun -N "$SCALE_NODES" \
        --ntasks-per-node="$SCALE_TPN" -m "$dist" "${gpus[@]}" "$@"
}

# What each task prints for scale_check, per framework option.
# shellcheck disable=SC2016 # expanded by the task's shell
scale_task_cmd() {
    case $1 in
    tf) echo 'c="${TF_CONFIG%,\"task\":*}"; [ "$SLURM_PROCID" != 0 ] || printf %s "$c" >"$OUT/cluster";
        printf "%s %s %s %s\n" "$SLURM_PROCID" "$SLURMD_NODENAME" "${TF_CONFIG##*\"task\":}" "$(printf %s "$c" | cksum)"' ;;
    torch) echo 'echo "$SLURM_PROCID $SLURMD_NODENAME $SLURM_LOCALID $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $GROUP_WORLD_SIZE $MASTER_ADDR $MASTER_PORT"' ;;
    esac
}

# Runs a step with the plugin (framework tf|torch, distribution DIST) whose
# every task reports its variables, and checks them against Slurm's own
# placement (SLURM_PROCID, SLURMD_NODENAME, SLURM_LOCALID of each task):
#   tf     TF_CONFIG's task is chief 0 for rank 0, else worker rank-1; its
#          entry in the cluster names the task's own node; the cluster (task
#          0's, all tasks the same checksum) has one distinct host:port per task
#   torch  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (tasks on the
#          node), GROUP_RANK (nodes in order of first rank), GROUP_WORLD_SIZE,
#          MASTER_ADDR (rank 0's node), one MASTER_PORT
scale_check() {
    local fw=$1 dist=$2 out=$SCALE_RUN/out/$1-$2 tasks=$((SCALE_NODES * SCALE_TPN)) opt crc=
    rm -rf "$out" && mkdir -p "$out"
    case $fw in
    tf) opt=--tf-cluster=chief:1,worker:$((tasks - 1)) ;;
    torch) opt=--torch-cluster ;;
    esac
    scale_step "$dist" "$opt" env OUT="$out" sh -c "$(scale_task_cmd "$fw")" >"$out/tasks" 2>"$out/stderr" ||
        { cat "$out/stderr" >&2; scale_die "$fw $dist step failed"; }
    if [ "$fw" = tf ]; then
        [ -s "$out/cluster" ] || scale_die "$fw $dist: task 0 had no TF_CONFIG"
        crc=$(cksum <"$out/cluster")
    fi
    awk -v fw="$fw" -v T="$tasks" -v N="$SCALE_NODES" -v crc="$crc" -v cl="$out/cluster" '
        function bad(m) { print "task " $1 " on " $2 ": " m; errors++ }
        fw == "tf" && NR == 1 {
            getline c <cl
            # chief then worker lists: {"cluster":{"chief":[..],"worker":[..]}
            match(c, /"chief":\[[^]]*\]/); nc = split(substr(c, RSTART + 9, RLENGTH - 10), ch, ",")
            match(c, /"worker":\[[^]]*\]/); nw = split(substr(c, RSTART + 10, RLENGTH - 11), wk, ",")
            if (nc != 1 || nc + nw != T) { print "cluster has " nc " chief(s) and " nw " workers for " T " tasks"; errors++ }
            for (k = 1; k <= nw; k++) { gsub(/"/, "", wk[k]); if (seen[wk[k]]++) { print "entry " wk[k] " twice"; errors++ } }
            gsub(/"/, "", ch[1]); if (seen[ch[1]]++) { print "entry " ch[1] " twice"; errors++ }
        }
        {
            if (($1 in node) || $1 !~ /^[0-9]+$/ || $1 >= T) { bad("rank unexpected or twice"); next }
            node[$1] = $2; local[$1] = $3; per[$2]++; lines++
            if (fw == "tf") {
                if ($4 " " $5 != crc) bad("cluster differs from task 0: " $4 " " $5 " vs " crc)
                want = ($1 == 0) ? "{\"type\":\"chief\",\"index\":0}}" : "{\"type\":\"worker\",\"index\":" ($1 - 1) "}}"
                if ($3 != want) bad("task " $3 ", want " want)
                e = ($1 == 0) ? ch[1] : wk[$1]
                split(e, hp, ":"); if (hp[1] != $2) bad("its entry " e " is not on its node")
            } else {
                t[$1] = $0
            }
        }
        END {
            if (lines != T) { print lines " task lines for " T " tasks"; errors++ }
            if (fw == "torch") {
                g = 0
                for (r = 0; r < T; r++) if (!(node[r] in grp)) grp[node[r]] = g++
                if (g != N) { print g " nodes ran tasks, want " N; errors++ }
                for (r = 0; r < T; r++) {
                    $0 = t[r]
                    want = r " " T " " $3 " " per[$2] " " grp[$2] " " N " " node[0]
                    got = $4 " " $5 " " $6 " " $7 " " $8 " " $9 " " $10
                    if (got != want) bad("RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE MASTER_ADDR = " got ", want " want)
                    if (r == 0) port = $11; else if ($11 != port) bad("MASTER_PORT " $11 " != " port)
                }
            }
            exit errors > 0
        }' "$out/tasks" >"$out/errors" ||
        { head -n 20 "$out/errors" >&2; scale_die "$fw $dist: $(wc -l <"$out/errors") wrong task(s) (all in $out)"; }
    scale_note "checked $fw $dist: all $tasks tasks on $SCALE_NODES nodes right"
}

# With SCALE_GPUS: a --torch-cluster step (each task's GPU is its LOCAL_RANK-th
# of the node's, PyTorch's convention) binds each task with a GPU to the CPU
# the fixture puts that GPU near (Cpus_allowed_list and TF_CLUSTER_CPUS); with
# --tf-bind=off every task keeps Slurm's CPUs (task/none: all of them) and no
# TF_CLUSTER_CPUS.
scale_bind_check() {
    local out=$SCALE_RUN/out/bind all
    mkdir -p "$out"
    all=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
    # shellcheck disable=SC2016 # expanded by the task's shell
    local cmd='echo "$SLURM_LOCALID $(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status) ${TF_CLUSTER_CPUS-unset}"'
    local bind
    for bind in gpu off; do
        scale_step block --torch-cluster --tf-bind="$bind" sh -c "$cmd" >"$out/$bind" 2>"$out/$bind.err" ||
            { cat "$out/$bind.err" >&2; scale_die "bind $bind: the step failed"; }
        awk -v bind="$bind" -v G="$SCALE_GPUS" -v T="$((SCALE_NODES * SCALE_TPN))" -v all="$all" \
            -v two="$(($(nproc) >= 2))" -v near="${SCALE_GPU_NEAR:-split}" '
            {
                n++
                if (bind == "off" || $1 >= G) want = all " unset"
                else if (near == "all") want = all " " all
                else { c = (two && $1 >= int(G / 2)) ? 1 : 0; want = c " " c }
                if ($2 " " $3 != want) { print "local task " $1 ": CPUs and TF_CLUSTER_CPUS " $2 " " $3 ", want " want; e++ }
            }
            END { if (n != T) { print n " task lines for " T " tasks"; e++ } exit e > 0 }' "$out/$bind" >"$out/$bind.errors" ||
            { head -n 10 "$out/$bind.errors" >&2; scale_die "bind $bind: $(wc -l <"$out/$bind.errors") wrong task(s)"; }
    done
    scale_note "checked the binding: each of the $((SCALE_NODES * SCALE_TPN)) tasks on the CPU near its GPU, and Slurm's CPUs with --tf-bind=off"
}
