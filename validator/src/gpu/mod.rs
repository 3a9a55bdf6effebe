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
//! - `device`: the [`device::Device`] trait, what the gate needs from a GPU;
//!   `cuda` implements it with cudarc, `cpu` on the host for tests (a Rust
//!   closure plays the cubin).
//! - `gate`: the orchestration, [`gate::run_gate`]: rotation, poisoning,
//!   guards, ABBA, every call checked on the host.
//! - `stats`: median, p10/p90, noise floor, speedup, bandwidth and flags.
//! - `load`: a spec directory read as a variant and its input sets (`.npy`).
//! - `tensor`: element types, poison and the error metrics.

pub mod cpu;
pub mod cuda;
pub mod device;
pub mod gate;
pub mod load;
pub mod spec;
pub mod stats;
pub mod tensor;

#[cfg(test)]
mod planted;
