//! Argument parsing, dispatch, and the mapping from failures to exit codes.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::cmd;

/// Mine optimization idioms from GPU-inference code and apply them as validated rewrites.
#[derive(Debug, Parser)]
#[command(
    name = "kidiom",
    version,
    about,
    propagate_version = true,
    after_help = "Exit codes (every command): 0 success; 1 it ran, but found nothing, or some input failed \
                  (mine/run: a corpus that could not be opened; apply: no candidate; review: none listed; \
                  validate: a candidate rejected or in error, or none to validate); 2 error (bad arguments, an \
                  unreadable, locked or corrupt catalog, a failed write). No other code. Errors are one line \
                  on stderr."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Mine usage idioms from corpora (manifests, git repositories or directories) into the catalog.
    Mine(cmd::mine::Args),
    /// Query and export the pattern catalog.
    #[command(subcommand)]
    Catalog(cmd::catalog::Command),
    /// Apply catalog patterns to targets as rewrite candidates (dry run: diffs; --write: atomic writes).
    Apply(cmd::apply::Args),
    /// List rewrite candidates, or show one's diff beside its evidence.
    Review(cmd::review::Args),
    /// Commit a candidate on the review branch (kidiom/review).
    Accept(cmd::accept::Args),
    /// Write a kernel's manifest and contract skeleton next to it (format 2), from what its source says.
    Init(cmd::init::Args),
    /// Check the unmodified kernel against its own contract, at its CPU sizes and at odd sizes.
    Check(cmd::check::Args),
    /// Validate candidates: syntax, static, correctness and speed gates, with the evidence stored.
    Validate(cmd::validate::Args),
    /// A kernel's work counted on the CPU by source line, against its floor, with the predicted time.
    Profile(cmd::profile::Args),
    /// The device model against published GPU measurements (`--check bench/published`).
    Predict(cmd::predict::Args),
    /// Serve the catalog, rewrites and validation to an agent over MCP (stdio).
    Mcp(crate::mcp::Args),
    /// Run the whole loop on the defaults of kidiom.toml.
    Run(cmd::run::Args),
    /// Debugging aids (parse trees, extracted facts).
    #[command(subcommand)]
    Debug(cmd::debug::Command),
    /// The worker side of `mine --executor ray`: mines one shard's job file, prints its result (docs/RAY.md).
    #[command(hide = true)]
    Shard(cmd::shard::Args),
    /// The GPU gate's own process: two spec directories in, one JSON line out (ARCHITECTURE, validator).
    #[command(hide = true)]
    GpuGate(cmd::gpu_gate::Args),
}

/// Exit codes: 0 success, 1 ran but found nothing / some input failed, 2 error.
pub(crate) const EXIT_ERROR: u8 = 2;

pub(crate) fn run(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_ERROR } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        Command::Mine(a) => cmd::mine::run(a),
        Command::Catalog(c) => cmd::catalog::run(c),
        Command::Apply(a) => cmd::apply::run(a),
        Command::Review(a) => cmd::review::run(a),
        Command::Accept(a) => cmd::accept::run(a),
        Command::Init(a) => cmd::init::run(a),
        Command::Check(a) => cmd::check::run(a),
        Command::Validate(a) => cmd::validate::run(a),
        Command::Profile(a) => cmd::profile::run(a),
        Command::Predict(a) => cmd::predict::run(a),
        Command::Mcp(a) => crate::mcp::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Debug(c) => cmd::debug::run(c),
        Command::Shard(a) => cmd::shard::run(a),
        Command::GpuGate(a) => cmd::gpu_gate::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("kidiom: error: {}", one_line(&e));
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// One line: the outermost context, then each cause that the line does not
/// already say (an error may print its source and also return it).
pub(crate) fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain().map(|c| c.to_string()) {
        if cause.is_empty() || line.ends_with(&cause) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&cause);
    }
    line
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_line_joins_the_chain_and_drops_a_repeated_tail() {
        let e = anyhow::anyhow!("inner").context("middle").context("outer");
        assert_eq!(one_line(&e), "outer: middle: inner");
        // a context that already ends with its cause (as a foreign error may print it)
        let e = anyhow::anyhow!("No such file").context("reading k.py: No such file");
        assert_eq!(one_line(&e), "reading k.py: No such file");
    }

    fn parses(line: &str) -> bool {
        Cli::try_parse_from(line.split_whitespace()).is_ok()
    }

    #[test]
    fn grammar() {
        for ok in [
            "kidiom mine corpora/fla.toml",
            "kidiom mine . --name x --rev HEAD~1 --db /tmp/c.sqlite --json",
            "kidiom catalog list --language python --category precision --kind usage --min-support 3 --json",
            "kidiom catalog show py-keyword-tl-dot-input-precision",
            "kidiom catalog search tl.dot --limit 5",
            "kidiom catalog stats --json",
            "kidiom run --json",
            "kidiom debug tree a.py",
            "kidiom validate --pending --device cpu --timeout 60 --json",
            "kidiom validate abc def --seeds 1 --seed 7 --no-consistency",
            "kidiom validate --patch edit.diff --category precision --device cpu",
            "kidiom validate --patch -",
            "kidiom accept abc --force",
            "kidiom mcp --allow-exec --allow-write",
        ] {
            assert!(parses(ok), "{ok}");
        }
        for bad in [
            "kidiom",
            "kidiom mine --min-occurrences x",
            "kidiom catalog list --category nope",
            "kidiom catalog show",
            "kidiom frobnicate",
            "kidiom validate --device tpu",
            "kidiom validate abc --pending",
            "kidiom validate --category memory",
            "kidiom validate --patch x.diff abc",
            "kidiom validate --patch x.diff --category nope",
        ] {
            assert!(!parses(bad), "{bad}");
        }
    }
}
