//! The catalog as a file: `kidiom catalog export --format json` and
//! `kidiom catalog import` (format `kidiom-patterns`, version 1; documented
//! in the crate README).
//!
//! An export holds the patterns with their provenance (the corpora and
//! revisions they were mined at, the commits of edit idioms). A *snapshot*
//! export is the one a repository may carry: templates, counts, values and
//! references (corpus, revision, path, line, commit id) only; the
//! examples' source lines, the commits' messages and mechanisms (which may
//! quote them) are left out, and an import recomputes the mechanism from
//! our own glossary.
//!
//! Importing merges, and merging is idempotent: a pattern new to the
//! catalog is added; one already there keeps its text and category and
//! takes the imported support rows of the imported corpora (replacing its
//! rows of those corpora), the union of examples and commits, and per
//! value the larger count (the catalog keeps no per-corpus histogram).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{At, MineTx};
use crate::error::{Error, Result};
use crate::model::{Kind, Pattern};

/// The format name of an exported catalog.
pub const EXCHANGE_FORMAT: &str = "kidiom-patterns";
/// Its version: fields are only added within a version.
pub const EXCHANGE_VERSION: u32 = 1;

/// A corpus an export's patterns were mined from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportedCorpus {
    /// Its name (`fla`).
    pub name: String,
    /// git, dir or pypi.
    pub kind: String,
    /// Where it was read from.
    pub source: String,
    /// The revision mined.
    pub revision: String,
}

/// An exported catalog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CatalogFile {
    /// Always [`EXCHANGE_FORMAT`].
    pub format: String,
    /// [`EXCHANGE_VERSION`].
    pub version: u32,
    /// A snapshot: no upstream source text (see the module documentation).
    #[serde(default)]
    pub snapshot: bool,
    /// The corpora of the patterns' support.
    pub corpora: Vec<ExportedCorpus>,
    /// The patterns.
    pub patterns: Vec<Pattern>,
}

impl CatalogFile {
    /// An export of `patterns`, restricted to the support of `corpora`
    /// (patterns without support there are left out); `snapshot` strips
    /// upstream text.
    pub fn new(mut patterns: Vec<Pattern>, corpora: Vec<ExportedCorpus>, snapshot: bool) -> CatalogFile {
        let names: BTreeSet<&str> = corpora.iter().map(|c| c.name.as_str()).collect();
        patterns.retain_mut(|p| {
            p.support.retain(|s| names.contains(s.corpus.as_str()));
            p.examples.retain(|e| names.contains(e.corpus.as_str()));
            if snapshot {
                for e in &mut p.examples {
                    e.snippet.clear();
                }
                for c in &mut p.commits {
                    // the rationale quotes a commit's message: out with it
                    if !c.summary.is_empty() {
                        p.rationale = p.rationale.replace(&format!(" \"{}\"", c.summary), "");
                    }
                    c.summary.clear();
                }
                p.mechanism.clear();
            }
            !p.support.is_empty()
        });
        CatalogFile { format: EXCHANGE_FORMAT.into(), version: EXCHANGE_VERSION, snapshot, corpora, patterns }
    }

    /// Reads an export; a wrong format or a newer version is an error.
    pub fn parse(text: &str, source: &str) -> Result<CatalogFile> {
        let bad = |message: String| Error::Exchange { source_name: source.to_string(), message };
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
        if v["format"] != EXCHANGE_FORMAT {
            return Err(bad(format!("not a {EXCHANGE_FORMAT} file (format {})", v["format"])));
        }
        match v["version"].as_u64() {
            Some(n) if n <= u64::from(EXCHANGE_VERSION) => {}
            other => {
                return Err(bad(format!(
                    "version {other:?} is newer than this kidiom reads ({EXCHANGE_VERSION}); update kidiom"
                )));
            }
        }
        let f: CatalogFile = serde_json::from_value(v).map_err(|e| bad(e.to_string()))?;
        for p in &f.patterns {
            if p.id.trim().is_empty() || p.score.is_nan() {
                return Err(bad(format!("pattern {:?} has no id or a NaN score", p.id)));
            }
            if let Some(s) = p.support.iter().find(|s| !f.corpora.iter().any(|c| c.name == s.corpus)) {
                return Err(bad(format!(
                    "pattern {} has support from {}, which the file does not list",
                    p.id, s.corpus
                )));
            }
        }
        Ok(f)
    }
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    /// Patterns new to the catalog.
    pub added: usize,
    /// Patterns merged into one already there.
    pub merged: usize,
    /// Patterns left out, with the reason.
    pub skipped: Vec<String>,
    /// Usage and edit patterns imported.
    pub usage: usize,
    /// Edit patterns imported.
    pub edit: usize,
}

/// `imported` merged into `local` (see the module documentation).
pub fn merge(local: Option<Pattern>, imported: Pattern) -> Pattern {
    let Some(mut p) = local else { return imported };
    let corpora: BTreeSet<&str> = imported.support.iter().map(|s| s.corpus.as_str()).collect();
    p.support.retain(|s| !corpora.contains(s.corpus.as_str()));
    p.support.extend(imported.support.iter().cloned());
    for v in imported.values {
        match p.values.iter_mut().find(|x| x.value == v.value) {
            Some(x) => {
                x.count = x.count.max(v.count);
                if x.resolved.is_none() {
                    x.resolved = v.resolved;
                }
                for l in v.literals {
                    if !x.literals.contains(&l) {
                        x.literals.push(l);
                    }
                }
            }
            None => p.values.push(v),
        }
    }
    p.values.sort_by(|a, b| b.count.cmp(&a.count).then(a.value.cmp(&b.value)));
    for e in imported.examples {
        if !p.examples.iter().any(|x| x.corpus == e.corpus && x.path == e.path && x.line == e.line) {
            p.examples.push(e);
        }
    }
    for c in imported.commits {
        if !p.commits.iter().any(|x| x.id == c.id) {
            p.commits.push(c);
        }
    }
    p.score = p.score.max(imported.score);
    p
}

impl MineTx<'_> {
    /// Merges `file`'s patterns (of `kinds`, from the `corpora` named, or
    /// all) into the catalog, and records each corpus as `snapshot`-kind
    /// with `source` naming the file.
    pub fn import(
        &self,
        file: &CatalogFile,
        source: &str,
        corpora: Option<&[String]>,
        kinds: &[Kind],
    ) -> Result<ImportReport> {
        let wanted = |name: &str| corpora.is_none_or(|c| c.iter().any(|x| x == name));
        let mut report = ImportReport::default();
        // merged patterns back as mined before reading them (the commit merges again)
        self.unmerge()?;
        // A corpus mined here (say from a fallback) keeps its row when only its edit idioms come in.
        for c in file.corpora.iter().filter(|c| wanted(&c.name)) {
            let known: bool = self
                .tx
                .prepare_cached("SELECT count(*) FROM corpora WHERE name = ?1")
                .and_then(|mut st| st.query_row([&c.name], |r| r.get::<_, i64>(0)))
                .at(self.path)?
                > 0;
            if kinds.contains(&Kind::Usage) || !known {
                self.put_corpus(&c.name, "snapshot", &format!("{source} ({} {})", c.kind, c.source), &c.revision)?;
            }
        }
        let glossary = crate::glossary::builtin();
        for p in &file.patterns {
            if !kinds.contains(&p.kind) {
                continue;
            }
            let mut p = p.clone();
            p.support.retain(|s| wanted(&s.corpus));
            p.examples.retain(|e| wanted(&e.corpus));
            if p.support.is_empty() {
                continue;
            }
            let local = self.reader().get(&p.id)?;
            if let Some(l) = &local
                && l.kind != p.kind
            {
                report.skipped.push(format!("{}: the id is taken by a {} pattern", p.id, l.kind));
                continue;
            }
            if local.is_some() {
                report.merged += 1;
            } else {
                report.added += 1;
            }
            match p.kind {
                Kind::Usage => report.usage += 1,
                Kind::Edit => report.edit += 1,
                // kidiom's own, never in a snapshot
                Kind::Transform => continue,
            }
            let mut merged = merge(local, p);
            if merged.mechanism.is_empty() {
                merged.mechanism = glossary.describe(&merged);
            }
            self.put_pattern(&merged)?;
        }
        // kidiom's own patterns, in an imported catalog as in a mined one
        self.replace_patterns(Kind::Transform, &crate::builtin::patterns())?;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Category, Lang};
    use crate::store::Catalog;
    use crate::store::tests::pattern;

    fn corpora(names: &[&str]) -> Vec<ExportedCorpus> {
        names
            .iter()
            .map(|n| ExportedCorpus {
                name: n.to_string(),
                kind: "git".into(),
                source: format!("https://example.invalid/{n}"),
                revision: format!("rev-{n}"),
            })
            .collect()
    }

    fn all(cat: &Catalog) -> Vec<Pattern> {
        cat.list(&crate::Filter { limit: Some(1000), ..Default::default() }).unwrap()
    }

    #[test]
    fn a_round_trip_keeps_every_field_and_a_second_import_changes_nothing() {
        let mut src = Catalog::open_in_memory().unwrap();
        let ps = [
            pattern("a", Kind::Usage, Lang::Python, Category::Precision, &[("fla", 4), ("sg", 2)], 3.0),
            pattern("b", Kind::Edit, Lang::Cuda, Category::Memory, &[("dg", 9)], 5.0),
        ];
        let tx = src.begin().unwrap();
        tx.replace_patterns(Kind::Usage, &ps[..1]).unwrap();
        tx.replace_patterns(Kind::Edit, &ps[1..]).unwrap();
        tx.commit().unwrap();
        let file = CatalogFile::new(all(&src), corpora(&["fla", "sg", "dg"]), false);
        let text = serde_json::to_string(&file).unwrap();
        let back = CatalogFile::parse(&text, "x.json").unwrap();
        assert_eq!(back, file);

        let mut dst = Catalog::open_in_memory().unwrap();
        for round in 0..2 {
            let tx = dst.begin().unwrap();
            let r = tx.import(&back, "x.json", None, &[Kind::Usage, Kind::Edit]).unwrap();
            tx.commit().unwrap();
            assert_eq!((r.added, r.merged), if round == 0 { (2, 0) } else { (0, 2) }, "{r:?}");
            // and kidiom's own patterns, which an imported catalog holds like a mined one
            let (own, imported): (Vec<Pattern>, Vec<Pattern>) =
                all(&dst).into_iter().partition(|p| p.kind == Kind::Transform);
            assert_eq!(imported, all(&src), "round {round}");
            assert_eq!(own.len(), crate::builtin::patterns().len(), "round {round}");
        }
        let c = dst.corpora().unwrap();
        assert!(c.iter().all(|c| c.kind == "snapshot" && c.source.starts_with("x.json")), "{c:?}");
    }

    #[test]
    fn a_snapshot_carries_no_upstream_text_and_only_the_corpora_asked_for() {
        let mut p = pattern("a", Kind::Edit, Lang::Python, Category::Precision, &[("fla", 4), ("sg", 2)], 3.0);
        assert!(!p.examples[0].snippet.is_empty() && !p.commits.is_empty());
        p.rationale = format!("Made by hand in 1 commits, e.g. abc \"{}\". Replayed.", p.commits[0].summary);
        let f = CatalogFile::new(vec![p.clone()], corpora(&["fla"]), true);
        let q = &f.patterns[0];
        assert_eq!(q.support.len(), 1);
        assert!(q.examples.iter().all(|e| e.snippet.is_empty() && e.corpus == "fla"));
        assert!(q.commits.iter().all(|c| c.summary.is_empty() && !c.id.is_empty()));
        assert!(q.mechanism.is_empty());
        assert!(!q.rationale.contains(&p.commits[0].summary), "{}", q.rationale);
        assert_eq!((q.before.as_str(), q.values.len()), (p.before.as_str(), p.values.len()));
        // a pattern with no support left is not exported
        assert!(CatalogFile::new(vec![p], corpora(&["other"]), true).patterns.is_empty());
    }

    #[test]
    fn merging_replaces_the_imported_corpora_rows_and_keeps_the_rest() {
        let local = pattern("a", Kind::Usage, Lang::Python, Category::Precision, &[("sg", 2), ("dg", 1)], 3.0);
        let mut imported = pattern("a", Kind::Usage, Lang::Python, Category::Math, &[("dg", 9)], 7.0);
        imported.values[0].count = 50;
        imported.title = "other title".into();
        let m = merge(Some(local.clone()), imported.clone());
        assert_eq!(m.title, local.title, "the local text stays");
        assert_eq!(m.category, Category::Precision);
        let occ: Vec<(String, u64)> = m.support.iter().map(|s| (s.corpus.clone(), s.occurrences)).collect();
        assert_eq!(occ, vec![("sg".into(), 2), ("dg".into(), 9)]);
        assert_eq!(m.values[0].count, 50);
        assert_eq!(m.score, 7.0);
        assert_eq!(merge(Some(m.clone()), imported), m, "idempotent");
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        let e = |t: &str| CatalogFile::parse(t, "f.json").unwrap_err().to_string();
        assert!(e("{").contains("not JSON"));
        assert!(e(r#"{"format":"other","version":1}"#).contains("not a kidiom-patterns file"));
        assert!(e(r#"{"format":"kidiom-patterns","version":99,"corpora":[],"patterns":[]}"#).contains("newer"));
        let p = pattern("a", Kind::Usage, Lang::Python, Category::Precision, &[("fla", 1)], 1.0);
        let f = CatalogFile::new(vec![p], corpora(&["fla"]), false);
        let mut v = serde_json::to_value(&f).unwrap();
        v["corpora"] = serde_json::json!([]);
        assert!(e(&v.to_string()).contains("does not list"));
    }

    #[test]
    fn a_corpus_mined_here_keeps_its_row_when_only_its_history_comes_in() {
        let mut cat = Catalog::open_in_memory().unwrap();
        let tx = cat.begin().unwrap();
        tx.put_corpus("fla", "pypi", "fla-core==0.6.0", "0.6.0").unwrap();
        let f = CatalogFile::new(
            vec![pattern("e", Kind::Edit, Lang::Python, Category::Math, &[("fla", 3), ("dg", 1)], 1.0)],
            corpora(&["fla", "dg"]),
            true,
        );
        tx.import(&f, "snap.json", None, &[Kind::Edit]).unwrap();
        tx.commit().unwrap();
        let rows = cat.corpora().unwrap();
        let kind = |n: &str| rows.iter().find(|c| c.name == n).map(|c| c.kind.clone());
        assert_eq!(kind("fla").as_deref(), Some("pypi"), "its usage idioms are its own");
        assert_eq!(kind("dg").as_deref(), Some("snapshot"), "a corpus known only from the snapshot says so");
    }

    #[test]
    fn an_id_taken_by_another_kind_is_skipped() {
        let mut cat = Catalog::open_in_memory().unwrap();
        let tx = cat.begin().unwrap();
        tx.replace_patterns(Kind::Usage, &[pattern("a", Kind::Usage, Lang::Python, Category::Math, &[("x", 1)], 1.0)])
            .unwrap();
        let f = CatalogFile::new(
            vec![pattern("a", Kind::Edit, Lang::Python, Category::Math, &[("y", 1)], 1.0)],
            corpora(&["y"]),
            false,
        );
        let r = tx.import(&f, "f.json", None, &[Kind::Usage, Kind::Edit]).unwrap();
        assert_eq!((r.added, r.merged, r.skipped.len()), (0, 0, 1), "{r:?}");
    }
}
