//! The mining run: list each corpus, reuse cached facts for unchanged
//! blobs, read and parse the rest in parallel, aggregate every corpus's
//! facts into idioms and write it all in one catalog transaction.
//!
//! The transaction starts before anything is read, so a second run on the
//! same catalog waits (or fails with a clear message) instead of computing
//! from a stale snapshot, and a killed run leaves the previous state intact.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use kidiom_miner::{
    Corpus, CorpusFile, DeviceMacros, ExtractOptions, FACTS_VERSION, FileFacts, FileInput, KNOWN_DEVICE_MACROS, Lang,
    Limits, Manifest, MineConfig, Prefilter, Skip, SourceKind, blob_id, merge_device_macro, scan_device_macros,
};
use kidiom_patterns::{Catalog, FileOutcome, Kind, Pattern};
use rayon::prelude::*;
use serde::Serialize;

/// What to mine and how.
pub(crate) struct MineOptions {
    pub(crate) limits: Limits,
    pub(crate) config: MineConfig,
    pub(crate) progress: bool,
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

const MAX_LISTED_SKIPS: usize = 20;

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
    for manifest in manifests {
        let t = Instant::now();
        let mut report = CorpusReport { name: manifest.name.clone(), ..Default::default() };
        let corpus = match open_with_fallback(manifest) {
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
        report.kind = kind_name(corpus.manifest.kind).to_string();
        report.source = corpus.manifest.source.clone();
        report.revision = corpus.revision.clone();
        mine_corpus(&tx, &corpus, opts, &mut stored, &mut report)
            .with_context(|| format!("mining corpus {}", corpus.manifest.name))?;
        report.seconds = t.elapsed().as_secs_f64();
        reports.push(report);
    }
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
        i.key.lang == kidiom_miner::Lang::Python
            && matches!(
                i.key.mechanism,
                kidiom_miner::Mechanism::Keyword
                    | kidiom_miner::Mechanism::Decorator
                    | kidiom_miner::Mechanism::Wrapper
            )
    };
    let docs = if idioms.iter().any(documented) {
        let cwd = std::env::current_dir().unwrap_or_default();
        crate::apidocs::TritonDocs::load(&kidiom_validator::find_python(&cwd))
    } else {
        crate::apidocs::TritonDocs::default()
    };
    // A self-assigned wrapper (`x = W(x, 1, 0)`) is taken for a hint by the miner; Triton's
    // documentation says which are (`tl.multiple_of`) and which transform (`tl.trans`).
    idioms.retain(|i| {
        !(i.key.lang == kidiom_miner::Lang::Python
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
    stall_for_tests();
    tx.commit()?;
    Ok(MineReport { catalog: path, corpora: reports, patterns: patterns.len(), seconds: start.elapsed().as_secs_f64() })
}

fn kind_name(k: SourceKind) -> &'static str {
    match k {
        SourceKind::Git => "git",
        SourceKind::Dir => "dir",
        SourceKind::Pypi => "pypi",
    }
}

fn open_with_fallback(manifest: Manifest) -> Result<(Corpus, Option<String>)> {
    let fallback = manifest.fallback.clone();
    let name = manifest.name.clone();
    match Corpus::open(manifest) {
        Ok(c) => Ok((c, None)),
        Err(first) => {
            let Some(fb) = fallback else { return Err(first.into()) };
            let m = Manifest::load(Path::new(&fb)).with_context(|| format!("fallback of corpus {name}"))?;
            let c = Corpus::open(m).with_context(|| format!("{first}; fallback {fb}"))?;
            let note = format!("used fallback {fb} ({} {}): {first}", kind_name(c.manifest.kind), c.manifest.source);
            Ok((c, Some(note)))
        }
    }
}

/// The cache key for facts: extractor version, limits, and for C/C++ the
/// device macros (they decide which functions are kernels).
fn fingerprint(lang: Lang, limits: &Limits, macros: &DeviceMacros) -> String {
    let mut key = format!("v{FACTS_VERSION};{};{}", limits.max_bytes, limits.max_depth);
    if matches!(lang, Lang::Cuda | Lang::Cpp) {
        for (k, v) in macros {
            key.push_str(&format!(";{k}={v}"));
        }
    }
    blob_id(key.as_bytes())
}

fn bar(opts: &MineOptions, len: u64, name: &str) -> ProgressBar {
    if !opts.progress || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    let style = ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos}/{len} files {per_sec} {msg}")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    pb.set_style(style);
    pb.set_prefix(name.to_string());
    pb
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
    let pb = bar(opts, files.len() as u64, name);

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
    let mut macros: DeviceMacros = KNOWN_DEVICE_MACROS.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    for f in &reuse {
        if let Some(s) = stored.get(&(name.to_string(), f.path.clone())) {
            for (name, body) in &s.facts.device_macros {
                merge_device_macro(&mut macros, name.clone(), body.clone());
            }
        }
    }
    for (f, bytes) in &texts {
        if matches!(f.lang, Lang::Cuda | Lang::Cpp)
            && let Ok(bytes) = bytes
            && let Ok(text) = std::str::from_utf8(bytes)
        {
            for (name, body) in scan_device_macros(text) {
                merge_device_macro(&mut macros, name, body);
            }
        }
    }
    let fp: HashMap<Lang, String> = Lang::ALL.iter().map(|l| (*l, fingerprint(*l, &opts.limits, &macros))).collect();
    // Reused facts computed under other macros or another extractor are recomputed.
    let (still, stale): (Vec<&CorpusFile>, Vec<&CorpusFile>) =
        reuse.into_iter().partition(|f| cached.get(&f.path).is_some_and(|c| fp.get(&f.lang) == Some(&c.fingerprint)));
    texts.extend(read_all(corpus, &stale, opts.limits.max_bytes));
    report.cached = still.len() as u64;
    pb.inc(still.len() as u64);

    let prefilter = Prefilter::new(&macros);
    let extract_opts = ExtractOptions { device_macros: macros.clone() };
    let outcomes: Vec<(&CorpusFile, String, FileOutcome)> = texts
        .into_par_iter()
        .map(|(f, bytes)| {
            let (blob, outcome) = match bytes {
                Err(skip) => (f.blob.clone().unwrap_or_default(), FileOutcome::Skipped(skip)),
                Ok(bytes) => {
                    let blob = f.blob.clone().unwrap_or_else(|| blob_id(&bytes));
                    (blob, process(f.lang, &bytes, &opts.limits, &prefilter, &extract_opts))
                }
            };
            pb.inc(1);
            (f, blob, outcome)
        })
        .collect();
    pb.finish_and_clear();

    tx.put_corpus(name, kind_name(corpus.manifest.kind), &corpus.manifest.source, &corpus.revision)?;
    for (path, skip) in &list_skips {
        count_skip(report, path, skip);
    }
    for (f, blob, outcome) in &outcomes {
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
    // Reused files keep their outcome: facts, kernel-free, or skipped with the cached reason.
    let cached_skips: HashMap<String, Skip> = tx.skipped_files(name)?.into_iter().collect();
    for f in &still {
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

type Read<'f> = (&'f CorpusFile, std::result::Result<Vec<u8>, Skip>);

/// Reads files: git blobs one by one (a repository handle is not shared
/// across threads), directory files in parallel. Oversized files are not read.
fn read_all<'f>(corpus: &Corpus, files: &[&'f CorpusFile], max_bytes: u64) -> Vec<Read<'f>> {
    let too_large = |f: &CorpusFile| (f.size > max_bytes).then_some(Skip::TooLarge(f.size));
    if corpus.repository().is_some() {
        files.iter().map(|f| (*f, too_large(f).map_or_else(|| corpus.read(f), Err))).collect()
    } else {
        files
            .par_iter()
            .map(|f| {
                let bytes = too_large(f).map_or_else(|| f.read_from_disk().unwrap_or(Err(Skip::MissingObject)), Err);
                (*f, bytes)
            })
            .collect()
    }
}

fn process(lang: Lang, bytes: &[u8], limits: &Limits, prefilter: &Prefilter, opts: &ExtractOptions) -> FileOutcome {
    let text = match kidiom_miner::decode(bytes, limits) {
        Ok(t) => t,
        Err(skip) => return FileOutcome::Skipped(skip),
    };
    if !prefilter.may_contain_kernels(lang, bytes) {
        return FileOutcome::NoKernels;
    }
    match kidiom_miner::extract(lang, text, opts) {
        // A header that only defines device macros keeps its facts: re-runs need the macros;
        // a module that only defines constants or names for Triton functions keeps them:
        // other modules import them.
        Ok(facts)
            if facts.kernels == 0
                && facts.families.is_empty()
                && facts.scopes.is_empty()
                && facts.device_macros.is_empty()
                && facts.constants.is_empty()
                && facts.functions.is_empty() =>
        {
            FileOutcome::NoKernels
        }
        Ok(facts) => FileOutcome::Parsed(facts),
        Err(skip) => FileOutcome::Skipped(skip),
    }
}

/// Test seam: `KIDIOM_STALL_BEFORE_COMMIT_MS` holds the finished, uncommitted
/// transaction for a while, so tests can kill a run or race a second one at
/// the moment it matters. It announces itself on stderr.
fn stall_for_tests() {
    if let Some(ms) = std::env::var("KIDIOM_STALL_BEFORE_COMMIT_MS").ok().and_then(|v| v.parse::<u64>().ok()) {
        eprintln!("kidiom: stalling before commit for {ms} ms");
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}
