//! The container stand-in (tests/container_standin/, built by
//! docker/matrix.sh beside the plugin) enabled on every host for the tests
//! whose steps ask for `--container-image`.

use super::{Exclusive, HOSTS, exclusive, on};

/// The stand-in, built by docker/matrix.sh beside the plugin.
pub const STANDIN_SO: &str = "/opt/tf-cluster/container_standin.so";
pub const STANDIN_CONF: &str = "/etc/slurm/plugstack.conf.d/container-standin.conf";

/// The stand-in enabled on every host as a container plugin's package does
/// (`required …` in plugstack.conf.d), beside the tf-cluster package's
/// snippet, while the guard lives; the testbed alone.
pub struct Standin(#[allow(dead_code)] Exclusive);

pub fn standin() -> Standin {
    let bed = exclusive();
    for host in HOSTS {
        let out = on(
            host,
            &[
                "sh",
                "-c",
                &format!(
                    "test -f {STANDIN_SO} || {{ echo 'no {STANDIN_SO} (docker/matrix.sh builds it)' >&2; exit 1; }}; \
                     echo 'required {STANDIN_SO}' >{STANDIN_CONF}.tmp && mv {STANDIN_CONF}.tmp {STANDIN_CONF}"
                ),
            ],
        );
        assert!(
            out.status.success(),
            "{host}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Standin(bed)
}

impl Drop for Standin {
    fn drop(&mut self) {
        for host in HOSTS {
            let ok = on(host, &["rm", "-f", STANDIN_CONF]).status.success();
            if !ok && !std::thread::panicking() {
                panic!("{host}: could not remove {STANDIN_CONF}");
            }
        }
    }
}
