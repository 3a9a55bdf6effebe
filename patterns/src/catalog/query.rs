//! Reading patterns: listing with filters, full-text search, statistics.

use std::collections::BTreeMap;

use rusqlite::types::Value;

use super::{At, Catalog, CorpusRow, SCHEMA_VERSION};
use crate::error::Result;
use crate::model::{Category, CommitRef, IdiomExample, Kind, Lang, Pattern, Support, ValueCount};

/// Which patterns to return; the default returns all of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only this language.
    pub language: Option<Lang>,
    /// Only this category.
    pub category: Option<Category>,
    /// Only this kind.
    pub kind: Option<Kind>,
    /// Only patterns with at least this many occurrences over all corpora.
    pub min_support: Option<u64>,
    /// Only patterns with support in this corpus (their other support is
    /// still returned).
    pub corpus: Option<String>,
    /// At most this many patterns.
    pub limit: Option<usize>,
}

impl Filter {
    /// The SQL condition on `patterns p` and its parameters.
    fn condition(&self, params: &mut Vec<Value>) -> String {
        let mut conds = vec!["1".to_string()];
        let mut push = |sql: &str, v: Value| {
            params.push(v);
            conds.push(sql.replace('?', &format!("?{}", params.len())));
        };
        if let Some(l) = self.language {
            push("p.language = ?", Value::Text(l.name().into()));
        }
        if let Some(c) = self.category {
            push("p.category = ?", Value::Text(c.name().into()));
        }
        if let Some(k) = self.kind {
            push("p.kind = ?", Value::Text(k.name().into()));
        }
        if let Some(n) = self.min_support {
            push(
                "(SELECT COALESCE(SUM(s.occurrences), 0) FROM support s WHERE s.pattern_id = p.id) >= ?",
                Value::Integer(super::to_i64(n)),
            );
        }
        if let Some(c) = &self.corpus {
            push("EXISTS (SELECT 1 FROM support s WHERE s.pattern_id = p.id AND s.corpus = ?)", Value::Text(c.clone()));
        }
        conds.join(" AND ")
    }

    fn limit(&self) -> i64 {
        self.limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX)).unwrap_or(-1)
    }
}

/// What a catalog holds, in numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CatalogStats {
    /// The catalog's schema version.
    pub schema_version: i64,
    /// Patterns in all.
    pub patterns: u64,
    /// Patterns per kind name.
    pub by_kind: BTreeMap<String, u64>,
    /// Patterns per language name.
    pub by_language: BTreeMap<String, u64>,
    /// Patterns per category name.
    pub by_category: BTreeMap<String, u64>,
    /// The corpora mined.
    pub corpora: Vec<CorpusRow>,
    /// Files recorded over all corpora.
    pub files: u64,
    /// Files parsed (with kernels).
    pub parsed: u64,
    /// Files the prefilter rejected (no kernel marker).
    pub no_kernels: u64,
    /// Files skipped.
    pub skipped: u64,
    /// Skipped files per reason name (`binary`, `too-large`, ...).
    pub skipped_by_reason: BTreeMap<String, u64>,
}

const COLUMNS: &str = "p.id, p.kind, p.language, p.category, p.title, p.rationale, p.before, p.after, p.score";

/// Turns user text into an FTS5 query that cannot be a syntax error: each
/// whitespace-separated word becomes a quoted prefix phrase (`tl.dot(`
/// becomes `"tl.dot("*`, matching the tokens `tl dot…`), and all must
/// match. Words without a letter or digit are dropped; `None` when nothing
/// is left.
pub(crate) fn fts_query(text: &str) -> Option<String> {
    let terms: Vec<String> = text
        .split_whitespace()
        .filter(|w| w.chars().any(char::is_alphanumeric))
        .map(|w| format!("\"{}\"*", w.replace('"', "\"\"")))
        .collect();
    (!terms.is_empty()).then(|| terms.join(" "))
}

impl Catalog {
    /// Patterns matching `filter`, by score (highest first), then id.
    pub fn list(&self, filter: &Filter) -> Result<Vec<Pattern>> {
        let mut params = Vec::new();
        let cond = filter.condition(&mut params);
        params.push(Value::Integer(filter.limit()));
        let sql = format!(
            "SELECT {COLUMNS} FROM patterns p WHERE {cond} ORDER BY p.score DESC, p.id LIMIT ?{}",
            params.len()
        );
        self.query_patterns(&sql, params)
    }

    /// The pattern with this id.
    pub fn get(&self, id: &str) -> Result<Option<Pattern>> {
        let sql = format!("SELECT {COLUMNS} FROM patterns p WHERE p.id = ?1");
        Ok(self.query_patterns(&sql, vec![Value::Text(id.to_string())])?.into_iter().next())
    }

    /// Full-text search over ids, titles, rationales, `before`/`after`
    /// patterns and example snippets, within `filter`; best match first
    /// (bm25, titles weigh most), then by score. Any user text is safe:
    /// FTS5 operators and punctuation in it are taken literally.
    pub fn search(&self, query: &str, filter: &Filter) -> Result<Vec<Pattern>> {
        let Some(q) = fts_query(query) else { return Ok(Vec::new()) };
        let mut params = vec![Value::Text(q)];
        let cond = filter.condition(&mut params);
        params.push(Value::Integer(filter.limit()));
        let sql = format!(
            "SELECT {COLUMNS} FROM patterns_fts f JOIN patterns p ON p.rowid = f.rowid
             WHERE patterns_fts MATCH ?1 AND {cond}
             ORDER BY bm25(patterns_fts, 2.0, 5.0, 1.0, 1.0, 1.0, 1.0), p.score DESC, p.id LIMIT ?{}",
            params.len()
        );
        self.query_patterns(&sql, params)
    }

    /// Counts of patterns, corpora and files.
    pub fn stats(&self) -> Result<CatalogStats> {
        let path = &self.path;
        let mut s = CatalogStats { schema_version: SCHEMA_VERSION, ..Default::default() };
        let grouped = |sql: &str| -> Result<BTreeMap<String, u64>> {
            let mut st = self.conn.prepare(sql).at(path)?;
            st.query_map([], |r| {
                Ok((r.get::<_, Option<String>>(0)?.unwrap_or_default(), r.get::<_, i64>(1)?.max(0) as u64))
            })
            .and_then(|rows| rows.collect())
            .at(path)
        };
        s.by_kind = grouped("SELECT kind, count(*) FROM patterns GROUP BY kind")?;
        s.by_language = grouped("SELECT language, count(*) FROM patterns GROUP BY language")?;
        s.by_category = grouped("SELECT category, count(*) FROM patterns GROUP BY category")?;
        s.patterns = s.by_kind.values().sum();
        let outcomes = grouped("SELECT outcome, count(*) FROM files GROUP BY outcome")?;
        let get = |k: &str| outcomes.get(k).copied().unwrap_or(0);
        (s.parsed, s.no_kernels, s.skipped) = (get("parsed"), get("no-kernels"), get("skipped"));
        s.files = outcomes.values().sum();
        s.skipped_by_reason =
            grouped("SELECT skip_reason, count(*) FROM files WHERE outcome = 'skipped' GROUP BY skip_reason")?;
        s.corpora = self.corpora()?;
        Ok(s)
    }

    fn query_patterns(&self, sql: &str, params: Vec<Value>) -> Result<Vec<Pattern>> {
        let path = &self.path;
        type Row = (String, String, String, String, String, String, String, String, f64);
        let rows: Vec<Row> = self
            .conn
            .prepare_cached(sql)
            .and_then(|mut st| {
                st.query_map(rusqlite::params_from_iter(params), |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                        r.get(8)?,
                    ))
                })?
                .collect()
            })
            .at(path)?;
        rows.into_iter()
            .map(|(id, kind, language, category, title, rationale, before, after, score)| {
                let bad = |what: &str, v: &str| self.corrupt("patterns", &id, format!("unknown {what} {v:?}"));
                let kind = Kind::from_name(&kind).ok_or_else(|| bad("kind", &kind))?;
                let language = Lang::from_name(&language).ok_or_else(|| bad("language", &language))?;
                let category = Category::from_name(&category).ok_or_else(|| bad("category", &category))?;
                let mut p = Pattern {
                    id,
                    kind,
                    language,
                    category,
                    title,
                    rationale,
                    before,
                    after,
                    support: Vec::new(),
                    values: Vec::new(),
                    examples: Vec::new(),
                    commits: Vec::new(),
                    score,
                };
                self.load_children(&mut p)?;
                Ok(p)
            })
            .collect()
    }

    fn load_children(&self, p: &mut Pattern) -> Result<()> {
        let path = &self.path;
        let count = |v: i64| u64::try_from(v).unwrap_or(0);
        let id = p.id.as_str();
        p.support = self
            .conn
            .prepare_cached(
                "SELECT corpus, revision, occurrences, files, opportunities FROM support
                 WHERE pattern_id = ?1 ORDER BY ord",
            )
            .and_then(|mut st| {
                st.query_map([id], |r| {
                    Ok(Support {
                        corpus: r.get(0)?,
                        revision: r.get(1)?,
                        occurrences: count(r.get(2)?),
                        files: count(r.get(3)?),
                        opportunities: count(r.get(4)?),
                    })
                })?
                .collect()
            })
            .at(path)?;
        p.values = self
            .conn
            .prepare_cached("SELECT value, count FROM pattern_values WHERE pattern_id = ?1 ORDER BY ord")
            .and_then(|mut st| {
                st.query_map([id], |r| Ok(ValueCount { value: r.get(0)?, count: count(r.get(1)?) }))?.collect()
            })
            .at(path)?;
        p.examples = self
            .conn
            .prepare_cached("SELECT corpus, path, line, snippet FROM examples WHERE pattern_id = ?1 ORDER BY ord")
            .and_then(|mut st| {
                st.query_map([id], |r| {
                    Ok(IdiomExample {
                        corpus: r.get(0)?,
                        path: r.get(1)?,
                        line: u32::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                        snippet: r.get(3)?,
                    })
                })?
                .collect()
            })
            .at(path)?;
        p.commits = self
            .conn
            .prepare_cached("SELECT commit_id, summary, date FROM commits WHERE pattern_id = ?1 ORDER BY ord")
            .and_then(|mut st| {
                st.query_map([id], |r| Ok(CommitRef { id: r.get(0)?, summary: r.get(1)?, date: r.get(2)? }))?.collect()
            })
            .at(path)?;
        Ok(())
    }
}
