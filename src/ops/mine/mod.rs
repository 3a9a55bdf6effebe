//! Mining runs: one skeleton, two sources. [`usage`] mines the files of
//! each corpus at one revision into usage idioms; [`history`] mines the
//! commits of git corpora into edit rules. Both open each corpus the same
//! way ([`open_with_fallback`]), show the same progress bar, cap the skips
//! they list at [`MAX_LISTED_SKIPS`], and parse here or on a Ray cluster
//! through the same [`remote::Remote`]; the catalog transaction is theirs.

pub(crate) mod history;
pub(crate) mod remote;
pub(crate) mod usage;

use std::io::IsTerminal;
use std::path::Path;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use kidiom_miner::{Corpus, Manifest};

pub(crate) use remote::{Remote, ShardJob, run_shard};
pub(crate) use usage::{MineOptions, MineReport, PathInputs, manifests_for, mine};

/// Skipped files listed by name in a corpus's report; the rest are counted.
pub(crate) const MAX_LISTED_SKIPS: usize = 20;

/// A corpus's progress bar, hidden unless asked for on a terminal; `unit`
/// names what it counts (files, commits).
pub(crate) fn bar(progress: bool, len: u64, name: &str, unit: &str) -> ProgressBar {
    if !progress || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    let template = format!("{{prefix:>10}} [{{bar:30}}] {{pos}}/{{len}} {unit} {{per_sec}} {{msg}}");
    let style = ProgressStyle::with_template(&template)
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    pb.set_style(style);
    pb.set_prefix(name.to_string());
    pb
}

/// Opens a corpus, else its manifest's fallback; the note says why the
/// fallback was used.
pub(crate) fn open_with_fallback(manifest: Manifest) -> Result<(Corpus, Option<String>)> {
    let fallback = manifest.fallback.clone();
    let name = manifest.name.clone();
    match Corpus::open(manifest) {
        Ok(c) => Ok((c, None)),
        Err(first) => {
            let Some(fb) = fallback else { return Err(first.into()) };
            let m = Manifest::load(Path::new(&fb)).with_context(|| format!("fallback of corpus {name}"))?;
            let c = Corpus::open(m).with_context(|| format!("{first}; fallback {fb}"))?;
            let note = format!("used fallback {fb} ({} {}): {first}", c.manifest.kind.name(), c.manifest.source);
            Ok((c, Some(note)))
        }
    }
}

/// Test seam: `KIDIOM_STALL_BEFORE_COMMIT_MS` holds the finished, uncommitted
/// transaction for a while, so tests can kill a run or race a second one at
/// the moment it matters. It announces itself on stderr.
pub(crate) fn stall_for_tests() {
    if let Some(ms) = std::env::var("KIDIOM_STALL_BEFORE_COMMIT_MS").ok().and_then(|v| v.parse::<u64>().ok()) {
        eprintln!("kidiom: stalling before commit for {ms} ms"); // test seam: locking tests wait for it
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}
