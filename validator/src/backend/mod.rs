//! Where gates run: the Python harness as a subprocess ([`python`]), the
//! static metrics of its ahead-of-time compiles ([`cpu`]), and the cudarc
//! device backend behind the `cuda` feature ([`cuda`]).

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod python;
