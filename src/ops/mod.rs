//! The service layer: what kidiom does, under both front ends. `cmd/`
//! turns arguments into calls here and results into terminal output;
//! `mcp/` turns JSON-RPC requests into calls here and results into JSON.
//! Nothing here parses arguments or prints: results are data, progress is
//! a callback.

pub(crate) mod accept;
pub(crate) mod apply;
pub(crate) mod branch;
pub(crate) mod candidates;
pub(crate) mod mine;
pub(crate) mod profile;
pub(crate) mod run;
pub(crate) mod sitesearch;
pub(crate) mod snapshot;
pub(crate) mod targets;
pub(crate) mod validate;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kidiom_catalog::Catalog;

/// The root that target paths are relative to: the git working directory
/// holding the current directory, else the current directory.
pub(crate) fn root() -> Result<PathBuf> {
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let root = branch::repo_root(&cwd).unwrap_or(cwd);
    root.canonicalize().with_context(|| format!("resolving {}", root.display()))
}

/// Opens (or creates) the catalog at `path`, waiting for another run's
/// write lock up to `KIDIOM_LOCK_TIMEOUT_MS` (default 30 s).
pub(crate) fn open_catalog(path: &Path) -> Result<Catalog> {
    let ms = std::env::var("KIDIOM_LOCK_TIMEOUT_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(30_000);
    // every error of opening names the catalog's path itself
    Ok(Catalog::open_with_timeout(path, std::time::Duration::from_millis(ms))?)
}
