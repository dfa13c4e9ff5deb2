//! Slurm's commands as the CLI runs them (`scontrol`, `squeue`, `srun
//! --version`): one runner with one deadline and a bound on what it keeps,
//! and one reader of `scontrol … -o`'s `Key=Value` words that never reads
//! past `Command=` (a job's command as typed: newlines and `Key=Value` words
//! of the user's own).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one command may run: slurmctld's answer to one request (Slurm's
/// clients retry a missing configuration for about 60 s); the doctor's two
/// commands fit its 10 s.
pub const DEADLINE: Duration = Duration::from_secs(4);
/// Most output of a command kept, each stream.
const MAX_OUTPUT: u64 = 1 << 20;

/// Runs `argv` with no input, for at most [`DEADLINE`]: its standard output
/// (at most [`MAX_OUTPUT`]), or one line saying why not (its own first
/// error line where it failed). A command that runs over is killed with
/// everything it started.
pub fn run(argv: &[&str]) -> Result<String, String> {
    let shown = argv.join(" ");
    let mut child = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("`{shown}`: {e}"))?;
    let read = |stream: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut data = Vec::new();
            if let Some(s) = stream {
                let _ = s.take(MAX_OUTPUT).read_to_end(&mut data);
            }
            data
        })
    };
    let out = read(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = read(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if start.elapsed() < DEADLINE => std::thread::sleep(Duration::from_millis(10)),
            _ => break None,
        }
    };
    // Whatever it started goes with it (the readers then see the pipes close).
    // SAFETY: a signal to the process group made for this command.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    let Some(status) = status else {
        let _ = child.wait();
        return Err(format!(
            "`{shown}` killed after {} s without an answer",
            DEADLINE.as_secs()
        ));
    };
    let (out, err) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    if !status.success() {
        let err = String::from_utf8_lossy(&err);
        return Err(match err.lines().find(|l| !l.trim().is_empty()) {
            Some(line) => line.trim().to_string(),
            None => format!("`{shown}` failed ({status})"),
        });
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// `key`'s value among one `scontrol … -o` line's `Key=Value` words (up to
/// the next space), read no further than `Command=`: what follows is the
/// user's own text.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .take_while(|w| !w.starts_with("Command="))
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_never_read_past_the_command() {
        let line =
            "JobId=7 UserId=alice(1000) NodeList=n1 Command=/bin/x NodeList=n9 UserId=bob(1001)";
        assert_eq!(field(line, "NodeList"), Some("n1"));
        assert_eq!(field(line, "UserId"), Some("alice(1000)"));
        let forged = "JobId=7 Command=/bin/sh -c Tasks=99 NodeList=evil";
        assert_eq!(field(forged, "Tasks"), None);
        assert_eq!(field(forged, "NodeList"), None);
        assert_eq!(field("CPUTot=4 CPUTotal=9", "CPUTot"), Some("4"));
    }

    /// (Its deadline: the doctor's tests, `cli/tests/doctor.rs`.)
    #[test]
    fn a_command_says_its_own_error() {
        assert_eq!(run(&["sh", "-c", "echo out"]).unwrap(), "out\n");
        assert_eq!(
            run(&[
                "sh",
                "-c",
                "echo 'scontrol: error: Invalid job id' >&2; exit 1"
            ])
            .unwrap_err(),
            "scontrol: error: Invalid job id"
        );
        let err = run(&["sh", "-c", "exit 3"]).unwrap_err();
        assert!(err.contains("failed"), "{err}");
    }
}
