//! What a node makes of a step, decided once from srun's word and the
//! step's options: nothing, srun's refusal, a step without a framework
//! option that its record or requeue makes the plugin's, or a framework
//! step to lay out. slurmstepd's `user_init`, a task that saw no
//! `user_init` and a node that could not register the options all ask this
//! one function, and only it decodes srun's word for them.

use super::error::{Error, Result};
use super::handoff::{Applied, Options, Said, Word};
use super::settings::Settings;

/// What the node makes of its step ([`StepKind::of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepKind {
    /// Nothing is set and nothing more is read: the step asks for no
    /// framework and srun said nothing of it, srun left out every framework
    /// it asked for, or srun left the step alone.
    Nothing,
    /// srun refused the step and said why: every task fails, none says it
    /// again.
    Refused,
    /// A step without a framework option that `--tf-record` or
    /// `--tf-requeue-on` made the plugin's: these settings say what to
    /// record and requeue; no task gets a variable.
    Plain {
        settings: Box<Settings>,
        /// The job's restart count, as srun learnt it.
        restart: u32,
    },
    /// A framework step to lay out, with what srun said of it.
    Framework(Box<Said>),
    /// A step without a framework option whose srun was `given`
    /// `--tf-<key>` options and that has only srun's early word: an `srun
    /// --async` step, whose srun decided nothing (slurmstepd checks them as
    /// srun would), or a heterogeneous step's component srun refused.
    Alone {
        given: Vec<String>,
        /// The job's restart count, as srun learnt it.
        restart: u32,
    },
}

/// What the node knows of the step's options.
pub enum Asked<'a> {
    /// The node could not register the options: a step srun handed a word
    /// asked for the plugin, and fails rather than run without it.
    Unknown,
    /// Whether a framework option is set, and how to read the settings
    /// (told whether srun's word says an inherited `--tf-off` was beaten).
    Known {
        framework: bool,
        settings: Box<dyn FnOnce(bool) -> Result<Option<Settings>> + 'a>,
    },
}

/// The refusal of a step srun handed a word on a node that could not
/// register the options.
pub const NOT_REGISTERED: &str = "slurmstepd could not register the plugin's options (see slurmd's log), so this step's --tf-cluster cannot be read: failing rather than running without TF_CONFIG";

impl StepKind {
    /// The step whose srun's word is `word` (its variable's value, None when
    /// unset), run as `job_step` (Slurm's items), whose options are `asked`.
    pub fn of(word: Option<&str>, job_step: Option<(u32, u32)>, asked: Asked) -> Result<StepKind> {
        let (framework, settings) = match asked {
            Asked::Unknown => {
                return match Word::decode(word, job_step) {
                    Ok(Word::Nothing) => Ok(StepKind::Nothing),
                    _ => Err(Error::new(NOT_REGISTERED)),
                };
            }
            Asked::Known {
                framework,
                settings,
            } => (framework, settings),
        };
        // Without a framework option only srun's refusal (a `--tf-<key>`
        // that cannot act alone) and its plain verdict count; a word that
        // cannot be read leaves the step as without the plugin.
        if !framework {
            return Ok(match Word::decode(word, job_step) {
                Ok(word) if word.refused() => StepKind::Refused,
                Ok(word) => match (word.plain(), word.alone()) {
                    (Some((plain, restart)), _) => StepKind::Plain {
                        settings: Box::new(plain.settings()),
                        restart,
                    },
                    (None, Some((given, restart))) => StepKind::Alone {
                        given: given.to_vec(),
                        restart,
                    },
                    (None, None) => StepKind::Nothing,
                },
                Err(_) => StepKind::Nothing,
            });
        }
        Ok(
            match Word::decode(word, job_step)?.applied(Options::Read(settings))? {
                Applied::NotAsked | Applied::LeftAlone => StepKind::Nothing,
                Applied::Refused => StepKind::Refused,
                Applied::Step(said) => StepKind::Framework(said),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handoff::{Early, Handoff, Plain, Verdict};

    const IDS: Option<(u32, u32)> = Some((7, 0));

    fn known(framework: bool, settings: Option<Settings>) -> Asked<'static> {
        Asked::Known {
            framework,
            settings: Box::new(move |_| Ok(settings)),
        }
    }

    fn word(change: impl FnOnce(&mut Handoff)) -> String {
        let mut handoff = Handoff::new(7, 0, Verdict::Rebuild);
        change(&mut handoff);
        handoff.encode()
    }

    #[test]
    fn without_a_framework_only_sruns_refusal_and_plain_verdict_count() {
        let refused = word(Handoff::refuse);
        let plain = Plain {
            record: None,
            record_log: false,
            requeue_on: Some(43),
            requeue_max: 3,
            exclude_max: 1,
        };
        let plain_word = word(|h| h.plain(plain.clone()));
        assert_eq!(
            StepKind::of(Some(&refused), IDS, known(false, None)).unwrap(),
            StepKind::Refused
        );
        match StepKind::of(Some(&plain_word), IDS, known(false, None)).unwrap() {
            StepKind::Plain { settings, restart } => {
                assert_eq!((settings.requeue_on, restart), (Some(43), 0));
            }
            other => panic!("{other:?}"),
        }
        // srun's refusal of another step (an outer srun's word) is none of
        // this step's.
        let mut outer = Handoff::new(8, 0, Verdict::Rebuild);
        outer.refuse();
        let outer = outer.encode();
        for text in [None, Some("garbage"), Some(outer.as_str())] {
            assert_eq!(
                StepKind::of(text, IDS, known(false, None)).unwrap(),
                StepKind::Nothing,
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_framework_step_is_laid_out_unless_srun_refused_it() {
        let settings = Settings::default();
        let refused = word(Handoff::refuse);
        assert_eq!(
            StepKind::of(Some(&refused), IDS, known(true, Some(settings.clone()))).unwrap(),
            StepKind::Refused
        );
        let kind = StepKind::of(None, IDS, known(true, Some(settings))).unwrap();
        assert!(matches!(kind, StepKind::Framework(_)), "{kind:?}");
        assert_eq!(
            StepKind::of(None, IDS, known(true, None)).unwrap(),
            StepKind::Nothing
        );
        // A malformed word, spelt by hand: no encoder makes one.
        let bad = StepKind::of(
            Some("1;7.0;junk"),
            IDS,
            known(true, Some(Settings::default())),
        );
        assert!(bad.is_err(), "{bad:?}");
    }

    /// srun's early word refusing the step (a heterogeneous step's host
    /// template srun could not resolve) reaches the components its word on
    /// the step does not: each refuses, whatever its options ask.
    #[test]
    fn an_early_refusal_refuses_every_component() {
        let mut early = Early::new(Default::default(), false, 0, None, None);
        early.refuse();
        let text = early.encode();
        assert!(text.ends_with(";refused"), "{text}");
        for asked in [known(true, Some(Settings::default())), known(false, None)] {
            assert_eq!(
                StepKind::of(Some(&text), IDS, asked).unwrap(),
                StepKind::Refused
            );
        }
        let plain = Early::new(Default::default(), false, 0, None, None).encode();
        let kind = StepKind::of(Some(&plain), IDS, known(true, Some(Settings::default())));
        assert!(matches!(kind, Ok(StepKind::Framework(_))), "{kind:?}");
    }

    /// srun's early word alone naming the `--tf-<key>` options given to srun
    /// on a step without a framework option (an `srun --async` step): the
    /// node decides as srun would. Beside a framework option they ride in
    /// what srun said of the step.
    #[test]
    fn settings_given_alone_in_the_early_word_are_the_nodes_to_judge() {
        let mut early = Early::new(Default::default(), false, 3, None, None);
        early.given(vec!["tf-port-base".into()]);
        let text = early.encode();
        assert_eq!(
            StepKind::of(Some(&text), IDS, known(false, None)).unwrap(),
            StepKind::Alone {
                given: vec!["tf-port-base".into()],
                restart: 3
            }
        );
        match StepKind::of(Some(&text), IDS, known(true, Some(Settings::default()))).unwrap() {
            StepKind::Framework(said) => {
                assert!(said.early_only);
                assert_eq!(said.given, ["tf-port-base"]);
            }
            other => panic!("{other:?}"),
        }
    }

    /// Options that could not be registered: a step srun said anything of
    /// fails, any other is left alone.
    #[test]
    fn unknown_options_fail_only_a_step_srun_handed_a_word() {
        assert_eq!(
            StepKind::of(None, IDS, Asked::Unknown).unwrap(),
            StepKind::Nothing
        );
        let refused = word(Handoff::refuse);
        let early = Early::default().encode();
        // The malformed word is spelt by hand: no encoder makes one.
        for text in [refused.as_str(), early.as_str(), "1;7.0;junk"] {
            let err = StepKind::of(Some(text), IDS, Asked::Unknown).unwrap_err();
            assert_eq!(err.message(), NOT_REGISTERED, "{text}");
        }
    }
}
