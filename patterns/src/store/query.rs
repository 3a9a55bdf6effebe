//! Reading patterns: listing with filters, statistics. (Search is in
//! `search.rs`.)

use std::collections::BTreeMap;

use rusqlite::types::Value;

use super::{At, Catalog, CorpusRow, Reader, SCHEMA_VERSION};
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
    /// Leave out `refactor` patterns (renames, imports, API migrations),
    /// unless [`Filter::category`] asks for them. Listings for people and
    /// agents set it unless told to show everything.
    pub hide_refactor: bool,
}

impl Filter {
    /// The SQL condition on `patterns p` and its parameters.
    pub(crate) fn condition(&self, params: &mut Vec<Value>) -> String {
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
        if self.hide_refactor && self.category != Some(Category::Refactor) {
            push("p.category <> ?", Value::Text(Category::Refactor.name().into()));
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

    pub(crate) fn limit(&self) -> i64 {
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
    /// Patterns merged into another that makes the same rewrite (not counted in `patterns`).
    pub merged: u64,
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

/// [`Category::rank`] of `p.category` in SQL: a `CASE` over the names of
/// the categories that rank below the optimizations.
fn rank_sql() -> String {
    let arms: String = Category::ALL
        .iter()
        .filter(|c| c.rank() > 0)
        .map(|c| format!(" WHEN '{}' THEN {}", c.name(), c.rank()))
        .collect();
    format!("CASE p.category{arms} ELSE 0 END")
}

pub(crate) const COLUMNS: &str =
    "p.id, p.kind, p.language, p.category, p.title, p.rationale, p.before, p.after, p.score, p.mechanism";

impl Catalog {
    /// Patterns matching `filter`: optimizations first, then `other`, `api`
    /// and `refactor` ([`Category::rank`]); within each, by score (highest
    /// first), then id.
    pub fn list(&self, filter: &Filter) -> Result<Vec<Pattern>> {
        let mut params = Vec::new();
        let cond = filter.condition(&mut params);
        params.push(Value::Integer(filter.limit()));
        let sql = format!(
            "SELECT {COLUMNS} FROM patterns p WHERE {cond} ORDER BY {rank}, p.score DESC, p.id LIMIT ?{}",
            params.len(),
            rank = rank_sql(),
        );
        self.reader().query_patterns(&sql, params)
    }

    /// The pattern with this id.
    pub fn get(&self, id: &str) -> Result<Option<Pattern>> {
        self.reader().get(id)
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
        s.merged = self
            .conn
            .query_row("SELECT count(*) FROM pattern_merges WHERE id <> into_id", [], |r| r.get::<_, i64>(0))
            .at(path)?
            .max(0) as u64;
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
}

impl Reader<'_> {
    /// The pattern with this id.
    pub(crate) fn get(&self, id: &str) -> Result<Option<Pattern>> {
        let sql = format!("SELECT {COLUMNS} FROM patterns p WHERE p.id = ?1");
        Ok(self.query_patterns(&sql, vec![Value::Text(id.to_string())])?.into_iter().next())
    }

    /// The patterns an SQL query selects; its columns are [`COLUMNS`].
    pub(crate) fn query_patterns(&self, sql: &str, params: Vec<Value>) -> Result<Vec<Pattern>> {
        let path = self.path;
        type Row = (String, String, String, String, String, String, String, String, f64, String);
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
                        r.get(9)?,
                    ))
                })?
                .collect()
            })
            .at(path)?;
        rows.into_iter()
            .map(|(id, kind, language, category, title, rationale, before, after, score, mechanism)| {
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
                    mechanism,
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
        let path = self.path;
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
        type ValueRow = (String, i64, Option<String>, String);
        let values: Vec<ValueRow> = self
            .conn
            .prepare_cached(
                "SELECT value, count, resolved, literals FROM pattern_values WHERE pattern_id = ?1 ORDER BY ord",
            )
            .and_then(|mut st| st.query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?.collect())
            .at(path)?;
        p.values = values
            .into_iter()
            .map(|(value, n, resolved, literals)| {
                let literals: Vec<String> = serde_json::from_str(&literals)
                    .map_err(|e| self.corrupt("pattern_values", id, format!("bad literals JSON: {e}")))?;
                Ok(ValueCount { value, count: count(n), resolved, literals })
            })
            .collect::<Result<_>>()?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use crate::model::Kind::{Edit, Usage};
    use crate::store::tests::pattern;
    use kidiom_syntax::Skip;

    fn catalog() -> (Catalog, Vec<Pattern>) {
        use Category::*;
        use Lang::*;
        let usage = vec![
            pattern("py-keyword-tl-dot-input-precision", Usage, Python, Precision, &[("fla", 40), ("sgl", 2)], 9.0),
            pattern("cu-qualifier-launch-bounds", Usage, Cuda, Launch, &[("dg", 12)], 5.0),
            pattern("py-decorator-autotune", Usage, Python, Specialization, &[("sgl", 3)], 5.0),
            pattern("cpp-guard-gil-scoped-release", Usage, Cpp, Concurrency, &[("sgl", 1)], 0.5),
        ];
        let edit = vec![pattern("edit-py-tl-dot-ieee", Edit, Python, Precision, &[("fla", 2)], 7.0)];
        let mut cat = Catalog::open_in_memory().unwrap();
        let tx = cat.begin().unwrap();
        tx.replace_patterns(Usage, &usage).unwrap();
        tx.replace_patterns(Edit, &edit).unwrap();
        tx.commit().unwrap();
        let mut all = usage;
        all.extend(edit);
        (cat, all)
    }

    fn ids(ps: &[Pattern]) -> Vec<&str> {
        ps.iter().map(|p| p.id.as_str()).collect()
    }

    #[test]
    fn patterns_round_trip_with_every_field() {
        let (cat, all) = catalog();
        for p in &all {
            assert_eq!(cat.get(&p.id).unwrap().as_ref(), Some(p));
        }
        assert_eq!(cat.get("nope").unwrap(), None);
        let listed = cat.list(&Filter::default()).unwrap();
        assert_eq!(listed.len(), all.len());
        for p in &listed {
            assert_eq!(all.iter().find(|q| q.id == p.id), Some(p));
        }
        assert!(!cat.get("edit-py-tl-dot-ieee").unwrap().unwrap().commits.is_empty());
    }

    #[test]
    fn list_orders_by_score_then_id() {
        let (cat, _) = catalog();
        assert_eq!(
            ids(&cat.list(&Filter::default()).unwrap()),
            [
                "py-keyword-tl-dot-input-precision",
                "edit-py-tl-dot-ieee",
                "cu-qualifier-launch-bounds",
                "py-decorator-autotune",
                "cpp-guard-gil-scoped-release",
            ]
        );
    }

    #[test]
    fn optimizations_rank_first_and_refactors_hide_on_request() {
        use Category::*;
        let mut cat = Catalog::open_in_memory().unwrap();
        let usage = vec![
            pattern("mask", Usage, Lang::Python, Api, &[("fla", 9)], 8.0),
            pattern("unknown", Usage, Lang::Python, Other, &[("fla", 9)], 7.0),
            pattern("exp2", Usage, Lang::Python, Math, &[("fla", 9)], 1.0),
        ];
        let edit = vec![
            pattern("rename", Edit, Lang::Python, Refactor, &[("fla", 9)], 9.0),
            pattern("ieee", Edit, Lang::Python, Precision, &[("fla", 9)], 2.0),
        ];
        let tx = cat.begin().unwrap();
        tx.replace_patterns(Usage, &usage).unwrap();
        tx.replace_patterns(Edit, &edit).unwrap();
        tx.commit().unwrap();
        // Categories round-trip through the catalog.
        assert_eq!(cat.get("rename").unwrap().map(|p| p.category), Some(Refactor));
        assert_eq!(cat.get("mask").unwrap().map(|p| p.category), Some(Api));
        let all = Filter::default();
        assert_eq!(ids(&cat.list(&all).unwrap()), ["ieee", "exp2", "unknown", "mask", "rename"]);
        let shown = Filter { hide_refactor: true, ..all.clone() };
        assert_eq!(ids(&cat.list(&shown).unwrap()), ["ieee", "exp2", "unknown", "mask"]);
        assert_eq!(ids(&cat.list(&Filter { limit: Some(1), ..shown.clone() }).unwrap()), ["ieee"]);
        // Asking for refactors shows them.
        let asked = Filter { category: Some(Refactor), ..shown.clone() };
        assert_eq!(ids(&cat.list(&asked).unwrap()), ["rename"]);
        // Search filters the same way.
        assert!(ids(&cat.search("rename", &all).unwrap()).contains(&"rename"));
        assert!(!ids(&cat.search("rename", &shown).unwrap()).contains(&"rename"));
    }

    #[test]
    fn filters_narrow() {
        let (cat, _) = catalog();
        let check = |f: Filter, want: &[&str]| {
            assert_eq!(ids(&cat.list(&f).unwrap()), want, "{f:?}");
        };
        let none = Filter::default();
        check(
            Filter { language: Some(Lang::Python), ..none.clone() },
            &["py-keyword-tl-dot-input-precision", "edit-py-tl-dot-ieee", "py-decorator-autotune"],
        );
        check(Filter { language: Some(Lang::Rust), ..none.clone() }, &[]);
        check(
            Filter { category: Some(Category::Precision), ..none.clone() },
            &["py-keyword-tl-dot-input-precision", "edit-py-tl-dot-ieee"],
        );
        check(Filter { kind: Some(Edit), ..none.clone() }, &["edit-py-tl-dot-ieee"]);
        check(
            Filter { kind: Some(Usage), limit: Some(2), ..none.clone() },
            &["py-keyword-tl-dot-input-precision", "cu-qualifier-launch-bounds"],
        );
        // min_support counts occurrences over all corpora: 42, 12, 3, 1, 2.
        check(
            Filter { min_support: Some(3), ..none.clone() },
            &["py-keyword-tl-dot-input-precision", "cu-qualifier-launch-bounds", "py-decorator-autotune"],
        );
        check(Filter { min_support: Some(42), ..none.clone() }, &["py-keyword-tl-dot-input-precision"]);
        check(Filter { min_support: Some(43), ..none.clone() }, &[]);
        check(
            Filter { corpus: Some("sgl".into()), ..none.clone() },
            &["py-keyword-tl-dot-input-precision", "py-decorator-autotune", "cpp-guard-gil-scoped-release"],
        );
        check(
            Filter { corpus: Some("fla".into()), kind: Some(Usage), ..none.clone() },
            &["py-keyword-tl-dot-input-precision"],
        );
        check(Filter { limit: Some(0), ..none.clone() }, &[]);
        // The corpus filter keeps the pattern's other support.
        let p = cat.list(&Filter { corpus: Some("sgl".into()), ..none }).unwrap();
        assert_eq!(p[0].support.len(), 2);
    }

    #[test]
    fn search_finds_titles_snippets_and_ids() {
        let (cat, _) = catalog();
        let s = |q: &str, f: &Filter| ids(&cat.search(q, f).unwrap()).join(" ");
        let top =
            |q: &str| cat.search(q, &Filter::default()).unwrap().first().map(|p| p.id.clone()).unwrap_or_default();
        let all = Filter::default();
        // Any word may match; the id matches exactly and comes first.
        assert_eq!(top("title cu-qualifier-launch-bounds"), "cu-qualifier-launch-bounds");
        assert_eq!(cat.search("title cu-qualifier-launch-bounds", &all).unwrap().len(), 5);
        assert_eq!(s("launch bounds", &all), "cu-qualifier-launch-bounds");
        // prefix match of the last word
        assert_eq!(s("autotu", &all), "py-decorator-autotune");
        // snippet text: every example snippet holds `tl.dot(q, k)  # <id>`
        assert_eq!(cat.search("tl.dot(q, k)", &all).unwrap().len(), 5);
        assert_eq!(s("gil-scoped", &all), "cpp-guard-gil-scoped-release");
        // rationale
        assert_eq!(top("rationale of py-decorator"), "py-decorator-autotune");
        // filters apply
        assert_eq!(s("tl.dot", &Filter { kind: Some(Edit), ..all.clone() }), "edit-py-tl-dot-ieee");
        assert_eq!(cat.search("tl.dot", &Filter { limit: Some(2), ..all.clone() }).unwrap().len(), 2);
        // text that is only in one example's snippet
        let mut p = pattern("snip", Usage, Lang::Cuda, Category::Memory, &[], 0.0);
        p.examples[0].snippet = "auto v = *reinterpret_cast<const float4*>(kvcache_xfer + i);".into();
        let mut cat2 = Catalog::open_in_memory().unwrap();
        let tx = cat2.begin().unwrap();
        tx.replace_patterns(Usage, &[p]).unwrap();
        tx.commit().unwrap();
        assert_eq!(ids(&cat2.search("kvcache_xfer", &all).unwrap()), ["snip"]);
        assert_eq!(ids(&cat2.search("float4*>(", &all).unwrap()), ["snip"]);
        // no match
        assert_eq!(s("nonexistentword", &all), "");
    }

    #[test]
    fn search_ranks_title_matches_first() {
        let mut cat = Catalog::open_in_memory().unwrap();
        let mut a = pattern("a", Usage, Lang::Python, Category::Other, &[], 100.0);
        a.rationale = "mentions eviction once".into();
        let mut b = pattern("b", Usage, Lang::Python, Category::Other, &[], 1.0);
        b.title = "eviction_policy on tl.load".into();
        let tx = cat.begin().unwrap();
        tx.replace_patterns(Usage, &[a, b]).unwrap();
        tx.commit().unwrap();
        assert_eq!(ids(&cat.search("eviction", &Filter::default()).unwrap()), ["b", "a"]);
    }

    #[test]
    fn search_text_is_never_fts_syntax() {
        let (cat, _) = catalog();
        let all = Filter::default();
        for q in [
            "tl.dot(",
            "\"ieee\"",
            "input_precision=",
            "a AND OR",
            "NOT",
            "NEAR(a b)",
            "col:umn",
            "title:x",
            "*",
            "^start",
            "\"",
            "\"\"\"",
            "(((",
            "a OR",
            "-x",
            "'",
            "{a b}",
            "",
            "   ",
            "= ( ) .",
            "tl.dot(a, b, input_precision=\"ieee\")",
            "ünïcödé ☃",
        ] {
            if let Err(e) = cat.search(q, &all) {
                panic!("search {q:?}: {e}");
            }
        }
        // Quotes and operators are plain words: every fixture pattern has the
        // value "ieee" and input_precision in its `after`.
        assert_eq!(cat.search("\"ieee\"", &all).unwrap().len(), 5);
        assert_eq!(cat.search("input_precision=", &all).unwrap().len(), 5);
        assert_eq!(cat.search("tl.dot(", &all).unwrap().len(), 5);
        assert!(cat.search("a AND OR", &all).unwrap().is_empty());
        assert!(cat.search("= ( ) .", &all).unwrap().is_empty());
    }

    #[test]
    fn replace_patterns_replaces_only_its_kind() {
        let (mut cat, _) = catalog();
        let newer = pattern("py-new", Usage, Lang::Python, Category::Math, &[("fla", 4)], 3.0);
        let tx = cat.begin().unwrap();
        tx.replace_patterns(Usage, std::slice::from_ref(&newer)).unwrap();
        tx.commit().unwrap();
        assert_eq!(ids(&cat.list(&Filter::default()).unwrap()), ["edit-py-tl-dot-ieee", "py-new"]);
        // old rows and their search entries are gone
        assert!(cat.search("launch bounds", &Filter::default()).unwrap().is_empty());
        for table in ["support", "pattern_values", "examples", "commits"] {
            let n: i64 = cat
                .conn
                .query_row(
                    &format!("SELECT count(*) FROM {table} WHERE pattern_id NOT IN (SELECT id FROM patterns)"),
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(n, 0, "orphans in {table}");
        }
        let fts: i64 = cat.conn.query_row("SELECT count(*) FROM patterns_search", [], |r| r.get(0)).unwrap();
        assert_eq!(fts, 2);
        // replacing with the same set again is idempotent
        let tx = cat.begin().unwrap();
        tx.replace_patterns(Usage, std::slice::from_ref(&newer)).unwrap();
        tx.commit().unwrap();
        assert_eq!(cat.get("py-new").unwrap(), Some(newer));
    }

    #[test]
    fn invalid_patterns_are_refused() {
        let (mut cat, _) = catalog();
        let tx = cat.begin().unwrap();
        let p = |id: &str, kind| pattern(id, kind, Lang::Python, Category::Other, &[], 1.0);
        let check = |kind, ps: &[Pattern], want: &str| {
            let err = tx.replace_patterns(kind, ps).unwrap_err();
            assert!(matches!(err, Error::InvalidPattern { .. }), "{err:?}");
            assert!(err.to_string().contains(want), "{err}");
        };
        check(Usage, &[p("x", Edit)], "kind edit given to replace the usage patterns");
        check(Usage, &[p("x", Usage), p("x", Usage)], "duplicate id");
        check(Usage, &[Pattern { score: f64::NAN, ..p("x", Usage) }], "NaN");
        check(Usage, &[p("edit-py-tl-dot-ieee", Usage)], "taken by a pattern of kind edit");
        drop(tx);
        assert_eq!(cat.list(&Filter::default()).unwrap().len(), 5);
    }

    #[test]
    fn stats_count_everything() {
        let (mut cat, _) = catalog();
        let tx = cat.begin().unwrap();
        tx.put_corpus("fla", "git", "u", "r").unwrap();
        let facts = crate::store::tests::facts(1);
        use crate::FileOutcome::*;
        tx.put_file("fla", "a.py", Lang::Python, "1", None, "f", &Parsed(facts)).unwrap();
        tx.put_file("fla", "b.py", Lang::Python, "2", None, "f", &NoKernels).unwrap();
        tx.put_file("fla", "c.py", Lang::Python, "3", None, "f", &NoKernels).unwrap();
        tx.put_file("fla", "d.cu", Lang::Cuda, "4", None, "f", &Skipped(Skip::Binary)).unwrap();
        tx.put_file("fla", "e.cu", Lang::Cuda, "5", None, "f", &Skipped(Skip::TooDeep(300))).unwrap();
        tx.put_file("fla", "f.cu", Lang::Cuda, "6", None, "f", &Skipped(Skip::TooDeep(301))).unwrap();
        tx.commit().unwrap();
        let s = cat.stats().unwrap();
        assert_eq!(s.schema_version, crate::SCHEMA_VERSION);
        assert_eq!(s.patterns, 5);
        let map = |kv: &[(&str, u64)]| kv.iter().map(|(k, v)| (k.to_string(), *v)).collect::<BTreeMap<_, _>>();
        assert_eq!(s.by_kind, map(&[("usage", 4), ("edit", 1)]));
        assert_eq!(s.by_language, map(&[("python", 3), ("cuda", 1), ("cpp", 1)]));
        assert_eq!(s.by_category["precision"], 2);
        assert_eq!((s.files, s.parsed, s.no_kernels, s.skipped), (6, 1, 2, 3));
        assert_eq!(s.skipped_by_reason, map(&[("binary", 1), ("too-deep", 2)]));
        assert_eq!(s.corpora.len(), 1);
        assert_eq!((s.corpora[0].files, s.corpora[0].skipped), (6, 3));

        let empty = Catalog::open_in_memory().unwrap().stats().unwrap();
        assert_eq!((empty.patterns, empty.files), (0, 0));
    }
}
