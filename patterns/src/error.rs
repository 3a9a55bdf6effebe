//! Errors of the pattern model and the catalog.

use std::path::PathBuf;

/// Errors from opening, reading and writing a catalog.
///
/// Every variant names the catalog file involved; messages are lowercase
/// and one line, ready for a CLI to print after `error: `.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// SQLite reported an error.
    #[error("catalog {path}: {cause}", path = .path.display())]
    Sqlite {
        /// The catalog file.
        path: PathBuf,
        /// What SQLite said (in the message, so not also a `source()`).
        cause: rusqlite::Error,
    },
    /// Another process holds the catalog's write lock for longer than the
    /// busy timeout.
    #[error("catalog {path} is locked by another kidiom process", path = .path.display())]
    Locked {
        /// The catalog file.
        path: PathBuf,
    },
    /// The file exists but is not a SQLite database, is damaged, or is a
    /// SQLite database of some other program.
    #[error("{path} is not a kidiom catalog ({reason})", path = .path.display())]
    NotACatalog {
        /// The file.
        path: PathBuf,
        /// Why it was rejected.
        reason: String,
    },
    /// An exported catalog file (`catalog import`) cannot be read.
    #[error("{source_name}: {message}")]
    Exchange {
        /// The file, as named.
        source_name: String,
        /// What is wrong.
        message: String,
    },
    /// The catalog was written by a newer kidiom.
    #[error(
        "catalog {path} has schema version {found}, newer than version {supported} that this kidiom supports; upgrade kidiom",
        path = .path.display()
    )]
    NewerSchema {
        /// The catalog file.
        path: PathBuf,
        /// The version found in the file.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// A row holds data that does not decode (bad JSON, unknown enum name,
    /// negative count).
    #[error("catalog {path}: corrupt row {row} in table {table}: {message}", path = .path.display())]
    Corrupt {
        /// The catalog file.
        path: PathBuf,
        /// The table.
        table: &'static str,
        /// The row's key (a pattern id, or `corpus:path` for files).
        row: String,
        /// What is wrong with it.
        message: String,
    },
    /// A pattern handed to [`crate::MineTx::replace_patterns`] cannot be
    /// stored (duplicate id, wrong kind, NaN score).
    #[error("catalog {path}: cannot store pattern {id}: {message}", path = .path.display())]
    InvalidPattern {
        /// The catalog file.
        path: PathBuf,
        /// The pattern id.
        id: String,
        /// Why.
        message: String,
    },
    /// The catalog's directory could not be created.
    #[error("cannot create catalog directory {path}: {cause}", path = .path.display())]
    Io {
        /// The directory.
        path: PathBuf,
        /// The underlying failure (in the message, so not also a `source()`).
        cause: std::io::Error,
    },
}

/// A result whose error defaults to [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Classifies a SQLite error on `path`: busy/locked becomes
    /// [`Error::Locked`], not-a-database and corruption become
    /// [`Error::NotACatalog`], the rest [`Error::Sqlite`].
    pub(crate) fn sqlite(path: &std::path::Path, source: rusqlite::Error) -> Error {
        use rusqlite::ErrorCode;
        let path = path.to_path_buf();
        match source.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => Error::Locked { path },
            Some(ErrorCode::NotADatabase) => Error::NotACatalog { path, reason: "not a SQLite database".into() },
            Some(ErrorCode::DatabaseCorrupt) => {
                Error::NotACatalog { path, reason: "the SQLite database is damaged".into() }
            }
            _ => Error::Sqlite { path, cause: source },
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn errors_work_with_anyhow() {
        fn check<E: std::error::Error + Send + Sync + 'static>() {}
        check::<super::Error>();
    }
}
