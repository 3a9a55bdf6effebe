//! `kidiom apply`: catalog patterns as rewrite candidates on target files
//! (`ops::apply`), printed as unified diffs, or written with `--write`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use kidiom_patterns::{Category, Filter, Kind};

use crate::cmd::args::CommonArgs;
use crate::config::Config;
use crate::{ops, output};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Files or directories to rewrite (default: kidiom.toml's [run] targets, else kernels/).
    #[arg(value_name = "TARGET")]
    targets: Vec<PathBuf>,
    /// Only this pattern (repeatable).
    #[arg(long = "pattern", value_name = "ID")]
    patterns: Vec<String>,
    /// Only patterns of this category.
    #[arg(long, value_parser = super::named::<Category>)]
    category: Option<Category>,
    /// Only patterns of this kind (usage or edit).
    #[arg(long, value_parser = super::named::<Kind>)]
    kind: Option<Kind>,
    /// The value written into the pattern's hole (default: the most frequent usable value upstream).
    #[arg(long, value_name = "V")]
    value: Option<String>,
    /// Write the rewrites to the files (atomically), instead of printing diffs.
    #[arg(long)]
    write: bool,
    /// With --write: also rewrite files with uncommitted changes.
    #[arg(long)]
    force: bool,
    /// Precision patterns on kernels with an error curve: search which sites get which value
    /// (error under the TF32-faithful interpreter, cost from sm_90 compiles) and propose the
    /// Pareto front, instead of one value on every site. Runs the kernels; dry run only.
    #[arg(long, conflicts_with = "write")]
    search: bool,
    /// With --search: time limit of the search, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 1800, requires = "search")]
    timeout: u64,
    #[command(flatten)]
    common: CommonArgs,
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let cfg = Config::load()?;
    let mut cat = a.common.catalog.open_existing(&cfg)?;
    let root = ops::root()?;
    // no target named: where `kidiom run` and `kidiom validate` look (kidiom.toml), else kernels/
    let targets = if a.targets.is_empty() { cfg.targets() } else { a.targets.clone() };
    // a project without kernels/ has no manifests: memory hints are still placed by role,
    // precision patterns are proposed as without --search (and the report says why)
    let validator = if a.search && (root.join("kernels").is_dir() || !targets.is_empty()) {
        let mut opts = ops::apply::search_validator_options(&cfg, std::time::Duration::from_secs(a.timeout.max(1)));
        // the targets' own manifests (a user's kernels, each with its contract beside it)
        opts.targets.extend(targets.iter().map(|t| std::path::absolute(t).unwrap_or_else(|_| t.clone())));
        Some(ops::validate::build_validator(&root, &opts, None)?)
    } else {
        None
    };
    let progress = !a.common.output.quiet && !a.common.output.json;
    let note = |m: String| {
        if progress {
            eprintln!("kidiom: {m}");
        }
    };
    let req = ops::apply::Request {
        targets: &targets,
        patterns: &a.patterns,
        filter: Filter { category: a.category, kind: a.kind, hide_refactor: true, ..Default::default() },
        value: a.value.as_deref(),
        write: a.write,
        force: a.force,
        search: a.search.then(|| ops::sitesearch::Options {
            validator: validator.as_ref(),
            jobs: cfg.search.jobs(),
            rule: cfg.search.rule(),
            limits: cfg.validate.static_limits,
            progress: &note,
            measured: None,
        }),
    };
    let report = ops::apply::apply(&mut cat, &root, &req)?;
    let found = !report.candidates.is_empty();
    if a.common.output.json {
        output::json(&report)?;
    } else {
        for c in &report.candidates {
            if !a.write {
                output::raw(&c.diff)?;
            }
        }
        if !a.common.output.quiet {
            for s in &report.skipped {
                eprintln!("kidiom: skipping {}: {}", s.path.display(), s.reason);
            }
        }
        for d in &report.dropped {
            eprintln!("kidiom: dropped {} on {}: {}", d.pattern, d.path, d.reason);
        }
        if let Some(line) = report.held_back.line() {
            eprintln!("kidiom: {line}");
        }
        for d in &report.not_searched {
            eprintln!(
                "kidiom: not searched: {} on {}: {}; proposed with one value on every site, as without --search",
                d.pattern, d.path, d.reason
            );
        }
        for s in &report.searches {
            print_search(s)?;
        }
        if !a.common.output.quiet {
            let sites: u64 = report.candidates.iter().map(|c| c.sites).sum();
            eprintln!(
                "kidiom: {} candidate{} ({} site{}) from {} pattern{} on {} file{}{}; {} pattern{} without an automatic rewrite ({:.2}s)",
                report.candidates.len(),
                if report.candidates.len() == 1 { "" } else { "s" },
                sites,
                if sites == 1 { "" } else { "s" },
                report.patterns,
                if report.patterns == 1 { "" } else { "s" },
                report.files,
                if report.files == 1 { "" } else { "s" },
                if a.write { ", written" } else { "" },
                report.not_applicable.len(),
                if report.not_applicable.len() == 1 { "" } else { "s" },
                report.seconds,
            );
            for c in &report.candidates {
                eprintln!("  {}  {} site{}", c.id, c.sites, if c.sites == 1 { "" } else { "s" });
            }
        }
    }
    Ok(if found { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// A search's front, with the chosen variant marked, on stderr beside the diffs.
pub(crate) fn print_search(s: &kidiom_validator::sitesearch::SiteSearch) -> Result<()> {
    print_search_header(s)?;
    let summary: kidiom_patterns::record::SiteSummary = serde_json::from_value(serde_json::to_value(s)?)?;
    if let Some(rows) = crate::view::front_rows(&summary, s.chosen) {
        for line in output::table_lines(&rows) {
            eprintln!("  {line}");
        }
    }
    eprintln!("  chosen: {}", s.why);
    for n in &s.notes {
        eprintln!("  note: {n}");
    }
    Ok(())
}

/// A search's one-line account: what was searched, how much was measured.
pub(crate) fn print_search_header(s: &kidiom_validator::sitesearch::SiteSearch) -> Result<()> {
    eprintln!(
        "kidiom: site search of {} in {}: {} sites, values {}; {} variants measured, {} of them compiled, {} found in the cache; {:.1}s",
        s.pattern,
        s.path,
        s.sites.len(),
        s.values.join(", "),
        s.measured,
        s.compiled,
        s.cached,
        s.seconds
    );
    Ok(())
}
