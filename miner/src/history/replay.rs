//! Candidates matched against whole files: their training before-files
//! (the safety replay) and every file at each corpus's revision
//! (opportunities).

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use git2::Oid;
use kidiom_syntax::{Lang, Limits};
use rayon::prelude::*;

use super::antiunify::Template;
use super::blobs::{Blob, BlobCache};
use super::generalizer::{CorpusHistory, RuleCandidate};
use super::mine::with_repo;
use super::pattern::Binds;
use super::safety;
use super::scope;
use super::tree::Tree;
use crate::corpus::CorpusFile;

/// A training file pair's replay input: the candidates trained on it, all
/// candidates, the commit's edits and their enclosing statements.
pub(super) type ReplayInput<'x, 'c> =
    (&'x [usize], &'x [RuleCandidate], &'x [safety::Change<'c>], &'x [safety::Change<'c>]);

/// Replays the candidates trained on one file pair on its before-file (blob
/// `old` of the repository at `repo`), inside its kernels and launches.
/// `near` is another version of the file, replayed before: its tree, when
/// parsed, is re-parsed into this one's. Returns the replays and the
/// before-file.
pub(super) fn replay_file(
    repo: Option<&Path>,
    (blobs, near): (&BlobCache, Option<&Blob>),
    old: &str,
    lang: Lang,
    (cis, cands, changes, contexts): ReplayInput<'_, '_>,
    limits: &Limits,
) -> (Vec<(usize, safety::Replay)>, Option<Arc<Blob>>) {
    let Some(repo) = repo else { return (Vec::new(), None) };
    let Ok(o) = Oid::from_str(old) else { return (Vec::new(), None) };
    let Some(Some(blob)) = with_repo(repo, |r| blobs.get(r, o, lang, limits)) else { return (Vec::new(), None) };
    let (Ok(text), Ok(ts)) = (blob.text(), blobs.tree_near(&blob, near)) else { return (Vec::new(), Some(blob)) };
    let scope = blob.scope();
    let x = Tree::lower_overlapping(text, ts, scope);
    let rules: Vec<&Template> = cis.iter().map(|&ci| &cands[ci].template).collect();
    let out = cis.iter().copied().zip(safety::replay(&x, scope, changes, contexts, &rules)).collect();
    (out, Some(blob))
}

/// Sites matching each rule's `before` inside the kernels and launches of
/// each corpus's revision (test files left out).
pub(super) fn count_opportunities(
    corpora: &[CorpusHistory<'_>],
    rules: &[RuleCandidate],
    blobs: &BlobCache,
    limits: &Limits,
) -> Vec<Vec<u64>> {
    let mut out = vec![vec![0u64; corpora.len()]; rules.len()];
    let langs: BTreeSet<Lang> = rules.iter().map(|r| r.lang).collect();
    // A file can only match a rule if it holds the rule's longest word.
    let words: Vec<&str> = rules.iter().filter_map(|r| r.template.before.longest_word()).collect();
    let ac = aho_corasick::AhoCorasick::new(&words).ok();
    let mut by_kind: HashMap<(Lang, u16), Vec<usize>> = HashMap::new();
    for (ri, r) in rules.iter().enumerate() {
        if let Some(k) = r.template.before.kind() {
            by_kind.entry((r.lang, k)).or_default().push(ri);
        }
    }
    for (ci, c) in corpora.iter().enumerate() {
        let Ok(listing) = c.corpus.files() else { continue };
        let repo = c.corpus.repository().map(|r| r.path().to_path_buf());
        let files: Vec<&CorpusFile> = listing
            .files
            .iter()
            .filter(|f| langs.contains(&f.lang) && f.size <= limits.max_bytes && !scope::is_test_path(&f.path))
            .collect();
        // Git blobs are read on the worker threads, through the cache;
        // other files here, as threads cannot share the corpus.
        let read: Vec<Option<Vec<u8>>> = files
            .iter()
            .map(|f| match (&f.blob, &repo) {
                (Some(_), Some(_)) => None,
                _ => c.corpus.read(f).ok(),
            })
            .collect();
        let counts: Vec<Vec<u64>> = files
            .par_iter()
            .zip(read)
            .map(|(f, bytes)| {
                let mut n = vec![0u64; rules.len()];
                let id = f.blob.as_deref().and_then(|b| Oid::from_str(b).ok());
                let blob = match (bytes, id, &repo) {
                    (Some(bytes), id, _) => {
                        let id = id
                            .unwrap_or_else(|| Oid::hash_object(git2::ObjectType::Blob, &bytes).unwrap_or(Oid::zero()));
                        blobs.get_bytes(id, f.lang, bytes, limits)
                    }
                    (None, Some(id), Some(repo)) => {
                        match with_repo(repo, |r| blobs.get(r, id, f.lang, limits)).flatten() {
                            Some(b) => b,
                            None => return n,
                        }
                    }
                    _ => return n,
                };
                let Ok(text) = blob.text() else { return n };
                if ac.as_ref().is_some_and(|ac| !ac.is_match(text)) || !scope::may_hold_kernels(f.lang, text) {
                    return n;
                }
                let Ok(ts) = blobs.tree(&blob, None) else { return n };
                let scope = blob.scope();
                if scope.is_empty() {
                    return n;
                }
                let t = Tree::lower_overlapping(text, ts, scope);
                for i in 0..t.nodes.len() as u32 {
                    let node = t.nodes[i as usize];
                    let Some(rs) = by_kind.get(&(f.lang, node.kind)) else { continue };
                    if !scope::within(scope, node.start as usize, node.end as usize) {
                        continue;
                    }
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
