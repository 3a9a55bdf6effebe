//! History mining: edit idioms from a git corpus's commits.
//!
//! # Brief overview
//!
//! [`commits`] lists a git corpus's first-parent history (a merge is
//! diffed against its first parent). [`mine_commits`] cuts every commit's
//! [`ConcreteEdit`]s, in parallel: for each modified file of a supported
//! language both versions are parsed, their trees diffed, and the smallest
//! changed subtrees kept with their anchoring context ([`CommitEdits`] are
//! what a caller caches). [`generalize`] turns the concrete edits of one or
//! more corpora into [`Rule`]s: bucketed by shape, clustered by
//! anti-unification, validated on every example, replayed for safety on the
//! training files, counted for opportunities at each corpus's revision,
//! categorized and scored.
//!
//! Bad input is data: deleted, added and renamed files, binary blobs,
//! enormous commits and diffs, unparsable revisions are skipped with a
//! reason ([`FileSkip`]) and mining carries on.

mod edit;
mod generalize;
mod pattern;
mod safety;
mod tree;
mod treediff;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use git2::{Delta, DiffOptions, Oid, Repository, Sort};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

pub use edit::{ConcreteEdit, EditContext, EditDrop};

use crate::corpus::{Corpus, FileFilter};
use crate::error::{Error, Result};
use crate::idiom::{Category, IdiomExample, Support};
use crate::lang::Lang;
use crate::parse::Limits;
use generalize::{Ex, Template};
use pattern::{Binds, Pat};
use tree::Tree;

/// Version of the concrete-edit extraction: cached edits of another
/// version (or another grammar) are mined again.
pub const HISTORY_VERSION: u32 = 4;

/// The cache fingerprint: [`HISTORY_VERSION`], the grammars and the limits
/// that decide which edits are cut.
pub fn history_fingerprint(cfg: &HistoryConfig) -> String {
    let kinds: Vec<String> = [Lang::Python, Lang::Cuda, Lang::Cpp]
        .iter()
        .map(|l| edit::language(*l).map_or(0, |x| x.node_kind_count()).to_string())
        .collect();
    format!(
        "v{HISTORY_VERSION};kinds={};edit={};lines={};files={};bytes={}",
        kinds.join(","),
        cfg.max_edit_nodes,
        cfg.max_changed_lines,
        cfg.max_files_per_commit,
        cfg.limits.max_bytes
    )
}

/// Options for history mining.
#[derive(Debug, Clone)]
pub struct HistoryConfig {
    /// Mine at most this many commits (the newest).
    pub max_commits: Option<usize>,
    /// Only commits authored at or after this time (seconds since the epoch).
    pub since: Option<i64>,
    /// Commits that modify more files of supported languages are skipped.
    pub max_files_per_commit: usize,
    /// Files with more changed lines than this in one commit are skipped.
    pub max_changed_lines: usize,
    /// Edits with more nodes than this on either side are dropped.
    pub max_edit_nodes: u32,
    /// Distinct commits a rule needs.
    pub min_commits: usize,
    /// Rules that stay unsafe after specialization are kept only at this
    /// precision (edits made / all edits on the training files) or above.
    pub min_precision: f64,
    /// Holes a rule may have.
    pub max_holes: usize,
    /// File size and nesting limits.
    pub limits: Limits,
    /// Benchmark floor: parse both versions of every file, cut nothing.
    pub parse_only: bool,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            max_commits: None,
            since: None,
            max_files_per_commit: 400,
            max_changed_lines: 4_000,
            max_edit_nodes: 160,
            min_commits: 2,
            min_precision: 0.5,
            max_holes: 8,
            limits: Limits::default(),
            parse_only: false,
        }
    }
}

/// A commit's identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitMeta {
    /// Full commit id.
    pub id: String,
    /// First line of the message.
    pub summary: String,
    /// Author date, RFC 3339 (UTC).
    pub date: String,
    /// Author time, seconds since the epoch.
    pub time: i64,
    /// Words of the message that hint at intent (`perf`, `speed`,
    /// `precision`, `overflow`, `fuse`, `redundant`).
    pub tags: Vec<String>,
}

/// A file of a commit that was not mined, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSkip {
    /// Path in the commit (`*` for the whole commit).
    pub path: String,
    /// A short reason: `added`, `deleted`, `renamed`, `binary`,
    /// `too-large`, `huge-diff`, `comments-only`, `parse-failed`,
    /// `unsupported-language`, `enormous-commit`, `missing-object`, ...
    pub reason: String,
}

/// What one commit yielded: the unit of the history cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitEdits {
    /// The commit.
    pub commit: CommitMeta,
    /// Its concrete edits.
    pub edits: Vec<ConcreteEdit>,
    /// Files not mined.
    pub skipped: Vec<FileSkip>,
    /// Changes cut but dropped, by reason.
    pub dropped: BTreeMap<EditDrop, u64>,
    /// Files whose trees were diffed.
    pub files: u64,
}

/// Lists the commits to mine, newest first: the first-parent chain from the
/// corpus's revision, limited by `since` and `max_commits`.
pub fn commits(corpus: &Corpus, cfg: &HistoryConfig) -> Result<Vec<CommitMeta>> {
    let repo = corpus.repository().ok_or_else(|| Error::git(&corpus.manifest.source, "not a git corpus"))?;
    let git = |e: git2::Error| Error::git(repo.path().display(), e.message());
    let mut walk = repo.revwalk().map_err(git)?;
    walk.set_sorting(Sort::TOPOLOGICAL).map_err(git)?;
    walk.simplify_first_parent().map_err(git)?;
    walk.push(Oid::from_str(&corpus.revision).map_err(git)?).map_err(git)?;
    let mut out = Vec::new();
    for oid in walk {
        let oid = oid.map_err(git)?;
        let c = repo.find_commit(oid).map_err(git)?;
        let time = c.author().when().seconds();
        if cfg.since.is_some_and(|s| time < s) {
            continue;
        }
        let message = String::from_utf8_lossy(c.message_bytes()).into_owned();
        out.push(CommitMeta {
            id: oid.to_string(),
            summary: message.lines().next().unwrap_or("").trim().to_string(),
            date: rfc3339(time),
            time,
            tags: tags(&message),
        });
        if cfg.max_commits.is_some_and(|m| out.len() >= m) {
            break;
        }
    }
    Ok(out)
}

fn tags(message: &str) -> Vec<String> {
    let m = message.to_ascii_lowercase();
    let table: [(&str, &[&str]); 6] = [
        ("perf", &["[perf]", "perf:", "performance", "optimiz", "optimis"]),
        ("speed", &["speed", "faster", "accelerat", "latency"]),
        ("precision", &["precision", "tf32", "ieee", "accuracy", "numerical"]),
        ("overflow", &["overflow", "int64", "illegal memory", "out of bound"]),
        ("fuse", &["fuse", "fusion", "fusing"]),
        ("redundant", &["redundant", "unnecessary", "unneeded", "useless"]),
    ];
    table.iter().filter(|(_, ws)| ws.iter().any(|w| m.contains(w))).map(|(t, _)| t.to_string()).collect()
}

/// RFC 3339 in UTC for seconds since the epoch.
fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil from days (H. Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

thread_local! {
    static REPOS: RefCell<HashMap<PathBuf, Repository>> = RefCell::new(HashMap::new());
}

/// Runs `f` with this thread's handle on the repository at `path`
/// (git2 repositories cannot be shared between threads).
fn with_repo<T>(path: &Path, f: impl FnOnce(&Repository) -> T) -> Option<T> {
    REPOS.with(|cell| {
        let mut repos = cell.borrow_mut();
        if !repos.contains_key(path) {
            let r = Repository::open(path).ok()?;
            repos.insert(path.to_path_buf(), r);
        }
        repos.get(path).map(f)
    })
}

fn read_blob(repo: &Repository, id: Oid) -> Option<Vec<u8>> {
    repo.find_blob(id).ok().map(|b| b.content().to_vec())
}

/// Mines the concrete edits of `commits` (in parallel), calling `progress`
/// once per commit. The result is in the order of `commits`.
pub fn mine_commits(
    corpus: &Corpus,
    commits: &[CommitMeta],
    cfg: &HistoryConfig,
    progress: &(dyn Fn() + Sync),
) -> Result<Vec<CommitEdits>> {
    let repo = corpus.repository().ok_or_else(|| Error::git(&corpus.manifest.source, "not a git corpus"))?;
    let path = repo.path().to_path_buf();
    let filter = FileFilter::new(&corpus.manifest.include, &corpus.manifest.exclude)?;
    let out = commits
        .par_iter()
        .map(|c| {
            let r = with_repo(&path, |repo| mine_one(repo, c, &filter, cfg)).unwrap_or_else(|| CommitEdits {
                commit: c.clone(),
                edits: Vec::new(),
                skipped: vec![FileSkip { path: "*".into(), reason: "repository-unreadable".into() }],
                dropped: BTreeMap::new(),
                files: 0,
            });
            progress();
            r
        })
        .collect();
    Ok(out)
}

fn mine_one(repo: &Repository, meta: &CommitMeta, filter: &FileFilter, cfg: &HistoryConfig) -> CommitEdits {
    let mut out = CommitEdits {
        commit: meta.clone(),
        edits: Vec::new(),
        skipped: Vec::new(),
        dropped: BTreeMap::new(),
        files: 0,
    };
    let skip_all = |out: &mut CommitEdits, reason: &str| {
        out.skipped.push(FileSkip { path: "*".into(), reason: reason.into() });
    };
    let Some(commit) = Oid::from_str(&meta.id).ok().and_then(|o| repo.find_commit(o).ok()) else {
        skip_all(&mut out, "missing-object");
        return out;
    };
    let Ok(tree) = commit.tree() else {
        skip_all(&mut out, "missing-object");
        return out;
    };
    let Some(parent) = commit.parent(0).ok().and_then(|p| p.tree().ok()) else {
        skip_all(&mut out, "root-commit");
        return out;
    };
    let mut opts = DiffOptions::new();
    opts.skip_binary_check(true);
    let Ok(diff) = repo.diff_tree_to_tree(Some(&parent), Some(&tree), Some(&mut opts)) else {
        skip_all(&mut out, "diff-failed");
        return out;
    };
    let mut work: Vec<(String, Lang, Oid, Oid)> = Vec::new();
    for delta in diff.deltas() {
        let Some(path) = delta.new_file().path().or_else(|| delta.old_file().path()) else { continue };
        let path = path.to_string_lossy().replace('\\', "/");
        let Some(lang) = filter.keep(&path) else { continue };
        let reason = match delta.status() {
            Delta::Modified => None,
            Delta::Added => Some("added"),
            Delta::Deleted => Some("deleted"),
            Delta::Renamed | Delta::Copied => Some("renamed"),
            Delta::Typechange => Some("typechange"),
            _ => Some("unmodified"),
        };
        if let Some(r) = reason {
            out.skipped.push(FileSkip { path, reason: r.into() });
            continue;
        }
        if lang == Lang::Rust {
            out.skipped.push(FileSkip { path, reason: "unsupported-language".into() });
            continue;
        }
        if delta.old_file().mode() == git2::FileMode::Link || delta.new_file().mode() == git2::FileMode::Link {
            out.skipped.push(FileSkip { path, reason: "symlink".into() });
            continue;
        }
        work.push((path, lang, delta.old_file().id(), delta.new_file().id()));
    }
    if work.len() > cfg.max_files_per_commit {
        skip_all(&mut out, &format!("enormous-commit ({} files)", work.len()));
        return out;
    }
    for (path, lang, old, new) in work {
        let (Some(a), Some(b)) = (read_blob(repo, old), read_blob(repo, new)) else {
            out.skipped.push(FileSkip { path, reason: "missing-object".into() });
            continue;
        };
        match file_edits(lang, &path, (&old.to_string(), &new.to_string()), &a, &b, cfg) {
            Ok((edits, drops)) => {
                out.files += 1;
                out.edits.extend(edits);
                for d in drops {
                    *out.dropped.entry(d).or_default() += 1;
                }
            }
            Err(reason) => out.skipped.push(FileSkip { path, reason }),
        }
    }
    out
}

type FileResult = std::result::Result<(Vec<ConcreteEdit>, Vec<EditDrop>), String>;

/// The concrete edits between two versions of one file.
///
/// Python files are parsed only where they changed: each hunk is grown to
/// the top-level blocks around it (unchanged lines map one to one), and the
/// old and new blocks are parsed and diffed as fragments. A fragment with a
/// parse error (a hunk inside a multi-line string, say) falls back to
/// parsing both whole files.
fn file_edits(lang: Lang, path: &str, blobs: (&str, &str), a: &[u8], b: &[u8], cfg: &HistoryConfig) -> FileResult {
    let ta = crate::parse::decode(a, &cfg.limits).map_err(|s| s.name().to_string())?;
    let tb = crate::parse::decode(b, &cfg.limits).map_err(|s| s.name().to_string())?;
    if cfg.parse_only {
        Tree::parse(lang, ta, &cfg.limits).map_err(|s| s.name().to_string())?;
        Tree::parse(lang, tb, &cfg.limits).map_err(|s| s.name().to_string())?;
        return Ok((Vec::new(), Vec::new()));
    }
    let hunks = edit::hunks(a, b).ok_or("diff-failed")?;
    let changed: usize = hunks.iter().map(|h| h.old_len + h.new_len).sum();
    if changed > cfg.max_changed_lines {
        return Err("huge-diff".into());
    }
    if edit::comment_only(lang, ta, tb, &hunks) {
        return Err("comments-only".into());
    }
    if lang == Lang::Python
        && let Some(segs) = edit::segments(ta, tb, &hunks)
    {
        let mut out = (Vec::new(), Vec::new());
        let mut clean = true;
        for seg in &segs {
            let (fa, fb) = (&ta[seg.old.clone()], &tb[seg.new.clone()]);
            let (Ok(x), Ok(y)) = (Tree::parse(lang, fa, &cfg.limits), Tree::parse(lang, fb, &cfg.limits)) else {
                clean = false;
                break;
            };
            if x.nodes.first().is_some_and(|n| n.err) || y.nodes.first().is_some_and(|n| n.err) {
                clean = false;
                break;
            }
            let (mut edits, drops) = edit::cut(lang, path, blobs, &x, &y, cfg);
            for e in &mut edits {
                e.line += seg.old_line;
                e.start += seg.old.start as u32;
                if let Some(c) = &mut e.context {
                    c.start += seg.old.start as u32;
                }
            }
            out.0.extend(edits);
            out.1.extend(drops);
        }
        if clean {
            return Ok(out);
        }
    }
    let x = Tree::parse(lang, ta, &cfg.limits).map_err(|s| s.name().to_string())?;
    let y = Tree::parse(lang, tb, &cfg.limits).map_err(|s| s.name().to_string())?;
    Ok(edit::cut(lang, path, blobs, &x, &y, cfg))
}

/// One corpus's input to [`generalize`].
pub struct CorpusHistory<'a> {
    /// The opened corpus (its repository is read for safety replay and
    /// opportunities).
    pub corpus: &'a Corpus,
    /// Its mined commits.
    pub commits: &'a [CommitEdits],
}

/// How a rule fared when replayed on its training files.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Safety {
    /// Sites where the rule makes the edit the commit made.
    pub true_edits: u64,
    /// Sites where the rule would edit but the commit did not.
    pub false_edits: u64,
    /// Edits of the same shape in the training files that the rule does not cover.
    pub missed_edits: u64,
    /// The rule was specialized (a hole fixed to a value) to become safe.
    pub specialized: bool,
    /// Training examples re-matched and reproduced exactly (all of them).
    pub validated: u64,
}

/// A mined edit rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    /// Stable readable id.
    pub id: String,
    /// Language.
    pub lang: Lang,
    /// Category, from the change's words and, failing those, the commit messages.
    pub category: Category,
    /// One line.
    pub title: String,
    /// Why it is believed: commits, safety, messages.
    pub rationale: String,
    /// Before template (ast-grep syntax).
    pub before: String,
    /// After template (ast-grep syntax).
    pub after: String,
    /// Support per corpus: occurrences = concrete edits, files = distinct
    /// paths, opportunities = sites at the corpus's revision matching `before`.
    pub support: Vec<Support>,
    /// Values bound to holes in the training examples, most frequent first.
    pub values: Vec<(String, u64)>,
    /// Example edits.
    pub examples: Vec<IdiomExample>,
    /// The commits it was mined from, oldest first.
    pub commits: Vec<CommitMeta>,
    /// Recurrence times safety, plus a little for telling commit messages.
    pub score: f64,
    /// Replay results.
    pub safety: Safety,
}

/// Counts from [`generalize`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct GeneralizeStats {
    /// Concrete edits in.
    pub edits: u64,
    /// Shape buckets.
    pub buckets: u64,
    /// Clusters formed.
    pub clusters: u64,
    /// Clusters with enough commits to be candidates.
    pub candidates: u64,
    /// Examples that a candidate's template failed to re-match or reproduce (removed).
    pub invalid_examples: u64,
    /// Candidates specialized to become safe.
    pub specialized: u64,
    /// Candidates dropped as unsafe.
    pub unsafe_dropped: u64,
    /// Safe rules found by lifting an unsafe candidate to the enclosing
    /// statement.
    pub lifted: u64,
    /// Training file pairs replayed.
    pub replayed_files: u64,
    /// Seconds spent clustering, replaying and counting opportunities.
    pub cluster_seconds: f64,
    /// Seconds spent in the safety replay.
    pub replay_seconds: f64,
    /// Seconds spent counting opportunities at the corpora's revisions.
    pub opportunity_seconds: f64,
}

/// What [`generalize`] produced.
#[derive(Debug, Clone, Default)]
pub struct HistoryResult {
    /// Rules, best first.
    pub rules: Vec<Rule>,
    /// Counts.
    pub stats: GeneralizeStats,
}

/// An edit's place: corpus, commit and edit indices.
#[derive(Debug, Clone, Copy)]
struct Item {
    corpus: usize,
    commit: usize,
    edit: usize,
}

/// A bucket's clusters: language, bucket key, (template, edit indices).
type Clustered = (Lang, u64, Vec<(Template, Vec<usize>)>);

/// A training file pair: path, language and the candidates trained on it.
type TrainingFile = (String, Lang, Vec<usize>);

struct Candidate {
    template: Template,
    items: Vec<usize>,
    bucket: u64,
    lang: Lang,
    safety: Safety,
}

/// Generalizes the concrete edits of `corpora` into safe, recurring rules.
pub fn generalize(corpora: &[CorpusHistory<'_>], cfg: &HistoryConfig) -> HistoryResult {
    let mut stats = GeneralizeStats::default();
    let t0 = std::time::Instant::now();
    let mut items = Vec::new();
    for (ci, c) in corpora.iter().enumerate() {
        for (ki, k) in c.commits.iter().enumerate() {
            for ei in 0..k.edits.len() {
                items.push(Item { corpus: ci, commit: ki, edit: ei });
            }
        }
    }
    // Corpora hold repositories, which threads cannot share: keep only the edits.
    let sets: Vec<&[CommitEdits]> = corpora.iter().map(|c| c.commits).collect();
    let edit_of = |it: &Item| -> &ConcreteEdit { &sets[it.corpus][it.commit].edits[it.edit] };
    let exs: Vec<Option<Ex<'_>>> = items
        .par_iter()
        .map(|it| {
            let e = edit_of(it);
            Some(Ex {
                before: Tree::from_flat(&e.before, &e.before_tree)?,
                after: Tree::from_flat(&e.after, &e.after_tree)?,
            })
        })
        .collect();
    stats.edits = items.len() as u64;
    // Buckets, then groups inside each.
    let mut buckets: HashMap<(Lang, u64), BTreeMap<u64, Vec<usize>>> = HashMap::new();
    let mut bucket_of = vec![0u64; items.len()];
    for (i, ex) in exs.iter().enumerate() {
        let Some(ex) = ex else { continue };
        let b = generalize::bucket_key(ex);
        bucket_of[i] = b;
        let lang = edit_of(&items[i]).lang;
        buckets.entry((lang, b)).or_default().entry(generalize::group_key(ex)).or_default().push(i);
    }
    stats.buckets = buckets.len() as u64;
    let commit_key = |i: usize| (items[i].corpus, items[i].commit);
    let mut bucket_list: Vec<_> = buckets.into_iter().collect();
    bucket_list.sort_by_key(|(k, _)| *k);
    let clustered: Vec<Clustered> = bucket_list
        .par_iter()
        .filter_map(|((lang, b), groups)| {
            let commits: BTreeSet<(usize, usize)> = groups.values().flatten().map(|&i| commit_key(i)).collect();
            if commits.len() < cfg.min_commits {
                return None;
            }
            let mut gs: Vec<&Vec<usize>> = groups.values().collect();
            gs.sort_by_key(|g| {
                let c: BTreeSet<(usize, usize)> = g.iter().map(|&i| commit_key(i)).collect();
                (std::cmp::Reverse(c.len()), std::cmp::Reverse(g.len()), g[0])
            });
            gs.truncate(MAX_GROUPS_PER_BUCKET);
            let reps: Vec<&Ex<'_>> = gs.iter().filter_map(|g| exs[g[0]].as_ref()).collect();
            if reps.len() != gs.len() {
                return None;
            }
            let cs = generalize::cluster(&reps, cfg.max_holes, MAX_CLUSTERS_PER_BUCKET);
            let out =
                cs.into_iter().map(|c| (c.template, c.groups.iter().flat_map(|&g| gs[g].clone()).collect())).collect();
            Some((*lang, *b, out))
        })
        .collect();
    // Candidates: enough commits, usable, every example validated.
    let mut cands: Vec<Candidate> = Vec::new();
    for (lang, bucket, cs) in clustered {
        for (template, members) in cs {
            stats.clusters += 1;
            if !template.usable(cfg.max_holes) {
                continue;
            }
            let commits: BTreeSet<(usize, usize)> = members.iter().map(|&i| commit_key(i)).collect();
            if commits.len() < cfg.min_commits {
                continue;
            }
            stats.candidates += 1;
            let Some(valid) = validated(&template, &members, &exs, &commit_key, cfg.min_commits, &mut stats) else {
                continue;
            };
            let safety = Safety { validated: valid.len() as u64, ..Default::default() };
            cands.push(Candidate { template, items: valid, bucket, lang, safety });
        }
    }
    stats.cluster_seconds = t0.elapsed().as_secs_f64();
    let t1 = std::time::Instant::now();
    // Every concrete edit of each training file pair: what the commit made.
    let mut made: HashMap<(usize, &str, &str), Vec<usize>> = HashMap::new();
    for (i, it) in items.iter().enumerate() {
        let e = edit_of(it);
        made.entry((it.corpus, e.before_blob.as_str(), e.after_blob.as_str())).or_default().push(i);
    }
    let repo_paths: Vec<Option<PathBuf>> =
        corpora.iter().map(|c| c.corpus.repository().map(|r| r.path().to_path_buf())).collect();
    // Lifted examples: each edit's enclosing statement.
    let ctx_exs: Vec<Option<Ex<'_>>> = items
        .par_iter()
        .map(|it| {
            let c = edit_of(it).context.as_ref()?;
            Some(Ex {
                before: Tree::from_flat(&c.before, &c.before_tree)?,
                after: Tree::from_flat(&c.after, &c.after_tree)?,
            })
        })
        .collect();
    let ex_of = |c: &Candidate, i: usize| -> Option<&Ex<'_>> {
        if c.template.lifted { ctx_exs[i].as_ref() } else { exs[i].as_ref() }
    };
    // Safety replay of candidates on their training file pairs.
    let replay_all = |cands: &mut [Candidate], stats: &mut GeneralizeStats| -> Vec<Vec<safety::Site>> {
        let mut pairs: BTreeMap<(usize, String, String), TrainingFile> = BTreeMap::new();
        for (ci, c) in cands.iter().enumerate() {
            for &i in &c.items {
                let e = edit_of(&items[i]);
                let entry = pairs
                    .entry((items[i].corpus, e.before_blob.clone(), e.after_blob.clone()))
                    .or_insert_with(|| (e.path.clone(), e.lang, Vec::new()));
                if entry.2.last() != Some(&ci) {
                    entry.2.push(ci);
                }
            }
        }
        stats.replayed_files += pairs.len() as u64;
        let pair_list: Vec<_> = pairs.into_iter().collect();
        let cands_ref: &[Candidate] = cands;
        let replays: Vec<Vec<(usize, safety::Replay)>> = pair_list
            .par_iter()
            .map(|((corpus, ob, nb), (_path, lang, cis))| {
                let mine = made.get(&(*corpus, ob.as_str(), nb.as_str()));
                let changes: Vec<safety::Change<'_>> = mine
                    .into_iter()
                    .flatten()
                    .filter_map(|&i| {
                        let e = edit_of(&items[i]);
                        let ex = exs[i].as_ref()?;
                        Some(safety::Change {
                            start: e.start,
                            end: e.start + e.before.len() as u32,
                            after: ex.after.tokens(0),
                        })
                    })
                    .collect();
                let contexts: Vec<safety::Change<'_>> = mine
                    .into_iter()
                    .flatten()
                    .filter_map(|&i| {
                        let c = edit_of(&items[i]).context.as_ref()?;
                        let ex = ctx_exs[i].as_ref()?;
                        Some(safety::Change {
                            start: c.start,
                            end: c.start + c.before.len() as u32,
                            after: ex.after.tokens(0),
                        })
                    })
                    .collect();
                let input = (cis.as_slice(), cands_ref, changes.as_slice(), contexts.as_slice());
                replay_file(repo_paths[*corpus].as_deref(), ob, *lang, input, &cfg.limits)
            })
            .collect();
        let mut sites: Vec<Vec<safety::Site>> = vec![Vec::new(); cands.len()];
        for res in replays {
            for (ci, r) in res {
                cands[ci].safety.true_edits += r.true_sites.len() as u64;
                cands[ci].safety.false_edits += r.false_sites.len() as u64;
                sites[ci].extend(r.true_sites.into_iter().map(|s| safety::Site { made: true, ..s }));
                sites[ci].extend(r.false_sites);
            }
        }
        sites
    };
    // Specializes an unsafe candidate: the safe specializations, each with
    // its true and false edits counted from the replayed sites.
    let specialize = |c: &Candidate, sites: &[safety::Site]| -> Vec<Candidate> {
        let values: Vec<Vec<Option<(u64, Pat)>>> = c
            .items
            .iter()
            .map(|&i| {
                let Some(ex) = ex_of(c, i) else { return Vec::new() };
                let b = c.template.validate(ex).unwrap_or_else(|| Binds::new(0));
                b.one
                    .iter()
                    .map(|o| o.map(|n| (ex.before.nodes[n as usize].hash, Pat::concrete(&ex.before, n))))
                    .collect()
            })
            .collect();
        let commit_ids: Vec<usize> = c.items.iter().map(|&i| items[i].corpus * 1_000_000 + items[i].commit).collect();
        let falses: Vec<&safety::Site> = sites.iter().filter(|s| !s.made).collect();
        let specs = safety::specialize(&c.template, &values, &commit_ids, &falses, cfg.min_commits);
        specs
            .into_iter()
            .map(|s| {
                let kept: Vec<usize> = s.keep.iter().map(|&k| c.items[k]).collect();
                let true_edits =
                    sites.iter().filter(|x| x.made && x.holes.get(s.hole).copied().flatten() == Some(s.value)).count();
                let safety = Safety {
                    true_edits: true_edits as u64,
                    false_edits: 0,
                    specialized: true,
                    validated: kept.len() as u64,
                    missed_edits: 0,
                };
                Candidate { template: s.template, items: kept, bucket: c.bucket, lang: c.lang, safety }
            })
            .collect()
    };
    let sites = replay_all(&mut cands, &mut stats);
    // Specialize, lift or drop unsafe candidates.
    let mut safe: Vec<Candidate> = Vec::new();
    let mut unsafe_: Vec<Candidate> = Vec::new();
    for (ci, c) in cands.into_iter().enumerate() {
        if c.safety.false_edits == 0 {
            safe.push(c);
            continue;
        }
        let specs = specialize(&c, &sites[ci]);
        if !specs.is_empty() {
            stats.specialized += 1;
            safe.extend(specs);
            continue;
        }
        unsafe_.push(c);
    }
    // Getafix's hierarchy: an unsafe rule is tried again one level up, at
    // the statement around each of its edits, which carries the context
    // that tells the sites the authors changed from those they did not.
    let mut lifted: Vec<Candidate> = Vec::new();
    let mut lifted_from: Vec<f64> = Vec::new();
    for c in &unsafe_ {
        let mut seen: BTreeSet<(usize, &str, u32)> = BTreeSet::new();
        let mut groups: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for &i in &c.items {
            let (Some(ctx), Some(ex)) = (edit_of(&items[i]).context.as_ref(), ctx_exs[i].as_ref()) else { continue };
            if seen.insert((items[i].corpus, edit_of(&items[i]).before_blob.as_str(), ctx.start)) {
                groups.entry(generalize::group_key(ex)).or_default().push(i);
            }
        }
        let mut gs: Vec<Vec<usize>> = groups.into_values().collect();
        gs.sort_by_key(|g| {
            let c: BTreeSet<(usize, usize)> = g.iter().map(|&i| commit_key(i)).collect();
            (std::cmp::Reverse(c.len()), std::cmp::Reverse(g.len()), g[0])
        });
        gs.truncate(MAX_GROUPS_PER_BUCKET);
        let reps: Vec<&Ex<'_>> = gs.iter().filter_map(|g| ctx_exs[g[0]].as_ref()).collect();
        if reps.len() != gs.len() {
            continue;
        }
        for cl in generalize::cluster(&reps, cfg.max_holes, MAX_CLUSTERS_PER_BUCKET) {
            let mut template = cl.template;
            template.lifted = true;
            if !template.usable(cfg.max_holes) {
                continue;
            }
            let members: Vec<usize> = cl.groups.iter().flat_map(|&g| gs[g].clone()).collect();
            let Some(valid) = validated(&template, &members, &ctx_exs, &commit_key, cfg.min_commits, &mut stats) else {
                continue;
            };
            let safety = Safety { validated: valid.len() as u64, ..Default::default() };
            lifted.push(Candidate { template, items: valid, bucket: c.bucket, lang: c.lang, safety });
            lifted_from.push(precision(&c.safety));
        }
    }
    let debug = |tag: &str, c: &Candidate| {
        if std::env::var_os("KIDIOM_HISTORY_DEBUG").is_none() {
            return;
        }
        let Some(ex) = c.items.first().and_then(|&i| ex_of(c, i)) else { return };
        let Some(b) = c.template.validate(ex) else { return };
        let mut ba = Binds::new(c.template.holes());
        c.template.after.matches(&ex.after, 0, &mut ba);
        let commits: BTreeSet<(usize, usize)> = c.items.iter().map(|&i| commit_key(i)).collect();
        eprintln!(
            "{tag}: {} commits {} items, true {} false {} | {} => {}",
            commits.len(),
            c.items.len(),
            c.safety.true_edits,
            c.safety.false_edits,
            pattern::render(&ex.before, 0, &b, &c.template.seq).replace('\n', " "),
            pattern::render(&ex.after, 0, &ba, &c.template.seq).replace('\n', " ")
        );
    };
    if !lifted.is_empty() {
        let lsites = replay_all(&mut lifted, &mut stats);
        for c in &lifted {
            debug("lifted", c);
        }
        for (li, c) in lifted.into_iter().enumerate() {
            if c.safety.false_edits == 0 {
                stats.lifted += 1;
                safe.push(c);
                continue;
            }
            let specs = specialize(&c, &lsites[li]);
            if !specs.is_empty() {
                stats.lifted += 1;
                stats.specialized += 1;
                safe.extend(specs);
                continue;
            }
            // Still unsafe: kept, its false edits recorded, when the larger
            // context made it more precise than the rule it came from and
            // it reaches the minimum precision.
            let p = precision(&c.safety);
            if p >= cfg.min_precision && p > lifted_from[li] {
                stats.lifted += 1;
                safe.push(c);
            }
        }
    }
    stats.replay_seconds = t1.elapsed().as_secs_f64();
    // What stays unsafe is kept only at the minimum precision, its false
    // edits recorded.
    for c in unsafe_ {
        debug("unsafe-cand", &c);
        if precision(&c.safety) >= cfg.min_precision {
            safe.push(c);
        } else {
            stats.unsafe_dropped += 1;
            if std::env::var_os("KIDIOM_HISTORY_DEBUG").is_some() {
                let ex = c.items.first().and_then(|&i| exs[i].as_ref());
                let commits: BTreeSet<(usize, usize)> = c.items.iter().map(|&i| commit_key(i)).collect();
                eprintln!(
                    "unsafe: {} commits {} items, true {} false {} | {}",
                    commits.len(),
                    c.items.len(),
                    c.safety.true_edits,
                    c.safety.false_edits,
                    ex.map(|e| format!("{} => {}", e.before.text(0), e.after.text(0)))
                        .unwrap_or_default()
                        .replace('\n', " ")
                );
            }
        }
    }
    // Missed edits: same-bucket edits in the training file pairs not covered.
    let mut by_file_bucket: HashMap<(usize, &str, &str, u64), u64> = HashMap::new();
    for (i, it) in items.iter().enumerate() {
        let e = edit_of(it);
        *by_file_bucket.entry((it.corpus, e.before_blob.as_str(), e.after_blob.as_str(), bucket_of[i])).or_default() +=
            1;
    }
    for c in &mut safe {
        let mut files: BTreeMap<(usize, &str, &str), u64> = BTreeMap::new();
        for &i in &c.items {
            let e = edit_of(&items[i]);
            *files.entry((items[i].corpus, e.before_blob.as_str(), e.after_blob.as_str())).or_default() += 1;
        }
        c.safety.missed_edits = files
            .iter()
            .map(|(&(co, b, a), &n)| by_file_bucket.get(&(co, b, a, c.bucket)).copied().unwrap_or(0).saturating_sub(n))
            .sum();
    }
    let t2 = std::time::Instant::now();
    let opportunities = count_opportunities(corpora, &safe, &cfg.limits);
    stats.opportunity_seconds = t2.elapsed().as_secs_f64();
    let mut rules = assemble(corpora, &items, (&exs, &ctx_exs), safe, &opportunities);
    rules.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id)));
    HistoryResult { rules, stats }
}

/// Edits made over all edits a rule would make on its training files.
/// The members whose example the template re-matches and reproduces; `None`
/// when they no longer span enough commits. Counts the examples that fail.
fn validated(
    template: &Template,
    members: &[usize],
    exs: &[Option<Ex<'_>>],
    commit_key: &dyn Fn(usize) -> (usize, usize),
    min_commits: usize,
    stats: &mut GeneralizeStats,
) -> Option<Vec<usize>> {
    let valid: Vec<usize> = members
        .iter()
        .copied()
        .filter(|&i| exs[i].as_ref().is_some_and(|ex| template.validate(ex).is_some()))
        .collect();
    stats.invalid_examples += (members.len() - valid.len()) as u64;
    let commits: BTreeSet<(usize, usize)> = valid.iter().map(|&i| commit_key(i)).collect();
    (commits.len() >= min_commits).then_some(valid)
}

fn precision(s: &Safety) -> f64 {
    let total = s.true_edits + s.false_edits;
    if total == 0 { 0.0 } else { s.true_edits as f64 / total as f64 }
}

const MAX_GROUPS_PER_BUCKET: usize = 1_500;
const MAX_CLUSTERS_PER_BUCKET: usize = 200;

/// A training file pair's replay input: the candidates trained on it, all
/// candidates, the commit's edits and their enclosing statements.
type ReplayInput<'x, 'c> = (&'x [usize], &'x [Candidate], &'x [safety::Change<'c>], &'x [safety::Change<'c>]);

fn replay_file(
    repo: Option<&Path>,
    old: &str,
    lang: Lang,
    (cis, cands, changes, contexts): ReplayInput<'_, '_>,
    limits: &Limits,
) -> Vec<(usize, safety::Replay)> {
    let Some(repo) = repo else { return Vec::new() };
    let Ok(o) = Oid::from_str(old) else { return Vec::new() };
    let Some(Some(a)) = with_repo(repo, |r| read_blob(r, o)) else { return Vec::new() };
    let Ok(ta) = std::str::from_utf8(&a) else { return Vec::new() };
    let Ok(x) = Tree::parse(lang, ta, limits) else { return Vec::new() };
    let rules: Vec<&Template> = cis.iter().map(|&ci| &cands[ci].template).collect();
    cis.iter().copied().zip(safety::replay(&x, changes, contexts, &rules)).collect()
}

/// Sites matching each rule's `before` at each corpus's revision.
fn count_opportunities(corpora: &[CorpusHistory<'_>], rules: &[Candidate], limits: &Limits) -> Vec<Vec<u64>> {
    let mut out = vec![vec![0u64; corpora.len()]; rules.len()];
    let langs: BTreeSet<Lang> = rules.iter().map(|r| r.lang).collect();
    // A file can only match a rule if it holds the rule's longest word.
    let words: Vec<&str> = rules.iter().filter_map(|r| r.template.before.longest_word()).collect();
    let ac = aho_corasick::AhoCorasick::new(&words).ok();
    for (ci, c) in corpora.iter().enumerate() {
        let Ok(listing) = c.corpus.files() else { continue };
        let texts: Vec<(Lang, Vec<u8>)> = listing
            .files
            .iter()
            .filter(|f| langs.contains(&f.lang) && f.size <= limits.max_bytes)
            .filter_map(|f| c.corpus.read(f).ok().map(|b| (f.lang, b)))
            .filter(|(_, b)| ac.as_ref().is_none_or(|ac| ac.is_match(b)))
            .collect();
        let counts: Vec<Vec<u64>> = texts
            .par_iter()
            .map(|(lang, bytes)| {
                let mut n = vec![0u64; rules.len()];
                let Ok(text) = crate::parse::decode(bytes, limits) else { return n };
                let Ok(t) = Tree::parse(*lang, text, limits) else { return n };
                let mut by_kind: HashMap<u16, Vec<usize>> = HashMap::new();
                for (ri, r) in rules.iter().enumerate() {
                    if r.lang == *lang
                        && let Some(k) = r.template.before.kind()
                    {
                        by_kind.entry(k).or_default().push(ri);
                    }
                }
                for i in 0..t.nodes.len() as u32 {
                    let Some(rs) = by_kind.get(&t.nodes[i as usize].kind) else { continue };
                    for &ri in rs {
                        let tp = &rules[ri].template;
                        if tp.before.may_match(&t, i)
                            && tp.before.matches(&t, i, &mut Binds::new(tp.holes()))
                            && !safety::present(&t, i, &tp.added)
                        {
                            n[ri] += 1;
                        }
                    }
                }
                n
            })
            .collect();
        for n in counts {
            for (ri, k) in n.into_iter().enumerate() {
                out[ri][ci] += k;
            }
        }
    }
    out
}

/// The examples of edits, and of their enclosing statements.
type ExSets<'x, 'a> = (&'x [Option<Ex<'a>>], &'x [Option<Ex<'a>>]);

fn assemble(
    corpora: &[CorpusHistory<'_>],
    items: &[Item],
    (plain, ctx): ExSets<'_, '_>,
    cands: Vec<Candidate>,
    opportunities: &[Vec<u64>],
) -> Vec<Rule> {
    let mut rules: Vec<Rule> = Vec::new();
    let mut seen: HashMap<(Lang, String, String), usize> = HashMap::new();
    let mut ids: BTreeSet<String> = BTreeSet::new();
    for (ri, c) in cands.into_iter().enumerate() {
        let exs = if c.template.lifted { ctx } else { plain };
        let Some(first) = c.items.first().and_then(|&i| exs[i].as_ref()) else { continue };
        let Some(bb) = c.template.validate(first) else { continue };
        let before = pattern::render(&first.before, 0, &bb, &c.template.seq);
        let mut ba = Binds::new(c.template.holes());
        if !c.template.after.matches(&first.after, 0, &mut ba) {
            continue;
        }
        let after = pattern::render(&first.after, 0, &ba, &c.template.seq);
        if let Some(&prev) = seen.get(&(c.lang, before.clone(), after.clone())) {
            // The same template from another bucket or specialization: keep the first.
            let _ = prev;
            continue;
        }
        let edit = |i: usize| &corpora[items[i].corpus].commits[items[i].commit];
        // Commits, oldest first.
        let mut commits: BTreeMap<(i64, String), CommitMeta> = BTreeMap::new();
        for &i in &c.items {
            let m = &edit(i).commit;
            commits.insert((m.time, m.id.clone()), m.clone());
        }
        let commits: Vec<CommitMeta> = commits.into_values().collect();
        // Support per corpus.
        let mut support = Vec::new();
        for (ci, corpus) in corpora.iter().enumerate() {
            let mine: Vec<usize> = c.items.iter().copied().filter(|&i| items[i].corpus == ci).collect();
            if mine.is_empty() {
                continue;
            }
            let files: BTreeSet<&str> = mine.iter().map(|&i| edit(i).edits[items[i].edit].path.as_str()).collect();
            support.push(Support {
                corpus: corpus.corpus.manifest.name.clone(),
                revision: corpus.corpus.revision.clone(),
                occurrences: mine.len() as u64,
                files: files.len() as u64,
                opportunities: opportunities[ri][ci],
            });
        }
        // Hole values.
        // The after-only values when the rule adds some (the values a
        // rewrite chooses from), else the values bound on the before side.
        let mut values: BTreeMap<String, u64> = BTreeMap::new();
        for &i in &c.items {
            let Some(ex) = exs[i].as_ref() else { continue };
            let Some((b, fresh)) = c.template.validate_full(ex) else { continue };
            if c.template.has_fresh() {
                for v in fresh.iter().flatten() {
                    *values.entry(v.chars().take(80).collect()).or_default() += 1;
                }
                continue;
            }
            for n in b.one.iter().flatten() {
                let v: String = ex.before.text(*n).chars().take(80).collect();
                *values.entry(v).or_default() += 1;
            }
        }
        let mut values: Vec<(String, u64)> = values.into_iter().collect();
        values.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        values.truncate(12);
        // Examples: one per commit first.
        let mut examples = Vec::new();
        let mut used = BTreeSet::new();
        for &i in &c.items {
            if examples.len() >= 5 {
                break;
            }
            let k = edit(i);
            if !used.insert(&k.commit.id) {
                continue;
            }
            let e = &k.edits[items[i].edit];
            let (b, a) = match (&e.context, c.template.lifted) {
                (Some(x), true) => (x.before.as_str(), x.after.as_str()),
                _ => (e.before.as_str(), e.after.as_str()),
            };
            let snippet = format!("{}  =>  {}", one_line(b), one_line(a));
            examples.push(IdiomExample {
                corpus: corpora[items[i].corpus].corpus.manifest.name.clone(),
                path: e.path.clone(),
                line: e.line,
                snippet: snippet.chars().take(240).collect(),
            });
        }
        let change = change_words(&before, &after);
        let category = categorize(&change, &commits);
        let occurrences: u64 = support.iter().map(|s| s.occurrences).sum();
        let total = c.safety.true_edits + c.safety.false_edits;
        let precision = if total == 0 { 1.0 } else { c.safety.true_edits as f64 / total as f64 };
        let hinted = commits.iter().filter(|m| !m.tags.is_empty()).count() as f64 / commits.len().max(1) as f64;
        let score = ((commits.len() as f64).ln_1p() * 2.0
            + (occurrences as f64).ln_1p()
            + (support.len().saturating_sub(1)) as f64)
            * precision
            + 0.5 * hinted;
        let id = unique_id(&mut ids, &make_id(c.lang, &before, &change));
        let corpora_names: Vec<&str> = support.iter().map(|s| s.corpus.as_str()).collect();
        let title = format!("`{}` -> `{}`", short(&before, 50), short(&after, 60));
        let mut rationale = format!(
            "Made by hand in {} commits of {} ({} edits in {} files), e.g. {} \"{}\". Replayed on its training files, \
             the rule makes {} of the commits' edits and {} they did not make{}; {} edits of the same shape there are \
             not covered. {} of {} commits say why in their message{}.",
            commits.len(),
            corpora_names.join(", "),
            occurrences,
            support.iter().map(|s| s.files).sum::<u64>(),
            commits.last().map(|m| &m.id[..m.id.len().min(10)]).unwrap_or(""),
            commits.last().map(|m| m.summary.as_str()).unwrap_or(""),
            c.safety.true_edits,
            c.safety.false_edits,
            match (c.safety.specialized, c.template.lifted) {
                (true, true) => " (lifted to the enclosing statement and specialized to the value its commits used)",
                (false, true) => " (lifted to the enclosing statement: the smaller rule was unsafe)",
                (true, false) => " (specialized to the value its commits used)",
                (false, false) => "",
            },
            c.safety.missed_edits,
            commits.iter().filter(|m| !m.tags.is_empty()).count(),
            commits.len(),
            {
                let t: BTreeSet<&str> = commits.iter().flat_map(|m| m.tags.iter().map(String::as_str)).collect();
                if t.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", t.into_iter().collect::<Vec<_>>().join(", "))
                }
            }
        );
        rationale.truncate(2000);
        seen.insert((c.lang, before.clone(), after.clone()), rules.len());
        rules.push(Rule {
            id,
            lang: c.lang,
            category,
            title,
            rationale,
            before,
            after,
            support,
            values,
            examples,
            commits,
            score,
            safety: c.safety,
        });
    }
    rules
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn short(s: &str, n: usize) -> String {
    let s = one_line(s);
    if s.chars().count() <= n { s } else { format!("{}...", s.chars().take(n).collect::<String>()) }
}

fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
        .filter(|w| !w.is_empty() && !w.starts_with('$'))
        .map(str::to_string)
        .collect()
}

/// The words the change removes and adds.
struct Change {
    removed: Vec<String>,
    added: Vec<String>,
    context: Vec<String>,
}

fn change_words(before: &str, after: &str) -> Change {
    let (b, a) = (words(before), words(after));
    let mut count: BTreeMap<&str, i64> = BTreeMap::new();
    for w in &b {
        *count.entry(w).or_default() -= 1;
    }
    for w in &a {
        *count.entry(w).or_default() += 1;
    }
    let removed: Vec<String> =
        b.iter().filter(|w| count.get(w.as_str()).is_some_and(|c| *c < 0)).cloned().collect::<Vec<_>>();
    let added: Vec<String> = a.iter().filter(|w| count.get(w.as_str()).is_some_and(|c| *c > 0)).cloned().collect();
    let context = b.iter().filter(|w| !removed.contains(w)).take(2).cloned().collect();
    Change { removed: dedup(removed), added: dedup(added), context }
}

fn dedup(v: Vec<String>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    v.into_iter().filter(|w| seen.insert(w.clone())).collect()
}

fn categorize(change: &Change, commits: &[CommitMeta]) -> Category {
    let text = format!("{} {}", change.removed.join(" "), change.added.join(" "));
    let c = Category::classify(&text);
    if c != Category::Other {
        return c;
    }
    let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
    for m in commits {
        for t in &m.tags {
            *votes.entry(t.as_str()).or_default() += 1;
        }
    }
    let top = votes.into_iter().max_by_key(|(t, n)| (*n, std::cmp::Reverse(*t)));
    match top.map(|(t, _)| t) {
        Some("precision") => Category::Precision,
        Some("overflow") => Category::Addressing,
        Some("fuse") => Category::Fusion,
        Some("redundant") => Category::Redundancy,
        _ => Category::Other,
    }
}

fn slug(words: &[String], max: usize) -> String {
    let s: Vec<String> = words
        .iter()
        .map(|w| {
            let w: String = w.to_ascii_lowercase().chars().map(|c| if c == '_' { '-' } else { c }).collect();
            w.chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect::<String>()
                .trim_matches('-')
                .to_string()
        })
        .filter(|w| !w.is_empty())
        .take(max)
        .collect();
    s.join("-")
}

fn make_id(lang: Lang, _before: &str, change: &Change) -> String {
    let mut parts = vec![lang.slug().to_string(), "edit".to_string()];
    let ctx = slug(&change.context, 2);
    if !ctx.is_empty() {
        parts.push(ctx);
    }
    match (change.removed.is_empty(), change.added.is_empty()) {
        (false, false) => {
            parts.push(slug(&change.removed, 3));
            parts.push("to".into());
            parts.push(slug(&change.added, 4));
        }
        (true, false) => {
            parts.push("add".into());
            parts.push(slug(&change.added, 4));
        }
        (false, true) => {
            parts.push("drop".into());
            parts.push(slug(&change.removed, 4));
        }
        (true, true) => parts.push("reshape".into()),
    }
    let mut id = parts.into_iter().filter(|p| !p.is_empty()).collect::<Vec<_>>().join("-");
    id.truncate(80);
    id.trim_end_matches('-').to_string()
}

fn unique_id(ids: &mut BTreeSet<String>, base: &str) -> String {
    let mut id = base.to_string();
    let mut n = 2;
    while ids.contains(&id) {
        id = format!("{base}-{n}");
        n += 1;
    }
    ids.insert(id.clone());
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_tags() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(tags("[Perf] fuse kernels; avoid overflow"), ["perf", "overflow", "fuse"]);
        assert!(tags("Update README").is_empty());
    }

    #[test]
    fn ids_name_the_change() {
        let c = change_words("tl.exp($A)", "tl.exp2($A)");
        assert_eq!(make_id(Lang::Python, "", &c), "py-edit-tl-exp-to-exp2");
        let c = change_words("tl.dot($A, $B)", "tl.dot($A, $B, input_precision=\"ieee\")");
        assert_eq!(make_id(Lang::Python, "", &c), "py-edit-tl-dot-add-input-precision-ieee");
        assert_eq!(categorize(&c, &[]), Category::Precision);
        let mut ids = BTreeSet::new();
        assert_eq!(unique_id(&mut ids, "a"), "a");
        assert_eq!(unique_id(&mut ids, "a"), "a-2");
    }
}
