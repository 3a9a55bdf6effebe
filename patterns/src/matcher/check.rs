//! The applying matcher's side of the check of mined edit rules
//! (`kidiom_miner::history::TemplateCheck`).
//!
//! History mining builds its templates with its own trees; this matcher is
//! the one `kidiom apply` uses. A rule is put to it as a catalog pattern,
//! compiled by [`Rewrite::new`] and rewritten at one site by
//! [`Rewrite::site_edits`] and [`apply_edits`], exactly as `apply` does
//! (which then repeats that to a fixed point over every site), so a rule
//! the miner keeps is one this matcher reproduces on its own examples.

use kidiom_miner::Category;
use kidiom_miner::history::{CheckFailure, RuleText, TemplateCheck, TrainingExample, tokens_in};
use kidiom_syntax::{KernelKind, kernel_ranges, reparse};

use super::{Edit, Rewrite, Scope, apply_edits, edited_tree};
use crate::model::{Kind, Pattern, ValueCount};

/// Checks mined rules with the matcher that applies them.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApplyCheck;

impl TemplateCheck for ApplyCheck {
    fn reproduces(&self, rule: &RuleText<'_>, ex: &TrainingExample<'_>) -> Result<(), CheckFailure> {
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
            // Mining also keeps edits of kernel launches, in host code, where
            // `apply` (kernels only) never rewrites: the template is checked
            // there all the same, with the sites of the whole file.
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
}

/// Whether the example's node lies in a kernel (where `apply` rewrites).
fn in_kernel(rule: &RuleText<'_>, ex: &TrainingExample<'_>) -> bool {
    kernel_ranges(rule.lang, ex.file, ex.tree)
        .iter()
        .any(|k| k.kind != KernelKind::Binding && k.range.start <= ex.range.start && ex.range.end <= k.range.end)
}

/// The catalog pattern `kidiom mine --history` writes for a rule, as far
/// as compiling its rewrite reads it.
fn pattern(rule: &RuleText<'_>) -> Pattern {
    Pattern {
        id: "history-check".into(),
        kind: Kind::Edit,
        language: rule.lang,
        category: Category::Other,
        title: String::new(),
        rationale: String::new(),
        mechanism: String::new(),
        before: rule.before.into(),
        after: rule.after.into(),
        support: Vec::new(),
        values: rule
            .values
            .iter()
            .map(|(v, n)| ValueCount { value: v.clone(), count: *n, resolved: None, literals: Vec::new() })
            .collect(),
        examples: Vec::new(),
        commits: Vec::new(),
        score: 0.0,
    }
}

/// `out` (the example's file with `edits` applied) parsed incrementally
/// from the example's tree: only the rewritten region is parsed again.
fn reparsed(rule: &RuleText<'_>, ex: &TrainingExample<'_>, out: &str, edits: &[Edit]) -> Option<tree_sitter::Tree> {
    reparse(rule.lang, out, &edited_tree(ex.tree, ex.file, edits)).ok().flatten()
}

#[cfg(test)]
mod tests {
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
        ApplyCheck.reproduces(&rule, &ex)
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
