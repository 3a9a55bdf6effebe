//! A launch spec: everything kidiom passes to `cuLaunchKernel` for one
//! kernel at one shape, written by the harness without a GPU (the
//! baseline's by a process that never imported the candidate, the
//! candidate's by its sandboxed worker) as `launch.json` beside the cubin,
//! the rotating input sets and the expected outputs (trusted code only).
//!
//! Layout of a spec directory (one per variant and shape; the harness's
//! `python -m kernels.harness spec --out DIR` writes one per shape under
//! DIR, named by the shape, e.g. `N64-H16-HV32-K128-V128-S64`):
//!
//! ```text
//! launch.json            this file's `LaunchSpec`
//! kernel.cubin           the device code (sm_90), `cubin_sha256` its hash
//! inputs/set<j>/<name>.npy    the tensors of input set j, every `Tensor` parameter
//!                             (an `output`'s is all NaN: its shape, dtype and poison)
//! expected/set<j>/<name>.npy  float64 expected values of every written tensor (trusted side only)
//! expected/set<j>/<name>.written.npy  uint8, 1 where the call writes an `in_out` tensor; the rest
//!                                     must come back bit-identical to its input
//! ```
//!
//! Format 1. Unknown fields are refused: a spec is read as exactly what it
//! says, and anything it cannot say is refused with its reason. Before
//! anything is launched, `super::check::check` holds the spec against the
//! cubin's own ELF (the spec is the candidate's word, the cubin what runs).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The format this module reads and writes.
pub const FORMAT: u32 = 1;

/// One launch of one kernel at one shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchSpec {
    /// [`FORMAT`].
    pub format: u32,
    /// The kernel's entry symbol in the cubin (Triton: the Python function's name).
    pub kernel: String,
    /// The cubin's file name, relative to the spec's directory.
    pub cubin: String,
    /// Its sha256, lower-case hex.
    pub cubin_sha256: String,
    /// The manifest shape this launch is for (`N`, `HV`, `K`, ...).
    pub shape: BTreeMap<String, i64>,
    /// Grid dimensions (x, y, z), in blocks.
    pub grid: [u32; 3],
    /// Block dimensions (x, y, z), in threads (Triton: 32 x num_warps, 1, 1).
    pub block: [u32; 3],
    /// Dynamic shared memory, bytes (Triton's `metadata.shared`).
    pub shared_bytes: u32,
    /// CTAs per cluster (Triton's `num_ctas`): this version launches 1 only.
    pub num_ctas: u32,
    /// A cooperative launch: refused by this version.
    #[serde(default)]
    pub cooperative: bool,
    /// Programmatic dependent launch: refused by this version.
    #[serde(default)]
    pub pdl: bool,
    /// Host-side TMA descriptors the kernel takes: refused when any.
    #[serde(default)]
    pub tensor_descriptors: u32,
    /// Global scratch per program, bytes (Triton's `global_scratch_size`).
    #[serde(default)]
    pub global_scratch_bytes: u64,
    /// Its alignment.
    #[serde(default = "one")]
    pub global_scratch_align: u64,
    /// Profile scratch per program, bytes: refused when above 0.
    #[serde(default)]
    pub profile_scratch_bytes: u64,
    /// The kernel's parameters in the order the cubin takes them (Triton's
    /// two trailing scratch pointers included, as [`Param::Scratch`]).
    pub params: Vec<Param>,
    /// Tools and versions that made the cubin (`triton`, `ptxas`, `nvrtc`).
    #[serde(default)]
    pub tools: BTreeMap<String, String>,
}

fn one() -> u64 {
    1
}

/// How a parameter is passed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Param {
    /// A device pointer to the named tensor of the contract.
    Tensor {
        /// The contract's name for it (`q`, `state`, `o`).
        name: String,
        /// Its element type (`fp32`, `bf16`, `fp16`, `i32`, `i64`, ...).
        dtype: String,
        /// What the kernel does with it.
        role: TensorRole,
        /// The alignment in bytes the cubin assumes of the pointer (16 when
        /// Triton specialised it as divisible by 16; else the element size).
        align: u32,
    },
    /// An integer passed by value.
    Int {
        /// The parameter's name.
        name: String,
        /// Its value at this shape.
        value: i64,
        /// Its width: 32 or 64.
        bits: u32,
        /// The cubin assumes the value is a multiple of 16 (Triton's `D`).
        #[serde(default)]
        divisible_by_16: bool,
    },
    /// A float passed by value (f32 bits).
    Float {
        /// The parameter's name.
        name: String,
        /// Its value at this shape.
        value: f64,
    },
    /// One of Triton's trailing scratch pointers.
    Scratch {
        /// Which one.
        which: ScratchKind,
    },
}

/// What a kernel does with a tensor argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TensorRole {
    /// Read only: it must be unchanged after every call.
    Input,
    /// Read and updated in place (a state pool): checked against its
    /// expected values where the call writes it, bit-identical elsewhere.
    InOut,
    /// Written: poisoned with NaN before every call, every element checked.
    Output,
}

/// Triton's trailing scratch pointers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScratchKind {
    /// Global scratch (`global_scratch_size` per program).
    Global,
    /// Profile scratch (Proton instrumentation).
    Profile,
}
