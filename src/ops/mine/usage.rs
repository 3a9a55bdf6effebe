//! The usage source: list each corpus, list each corpus, reuse cached facts for unchanged
//! blobs, read and parse the rest in parallel, aggregate every corpus's
//! facts into idioms and write it all in one catalog transaction.
//!
//! The transaction starts before anything is read, so a second run on the
//! same catalog waits (or fails with a clear message) instead of computing
//! from a stale snapshot, and a killed run leaves the previous state intact.
//!
//! With a Ray executor ([`Remote`]) the parsing and extraction of the fresh
//! files runs on the cluster instead: everything else (listing, the cache,
//! the device macros, the literal prefilter) stays here, the files that may
//! hold kernels go out in shards that `kidiom shard` mines on the nodes
//! ([`FactsJob`]), and their outcomes come back to exactly where the local
//! run's go. History mining shards commit ranges the same way
//! (`crate::history`).
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kidiom_miner::{Corpus, CorpusFile, ExtractOptions, FileFacts, FileInput, Manifest, MineConfig, Prefilter};
use kidiom_patterns::{Catalog, FileOutcome, Kind, Pattern};
use kidiom_syntax::{Lang, Limits, Skip, blob_id};
use rayon::prelude::*;
use serde::Serialize;

use super::remote::{Remote, ShardReport, remote_outcomes};
use super::{MAX_LISTED_SKIPS, bar, open_with_fallback, stall_for_tests};
/// What to mine and how.
pub(crate) struct MineOptions {
    pub(crate) limits: Limits,
    pub(crate) config: MineConfig,
    pub(crate) progress: bool,
    /// Where files are parsed: here (`None`) or on a Ray cluster.
    pub(crate) remote: Option<std::sync::Arc<Remote>>,
}

/// One corpus's part of a run.
#[derive(Debug, Default, Serialize)]
pub(crate) struct CorpusReport {
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) source: String,
    pub(crate) revision: String,
    /// Files of known languages that passed the globs.
    pub(crate) files: u64,
    /// Files whose cached facts were reused (blob unchanged).
    pub(crate) cached: u64,
    /// Files parsed in this run.
    pub(crate) parsed: u64,
    /// Files the literal prefilter showed to hold no kernel code.
    pub(crate) no_kernels: u64,
    /// Skipped files by reason.
    pub(crate) skipped: BTreeMap<String, u64>,
    /// The first few skipped files with their reasons.
    pub(crate) skipped_files: Vec<SkippedFile>,
    /// Kernels found in the files parsed or reused.
    pub(crate) kernels: u64,
    /// Files parsed with error nodes (still mined).
    pub(crate) with_parse_errors: u64,
    pub(crate) seconds: f64,
    /// Set when the corpus could not be opened; the run went on without it.
    pub(crate) error: Option<String>,
    /// Set when the manifest's fallback was used.
    pub(crate) note: Option<String>,
    /// Calls through the corpus's own names for Triton functions, counted as
    /// those functions (`exp2 -> tl.exp2`: calls).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) call_aliases: BTreeMap<String, u64>,
    /// The shards sent to the cluster (Ray executor only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) shards: Option<ShardReport>,
}

#[derive(Debug, Serialize)]
pub(crate) struct SkippedFile {
    pub(crate) path: String,
    pub(crate) reason: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct MineReport {
    pub(crate) catalog: PathBuf,
    pub(crate) corpora: Vec<CorpusReport>,
    /// Usage patterns in the catalog after the run.
    pub(crate) patterns: usize,
    pub(crate) seconds: f64,
}

struct Stored {
    revision: String,
    lang: Lang,
    facts: FileFacts,
}

pub(crate) fn mine(catalog: &mut Catalog, manifests: Vec<Manifest>, opts: &MineOptions) -> Result<MineReport> {
    let start = Instant::now();
    let path = catalog.path().to_path_buf();
    let tx = catalog.begin()?;
    // Every corpus's facts, for cross-corpus aggregation: (corpus, path) -> facts.
    let mut stored: BTreeMap<(String, String), Stored> = BTreeMap::new();
    for f in tx.all_facts().context("loading cached facts")? {
        stored.insert((f.corpus, f.path), Stored { revision: f.revision, lang: f.lang, facts: f.facts });
    }
    let mut reports = Vec::new();
    // every corpus opened at once (pip downloads and git clones wait on the network, not the
    // CPU), each mined in order as soon as it is open
    let names: Vec<String> = manifests.iter().map(|m| m.name.clone()).collect();
    std::thread::scope(|scope| -> Result<()> {
        let opening: Vec<_> = manifests
            .into_iter()
            .map(|manifest| {
                scope.spawn(move || {
                    let t = Instant::now();
                    (open_with_fallback(manifest), t.elapsed())
                })
            })
            .collect();
        for (name, handle) in names.into_iter().zip(opening) {
            let mut report = CorpusReport { name: name.clone(), ..Default::default() };
            let (opened, open_time) = handle.join().unwrap_or_else(|_| {
                (Err(anyhow::anyhow!("opening corpus {name}: the thread panicked")), Duration::ZERO)
            });
            let t = Instant::now();
            let corpus = match opened {
                Ok((c, note)) => {
                    report.note = note;
                    c
                }
                Err(e) => {
                    report.error = Some(format!("{e:#}"));
                    reports.push(report);
                    continue;
                }
            };
            report.kind = corpus.manifest.kind.name().to_string();
            report.source = corpus.manifest.source.clone();
            report.revision = corpus.revision.clone();
            mine_corpus(&tx, &corpus, opts, &mut stored, &mut report)
                .with_context(|| format!("mining corpus {}", corpus.manifest.name))?;
            report.seconds = (open_time + t.elapsed()).as_secs_f64();
            reports.push(report);
        }
        Ok(())
    })?;
    // A call through a corpus's own name for a Triton function (`from .op import exp2`)
    // counts as that function.
    for r in reports.iter_mut() {
        let mut files: Vec<(&str, &mut FileFacts)> = stored
            .iter_mut()
            .filter(|((c, _), _)| *c == r.name)
            .map(|((_, p), s)| (p.as_str(), &mut s.facts))
            .collect();
        for a in kidiom_miner::resolve_call_aliases(&mut files) {
            *r.call_aliases.entry(format!("{} -> {}", a.name, a.function)).or_default() += u64::from(a.calls);
        }
    }
    let inputs = stored.iter().map(|((corpus, path), s)| FileInput {
        corpus,
        revision: &s.revision,
        path,
        lang: s.lang,
        facts: &s.facts,
    });
    let mut idioms = kidiom_miner::aggregate(inputs, &opts.config);
    // Triton's own words for its keywords and decorators, where the harness's Python has Triton.
    let documented = |i: &kidiom_miner::Idiom| {
        i.key.lang == Lang::Python
            && matches!(
                i.key.mechanism,
                kidiom_miner::Mechanism::Keyword
                    | kidiom_miner::Mechanism::Decorator
                    | kidiom_miner::Mechanism::Wrapper
            )
    };
    let docs = if idioms.iter().any(documented) {
        let cwd = std::env::current_dir().unwrap_or_default();
        crate::apidocs::TritonDocs::load(&kidiom_exec::find_python(&cwd))
    } else {
        crate::apidocs::TritonDocs::default()
    };
    // A self-assigned wrapper (`x = W(x, 1, 0)`) is taken for a hint by the miner; Triton's
    // documentation says which are (`tl.multiple_of`) and which transform (`tl.trans`).
    idioms.retain(|i| {
        !(i.key.lang == Lang::Python
            && i.key.mechanism == kidiom_miner::Mechanism::Wrapper
            && docs.is_hint(&i.key.decoration) == Some(false))
    });
    let patterns: Vec<Pattern> = idioms
        .into_iter()
        .map(|i| {
            let doc = docs.describe(&i.key);
            let mut p = Pattern::from(i);
            if let Some(d) = doc {
                p.mechanism =
                    format!("{} Triton {}'s documentation: {d}", p.mechanism, docs.version).trim().to_string();
            }
            p
        })
        .collect();
    tx.replace_patterns(Kind::Usage, &patterns)?;
    // kidiom's own rewrites, listed and applied beside what was mined
    tx.replace_patterns(Kind::Transform, &kidiom_patterns::builtin::patterns())?;
    stall_for_tests();
    tx.commit()?;
    Ok(MineReport { catalog: path, corpora: reports, patterns: patterns.len(), seconds: start.elapsed().as_secs_f64() })
}

fn mine_corpus(
    tx: &kidiom_patterns::MineTx<'_>,
    corpus: &Corpus,
    opts: &MineOptions,
    stored: &mut BTreeMap<(String, String), Stored>,
    report: &mut CorpusReport,
) -> Result<()> {
    let name = corpus.manifest.name.as_str();
    let kidiom_miner::Listing { files, skipped: list_skips } = corpus.files()?;
    let cached = tx.cached_files(name)?;
    report.files = files.len() as u64 + list_skips.len() as u64;
    let pb = bar(opts.progress, files.len() as u64, name, "files");

    // Unchanged blobs (git: same blob id; directories: same size and mtime).
    let unchanged = |f: &CorpusFile| -> Option<String> {
        let c = cached.get(&f.path)?;
        match (&f.blob, f.stat) {
            (Some(b), _) if *b == c.blob => Some(b.clone()),
            (None, Some(s)) if c.stat == Some(s) => Some(c.blob.clone()),
            _ => None,
        }
    };
    let (mut reuse, mut fresh): (Vec<&CorpusFile>, Vec<&CorpusFile>) = (Vec::new(), Vec::new());
    for f in &files {
        if unchanged(f).is_some() { reuse.push(f) } else { fresh.push(f) }
    }
    let mut texts = read_all(corpus, &fresh, opts.limits.max_bytes);

    // Device macros: known ones, those of reused C/C++ facts, and those in fresh text.
    let reused = reuse.iter().filter_map(|f| stored.get(&(name.to_string(), f.path.clone()))).map(|s| &s.facts);
    let fresh = texts.iter().filter_map(|r| {
        let text = r.bytes.as_ref().ok().and_then(|b| std::str::from_utf8(b).ok())?;
        Some((r.file.lang, text))
    });
    let macros = kidiom_miner::corpus_device_macros(reused, fresh);
    let fp: HashMap<Lang, String> =
        Lang::ALL.iter().map(|l| (*l, kidiom_miner::facts_fingerprint(*l, &opts.limits, &macros))).collect();
    // Reused facts computed under other macros or another extractor are recomputed.
    let (still, stale): (Vec<&CorpusFile>, Vec<&CorpusFile>) =
        reuse.into_iter().partition(|f| cached.get(&f.path).is_some_and(|c| fp.get(&f.lang) == Some(&c.fingerprint)));
    texts.extend(read_all(corpus, &stale, opts.limits.max_bytes));
    report.cached = still.len() as u64;
    pb.inc(still.len() as u64);

    let prefilter = Prefilter::new(&macros);
    let extract_opts = ExtractOptions { device_macros: macros.clone() };
    let outcomes: Vec<Outcome<'_>> = match &opts.remote {
        Some(remote) => {
            let (outcomes, shards) = remote_outcomes(remote, texts, &opts.limits, &prefilter, &macros, &pb)?;
            report.shards = Some(shards);
            outcomes
        }
        None => texts
            .into_par_iter()
            .map(|Read { file, bytes }| {
                let (blob, outcome) = match bytes {
                    Err(skip) => (file.blob.clone().unwrap_or_default(), FileOutcome::Skipped(skip)),
                    Ok(bytes) => {
                        let blob = file.blob.clone().unwrap_or_else(|| blob_id(&bytes));
                        (blob, process(file.lang, &bytes, &opts.limits, &prefilter, &extract_opts))
                    }
                };
                pb.inc(1);
                Outcome { file, blob, outcome }
            })
            .collect(),
    };
    pb.finish_and_clear();

    tx.put_corpus(name, corpus.manifest.kind.name(), &corpus.manifest.source, &corpus.revision)?;
    for (path, skip) in &list_skips {
        count_skip(report, path, skip);
    }
    for Outcome { file: f, blob, outcome } in &outcomes {
        let fingerprint = fp.get(&f.lang).map(String::as_str).unwrap_or("");
        tx.put_file(name, &f.path, f.lang, blob, f.stat, fingerprint, outcome)?;
        let key = (name.to_string(), f.path.clone());
        match outcome {
            FileOutcome::Parsed(facts) => {
                report.parsed += 1;
                stored.insert(key, Stored { revision: corpus.revision.clone(), lang: f.lang, facts: facts.clone() });
            }
            FileOutcome::NoKernels => {
                report.no_kernels += 1;
                stored.remove(&key);
            }
            FileOutcome::Skipped(skip) => {
                count_skip(report, &f.path, skip);
                stored.remove(&key);
            }
        }
    }
    let keep: HashSet<String> = files.iter().map(|f| f.path.clone()).collect();
    tx.retain_files(name, &keep)?;
    stored.retain(|(c, p), _| c != name || keep.contains(p));
    tally_reused(tx, corpus, &still, stored, report)
}

/// Reused files keep their outcome: facts, kernel-free, or skipped with the
/// cached reason. Then the corpus's kernels and parse errors are counted.
fn tally_reused(
    tx: &kidiom_patterns::MineTx<'_>,
    corpus: &Corpus,
    still: &[&CorpusFile],
    stored: &mut BTreeMap<(String, String), Stored>,
    report: &mut CorpusReport,
) -> Result<()> {
    let name = corpus.manifest.name.as_str();
    let cached_skips: HashMap<String, Skip> = tx.skipped_files(name)?.into_iter().collect();
    for f in still {
        if let Some(s) = stored.get_mut(&(name.to_string(), f.path.clone())) {
            s.revision = corpus.revision.clone();
        } else if let Some(skip) = cached_skips.get(&f.path) {
            count_skip(report, &f.path, skip);
        } else {
            report.no_kernels += 1;
        }
    }
    for ((c, _), s) in stored.iter() {
        if c == name {
            report.kernels += u64::from(s.facts.kernels);
            report.with_parse_errors += u64::from(s.facts.has_errors);
        }
    }
    Ok(())
}

fn count_skip(report: &mut CorpusReport, path: &str, skip: &Skip) {
    *report.skipped.entry(skip.name().to_string()).or_default() += 1;
    if report.skipped_files.len() < MAX_LISTED_SKIPS {
        report.skipped_files.push(SkippedFile { path: path.to_string(), reason: skip.to_string() });
    }
}

/// A file to mine and its bytes, or why they were not read.
pub(crate) struct Read<'f> {
    pub(crate) file: &'f CorpusFile,
    pub(crate) bytes: std::result::Result<Vec<u8>, Skip>,
}

/// A file mined: its blob id and what its facts came to.
pub(crate) struct Outcome<'f> {
    pub(crate) file: &'f CorpusFile,
    pub(crate) blob: String,
    pub(crate) outcome: FileOutcome,
}

/// Reads files: git blobs one by one (a repository handle is not shared
/// across threads), directory files in parallel. Oversized files are not read.
fn read_all<'f>(corpus: &Corpus, files: &[&'f CorpusFile], max_bytes: u64) -> Vec<Read<'f>> {
    let too_large = |f: &CorpusFile| (f.size > max_bytes).then_some(Skip::TooLarge(f.size));
    if corpus.repository().is_some() {
        files.iter().map(|f| Read { file: f, bytes: too_large(f).map_or_else(|| corpus.read(f), Err) }).collect()
    } else {
        files
            .par_iter()
            .map(|f| {
                let bytes = too_large(f).map_or_else(|| f.read_from_disk().unwrap_or(Err(Skip::MissingObject)), Err);
                Read { file: f, bytes }
            })
            .collect()
    }
}

pub(crate) fn process(
    lang: Lang,
    bytes: &[u8],
    limits: &Limits,
    prefilter: &Prefilter,
    opts: &ExtractOptions,
) -> FileOutcome {
    match screen(lang, bytes, limits, prefilter) {
        Screen::Parse(text) => extract_outcome(lang, text, opts),
        Screen::Decided(outcome) => outcome,
    }
}

/// What the bytes alone decide, before any parse.
pub(crate) enum Screen<'b> {
    /// The text, to parse.
    Parse(&'b str),
    /// A skip (binary, invalid UTF-8, nesting too deep) or no kernel marker.
    Decided(FileOutcome),
}

pub(crate) fn screen<'b>(lang: Lang, bytes: &'b [u8], limits: &Limits, prefilter: &Prefilter) -> Screen<'b> {
    let text = match kidiom_syntax::decode(bytes, limits) {
        Ok(t) => t,
        Err(skip) => return Screen::Decided(FileOutcome::Skipped(skip)),
    };
    if !prefilter.may_contain_kernels(lang, bytes) {
        return Screen::Decided(FileOutcome::NoKernels);
    }
    Screen::Parse(text)
}

fn extract_outcome(lang: Lang, text: &str, opts: &ExtractOptions) -> FileOutcome {
    match kidiom_miner::extract(lang, text, opts) {
        Ok(facts) if !facts.worth_keeping() => FileOutcome::NoKernels,
        Ok(facts) => FileOutcome::Parsed(facts),
        Err(skip) => FileOutcome::Skipped(skip),
    }
}
/// How a path input (a git repository or a directory, not a manifest)
/// becomes a corpus.
#[derive(Debug, Default)]
pub(crate) struct PathInputs {
    /// Corpus name (default: the directory's name).
    pub(crate) name: Option<String>,
    /// Revision of a git repository (default: HEAD).
    pub(crate) rev: Option<String>,
    pub(crate) include: Vec<String>,
    pub(crate) exclude: Vec<String>,
}

/// The corpus manifests of `inputs`: manifests read, paths described by `paths`.
pub(crate) fn manifests_for(inputs: &[PathBuf], paths: &PathInputs) -> Result<Vec<Manifest>> {
    let mut out = Vec::new();
    for input in inputs {
        let is_manifest = input.extension().is_some_and(|e| e == "toml") && input.is_file();
        let m = if is_manifest {
            Manifest::load(input).with_context(|| format!("reading manifest {}", input.display()))?
        } else {
            if !input.exists() {
                anyhow::bail!("corpus {}: no such file or directory", input.display());
            }
            let mut m = Manifest::for_path(input, paths.name.as_deref(), paths.rev.as_deref())
                .with_context(|| format!("corpus {}", input.display()))?;
            m.include = paths.include.clone();
            m.exclude = paths.exclude.clone();
            m
        };
        out.push(m);
    }
    Ok(out)
}
