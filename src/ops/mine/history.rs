//! `kidiom mine --history`: edit idioms from the commits of git corpora.
//!
//! Per corpus: list the first-parent commits (`--since`, `--max-commits`),
//! reuse the cached concrete edits of commits mined before, mine the rest
//! in parallel in batches, each batch committed to the cache on its own (an
//! interrupted run resumes after the last batch). Then the concrete edits
//! of every corpus of the run are generalized into rules, and the catalog's
//! edit patterns are replaced by them in one transaction.
//!
//! With a Ray executor the commits to mine go out in ranges ([`HistoryJob`])
//! that `kidiom shard` mines on the nodes; each range's edits go into the
//! cache as they come back, as a local batch's do. Generalizing stays here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use kidiom_miner::history::{
    self, BlobCache, BlobCounts, CommitEdits, CommitMeta, CorpusHistory, GeneralizeStats, HistoryConfig,
};
use kidiom_miner::{Corpus, Manifest, SourceKind};
use kidiom_patterns::{Catalog, Kind, Pattern};
use serde::{Deserialize, Serialize};

use kidiom_syntax::Limits;

use super::remote::{Remote, Shard, ShardJob, ShardReport};
use super::{MAX_LISTED_SKIPS, bar, open_with_fallback};

/// What to mine and how.
pub(crate) struct HistoryOptions {
    pub(crate) config: HistoryConfig,
    pub(crate) progress: bool,
    /// Commits per cache batch.
    pub(crate) batch: usize,
    /// Where commits are mined: here (`None`) or on a Ray cluster.
    pub(crate) remote: Option<std::sync::Arc<Remote>>,
}

/// A history shard: consecutive commits of a git corpus to mine as the
/// local run mines each one. The node opens the corpus itself from the
/// manifest (its `source`: the same path, on a shared file system, or a URL
/// it clones; its `revision`: the run's commit id).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct HistoryJob {
    /// The driver's cache fingerprint: a node's kidiom must cut edits the same way.
    pub(crate) fingerprint: String,
    pub(crate) manifest: Manifest,
    pub(crate) commits: Vec<CommitMeta>,
    pub(crate) max_files_per_commit: usize,
    pub(crate) max_changed_lines: usize,
    pub(crate) max_edit_nodes: u32,
    pub(crate) max_bytes: u64,
    pub(crate) max_depth: usize,
    #[serde(default)]
    pub(crate) parse_only: bool,
}

/// A history shard's result: each commit's edits, in the job's order, and
/// what its file-version cache did.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct HistoryShardResult {
    pub(crate) commits: Vec<CommitEdits>,
    pub(crate) lookups: u64,
    pub(crate) parsed: u64,
    pub(crate) incremental: u64,
}

impl HistoryJob {
    fn new(corpus: &Corpus, commits: &[CommitMeta], cfg: &HistoryConfig) -> HistoryJob {
        let mut manifest = corpus.manifest.clone();
        // the commit this run resolved, whatever the branch has become since
        manifest.revision = Some(corpus.revision.clone());
        manifest.fallback = None;
        HistoryJob {
            fingerprint: history::history_fingerprint(cfg),
            manifest,
            commits: commits.to_vec(),
            max_files_per_commit: cfg.max_files_per_commit,
            max_changed_lines: cfg.max_changed_lines,
            max_edit_nodes: cfg.max_edit_nodes,
            max_bytes: cfg.limits.max_bytes,
            max_depth: cfg.limits.max_depth,
            parse_only: cfg.parse_only,
        }
    }
}

/// A history shard, on a node: its commits, as [`mine_corpus`] mines them here.
pub(crate) fn mine_shard(job: HistoryJob) -> Result<HistoryShardResult> {
    let cfg = HistoryConfig {
        max_files_per_commit: job.max_files_per_commit,
        max_changed_lines: job.max_changed_lines,
        max_edit_nodes: job.max_edit_nodes,
        limits: Limits { max_bytes: job.max_bytes, max_depth: job.max_depth },
        parse_only: job.parse_only,
        ..HistoryConfig::default()
    };
    let here = history::history_fingerprint(&cfg);
    if here != job.fingerprint {
        anyhow::bail!(
            "this kidiom cuts edits as {here}, the job needs {} (run the driver's kidiom: leave KIDIOM_NODE_KIDIOM unset to ship it)",
            job.fingerprint
        );
    }
    let (name, source) = (job.manifest.name.clone(), job.manifest.source.clone());
    // A URL is cloned once per node into its cache; the shards that start together on a
    // fresh node take turns, or each would remove the other's partial clone.
    let turn = if source.contains("://") || source.starts_with("git@") {
        let lock = kidiom_miner::mirror_path(&source).with_extension("lock");
        if let Some(dir) = lock.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let file = std::fs::File::create(&lock).with_context(|| format!("creating {}", lock.display()))?;
        file.lock().with_context(|| format!("locking {}", lock.display()))?;
        Some(file)
    } else {
        None
    };
    let corpus = Corpus::open(job.manifest).with_context(|| {
        format!(
            "opening corpus {name} ({source}) on this node: a node needs the repository at the same path (a shared file system) or a URL it can clone"
        )
    })?;
    drop(turn); // the clone is there: the others may open it
    let blobs = BlobCache::default();
    let commits = history::mine_commits(&corpus, &job.commits, &cfg, &blobs, &|| {})?;
    let BlobCounts { lookups, parsed, incremental } = blobs.counts();
    Ok(HistoryShardResult { commits, lookups, parsed, incremental })
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct HistoryCorpusReport {
    pub(crate) name: String,
    pub(crate) revision: String,
    /// Commits selected (first-parent chain, after --since/--max-commits).
    pub(crate) commits: u64,
    /// Commits whose edits came from the cache.
    pub(crate) cached: u64,
    /// Commits mined in this run.
    pub(crate) mined: u64,
    /// Concrete edits over the selected commits.
    pub(crate) edits: u64,
    /// File pairs whose trees were diffed.
    pub(crate) files: u64,
    /// File versions the commits mined in this run needed a tree of (two
    /// per file pair parsed).
    pub(crate) file_versions: u64,
    /// Distinct versions parsed for them: each once, whichever commits
    /// touch it.
    pub(crate) parsed_blobs: u64,
    /// Of those, parsed incrementally from a neighbouring version's tree.
    pub(crate) incremental_parses: u64,
    /// Files (or whole commits, path `*`) not mined, by reason.
    pub(crate) skipped: BTreeMap<String, u64>,
    /// Changes cut but dropped, by reason.
    pub(crate) dropped: BTreeMap<String, u64>,
    /// The first few skips, with their commit (not files added, deleted,
    /// of tests, or without kernel changes: those are by design).
    pub(crate) skipped_files: Vec<SkippedFile>,
    pub(crate) seconds: f64,
    /// Set when the corpus could not be mined; the run went on without it.
    pub(crate) error: Option<String>,
    /// Set when the manifest's fallback was used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) note: Option<String>,
    /// The shards sent to the cluster (Ray executor only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) shards: Option<ShardReport>,
}

#[derive(Debug, Serialize)]
pub(crate) struct SkippedFile {
    pub(crate) commit: String,
    pub(crate) path: String,
    pub(crate) reason: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct RuleSummary {
    pub(crate) id: String,
    pub(crate) commits: usize,
    pub(crate) occurrences: u64,
    pub(crate) true_edits: u64,
    pub(crate) false_edits: u64,
    pub(crate) before: String,
    pub(crate) after: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct HistoryReport {
    pub(crate) catalog: PathBuf,
    pub(crate) corpora: Vec<HistoryCorpusReport>,
    pub(crate) stats: GeneralizeStats,
    /// Training files and revision files parsed for the safety replay and
    /// opportunities (not already held from mining).
    pub(crate) generalize_parsed_blobs: u64,
    /// Of those, parsed incrementally from another version of the file.
    pub(crate) generalize_incremental_parses: u64,
    /// Edit patterns in the catalog after the run.
    pub(crate) patterns: usize,
    pub(crate) rules: Vec<RuleSummary>,
    pub(crate) generalize_seconds: f64,
    pub(crate) seconds: f64,
}

pub(crate) fn mine(catalog: &mut Catalog, manifests: Vec<Manifest>, opts: &HistoryOptions) -> Result<HistoryReport> {
    let start = Instant::now();
    let path = catalog.path().to_path_buf();
    let fingerprint = history::history_fingerprint(&opts.config);
    let mut reports = Vec::new();
    let mut opened: Vec<(Corpus, Vec<CommitEdits>)> = Vec::new();
    // File versions of the whole run, each parsed once (bounded memory).
    let blobs = BlobCache::default();
    for manifest in manifests {
        let t = Instant::now();
        let mut report = HistoryCorpusReport { name: manifest.name.clone(), ..Default::default() };
        if manifest.kind != SourceKind::Git {
            report.error = Some(format!(
                "history mining needs a git corpus; {} is a {} corpus (point it at a git repository)",
                manifest.name,
                if manifest.kind == SourceKind::Dir { "directory" } else { "pypi" }
            ));
            reports.push(report);
            continue;
        }
        let corpus = match open_with_fallback(manifest) {
            Ok((c, _)) if c.manifest.kind != SourceKind::Git => {
                report.error = Some(format!(
                    "history mining needs a git corpus; the fallback of {} is a {} corpus",
                    report.name,
                    c.manifest.kind.name()
                ));
                reports.push(report);
                continue;
            }
            Ok((c, note)) => {
                report.note = note;
                c
            }
            Err(e) => {
                report.error = Some(e.to_string());
                reports.push(report);
                continue;
            }
        };
        report.revision = corpus.revision.clone();
        let commits = mine_corpus(catalog, &corpus, &fingerprint, opts, &blobs, &mut report)
            .with_context(|| format!("mining the history of corpus {}", corpus.manifest.name))?;
        report.seconds = t.elapsed().as_secs_f64();
        reports.push(report);
        opened.push((corpus, commits));
    }
    let g = Instant::now();
    let inputs: Vec<CorpusHistory<'_>> =
        opened.iter().map(|(corpus, commits)| CorpusHistory { corpus, commits }).collect();
    let before = blobs.counts();
    // Rules are kept only where the matcher that applies them reproduces them.
    let result = history::generalize(&inputs, &opts.config, &blobs);
    let after = blobs.counts();
    let generalize_parsed_blobs = after.parsed - before.parsed;
    let generalize_incremental_parses = after.incremental - before.incremental;
    // Freeing thousands of trees takes a while: on another thread, while
    // the catalog is written.
    let freeing = std::thread::spawn(move || drop(blobs));
    let generalize_seconds = g.elapsed().as_secs_f64();
    let mut patterns: Vec<Pattern> = result.rules.iter().map(Pattern::from).collect();
    let run: BTreeSet<&str> = opened.iter().map(|(c, _)| c.manifest.name.as_str()).collect();
    keep_other_corpora(catalog, &run, &mut patterns)?;
    let tx = catalog.begin()?;
    tx.replace_patterns(Kind::Edit, &patterns)?;
    for (corpus, commits) in &opened {
        if let Some(newest) = commits.first() {
            tx.set_history_state(&corpus.manifest.name, &fingerprint, &newest.commit.id)?;
        }
    }
    tx.commit()?;
    let _ = freeing.join();
    let rules = result
        .rules
        .iter()
        .map(|r| RuleSummary {
            id: r.id.clone(),
            commits: r.commits.len(),
            occurrences: r.support.iter().map(|s| s.occurrences).sum(),
            true_edits: r.safety.true_edits,
            false_edits: r.safety.false_edits,
            before: r.before.clone(),
            after: r.after.clone(),
        })
        .collect();
    Ok(HistoryReport {
        catalog: path,
        corpora: reports,
        stats: result.stats,
        generalize_parsed_blobs,
        generalize_incremental_parses,
        patterns: patterns.len(),
        rules,
        generalize_seconds,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Edit rules mined from corpora this run does not name stay as they are:
/// only the rules with support in a corpus of this run are mined again (a
/// rule that also drew on another corpus is regenerated from this run's
/// corpora alone). Adds them to `patterns`.
fn keep_other_corpora(catalog: &Catalog, run: &BTreeSet<&str>, patterns: &mut Vec<Pattern>) -> Result<()> {
    // as mined: a rule merged into another pattern is still another corpus's rule
    let others: Vec<Pattern> = catalog
        .originals(Some(Kind::Edit))?
        .into_iter()
        .filter(|p| !p.support.is_empty() && p.support.iter().all(|s| !run.contains(s.corpus.as_str())))
        .collect();
    // A new rule whose id a kept rule holds is named after its corpus.
    let mut taken: BTreeSet<String> = others.iter().map(|p| p.id.clone()).collect();
    taken.extend(patterns.iter().map(|p| p.id.clone()));
    for p in patterns.iter_mut() {
        if others.iter().any(|o| o.id == p.id) {
            let corpus = p.support.first().map(|s| s.corpus.clone()).unwrap_or_default();
            let base = format!("{}-{corpus}", p.id);
            let mut id = base.clone();
            let mut n = 2;
            while taken.contains(&id) {
                id = format!("{base}-{n}");
                n += 1;
            }
            taken.insert(id.clone());
            p.id = id;
        }
    }
    patterns.extend(others);
    Ok(())
}

/// Mines one corpus's selected commits, reusing and filling the cache;
/// returns every selected commit's edits, newest first.
fn mine_corpus(
    catalog: &mut Catalog,
    corpus: &Corpus,
    fingerprint: &str,
    opts: &HistoryOptions,
    blobs: &BlobCache,
    report: &mut HistoryCorpusReport,
) -> Result<Vec<CommitEdits>> {
    let name = corpus.manifest.name.as_str();
    if catalog.history_state(name)?.is_some_and(|s| s.fingerprint != fingerprint) {
        let tx = catalog.begin()?;
        tx.clear_history(name)?;
        tx.commit()?;
    }
    let (mut cached, _bad) = catalog.history_commits(name)?;
    let selected = history::commits(corpus, &opts.config)?;
    report.commits = selected.len() as u64;
    let todo: Vec<_> = selected.iter().filter(|c| !cached.contains_key(&c.id)).cloned().collect();
    report.cached = (selected.len() - todo.len()) as u64;
    let pb = bar(opts.progress, todo.len() as u64, name, "commits");
    let abort_after = std::env::var("KIDIOM_HISTORY_ABORT_AFTER_BATCHES").ok().and_then(|v| v.parse::<usize>().ok());
    let before = blobs.counts();
    if let Some(remote) = &opts.remote {
        mine_remote(catalog, corpus, remote, &todo, opts, &pb, &mut cached, report, abort_after)?;
    } else {
        for (i, batch) in todo.chunks(opts.batch.max(1)).enumerate() {
            let mined = history::mine_commits(corpus, batch, &opts.config, blobs, &|| pb.inc(1))?;
            let tx = catalog.begin()?;
            tx.put_history_commits(name, &mined)?;
            tx.commit()?;
            report.mined += mined.len() as u64;
            for c in mined {
                cached.insert(c.commit.id.clone(), c);
            }
            if abort_after == Some(i + 1) {
                // Test seam: a run killed (SIGABRT) between batches.
                eprintln!("kidiom: aborting after {} batches (KIDIOM_HISTORY_ABORT_AFTER_BATCHES)", i + 1); // test seam
                std::process::abort();
            }
        }
        let after = blobs.counts();
        report.file_versions = after.lookups - before.lookups;
        report.parsed_blobs = after.parsed - before.parsed;
        report.incremental_parses = after.incremental - before.incremental;
    }
    pb.finish_and_clear();
    let mut out = Vec::with_capacity(selected.len());
    for c in &selected {
        if let Some(e) = cached.remove(&c.id) {
            out.push(e);
        }
    }
    tally(report, &out);
    Ok(out)
}

/// Adds the edits, files, skips and drops of a corpus's commits to its report.
fn tally(report: &mut HistoryCorpusReport, out: &[CommitEdits]) {
    for c in out {
        report.edits += c.edits.len() as u64;
        report.files += c.files;
        for s in &c.skipped {
            let reason = s.reason.split(' ').next().unwrap_or("").to_string();
            *report.skipped.entry(reason).or_default() += 1;
            if report.skipped_files.len() < MAX_LISTED_SKIPS
                && !matches!(s.reason.as_str(), "added" | "deleted" | "test-file" | "outside-kernels")
            {
                report.skipped_files.push(SkippedFile {
                    commit: c.commit.id.clone(),
                    path: s.path.clone(),
                    reason: s.reason.clone(),
                });
            }
        }
        for (d, n) in &c.dropped {
            let key = serde_json::to_value(d).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
            *report.dropped.entry(key).or_default() += n;
        }
    }
}

/// Mines `todo` as commit ranges on the cluster; each range's edits go into
/// the cache as they come back, as a local batch's do.
#[allow(clippy::too_many_arguments)]
fn mine_remote(
    catalog: &mut Catalog,
    corpus: &Corpus,
    remote: &Remote,
    todo: &[CommitMeta],
    opts: &HistoryOptions,
    pb: &indicatif::ProgressBar,
    cached: &mut std::collections::HashMap<String, CommitEdits>,
    report: &mut HistoryCorpusReport,
    abort_after: Option<usize>,
) -> Result<()> {
    let name = corpus.manifest.name.as_str();
    // Commit ranges on the cluster; each range's edits are cached as they come back.
    let ranges: Vec<&[CommitMeta]> = todo.chunks(remote.sizes.commits.max(1)).collect();
    let shards = ranges
        .iter()
        .map(|r| Shard {
            label: match (r.first(), r.last()) {
                (Some(a), Some(b)) if r.len() > 1 => {
                    format!("{} commits {}..{}", r.len(), short(&b.id), short(&a.id))
                }
                _ => r.first().map(|c| format!("commit {}", short(&c.id))).unwrap_or_default(),
            },
            job: ShardJob::History(HistoryJob::new(corpus, r, &opts.config)),
            files: BTreeMap::new(),
        })
        .collect();
    let (mut done, mut counts) = (0usize, BlobCounts::default());
    let mut shard_report = remote.run("history", shards, |k, r: HistoryShardResult| {
        let asked = ranges.get(k).map_or(0, |r| r.len());
        let ids_match =
            r.commits.iter().zip(ranges.get(k).copied().unwrap_or_default()).all(|(e, c)| e.commit.id == c.id);
        if r.commits.len() != asked || !ids_match {
            anyhow::bail!("history shard {} answered other commits than it was sent", k + 1);
        }
        let tx = catalog.begin()?;
        tx.put_history_commits(name, &r.commits)?;
        tx.commit()?;
        report.mined += r.commits.len() as u64;
        pb.inc(r.commits.len() as u64);
        counts.lookups += r.lookups;
        counts.parsed += r.parsed;
        counts.incremental += r.incremental;
        for c in r.commits {
            cached.insert(c.commit.id.clone(), c);
        }
        done += 1;
        if abort_after == Some(done) {
            // Test seam: a run killed (SIGABRT) between batches.
            eprintln!("kidiom: aborting after {done} shards (KIDIOM_HISTORY_ABORT_AFTER_BATCHES)"); // test seam
            std::process::abort();
        }
        Ok(())
    })?;
    shard_report.items = todo.len() as u64;
    report.shards = Some(shard_report);
    report.file_versions = counts.lookups;
    report.parsed_blobs = counts.parsed;
    report.incremental_parses = counts.incremental;
    Ok(())
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// Parses `--since`: `YYYY-MM-DD`, or seconds since the epoch.
pub(crate) fn parse_since(s: &str) -> Result<i64> {
    if let Ok(n) = s.parse::<i64>() {
        return Ok(n);
    }
    let parts: Vec<&str> = s.get(..10).unwrap_or(s).split('-').collect();
    let bad = || anyhow::anyhow!("--since {s:?}: expected YYYY-MM-DD or seconds since the epoch");
    let [y, m, d] = parts.as_slice() else { return Err(bad()) };
    let (y, m, d): (i16, i8, i8) =
        (y.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?, d.parse().map_err(|_| bad())?);
    let date = jiff::civil::Date::new(y, m, d).map_err(|_| bad())?;
    let day = date.to_zoned(jiff::tz::TimeZone::UTC).map_err(|_| bad())?;
    Ok(day.timestamp().as_second())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_parses_dates_and_seconds() {
        assert_eq!(parse_since("1970-01-01").unwrap(), 0);
        assert_eq!(parse_since("2000-03-01").unwrap(), 951_868_800);
        assert_eq!(parse_since("2023-11-14T22:13:20Z").unwrap(), 1_699_920_000);
        assert_eq!(parse_since("12345").unwrap(), 12345);
        assert!(parse_since("yesterday").is_err());
        assert!(parse_since("2024-13-01").is_err());
    }
}
