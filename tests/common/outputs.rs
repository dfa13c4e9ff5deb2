//! Where a step's tasks put what a test judges: a folder of the shared /home
//! of its own, one file per task (srun's `--output=…%t`, Slurm's own rank),
//! and one file per reporting process (`TFC_REPORT_DIR`, written by
//! tests/fixtures/tfc_report.py). No other process writes any of them, so
//! what a test reads never depends on how the tasks' output interleaved in
//! srun's merged stream.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use super::{Labelled, run_dir};

/// The testbed's user (alice, uid 1000), who must be able to write here.
const ALICE: u32 = 1000;

/// One step's (or one job's) output folder; removed when dropped.
pub struct Outputs {
    /// As this host sees it (docker/run…/home/alice/…).
    host: PathBuf,
    /// As the testbed sees it (/home/alice/…).
    path: String,
}

/// What one task wrote, by stream.
#[derive(Default, Clone)]
pub struct TaskOutput {
    pub stdout: String,
    pub stderr: String,
}

impl Outputs {
    /// A new empty folder, `tag` in its name.
    pub fn new(tag: &str) -> Outputs {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let parent = run_dir().join("home/alice/tfc-outputs");
        let host = parent.join(&name);
        let _ = std::fs::remove_dir_all(&host);
        std::fs::create_dir_all(&host).unwrap_or_else(|e| panic!("{}: {e}", host.display()));
        for dir in [&parent, &host] {
            std::os::unix::fs::chown(dir, Some(ALICE), Some(ALICE))
                .unwrap_or_else(|e| panic!("chown {}: {e}", dir.display()));
        }
        Outputs {
            host,
            path: format!("/home/alice/tfc-outputs/{name}"),
        }
    }

    /// The folder as the testbed sees it.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// srun's options that put each task's stdout and stderr in files of
    /// their own, named by Slurm's job, step and task ids.
    pub fn srun_args(&self) -> [String; 2] {
        [
            format!("--output={}/%j.%s.%t.out", self.path),
            format!("--error={}/%j.%s.%t.err", self.path),
        ]
    }

    /// The same for every srun of a job script, as srun reads them from its
    /// environment (`SLURM_STDOUTMODE`, `SLURM_STDERRMODE`), and the folder
    /// for the programs' reports (`TFC_REPORT_DIR`): `NAME=value` words for
    /// `env` or `export`.
    pub fn env(&self) -> [String; 3] {
        let [out, err] = self.srun_args();
        [
            format!("SLURM_STDOUTMODE={}", &out["--output=".len()..]),
            format!("SLURM_STDERRMODE={}", &err["--error=".len()..]),
            format!("TFC_REPORT_DIR={}", self.path),
        ]
    }

    /// `env VARS [the folder's variables] sbatch --wait -o FOLDER/job.log
    /// ARGS`, waiting up to `seconds`: the job's exit code, and sbatch's
    /// stderr with the job's own log (the batch script's and srun's lines)
    /// for a failure's message. Every srun of the job script puts each
    /// task's output here, every program its reports.
    pub fn sbatch(&self, seconds: u32, vars: &[&str], args: &[&str]) -> (Option<i32>, String) {
        let log = format!("{}/job.log", self.path);
        let env = self.env();
        let mut cmd = vec!["env"];
        cmd.extend_from_slice(vars);
        cmd.extend(env.iter().map(String::as_str));
        cmd.extend(["sbatch", "--wait", "-o", log.as_str()]);
        cmd.extend_from_slice(args);
        let submitted = super::exec_for(seconds, &cmd);
        let said = format!(
            "sbatch: {}{}",
            String::from_utf8_lossy(&submitted.stdout),
            String::from_utf8_lossy(&submitted.stderr)
        );
        (submitted.status.code(), said)
    }

    /// The files of the folder: name → contents.
    fn files(&self) -> BTreeMap<String, String> {
        let mut files = BTreeMap::new();
        for entry in
            std::fs::read_dir(&self.host).unwrap_or_else(|e| panic!("{}: {e}", self.host.display()))
        {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
            files.insert(name, String::from_utf8_lossy(&text).into_owned());
        }
        files
    }

    /// Every task's output, by (job id, step id, task id): the step id as
    /// Slurm names it (`0`, `batch`…).
    pub fn steps(&self) -> BTreeMap<(u64, String, u32), TaskOutput> {
        let mut tasks: BTreeMap<(u64, String, u32), TaskOutput> = BTreeMap::new();
        for (name, text) in self.files() {
            let Some((stem, stream)) = name.rsplit_once('.') else {
                continue;
            };
            if stream != "out" && stream != "err" {
                continue;
            }
            let mut ids = stem.split('.');
            let (Some(job), Some(step), Some(task), None) =
                (ids.next(), ids.next(), ids.next(), ids.next())
            else {
                panic!("{name}: not JOB.STEP.TASK.{stream}")
            };
            let key = (
                job.parse().unwrap_or_else(|_| panic!("{name}: job id")),
                step.to_string(),
                task.parse().unwrap_or_else(|_| panic!("{name}: task id")),
            );
            let task = tasks.entry(key).or_default();
            if stream == "out" {
                task.stdout = text;
            } else {
                task.stderr = text;
            }
        }
        tasks
    }

    /// The tasks of the one step that wrote here, by rank. A heterogeneous
    /// step's components write under their own job ids, and there Slurm's
    /// `%t` is not the step's rank (22.05: 0, then 2, 3, 4 for ranks 0-3 of a
    /// 1 + 3 step), so the ranks are the files' order: component by
    /// component, task by task. A rank twice (several steps' files) fails the
    /// test: it must then say which step it judges.
    pub fn tasks(&self) -> BTreeMap<u32, TaskOutput> {
        let steps = self.steps();
        let jobs: std::collections::BTreeSet<u64> = steps.keys().map(|(j, _, _)| *j).collect();
        let mut tasks = BTreeMap::new();
        for (index, ((job, step, task), output)) in steps.into_iter().enumerate() {
            let rank = if jobs.len() > 1 { index as u32 } else { task };
            assert!(
                tasks.insert(rank, output).is_none(),
                "rank {rank} twice here (job {job} step {step} too): several steps' files"
            );
        }
        tasks
    }

    /// Each step's stdout (its tasks' in rank order), steps in the order of
    /// their job and step ids.
    pub fn steps_stdout(&self) -> Vec<String> {
        let mut steps: Vec<((u64, String), String)> = Vec::new();
        for ((job, step, _), task) in self.steps() {
            match steps.last_mut() {
                Some((id, text)) if *id == (job, step.clone()) => text.push_str(&task.stdout),
                _ => steps.push(((job, step), task.stdout)),
            }
        }
        steps.into_iter().map(|(_, text)| text).collect()
    }

    /// Every task's stderr, of every step here, in the order of their job,
    /// step and task ids.
    pub fn all_stderr(&self) -> String {
        self.steps().into_values().map(|t| t.stderr).collect()
    }

    /// Every task's stdout, rank by rank (each task's lines together).
    pub fn stdout(&self) -> String {
        self.tasks().into_values().map(|t| t.stdout).collect()
    }

    /// Every task's stderr, rank by rank.
    pub fn stderr(&self) -> String {
        self.tasks().into_values().map(|t| t.stderr).collect()
    }

    /// Each task's stdout lines, by rank, as [`Labelled`] holds them.
    pub fn labelled(&self) -> Labelled {
        labelled(self.tasks().into_iter().map(|(r, t)| (r, t.stdout)))
    }

    /// The programs' `KIND` reports (tfc_report.py), each file one JSON
    /// value; in the order of their file names (KIND.RANK.HOST.PID.json).
    pub fn reports(&self, kind: &str) -> Vec<Value> {
        let prefix = format!("{kind}.");
        self.files()
            .into_iter()
            .filter(|(name, _)| name.starts_with(&prefix) && name.ends_with(".json"))
            .map(|(name, text)| {
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}: {text:?}"))
            })
            .collect()
    }

    /// Every file under the folder, its subfolders' too (a launcher's
    /// per-worker logs), by path relative to it; reports still being
    /// written (`.part`) left out.
    pub fn tree(&self) -> BTreeMap<String, String> {
        let mut found = BTreeMap::new();
        let mut dirs = vec![self.host.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in
                std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_none_or(|e| e != "part") {
                    let name = path.strip_prefix(&self.host).unwrap().display().to_string();
                    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
                    found.insert(name, String::from_utf8_lossy(&text).into_owned());
                }
            }
        }
        found
    }

    /// Every file here, for a failure's message.
    pub fn dump(&self) -> String {
        self.tree()
            .into_iter()
            .map(|(name, text)| format!("---- {name}\n{text}"))
            .collect()
    }
}

impl Drop for Outputs {
    fn drop(&mut self) {
        // Kept when the test failed, for a look at every task's own file.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.host);
        }
    }
}

/// [`Labelled`] from each rank's own text: the probe's `TASK` lines apart,
/// every other line by rank. A task's text holds no other task's line; a
/// leading `RANK: ` (srun's `--label`, where it applies to files) is dropped.
pub fn labelled(by_rank: impl IntoIterator<Item = (u32, String)>) -> Labelled {
    let mut labelled = Labelled {
        probe: String::new(),
        lines: BTreeMap::new(),
    };
    for (rank, text) in by_rank {
        let label = format!("{rank}: ");
        for line in text.lines() {
            let line = line.trim_start().strip_prefix(&label).unwrap_or(line);
            if line.starts_with("TASK\t") {
                labelled.probe.push_str(line);
                labelled.probe.push('\n');
            } else {
                labelled
                    .lines
                    .entry(rank)
                    .or_default()
                    .push(line.to_string());
            }
        }
    }
    labelled
}
