//! bindgen's view of the installed `slurm/spank.h` (see build.rs).
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code
)]
include!(concat!(env!("OUT_DIR"), "/spank_bindings.rs"));
