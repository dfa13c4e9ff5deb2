//! An `srun --async` step's layout as slurmctld made it, learnt in
//! slurmstepd's `user_init` from Slurm's own `sattach --layout JOB.STEP`
//! (its `slurm_job_step_layout_get`, which slurmctld reroutes to the job's
//! step manager), run in a child that execs it, as the job's user, killed at
//! [`LIMIT`].
//!
//! Not the request itself, here: slurmstepd is threaded, and libslurm's
//! RPC made in `user_init` (slurmstepd's thread, or its child with
//! `PrologFlags=Contain`) dies there on 26.05 (`fatal: auth_g_create:
//! pthread_rwlock_rdlock(): Resource deadlock avoided`, measured on the
//! testbed) and would hang the step; a `fork`ed child may call only
//! async-signal-safe code until it execs, which a libslurm RPC is not. So
//! everything the child needs (the path, its arguments, the environment,
//! its output's descriptors) is made before the fork, and the child only
//! moves descriptors, takes the user's ids for good and execs: sattach is a
//! fresh process that makes the request as any Slurm client does. Its
//! output goes to memory files read once it ended; a child still running
//! at the deadline is killed.

use std::ffi::{CString, c_char};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use super::super::bounded_child::wait_within;
use super::super::slurmctld::step_layout::Component;
use crate::core::{Error, MAX_NODES, MAX_TASKS, Result};

/// Longest sattach may take: slurmctld, then the step manager it reroutes
/// to, each connection bounded by Slurm's MessageTimeout (10 s by default).
pub const LIMIT: Duration = Duration::from_secs(25);

/// Most bytes of sattach's output read (a layout of [`MAX_TASKS`] tasks
/// takes about 8 bytes a task).
const MAX_OUTPUT: usize = 8 << 20;

/// Slurm's sattach beside slurmstepd: `PREFIX/bin/sattach` for slurmstepd
/// in `PREFIX/sbin` (Debian's `/usr/sbin/slurmstepd-wlm`, a source build's
/// `/opt/slurm/sbin/slurmstepd`), else `/usr/bin/sattach`.
fn sattach_path() -> CString {
    let beside = std::fs::read_link("/proc/self/exe").ok().and_then(|exe| {
        let path = exe.parent()?.parent()?.join("bin/sattach");
        path.is_file().then_some(path)
    });
    let path = beside.unwrap_or_else(|| Path::new("/usr/bin/sattach").to_path_buf());
    CString::new(path.as_os_str().as_bytes()).unwrap_or_else(|_| c"/usr/bin/sattach".into())
}

/// A memory file for the child's output.
fn memfd(name: &std::ffi::CStr) -> Result<libc::c_int> {
    // SAFETY: a fresh anonymous file, closed by the caller.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    match fd {
        -1 => Err(Error::new(format!(
            "cannot make a memory file: {}",
            std::io::Error::last_os_error()
        ))),
        fd => Ok(fd),
    }
}

/// The whole of memory file `fd` (at most [`MAX_OUTPUT`] bytes).
fn read_all(fd: libc::c_int) -> String {
    let mut bytes = vec![0u8; MAX_OUTPUT];
    let mut n = 0;
    while n < bytes.len() {
        // SAFETY: reads into the rest of `bytes` from its offset `n`.
        let got = unsafe {
            libc::pread(
                fd,
                bytes[n..].as_mut_ptr().cast(),
                bytes.len() - n,
                n as i64,
            )
        };
        if got <= 0 {
            break;
        }
        n += got as usize;
    }
    bytes.truncate(n);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// slurmstepd's own environment (SLURM_CONF where slurmd set it), never the
/// step's: the user's variables choose no controller.
fn environment() -> Vec<CString> {
    std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut entry = k.as_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(v.as_bytes());
            CString::new(entry).ok()
        })
        .collect()
}

/// `strings` as C's NULL-terminated array of pointers (valid while they
/// are).
fn pointers<'s>(strings: impl Iterator<Item = &'s std::ffi::CStr>) -> Vec<*const c_char> {
    let mut out: Vec<*const c_char> = strings.map(std::ffi::CStr::as_ptr).collect();
    out.push(std::ptr::null());
    out
}

/// Step `job`.`step`'s layout from `sattach --layout`, as the user whose
/// ids slurmstepd has taken (refused as root for another user's job).
pub fn layout(job: u32, step: u32, job_uid: u32) -> Result<Component> {
    // SAFETY: geteuid and getegid cannot fail.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if euid == 0 && job_uid != 0 {
        return Err(Error::new(
            "slurmstepd runs as root here, not as the job's user",
        ));
    }
    let path = sattach_path();
    let id = CString::new(format!("{job}.{step}")).expect("digits and a dot");
    let args = [c"sattach", c"--layout", c"-Q", id.as_c_str()];
    let argv = pointers(args.iter().copied());
    let env = environment();
    let envp = pointers(env.iter().map(CString::as_c_str));
    let (out, err) = (memfd(c"tfc-layout")?, memfd(c"tfc-layout-err")?);
    // SAFETY: /dev/null for the child's stdin, closed below.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    // SAFETY: fork; the child only makes system calls on values made
    // before it (descriptors, ids, the path, argv, envp) and execs or
    // _exits, running nothing of slurmstepd's.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: system calls only, on values made before the fork.
        unsafe {
            libc::dup2(null, 0);
            libc::dup2(out, 1);
            libc::dup2(err, 2);
            // No exec as the user holding slurmstepd's descriptors (a
            // kernel without close_range fails it: then no exec at all).
            if libc::syscall(libc::SYS_close_range, 3, libc::c_uint::MAX, 0) == 0
                && libc::setresgid(egid, egid, egid) == 0
                && libc::setresuid(euid, euid, euid) == 0
            {
                libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr());
            }
            libc::_exit(127);
        }
    }
    // The parent's descriptors, each closed once.
    let close = |fds: &[libc::c_int]| {
        for &fd in fds {
            // SAFETY: the parent's own descriptors, each closed once.
            unsafe { libc::close(fd) };
        }
    };
    close(&[null]);
    if pid < 0 {
        close(&[out, err]);
        return Err(Error::new(format!(
            "cannot fork: {}",
            std::io::Error::last_os_error()
        )));
    }
    let mut status = 0;
    let ended = wait_within(pid, LIMIT, &mut status);
    let (text, said) = (read_all(out), read_all(err));
    close(&[out, err]);
    let what = format!("sattach --layout {job}.{step}");
    if !ended {
        return Err(Error::new(format!("{what} took over {LIMIT:?}")));
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        let why = said.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(Error::new(format!("{what} failed ({status:#x}): {why}")));
    }
    parse(&text).map_err(|e| Error::new(format!("{what}: {}", e.message())))
}

/// sattach's layout (sattach.c `print_layout_info`): `Job step layout:`,
/// `\tT tasks, N nodes (LIST)`, a blank line, then `\tNode I (NAME), K
/// task(s): ID ID … ` for each node in order.
pub fn parse(text: &str) -> Result<Component> {
    let bad = |why: &str| Error::new(format!("not a step layout ({why})"));
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    if lines.next() != Some("Job step layout:") {
        return Err(bad("no header"));
    }
    let summary = lines.next().ok_or_else(|| bad("no summary"))?;
    let (tasks, rest) = summary
        .split_once(" tasks, ")
        .ok_or_else(|| bad("summary"))?;
    let (nodes, list) = rest.split_once(" nodes (").ok_or_else(|| bad("summary"))?;
    let nodes_list = list.strip_suffix(')').ok_or_else(|| bad("summary"))?;
    let count = |text: &str, most: u32| text.parse::<u32>().ok().filter(|n| *n <= most);
    let tasks = count(tasks, MAX_TASKS).ok_or_else(|| bad("task count"))?;
    let nodes = count(nodes, MAX_NODES).ok_or_else(|| bad("node count"))?;
    let mut tids = Vec::with_capacity(nodes as usize);
    for (i, line) in lines.enumerate() {
        let rest = line
            .strip_prefix(&format!("Node {i} ("))
            .ok_or_else(|| bad("node line"))?;
        let (_, rest) = rest.split_once("), ").ok_or_else(|| bad("node line"))?;
        let (k, ids) = rest
            .split_once(" task(s):")
            .ok_or_else(|| bad("node line"))?;
        let ids: Vec<u32> = ids
            .split_whitespace()
            .map(|id| count(id, MAX_TASKS))
            .collect::<Option<_>>()
            .ok_or_else(|| bad("task id"))?;
        if count(k, MAX_TASKS) != Some(ids.len() as u32) {
            return Err(bad("task ids"));
        }
        tids.push(ids);
    }
    let total: usize = tids.iter().map(Vec::len).sum();
    if tids.len() != nodes as usize || total != tasks as usize {
        return Err(bad("counts"));
    }
    Ok(Component {
        nodes: nodes_list.to_string(),
        tids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// sattach's text as sattach.c prints it: tabs, a trailing space.
    #[test]
    fn sattachs_layout_is_read_whole_or_refused() {
        let text = "Job step layout:\n\t6 tasks, 3 nodes (node[1-3])\n\n\tNode 0 (node1), 2 task(s): 0 3 \n\tNode 1 (node2), 2 task(s): 1 4 \n\tNode 2 (node3), 2 task(s): 2 5 \n";
        let got = parse(text).unwrap();
        assert_eq!(got.nodes, "node[1-3]");
        assert_eq!(got.tids, vec![vec![0, 3], vec![1, 4], vec![2, 5]]);
        for bad in [
            "",
            "sattach: error: Invalid job id",
            &text.replace("6 tasks", "7 tasks"),
            &text.replace("Node 2", "Node 3"),
            &text.replace("2 5", "2"),
            &text.replace("(node3), ", "(node3) "),
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
