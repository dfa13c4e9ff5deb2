//! TF_CONFIG as TensorFlow's TFConfigClusterResolver reads it:
//! `{"cluster":{role:["host:port",…],…},"task":{"type":role,"index":i}}`, plus
//! `"rpc_layer"` when one is set.
//!
//! Written as text: every string in it was validated to need no escaping
//! (host names, role names and rpc layers admit no quote, backslash or
//! control character), and the tests parse it with serde_json.

use std::fmt::Write;

use super::error::{Result, bail};

/// Slurm's setenv and execve refuse a variable of this many bytes or more,
/// counting `NAME=`, the value and the NUL.
pub use crate::limits::ENV_LIMIT;

/// One role of the cluster and the addresses of its tasks, in index order.
pub struct Job<'a, I> {
    pub name: &'a str,
    pub addresses: I,
}

/// Renders TF_CONFIG for the task `(task_type, task_index)`; each job's
/// addresses are (host, port) pairs. `capacity`: the expected size, so the
/// text is written without growing (and copying) it again and again.
/// The tests' whole-document view of `cluster` + `finish`.
#[cfg(test)]
fn render<'a, I>(
    jobs: impl IntoIterator<Item = Job<'a, I>>,
    task_type: &str,
    task_index: u32,
    rpc_layer: Option<&str>,
    capacity: usize,
) -> String
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    let mut out = cluster(jobs, capacity);
    finish(&mut out, task_type, task_index, rpc_layer);
    out
}

/// The part every task shares, `{"cluster":{…}`: [`finish`] completes it.
pub fn cluster<'a, I>(jobs: impl IntoIterator<Item = Job<'a, I>>, capacity: usize) -> String
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    let mut out = String::with_capacity(capacity);
    out.push_str("{\"cluster\":{");
    for (j, job) in jobs.into_iter().enumerate() {
        if j > 0 {
            out.push(',');
        }
        let _ = write!(out, "\"{}\":[", job.name);
        for (i, (host, port)) in job.addresses.into_iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            for piece in ["\"", host, ":", port, "\""] {
                out.push_str(piece);
            }
        }
        out.push(']');
    }
    out
}

/// Completes the text of [`cluster`] with the task's own part.
pub fn finish(out: &mut String, task_type: &str, task_index: u32, rpc_layer: Option<&str>) {
    let _ = write!(
        out,
        "}},\"task\":{{\"type\":\"{task_type}\",\"index\":{task_index}}}"
    );
    if let Some(layer) = rpc_layer {
        let _ = write!(out, ",\"rpc_layer\":\"{layer}\"");
    }
    out.push('}');
}

/// The bytes [`finish`] adds at most (a role name is short; see roles.rs).
pub fn task_part_len(task_type: &str, rpc_layer: Option<&str>) -> usize {
    r#"},"task":{"type":"","index":4294967295}"#.len()
        + task_type.len()
        + rpc_layer.map_or(0, |l| r#","rpc_layer":"""#.len() + l.len())
        + 1
}

/// The smallest TF_CONFIG `roles` can give when no host name is shorter than
/// `host_len` and no port has fewer than `port_digits` digits: what srun can
/// know before the step's layout exists.
pub fn min_size<'a>(
    roles: impl IntoIterator<Item = (&'a str, u32)>,
    host_len: usize,
    port_digits: usize,
    rpc_layer: Option<&str>,
) -> usize {
    let address = host_len + 1 + port_digits + 2; // "host:port"
    let mut size = r#"{"cluster":{},"task":{"type":"","index":0}}"#.len();
    let mut shortest = usize::MAX;
    for (i, (name, count)) in roles.into_iter().enumerate() {
        let count = count as usize;
        size += usize::from(i > 0) + name.len() + r#""":[]"#.len();
        size += count * address + count.saturating_sub(1);
        shortest = shortest.min(name.len());
    }
    size += if shortest == usize::MAX { 0 } else { shortest };
    size += rpc_layer.map_or(0, |l| r#","rpc_layer":"""#.len() + l.len());
    size
}

/// Refuses a TF_CONFIG of `size` bytes (the value alone).
fn check_env_size(size: usize, tasks: u32, at_least: &str) -> Result<()> {
    let total = "TF_CONFIG=".len() + size + 1;
    if total >= ENV_LIMIT {
        bail!(
            "TF_CONFIG for {tasks} tasks would be {at_least}{total} bytes, over the {ENV_LIMIT}-byte limit of one \
             environment variable; use fewer tasks or shorter host names"
        );
    }
    Ok(())
}

/// Refuses a step whose TF_CONFIG cannot fit whatever its layout.
pub fn check_min_size(min_size: usize, tasks: u32) -> Result<()> {
    check_env_size(min_size, tasks, "at least ")
}

/// Refuses a TF_CONFIG that could not be passed in one environment variable.
pub fn check_size(tf_config: &str, tasks: u32) -> Result<()> {
    check_env_size(tf_config.len(), tasks, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_what_tensorflow_reads() {
        let jobs = [
            Job {
                name: "ps",
                addresses: vec![("n1", "1337")],
            },
            Job {
                name: "worker",
                addresses: vec![("n1", "1338"), ("n2", "1337")],
            },
        ];
        let json = render(jobs, "worker", 1, None, 0);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "cluster": {"ps": ["n1:1337"], "worker": ["n1:1338", "n2:1337"]},
                "task": {"type": "worker", "index": 1}
            })
        );
        let with_rpc = render(
            [Job {
                name: "worker",
                addresses: vec![("n1", "1")],
            }],
            "worker",
            0,
            Some("grpc"),
            0,
        );
        let v: serde_json::Value = serde_json::from_str(&with_rpc).unwrap();
        assert_eq!(v["rpc_layer"], "grpc");
    }

    #[test]
    fn min_size_is_the_size_of_the_shortest_layout() {
        let roles = [("chief", 1u32), ("ps", 2), ("worker", 3)];
        let ports: Vec<String> = (1001..1007).map(|p: u16| p.to_string()).collect();
        let mut rank = 0;
        let jobs = roles.map(|(name, count)| Job {
            name,
            addresses: (0..count)
                .map(|_| {
                    rank += 1;
                    ("n1", ports[rank - 1].as_str())
                })
                .collect::<Vec<_>>(),
        });
        for rpc in [None, Some("grpc")] {
            let json = render(
                jobs.iter().map(|j| Job {
                    name: j.name,
                    addresses: j.addresses.clone(),
                }),
                "ps",
                1,
                rpc,
                0,
            );
            assert_eq!(min_size(roles, 2, 4, rpc), json.len(), "{json}");
        }
    }

    #[test]
    fn size_limit_counts_name_and_nul() {
        let fits = "x".repeat(ENV_LIMIT - "TF_CONFIG=".len() - 2);
        assert!(check_size(&fits, 7).is_ok());
        let e = check_size(&format!("{fits}x"), 7).unwrap_err().to_string();
        assert!(
            e.contains("TF_CONFIG for 7 tasks would be 131072 bytes, over the 131072-byte limit"),
            "{e}"
        );
    }
}
