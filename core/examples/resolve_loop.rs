//! Resolves every rank of a step over and over, for valgrind's memcheck
//! (tests/memcheck.sh): `resolve_loop TASKS RESOLUTIONS`.

#[path = "../benches/common/mod.rs"]
mod common;

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u32>().expect("TASKS RESOLUTIONS"));
    let (tasks, resolutions) = (args.next().unwrap_or(4096), args.next().unwrap_or(1_000));
    let spec = common::spec(tasks);
    // One environment per node position is enough variety; ranks cycle.
    let envs: Vec<_> = (0..tasks.min(64))
        .map(|r| common::task_env(tasks, r * (tasks / tasks.min(64))))
        .collect();
    let mut bytes = 0usize;
    for i in 0..resolutions {
        let injection = common::task_path(&spec, &envs[i as usize % envs.len()]);
        bytes += injection.get("TF_CONFIG").unwrap().len();
    }
    println!("{resolutions} resolutions of a {tasks}-task step, {bytes} bytes of TF_CONFIG");
}
