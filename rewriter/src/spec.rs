//! What a rewrite is compiled from: the few fields of a pattern that
//! [`Rewrite::new`](crate::Rewrite::new) reads. The catalog converts its
//! `Pattern` into one in a single place (`From<&Pattern>`), the history miner
//! builds one from a mined rule; the engine never sees either.

use kidiom_syntax::Lang;

/// One bar of a value histogram, as the engine needs it: a value, how many
/// sites hold it, and for a name the literals it can hold.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpecValue {
    /// The value as written (`"ieee"`, `tl.int64`, `DOT_PRECISION`).
    pub value: String,
    /// Sites where it was seen.
    pub count: u64,
    /// The literals a name can hold (empty for a literal or an unresolved name).
    pub literals: Vec<String>,
}

/// A rewrite before it is compiled: where (`before`), what (`after`), and
/// the value histogram an after-only hole takes its value from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewriteSpec {
    /// The pattern id, named in errors and on the compiled rewrite.
    pub id: String,
    /// The language both templates are written in.
    pub language: Lang,
    /// Where: an ast-grep-style template (empty when none is offered).
    pub before: String,
    /// What it becomes.
    pub after: String,
    /// The histogram of the after-only hole's values.
    pub values: Vec<SpecValue>,
    /// Why no rewrite is offered, when the pattern says so (its
    /// `Not rewritten automatically: ...` reason); used when `before` is empty.
    pub guidance: Option<String>,
    /// A rewrite an analysis makes instead of a template (`before` then
    /// only says where it looks): see [`crate::reuse`].
    pub transform: Option<crate::ReuseForm>,
}

impl RewriteSpec {
    /// A spec with one site for each of `values` and no guidance (tests, examples).
    pub fn usage(id: &str, language: Lang, before: &str, after: &str, values: &[&str]) -> RewriteSpec {
        RewriteSpec {
            id: id.into(),
            language,
            before: before.into(),
            after: after.into(),
            values: values.iter().map(|v| SpecValue { value: v.to_string(), count: 1, literals: Vec::new() }).collect(),
            guidance: None,
            transform: None,
        }
    }
}
