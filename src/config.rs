//! `kidiom.toml`: the project defaults that `kidiom run` and option-less
//! commands use. Missing file or keys fall back to built-in defaults.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Config {
    pub(crate) catalog: CatalogSection,
    pub(crate) mine: MineSection,
    pub(crate) validate: ValidateSection,
    pub(crate) search: SearchSection,
    /// Where the file was found (for resolving relative paths).
    #[serde(skip)]
    pub(crate) root: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct CatalogSection {
    pub(crate) path: PathBuf,
}

impl Default for CatalogSection {
    fn default() -> Self {
        CatalogSection { path: PathBuf::from(".kidiom/catalog.sqlite") }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct MineSection {
    pub(crate) corpora: Vec<PathBuf>,
    pub(crate) min_occurrences: u64,
    pub(crate) min_files: u64,
    pub(crate) min_corpora: u64,
    pub(crate) max_file_bytes: u64,
    pub(crate) max_nesting: usize,
    /// `kidiom run` also mines the history of git corpora (edit idioms).
    pub(crate) history: bool,
    /// The shipped catalog snapshot `kidiom run` imports for git corpora it cannot reach.
    pub(crate) snapshot: Option<PathBuf>,
}

impl Default for MineSection {
    fn default() -> Self {
        let m = kidiom_miner::MineConfig::default();
        let l = kidiom_miner::Limits::default();
        MineSection {
            corpora: Vec::new(),
            min_occurrences: m.min_occurrences,
            min_files: m.min_files,
            min_corpora: m.min_corpora,
            max_file_bytes: l.max_bytes,
            max_nesting: l.max_depth,
            history: false,
            snapshot: None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ValidateSection {
    /// When the static gate rejects a candidate as "predicted slower".
    pub(crate) static_limits: kidiom_validator::StaticLimits,
}

/// The per-site search of precision patterns (`kidiom run`, `kidiom apply --search`).
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct SearchSection {
    /// `kidiom run` searches (`--no-search` turns it off once).
    pub(crate) enabled: bool,
    /// Variants measured at a time (0: one per CPU).
    pub(crate) jobs: usize,
    /// The choice: error within this many times the loosest all-sites fix.
    pub(crate) error_factor: f64,
    /// A value fixes when its all-sites error is this many times below the baseline's.
    pub(crate) min_gain: f64,
}

impl Default for SearchSection {
    fn default() -> Self {
        let r = kidiom_validator::search::Rule::default();
        SearchSection { enabled: true, jobs: 0, error_factor: r.error_factor, min_gain: r.min_gain }
    }
}

impl SearchSection {
    pub(crate) fn rule(&self) -> kidiom_validator::search::Rule {
        kidiom_validator::search::Rule { error_factor: self.error_factor, min_gain: self.min_gain }
    }

    pub(crate) fn jobs(&self) -> usize {
        if self.jobs > 0 { self.jobs } else { std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) }
    }
}

impl Config {
    /// Reads `kidiom.toml` from the current directory, if present.
    pub(crate) fn load() -> Result<Config> {
        Self::load_from(Path::new("kidiom.toml"))
    }

    pub(crate) fn load_from(path: &Path) -> Result<Config> {
        let root = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut cfg = match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str::<Config>(&text).with_context(|| format!("reading {}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Config::default(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        cfg.root = root;
        Ok(cfg)
    }

    pub(crate) fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() { p.to_path_buf() } else { self.root.join(p) }
    }

    pub(crate) fn mine_config(&self) -> kidiom_miner::MineConfig {
        kidiom_miner::MineConfig {
            min_occurrences: self.mine.min_occurrences,
            min_files: self.mine.min_files,
            min_corpora: self.mine.min_corpora,
            ..Default::default()
        }
    }

    pub(crate) fn limits(&self) -> kidiom_miner::Limits {
        kidiom_miner::Limits { max_bytes: self.mine.max_file_bytes, max_depth: self.mine.max_nesting }
    }
}
