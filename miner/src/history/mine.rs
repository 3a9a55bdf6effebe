//! Mining commits: each commit's modified files are diffed and cut into
//! [`ConcreteEdit`]s, in parallel over commits, one repository handle per
//! thread, every file version parsed once per run ([`BlobCache`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use git2::{Delta, DiffOptions, Oid, Repository};
use kidiom_syntax::Lang;
use rayon::prelude::*;

use super::blobs::{Blob, BlobCache};
use super::edit;
use super::scope::{self, Scope};
use super::tree::Tree;
use super::{CommitEdits, CommitMeta, ConcreteEdit, EditDrop, FileSkip, HistoryConfig};
use crate::corpus::{Corpus, FileFilter};
use crate::error::{Error, Result};

thread_local! {
    static REPOS: RefCell<HashMap<PathBuf, Repository>> = RefCell::new(HashMap::new());
}

/// Runs `f` with this thread's handle on the repository at `path`
/// (git2 repositories cannot be shared between threads).
pub(super) fn with_repo<T>(path: &Path, f: impl FnOnce(&Repository) -> T) -> Option<T> {
    REPOS.with(|cell| {
        let mut repos = cell.borrow_mut();
        if !repos.contains_key(path) {
            let r = Repository::open(path).ok()?;
            repos.insert(path.to_path_buf(), r);
        }
        repos.get(path).map(f)
    })
}

/// Mines the concrete edits of `commits` (in parallel), calling `progress`
/// once per commit; file versions are read and parsed through `blobs`, so
/// a version that several commits touch is parsed once. The result is in
/// the order of `commits`.
pub fn mine_commits(
    corpus: &Corpus,
    commits: &[CommitMeta],
    cfg: &HistoryConfig,
    blobs: &BlobCache,
    progress: &(dyn Fn() + Sync),
) -> Result<Vec<CommitEdits>> {
    let repo = corpus.repository().ok_or_else(|| Error::git(&corpus.manifest.source, "not a git corpus"))?;
    let path = repo.path().to_path_buf();
    let filter = FileFilter::new(&corpus.manifest.include, &corpus.manifest.exclude)?;
    let out = commits
        .par_iter()
        .map(|c| {
            let r = with_repo(&path, |repo| mine_one(repo, c, &filter, cfg, blobs)).unwrap_or_else(|| CommitEdits {
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

fn mine_one(
    repo: &Repository,
    meta: &CommitMeta,
    filter: &FileFilter,
    cfg: &HistoryConfig,
    blobs: &BlobCache,
) -> CommitEdits {
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
        if scope::is_test_path(&path) {
            out.skipped.push(FileSkip { path, reason: "test-file".into() });
            continue;
        }
        let (Some(a), Some(b)) = (blobs.get(repo, old, lang, &cfg.limits), blobs.get(repo, new, lang, &cfg.limits))
        else {
            out.skipped.push(FileSkip { path, reason: "missing-object".into() });
            continue;
        };
        match file_edits(&path, (&a, &b), blobs, cfg) {
            Ok((edits, drops)) => {
                out.files += 1;
                out.edits.extend(edits);
                for d in drops {
                    *out.dropped.entry(d).or_default() += 1;
                }
            }
            Err(reason) => out.skipped.push(FileSkip { path, reason: reason.into() }),
        }
    }
    out
}

type FileResult = std::result::Result<(Vec<ConcreteEdit>, Vec<EditDrop>), &'static str>;

/// The concrete edits between two versions of one file, inside its
/// kernels and kernel launches.
///
/// Both versions' trees come from `blobs` (one of them usually parsed by
/// an earlier commit, the other re-parsed from it incrementally). Python
/// files are diffed only where they changed: each hunk is grown to the
/// top-level blocks around it (unchanged lines map one to one), blocks
/// that touch no kernel or launch are passed over, and the old and new
/// blocks' statements are lowered and diffed as fragments. A fragment
/// that does not fall on statement boundaries is parsed on its own; one
/// with a parse error (a hunk inside a multi-line string, say) falls back
/// to diffing the whole files.
fn file_edits(path: &str, (a, b): (&Blob, &Blob), blobs: &BlobCache, cfg: &HistoryConfig) -> FileResult {
    let lang = a.lang();
    let (ta, tb) = (a.text()?, b.text()?);
    if !scope::may_hold_kernels(lang, ta) && !scope::may_hold_kernels(lang, tb) {
        return Err("outside-kernels");
    }
    let hunks = edit::hunks(ta.as_bytes(), tb.as_bytes()).ok_or("diff-failed")?;
    let changed: usize = hunks.iter().map(|h| h.old_len + h.new_len).sum();
    if changed > cfg.max_changed_lines {
        return Err("huge-diff");
    }
    if edit::comment_only(lang, ta, tb, &hunks) {
        return Err("comments-only");
    }
    let (xa, xb) = blobs.pair(a, b, &hunks);
    let (xa, xb) = (xa?, xb?);
    if cfg.parse_only {
        return Ok((Vec::new(), Vec::new()));
    }
    let (sa, sb) = (a.scope(), b.scope());
    if sa.is_empty() && sb.is_empty() {
        return Err("outside-kernels");
    }
    let ids = (a.id().to_string(), b.id().to_string());
    let ids = (ids.0.as_str(), ids.1.as_str());
    let whole = Scope { ranges: Some((sa, sb)), offsets: (0, 0) };
    if lang == Lang::Python
        && let Some(segs) = edit::segments(ta, tb, &hunks)
    {
        let mut out = (Vec::new(), Vec::new());
        let mut clean = true;
        for seg in &segs {
            if !scope::overlaps(sa, &seg.old) && !scope::overlaps(sb, &seg.new) {
                continue;
            }
            let lowered = (Tree::lower_top(ta, xa, seg.old.clone()), Tree::lower_top(tb, xb, seg.new.clone()));
            if let (Some(x), Some(y)) = lowered {
                let (edits, drops) = edit::cut(lang, path, ids, (&x, &y), &whole, cfg);
                out.0.extend(edits);
                out.1.extend(drops);
                continue;
            }
            // Not on statement boundaries (or the file has a parse error):
            // the fragments parsed on their own.
            let (fa, fb) = (&ta[seg.old.clone()], &tb[seg.new.clone()]);
            let (Ok(x), Ok(y)) = (Tree::parse(lang, fa, &cfg.limits), Tree::parse(lang, fb, &cfg.limits)) else {
                clean = false;
                break;
            };
            if x.nodes.first().is_some_and(|n| n.err) || y.nodes.first().is_some_and(|n| n.err) {
                clean = false;
                break;
            }
            let scope = Scope { offsets: (seg.old.start as u32, seg.new.start as u32), ..whole };
            let (mut edits, drops) = edit::cut(lang, path, ids, (&x, &y), &scope, cfg);
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
    let (x, y) = (Tree::lower(ta, xa), Tree::lower(tb, xb));
    Ok(edit::cut(lang, path, ids, (&x, &y), &whole, cfg))
}
