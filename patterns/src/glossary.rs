//! The glossary: what each idiom's mechanism does, in the words an engineer
//! searches with, and the synonyms the field uses.
//!
//! The data is `glossary.toml` at the crate root, our own wording, compiled
//! in. A pattern's `mechanism` text comes from here: a usage pattern takes
//! the entry that fits its id (mechanism kind, subject, decoration), or the
//! sentence of its mechanism kind; an edit pattern takes the entries whose
//! identifiers its rewrite adds, and the summaries of the commits that made
//! it. Synonyms expand search queries ([`crate::Catalog::search_hits`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use serde::Deserialize;

use crate::model::{Kind, Pattern};

const BUILTIN: &str = include_str!("../glossary.toml");

/// The glossary file does not parse or breaks a rule.
#[derive(Debug, thiserror::Error)]
#[error("glossary: {0}")]
pub struct GlossaryError(String);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    synonyms: Vec<Vec<String>>,
    #[serde(default)]
    kinds: BTreeMap<String, String>,
    #[serde(default)]
    entry: Vec<EntryFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryFile {
    #[serde(default)]
    mechanism: Vec<String>,
    #[serde(default)]
    subjects: Vec<String>,
    decoration: String,
    #[serde(default)]
    markers: Vec<String>,
    /// What an engineer sees when the idiom is missing, in their words.
    #[serde(default)]
    symptoms: Vec<String>,
    text: String,
}

#[derive(Debug)]
struct Entry {
    mechanisms: Vec<String>,
    /// Slugs of the subjects; empty: any.
    subjects: Vec<String>,
    /// Slug of the decoration.
    decoration: String,
    /// Identifiers whose addition by an edit names this entry.
    markers: Vec<String>,
    /// The mechanism, then the symptoms it cures: searched as one text, so
    /// that a question asked from the problem finds the idiom.
    text: String,
}

/// One synonym group: each member as its normalized words.
type Group = Vec<Vec<String>>;

/// What idioms do, and which words mean the same.
#[derive(Debug)]
pub struct Glossary {
    kinds: BTreeMap<String, String>,
    entries: Vec<Entry>,
    groups: Vec<(Vec<String>, Group)>,
}

/// The glossary compiled into this build. Its file is checked by the unit
/// tests; should it still fail to parse, the glossary is empty (patterns
/// get no mechanism text, queries no synonyms) rather than an error.
pub fn builtin() -> &'static Glossary {
    static G: OnceLock<Glossary> = OnceLock::new();
    G.get_or_init(|| Glossary::parse(BUILTIN).unwrap_or_else(|_| Glossary::empty()))
}

impl Glossary {
    /// A glossary with nothing in it.
    pub fn empty() -> Glossary {
        Glossary { kinds: BTreeMap::new(), entries: Vec::new(), groups: Vec::new() }
    }

    /// Parses a glossary in the format of `glossary.toml`.
    pub fn parse(text: &str) -> Result<Glossary, GlossaryError> {
        let file: File = toml::from_str(text).map_err(|e| GlossaryError(e.to_string()))?;
        let mut entries = Vec::new();
        for e in file.entry {
            if e.text.trim().is_empty() || slug(&e.decoration).is_empty() {
                return Err(GlossaryError(format!("entry {:?}: empty text or decoration", e.decoration)));
            }
            if let Some(m) = e.mechanism.iter().find(|m| !file.kinds.contains_key(*m)) {
                return Err(GlossaryError(format!("entry {:?}: unknown mechanism {m:?}", e.decoration)));
            }
            if e.symptoms.iter().any(|s| s.trim().is_empty() || s.contains(';')) {
                return Err(GlossaryError(format!("entry {:?}: an empty symptom, or one with a ';'", e.decoration)));
            }
            let markers = if e.markers.is_empty() { vec![last_name(&e.decoration).to_string()] } else { e.markers };
            let mut text = e.text.trim().to_string();
            if !e.symptoms.is_empty() {
                let symptoms: Vec<&str> = e.symptoms.iter().map(|s| s.trim().trim_end_matches('.')).collect();
                text = format!("{text} What it cures: {}.", symptoms.join("; "));
            }
            entries.push(Entry {
                mechanisms: e.mechanism,
                subjects: e.subjects.iter().map(|s| slug(s)).collect(),
                decoration: slug(&e.decoration),
                markers,
                text,
            });
        }
        let mut groups = Vec::new();
        for g in file.synonyms {
            let members: Group = g.iter().map(|m| m.split_whitespace().map(normalize).collect()).collect();
            if members.len() < 2 || members.iter().any(Vec::is_empty) {
                return Err(GlossaryError(format!("synonym group {g:?}: needs two or more non-empty members")));
            }
            groups.push((g, members));
        }
        Ok(Glossary { kinds: file.kinds, entries, groups })
    }

    /// The mechanism text of a pattern: for a usage pattern, its entry or
    /// its mechanism kind's sentence; for an edit pattern, the entries its
    /// rewrite adds an identifier of, and its commits' summaries. Empty
    /// when nothing is known (a hand-written pattern with a free-form id).
    pub fn describe(&self, p: &Pattern) -> String {
        match p.kind {
            Kind::Usage => self.describe_usage(&p.id),
            Kind::Edit => self.describe_edit(p),
            // written with its own mechanism text
            Kind::Transform => p.mechanism.clone(),
        }
    }

    fn describe_usage(&self, id: &str) -> String {
        let Some((kind, rest)) = self.split_id(id) else { return String::new() };
        let fits = |e: &&Entry| {
            (e.mechanisms.is_empty() || e.mechanisms.iter().any(|m| m == kind))
                && if e.subjects.is_empty() {
                    rest == e.decoration || rest.ends_with(&format!("-{}", e.decoration))
                } else {
                    e.subjects.iter().any(|s| rest == format!("{s}-{}", e.decoration))
                }
        };
        match self.entries.iter().find(fits) {
            Some(e) => e.text.clone(),
            None => self.kinds.get(kind).cloned().unwrap_or_default(),
        }
    }

    /// `py-keyword-tl-dot-input-precision` -> (`keyword`, `tl-dot-input-precision`).
    fn split_id<'a>(&'a self, id: &'a str) -> Option<(&'a str, &'a str)> {
        let (_lang, rest) = id.split_once('-')?;
        // Longest kind first: `param-qualifier` before `qualifier`.
        let mut kinds: Vec<&String> = self.kinds.keys().collect();
        kinds.sort_by_key(|k| std::cmp::Reverse(k.len()));
        kinds.into_iter().find_map(|k| {
            let tail = rest.strip_prefix(k.as_str())?.strip_prefix('-')?;
            (!tail.is_empty()).then_some((k.as_str(), tail))
        })
    }

    fn describe_edit(&self, p: &Pattern) -> String {
        // Names with their dotted parts: `tl.exp2` is also `tl` and `exp2`.
        let names = |text: &str| -> BTreeSet<String> {
            identifiers(text)
                .into_iter()
                .flat_map(|i| std::iter::once(i).chain(i.split(['.', ':']).filter(|s| !s.is_empty())))
                .map(str::to_string)
                .collect()
        };
        let before = names(&p.before);
        let added: BTreeSet<String> = names(&p.after).into_iter().filter(|i| !before.contains(i)).collect();
        let mut parts: Vec<String> = Vec::new();
        for e in &self.entries {
            if parts.len() < 2 && e.markers.iter().any(|m| added.contains(m)) && !parts.contains(&e.text) {
                parts.push(e.text.clone());
            }
        }
        let mut seen = BTreeSet::new();
        let summaries: Vec<String> = p
            .commits
            .iter()
            .map(|c| c.summary.trim())
            .filter(|s| !s.is_empty() && seen.insert(*s))
            .take(5)
            .map(|s| format!("\"{s}\""))
            .collect();
        if !summaries.is_empty() {
            parts.push(format!("Made by hand in commits: {}.", summaries.join("; ")));
        }
        parts.join(" ")
    }

    /// The synonym groups that `words` (a query's words, in order) name,
    /// as (the first member found, the members not found, as written in
    /// the file).
    pub(crate) fn synonyms(&self, words: &[String]) -> Vec<(String, Vec<String>)> {
        let norm: Vec<String> = words.iter().map(|w| normalize(w)).collect();
        let mut out = Vec::new();
        for (written, members) in &self.groups {
            let found: Vec<bool> = members.iter().map(|m| norm.windows(m.len()).any(|w| w == m.as_slice())).collect();
            if let Some(first) = found.iter().position(|f| *f) {
                let others = written.iter().zip(&found).filter(|(_, f)| !**f).map(|(w, _)| w.clone()).collect();
                out.push((written[first].clone(), others));
            }
        }
        out
    }

    /// The mechanism kinds this glossary has a sentence for.
    pub fn kinds(&self) -> impl Iterator<Item = &str> {
        self.kinds.keys().map(String::as_str)
    }
}

/// Lowercase, and one common English suffix stripped, so that the forms of
/// a word meet (`caches`, `cached`, `caching` -> `cach`; `specialization`,
/// `specialize` -> `specializ`). Only used to compare words with synonym
/// members; the index has its own stemmer.
pub(crate) fn normalize(word: &str) -> String {
    let mut w = word.to_lowercase();
    for suffix in ["ations", "ation", "ings", "ing", "ies", "ied", "ed", "es", "s"] {
        let min = if matches!(suffix, "ies" | "ied") { 2 } else { 4 };
        if let Some(stem) = w.strip_suffix(suffix)
            && stem.chars().count() >= min
        {
            // `alias`, `bias`, `class`, `bus` keep their s.
            if suffix == "s" && stem.ends_with(['s', 'u', 'i', 'a']) {
                break;
            }
            w = match suffix {
                "ies" | "ied" => format!("{stem}y"),
                _ => stem.to_string(),
            };
            break;
        }
    }
    if w.chars().count() >= 5
        && let Some(stem) = w.strip_suffix('e')
    {
        w = stem.to_string();
    }
    w
}

/// The slug of a name, as the miner builds ids.
fn slug(s: &str) -> String {
    kidiom_miner::slug(&[s])
}

/// `py::gil_scoped_release` -> `gil_scoped_release`; `tl.constexpr` -> `constexpr`.
fn last_name(s: &str) -> &str {
    s.rsplit(['.', ':']).find(|p| !p.is_empty()).unwrap_or(s)
}

/// The identifiers of a template or snippet: runs of letters, digits, `_`,
/// `.` and `::`, without metavariables (`$A`, `$$$ARGS`) and without the
/// dots and colons at their ends.
pub(crate) fn identifiers(text: &str) -> BTreeSet<&str> {
    let mut out = BTreeSet::new();
    let is_part = |c: char| c.is_alphanumeric() || matches!(c, '_' | '.' | ':' | '$');
    for run in text.split(|c: char| !is_part(c)) {
        let run = run.trim_matches(['.', ':']);
        if run.is_empty() || run.starts_with('$') || !run.chars().any(char::is_alphabetic) {
            continue;
        }
        out.insert(run);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CommitRef, Lang};

    #[test]
    fn the_builtin_glossary_parses_and_covers_every_mechanism_kind() {
        let g = Glossary::parse(BUILTIN).unwrap();
        let kinds: Vec<&str> = g.kinds().collect();
        for k in kidiom_miner::Mechanism::ALL.map(kidiom_miner::Mechanism::name) {
            assert!(kinds.contains(&k), "no sentence for {k}");
        }
        assert!(g.entries.len() >= 30, "{}", g.entries.len());
        assert!(builtin().entries.len() == g.entries.len());
        // every family says what it cures, so questions asked from a symptom find it
        for e in &g.entries {
            assert!(e.text.contains(" What it cures: "), "{} has no symptoms", e.decoration);
        }
    }

    fn usage(id: &str) -> String {
        builtin().describe(&Pattern::usage(id, Lang::Python, "", "", &[]))
    }

    #[test]
    fn usage_patterns_take_the_entry_that_fits_their_id() {
        let has = |id: &str, words: &[&str]| {
            let text = usage(id);
            for w in words {
                assert!(text.contains(w), "{id}: {w:?} not in {text:?}");
            }
        };
        has("py-keyword-tl-dot-input-precision", &["TF32", "tensor cores", "ieee"]);
        has("py-keyword-tl-dot-allow-tf32", &["TF32"]);
        has("py-keyword-tl-load-eviction-policy", &["L2", "evict_last"]);
        has("py-keyword-tl-store-eviction-policy", &["L2"]);
        has("py-keyword-triton-jit-do-not-specialize", &["recompilation", "sequence length"]);
        has("py-variant-exp-exp2", &["exponential", "ex2.approx"]);
        has("py-variant-range-static-range", &["unrolls"]);
        has("py-method-wrap-tl-program-id-to", &["overflow", "int64"]);
        has("py-decorator-triton-kernel-triton-autotune", &["triton.Config"]);
        has("py-wrapper-triton-kernel-tl-multiple-of", &["alignment"]);
        has("cu-qualifier-cuda-global-launch-bounds", &["registers"]);
        has("cu-param-qualifier-pointer-param-restrict", &["alias"]);
        has("cu-intrinsic-kernel-expf", &["fast intrinsic exponential"]);
        has("cu-variant-expf-expf", &["fast intrinsic exponential"]);
        has("cu-vector-cast-kernel-reinterpret-cast", &["float4"]);
        has("cpp-guard-binding-fn-py-gil-scoped-release", &["GIL", "copies memory"]);
        has("cpp-binding-arg-binding-def-py-call-guard", &["GIL"]);
        has("rs-pyo3-call-pyo3-fn-allow-threads", &["GIL"]);
        // A subject-specific entry does not leak to other subjects.
        assert!(!usage("py-method-wrap-tl-load-to").contains("overflow"));
        // No entry: the kind's sentence.
        assert_eq!(usage("py-keyword-tl-zeros-dtype"), builtin().kinds["keyword"]);
        assert_eq!(usage("py-method-wrap-tl-load-to"), builtin().kinds["method-wrap"]);
        assert_eq!(usage("cpp-param-qualifier-pointer-param-const"), builtin().kinds["param-qualifier"]);
        // Not a mined id.
        assert_eq!(usage("manual"), "");
        assert_eq!(usage("py-nonsense-x"), "");
        assert_eq!(usage("py-keyword-"), "");
    }

    #[test]
    fn edit_patterns_take_added_identifiers_and_commit_summaries() {
        let mut p = Pattern::usage("edit-x", Lang::Python, "tl.exp($X)", "tl.exp2($X * LOG2E)", &[]);
        p.kind = Kind::Edit;
        p.commits = vec![
            CommitRef { id: "a".into(), summary: "[Perf] use exp2 in softmax".into(), date: String::new() },
            CommitRef { id: "b".into(), summary: "[Perf] use exp2 in softmax".into(), date: String::new() },
            CommitRef { id: "c".into(), summary: "speed up attention".into(), date: String::new() },
        ];
        let text = builtin().describe(&p);
        assert!(text.contains("ex2.approx"), "{text}");
        assert!(
            text.ends_with("Made by hand in commits: \"[Perf] use exp2 in softmax\"; \"speed up attention\"."),
            "{text}"
        );
        // An identifier already in `before` is not an addition.
        let mut q = Pattern::usage("edit-y", Lang::Python, "tl.exp2($X)", "tl.exp2($X * 2)", &[]);
        q.kind = Kind::Edit;
        assert_eq!(builtin().describe(&q), "");
        // Markers: the int64 cast.
        q.before = "tl.program_id(0)".into();
        q.after = "tl.program_id(0).to(tl.int64)".into();
        assert!(builtin().describe(&q).contains("overflow"));
    }

    #[test]
    fn synonyms_find_groups_by_word_forms_and_phrases() {
        let g = builtin();
        let words = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let found = |s: &str| g.synonyms(&words(s)).into_iter().map(|(m, _)| m).collect::<Vec<_>>();
        assert!(found("avoid recompilation when it changes").contains(&"recompile".to_string()));
        let (_, others) = &g.synonyms(&words("recompilation"))[0];
        assert!(others.contains(&"specialize".to_string()) && !others.contains(&"recompile".to_string()), "{others:?}");
        assert!(found("do not specialize").contains(&"specialize".to_string()));
        assert!(found("caching the weights").contains(&"cache".to_string()));
        assert!(found("use the tensor cores").contains(&"tensor core".to_string()));
        assert!(found("aliasing").contains(&"alias".to_string()));
        assert!(found("faster").contains(&"faster".to_string()));
        assert!(found("tensor").is_empty());
        let (_, others) = &g.synonyms(&words("L2"))[0];
        assert!(others.contains(&"eviction".to_string()), "{others:?}");
    }

    #[test]
    fn normalize_joins_word_forms() {
        for (a, b) in [
            ("caches", "cache"),
            ("cached", "caching"),
            ("specialization", "specialize"),
            ("specialized", "specializes"),
            ("recompilation", "recompile"),
            ("threads", "thread"),
            ("released", "release"),
            ("vectorized", "vectorize"),
            ("copies", "copy"),
            ("changes", "change"),
            ("aliases", "aliasing"),
        ] {
            assert_eq!(normalize(a), normalize(b), "{a} {b}");
        }
        assert_eq!(normalize("alias"), "alias");
        assert_eq!(normalize("speed"), "speed");
        assert_eq!(normalize("L2"), "l2");
    }

    #[test]
    fn bad_glossaries_are_refused() {
        for bad in [
            "nonsense = 1",
            "[[entry]]\ndecoration = \"x\"\ntext = \"\"",
            "[kinds]\nkeyword = \"k\"\n[[entry]]\nmechanism = [\"nope\"]\ndecoration = \"x\"\ntext = \"t\"",
            "synonyms = [[\"alone\"]]",
            "synonyms = [[\"a\", \" \"]]",
            "[[entry]]\ndecoration = \"x\"\ntext = \"t\"\nsymptoms = [\" \"]",
        ] {
            assert!(Glossary::parse(bad).is_err(), "{bad}");
        }
        assert!(Glossary::parse("").is_ok());
    }

    #[test]
    fn identifiers_skip_metavariables() {
        let ids: Vec<&str> =
            identifiers("tl.dot($A, $B, input_precision=$V) # py::gil_scoped_release x.").into_iter().collect();
        assert_eq!(ids, ["input_precision", "py::gil_scoped_release", "tl.dot", "x"]);
    }
}
