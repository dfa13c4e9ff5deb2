//! TF_CONFIG as TensorFlow's TFConfigClusterResolver reads it:
//! `{"cluster":{role:["host:port",…],…},"task":{"type":role,"index":i}}`, plus
//! `"rpc_layer"` when one is set.
//!
//! Written by hand rather than through serde: it is the hot part of the task
//! path (6,000 addresses), and every string in it was validated to need no
//! escaping (host names, role names and rpc layers admit no quote, backslash
//! or control character).

use super::error::{Result, bail};
use super::hostlist::HostList;
use super::number::{decimal, push_fixed, push_padded};

/// Slurm's setenv and execve refuse a variable of this many bytes or more,
/// counting `NAME=`, the value and the NUL.
pub const ENV_LIMIT: usize = 131_072;

/// One role of the cluster and the addresses of its tasks, in index order.
pub struct Job<'a, I> {
    pub name: &'a str,
    pub addresses: I,
}

/// Renders TF_CONFIG for the task `(task_type, task_index)`.
pub fn render<'a, I>(
    jobs: impl IntoIterator<Item = Job<'a, I>>,
    task_type: &str,
    task_index: u32,
    rpc_layer: Option<&str>,
    capacity: usize,
) -> String
where
    I: IntoIterator<Item = (&'a str, u16)>,
{
    let mut out = String::with_capacity(capacity + 96);
    out.push_str("{\"cluster\":{");
    for (j, job) in jobs.into_iter().enumerate() {
        if j > 0 {
            out.push(',');
        }
        out.push('"');
        out.push_str(job.name);
        out.push_str("\":[");
        for (i, (host, port)) in job.addresses.into_iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push('"');
            out.push_str(host);
            out.push(':');
            push_padded(&mut out, u64::from(port), 0);
            out.push('"');
        }
        out.push(']');
    }
    out.push_str("},\"task\":{\"type\":\"");
    out.push_str(task_type);
    out.push_str("\",\"index\":");
    push_padded(&mut out, u64::from(task_index), 0);
    out.push('}');
    if let Some(layer) = rpc_layer {
        out.push_str(",\"rpc_layer\":\"");
        out.push_str(layer);
        out.push('"');
    }
    out.push('}');
    out
}

/// Host names are copied in pieces of this size where they fit.
const HOST_PIECE: usize = 32;

/// What the task path renders from: the step's host names as one buffer,
/// and each local index's `:port","` written once. An address then costs two
/// copies of fixed size, however many tasks there are.
pub(crate) struct Table<'h> {
    hosts: &'h HostList,
    /// `:port","` (the next address's opening quote included), `len` bytes
    /// of each counting.
    ports: Vec<([u8; 16], usize)>,
    /// The longest address with its separator: `host:port","`.
    longest: usize,
}

impl Table<'_> {
    pub(crate) fn new<'h>(hosts: &'h HostList, ports: &[u16]) -> Table<'h> {
        let mut table = Table {
            hosts,
            ports: Vec::with_capacity(ports.len()),
            longest: 0,
        };
        let mut longest_port = 0;
        for &port in ports {
            let (digits, start) = decimal(u64::from(port));
            let digits = &digits[start..];
            let mut piece = [0u8; 16];
            piece[0] = b':';
            piece[1..=digits.len()].copy_from_slice(digits);
            piece[digits.len() + 1..digits.len() + 4].copy_from_slice(b"\",\"");
            table.ports.push((piece, digits.len() + 4));
            longest_port = longest_port.max(digits.len() + 4);
        }
        table.longest = hosts.longest() + longest_port;
        table
    }

    fn push_host(&self, out: &mut Vec<u8>, node: usize) {
        let (start, end) = self.hosts.span(node);
        let bytes = self.hosts.as_bytes();
        // The piece may run into the following names: only `end - start` count.
        match bytes[start..].first_chunk::<HOST_PIECE>() {
            Some(piece) if end - start <= HOST_PIECE => push_fixed(out, piece, end - start),
            _ => out.extend_from_slice(&bytes[start..end]),
        }
    }
}

/// [`render`] from a [`Table`]: `jobs` give each role's tasks as (node,
/// local index) pairs into it. The same text, made with copies of fixed size.
pub(crate) fn render_table<'a, I>(
    table: &Table,
    jobs: impl IntoIterator<Item = Job<'a, I>>,
    task_type: &str,
    task_index: u32,
    rpc_layer: Option<&str>,
    tasks: usize,
    names: usize,
) -> String
where
    I: IntoIterator<Item = (u32, u32)>,
{
    let capacity = tasks * table.longest
        + names
        + task_type.len()
        + rpc_layer.map_or(0, str::len)
        + 96
        + HOST_PIECE;
    let mut out = Vec::with_capacity(capacity);
    out.extend_from_slice(b"{\"cluster\":{");
    for (j, job) in jobs.into_iter().enumerate() {
        if j > 0 {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(job.name.as_bytes());
        out.extend_from_slice(b"\":[\"");
        let start = out.len();
        for (node, local) in job.addresses {
            table.push_host(&mut out, node as usize);
            let (piece, len) = &table.ports[local as usize];
            push_fixed(&mut out, piece, *len);
        }
        // Without the last `,"` (or, for no address, the first `"`).
        out.truncate(if out.len() > start {
            out.len() - 2
        } else {
            start - 1
        });
        out.push(b']');
    }
    out.extend_from_slice(b"},\"task\":{\"type\":\"");
    out.extend_from_slice(task_type.as_bytes());
    out.extend_from_slice(b"\",\"index\":");
    let (digits, start) = decimal(u64::from(task_index));
    out.extend_from_slice(&digits[start..]);
    out.push(b'}');
    if let Some(layer) = rpc_layer {
        out.extend_from_slice(b",\"rpc_layer\":\"");
        out.extend_from_slice(layer.as_bytes());
        out.push(b'"');
    }
    out.push(b'}');
    // Whole strings and ASCII pieces only.
    String::from_utf8(out).expect("TF_CONFIG is made of whole strings")
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
                addresses: vec![("n1", 1337)],
            },
            Job {
                name: "worker",
                addresses: vec![("n1", 1338), ("n2", 1337)],
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
                addresses: vec![("n1", 1)],
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
        let mut rank = 0;
        let jobs = roles.map(|(name, count)| Job {
            name,
            addresses: (0..count)
                .map(|_| {
                    rank += 1;
                    ("n1", 1000 + rank as u16)
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
    fn the_table_renders_what_render_renders() {
        let long = "a-node-name-longer-than-a-piece-of-32-bytes";
        let list = format!("n1,node0002,{long},x");
        let hosts = HostList::parse(&list, 10).unwrap();
        let ports = [1u16, 8888, 65535, 12000];
        let table = Table::new(&hosts, &ports);
        let tasks: Vec<(u32, u32)> = (0..23u32).map(|r| (r * 7 % 4, r * 5 % 4)).collect();
        for (roles, rpc) in [
            (vec![("worker", 23)], None),
            (
                vec![("chief", 1), ("ps", 2), ("worker", 20)],
                Some("grpc+verbs"),
            ),
            (vec![("a", 22), ("b", 1)], None),
            (vec![("a", 0), ("b", 23), ("c", 0)], None),
        ] {
            fn jobs<T: Clone>(
                roles: &[(&'static str, usize)],
                all: &[T],
            ) -> Vec<Job<'static, Vec<T>>> {
                let mut first = 0;
                roles
                    .iter()
                    .map(|&(name, count)| {
                        first += count;
                        Job {
                            name,
                            addresses: all[first - count..first].to_vec(),
                        }
                    })
                    .collect()
            }
            let numbers: Vec<(&str, u16)> = tasks
                .iter()
                .map(|&(n, l)| (hosts.get(n as usize), ports[l as usize]))
                .collect();
            let names = roles.iter().map(|(n, _)| n.len() + 6).sum();
            let want = render(jobs(&roles, &numbers), "ps", 1, rpc, 0);
            let got = render_table(&table, jobs(&roles, &tasks), "ps", 1, rpc, 23, names);
            assert_eq!(got, want);
            assert!(got.contains(long));
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
