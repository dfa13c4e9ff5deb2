# Where the time of a test run goes (sourced by tests/run.sh and docker/matrix.sh).
#
#   stage NAME CMD..     runs CMD, appends one line to $STAGES_FILE, returns CMD's status
#                        (with STAGE_MAY_SKIP=1, 77: skipped, its hardware absent:
#                        recorded so, returns 0)
#   stages_skipped       the skipped stages' names
#   stage_report [TITLE] prints every line of $STAGES_FILE as a table (stderr)
#
# Per stage: the wall time; the CPU time (user+sys) of CMD and the processes it
# waited for; the CPU time of the Docker containers meanwhile (the testbeds', a
# build's RUN steps: not CMD's children; every container of this Docker host,
# so a concurrent stage's too; "-" where the cgroup is not found); and how busy
# the machine's CPUs were meanwhile (/proc/stat, everything on the machine).
# "cores" = (CPU + containers) / wall: near the machine's core count, the stage
# is CPU-bound; far below it, it waits (on Slurm, the network, a timeout).
# Stages that run side by side each count the whole machine's busy share.

STAGES_FILE=${STAGES_FILE:-${repo:?}/target/stages.tsv}

# Busy and total jiffies of all CPUs (/proc/stat's first line).
_stage_cpu_jiffies() {
    awk '/^cpu / { busy = $2 + $3 + $4 + $7 + $8 + $9; print busy, busy + $5 + $6; exit }' /proc/stat
}

# Nanoseconds of CPU used by every Docker container (cgroup v1 cpuacct, or
# v2 with the cgroupfs driver); empty when neither is there.
_stage_docker_ns() {
    local f
    if [ -r /sys/fs/cgroup/cpuacct/docker/cpuacct.usage ]; then
        cat /sys/fs/cgroup/cpuacct/docker/cpuacct.usage
    elif [ -r /sys/fs/cgroup/docker/cpu.stat ]; then
        f=$(awk '$1 == "usage_usec" { print $2 * 1000 }' /sys/fs/cgroup/docker/cpu.stat)
        echo "$f"
    fi
}

# The CPU seconds (user+sys) of the processes this shell waited for: `times`'
# second line ("1m2.500s 0m3.250s"). `times` itself must run in this shell,
# not in a pipe's subshell (whose children are none).
_stage_children_s() {
    local tmp
    tmp=$(mktemp)
    times >"$tmp"
    awk 'NR == 2 { s = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); sub("s", "", p[2]); s += p[1] * 60 + p[2] }
        printf "%.1f", s }' "$tmp"
    rm -f "$tmp"
}

stage() {
    local name=$1 rc=0 t0 b0 d0 t1 b1 d1 cpu
    shift
    mkdir -p "$(dirname "$STAGES_FILE")"
    t0=$(date +%s.%N)
    read -r b0 d0 <<<"$(_stage_cpu_jiffies)"
    local k0
    k0=$(_stage_docker_ns)
    # A subshell: its `times` counts only CMD's processes.
    {
        cpu=$(
            rc=0
            "$@" >&3 2>&4 3>&- 4>&- || rc=$?
            _stage_children_s
            exit $rc
        ) || rc=$?
    } 3>&1 4>&2
    t1=$(date +%s.%N)
    read -r b1 d1 <<<"$(_stage_cpu_jiffies)"
    local k1 docker=-
    k1=$(_stage_docker_ns)
    if [ -n "$k0" ] && [ -n "$k1" ]; then docker=$(awk -v a="$k0" -v b="$k1" 'BEGIN { printf "%.1f", (b - a) / 1e9 }'); fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }')" "${cpu:-0}" "$docker" \
        "$(awk -v a="$b0" -v b="$b1" -v c="$d0" -v d="$d1" 'BEGIN { printf "%.0f", (d > c ? 100 * (b - a) / (d - c) : 0) }')" \
        "$(if [ $rc = 0 ]; then echo passed; elif [ $rc = 77 ] && [ "${STAGE_MAY_SKIP:-0}" = 1 ]; then
            echo skipped; else echo "FAILED ($rc)"; fi)" >>"$STAGES_FILE"
    # 77 from a stage run with STAGE_MAY_SKIP=1: its hardware is not here (it
    # said so in one line): skipped, in the table and the run's last line,
    # never passed. Any other stage's 77 fails it.
    if [ $rc = 77 ] && [ "${STAGE_MAY_SKIP:-0}" = 1 ]; then return 0; fi
    return $rc
}

# The names of the stages that were skipped, comma-separated.
stages_skipped() {
    [ -s "$STAGES_FILE" ] || return 0
    awk -F'\t' '$6 == "skipped" { printf "%s%s", (n++ ? ", " : ""), $1 }' "$STAGES_FILE"
}

stage_report() {
    local title=${1:-time per stage}
    [ -s "$STAGES_FILE" ] || return 0
    {
        echo "==== $title ($(nproc) cores; load average now $(cut -d' ' -f1-3 /proc/loadavg))"
        printf '%-44s %7s %8s %11s %6s %5s  %s\n' stage wall cpu containers cores busy result
        awk -F'\t' '{
            cores = $3 + ($4 == "-" ? 0 : $4)
            printf "%-44s %6ss %7ss %10s%s %6.2f %4s%%  %s\n", $1, $2, $3, $4, ($4 == "-" ? " " : "s"),
                ($2 > 0 ? cores / $2 : 0), $5, $6
        }' "$STAGES_FILE"
    } >&2
}
