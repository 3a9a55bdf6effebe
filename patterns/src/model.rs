//! The pattern model: what the catalog stores and every `--json` prints.

use serde::{Deserialize, Serialize};

pub use kidiom_miner::{Category, IdiomExample, Support};
pub use kidiom_syntax::Lang;

/// Where a pattern was mined from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[derive(strum::Display, strum::EnumString, strum::IntoStaticStr, strum::VariantArray)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Kind {
    /// Mined from code as it is (a static census).
    Usage,
    /// Mined from history (edits that authors made).
    Edit,
    /// Written into kidiom: an analysis finds the sites and makes the
    /// rewrite (no template; `after` names the transform).
    Transform,
}

kidiom_syntax::named_enum!(Kind);

/// One bar of a value histogram: a value seen in a pattern's hole and how
/// often; for a name, what it resolves to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueCount {
    /// The value as written, Python string literals in double quotes
    /// (`"ieee"`, `tl.int64`, `DOT_PRECISION`).
    pub value: String,
    /// Sites where it was seen.
    pub count: u64,
    /// For a name (or `tl.constexpr` of one): the expression it is bound
    /// to, shortened (`"ieee" if IS_NPU else "tf32x3"`); absent when it
    /// resolves to no literal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<String>,
    /// The literals the name can hold: every branch, in definition order,
    /// deduplicated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub literals: Vec<String>,
}

impl ValueCount {
    /// The literal values this bar stands for: the value itself when it is
    /// a literal (string, number, `True`, `False`, `None`), else the
    /// literals its name resolves to (none when unresolved).
    pub fn literal_values(&self) -> Vec<&str> {
        if kidiom_miner::is_literal(&self.value) {
            vec![self.value.as_str()]
        } else {
            self.literals.iter().map(String::as_str).collect()
        }
    }
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
            values: values
                .iter()
                .map(|v| ValueCount { value: v.to_string(), count: 1, resolved: None, literals: Vec::new() })
                .collect(),
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

/// The one conversion from a catalog pattern to what the rewrite engine
/// compiles: the templates, the value histogram, and a guidance-only
/// pattern's reason (`Not rewritten automatically: ...` in its rationale).
impl From<&Pattern> for kidiom_rewriter::RewriteSpec {
    fn from(p: &Pattern) -> Self {
        kidiom_rewriter::RewriteSpec {
            id: p.id.clone(),
            language: p.language,
            before: p.before.clone(),
            after: p.after.clone(),
            values: p
                .values
                .iter()
                .map(|v| kidiom_rewriter::SpecValue {
                    value: v.value.clone(),
                    count: v.count,
                    literals: v.literals.clone(),
                })
                .collect(),
            guidance: p
                .rationale
                .split_once("Not rewritten automatically: ")
                .map(|(_, w)| w.trim_end_matches('.').to_string()),
            transform: match (p.kind, p.after.as_str()) {
                (Kind::Transform, crate::builtin::REUSE_LOCAL) => Some(kidiom_rewriter::ReuseForm::Local),
                (Kind::Transform, crate::builtin::REUSE_SHARED) => Some(kidiom_rewriter::ReuseForm::Shared),
                (Kind::Transform, crate::builtin::REUSE_TEMPORARY) => Some(kidiom_rewriter::ReuseForm::Temporary),
                (Kind::Transform, crate::builtin::STATE_CAST) => Some(kidiom_rewriter::ReuseForm::StateCast),
                _ => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_round_trip() {
        for &k in Kind::ALL {
            assert_eq!(Kind::from_name(k.name()), Some(k));
            assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{}\"", k.name()));
        }
        assert_eq!(Kind::from_name("Usage"), None);
    }

    #[test]
    fn literal_values_are_the_value_or_what_its_name_holds() {
        let v = |value: &str, literals: &[&str]| ValueCount {
            value: value.into(),
            count: 1,
            resolved: None,
            literals: literals.iter().map(|s| s.to_string()).collect(),
        };
        assert_eq!(v("\"ieee\"", &[]).literal_values(), ["\"ieee\""]);
        assert_eq!(v("16", &[]).literal_values(), ["16"]);
        assert_eq!(v("True", &[]).literal_values(), ["True"]);
        assert_eq!(v("PREC", &["\"tf32\"", "\"ieee\""]).literal_values(), ["\"tf32\"", "\"ieee\""]);
        assert!(v("PREC", &[]).literal_values().is_empty());
        assert!(v("tl.float32", &[]).literal_values().is_empty());
    }

    #[test]
    fn a_mined_idiom_carries_its_resolutions() {
        let src = "import triton\nimport triton.language as tl\nP = tl.constexpr('ieee' if X else 'tf32')\n@triton.jit\ndef k(a):\n    tl.dot(a, a, input_precision=P)\n    tl.dot(a, a, input_precision='ieee')\n    tl.dot(a, a)\n";
        let facts = kidiom_miner::extract(Lang::Python, src, &Default::default()).unwrap();
        let files =
            [kidiom_miner::FileInput { corpus: "c", revision: "r", path: "k.py", lang: Lang::Python, facts: &facts }];
        let cfg = kidiom_miner::MineConfig { min_occurrences: 1, min_files: 1, ..Default::default() };
        let idiom = kidiom_miner::aggregate(files, &cfg)
            .into_iter()
            .find(|i| i.id == "py-keyword-tl-dot-input-precision")
            .unwrap();
        let p = Pattern::from(idiom);
        let get = |v: &str| p.values.iter().find(|x| x.value == v).unwrap();
        assert_eq!(get("P").resolved.as_deref(), Some("\"ieee\" if X else \"tf32\""));
        assert_eq!(get("P").literal_values(), ["\"ieee\"", "\"tf32\""]);
        assert_eq!(get("\"ieee\"").resolved, None);
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
            values: vec![
                ValueCount { value: "\"ieee\"".into(), count: 3, resolved: None, literals: vec![] },
                ValueCount {
                    value: "PREC".into(),
                    count: 2,
                    resolved: Some("\"tf32\" if A else \"ieee\"".into()),
                    literals: vec!["\"tf32\"".into(), "\"ieee\"".into()],
                },
            ],
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
        // Unresolved values carry no resolution fields; resolved ones both.
        assert_eq!(v["values"][0].as_object().unwrap().len(), 2);
        assert_eq!(v["values"][1]["resolved"], "\"tf32\" if A else \"ieee\"");
        assert_eq!(v["values"][1]["literals"][1], "\"ieee\"");
        assert_eq!(v["commits"][0]["summary"], "s");
        let back: Pattern = serde_json::from_value(v).unwrap();
        assert_eq!(back, p);
        assert_eq!((p.occurrences(), p.files(), p.opportunities()), (3, 2, 5));
    }
}
