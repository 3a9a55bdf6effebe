//! The pattern model: what the catalog stores and every `--json` prints.

use serde::{Deserialize, Serialize};

pub use kidiom_miner::{Category, IdiomExample, Lang, Support};

use kidiom_miner::Idiom;

/// Where a pattern was mined from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Mined from code as it is (a static census).
    Usage,
    /// Mined from history (edits that authors made).
    Edit,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 2] = [Kind::Usage, Kind::Edit];

    /// The lowercase name used in the catalog, in JSON and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Usage => "usage",
            Kind::Edit => "edit",
        }
    }

    /// Parses a name as printed by [`Kind::name`].
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One bar of a value histogram: a value seen in a pattern's hole and how
/// often.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueCount {
    /// The value as written (`"ieee"`, `tl.int64`).
    pub value: String,
    /// Sites where it was seen.
    pub count: u64,
}

/// A commit that an edit pattern was mined from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitRef {
    /// The full commit id.
    pub id: String,
    /// The first line of its message.
    pub summary: String,
    /// Its author date (RFC 3339), or empty when unknown.
    pub date: String,
}

/// A catalog pattern (SPEC §4). Serialized with exactly these field names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pattern {
    /// Stable readable slug.
    pub id: String,
    /// Usage or edit.
    pub kind: Kind,
    /// Language of the code it matches.
    pub language: Lang,
    /// What it is for.
    pub category: Category,
    /// One line.
    pub title: String,
    /// Why, with the numbers.
    pub rationale: String,
    /// What it changes in generated code or at run time, and when that
    /// helps or hurts, in the words an engineer searches with (from the
    /// glossary, or an edit's commit messages; see [`crate::glossary`]).
    #[serde(default)]
    pub mechanism: String,
    /// Where it can be applied (ast-grep syntax; may be empty).
    pub before: String,
    /// The idiom's shape and the rewrite template.
    pub after: String,
    /// Support per corpus and revision.
    pub support: Vec<Support>,
    /// Values seen in its holes, most frequent first.
    pub values: Vec<ValueCount>,
    /// Where it was seen.
    pub examples: Vec<IdiomExample>,
    /// Commits it was mined from (edit patterns).
    pub commits: Vec<CommitRef>,
    /// Ranking score (higher is stronger evidence).
    pub score: f64,
}

impl Pattern {
    /// A usage pattern written by hand (no support, examples or score): a
    /// rewrite to try, or a test's. `values` is its histogram, each seen once.
    pub fn usage(id: &str, language: Lang, before: &str, after: &str, values: &[&str]) -> Pattern {
        Pattern {
            id: id.into(),
            kind: Kind::Usage,
            language,
            category: Category::Other,
            title: String::new(),
            rationale: String::new(),
            mechanism: String::new(),
            before: before.into(),
            after: after.into(),
            support: vec![],
            values: values.iter().map(|v| ValueCount { value: v.to_string(), count: 1 }).collect(),
            examples: vec![],
            commits: vec![],
            score: 0.0,
        }
    }

    /// Decorated sites over all corpora.
    pub fn occurrences(&self) -> u64 {
        self.support.iter().map(|s| s.occurrences).sum()
    }

    /// Files with a decorated site over all corpora.
    pub fn files(&self) -> u64 {
        self.support.iter().map(|s| s.files).sum()
    }

    /// Sites matching `before` that lack the idiom, over all corpora.
    pub fn opportunities(&self) -> u64 {
        self.support.iter().map(|s| s.opportunities).sum()
    }
}

impl From<Idiom> for Pattern {
    /// The usage pattern of a mined idiom, with its mechanism text from the
    /// built-in glossary.
    fn from(idiom: Idiom) -> Pattern {
        let mut p = Pattern {
            id: idiom.id,
            kind: Kind::Usage,
            language: idiom.key.lang,
            category: idiom.category,
            title: idiom.title,
            rationale: idiom.rationale,
            mechanism: String::new(),
            before: idiom.before,
            after: idiom.after,
            support: idiom.support,
            values: idiom.values.into_iter().map(|(value, count)| ValueCount { value, count }).collect(),
            examples: idiom.examples,
            commits: Vec::new(),
            score: idiom.score,
        };
        p.mechanism = crate::glossary::builtin().describe(&p);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_round_trip() {
        for k in Kind::ALL {
            assert_eq!(Kind::from_name(k.name()), Some(k));
            assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{}\"", k.name()));
        }
        assert_eq!(Kind::from_name("Usage"), None);
    }

    #[test]
    fn json_field_names_follow_the_spec() {
        let p = Pattern {
            id: "py-keyword-tl-dot-input-precision".into(),
            kind: Kind::Usage,
            language: Lang::Python,
            category: Category::Precision,
            title: "t".into(),
            rationale: "r".into(),
            mechanism: "m".into(),
            before: "tl.dot($A, $B)".into(),
            after: "tl.dot($A, $B, input_precision=$P)".into(),
            support: vec![Support {
                corpus: "fla".into(),
                revision: "abc".into(),
                occurrences: 3,
                files: 2,
                opportunities: 5,
            }],
            values: vec![ValueCount { value: "\"ieee\"".into(), count: 3 }],
            examples: vec![IdiomExample { corpus: "fla".into(), path: "a.py".into(), line: 7, snippet: "x".into() }],
            commits: vec![CommitRef { id: "c0ffee".into(), summary: "s".into(), date: String::new() }],
            score: 1.5,
        };
        let v = serde_json::to_value(&p).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut want = vec![
            "id",
            "kind",
            "language",
            "category",
            "title",
            "rationale",
            "mechanism",
            "before",
            "after",
            "support",
            "values",
            "examples",
            "commits",
            "score",
        ];
        let mut got = keys.clone();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want);
        assert_eq!(v["kind"], "usage");
        assert_eq!(v["language"], "python");
        assert_eq!(v["category"], "precision");
        assert_eq!(v["support"][0]["opportunities"], 5);
        assert_eq!(v["values"][0]["count"], 3);
        assert_eq!(v["commits"][0]["summary"], "s");
        let back: Pattern = serde_json::from_value(v).unwrap();
        assert_eq!(back, p);
        assert_eq!((p.occurrences(), p.files(), p.opportunities()), (3, 2, 5));
    }
}
