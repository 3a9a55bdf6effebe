//! Safety (spdiff, Spinfer): a candidate rule is replayed on the
//! before-files of its training commits. Every site it matches is either an
//! edit the commit made (the commit turned that node into exactly what the
//! rule produces) or a false edit. Rules with false edits are specialized —
//! a hole is fixed to one of its training values when that removes every
//! false edit and keeps enough commits — or, failing that, kept only above
//! a minimum precision, with the false edits recorded.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;

use super::antiunify::Template;
use super::pattern::{Binds, Pat, contains_run};
use super::scope::within;
use super::tree::Tree;

/// A site where a rule would edit: an edit the commit made there too, or a
/// false edit.
#[derive(Debug, Clone)]
pub(crate) struct Site {
    /// The commit made this edit.
    pub made: bool,
    /// Hash of the node bound to each single-node hole.
    pub holes: Vec<Option<u64>>,
}

/// What replaying one rule on one file found.
#[derive(Debug, Clone, Default)]
pub(crate) struct Replay {
    pub true_sites: Vec<Site>,
    pub false_sites: Vec<Site>,
}

/// An edit the commit made in the file: the before byte range and the
/// after tokens.
#[derive(Debug, Clone)]
pub(crate) struct Change<'a> {
    pub start: u32,
    pub end: u32,
    pub after: Vec<&'a str>,
}

/// Replays `rules` on one training before-file, given the edits the commit
/// made in it; only sites inside `scope` (its kernels and launches, where
/// edits are mined) count. A match is an edit the commit made when a recorded change
/// spans it and the change's after side holds exactly the rule's output.
///
/// A site that already has a keyword argument the rule adds is no site (the
/// rule would write it twice). An after-only value matches any value in the
/// commit's after side. Rules mined at a larger anchor ([`Template::lifted`])
/// are checked against `contexts` too: the enclosing statements of the
/// commit's edits, as they were before and after.
pub(crate) fn replay(
    a: &Tree<'_>,
    scope: &[Range<usize>],
    changes: &[Change<'_>],
    contexts: &[Change<'_>],
    rules: &[&Template],
) -> Vec<Replay> {
    let mut by_kind: HashMap<u16, Vec<usize>> = HashMap::new();
    for (i, r) in rules.iter().enumerate() {
        if let Some(k) = r.before.kind() {
            by_kind.entry(k).or_default().push(i);
        }
    }
    let mut out = vec![Replay::default(); rules.len()];
    for n in 0..a.nodes.len() as u32 {
        let Some(rs) = by_kind.get(&a.nodes[n as usize].kind) else { continue };
        if !within(scope, a.nodes[n as usize].start as usize, a.nodes[n as usize].end as usize) {
            continue;
        }
        for &ri in rs {
            let rule = rules[ri];
            if !rule.before.may_match(a, n) {
                continue;
            }
            let mut bind = Binds::new(rule.holes());
            if !rule.before.matches(a, n, &mut bind) {
                continue;
            }
            if present(a, n, &rule.added) {
                continue;
            }
            let mut toks = Vec::new();
            if rule.after.instantiate(a, &bind, &[], &mut toks).is_none() {
                continue;
            }
            let node = a.nodes[n as usize];
            let spans = |c: &Change<'_>, toks: &[String]| {
                c.start <= node.start && node.end <= c.end && contains_run(&c.after, toks)
            };
            let made_by = |toks: &[String]| {
                changes.iter().any(|c| spans(c, toks)) || (rule.lifted && contexts.iter().any(|c| spans(c, toks)))
            };
            let mut made = made_by(&toks);
            // Edits the commit made at sites nested in this one (an inner
            // call that gained the same keyword): the rule's output is
            // compared with those nested edits applied, as the commit left them.
            let nested = changes
                .iter()
                .any(|c| node.start <= c.start && c.end <= node.end && (c.start, c.end) != (node.start, node.end));
            if !made && nested {
                let emit = |m: u32, out: &mut Vec<String>| nested_tokens(a, m, changes, (node.start, node.end), out);
                let mut toks2 = Vec::new();
                if rule.after.instantiate_with(a, &bind, &[], &emit, &mut toks2).is_some() {
                    made = made_by(&toks2);
                }
            }
            let holes = bind.one.iter().map(|o| o.map(|x| a.nodes[x as usize].hash)).collect();
            if made {
                out[ri].true_sites.push(Site { made, holes });
            } else {
                out[ri].false_sites.push(Site { made, holes });
            }
        }
    }
    out
}

/// The tokens of node `m` with every recorded change strictly inside
/// `site` that spans a node of `m` exactly written as the commit's after
/// side (outermost first).
fn nested_tokens(a: &Tree<'_>, m: u32, changes: &[Change<'_>], site: (u32, u32), out: &mut Vec<String>) {
    let end = m + a.nodes[m as usize].size;
    let mut i = m;
    while i < end {
        let node = a.nodes[i as usize];
        let range = (node.start, node.end);
        if range != site
            && let Some(c) = changes.iter().find(|c| (c.start, c.end) == range)
        {
            out.extend(c.after.iter().map(|s| s.to_string()));
            i += node.size;
            continue;
        }
        if node.nkids == 0 {
            out.push(a.text(i).to_string());
        }
        i += 1;
    }
}

/// Whether the site at `n` already has one of the keyword arguments a
/// rule adds, at the depth the rule adds it.
pub(crate) fn present(a: &Tree<'_>, n: u32, added: &[(String, u32)]) -> bool {
    if added.is_empty() {
        return false;
    }
    let size = a.nodes[n as usize].size;
    (n + 1..n + size).any(|i| {
        let Some(name) = a.kw_name(i) else { return false };
        added.iter().any(|(kw, d)| {
            if kw != name {
                return false;
            }
            // Depth of `i` below `n`, by parent links (bounded by `d`).
            let (mut p, mut depth) = (i, 0u32);
            while p != n && depth <= *d {
                p = a.nodes[p as usize].parent;
                depth += 1;
            }
            p == n && depth == *d
        })
    })
}

/// One way to specialize a rule: fix hole `hole` to a training value.
#[derive(Debug, Clone)]
pub(crate) struct Specialization {
    pub template: Template,
    /// The hole fixed, and the hash of its value.
    pub hole: usize,
    pub value: u64,
    /// Indices (into the rule's examples) that the specialized rule keeps.
    pub keep: Vec<usize>,
}

/// Specializes an unsafe rule. `values[e][h]` is the hash and concrete
/// pattern bound to hole `h` in example `e`; `commit_of[e]` its commit.
/// Returns the specializations of the best hole (most examples kept), each
/// with no false edit and at least `min_commits` commits.
pub(crate) fn specialize(
    t: &Template,
    values: &[Vec<Option<(u64, Pat)>>],
    commit_of: &[usize],
    false_sites: &[&Site],
    min_commits: usize,
) -> Vec<Specialization> {
    let mut best: Vec<Specialization> = Vec::new();
    let mut best_kept = 0;
    for h in 0..t.holes() {
        if t.seq[h] {
            continue;
        }
        let mut groups: HashMap<u64, Vec<usize>> = HashMap::new();
        for (e, v) in values.iter().enumerate() {
            if let Some(Some((hash, _))) = v.get(h) {
                groups.entry(*hash).or_default().push(e);
            }
        }
        let mut specs = Vec::new();
        let mut kept = 0;
        let mut keys: Vec<&u64> = groups.keys().collect();
        keys.sort_unstable();
        for hash in keys {
            let members = &groups[hash];
            let commits: BTreeSet<usize> = members.iter().map(|&e| commit_of[e]).collect();
            let falses = false_sites.iter().filter(|f| f.holes.get(h).copied().flatten() == Some(*hash)).count();
            if commits.len() < min_commits || falses > 0 {
                continue;
            }
            let Some(Some((_, pat))) = values[members[0]].get(h) else { continue };
            let template = Template {
                before: t.before.substitute(h as u16, pat),
                after: t.after.substitute(h as u16, pat),
                ..t.clone()
            };
            kept += members.len();
            specs.push(Specialization { template, hole: h, value: *hash, keep: members.clone() });
        }
        if kept > best_kept {
            best_kept = kept;
            best = specs;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::antiunify::{Ex, anti_unify};
    use kidiom_syntax::Lang;
    use kidiom_syntax::Limits;

    fn changes_of<'a>(a: &Tree<'a>, b: &Tree<'a>) -> Vec<Change<'a>> {
        let (edits, _) = crate::history::edit::cut(
            Lang::Python,
            "k.py",
            ("x", "y"),
            (a, b),
            &crate::history::scope::Scope::ALL,
            &crate::history::HistoryConfig::default(),
        );
        let leaked: &'a [crate::history::ConcreteEdit] = Box::leak(edits.into_boxed_slice());
        leaked
            .iter()
            .map(|e| Change {
                start: e.start,
                end: e.start + e.before.len() as u32,
                after: Tree::from_flat(&e.after, &e.after_tree).unwrap().tokens(0),
            })
            .collect()
    }

    #[test]
    fn false_edits_are_found_and_specialization_removes_them() {
        let l = Limits::default();
        // Training: two commits each turn `f(a)` into `g(a)`, but the first
        // left `f(b)` alone: `f($A) -> g($A)` is unsafe there, `f(a) -> g(a)` is safe.
        let before = "x = f(a)\ny = f(b)\n";
        let after = "x = g(a)\ny = f(b)\n";
        let ta = Tree::parse(Lang::Python, before, &l).unwrap();
        let tb = Tree::parse(Lang::Python, after, &l).unwrap();
        let e1_b = "f(a)";
        let e1 = Ex {
            before: Tree::parse(Lang::Python, "f(a)\n", &l).unwrap(),
            after: Tree::parse(Lang::Python, "g(a)\n", &l).unwrap(),
        };
        let e2 = Ex {
            before: Tree::parse(Lang::Python, "f(c)\n", &l).unwrap(),
            after: Tree::parse(Lang::Python, "g(c)\n", &l).unwrap(),
        };
        // Cut the module wrappers off: re-root at the call.
        let call = |t: &Tree<'_>| {
            (0..t.nodes.len() as u32)
                .rev()
                .find(|&i| t.text(i).starts_with(['f', 'g']) && t.text(i).ends_with(')'))
                .unwrap()
        };
        let reroot = |t: &Tree<'static>| {
            let n = call(t);
            Tree::from_flat(t.text(n), &t.flat(n)).unwrap()
        };
        let e1 = Ex { before: reroot(&e1.before), after: reroot(&e1.after) };
        let e2 = Ex { before: reroot(&e2.before), after: reroot(&e2.after) };
        assert_eq!(e1.before.text(0), e1_b);
        let t = anti_unify(&[&e1, &e2]).unwrap();
        let changes = changes_of(&ta, &tb);
        let r = replay(&ta, &[Range { start: 0, end: usize::MAX }], &changes, &[], &[&t]);
        assert_eq!(r[0].true_sites.len(), 1);
        assert_eq!(r[0].false_sites.len(), 1);

        // Both examples bound to different values: no value has two commits.
        let values: Vec<Vec<Option<(u64, Pat)>>> = [&e1, &e2]
            .iter()
            .map(|e| {
                let b = t.validate(e).unwrap();
                b.one
                    .iter()
                    .map(|o| o.map(|n| (e.before.nodes[n as usize].hash, Pat::concrete(&e.before, n))))
                    .collect()
            })
            .collect();
        let falses: Vec<&Site> = r[0].false_sites.iter().collect();
        assert!(specialize(&t, &values, &[0, 1], &falses, 2).is_empty());
        // With one commit required, `a` is a safe specialization and `c` too.
        let s = specialize(&t, &values, &[0, 1], &falses, 1);
        assert_eq!(s.len(), 2);
        let r2 = replay(&ta, &[Range { start: 0, end: usize::MAX }], &changes, &[], &[&s[0].template, &s[1].template]);
        assert!(r2.iter().all(|r| r.false_sites.is_empty()));
    }
}
