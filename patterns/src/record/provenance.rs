//! Provenance: where a candidate came from, as recorded when it was
//! proposed: a snapshot of its pattern (support, examples, commits), a
//! manual patch, or (for rows other tools wrote) whatever fields were there;
//! plus, for a searched candidate, the search that chose it.
//!
//! The stored JSON keeps the shape kidiom wrote before this type existed
//! (one flat object; a search under `"search"`, a memory-roles placement
//! told apart by `"kind": "memory-roles"`), so old rows read and new rows
//! print as before. Decoding never fails: a field of the wrong type reads
//! as absent, as the readers did field by field before.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{CommitRef, IdiomExample, Pattern, Support};

/// A candidate's provenance.
#[derive(Debug, Clone, PartialEq)]
pub struct Provenance {
    /// What proposed it.
    pub origin: Origin,
    /// The search that chose it, for a searched candidate.
    pub search: Option<SearchOrigin>,
}

/// What proposed a candidate.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    /// A catalog pattern, through `kidiom apply` (with or without a search).
    Pattern(PatternSnapshot),
    /// An edit submitted as a patch (`kidiom validate --patch`).
    Manual(ManualEdit),
    /// A row another tool (or a test) wrote: the fields it had.
    Other(OtherOrigin),
}

/// The pattern's fields when the candidate was proposed (the catalog may
/// have changed since).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PatternSnapshot {
    /// The pattern's id.
    #[serde(default, deserialize_with = "lenient")]
    pub pattern: String,
    /// `usage` or `edit`.
    #[serde(default, deserialize_with = "lenient")]
    pub kind: String,
    /// Its category's name.
    #[serde(default, deserialize_with = "lenient")]
    pub category: String,
    /// One line.
    #[serde(default, deserialize_with = "lenient")]
    pub title: String,
    /// Why, with the numbers.
    #[serde(default, deserialize_with = "lenient")]
    pub rationale: String,
    /// What it changes (absent in candidates proposed before patterns had one).
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub mechanism: Option<String>,
    /// Where it applies (ast-grep syntax).
    #[serde(default, deserialize_with = "lenient")]
    pub before: String,
    /// The rewrite template.
    #[serde(default, deserialize_with = "lenient")]
    pub after: String,
    /// The value written for `$V`, if any (a search's description of it).
    #[serde(default, deserialize_with = "lenient")]
    pub value: Option<String>,
    /// Ranking score.
    #[serde(default, deserialize_with = "lenient")]
    pub score: f64,
    /// Support per corpus and revision.
    #[serde(default, deserialize_with = "each")]
    pub support: Vec<Support>,
    /// Where it was seen.
    #[serde(default, deserialize_with = "each")]
    pub examples: Vec<IdiomExample>,
    /// Commits it was mined from.
    #[serde(default, deserialize_with = "each")]
    pub commits: Vec<CommitRef>,
    /// The other patterns that propose the very same change (same target,
    /// same rewritten text): one candidate stands for all of them.
    #[serde(default, deserialize_with = "each", skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<AlsoProposed>,
}

/// Another pattern that proposed a candidate's exact change.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AlsoProposed {
    /// The pattern's id.
    #[serde(default, deserialize_with = "lenient")]
    pub pattern: String,
    /// `usage` or `edit`.
    #[serde(default, deserialize_with = "lenient")]
    pub kind: String,
    /// Its category's name.
    #[serde(default, deserialize_with = "lenient")]
    pub category: String,
    /// One line.
    #[serde(default, deserialize_with = "lenient")]
    pub title: String,
    /// The value it writes for `$V`, if any.
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Its ranking score.
    #[serde(default, deserialize_with = "lenient")]
    pub score: f64,
    /// Its support per corpus.
    #[serde(default, deserialize_with = "each", skip_serializing_if = "Vec::is_empty")]
    pub support: Vec<Support>,
}

impl From<&PatternSnapshot> for AlsoProposed {
    fn from(p: &PatternSnapshot) -> AlsoProposed {
        AlsoProposed {
            pattern: p.pattern.clone(),
            kind: p.kind.clone(),
            category: p.category.clone(),
            title: p.title.clone(),
            value: p.value.clone(),
            score: p.score,
            support: p.support.clone(),
        }
    }
}

/// An edit submitted as a patch.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ManualEdit {
    /// The category it was submitted under, if any.
    #[serde(default, deserialize_with = "lenient")]
    pub category: Option<String>,
    /// `manual edit`.
    #[serde(default, deserialize_with = "lenient")]
    pub title: String,
    /// What a manual edit is.
    #[serde(default, deserialize_with = "lenient")]
    pub rationale: String,
}

/// The fields a row written elsewhere had (absent ones stay absent).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct OtherOrigin {
    /// Its kind, if it says.
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Its category.
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// Its title.
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Its rationale.
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
    /// Its mechanism.
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub mechanism: Option<String>,
    /// Its `before` template.
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// Its `after` template.
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Support per corpus.
    #[serde(default, deserialize_with = "each", skip_serializing_if = "Vec::is_empty")]
    pub support: Vec<Support>,
    /// Examples.
    #[serde(default, deserialize_with = "each", skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<IdiomExample>,
    /// Commits.
    #[serde(default, deserialize_with = "each", skip_serializing_if = "Vec::is_empty")]
    pub commits: Vec<CommitRef>,
}

/// The search that chose a candidate.
#[derive(Debug, Clone, PartialEq)]
pub enum SearchOrigin {
    /// The per-site precision search (`apply --search`): a point of its front.
    Sites(SiteOrigin),
    /// Memory hints placed by the role of each site's tensor.
    MemoryRoles(RolesOrigin),
}

/// A candidate of the per-site precision search.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SiteOrigin {
    /// Its point (index into the summary's points).
    #[serde(default, deserialize_with = "lenient")]
    pub point: Option<usize>,
    /// Its roles in the search (`front`, `chosen`, `all-sites`).
    #[serde(default, deserialize_with = "each")]
    pub roles: Vec<String>,
    /// Which value each site got, in words.
    #[serde(default, deserialize_with = "lenient")]
    pub assignment: String,
    /// The whole search.
    #[serde(default, deserialize_with = "lenient")]
    pub summary: SiteSummary,
    /// The blob of the file the search measured for it, when that is not
    /// the candidate's own: the same kernel in an argument's current
    /// spelling (`allow_tf32=False` measured as `input_precision="ieee"`).
    /// Two candidates that measured the same file are one change.
    #[serde(default, deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub measured_blob: Option<String>,
}

/// A memory-roles candidate.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RolesOrigin {
    /// `chosen` for the by-role assignment, `alternative` for one role only.
    #[serde(default, deserialize_with = "each")]
    pub roles: Vec<String>,
    /// `by role`, `<role> only`.
    #[serde(default, deserialize_with = "lenient")]
    pub assignment: String,
    /// The sites rewritten.
    #[serde(default, deserialize_with = "each")]
    pub sites: Vec<RoleSite>,
    /// Sites of the pattern in the file.
    #[serde(default, deserialize_with = "lenient")]
    pub all_sites: u64,
}

/// One site of a memory-roles candidate.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RoleSite {
    /// 1-based line.
    pub line: u64,
    /// The tensor its pointer is based on.
    #[serde(default)]
    pub base: String,
    /// The tensor's role.
    #[serde(default)]
    pub role: String,
    /// The hint written.
    #[serde(default)]
    pub value: String,
    /// Why that role.
    #[serde(default)]
    pub why: String,
}

/// A per-site search as stored (the validator's `SiteSearch`): the fields
/// the renderers read, typed; the rest kept as written (`rest`: pattern,
/// path, kernel, fixing, attribution, rule, counters, notes...).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SiteSummary {
    /// The values tried.
    #[serde(default, deserialize_with = "each")]
    pub values: Vec<String>,
    /// The CPU lengths the errors are at.
    #[serde(default, deserialize_with = "each")]
    pub lengths: Vec<i64>,
    /// The pattern's sites.
    #[serde(default, deserialize_with = "each")]
    pub sites: Vec<SummarySite>,
    /// Every compiled variant.
    #[serde(default, deserialize_with = "each")]
    pub points: Vec<SummaryPoint>,
    /// Why the chosen point, or why none.
    #[serde(default, deserialize_with = "lenient")]
    pub why: String,
    /// The other fields, as written.
    #[serde(flatten)]
    pub rest: serde_json::Map<String, Value>,
}

/// A site of the searched pattern.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SummarySite {
    /// 1-based line.
    pub line: u64,
    /// The site's line of source.
    #[serde(default)]
    pub text: String,
}

/// A compiled variant of the search.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SummaryPoint {
    /// Which value each site got (`None`: left as it is).
    pub assignment: Vec<Option<usize>>,
    /// The error at each length; `None` where unmeasured (JSON has no infinity).
    #[serde(default)]
    pub error: Vec<Option<f64>>,
    /// The compile's figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub figures: Option<SiteFigures>,
    /// Its roles.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Why predicted slower than the baseline (empty: not).
    #[serde(default)]
    pub predicted_slower: Vec<String>,
    /// The other fields, as written (`failed`).
    #[serde(flatten)]
    pub rest: serde_json::Map<String, Value>,
}

impl SummaryPoint {
    /// The error at the longest length (infinite when unmeasured).
    pub fn last_error(&self) -> f64 {
        self.error.last().copied().flatten().unwrap_or(f64::INFINITY)
    }

    /// Whether it has `role`.
    pub fn is(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }
}

/// A variant's compile figures (the validator's `search::Figures`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SiteFigures {
    /// SASS instructions in total.
    pub instructions: i64,
    /// Local-memory instructions.
    pub local: i64,
    /// Tensor-core instructions.
    pub tensor: i64,
    /// Registers per thread.
    pub registers: Option<i64>,
    /// Bytes spilled (stores).
    pub spill_store_bytes: i64,
}

impl Provenance {
    /// What `kidiom apply` records for pattern `p` written with `value`.
    pub fn of_pattern(p: &Pattern, value: Option<&str>) -> Provenance {
        Provenance {
            origin: Origin::Pattern(PatternSnapshot {
                pattern: p.id.clone(),
                kind: p.kind.name().into(),
                category: p.category.name().into(),
                title: p.title.clone(),
                rationale: p.rationale.clone(),
                mechanism: Some(p.mechanism.clone()),
                before: p.before.clone(),
                after: p.after.clone(),
                value: value.map(str::to_string),
                score: p.score,
                support: p.support.clone(),
                examples: p.examples.clone(),
                commits: p.commits.clone(),
                also: Vec::new(),
            }),
            search: None,
        }
    }

    /// What is recorded for an edit submitted as a patch.
    pub fn manual(category: Option<&str>) -> Provenance {
        Provenance {
            origin: Origin::Manual(ManualEdit {
                category: category.map(str::to_string),
                title: "manual edit".into(),
                rationale: "an edit submitted for validation as a patch (`kidiom validate --patch`, MCP \
                            validate_patch), not a catalog pattern"
                    .into(),
            }),
            search: None,
        }
    }

    /// With the search that chose it.
    pub fn with_search(mut self, search: SearchOrigin) -> Provenance {
        self.search = Some(search);
        self
    }

    /// Reads stored provenance JSON (any shape; what is not understood reads as absent).
    pub fn decode(v: &Value) -> Provenance {
        let obj = || v.clone();
        let kind = v.get("kind").and_then(Value::as_str);
        let origin = if v.get("pattern").is_some_and(Value::is_string) {
            Origin::Pattern(serde_json::from_value(obj()).unwrap_or_default())
        } else if kind == Some(crate::record::MANUAL_KIND) {
            Origin::Manual(serde_json::from_value(obj()).unwrap_or_default())
        } else {
            Origin::Other(serde_json::from_value(obj()).unwrap_or_default())
        };
        let search = v.get("search").filter(|s| s.is_object()).map(|s| {
            if s.get("kind").and_then(Value::as_str) == Some(MEMORY_ROLES) {
                SearchOrigin::MemoryRoles(serde_json::from_value(s.clone()).unwrap_or_default())
            } else {
                SearchOrigin::Sites(serde_json::from_value(s.clone()).unwrap_or_default())
            }
        });
        Provenance { origin, search }
    }

    /// The stored JSON (keys in the order the catalog has always written them).
    pub fn to_value(&self) -> Value {
        let mut v = match &self.origin {
            Origin::Pattern(p) => serde_json::to_value(p),
            Origin::Manual(m) => serde_json::to_value(m).map(|mut v| {
                v["kind"] = crate::record::MANUAL_KIND.into();
                v
            }),
            Origin::Other(o) => serde_json::to_value(o),
        }
        .unwrap_or_else(|_| Value::Object(Default::default()));
        if let Some(s) = &self.search {
            let s = match s {
                SearchOrigin::Sites(x) => serde_json::to_value(x),
                SearchOrigin::MemoryRoles(x) => serde_json::to_value(x).map(|mut v| {
                    v["kind"] = MEMORY_ROLES.into();
                    v
                }),
            };
            v["search"] = s.unwrap_or(Value::Null);
        }
        v
    }

    /// The pattern snapshot, when a catalog pattern proposed it.
    pub fn pattern(&self) -> Option<&PatternSnapshot> {
        match &self.origin {
            Origin::Pattern(p) => Some(p),
            _ => None,
        }
    }

    /// `usage`, `edit`, `manual`, or what another writer said (empty: nothing).
    pub fn kind(&self) -> &str {
        match &self.origin {
            Origin::Pattern(p) => &p.kind,
            Origin::Manual(_) => crate::record::MANUAL_KIND,
            Origin::Other(o) => o.kind.as_deref().unwrap_or(""),
        }
    }

    /// The category's name, if recorded.
    pub fn category(&self) -> Option<&str> {
        match &self.origin {
            Origin::Pattern(p) => Some(&p.category),
            Origin::Manual(m) => m.category.as_deref(),
            Origin::Other(o) => o.category.as_deref(),
        }
    }

    /// The title (empty: none recorded).
    pub fn title(&self) -> &str {
        match &self.origin {
            Origin::Pattern(p) => &p.title,
            Origin::Manual(m) => &m.title,
            Origin::Other(o) => o.title.as_deref().unwrap_or(""),
        }
    }

    /// The rationale, if recorded.
    pub fn rationale(&self) -> Option<&str> {
        match &self.origin {
            Origin::Pattern(p) => Some(&p.rationale),
            Origin::Manual(m) => Some(&m.rationale),
            Origin::Other(o) => o.rationale.as_deref(),
        }
    }

    /// The mechanism, if recorded.
    pub fn mechanism(&self) -> Option<&str> {
        match &self.origin {
            Origin::Pattern(p) => p.mechanism.as_deref(),
            Origin::Manual(_) => None,
            Origin::Other(o) => o.mechanism.as_deref(),
        }
    }

    /// The `before` template, if recorded.
    pub fn before(&self) -> Option<&str> {
        match &self.origin {
            Origin::Pattern(p) => Some(&p.before),
            Origin::Manual(_) => None,
            Origin::Other(o) => o.before.as_deref(),
        }
    }

    /// The `after` template, if recorded.
    pub fn after(&self) -> Option<&str> {
        match &self.origin {
            Origin::Pattern(p) => Some(&p.after),
            Origin::Manual(_) => None,
            Origin::Other(o) => o.after.as_deref(),
        }
    }

    /// Support per corpus.
    pub fn support(&self) -> &[Support] {
        match &self.origin {
            Origin::Pattern(p) => &p.support,
            Origin::Manual(_) => &[],
            Origin::Other(o) => &o.support,
        }
    }

    /// Examples.
    pub fn examples(&self) -> &[IdiomExample] {
        match &self.origin {
            Origin::Pattern(p) => &p.examples,
            Origin::Manual(_) => &[],
            Origin::Other(o) => &o.examples,
        }
    }

    /// Commits.
    pub fn commits(&self) -> &[CommitRef] {
        match &self.origin {
            Origin::Pattern(p) => &p.commits,
            Origin::Manual(_) => &[],
            Origin::Other(o) => &o.commits,
        }
    }

    /// Every pattern that proposes this candidate's change: its own first,
    /// then the others (empty for a manual edit or another writer's row).
    pub fn patterns(&self) -> Vec<&str> {
        match &self.origin {
            Origin::Pattern(p) => {
                std::iter::once(p.pattern.as_str()).chain(p.also.iter().map(|a| a.pattern.as_str())).collect()
            }
            _ => Vec::new(),
        }
    }

    /// The other patterns that propose the same change.
    pub fn also(&self) -> &[AlsoProposed] {
        match &self.origin {
            Origin::Pattern(p) => &p.also,
            _ => &[],
        }
    }

    /// Records that the patterns of `others` propose the same change too
    /// (each once; its own pattern is never listed).
    pub fn add_also(&mut self, others: impl IntoIterator<Item = AlsoProposed>) {
        if let Origin::Pattern(p) = &mut self.origin {
            for a in others {
                if a.pattern != p.pattern && !p.also.iter().any(|x| x.pattern == a.pattern) {
                    p.also.push(a);
                }
            }
        }
    }

    /// The roles of the candidate in the search it came from (empty: none).
    pub fn search_roles(&self) -> &[String] {
        match &self.search {
            Some(SearchOrigin::Sites(s)) => &s.roles,
            Some(SearchOrigin::MemoryRoles(r)) => &r.roles,
            None => &[],
        }
    }
}

impl Default for Provenance {
    fn default() -> Self {
        Provenance { origin: Origin::Other(OtherOrigin::default()), search: None }
    }
}

impl Serialize for Provenance {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Provenance {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Provenance::decode(&Value::deserialize(d)?))
    }
}

/// The `"kind"` of a memory-roles search in the stored JSON.
const MEMORY_ROLES: &str = "memory-roles";

/// A field of the wrong type reads as its default.
fn lenient<'de, D: serde::Deserializer<'de>, T: DeserializeOwned + Default>(d: D) -> Result<T, D::Error> {
    Ok(serde_json::from_value(Value::deserialize(d)?).unwrap_or_default())
}

/// The elements of an array that have the type; anything else reads as empty.
fn each<'de, D: serde::Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(a) => a.into_iter().filter_map(|x| serde_json::from_value(x).ok()).collect(),
        _ => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_shape_round_trips_to_the_json_it_was_read_from() {
        let plain = json!({"pattern": "p", "kind": "usage", "category": "precision", "title": "t", "rationale": "r",
            "mechanism": "m", "before": "b", "after": "a", "value": null, "score": 1.5, "support": [], "examples": [],
            "commits": []});
        let mut sites = plain.clone();
        sites["search"] = json!({"point": 1, "roles": ["front"], "assignment": "1: x",
            "summary": {"values": ["x"], "lengths": [64], "sites": [{"line": 3, "text": "t"}], "why": "w",
                "points": [{"assignment": [null], "error": [null], "roles": ["baseline"], "predicted_slower": [],
                    "failed": "boom"}], "kernel": "k", "rule": {"error_factor": 2.0, "min_gain": 20.0}}});
        let mut roles = plain.clone();
        roles["search"] = json!({"kind": "memory-roles", "roles": ["chosen"], "assignment": "by role",
            "sites": [{"line": 4, "base": "q", "role": "reused", "value": "v", "why": "w"}], "all_sites": 9});
        let manual = json!({"kind": "manual", "category": null, "title": "manual edit", "rationale": "r"});
        let plant = json!({"category": "specialization", "after": "@x"});
        let mut also = plain.clone();
        also["also"] = json!([{"pattern": "q", "kind": "edit", "category": "addressing", "title": "t2",
            "value": "tl.int64", "score": 0.5, "support": [{"corpus": "fla", "revision": "r", "occurrences": 3,
            "files": 1, "opportunities": 0}]}]);
        for v in [plain, sites, roles, manual, plant, also] {
            assert_eq!(Provenance::decode(&v).to_value(), v);
        }
    }

    #[test]
    fn the_search_is_a_tagged_enum_and_wrong_types_read_as_absent() {
        let p = Provenance::decode(
            &json!({"search": {"kind": "memory-roles", "roles": "front", "sites": [1, {"line": 2}]}}),
        );
        match p.search {
            Some(SearchOrigin::MemoryRoles(r)) => {
                assert!(r.roles.is_empty());
                assert_eq!(r.sites.len(), 1);
            }
            other => panic!("{other:?}"),
        }
        let p = Provenance::decode(&json!({"category": 7, "title": ["x"], "support": "all"}));
        assert_eq!((p.category(), p.title(), p.support().len()), (None, "", 0));
    }
}
