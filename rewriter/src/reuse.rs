//! Redundant work removed from C++ and CUDA loops: a value that a loop
//! computes again after an earlier sibling loop over the same range
//! computed it (a pure call on the same arguments, or global data read again
//! with no store between) is kept from the first loop and reused.
//!
//! The two loops are siblings in one block with the same header (`for (int
//! i = A; i < B; i++)`, `++i` or `i += 1`), neither jumps out (`break`,
//! `continue`, `return`, `goto`), and nothing in or between them assigns a
//! name the value depends on. A read of `p[e]` is kept only when nothing
//! stores through `p` in the first loop or between the loops, and the second
//! loop stores through `p` only at the same element, after reading it (the
//! store then changes an element no later iteration reads: `e` mentions the
//! loop variable). Distinct buffers are taken not to overlap, as a kernel's
//! manifest promises of its arguments.
//!
//! Where a kept value lives ([`ReuseForm`]): a thread-local array of
//! [`KEPT_MAX`] elements, used when the loop's extent (a runtime value) fits
//! and the original expression otherwise (`kept_fit ? kept_x[i] : x`); or,
//! for a value no thread of a block computes differently, an array in shared
//! memory the block fills once before the loops, behind a barrier. The first
//! loop stores what it computes (`(kept_fit ? (kept_x[i] = x) : x)`), so each
//! value is still computed where it was, once. A rewritten loop keeps its
//! expressions only under a `kept_` guard, which this module never matches
//! again (the rewrite is idempotent).

use std::collections::{BTreeMap, HashSet};
use std::ops::Range;

use kidiom_syntax::Lang;
use tree_sitter::{Node, Tree};

use crate::matcher::{Edit, SiteEdits};

/// Where a kept value lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReuseForm {
    /// Each thread keeps its values in a thread-local array.
    Local,
    /// Values every thread of a block computes identically are computed once
    /// per block into shared memory behind a barrier (CUDA); the rest as
    /// [`ReuseForm::Local`].
    Shared,
    /// What a block of a Triton kernel evaluates again on the same
    /// arguments is evaluated once into a temporary (`crate::reuse_triton`).
    Temporary,
    /// Not a reuse, the other analysis-made rewrite of a Triton kernel: its
    /// state is cast to fp32 at the load and back at the store
    /// (`crate::state_cast`), so it is agnostic of the state's storage dtype.
    StateCast,
}

/// Elements of a kept array: a loop whose extent is larger takes the
/// original path.
pub const KEPT_MAX: usize = 128;

/// Functions without side effects whose result depends on their arguments
/// only, with their result type.
const PURE: &[(&str, &str)] = &[
    ("expf", "float"),
    ("exp2f", "float"),
    ("__expf", "float"),
    ("expm1f", "float"),
    ("logf", "float"),
    ("log2f", "float"),
    ("__logf", "float"),
    ("log1pf", "float"),
    ("sqrtf", "float"),
    ("rsqrtf", "float"),
    ("sinf", "float"),
    ("cosf", "float"),
    ("__sinf", "float"),
    ("__cosf", "float"),
    ("tanhf", "float"),
    ("powf", "float"),
    ("__powf", "float"),
    ("__fdividef", "float"),
    ("fabsf", "float"),
    ("erff", "float"),
    ("exp", "double"),
    ("exp2", "double"),
    ("log", "double"),
    ("sqrt", "double"),
    ("tanh", "double"),
    ("pow", "double"),
];

/// The element types a kept array may have (a load's pointee).
const SCALARS: &[&str] = &["float", "double", "int", "unsigned", "long", "short", "char", "__half", "half", "bool"];

/// The sites of `form` in `src`: one per pair of sibling loops with
/// something to keep, each with all its edits.
pub(crate) fn site_edits(form: ReuseForm, lang: Lang, src: &str, tree: &Tree) -> Vec<SiteEdits> {
    if !matches!(lang, Lang::Cpp | Lang::Cuda) {
        return Vec::new();
    }
    let shared = form == ReuseForm::Shared && lang == Lang::Cuda;
    let mut out = Vec::new();
    let mut functions = Vec::new();
    collect(tree.root_node(), "function_definition", &mut functions);
    for f in functions {
        let Some(body) = f.child_by_field_name("body") else { continue };
        let func = Function::new(src, f, body);
        // shared memory and barriers exist in kernels only
        let head_start = src[..f.start_byte()].rfind(['}', ';']).map(|i| i + 1).unwrap_or(0);
        let kernel = src.get(head_start..body.start_byte()).is_some_and(|h| h.contains("__global__"));
        let mut blocks = Vec::new();
        collect(body, "compound_statement", &mut blocks);
        for block in blocks {
            for (a, b) in loop_pairs(src, block) {
                if let Some(site) = func.reuse(src, a, b, shared && kernel) {
                    out.push(site);
                }
            }
        }
    }
    out
}

/// Every node of `kind` under `n` (itself included), in source order.
fn collect<'t>(n: Node<'t>, kind: &str, out: &mut Vec<Node<'t>>) {
    if n.kind() == kind {
        out.push(n);
    }
    let mut c = n.walk();
    for ch in n.children(&mut c) {
        collect(ch, kind, out);
    }
}

fn text<'s>(src: &'s str, n: Node) -> &'s str {
    src.get(n.byte_range()).unwrap_or("")
}

fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `for (T i = A; i < B; i++)`: the variable, its type, A and B.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Header {
    var: String,
    ty: String,
    start: String,
    bound: String,
}

fn header(src: &str, f: Node) -> Option<Header> {
    let init = f.child_by_field_name("initializer")?;
    if init.kind() != "declaration" {
        return None;
    }
    let ty = text(src, init.child_by_field_name("type")?).to_string();
    let d = init.child_by_field_name("declarator")?;
    if d.kind() != "init_declarator" || init.named_child_count() != 2 {
        return None;
    }
    let var = text(src, d.child_by_field_name("declarator")?).to_string();
    let start = squash(text(src, d.child_by_field_name("value")?));
    let cond = f.child_by_field_name("condition")?;
    let op = cond.child_by_field_name("operator").map(|o| text(src, o));
    let left = cond.child_by_field_name("left").map(|l| text(src, l));
    if cond.kind() != "binary_expression" || op != Some("<") || left != Some(var.as_str()) {
        return None;
    }
    let bound = squash(text(src, cond.child_by_field_name("right")?));
    let up = f.child_by_field_name("update")?;
    let step_one = match up.kind() {
        "update_expression" => {
            up.child_by_field_name("argument").map(|a| text(src, a)) == Some(var.as_str())
                && text(src, up).contains("++")
        }
        "assignment_expression" => {
            up.child_by_field_name("left").map(|l| text(src, l)) == Some(var.as_str())
                && up.child_by_field_name("operator").map(|o| text(src, o)) == Some("+=")
                && up.child_by_field_name("right").map(|r| text(src, r).trim()) == Some("1")
        }
        _ => false,
    };
    step_one.then_some(Header { var, ty, start, bound })
}

/// Sibling `for` statements of `block` with the same header, each with
/// the next one like it.
fn loop_pairs<'t>(src: &str, block: Node<'t>) -> Vec<(Node<'t>, Node<'t>)> {
    let mut c = block.walk();
    let loops: Vec<(Node, Header)> = block
        .named_children(&mut c)
        .filter(|n| n.kind() == "for_statement")
        .filter_map(|n| header(src, n).map(|h| (n, h)))
        .collect();
    let mut pairs = Vec::new();
    for (i, (a, ha)) in loops.iter().enumerate() {
        if let Some((b, _)) = loops[i + 1..].iter().find(|(_, hb)| hb == ha) {
            pairs.push((*a, *b));
        }
    }
    pairs
}

/// Whether `n` holds a jump out of its loop.
fn jumps(n: Node) -> bool {
    let mut all = Vec::new();
    for k in ["break_statement", "continue_statement", "return_statement", "goto_statement"] {
        collect(n, k, &mut all);
    }
    !all.is_empty()
}

/// Names assigned, declared or incremented in `n`, and the buffers stored
/// through in it (`p[e] = ...`, `*p = ...`), with each store's index text.
#[derive(Default)]
struct Writes {
    names: HashSet<String>,
    stores: Vec<(String, Option<String>, usize)>,
}

fn writes(src: &str, n: Node, w: &mut Writes) {
    let target = match n.kind() {
        "assignment_expression" => n.child_by_field_name("left"),
        "update_expression" => n.child_by_field_name("argument"),
        "init_declarator" | "declaration" => {
            // what a declaration declares (`float x;`, `const float* p = ...`, `float a[4];`)
            let mut c = n.walk();
            let decls: Vec<Node> = n.children_by_field_name("declarator", &mut c).collect();
            for d in decls {
                if let Some(name) = declared_name(src, d) {
                    w.names.insert(name);
                }
            }
            None
        }
        _ => None,
    };
    // a store takes effect when its assignment completes: reads in its right side come first
    let done = n.end_byte();
    if let Some(t) = target {
        match t.kind() {
            "identifier" => {
                w.names.insert(text(src, t).to_string());
            }
            "subscript_expression" => {
                if let Some(base) = t.child_by_field_name("argument") {
                    let idx = t.child_by_field_name("indices").map(|i| squash(text(src, i)));
                    w.stores.push((squash(text(src, base)), idx, done));
                }
            }
            _ => {
                // `*p = ...`, `p->x = ...`: a store through whatever it names
                let mut ids = Vec::new();
                collect(t, "identifier", &mut ids);
                for id in ids {
                    w.stores.push((text(src, id).to_string(), None, done));
                }
            }
        }
    }
    let mut c = n.walk();
    for ch in n.children(&mut c) {
        writes(src, ch, w);
    }
}

/// The name a declarator declares (`*p`, `a[4]`, `&r` unwrapped); `None` for an
/// `init_declarator`, whose own declarator is met when the walk goes down.
fn declared_name(src: &str, d: Node) -> Option<String> {
    let mut d = d;
    loop {
        match d.kind() {
            "identifier" => return Some(text(src, d).to_string()),
            "pointer_declarator" | "reference_declarator" | "array_declarator" | "parenthesized_declarator" => {
                d = d.child_by_field_name("declarator").or_else(|| d.named_child(0))?;
            }
            _ => return None,
        }
    }
}

fn writes_in(src: &str, nodes: &[Node]) -> Writes {
    let mut w = Writes::default();
    for n in nodes {
        writes(src, *n, &mut w);
    }
    w
}

/// The identifiers `e` reads (a call's function name and field names aside).
fn names(src: &str, e: Node) -> HashSet<String> {
    let mut ids = Vec::new();
    collect(e, "identifier", &mut ids);
    ids.into_iter()
        .filter(|id| {
            id.parent()
                .is_none_or(|p| !(p.kind() == "call_expression" && p.child_by_field_name("function") == Some(*id)))
        })
        .map(|id| text(src, id).to_string())
        .collect()
}

/// `(base, index)` of every subscript read in `e`.
fn reads(src: &str, e: Node) -> Vec<(String, String)> {
    let mut subs = Vec::new();
    collect(e, "subscript_expression", &mut subs);
    subs.into_iter()
        .filter_map(|s| {
            let base = s.child_by_field_name("argument")?;
            let idx = s.child_by_field_name("indices")?;
            Some((squash(text(src, base)), squash(text(src, idx))))
        })
        .collect()
}

/// Whether `e` is written to rather than read (`e = ...`, `e++`, `&e`).
fn is_lvalue(src: &str, e: Node) -> bool {
    let Some(p) = e.parent() else { return false };
    match p.kind() {
        "assignment_expression" => p.child_by_field_name("left") == Some(e),
        "update_expression" => true,
        "pointer_expression" => p.child_by_field_name("operator").is_some_and(|o| text(src, o) == "&"),
        _ => false,
    }
}

/// Whether `e` is evaluated on every iteration of the loop body `body`
/// (no condition, short circuit or inner loop between them).
fn unconditional(e: Node, body: Node) -> bool {
    let mut n = e;
    while let Some(p) = n.parent() {
        if p == body {
            return true;
        }
        match p.kind() {
            "conditional_expression"
            | "if_statement"
            | "for_statement"
            | "while_statement"
            | "do_statement"
            | "switch_statement"
            | "lambda_expression"
            | "case_statement" => return false,
            "binary_expression"
                if p.child_by_field_name("operator").is_some_and(|o| matches!(o.kind(), "&&" | "||")) =>
            {
                return false;
            }
            _ => {}
        }
        n = p;
    }
    false
}

/// Whether `e` is already a kept value's fallback (`kept_x ? ... : e`).
fn already_kept(src: &str, e: Node) -> bool {
    let mut n = e;
    while let Some(p) = n.parent() {
        match p.kind() {
            "parenthesized_expression" | "assignment_expression" => n = p,
            "conditional_expression" => {
                return p.child_by_field_name("condition").is_some_and(|c| text(src, c).trim().starts_with("kept_"));
            }
            _ => return false,
        }
    }
    false
}

/// A value computed in a loop, as kidiom may keep it: a pure call or a read.
fn keepable<'t>(src: &str, n: Node<'t>) -> Option<(Node<'t>, String)> {
    match n.kind() {
        "call_expression" => {
            let f = text(src, n.child_by_field_name("function")?);
            PURE.iter().find(|(p, _)| *p == f).map(|(_, ty)| (n, ty.to_string()))
        }
        "subscript_expression" => {
            let base = n.child_by_field_name("argument")?;
            (base.kind() == "identifier").then(|| (n, String::new()))
        }
        _ => None,
    }
}

/// A function's facts the rewrite needs: the element type of each pointer
/// it declares, its body's top-level statements, the names whose value
/// differs between the threads of a block.
struct Function<'t> {
    body: Node<'t>,
    pointee: BTreeMap<String, String>,
    /// The buffer each pointer points into: a parameter, or the pointer its
    /// initializer starts from (`s = state + ...` points into `state`).
    root: BTreeMap<String, String>,
    varying: HashSet<String>,
    declared: HashSet<String>,
    params: HashSet<String>,
}

impl<'t> Function<'t> {
    fn new(src: &str, f: Node<'t>, body: Node<'t>) -> Function<'t> {
        let mut pointee = BTreeMap::new();
        let mut root: BTreeMap<String, String> = BTreeMap::new();
        let mut params = HashSet::new();
        let mut decls = Vec::new();
        collect(f, "parameter_declaration", &mut decls);
        collect(body, "declaration", &mut decls);
        for d in &decls {
            let ty = d.child_by_field_name("type").map(|t| text(src, t).to_string()).unwrap_or_default();
            let mut c = d.walk();
            for decl in d.children_by_field_name("declarator", &mut c) {
                let inner =
                    if decl.kind() == "init_declarator" { decl.child_by_field_name("declarator") } else { Some(decl) };
                let Some(inner) = inner else { continue };
                let mut ids = Vec::new();
                collect(inner, "identifier", &mut ids);
                let Some(name) = ids.first().map(|i| text(src, *i).to_string()) else { continue };
                if d.kind() == "parameter_declaration" {
                    params.insert(name.clone());
                }
                if inner.kind() == "pointer_declarator" {
                    let from = (decl.kind() == "init_declarator")
                        .then(|| decl.child_by_field_name("value"))
                        .flatten()
                        .and_then(|v| names_in_order(src, v).into_iter().find_map(|n| root.get(&n).cloned()));
                    // a pointer from nothing known points into a buffer of its own
                    root.insert(name.clone(), from.unwrap_or_else(|| name.clone()));
                    if SCALARS.contains(&ty.as_str()) {
                        pointee.insert(name, ty.clone());
                    }
                }
            }
        }
        let mut declared = HashSet::new();
        let mut c = body.walk();
        for s in body.named_children(&mut c) {
            if s.kind() == "declaration" {
                declared.extend(writes_in(src, &[s]).names);
            }
        }
        Function { body, pointee, root, varying: varying(src, body), declared, params }
    }

    fn ty(&self, src: &str, e: Node, call_ty: &str) -> Option<String> {
        if !call_ty.is_empty() {
            return Some(call_ty.to_string());
        }
        let base = text(src, e.child_by_field_name("argument")?);
        self.pointee.get(base).cloned()
    }

    /// The edits that keep what loop `b` computes again after loop `a`.
    fn reuse(&self, src: &str, a: Node, b: Node, shared: bool) -> Option<SiteEdits> {
        let h = header(src, a)?;
        let (body_a, body_b) = (a.child_by_field_name("body")?, b.child_by_field_name("body")?);
        if jumps(body_a) || jumps(body_b) {
            return None;
        }
        // what the region writes: the loops and every statement between them
        let parent = a.parent()?;
        let mut c = parent.walk();
        let region: Vec<Node> = parent
            .named_children(&mut c)
            .filter(|n| n.start_byte() >= a.start_byte() && n.end_byte() <= b.end_byte())
            .collect();
        let between: Vec<Node> = region.iter().copied().filter(|n| *n != a && *n != b).collect();
        let w_all = writes_in(src, &region);
        let (w_a, w_between, w_b) = (writes_in(src, &[body_a]), writes_in(src, &between), writes_in(src, &[body_b]));
        // the loop variable counts the iterations only if no body steps or shadows it
        if w_a.names.contains(&h.var) || w_b.names.contains(&h.var) {
            return None;
        }
        let mut bound_names = HashSet::new();
        for t in [&h.start, &h.bound] {
            bound_names.extend(t.split(|ch: char| !(ch.is_alphanumeric() || ch == '_')).map(str::to_string));
        }
        if bound_names.iter().any(|n| n != &h.var && w_all.names.contains(n)) {
            return None;
        }
        // the first loop's unconditional values, by text
        let mut in_a: BTreeMap<String, Node> = BTreeMap::new();
        for n in descendants(body_a) {
            if let Some((e, _)) = keepable(src, n)
                && unconditional(e, body_a)
                && !is_lvalue(src, e)
                && !already_kept(src, e)
            {
                in_a.entry(squash(text(src, e))).or_insert(e);
            }
        }
        // the second loop's recomputations of them
        let mut keys: BTreeMap<String, (Node, String, Vec<Node>)> = BTreeMap::new();
        for n in descendants(body_b) {
            let Some((e, call_ty)) = keepable(src, n) else { continue };
            let key = squash(text(src, e));
            let Some(first) = in_a.get(&key) else { continue };
            if is_lvalue(src, e) || already_kept(src, e) {
                continue;
            }
            let ids = names(src, e);
            if !ids.contains(&h.var) || ids.iter().any(|n| n != &h.var && w_all.names.contains(n)) {
                continue;
            }
            // a store through another pointer into the same buffer may change what was read
            let buffer = |p: &str| self.root.get(p).cloned().unwrap_or_else(|| p.to_string());
            let aliased =
                |w: &Writes, base: &str| w.stores.iter().any(|(s, _, _)| s != base && buffer(s) == buffer(base));
            let stored = |w: &Writes, base: &str| w.stores.iter().any(|(s, _, _)| s == base) || aliased(w, base);
            let reads_ok = reads(src, e).iter().all(|(base, idx)| {
                !stored(&w_a, base)
                    && !stored(&w_between, base)
                    && !aliased(&w_b, base)
                    && w_b.stores.iter().filter(|(s, _, _)| s == base).all(|(_, i, at)| {
                        i.as_deref() == Some(idx.as_str())
                            && idx.split(|ch: char| !(ch.is_alphanumeric() || ch == '_')).any(|t| t == h.var)
                            && *at > e.start_byte()
                    })
            });
            if !reads_ok {
                continue;
            }
            let Some(ty) = self.ty(src, e, &call_ty) else { continue };
            keys.entry(key).or_insert_with(|| (*first, ty, Vec::new())).2.push(e);
        }
        // the outermost recomputations only, and first-loop values that do not nest
        let ranges: Vec<Range<usize>> =
            keys.values().flat_map(|(_, _, es)| es.iter().map(|e| e.byte_range())).collect();
        let firsts: Vec<Range<usize>> = keys.values().map(|(f, _, _)| f.byte_range()).collect();
        let inside =
            |r: &Range<usize>, all: &[Range<usize>]| all.iter().any(|o| o != r && o.start <= r.start && r.end <= o.end);
        keys.retain(|_, (f, _, es)| {
            es.retain(|e| !inside(&e.byte_range(), &ranges));
            !es.is_empty() && !inside(&f.byte_range(), &firsts)
        });
        if keys.is_empty() {
            return None;
        }
        let taken = identifiers(src, self.body);
        let mut fresh = Fresh { taken };
        let extent = if h.start == "0" { h.bound.clone() } else { format!("({}) - ({})", h.bound, h.start) };
        let index = if h.start == "0" { h.var.clone() } else { format!("{} - ({})", h.var, h.start) };
        let mut edits = Vec::new();
        let (mut local_decls, mut shared_fill) = (Vec::new(), Vec::new());
        let fit = fresh.name("kept_fit");
        let mut uses_fit = false;
        let top = self.top_statement(a);
        let shared_at = top.filter(|t| shared && self.may_share_before(src, *t, &bound_names, &h));
        let shared_ok = shared_at.is_some();
        let sh = shared_ok.then(|| fresh.name("kept_shared"));
        let (tid, threads) = (fresh.name("kept_tid"), fresh.name("kept_threads"));
        for (key, (first, ty, es)) in &keys {
            let name = fresh.name(&format!("kept_{}", ident_of(key)));
            let e_text = text(src, *first).to_string();
            let uniform = shared_ok
                && !thread_dependent(src, *first, &self.varying)
                && names(src, *first).iter().all(|n| n == &h.var || self.visible_before(n))
                && shared_at.is_some_and(|t| {
                    // nothing stores into what it reads between the fill and the loops
                    let w = writes_in(src, &[t]);
                    reads(src, *first)
                        .iter()
                        .all(|(base, _)| !w.stores.iter().any(|(s, _, at)| s == base && *at < b.end_byte()))
                });
            if uniform {
                let sh = sh.as_deref().unwrap_or("kept_shared");
                shared_fill.push(format!("__shared__ {ty} {name}[{KEPT_MAX}];"));
                let from = if h.start == "0" { tid.clone() } else { format!("{} + {tid}", h.start) };
                shared_fill.push(format!(
                    "if ({sh}) {{\n    for ({vt} {v} = {from}; {v} < {bound}; {v} += {threads}) {{\n        {name}[{index}] = {e_text};\n    }}\n}}",
                    vt = h.ty,
                    v = h.var,
                    bound = h.bound,
                ));
                edits.push(Edit { range: first.byte_range(), text: format!("({sh} ? {name}[{index}] : {e_text})") });
                for e in es {
                    edits.push(Edit { range: e.byte_range(), text: format!("({sh} ? {name}[{index}] : {e_text})") });
                }
            } else {
                uses_fit = true;
                local_decls.push(format!("{ty} {name}[{KEPT_MAX}];"));
                edits.push(Edit {
                    range: first.byte_range(),
                    text: format!("({fit} ? ({name}[{index}] = {e_text}) : {e_text})"),
                });
                for e in es {
                    edits.push(Edit { range: e.byte_range(), text: format!("({fit} ? {name}[{index}] : {e_text})") });
                }
            }
        }
        let indent_of = |n: Node| {
            let start = n.start_byte();
            let ls = src[..start].rfind('\n').map(|i| i + 1).unwrap_or(0);
            src[ls..start].to_string()
        };
        if uses_fit {
            let ind = indent_of(a);
            let mut t = String::new();
            for d in &local_decls {
                t.push_str(&format!("{d}\n{ind}"));
            }
            t.push_str(&format!(
                "const bool {fit} = {extent} <= {KEPT_MAX};  // else the loops compute as before\n{ind}"
            ));
            edits.push(Edit { range: a.start_byte()..a.start_byte(), text: t });
        }
        let mut site = a.start_byte()..b.end_byte();
        if let (Some(t), Some(sh)) = (shared_at.filter(|_| !shared_fill.is_empty()), sh.as_deref()) {
            let ind = indent_of(t);
            let mut s = format!(
                "// computed once per block: every thread of it would compute the same values\n{ind}const bool {sh} = {extent} <= {KEPT_MAX};\n{ind}const int {tid} = (int)((threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x);\n{ind}const int {threads} = (int)(blockDim.x * blockDim.y * blockDim.z);\n{ind}"
            );
            for block in &shared_fill {
                for line in block.lines() {
                    s.push_str(&format!("{line}\n{ind}"));
                }
            }
            s.push_str(&format!("__syncthreads();\n{ind}"));
            edits.push(Edit { range: t.start_byte()..t.start_byte(), text: s });
            site.start = t.start_byte();
        }
        edits.sort_by_key(|e| (e.range.start, e.range.end));
        Some(SiteEdits { site, edits })
    }

    /// The statement of the function's body that holds `n`.
    fn top_statement(&self, n: Node<'t>) -> Option<Node<'t>> {
        let mut cur = n;
        while let Some(p) = cur.parent() {
            if p == self.body {
                return Some(cur);
            }
            cur = p;
        }
        None
    }

    /// A name a statement before any top-level statement can read: a
    /// parameter or a declaration of the body's own level.
    fn visible_before(&self, n: &str) -> bool {
        self.params.contains(n) || self.declared.contains(n)
    }

    /// Whether every thread of a block reaches the top-level statement `t`
    /// (no return before it that only some take), and the loop's bounds are
    /// the same for all of them and known there.
    fn may_share_before(&self, src: &str, t: Node, bound_names: &HashSet<String>, h: &Header) -> bool {
        let mut c = self.body.walk();
        for s in self.body.named_children(&mut c) {
            if s == t {
                break;
            }
            let mut rets = Vec::new();
            collect(s, "return_statement", &mut rets);
            for r in rets {
                // a return under a condition every thread evaluates alike
                let mut n = r;
                while let Some(p) = n.parent() {
                    if p.kind() == "if_statement"
                        && p.child_by_field_name("condition")
                            .is_some_and(|cnd| thread_dependent(src, cnd, &self.varying))
                    {
                        return false;
                    }
                    if p == s {
                        break;
                    }
                    n = p;
                }
                if s.kind() != "if_statement" {
                    return false;
                }
            }
        }
        bound_names
            .iter()
            .filter(|n| !n.is_empty() && n.chars().next().is_some_and(|ch| !ch.is_ascii_digit()) && **n != h.var)
            .all(|n| !self.varying.contains(n) && self.visible_before(n))
    }
}

fn descendants(n: Node) -> Vec<Node> {
    let mut out = Vec::new();
    let mut stack = vec![n];
    while let Some(x) = stack.pop() {
        out.push(x);
        let mut c = x.walk();
        let kids: Vec<Node> = x.children(&mut c).collect();
        stack.extend(kids.into_iter().rev());
    }
    out
}

/// Names whose value may differ between the threads of a block: those
/// computed from `threadIdx` (or a lane id), directly or through others.
fn varying(src: &str, body: Node) -> HashSet<String> {
    let mut defs: Vec<(String, Node)> = Vec::new();
    for n in descendants(body) {
        let (target, value) = match n.kind() {
            "init_declarator" => (n.child_by_field_name("declarator"), n.child_by_field_name("value")),
            "assignment_expression" => (n.child_by_field_name("left"), n.child_by_field_name("right")),
            _ => (None, None),
        };
        if let (Some(t), Some(v)) = (target, value)
            && let Some(name) = declared_name(src, t)
        {
            defs.push((name, v));
        }
        // a loop variable varies with its loop's condition and step too
        if n.kind() == "for_statement"
            && let Some(h) = header(src, n)
            && let Some(cond) = n.child_by_field_name("condition")
        {
            defs.push((h.var, cond));
        }
    }
    let mut out: HashSet<String> = HashSet::new();
    loop {
        let before = out.len();
        for (name, v) in &defs {
            if thread_dependent(src, *v, &out) {
                out.insert(name.clone());
            }
        }
        if out.len() == before {
            return out;
        }
    }
}

/// Whether `e` may differ between the threads of a block: it reads the
/// thread index (or a lane id) or a name in `varying`.
fn thread_dependent(src: &str, e: Node, varying: &HashSet<String>) -> bool {
    let t = text(src, e);
    t.contains("threadIdx") || t.contains("laneid") || names(src, e).iter().any(|x| varying.contains(x))
}

/// The identifiers under `n`, in source order.
fn names_in_order(src: &str, n: Node) -> Vec<String> {
    let mut ids = Vec::new();
    collect(n, "identifier", &mut ids);
    ids.into_iter().map(|i| text(src, i).to_string()).collect()
}

fn identifiers(src: &str, n: Node) -> HashSet<String> {
    let mut ids = Vec::new();
    collect(n, "identifier", &mut ids);
    ids.into_iter().map(|i| text(src, i).to_string()).collect()
}

/// Fresh identifiers, none of them already used in the function.
struct Fresh {
    taken: HashSet<String>,
}

impl Fresh {
    fn name(&mut self, want: &str) -> String {
        let mut name = want.to_string();
        let mut k = 2;
        while self.taken.contains(&name) {
            name = format!("{want}_{k}");
            k += 1;
        }
        self.taken.insert(name.clone());
        name
    }
}

/// An identifier naming an expression (`expf(g_n[i])` -> `expf_g_n_i`).
fn ident_of(e: &str) -> String {
    let mut s = String::new();
    for ch in e.chars() {
        if ch.is_ascii_alphanumeric() {
            s.push(ch);
        } else if !s.ends_with('_') && !s.is_empty() {
            s.push('_');
        }
    }
    let s = s.trim_end_matches('_');
    s.chars().take(32).collect::<String>().trim_end_matches('_').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Rewrite, RewriteSpec};

    fn reuse(form: ReuseForm, lang: Lang, src: &str) -> Option<String> {
        let spec =
            RewriteSpec { transform: Some(form), ..RewriteSpec::usage("r", lang, "for ($$$HEAD) $BODY", "reuse", &[]) };
        let rw = Rewrite::new(&spec, None).unwrap();
        crate::rewrite(&rw, lang, src, "k.cu").unwrap().map(|o| o.text)
    }

    /// A block-per-row kernel of our own: two passes over a row, the second
    /// evaluating `expf` again and reading the row again.
    const ROWS: &str = r#"
__global__ void softmax_rows(const float* x, float* y, int n, float shift) {
    const float* row = x + blockIdx.x * n;
    float* out = y + blockIdx.x * n;
    for (int c = threadIdx.x; c < 1; c += blockDim.x) {
        float sum = 0.0f;
        for (int i = 0; i < n; i++) {
            sum += expf(row[i] - shift);
        }
        for (int i = 0; i < n; i++) {
            out[i] = expf(row[i] - shift) / sum;
        }
    }
}
"#;

    #[test]
    fn a_pure_call_evaluated_again_is_kept_from_the_first_loop() {
        let out = reuse(ReuseForm::Local, Lang::Cuda, ROWS).expect("a site");
        assert!(out.contains("float kept_expf_row_i_shift[128];"), "{out}");
        assert!(out.contains("const bool kept_fit = n <= 128;"), "{out}");
        assert!(
            out.contains(
                "sum += (kept_fit ? (kept_expf_row_i_shift[i] = expf(row[i] - shift)) : expf(row[i] - shift));"
            ),
            "{out}"
        );
        assert!(out.contains("out[i] = (kept_fit ? kept_expf_row_i_shift[i] : expf(row[i] - shift)) / sum;"), "{out}");
        // applied once: its own guard is never matched again
        assert!(reuse(ReuseForm::Local, Lang::Cuda, &out).is_none());
        // every thread of the block computes the same row: shared memory, behind a barrier
        let out = reuse(ReuseForm::Shared, Lang::Cuda, ROWS).expect("a site");
        assert!(out.contains("__shared__ float kept_expf_row_i_shift[128];"), "{out}");
        assert!(out.contains("__syncthreads();"), "{out}");
        assert!(out.contains("sum += (kept_shared ? kept_expf_row_i_shift[i] : expf(row[i] - shift));"), "{out}");
        let fill = out.find("__syncthreads").unwrap();
        assert!(fill < out.find("for (int c").unwrap(), "the block fills it before the thread loop: {out}");
        assert!(reuse(ReuseForm::Shared, Lang::Cuda, &out).is_none());
    }

    #[test]
    fn nothing_is_kept_across_a_store_that_changes_it_or_a_name_that_changes() {
        let cases = [
            // the second loop stores the element, then reads it again
            (
                "out[i] = expf(row[i] - shift) / sum;",
                "out[i] = 0.0f; out[i] = expf(out[i] - shift) / sum;",
                "sum += expf(row[i] - shift);",
                "sum += expf(out[i] - shift);",
            ),
            // shift changes between the loops
            (
                "out[i] = expf(row[i] - shift) / sum;",
                "out[i] = expf(row[i] - shift) / sum;",
                "sum += expf(row[i] - shift);",
                "sum += expf(row[i] - shift);
        }
        shift = 1.0f;
        for (int i = 0; i < n; i++) {
            sum += 0.0f;",
            ),
            // the first loop computes it only sometimes
            (
                "out[i] = expf(row[i] - shift) / sum;",
                "out[i] = expf(row[i] - shift) / sum;",
                "sum += expf(row[i] - shift);",
                "if (i > 2) sum += expf(row[i] - shift);",
            ),
            // the first loop may stop early
            (
                "out[i] = expf(row[i] - shift) / sum;",
                "out[i] = expf(row[i] - shift) / sum;",
                "sum += expf(row[i] - shift);",
                "sum += expf(row[i] - shift); if (sum > 9.0f) break;",
            ),
            // a body steps the loop variable, or an inner loop shadows it
            (
                "out[i] = expf(row[i] - shift) / sum;",
                "out[i] = expf(row[i] - shift) / sum; i += 1;",
                "sum += expf(row[i] - shift);",
                "sum += expf(row[i] - shift);",
            ),
            (
                "out[i] = expf(row[i] - shift) / sum;",
                "for (int i = 1; i < 2; i++) { out[i] = expf(row[i] - shift) / sum; }",
                "sum += expf(row[i] - shift);",
                "sum += expf(row[i] - shift);",
            ),
        ];
        for (b_old, b_new, a_old, a_new) in cases {
            let src = ROWS.replacen(a_old, a_new, 1).replacen(b_old, b_new, 1);
            assert_ne!(src, ROWS);
            let kept = reuse(ReuseForm::Local, Lang::Cuda, &src).unwrap_or_default();
            assert!(!kept.contains("kept_expf"), "{src}\n->\n{kept}");
        }
        // a store through another pointer into the same buffer, in the second loop
        let src = ROWS
            .replacen(
                "    float* out = y + blockIdx.x * n;\n",
                "    float* out = y + blockIdx.x * n;\n    float* alias = (float*)x + blockIdx.x * n;\n",
                1,
            )
            .replacen(
                "out[i] = expf(row[i] - shift) / sum;",
                "alias[i] = 0.0f; out[i] = expf(row[i] - shift) / sum;",
                1,
            );
        let kept = reuse(ReuseForm::Local, Lang::Cuda, &src).unwrap_or_default();
        assert!(!kept.contains("kept_expf"), "{kept}");
        // a store through the row between the loops: its reads are not kept, the other call is
        let src = ROWS.replacen(
            "        for (int i = 0; i < n; i++) {\n            out[i]",
            "        y[0] = 1.0f;\n        for (int i = 0; i < n; i++) {\n            out[i]",
            1,
        );
        assert!(
            reuse(ReuseForm::Local, Lang::Cuda, &src).is_some_and(|o| o.contains("kept_expf")),
            "a store through y, not x"
        );
    }

    #[test]
    fn a_thread_dependent_value_stays_per_thread_and_a_divergent_return_keeps_the_block_out() {
        // row depends on the thread: shared memory would mix threads' values
        let per_thread = ROWS.replace("x + blockIdx.x * n;", "x + threadIdx.x * n;");
        let out = reuse(ReuseForm::Shared, Lang::Cuda, &per_thread).expect("a site");
        assert!(!out.contains("__shared__") && out.contains("float kept_expf_row_i_shift[128];"), "{out}");
        let direct = ROWS.replace("row[i] - shift", "row[i + threadIdx.x] - shift");
        let out = reuse(ReuseForm::Shared, Lang::Cuda, &direct).expect("a site");
        assert!(!out.contains("__shared__"), "{out}");
        // some threads return before the loops: no barrier they would never reach
        let divergent = ROWS.replace("    float* out = y", "    if (threadIdx.x > 7) return;\n    float* out = y");
        let out = reuse(ReuseForm::Shared, Lang::Cuda, &divergent).expect("a site");
        assert!(!out.contains("__syncthreads"), "{out}");
        // host C++ has no shared memory
        let host = ROWS
            .replace("__global__ ", "")
            .replace("blockIdx.x", "0")
            .replace("threadIdx.x", "0")
            .replace("blockDim.x", "1");
        let out = reuse(ReuseForm::Shared, Lang::Cpp, &host).expect("a site");
        assert!(!out.contains("__shared__") && out.contains("kept_fit"), "{out}");
    }
}
