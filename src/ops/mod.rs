//! The service layer: what kidiom does, under both front ends. `cmd/`
//! turns arguments into calls here and results into terminal output;
//! `mcp/` turns JSON-RPC requests into calls here and results into JSON.
//! Nothing here parses arguments or prints: results are data, progress is
//! a callback.

pub(crate) mod accept;
pub(crate) mod apply;
pub(crate) mod branch;
pub(crate) mod candidates;
pub(crate) mod check;
pub(crate) mod init;
pub(crate) mod mine;
pub(crate) mod predict;
pub(crate) mod profile;
pub(crate) mod run;
pub(crate) mod sitesearch;
pub(crate) mod snapshot;
pub(crate) mod targets;
pub(crate) mod validate;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kidiom_patterns::Catalog;

/// The root that target paths are relative to: the git working directory
/// holding the current directory, else the current directory.
pub(crate) fn root() -> Result<PathBuf> {
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let root = branch::repo_root(&cwd).unwrap_or(cwd);
    root.canonicalize().with_context(|| format!("resolving {}", root.display()))
}

/// The validator that profiles the kernels of `root` (kernels/ and
/// kidiom.toml's targets) with kidiom.toml's device model and the expected
/// errors every prediction names: `kidiom profile` and `kidiom predict`.
pub(crate) fn profiling_validator(
    cfg: &crate::config::Config,
    root: &Path,
    python: Option<PathBuf>,
    timeout: std::time::Duration,
) -> Result<kidiom_validator::Validator> {
    kidiom_validator::ValidatorBuilder::new(root)
        .harness(Some(harness_dir(root)?))
        .targets(cfg.targets())
        .python(python)
        .timeout(timeout)
        .device_model(cfg.device_model()?)
        .expected_errors(cfg.expected_errors())
        .build()
        .context("reading the kernel manifests")
}

/// The directory whose `kernels/harness` runs the kernels of the tree at
/// `root`: the root itself when it holds the harness (kidiom's own
/// repository: its harness is part of the frozen contract), else
/// `$KIDIOM_HARNESS`, else the repository kidiom was built from. A user's
/// tree holds no harness; kidiom brings its own.
pub(crate) fn harness_dir(root: &Path) -> Result<PathBuf> {
    if kidiom_exec::holds_harness(root) {
        return Ok(root.to_path_buf());
    }
    let built_from = Path::new(env!("CARGO_MANIFEST_DIR"));
    if let Some(d) = kidiom_exec::find_harness([built_from]) {
        return Ok(d);
    }
    let env = match std::env::var_os("KIDIOM_HARNESS").filter(|v| !v.is_empty()) {
        Some(v) => format!("$KIDIOM_HARNESS ({}) holds none", Path::new(&v).display()),
        None => "$KIDIOM_HARNESS is not set".to_string(),
    };
    anyhow::bail!(
        "no kidiom harness (kernels/harness/__main__.py): {} has none, {env}, and the repository kidiom \
         was built from ({}) has none; set KIDIOM_HARNESS to a kidiom checkout",
        root.display(),
        built_from.display()
    )
}

/// The kidiom checkout this binary runs with: the one whose harness runs a
/// user's kernels ([`harness_dir`] of the current directory), where the
/// corpus manifests and the snapshot kidiom ships lie (`corpora/`).
pub(crate) fn kidiom_home() -> Result<PathBuf> {
    harness_dir(&root()?)
}

/// The kernel manifests beside the files `paths` (relative to `root`): the
/// `*.toml` files in each one's directory, not below it, for
/// [`kidiom_validator::ValidatorBuilder::targets`] (the manifest of a kernel
/// lies next to its source).
pub(crate) fn manifests_beside<'a>(root: &Path, paths: impl IntoIterator<Item = &'a str>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs: Vec<PathBuf> =
        paths.into_iter().map(|p| root.join(p)).filter_map(|p| p.parent().map(Path::to_path_buf)).collect();
    dirs.sort();
    dirs.dedup();
    for d in dirs {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "toml") && e.file_type().is_ok_and(|t| t.is_file()) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Opens (or creates) the catalog at `path`, waiting for another run's
/// write lock up to `KIDIOM_LOCK_TIMEOUT_MS` (default 30 s).
pub(crate) fn open_catalog(path: &Path) -> Result<Catalog> {
    let ms = std::env::var("KIDIOM_LOCK_TIMEOUT_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(30_000);
    // every error of opening names the catalog's path itself
    Ok(Catalog::open_with_timeout(path, std::time::Duration::from_millis(ms))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifests_beside_a_file_are_its_directory_s_toml_files() {
        let d = tempfile::tempdir().unwrap();
        for f in ["ops/k.py", "ops/k.toml", "ops/pyproject.toml", "ops/sub/deep.toml", "other/x.toml"] {
            let p = d.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "").unwrap();
        }
        let got = manifests_beside(d.path(), ["ops/k.py", "ops/k.py", "gone/y.py"]);
        assert_eq!(got, [d.path().join("ops/k.toml"), d.path().join("ops/pyproject.toml")]);
    }
}
