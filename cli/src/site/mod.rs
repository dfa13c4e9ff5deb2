//! The site's Slurm installation as the CLI reads it: slurm.conf (where it
//! is, the plugstack and plugin directories it names, the ports Slurm
//! reserves for steps), the plugstack.conf lines that load plugins
//! (includes followed) and the .so each names, the installed Slurm's
//! version, all through [`Host`] ([`System`]: the real machine). `doctor`
//! judges it; the preview of `env` and `preview`, and `launcher-env`, use it.

pub mod host;
pub mod plugin;
pub mod plugstack;
pub mod slurm_conf;
pub mod system;

pub use host::{Host, PluginFile};
pub use plugstack::PLUGIN_NAME;
pub use slurm_conf::{Conf, conf_path};
pub use system::System;
