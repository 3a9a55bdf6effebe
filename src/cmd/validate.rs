//! `kidiom validate`: every rewrite candidate through the syntax, static,
//! correctness and speed gates, with the evidence stored next to its diff.
//!
//! Each candidate is checked in a temporary copy of the baseline `kernels/`
//! tree (the contract comes from there, never from the candidate), every
//! kernel run is a harness subprocess under the candidate's time limit, and
//! a candidate that hangs or crashes gets the verdict `error` while the run
//! goes on. The evidence (one record per gate, and the verdict) is stored in
//! the candidate's `evidence` column; `accepted` sets its status to
//! `validated`, `rejected` to `rejected`; `needs-gpu` and `error` leave it
//! pending, so that a later run (e.g. on a GPU machine) picks it up again.
//!
//! `--patch FILE` (or `-` for stdin) validates an edit that did not come
//! from the catalog: the unified diff is stored as a candidate of the
//! pattern `manual` (its category from `--category`; without one, numeric
//! flags may not change), goes through the same gates, and its evidence is
//! shown by `kidiom review` like any other.
//!
//! Exit codes: 0 every candidate `accepted` or `needs-gpu`; 1 some candidate
//! `rejected` or `error`, or none to validate; 2 the command failed.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kidiom_patterns::{Candidate, CandidateStatus, Catalog, Category};
use kidiom_validator::{
    CandidateInput, Device, Evidence, Gate, GateStatus, MANUAL_PATTERN, ValidatorBuilder, VerdictKind,
};
use serde::Serialize;

use super::{CatalogArgs, OutputArgs};
use crate::config::Config;
use crate::output;

/// The version of `kidiom validate --json`'s top-level object.
const JSON_VERSION: u32 = 1;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Candidate ids (or unique prefixes).
    #[arg(value_name = "ID")]
    ids: Vec<String>,
    /// Every pending candidate (status proposed or applied).
    #[arg(long, conflicts_with = "ids")]
    pending: bool,
    /// A unified diff (an edit of your own, not from the catalog) to store as a
    /// candidate of the pattern `manual` and validate; `-` reads it from stdin.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["ids", "pending"])]
    patch: Option<PathBuf>,
    /// The category of the --patch edit (numeric flags may change only under `precision`).
    #[arg(long, requires = "patch", value_parser = parse_category)]
    category: Option<Category>,
    /// Where kernels run: auto (a GPU if the harness finds one), cpu, or cuda.
    #[arg(long, default_value = "auto", value_parser = parse_device)]
    device: Device,
    /// Time limit of one candidate, all its gates together, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    timeout: u64,
    /// Fresh random seeds of the correctness gate.
    #[arg(long, default_value_t = 3)]
    seeds: u32,
    /// Base seed of the correctness gate (default: fresh per candidate).
    #[arg(long)]
    seed: Option<u64>,
    /// Leave out the prefill(T) + decode(M) == prefill(T + M) check (faster).
    #[arg(long)]
    no_consistency: bool,
    /// Do not reject grossly worse static figures as "predicted slower" (limits: kidiom.toml [validate.static_limits]).
    #[arg(long)]
    allow_static_regression: bool,
    /// The Python that runs the harness (default: $KIDIOM_PYTHON, .venv/bin/python, python3).
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
    #[command(flatten)]
    catalog: CatalogArgs,
    #[command(flatten)]
    output: OutputArgs,
}

pub(crate) fn parse_device(s: &str) -> Result<Device, String> {
    Device::from_name(s).ok_or_else(|| format!("unknown device {s:?} (auto, cpu, cuda)"))
}

pub(crate) fn parse_category(s: &str) -> Result<Category, String> {
    Category::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Category::ALL.iter().map(|c| c.name()).collect();
        format!("unknown category {s:?} ({})", names.join(", "))
    })
}

/// Stores an edit that did not come from the catalog (a unified diff against
/// the files under `root`) as a candidate of the pattern `manual`.
pub(crate) fn store_patch(
    cat: &Catalog,
    root: &std::path::Path,
    diff: &str,
    category: Option<Category>,
) -> Result<Candidate> {
    let input = CandidateInput::from_patch(root, diff, category).context("reading the patch")?;
    let sites = diff.lines().filter(|l| l.starts_with("@@")).count() as u64;
    let c = Candidate {
        id: input.id,
        pattern_id: MANUAL_PATTERN.into(),
        path: input.path,
        base_blob: input.base_blob,
        result_blob: input.result_blob,
        value: None,
        sites,
        diff: input.diff,
        status: CandidateStatus::Proposed,
        provenance: serde_json::json!({
            "kind": MANUAL_PATTERN,
            "category": category.map(|c| c.name()),
            "title": "manual edit",
            "rationale": "an edit submitted for validation as a patch (`kidiom validate --patch`, MCP validate_patch), not a catalog pattern",
        }),
        evidence: serde_json::json!({}),
        commit_id: None,
        created_at: String::new(),
        updated_at: String::new(),
    };
    cat.put_candidate(&c).with_context(|| format!("storing {}", c.id))?;
    // the stored row (an earlier identical patch keeps its status)
    Ok(cat.find_candidates(&c.id)?.into_iter().find(|x| x.id == c.id).unwrap_or(c))
}

/// Whether a candidate still awaits a verdict that settles it.
pub(crate) fn is_pending(c: &Candidate) -> bool {
    matches!(c.status, CandidateStatus::Proposed | CandidateStatus::Applied)
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct Counts {
    pub(crate) accepted: usize,
    pub(crate) rejected: usize,
    pub(crate) needs_gpu: usize,
    pub(crate) error: usize,
}

impl Counts {
    fn add(&mut self, k: VerdictKind) {
        match k {
            VerdictKind::Accepted => self.accepted += 1,
            VerdictKind::Rejected => self.rejected += 1,
            VerdictKind::NeedsGpu => self.needs_gpu += 1,
            VerdictKind::Error => self.error += 1,
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

/// Options shared with `kidiom run`.
pub(crate) struct Options {
    pub(crate) device: Device,
    pub(crate) timeout: Duration,
    pub(crate) seeds: u32,
    pub(crate) seed: Option<u64>,
    pub(crate) consistency: bool,
    pub(crate) python: Option<PathBuf>,
    pub(crate) progress: bool,
    /// `None`: no "predicted slower" rule.
    pub(crate) static_limits: Option<kidiom_validator::StaticLimits>,
}

/// The validator of the tree at `root` with `opts`.
pub(crate) fn build_validator(root: &std::path::Path, opts: &Options) -> Result<kidiom_validator::Validator> {
    ValidatorBuilder::new(root)
        .python(opts.python.clone())
        .device(opts.device)
        .timeout(opts.timeout)
        .seeds(opts.seeds)
        .seed(opts.seed)
        .consistency(opts.consistency)
        .static_limits(opts.static_limits)
        .build()
        .with_context(|| format!("reading the kernel manifests under {}", root.join("kernels").display()))
}

/// Validates `cands`, storing each one's evidence as soon as it is known.
pub(crate) fn validate_all(cat: &Catalog, cands: &[Candidate], opts: &Options) -> Result<Report> {
    let started = Instant::now();
    let root = super::apply::root()?;
    let validator = build_validator(&root, opts)?;
    let mut report = Report {
        version: JSON_VERSION,
        device: opts.device.name().to_string(),
        python: validator.python().display().to_string(),
        summary: Counts::default(),
        candidates: Vec::new(),
        seconds: 0.0,
    };
    for (i, c) in cands.iter().enumerate() {
        if opts.progress {
            eprintln!("kidiom: validating {} ({}/{})", c.id, i + 1, cands.len());
        }
        let category = cat.get(&c.pattern_id).ok().flatten().map(|p| p.category);
        let input = CandidateInput::from_candidate(c, category);
        let ev = validator.validate(&input).with_context(|| format!("validating {}", c.id))?;
        let value = serde_json::to_value(&ev).context("serialising evidence")?;
        cat.set_candidate_evidence(&c.id, &value)?;
        // The latest verdict decides the status, except for a candidate already committed
        // (accepted) or stale; one judged earlier and now undecided is pending again.
        let status = match ev.verdict.kind {
            VerdictKind::Accepted => Some(CandidateStatus::Validated),
            VerdictKind::Rejected => Some(CandidateStatus::Rejected),
            VerdictKind::NeedsGpu | VerdictKind::Error
                if matches!(c.status, CandidateStatus::Validated | CandidateStatus::Rejected) =>
            {
                Some(CandidateStatus::Proposed)
            }
            VerdictKind::NeedsGpu | VerdictKind::Error => None,
        };
        if let Some(s) = status
            && s != c.status
            && !matches!(c.status, CandidateStatus::Accepted | CandidateStatus::Stale)
        {
            cat.set_candidate_status(&c.id, s, None)?;
        }
        if opts.progress {
            eprintln!("  {} ({:.1}s)", ev.verdict.describe(), ev.seconds);
        }
        report.summary.add(ev.verdict.kind);
        report.candidates.push(ev);
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

fn clip(s: &str, n: usize) -> String {
    let one = s.lines().next().unwrap_or("");
    if one.chars().count() <= n { one.to_string() } else { format!("{}...", one.chars().take(n).collect::<String>()) }
}

/// The verdict table, then the static figures and error curves.
pub(crate) fn print_report(r: &Report) -> Result<()> {
    let mut rows = vec![vec![
        "candidate".to_string(),
        "verdict".into(),
        "gate".into(),
        "seconds".into(),
        "gates (s)".into(),
        "speed".into(),
        "reason".into(),
    ]];
    for e in &r.candidates {
        let gates: Vec<String> = e
            .gates
            .iter()
            .map(|g| {
                let mark = match g.status {
                    GateStatus::Passed => "ok",
                    GateStatus::Failed => "FAIL",
                    GateStatus::Skipped => "skip",
                    GateStatus::Error => "ERR",
                };
                format!("{} {mark} {:.1}", g.gate, g.seconds)
            })
            .collect();
        rows.push(vec![
            e.candidate.clone(),
            e.verdict.kind.to_string(),
            e.verdict.gate.map(|g| g.to_string()).unwrap_or_else(|| "-".into()),
            format!("{:.1}", e.seconds),
            gates.join(", "),
            e.speed_headline().unwrap_or_else(|| "-".into()),
            clip(&e.verdict.reason, 140),
        ]);
    }
    output::table(&rows)?;
    for e in &r.candidates {
        for line in evidence_lines(e) {
            output::line(&format!("  {}: {line}", e.candidate))?;
        }
    }
    output::line(&format!(
        "{} accepted, {} rejected, {} needs-gpu, {} error ({:.1}s)",
        r.summary.accepted, r.summary.rejected, r.summary.needs_gpu, r.summary.error, r.seconds
    ))?;
    Ok(())
}

/// Lines of detail for one validation: static figures of candidates that
/// passed the CPU gates, the curve of precision rewrites, flags and logs.
pub(crate) fn evidence_lines(e: &Evidence) -> Vec<String> {
    let mut out = Vec::new();
    if matches!(e.verdict.kind, VerdictKind::Accepted | VerdictKind::NeedsGpu)
        && let Some(s) = e.gate(Gate::Static)
    {
        out.push(format!("static: {}", s.summary));
    }
    if let Some(c) = e.gate(Gate::Correctness)
        && c.status == GateStatus::Passed
    {
        out.push(format!("correctness: {}", c.summary));
    }
    if let Some(s) = e.gate(Gate::Speed)
        && s.status != GateStatus::Skipped
    {
        out.push(format!("speed: {}", s.summary));
    }
    for f in &e.verdict.flags {
        out.push(format!("flag: {f}"));
    }
    if let Some(log) = &e.verdict.log {
        out.push(format!("log: {}", clip(log.trim().lines().last().unwrap_or(""), 200)));
    }
    out
}

/// A candidate's stored evidence for `kidiom review`: the verdict, then each gate.
pub(crate) fn review_lines(evidence: &serde_json::Value) -> Option<Vec<String>> {
    let e: Evidence = serde_json::from_value(evidence.clone()).ok()?;
    let mut out = vec![format!(
        "{} (validated at {}, {:.1}s, device {})",
        e.verdict.describe(),
        crate::output::utc(e.started_at),
        e.seconds,
        e.device
    )];
    for g in &e.gates {
        out.push(format!(
            "{:<11} {:<7} {:>6.1}s  {}",
            g.gate.name(),
            format!("{:?}", g.status).to_lowercase(),
            g.seconds,
            g.summary
        ));
    }
    for f in &e.verdict.flags {
        out.push(format!("flag: {f}"));
    }
    if let Some(log) = &e.verdict.log {
        out.extend(log.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev().map(|l| format!("log: {l}")));
    }
    Some(out)
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let cfg = Config::load()?;
    let cat = a.catalog.open_existing(&cfg)?;
    if a.category.is_some() && a.patch.is_none() {
        bail!("--category is the category of a --patch edit; a catalog candidate has its pattern's");
    }
    let cands: Vec<Candidate> = if let Some(p) = &a.patch {
        let diff = if p.as_os_str() == "-" {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).context("reading the patch from stdin")?;
            s
        } else {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
        };
        if diff.trim().is_empty() {
            bail!("the patch is empty");
        }
        let root = super::apply::root()?;
        vec![store_patch(&cat, &root, &diff, a.category)?]
    } else if a.pending {
        cat.candidates(None)?.into_iter().filter(is_pending).collect()
    } else if a.ids.is_empty() {
        bail!("name candidate ids, or pass --pending or --patch FILE (see `kidiom review`)");
    } else {
        let mut v = Vec::new();
        for id in &a.ids {
            v.push(super::review::find_one(&cat, id)?);
        }
        v
    };
    if cands.is_empty() {
        if a.output.json {
            output::json(&Report {
                version: JSON_VERSION,
                device: a.device.name().into(),
                python: String::new(),
                summary: Counts::default(),
                candidates: Vec::new(),
                seconds: 0.0,
            })?;
        } else if !a.output.quiet {
            eprintln!("kidiom: no pending candidates (run `kidiom apply` first)");
        }
        return Ok(ExitCode::from(1));
    }
    let opts = Options {
        device: a.device,
        timeout: Duration::from_secs(a.timeout.max(1)),
        seeds: a.seeds,
        seed: a.seed,
        consistency: !a.no_consistency,
        python: a.python,
        progress: !a.output.quiet && !a.output.json,
        static_limits: (!a.allow_static_regression).then_some(cfg.validate.static_limits),
    };
    let report = validate_all(&cat, &cands, &opts)?;
    if a.output.json {
        output::json(&report)?;
    } else {
        print_report(&report)?;
    }
    let settled = report.summary.rejected == 0 && report.summary.error == 0;
    Ok(if settled { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
