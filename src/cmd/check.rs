//! `kidiom check [PATH]`: the unmodified kernel against its own contract
//! (`ops::check`), what validation does first for every kernel.
//!
//! Exit codes: 0 every kernel meets its contract; 1 some does not, or could
//! not be checked (the reason is printed); 2 the command failed.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use kidiom_validator::{ContractOutcome, ContractReport};

use crate::cmd::args::{HarnessArgs, OutputArgs};
use crate::config::Config;
use crate::{ops, output};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A kernel file, its manifest, or a folder of them (default: every kernel of kernels/ and of
    /// kidiom.toml's [run] targets).
    #[arg(value_name = "PATH")]
    path: Option<PathBuf>,
    #[command(flatten)]
    harness: HarnessArgs,
    #[command(flatten)]
    output: OutputArgs,
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let cfg = Config::load()?;
    let opts = ops::check::Options { path: a.path, python: a.harness.python.clone(), timeout: a.harness.timeout() };
    let reports = ops::check::check(&cfg, &opts)?;
    if a.output.json {
        output::json(&serde_json::json!({"version": 1, "contracts": reports}))?;
    } else {
        for r in &reports {
            print_one(r)?;
        }
    }
    let all_passed = reports.iter().all(|r| r.outcome == ContractOutcome::Passed);
    Ok(if all_passed { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn print_one(r: &ContractReport) -> Result<()> {
    let at = format!(
        "{} case{} at the manifest's sizes, {} at odd sizes{}",
        r.cases,
        if r.cases == 1 { "" } else { "s" },
        r.odd_cases,
        if r.cached { "; remembered from an earlier check of the same bytes" } else { "" }
    );
    let line = match (&r.outcome, r.problem()) {
        (_, Some(problem)) => format!("{} ({}): {problem}", r.kernel, r.source),
        (ContractOutcome::Passed, _) => {
            format!("{} ({}): the unmodified kernel meets its contract ({at}, {:.1} s)", r.kernel, r.source, r.seconds)
        }
        (ContractOutcome::Skipped(why), _) => format!("{} ({}): not checked here: {why}", r.kernel, r.source),
        (ContractOutcome::Error(log), _) => format!("{} ({}): the check did not finish: {log}", r.kernel, r.source),
        (_, None) => format!("{} ({}): failed", r.kernel, r.source),
    };
    output::line(&line)?;
    if r.outcome == ContractOutcome::Passed && !r.guesses.is_empty() {
        let g: Vec<&str> = r.guesses.keys().map(String::as_str).collect();
        output::line(&format!(
            "  the contract's GUESSES ({}) hold at both sets of sizes as the contract now says them; delete each \
             once you have checked it",
            g.join(", ")
        ))?;
    }
    if let Some(why) = &r.odd_inconclusive {
        output::line(&format!("  the odd sizes proved nothing where {why}"))?;
    }
    for f in r.failures.iter().skip(1).take(4) {
        output::line(&format!("  also: {f}"))?;
    }
    Ok(())
}
