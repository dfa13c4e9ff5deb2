#!/bin/bash
# Run as root in a throwaway container of the testbed's image (tests/testbed/prefix.rs):
# moves the image's own Slurm (Debian's packages) under the prefix /opt/slurm, laid out
# as `./configure --prefix=/opt/slurm` installs it, takes Debian's paths away, and
# starts munged, slurmctld and slurmd (this container is the one node) from there.
#
#   /opt/slurm/bin       srun, sinfo, scontrol … (slurm-client's)
#   /opt/slurm/sbin      slurmctld, slurmd, slurmstepd
#   /opt/slurm/include   slurm/ (libslurm-dev's spank.h, slurm.h, slurm_version.h …)
#   /opt/slurm/lib/slurm the plugins and libslurmfull.so (PluginDir)
#   /opt/slurm/etc       slurm.conf, cgroup.conf, plugstack.conf (PlugStackConfig)
#
# Debian's copies are removed: /usr/lib/x86_64-linux-gnu/slurm-wlm, /etc/slurm,
# /usr/include/slurm and the binaries in /usr/bin and /usr/sbin, so nothing can be
# found there. The binaries' RUNPATH names Debian's plugin directory, where a source
# build's names PREFIX/lib/slurm: ld.so.conf gives that one instead. Debian's slurmd
# runs the slurmstepd its build names, /usr/sbin/slurmstepd: a link to the prefix's.
# The daemons and the clients are given the prefix's slurm.conf (-f, SLURM_CONF): a
# source build's default.
set -euo pipefail
P=/opt/slurm
log() { echo "prefix-setup: $*" >&2; }
die() { log "error: $*"; exit 1; }
deb=/usr/lib/x86_64-linux-gnu/slurm-wlm

install -d "$P/bin" "$P/sbin" "$P/include" "$P/lib/slurm" "$P/etc"
cp -a /usr/include/slurm "$P/include/"
cp -a "$deb/." "$P/lib/slurm/"
for f in $(dpkg -L slurm-client | grep '^/usr/bin/'); do
    [ -f "$f" ] && [ ! -L "$f" ] || continue
    cp -a "$f" "$P/bin/"
    rm -f "$f"
done
for d in slurmctld slurmd slurmstepd; do
    cp -a "/usr/sbin/$d-wlm" "$P/sbin/$d"
    rm -f "/usr/sbin/$d-wlm" "/usr/sbin/$d" "/etc/alternatives/$d"
done
ln -s "$P/sbin/slurmstepd" /usr/sbin/slurmstepd
rm -rf "$deb" /etc/slurm /usr/include/slurm
echo "$P/lib/slurm" >/etc/ld.so.conf.d/slurm-prefix.conf
ldconfig

v=$(awk '/^#define SLURM_VERSION_NUMBER/ { print $3 }' "$P/include/slurm/slurm_version.h")
v=$((v))
host=$(hostname)
cat >"$P/etc/slurm.conf" <<CONF
# Slurm under the prefix $P (tests/prefix/slurm-under-prefix.sh): one node, this container.
ClusterName=prefix
SlurmctldHost=$host
SlurmUser=slurm
AuthType=auth/munge
MailProg=/bin/true
PluginDir=$P/lib/slurm
PlugStackConfig=$P/etc/plugstack.conf
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
MpiParams=ports=12000-12999
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MessageTimeout=5
InactiveLimit=0
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$host CPUs=4 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:64
CONF
# No cgroups in an unprivileged container: disabled from 24.11 on, before that
# autodetect (as docker/testbed.sh writes it).
if ((v >= 0x180b00)); then cg=disabled; else cg=autodetect; fi
printf 'CgroupPlugin=%s\nConstrainDevices=no\n' "$cg" >"$P/etc/cgroup.conf"
echo "# Slurm under $P: plugstack.conf" >"$P/etc/plugstack.conf"

install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
runuser -u munge -- /usr/sbin/munged --force
for _ in $(seq 50); do [ -S /run/munge/munge.socket.2 ] && break; sleep 0.1; done
munge -n | unmunge >/dev/null || die "munge self-test failed"
install -d -o slurm -g slurm -m 0755 /var/log/slurm /run/slurm /var/spool/slurmctld
install -d -m 0755 /var/spool/slurmd

"$P/sbin/slurmctld" -f "$P/etc/slurm.conf" || die "slurmctld did not start"
"$P/sbin/slurmd" -f "$P/etc/slurm.conf" || die "slurmd did not start"
export SLURM_CONF=$P/etc/slurm.conf
for _ in $(seq 300); do
    state=$("$P/bin/sinfo" -h -N -o '%T' 2>/dev/null || true)
    [ "$state" = idle ] && { log "Slurm $((v >> 16)).$(((v >> 8) & 255)).$((v & 255)) up under $P"; exit 0; }
    sleep 0.2
done
log "the node is not idle after 60 s (sinfo: ${state:-nothing})"
tail -n 20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
exit 1
