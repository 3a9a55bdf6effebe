//! The flag groups commands share (`--db`, `--json`, `--quiet`), flattened
//! into each command's `Args`; the MCP server takes `--db` too.

use std::path::PathBuf;

use anyhow::Result;
use kidiom_patterns::Catalog;

use crate::config::Config;

/// `--timeout`, `--python`: how a command that runs the kernel harness itself runs it.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct HarnessArgs {
    /// Time limit of one kernel's harness run, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub(crate) timeout: u64,
    /// The Python that runs the harness (default: $KIDIOM_PYTHON, .venv/bin/python, python3).
    #[arg(long, value_name = "PATH")]
    pub(crate) python: Option<PathBuf>,
}

impl HarnessArgs {
    pub(crate) fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.timeout.max(1))
    }
}

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
        crate::ops::open_catalog(&self.path(cfg))
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

/// `--db`, `--json` and `--quiet`: what every command that reads the catalog and prints takes.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CommonArgs {
    #[command(flatten)]
    pub(crate) catalog: CatalogArgs,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
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
