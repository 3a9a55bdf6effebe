//! The GPU gate that the candidate cannot touch (SPEC §8, "The GPU gate is
//! owned by Rust"; design notes in `shared/gpu-gate.md`): the candidate
//! contributes device code only, a cubin and a launch spec per shape made
//! without a GPU; kidiom checks the spec against the cubin's ELF, then
//! launches and times it itself on a stream it owns, baseline and candidate
//! interleaved, every call's buffers checked on the host against expected
//! values that never reach the device.
//!
//! - `spec`: the launch spec (`launch.json`), what a cubin assumes about its
//!   arguments, and the input sets and expected outputs beside it.
//! - `elf`: what a cubin's ELF says about its kernel (entry, parameter
//!   layout, required block, undefined symbols, device globals).
//! - `check`: the spec checked against the cubin ([`check::check`], every
//!   refusal a one-line reason) and the arguments packed at the cubin's
//!   offsets ([`check::pack`]).
//! - `sha256`: the cubin hash a spec names.

pub mod check;
pub mod elf;
pub mod sha256;
pub mod spec;
