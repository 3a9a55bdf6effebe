//! Mined records become catalog patterns here, and only here: a usage
//! idiom ([`Idiom`]) and an edit rule ([`Rule`]) carry the same fields, and
//! both take their mechanism text from the built-in glossary. Kept apart
//! from `model` so the pattern type does not depend on the glossary that
//! describes it.

use kidiom_miner::Idiom;
use kidiom_miner::history::{CommitMeta, Rule};

use crate::model::{CommitRef, Kind, Pattern, ValueCount};

impl From<Idiom> for Pattern {
    /// The usage pattern of a mined idiom, with its mechanism text from the
    /// built-in glossary.
    fn from(idiom: Idiom) -> Pattern {
        let values = idiom
            .values
            .into_iter()
            .map(|(value, count)| {
                let r = idiom.resolved.get(&value);
                ValueCount {
                    resolved: r.map(|r| r.expr.clone()),
                    literals: r.map(|r| r.literals.clone()).unwrap_or_default(),
                    value,
                    count,
                }
            })
            .collect();
        described(Pattern {
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
            values,
            examples: idiom.examples,
            commits: Vec::new(),
            score: idiom.score,
        })
    }
}

impl From<&Rule> for Pattern {
    /// The edit pattern of a rule; its mechanism text names what the
    /// rewrite adds (glossary) and the commits that made it.
    fn from(r: &Rule) -> Pattern {
        let values = r
            .values
            .iter()
            .map(|(value, count)| ValueCount {
                value: value.clone(),
                count: *count,
                resolved: None,
                literals: Vec::new(),
            })
            .collect();
        described(Pattern {
            id: r.id.clone(),
            kind: Kind::Edit,
            language: r.lang,
            category: r.category,
            title: r.title.clone(),
            rationale: r.rationale.clone(),
            mechanism: String::new(),
            before: r.before.clone(),
            after: r.after.clone(),
            support: r.support.clone(),
            values,
            examples: r.examples.clone(),
            commits: r.commits.iter().map(CommitRef::from).collect(),
            score: r.score,
        })
    }
}

impl From<&CommitMeta> for CommitRef {
    fn from(c: &CommitMeta) -> CommitRef {
        CommitRef { id: c.id.clone(), summary: c.summary.clone(), date: c.date.clone() }
    }
}

/// `p` with its mechanism text from the built-in glossary.
fn described(mut p: Pattern) -> Pattern {
    p.mechanism = crate::glossary::builtin().describe(&p);
    p
}
