//! Redundant work removed from a Triton kernel's block: a pure call of
//! Triton's language (`tl.exp(x)`, `tl.sqrt(x)`, `tl.sigmoid(x)`, ...) or a
//! global load (`tl.load(p, mask=m)`) that the block evaluates again on the
//! same arguments, with nothing in between that changes what it reads, is
//! evaluated once into a temporary placed just before the statement of its
//! first evaluation (`kept_exp_x = tl.exp(x)`), and the temporary is used
//! at every evaluation.
//!
//! Why a rewrite when Triton's compiler merges equal pure operations of
//! one block anyway: the interpreter (where kidiom counts a kernel's work on
//! a CPU) and a reader evaluate each written call, and a load is merged by
//! the compiler only where it can prove no store intervenes. The rewrite
//! states the reuse in the source, where both see it.
//!
//! What must hold, for each group of equal expressions (their text, blanks
//! folded) among the simple statements of one block (`expression_statement`,
//! `return_statement`):
//! - every evaluation is unconditional in its statement (not under a
//!   conditional expression, a short-circuit `and`/`or`, a lambda or a
//!   comprehension), and every call in the expression is of Triton's
//!   language (a helper's purity is unknown);
//! - no name the expression reads is assigned from the first evaluation's
//!   statement up to the last evaluation's statement (exclusive; the last
//!   statement assigns after evaluating);
//! - for a load, not `volatile`, and nothing from the first statement to the
//!   last (inclusive) stores or makes an atomic or calls anything outside
//!   Triton's language (which could store): distinct pointers may alias.
//!
//! A group nested in another group's expression waits for the next round
//! (the engine's fixed point), where the outer one is a single assignment.
//! The rewrite is idempotent: after it, each expression is evaluated once.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};

use kidiom_syntax::{KernelKind, Lang, kernel_ranges};
use tree_sitter::{Node, Tree};

use crate::matcher::{Edit, SiteEdits, tl_spellings};

/// Functions of `triton.language` (and its `math`) without side effects,
/// whose result depends on their arguments only, worth keeping: the special
/// functions and divisions a GPU evaluates on its SFU or in several
/// instructions.
const PURE: &[&str] = &[
    "exp", "exp2", "log", "log2", "log1p", "sqrt", "sqrt_rn", "rsqrt", "sin", "cos", "erf", "sigmoid", "softmax",
    "fdiv", "div_rn", "tanh", "pow",
];

/// Calls of `triton.language` that change memory or other programs' view of it.
fn writes_memory(name: &str) -> bool {
    name == "store" || name.starts_with("atomic_") || name == "debug_barrier"
}

/// The sites in `src`: one per group of equal expressions in one block of
/// a Triton kernel, each with its edits (the temporary's statement and the
/// replacements).
pub(crate) fn site_edits(lang: Lang, src: &str, tree: &Tree) -> Vec<SiteEdits> {
    if lang != Lang::Python {
        return Vec::new();
    }
    let root = tree.root_node();
    let mut modules: HashSet<String> = tl_spellings(src, root).into_iter().collect();
    modules.insert("tl".into());
    let ctx = Ctx { src, modules, taken: RefCell::new(identifiers(src, root)) };
    let mut out = Vec::new();
    for k in kernel_ranges(lang, src, tree) {
        if k.kind != KernelKind::Triton {
            continue;
        }
        let Some(def) = root.descendant_for_byte_range(k.range.start, k.range.end) else { continue };
        let mut blocks = Vec::new();
        collect(def, "block", &mut blocks);
        for b in blocks {
            ctx.block(b, &mut out);
        }
    }
    out.sort_by_key(|s| (s.site.start, s.site.end));
    out
}

struct Ctx<'s> {
    src: &'s str,
    /// The file's spellings of `triton.language` (and `.math`).
    modules: HashSet<String>,
    /// Every identifier of the file and the temporaries named so far: a
    /// new temporary's name is none of them.
    taken: RefCell<HashSet<String>>,
}

/// One evaluation of a candidate expression.
#[derive(Clone, Copy)]
struct Use<'t> {
    stmt: usize,
    node: Node<'t>,
}

impl<'s> Ctx<'s> {
    fn text(&self, n: Node) -> &'s str {
        self.src.get(n.byte_range()).unwrap_or("")
    }

    /// `f` of a call `<triton.language>.f(...)`, or `None` for any other call.
    fn tl_call<'a>(&self, call: Node<'a>) -> Option<&'s str> {
        let f = call.child_by_field_name("function")?;
        if f.kind() != "attribute" {
            return None;
        }
        let object = f.child_by_field_name("object")?;
        let name = f.child_by_field_name("attribute")?;
        self.modules.contains(&squash(self.text(object))).then(|| self.text(name))
    }

    /// Whether a call node is a load worth keeping: `tl.load` not volatile.
    fn keepable(&self, call: Node) -> Option<bool> {
        let name = self.tl_call(call)?;
        if name == "load" {
            let args = call.child_by_field_name("arguments")?;
            let mut c = args.walk();
            let volatile = args.named_children(&mut c).any(|a| {
                a.kind() == "keyword_argument"
                    && a.child_by_field_name("name").is_some_and(|n| self.text(n) == "volatile")
                    && a.child_by_field_name("value").is_some_and(|v| self.text(v) != "False")
            });
            return (!volatile).then_some(true);
        }
        PURE.contains(&name).then_some(false)
    }

    /// Every call under `n` is of Triton's language and none writes memory.
    fn only_pure_calls(&self, n: Node) -> bool {
        let mut ok = true;
        walk(n, &mut |m| {
            if m.kind() == "call" {
                match self.tl_call(m) {
                    Some(f) if !writes_memory(f) => {}
                    _ => ok = false,
                }
            }
            ok
        });
        ok
    }

    /// Whether anything under `n` may write global memory: a store, an
    /// atomic, or a call outside Triton's language.
    fn may_write(&self, n: Node) -> bool {
        let mut w = false;
        walk(n, &mut |m| {
            if m.kind() == "call" && self.tl_call(m).is_none_or(writes_memory) {
                w = true;
            }
            !w
        });
        w
    }

    /// The names an expression reads (not a module spelling, an attribute's
    /// field or a keyword's name).
    fn reads(&self, n: Node) -> HashSet<String> {
        let mut out = HashSet::new();
        walk(n, &mut |m| {
            match m.kind() {
                "attribute" => {
                    if let Some(o) = m.child_by_field_name("object")
                        && !self.modules.contains(&squash(self.text(o)))
                    {
                        out.extend(self.reads(o));
                    }
                    return false;
                }
                "keyword_argument" => {
                    if let Some(v) = m.child_by_field_name("value") {
                        out.extend(self.reads(v));
                    }
                    return false;
                }
                "identifier" => {
                    out.insert(self.text(m).to_string());
                }
                _ => {}
            }
            true
        });
        out
    }

    /// The groups of one block that can be kept, as sites.
    fn block(&self, block: Node, out: &mut Vec<SiteEdits>) {
        let mut c = block.walk();
        let stmts: Vec<Node> = block.named_children(&mut c).collect();
        // expression text -> its evaluations, in order
        let mut groups: BTreeMap<String, Vec<Use>> = BTreeMap::new();
        let mut order: Vec<String> = Vec::new();
        for (i, s) in stmts.iter().enumerate() {
            if !matches!(s.kind(), "expression_statement" | "return_statement") {
                continue;
            }
            walk(*s, &mut |m| {
                if matches!(
                    m.kind(),
                    "conditional_expression"
                        | "boolean_operator"
                        | "lambda"
                        | "list_comprehension"
                        | "set_comprehension"
                        | "dictionary_comprehension"
                        | "generator_expression"
                ) {
                    return false;
                }
                if m.kind() == "call" && self.keepable(m).is_some() {
                    let key = squash(self.text(m));
                    if !groups.contains_key(&key) {
                        order.push(key.clone());
                    }
                    groups.entry(key).or_default().push(Use { stmt: i, node: m });
                }
                true
            });
        }
        // each group split into runs that see one value: a run ends before
        // the first evaluation that something in between may have changed
        let mut chosen: Vec<Vec<Use>> = Vec::new();
        for key in order {
            let Some(uses) = groups.remove(&key) else { continue };
            let mut i = 0;
            while i + 1 < uses.len() {
                let mut end = i + 1;
                while end < uses.len() && self.safe(&stmts, &uses[i..=end]) {
                    end += 1;
                }
                if end > i + 1 {
                    chosen.push(uses[i..end].to_vec());
                }
                i = end.max(i + 1);
            }
        }
        // a run inside another run's evaluation waits for the next round
        let spans: Vec<(usize, usize)> =
            chosen.iter().flat_map(|u| u.iter().map(|u| (u.node.start_byte(), u.node.end_byte()))).collect();
        for uses in chosen {
            let (s, e) = (uses[0].node.start_byte(), uses[0].node.end_byte());
            if spans.iter().any(|&(a, b)| a <= s && e <= b && (a, b) != (s, e)) {
                continue;
            }
            if let Some(site) = self.site(&stmts, &uses) {
                out.push(site);
            }
        }
    }

    /// Whether the group's later evaluations see what the first one saw.
    fn safe(&self, stmts: &[Node], uses: &[Use]) -> bool {
        let first = uses[0];
        let last = uses[uses.len() - 1].stmt;
        if !self.only_pure_calls_in_args(first.node) {
            return false;
        }
        let reads = self.reads(first.node);
        if stmts[first.stmt..last].iter().any(|s| assigned(self, *s).iter().any(|a| reads.contains(a))) {
            return false;
        }
        let load = self.keepable(first.node) == Some(true);
        !(load && stmts[first.stmt..=last].iter().any(|s| self.may_write(*s)))
    }

    /// The calls inside a call's arguments are all pure.
    fn only_pure_calls_in_args(&self, call: Node) -> bool {
        call.child_by_field_name("arguments").is_none_or(|a| self.only_pure_calls(a))
    }

    /// The temporary's statement before the first evaluation's statement,
    /// and each evaluation replaced by the temporary.
    fn site(&self, stmts: &[Node], uses: &[Use]) -> Option<SiteEdits> {
        let first = uses[0];
        let stmt = stmts[first.stmt];
        let line_start = self.src[..stmt.start_byte()].rfind('\n').map_or(0, |i| i + 1);
        let indent = &self.src[line_start..stmt.start_byte()];
        if !indent.chars().all(|c| c == ' ' || c == '\t') {
            // a statement sharing its line (`if c: x = ...`, `a; b`) has no line of its own
            return None;
        }
        let name = self.fresh(first.node);
        let expr = self.text(first.node);
        let mut edits = vec![Edit { range: line_start..line_start, text: format!("{indent}{name} = {expr}\n") }];
        edits.extend(uses.iter().map(|u| Edit { range: u.node.byte_range(), text: name.clone() }));
        let end = uses[uses.len() - 1].node.end_byte();
        Some(SiteEdits { site: first.node.start_byte()..end, edits })
    }

    /// `kept_<function>_<argument names>`, not an identifier of the file.
    fn fresh(&self, call: Node) -> String {
        let f = self.tl_call(call).unwrap_or("value");
        let mut words = vec![f.to_string()];
        if let Some(args) = call.child_by_field_name("arguments") {
            let mut c = args.walk();
            if let Some(a) = args.named_children(&mut c).find(|a| a.kind() != "keyword_argument") {
                let mut seen = Vec::new();
                walk(a, &mut |m| {
                    if m.kind() == "identifier" {
                        let t = self.text(m).to_string();
                        if !self.modules.contains(&t) && !seen.contains(&t) {
                            seen.push(t);
                        }
                    }
                    m.kind() != "attribute"
                        || m.child_by_field_name("object").is_none_or(|o| !self.modules.contains(&squash(self.text(o))))
                });
                words.extend(seen.into_iter().take(3));
            }
        }
        let base = format!("kept_{}", words.join("_"));
        let mut taken = self.taken.borrow_mut();
        let name = std::iter::once(base.clone())
            .chain((2..).map(|i| format!("{base}_{i}")))
            .find(|n| !taken.contains(n))
            .unwrap_or(base);
        taken.insert(name.clone());
        name
    }
}

/// The names a statement assigns anywhere inside it (targets of `=`,
/// augmented assignments, `for`, `:=`, `with ... as`; a subscript or
/// attribute target assigns its base name).
fn assigned(ctx: &Ctx, stmt: Node) -> HashSet<String> {
    let mut out = HashSet::new();
    walk(stmt, &mut |m| {
        let target = match m.kind() {
            "assignment" | "augmented_assignment" | "for_statement" | "for_in_clause" => m.child_by_field_name("left"),
            "named_expression" => m.child_by_field_name("name"),
            "as_pattern_target" => Some(m),
            _ => None,
        };
        if let Some(t) = target {
            walk(t, &mut |x| {
                if x.kind() == "identifier" {
                    out.insert(ctx.text(x).to_string());
                }
                true
            });
        }
        true
    });
    out
}

/// Every identifier of the file.
fn identifiers(src: &str, root: Node) -> HashSet<String> {
    let mut out = HashSet::new();
    walk(root, &mut |m| {
        if m.kind() == "identifier" {
            out.insert(src.get(m.byte_range()).unwrap_or("").to_string());
        }
        true
    });
    out
}

/// Preorder over `n`; `f` returns whether to enter a node's children.
fn walk<'t>(n: Node<'t>, f: &mut impl FnMut(Node<'t>) -> bool) {
    let mut stack = vec![n];
    while let Some(m) = stack.pop() {
        if f(m) {
            let mut c = m.walk();
            let children: Vec<Node> = m.children(&mut c).collect();
            stack.extend(children.into_iter().rev());
        }
    }
}

/// Every node of `kind` under `n` (itself included), in source order.
fn collect<'t>(n: Node<'t>, kind: &str, out: &mut Vec<Node<'t>>) {
    walk(n, &mut |m| {
        if m.kind() == kind {
            out.push(m);
        }
        true
    });
}

fn squash(s: &str) -> String {
    s.split_whitespace().collect::<String>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ReuseForm, Rewrite, RewriteSpec, rewrite};

    fn run(src: &str) -> Option<String> {
        let spec = RewriteSpec {
            transform: Some(ReuseForm::Temporary),
            ..RewriteSpec::usage("r", Lang::Python, "$F($$$A)", "reuse", &[])
        };
        let rw = Rewrite::new(&spec, None).expect("compiles");
        rewrite(&rw, Lang::Python, src, "k.py").expect("rewrites").map(|o| o.text)
    }

    const HEAD: &str = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x, y, o, N: tl.constexpr):\n";

    fn kernel(body: &str) -> String {
        format!("{HEAD}{body}\n\ndef host(x):\n    a = tl.exp(x)\n    return a + tl.exp(x)\n")
    }

    #[test]
    fn a_pure_call_evaluated_twice_is_kept_once_and_the_rewrite_is_idempotent() {
        let src = kernel(
            "    b_x = tl.load(x + tl.arange(0, N))\n    b_a = b_x * tl.exp(b_x)  # first\n    b_b = tl.exp(b_x) + 1.0\n    tl.store(o + tl.arange(0, N), b_a + b_b)",
        );
        let out = run(&src).expect("a site");
        assert!(
            out.contains(
                "    kept_exp_b_x = tl.exp(b_x)\n    b_a = b_x * kept_exp_b_x  # first\n    b_b = kept_exp_b_x + 1.0\n"
            ),
            "{out}"
        );
        // host code is not a kernel
        assert!(out.contains("    a = tl.exp(x)\n    return a + tl.exp(x)\n"), "{out}");
        assert_eq!(run(&out), None, "idempotent");
    }

    #[test]
    fn a_load_read_again_with_no_store_between_is_kept() {
        let src = kernel(
            "    p = x + tl.arange(0, N)\n    b_a = tl.load(p, mask=p < N, other=0.)\n    b_b = tl.load(p, mask=p < N, other=0.) * 2\n    tl.store(o, b_a + b_b)",
        );
        let out = run(&src).expect("a site");
        assert!(out.contains("    kept_load_p = tl.load(p, mask=p < N, other=0.)\n    b_a = kept_load_p\n"), "{out}");
        assert!(out.contains("    b_b = kept_load_p * 2\n"), "{out}");
    }

    #[test]
    fn nothing_is_kept_across_what_changes_it() {
        // a name the expression reads is assigned between
        let between =
            kernel("    b = tl.load(x)\n    a = tl.exp(b)\n    b = b + 1\n    c = tl.exp(b)\n    tl.store(o, a + c)");
        assert_eq!(run(&between), None);
        // ... by the first evaluation's own statement
        let own = kernel("    b = tl.load(x)\n    b = tl.exp(b)\n    c = tl.exp(b)\n    tl.store(o, b + c)");
        assert_eq!(run(&own), None);
        // ... inside a loop between them
        let looped = kernel(
            "    b = tl.load(x)\n    a = tl.exp(b)\n    for i in range(3):\n        b += 1\n    c = tl.exp(b)\n    tl.store(o, a + c)",
        );
        assert_eq!(run(&looped), None);
        // a load across a store (through another pointer: it may alias)
        let stored = kernel("    a = tl.load(x)\n    tl.store(y, a)\n    c = tl.load(x)\n    tl.store(o, a + c)");
        assert_eq!(run(&stored), None);
        // a load across a call of a helper (it may store)
        let helper = kernel("    a = tl.load(x)\n    h(y)\n    c = tl.load(x)\n    tl.store(o, a + c)");
        assert_eq!(run(&helper), None);
        // a volatile load, and an evaluation under a condition
        let volatile =
            kernel("    a = tl.load(x, volatile=True)\n    c = tl.load(x, volatile=True)\n    tl.store(o, a + c)");
        assert_eq!(run(&volatile), None);
        let cond =
            kernel("    b = tl.load(x)\n    a = tl.exp(b)\n    c = tl.exp(b) if N > 1 else b\n    tl.store(o, a + c)");
        assert_eq!(run(&cond), None);
        // the last statement assigns after evaluating: still the same value
        let last = kernel("    b = tl.load(x)\n    a = tl.exp(b)\n    b = tl.exp(b) + a\n    tl.store(o, b)");
        assert!(run(&last).is_some_and(|t| t.contains("    b = kept_exp_b + a\n")));
    }

    #[test]
    fn a_nested_group_is_kept_in_the_next_round_and_names_stay_fresh() {
        let src = kernel(
            "    kept_exp_b = 1.0\n    b = tl.load(x)\n    a = tl.sqrt(tl.exp(b)) + tl.exp(b)\n    c = tl.sqrt(tl.exp(b))\n    tl.store(o, a + c + kept_exp_b)",
        );
        let out = run(&src).expect("sites");
        assert!(out.contains("kept_sqrt = tl.sqrt(") || out.contains("kept_sqrt_"), "{out}");
        assert!(out.contains("kept_exp_b_2 = tl.exp(b)"), "{out}");
        assert_eq!(out.matches("tl.exp(b)").count(), 1, "{out}");
        assert_eq!(run(&out), None, "idempotent");
    }

    #[test]
    fn a_store_ends_a_run_and_the_next_run_gets_its_own_temporary() {
        let src = kernel(
            "    a = tl.load(x) + tl.load(x)\n    b = tl.load(x) * 2\n    tl.store(x, a + b)\n    c = tl.load(x)\n    d = tl.load(x) + c\n    tl.store(o, d)",
        );
        let out = run(&src).expect("sites");
        assert!(
            out.contains("    kept_load_x = tl.load(x)\n    a = kept_load_x + kept_load_x\n    b = kept_load_x * 2\n"),
            "{out}"
        );
        assert!(out.contains("    tl.store(x, a + b)\n    kept_load_x_2 = tl.load(x)\n    c = kept_load_x_2\n    d = kept_load_x_2 + c\n"), "{out}");
        assert_eq!(run(&out), None, "idempotent");
    }

    #[test]
    fn module_aliases_count_as_triton_language() {
        let src = "import triton\nfrom triton import language as T\n\n@triton.jit\ndef k(x, o):\n    b = T.load(x)\n    T.store(o, T.exp(b) * T.exp(b))\n";
        let out = run(src).expect("a site");
        assert!(out.contains("    kept_exp_b = T.exp(b)\n    T.store(o, kept_exp_b * kept_exp_b)\n"), "{out}");
    }
}
