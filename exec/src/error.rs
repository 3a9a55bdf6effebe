//! The exec crate's errors: a child that could not be started, one that
//! did not succeed ([`CommandError`], with the end of its stderr), a file
//! a job ships that could not be read, and a Ray driver that failed.

use std::path::PathBuf;

use crate::process::ProcessOutcome;

/// Why a child process or a fleet job gave no result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The program could not be started.
    #[error("cannot run {command}: {cause}")]
    Spawn {
        /// The command line.
        command: String,
        /// The cause (in the message, so not also a `source()`).
        cause: std::io::Error,
    },
    /// The program ran and did not succeed.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// A file a job ships could not be read.
    #[error("{path}: {cause}", path = .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause (in the message, so not also a `source()`).
        cause: std::io::Error,
    },
    /// The Ray driver could not start, reach its cluster, or talk (a task
    /// that fails on the cluster is a reply that says so, not this).
    #[error("ray executor: {0}")]
    Fleet(String),
}

/// The exec crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, cause: std::io::Error) -> Error {
        Error::Io { path: path.into(), cause }
    }
}

/// A child that ran and did not succeed: how it ended and the end of what
/// it said on stderr (after grep-cli's `CommandError`, which holds the
/// child's stderr for the same reason: the message is the diagnosis).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{command} {how}{said}", said = said(.stderr_tail))]
pub struct CommandError {
    /// The command line (shell-quoted).
    pub command: String,
    /// How it ended: `exited with 3`, `was killed after 1.0 s (time limit)`.
    pub how: String,
    /// The end of its stderr.
    pub stderr_tail: String,
}

/// `: LAST LINES` of stderr, its last three non-empty lines joined, or nothing.
fn said(tail: &str) -> String {
    let lines: Vec<&str> = tail.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let last = &lines[lines.len().saturating_sub(3)..];
    if last.is_empty() { String::new() } else { format!(": {}", last.join(" | ")) }
}

impl CommandError {
    /// The error of `outcome`, if it did not exit 0.
    pub fn of(outcome: &ProcessOutcome) -> Option<CommandError> {
        let how = if outcome.timed_out {
            format!("was killed after {:.1} s (time limit)", outcome.seconds)
        } else if outcome.cancelled {
            "was cancelled".to_string()
        } else {
            match outcome.code {
                Some(0) => return None,
                Some(c) => format!("exited with {c}"),
                None => "was killed by a signal".to_string(),
            }
        };
        Some(CommandError { command: outcome.command.clone(), how, stderr_tail: outcome.stderr_tail.clone() })
    }

    /// Whether the deadline ended it.
    pub fn timed_out(&self) -> bool {
        self.how.ends_with("(time limit)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_send_sync_and_say_what_the_child_said() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Error>();
        let e = CommandError {
            command: "git clone x".into(),
            how: "exited with 128".into(),
            stderr_tail: "a\n\nb\nc\nfatal: no\n".into(),
        };
        assert_eq!(e.to_string(), "git clone x exited with 128: b | c | fatal: no");
        let quiet = CommandError { stderr_tail: String::new(), ..e };
        assert_eq!(quiet.to_string(), "git clone x exited with 128");
        // the validator's and mining's messages read as before the move
        assert_eq!(Error::Fleet("the driver exited".into()).to_string(), "ray executor: the driver exited");
    }
}
