#!/bin/bash
# Start-up script of a testbed container (bind-mounted at /opt/tfc-testbed by
# docker/testbed.sh; run under tini as PID 1's child).
#   entrypoint.sh ctl    munged + MariaDB + slurmdbd + slurmctld -D   (controller
#                        and submit host; the database only when slurm.conf asks)
#   entrypoint.sh node   fake GPUs + munged + slurmd -D
# Slurm config comes from /etc/slurm (a directory bind mount of docker/run/etc;
# /etc/slurm/plugstack.conf.d is this container's own, docker/run/plugstack.d/<host>),
# the shared munge key from /tfc-run/munge.key, logs go to /var/log/slurm (a bind
# mount of docker/run/log/<hostname>).
set -euo pipefail
role=${1:?usage: entrypoint.sh ctl|node}
log() { echo "tfc-entry[$(hostname)]: $*" >&2; }

# munge: the key must be owned by munge and private; munged refuses anything else.
install -d -o munge -g munge -m 0700 /etc/munge
install -o munge -g munge -m 0400 /tfc-run/munge.key /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
runuser -u munge -- /usr/sbin/munged --force
for _ in $(seq 50); do [ -S /run/munge/munge.socket.2 ] && break; sleep 0.1; done
munge -n | unmunge >/dev/null || { log "munge self-test failed"; exit 1; }

install -d -o slurm -g slurm -m 0755 /var/log/slurm /run/slurm

# The tf-cluster package, when docker/testbed.sh mounted one: installed as an
# admin would (apt resolves it against the Slurm installed here, offline), before
# any daemon starts. Its postinst enables it in /etc/slurm/plugstack.conf.d/.
debs=(/opt/tfc-deb/tf-cluster_*.deb)
if [ -f "${debs[0]}" ]; then
    log "installing ${debs[0]##*/}"
    if ! out=$(DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${debs[@]}" 2>&1); then
        echo "$out" >&2
        log "apt-get install of the tf-cluster package failed"
        exit 1
    fi
fi

# Accounting, on ctl: MariaDB (socket only, no TCP) and slurmdbd, up before
# slurmctld so that it registers the cluster at once (sacct, and TorchX's
# status through it, read from there). slurmdbd.conf holds the database's
# password, so slurmdbd wants it owned by SlurmUser and private: it is
# written here, in a ctl-local directory (SLURM_CONF's directory is where
# slurmdbd looks), not in the shared, read-only /etc/slurm.
start_accounting() {
    local pass dir=/run/slurmdbd
    pass=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
    install -d -o mysql -g mysql -m 0755 /run/mysqld
    install -d -o slurm -g slurm -m 0700 "$dir"
    ( umask 077
      printf '%s\n' "CREATE DATABASE IF NOT EXISTS slurm_acct_db;" \
          "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$pass';" \
          "ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$pass';" \
          "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" >/run/mysqld/init.sql )
    chown mysql /run/mysqld/init.sql
    install -o mysql -g mysql -m 0644 /dev/null /var/log/slurm/mariadb.log
    log "starting mariadbd"
    # A small buffer pool: six testbeds may run on one machine.
    runuser -u mysql -- /usr/sbin/mariadbd --skip-networking --innodb-buffer-pool-size=32M \
        --init-file=/run/mysqld/init.sql --log-error=/var/log/slurm/mariadb.log &
    for _ in $(seq 300); do [ -S /run/mysqld/mysqld.sock ] && break; sleep 0.1; done
    [ -S /run/mysqld/mysqld.sock ] || { log "mariadbd did not start (/var/log/slurm/mariadb.log)"; exit 1; }
    ln -sf /etc/slurm/slurm.conf "$dir/slurm.conf"
    ( umask 077
      printf '%s\n' AuthType=auth/munge DbdHost=ctl SlurmUser=slurm \
          StorageType=accounting_storage/mysql StorageHost=localhost StorageUser=slurm \
          "StoragePass=$pass" StorageLoc=slurm_acct_db LogFile=/var/log/slurm/slurmdbd.log \
          PidFile=/run/slurmdbd/slurmdbd.pid >"$dir/slurmdbd.conf" )
    chown slurm:slurm "$dir/slurmdbd.conf"
    log "starting slurmdbd"
    SLURM_CONF=$dir/slurm.conf /usr/sbin/slurmdbd -D &
    for _ in $(seq 300); do ss -Hltn 'sport = :6819' | grep -q . && break; sleep 0.1; done
    ss -Hltn 'sport = :6819' | grep -q . || { log "slurmdbd did not listen (/var/log/slurm/slurmdbd.log)"; exit 1; }
}

# A second user, the victim of the tests where one user must not reach
# another's job (bob, uid 1001, no home: his jobs run in /tmp).
id bob >/dev/null 2>&1 || useradd --no-create-home --uid 1001 --user-group --shell /bin/sh bob

# The container tests' images (docker/node/images/make.sh), on every host:
# srun's host builds runc bundles and Apptainer sandboxes from them too.
sh /opt/tfc-testbed/images/make.sh || { log "could not make the test images"; exit 1; }

case "$role" in
ctl)
    install -d -o slurm -g slurm -m 0755 /var/spool/slurmctld
    if grep -q '^AccountingStorageType=accounting_storage/slurmdbd' /etc/slurm/slurm.conf; then
        start_accounting
    fi
    log "starting slurmctld"
    exec /usr/sbin/slurmctld -D
    ;;
node)
    # Fake GPUs: gres/gpu only sets CUDA_VISIBLE_DEVICES for character devices.
    for n in 0 1 2 3; do
        [ -c /dev/nvidia$n ] || mknod -m 666 /dev/nvidia$n c 195 $n
    done
    install -d -m 0755 /var/spool/slurmd
    # The nodes start before ctl (so that slurmctld can resolve them at its start);
    # wait for the controller's name to resolve so slurmd registers at once.
    for _ in $(seq 300); do getent hosts ctl >/dev/null && break; sleep 0.2; done
    log "starting slurmd"
    exec /usr/sbin/slurmd -D
    ;;
*)
    log "unknown role: $role"
    exit 2
    ;;
esac
