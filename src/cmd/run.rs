//! `kidiom run`: the whole loop on the defaults of kidiom.toml: mine, then a
//! catalog summary, then `kidiom apply` on kernels/ (dry run: candidates
//! only), `kidiom validate` of its pending candidates, and a review summary.

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
    catalog: CatalogArgs,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(serde::Serialize)]
struct RunReport<'a> {
    mine: &'a driver::MineReport,
    /// The history run (edit idioms), when kidiom.toml asks for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    history: Option<&'a crate::history::HistoryReport>,
    top: &'a [kidiom_patterns::Pattern],
    /// The dry-run `apply` on kernels/, when the loop went on.
    #[serde(skip_serializing_if = "Option::is_none")]
    apply: Option<serde_json::Value>,
    /// Corpora this machine could not reach, filled in from the shipped snapshot.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    snapshot: Vec<crate::snapshot::Filled>,
    /// Verdict counts of this run's candidates, earlier runs' verdicts included.
    verdicts: &'a std::collections::BTreeMap<String, usize>,
    /// The validation of this run's pending candidates.
    #[serde(skip_serializing_if = "Option::is_none")]
    validate: Option<&'a super::validate::Report>,
    /// The review site written with `--html`.
    #[serde(skip_serializing_if = "Option::is_none")]
    html: Option<&'a crate::html::Site>,
}

/// Whether a candidate needs this run's validation: pending, and not
/// already judged `needs-gpu` on a machine that still has no GPU.
/// A site search's alternatives on its front wait for `kidiom validate ID`;
/// the loop validates its choice and the all-sites variants it compares with.
fn worth_validating(c: &kidiom_patterns::Candidate, device: kidiom_validator::Device) -> bool {
    let roles = crate::sitesearch::roles(c);
    if !roles.is_empty() && !roles.iter().any(|r| r == "chosen" || r == "all-sites") {
        return false;
    }
    use kidiom_validator::Device;
    let gpu_here = match device {
        Device::Cuda => true,
        Device::Auto => std::path::Path::new("/dev/nvidiactl").exists(),
        Device::Cpu => false,
    };
    let waiting_for_gpu = c.evidence["verdict"]["kind"] == "needs-gpu";
    super::validate::is_pending(c) && (gpu_here || !waiting_for_gpu)
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
    let report = driver::mine(&mut catalog, manifests.clone(), &opts)?;
    let history = if cfg.mine.history {
        let git: Vec<_> = manifests.iter().filter(|m| m.kind == kidiom_miner::SourceKind::Git).cloned().collect();
        let hopts = crate::history::HistoryOptions {
            config: kidiom_miner::history::HistoryConfig { limits: cfg.limits(), ..Default::default() },
            progress: !args.output.quiet && !args.output.json,
            batch: 256,
        };
        Some(crate::history::mine(&mut catalog, git, &hopts)?)
    } else {
        None
    };
    // Git corpora this machine could not reach (or read only through a non-git fallback):
    // their usage and edit idioms from the shipped snapshot.
    let mut filled = Vec::new();
    if let Some(snap) = cfg.mine.snapshot.as_ref().map(|p| cfg.resolve(p)) {
        let mut gaps: Vec<(String, Vec<kidiom_patterns::Kind>)> = Vec::new();
        for m in manifests.iter().filter(|m| m.kind == kidiom_miner::SourceKind::Git) {
            let mut kinds = Vec::new();
            if report.corpora.iter().any(|c| c.name == m.name && c.error.is_some()) {
                kinds.push(kidiom_patterns::Kind::Usage);
            }
            let history_missing = history
                .as_ref()
                .is_some_and(|h| h.corpora.iter().find(|c| c.name == m.name).is_none_or(|c| c.error.is_some()));
            if history_missing {
                kinds.push(kidiom_patterns::Kind::Edit);
            }
            if !kinds.is_empty() {
                gaps.push((m.name.clone(), kinds));
            }
        }
        if !gaps.is_empty() && !snap.exists() {
            eprintln!("kidiom: no snapshot at {} to fill in {} unreachable corpora", snap.display(), gaps.len());
        } else {
            filled = crate::snapshot::fill(&mut catalog, &snap, &manifests, &gaps)?;
            if !args.output.quiet && !args.output.json {
                for f in &filled {
                    eprintln!("kidiom: {}", crate::snapshot::describe(f, &snap));
                }
            }
        }
    }
    let top = catalog.list(&Filter { limit: Some(args.top), hide_refactor: true, ..Default::default() })?;
    let progress = !args.output.quiet && !args.output.json;
    let (mut applied, mut validated) = (None, None);
    let mut verdicts: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    if !args.no_validate && std::path::Path::new("kernels").is_dir() {
        if progress {
            eprintln!("kidiom: applying the catalog to kernels/ (dry run)");
        }
        let root = super::apply::root()?;
        let kernels = [root.join("kernels")];
        let validator = if cfg.search.enabled && !args.no_search {
            let opts =
                super::apply::search_validator_options(&cfg, std::time::Duration::from_secs(args.timeout.max(1) * 3));
            Some(super::validate::build_validator(&root, &opts)?)
        } else {
            None
        };
        let req = super::apply::Request {
            targets: &kernels,
            patterns: &[],
            // renames and API refactors are history, not optimizations to propose
            filter: Filter { hide_refactor: true, ..Default::default() },
            value: None,
            write: false,
            force: false,
            quiet: !progress,
            search: validator.as_ref().map(|v| crate::sitesearch::Options {
                validator: v,
                jobs: cfg.search.jobs(),
                rule: cfg.search.rule(),
                limits: cfg.validate.static_limits,
                progress,
            }),
        };
        let report = super::apply::apply(&mut catalog, &root, &req)?;
        if progress {
            for s in &report.searches {
                super::apply::print_search(s)?;
            }
        }
        applied = Some(serde_json::to_value(&report)?);
        // This run's candidates on kernels/ (other candidates in the catalog, e.g. from
        // `kidiom apply` on another tree, are left to `kidiom validate`).
        let ours: std::collections::HashSet<&str> = report.candidates.iter().map(|c| c.id.as_str()).collect();
        let pending: Vec<_> = catalog
            .candidates(None)?
            .into_iter()
            .filter(|c| ours.contains(c.id.as_str()) && worth_validating(c, args.device))
            .collect();
        let vopts = super::validate::Options {
            device: args.device,
            timeout: std::time::Duration::from_secs(args.timeout.max(1)),
            seeds: 3,
            seed: None,
            consistency: true,
            python: None,
            progress,
            static_limits: (!args.allow_static_regression).then_some(cfg.validate.static_limits),
        };
        if !pending.is_empty() {
            validated = Some(super::validate::validate_all(&catalog, &pending, &vopts)?);
        }
        // Verdicts of this run's candidates, including those judged by earlier runs.
        for c in catalog.candidates(None)?.iter().filter(|c| ours.contains(c.id.as_str())) {
            let kind = c.evidence["verdict"]["kind"].as_str().unwrap_or("not validated").to_string();
            *verdicts.entry(kind).or_default() += 1;
        }
    }
    let site = match &args.html {
        Some(dir) => Some(crate::html::write_site(&catalog, &catalog.candidates(None)?, dir)?),
        None => None,
    };
    if args.output.json {
        output::json(&RunReport {
            mine: &report,
            history: history.as_ref(),
            snapshot: filled,
            top: &top,
            verdicts: &verdicts,
            apply: applied,
            validate: validated.as_ref(),
            html: site.as_ref(),
        })?;
    } else {
        super::mine::print_report(&report, false)?;
        if let Some(h) = &history {
            output::line("")?;
            crate::history::print_report(h, false)?;
        }
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
        if !verdicts.is_empty() {
            let parts: Vec<String> = verdicts
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
        if let Some(site) = &site {
            output::line("")?;
            output::line(&format!("review site: {} ({} candidates)", site.index.display(), site.pages))?;
        }
    }
    // Some corpora may be unreachable on this machine; the loop still ran on the rest.
    let mined = report.corpora.iter().filter(|c| c.error.is_none()).count();
    Ok(if mined == 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
