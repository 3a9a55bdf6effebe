//! `kidiom catalog import FILE`: merge an exported catalog (format
//! `kidiom-patterns`, see patterns/README.md) into this one, idempotently.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use kidiom_patterns::Kind;

use crate::cmd::args::CommonArgs;
use crate::config::Config;
use crate::output;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The exported catalog (`kidiom catalog export --format json`).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Only the support of this corpus (repeatable; default: every corpus in the file).
    #[arg(long, value_name = "NAME")]
    corpus: Vec<String>,
    /// Only patterns of this kind (usage or edit).
    #[arg(long, value_parser = super::named::<kidiom_patterns::Kind>)]
    kind: Option<Kind>,
    #[command(flatten)]
    common: CommonArgs,
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let cfg = Config::load()?;
    let file = crate::ops::snapshot::read_catalog_file(&a.file)?;
    if let Some(missing) = a.corpus.iter().find(|n| !file.corpora.iter().any(|c| &c.name == *n)) {
        anyhow::bail!(
            "{} has no corpus {missing:?} (it has {})",
            a.file.display(),
            file.corpora.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
        );
    }
    let kinds: Vec<Kind> = match a.kind {
        Some(k) => vec![k],
        None => vec![Kind::Usage, Kind::Edit],
    };
    let mut cat = a.common.catalog.open(&cfg)?;
    let tx = cat.begin()?;
    let corpora = (!a.corpus.is_empty()).then_some(a.corpus.as_slice());
    let report = tx.import(&file, &a.file.display().to_string(), corpora, &kinds)?;
    tx.commit()?;
    if a.common.output.json {
        output::json(&report)?;
    } else if !a.common.output.quiet {
        output::line(&format!(
            "imported {} patterns from {} ({} new, {} merged; {} usage, {} edit){}",
            report.added + report.merged,
            a.file.display(),
            report.added,
            report.merged,
            report.usage,
            report.edit,
            if file.snapshot { "; a snapshot: examples without their source lines" } else { "" }
        ))?;
        for s in &report.skipped {
            output::line(&format!("  skipped {s}"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
