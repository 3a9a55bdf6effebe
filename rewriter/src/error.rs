//! Errors of compiling, applying and writing rewrites.

use std::path::PathBuf;

/// Why a rewrite could not be made or written. Messages are
/// lowercase and one line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The pattern cannot be used (does not parse, has no rewrite).
    #[error(transparent)]
    Pattern(#[from] crate::matcher::MatchError),
    /// The rewritten text has more parse errors than the original.
    #[error("{pattern} on {path}: the rewrite adds a parse error; dropped")]
    NewParseError {
        /// The pattern id.
        pattern: String,
        /// The target.
        path: String,
    },
    /// Applying the rewrite again would change the text again.
    #[error("{pattern} on {path}: the rewrite does not reach a fixed point; dropped")]
    NotIdempotent {
        /// The pattern id.
        pattern: String,
        /// The target.
        path: String,
    },
    /// The file cannot be parsed at all.
    #[error("{path}: cannot parse: {reason}")]
    Unparsable {
        /// The target.
        path: String,
        /// Why.
        reason: String,
    },
    /// The target is not a text file kidiom rewrites.
    #[error("{path}: {reason}", path = .path.display())]
    BadTarget {
        /// The target.
        path: PathBuf,
        /// Why (binary, symlink out of the tree, not UTF-8, ...).
        reason: String,
    },
    /// The file changed since the candidate was computed.
    #[error(
        "{path} changed since the candidate was proposed (blob {found}, candidate applies to {expected}); run `kidiom apply` again",
        path = .path.display()
    )]
    Stale {
        /// The target.
        path: PathBuf,
        /// The blob the candidate applies to.
        expected: String,
        /// The blob found now.
        found: String,
    },
    /// The file has uncommitted changes and `--force` was not given.
    #[error("{path} has uncommitted changes ({status}); commit or stash them, or pass --force", path = .path.display())]
    Uncommitted {
        /// The target.
        path: PathBuf,
        /// The git status, in words.
        status: String,
    },
    /// The file is read-only.
    #[error("{path} is read-only; not written", path = .path.display())]
    ReadOnly {
        /// The target.
        path: PathBuf,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {cause}", path = .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure (in the message, so not also a `source()`).
        cause: std::io::Error,
    },
}

/// A result whose error defaults to [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    #[test]
    fn errors_are_send_sync() {
        fn check<E: std::error::Error + Send + Sync + 'static>() {}
        check::<super::Error>();
    }
}
