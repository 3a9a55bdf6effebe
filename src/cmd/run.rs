//! `kidiom run`: the whole loop on the defaults of kidiom.toml (`ops::run`):
//! mine, then a catalog summary, then apply on kernels/ (dry run:
//! candidates only), validation of its pending candidates, and a review
//! summary.

use std::process::ExitCode;

use anyhow::Result;

use crate::cmd::args::CommonArgs;
use crate::config::Config;
use crate::ops::run::Event;
use crate::{ops, output};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Patterns to show in the summary.
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Stop after mining: no apply, no validation.
    #[arg(long)]
    no_validate: bool,
    /// Where validated kernels run: auto, cpu or cuda.
    #[arg(long, default_value = "auto", value_parser = super::named::<kidiom_validator::Device>)]
    device: kidiom_validator::Device,
    /// Where mining's extraction and validation's harness calls run: local (here), or ray / ray://HOST:PORT
    /// (tasks on a Ray cluster; see docs/RAY.md).
    #[arg(long, value_name = "EXECUTOR", default_value = "local", value_parser = super::executor)]
    executor: kidiom_validator::Executor,
    /// Time limit of one candidate's validation, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    timeout: u64,
    /// Do not reject grossly worse static figures as "predicted slower" (limits: kidiom.toml [validate.static_limits]).
    #[arg(long)]
    allow_static_regression: bool,
    /// Rewrite every site of a precision pattern with one value instead of searching sites and values
    /// (kidiom.toml [search]).
    #[arg(long)]
    no_search: bool,
    /// At the end, write the review as a static site into DIR (as `kidiom review --html DIR`).
    #[arg(long, value_name = "DIR")]
    html: Option<std::path::PathBuf>,
    #[command(flatten)]
    common: CommonArgs,
}

pub(crate) fn run(args: Args) -> Result<ExitCode> {
    let cfg = Config::load()?;
    let mut catalog = args.common.catalog.open(&cfg)?;
    let progress = !args.common.output.quiet && !args.common.output.json;
    let opts = ops::run::Options {
        top: args.top,
        no_validate: args.no_validate,
        device: args.device,
        executor: args.executor.clone(),
        timeout: std::time::Duration::from_secs(args.timeout.max(1)),
        allow_static_regression: args.allow_static_regression,
        no_search: args.no_search,
        progress_bars: progress,
    };
    let bars = crate::progress::Bars::new();
    let tell = |e: Event| {
        if !progress {
            return;
        }
        match e {
            Event::Note(m) => bars.line(&format!("kidiom: {m}")),
            Event::Searching(done, planned) => bars.searching(done, planned),
            Event::Searched(s) => {
                let _ = super::apply::print_search(s);
            }
            Event::Validating(i, n, c, ev) => bars.validating(i, n, c, ev),
        }
    };
    let report = ops::run::run(&cfg, &mut catalog, &opts, &tell)?;
    let html = match &args.html {
        Some(dir) => Some(crate::html::write_site(&catalog, &catalog.candidates(None)?, dir)?),
        None => None,
    };
    let shown = Shown { report: &report, html };
    if args.common.output.json {
        output::json(&shown)?;
    } else {
        print_summary(&shown)?;
    }
    // Some corpora may be unreachable on this machine; the loop still ran on the rest.
    let mined = report.mine.corpora.iter().filter(|c| c.error.is_none()).count();
    Ok(if mined == 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// `best by predicted speedup (roofline from CPU work profiles, H200; not measured): a 1.45x, b 1.02x`:
/// the candidates still in the running (accepted or needs-gpu), strongest first.
fn best_predicted(v: &ops::validate::Report) -> Option<String> {
    let mut best: Vec<(&str, f64, &str)> = v
        .candidates
        .iter()
        .filter(|e| {
            matches!(e.verdict.kind, kidiom_validator::VerdictKind::Accepted | kidiom_validator::VerdictKind::NeedsGpu)
        })
        .filter_map(|e| e.prediction.as_ref().map(|p| (e.candidate.as_str(), p.speedup, p.device.as_str())))
        .filter(|(_, s, _)| s.is_finite())
        .collect();
    best.sort_by(|a, b| b.1.total_cmp(&a.1));
    let device = best.first()?.2;
    let named: Vec<String> = best.iter().take(5).map(|(id, s, _)| format!("{id} {s:.2}x")).collect();
    Some(format!(
        "best by predicted speedup (a roofline over work counted on this CPU, {device}; not measured): {}",
        named.join(", ")
    ))
}

/// What `kidiom run` shows: the loop's report and the review site the
/// front end wrote from it (`--html`); also `kidiom run --json`.
#[derive(serde::Serialize)]
struct Shown<'a> {
    #[serde(flatten)]
    report: &'a ops::run::Report,
    #[serde(skip_serializing_if = "Option::is_none")]
    html: Option<crate::html::Site>,
}

/// The run's summary: mining, history, the top patterns, apply, the verdict table, the site.
fn print_summary(shown: &Shown) -> Result<()> {
    let r = shown.report;
    super::mine::print_report(&r.mine, false)?;
    if let Some(h) = &r.history {
        output::line("")?;
        super::mine::print_history_report(h, false)?;
    }
    output::line("")?;
    output::line(&format!("top {} patterns:", r.top.len()))?;
    super::catalog::print_list(&r.top, false)?;
    if let Some(a) = &r.apply {
        let n = a.candidates.len();
        output::line("")?;
        output::line(&format!("apply (dry run) on kernels/: {n} candidate{}", if n == 1 { "" } else { "s" }))?;
    }
    if let Some(v) = &r.validate {
        output::line("")?;
        output::line("review summary (kidiom review ID shows a diff beside its evidence):")?;
        super::validate::print_report(v)?;
    }
    if let Some(v) = &r.validate
        && let Some(line) = best_predicted(v)
    {
        output::line("")?;
        output::line(&line)?;
    }
    if !r.verdicts.is_empty() {
        let parts: Vec<String> = r
            .verdicts
            .iter()
            .map(|(k, n)| {
                if k == "not validated" {
                    format!("{n} {k} (alternatives on a search's front: `kidiom validate ID`)")
                } else {
                    format!("{n} {k}")
                }
            })
            .collect();
        output::line("")?;
        output::line(&format!("verdicts of this run's candidates: {} (see `kidiom review`)", parts.join(", ")))?;
    }
    if let Some(site) = &shown.html {
        output::line("")?;
        output::line(&format!("review site: {} ({} candidates)", site.index.display(), site.pages))?;
    }
    Ok(())
}
