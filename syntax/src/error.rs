use std::path::PathBuf;

/// Errors from reading a directory tree ([`crate::tree_files`]).
///
/// Per-file problems before parsing (binary files, invalid UTF-8, parse
/// trouble) are not errors: they are [`crate::Skip`] data.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file or directory could not be read.
    #[error("{path}: {cause}", path = .path.display())]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying failure (in the message, so not also a `source()`).
        cause: std::io::Error,
    },
}

/// Result with the syntax crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), cause: source }
    }
}
