//! The testbed with the job step manager (docker/testbed.sh TFC_STEPMGR=1:
//! `SlurmctldParameters=enable_stepmgr`, `PrologFlags=Contain`), where Slurm
//! 26.05's `srun --async` hands a step to the job's step manager and returns
//! after "Submitted step J.S". That srun runs `init_post_opt` but never
//! `local_user_init`, so the tasks get srun's early word only, never its
//! task map: slurmstepd asks slurmctld for the step's layout instead. Each
//! test is one batch job of several steps, each step's tasks writing their
//! whole environment to files of their own; an async step's script waits
//! until slurmctld no longer lists it, then reads sacct's state of the step
//! (real accounting). Forky only: `--async` is 26.05's.

mod common;

use std::collections::BTreeMap;

use common::outputs::{Outputs, TaskOutput};
use common::{exclusive_with_stepmgr, exec, messages, testbed_with_stepmgr};

/// The job script's helpers: `plain TAG ARGS…` runs `srun ARGS` and
/// `async TAG ARGS…` runs `srun --async ARGS` (then waits for the step's
/// end and its state in sacct), each task printing `TAG TAG` then its
/// environment, sorted; the job's log gets `TAG.step=J.S`, `TAG.state=…`
/// (async) or `TAG.code=N` (plain).
fn helpers(outputs: &Outputs) -> String {
    let [out, err] = outputs.srun_args();
    format!(
        r#"dump='echo "TAG $0"; env | LC_ALL=C sort'
plain() {{
  tag=$1; shift
  srun {out} {err} "$@" bash -c "$dump" "$tag"
  echo "$tag.code=$?"
}}
async() {{
  tag=$1; shift
  submitted=$(srun --async {out} {err} "$@" bash -c "$dump" "$tag" 2>&1)
  echo "$tag.srun=$? $submitted"
  step=$(printf '%s\n' "$submitted" | sed -n 's/.*Submitted step \([0-9]*\.[0-9]*\).*/\1/p')
  echo "$tag.step=$step"
  [ -n "$step" ] || return
  for _ in $(seq 600); do scontrol show step "$step" >/dev/null 2>&1 || break; sleep 0.1; done
  for _ in $(seq 100); do
    state=$(sacct -n -P -j "$step" -o JobID,State 2>/dev/null | sed -n "s/^$step|//p" | head -n1)
    case "$state" in ''|RUNNING|PENDING) sleep 0.2 ;; *) break ;; esac
  done
  echo "$tag.state=$state"
}}
"#
    )
}

/// What a batch job of plain and async steps left: each task's output by
/// step, and the job's log.
struct Job {
    outputs: Outputs,
    log: String,
}

/// Runs `body` (lines calling `plain` and `async`) in a 3-node, 6-task batch
/// job submitted with `sbatch SBATCH_ARGS`.
fn job(tag: &str, sbatch_args: &[&str], body: &str) -> Job {
    let mut args = vec!["-N3", "-n6"];
    args.extend_from_slice(sbatch_args);
    job_shaped(tag, &args, body)
}

/// [`job`] in a job of the shape `sbatch SHAPE` gives (a heterogeneous one:
/// its components joined by `:`).
fn job_shaped(tag: &str, shape: &[&str], body: &str) -> Job {
    let outputs = Outputs::new(tag);
    let file = format!("{}/job.sh", outputs.path());
    let text = format!("#!/bin/bash\n{}{body}\n", helpers(&outputs));
    let wrote = exec(&[
        "bash",
        "-c",
        &format!("cat > {file} <<'TFC_EOF'\n{text}TFC_EOF\nchmod 755 {file}"),
    ]);
    assert!(wrote.status.success(), "{wrote:?}");
    let mut args = shape.to_vec();
    args.push(&file);
    let (code, said) = outputs.sbatch(240, &[], &args);
    let log = exec(&["cat", &format!("{}/job.log", outputs.path())]);
    let log = format!("{said}{}", String::from_utf8_lossy(&log.stdout));
    assert_eq!(code, Some(0), "{log}");
    Job { outputs, log }
}

/// One step of the job: its tasks' outputs by Slurm's task id, its id
/// `J.S`.
struct Ran {
    id: String,
    tasks: BTreeMap<u32, TaskOutput>,
}

impl Job {
    /// The job's log line `TAG.KEY=VALUE`'s value.
    fn field(&self, tag: &str, key: &str) -> String {
        let prefix = format!("{tag}.{key}=");
        self.log
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {prefix} in the job's log\n{}", self.all()))
            .to_string()
    }

    /// The log and every task's file, for a failure's message.
    fn all(&self) -> String {
        format!("{}\n{}", self.log, self.outputs.dump())
    }

    /// The step of `tag`: a plain one's found by the tag its tasks print,
    /// an async one's by the id its srun printed.
    fn step(&self, tag: &str) -> Ran {
        let by_id = self.log.contains(&format!("{tag}.step="));
        let wanted = by_id.then(|| self.field(tag, "step"));
        let mut steps: BTreeMap<String, BTreeMap<u32, TaskOutput>> = BTreeMap::new();
        for ((job, step, task), output) in self.outputs.steps() {
            let id = format!("{job}.{step}");
            let mine = match &wanted {
                Some(w) => *w == id,
                None => output.stdout.lines().next() == Some(&format!("TAG {tag}")),
            };
            if mine {
                steps.entry(id).or_default().insert(task, output);
            }
        }
        assert_eq!(steps.len(), 1, "step {tag}\n{}", self.all());
        let (id, tasks) = steps.into_iter().next().unwrap();
        Ran { id, tasks }
    }

    /// The async step `tag` ended as sacct says `state` (its first word).
    fn assert_state(&self, tag: &str, state: &str) {
        let got = self.field(tag, "state");
        assert!(got.starts_with(state), "{tag}: sacct {got}\n{}", self.all());
    }

    /// Every one of the async step `tag`'s 6 tasks refused before the
    /// command, each in a line of the plugin naming `wanted`, none with a
    /// word of a heterogeneous step; sacct does not show it as a success.
    fn assert_refused(&self, tag: &str, wanted: &str) {
        let ran = self.step(tag);
        assert_eq!(ran.tasks.len(), 6, "{tag}\n{}", self.all());
        for (task, output) in &ran.tasks {
            assert!(!output.stdout.contains("TAG "), "{tag}: task {task} ran");
            let said = messages(&output.stderr);
            assert!(
                said.iter().any(|m| m.contains(wanted)),
                "{tag}: task {task}: no line naming {wanted:?}\n{}",
                self.all()
            );
            assert!(
                said.iter().all(|m| !m.contains("heterogeneous")),
                "{tag}: task {task}: a heterogeneous step's message\n{}",
                self.all()
            );
        }
        self.assert_state(tag, "FAILED");
    }

    /// The async step `tag_async` gave each task, rank by rank, the
    /// variables the plain step `tag_plain` gave it (Slurm's own `SLURM*`
    /// aside), among them `wanted`; both ran every task.
    fn assert_same(&self, tag_plain: &str, tag_async: &str, tasks: usize, wanted: &str) {
        assert_eq!(self.field(tag_plain, "code"), "0", "{}", self.all());
        self.assert_state(tag_async, "COMPLETED");
        let (plain, ran) = (self.step(tag_plain), self.step(tag_async));
        assert_eq!(plain.tasks.len(), tasks, "{tag_plain}\n{}", self.all());
        assert_eq!(ran.tasks.len(), tasks, "{tag_async}\n{}", self.all());
        for (task, output) in &plain.tasks {
            let expected = environment(&output.stdout, &plain.id);
            let got = environment(&ran.tasks[task].stdout, &ran.id);
            for name in [wanted, "TF_CLUSTER_RUN_ID"] {
                assert!(expected.contains_key(name), "{tag_plain}: no {name}");
            }
            let names: Vec<&String> = expected.keys().chain(got.keys()).collect();
            for name in names {
                assert_eq!(
                    expected.get(name),
                    got.get(name),
                    "{tag_async} task {task} {name} (plain {}, async {})\n{}",
                    plain.id,
                    ran.id,
                    self.all()
                );
            }
        }
    }

    /// `tf-cluster postmortem` of the async step `tag`'s record in `dir`:
    /// how many ranks it shows ending with exit code 0.
    fn ended_well(&self, tag: &str, dir: &str) -> usize {
        let step = self.field(tag, "step");
        let pm = exec(&[
            "timeout",
            "20",
            "tf-cluster",
            "postmortem",
            &step,
            "--tf-record",
            dir,
        ]);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&pm.stdout),
            String::from_utf8_lossy(&pm.stderr)
        );
        eprintln!("postmortem {step}: {:?}\n{text}", pm.status.code());
        text.lines()
            .filter(|l| {
                l.split_whitespace()
                    .next()
                    .is_some_and(|w| w.parse::<u32>().is_ok())
            })
            .filter(|l| l.contains("exit 0"))
            .count()
    }
}

/// A task's environment as it printed it, Slurm's own variables (`SLURM*`,
/// which name the step, and `_SLURM_SPANK_OPTION_*`, which Slurm sets for
/// a plain step's options only) left out, and what names one step written alike
/// for every step: its id `J.S`, its secret (Ray's token and private
/// directory), and the ports Slurm reserved for it (`MpiParams=ports`),
/// each written by its place in SLURM_STEP_RESV_PORTS.
fn environment(stdout: &str, step: &str) -> BTreeMap<String, String> {
    let vars: Vec<(&str, &str)> = stdout
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once('='))
        .collect();
    let resv = vars
        .iter()
        .find(|(name, _)| *name == "SLURM_STEP_RESV_PORTS")
        .map(|(_, v)| reserved(v))
        .unwrap_or_default();
    vars.into_iter()
        .filter(|(name, _)| !name.starts_with("SLURM") && !name.starts_with("_SLURM"))
        .map(|(name, value)| {
            let value = match name {
                "RAY_AUTH_TOKEN" if !value.is_empty() => "TOKEN".to_string(),
                _ => ports(&private_dir(&step_id(value, step)), &resv),
            };
            (name.to_string(), value)
        })
        .collect()
}

/// The ports of SLURM_STEP_RESV_PORTS (`12011-12015`, `12001,12003-12004`),
/// in order.
fn reserved(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in text.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let (lo, hi) = (lo.parse::<u32>().unwrap(), hi.parse::<u32>().unwrap());
        out.extend(lo..=hi);
    }
    out
}

/// `value` with each whole number that is a reserved port written `R` and
/// its place among them.
fn ports(value: &str, resv: &[u32]) -> String {
    let mut out = String::new();
    let mut digits = String::new();
    let flush = |digits: &mut String, out: &mut String| {
        match digits
            .parse::<u32>()
            .ok()
            .and_then(|p| resv.iter().position(|r| *r == p))
        {
            Some(i) => out.push_str(&format!("R{i}")),
            None => out.push_str(digits),
        }
        digits.clear();
    };
    for c in value.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            flush(&mut digits, &mut out);
            out.push(c);
        }
    }
    flush(&mut digits, &mut out);
    out
}

/// `value` with each whole `J.S` of the step `step` (no digit or dot next
/// to it: not part of an address) written `J.S`.
fn step_id(value: &str, step: &str) -> String {
    let joined = |c: Option<char>| c.is_some_and(|c| c.is_ascii_digit() || c == '.');
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find(step) {
        let before = rest[..at].chars().last().or(out.chars().last());
        let after = rest[at + step.len()..].chars().next();
        out.push_str(&rest[..at]);
        out.push_str(if joined(before) || joined(after) {
            step
        } else {
            "J.S"
        });
        rest = &rest[at + step.len()..];
    }
    out.push_str(rest);
    out
}

/// `value` with the hex of each `/tmp/tfc-ray-HEX` (from the step's
/// secret) written `ID`.
fn private_dir(value: &str) -> String {
    const DIR: &str = "/tmp/tfc-ray-";
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find(DIR) {
        out.push_str(&rest[..at + DIR.len()]);
        rest = &rest[at + DIR.len()..];
        let hex = rest.chars().take_while(char::is_ascii_hexdigit).count();
        out.push_str("ID");
        rest = &rest[hex..];
    }
    out.push_str(rest);
    out
}

/// Each framework option given to srun, and roles over a cyclic layout
/// (which no rebuild in blocks reproduces): the async step's tasks get,
/// rank by rank, the variables the same step gets without `--async`. The
/// async `--torch-cluster` step's `--tf-record` writes its record. Ports
/// from `--tf-port-base`, the same in both steps (a step's own block is
/// placed by its step id; Slurm's reserved ports, where it reserves them,
/// compared by their place in each step's own; Ray and roles, which need
/// more ports than the step manager reserves here, `--resv-ports=0`).
#[test]
fn async_steps_get_what_plain_steps_get() {
    let _t = testbed_with_stepmgr();
    let dir = format!("/home/alice/tfc-record-async-{}", std::process::id());
    let cases = [
        ("tf", "--tf-cluster", "TF_CONFIG"),
        ("torch", "--torch-cluster", "RANK"),
        ("jax", "--jax-cluster", "JAX_COORDINATOR_ADDRESS"),
        (
            "ray",
            "-n3 --ntasks-per-node=1 --resv-ports=0 --ray-cluster",
            "RAY_ADDRESS",
        ),
        (
            "roles",
            "-m cyclic --resv-ports=0 --torch-cluster --tf-roles=trainer:4,rollout:2",
            "MASTER_ADDR",
        ),
    ];
    let mut body = String::new();
    for (tag, args, _) in cases {
        let record = match tag {
            "torch" => format!(" --tf-record={dir}"),
            _ => String::new(),
        };
        for how in ["plain", "async"] {
            body.push_str(&format!(
                "{how} {how}-{tag} --tf-port-base=23000 {args}{record}\n"
            ));
        }
    }
    let job = job("async-same", &[], &body);
    for (tag, args, wanted) in cases {
        let tasks = if args.contains("-n3") { 3 } else { 6 };
        job.assert_same(
            &format!("plain-{tag}"),
            &format!("async-{tag}"),
            tasks,
            wanted,
        );
    }
    let ended_well = job.ended_well("async-torch", &dir);
    exec(&["rm", "-rf", &dir]);
    assert_eq!(ended_well, 6, "{}", job.all());
}

/// A framework option inherited from sbatch, srun --async given none: the
/// same variables as the plain step's.
#[test]
fn an_async_step_inheriting_tf_cluster_from_sbatch_gets_a_plain_steps_variables() {
    let _t = testbed_with_stepmgr();
    let body =
        "plain plain-inherited --tf-port-base=23000\nasync async-inherited --tf-port-base=23000";
    let job = job("async-inherited", &["--tf-cluster"], body);
    job.assert_same("plain-inherited", "async-inherited", 6, "TF_CONFIG");
}

/// What srun would refuse or decide before launch, the async step's tasks
/// do: a setting alone (srun refuses it on a plain step) is refused naming
/// `--async`; `--tf-record` alone records the step, which runs. The
/// control: an async step without the plugin's options runs, COMPLETED, so
/// the refusals are the plugin's and not the testbed's.
#[test]
fn async_steps_refuse_and_record_as_srun_would() {
    let _t = testbed_with_stepmgr();
    let dir = format!("/home/alice/tfc-record-async-alone-{}", std::process::id());
    let body = format!(
        "async alone --tf-port-base=23000\n\
         async record --tf-record={dir}\n\
         async none"
    );
    let job = job("async-refusals", &[], &body);
    job.assert_refused("alone", "--async");
    for tag in ["record", "none"] {
        job.assert_state(tag, "COMPLETED");
        let ran = job.step(tag);
        assert_eq!(ran.tasks.len(), 6, "{tag}\n{}", job.all());
        for (task, output) in &ran.tasks {
            assert!(
                output.stderr.trim().is_empty(),
                "{tag} {task}\n{}",
                job.all()
            );
            let env = environment(&output.stdout, &ran.id);
            assert!(!env.contains_key("TF_CLUSTER_RUN_ID"), "{tag} {task}");
        }
    }
    let ended_well = job.ended_well("record", &dir);
    exec(&["rm", "-rf", &dir]);
    assert_eq!(ended_well, 6, "{}", job.all());
}

/// `--tf-requeue-on` on an async step acts as on a plain one: its task
/// exits with the code, slurmstepd requeues the job (once), and the next
/// incarnation, whose script runs no such step, completes.
#[test]
fn an_async_step_exiting_with_the_code_requeues_its_job() {
    let _t = testbed_with_stepmgr();
    let body = "echo \"incarnation=${SLURM_RESTART_COUNT:-0}\"\n\
        if [ \"${SLURM_RESTART_COUNT:-0}\" = 0 ]; then\n\
          srun --async -N1 -n1 --tf-requeue-on=43 bash -c 'exit 43'\n\
          sleep 120 && echo not-requeued\n\
        fi";
    let job = job("async-requeue", &["--requeue", "--open-mode=append"], body);
    let incarnations: Vec<&str> = job
        .log
        .lines()
        .filter_map(|l| l.strip_prefix("incarnation="))
        .collect();
    assert_eq!(incarnations, ["0", "1"], "{}", job.all());
    assert!(!job.log.contains("not-requeued"), "{}", job.all());
    let id = job
        .log
        .split_whitespace()
        .find_map(|w| w.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no job id: {}", job.all()));
    let shown = exec(&["scontrol", "show", "job", "-o", &id.to_string()]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("Restarts=1 "), "{shown}\n{}", job.all());
    assert!(shown.contains("JobState=COMPLETED"), "{shown}");
}

/// Slurm 26.05 makes no async step in a heterogeneous job: slurmctld
/// refuses `srun --async` there ("Invalid feature specification"), with a
/// framework option or without any of the plugin's (the control: the
/// plugin leaves such a step alone, so the refusal is Slurm's), while the
/// same job's plain het step runs. No het component ever runs as an async
/// step, so none needs the layout an async step's tasks ask for; were a
/// later Slurm to start them, this test fails first.
#[test]
fn slurm_makes_no_async_step_in_a_heterogeneous_job() {
    let _t = testbed_with_stepmgr();
    let body = "async het-torch --het-group=0,1 --torch-cluster\n\
                async het-none --het-group=0,1\n\
                plain het-plain --het-group=0,1 --torch-cluster";
    let job = job_shaped("async-het", &["-N1", "-n2", ":", "-N2", "-n2"], body);
    for tag in ["het-torch", "het-none"] {
        // What srun said: from `TAG.srun=CODE` to `TAG.step=`.
        let said = job
            .log
            .split_once(&format!("{tag}.srun="))
            .and_then(|(_, rest)| rest.split_once(&format!("{tag}.step=")))
            .map_or("", |(said, _)| said);
        assert!(
            said.starts_with("1 ") && said.contains("Invalid feature specification"),
            "{tag}: {said}\n{}",
            job.all()
        );
        assert_eq!(job.field(tag, "step"), "", "{tag}\n{}", job.all());
    }
    assert_eq!(job.field("het-plain", "code"), "0", "{}", job.all());
}

/// A layout slurmstepd could not get (the fault build's `async_layout_rpc`,
/// as if sattach had failed): every task refuses before the command, in one
/// line naming the async case, and sacct shows the step FAILED.
#[test]
fn an_async_step_whose_layout_is_not_had_is_refused_naming_its_case() {
    let bed = exclusive_with_stepmgr();
    bed.plugstack("required /opt/tf-cluster/libtf_cluster_fault.so\n");
    let body = "export TF_CLUSTER_FAULT=async_layout_rpc\nasync no-layout --tf-cluster";
    let job = job("async-no-layout", &[], body);
    job.assert_refused(
        "no-layout",
        "an srun --async step (srun hands it no task map) whose layout",
    );
}
