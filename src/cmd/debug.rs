//! `kidiom debug tree|facts FILE`: what the parser and the extractors see.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use kidiom_miner::ExtractOptions;
use kidiom_syntax::{Lang, Limits};

use crate::output;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Print the syntax tree of a file (tree-sitter s-expression; syn for Rust).
    Tree(FileArgs),
    /// Print the usage facts extracted from a file, as JSON.
    Facts(FileArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct FileArgs {
    file: PathBuf,
    /// Override the language detected from the extension.
    #[arg(long, value_parser = super::named::<Lang>)]
    lang: Option<Lang>,
}

pub(crate) fn run(cmd: Command) -> Result<ExitCode> {
    let (args, facts) = match cmd {
        Command::Tree(a) => (a, false),
        Command::Facts(a) => (a, true),
    };
    let lang = args
        .lang
        .or_else(|| Lang::from_path(&args.file))
        .with_context(|| format!("{}: unknown language (use --lang)", args.file.display()))?;
    let bytes = std::fs::read(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let text = kidiom_syntax::decode(&bytes, &Limits::default())
        .map_err(|s| anyhow::anyhow!("{}: skipped: {s}", args.file.display()))?;
    if facts {
        let f = kidiom_miner::extract(lang, text, &ExtractOptions::default())
            .map_err(|s| anyhow::anyhow!("{}: {s}", args.file.display()))?;
        output::json(&f)?;
    } else {
        let t = kidiom_miner::dump_tree(lang, text).map_err(|s| anyhow::anyhow!("{}: {s}", args.file.display()))?;
        output::line(&t)?;
    }
    Ok(ExitCode::SUCCESS)
}
