//! Validation of kidiom rewrites of GPU kernels: every candidate goes
//! through the syntax, static, correctness and speed gates, and leaves
//! evidence.
//!
//! # Brief overview
//!
//! A [`ValidatorBuilder`] names the root (the directory holding `kernels/`),
//! the device, the time limit and the seeds; [`Validator::validate`] takes a
//! [`CandidateInput`] (a unified diff against a kernel source) and returns
//! [`Evidence`]: one [`GateRecord`] per gate that ran and a [`Verdict`]
//! (`accepted`, `rejected` with its gate and numbers, `needs-gpu`, or
//! `error` with its log).
//!
//! The gates (SPEC section 8), in order; a failed gate stops the later ones:
//! 1. **syntax**: the rewritten file parses with no new error nodes;
//! 2. **static**: the diff touches no contract file and no host code of a
//!    Triton or CUDA source (only its kernels), changes numeric flags only
//!    under a `precision` pattern, and compiles ahead of time for sm_90
//!    (instruction mix, registers, spills, shared memory before/after);
//! 3. **correctness**: the harness's `check` of the candidate against the
//!    float64 reference (Triton's interpreter with TF32-faithful dots on a
//!    CPU), and for precision rewrites the error-versus-length curve against
//!    the baseline's (a check the CPU cannot run is `needs-gpu`, flagged
//!    "correctness not checked on this CPU");
//! 4. **speed**: interleaved A/B in one harness process, on a GPU (host C++:
//!    on any CPU).
//!
//! A state-precision variant (a manifest with `variant_of` and `[storage]`)
//! has its own gate, **precision** (`gates/precision.rs`): the harness's
//! `precision` judges its drift against a simulated reference and float64
//! within the manifest's `[budget]`; within it, the verdict is `needs-gpu`
//! with a speedup predicted from the state bytes per step.
//!
//! The contract is never taken from the candidate: the baseline's
//! `kernels/` tree is copied into a temporary directory and the candidate's
//! source is handed to the harness beside it. Kernel code only ever runs in
//! subprocesses with a time limit; a timeout is an `error`, never a
//! rejection. The harness's JSON is read as typed wire format v1: a missing
//! or malformed field is an `error` that names it.
//!
//! ```
//! use kidiom_validator::{Gate, Verdict, VerdictKind, scan};
//!
//! // the static scan: a precision flag added by a rewrite
//! let changes = scan::flag_changes(&["c = tl.dot(a, b)"], &["c = tl.dot(a, b, input_precision=\"ieee\")"]);
//! assert_eq!(changes[0].describe(), "+input_precision=\"ieee\" x1");
//! let v = Verdict::rejected(Gate::Static, "numeric flags changed by a memory pattern");
//! assert_eq!(v.kind, VerdictKind::Rejected);
//! ```
#![deny(missing_docs)]

pub mod backend;
mod contract;
mod device;
mod devicepath;
mod error;
mod evidence;
mod gates;
pub mod gpu;
mod hostcode;
mod hoststate;
mod input;
mod kernelbody;
mod manifest;
mod patch;
mod precision_wire;
pub mod predict;
pub mod published;
pub mod redundancy;
mod request;
pub mod scan;
pub mod sitesearch;
mod tree;
mod validator;
mod verdict;
mod wire;

pub use backend::cpu::StaticMetrics;
pub use backend::python::{Harness, HarnessRun, HarnessStatus};
pub use contract::{ContractOutcome, ContractReport};
pub use device::Device;
pub use error::{Error, Result};
pub use evidence::{EVIDENCE_FORMAT, Evidence, GateRecord, GateStatus, Predicted};
pub use gates::StaticLimits;
pub use input::{CandidateInput, MANUAL_PATTERN, VARIANT_PATTERN};
pub use manifest::{Curve, Floor, KernelLanguage, Kernels, Manifest, Shape, Shapes, Storage, Tolerance, Variant};
pub use validator::{DEFAULT_SEEDS, ProfileReport, Validator, ValidatorBuilder};
pub use verdict::{Gate, Verdict, VerdictKind};
// where the validator runs (its builder takes one), and what a harness call's record holds
pub use kidiom_exec::{Executor, ParseExecutorError, ProcessOutcome};
pub use kidiom_patterns::record::Placement;
pub use wire::{Counted, LaunchLimits, Profile, ProfileFloor, ProfileLine};
