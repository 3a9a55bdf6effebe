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
//! 2. **static**: the diff touches no contract file, changes numeric flags
//!    only under a `precision` pattern, and compiles ahead of time for
//!    sm_90 (instruction mix, registers, spills, shared memory before/after);
//! 3. **correctness**: the harness's `check` of the candidate against the
//!    float64 reference (Triton's interpreter with TF32-faithful dots on a
//!    CPU), and for precision rewrites the error-versus-length curve against
//!    the baseline's;
//! 4. **speed**: on a GPU only, interleaved A/B in one process.
//!
//! The contract is never taken from the candidate: the baseline's
//! `kernels/` tree is copied into a temporary directory and the candidate's
//! source is handed to the harness beside it. Kernel code only ever runs in
//! subprocesses with a time limit.
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
mod error;
mod evidence;
mod gate;
mod manifest;
mod patch;
pub mod scan;
mod verdict;

pub use backend::cpu::StaticMetrics;
pub use backend::python::{Harness, HarnessRun, HarnessStatus, ProcessOutcome, find_python, run_with_deadline};
pub use error::{Error, Result};
pub use evidence::{EVIDENCE_FORMAT, Evidence, GateRecord, GateStatus};
pub use gate::{CandidateInput, Device, Gate, Validator, ValidatorBuilder};
pub use manifest::{Curve, Floor, KernelLanguage, Kernels, Manifest, Shape, Shapes, Tolerance};
pub use verdict::{Verdict, VerdictKind};
