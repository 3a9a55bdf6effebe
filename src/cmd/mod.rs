//! One module per subcommand: each has an `Args` (or `Command`) type and a
//! `run` returning the exit code.

pub(crate) mod accept;
pub(crate) mod apply;
pub(crate) mod catalog;
pub(crate) mod debug;
pub(crate) mod export;
pub(crate) mod import;
pub(crate) mod mine;
pub(crate) mod review;
pub(crate) mod run;
pub(crate) mod validate;

use std::path::PathBuf;

use anyhow::{Context, Result};
use kidiom_patterns::Catalog;

use crate::config::Config;

/// `--db`: which catalog.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CatalogArgs {
    /// The catalog file (default: kidiom.toml's [catalog] path, else .kidiom/catalog.sqlite).
    #[arg(long, value_name = "PATH")]
    pub(crate) db: Option<PathBuf>,
}

impl CatalogArgs {
    pub(crate) fn path(&self, cfg: &Config) -> PathBuf {
        match &self.db {
            Some(p) => p.clone(),
            None => cfg.resolve(&cfg.catalog.path),
        }
    }

    pub(crate) fn open(&self, cfg: &Config) -> Result<Catalog> {
        let path = self.path(cfg);
        Catalog::open_with_timeout(&path, lock_timeout()).with_context(|| format!("opening catalog {}", path.display()))
    }

    /// Opens an existing catalog for reading; a missing one is an error, not a new file.
    pub(crate) fn open_existing(&self, cfg: &Config) -> Result<Catalog> {
        let path = self.path(cfg);
        if !path.exists() {
            anyhow::bail!("no catalog at {} (run `kidiom mine` first, or pass --db)", path.display());
        }
        self.open(cfg)
    }
}

/// `--json` and `--quiet`.
#[derive(Debug, Clone, Copy, clap::Args)]
pub(crate) struct OutputArgs {
    /// Print machine-readable JSON on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// No progress bars.
    #[arg(long, short)]
    pub(crate) quiet: bool,
}

/// How long a run waits for another run's write lock on the catalog:
/// `KIDIOM_LOCK_TIMEOUT_MS`, default 30 s.
fn lock_timeout() -> std::time::Duration {
    let ms = std::env::var("KIDIOM_LOCK_TIMEOUT_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(30_000);
    std::time::Duration::from_millis(ms)
}
