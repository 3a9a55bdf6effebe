//! The structural matcher (SPEC §5).
//!
//! Patterns use ast-grep's syntax — `$A` one node, `$$$ARGS` a run of
//! nodes, `$_` one node not captured — with two extensions: keyword
//! arguments match in any order and position, and a sequence hole matches
//! anywhere in an argument list. Sites must lie inside a kernel (Triton
//! kernel, `__global__`/`__device__` function) and outside parse errors;
//! a template that is a kernel launch (`$KERNEL[$GRID]($$$ARGS)`) matches
//! the launches of the file's kernels in host code instead ([`Scope::Launches`]).
//!
//! [`Template`] parses a pattern with the target's own grammar; [`find`]
//! lists the sites of a parsed file that match it; [`Rewrite`] turns a
//! [`RewriteSpec`](crate::RewriteSpec)'s `before`/`after` pair into [`Edit`]s at each site that
//! lacks the idiom.

pub(crate) mod binding;
mod index;
mod rewrite;
pub mod roles;
mod splice;
mod template;

use std::collections::BTreeMap;
use std::ops::Range;
use std::rc::Rc;

use kidiom_syntax::{KernelKind, kernel_ranges};
use tree_sitter::{Node, Tree};

pub use binding::Refusal;
pub use rewrite::Rewrite;
pub use splice::{Edit, SiteEdits, apply_edits, edited_tree};
pub use template::Template;

use index::site_index;
pub(crate) use index::tl_spellings;
use template::{Hole, PNode, Shape, is_comment};

/// Why a pattern cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MatchError {
    /// The pattern text is not a valid pattern in its language.
    #[error("pattern {pattern:?} does not parse: {message}")]
    Pattern {
        /// The pattern as written.
        pattern: String,
        /// What is wrong.
        message: String,
    },
    /// The catalog pattern offers no rewrite (empty `before`), or its
    /// `after` is not a rewrite of its `before`.
    #[error("pattern {id} has no automatic rewrite: {message}")]
    NoRewrite {
        /// The pattern id.
        id: String,
        /// Why.
        message: String,
    },
}

/// What a metavariable captured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capture {
    /// Bytes of the captured nodes (for a sequence, first start to last
    /// end; empty at the position of an empty sequence).
    pub range: Range<usize>,
    /// Kind of the captured node (the first node of a sequence; empty for
    /// an empty sequence).
    pub kind: String,
    /// How many nodes (1 for `$A`).
    pub nodes: usize,
}

/// One site that matches a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    /// The matched node's bytes.
    pub range: Range<usize>,
    /// Captures by metavariable name (without `$`).
    pub captures: BTreeMap<String, Capture>,
    /// Target bytes of each template leaf, by leaf index (`None` for leaves
    /// with no single counterpart, such as commas between arguments).
    pub(crate) leaves: Vec<Option<Range<usize>>>,
}

/// Where matches may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Inside Triton kernels and `__global__`/`__device__` functions.
    Kernels,
    /// Inside the host functions and module bodies of binding files
    /// (pybind11, torch): where `py::call_guard` and GIL releases go.
    Bindings,
    /// Kernel launches `KERNEL[GRID](...)` in host code, of a kernel the
    /// file defines or imports ([`kidiom_syntax::kernel_launches`]): where a
    /// launch's configuration (`num_warps=`, `num_stages=`) goes. A pattern
    /// whose `before` is such a launch has this scope.
    Launches,
    /// Anywhere in the file.
    Anywhere,
}

/// The sites of `tree` (parsed from `src`) that match `t`, in source order
/// (outer before inner), skipping sites under error nodes and, with
/// [`Scope::Kernels`], outside kernels.
pub fn find(t: &Template, src: &str, tree: &Tree, scope: Scope) -> Vec<Match> {
    let mut out = Vec::new();
    for_each_site(t, src, tree, scope, |_, m| out.push(m));
    out
}

/// The kinds a template's root can have; `None` when any node may match.
fn root_kinds(t: &Template) -> Option<Vec<&str>> {
    match &t.shape {
        Shape::Tree(p) if p.hole == Hole::No => Some(vec![p.kind.as_str()]),
        Shape::Tree(_) => None,
        Shape::Loop => Some(vec!["for_statement", "for_range_loop"]),
        Shape::Function(_) | Shape::BoundFunction => Some(vec!["function_definition"]),
        Shape::DefCall => Some(vec!["call_expression"]),
    }
}

/// Whether `text` begins with `prefix`, whitespace in `text` aside (leaves
/// are tokens; the source may space them).
fn starts_with_tokens(text: &str, prefix: &str) -> bool {
    // A line continuation (`\` before a line break) is layout too.
    let b = text.as_bytes();
    let layout = |i: usize, c: char| c.is_whitespace() || (c == '\\' && matches!(b.get(i + 1), Some(b'\n' | b'\r')));
    let mut src = text.char_indices().filter(|&(i, c)| !layout(i, c)).map(|(_, c)| c);
    prefix.chars().filter(|c| !c.is_whitespace()).all(|p| src.next() == Some(p))
}

/// Appends the literal text every match of `p` starts with: its leaves up
/// to the first hole, or to the opening bracket of an argument list (whose
/// keyword arguments match in any order, and whose separators an empty
/// sequence does without). Returns whether `p` was literal throughout.
fn literal_prefix(p: &PNode, out: &mut String) -> bool {
    if p.hole != Hole::No {
        return false;
    }
    if p.is_leaf() {
        out.push_str(&p.text);
        return true;
    }
    if p.kind == "argument_list" {
        if let Some(open) = p.children.first().filter(|c| !c.named && c.is_leaf()) {
            out.push_str(&open.text);
        }
        return false;
    }
    p.children.iter().all(|c| literal_prefix(c, out))
}

/// The node of `kind` spanning exactly `start..end`.
fn node_at<'t>(tree: &'t Tree, kind: &str, start: usize, end: usize) -> Option<Node<'t>> {
    let mut n = tree.root_node().descendant_for_byte_range(start, end)?;
    loop {
        if n.kind() == kind && n.start_byte() == start && n.end_byte() == end {
            return Some(n);
        }
        n = n.parent().filter(|p| p.start_byte() == start && p.end_byte() == end)?;
    }
}

/// Calls `f` with each node of `tree` that matches `t`, as [`find`] lists them.
pub(crate) fn for_each_site<'t>(
    t: &Template,
    src: &str,
    tree: &'t Tree,
    scope: Scope,
    mut f: impl FnMut(Node<'t>, Match),
) {
    if scope == Scope::Kernels
        && let Some(kinds) = root_kinds(t)
    {
        let ix = site_index(t.lang, src, tree);
        let language = tree.language();
        // A kind name can stand for several ids (aliases): compare names.
        let mut sites: Vec<(usize, usize, &str)> = Vec::new();
        for (id, ranges) in &ix.by_kind {
            let Some(name) = language.node_kind_for_id(*id) else { continue };
            if let Some(kind) = kinds.iter().find(|k| **k == name) {
                sites.extend(ranges.iter().map(|&(s, e)| (s, e, *kind)));
            }
        }
        sites.sort_by_key(|&(s, e, _)| (s, std::cmp::Reverse(e)));
        // A site's text starts with the template's first leaf, when that is
        // literal text (`tl.load` of `tl.load($$$A)`): a cheap test before
        // the node is looked up and matched.
        let prefix: String = match &t.shape {
            Shape::Tree(p) => {
                let mut out = String::new();
                literal_prefix(p, &mut out);
                out
            }
            _ => String::new(),
        };
        // `tl.dot` is also `T.dot` where the file imports triton.language as T.
        let prefixes: Vec<String> = std::iter::once(prefix.clone())
            .chain(
                prefix
                    .strip_prefix("tl.")
                    .into_iter()
                    .flat_map(|rest| ix.tl_names.iter().map(move |n| format!("{n}.{rest}"))),
            )
            .collect();
        for (start, end, kind) in sites {
            if !src.get(start..end).is_some_and(|text| prefixes.iter().any(|p| starts_with_tokens(text, p))) {
                continue;
            }
            if let Some(node) = node_at(tree, kind, start, end)
                && let Some(m) = match_with(t, src, node, ix.tl_names.clone())
            {
                f(node, m);
            }
        }
        return;
    }
    if scope == Scope::Launches {
        if t.lang != kidiom_syntax::Lang::Python {
            return;
        }
        for launch in kidiom_syntax::kernel_launches(src, tree) {
            if let Some(node) = node_at(tree, "call", launch.call.start, launch.call.end)
                && let Some(m) = match_with(t, src, node, Rc::new(Vec::new()))
            {
                f(node, m);
            }
        }
        return;
    }
    let kernels: Vec<Range<usize>> = match scope {
        Scope::Kernels => kernel_ranges(t.lang, src, tree)
            .into_iter()
            .filter(|k| k.kind != KernelKind::Binding)
            .map(|k| k.range)
            .collect(),
        Scope::Bindings => kernel_ranges(t.lang, src, tree)
            .into_iter()
            .filter(|k| k.kind == KernelKind::Binding)
            .map(|k| k.range)
            .collect(),
        Scope::Anywhere | Scope::Launches => std::iter::once(0..src.len()).collect(),
    };
    let root = tree.root_node();
    kidiom_syntax::preorder(root, |node| {
        let (start, end) = (node.start_byte(), node.end_byte());
        let inside = kernels.iter().any(|k| k.start <= start && end <= k.end);
        if inside
            && !node.is_error()
            && !node.is_missing()
            && let Some(m) = match_at(t, src, node)
        {
            f(node, m);
        }
        // Error subtrees are not matched into; subtrees with no kernel are skipped.
        let overlaps = kernels.iter().any(|k| k.start < end && start < k.end);
        (overlaps || node == root) && !node.is_error()
    });
}

/// Matches `t` at exactly `node`.
pub(crate) fn match_at(t: &Template, src: &str, node: Node) -> Option<Match> {
    match_with(t, src, node, Rc::new(Vec::new()))
}

/// [`match_at`], where `tl.` in the template also matches the file's other
/// spellings of Triton's language module (`tl_names`).
pub(crate) fn match_with(t: &Template, src: &str, node: Node, tl_names: Rc<Vec<String>>) -> Option<Match> {
    match &t.shape {
        Shape::Tree(p) => {
            if p.hole == Hole::No && p.kind != node.kind() {
                return None; // the cheap test first
            }
            let mut st = State { captures: BTreeMap::new(), leaves: vec![None; t.leaves.len()], tl_names };
            if match_node(p, node, src, &mut st) {
                Some(Match { range: node.byte_range(), captures: st.captures, leaves: st.leaves })
            } else {
                None
            }
        }
        Shape::Loop => matches!(node.kind(), "for_statement" | "for_range_loop").then(|| Match {
            range: node.byte_range(),
            captures: BTreeMap::new(),
            leaves: Vec::new(),
        }),
        Shape::DefCall => {
            let f = node.child_by_field_name("function").filter(|_| node.kind() == "call_expression")?;
            let field = f.child_by_field_name("field").filter(|_| f.kind() == "field_expression")?;
            (text(src, field) == "def").then(|| Match {
                range: node.byte_range(),
                captures: BTreeMap::new(),
                leaves: Vec::new(),
            })
        }
        Shape::BoundFunction => (node.kind() == "function_definition").then(|| Match {
            range: node.byte_range(),
            captures: BTreeMap::new(),
            leaves: Vec::new(),
        }),
        Shape::Function(q) => {
            if node.kind() != "function_definition" {
                return None;
            }
            let decl = node.child_by_field_name("declarator")?;
            let prefix = src.get(node.start_byte()..decl.start_byte())?;
            let at = word_offset(prefix, q)?;
            let start = node.start_byte() + at;
            let mut captures = BTreeMap::new();
            captures
                .insert("QUALIFIER".to_string(), Capture { range: start..start + q.len(), kind: q.clone(), nodes: 1 });
            Some(Match { range: node.byte_range(), captures, leaves: Vec::new() })
        }
    }
}

/// Byte offset of `word` as a whole word in `text`.
pub(crate) fn word_offset(text: &str, word: &str) -> Option<usize> {
    let ident = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    text.match_indices(word)
        .find(|(i, _)| !ident(text[..*i].chars().next_back()) && !ident(text[i + word.len()..].chars().next()))
        .map(|(i, _)| i)
}

#[derive(Clone)]
struct State {
    captures: BTreeMap<String, Capture>,
    leaves: Vec<Option<Range<usize>>>,
    /// The file's spellings of `triton.language` besides `tl`.
    tl_names: Rc<Vec<String>>,
}

fn text<'s>(src: &'s str, n: Node) -> &'s str {
    src.get(n.byte_range()).unwrap_or("")
}

fn bind(st: &mut State, name: &str, cap: Capture, src: &str) -> bool {
    if let Some(prev) = st.captures.get(name) {
        // A name used twice must capture equal text.
        let a = src.get(prev.range.clone()).unwrap_or("");
        let b = src.get(cap.range.clone()).unwrap_or("");
        return a == b;
    }
    st.captures.insert(name.to_string(), cap);
    true
}

fn match_node(p: &PNode, t: Node, src: &str, st: &mut State) -> bool {
    match &p.hole {
        Hole::Any => {
            st.leaves[p.leaf] = Some(t.byte_range());
            return t.is_named();
        }
        Hole::Single(name) => {
            if !t.is_named() {
                return false;
            }
            st.leaves[p.leaf] = Some(t.byte_range());
            let cap = Capture { range: t.byte_range(), kind: t.kind().to_string(), nodes: 1 };
            return bind(st, name, cap, src);
        }
        Hole::Seq(_) => {
            // A sequence hole in a single-node position captures that node.
            return match_seq(std::slice::from_ref(p), &[t], t.start_byte(), src, st);
        }
        Hole::No => {}
    }
    if p.kind == "attribute" && t.kind() == "attribute" && !st.tl_names.is_empty() && tl_alias(p, t, src, st) {
        return true;
    }
    if p.kind != t.kind() || p.named != t.is_named() {
        return false;
    }
    if p.is_leaf() {
        if text(src, t) != p.text {
            return false;
        }
        st.leaves[p.leaf] = Some(t.byte_range());
        return true;
    }
    let mut c = t.walk();
    let children: Vec<Node> = t.children(&mut c).filter(|n| !is_comment(*n)).collect();
    if p.kind == "argument_list" {
        return match_args(p, t, &children, src, st);
    }
    match_seq(&p.children, &children, t.start_byte(), src, st)
}

/// `tl.name` in the template against `T.name` or `T.math.name` in the
/// target, where the file spells `triton.language` as `T`: the template's
/// object leaf takes the target's object, its name leaf the target's name,
/// so an edit of the name (`exp` -> `exp2`) keeps the file's spelling.
fn tl_alias(p: &PNode, t: Node, src: &str, st: &mut State) -> bool {
    let [obj, dot, name] = p.children.as_slice() else { return false };
    if obj.text != "tl" || dot.text != "." || !obj.is_leaf() || !name.is_leaf() || name.hole != Hole::No {
        return false;
    }
    let (Some(tobj), Some(tname)) = (t.child_by_field_name("object"), t.child_by_field_name("attribute")) else {
        return false;
    };
    let spelled: String = text(src, tobj).split_whitespace().collect();
    if text(src, tname) != name.text || !st.tl_names.contains(&spelled) {
        return false;
    }
    let Some(tdot) = tobj.next_sibling().filter(|d| text(src, *d) == ".") else { return false };
    st.leaves[obj.leaf] = Some(tobj.byte_range());
    st.leaves[dot.leaf] = Some(tdot.byte_range());
    st.leaves[name.leaf] = Some(tname.byte_range());
    true
}

/// Matches template children against target children; sequence holes take
/// any run, tried shortest first. `pos` is where an empty run would sit.
/// An empty run does without the separator next to it, as ast-grep's
/// `$$$` does: `$$$A, x` matches `x`, and `x, $$$B` matches `x`.
fn match_seq(ps: &[PNode], ts: &[Node], pos: usize, src: &str, st: &mut State) -> bool {
    let Some((p0, prest)) = ps.split_first() else { return ts.is_empty() };
    if let Hole::Seq(name) = &p0.hole {
        for k in 0..=ts.len() {
            let mut trial = st.clone();
            let range = if k == 0 {
                let at = ts.first().map(|n| n.start_byte()).unwrap_or(pos);
                at..at
            } else {
                ts[0].start_byte()..ts[k - 1].end_byte()
            };
            trial.leaves[p0.leaf] = Some(range.clone());
            let kind = if k == 0 { String::new() } else { ts[0].kind().to_string() };
            let ok_bind = name == "_" || bind(&mut trial, name, Capture { range: range.clone(), kind, nodes: k }, src);
            if !ok_bind {
                continue;
            }
            let next = if k == 0 { pos } else { range.end };
            if match_seq(prest, &ts[k..], next, src, &mut trial) {
                *st = trial;
                return true;
            }
            if k == 0
                && let Some((sep, rest)) = prest.split_first()
                && is_separator(sep)
                && match_seq(rest, ts, next, src, &mut trial)
            {
                *st = trial;
                return true;
            }
        }
        return false;
    }
    if let Some((t0, trest)) = ts.split_first() {
        let mut trial = st.clone();
        if match_node(p0, *t0, src, &mut trial) && match_seq(prest, trest, t0.end_byte(), src, &mut trial) {
            *st = trial;
            return true;
        }
    }
    // `x, $$$B` against `x`: the separator goes with the empty run.
    if is_separator(p0)
        && let Some((seq, rest)) = prest.split_first()
        && let Hole::Seq(name) = &seq.hole
    {
        let mut trial = st.clone();
        trial.leaves[seq.leaf] = Some(pos..pos);
        let empty = Capture { range: pos..pos, kind: String::new(), nodes: 0 };
        if (name == "_" || bind(&mut trial, name, empty, src)) && match_seq(rest, ts, pos, src, &mut trial) {
            *st = trial;
            return true;
        }
    }
    false
}

/// A template's `,` between items.
fn is_separator(p: &PNode) -> bool {
    !p.named && p.is_leaf() && p.hole == Hole::No && p.text == ","
}

/// Argument lists: keyword arguments of the template match keyword
/// arguments of the target in any position; the other items match the
/// remaining target items in order, sequence holes taking any run.
fn match_args(p: &PNode, t: Node, children: &[Node], src: &str, st: &mut State) -> bool {
    let open = p.children.first().filter(|c| !c.named);
    let close = p.children.last().filter(|c| !c.named && p.children.len() > 1);
    if let (Some(o), Some(first)) = (open, children.first()) {
        if text(src, *first) != o.text {
            return false;
        }
        st.leaves[o.leaf] = Some(first.byte_range());
    }
    if let (Some(c), Some(last)) = (close, children.last()) {
        if text(src, *last) != c.text {
            return false;
        }
        st.leaves[c.leaf] = Some(last.byte_range());
    }
    let items: Vec<Node> = children.iter().copied().filter(|n| n.is_named()).collect();
    let pitems: Vec<&PNode> = p.children.iter().filter(|c| c.named).collect();
    let mut claimed = vec![false; items.len()];
    let mut rest_p: Vec<PNode> = Vec::new();
    for pi in pitems {
        if pi.kind == "keyword_argument" && pi.hole == Hole::No {
            let mut found = false;
            for (j, ti) in items.iter().enumerate() {
                if claimed[j] || ti.kind() != "keyword_argument" {
                    continue;
                }
                let mut trial = st.clone();
                if match_node(pi, *ti, src, &mut trial) {
                    *st = trial;
                    claimed[j] = true;
                    found = true;
                    break;
                }
            }
            if !found {
                return false;
            }
        } else {
            rest_p.push(pi.clone());
        }
    }
    let rest_t: Vec<Node> = items.iter().zip(&claimed).filter(|(_, c)| !**c).map(|(n, _)| *n).collect();
    let pos = children.first().map(|n| n.end_byte()).unwrap_or(t.start_byte());
    if !match_seq(&rest_p, &rest_t, pos, src, st) {
        return false;
    }
    separators(p, children, src, st);
    true
}

/// Gives the separators of a matched argument list (`,`) their target
/// bytes: the one separator of the same text between the targets of its
/// two neighbours. Items matched in another order (keyword arguments) or
/// an empty sequence leave a separator without one. A rewrite anchors
/// insertions on these (`range(0, BC)` -> `range(0, min(BC, N))`).
fn separators(p: &PNode, children: &[Node], src: &str, st: &mut State) {
    for (k, c) in p.children.iter().enumerate() {
        if c.named || !c.is_leaf() || st.leaves[c.leaf].is_some() || k == 0 {
            continue;
        }
        let (Some(prev), Some(next)) = (p.children.get(k - 1), p.children.get(k + 1)) else { continue };
        let (Some(Some(a)), Some(Some(b))) = (st.leaves.get(last_leaf(prev)), st.leaves.get(first_leaf(next))) else {
            continue;
        };
        let (from, to) = (a.end, b.start);
        let mut found = children
            .iter()
            .filter(|n| !n.is_named() && from <= n.start_byte() && n.end_byte() <= to && text(src, **n) == c.text);
        if let (Some(one), None) = (found.next(), found.next()) {
            st.leaves[c.leaf] = Some(one.byte_range());
        }
    }
}

/// The leaf index of a template node's first (last) leaf.
fn first_leaf(p: &PNode) -> usize {
    let mut n = p;
    while !n.is_leaf() {
        let Some(c) = n.children.first() else { return usize::MAX };
        n = c;
    }
    n.leaf
}

fn last_leaf(p: &PNode) -> usize {
    let mut n = p;
    while !n.is_leaf() {
        let Some(c) = n.children.last() else { return usize::MAX };
        n = c;
    }
    n.leaf
}

#[cfg(test)]
mod prefix_tests {
    use super::starts_with_tokens;

    #[test]
    fn token_prefixes_ignore_spacing() {
        assert!(starts_with_tokens("tl.load(x)", "tl.load("));
        assert!(starts_with_tokens("tl . load (x)", "tl.load("));
        assert!(starts_with_tokens("anything", ""));
        assert!(!starts_with_tokens("tl.store(x)", "tl.load("));
        assert!(!starts_with_tokens("tl", "tl.load"));
        assert!(starts_with_tokens("x = a + \\\n    b", "x=a+b"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kidiom_syntax::Lang;

    /// The texts of the sites `pattern` matches in `src` (Python, anywhere).
    fn check(src: &str, pattern: &str) -> Vec<String> {
        let t = Template::parse(Lang::Python, pattern).unwrap();
        let tree = kidiom_syntax::parse_tree(Lang::Python, src).unwrap().unwrap();
        find(&t, src, &tree, Scope::Anywhere).into_iter().map(|m| src[m.range].to_string()).collect()
    }

    #[test]
    fn keyword_arguments_match_in_any_order() {
        let src = "tl.dot(a, b, out_dtype=f, input_precision='ieee')\ntl.dot(input_precision='tf32', a=x, b=y)\ntl.dot(a, b)\n";
        assert_eq!(check(src, "tl.dot($$$ARGS, input_precision=$V)").len(), 2);
        assert_eq!(check(src, "tl.dot(input_precision=$V, $$$ARGS)").len(), 2);
        assert_eq!(check(src, "tl.dot($A, $B)"), ["tl.dot(a, b)"]);
        assert_eq!(check(src, "tl.dot($$$ARGS)").len(), 3);
    }

    #[test]
    fn tl_matches_the_files_own_spellings_of_triton_language() {
        let src = "import triton\nimport triton.language as T\nfrom triton.language import dot\n\n\n@triton.jit\ndef k(a):\n    b = T.dot(a, a)\n    c = T.math.exp(b) + tl.math.exp(b) + dot(a, b) + U.exp(b)\n";
        let tree = kidiom_syntax::parse_tree(Lang::Python, src).unwrap().unwrap();
        let root = tree.root_node();
        assert_eq!(tl_spellings(src, root), ["T", "T.math", "tl.math", "triton.language", "triton.language.math"]);
        let sites = |p: &str| -> Vec<String> {
            let t = Template::parse(Lang::Python, p).unwrap();
            find(&t, src, &tree, Scope::Kernels).into_iter().map(|m| src[m.range].to_string()).collect()
        };
        assert_eq!(sites("tl.dot($$$ARGS)"), ["T.dot(a, a)"], "a from-import (`dot`) is not rewritten");
        assert_eq!(sites("tl.exp($X)"), ["T.math.exp(b)", "tl.math.exp(b)"], "`U` is not triton.language");
        // the rewrite keeps the file's spelling, and a rewritten site is not found again
        let p = crate::RewriteSpec::usage(
            "p",
            Lang::Python,
            "tl.dot($$$ARGS)",
            "tl.dot($$$ARGS, input_precision=$V)",
            &["\"ieee\""],
        );
        let rw = Rewrite::new(&p, None).unwrap();
        let edits = rw.site_edits(src, &tree);
        assert_eq!(edits.len(), 1);
        let out = apply_edits(src, &edits[0].edits).unwrap();
        assert!(out.contains("b = T.dot(a, a, input_precision=\"ieee\")"), "{out}");
        let tree2 = kidiom_syntax::parse_tree(Lang::Python, &out).unwrap().unwrap();
        assert!(rw.site_edits(&out, &tree2).is_empty());
    }

    #[test]
    fn sequence_holes_anywhere() {
        let src = "f(1, 2, 3)\nf(3)\nf(1, 3, 2)\n";
        assert_eq!(check(src, "f($$$A, 3)"), ["f(1, 2, 3)", "f(3)"]);
        assert_eq!(check(src, "f($$$A, 3, $$$B)").len(), 3);
        assert_eq!(check(src, "f(1, $$$REST)"), ["f(1, 2, 3)", "f(1, 3, 2)"]);
    }

    #[test]
    fn an_empty_sequence_takes_its_separator() {
        let src = "g([x])\ng([y, x])\ng([x, y])\n";
        assert_eq!(check(src, "g([$$$A, x])"), ["g([x])", "g([y, x])"]);
        assert_eq!(check(src, "g([x, $$$B])"), ["g([x])", "g([x, y])"]);
        assert_eq!(check(src, "g([x, $$$B, y])"), ["g([x, y])"]);
    }

    #[test]
    fn kernel_sites_are_found_past_optional_separators_and_line_continuations() {
        let src = "import triton\nimport triton.language as tl\n@triton.jit\ndef k(a, b):\n    c = tl.dot(a, b)\n    d = tl.dot(b, a, input_precision=\"ieee\")\n    e = a + \\\n        b\n";
        let tree = kidiom_syntax::parse_tree(Lang::Python, src).unwrap().unwrap();
        let sites = |p: &str| -> Vec<String> {
            let t = Template::parse(Lang::Python, p).unwrap();
            find(&t, src, &tree, Scope::Kernels).into_iter().map(|m| src[m.range].to_string()).collect()
        };
        assert_eq!(sites("tl.dot(a, b, $$$A)"), ["tl.dot(a, b)"]);
        assert_eq!(sites("tl.dot(input_precision=$V, $$$A)"), ["tl.dot(b, a, input_precision=\"ieee\")"]);
        assert_eq!(sites("e = a + b"), ["e = a + \\\n        b"]);
    }

    #[test]
    fn repeated_metavariables_must_agree() {
        let src = "x = f(x, 1)\ny = f(z, 1)\n";
        assert_eq!(check(src, "$X = f($X, $V)"), ["x = f(x, 1)"]);
        assert_eq!(check(src, "$_ = f($_, 1)").len(), 2);
    }

    #[test]
    fn comments_and_strings_are_not_sites() {
        let src = "# tl.exp(x)\ns = 'tl.exp(x)'\ny = tl.exp(x)  # tl.exp(z)\n";
        assert_eq!(check(src, "tl.exp($X)"), ["tl.exp(x)"]);
    }

    #[test]
    fn only_inside_kernels_by_default() {
        let src = "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x):\n    y = tl.exp(x)\n\ndef host(x):\n    return tl.exp(x)\n";
        let t = Template::parse(Lang::Python, "tl.exp($X)").unwrap();
        let tree = kidiom_syntax::parse_tree(Lang::Python, src).unwrap().unwrap();
        let ms = find(&t, src, &tree, Scope::Kernels);
        assert_eq!(ms.len(), 1);
        assert!(ms[0].range.start < src.find("def host").unwrap());
    }
}

/// Property tests: templates parsed from random bytes, and matching on
/// mutated kernel sources, never panic.
#[cfg(test)]
mod properties {
    use kidiom_syntax::Lang;
    use proptest::prelude::*;

    use super::*;
    use crate::testutil::mutate;

    const TRITON: &str = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(x, y, o, T, BT: tl.constexpr):\n    i = tl.program_id(0)\n    a = tl.load(x + i * BT + tl.arange(0, BT), mask=i < T, other=0.0)\n    b = tl.dot(a, tl.trans(a), input_precision=\"tf32\")\n    c = tl.exp(b) * tl.sum(a[:, None], axis=0)\n    tl.store(o + i, c.to(tl.float16), mask=i < T)\n\n\ndef launch(x, o):\n    k[(1,)](x, x, o, 1, BT=16)\n";
    const CUDA: &str = "#include <cuda_runtime.h>\n__device__ __forceinline__ float twice(float x) { return 2.0f * x; }\nextern \"C\" __global__ void __launch_bounds__(128) k(const float* __restrict__ x, float* o, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n#pragma unroll\n    for (int j = 0; j < 4; j++) { if (i < n) o[i] = __expf(twice(x[i])) + __ldg(&x[j]); }\n}\n";
    const TEMPLATES: &[(Lang, &str)] = &[
        (Lang::Python, "tl.dot($A, $B)"),
        (Lang::Python, "tl.dot($$$ARGS)"),
        (Lang::Python, "tl.load($P, $$$REST)"),
        (Lang::Python, "tl.exp($X)"),
        (Lang::Python, "$F($$$ARGS, mask=$M)"),
        (Lang::Python, "$X.to($T)"),
        (Lang::Cuda, "__expf($X)"),
        (Lang::Cuda, "$R $F($$$PARAMS) { $$$BODY }"),
        (Lang::Cuda, "for ($$$H) { $$$B }"),
    ];

    fn edits() -> impl Strategy<Value = Vec<(usize, usize, String)>> {
        prop::collection::vec((any::<usize>(), any::<usize>(), "[(){}\\[\\]:,.@$#\"'=+*/ \n\tabxy0-9_]{0,6}"), 0..8)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

        #[test]
        fn templates_from_random_text_never_panic(s in "(?s).{0,60}", lang in prop::sample::select(vec![Lang::Python, Lang::Cuda, Lang::Cpp])) {
            if let Ok(t) = Template::parse(lang, &s) {
                let src = if lang == Lang::Python { TRITON } else { CUDA };
                if let Ok(Some(tree)) = kidiom_syntax::parse_tree(lang, src) {
                    for scope in [Scope::Kernels, Scope::Anywhere, Scope::Bindings] {
                        let _ = find(&t, src, &tree, scope);
                    }
                }
            }
        }

        #[test]
        fn matching_mutated_kernels_never_panics(e in edits(), which in 0..TEMPLATES.len(), tmut in edits()) {
            let (lang, pattern) = TEMPLATES[which];
            let src = mutate(if lang == Lang::Python { TRITON } else { CUDA }, &e);
            let Ok(Some(tree)) = kidiom_syntax::parse_tree(lang, &src) else { return Ok(()) };
            for p in [pattern.to_string(), mutate(pattern, &tmut)] {
                if let Ok(t) = Template::parse(lang, &p) {
                    for scope in [Scope::Kernels, Scope::Anywhere, Scope::Bindings] {
                        for m in find(&t, &src, &tree, scope) {
                            prop_assert!(m.range.end <= src.len() && src.is_char_boundary(m.range.start));
                        }
                    }
                }
            }
        }
    }
}
