//! `kidiom accept`: commit a candidate on the review branch (`ops::accept`):
//! only a candidate whose verdict is `accepted`, unless `--force`.

use std::process::ExitCode;

use crate::ops::branch::DEFAULT_BRANCH;
use anyhow::Result;

use crate::cmd::args::CommonArgs;
use crate::config::Config;
use crate::{ops, output};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The candidate id (or a unique prefix).
    id: String,
    /// The review branch.
    #[arg(long, default_value = DEFAULT_BRANCH)]
    branch: String,
    /// Commit it even though its verdict is not `accepted` (needs-gpu, rejected, error, or never validated).
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    common: CommonArgs,
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let cfg = Config::load()?;
    let cat = a.common.catalog.open_existing(&cfg)?;
    let (id, commit) = ops::accept::accept(&cat, &ops::root()?, &a.id, &a.branch, a.force)?;
    if a.common.output.json {
        output::json(&serde_json::json!({ "candidate": id, "branch": a.branch, "commit": commit }))?;
    } else {
        output::line(&format!("accepted {} as {} on {}", id, &commit[..12.min(commit.len())], a.branch))?;
    }
    Ok(ExitCode::SUCCESS)
}
