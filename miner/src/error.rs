use std::path::PathBuf;

/// Errors from reading corpora and their manifests.
///
/// Per-file problems (binary files, invalid UTF-8, parse trouble) are not
/// errors: they are recorded as [`kidiom_syntax::Skip`] data and mining carries on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read or written.
    #[error("{path}: {cause}", path = .path.display())]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying failure (in the message, so not also a `source()`).
        cause: std::io::Error,
    },
    /// A corpus manifest is not valid TOML or lacks a field.
    #[error("manifest {path}: {message}")]
    Manifest {
        /// The manifest file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A git repository could not be opened or a revision not resolved.
    #[error("git {repo}: {message}")]
    Git {
        /// The repository path or URL.
        repo: String,
        /// What git2 said (or that this build reads no repositories).
        message: String,
    },
    /// A glob in an include/exclude list does not compile.
    #[error("bad glob {glob:?}: {message}")]
    Glob {
        /// The offending glob.
        glob: String,
        /// Why it is invalid.
        message: String,
    },
    /// Fetching or unpacking a source distribution failed.
    #[error("pypi {spec}: {message}")]
    Pypi {
        /// The `name==version` requirement.
        spec: String,
        /// What failed, with the tail of pip's stderr where there is one.
        message: String,
    },
}

/// Result with the miner's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), cause: source }
    }
    pub(crate) fn git(repo: impl std::fmt::Display, e: impl std::fmt::Display) -> Self {
        Error::Git { repo: repo.to_string(), message: e.to_string() }
    }
}
