//! `kidiom validate`: rewrite candidates through the syntax, static,
//! correctness and speed gates (`ops::validate`), with the evidence stored
//! next to each diff and printed as a verdict table.
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
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kidiom_patterns::{Candidate, Category};
use kidiom_validator::{Device, Evidence, Gate, GateStatus, VerdictKind};

use crate::cmd::args::CommonArgs;
use crate::config::Config;
use crate::ops::validate::{Options, Report};
use crate::{ops, output};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Candidate ids (or unique prefixes).
    #[arg(value_name = "ID")]
    ids: Vec<String>,
    /// Every pending candidate (status proposed or applied).
    #[arg(long, conflicts_with = "ids")]
    pending: bool,
    /// A state-precision variant (a manifest under kernels/ with `variant_of` and `[storage]`, e.g.
    /// kda.decode.state-bf16), as it is in the tree, judged by the precision gate; repeatable;
    /// `all` names every variant.
    #[arg(long = "kernel", value_name = "VARIANT", conflicts_with_all = ["ids", "pending", "patch"])]
    kernels: Vec<String>,
    /// A unified diff (an edit of your own, not from the catalog) to store as a
    /// candidate of the pattern `manual` and validate; `-` reads it from stdin.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["ids", "pending"])]
    patch: Option<PathBuf>,
    /// The category of the --patch edit (numeric flags may change only under `precision`).
    #[arg(long, requires = "patch", value_parser = super::named::<Category>)]
    category: Option<Category>,
    /// Where kernels run: auto (a GPU if the harness finds one), cpu, or cuda.
    #[arg(long, default_value = "auto", value_parser = super::named::<Device>)]
    device: Device,
    /// Where the harness runs: local (subprocesses here), or ray / ray://HOST:PORT (tasks on a Ray cluster:
    /// CPU gates as CPU tasks, GPU gates with one GPU each; see docs/RAY.md).
    #[arg(long, value_name = "EXECUTOR", default_value = "local", value_parser = super::executor)]
    executor: kidiom_validator::Executor,
    /// Time limit of one candidate, all its gates together, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    timeout: u64,
    /// Fresh random seeds of the correctness gate.
    #[arg(long, default_value_t = kidiom_validator::DEFAULT_SEEDS)]
    seeds: u32,
    /// Base seed of the correctness gate (default: fresh per run, shared by its candidates).
    #[arg(long)]
    seed: Option<u64>,
    /// Leave out the prefill(T) + decode(M) == prefill(T + M) check (faster).
    #[arg(long)]
    no_consistency: bool,
    /// Time GPU kernels with the harness's bench, which imports the candidate into the timing process,
    /// instead of kidiom's own GPU gate (`kidiom gpu-gate`: the candidate's device code only). Its evidence
    /// is marked untrusted (a flag on the verdict).
    #[arg(long)]
    untrusted_bench: bool,
    /// The verdict table with every field in full (full ids, each gate's seconds); otherwise it fits 120 columns.
    #[arg(long)]
    wide: bool,
    /// Do not reject grossly worse static figures as "predicted slower" (limits: kidiom.toml [validate.static_limits]).
    #[arg(long)]
    allow_static_regression: bool,
    /// The Python that runs the harness (default: $KIDIOM_PYTHON, .venv/bin/python, python3).
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
    #[command(flatten)]
    common: CommonArgs,
}

fn clip(s: &str, n: usize) -> String {
    let one = s.lines().next().unwrap_or("");
    if one.chars().count() <= n { one.to_string() } else { format!("{}...", one.chars().take(n).collect::<String>()) }
}

/// The verdict table, then the static figures and error curves. The table
/// fits [`output::WIDTH`] columns (short ids; the reason cut to the room
/// left, whole in the lines below and in `--json`), or shows every field in
/// full with `wide`.
pub(crate) fn print_report(r: &Report, wide: bool) -> Result<()> {
    let head: &[&str] = if wide {
        &["candidate", "verdict", "gate", "seconds", "gates (s)", "speed", "predicted", "reason"]
    } else {
        &["id", "pattern", "verdict", "seconds", "predicted", "reason"]
    };
    let mut rows = vec![head.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    for e in &r.candidates {
        let predicted = e.prediction.as_ref().map(|p| format!("{:.2}x", p.speedup)).unwrap_or_else(|| "-".into());
        rows.push(if wide {
            vec![
                e.candidate.clone(),
                e.verdict.kind.to_string(),
                e.verdict.gate.map(|g| g.to_string()).unwrap_or_else(|| "-".into()),
                format!("{:.1}", e.seconds),
                gate_times(e),
                e.speed_headline().unwrap_or_else(|| "-".into()),
                predicted,
                clip(&e.verdict.reason, 140),
            ]
        } else {
            vec![
                kidiom_patterns::short_id(&e.candidate).to_string(),
                e.pattern.clone(),
                crate::view::verdict_text(&e.verdict),
                format!("{:.1}", e.seconds),
                predicted,
                e.verdict.reason.lines().next().unwrap_or("").to_string(),
            ]
        });
    }
    let rows = if wide {
        rows
    } else {
        // the reason takes what is left; the pattern keeps its start
        output::fit(&rows, output::WIDTH, &[(5, output::Keep::Head), (1, output::Keep::Head)], 24)
    };
    output::table(&rows)?;
    for e in &r.candidates {
        if wide {
            for line in evidence_lines(e) {
                output::line(&format!("  {}: {line}", e.candidate))?;
            }
            continue;
        }
        // each detail wrapped to the width under its short id
        let who = kidiom_patterns::short_id(&e.candidate);
        for line in std::iter::once(format!("gates (s): {}", gate_times(e))).chain(evidence_lines(e)) {
            for l in output::wrap_words(&format!("  {who}: "), &line, output::WIDTH) {
                output::line(&l)?;
            }
        }
    }
    let unverified =
        if r.summary.unverified > 0 { format!(", {} unverified", r.summary.unverified) } else { String::new() };
    output::line(&format!(
        "{} accepted, {} rejected, {} needs-gpu{unverified}, {} error ({:.1}s)",
        r.summary.accepted, r.summary.rejected, r.summary.needs_gpu, r.summary.error, r.seconds
    ))?;
    Ok(())
}

/// Each gate's status and seconds: `syntax ok 0.0, static ok 4.3, ...`.
fn gate_times(e: &Evidence) -> String {
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
    gates.join(", ")
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

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let cfg = Config::load()?;
    // an edit of your own needs no mined catalog: one is made to keep its evidence
    let cat = if a.patch.is_some() { a.common.catalog.open(&cfg)? } else { a.common.catalog.open_existing(&cfg)? };
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
        vec![ops::candidates::store_patch(&cat, &ops::root()?, &diff, a.category)?]
    } else if !a.kernels.is_empty() {
        let root = ops::root()?;
        let all = kidiom_validator::Kernels::load(&root, "kernels").context("reading the kernels' manifests")?;
        if a.kernels.iter().any(|k| k == "all") {
            ops::candidates::store_variants(&cat, &root)?
        } else {
            let mut v = Vec::new();
            for name in &a.kernels {
                v.push(ops::candidates::store_variant(&cat, &root, &all, name)?);
            }
            v
        }
    } else if a.pending {
        cat.candidates(None)?.into_iter().filter(ops::candidates::is_pending).collect()
    } else if a.ids.is_empty() {
        bail!("name candidate ids, or pass --pending, --patch FILE or --kernel VARIANT (see `kidiom review`)");
    } else {
        let mut v = Vec::new();
        for id in &a.ids {
            v.push(ops::candidates::find_one(&cat, id)?);
        }
        v
    };
    if cands.is_empty() {
        if a.common.output.json {
            output::json(&Report::empty(a.device))?;
        } else if !a.common.output.quiet {
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
        executor: a.executor,
        static_limits: (!a.allow_static_regression).then_some(cfg.validate.static_limits),
        device_model: cfg.device_model()?,
        expected_errors: cfg.expected_errors(),
        untrusted_bench: a.untrusted_bench,
        targets: cfg.targets(),
    };
    let progress = !a.common.output.quiet && !a.common.output.json;
    let report = ops::validate::validate_all(&cat, &cands, &opts, &mut |i, c, ev| {
        if progress {
            print_progress(i, cands.len(), c, ev);
        }
    })?;
    if a.common.output.json {
        output::json(&report)?;
    } else {
        print_report(&report, a.wide)?;
    }
    let settled = report.summary.rejected == 0 && report.summary.error == 0;
    Ok(if settled { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// One candidate's validation as it starts and ends, on stderr.
pub(crate) fn print_progress(i: usize, n: usize, c: &Candidate, ev: Option<&Evidence>) {
    match ev {
        None => eprintln!("kidiom: validating {} ({}/{n})", c.id, i + 1),
        // candidates run at once: each verdict names its candidate
        Some(ev) => eprintln!("  {}: {} ({:.1}s)", c.id, ev.verdict.describe(), ev.seconds),
    }
}
