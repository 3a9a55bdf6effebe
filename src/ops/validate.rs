//! Candidates through the syntax, static, correctness and speed gates,
//! with the evidence stored next to each diff.
//!
//! Each candidate is checked in a temporary copy of the baseline `kernels/`
//! tree (the contract comes from there, never from the candidate), every
//! kernel run is a harness subprocess under the candidate's time limit, and
//! a candidate that hangs or crashes gets the verdict `error` while the run
//! goes on. `accepted` sets its status to `validated`, `rejected` to
//! `rejected`; `needs-gpu` and `error` leave it pending, so that a later run
//! (e.g. on a GPU machine) picks it up again.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kidiom_patterns::{Candidate, Catalog, HostBaseline};
use kidiom_validator::{CandidateInput, Device, Evidence, ValidatorBuilder, VerdictKind};
use serde::Serialize;

/// The version of the validation report's JSON (`kidiom validate --json`).
pub(crate) const JSON_VERSION: u32 = 1;

#[derive(Debug, Default, Serialize)]
pub(crate) struct Counts {
    pub(crate) accepted: usize,
    pub(crate) rejected: usize,
    pub(crate) needs_gpu: usize,
    /// Written only when some are (reports before `unverified` read the same).
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) unverified: usize,
    pub(crate) error: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Counts {
    fn add(&mut self, k: VerdictKind) {
        match k {
            VerdictKind::Accepted => self.accepted += 1,
            VerdictKind::Rejected => self.rejected += 1,
            VerdictKind::NeedsGpu => self.needs_gpu += 1,
            VerdictKind::Unverified => self.unverified += 1,
            VerdictKind::Error => self.error += 1,
        }
    }
}

impl Report {
    /// The report of a run with nothing to validate.
    pub(crate) fn empty(device: Device) -> Report {
        Report {
            version: JSON_VERSION,
            device: device.name().into(),
            python: String::new(),
            summary: Counts::default(),
            candidates: Vec::new(),
            seconds: 0.0,
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) version: u32,
    pub(crate) device: String,
    pub(crate) python: String,
    pub(crate) summary: Counts,
    pub(crate) candidates: Vec<Evidence>,
    pub(crate) seconds: f64,
}

/// How candidates are validated (the CLI's flags, the MCP tools' arguments).
#[derive(Clone)]
pub(crate) struct Options {
    pub(crate) device: Device,
    pub(crate) timeout: Duration,
    pub(crate) seeds: u32,
    pub(crate) seed: Option<u64>,
    pub(crate) consistency: bool,
    pub(crate) python: Option<PathBuf>,
    /// Where the harness runs (here, or tasks on a Ray cluster).
    pub(crate) executor: kidiom_validator::Executor,
    /// `None`: no "predicted slower" rule.
    pub(crate) static_limits: Option<kidiom_validator::StaticLimits>,
    /// The device the work profiles predict times for (`None`: no profiles).
    pub(crate) device_model: Option<kidiom_validator::predict::DeviceModel>,
    /// `kidiom predict --check`'s held-out errors: each prediction names its own.
    pub(crate) expected_errors: Option<kidiom_validator::published::ExpectedErrors>,
    /// Time GPU kernels with the harness's in-process bench (evidence marked untrusted).
    pub(crate) untrusted_bench: bool,
    /// Directories walked for kernel manifests besides kernels/ (a user's own
    /// kernels; kidiom.toml `[run] targets`, `kidiom apply DIR`).
    pub(crate) targets: Vec<PathBuf>,
}

/// The validator of the tree at `root` with `opts`: the manifests of its
/// `kernels/` and of `opts.targets`, the harness from [`super::harness_dir`].
pub(crate) fn build_validator(
    root: &std::path::Path,
    opts: &Options,
    host_history: Option<&std::path::Path>,
) -> Result<kidiom_validator::Validator> {
    ValidatorBuilder::new(root)
        .harness(Some(super::harness_dir(root)?))
        .targets(opts.targets.clone())
        .python(opts.python.clone())
        .device(opts.device)
        .timeout(opts.timeout)
        .seeds(opts.seeds)
        .seed(opts.seed)
        .consistency(opts.consistency)
        .static_limits(opts.static_limits)
        .device_model(opts.device_model.clone())
        .expected_errors(opts.expected_errors.clone())
        .untrusted_bench(opts.untrusted_bench)
        .executor(opts.executor.clone())
        .host_history(host_history.map(std::path::Path::to_path_buf))
        .build()
        .context("reading the kernel manifests")
}

/// Validates `cands`, as many at once as the executor allows (here one per
/// CPU), storing each one's evidence as soon as it is known; the report
/// lists them in `cands`' order. `progress` hears of each candidate when its
/// gates start (`None`) and end (its evidence), in the order that happens.
pub(crate) fn validate_all(
    cat: &Catalog,
    cands: &[Candidate],
    opts: &Options,
    progress: &mut dyn FnMut(usize, &Candidate, Option<&Evidence>),
) -> Result<Report> {
    let started = Instant::now();
    let root = super::root()?;
    // the manifests beside each candidate's file too: a kernel of the user's own tree
    let mut with_beside = opts.clone();
    with_beside.targets.extend(super::manifests_beside(&root, cands.iter().map(|c| c.path.as_str())));
    // the host speed gate's baseline history: the catalog's, where the harness reads and writes it
    let history = HostHistory::export(cat).context("exporting the host baselines' history")?;
    let validator = build_validator(&root, &with_beside, Some(history.dir.path()))?;
    let mut report = Report {
        version: JSON_VERSION,
        device: opts.device.name().to_string(),
        python: validator.python().display().to_string(),
        summary: Counts::default(),
        candidates: Vec::new(),
        seconds: 0.0,
    };
    let inputs: Vec<CandidateInput> = cands
        .iter()
        .map(|c| CandidateInput::from_candidate(c, cat.get(&c.pattern_id).ok().flatten().map(|p| p.category)))
        .collect();
    // each candidate in its own tree and harness processes; the catalog is written here, on
    // this thread, as each verdict comes in
    let width = validator.parallelism().context("starting the executor")?;
    let mut results: Vec<(usize, Result<Evidence>)> = Vec::new();
    validator.validate_all(&inputs, width, |i, r| {
        let Some(r) = r else {
            progress(i, &cands[i], None);
            return;
        };
        let r = r.with_context(|| format!("validating {}", cands[i].id)).and_then(|ev| record(cat, &cands[i], ev));
        if let Ok(ev) = &r {
            progress(i, &cands[i], Some(ev));
        }
        results.push((i, r));
    });
    history.import(cat).context("storing the host baselines' history")?;
    // in the candidates' order; a validation that could not run at all fails the run,
    // after every other candidate's evidence is stored
    results.sort_by_key(|(i, _)| *i);
    for (_, r) in results {
        let ev = r?;
        report.summary.add(ev.verdict.kind);
        report.candidates.push(ev);
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Stores a candidate's evidence and the status its verdict implies.
fn record(cat: &Catalog, c: &Candidate, ev: Evidence) -> Result<Evidence> {
    cat.set_candidate_evidence(&c.id, &ev.clone().into())?;
    if let Some(s) = c.status.after(ev.verdict.kind) {
        cat.set_candidate_status(&c.id, s, None)?;
    }
    Ok(ev)
}

/// The catalog's host baseline histories ([`kidiom_patterns::HostBaseline`])
/// as the harness keeps them, one `<key>.json` per bench key in a directory
/// of the run's own: written before validation, read back after it (the
/// harness appends each run's baseline figure unless it was flagged).
struct HostHistory {
    dir: tempfile::TempDir,
    exported: Vec<HostBaseline>,
}

/// A bench key as the harness makes it (hex): anything else never names a file.
fn is_history_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= 64 && key.bytes().all(|b| b.is_ascii_hexdigit())
}

impl HostHistory {
    fn export(cat: &Catalog) -> Result<HostHistory> {
        let dir = tempfile::Builder::new().prefix("kidiom-host-history-").tempdir()?;
        let (rows, _unreadable) = cat.host_baselines()?;
        let exported: Vec<HostBaseline> = rows.into_iter().filter(|b| is_history_key(&b.key)).collect();
        for b in &exported {
            let text = serde_json::json!({
                "key": b.key, "kernel": b.kernel, "machine": b.machine, "requests_per_s": b.requests_per_s,
            });
            std::fs::write(dir.path().join(format!("{}.json", b.key)), text.to_string())?;
        }
        Ok(HostHistory { dir, exported })
    }

    /// Stores each key whose figures changed; a file that does not read as
    /// one (a harness from before, a torn write) is left out.
    fn import(&self, cat: &Catalog) -> Result<()> {
        for entry in std::fs::read_dir(self.dir.path())?.flatten() {
            let path = entry.path();
            let Some(key) = path.file_stem().and_then(|s| s.to_str()).filter(|k| is_history_key(k)) else { continue };
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else { continue };
            let Ok(mut b) = serde_json::from_str::<HostBaseline>(&text) else { continue };
            if b.key != key || b.requests_per_s.is_empty() {
                continue;
            }
            b.updated_at.clear();
            let before = self.exported.iter().find(|e| e.key == b.key);
            if before.is_none_or(|e| e.requests_per_s != b.requests_per_s) {
                cat.put_host_baseline(&b)?;
            }
        }
        Ok(())
    }
}
