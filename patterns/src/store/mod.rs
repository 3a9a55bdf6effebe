//! The SQLite catalog: corpora, the per-file mining cache and patterns.
//!
//! Writes go through a [`MineTx`] (one `BEGIN IMMEDIATE` transaction), so a
//! run that fails or is killed leaves the catalog as it was, and two
//! processes never interleave their writes. Reads never block on a writer
//! (WAL mode).

mod candidates;
mod exchange;
mod history;
mod hostbench;
mod merge;
mod query;
pub(crate) mod schema;
mod search;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use kidiom_miner::{FileFacts, StatKey};
use kidiom_syntax::{Lang, Skip};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

use crate::error::{Error, Result};
use crate::model::{Kind, Pattern};

pub use candidates::{Candidate, CandidateStatus, short_id};
pub use exchange::{CatalogFile, EXCHANGE_FORMAT, EXCHANGE_VERSION, ExportedCorpus, ImportReport, merge};
pub use history::HistoryState;
pub use hostbench::{HOST_BASELINE_KEEP, HostBaseline};
pub use query::{CatalogStats, Filter};
pub use schema::SCHEMA_VERSION;
pub use search::{SearchHit, TermMatch, Via, Why};

/// How long [`Catalog::open`] waits for another process's lock.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// An open catalog file.
#[derive(Debug)]
pub struct Catalog {
    conn: Connection,
    path: PathBuf,
}

/// What the mining cache remembers of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedFile {
    /// The git blob id of the content it was mined from.
    pub blob: String,
    /// Size and modification time when it was read from disk.
    pub stat: Option<StatKey>,
    /// The extraction settings it was mined with; a different fingerprint
    /// means the cached outcome is stale.
    pub fingerprint: String,
}

/// The facts of one parsed file, with where they came from.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredFacts {
    /// Corpus name.
    pub corpus: String,
    /// The corpus revision recorded by [`MineTx::put_corpus`] (empty when none).
    pub revision: String,
    /// Path within the corpus.
    pub path: String,
    /// The file's language.
    pub lang: Lang,
    /// Its facts.
    pub facts: FileFacts,
}

/// One mined corpus.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CorpusRow {
    /// Corpus name.
    pub name: String,
    /// git, dir or pypi.
    pub kind: String,
    /// Where it was read from.
    pub source: String,
    /// The revision mined.
    pub revision: String,
    /// When it was last mined (RFC 3339, UTC).
    pub mined_at: String,
    /// Files recorded (parsed, without kernels, or skipped).
    pub files: u64,
    /// Files skipped (binary, too large, unparsable, ...).
    pub skipped: u64,
}

/// What mining made of one file.
#[derive(Debug, Clone, PartialEq)]
pub enum FileOutcome {
    /// Parsed; these are its facts.
    Parsed(FileFacts),
    /// Rejected by the literal prefilter: no kernel marker, never parsed.
    NoKernels,
    /// Not mined, for this reason.
    Skipped(Skip),
}

impl FileOutcome {
    fn name(&self) -> &'static str {
        match self {
            FileOutcome::Parsed(_) => "parsed",
            FileOutcome::NoKernels => "no-kernels",
            FileOutcome::Skipped(_) => "skipped",
        }
    }
}

/// Maps SQLite errors to [`Error`] with the catalog path.
pub(crate) trait At<T> {
    fn at(self, path: &Path) -> Result<T>;
}

impl<T> At<T> for rusqlite::Result<T> {
    fn at(self, path: &Path) -> Result<T> {
        self.map_err(|e| Error::sqlite(path, e))
    }
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Catalog {
    /// Opens (creating it and its directory if needed) the catalog at
    /// `path`, waiting up to [`DEFAULT_BUSY_TIMEOUT`] for other processes.
    pub fn open(path: &Path) -> Result<Catalog> {
        Catalog::open_with_timeout(path, DEFAULT_BUSY_TIMEOUT)
    }

    /// Like [`Catalog::open`], waiting up to `busy` for another process's
    /// lock before failing with [`Error::Locked`].
    ///
    /// A file that is not a SQLite database, or is some other program's
    /// database, is rejected with [`Error::NotACatalog`] and left untouched;
    /// one written by a newer kidiom with [`Error::NewerSchema`].
    pub fn open_with_timeout(path: &Path, busy: Duration) -> Result<Catalog> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(|cause| Error::Io { path: dir.to_path_buf(), cause })?;
        }
        if path.is_dir() {
            return Err(Error::NotACatalog { path: path.to_path_buf(), reason: "a directory".into() });
        }
        let conn = Connection::open(path).at(path)?;
        Catalog::init(conn, path.to_path_buf(), busy, true)
    }

    /// An empty catalog in memory, for tests and dry runs.
    pub fn open_in_memory() -> Result<Catalog> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory().at(&path)?;
        Catalog::init(conn, path, DEFAULT_BUSY_TIMEOUT, false)
    }

    fn init(conn: Connection, path: PathBuf, busy: Duration, wal: bool) -> Result<Catalog> {
        conn.busy_timeout(busy).at(&path)?;
        // Reading the schema is what detects a file that is not SQLite.
        let tables: i64 =
            conn.query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table'", [], |r| r.get(0)).at(&path)?;
        let app_id: i64 = conn.pragma_query_value(None, "application_id", |r| r.get(0)).at(&path)?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).at(&path)?;
        if app_id != 0 && app_id != schema::APPLICATION_ID {
            let reason = format!("a SQLite database of another application, application_id {app_id:#x}");
            return Err(Error::NotACatalog { path, reason });
        }
        if app_id == 0 && (tables > 0 || version != 0) {
            let reason = "a SQLite database without kidiom tables".to_string();
            return Err(Error::NotACatalog { path, reason });
        }
        if version > SCHEMA_VERSION {
            return Err(Error::NewerSchema { path, found: version, supported: SCHEMA_VERSION });
        }
        if wal {
            let _mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)).at(&path)?;
        }
        conn.pragma_update(None, "foreign_keys", true).at(&path)?;
        let mut cat = Catalog { conn, path };
        if version < SCHEMA_VERSION {
            cat.migrate()?;
        }
        Ok(cat)
    }

    /// Applies the migrations this file lacks, in one transaction.
    fn migrate(&mut self) -> Result<()> {
        let path = &self.path;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).at(path)?;
        // Another process may have migrated while we waited for the lock.
        let version: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0)).at(path)?;
        if version > SCHEMA_VERSION {
            return Err(Error::NewerSchema { path: path.clone(), found: version, supported: SCHEMA_VERSION });
        }
        let start = usize::try_from(version).unwrap_or(0);
        for step in schema::MIGRATIONS.get(start..).unwrap_or_default() {
            tx.execute_batch(step).at(path)?;
        }
        if version < schema::SEARCH_INDEX_VERSION {
            search::rebuild(&Reader { conn: &tx, path })?;
        }
        tx.pragma_update(None, "application_id", schema::APPLICATION_ID).at(path)?;
        tx.pragma_update(None, "user_version", SCHEMA_VERSION).at(path)?;
        tx.commit().at(path)
    }

    /// The catalog file (`:memory:` for an in-memory catalog).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts the one write transaction of a run. Fails with
    /// [`Error::Locked`] when another process holds the write lock for
    /// longer than the busy timeout.
    pub fn begin(&mut self) -> Result<MineTx<'_>> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).at(&self.path)?;
        Ok(MineTx { tx, path: &self.path, unmerged: std::cell::Cell::new(false) })
    }
}

/// The write transaction of a mining run. Dropping it without
/// [`MineTx::commit`] rolls everything back.
#[derive(Debug)]
pub struct MineTx<'a> {
    tx: Transaction<'a>,
    path: &'a Path,
    /// Whether the merged patterns were put back as mined (by the first
    /// pattern write); the commit then merges them again.
    unmerged: std::cell::Cell<bool>,
}

impl MineTx<'_> {
    /// Records (or updates) a corpus and stamps it as mined now.
    pub fn put_corpus(&self, name: &str, kind: &str, source: &str, revision: &str) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO corpora (name, kind, source, revision, mined_at)
                 VALUES (?1, ?2, ?3, ?4, strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
                 ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, source = excluded.source,
                     revision = excluded.revision, mined_at = excluded.mined_at",
            )
            .and_then(|mut st| st.execute(params![name, kind, source, revision]))
            .at(self.path)?;
        Ok(())
    }

    /// Records what mining made of one file, replacing any earlier row for
    /// `(corpus, path)`.
    #[allow(clippy::too_many_arguments)]
    pub fn put_file(
        &self,
        corpus: &str,
        path: &str,
        lang: Lang,
        blob: &str,
        stat: Option<StatKey>,
        fingerprint: &str,
        outcome: &FileOutcome,
    ) -> Result<()> {
        let (facts, skip_reason, skip) = match outcome {
            FileOutcome::Parsed(f) => (Some(json(self.path, "files", path, f)?), None, None),
            FileOutcome::NoKernels => (None, None, None),
            FileOutcome::Skipped(s) => (None, Some(s.name()), Some(json(self.path, "files", path, s)?)),
        };
        self.tx
            .prepare_cached(
                "INSERT OR REPLACE INTO files
                 (corpus, path, lang, blob, stat_size, stat_mtime_ns, fingerprint, outcome, skip_reason, skip, facts)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    corpus,
                    path,
                    lang.name(),
                    blob,
                    stat.map(|s| to_i64(s.size)),
                    stat.map(|s| s.mtime_ns),
                    fingerprint,
                    outcome.name(),
                    skip_reason,
                    skip,
                    facts,
                ])
            })
            .at(self.path)?;
        Ok(())
    }

    /// Deletes the rows of `corpus`'s files that are not in `keep` (files
    /// no longer in the corpus); returns how many were deleted.
    pub fn retain_files(&self, corpus: &str, keep: &HashSet<String>) -> Result<u64> {
        let paths: Vec<String> = self
            .tx
            .prepare_cached("SELECT path FROM files WHERE corpus = ?1")
            .and_then(|mut st| st.query_map([corpus], |r| r.get(0))?.collect())
            .at(self.path)?;
        let mut del = self.tx.prepare_cached("DELETE FROM files WHERE corpus = ?1 AND path = ?2").at(self.path)?;
        let mut n = 0;
        for p in paths.iter().filter(|p| !keep.contains(*p)) {
            n += del.execute(params![corpus, p]).at(self.path)? as u64;
        }
        Ok(n)
    }

    /// Replaces every pattern of `kind` (with its support, values, examples,
    /// commits and search row) by `patterns`, as given (an empty `mechanism`
    /// stays empty; [`Pattern::from`] and the history run fill it). Each pattern must have that
    /// kind, a finite or infinite (not NaN) score, and an id not used by
    /// another pattern.
    pub fn replace_patterns(&self, kind: Kind, patterns: &[Pattern]) -> Result<()> {
        let invalid = |id: &str, message: String| Error::InvalidPattern {
            path: self.path.to_path_buf(),
            id: id.to_string(),
            message,
        };
        let mut seen = HashSet::new();
        for p in patterns {
            if p.kind != kind {
                return Err(invalid(&p.id, format!("kind {} given to replace the {kind} patterns", p.kind)));
            }
            if p.score.is_nan() {
                return Err(invalid(&p.id, "score is NaN".into()));
            }
            if !seen.insert(p.id.as_str()) {
                return Err(invalid(&p.id, "duplicate id".into()));
            }
        }
        self.unmerge()?;
        let tx = &self.tx;
        let k = kind.name();
        tx.execute("DELETE FROM patterns_search WHERE rowid IN (SELECT rowid FROM patterns WHERE kind = ?1)", [k])
            .at(self.path)?;
        for table in ["support", "pattern_values", "examples", "commits"] {
            let sql = format!("DELETE FROM {table} WHERE pattern_id IN (SELECT id FROM patterns WHERE kind = ?1)");
            tx.execute(&sql, [k]).at(self.path)?;
        }
        tx.execute("DELETE FROM patterns WHERE kind = ?1", [k]).at(self.path)?;

        let mut taken = tx.prepare_cached("SELECT kind FROM patterns WHERE id = ?1").at(self.path)?;
        for p in patterns {
            let other: Option<String> = taken.query_row([&p.id], |r| r.get(0)).optional().at(self.path)?;
            if let Some(other) = other {
                return Err(invalid(&p.id, format!("the id is taken by a pattern of kind {other}")));
            }
            self.insert_pattern(p)?;
        }
        Ok(())
    }

    /// Replaces the one pattern `p.id` (or adds it), with its child rows
    /// and search row.
    pub fn put_pattern(&self, p: &Pattern) -> Result<()> {
        if p.score.is_nan() {
            return Err(Error::InvalidPattern {
                path: self.path.to_path_buf(),
                id: p.id.clone(),
                message: "score is NaN".into(),
            });
        }
        self.unmerge()?;
        self.write_pattern(p)
    }

    /// [`MineTx::put_pattern`] as it stands (no unmerging).
    fn write_pattern(&self, p: &Pattern) -> Result<()> {
        self.delete_pattern(&p.id)?;
        self.insert_pattern(p)
    }

    /// Removes pattern `id` with its child rows and search row.
    fn delete_pattern(&self, id: &str) -> Result<()> {
        let tx = &self.tx;
        tx.execute("DELETE FROM patterns_search WHERE rowid IN (SELECT rowid FROM patterns WHERE id = ?1)", [id])
            .at(self.path)?;
        for table in ["support", "pattern_values", "examples", "commits"] {
            tx.execute(&format!("DELETE FROM {table} WHERE pattern_id = ?1"), [id]).at(self.path)?;
        }
        tx.execute("DELETE FROM patterns WHERE id = ?1", [id]).at(self.path)?;
        Ok(())
    }

    fn insert_pattern(&self, p: &Pattern) -> Result<()> {
        let tx = &self.tx;
        let mut ins = tx
            .prepare_cached(
                "INSERT INTO patterns (id, kind, language, category, title, rationale, before, after, score, mechanism)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )
            .at(self.path)?;
        let mut sup = tx
            .prepare_cached(
                "INSERT INTO support (pattern_id, ord, corpus, revision, occurrences, files, opportunities)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .at(self.path)?;
        let mut val = tx
            .prepare_cached(
                "INSERT INTO pattern_values (pattern_id, ord, value, count, resolved, literals)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .at(self.path)?;
        let mut ex = tx
            .prepare_cached(
                "INSERT INTO examples (pattern_id, ord, corpus, path, line, snippet) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .at(self.path)?;
        let mut com = tx
            .prepare_cached(
                "INSERT INTO commits (pattern_id, ord, commit_id, summary, date) VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .at(self.path)?;
        ins.execute(params![
            p.id,
            p.kind.name(),
            p.language.name(),
            p.category.name(),
            p.title,
            p.rationale,
            p.before,
            p.after,
            p.score,
            p.mechanism
        ])
        .at(self.path)?;
        let rowid = tx.last_insert_rowid();
        for (i, s) in p.support.iter().enumerate() {
            sup.execute(params![
                p.id,
                i as i64,
                s.corpus,
                s.revision,
                to_i64(s.occurrences),
                to_i64(s.files),
                to_i64(s.opportunities)
            ])
            .at(self.path)?;
        }
        for (i, v) in p.values.iter().enumerate() {
            let literals = json(self.path, "pattern_values", &p.id, &v.literals)?;
            val.execute(params![p.id, i as i64, v.value, to_i64(v.count), v.resolved, literals]).at(self.path)?;
        }
        for (i, e) in p.examples.iter().enumerate() {
            ex.execute(params![p.id, i as i64, e.corpus, e.path, e.line, e.snippet]).at(self.path)?;
        }
        for (i, c) in p.commits.iter().enumerate() {
            com.execute(params![p.id, i as i64, c.id, c.summary, c.date]).at(self.path)?;
        }
        search::index(tx, self.path, rowid, p)
    }

    /// Makes every write of this transaction visible and durable; when it
    /// wrote patterns, merges those that are one rewrite first.
    pub fn commit(self) -> Result<()> {
        if self.unmerged.get() {
            self.merge_same_rewrites()?;
        }
        self.tx.commit().at(self.path)
    }
}

fn json<T: serde::Serialize>(path: &Path, table: &'static str, row: &str, v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::Corrupt {
        path: path.to_path_buf(),
        table,
        row: row.to_string(),
        message: e.to_string(),
    })
}

/// Read access over a connection: the catalog's own, or a write
/// transaction's (which sees its own uncommitted writes).
struct Reader<'c> {
    conn: &'c Connection,
    path: &'c Path,
}

impl Catalog {
    fn reader(&self) -> Reader<'_> {
        Reader { conn: &self.conn, path: &self.path }
    }

    /// The mining cache of `corpus`: path -> what it was mined from.
    pub fn cached_files(&self, corpus: &str) -> Result<HashMap<String, CachedFile>> {
        self.reader().cached_files(corpus)
    }

    /// The skipped files of `corpus`, by path, with why.
    pub fn skipped_files(&self, corpus: &str) -> Result<Vec<(String, Skip)>> {
        self.reader().skipped_files(corpus)
    }

    /// The corpora mined into this catalog, by name.
    pub fn corpora(&self) -> Result<Vec<CorpusRow>> {
        self.reader().corpora()
    }

    /// The facts of every parsed file of every corpus, by corpus and path.
    pub fn all_facts(&self) -> Result<Vec<StoredFacts>> {
        self.reader().all_facts()
    }

    pub(crate) fn corrupt(&self, table: &'static str, row: &str, message: String) -> Error {
        self.reader().corrupt(table, row, message)
    }
}

impl MineTx<'_> {
    fn reader(&self) -> Reader<'_> {
        Reader { conn: &self.tx, path: self.path }
    }

    /// [`Catalog::cached_files`], inside the transaction.
    pub fn cached_files(&self, corpus: &str) -> Result<HashMap<String, CachedFile>> {
        self.reader().cached_files(corpus)
    }

    /// [`Catalog::skipped_files`], inside the transaction.
    pub fn skipped_files(&self, corpus: &str) -> Result<Vec<(String, Skip)>> {
        self.reader().skipped_files(corpus)
    }

    /// [`Catalog::all_facts`], inside the transaction.
    pub fn all_facts(&self) -> Result<Vec<StoredFacts>> {
        self.reader().all_facts()
    }
}

impl Reader<'_> {
    /// The mining cache of `corpus`: path -> what it was mined from.
    fn cached_files(&self, corpus: &str) -> Result<HashMap<String, CachedFile>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT path, blob, stat_size, stat_mtime_ns, fingerprint FROM files WHERE corpus = ?1")
            .at(self.path)?;
        let rows = st
            .query_map([corpus], |r| {
                let size: Option<i64> = r.get(2)?;
                let mtime_ns: Option<i64> = r.get(3)?;
                let stat = match (size, mtime_ns) {
                    (Some(size), Some(mtime_ns)) => {
                        Some(StatKey { size: u64::try_from(size).unwrap_or_default(), mtime_ns })
                    }
                    _ => None,
                };
                Ok((r.get::<_, String>(0)?, CachedFile { blob: r.get(1)?, stat, fingerprint: r.get(4)? }))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<HashMap<_, _>>>())
            .at(self.path)?;
        Ok(rows)
    }

    /// The skipped files of `corpus`, by path, with why.
    fn skipped_files(&self, corpus: &str) -> Result<Vec<(String, Skip)>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT path, skip FROM files WHERE corpus = ?1 AND outcome = 'skipped' ORDER BY path")
            .at(self.path)?;
        let rows: Vec<(String, Option<String>)> =
            st.query_map([corpus], |r| Ok((r.get(0)?, r.get(1)?))).and_then(|rows| rows.collect()).at(self.path)?;
        rows.into_iter()
            .map(|(path, skip)| {
                let skip = self.decode::<Skip>("files", &format!("{corpus}:{path}"), skip.as_deref())?;
                Ok((path, skip))
            })
            .collect()
    }

    /// The corpora mined into this catalog, by name.
    fn corpora(&self) -> Result<Vec<CorpusRow>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT c.name, c.kind, c.source, c.revision, c.mined_at,
                    (SELECT count(*) FROM files f WHERE f.corpus = c.name),
                    (SELECT count(*) FROM files f WHERE f.corpus = c.name AND f.outcome = 'skipped')
                 FROM corpora c ORDER BY c.name",
            )
            .at(self.path)?;
        st.query_map([], |r| {
            Ok(CorpusRow {
                name: r.get(0)?,
                kind: r.get(1)?,
                source: r.get(2)?,
                revision: r.get(3)?,
                mined_at: r.get(4)?,
                files: r.get::<_, i64>(5)?.max(0) as u64,
                skipped: r.get::<_, i64>(6)?.max(0) as u64,
            })
        })
        .and_then(|rows| rows.collect())
        .at(self.path)
    }

    /// The facts of every parsed file of every corpus, by corpus and path.
    fn all_facts(&self) -> Result<Vec<StoredFacts>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT f.corpus, COALESCE(c.revision, ''), f.path, f.lang, f.facts
                 FROM files f LEFT JOIN corpora c ON c.name = f.corpus
                 WHERE f.outcome = 'parsed' ORDER BY f.corpus, f.path",
            )
            .at(self.path)?;
        type Row = (String, String, String, String, Option<String>);
        let rows: Vec<Row> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
            .and_then(|rows| rows.collect())
            .at(self.path)?;
        rows.into_iter()
            .map(|(corpus, revision, path, lang, facts)| {
                let row = format!("{corpus}:{path}");
                let lang = Lang::from_name(&lang)
                    .ok_or_else(|| self.corrupt("files", &row, format!("unknown language {lang:?}")))?;
                let facts = self.decode::<FileFacts>("files", &row, facts.as_deref())?;
                Ok(StoredFacts { corpus, revision, path, lang, facts })
            })
            .collect()
    }

    fn corrupt(&self, table: &'static str, row: &str, message: String) -> Error {
        Error::Corrupt { path: self.path.to_path_buf(), table, row: row.to_string(), message }
    }

    fn decode<T: serde::de::DeserializeOwned>(&self, table: &'static str, row: &str, text: Option<&str>) -> Result<T> {
        let text = text.ok_or_else(|| self.corrupt(table, row, "missing JSON".into()))?;
        serde_json::from_str(text).map_err(|e| self.corrupt(table, row, format!("bad JSON: {e}")))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{Category, CommitRef, IdiomExample, Support, ValueCount};
    use kidiom_miner::{FamilyFacts, FamilyKey, Mechanism};

    /// A pattern with every field filled; `occ` occurrences in each corpus.
    pub(crate) fn pattern(
        id: &str,
        kind: Kind,
        lang: Lang,
        cat: Category,
        corpora: &[(&str, u64)],
        score: f64,
    ) -> Pattern {
        Pattern {
            id: id.to_string(),
            kind,
            language: lang,
            category: cat,
            title: format!("title of {id}"),
            rationale: format!("rationale of {id}"),
            mechanism: format!("mechanism of {id}"),
            before: "tl.dot($A, $B)".into(),
            // one rewrite per id: patterns of the same rewrite would be merged into one
            after: format!("tl.dot($A, $B, input_precision=$P, {}=1)", id.replace(|c: char| !c.is_alphanumeric(), "_")),
            support: corpora
                .iter()
                .map(|(c, n)| Support {
                    corpus: c.to_string(),
                    revision: format!("rev-{c}"),
                    occurrences: *n,
                    files: n / 2 + 1,
                    opportunities: 7,
                })
                .collect(),
            values: vec![
                ValueCount { value: "\"ieee\"".into(), count: 5, resolved: None, literals: vec![] },
                ValueCount { value: "\"tf32\"".into(), count: 2, resolved: None, literals: vec![] },
                ValueCount {
                    value: "PREC".into(),
                    count: 1,
                    resolved: Some("\"tf32\" if HAS_TF32 else \"ieee\"".into()),
                    literals: vec!["\"tf32\"".into(), "\"ieee\"".into()],
                },
            ],
            examples: vec![IdiomExample {
                corpus: corpora.first().map(|c| c.0).unwrap_or("x").to_string(),
                path: format!("src/{id}.py"),
                line: 42,
                snippet: format!("b = tl.dot(q, k)  # {id}"),
            }],
            commits: if kind == Kind::Edit {
                vec![CommitRef {
                    id: "c0ffee".into(),
                    summary: "[Perf] fuse".into(),
                    date: "2025-01-02T03:04:05Z".into(),
                }]
            } else {
                Vec::new()
            },
            score,
        }
    }

    pub(crate) fn facts(kernels: u32) -> FileFacts {
        let key = FamilyKey {
            lang: Lang::Python,
            mechanism: Mechanism::Keyword,
            subject: "tl.dot".into(),
            decoration: "input_precision".into(),
        };
        FileFacts {
            kernels,
            scopes: [("call:tl.dot".to_string(), 3)].into_iter().collect(),
            families: vec![(key, FamilyFacts { occurrences: 1, units: 1, ..Default::default() })],
            ..Default::default()
        }
    }

    fn temp() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/dir/catalog.sqlite");
        (dir, path)
    }

    fn ids(ps: &[Pattern]) -> Vec<&str> {
        ps.iter().map(|p| p.id.as_str()).collect()
    }

    fn stat(size: u64) -> Option<StatKey> {
        Some(StatKey { size, mtime_ns: 1_700_000_000_123_456_789 })
    }

    #[test]
    fn open_creates_directories_and_reopens() {
        let (_d, path) = temp();
        let mut cat = Catalog::open(&path).unwrap();
        assert!(path.is_file());
        assert_eq!(cat.path(), path);
        let tx = cat.begin().unwrap();
        tx.put_corpus("fla", "git", "https://x/fla", "abc").unwrap();
        tx.commit().unwrap();
        drop(cat);
        let cat = Catalog::open(&path).unwrap();
        assert_eq!(cat.corpora().unwrap().len(), 1);
        let mode: String = cat.conn.pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
        let v: i64 = cat.conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!(v, SCHEMA_VERSION);
    }

    #[test]
    fn in_memory_catalog_works() {
        let mut cat = Catalog::open_in_memory().unwrap();
        let tx = cat.begin().unwrap();
        tx.replace_patterns(Kind::Usage, &[pattern("a", Kind::Usage, Lang::Cuda, Category::Memory, &[], 1.0)]).unwrap();
        tx.commit().unwrap();
        assert_eq!(cat.get("a").unwrap().unwrap().language, Lang::Cuda);
    }

    #[test]
    fn dropped_transaction_rolls_back() {
        let (_d, path) = temp();
        let mut cat = Catalog::open(&path).unwrap();
        let old = pattern("old", Kind::Usage, Lang::Python, Category::Precision, &[("fla", 3)], 1.0);
        let tx = cat.begin().unwrap();
        tx.put_corpus("fla", "git", "src", "r1").unwrap();
        tx.put_file("fla", "a.py", Lang::Python, "b1", None, "fp", &FileOutcome::Parsed(facts(1))).unwrap();
        tx.replace_patterns(Kind::Usage, std::slice::from_ref(&old)).unwrap();
        tx.commit().unwrap();

        {
            let tx = cat.begin().unwrap();
            tx.put_corpus("fla", "git", "src", "r2").unwrap();
            tx.put_file("fla", "a.py", Lang::Python, "b2", None, "fp", &FileOutcome::NoKernels).unwrap();
            tx.put_file("fla", "b.py", Lang::Python, "b3", None, "fp", &FileOutcome::NoKernels).unwrap();
            tx.replace_patterns(Kind::Usage, &[]).unwrap();
            // dropped: a failed or killed run
        }
        assert_eq!(cat.list(&Filter::default()).unwrap(), vec![old.clone()]);
        assert_eq!(cat.corpora().unwrap()[0].revision, "r1");
        let cached = cat.cached_files("fla").unwrap();
        assert_eq!(cached.len(), 1);
        assert_eq!(cached["a.py"].blob, "b1");

        let new = pattern("new", Kind::Usage, Lang::Python, Category::Precision, &[("fla", 3)], 1.0);
        let tx = cat.begin().unwrap();
        tx.replace_patterns(Kind::Usage, std::slice::from_ref(&new)).unwrap();
        tx.commit().unwrap();
        assert_eq!(cat.list(&Filter::default()).unwrap(), vec![new]);
        // A second connection sees the committed state too.
        assert_eq!(ids(&Catalog::open(&path).unwrap().list(&Filter::default()).unwrap()), ["new"]);
    }

    #[test]
    fn second_writer_is_locked_out_until_commit() {
        let (_d, path) = temp();
        let mut first = Catalog::open(&path).unwrap();
        let mut second = Catalog::open_with_timeout(&path, Duration::from_millis(200)).unwrap();
        let tx = first.begin().unwrap();
        tx.put_corpus("fla", "git", "src", "r1").unwrap();

        let err = second.begin().unwrap_err();
        assert!(matches!(err, Error::Locked { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(msg.contains("is locked by another kidiom process"), "{msg}");
        // Readers are not blocked by the writer, and do not see its writes.
        assert!(second.corpora().unwrap().is_empty());
        // Opening is not blocked either.
        Catalog::open_with_timeout(&path, Duration::from_millis(200)).unwrap();

        tx.commit().unwrap();
        let tx2 = second.begin().unwrap();
        tx2.commit().unwrap();
        assert_eq!(second.corpora().unwrap().len(), 1);
    }

    fn assert_not_a_catalog(bytes: &[u8]) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.sqlite");
        std::fs::write(&path, bytes).unwrap();
        let err = Catalog::open(&path).unwrap_err();
        assert!(matches!(err, Error::NotACatalog { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.starts_with(&format!("{} is not a kidiom catalog (", path.display())), "{msg}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "file must be untouched");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "no journal files left behind: {names:?}");
    }

    #[test]
    fn random_bytes_are_not_a_catalog() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let bytes: Vec<u8> = (0..10_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert_not_a_catalog(&bytes);
    }

    #[test]
    fn text_files_are_not_a_catalog() {
        assert_not_a_catalog(b"hello\n");
        assert_not_a_catalog("name = \"fla\"\nkind = \"git\"\n".repeat(200).as_bytes());
    }

    #[test]
    fn other_sqlite_databases_are_not_a_catalog() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("other.sqlite");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);").unwrap();
        drop(conn);
        let err = Catalog::open(&path).unwrap_err();
        assert!(err.to_string().contains("without kidiom tables"), "{err}");

        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "application_id", 42).unwrap();
        drop(conn);
        let err = Catalog::open(&path).unwrap_err();
        assert!(err.to_string().contains("another application"), "{err}");
    }

    #[test]
    fn a_directory_is_not_a_catalog() {
        let dir = tempfile::tempdir().unwrap();
        let err = Catalog::open(dir.path()).unwrap_err();
        assert!(matches!(err, Error::NotACatalog { .. }), "{err:?}");
    }

    #[test]
    fn newer_schema_is_refused() {
        let (_d, path) = temp();
        drop(Catalog::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1).unwrap();
        drop(conn);
        let err = Catalog::open(&path).unwrap_err();
        match &err {
            Error::NewerSchema { found, supported, .. } => {
                assert_eq!((*found, *supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
            }
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("upgrade kidiom"), "{err}");
    }

    #[test]
    fn mining_cache_round_trips() {
        let mut cat = Catalog::open_in_memory().unwrap();
        let tx = cat.begin().unwrap();
        tx.put_corpus("fla", "git", "https://x/fla", "abc").unwrap();
        tx.put_corpus("dg", "dir", "/src/dg", "").unwrap();
        tx.put_file("fla", "a.py", Lang::Python, "b-a", None, "fp1", &FileOutcome::Parsed(facts(2))).unwrap();
        tx.put_file("fla", "b.py", Lang::Python, "b-b", None, "fp1", &FileOutcome::NoKernels).unwrap();
        tx.put_file("fla", "c.cu", Lang::Cuda, "b-c", None, "fp1", &FileOutcome::Skipped(Skip::TooLarge(9_000_000)))
            .unwrap();
        tx.put_file("dg", "k.cu", Lang::Cuda, "b-k", stat(10), "fp1", &FileOutcome::Parsed(facts(1))).unwrap();
        tx.put_file("dg", "bin.h", Lang::Cpp, "b-bin", stat(3), "fp1", &FileOutcome::Skipped(Skip::Binary)).unwrap();
        // a file not in any recorded corpus is still cached
        tx.put_file("loose", "x.rs", Lang::Rust, "b-x", None, "fp1", &FileOutcome::Parsed(facts(0))).unwrap();
        tx.commit().unwrap();

        let fla = cat.cached_files("fla").unwrap();
        assert_eq!(fla.len(), 3);
        assert_eq!(fla["a.py"], CachedFile { blob: "b-a".into(), stat: None, fingerprint: "fp1".into() });
        assert_eq!(cat.cached_files("dg").unwrap()["k.cu"].stat, stat(10));
        assert!(cat.cached_files("nope").unwrap().is_empty());

        let all = cat.all_facts().unwrap();
        let got: Vec<_> =
            all.iter().map(|f| (f.corpus.as_str(), f.revision.as_str(), f.path.as_str(), f.lang)).collect();
        assert_eq!(
            got,
            [("dg", "", "k.cu", Lang::Cuda), ("fla", "abc", "a.py", Lang::Python), ("loose", "", "x.rs", Lang::Rust)]
        );
        assert_eq!(all[1].facts, facts(2));

        assert_eq!(cat.skipped_files("fla").unwrap(), [("c.cu".to_string(), Skip::TooLarge(9_000_000))]);

        let corpora = cat.corpora().unwrap();
        assert_eq!(corpora.len(), 2);
        let fla_row = corpora.iter().find(|c| c.name == "fla").unwrap();
        assert_eq!((fla_row.kind.as_str(), fla_row.files, fla_row.skipped), ("git", 3, 1));
        assert_eq!(fla_row.mined_at.len(), "2026-01-01T00:00:00Z".len(), "{}", fla_row.mined_at);
        assert!(fla_row.mined_at.ends_with('Z'));

        // Overwrite: same (corpus, path) replaces the row.
        let tx = cat.begin().unwrap();
        tx.put_file("fla", "a.py", Lang::Python, "b-a2", None, "fp2", &FileOutcome::NoKernels).unwrap();
        let keep: HashSet<String> = ["a.py".to_string(), "gone-already.py".to_string()].into();
        assert_eq!(tx.retain_files("fla", &keep).unwrap(), 2);
        assert_eq!(tx.retain_files("fla", &keep).unwrap(), 0);
        tx.commit().unwrap();
        let fla = cat.cached_files("fla").unwrap();
        assert_eq!(fla.keys().collect::<Vec<_>>(), ["a.py"]);
        assert_eq!(fla["a.py"].fingerprint, "fp2");
        assert_eq!(cat.cached_files("dg").unwrap().len(), 2, "other corpora untouched");
        assert!(cat.all_facts().unwrap().iter().all(|f| f.corpus != "fla"));
    }

    #[test]
    fn a_version_4_catalog_keeps_its_values_and_gains_resolutions() {
        let (_d, path) = temp();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let conn = Connection::open(&path).unwrap();
        for step in &schema::MIGRATIONS[..4] {
            conn.execute_batch(step).unwrap();
        }
        conn.pragma_update(None, "application_id", schema::APPLICATION_ID).unwrap();
        conn.pragma_update(None, "user_version", 4).unwrap();
        conn.execute_batch(
            "INSERT INTO patterns (id, kind, language, category, title, rationale, before, after, score, mechanism)
                 VALUES ('py-keyword-tl-dot-input-precision', 'usage', 'python', 'precision', 't', 'r',
                         'tl.dot($$$ARGS)', 'tl.dot($$$ARGS, input_precision=$V)', 2.0, 'm');
             INSERT INTO pattern_values (pattern_id, ord, value, count) VALUES
                 ('py-keyword-tl-dot-input-precision', 0, 'DOT_PRECISION', 7),
                 ('py-keyword-tl-dot-input-precision', 1, '\"ieee\"', 3);",
        )
        .unwrap();
        drop(conn);

        let mut cat = Catalog::open(&path).unwrap();
        let v: i64 = cat.conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        let p = cat.get("py-keyword-tl-dot-input-precision").unwrap().unwrap();
        let values: Vec<(&str, u64)> = p.values.iter().map(|v| (v.value.as_str(), v.count)).collect();
        assert_eq!(values, [("DOT_PRECISION", 7), ("\"ieee\"", 3)]);
        assert!(p.values.iter().all(|v| v.resolved.is_none() && v.literals.is_empty()), "{:?}", p.values);
        assert_eq!(p.values[1].literal_values(), ["\"ieee\""]);
        assert!(p.values[0].literal_values().is_empty());

        // The migrated catalog stores resolutions.
        let mut q = p.clone();
        q.values[0].resolved = Some("\"tf32\" if A else \"ieee\"".into());
        q.values[0].literals = vec!["\"tf32\"".into(), "\"ieee\"".into()];
        let tx = cat.begin().unwrap();
        tx.replace_patterns(Kind::Usage, std::slice::from_ref(&q)).unwrap();
        tx.commit().unwrap();
        drop(cat);
        let cat = Catalog::open(&path).unwrap();
        assert_eq!(cat.get(&q.id).unwrap(), Some(q.clone()));
        let raw: (Option<String>, String) = cat
            .conn
            .query_row("SELECT resolved, literals FROM pattern_values WHERE ord = 0", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!(raw, (q.values[0].resolved.clone(), r#"["\"tf32\"","\"ieee\""]"#.to_string()));
        // The literals are searchable with the values.
        assert_eq!(ids(&cat.search("tf32", &Filter::default()).unwrap()), [q.id.as_str()]);
    }

    #[test]
    fn bad_literals_json_is_reported_with_its_pattern() {
        let mut cat = Catalog::open_in_memory().unwrap();
        let tx = cat.begin().unwrap();
        tx.replace_patterns(Kind::Usage, &[pattern("a", Kind::Usage, Lang::Python, Category::Precision, &[], 1.0)])
            .unwrap();
        tx.commit().unwrap();
        cat.conn.execute("UPDATE pattern_values SET literals = '[1' WHERE ord = 2", []).unwrap();
        let err = cat.get("a").unwrap_err();
        assert!(matches!(err, Error::Corrupt { table: "pattern_values", .. }), "{err:?}");
    }

    #[test]
    fn bad_json_is_reported_with_its_row() {
        let mut cat = Catalog::open_in_memory().unwrap();
        let tx = cat.begin().unwrap();
        tx.put_file("fla", "a.py", Lang::Python, "b", None, "fp", &FileOutcome::Parsed(facts(1))).unwrap();
        tx.commit().unwrap();
        cat.conn.execute("UPDATE files SET facts = '{not json'", []).unwrap();
        let err = cat.all_facts().unwrap_err();
        assert!(matches!(err, Error::Corrupt { table: "files", .. }), "{err:?}");
        assert!(err.to_string().contains("fla:a.py"), "{err}");

        cat.conn.execute("UPDATE files SET lang = 'cobol'", []).unwrap();
        assert!(cat.all_facts().unwrap_err().to_string().contains("unknown language"));
    }
}
