//! The check of a rule by the matcher that applies it.
//!
//! Generalization builds and validates templates with its own trees and
//! matcher ([`super::pattern`]); `kidiom apply` reads the rules' ast-grep
//! text with another one (`kidiom_patterns::matcher`). The two may
//! disagree (keyword arguments match in any order there, a site that
//! already looks like `after` is skipped there, a template must parse on
//! its own there), so before a rule is kept, the applying matcher rewrites
//! some of its training examples in their before-files, and each must come
//! out as its commit left it. The applying matcher lives downstream of the
//! miner, so the caller of [`super::generalize`] passes it in as a
//! [`TemplateCheck`].

use std::collections::BTreeSet;
use std::ops::Range;

use kidiom_syntax::Lang;
use serde::Serialize;

/// Examples checked per rule at most (one per commit first): the check
/// parses two templates and re-parses part of a file per example.
pub const MAX_CHECKED_EXAMPLES: usize = 8;

/// A rule as the applying matcher reads it.
#[derive(Debug, Clone, Copy)]
pub struct RuleText<'a> {
    /// Its language.
    pub lang: Lang,
    /// Before template (ast-grep syntax).
    pub before: &'a str,
    /// After template (ast-grep syntax).
    pub after: &'a str,
    /// Values of its after-only hole in the training examples, most frequent first.
    pub values: &'a [(String, u64)],
}

/// One training example: the commit's before-file and the node it changed.
#[derive(Debug, Clone)]
pub struct TrainingExample<'a> {
    /// The whole before-file.
    pub file: &'a str,
    /// Its parse.
    pub tree: &'a tree_sitter::Tree,
    /// Bytes of the changed node (the rule's anchor, or for a rule lifted
    /// to the enclosing statement, that statement) in `file`.
    pub range: Range<usize>,
    /// The node's tokens after the commit, as [`tokens_in`] gives them.
    pub after: &'a [&'a str],
    /// The value this example gave the rule's after-only hole, if it has one.
    pub value: Option<&'a str>,
}

/// Why the applying matcher did not reproduce an example.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckFailure {
    /// It offers no rewrite for the rule (a template it cannot parse, or an
    /// `after` that is no rewrite it knows).
    NoRewrite,
    /// It finds no site at the changed node (or one reaching outside it).
    NoSite,
    /// It rewrites the site into something other than the commit's after side.
    Differs,
}

impl CheckFailure {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            CheckFailure::NoRewrite => "no-rewrite",
            CheckFailure::NoSite => "no-site",
            CheckFailure::Differs => "differs",
        }
    }
}

/// The matcher that applies rules, as generalization asks it: does the
/// rule, applied at the example's changed node alone, leave that node as
/// the commit did?
pub trait TemplateCheck: Sync {
    /// `Ok` when rewriting `example.file` with `rule` at the site covering
    /// `example.range` (and nowhere else) gives, over that range, the
    /// tokens `example.after` (compared with [`tokens_in`]).
    fn reproduces(&self, rule: &RuleText<'_>, example: &TrainingExample<'_>) -> Result<(), CheckFailure>;
}

/// The leaf tokens of `tree` (parsed from `src`) that lie in `range`, as
/// history mining compares code (the leaves of its lowered trees): comments and other
/// extras left out, so layout and comments never make two versions differ.
/// `None` when an error or missing node lies there. Only the nodes that
/// overlap `range` are visited, without recursion.
pub fn tokens_in<'s>(src: &'s str, tree: &tree_sitter::Tree, range: Range<usize>) -> Option<Vec<&'s str>> {
    // Extras are left out, unless they are errors (as `Tree` lowers them).
    let kept = |n: tree_sitter::Node<'_>| !n.is_extra() || n.is_error();
    let mut out = Vec::new();
    let mut cur = tree.root_node().walk();
    loop {
        let n = cur.node();
        let (s, e) = (n.start_byte(), n.end_byte());
        let overlaps = s < range.end && range.start < e;
        if kept(n) && overlaps {
            let inside = range.start <= s && e <= range.end;
            if inside && (n.is_error() || n.is_missing() || n.has_error()) {
                return None;
            }
            let mut c = n.walk();
            let leaf = !n.children(&mut c).any(kept);
            if inside && leaf {
                out.push(src.get(s..e)?);
            } else if !leaf && cur.goto_first_child() {
                continue;
            }
        }
        while !cur.goto_next_sibling() {
            if !cur.goto_parent() {
                return Some(out);
            }
        }
    }
}

/// Which of a rule's examples to check (indices into `commits`, the
/// commit of each example in order): the first example of each commit,
/// then the others, at most [`MAX_CHECKED_EXAMPLES`].
pub(crate) fn pick<K: Ord + Copy>(commits: &[K]) -> Vec<usize> {
    let mut seen = BTreeSet::new();
    let mut first: Vec<usize> = Vec::new();
    let mut rest: Vec<usize> = Vec::new();
    for (i, k) in commits.iter().enumerate() {
        if seen.insert(*k) { first.push(i) } else { rest.push(i) }
    }
    first.extend(rest);
    first.truncate(MAX_CHECKED_EXAMPLES);
    first
}

/// What the check leaves of a rule's examples, given the outcome of each
/// checked one (`None`: not checked): the examples to keep, proven ones
/// first; `None` when fewer than `min_commits` commits have a proven
/// example (a rule is kept only when the applying matcher reproduces it in
/// enough commits).
pub(crate) fn verdict<K: Ord + Copy>(
    commits: &[K],
    outcomes: &[Option<bool>],
    min_commits: usize,
) -> Option<Vec<usize>> {
    let proven: BTreeSet<K> =
        commits.iter().zip(outcomes).filter(|(_, o)| **o == Some(true)).map(|(k, _)| *k).collect();
    if proven.len() < min_commits.max(1) {
        return None;
    }
    let ok: Vec<usize> = (0..commits.len()).filter(|&i| outcomes[i] == Some(true)).collect();
    let unchecked = (0..commits.len()).filter(|&i| outcomes[i].is_none());
    Some(ok.into_iter().chain(unchecked).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kidiom_syntax::parse_tree;

    #[test]
    fn one_example_per_commit_is_checked_first() {
        assert_eq!(pick(&[1, 1, 2, 3, 3]), [0, 2, 3, 1, 4]);
        let many: Vec<u32> = (0..20).collect();
        assert_eq!(pick(&many).len(), MAX_CHECKED_EXAMPLES);
    }

    #[test]
    fn a_rule_keeps_its_proven_examples_first_and_needs_enough_proven_commits() {
        // Commits 1, 1, 2, 3: the first example of commit 1 fails, the second passes.
        let commits = [1, 1, 2, 3];
        let out = verdict(&commits, &[Some(false), Some(true), Some(true), None], 2).unwrap();
        assert_eq!(out, [1, 2, 3], "the failed example is dropped, the unchecked one kept last");
        // Only commit 2 proven: not enough.
        assert!(verdict(&commits, &[Some(false), Some(false), Some(true), None], 2).is_none());
        // Nothing checked proves nothing.
        assert!(verdict(&commits, &[None, None, None, None], 1).is_none());
    }

    #[test]
    fn tokens_leave_out_comments_and_layout_and_refuse_errors() {
        let src = "def k(x):\n    y = f(a,   # note\n          b)\n    return y\n";
        let tree = parse_tree(Lang::Python, src).unwrap().unwrap();
        let at = src.find("f(a").unwrap();
        let end = src.find("b)").unwrap() + 2;
        assert_eq!(tokens_in(src, &tree, at..end).unwrap(), ["f", "(", "a", ",", "b", ")"]);
        // The same tokens as the miner's own trees give every node.
        let t = super::super::tree::Tree::parse(Lang::Python, src, &kidiom_syntax::Limits::default()).unwrap();
        for i in 0..t.nodes.len() as u32 {
            let n = t.nodes[i as usize];
            assert_eq!(tokens_in(src, &tree, n.start as usize..n.end as usize).unwrap(), t.tokens(i), "{}", t.text(i));
        }
        let bad = "def k(x):\n    y = f(a,, b)\n";
        let tree = parse_tree(Lang::Python, bad).unwrap().unwrap();
        let at = bad.find("f(a").unwrap();
        assert!(tokens_in(bad, &tree, at..bad.len() - 1).is_none());
    }
}
