//! Ranked search over the catalog: one engine behind `kidiom catalog search`
//! and the MCP tool `search_patterns`.
//!
//! A query is read as an engineer writes it, never as FTS5 syntax:
//!
//! - `"quoted words"` are phrases;
//! - names (`tl.dot`, `__launch_bounds__`, `py::gil_scoped_release`,
//!   `exp2`, `cu-qualifier-...`: anything with `_ . : -` inside, or letters
//!   and digits together) must match exactly, as adjacent tokens; their
//!   parts also count, a little;
//! - other words are stemmed by the index's tokenizer (porter), and English
//!   stop words are dropped;
//! - the glossary's synonyms of any of them are added with less weight;
//! - the last plain word also matches as a prefix (typing `autotu`).
//!
//! Any term may match (OR). Rows are ranked by BM25 with per-field weights
//! (title, mechanism and identifiers weigh most), each term counted by its
//! weight (an exact name thrice, a word twice, a synonym once), then by
//! score and id. Each hit says which terms matched in which fields.

use std::collections::{BTreeMap, HashMap};

use rusqlite::types::Value;
use serde::Serialize;

use super::query::COLUMNS;
use super::{At, Catalog, Filter, Reader};
use crate::error::Result;
use crate::glossary::{self, Glossary};
use crate::model::Pattern;

/// The index's columns, the field names hits report, and their BM25 weights.
const FIELDS: [(&str, &str, f64); 7] = [
    ("title", "title", 4.0),
    ("mechanism", "mechanism", 3.0),
    ("identifiers", "identifiers", 3.0),
    ("hole_values", "values", 1.5),
    ("commit_messages", "commits", 2.0),
    ("examples", "examples", 1.0),
    ("rationale", "rationale", 0.5),
];

/// The index's tokenizer: Porter stemming over Unicode word characters.
/// The migration that creates `patterns_search` spells out the same.
const TOKENIZER: &str = "porter unicode61 remove_diacritics 2";

/// At most this many distinct terms are searched for; the rest of a very
/// long query is ignored.
const MAX_TERMS: usize = 48;

const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be", "been", "before",
    "being", "both", "but", "by", "can", "could", "did", "do", "does", "doing", "done", "during", "each", "every",
    "for", "from", "get", "gets", "had", "has", "have", "having", "here", "how", "i", "if", "in", "instead", "into",
    "is", "it", "its", "just", "let", "lets", "make", "makes", "may", "me", "might", "more", "most", "must", "my",
    "need", "needs", "no", "nor", "not", "of", "off", "on", "once", "only", "onto", "or", "other", "our", "out",
    "over", "per", "same", "shall", "should", "so", "some", "such", "than", "that", "the", "their", "them", "then",
    "there", "these", "they", "this", "those", "through", "to", "too", "under", "up", "us", "use", "used", "uses",
    "using", "very", "via", "want", "was", "way", "we", "were", "what", "when", "where", "which", "while", "who",
    "whom", "why", "will", "with", "without", "would", "you", "your",
];

/// How a term came from the query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Via {
    /// A name (`tl.dot`, `exp2`), matched exactly.
    Identifier,
    /// Quoted words, matched as adjacent tokens.
    Phrase,
    /// A word, stemmed.
    Word,
    /// A word inside a name of the query (`scoped` of `gil_scoped_release`).
    Part,
    /// The last word as a prefix.
    Prefix,
    /// A synonym from the glossary of a term of the query.
    Synonym,
}

impl Via {
    /// How many times the term counts in the ranking.
    fn weight(self) -> u32 {
        match self {
            Via::Identifier | Via::Phrase => 3,
            Via::Word => 2,
            Via::Part | Via::Prefix | Via::Synonym => 1,
        }
    }
}

/// A term of the query that a hit matched, and where.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TermMatch {
    /// The term as searched for.
    pub term: String,
    /// How it came from the query.
    pub via: Via,
    /// For a synonym, the query's word it stands for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub synonym_of: Option<String>,
    /// The fields it occurs in: `title`, `mechanism`, `identifiers`,
    /// `values`, `commits`, `examples`, `rationale`.
    pub fields: Vec<&'static str>,
}

/// One search result: the pattern, how relevant, and why it matched.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchHit {
    /// The pattern.
    #[serde(flatten)]
    pub pattern: Pattern,
    /// Why it matched: its relevance and its matched terms.
    #[serde(rename = "match")]
    pub why: Why,
}

/// Why a pattern matched a query.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Why {
    /// BM25 relevance (higher is better; comparable within one query only).
    pub relevance: f64,
    /// The terms it matched, strongest first.
    pub terms: Vec<TermMatch>,
}

/// One term of a parsed query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Term {
    /// As shown to the user.
    pub(crate) text: String,
    /// As given to FTS5: a quoted phrase, maybe a prefix.
    pub(crate) fts: String,
    pub(crate) via: Via,
    pub(crate) synonym_of: Option<String>,
}

fn phrase(words: &str) -> String {
    format!("\"{}\"", words.replace('"', "\"\""))
}

fn has_alnum(s: &str) -> bool {
    s.chars().any(char::is_alphanumeric)
}

/// A name rather than a word: `_ . : -` inside, or letters with digits.
fn is_name(token: &str) -> bool {
    token.contains(['_', '.', ':', '-'])
        || (token.chars().any(char::is_alphabetic) && token.chars().any(|c| c.is_ascii_digit()))
}

/// Splits unquoted text into tokens: runs of letters, digits and `_ . : -`,
/// trimmed of `. : -` at their ends (`tl.dot(q,` -> `tl.dot`, `q`).
fn tokens(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')))
        .map(|t| t.trim_matches(['.', ':', '-']))
        .filter(|t| has_alnum(t))
}

/// Reads a query (see the module documentation); the terms are distinct,
/// in the order they were found.
pub(crate) fn parse(text: &str, glossary: &Glossary) -> Vec<Term> {
    let mut terms: Vec<Term> = Vec::new();
    let push = |terms: &mut Vec<Term>, t: Term| match terms.iter_mut().find(|x| x.fts == t.fts) {
        Some(x) if x.via.weight() < t.via.weight() => *x = t,
        Some(_) => {}
        None => terms.push(t),
    };
    // The query's words in order (names whole), for synonym lookup.
    let mut words: Vec<String> = Vec::new();
    let mut last_word: Option<String> = None;
    // Between quotes (odd pieces) is a phrase, unless the quote is never closed.
    let pieces: Vec<&str> = text.split('"').collect();
    let closed = pieces.len() % 2 == 1;
    for (i, piece) in pieces.iter().enumerate() {
        let quoted = i % 2 == 1 && (closed || i + 1 < pieces.len());
        let toks: Vec<&str> = tokens(piece).collect();
        if quoted && toks.len() > 1 {
            let joined = toks.join(" ");
            push(&mut terms, Term { fts: phrase(&joined), text: joined.clone(), via: Via::Phrase, synonym_of: None });
            words.extend(toks.iter().map(|t| t.to_lowercase()));
            last_word = None;
            continue;
        }
        for tok in toks {
            let lower = tok.to_lowercase();
            if is_name(tok) {
                push(
                    &mut terms,
                    Term { fts: phrase(tok), text: tok.to_string(), via: Via::Identifier, synonym_of: None },
                );
                let parts: Vec<&str> = tok.split(|c: char| !c.is_alphanumeric()).filter(|p| !p.is_empty()).collect();
                if parts.len() > 1 {
                    for part in parts {
                        let p = part.to_lowercase();
                        if p.chars().count() > 1 && !STOP_WORDS.contains(&p.as_str()) {
                            push(&mut terms, Term { fts: phrase(&p), text: p, via: Via::Part, synonym_of: None });
                        }
                    }
                }
                words.push(lower);
                last_word = None;
            } else if !STOP_WORDS.contains(&lower.as_str()) {
                push(&mut terms, Term { fts: phrase(&lower), text: lower.clone(), via: Via::Word, synonym_of: None });
                words.push(lower.clone());
                last_word = Some(lower);
            }
        }
    }
    if let Some(w) = last_word.filter(|w| w.chars().count() >= 3) {
        push(
            &mut terms,
            Term { fts: format!("{}*", phrase(&w)), text: format!("{w}*"), via: Via::Prefix, synonym_of: None },
        );
    }
    for (found, others) in glossary.synonyms(&words) {
        for other in others {
            let toks: Vec<&str> = tokens(&other).collect();
            if toks.is_empty() {
                continue;
            }
            let joined = toks.join(" ");
            push(
                &mut terms,
                Term { fts: phrase(&joined), text: joined, via: Via::Synonym, synonym_of: Some(found.clone()) },
            );
        }
    }
    terms.truncate(MAX_TERMS);
    terms
}

/// The FTS5 expressions of a query, one per weight, highest first: the
/// terms of that weight ORed.
fn expressions(terms: &[Term]) -> Vec<(u32, String)> {
    [3, 2, 1]
        .into_iter()
        .filter_map(|w| {
            let class: Vec<&str> = terms.iter().filter(|t| t.via.weight() == w).map(|t| t.fts.as_str()).collect();
            (!class.is_empty()).then(|| (w, class.join(" OR ")))
        })
        .collect()
}

fn bm25(weights: impl Iterator<Item = f64>) -> String {
    let w: Vec<String> = weights.map(|w| format!("{w:.1}")).collect();
    format!("bm25(patterns_search, {})", w.join(", "))
}

impl Catalog {
    /// Ranked search (see the module documentation of `search.rs`):
    /// patterns within `filter` that match any term of `query`, best
    /// first, each with why it matched. A query with no searchable word
    /// (empty, only stop words or punctuation) finds nothing. Any text is
    /// safe: FTS5 operators and punctuation in it are taken literally.
    pub fn search_hits(&self, query: &str, filter: &Filter) -> Result<Vec<SearchHit>> {
        let terms = parse(query, glossary::builtin());
        let path = &self.path;
        // One query per weight: BM25 sums over an expression's phrases, so the
        // weighted sum of the classes' scores is the query's weighted BM25.
        // (Repeating a phrase in one expression would weigh it too, at the
        // cost of evaluating it again on every matching row.)
        let mut scores: HashMap<i64, (f64, f64, String)> = HashMap::new();
        for (weight, expr) in expressions(&terms) {
            let mut params = vec![Value::Text(expr)];
            let cond = filter.condition(&mut params);
            let sql = format!(
                "SELECT p.rowid, {rank}, p.score, p.id FROM patterns_search
                 JOIN patterns p ON p.rowid = patterns_search.rowid
                 WHERE patterns_search MATCH ?1 AND {cond}",
                rank = bm25(FIELDS.iter().map(|f| f.2)),
            );
            let mut st = self.conn.prepare_cached(&sql).at(path)?;
            let mut rows = st.query(rusqlite::params_from_iter(params)).at(path)?;
            while let Some(r) = rows.next().at(path)? {
                let rowid: i64 = r.get(0).at(path)?;
                let rank: f64 = r.get(1).at(path)?;
                let e = match scores.get_mut(&rowid) {
                    Some(e) => e,
                    None => scores.entry(rowid).or_insert((0.0, r.get(2).at(path)?, r.get(3).at(path)?)),
                };
                e.0 -= f64::from(weight) * rank;
            }
        }
        let mut ranked: Vec<(i64, (f64, f64, String))> = scores.into_iter().collect();
        ranked.sort_by(|a, b| {
            b.1.0.total_cmp(&a.1.0).then_with(|| b.1.1.total_cmp(&a.1.1)).then_with(|| a.1.2.cmp(&b.1.2))
        });
        ranked.truncate(filter.limit.unwrap_or(usize::MAX));
        let ranked: Vec<(i64, f64)> = ranked.into_iter().map(|(rowid, (rel, _, _))| (rowid, rel)).collect();
        if ranked.is_empty() {
            return Ok(Vec::new());
        }
        let mut why = self.explain(&terms, ranked.iter().map(|r| r.0))?;
        let one = format!("SELECT {COLUMNS} FROM patterns p WHERE p.rowid = ?1");
        let mut hits = Vec::with_capacity(ranked.len());
        for (rowid, rank) in ranked {
            let Some(pattern) = self.reader().query_patterns(&one, vec![Value::Integer(rowid)])?.into_iter().next()
            else {
                continue;
            };
            let relevance = (rank * 1000.0).round() / 1000.0 + 0.0;
            hits.push(SearchHit { pattern, why: Why { relevance, terms: why.remove(&rowid).unwrap_or_default() } });
        }
        Ok(hits)
    }

    /// Patterns matching `query`, best first: [`Catalog::search_hits`]
    /// without the reasons.
    pub fn search(&self, query: &str, filter: &Filter) -> Result<Vec<Pattern>> {
        Ok(self.search_hits(query, filter)?.into_iter().map(|h| h.pattern).collect())
    }

    /// For each row, the terms it matches and in which fields. The rows'
    /// index entries are copied into a small index of the same kind (a
    /// `temp` table of this connection), and each term is searched there with
    /// one BM25 per field (the other fields weighted 0), which is non-zero
    /// exactly where the term occurs. Searching the full index per term and
    /// row would cost as much as the search itself, per term.
    fn explain(&self, terms: &[Term], rowids: impl Iterator<Item = i64>) -> Result<HashMap<i64, Vec<TermMatch>>> {
        let path = &self.path;
        let ids: Vec<String> = rowids.map(|r| r.to_string()).collect();
        let columns: Vec<&str> = FIELDS.iter().map(|f| f.0).collect();
        let columns = columns.join(", ");
        self.conn
            .execute_batch(&format!(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.search_explain USING fts5 ({columns}, tokenize = '{TOKENIZER}');
                 DELETE FROM temp.search_explain;
                 INSERT INTO temp.search_explain (rowid, {columns})
                     SELECT rowid, {columns} FROM main.patterns_search WHERE rowid IN ({});",
                ids.join(", ")
            ))
            .at(path)?;
        let per_field: Vec<String> = (0..FIELDS.len())
            .map(|i| {
                let w: Vec<&str> = (0..FIELDS.len()).map(|j| if i == j { "1" } else { "0" }).collect();
                format!("bm25(search_explain, {})", w.join(", "))
            })
            .collect();
        let sql =
            format!("SELECT rowid, {} FROM temp.search_explain WHERE search_explain MATCH ?1", per_field.join(", "));
        let mut st = self.conn.prepare_cached(&sql).at(path)?;
        let mut out: HashMap<i64, Vec<(usize, TermMatch)>> = HashMap::new();
        for (order, t) in terms.iter().enumerate() {
            let rows: Vec<(i64, Vec<&'static str>)> = st
                .query_map([&t.fts], |r| {
                    let mut fields = Vec::new();
                    for (i, f) in FIELDS.iter().enumerate() {
                        if r.get::<_, f64>(i + 1)? < 0.0 {
                            fields.push(f.1);
                        }
                    }
                    Ok((r.get(0)?, fields))
                })
                .and_then(|rows| rows.collect())
                .at(path)?;
            for (rowid, fields) in rows {
                let m = TermMatch { term: t.text.clone(), via: t.via, synonym_of: t.synonym_of.clone(), fields };
                out.entry(rowid).or_default().push((order, m));
            }
        }
        Ok(out
            .into_iter()
            .map(|(rowid, mut ms)| {
                // A prefix that only repeats its whole word says nothing more.
                let words: Vec<(String, Vec<&str>)> = ms
                    .iter()
                    .filter(|(_, m)| m.via == Via::Word)
                    .map(|(_, m)| (format!("{}*", m.term), m.fields.clone()))
                    .collect();
                ms.retain(|(_, m)| m.via != Via::Prefix || !words.iter().any(|(w, f)| *w == m.term && *f == m.fields));
                ms.sort_by_key(|(order, m)| (std::cmp::Reverse(m.via.weight()), *order));
                (rowid, ms.into_iter().map(|(_, m)| m).collect())
            })
            .collect())
    }
}

/// The index row of a pattern, by column of [`FIELDS`].
fn row(p: &Pattern) -> [String; 7] {
    let mut names: Vec<&str> = vec![p.id.as_str()];
    for text in [&p.before, &p.after] {
        for n in glossary::identifiers(text) {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    let lines = |it: &mut dyn Iterator<Item = &str>| it.collect::<Vec<_>>().join("\n");
    // Values, then the literals their names resolve to (each once).
    let mut hole_values: Vec<&str> = Vec::new();
    for v in
        p.values.iter().flat_map(|v| std::iter::once(v.value.as_str()).chain(v.literals.iter().map(String::as_str)))
    {
        if !hole_values.contains(&v) {
            hole_values.push(v);
        }
    }
    [
        p.title.clone(),
        p.mechanism.clone(),
        names.join(" "),
        hole_values.join("\n"),
        lines(&mut p.commits.iter().map(|c| c.summary.as_str())),
        lines(&mut p.examples.iter().map(|e| e.snippet.as_str())),
        p.rationale.clone(),
    ]
}

/// Writes the index row of `p`, stored at `rowid` of `patterns`.
pub(crate) fn index(conn: &rusqlite::Connection, path: &std::path::Path, rowid: i64, p: &Pattern) -> Result<()> {
    let [a, b, c, d, e, f, g] = row(p);
    conn.prepare_cached(
        "INSERT INTO patterns_search
         (rowid, title, mechanism, identifiers, hole_values, commit_messages, examples, rationale)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )
    .and_then(|mut st| st.execute(rusqlite::params![rowid, a, b, c, d, e, f, g]))
    .at(path)?;
    Ok(())
}

/// Fills the mechanism of every pattern that has none (from the built-in
/// glossary) and rewrites the whole index; run by the migration that
/// creates the index, inside its transaction.
pub(crate) fn rebuild(r: &Reader<'_>) -> Result<()> {
    let (conn, path) = (r.conn, r.path);
    conn.execute("DELETE FROM patterns_search", []).at(path)?;
    let rowids: Vec<(i64, String)> = conn
        .prepare("SELECT rowid, id FROM patterns ORDER BY rowid")
        .and_then(|mut st| st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
        .at(path)?;
    let one = format!("SELECT {COLUMNS} FROM patterns p WHERE p.rowid = ?1");
    let mut described: BTreeMap<String, String> = BTreeMap::new();
    for (rowid, _) in &rowids {
        let Some(mut p) = r.query_patterns(&one, vec![Value::Integer(*rowid)])?.into_iter().next() else { continue };
        if p.mechanism.is_empty() {
            p.mechanism = glossary::builtin().describe(&p);
            described.insert(p.id.clone(), p.mechanism.clone());
        }
        index(conn, path, *rowid, &p)?;
    }
    let mut set = conn.prepare("UPDATE patterns SET mechanism = ?2 WHERE id = ?1").at(path)?;
    for (id, text) in described {
        set.execute([id, text]).at(path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(q: &str) -> Vec<String> {
        parse(q, glossary::builtin())
            .iter()
            .map(|t| match &t.synonym_of {
                Some(of) => format!("{:?}:{}<{of}", t.via, t.fts),
                None => format!("{:?}:{}", t.via, t.fts),
            })
            .collect()
    }

    #[test]
    fn queries_become_weighted_terms() {
        let q = show("release the GIL during a copy");
        assert_eq!(&q[..4], ["Word:\"release\"", "Word:\"gil\"", "Word:\"copy\"", "Prefix:\"copy\"*"]);
        assert!(q.contains(&"Synonym:\"thread\"<gil".to_string()), "{q:?}");
        assert!(!q.iter().any(|t| t.contains("\"the\"") || t.contains("\"during\"")), "{q:?}");

        let q = show("tl.dot(a, b, input_precision=\"ieee\") __launch_bounds__");
        for want in [
            "Identifier:\"tl.dot\"",
            "Part:\"tl\"",
            "Part:\"dot\"",
            "Word:\"b\"",
            "Identifier:\"input_precision\"",
            "Part:\"input\"",
            "Word:\"ieee\"",
            "Identifier:\"__launch_bounds__\"",
            "Part:\"launch\"",
        ] {
            assert!(q.contains(&want.to_string()), "{want} not in {q:?}");
        }
        // `a` is a stop word; the last token is a name, so no prefix.
        assert!(!q.iter().any(|t| t.starts_with("Prefix") || t == "Word:\"a\""), "{q:?}");

        // Quoted words are a phrase; an unclosed quote is not.
        let q = show("\"tensor core\" tf32");
        assert_eq!(&q[..2], ["Phrase:\"tensor core\"", "Identifier:\"tf32\""]);
        assert!(show("\"unclosed words").contains(&"Word:\"unclosed\"".to_string()));

        // A term found twice keeps its strongest form.
        let q = show("exp2 exponential exp2");
        assert_eq!(q.iter().filter(|t| t.contains("\"exp2\"")).count(), 1);
        assert!(q.contains(&"Identifier:\"exp2\"".to_string()), "{q:?}");
        assert!(q.contains(&"Synonym:\"exp\"<exponential".to_string()), "{q:?}");
    }

    #[test]
    fn nothing_searchable_is_no_query() {
        for q in ["", "   ", "= ( ) .", "the of a", "a AND OR", "\"\"", "☃"] {
            assert_eq!(expressions(&parse(q, glossary::builtin())), [], "{q:?}");
        }
    }

    use crate::model::{CommitRef, IdiomExample, Kind, Lang};

    /// Mined-looking patterns: ids, titles and templates as the miner makes
    /// them, mechanism from the glossary.
    fn mined() -> Vec<Pattern> {
        let mk = |id: &str, lang: Lang, title: &str, before: &str, after: &str, snippet: &str| {
            let mut p = Pattern::usage(id, lang, before, after, &[]);
            p.title = title.into();
            p.rationale = "4 occurrences in 2 files across 1 corpus; 2 sites lack it (67% adoption).".into();
            p.examples =
                vec![IdiomExample { corpus: "up".into(), path: "k.py".into(), line: 3, snippet: snippet.into() }];
            p.mechanism = glossary::builtin().describe(&p);
            p
        };
        vec![
            mk(
                "py-variant-exp-exp2",
                Lang::Python,
                "`exp2` over `exp`",
                "tl.exp($X)",
                "tl.exp2($X * 1.44)",
                "p = tl.exp2(s)",
            ),
            mk(
                "py-keyword-tl-load-other",
                Lang::Python,
                "`other=` on `tl.load`",
                "tl.load($$$ARGS)",
                "tl.load($$$ARGS, other=$V)",
                "x = tl.load(p, other=0.0)",
            ),
            mk(
                "py-keyword-tl-dot-input-precision",
                Lang::Python,
                "`input_precision=` on `tl.dot`",
                "tl.dot($$$ARGS)",
                "tl.dot($$$ARGS, input_precision=$V)",
                "tl.dot(a, b, input_precision=\"ieee\")",
            ),
            mk(
                "cpp-guard-binding-fn-py-gil-scoped-release",
                Lang::Cpp,
                "`py::gil_scoped_release` guard in binding functions",
                "$R $F($$$PARAMS) { $$$BODY }",
                "$R $F($$$PARAMS) { py::gil_scoped_release release; $$$BODY }",
                "py::gil_scoped_release release;",
            ),
            mk(
                "py-keyword-tl-zeros-dtype",
                Lang::Python,
                "`dtype=` on `tl.zeros`",
                "tl.zeros($$$ARGS)",
                "tl.zeros($$$ARGS, dtype=$V)",
                "tl.zeros([B], dtype=tl.float32)",
            ),
        ]
    }

    fn store(ps: &[Pattern]) -> Catalog {
        let mut cat = Catalog::open_in_memory().unwrap();
        let tx = cat.begin().unwrap();
        tx.replace_patterns(Kind::Usage, ps).unwrap();
        tx.commit().unwrap();
        cat
    }

    #[test]
    fn questions_find_idioms_by_what_they_do() {
        let cat = store(&mined());
        let top =
            |q: &str| cat.search(q, &Filter::default()).unwrap().first().map(|p| p.id.clone()).unwrap_or_default();
        assert_eq!(top("faster exponential"), "py-variant-exp-exp2");
        assert_eq!(top("release the GIL during a copy"), "cpp-guard-binding-fn-py-gil-scoped-release");
        assert_eq!(top("tf32 precision"), "py-keyword-tl-dot-input-precision");
        assert_eq!(top("tensor cores"), "py-keyword-tl-dot-input-precision");
        // stemming: "copies" and "threads" meet "copy" and "thread"
        assert_eq!(top("copies while other threads run"), "cpp-guard-binding-fn-py-gil-scoped-release");
        // names match exactly
        assert_eq!(top("gil_scoped_release"), "cpp-guard-binding-fn-py-gil-scoped-release");
        assert_eq!(top("exp2"), "py-variant-exp-exp2");
    }

    #[test]
    fn hits_say_which_terms_matched_where() {
        let cat = store(&mined());
        let hits = cat.search_hits("faster exponential", &Filter::default()).unwrap();
        let h = &hits[0];
        assert_eq!(h.pattern.id, "py-variant-exp-exp2");
        assert!(h.why.relevance > 0.0);
        let term =
            |t: &str| h.why.terms.iter().find(|m| m.term == t).unwrap_or_else(|| panic!("{t}: {:?}", h.why.terms));
        assert_eq!(term("exponential").via, Via::Word);
        assert_eq!(term("exponential").fields, ["mechanism"]);
        assert_eq!(term("faster").fields, ["mechanism"]);
        let exp2 = term("exp2");
        assert_eq!((exp2.via, exp2.synonym_of.as_deref()), (Via::Synonym, Some("exponential")));
        assert_eq!(exp2.fields, ["title", "mechanism", "identifiers", "examples"]);
        // Words first, synonyms after.
        assert_eq!(h.why.terms[0].via, Via::Word);
        assert!(h.why.terms.iter().all(|m| !m.fields.is_empty()));
        // Ranked by relevance.
        assert!(hits.windows(2).all(|w| w[0].why.relevance >= w[1].why.relevance));
        let json = serde_json::to_value(h).unwrap();
        assert_eq!(json["id"], "py-variant-exp-exp2");
        assert!(json["mechanism"].as_str().unwrap().contains("ex2.approx"));
        assert_eq!(json["match"]["terms"][0]["via"], "word");
        assert!(json["match"]["terms"][0].get("synonym_of").is_none());
    }

    #[test]
    fn commit_messages_are_searched() {
        let mut p = Pattern::usage("edit-py-a", Lang::Python, "tl.exp($X)", "tl.exp2($X * C)", &[]);
        p.kind = Kind::Edit;
        p.commits = vec![CommitRef {
            id: "c1".into(),
            summary: "Speed up softmax in flash decoding".into(),
            date: String::new(),
        }];
        p.mechanism = glossary::builtin().describe(&p);
        let mut cat = Catalog::open_in_memory().unwrap();
        let tx = cat.begin().unwrap();
        tx.replace_patterns(Kind::Edit, &[p]).unwrap();
        tx.commit().unwrap();
        let hits = cat.search_hits("flash decoding", &Filter::default()).unwrap();
        assert_eq!(hits.len(), 1);
        assert!(hits[0].why.terms[0].fields.contains(&"commits"), "{:?}", hits[0].why.terms);
    }

    /// A catalog of schema version 3 (before the search index) with one
    /// usage and one edit pattern.
    fn version_3(path: &std::path::Path) {
        let conn = rusqlite::Connection::open(path).unwrap();
        for step in &crate::store::schema::MIGRATIONS[..3] {
            conn.execute_batch(step).unwrap();
        }
        conn.pragma_update(None, "application_id", crate::store::schema::APPLICATION_ID).unwrap();
        conn.pragma_update(None, "user_version", 3).unwrap();
        conn.execute_batch(
            "INSERT INTO patterns VALUES ('py-variant-exp-exp2', 'usage', 'python', 'math', '`exp2` over `exp`', 'r',
                 'tl.exp($X)', 'tl.exp2($X * 1.4426950408889634)', 2.0);
             INSERT INTO patterns VALUES ('py-edit-x', 'edit', 'python', 'other', '`a` -> `b`', 'r', 'a', 'b', 1.0);
             INSERT INTO commits VALUES ('py-edit-x', 0, 'c0ffee', 'Widen offsets to avoid overflow', '');
             INSERT INTO patterns_fts (rowid, id, title) SELECT rowid, id, title FROM patterns;",
        )
        .unwrap();
    }

    #[test]
    fn an_older_catalog_migrates_in_place_and_is_reindexed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.sqlite");
        version_3(&path);
        let cat = Catalog::open(&path).unwrap();
        let v: i64 = cat.conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!(v, crate::SCHEMA_VERSION);
        let old: i64 = cat
            .conn
            .query_row("SELECT count(*) FROM sqlite_master WHERE name = 'patterns_fts'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(old, 0, "the old index is dropped");
        let p = cat.get("py-variant-exp-exp2").unwrap().unwrap();
        assert!(p.mechanism.contains("ex2.approx"), "{}", p.mechanism);
        let e = cat.get("py-edit-x").unwrap().unwrap();
        assert!(e.mechanism.contains("Widen offsets to avoid overflow"), "{}", e.mechanism);
        assert_eq!(ids(&cat.search("faster exponential", &Filter::default()).unwrap()), ["py-variant-exp-exp2"]);
        assert_eq!(ids(&cat.search("overflow", &Filter::default()).unwrap()), ["py-edit-x"]);
        drop(cat);
        // Opening again changes nothing.
        let cat = Catalog::open(&path).unwrap();
        let rows: i64 = cat.conn.query_row("SELECT count(*) FROM patterns_search", [], |r| r.get(0)).unwrap();
        assert_eq!(rows, 2);
    }

    fn ids(ps: &[Pattern]) -> Vec<&str> {
        ps.iter().map(|p| p.id.as_str()).collect()
    }

    #[test]
    fn terms_are_grouped_by_weight() {
        let t = parse("exp2 faster gil_scoped_release", &Glossary::empty());
        let e = expressions(&t);
        assert_eq!(
            e,
            [
                (3, "\"exp2\" OR \"gil_scoped_release\"".to_string()),
                (2, "\"faster\"".to_string()),
                (1, "\"gil\" OR \"scoped\" OR \"release\"".to_string()),
            ]
        );
    }
}
