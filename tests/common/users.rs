//! Another user of the testbed: bob (made at the testbed's start by
//! docker/node/entrypoint.sh), whose job the hostile tests aim at.

use super::exec::on;

/// A second user's job, a victim of the hostile tests: `sbatch` as bob (made at the
/// testbed's start by entrypoint.sh), its id.
pub fn bobs_job(node: &str) -> u32 {
    let out = as_bob(&format!(
        "sbatch --parsable -N1 -w {node} -o /dev/null --wrap 'srun sleep 600'"
    ));
    let text = String::from_utf8_lossy(&out.stdout);
    let job: u32 = text.trim().parse().unwrap_or_else(|_| {
        panic!(
            "sbatch as bob: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    // Until its step runs.
    for _ in 0..300 {
        let steps = on(
            "ctl",
            &["squeue", "-h", "-s", "-j", &job.to_string(), "-o", "%i"],
        );
        if String::from_utf8_lossy(&steps.stdout)
            .lines()
            .any(|l| l.trim() == format!("{job}.0"))
        {
            return job;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    panic!("bob's step {job}.0 never ran");
}

/// Whether step `job`.0 is still running.
pub fn step_running(job: u32) -> bool {
    let steps = on(
        "ctl",
        &["squeue", "-h", "-s", "-j", &job.to_string(), "-o", "%i"],
    );
    String::from_utf8_lossy(&steps.stdout)
        .lines()
        .any(|l| l.trim() == format!("{job}.0"))
}

/// Runs `script` as bob on the submit host (bob has no home: /tmp).
pub fn as_bob(script: &str) -> std::process::Output {
    on(
        "ctl",
        &[
            "runuser",
            "-u",
            "bob",
            "--",
            "sh",
            "-c",
            &format!("cd /tmp && {script}"),
        ],
    )
}
