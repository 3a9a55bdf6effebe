//! `kidiom mine`: corpora into the catalog.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use kidiom_miner::Manifest;

use crate::cmd::args::CommonArgs;
use crate::config::Config;
use crate::ops::mine::{self as driver, MineOptions, MineReport, PathInputs, Remote, manifests_for};
use crate::output;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Corpus manifests (.toml), git repositories or directories (default: kidiom.toml's corpora).
    #[arg(value_name = "MANIFEST|REPO|DIR")]
    inputs: Vec<PathBuf>,
    /// Corpus name for a path input (default: the directory's name).
    #[arg(long)]
    name: Option<String>,
    /// Revision of a git repository input (default: HEAD).
    #[arg(long)]
    rev: Option<String>,
    /// Only files matching these globs (path inputs).
    #[arg(long, value_name = "GLOB")]
    include: Vec<String>,
    /// Leave out files matching these globs (path inputs).
    #[arg(long, value_name = "GLOB")]
    exclude: Vec<String>,
    /// Decorated sites an idiom needs over all corpora.
    #[arg(long, value_name = "N")]
    min_occurrences: Option<u64>,
    /// Files an idiom needs over all corpora.
    #[arg(long, value_name = "N")]
    min_files: Option<u64>,
    /// Corpora an idiom needs.
    #[arg(long, value_name = "N")]
    min_corpora: Option<u64>,
    /// Mine edit idioms from the commits of git corpora instead of usage idioms.
    #[arg(long)]
    history: bool,
    /// With --history: only commits authored on or after this date (YYYY-MM-DD or epoch seconds).
    #[arg(long, value_name = "DATE", requires = "history")]
    since: Option<String>,
    /// With --history: mine at most the newest N commits of each corpus.
    #[arg(long, value_name = "N", requires = "history")]
    max_commits: Option<usize>,
    /// With --history, for benchmarks: read and parse the file versions the run parses (each once, as the run
    /// does) and cut nothing (the floor).
    #[arg(long, hide = true, requires = "history")]
    parse_only_floor: bool,
    /// Where files (and with --history, commits) are parsed: local, or shards on a Ray cluster (ray, ray://HOST:PORT;
    /// docs/RAY.md). The catalog is written here either way.
    #[arg(long, value_name = "EXECUTOR", default_value = "local", value_parser = super::executor)]
    executor: kidiom_exec::Executor,
    #[command(flatten)]
    common: CommonArgs,
}

impl Args {
    /// How path inputs become corpora.
    fn path_inputs(&self) -> PathInputs {
        PathInputs {
            name: self.name.clone(),
            rev: self.rev.clone(),
            include: self.include.clone(),
            exclude: self.exclude.clone(),
        }
    }
}

pub(crate) fn run(args: Args) -> Result<ExitCode> {
    let cfg = Config::load()?;
    let inputs: Vec<PathBuf> = if args.inputs.is_empty() { cfg.corpora()? } else { args.inputs.clone() };
    if inputs.is_empty() {
        anyhow::bail!(
            "nothing to mine: name a manifest, repository or directory, or list corpora under [mine] corpora in \
             kidiom.toml ({})",
            cfg.origin()
        );
    }
    let manifests = manifests_for(&inputs, &args.path_inputs())?;
    if args.history {
        return run_history(&args, &cfg, manifests);
    }
    let mut config = cfg.mine_config();
    if let Some(n) = args.min_occurrences {
        config.min_occurrences = n;
    }
    if let Some(n) = args.min_files {
        config.min_files = n;
    }
    if let Some(n) = args.min_corpora {
        config.min_corpora = n;
    }
    let progress = !args.common.output.quiet && !args.common.output.json;
    let remote = Remote::for_executor(&args.executor)?;
    let opts = MineOptions { limits: cfg.limits(), config, progress, remote };
    let mut catalog = args.common.catalog.open(&cfg)?;
    let report = driver::mine(&mut catalog, manifests, &opts)?;
    print_report(&report, args.common.output.json)?;
    Ok(exit_code(&report))
}

/// 0: every corpus mined; 1: some corpus could not be opened (the others were).
pub(crate) fn exit_code(report: &MineReport) -> ExitCode {
    if report.corpora.iter().any(|c| c.error.is_some()) { ExitCode::from(1) } else { ExitCode::SUCCESS }
}

/// A table's header row.
fn header(names: &[&str]) -> Vec<Vec<String>> {
    vec![names.iter().map(|n| n.to_string()).collect()]
}

/// Whether a corpus was mined; one that was not says why on stderr (the table leaves it out).
fn mined(name: &str, error: Option<&str>) -> bool {
    if let Some(e) = error {
        eprintln!("kidiom: corpus {name} not mined: {e}");
    }
    error.is_none()
}

pub(crate) fn print_report(report: &MineReport, json: bool) -> Result<()> {
    if json {
        return output::json(report);
    }
    let mut rows = header(&[
        "corpus",
        "kind",
        "revision",
        "files",
        "cached",
        "parsed",
        "no-kernels",
        "skipped",
        "kernels",
        "time",
    ]);
    for c in &report.corpora {
        if !mined(&c.name, c.error.as_deref()) {
            continue;
        }
        if let Some(n) = &c.note {
            eprintln!("kidiom: corpus {}: {n}", c.name);
        }
        let skipped: u64 = c.skipped.values().sum();
        rows.push(vec![
            c.name.clone(),
            c.kind.clone(),
            c.revision.chars().take(12).collect(),
            c.files.to_string(),
            c.cached.to_string(),
            c.parsed.to_string(),
            c.no_kernels.to_string(),
            skipped.to_string(),
            c.kernels.to_string(),
            format!("{:.2}s", c.seconds),
        ]);
    }
    output::table(&rows)?;
    for c in &report.corpora {
        if c.skipped.is_empty() {
            continue;
        }
        let reasons: Vec<String> = c.skipped.iter().map(|(r, n)| format!("{r} {n}")).collect();
        output::line(&format!("{}: skipped {}", c.name, reasons.join(", ")))?;
        for s in c.skipped_files.iter().take(5) {
            output::line(&format!("  {}: {}", s.path, s.reason))?;
        }
    }
    output::line(&format!(
        "catalog {}: {} usage patterns ({:.2}s)",
        display(&report.catalog),
        report.patterns,
        report.seconds
    ))
}

fn display(p: &Path) -> String {
    p.display().to_string()
}

fn run_history(args: &Args, cfg: &Config, manifests: Vec<Manifest>) -> Result<ExitCode> {
    let mut config = kidiom_miner::history::HistoryConfig { limits: cfg.limits(), ..Default::default() };
    config.max_commits = args.max_commits;
    config.parse_only = args.parse_only_floor;
    config.since = args.since.as_deref().map(crate::ops::mine::history::parse_since).transpose()?;
    let batch = std::env::var("KIDIOM_HISTORY_BATCH").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    let remote = Remote::for_executor(&args.executor)?;
    let progress = !args.common.output.quiet && !args.common.output.json;
    let opts = crate::ops::mine::history::HistoryOptions { config, progress, batch, remote };
    let mut catalog = args.common.catalog.open(cfg)?;
    let report = crate::ops::mine::history::mine(&mut catalog, manifests, &opts)?;
    print_history_report(&report, args.common.output.json)?;
    Ok(history_exit_code(&report))
}

/// The history run's table and summary (JSON with `json`).
pub(crate) fn print_history_report(report: &crate::ops::mine::history::HistoryReport, json: bool) -> Result<()> {
    if json {
        return output::json(report);
    }
    let mut rows = header(&["corpus", "revision", "commits", "cached", "mined", "files", "edits", "skipped", "time"]);
    for c in &report.corpora {
        if !mined(&c.name, c.error.as_deref()) {
            continue;
        }
        rows.push(vec![
            c.name.clone(),
            c.revision.chars().take(12).collect(),
            c.commits.to_string(),
            c.cached.to_string(),
            c.mined.to_string(),
            c.files.to_string(),
            c.edits.to_string(),
            c.skipped.values().sum::<u64>().to_string(),
            format!("{:.2}s", c.seconds),
        ]);
    }
    output::table(&rows)?;
    for c in &report.corpora {
        if !c.skipped.is_empty() {
            let reasons: Vec<String> = c.skipped.iter().map(|(r, n)| format!("{r} {n}")).collect();
            output::line(&format!("{}: skipped {}", c.name, reasons.join(", ")))?;
        }
        if c.file_versions > 0 {
            output::line(&format!(
                "{}: parsed {} distinct of {} file versions ({} incrementally)",
                c.name, c.parsed_blobs, c.file_versions, c.incremental_parses
            ))?;
        }
    }
    let s = &report.stats;
    output::line(&format!(
        "generalized {} edits in {} buckets into {} clusters, {} candidates; {} specialized, {} dropped as unsafe ({:.2}s)",
        s.edits, s.buckets, s.clusters, s.candidates, s.specialized, s.unsafe_dropped, report.generalize_seconds
    ))?;
    for r in report.rules.iter().take(15) {
        output::line(&format!("  {} ({} commits, {} edits)", r.id, r.commits, r.occurrences))?;
    }
    output::line(&format!(
        "catalog {}: {} edit patterns ({:.2}s)",
        report.catalog.display(),
        report.patterns,
        report.seconds
    ))
}

/// 0: every corpus mined; 1: some corpus could not be (the others were).
fn history_exit_code(report: &crate::ops::mine::history::HistoryReport) -> std::process::ExitCode {
    if report.corpora.iter().any(|c| c.error.is_some()) {
        std::process::ExitCode::from(1)
    } else {
        std::process::ExitCode::SUCCESS
    }
}
