//! What a step asks for: the frameworks whose variables it wants (one option
//! each, declared in crate::frameworks) and its settings ([`values`]), and
//! the one table that declares each setting ([`table`]). This file only
//! names them.

mod setting;
mod table;
mod values;

pub use setting::{Alone, ROLE_FRAMEWORKS, Setting, Unset};
pub use table::SETTINGS;
pub use values::{
    Bind, DEFAULT_EXCLUDE_MAX, DEFAULT_PORT_BASE, DEFAULT_REQUEUE_MAX, Frameworks, Imex,
    MAX_EXCLUDE_MAX, MAX_REQUEUE_MAX, Settings,
};
