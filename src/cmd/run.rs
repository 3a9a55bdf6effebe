//! `kidiom run`: the whole loop on the defaults of kidiom.toml. For now the
//! loop is mine, then a catalog summary.

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
    #[command(flatten)]
    catalog: CatalogArgs,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(serde::Serialize)]
struct RunReport<'a> {
    mine: &'a driver::MineReport,
    top: &'a [kidiom_patterns::Pattern],
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
    if args.output.json {
        output::json(&RunReport { mine: &report, top: &top })?;
    } else {
        super::mine::print_report(&report, false)?;
        output::line("")?;
        output::line(&format!("top {} patterns:", top.len()))?;
        super::catalog::print_list(&top, false)?;
    }
    // Some corpora may be unreachable on this machine; the loop still ran on the rest.
    let mined = report.corpora.iter().filter(|c| c.error.is_none()).count();
    Ok(if mined == 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
