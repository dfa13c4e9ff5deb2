use std::collections::HashMap;

use super::checks::version_text;
use super::*;
use crate::elf::PluginInfo;
use crate::site::slurm_conf::parse_show_config;
use crate::site::system::{parse_srun_version, parse_version_header};

const ID: &str = "0.1.0 slurm 24.11.5 src 0123456789abcdef";
const SO: &str = "/usr/lib/x86_64-linux-gnu/slurm-wlm/tf_cluster.so";

struct Fake {
    files: HashMap<String, String>,
    plugins: HashMap<String, PluginFile>,
    slurm: Option<u32>,
    /// How often each file was read.
    reads: HashMap<String, usize>,
    /// Directories: owner uid and mode.
    dirs: HashMap<String, (u32, u32)>,
    /// Paths that are links (to the directory `dirs` has for them).
    links: std::collections::HashSet<String>,
}

impl Fake {
    /// A healthy Debian node: slurm.conf with MpiParams, Debian's
    /// plugstack.conf including plugstack.conf.d, the packaged snippet.
    fn healthy() -> Fake {
        let mut f = Fake {
            files: HashMap::new(),
            plugins: HashMap::new(),
            slurm: Some(0x180b05),
            reads: HashMap::new(),
            dirs: HashMap::new(),
            links: Default::default(),
        };
        f.file(
            "/etc/slurm/slurm.conf",
            "ClusterName=c\nMpiParams=ports=12000-12999\nPlugStackConfig=/etc/slurm/plugstack.conf\nNodeName=n[1-3] CPUs=4\n",
        );
        f.file(
            "/etc/slurm/plugstack.conf",
            "include /etc/slurm/plugstack.conf.d/*.conf\n",
        );
        f.file(
            "/etc/slurm/plugstack.conf.d/tf-cluster.conf",
            &format!("# comment\nrequired {SO} port-base=9000\n"),
        );
        f.so(SO, 0x180b02, Some(ID));
        f
    }

    fn file(&mut self, path: &str, text: &str) {
        self.files.insert(path.into(), text.into());
    }

    fn so(&mut self, path: &str, version: u32, id: Option<&str>) {
        self.plugins.insert(
            path.into(),
            PluginFile {
                world_readable: true,
                info: Ok(PluginInfo {
                    name: Some(PLUGIN_NAME.into()),
                    version: Some(version),
                    build_id: id.map(str::to_string),
                }),
            },
        );
    }

    fn run(&mut self) -> Report {
        diagnose(self, ID)
    }
}

impl Host for Fake {
    fn env(&mut self, _: &str) -> Option<String> {
        None
    }
    fn read(&mut self, path: &str) -> std::io::Result<String> {
        *self.reads.entry(path.to_string()).or_default() += 1;
        self.files
            .get(path)
            .cloned()
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
    }
    fn glob(&mut self, pattern: &str) -> Vec<String> {
        // Enough for `DIR/*.conf` and plain paths.
        let (dir, tail) = pattern.rsplit_once('/').unwrap();
        let mut out: Vec<String> = self
            .files
            .keys()
            .filter(|p| match tail.strip_prefix('*') {
                Some(suffix) => {
                    p.rsplit_once('/').is_some_and(|(d, _)| d == dir) && p.ends_with(suffix)
                }
                None => *p == pattern,
            })
            .cloned()
            .collect();
        out.sort();
        out
    }
    fn plugin(&mut self, path: &str) -> Option<PluginFile> {
        self.plugins.get(path).cloned()
    }
    fn slurm_version(&mut self, _: bool) -> (Option<(u32, String)>, Option<String>) {
        (self.slurm.map(|v| (v, "srun --version".into())), None)
    }
    fn show_config(&mut self) -> Result<String, String> {
        Err("`scontrol show config` failed".into())
    }
    fn directory(&mut self, path: &str) -> std::io::Result<(u32, u32)> {
        self.dirs
            .get(path)
            .copied()
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
    }
    fn directory_here(&mut self, path: &str) -> std::io::Result<(u32, u32)> {
        if self.links.contains(path) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "is a link",
            ));
        }
        self.directory(path)
    }
}

fn fails(r: &Report) -> Vec<&str> {
    r.findings
        .iter()
        .filter(|f| f.level == Level::Fail)
        .map(|f| f.text.as_str())
        .collect()
}

fn warns(r: &Report) -> Vec<&str> {
    r.findings
        .iter()
        .filter(|f| f.level == Level::Warn)
        .map(|f| f.text.as_str())
        .collect()
}

#[test]
fn a_healthy_node_is_healthy() {
    let r = Fake::healthy().run();
    assert_eq!(r.worst(), Level::Ok, "{}", r.render());
    assert_eq!(r.exit_code(), 0);
    let text = r.render();
    assert!(
        text.contains("/etc/slurm/plugstack.conf.d/tf-cluster.conf:2: required"),
        "{text}"
    );
    assert!(
        text.contains("built for Slurm 24.11.2, this node runs 24.11.5"),
        "{text}"
    );
    assert!(text.contains("site arguments: port-base=9000"), "{text}");
    assert!(text.contains("MpiParams=ports=12000-12999"), "{text}");
    assert!(text.ends_with("healthy\n"), "{text}");
}

#[test]
fn another_major_minor_breaks_srun() {
    let mut f = Fake::healthy();
    f.slurm = Some(0x160508);
    let r = f.run();
    assert_eq!(r.exit_code(), 1);
    let fails = fails(&r);
    assert_eq!(fails.len(), 1, "{fails:?}");
    assert!(
        fails[0].contains("built for Slurm 24.11.2, this node runs 22.05.8"),
        "{fails:?}"
    );
    assert!(fails[0].contains("Slurm 22.05"), "{fails:?}");
}

#[test]
fn a_missing_so_breaks_srun() {
    let mut f = Fake::healthy();
    f.plugins.clear();
    let r = f.run();
    assert_eq!(r.exit_code(), 1);
    assert_eq!(fails(&r).len(), 1);
    assert!(fails(&r)[0].contains(&format!("required {SO} does not exist: every srun fails")));
}

#[test]
fn optional_is_a_warning() {
    let mut f = Fake::healthy();
    f.file(
        "/etc/slurm/plugstack.conf.d/tf-cluster.conf",
        &format!("optional {SO}\n"),
    );
    let r = f.run();
    assert_eq!(r.exit_code(), 2, "{}", r.render());
    assert!(warns(&r)[0].contains("optional: Slurm ignores the plugin's errors"));
}

#[test]
fn a_bad_site_argument_is_named() {
    let mut f = Fake::healthy();
    f.file(
        "/etc/slurm/plugstack.conf.d/tf-cluster.conf",
        &format!("required {SO} port-base=0 \n"),
    );
    let r = f.run();
    assert_eq!(r.exit_code(), 1);
    assert!(fails(&r)[0].contains("port-base=0"), "{:?}", fails(&r));
    f.file(
        "/etc/slurm/plugstack.conf.d/tf-cluster.conf",
        &format!("required {SO} colour=blue\n"),
    );
    let r = f.run();
    assert!(
        fails(&r)[0].contains("unknown key \"colour\""),
        "{:?}",
        fails(&r)
    );
}

#[test]
fn loaded_twice_or_not_at_all_fails() {
    let mut f = Fake::healthy();
    f.file(
        "/etc/slurm/plugstack.conf",
        &format!("include plugstack.conf.d/*.conf\nrequired {SO}\n"),
    );
    let r = f.run();
    assert_eq!(fails(&r).len(), 1, "{}", r.render());
    assert!(fails(&r)[0].contains("loaded 2 times"));
    f.files
        .remove("/etc/slurm/plugstack.conf.d/tf-cluster.conf");
    f.file(
        "/etc/slurm/plugstack.conf",
        "include /etc/slurm/plugstack.conf.d/*.conf\n",
    );
    let r = f.run();
    assert!(fails(&r)[0].starts_with("no line of /etc/slurm/plugstack.conf"));
}

#[test]
fn relative_plugin_paths_use_plugin_dir_and_slurm_conf_names_plugstack() {
    let mut f = Fake::healthy();
    f.files.clear();
    f.file(
        "/etc/slurm/slurm.conf",
        "PluginDir=/opt/a:/opt/slurm/lib\nPlugStackConfig=/opt/slurm/stack.conf\n",
    );
    f.file(
        "/opt/slurm/stack.conf",
        "required tf_cluster.so # comment\n",
    );
    f.plugins.clear();
    f.so("/opt/slurm/lib/tf_cluster.so", 0x180b00, Some(ID));
    let r = f.run();
    assert_eq!(fails(&r), Vec::<&str>::new());
    assert!(
        r.render()
            .contains("/opt/slurm/stack.conf:1: required /opt/slurm/lib/tf_cluster.so")
    );
    // No MpiParams=ports and no site port base: each step its own ports.
    assert_eq!(r.exit_code(), 0, "{}", r.render());
}

/// Without MpiParams=ports Slurm reserves no ports: doctor says so and
/// what the plugin does instead (each step its block of the port range,
/// the chance of a clash); a site port base, which every step would then
/// share, is a warning.
#[test]
fn without_mpiparams_ports_come_from_the_range() {
    let mut f = Fake::healthy();
    f.file(
        "/etc/slurm/slurm.conf",
        "ClusterName=c\nPlugStackConfig=/etc/slurm/plugstack.conf\n",
    );
    f.file(
        "/etc/slurm/plugstack.conf.d/tf-cluster.conf",
        &format!("required {SO}\n"),
    );
    let r = f.run();
    assert_eq!(r.exit_code(), 0, "{}", r.render());
    let text = r.render();
    assert!(
        text.contains(
            "ok   no MpiParams=ports=… in /etc/slurm/slurm.conf: Slurm reserves no ports (and refuses srun --resv-ports); each step takes its own ports from the range 20000-29499, placed by its job and step ids: two steps on one node share a port with a chance of about 1 in 2375 (never when their job ids are less than 148 apart)"
        ),
        "{text}"
    );
    f.file(
        "/etc/slurm/plugstack.conf.d/tf-cluster.conf",
        &format!("required {SO} port-range=40000-40999\n"),
    );
    let text = f.run().render();
    assert!(text.contains("range 40000-40999"), "{text}");
    assert!(
        text.contains("1 in 250 (never when their job ids are less than 15 apart)"),
        "{text}"
    );
    f.file(
        "/etc/slurm/plugstack.conf.d/tf-cluster.conf",
        &format!("required {SO} port-base=9000\n"),
    );
    let r = f.run();
    assert_eq!(r.exit_code(), 2);
    assert!(
        warns(&r)[0].starts_with("no MpiParams=ports=… in /etc/slurm/slurm.conf, and the site argument port-base=9000: concurrent steps on one node take the same ports"),
        "{}",
        r.render()
    );
}

#[test]
fn another_build_and_no_build_id_are_warnings() {
    let mut f = Fake::healthy();
    f.so(SO, 0x180b05, Some("0.0.9 slurm 24.11.5 src ffff"));
    let r = f.run();
    assert_eq!(r.exit_code(), 2);
    assert!(warns(&r)[0].contains("the plugin is build \"0.0.9"));
    f.so(SO, 0x180b05, None);
    assert!(warns(&f.run())[0].contains("carries no build id"));
}

#[test]
fn broken_plugstack_lines_and_missing_files() {
    let mut f = Fake::healthy();
    f.file(
        "/etc/slurm/plugstack.conf",
        "include /etc/slurm/plugstack.conf.d/*.conf\nrequire /x.so\nrequired /other.so\n",
    );
    let r = f.run();
    let fails = fails(&r);
    assert_eq!(fails.len(), 2, "{fails:?}");
    assert!(fails[0].contains(":2: \"require /x.so\""));
    assert!(fails[1].contains("required /other.so does not exist"));
    let mut f = Fake::healthy();
    f.files.remove("/etc/slurm/plugstack.conf");
    assert!(
        super::tests::fails(&f.run())[0].starts_with("plugstack.conf /etc/slurm/plugstack.conf:")
    );
}

#[test]
fn versions_from_srun_and_the_header() {
    assert_eq!(parse_srun_version("slurm 24.11.5\n"), Some(0x180b05));
    assert_eq!(parse_srun_version("slurm-wlm 22.05.8\n"), Some(0x160508));
    assert_eq!(parse_srun_version("slurm 25.05.0-0rc1\n"), Some(0x190500));
    assert_eq!(parse_srun_version("srun: error: x"), None);
    assert_eq!(
        parse_version_header("#define SLURM_VERSION_NUMBER 0x1a0505\n"),
        Some(0x1a0505)
    );
    assert_eq!(version_text(0x160508), "22.05.8");
}

#[test]
fn show_config_pairs() {
    let c = parse_show_config(
        "MpiParams               = ports=12000-12999\nPlugStackConfig         = /etc/slurm/plugstack.conf\n",
    );
    assert_eq!(c["mpiparams"], "ports=12000-12999");
    assert_eq!(c["plugstackconfig"], "/etc/slurm/plugstack.conf");
}

/// n plugstack files each including `DIR/*.conf` (themselves and each
/// other): read again on every path through the tree, they would cost n^8
/// reads (n=5: 14.6 s and 339 MB). Each file is read once, the loop told in
/// one line.
#[test]
fn an_include_fan_out_reads_each_file_once() {
    let mut f = Fake::healthy();
    let n = 6;
    for k in 0..n {
        f.file(
            &format!("/etc/slurm/plugstack.conf.d/fan{k}.conf"),
            "include /etc/slurm/plugstack.conf.d/*.conf\n",
        );
    }
    let start = std::time::Instant::now();
    let r = f.run();
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    for (path, reads) in &f.reads {
        assert_eq!(*reads, 1, "{path} read {reads} times");
    }
    // plugstack.conf, the snippet and the n fan files (and slurm.conf).
    let plugstack = f.reads.keys().filter(|p| p.contains("plugstack")).count();
    assert_eq!(plugstack, n + 2, "{:?}", f.reads);
    let loops: Vec<&str> = fails(&r)
        .into_iter()
        .filter(|l| l.contains("includes itself"))
        .collect();
    assert_eq!(loops.len(), 1, "{}", r.render());
    // The plugin's own line is still found, once.
    let text = r.render();
    assert_eq!(
        text.matches("tf-cluster.conf:2: required").count(),
        1,
        "{text}"
    );
}

/// More files than the cap: one line naming it, and no more read.
#[test]
fn a_plugstack_tree_of_too_many_files_is_cut_with_one_line() {
    let mut f = Fake::healthy();
    for k in 0..300 {
        f.file(
            &format!("/etc/slurm/plugstack.conf.d/many{k:03}.conf"),
            "# nothing\n",
        );
    }
    let r = f.run();
    let plugstack = f.reads.keys().filter(|p| p.contains("plugstack")).count();
    assert!(plugstack <= 256, "{plugstack} plugstack files read");
    let capped: Vec<&str> = fails(&r)
        .into_iter()
        .filter(|l| l.contains("at most 256 files"))
        .collect();
    assert_eq!(capped.len(), 1, "{}", r.render());
}

/// The files and plugstack lines (`/PATH` or `/PATH:LINE`) a finding names.
fn named_paths(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| w.trim_matches(|c: char| "():,;\"".contains(c)))
        .filter(|w| w.starts_with('/'))
        .map(str::to_string)
        .collect()
}

/// No file or plugstack line is both "ok" and "FAIL" in one report: the
/// broken plugstack.conf, plugin line or .so is said once, as a failure,
/// and that failure still names it.
#[test]
fn never_ok_and_fail_for_the_same_thing() {
    let stack = "/etc/slurm/plugstack.conf";
    let line = "/etc/slurm/plugstack.conf.d/tf-cluster.conf:2";
    let mut cases: Vec<(&str, Fake, &str)> = Vec::new();
    let mut f = Fake::healthy();
    f.files.remove(stack);
    cases.push(("plugstack.conf missing", f, stack));
    let mut f = Fake::healthy();
    f.files
        .remove("/etc/slurm/plugstack.conf.d/tf-cluster.conf");
    cases.push(("no line loads the plugin", f, stack));
    let mut f = Fake::healthy();
    f.plugins.get_mut(SO).unwrap().world_readable = false;
    cases.push(("the .so unreadable by users", f, SO));
    let mut f = Fake::healthy();
    f.plugins.get_mut(SO).unwrap().info = Err("not an ELF file".into());
    cases.push(("the .so no plugin", f, SO));
    let mut f = Fake::healthy();
    if let Ok(info) = &mut f.plugins.get_mut(SO).unwrap().info {
        info.version = None;
    }
    cases.push(("no plugin_version", f, SO));
    let mut f = Fake::healthy();
    f.slurm = Some(0x160508);
    cases.push(("another Slurm release", f, SO));
    let mut f = Fake::healthy();
    f.file(
        "/etc/slurm/plugstack.conf.d/tf-cluster.conf",
        &format!("# comment\nrequired {SO} port-base=0\n"),
    );
    cases.push(("a bad site argument", f, line));
    let mut f = Fake::healthy();
    f.file(
        stack,
        &format!("include plugstack.conf.d/*.conf\nrequired {SO}\n"),
    );
    cases.push(("loaded twice", f, line));
    for (case, mut f, named) in cases {
        let r = f.run();
        let text = r.render();
        assert_eq!(r.exit_code(), 1, "{case}:\n{text}");
        let failed: Vec<String> = fails(&r).iter().flat_map(|t| named_paths(t)).collect();
        assert!(
            failed.iter().any(|p| p == named),
            "{case}: no FAIL names {named}:\n{text}"
        );
        for ok in r.findings.iter().filter(|f| f.level == Level::Ok) {
            for path in named_paths(&ok.text) {
                assert!(
                    !failed.contains(&path),
                    "{case}: {path} is both ok and FAIL:\n{text}"
                );
            }
        }
    }
}

/// The site's record directory: 1777 or root's 0755 (on a path of root's
/// with no link, where the plugin makes the users' directories) are sound;
/// others' write without the sticky bit fails (no step writes there);
/// missing, a user's, or a link or a user's directory on the way warns.
#[test]
fn the_record_directory_matches_the_per_user_layout() {
    let conf = "/etc/slurm/plugstack.conf.d/tf-cluster.conf";
    let with_record = |dir: Option<(u32, u32)>| {
        let mut f = Fake::healthy();
        f.file(conf, &format!("required {SO} record=/scratch/records\n"));
        if let Some(d) = dir {
            f.dirs.insert("/scratch/records".into(), d);
        }
        f.run()
    };
    let r = with_record(Some((0, 0o1777)));
    assert_eq!(r.worst(), Level::Ok, "{}", r.render());
    assert!(
        r.render().contains("record=/scratch/records: mode 1777, each user's runs in /scratch/records/<uid> (0700), made on their first step"),
        "{}",
        r.render()
    );
    // Root's 0755 on a path of root's: the plugin makes each user's
    // directory; a link or a user's directory on the way: it does not.
    let roots_way = |f: &mut Fake| {
        for d in ["/", "/scratch"] {
            f.dirs.insert(d.into(), (0, 0o755));
        }
    };
    let conf_with = |f: &mut Fake| {
        f.file(conf, &format!("required {SO} record=/scratch/records\n"));
        f.dirs.insert("/scratch/records".into(), (0, 0o755));
    };
    let mut f = Fake::healthy();
    conf_with(&mut f);
    roots_way(&mut f);
    let r = f.run();
    assert_eq!(r.worst(), Level::Ok, "{}", r.render());
    assert!(
        r.render().contains("record=/scratch/records: mode 0755, each user's runs in /scratch/records/<uid> (0700), made by the plugin as root on their first step"),
        "{}",
        r.render()
    );
    let mut f = Fake::healthy();
    conf_with(&mut f);
    roots_way(&mut f);
    f.links.insert("/scratch".into());
    let r = f.run();
    let w = warns(&r);
    assert!(
        w.iter().any(|w| w.contains("/scratch is a link")
            && w.contains("a user without /scratch/records/<uid> gets no record")),
        "{w:?}"
    );
    let mut f = Fake::healthy();
    conf_with(&mut f);
    roots_way(&mut f);
    f.dirs.insert("/scratch".into(), (1000, 0o755));
    let w = warns(&f.run())
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    assert!(
        w.iter()
            .any(|w| w.contains("/scratch is uid 1000's (mode 0755)")),
        "{w:?}"
    );
    for mode in [0o777, 0o775, 0o2770] {
        let r = with_record(Some((0, mode)));
        let f = fails(&r);
        assert_eq!(f.len(), 1, "{mode:o}: {}", r.render());
        assert!(f[0].contains("without the sticky bit"), "{}", f[0]);
    }
    let r = with_record(None);
    assert!(fails(&r).is_empty(), "{}", r.render());
    let w = warns(&r);
    assert!(
        w.iter()
            .any(|w| w.starts_with("record=/scratch/records does not exist")),
        "{w:?}"
    );
    let r = with_record(Some((1000, 0o1777)));
    let w = warns(&r);
    assert!(
        w.iter()
            .any(|w| w.contains("is uid 1000's (mode 1777), not root's")),
        "{w:?}"
    );
}

/// The plugstack.conf line docs/admin.md recommends ("Enable:
/// plugstack.conf"), as the node's snippet: the doctor finds nothing to
/// warn of, with and without MpiParams=ports.
#[test]
fn admins_recommended_line_is_healthy() {
    let page = include_str!("../../../docs/admin.md");
    let (_, section) = page
        .split_once("## Enable: plugstack.conf")
        .expect("docs/admin.md: no \"## Enable: plugstack.conf\"");
    let line = section
        .lines()
        .find(|l| l.starts_with("required ") || l.starts_with("optional "))
        .expect("docs/admin.md: no plugstack line under \"Enable: plugstack.conf\"");
    for slurm_conf in [
        "ClusterName=c\nMpiParams=ports=12000-12999\nPlugStackConfig=/etc/slurm/plugstack.conf\n",
        "ClusterName=c\nPlugStackConfig=/etc/slurm/plugstack.conf\n",
    ] {
        let mut f = Fake::healthy();
        f.file("/etc/slurm/slurm.conf", slurm_conf);
        f.file(
            "/etc/slurm/plugstack.conf.d/tf-cluster.conf",
            &format!("{line}\n"),
        );
        let r = f.run();
        assert_eq!(
            r.worst(),
            Level::Ok,
            "docs/admin.md's line {line:?} with slurm.conf {slurm_conf:?}:\n{}",
            r.render()
        );
    }
}
