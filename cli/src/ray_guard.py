# tfc_ray_guard: `ray start` as Ray's own `ray` script runs it, with one
# check added on the head (tf-cluster ray, cli/src/ray.rs). Ray's
# `ray start --head` starts its GCS and at once asks the GCS's address for
# the cluster id, sending the step's token; a port another user listens on
# would get it. Here Node.start_gcs_server is wrapped: once Ray has started
# the GCS process, nothing goes on until a socket listens on the GCS port,
# and every listener there must be the user's and held by that GCS process;
# otherwise the GCS is killed and this process exits with PORT_TAKEN before
# any call to the port (tf-cluster ray then refuses, and never starts the
# head again with the same token).
import os
import sys
import time

if sys.path and sys.path[0] == "":
    del sys.path[0]  # `-c` put the working directory first: not Ray's script

PORT_TAKEN = 97
WAIT = float(os.environ.get("TFC_RAY_GCS_WAIT", "180"))


def listeners(port):
    """(uid, inode) of every socket listening on `port`, IPv4 and IPv6."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            col = row.split()
            if len(col) > 9 and col[3] == "0A" and int(col[1].rsplit(":", 1)[1], 16) == port:
                found.append((int(col[7]), col[9]))
    return found


def sockets(pid):
    """The inodes of the sockets process `pid` holds."""
    held = set()
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return held
    for fd in fds:
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            held.add(link[8:-1])
    return held


def refuse(port, process, why):
    if process is not None:
        try:
            process.kill()
        except Exception:
            pass
    sys.stderr.write(
        "tf-cluster ray: the head's GCS port %d %s: "
        "Ray not started, and not started again with this step's token\n" % (port, why)
    )
    sys.stderr.flush()
    os._exit(PORT_TAKEN)


def whose(uid):
    try:
        import pwd

        return "%s (uid %d)" % (pwd.getpwuid(uid).pw_name, uid)
    except Exception:
        return "uid %d" % uid


def check(port, process):
    """Returns once the GCS process alone listens on `port`."""
    me, end = os.getuid(), time.time() + WAIT
    while True:
        seen = listeners(port)  # before the GCS's own sockets: see sockets()
        mine = sockets(process.pid)
        foreign = [uid for uid, inode in seen if uid != me or inode not in mine]
        if foreign:
            who = whose(foreign[0])
            if foreign[0] == me:
                who = "another process of yours, not this step's GCS"
            refuse(port, process, "is taken by " + who)
        if seen:
            # tf-cluster ray's own calls (its wait for the step's nodes) wait
            # for this file, in the step's private directory.
            os.close(os.open(os.environ["TFC_RAY_GCS_CHECKED"], os.O_CREAT | os.O_EXCL, 0o600))
            return
        if process.poll() is not None:
            refuse(port, process, "never listened: the GCS ended (the port was taken?)")
        if time.time() > end:
            refuse(port, process, "did not listen within %.0f s" % WAIT)
        time.sleep(0.02)


def guard():
    from ray._private import node, ray_constants

    start_gcs_server = node.Node.start_gcs_server

    def checked(self):
        # tf-cluster ray held the port (bound, not listening) until now: the
        # IPv4 side goes to Ray's GCS (it listens on 0.0.0.0); the IPv6 side
        # (IPV6_V6ONLY) stays held while this process, Ray's, runs.
        for held in filter(None, os.environ.get("TFC_RAY_GCS_HOLD", "").split(",")):
            fd, family = held.split(":")
            if family == "4":
                os.close(int(fd))
        start_gcs_server(self)
        port = int(self._ray_params.gcs_server_port)
        try:
            info = self.all_processes[ray_constants.PROCESS_TYPE_GCS_SERVER][0]
        except Exception as e:
            refuse(port, None, "cannot be checked in this Ray (%r)" % e)
        check(port, info.process)

    node.Node.start_gcs_server = checked


if __name__ == "__main__":
    if "--head" in sys.argv[1:]:
        guard()
    from ray.scripts.scripts import main

    sys.argv = ["ray"] + sys.argv[1:]
    sys.exit(main())
