//! The GPUs' own health in the preflight: slurmstepd (in `user_init`, as
//! the job's user) execs the installed CLI's probe (`tf-cluster
//! probe-gpus MINORS`), which loads NVIDIA's management library where the
//! node has it and prints one line per GPU (crate::core::gpu_health). The
//! library is never loaded into slurmstepd, which is threaded: the forked
//! child calls only async-signal-safe functions until it execs, with an
//! empty environment (no user's LD_LIBRARY_PATH or LD_PRELOAD), and is
//! killed at [`LIMIT`]. No CLI, no library, a probe that fails or is late:
//! nothing is checked (said in slurmd's log when it fails).

use std::ffi::{CString, c_char};
use std::time::{Duration, Instant};

use super::bounded_child::wait_within;

/// The installed CLI: the packages' /usr/bin/tf-cluster, or where
/// packaging/install.sh puts it (`--prefix`), fixed when the admin builds
/// the plugin (`TFC_CLI_PATH`), never a variable at run time.
const CLI: &str = match option_env!("TFC_CLI_PATH") {
    Some(path) => path,
    None => "/usr/bin/tf-cluster",
};
/// The longest the probe may take.
const LIMIT: Duration = Duration::from_secs(5);
/// The most bytes of its answer read.
const MAX_ANSWER: usize = 64 << 10;

/// The probe's lines for the GPUs of device minors `minors`; "" where
/// nothing could be asked.
pub fn probe(minors: &[u32]) -> String {
    if minors.is_empty() || !std::path::Path::new(CLI).exists() {
        return String::new();
    }
    let list: Vec<String> = minors.iter().map(u32::to_string).collect();
    let args = [CLI.to_string(), "probe-gpus".into(), list.join(",")];
    let Ok(args) = args
        .into_iter()
        .map(CString::new)
        .collect::<Result<Vec<_>, _>>()
    else {
        return String::new();
    };
    // Everything the child uses is made before the fork.
    let mut argv: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let envp: [*const c_char; 1] = [std::ptr::null()];
    let mut fds = [0; 2];
    // SAFETY: a pipe into a two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return String::new();
    }
    let [rd, wr] = fds;
    // SAFETY: fork; the child calls only async-signal-safe functions
    // (dup2, close_range, execve, _exit) and never returns.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: as above; the pointers were made before the fork.
        unsafe {
            libc::dup2(wr, 1);
            // No exec holding slurmstepd's descriptors (a kernel without
            // close_range fails it: then no probe, as without the library).
            if libc::syscall(libc::SYS_close_range, 3, libc::c_uint::MAX, 0) == 0 {
                libc::execve(argv[0], argv.as_ptr(), envp.as_ptr());
            }
            libc::_exit(127);
        }
    }
    // SAFETY: the parent's copy of the write end.
    unsafe { libc::close(wr) };
    if pid < 0 {
        // SAFETY: ours.
        unsafe { libc::close(rd) };
        return String::new();
    }
    let start = Instant::now();
    let answer = read_until(rd, start + LIMIT);
    // SAFETY: ours.
    unsafe { libc::close(rd) };
    let mut status = 0;
    let left = LIMIT.saturating_sub(start.elapsed());
    if !wait_within(pid, left, &mut status) {
        log::warn!("preflight: the GPU probe took over {LIMIT:?}: GPUs not checked");
        return String::new();
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// The pipe's bytes until its end, [`MAX_ANSWER`] or `deadline`.
fn read_until(fd: libc::c_int, deadline: Instant) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while out.len() < MAX_ANSWER {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd of ours.
        let ready = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(1000) as libc::c_int) };
        if ready < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break;
        }
        if ready <= 0 {
            continue;
        }
        // SAFETY: reads into `buf`.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    out.truncate(MAX_ANSWER);
    out
}
