//! The check of a rule by the matcher that applies it.
//!
//! Generalization builds and validates templates with its own trees and
//! matcher ([`super::pattern`]); `kidiom apply` reads the rules' ast-grep
//! text with the rewrite engine (`kidiom_rewriter`). The two may
//! disagree (keyword arguments match in any order there, a site that
//! already looks like `after` is skipped there, a template must parse on
//! its own there), so before a rule is kept, the engine rewrites
//! some of its training examples in their before-files, and each must come
//! out as its commit left it ([`reproduces`]). A rule is put to the engine
//! as a [`RewriteSpec`], compiled by [`Rewrite::new`] and rewritten at one
//! site by [`Rewrite::site_edits`] and [`apply_edits`], exactly as `apply`
//! does (which then repeats that to a fixed point over every site), so a rule
//! the miner keeps is one the engine reproduces on its own examples.

use std::collections::BTreeSet;
use std::ops::Range;

use kidiom_rewriter::{Edit, Rewrite, RewriteSpec, Scope, SpecValue, apply_edits, edited_tree};
use kidiom_syntax::{KernelKind, Lang, kernel_ranges, reparse};
use serde::Serialize;

/// Examples checked per rule at most (one per commit first): the check
/// parses two templates and re-parses part of a file per example.
pub const MAX_CHECKED_EXAMPLES: usize = 8;

/// A rule as the applying matcher reads it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RuleText<'a> {
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
pub(crate) struct TrainingExample<'a> {
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

/// Whether the rewrite engine, applying `rule` at the example's changed node
/// alone, leaves that node as the commit did: `Ok` when rewriting
/// `example.file` at the site covering `example.range` (and nowhere else)
/// gives, over that range, the tokens `example.after` (compared with
/// [`tokens_in`]).
pub(crate) fn reproduces(rule: &RuleText<'_>, ex: &TrainingExample<'_>) -> Result<(), CheckFailure> {
    let p = pattern(rule);
    // The example's own value for an after-only hole: the commit wrote
    // that one (the histogram's choice is `apply`'s default elsewhere).
    let rw = Rewrite::new(&p, ex.value).map_err(|_| CheckFailure::NoRewrite)?;
    // The rule's root is the changed node, so its site is the largest
    // one inside the node (the same range, or less a C statement's `;`,
    // which templates leave out).
    let site_in = |rw: &Rewrite| {
        rw.site_edits(ex.file, ex.tree)
            .into_iter()
            .filter(|s| ex.range.start <= s.site.start && s.site.end <= ex.range.end)
            .max_by_key(|s| s.site.len())
    };
    let site = match site_in(&rw) {
        Some(s) => s,
        // Mining also keeps edits in host code around kernel launches,
        // which `apply` rewrites only where the template is a launch of a
        // kernel of the file: the template is checked there all the same,
        // with the sites of the whole file.
        None if !in_kernel(rule, ex) => site_in(&rw.with_scope(Scope::Anywhere)).ok_or(CheckFailure::NoSite)?,
        None => return Err(CheckFailure::NoSite),
    };
    if site.edits.iter().any(|e| e.range.start < ex.range.start || e.range.end > ex.range.end) {
        return Err(CheckFailure::NoSite);
    }
    let out = apply_edits(ex.file, &site.edits).ok_or(CheckFailure::Differs)?;
    let end = (ex.range.end + out.len()).checked_sub(ex.file.len()).ok_or(CheckFailure::Differs)?;
    // Compared token by token, as the miner compared its examples:
    // `apply` keeps the target's layout and comments byte for byte and
    // writes inserted text as the template spells it, so the commit's
    // spacing, line breaks and comments may differ without the code
    // differing. The tokens come from a parse of the result, which also
    // refuses a rewrite that no longer parses there.
    let tree = reparsed(rule, ex, &out, &site.edits).ok_or(CheckFailure::Differs)?;
    let got = tokens_in(&out, &tree, ex.range.start..end).ok_or(CheckFailure::Differs)?;
    if got == ex.after { Ok(()) } else { Err(CheckFailure::Differs) }
}

/// Whether the example's node lies in a kernel (where `apply` rewrites).
fn in_kernel(rule: &RuleText<'_>, ex: &TrainingExample<'_>) -> bool {
    kernel_ranges(rule.lang, ex.file, ex.tree)
        .iter()
        .any(|k| k.kind != KernelKind::Binding && k.range.start <= ex.range.start && ex.range.end <= k.range.end)
}

/// What `kidiom mine --history` writes for a rule, as far as compiling its
/// rewrite reads it (the catalog pattern converts to the same spec).
fn pattern(rule: &RuleText<'_>) -> RewriteSpec {
    RewriteSpec {
        id: "history-check".into(),
        language: rule.lang,
        before: rule.before.into(),
        after: rule.after.into(),
        values: rule
            .values
            .iter()
            .map(|(v, n)| SpecValue { value: v.clone(), count: *n, literals: Vec::new() })
            .collect(),
        guidance: None,
        transform: None,
    }
}

/// `out` (the example's file with `edits` applied) parsed incrementally
/// from the example's tree: only the rewritten region is parsed again.
fn reparsed(rule: &RuleText<'_>, ex: &TrainingExample<'_>, out: &str, edits: &[Edit]) -> Option<tree_sitter::Tree> {
    reparse(rule.lang, out, &edited_tree(ex.tree, ex.file, edits)).ok().flatten()
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

#[cfg(test)]
mod engine_tests {
    use kidiom_syntax::Lang;

    use super::*;

    const KERNEL: &str = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(q, o, T):\n    b_a = tl.load(q, other=0.0, mask=T > 0)\n    b_s = tl.sum(b_a,  # rows\n        axis=0)\n    b_e = tl.exp(b_a)\n    tl.store(o, b_e)\n\n\ndef launch(q, o):\n    k[(1,)](q, o, 4)\n";

    /// Checks `rule` on the example that turned `node` of [`KERNEL`] into
    /// `after_node` (`after_file` holding it), as the miner would put it.
    fn check(
        rule: (&str, &str),
        value: Option<&str>,
        node: &str,
        after_file: &str,
        after_node: &str,
    ) -> Result<(), CheckFailure> {
        let tree = kidiom_syntax::parse_tree(Lang::Python, KERNEL).unwrap().unwrap();
        let at = KERNEL.find(node).unwrap();
        let after_tree = kidiom_syntax::parse_tree(Lang::Python, after_file).unwrap().unwrap();
        let a = after_file.find(after_node).unwrap();
        let after = tokens_in(after_file, &after_tree, a..a + after_node.len()).unwrap();
        let values = [("\"x\"".to_string(), 1)];
        let rule = RuleText { lang: Lang::Python, before: rule.0, after: rule.1, values: &values };
        let ex = TrainingExample { file: KERNEL, tree: &tree, range: at..at + node.len(), after: &after, value };
        reproduces(&rule, &ex)
    }

    #[test]
    fn a_rule_is_proven_token_by_token_comments_and_layout_aside() {
        // The commit also reworded the comment, which `apply` keeps: the
        // code is what the rewrite gives.
        let after = KERNEL.replace("# rows\n        axis=0)", "# columns\n        axis=0, keep_dims=True)");
        let r = ("tl.sum($A,  # rows\n        axis=0)", "tl.sum($A,  # rows\n        axis=0, keep_dims=True)");
        let node = "tl.sum(b_a,  # rows\n        axis=0)";
        assert_eq!(check(r, None, node, &after, "tl.sum(b_a,  # columns\n        axis=0, keep_dims=True)"), Ok(()));
        // The same rule does not make another edit.
        let other = KERNEL.replace("axis=0)", "axis=1)");
        assert_eq!(check(r, None, node, &other, "tl.sum(b_a,  # rows\n        axis=1)"), Err(CheckFailure::Differs));
    }

    #[test]
    fn after_only_values_are_the_examples_own() {
        let after = KERNEL.replace("tl.exp(b_a)", "tl.exp(b_a, mode=\"fast\")");
        let r = ("tl.exp($A)", "tl.exp($A, mode=$B)");
        assert_eq!(check(r, Some("\"fast\""), "tl.exp(b_a)", &after, "tl.exp(b_a, mode=\"fast\")"), Ok(()));
        // With the histogram's value instead, the example is not reproduced.
        assert_eq!(check(r, None, "tl.exp(b_a)", &after, "tl.exp(b_a, mode=\"fast\")"), Err(CheckFailure::Differs));
    }

    #[test]
    fn what_the_applying_matcher_reads_otherwise_is_refused() {
        // Keyword arguments match in any order here: the reordered call is
        // "already done", so `apply` never makes this edit.
        let after = KERNEL.replace("other=0.0, mask=T > 0", "mask=T > 0, other=0.0");
        let node = "tl.load(q, other=0.0, mask=T > 0)";
        let r = ("tl.load($A, other=0.0, mask=$B)", "tl.load($A, mask=$B, other=0.0)");
        assert_eq!(check(r, None, node, &after, "tl.load(q, mask=T > 0, other=0.0)"), Err(CheckFailure::NoSite));
        // A hole standing for an operator is no ast-grep pattern.
        let after = KERNEL.replace("T > 0", "T >= 0");
        let r = ("tl.load($A, other=0.0, mask=T $B 0)", "tl.load($A, other=0.0, mask=T >= 0)");
        assert_eq!(check(r, None, node, &after, "tl.load(q, other=0.0, mask=T >= 0)"), Err(CheckFailure::NoRewrite));
    }

    #[test]
    fn launches_are_checked_in_host_code() {
        let after = KERNEL.replace("k[(1,)](q, o, 4)", "k[(1,)](q, o, 4, num_warps=4)");
        let r = ("k[$A]($$$B)", "k[$A]($$$B, num_warps=4)");
        let node = "k[(1,)](q, o, 4)";
        assert_eq!(check(r, None, node, &after, "k[(1,)](q, o, 4, num_warps=4)"), Ok(()));
    }
}
