# The tests' command server in a testbed container (tests/common/exec_server.rs): started once
# per test process, container and user by one `docker exec -i`, it runs each command it reads
# (one JSON line: id, argv, and the user for alice's commands) in a thread of its own, stdin
# /dev/null, and writes one JSON line back (id, the raw wait status, stdout and stderr in hex).
# A `docker exec` per command cost the host about a tenth of a CPU-second in dockerd,
# containerd and runc; a fork here costs milliseconds. At the end of its input it waits for
# the commands still running, as separate `docker exec`s would have run on.
import json
import os
import pwd
import subprocess
import sys
import threading

out_lock = threading.Lock()


def serve(req):
    kw = {}
    user = req.get("user")
    if user:
        pw = pwd.getpwnam(user)
        env = dict(os.environ, USER=user, LOGNAME=user, HOME=pw.pw_dir)
        kw = dict(
            user=pw.pw_uid,
            group=pw.pw_gid,
            extra_groups=os.getgrouplist(user, pw.pw_gid),
            env=env,
            cwd=pw.pw_dir,
        )
    try:
        p = subprocess.run(
            req["argv"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            **kw,
        )
        rc = p.returncode
        status = -rc if rc < 0 else rc << 8
        out, err = p.stdout, p.stderr
    except OSError as e:
        status, out, err = 127 << 8, b"", f"exec server: {e}\n".encode()
    line = json.dumps({"id": req["id"], "status": status, "out": out.hex(), "err": err.hex()})
    with out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


for line in sys.stdin:
    threading.Thread(target=serve, args=(json.loads(line),)).start()
