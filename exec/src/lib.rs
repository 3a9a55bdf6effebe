//! Child processes for kidiom: every program kidiom starts goes through
//! this crate.
//!
//! # Brief overview
//!
//! - [`run_with_deadline`] spawns a program in its own process group and
//!   kills the group at the deadline; its pipes are read under the same
//!   deadline, and a process outside the group still holding them after
//!   the program ended is killed too. The [`ProcessOutcome`] keeps the
//!   exit code, stdout and the tail of stderr. [`run`] makes an end other
//!   than exit 0 a [`CommandError`], which carries that tail.
//! - [`find_python`] is the one way kidiom picks its Python, and
//!   [`find_harness`] the directory holding the harness (`kernels/harness`)
//!   whose commands it runs; [`gpu_present`] asks that harness whether it
//!   would run on a GPU here.
//! - [`Executor`] says where harness calls and mining shards run: here, or
//!   on a Ray cluster through one [`Fleet`] driver (`python -m
//!   kernels.harness fleet`, docs/RAY.md), which takes harness calls
//!   ([`HarnessTask`]) and commands ([`CommandJob`]).
//! - [`scratch`] says where kidiom and its children keep scratch files: a
//!   private directory on a RAM-backed tmpfs unless `TMPDIR` is set.
//!
//! This crate depends on no other kidiom crate: mining and validation both
//! stand on it.
//!
//! ```
//! use std::path::Path;
//! use std::time::Duration;
//!
//! let sh = Path::new("/bin/sh");
//! let args = ["-c".to_string(), "echo hi; echo oops >&2; exit 3".to_string()];
//! let out = kidiom_exec::run_with_deadline(sh, &args, Path::new("/"), &[], Duration::from_secs(10))?;
//! assert_eq!((out.code, out.stdout.as_str(), out.stderr_tail.as_str()), (Some(3), "hi\n", "oops\n"));
//!
//! // only exit 0 is a success for `run`; the error says what the child said
//! let err = kidiom_exec::run(sh, &args, Path::new("/"), &[], Duration::from_secs(10)).unwrap_err();
//! assert_eq!(err.to_string(), "/bin/sh -c 'echo hi; echo oops >&2; exit 3' exited with 3: oops");
//!
//! // a deadline kills the whole process group
//! let args = ["-c".to_string(), "sleep 30 & sleep 30".to_string()];
//! let slow = kidiom_exec::run_with_deadline(sh, &args, Path::new("/"), &[], Duration::from_millis(200))?;
//! assert!(slow.timed_out && slow.code.is_none());
//! # Ok::<(), kidiom_exec::Error>(())
//! ```
#![deny(missing_docs)]

mod error;
mod executor;
mod fleet;
mod pipes;
mod process;
mod python;
pub mod scratch;

pub use error::{CommandError, Error, Result};
pub use executor::{Executor, ParseExecutorError};
pub use fleet::{
    CommandJob, CommandReply, Files, Fleet, HarnessTask, Hello, Placement, TaskRun, testing as fleet_testing,
};
pub use process::{
    PIPE_GRACE, ProcessOutcome, STDERR_TAIL, command_line, quote, run, run_cancellable, run_with_deadline, tail,
};
pub use python::{find_harness, find_python, gpu_present, holds_harness, remember_start_dir};
