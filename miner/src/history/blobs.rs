//! File versions shared by every commit of a run: each blob is read,
//! decoded and parsed once, whichever commits touch it.
//!
//! A file modified in many commits is one chain of blobs, each commit's
//! new version the next commit's old one. [`BlobCache`] keeps the versions
//! of a run by blob id, with their tree-sitter trees, and parses a version
//! whose neighbour in the chain is already parsed *incrementally*: the
//! neighbour's tree is told about the line hunks between the two versions
//! and only the changed regions are parsed again (tree-sitter gives the
//! same tree a fresh parse would). Memory is bounded: past its budget the
//! cache forgets the least recently used versions (a forgotten version
//! asked for again is read and parsed again).
//!
//! Trees are made under a per-version `OnceLock`, so two threads that need
//! one version parse it once. Making a tree never waits on another
//! version's lock (a neighbour is only used when already parsed), so no
//! two threads can wait on each other.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use git2::{Oid, Repository};
use kidiom_syntax::{Lang, Limits};
use tree_sitter::{InputEdit, Point};

use super::edit::Hunk;
use super::scope;

/// Bytes of memory one byte of source costs once parsed (text and
/// tree-sitter tree), for the budget.
const BYTES_PER_SOURCE_BYTE: usize = 24;

/// Parsed file versions of a run, by blob id.
pub struct BlobCache {
    budget: usize,
    state: Mutex<State>,
    lookups: AtomicU64,
    parsed: AtomicU64,
    incremental: AtomicU64,
}

#[derive(Default)]
struct State {
    entries: HashMap<(Oid, Lang), (Arc<Blob>, u64)>,
    bytes: usize,
    tick: u64,
}

/// What a [`BlobCache`] did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlobCounts {
    /// Trees asked for: one per file version a mined file pair (or a
    /// replayed training file) needed.
    pub lookups: u64,
    /// Trees made: each distinct version once while the cache holds it.
    pub parsed: u64,
    /// Of those, made incrementally from a neighbouring version's tree.
    pub incremental: u64,
}

impl Default for BlobCache {
    /// A cache of 512 MiB.
    fn default() -> Self {
        BlobCache::new(512 << 20)
    }
}

impl BlobCache {
    /// A cache that holds about `budget` bytes of texts and trees.
    pub fn new(budget: usize) -> BlobCache {
        BlobCache {
            budget,
            state: Mutex::new(State::default()),
            lookups: AtomicU64::new(0),
            parsed: AtomicU64::new(0),
            incremental: AtomicU64::new(0),
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> BlobCounts {
        BlobCounts {
            lookups: self.lookups.load(Ordering::Relaxed),
            parsed: self.parsed.load(Ordering::Relaxed),
            incremental: self.incremental.load(Ordering::Relaxed),
        }
    }

    /// Version `id` of a file of `lang`, read from `repo` unless held;
    /// `None` when the object is missing.
    pub(crate) fn get(&self, repo: &Repository, id: Oid, lang: Lang, limits: &Limits) -> Option<Arc<Blob>> {
        if let Some(b) = self.held(id, lang) {
            return Some(b);
        }
        let bytes = repo.find_blob(id).ok()?.content().to_vec();
        Some(self.insert(Blob::new(id, lang, bytes, limits)))
    }

    /// The version of `lang` with these bytes, by their blob id, when
    /// already held; else it is made from `bytes` and held.
    pub(crate) fn get_bytes(&self, id: Oid, lang: Lang, bytes: Vec<u8>, limits: &Limits) -> Arc<Blob> {
        match self.held(id, lang) {
            Some(b) => b,
            None => self.insert(Blob::new(id, lang, bytes, limits)),
        }
    }

    fn held(&self, id: Oid, lang: Lang) -> Option<Arc<Blob>> {
        let mut st = self.state.lock().ok()?;
        st.tick += 1;
        let tick = st.tick;
        let (b, used) = st.entries.get_mut(&(id, lang))?;
        *used = tick;
        Some(b.clone())
    }

    fn insert(&self, blob: Blob) -> Arc<Blob> {
        let blob = Arc::new(blob);
        // Forgotten versions are freed after the lock is released.
        let mut forgotten: Vec<Arc<Blob>> = Vec::new();
        let Ok(mut st) = self.state.lock() else { return blob };
        st.tick += 1;
        let tick = st.tick;
        if let Some((held, used)) = st.entries.get_mut(&(blob.id, blob.lang)) {
            // Another thread read it meanwhile: one version, one tree.
            *used = tick;
            return held.clone();
        }
        st.bytes += blob.cost();
        st.entries.insert((blob.id, blob.lang), (blob.clone(), tick));
        if st.bytes > self.budget {
            // Forget the least recently used down to three quarters.
            let mut by_age: Vec<((Oid, Lang), u64, usize)> =
                st.entries.iter().map(|(k, (b, used))| (*k, *used, b.cost())).collect();
            by_age.sort_unstable_by_key(|(_, used, _)| *used);
            let target = self.budget / 4 * 3;
            for (k, _, cost) in by_age {
                if st.bytes <= target {
                    break;
                }
                if let Some((b, _)) = st.entries.remove(&k) {
                    forgotten.push(b);
                }
                st.bytes -= cost;
            }
        }
        drop(st);
        drop(forgotten);
        blob
    }

    /// The trees of both versions of a file pair, `old` turned into `new`
    /// by `hunks`: a version already parsed is reused, and the other made
    /// from it incrementally (when neither is, `old` is parsed whole).
    pub(crate) fn pair<'b>(
        &self,
        old: &'b Blob,
        new: &'b Blob,
        hunks: &[Hunk],
    ) -> (Result<&'b tree_sitter::Tree, &'static str>, Result<&'b tree_sitter::Tree, &'static str>) {
        let forward: Vec<LineChange> = hunks.iter().map(|h| (h.old_start, h.old_len, h.new_start, h.new_len)).collect();
        let backward: Vec<LineChange> = forward.iter().map(|&(a, b, c, d)| (c, d, a, b)).collect();
        if old.tree.get().is_none() && new.tree.get().is_some() {
            let a = self.tree(old, Some((new, &backward)));
            return (a, self.tree(new, None));
        }
        let a = self.tree(old, None);
        (a, self.tree(new, Some((old, &forward))))
    }

    /// `blob`'s tree; when it is not made yet and `near` (another version
    /// of the same file) is, made from `near`'s incrementally.
    pub(crate) fn tree_near<'b>(
        &self,
        blob: &'b Blob,
        near: Option<&Blob>,
    ) -> Result<&'b tree_sitter::Tree, &'static str> {
        let near = near.filter(|n| blob.tree.get().is_none() && n.tree.get().is_some_and(|t| t.is_ok()));
        let changes = near.and_then(|n| {
            let (a, b) = (n.text().ok()?, blob.text().ok()?);
            let hunks = super::edit::hunks(a.as_bytes(), b.as_bytes())?;
            Some(hunks.iter().map(|h| (h.old_start, h.old_len, h.new_start, h.new_len)).collect::<Vec<LineChange>>())
        });
        match (near, changes) {
            (Some(n), Some(c)) => self.tree(blob, Some((n, &c))),
            _ => self.tree(blob, None),
        }
    }

    /// `blob`'s tree, made once: incrementally from `from`'s tree (with
    /// the line changes that turn `from`'s text into `blob`'s) when that is
    /// already parsed, else by a whole parse.
    pub(crate) fn tree<'b>(
        &self,
        blob: &'b Blob,
        from: Option<(&Blob, &[LineChange])>,
    ) -> Result<&'b tree_sitter::Tree, &'static str> {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let text = blob.text()?;
        let made = blob.tree.get_or_init(|| {
            let base = from.and_then(|(f, changes)| {
                let ft = f.text.as_ref().ok()?;
                let t = f.tree.get()?.as_ref().ok()?;
                Some((ft.as_str(), t, changes))
            });
            let parsed = match base {
                Some((ft, t, changes)) => {
                    let mut edited = t.clone();
                    for e in input_edits(ft, text, changes) {
                        edited.edit(&e);
                    }
                    self.incremental.fetch_add(1, Ordering::Relaxed);
                    kidiom_syntax::reparse(blob.lang, text, &edited)
                }
                None => kidiom_syntax::parse_tree(blob.lang, text),
            };
            self.parsed.fetch_add(1, Ordering::Relaxed);
            match parsed {
                Ok(Some(t)) => Ok(t),
                Ok(None) => Err("unsupported-language"),
                Err(s) => Err(s.name()),
            }
        });
        made.as_ref().map_err(|e| *e)
    }
}

/// A line change between two texts: (start, lines) in the first and in
/// the second, 0-based.
pub(crate) type LineChange = (usize, usize, usize, usize);

/// One file version: its text (or why it has none) and, once asked for,
/// its tree and kernel scope.
pub(crate) struct Blob {
    id: Oid,
    lang: Lang,
    text: Result<String, &'static str>,
    tree: OnceLock<Result<tree_sitter::Tree, &'static str>>,
    scope: OnceLock<Vec<Range<usize>>>,
}

impl Blob {
    fn new(id: Oid, lang: Lang, bytes: Vec<u8>, limits: &Limits) -> Blob {
        let text = match kidiom_syntax::decode(&bytes, limits) {
            Ok(_) => String::from_utf8(bytes).map_err(|_| "invalid-utf8"),
            Err(s) => Err(s.name()),
        };
        Blob { id, lang, text, tree: OnceLock::new(), scope: OnceLock::new() }
    }

    fn cost(&self) -> usize {
        self.text.as_ref().map_or(64, |t| t.len().max(64) * BYTES_PER_SOURCE_BYTE)
    }

    /// Its blob id.
    pub(crate) fn id(&self) -> Oid {
        self.id
    }

    /// Its language.
    pub(crate) fn lang(&self) -> Lang {
        self.lang
    }

    /// Its text, or why it has none (`binary`, `too-large`, ...).
    pub(crate) fn text(&self) -> Result<&str, &'static str> {
        self.text.as_ref().map(String::as_str).map_err(|e| *e)
    }

    /// The byte ranges of its kernels and kernel launches
    /// ([`scope::kernel_scope`]), found once its tree is made; empty
    /// without a tree.
    pub(crate) fn scope(&self) -> &[Range<usize>] {
        let (Ok(text), Some(Ok(tree))) = (self.text(), self.tree.get()) else { return &[] };
        self.scope.get_or_init(|| scope::kernel_scope(self.lang, text, tree))
    }
}

/// The tree-sitter edits that turn `from` into `to`, given their line
/// changes: last change first, so each edit's start is still a position of
/// `from`.
fn input_edits(from: &str, to: &str, changes: &[LineChange]) -> Vec<InputEdit> {
    let (lf, lt) = (line_starts(from), line_starts(to));
    let at = |starts: &[usize], text: &str, line: usize| starts.get(line).copied().unwrap_or(text.len());
    let mut sorted: Vec<&LineChange> = changes.iter().collect();
    sorted.sort_by_key(|c| std::cmp::Reverse(c.0));
    sorted
        .into_iter()
        .map(|&(fs, fl, ts, tl)| {
            let start = at(&lf, from, fs);
            let old_end = at(&lf, from, fs + fl).max(start);
            let (ns, ne) = (at(&lt, to, ts), at(&lt, to, ts + tl));
            let inserted = to.get(ns..ne.max(ns)).unwrap_or("");
            let start_position = point(&lf, start);
            let new_end_position = match inserted.rfind('\n') {
                Some(i) => Point {
                    row: start_position.row + memchr::memchr_iter(b'\n', inserted.as_bytes()).count(),
                    column: inserted.len() - i - 1,
                },
                None => Point { row: start_position.row, column: start_position.column + inserted.len() },
            };
            InputEdit {
                start_byte: start,
                old_end_byte: old_end,
                new_end_byte: start + inserted.len(),
                start_position,
                old_end_position: point(&lf, old_end),
                new_end_position,
            }
        })
        .collect()
}

/// Byte offset of each line's start.
fn line_starts(s: &str) -> Vec<usize> {
    let mut v = vec![0];
    v.extend(memchr::memchr_iter(b'\n', s.as_bytes()).map(|i| i + 1));
    if v.last() == Some(&s.len()) && !s.is_empty() {
        v.pop();
    }
    v
}

/// Row and column of byte `b`, given the line starts.
fn point(starts: &[usize], b: usize) -> Point {
    let row = starts.partition_point(|&s| s <= b).saturating_sub(1);
    Point { row, column: b - starts.get(row).copied().unwrap_or(0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(text: &str, n: u8) -> Blob {
        Blob::new(Oid::from_bytes(&[n; 20]).unwrap(), Lang::Python, text.as_bytes().to_vec(), &Limits::default())
    }

    fn sexp(t: &tree_sitter::Tree) -> String {
        t.root_node().to_sexp()
    }

    #[test]
    fn a_version_made_from_its_neighbour_is_the_tree_a_fresh_parse_gives() {
        let v0 =
            "import triton\n\n@triton.jit\ndef k(x):\n    a = tl.exp(x)\n    return a\n\n\ndef host():\n    pass\n";
        let v1 = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x, y):\n    a = tl.exp2(x)\n    return a\n\n\ndef host():\n    return 1";
        let v2 = "\n\ndef host():\n    return 1\n";
        let cache = BlobCache::default();
        for (a, b) in [(v0, v1), (v1, v0), (v1, v2), (v2, v1), (v0, v2), ("", v0), (v0, "")] {
            let hunks = super::super::edit::hunks(a.as_bytes(), b.as_bytes()).unwrap();
            // Forward: the old version is parsed whole, the new one from it.
            let (x, y) = (blob(a, 1), blob(b, 2));
            let (tx, ty) = cache.pair(&x, &y, &hunks);
            assert_eq!(sexp(tx.unwrap()), sexp(&kidiom_syntax::parse_tree(Lang::Python, a).unwrap().unwrap()));
            assert_eq!(sexp(ty.unwrap()), sexp(&kidiom_syntax::parse_tree(Lang::Python, b).unwrap().unwrap()));
            // Backward: the new version is parsed first, the old one from it.
            let (x, y) = (blob(a, 3), blob(b, 4));
            cache.tree(&y, None).unwrap();
            let (tx, _) = cache.pair(&x, &y, &hunks);
            assert_eq!(sexp(tx.unwrap()), sexp(&kidiom_syntax::parse_tree(Lang::Python, a).unwrap().unwrap()));
        }
        let c = cache.counts();
        assert_eq!((c.parsed, c.incremental), (28, 14));
        assert_eq!(c.lookups, 7 * 5);
    }

    #[test]
    fn past_its_budget_the_cache_forgets_the_oldest_versions() {
        let cache = BlobCache::new(3 * 64 * BYTES_PER_SOURCE_BYTE);
        let ids: Vec<Oid> = (1..=5u8).map(|n| Oid::from_bytes(&[n; 20]).unwrap()).collect();
        for (i, id) in ids.iter().enumerate() {
            cache.get_bytes(*id, Lang::Python, format!("x = {i}\n").into_bytes(), &Limits::default());
        }
        assert!(cache.held(ids[0], Lang::Python).is_none());
        assert!(cache.held(ids[4], Lang::Python).is_some());
        // Bad input is kept as its reason.
        let b = cache.get_bytes(ids[4], Lang::Cuda, b"\0\x01".to_vec(), &Limits::default());
        assert_eq!(b.text().err(), Some("binary"));
        assert_eq!(cache.tree(&b, None).err(), Some("binary"));
    }
}
