//! Files and Python packages installed into the testbed's shared /home.

use std::path::PathBuf;

use super::exec::{exec, exec_for};

/// Writes `files` (name, contents) into `dir` on the shared /home, then runs
/// `after` there (e.g. a chmod).
pub fn install(dir: &str, files: &[(&str, &str)], after: &str) {
    let mut script = format!("set -e; mkdir -p {dir}; cd {dir}\n");
    for (name, text) in files {
        assert!(!text.contains("\nTFC_EOF\n"));
        let text = text.strip_suffix('\n').unwrap_or(text);
        script.push_str(&format!("cat > {name} <<'TFC_EOF'\n{text}\nTFC_EOF\n"));
    }
    script.push_str(after);
    let out = exec(&["bash", "-c", &script]);
    assert!(
        out.status.success(),
        "installing into {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// CA certificates the host added to its trust store (a TLS-inspecting
/// proxy's), for pip in the testbed, as the node image's build does.
pub fn extra_ca() -> String {
    let mut pem = String::new();
    let mut dirs = vec![PathBuf::from("/usr/local/share/ca-certificates")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "crt") {
                pem.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
                pem.push('\n');
            }
        }
    }
    pem
}

/// A venv at `venv` on the shared /home, made by `python` (a shell word:
/// `python3`, the image's, or another of its Pythons) with
/// `--system-site-packages` (for the image's torch), with `requirement` from
/// PyPI, as alice; then `check` (Python) must run. Kept when `check` already
/// runs.
pub fn pip_venv(venv: &str, python: &str, requirement: &str, check: &str) {
    install(
        venv,
        &[("extra-ca.pem", &extra_ca())],
        "cat /etc/ssl/certs/ca-certificates.crt extra-ca.pem > pip-ca.pem\n",
    );
    let setup = format!(
        "set -e; [ -x {venv}/bin/python ] || {python} -m venv --system-site-packages {venv}\n\
         {venv}/bin/python -c '{check}' 2>/dev/null && exit 0\n\
         {venv}/bin/pip install -q --disable-pip-version-check --cert {venv}/pip-ca.pem '{requirement}'\n\
         {venv}/bin/python -c '{check}'"
    );
    let out = exec_for(600, &["bash", "-c", &setup]);
    assert!(
        out.status.success(),
        "installing {requirement}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
