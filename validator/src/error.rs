//! The validator's errors. Failures of a *candidate* (a gate that fails, a
//! kernel that hangs) are not errors: they are verdicts. These are failures
//! to run the validation at all.

use std::path::PathBuf;

/// Why a validation could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read or written.
    #[error("{path}: {cause}", path = .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause (in the message, so not also a `source()`).
        cause: std::io::Error,
    },
    /// A kernel manifest is not valid TOML or lacks a key.
    #[error("manifest {path}: {message}")]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A unified diff could not be parsed.
    #[error("bad diff: {0}")]
    Diff(String),
    /// A diff does not apply to the file it names.
    #[error("diff does not apply to {path}: {message}")]
    Patch {
        /// The target, relative to the root.
        path: String,
        /// Where it failed.
        message: String,
    },
    /// A subprocess could not be started.
    #[error("cannot run {command}: {cause}")]
    Spawn {
        /// The command line.
        command: String,
        /// The cause (in the message, so not also a `source()`).
        cause: std::io::Error,
    },
    /// A per-site search could not run (its harness call failed, or there
    /// is nothing to search).
    #[error("site search: {0}")]
    Search(String),
    /// No manifest names this kernel.
    #[error("no kernel named {name} (known: {known})")]
    UnknownKernel {
        /// The name asked for.
        name: String,
        /// The names there are, comma-separated.
        known: String,
    },
    /// The Ray executor's driver could not start, reach its cluster, or
    /// talk (a task that fails on the cluster is a verdict, not this).
    #[error("ray executor: {0}")]
    Fleet(String),
    /// A rewrite of a search variant failed.
    #[error(transparent)]
    Rewrite(#[from] kidiom_rewriter::Error),
    /// Reading the kernel tree failed.
    #[error(transparent)]
    Syntax(#[from] kidiom_syntax::Error),
    /// A bug of the validator's own (a harness thread panicked): neither the
    /// candidate's fault nor the input's.
    #[error("internal error: {0}")]
    Internal(String),
}

/// The validator's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The exec crate's errors read as the validator's own, with the same
/// messages they had when the validator spawned its children itself.
impl From<kidiom_exec::Error> for Error {
    fn from(e: kidiom_exec::Error) -> Error {
        match e {
            kidiom_exec::Error::Spawn { command, cause } => Error::Spawn { command, cause },
            kidiom_exec::Error::Io { path, cause } => Error::Io { path, cause },
            kidiom_exec::Error::Fleet(m) => Error::Fleet(m),
            other => Error::Fleet(other.to_string()),
        }
    }
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io { path: path.into(), cause: source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_send_sync_and_lowercase() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Error>();
        let e = Error::Patch { path: "k.py".into(), message: "hunk 1 does not match".into() };
        assert_eq!(e.to_string(), "diff does not apply to k.py: hunk 1 does not match");
    }
}
