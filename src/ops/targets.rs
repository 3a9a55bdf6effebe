//! The files a rewrite may touch: targets named on the command line or by
//! an agent, expanded and read once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use kidiom_miner::Prefilter;
use kidiom_syntax::{DeviceMacros, KNOWN_DEVICE_MACROS, Lang, Limits, decode, merge_device_macro, scan_device_macros};

/// A file to rewrite.
pub(crate) struct Target {
    /// Where it is on disk.
    pub(crate) abs: PathBuf,
    /// Relative to the root, `/`-separated (diff headers, candidate ids).
    pub(crate) rel: String,
    pub(crate) lang: Lang,
    pub(crate) text: String,
}

/// A file met while walking a directory that cannot be rewritten, and why.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Skipped {
    pub(crate) path: PathBuf,
    pub(crate) reason: String,
}

/// The languages kidiom rewrites, as a sentence's list.
const REWRITTEN: &str = ".py, .cu, .cuh, .cpp, .cc, .cxx, .h, .hpp";

/// The rewritable source files under `dir` (or `dir` itself, if a file).
pub(crate) fn source_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let files = kidiom_syntax::tree_files(dir).with_context(|| format!("reading {}", dir.display()))?;
    Ok(files.into_iter().filter(|p| Lang::from_path(p).is_some_and(|l| l != Lang::Rust)).collect())
}

/// Expands targets (default `kernels`) into files. A named file that cannot
/// be rewritten is an error; files met while walking a directory that
/// cannot be (a symlink out of the tree, binary, unreadable) are returned
/// as skipped.
pub(crate) fn collect(targets: &[PathBuf], root: &Path) -> Result<(Vec<Target>, Vec<Skipped>)> {
    let targets = if targets.is_empty() { vec![PathBuf::from("kernels")] } else { targets.to_vec() };
    let mut out: BTreeMap<String, Target> = BTreeMap::new();
    let mut skipped = Vec::new();
    for t in &targets {
        let meta = std::fs::symlink_metadata(t).with_context(|| format!("target {}", t.display()))?;
        if meta.is_dir() {
            for path in source_files(t)? {
                match load(&path, root) {
                    Ok(Some(target)) => {
                        out.insert(target.rel.clone(), target);
                    }
                    Ok(None) => {}
                    Err(e) => skipped.push(Skipped { path, reason: format!("{e:#}") }),
                }
            }
        } else {
            match load(t, root)? {
                Some(target) => {
                    out.insert(target.rel.clone(), target);
                }
                None => bail!("{}: not a language kidiom rewrites ({REWRITTEN})", t.display()),
            }
        }
    }
    Ok((out.into_values().collect(), skipped))
}

/// Reads one file; `Ok(None)` for languages kidiom does not rewrite.
fn load(path: &Path, root: &Path) -> Result<Option<Target>> {
    let Some(lang) = Lang::from_path(path).filter(|l| *l != Lang::Rust) else { return Ok(None) };
    let meta = std::fs::symlink_metadata(path).with_context(|| format!("reading {}", path.display()))?;
    let abs = path.canonicalize().with_context(|| format!("resolving {}", path.display()))?;
    if meta.file_type().is_symlink() && !abs.starts_with(root) {
        bail!("{} is a symlink to {}, outside {}; refusing it", path.display(), abs.display(), root.display());
    }
    if !abs.starts_with(root) {
        bail!("{} is outside {}; run kidiom from the tree that holds it", path.display(), root.display());
    }
    if !abs.is_file() {
        bail!("{} is not a regular file", path.display());
    }
    let bytes = std::fs::read(&abs).with_context(|| format!("reading {}", path.display()))?;
    let text = decode(&bytes, &Limits::default())
        .map_err(|s| anyhow::anyhow!("{}: {s}; not a text file kidiom rewrites", path.display()))?
        .to_string();
    let rel = abs.strip_prefix(root).unwrap_or(&abs).to_string_lossy().replace('\\', "/");
    Ok(Some(Target { abs, rel, lang, text }))
}

impl Target {
    /// Whether the file can hold a kernel at all: the miner's literal
    /// prefilter (with the device macros the file itself defines), which
    /// spares parsing most host-only files.
    pub(crate) fn may_hold_kernels(&self) -> bool {
        let mut macros: DeviceMacros =
            KNOWN_DEVICE_MACROS.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        if matches!(self.lang, Lang::Cuda | Lang::Cpp) {
            for (name, expansion) in scan_device_macros(&self.text) {
                merge_device_macro(&mut macros, name, expansion);
            }
        }
        Prefilter::new(&macros).may_contain_kernels(self.lang, self.text.as_bytes())
    }
}
