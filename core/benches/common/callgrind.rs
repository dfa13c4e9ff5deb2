//! Instructions counted by valgrind's callgrind, for the benches that report
//! work in numbers that do not depend on the machine's load.

use std::path::Path;
use std::process::Command;

/// Instructions executed by `me ARGS…`, from callgrind's totals.
pub fn callgrind(me: &Path, args: &[&str]) -> u64 {
    let out = std::env::temp_dir().join(format!(
        "tfc-callgrind.{}.{}",
        std::process::id(),
        args.join(".")
    ));
    let status = Command::new("valgrind")
        .args(["--tool=callgrind", "-q"])
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(me)
        .args(args)
        .status()
        .expect("running valgrind");
    assert!(status.success(), "valgrind failed");
    let text = std::fs::read_to_string(&out).expect("callgrind output");
    let _ = std::fs::remove_file(&out);
    text.lines()
        .find_map(|l| {
            l.strip_prefix("totals: ")
                .or_else(|| l.strip_prefix("summary: "))
        })
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("callgrind totals")
}
