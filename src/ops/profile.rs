//! `kidiom profile`: the work profile of a kernel (or of a file in its
//! place) counted on the CPU in the check's sandbox, against the floor of
//! its manifest, with the roofline prediction on `[predict] device`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use kidiom_validator::{KernelLanguage, ProfileReport};

use crate::config::Config;

/// What to profile.
pub(crate) struct Options {
    /// One kernel by its manifest name; `None`: every Triton and CUDA kernel.
    pub(crate) kernel: Option<String>,
    /// A file in the kernel's place (needs `kernel`).
    pub(crate) source: Option<PathBuf>,
    /// A shape in place of the manifest's bench shape (needs `kernel`).
    pub(crate) shape: Option<std::collections::BTreeMap<String, u64>>,
    pub(crate) python: Option<PathBuf>,
    pub(crate) timeout: Duration,
}

/// The profiles, in manifest order.
pub(crate) fn profile(cfg: &Config, opts: &Options) -> Result<Vec<ProfileReport>> {
    let root = super::root()?;
    // the kernels of kernels/ and of [run] targets, run by the harness kidiom finds for this tree
    let validator = super::profiling_validator(cfg, &root, opts.python.clone(), opts.timeout)?;
    let names: Vec<String> = match &opts.kernel {
        Some(k) => vec![k.clone()],
        None => validator
            .kernels()
            .manifests
            .iter()
            .filter(|m| m.language != KernelLanguage::Cpp)
            .map(|m| m.name.clone())
            .collect(),
    };
    let source = opts.source.as_deref().map(Path::to_path_buf);
    if let Some(s) = &source {
        std::fs::metadata(s).with_context(|| format!("reading {}", s.display()))?;
    }
    names
        .iter()
        .map(|n| {
            validator.profile_at(n, source.as_deref(), opts.shape.as_ref()).with_context(|| format!("profiling {n}"))
        })
        .collect()
}
