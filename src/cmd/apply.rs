//! `kidiom apply`: catalog patterns as rewrite candidates on target files.
//!
//! Dry run by default: each (pattern, file) with at least one site becomes
//! a candidate — computed against the file as it is on disk — stored in the
//! catalog (status `proposed`) and printed as a unified diff. With
//! `--write`, the candidates of one file are chained (each computed on the
//! previous one's result), every target is checked first (clean in git
//! unless `--force`, writable, unchanged since it was read), and only then
//! are files replaced, each atomically; the candidates are stored as
//! `applied`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use kidiom_miner::{
    DeviceMacros, KNOWN_DEVICE_MACROS, Lang, Limits, Prefilter, blob_id, decode, merge_device_macro, parse_tree,
    scan_device_macros,
};
use kidiom_patterns::matcher::Rewrite;
use kidiom_patterns::{Candidate, CandidateStatus, Catalog, Category, Filter, Kind, Pattern};
use rayon::prelude::*;
use serde::Serialize;

use super::{CatalogArgs, OutputArgs};
use crate::config::Config;
use crate::output;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Files or directories to rewrite (default: kernels/).
    #[arg(value_name = "TARGET")]
    targets: Vec<PathBuf>,
    /// Only this pattern (repeatable).
    #[arg(long = "pattern", value_name = "ID")]
    patterns: Vec<String>,
    /// Only patterns of this category.
    #[arg(long, value_parser = parse_category)]
    category: Option<Category>,
    /// Only patterns of this kind (usage or edit).
    #[arg(long, value_parser = parse_kind)]
    kind: Option<Kind>,
    /// The value written into the pattern's hole (default: the most frequent usable value upstream).
    #[arg(long, value_name = "V")]
    value: Option<String>,
    /// Write the rewrites to the files (atomically), instead of printing diffs.
    #[arg(long)]
    write: bool,
    /// With --write: also rewrite files with uncommitted changes.
    #[arg(long)]
    force: bool,
    /// Precision patterns on kernels with an error curve: search which sites get which value
    /// (error under the TF32-faithful interpreter, cost from sm_90 compiles) and propose the
    /// Pareto front, instead of one value on every site. Runs the kernels; dry run only.
    #[arg(long, conflicts_with = "write")]
    search: bool,
    /// With --search: time limit of the search, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 1800, requires = "search")]
    timeout: u64,
    #[command(flatten)]
    catalog: CatalogArgs,
    #[command(flatten)]
    output: OutputArgs,
}

pub(crate) fn parse_category(s: &str) -> Result<Category, String> {
    Category::from_name(s).ok_or_else(|| format!("unknown category {s:?}"))
}

pub(crate) fn parse_kind(s: &str) -> Result<Kind, String> {
    Kind::from_name(s).ok_or_else(|| format!("unknown kind {s:?} (usage, edit)"))
}

/// A file to rewrite.
pub(crate) struct Target {
    /// Where it is on disk.
    pub(crate) abs: PathBuf,
    /// Relative to the root, `/`-separated (diff headers, candidate ids).
    pub(crate) rel: String,
    pub(crate) lang: Lang,
    pub(crate) text: String,
}

/// The root that target paths are relative to: the git working directory
/// holding the current directory, else the current directory.
pub(crate) fn root() -> Result<PathBuf> {
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let root = kidiom_rewriter::repo_root(&cwd).unwrap_or(cwd);
    root.canonicalize().with_context(|| format!("resolving {}", root.display()))
}

/// Expands targets into files. A named file that cannot be rewritten is an
/// error; files met while walking a directory are skipped with a warning
/// (symlinks, binary, unknown language).
pub(crate) fn collect_targets(targets: &[PathBuf], root: &Path, quiet: bool) -> Result<Vec<Target>> {
    let targets = if targets.is_empty() { vec![PathBuf::from("kernels")] } else { targets.to_vec() };
    let mut out: BTreeMap<String, Target> = BTreeMap::new();
    for t in &targets {
        let meta = std::fs::symlink_metadata(t).with_context(|| format!("target {}", t.display()))?;
        if meta.is_dir() {
            for entry in walkdir_sorted(t)? {
                match load(&entry, root) {
                    Ok(Some(target)) => {
                        out.insert(target.rel.clone(), target);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        if !quiet {
                            eprintln!("kidiom: skipping {}: {e:#}", entry.display());
                        }
                    }
                }
            }
        } else {
            match load(t, root)? {
                Some(target) => {
                    out.insert(target.rel.clone(), target);
                }
                None => {
                    bail!("{}: not a language kidiom rewrites (.py, .cu, .cuh, .cpp, .cc, .cxx, .h, .hpp)", t.display())
                }
            }
        }
    }
    Ok(out.into_values().collect())
}

fn walkdir_sorted(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let rd = std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))?;
        for e in rd {
            let e = e.with_context(|| format!("reading {}", d.display()))?;
            let ft = e.file_type().with_context(|| format!("reading {}", e.path().display()))?;
            let name = e.file_name();
            if name.to_string_lossy().starts_with('.') || name == "__pycache__" {
                continue;
            }
            if ft.is_dir() {
                stack.push(e.path());
            } else if (ft.is_file() || ft.is_symlink()) && Lang::from_path(&e.path()).is_some_and(|l| l != Lang::Rust) {
                files.push(e.path());
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Reads one file; `Ok(None)` for languages kidiom does not rewrite.
fn load(path: &Path, root: &Path) -> Result<Option<Target>> {
    let Some(lang) = Lang::from_path(path).filter(|l| *l != Lang::Rust) else { return Ok(None) };
    let meta = std::fs::symlink_metadata(path).with_context(|| format!("reading {}", path.display()))?;
    let abs = path.canonicalize().with_context(|| format!("resolving {}", path.display()))?;
    if meta.file_type().is_symlink() && !abs.starts_with(root) {
        bail!("{} is a symlink to {}, outside {}; refusing it", path.display(), abs.display(), root.display());
    }
    if !abs.starts_with(root) {
        bail!("{} is outside {}; run kidiom from the tree that holds it", path.display(), root.display());
    }
    if !abs.is_file() {
        bail!("{} is not a regular file", path.display());
    }
    let bytes = std::fs::read(&abs).with_context(|| format!("reading {}", path.display()))?;
    let text = decode(&bytes, &Limits::default())
        .map_err(|s| anyhow::anyhow!("{}: {s}; not a text file kidiom rewrites", path.display()))?
        .to_string();
    let rel = abs.strip_prefix(root).unwrap_or(&abs).to_string_lossy().replace('\\', "/");
    Ok(Some(Target { abs, rel, lang, text }))
}

/// The patterns selected by `--pattern`/`--category`/`--kind`, compiled.
/// Named patterns that cannot be compiled are errors; others are reported
/// as not applicable.
pub(crate) fn rewrites(cat: &Catalog, ids: &[String], filter: Filter, value: Option<&str>) -> Result<Compiled> {
    let mut pats = Vec::new();
    if ids.is_empty() {
        pats = cat.list(&filter)?;
    } else {
        for id in ids {
            match cat.get(id)? {
                Some(p) => pats.push(p),
                None => bail!("no pattern {id:?} in the catalog (see `kidiom catalog list`)"),
            }
        }
    }
    let mut ok = Vec::new();
    let mut skipped = Vec::new();
    for p in pats {
        match Rewrite::new(&p, value) {
            Ok(rw) => ok.push((p, rw)),
            // A pattern asked for by name must work; the rest are reported.
            Err(e) if !ids.is_empty() => return Err(e.into()),
            Err(e) => skipped.push(NotApplicable { pattern: p.id.clone(), reason: e.to_string() }),
        }
    }
    Ok((ok, skipped))
}

/// The compiled rewrites, and the patterns without one.
pub(crate) type Compiled = (Vec<(Pattern, Rewrite)>, Vec<NotApplicable>);

#[derive(Debug, Serialize)]
pub(crate) struct NotApplicable {
    pub(crate) pattern: String,
    pub(crate) reason: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct Dropped {
    pub(crate) pattern: String,
    pub(crate) path: String,
    pub(crate) reason: String,
}

/// What one `apply` did; also the JSON of `apply --json` and of the MCP tools.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) write: bool,
    pub(crate) candidates: Vec<Candidate>,
    pub(crate) dropped: Vec<Dropped>,
    pub(crate) not_applicable: Vec<NotApplicable>,
    pub(crate) files: usize,
    pub(crate) patterns: usize,
    /// The per-site searches run (their candidates are in `candidates`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) searches: Vec<kidiom_validator::search::SiteSearch>,
    pub(crate) seconds: f64,
}

/// What to apply, where, and how.
pub(crate) struct Request<'a> {
    pub(crate) targets: &'a [PathBuf],
    pub(crate) patterns: &'a [String],
    pub(crate) filter: Filter,
    pub(crate) value: Option<&'a str>,
    pub(crate) write: bool,
    pub(crate) force: bool,
    pub(crate) quiet: bool,
    /// Search sites and values of precision patterns on kernels with an
    /// error curve, instead of rewriting every site with one value.
    pub(crate) search: Option<crate::sitesearch::Options<'a>>,
}

pub(crate) fn provenance(p: &Pattern, value: Option<&str>) -> serde_json::Value {
    serde_json::json!({
        "pattern": p.id,
        "kind": p.kind.name(),
        "category": p.category.name(),
        "title": p.title,
        "rationale": p.rationale,
        "mechanism": p.mechanism,
        "before": p.before,
        "after": p.after,
        "value": value,
        "score": p.score,
        "support": p.support,
        "examples": p.examples,
        "commits": p.commits,
    })
}

/// Whether a file can hold a kernel at all: the miner's literal prefilter
/// (with the device macros the file itself defines), which spares parsing
/// most host-only files.
fn may_hold_kernels(t: &Target) -> bool {
    let mut macros: DeviceMacros = KNOWN_DEVICE_MACROS.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    if matches!(t.lang, Lang::Cuda | Lang::Cpp) {
        for (name, expansion) in scan_device_macros(&t.text) {
            merge_device_macro(&mut macros, name, expansion);
        }
    }
    Prefilter::new(&macros).may_contain_kernels(t.lang, t.text.as_bytes())
}

/// The candidates of one file (dry run: each against the file as it is;
/// `write`: chained), what was dropped, and the final text when it changed.
fn rewrite_file(
    t: &Target,
    rws: &[(Pattern, Rewrite)],
    write: bool,
    searched: &(dyn Fn(&Pattern, &Rewrite, &Target) -> bool + Sync),
) -> (Vec<Candidate>, Vec<Dropped>, Option<String>) {
    let (mut cands, mut dropped) = (Vec::new(), Vec::new());
    if !may_hold_kernels(t) || !rws.iter().any(|(p, _)| p.language == t.lang) {
        return (cands, dropped, None);
    }
    let Some(mut tree) = parse_tree(t.lang, &t.text).ok().flatten() else {
        dropped.push(Dropped { pattern: String::new(), path: t.rel.clone(), reason: "cannot parse".into() });
        return (cands, dropped, None);
    };
    let mut cur = t.text.clone();
    for (p, rw) in rws.iter().filter(|(p, _)| p.language == t.lang) {
        if searched(p, rw, t) {
            continue;
        }
        let base = if write { cur.as_str() } else { t.text.as_str() };
        for r in rw.refusals(base, &tree) {
            let line = base.get(..r.site.start).map(|s| s.matches('\n').count() + 1).unwrap_or(0);
            let reason = format!("not at `{}` (line {line}): {}", r.function, r.reason);
            dropped.push(Dropped { pattern: p.id.clone(), path: t.rel.clone(), reason });
        }
        match kidiom_rewriter::rewrite_with_tree(rw, t.lang, base, &tree, &t.rel) {
            Ok(Some((out, out_tree))) => {
                let missing = if t.lang == Lang::Python {
                    kidiom_rewriter::unbound_names(&p.before, &p.after, base)
                } else {
                    Vec::new()
                };
                if !missing.is_empty() {
                    let reason =
                        format!("the rewrite uses {}, which {} neither defines nor imports", missing.join(", "), t.rel);
                    dropped.push(Dropped { pattern: p.id.clone(), path: t.rel.clone(), reason });
                    continue;
                }
                let diff = kidiom_rewriter::unified(&t.rel, base, &out.text, 3);
                let hash = blob_id(diff.as_bytes());
                cands.push(Candidate {
                    id: format!("{}@{}#{}", p.id, t.rel, &hash[..8.min(hash.len())]),
                    pattern_id: p.id.clone(),
                    path: t.rel.clone(),
                    base_blob: blob_id(base.as_bytes()),
                    result_blob: blob_id(out.text.as_bytes()),
                    value: rw.value().map(str::to_string),
                    sites: out.sites as u64,
                    diff,
                    status: if write { CandidateStatus::Applied } else { CandidateStatus::Proposed },
                    provenance: provenance(p, rw.value()),
                    evidence: serde_json::json!({}),
                    commit_id: None,
                    created_at: String::new(),
                    updated_at: String::new(),
                });
                if write {
                    cur = out.text;
                    tree = out_tree;
                }
            }
            Ok(None) => {}
            Err(e) => dropped.push(Dropped { pattern: p.id.clone(), path: t.rel.clone(), reason: e.to_string() }),
        }
    }
    let changed = (write && cur != t.text).then_some(cur);
    (cands, dropped, changed)
}

/// Proposes (or, with `write`, applies) the selected patterns on the
/// targets under `root`, and stores the candidates in the catalog.
pub(crate) fn apply(cat: &mut Catalog, root: &Path, req: &Request) -> Result<Report> {
    let started = std::time::Instant::now();
    let (rws, not_applicable) = rewrites(cat, req.patterns, req.filter.clone(), req.value)?;
    let targets = collect_targets(req.targets, root, req.quiet)?;
    // A dry run searches sites and values where it can; --write applies what it is told.
    let search = req.search.as_ref().filter(|_| !req.write);
    let searched = |p: &Pattern, rw: &Rewrite, t: &Target| {
        search.is_some_and(|o| crate::sitesearch::searchable(o.validator, p, rw, &t.rel, t.lang))
    };
    let per_file: Vec<(Vec<Candidate>, Vec<Dropped>, Option<String>)> =
        targets.par_iter().map(|t| rewrite_file(t, &rws, req.write, &searched)).collect();
    let mut candidates = Vec::new();
    let mut dropped = Vec::new();
    let mut searches = Vec::new();
    if let Some(o) = search {
        for t in &targets {
            for (p, rw) in rws.iter().filter(|(p, rw)| p.language == t.lang && searched(p, rw, t)) {
                if !may_hold_kernels(t) {
                    continue;
                }
                let values = crate::sitesearch::values(p, req.value, rw.value());
                if crate::sitesearch::hint_op(p).is_some() {
                    match crate::sitesearch::role_candidates(p, &values, &t.rel, &t.text) {
                        Ok(c) => candidates.extend(c),
                        Err(e) => dropped.push(Dropped {
                            pattern: p.id.clone(),
                            path: t.rel.clone(),
                            reason: format!("per-access hints failed: {e:#}"),
                        }),
                    }
                    continue;
                }
                match crate::sitesearch::search_file(o, p, &values, &t.rel, &t.text) {
                    Ok((s, c)) => {
                        candidates.extend(c);
                        searches.push(s);
                    }
                    Err(e) => dropped.push(Dropped {
                        pattern: p.id.clone(),
                        path: t.rel.clone(),
                        reason: format!("site search failed: {e:#}"),
                    }),
                }
            }
        }
    }
    let mut results: Vec<(usize, String)> = Vec::new(); // (target index, final text) for --write
    for (ti, (c, d, text)) in per_file.into_iter().enumerate() {
        candidates.extend(c);
        dropped.extend(d);
        if let Some(text) = text {
            results.push((ti, text));
        }
    }
    if req.write {
        // Check every file before writing any: nothing is half-written.
        for (ti, _) in &results {
            let t = &targets[*ti];
            if !req.force
                && let Some(status) = kidiom_rewriter::uncommitted(root, Path::new(&t.rel)).ok().flatten()
            {
                return Err(kidiom_rewriter::Error::Uncommitted { path: t.abs.clone(), status }.into());
            }
            kidiom_rewriter::check_writable(&t.abs)?;
            let now = std::fs::read(&t.abs).with_context(|| format!("reading {}", t.abs.display()))?;
            let (expected, found) = (blob_id(t.text.as_bytes()), blob_id(&now));
            if expected != found {
                return Err(kidiom_rewriter::Error::Stale { path: t.abs.clone(), expected, found }.into());
            }
        }
        for (ti, text) in &results {
            kidiom_rewriter::atomic_write(&targets[*ti].abs, text.as_bytes())?;
        }
    }
    cat.put_candidates(&candidates)?;
    Ok(Report {
        write: req.write,
        files: targets.len(),
        patterns: rws.len(),
        searches,
        seconds: started.elapsed().as_secs_f64(),
        candidates,
        dropped,
        not_applicable,
    })
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let cfg = Config::load()?;
    let mut cat = a.catalog.open_existing(&cfg)?;
    let root = root()?;
    let validator = if a.search {
        let opts = search_validator_options(&cfg, std::time::Duration::from_secs(a.timeout.max(1)));
        Some(super::validate::build_validator(&root, &opts)?)
    } else {
        None
    };
    let req = Request {
        targets: &a.targets,
        patterns: &a.patterns,
        filter: Filter { category: a.category, kind: a.kind, hide_refactor: true, ..Default::default() },
        value: a.value.as_deref(),
        write: a.write,
        force: a.force,
        quiet: a.output.quiet,
        search: validator.as_ref().map(|v| crate::sitesearch::Options {
            validator: v,
            jobs: cfg.search.jobs(),
            rule: cfg.search.rule(),
            limits: cfg.validate.static_limits,
            progress: !a.output.quiet && !a.output.json,
        }),
    };
    let report = apply(&mut cat, &root, &req)?;
    let found = !report.candidates.is_empty();
    if a.output.json {
        output::json(&report)?;
    } else {
        for c in &report.candidates {
            if !a.write {
                output::raw(&c.diff)?;
            }
        }
        for d in &report.dropped {
            eprintln!("kidiom: dropped {} on {}: {}", d.pattern, d.path, d.reason);
        }
        for s in &report.searches {
            print_search(s)?;
        }
        if !a.output.quiet {
            let sites: u64 = report.candidates.iter().map(|c| c.sites).sum();
            eprintln!(
                "kidiom: {} candidate{} ({} site{}) from {} pattern{} on {} file{}{}; {} pattern{} without an automatic rewrite ({:.2}s)",
                report.candidates.len(),
                if report.candidates.len() == 1 { "" } else { "s" },
                sites,
                if sites == 1 { "" } else { "s" },
                report.patterns,
                if report.patterns == 1 { "" } else { "s" },
                report.files,
                if report.files == 1 { "" } else { "s" },
                if a.write { ", written" } else { "" },
                report.not_applicable.len(),
                if report.not_applicable.len() == 1 { "" } else { "s" },
                report.seconds,
            );
            for c in &report.candidates {
                eprintln!("  {}  {} site{}", c.id, c.sites, if c.sites == 1 { "" } else { "s" });
            }
        }
    }
    Ok(if found { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The validator settings a search uses (its compiles and interpreter runs; no GPU).
pub(crate) fn search_validator_options(cfg: &Config, timeout: std::time::Duration) -> super::validate::Options {
    super::validate::Options {
        device: kidiom_validator::Device::Cpu,
        timeout,
        seeds: 1,
        seed: None,
        consistency: false,
        python: None,
        progress: false,
        static_limits: Some(cfg.validate.static_limits),
    }
}

/// A search's front, with the chosen variant marked, on stderr beside the diffs.
pub(crate) fn print_search(s: &kidiom_validator::search::SiteSearch) -> Result<()> {
    eprintln!(
        "kidiom: site search of {} in {}: {} sites, values {}; {} variants measured, {} of them compiled, {} found in the cache; {:.1}s",
        s.pattern,
        s.path,
        s.sites.len(),
        s.values.join(", "),
        s.measured,
        s.compiled,
        s.cached,
        s.seconds
    );
    let summary = serde_json::to_value(s)?;
    if let Some(rows) = crate::sitesearch::front_rows(&summary, s.chosen) {
        for line in output::table_lines(&rows) {
            eprintln!("  {line}");
        }
    }
    eprintln!("  chosen: {}", s.why);
    Ok(())
}
