//! `kidiom shard JOB.json` (hidden): the worker side of mining on a Ray
//! cluster. A task of the mining run's fleet runs it on a node with the
//! job file and the files it names in a scratch directory; it mines them
//! as a local run would and prints one JSON line, `{"seconds", "result"}`
//! (docs/RAY.md has both formats). It writes nothing else anywhere.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::ops::mine::{ShardJob, run_shard};
use crate::output;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The job: a facts shard (files to mine) or a history shard (commits to mine).
    job: PathBuf,
}

pub(crate) fn run(args: Args) -> Result<ExitCode> {
    let text = std::fs::read(&args.job).with_context(|| format!("reading {}", args.job.display()))?;
    let job: ShardJob =
        serde_json::from_slice(&text).with_context(|| format!("{}: not a shard job", args.job.display()))?;
    if let Ok(needle) = std::env::var("KIDIOM_SHARD_CRASH")
        && !needle.is_empty()
        && String::from_utf8_lossy(&text).contains(&needle)
    {
        // test seam: a shard that dies mid-run (the run must fail and leave the catalog as it was)
        std::process::abort();
    }
    let dir = args.job.parent().map(PathBuf::from).unwrap_or_default();
    let out = run_shard(job, &dir)?;
    // one line: the driver reads the last line of stdout
    output::line(&serde_json::to_string(&out)?)?;
    Ok(ExitCode::SUCCESS)
}
