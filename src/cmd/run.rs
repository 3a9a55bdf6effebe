//! `kidiom run`: the whole loop on the defaults of kidiom.toml: mine, then a
//! catalog summary, then `kidiom apply` on kernels/ (dry run: candidates
//! only), `kidiom validate` of every pending candidate, and a review summary.

use std::process::ExitCode;

use anyhow::Result;
use kidiom_patterns::Filter;

use super::{CatalogArgs, OutputArgs};
use crate::config::Config;
use crate::driver::{self, MineOptions};
use crate::output;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Patterns to show in the summary.
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Stop after mining: no apply, no validation.
    #[arg(long)]
    no_validate: bool,
    /// Where validated kernels run: auto, cpu or cuda.
    #[arg(long, default_value = "auto", value_parser = super::validate::parse_device)]
    device: kidiom_validator::Device,
    /// Time limit of one candidate's validation, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    timeout: u64,
    #[command(flatten)]
    catalog: CatalogArgs,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(serde::Serialize)]
struct RunReport<'a> {
    mine: &'a driver::MineReport,
    top: &'a [kidiom_patterns::Pattern],
    /// `kidiom apply --json` on kernels/ (dry run), when the loop went on.
    #[serde(skip_serializing_if = "Option::is_none")]
    apply: Option<serde_json::Value>,
    /// The validation of every pending candidate.
    #[serde(skip_serializing_if = "Option::is_none")]
    validate: Option<&'a super::validate::Report>,
}

/// `kidiom apply --json` (dry run on kernels/) as a subprocess: its candidates are stored in
/// the catalog; its report comes back as JSON (exit 1 means no candidate, not a failure).
fn apply_dry_run(db: &std::path::Path) -> Result<serde_json::Value> {
    use anyhow::Context;
    let exe = std::env::current_exe().context("locating the kidiom binary")?;
    let out = std::process::Command::new(exe)
        .args(["apply", "kernels", "--json", "-q", "--db"])
        .arg(db)
        .output()
        .context("running kidiom apply")?;
    if !matches!(out.status.code(), Some(0 | 1)) {
        anyhow::bail!("kidiom apply failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    serde_json::from_slice(&out.stdout).context("reading kidiom apply's JSON")
}

pub(crate) fn run(args: Args) -> Result<ExitCode> {
    let cfg = Config::load()?;
    let manifests =
        super::mine::manifests_for(&cfg.mine.corpora.iter().map(|p| cfg.resolve(p)).collect::<Vec<_>>(), None)?;
    if manifests.is_empty() {
        anyhow::bail!("kidiom.toml lists no corpora under [mine] corpora");
    }
    let opts = MineOptions {
        limits: cfg.limits(),
        config: cfg.mine_config(),
        progress: !args.output.quiet && !args.output.json,
    };
    let mut catalog = args.catalog.open(&cfg)?;
    let report = driver::mine(&mut catalog, manifests, &opts)?;
    let top = catalog.list(&Filter { limit: Some(args.top), ..Default::default() })?;
    let progress = !args.output.quiet && !args.output.json;
    let (mut applied, mut validated) = (None, None);
    if !args.no_validate && std::path::Path::new("kernels").is_dir() {
        if progress {
            eprintln!("kidiom: applying the catalog to kernels/ (dry run)");
        }
        applied = Some(apply_dry_run(&args.catalog.path(&cfg))?);
        let pending: Vec<_> = catalog.candidates(None)?.into_iter().filter(super::validate::is_pending).collect();
        let vopts = super::validate::Options {
            device: args.device,
            timeout: std::time::Duration::from_secs(args.timeout.max(1)),
            seeds: 3,
            seed: None,
            consistency: true,
            python: None,
            progress,
        };
        if !pending.is_empty() {
            validated = Some(super::validate::validate_all(&catalog, &pending, &vopts)?);
        }
    }
    if args.output.json {
        output::json(&RunReport { mine: &report, top: &top, apply: applied, validate: validated.as_ref() })?;
    } else {
        super::mine::print_report(&report, false)?;
        output::line("")?;
        output::line(&format!("top {} patterns:", top.len()))?;
        super::catalog::print_list(&top, false)?;
        if let Some(a) = &applied {
            let n = a["candidates"].as_array().map(Vec::len).unwrap_or(0);
            output::line("")?;
            output::line(&format!("apply (dry run) on kernels/: {n} candidate{}", if n == 1 { "" } else { "s" }))?;
        }
        if let Some(v) = &validated {
            output::line("")?;
            output::line("review summary (kidiom review ID shows a diff beside its evidence):")?;
            super::validate::print_report(v)?;
        }
    }
    // Some corpora may be unreachable on this machine; the loop still ran on the rest.
    let mined = report.corpora.iter().filter(|c| c.error.is_none()).count();
    Ok(if mined == 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
