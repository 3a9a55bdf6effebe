//! `kidiom check`: the unmodified kernels against their own contracts, at
//! every CPU shape and at odd sizes (`kidiom_validator::ContractReport`),
//! the same check validation makes before any candidate of a kernel.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use kidiom_validator::{ContractReport, KernelLanguage, ValidatorBuilder};

use crate::config::Config;

/// What to check.
pub(crate) struct Options {
    /// A kernel file, its manifest, or a folder of them; `None`: every
    /// kernel of kernels/ and of `[run] targets`.
    pub(crate) path: Option<PathBuf>,
    pub(crate) python: Option<PathBuf>,
    pub(crate) timeout: Duration,
}

/// The reports, in manifest order.
pub(crate) fn check(cfg: &Config, opts: &Options) -> Result<Vec<ContractReport>> {
    let root = super::root()?;
    let given = match &opts.path {
        Some(p) => {
            std::fs::metadata(p).with_context(|| format!("reading {}", p.display()))?;
            Some(std::path::absolute(p).with_context(|| format!("resolving {}", p.display()))?)
        }
        None => None,
    };
    let mut targets = cfg.targets();
    if let Some(p) = &given {
        targets.push(if p.is_dir() { p.clone() } else { p.parent().map(Path::to_path_buf).unwrap_or_default() });
    }
    let validator = ValidatorBuilder::new(&root)
        .harness(Some(super::harness_dir(&root)?))
        .targets(targets)
        .python(opts.python.clone())
        .timeout(opts.timeout)
        .build()
        .context("reading the kernel manifests")?;
    let abs = |rel: &str| root.join(rel);
    let chosen: Vec<String> = validator
        .kernels()
        .manifests
        .iter()
        .filter(|m| m.language != KernelLanguage::Cpp)
        .filter(|m| match &given {
            None => true,
            Some(p) if p.is_dir() => abs(&m.path).starts_with(p),
            Some(p) => abs(&m.path) == *p || abs(&m.source_path()) == *p,
        })
        .map(|m| m.name.clone())
        .collect();
    if chosen.is_empty() {
        // a manifest named outright that does not parse says why (discovery passes over any .toml
        // that is no manifest: pyproject.toml, a broken one among many)
        if let Some(p) = given.as_ref().filter(|p| p.extension().is_some_and(|x| x == "toml")) {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            if let Err(e) = kidiom_validator::Manifest::parse(&text, &p.display().to_string()) {
                anyhow::bail!("not a kernel manifest kidiom can read: {e}");
            }
        }
        let what = given.as_ref().map_or("kernels/ or [run] targets".to_string(), |p| p.display().to_string());
        anyhow::bail!(
            "no Triton or CUDA kernel manifest for {what} (write one beside the kernel: `kidiom init KERNEL_FILE`)"
        );
    }
    chosen
        .iter()
        .zip(validator.check_contracts(&chosen))
        .map(|(n, r)| r.with_context(|| format!("checking {n}'s contract")))
        .collect()
}
