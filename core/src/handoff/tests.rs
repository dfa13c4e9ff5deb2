use super::*;
use crate::addresses::Network;
use crate::hostlist::HostList;
use crate::secret::Secret;
use crate::settings::{Frameworks, Settings};
use crate::task_map::TaskMap;

fn hosts(list: &str) -> HostList {
    HostList::parse(list, 1000).unwrap()
}

fn mapped(node_of: &[u32], nodes: &str) -> Handoff {
    let map = TaskMap::new(7, 3, hosts(nodes), node_of.to_vec()).unwrap();
    Handoff::new(
        7,
        3,
        Verdict::Map {
            map,
            hosts: nodes.to_string(),
        },
    )
}

fn round_trip(handoff: &Handoff) -> String {
    let text = handoff.encode();
    let back = Handoff::decode(&text, handoff.job, handoff.step).unwrap();
    assert_eq!(back.as_ref(), Some(handoff), "{text}");
    text
}

/// The layouts measured on Slurm (block, cyclic, 26.05's topology order,
/// plane, descending nodes) and thousands of tasks stay small.
#[test]
fn layouts_encode_to_runs() {
    for (node_of, nodes, want) in [
        (
            vec![0, 1, 1, 1, 2],
            "node[1-3]",
            "1;7.3;hosts=node[1-3];runs=0,1*3,2",
        ),
        (
            vec![0, 1, 2, 1, 1],
            "node[1-3]",
            "1;7.3;hosts=node[1-3];runs=0-2,1*2",
        ),
        (
            vec![0, 0, 0, 2, 1],
            "node[1-3]",
            "1;7.3;hosts=node[1-3];runs=0*3,2-1",
        ),
        (
            (0..12).map(|r| (r / 2) % 3).collect(),
            "n[1-3]",
            "1;7.3;hosts=n[1-3];runs=0-2*2x2",
        ),
        (vec![2, 1, 0], "n[1-3]", "1;7.3;hosts=n[1-3];runs=2-0"),
        (
            (0..4096).map(|r| r / 8).collect(),
            "n[0-511]",
            "1;7.3;hosts=n[0-511];runs=0-511*8",
        ),
        (
            (0..4096).map(|r| r % 512).collect(),
            "n[0-511]",
            "1;7.3;hosts=n[0-511];runs=0-511x8",
        ),
    ] {
        assert_eq!(round_trip(&mapped(&node_of, nodes)), want);
    }
}

/// Every field round-trips, for its own step only.
#[test]
fn every_field_round_trips_for_its_own_step() {
    let mut full = mapped(&[0, 1], "n[1-2]");
    full.fields.network = Some(Network::parse("10.98.0.0/29").unwrap());
    full.fields.kept = vec!["NCCL_SOCKET_IFNAME".into(), "TP_SOCKET_IFNAME".into()];
    full.fields.left_out = Frameworks(0b101);
    full.fields.no_resv_ports = true;
    full.fields.tres_bind = Some(StepBind::Bound("gres/gpu:per_task:1".into()));
    full.fields.off_overridden = true;
    full.fields.restart_count = 2;
    full.fields.secret = Some(Secret::from_bytes([0xab; crate::secret::LEN]));
    let ab = "ab".repeat(crate::secret::LEN);
    assert_eq!(
        round_trip(&full),
        format!(
            "1;7.3;hosts=n[1-2];runs=0-1;net=10.98.0.0/29;kept=NCCL_SOCKET_IFNAME,TP_SOCKET_IFNAME;leave-out=5;no-resv-ports;tres-bind=gres/gpu:per_task:1;off-overridden;restart=2;secret={ab}"
        )
    );
    for v in [Verdict::Rebuild, Verdict::Skip, Verdict::Refused] {
        let mut h = Handoff::new(7, 3, v);
        h.fields.tres_bind = Some(StepBind::None);
        round_trip(&h);
    }
    let text = full.encode();
    assert_eq!(Handoff::decode(&text, 7, 4).unwrap(), None);
    assert_eq!(Handoff::decode(&text, 8, 3).unwrap(), None);
    // srun empties the variable of a step that did not ask.
    assert_eq!(Handoff::decode("", 7, 3).unwrap(), None);
}

/// The early word round-trips, names no step, and is told apart from
/// a word on a step.
#[test]
fn the_early_word_round_trips_and_names_no_step() {
    let full = Early::new(
        Frameworks(0b011),
        true,
        5,
        Some(Network::parse("10.98.0.0/29").unwrap()),
        Some(Secret::from_bytes([0x0f; crate::secret::LEN])),
    );
    let text = full.encode();
    let hex = "0f".repeat(crate::secret::LEN);
    assert_eq!(
        text,
        format!("1;srun;inherited=3;off-overridden;restart=5;net=10.98.0.0/29;secret={hex}")
    );
    assert_eq!(
        Word::decode(Some(&text), None).unwrap(),
        Word::Early(full.clone())
    );
    assert_eq!(Early::decode(&text).unwrap(), Some(full));
    assert_eq!(Early::decode("1;srun").unwrap(), Some(Early::default()));
    assert_eq!(Early::default().encode(), "1;srun");
    assert_eq!(Handoff::decode(&text, 7, 3).unwrap(), None);
    for other in ["", "1;7.3;verdict=none", "1;srunx", "2;srun"] {
        assert_eq!(Early::decode(other).unwrap(), None, "{other}");
    }
    for (text, why) in [
        ("1;srun;inherited=16", "no framework"),
        ("1;srun;inherited", "without its value"),
        ("1;srun;off-overridden=1", "a flag with a value"),
        ("1;srun;restart=x", "restart"),
        ("1;srun;restart", "restart"),
        ("1;srun;restart=1;off-overridden", "misplaced"),
        ("1;srun;net=10.98.0.0/33", "net: "),
        ("1;srun;net", "net: "),
        ("1;srun;net=ib0;restart=1", "misplaced"),
        ("1;srun;verdict=none", "misplaced"),
        ("1;srun;secret=abc", "80 hex digits"),
        ("1;srun;secret", "without its value"),
        ("1;srun;given=tf-port-bass", "no setting's"),
        ("1;srun;given=port-base", "no setting's"),
        ("1;srun;given=tf-cluster", "no setting's"),
        ("1;srun;given", "without its value"),
        ("1;srun;given=tf-record;refused", "misplaced"),
    ] {
        let e = Early::decode(text).unwrap_err().to_string();
        assert!(e.contains(why), "{text}: {e}");
    }
}

/// The `--tf-<key>` options given to srun itself ride in its early word,
/// last, for an `srun --async` step's tasks; only there does a reader see
/// them alone (a step without a framework option).
#[test]
fn the_early_word_names_the_settings_given_to_srun() {
    let mut early = Early::new(Frameworks::default(), false, 2, None, None);
    early.refuse();
    early.given(vec!["tf-port-base".into(), "tf-record".into()]);
    let text = early.encode();
    assert_eq!(
        text,
        "1;srun;restart=2;refused;given=tf-port-base,tf-record"
    );
    let word = Word::decode(Some(&text), None).unwrap();
    assert_eq!(word, Word::Early(early));
    let given = ["tf-port-base".to_string(), "tf-record".to_string()];
    assert_eq!(word.alone(), Some((&given[..], 2)));
    assert_eq!(Word::Early(Early::default()).alone(), None);
    let step = Handoff::new(7, 3, Verdict::Rebuild).encode();
    assert_eq!(
        Word::decode(Some(&step), Some((7, 3))).unwrap().alone(),
        None
    );
}

/// A step without a framework option: srun's word carries what its
/// tasks apply (the record's directory whatever it holds, the requeue)
/// and round-trips; a reader takes it as this step's word alone, and
/// it refuses a value its setting would.
#[test]
fn a_plain_word_round_trips_with_the_record_and_the_requeue() {
    let plain = Plain {
        record: Some("/home/me/runs;x=1 é".into()),
        record_log: true,
        requeue_on: Some(43),
        requeue_max: 2,
        exclude_max: 0,
    };
    let mut h = Handoff::undecided(7, 3, false, 1, None);
    h.plain(plain.clone());
    let text = round_trip(&h);
    assert_eq!(
        text,
        "1;7.3;verdict=plain;record=2f686f6d652f6d652f72756e733b783d3120c3a9;record-log;requeue-on=43;requeue-max=2;exclude-max=0;restart=1"
    );
    let word = Word::decode(Some(&text), Some((7, 3))).unwrap();
    assert_eq!(word.plain(), Some((&plain, 1)));
    assert!(!word.refused());
    assert_eq!(
        Word::decode(Some(&text), Some((7, 4))).unwrap().plain(),
        None
    );
    // The settings it stands for: no framework, these values.
    let settings = plain.settings();
    assert!(settings.frameworks.is_empty());
    assert_eq!(settings.record.as_deref(), Some("/home/me/runs;x=1 é"));
    assert!(settings.record_log);
    assert_eq!((settings.requeue_on, settings.requeue_max), (Some(43), 2));
    assert_eq!(Plain::of(&settings), plain);
    // The least: the requeue's cap alone, at its default.
    let bare = Plain::of(&Settings::default());
    let mut h = Handoff::new(7, 3, Verdict::Rebuild);
    h.plain(bare);
    assert_eq!(
        round_trip(&h),
        "1;7.3;verdict=plain;requeue-max=3;exclude-max=1"
    );
    // A step whose options ask for a framework is no plain step.
    let asked = Options::Read(Box::new(|_| Ok(Some(Settings::default()))));
    assert!(word.applied(asked).is_err());
    for (text, why) in [
        ("1;7.3;verdict=plain", "no requeue-max"),
        (
            "1;7.3;verdict=plain;record=2f61;requeue-max=3;record-log",
            "misplaced",
        ),
        (
            "1;7.3;verdict=plain;record=7265;requeue-max=3",
            "not an absolute directory",
        ),
        ("1;7.3;verdict=plain;record=2f6;requeue-max=3", "not hex"),
        ("1;7.3;verdict=plain;record=2fzz;requeue-max=3", "not hex"),
        ("1;7.3;verdict=plain;record=2fff;requeue-max=3", "not hex"),
        (
            "1;7.3;verdict=plain;record;requeue-max=3",
            "without its value",
        ),
        (
            "1;7.3;verdict=plain;record-log=1;requeue-max=3",
            "a flag with a value",
        ),
        (
            "1;7.3;verdict=plain;requeue-on=1;requeue-max=3",
            "an exit code must be 3-125",
        ),
        (
            "1;7.3;verdict=plain;requeue-on;requeue-max=3",
            "an exit code must be 3-125",
        ),
        (
            "1;7.3;verdict=plain;requeue-max=1001",
            "a count of requeues",
        ),
    ] {
        let e = Handoff::decode(text, 7, 3)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains(why), "{text}: {e}");
    }
}

#[test]
fn bad_values_are_refused() {
    for (text, why) in [
        ("1", "not 1;JOB.STEP"),
        ("2;7.3;verdict=none", "unknown version"),
        ("1;7;verdict=none", "no JOB.STEP"),
        ("1;7.x;verdict=none", "not two numbers"),
        ("1;7.3", "neither"),
        ("1;7.3;verdict=maybe", "unknown verdict"),
        ("1;7.3;hosts=n1", "neither"),
        ("1;7.3;hosts=n1;runs=0;verdict=none", "neither"),
        ("1;7.3;verdict=none;", "unknown or misplaced field \"\""),
        ("1;7.3;no-resv-ports;verdict=none", "neither"),
        ("1;7.3;verdict=none;restart=1;no-resv-ports", "misplaced"),
        ("1;7.3;verdict=none;ports", "misplaced"),
        ("1;7.3;verdict=none;secret=zz", "80 hex digits"),
        ("1;7.3;hosts=n[1-2];runs=0", "node n2 runs no task"),
        ("1;7.3;hosts=n1,n1;runs=0-1", "names node n1 twice"),
        ("1;7.3;hosts=n1;runs=1", "node index 1"),
        ("1;7.3;hosts=n1;runs=0x0", "a count of 0"),
        ("1;7.3;hosts=n1;runs=0*4294967295x4294967295", "more than"),
        (
            "1;7.3;hosts=n1;runs=garbage",
            "bad SLURM_TF_CLUSTER runs \"garbage\"",
        ),
        ("1;7.3;verdict=none;net=", "net"),
        ("1;7.3;verdict=none;kept=PATH", "not an interface variable"),
        ("1;7.3;verdict=none;kept=", "not an interface variable"),
        ("1;7.3;verdict=none;leave-out=tf-cluster", "no framework"),
        ("1;7.3;verdict=none;leave-out=16", "no framework"),
        ("1;7.3;verdict=none;leave-out=", "no framework"),
        ("1;7.3;verdict=none;tres-bind=", "GPU binding"),
        ("1;7.3;verdict=none;tres-bind=x;no-tres-bind", "GPU binding"),
        ("1;7.3;verdict=none;restart=", "restart"),
        ("1;7.3;verdict=none;restart=-1", "restart"),
        ("1;7.3;verdict=none;restart=+1", "restart"),
        ("1;7.3;verdict=none;no-resv-ports=1", "a flag with a value"),
        ("1;7.3;verdict=none;net", "without its value"),
    ] {
        let e = Handoff::decode(text, 7, 3)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains(why), "{text}: {e}");
    }
    let long = format!("1;7.3;hosts=n1;runs={}", "0,".repeat(MAX_LEN));
    let e = Handoff::decode(&long, 7, 3).unwrap_err().to_string();
    assert!(e.contains("longer than"), "{e}");
}

/// The fields both words carry are read by one parser: the same value
/// reads the same in either, and a bad one is refused with the same why.
#[test]
fn both_words_read_their_shared_fields_alike() {
    let secret = "0f".repeat(crate::secret::LEN);
    let fields = format!("off-overridden;restart=4;secret={secret}");
    let early = Early::decode(&format!("1;srun;{fields}")).unwrap().unwrap();
    let step = Handoff::decode(&format!("1;7.3;verdict=none;{fields}"), 7, 3)
        .unwrap()
        .unwrap();
    assert_eq!(early.fields.off_overridden, step.fields.off_overridden);
    assert_eq!(early.fields.restart_count, step.fields.restart_count);
    assert_eq!(early.fields.secret, step.fields.secret);
    for bad in [
        "restart",
        "restart=x",
        "net",
        "net=10.0.0.0/33",
        "secret=ab",
        "off-overridden=1",
    ] {
        let e = Early::decode(&format!("1;srun;{bad}"))
            .unwrap_err()
            .to_string();
        let s = Handoff::decode(&format!("1;7.3;verdict=none;{bad}"), 7, 3)
            .unwrap_err()
            .to_string();
        let why = |e: &str| e.rsplit(": ").next().unwrap().to_string();
        assert_eq!(why(&e), why(&s), "{bad}: {e} / {s}");
    }
}
