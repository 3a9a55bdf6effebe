//! `kidiom catalog list|show|search|stats`.

use std::process::ExitCode;

use anyhow::Result;
use kidiom_patterns::{Catalog, Category, Filter, Kind, Lang, Pattern, SearchHit};

use crate::cmd::args::CommonArgs;
use crate::config::Config;
use crate::output;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// List patterns: optimizations first, then other, plain API usage (api); strongest first within
    /// each. Refactors (renames, imports, API migrations) only with --all or --category refactor.
    List(ListArgs),
    /// Show one pattern with its support, values, examples and commits.
    Show(ShowArgs),
    /// Ranked search in plain words or names: what idioms do (mechanism),
    /// titles, identifiers, values, commit messages and examples.
    Search(SearchArgs),
    /// Counts by kind, language and category; corpora and skipped files.
    Stats(StatsArgs),
    /// Export the catalog: ast-grep rules, SARIF findings on targets, or JSON.
    Export(super::export::Args),
    /// Merge an exported catalog (JSON) into this one; idempotent.
    Import(super::import::Args),
}

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct FilterArgs {
    /// python, cuda, cpp or rust.
    #[arg(long, value_parser = super::named::<Lang>)]
    language: Option<Lang>,
    /// precision, memory, specialization, launch, math, addressing, concurrency, fusion, redundancy (the
    /// optimizations, listed first), other, api (plain API usage: masks, axes, types) or refactor.
    #[arg(long, value_parser = super::named::<Category>)]
    category: Option<Category>,
    /// usage or edit.
    #[arg(long, value_parser = super::named::<Kind>)]
    kind: Option<Kind>,
    /// At least this many occurrences over all corpora.
    #[arg(long, value_name = "N")]
    min_support: Option<u64>,
    /// Only patterns seen in this corpus.
    #[arg(long)]
    corpus: Option<String>,
    /// At most this many patterns.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Also list `refactor` patterns (renames, imports, API migrations), hidden unless asked for.
    #[arg(long)]
    all: bool,
}

impl FilterArgs {
    pub(crate) fn filter(&self) -> Filter {
        Filter {
            language: self.language,
            category: self.category,
            kind: self.kind,
            min_support: self.min_support,
            corpus: self.corpus.clone(),
            limit: self.limit,
            hide_refactor: !self.all,
        }
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    filter: FilterArgs,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ShowArgs {
    /// The pattern id.
    id: String,
    #[command(flatten)]
    common: CommonArgs,
}

/// Hits `catalog search` prints without `--limit`.
const SEARCH_LIMIT: usize = 20;

#[derive(Debug, clap::Args)]
pub(crate) struct SearchArgs {
    /// What to find, as you would ask it ("faster exponential", "tl.dot tf32"):
    /// any word may match; names match exactly; words are stemmed, stop words
    /// dropped, synonyms added; "quoted words" are a phrase. The best 20
    /// unless --limit says otherwise.
    query: String,
    #[command(flatten)]
    filter: FilterArgs,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Debug, clap::Args)]
pub(crate) struct StatsArgs {
    #[command(flatten)]
    common: CommonArgs,
}

pub(crate) fn run(cmd: Command) -> Result<ExitCode> {
    let cfg = Config::load()?;
    match cmd {
        Command::List(a) => {
            let cat = a.common.catalog.open_existing(&cfg)?;
            let pats = cat.list(&a.filter.filter())?;
            print_list(&pats, a.common.output.json)?;
            Ok(found(!pats.is_empty()))
        }
        Command::Search(a) => {
            let cat = a.common.catalog.open_existing(&cfg)?;
            let mut filter = a.filter.filter();
            // Any word may match, so a search lists the best few unless told otherwise.
            filter.limit = filter.limit.or(Some(SEARCH_LIMIT));
            let hits = cat.search_hits(&a.query, &filter)?;
            print_hits(&hits, a.common.output.json)?;
            Ok(found(!hits.is_empty()))
        }
        Command::Show(a) => {
            let cat = a.common.catalog.open_existing(&cfg)?;
            match cat.get(&a.id)? {
                Some(p) if a.common.output.json => {
                    output::json(&p)?;
                    Ok(ExitCode::SUCCESS)
                }
                Some(p) => {
                    print_pattern(&p)?;
                    Ok(ExitCode::SUCCESS)
                }
                None => {
                    // a pattern merged into another that makes the same rewrite
                    if let Some(kept) = cat.merged_into(&a.id)?
                        && let Some(p) = cat.get(&kept)?
                    {
                        if a.common.output.json {
                            output::json(&p)?;
                        } else {
                            eprintln!("kidiom: {} is the same rewrite as {kept}, merged into it", a.id);
                            print_pattern(&p)?;
                        }
                        return Ok(ExitCode::SUCCESS);
                    }
                    let hint = suggest(&cat, &a.id);
                    anyhow::bail!("no pattern with id {:?}{hint}", a.id)
                }
            }
        }
        Command::Stats(a) => {
            let cat = a.common.catalog.open_existing(&cfg)?;
            let stats = cat.stats()?;
            if a.common.output.json {
                output::json(&stats)?;
            } else {
                print_stats(&stats)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Export(a) => super::export::run(a),
        Command::Import(a) => super::import::run(a),
    }
}

/// `catalog stats` for a person: the totals, the breakdowns, one row per corpus.
fn print_stats(s: &kidiom_patterns::CatalogStats) -> Result<()> {
    let counts = |m: &std::collections::BTreeMap<String, u64>| {
        let mut v: Vec<(&String, &u64)> = m.iter().collect();
        v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        v.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
    };
    output::line(&format!("schema version {}, {} patterns", s.schema_version, s.patterns))?;
    output::line(&format!("  by kind:     {}", counts(&s.by_kind)))?;
    output::line(&format!("  by language: {}", counts(&s.by_language)))?;
    output::line(&format!("  by category: {}", counts(&s.by_category)))?;
    output::line(&format!(
        "files: {} recorded, {} parsed, {} without kernels, {} skipped{}",
        s.files,
        s.parsed,
        s.no_kernels,
        s.skipped,
        if s.skipped_by_reason.is_empty() { String::new() } else { format!(" ({})", counts(&s.skipped_by_reason)) }
    ))?;
    if s.corpora.is_empty() {
        return output::line("no corpus mined yet");
    }
    output::line("")?;
    let mut rows =
        vec![["corpus", "kind", "revision", "files", "skipped", "mined at", "source"].map(String::from).to_vec()];
    for c in &s.corpora {
        rows.push(vec![
            c.name.clone(),
            c.kind.clone(),
            c.revision.get(..12).unwrap_or(&c.revision).to_string(),
            c.files.to_string(),
            c.skipped.to_string(),
            c.mined_at.clone(),
            c.source.clone(),
        ]);
    }
    output::table(&rows)
}

fn found(any: bool) -> ExitCode {
    if any { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

fn suggest(cat: &Catalog, id: &str) -> String {
    let words = id.replace('-', " ");
    match cat.search(&words, &Filter { limit: Some(3), ..Default::default() }) {
        Ok(p) if !p.is_empty() => {
            format!(" (did you mean {}?)", p.iter().map(|p| p.id.as_str()).collect::<Vec<_>>().join(", "))
        }
        _ => String::new(),
    }
}

pub(crate) fn print_list(pats: &[Pattern], json: bool) -> Result<()> {
    if json {
        return output::json(pats);
    }
    let mut rows =
        vec![["id", "kind", "lang", "category", "occ", "files", "opp", "score", "title"].map(String::from).to_vec()];
    for p in pats {
        rows.push(vec![
            p.id.clone(),
            p.kind.name().to_string(),
            p.language.name().to_string(),
            p.category.name().to_string(),
            p.occurrences().to_string(),
            p.files().to_string(),
            p.opportunities().to_string(),
            format!("{:.1}", p.score),
            p.title.clone(),
        ]);
    }
    output::table(&rows)
}

/// Search hits: JSON (each pattern with its `match`), or a table whose last
/// column says which terms matched in which fields.
fn print_hits(hits: &[SearchHit], json: bool) -> Result<()> {
    if json {
        return output::json(hits);
    }
    let mut rows = vec![["id", "kind", "lang", "category", "relevance", "title", "matched"].map(String::from).to_vec()];
    for h in hits {
        let p = &h.pattern;
        let matched: Vec<String> = h
            .why
            .terms
            .iter()
            .map(|t| {
                let of = t.synonym_of.as_deref().map(|o| format!(" (~{o})")).unwrap_or_default();
                format!("{}{of}: {}", t.term, t.fields.join(","))
            })
            .collect();
        rows.push(vec![
            p.id.clone(),
            p.kind.name().to_string(),
            p.language.name().to_string(),
            p.category.name().to_string(),
            format!("{:.2}", h.why.relevance),
            p.title.clone(),
            matched.join("; "),
        ]);
    }
    output::table(&rows)
}

fn print_pattern(p: &Pattern) -> Result<()> {
    output::line(&format!("{}  [{} {} {}]  score {:.2}", p.id, p.kind.name(), p.language, p.category.name(), p.score))?;
    output::line(&format!("  {}", p.title))?;
    output::line(&format!("  {}", p.rationale))?;
    if !p.mechanism.is_empty() {
        output::line(&format!("  mechanism: {}", p.mechanism))?;
    }
    if !p.before.is_empty() {
        output::line("  before:")?;
        for l in p.before.lines() {
            output::line(&format!("    {l}"))?;
        }
    }
    output::line("  after:")?;
    for l in p.after.lines() {
        output::line(&format!("    {l}"))?;
    }
    output::line("  support:")?;
    for s in &p.support {
        output::line(&format!(
            "    {}: {} occurrences in {} files, {} opportunities",
            output::at_revision(&s.corpus, &s.revision),
            s.occurrences,
            s.files,
            s.opportunities
        ))?;
    }
    if !p.values.is_empty() {
        output::line("  values:")?;
        for v in p.values.iter().take(10) {
            let resolved = v.resolved.as_deref().map(|r| format!(" = {r}")).unwrap_or_default();
            output::line(&format!("    {:>6}  {}{resolved}", v.count, v.value))?;
        }
    }
    if !p.examples.is_empty() {
        output::line("  examples:")?;
        for e in &p.examples {
            output::line(&format!("    {}:{}:{}  {}", e.corpus, e.path, e.line, e.snippet))?;
        }
    }
    if !p.commits.is_empty() {
        output::line("  commits:")?;
        for c in &p.commits {
            output::line(&format!("    {} {} {}", &c.id.chars().take(12).collect::<String>(), c.date, c.summary))?;
        }
    }
    Ok(())
}
