//! What the step's frameworks ask of the GPUs: the plan and srun's check
//! read it, and the refusals name the options that asked.

/// What the step's frameworks ask of the GPUs, from each one's rule
/// (crate::frameworks::GpuRule), with the option that asked, for messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rules {
    /// A framework's tasks see the whole node and pick their GPU by local
    /// rank (PyTorch's `set_device(LOCAL_RANK)`).
    pub whole: Option<&'static str>,
    /// A framework's tasks are told which GPUs they see are their own
    /// (JAX_LOCAL_DEVICE_IDS).
    pub own_ids: Option<&'static str>,
}

impl Rules {
    /// Every rank takes GPUs of its own (PyTorch's and JAX's common programs).
    pub(super) fn one_each(&self) -> bool {
        self.whole.is_some() || self.own_ids.is_some()
    }

    /// The options that asked for a GPU per rank, e.g. `--torch-cluster`.
    pub(super) fn who(&self) -> String {
        let options: Vec<String> = [self.whole, self.own_ids]
            .into_iter()
            .flatten()
            .map(|o| format!("--{o}"))
            .collect();
        options.join(" ")
    }
}

/// Each framework's rules alone and two together, as the tests name them.
#[cfg(test)]
pub(crate) mod examples {
    use super::Rules;

    pub const TF: Rules = Rules {
        whole: None,
        own_ids: None,
    };
    pub const TORCH: Rules = Rules {
        whole: Some("torch-cluster"),
        own_ids: None,
    };
    pub const JAX: Rules = Rules {
        whole: None,
        own_ids: Some("jax-cluster"),
    };
    pub const TORCH_JAX: Rules = Rules {
        whole: Some("torch-cluster"),
        own_ids: Some("jax-cluster"),
    };
}
