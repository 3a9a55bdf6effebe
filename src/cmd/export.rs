//! `kidiom catalog export`: ast-grep rules, SARIF findings or JSON.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use kidiom_patterns::export::{Finding, astgrep_rules, sarif_report};
use kidiom_patterns::{CatalogFile, ExportedCorpus, Filter, Pattern};
use kidiom_rewriter::{Rewrite, RewriteSpec};

use crate::cmd::args::CatalogArgs;
use crate::config::Config;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// ast-grep YAML rules (`ast-grep scan --rule FILE`).
    AstGrep,
    /// SARIF 2.1.0 findings on the targets.
    Sarif,
    /// The patterns as JSON.
    Json,
}

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// ast-grep, sarif or json.
    #[arg(long, value_enum)]
    format: Format,
    /// Write here instead of stdout.
    #[arg(long, value_name = "PATH")]
    out: Option<PathBuf>,
    /// SARIF: files or directories to scan (default: kernels/).
    #[arg(value_name = "TARGET")]
    targets: Vec<PathBuf>,
    /// JSON: only the support of this corpus (repeatable; default: every corpus).
    #[arg(long, value_name = "NAME")]
    corpus: Vec<String>,
    /// JSON: only patterns of this kind (usage or edit).
    #[arg(long, value_parser = super::named::<kidiom_patterns::Kind>)]
    kind: Option<kidiom_patterns::Kind>,
    /// JSON: a snapshot a repository may carry: templates, counts, values and references
    /// (corpus, revision, path, line, commit id), no upstream source lines or commit messages.
    #[arg(long)]
    snapshot: bool,
    #[command(flatten)]
    catalog: CatalogArgs,
}

/// 1-based line and column (in characters) of byte `at`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, col)
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let cfg = Config::load()?;
    let cat = a.catalog.open_existing(&cfg)?;
    let patterns: Vec<Pattern> =
        cat.list(&Filter { kind: a.kind, limit: Some(usize::MAX / 2), ..Default::default() })?;
    let (text, n) = match a.format {
        Format::Json => {
            // the patterns as mined: a catalog importing the file merges same-rewrite patterns itself
            let patterns = cat.originals(a.kind)?;
            let mut corpora: Vec<ExportedCorpus> = cat
                .corpora()?
                .into_iter()
                .map(|c| ExportedCorpus { name: c.name, kind: c.kind, source: c.source, revision: c.revision })
                .collect();
            // a corpus only mined for history has support rows but no corpus row
            for s in patterns.iter().flat_map(|p| &p.support) {
                if !corpora.iter().any(|c| c.name == s.corpus) {
                    corpora.push(ExportedCorpus {
                        name: s.corpus.clone(),
                        kind: "git".into(),
                        source: String::new(),
                        revision: s.revision.clone(),
                    });
                }
            }
            corpora.retain(|c| a.corpus.is_empty() || a.corpus.contains(&c.name));
            if let Some(missing) = a.corpus.iter().find(|n| !corpora.iter().any(|c| &c.name == *n)) {
                anyhow::bail!("no corpus {missing:?} in the catalog (see `kidiom catalog stats`)");
            }
            let file = CatalogFile::new(patterns, corpora, a.snapshot);
            let n = file.patterns.len();
            (serde_json::to_string_pretty(&file)? + "\n", n)
        }
        Format::AstGrep => {
            let rules = astgrep_rules(&patterns);
            let docs: Vec<String> = rules.iter().map(|r| r.yaml.clone()).collect();
            (docs.join("---\n"), rules.len())
        }
        Format::Sarif => {
            let root = crate::ops::root()?;
            let (targets, skipped) = crate::ops::targets::collect(&a.targets, &root)?;
            for s in &skipped {
                eprintln!("kidiom: skipping {}: {}", s.path.display(), s.reason);
            }
            let mut findings = Vec::new();
            for (p, rw) in
                patterns.iter().filter_map(|p| Rewrite::new(&RewriteSpec::from(p), None).ok().map(|rw| (p, rw)))
            {
                for t in targets.iter().filter(|t| t.lang == p.language) {
                    let Some(tree) = kidiom_syntax::parse_tree(t.lang, &t.text).ok().flatten() else { continue };
                    for s in rw.site_edits(&t.text, &tree) {
                        findings.push(Finding {
                            pattern_id: p.id.clone(),
                            path: t.rel.clone(),
                            start: line_col(&t.text, s.site.start),
                            end: line_col(&t.text, s.site.end),
                            snippet: t.text[s.site.clone()].lines().next().unwrap_or("").to_string(),
                        });
                    }
                }
            }
            let n = findings.len();
            (serde_json::to_string_pretty(&sarif_report(&patterns, &findings))? + "\n", n)
        }
    };
    match &a.out {
        Some(p) => std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?,
        None => crate::output::raw(&text)?,
    }
    Ok(if n == 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

#[cfg(test)]
mod tests {
    #[test]
    fn line_columns() {
        assert_eq!(super::line_col("ab\ncd", 0), (1, 1));
        assert_eq!(super::line_col("ab\ncd", 4), (2, 2));
    }
}
