//! `kidiom catalog list|show|search|stats`.

use std::process::ExitCode;

use anyhow::Result;
use kidiom_patterns::{Catalog, Category, Filter, Kind, Lang, Pattern};

use super::{CatalogArgs, OutputArgs};
use crate::config::Config;
use crate::output;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// List patterns, strongest first.
    List(ListArgs),
    /// Show one pattern with its support, values, examples and commits.
    Show(ShowArgs),
    /// Full-text search over titles, rationales, patterns and examples.
    Search(SearchArgs),
    /// Counts by kind, language and category; corpora and skipped files.
    Stats(StatsArgs),
    /// Export the catalog: ast-grep rules, SARIF findings on targets, or JSON.
    Export(super::export::Args),
}

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct FilterArgs {
    /// python, cuda, cpp or rust.
    #[arg(long, value_parser = parse_lang)]
    language: Option<Lang>,
    /// precision, memory, specialization, launch, math, addressing, concurrency, fusion, redundancy, other.
    #[arg(long, value_parser = parse_category)]
    category: Option<Category>,
    /// usage or edit.
    #[arg(long, value_parser = parse_kind)]
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
        }
    }
}

fn parse_lang(s: &str) -> Result<Lang, String> {
    Lang::from_name(s).ok_or_else(|| format!("unknown language {s:?} (python, cuda, cpp, rust)"))
}

fn parse_category(s: &str) -> Result<Category, String> {
    let names: Vec<&str> = Category::ALL.iter().map(|c| c.name()).collect();
    Category::from_name(s).ok_or_else(|| format!("unknown category {s:?} ({})", names.join(", ")))
}

fn parse_kind(s: &str) -> Result<Kind, String> {
    Kind::from_name(s).ok_or_else(|| format!("unknown kind {s:?} (usage, edit)"))
}

#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    filter: FilterArgs,
    #[command(flatten)]
    catalog: CatalogArgs,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ShowArgs {
    /// The pattern id.
    id: String,
    #[command(flatten)]
    catalog: CatalogArgs,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, clap::Args)]
pub(crate) struct SearchArgs {
    /// Words to find (FTS5; punctuation is taken literally).
    query: String,
    #[command(flatten)]
    filter: FilterArgs,
    #[command(flatten)]
    catalog: CatalogArgs,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Debug, clap::Args)]
pub(crate) struct StatsArgs {
    #[command(flatten)]
    catalog: CatalogArgs,
    #[command(flatten)]
    output: OutputArgs,
}

pub(crate) fn run(cmd: Command) -> Result<ExitCode> {
    let cfg = Config::load()?;
    match cmd {
        Command::List(a) => {
            let cat = a.catalog.open_existing(&cfg)?;
            let pats = cat.list(&a.filter.filter())?;
            print_list(&pats, a.output.json)?;
            Ok(found(!pats.is_empty()))
        }
        Command::Search(a) => {
            let cat = a.catalog.open_existing(&cfg)?;
            let pats = cat.search(&a.query, &a.filter.filter())?;
            print_list(&pats, a.output.json)?;
            Ok(found(!pats.is_empty()))
        }
        Command::Show(a) => {
            let cat = a.catalog.open_existing(&cfg)?;
            match cat.get(&a.id)? {
                Some(p) if a.output.json => {
                    output::json(&p)?;
                    Ok(ExitCode::SUCCESS)
                }
                Some(p) => {
                    print_pattern(&p)?;
                    Ok(ExitCode::SUCCESS)
                }
                None => {
                    let hint = suggest(&cat, &a.id);
                    anyhow::bail!("no pattern with id {:?}{hint}", a.id)
                }
            }
        }
        Command::Stats(a) => {
            let cat = a.catalog.open_existing(&cfg)?;
            let stats = cat.stats()?;
            if a.output.json {
                output::json(&stats)?;
            } else {
                output::line(&format!("{stats:#?}"))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Export(a) => super::export::run(a),
    }
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

fn print_pattern(p: &Pattern) -> Result<()> {
    output::line(&format!("{}  [{} {} {}]  score {:.2}", p.id, p.kind.name(), p.language, p.category.name(), p.score))?;
    output::line(&format!("  {}", p.title))?;
    output::line(&format!("  {}", p.rationale))?;
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
            "    {} @ {}: {} occurrences in {} files, {} opportunities",
            s.corpus,
            s.revision.chars().take(12).collect::<String>(),
            s.occurrences,
            s.files,
            s.opportunities
        ))?;
    }
    if !p.values.is_empty() {
        output::line("  values:")?;
        for v in p.values.iter().take(10) {
            output::line(&format!("    {:>6}  {}", v.count, v.value))?;
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
