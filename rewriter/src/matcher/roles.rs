//! The role of the tensor behind each `tl.load`/`tl.store` of a Triton
//! kernel, for memory hints (`eviction_policy=`, `cache_modifier=`), which
//! are per-access choices: a hint helps an access whose data is used again
//! soon (keep it in cache) or read once (do not let it push others out),
//! and hurts the other kind.
//!
//! Roles come from a data-flow reading of the kernel body, never from
//! names: the pointer's base is the kernel parameter at the left end of its
//! additive chain (`p_q = q + ...; tl.load(p_q)`, followed through
//! locals); the address's dependence on the grid is the set of
//! `tl.program_id(axis)` values that flow into it (through locals, tuple
//! assignments and loop targets).
//!
//! - **state**: the kernel loads and stores the same base (read-modify-write
//!   of a tensor that outlives the call: the next call reads it again);
//! - **shared**: a load whose address does not depend on some grid axis the
//!   kernel uses, so every program along that axis reads the same bytes; or
//!   a load inside a `for` loop whose address does not change with it (no
//!   loop variable, nothing the loop reassigns), read again at every step;
//! - **streamed**: a load whose address depends on every grid axis: each
//!   byte is read by one program, once;
//! - **output**: a store to a base the kernel never loads.
//!
//! An access whose base cannot be followed (a pointer from a call, a
//! subscript) has no role and gets no hint; nor has any access of a
//! function that never reads `tl.program_id` (a helper: its pointers are
//! its callers', and "every grid axis" would hold vacuously).

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;

use kidiom_syntax::{KernelKind, kernel_ranges};
use tree_sitter::{Node, Tree};

/// The role of an access (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Loaded and stored by the kernel: reused by the next call.
    State,
    /// Read by every program along some grid axis.
    Shared,
    /// Read once, by one program.
    Streamed,
    /// Written once, never read by the kernel.
    Output,
}

impl Role {
    /// Whether the data is used again (keep it cached) rather than once.
    pub fn reused(self) -> bool {
        matches!(self, Role::State | Role::Shared)
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Role::State => "state",
            Role::Shared => "shared",
            Role::Streamed => "streamed",
            Role::Output => "output",
        }
    }
}

/// One `tl.load` or `tl.store` with its role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// The call's bytes (a site of `tl.load($$$ARGS)` / `tl.store($$$ARGS)`).
    pub site: Range<usize>,
    /// `load` or `store`.
    pub op: &'static str,
    /// The kernel parameter the pointer is based on.
    pub base: String,
    /// Its role.
    pub role: Role,
    /// Why, in words (`reads q; its address does not depend on grid axis 0`).
    pub why: String,
}

/// Which value of a memory hint suits which roles: facts about Triton's
/// and PTX's cache operators, not a list of idioms. `evict_first` and the
/// streaming operators (`.cg`: L2 only, `.cs`: evict first) suit data used
/// once; `evict_last` and `.ca` (all levels) suit data used again.
pub fn hint_suits(value: &str, op: &str, role: Role) -> bool {
    let v = value.trim().trim_matches(['"', '\'']);
    match v {
        "evict_first" => !role.reused(),
        "evict_last" => role.reused() && op == "load",
        ".ca" => role.reused() && op == "load",
        ".cg" => !role.reused(),
        ".cs" => !role.reused(),
        _ => false,
    }
}

#[derive(Debug, Clone, Default)]
struct Flow {
    axes: BTreeSet<u32>,
    /// The kernel parameter a pointer value is based on.
    base: Option<String>,
}

/// The `for` statements around a node: (start byte, line), innermost first.
type Loops = Vec<(usize, usize)>;

/// Loop variables flow like grid axes, numbered from here (one per `for` statement).
const LOOP_AXIS: u32 = 1 << 30;

struct Kernel<'s> {
    src: &'s str,
    params: BTreeSet<String>,
    locals: HashMap<String, Flow>,
    axes_used: BTreeSet<u32>,
    /// Each access, with the `for` statements around it, innermost first.
    calls: Vec<(Range<usize>, &'static str, Flow, Loops)>,
    /// Each `for` statement's pseudo axis, by its start byte.
    loops: HashMap<usize, u32>,
}

/// The loads and stores of every Triton kernel in `src`, with their roles;
/// accesses whose base cannot be followed are left out.
pub fn memory_accesses(src: &str, tree: &Tree) -> Vec<Access> {
    let mut out = Vec::new();
    for k in kernel_ranges(kidiom_syntax::Lang::Python, src, tree) {
        if k.kind != KernelKind::Triton {
            continue;
        }
        let Some(node) = tree.root_node().descendant_for_byte_range(k.range.start, k.range.end) else { continue };
        let Some(def) = function_of(node) else { continue };
        let mut kern = Kernel {
            src,
            params: BTreeSet::new(),
            locals: HashMap::new(),
            axes_used: BTreeSet::new(),
            calls: Vec::new(),
            loops: HashMap::new(),
        };
        if let Some(ps) = def.child_by_field_name("parameters") {
            let mut c = ps.walk();
            for p in ps.named_children(&mut c) {
                let name = match p.kind() {
                    "identifier" => Some(p),
                    "typed_parameter" | "default_parameter" | "typed_default_parameter" => {
                        p.child_by_field_name("name").or_else(|| p.named_child(0))
                    }
                    _ => None,
                };
                let constexpr = p.child_by_field_name("type").is_some_and(|t| text(src, t).contains("constexpr"));
                if let Some(n) = name.filter(|n| n.kind() == "identifier")
                    && !constexpr
                {
                    kern.params.insert(text(src, n).to_string());
                }
            }
        }
        if let Some(body) = def.child_by_field_name("body") {
            kern.block(body);
        }
        if kern.axes_used.is_empty() {
            continue; // no program_id: a helper, whose pointers are its callers'
        }
        let loaded: BTreeSet<&str> =
            kern.calls.iter().filter(|c| c.1 == "load").filter_map(|c| c.2.base.as_deref()).collect();
        let stored: BTreeSet<&str> =
            kern.calls.iter().filter(|c| c.1 == "store").filter_map(|c| c.2.base.as_deref()).collect();
        for (site, op, flow, loops) in &kern.calls {
            let Some(base) = flow.base.clone() else { continue };
            // the innermost `for` the address does not change with
            let fixed_in = loops.iter().find(|l| kern.loops.get(&l.0).is_some_and(|a| !flow.axes.contains(a)));
            let (role, why) = if loaded.contains(base.as_str()) && stored.contains(base.as_str()) {
                (Role::State, format!("the kernel loads and stores {base}"))
            } else if *op == "store" {
                (Role::Output, format!("the kernel writes {base} and never reads it"))
            } else if let Some(l) = fixed_in {
                (
                    Role::Shared,
                    format!("each program reads the same part of {base} at every step of the loop at line {}", l.1),
                )
            } else {
                let missing: Vec<String> = kern.axes_used.difference(&flow.axes).map(u32::to_string).collect();
                if missing.is_empty() {
                    (
                        Role::Streamed,
                        format!("each program reads its own part of {base} (its address depends on every grid axis)"),
                    )
                } else {
                    (
                        Role::Shared,
                        format!(
                            "every program along grid axis {} reads the same part of {base}",
                            missing.join(" and ")
                        ),
                    )
                }
            };
            out.push(Access { site: site.clone(), op, base, role, why });
        }
    }
    out
}

fn function_of(node: Node) -> Option<Node> {
    if node.kind() == "function_definition" {
        return Some(node);
    }
    if node.kind() == "decorated_definition" {
        return node.child_by_field_name("definition");
    }
    let mut c = node.walk();
    node.named_children(&mut c).find_map(function_of)
}

fn text<'s>(src: &'s str, n: Node) -> &'s str {
    src.get(n.byte_range()).unwrap_or("")
}

impl Kernel<'_> {
    /// Statements in source order; nested blocks (loops, branches) walked
    /// with an explicit stack, so a local is bound before later uses.
    fn block(&mut self, body: Node) {
        let mut stack = vec![body];
        while let Some(n) = stack.pop() {
            let mut c = n.walk();
            let kids: Vec<Node> = n.named_children(&mut c).collect();
            match n.kind() {
                "assignment" | "augmented_assignment" => self.assign(n),
                "function_definition" | "class_definition" | "decorated_definition" | "lambda" | "comment" => {}
                "expression_statement" => {
                    for k in kids {
                        if matches!(k.kind(), "assignment" | "augmented_assignment") {
                            self.assign(k);
                        } else {
                            self.scan(k);
                        }
                    }
                }
                "block" => stack.extend(kids.into_iter().rev()),
                "for_statement" => {
                    let axis = LOOP_AXIS + self.loops.len() as u32;
                    self.loops.insert(n.start_byte(), axis);
                    // what the loop reassigns changes with it, before its reassignment too
                    // (`tl.load(p); p += BT`)
                    for name in assigned_in(self.src, n) {
                        if let Some(l) = self.locals.get_mut(&name) {
                            l.axes.insert(axis);
                        }
                    }
                    if let (Some(left), Some(right)) = (n.child_by_field_name("left"), n.child_by_field_name("right")) {
                        self.scan(right);
                        let mut flow = self.flow(right);
                        flow.axes.insert(axis);
                        self.bind(left, flow);
                    }
                    let nested: Vec<Node> =
                        kids.into_iter().filter(|k| k.kind() == "block" || k.kind().ends_with("_clause")).collect();
                    stack.extend(nested.into_iter().rev());
                }
                k if k.ends_with("_statement") || k.ends_with("_clause") => {
                    // conditions are scanned; their blocks and clauses come next, in order
                    let mut nested = Vec::new();
                    for k in kids {
                        if k.kind() == "block" || k.kind().ends_with("_clause") {
                            nested.push(k);
                        } else {
                            self.scan(k);
                        }
                    }
                    stack.extend(nested.into_iter().rev());
                }
                _ => self.scan(n),
            }
        }
    }

    fn assign(&mut self, n: Node) {
        let (Some(left), Some(right)) = (n.child_by_field_name("left"), n.child_by_field_name("right")) else { return };
        self.scan(right);
        // `a, b = x, y` binds pairwise
        if matches!(left.kind(), "pattern_list" | "tuple_pattern")
            && matches!(right.kind(), "expression_list" | "tuple")
        {
            let mut lc = left.walk();
            let mut rc = right.walk();
            let ls: Vec<Node> = left.named_children(&mut lc).collect();
            let rs: Vec<Node> = right.named_children(&mut rc).collect();
            if ls.len() == rs.len() {
                for (l, r) in ls.into_iter().zip(rs) {
                    let f = self.flow(r);
                    self.bind(l, f);
                }
                return;
            }
        }
        let f = self.flow(right);
        self.bind(left, f);
    }

    /// A name (or each name of a pattern) takes `flow`; reassignment unions.
    /// A name bound inside a `for` changes with it.
    fn bind(&mut self, left: Node, mut flow: Flow) {
        flow.axes.extend(enclosing_loops(left).iter().filter_map(|l| self.loops.get(&l.0)));
        let mut stack = vec![left];
        while let Some(l) = stack.pop() {
            if l.kind() == "identifier" {
                let name = text(self.src, l).to_string();
                let e = self.locals.entry(name).or_default();
                e.axes.extend(flow.axes.iter().copied());
                if e.base.is_none() {
                    e.base = flow.base.clone();
                }
            } else {
                let mut c = l.walk();
                stack.extend(l.named_children(&mut c));
            }
        }
    }

    /// Grid dependence and pointer base of an expression.
    fn flow(&mut self, e: Node) -> Flow {
        let mut f = Flow { base: self.base(e), ..Flow::default() };
        let mut stack = vec![e];
        while let Some(n) = stack.pop() {
            match n.kind() {
                "identifier" => {
                    if let Some(l) = self.locals.get(text(self.src, n)) {
                        f.axes.extend(l.axes.iter().copied());
                    }
                }
                "call" => {
                    if let Some(axis) = self.program_id(n) {
                        f.axes.insert(axis);
                        self.axes_used.insert(axis);
                        continue;
                    }
                    let mut c = n.walk();
                    stack.extend(n.named_children(&mut c));
                }
                "attribute" => {
                    // `x.to(...)`: the object matters, the attribute name does not
                    if let Some(o) = n.child_by_field_name("object") {
                        stack.push(o);
                    }
                }
                "keyword_argument" => {
                    if let Some(v) = n.child_by_field_name("value") {
                        stack.push(v);
                    }
                }
                _ => {
                    let mut c = n.walk();
                    stack.extend(n.named_children(&mut c));
                }
            }
        }
        f
    }

    /// `tl.program_id(N)` (also `axis=N`): N.
    fn program_id(&self, call: Node) -> Option<u32> {
        let func = call.child_by_field_name("function")?;
        if !text(self.src, func).ends_with("program_id") {
            return None;
        }
        let args = call.child_by_field_name("arguments")?;
        let mut c = args.walk();
        let a = args.named_children(&mut c).next()?;
        let v = if a.kind() == "keyword_argument" { a.child_by_field_name("value")? } else { a };
        text(self.src, v).trim().parse().ok()
    }

    /// The parameter at the left end of an additive chain, through locals.
    fn base(&self, e: Node) -> Option<String> {
        let mut n = e;
        loop {
            match n.kind() {
                "parenthesized_expression" => n = n.named_child(0)?,
                "binary_operator" => {
                    let op = n.child_by_field_name("operator").map(|o| text(self.src, o))?;
                    if op != "+" {
                        return None;
                    }
                    let left = n.child_by_field_name("left")?;
                    // `off + ptr` is as good as `ptr + off`
                    match self.base(left) {
                        Some(b) => return Some(b),
                        None => n = n.child_by_field_name("right")?,
                    }
                }
                "identifier" => {
                    let name = text(self.src, n);
                    if self.params.contains(name) && !self.locals.contains_key(name) {
                        return Some(name.to_string());
                    }
                    return self.locals.get(name).and_then(|l| l.base.clone());
                }
                _ => return None,
            }
        }
    }

    /// Records every `tl.load`/`tl.store` in `e` with its pointer's flow.
    fn scan(&mut self, e: Node) {
        let mut stack = vec![e];
        let mut found = Vec::new();
        while let Some(n) = stack.pop() {
            if n.kind() == "call"
                && let Some(func) = n.child_by_field_name("function")
            {
                let f = text(self.src, func);
                let op = if f.ends_with(".load") || f == "load" {
                    Some("load")
                } else if f.ends_with(".store") || f == "store" {
                    Some("store")
                } else {
                    None
                };
                if let Some(op) = op.filter(|_| f.contains("tl.") || f.starts_with("tl") || !f.contains('.'))
                    && let Some(args) = n.child_by_field_name("arguments")
                {
                    let mut c = args.walk();
                    let ptr = args.named_children(&mut c).find(|a| {
                        a.kind() != "keyword_argument"
                            || a.child_by_field_name("name").is_some_and(|k| text(self.src, k) == "pointer")
                    });
                    let ptr = ptr.map(|p| {
                        if p.kind() == "keyword_argument" { p.child_by_field_name("value").unwrap_or(p) } else { p }
                    });
                    if let Some(p) = ptr {
                        found.push((n.byte_range(), op, p));
                    }
                }
            }
            let mut c = n.walk();
            stack.extend(n.named_children(&mut c));
        }
        for (range, op, p) in found {
            let flow = self.flow(p);
            let loops = enclosing_loops(p);
            self.calls.push((range, op, flow, loops));
        }
    }
}

/// The `for` statements whose body holds `n` (start byte, line), innermost first, up to its function.
fn enclosing_loops(n: Node) -> Loops {
    let mut out = Vec::new();
    let (mut child, mut cur) = (n, n.parent());
    while let Some(p) = cur {
        if p.kind() == "function_definition" {
            break;
        }
        if p.kind() == "for_statement" && p.child_by_field_name("body").is_some_and(|b| b.id() == child.id()) {
            out.push((p.start_byte(), p.start_position().row + 1));
        }
        (child, cur) = (p, p.parent());
    }
    out
}

/// The names a `for` statement (re)binds in its body and as its targets.
fn assigned_in(src: &str, for_stmt: Node) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![for_stmt];
    while let Some(n) = stack.pop() {
        let left = match n.kind() {
            "assignment" | "augmented_assignment" | "for_statement" => n.child_by_field_name("left"),
            _ => None,
        };
        if let Some(l) = left {
            let mut names = vec![l];
            while let Some(x) = names.pop() {
                if x.kind() == "identifier" {
                    out.insert(text(src, x).to_string());
                } else if matches!(x.kind(), "pattern_list" | "tuple_pattern" | "list_pattern") {
                    let mut c = x.walk();
                    names.extend(x.named_children(&mut c));
                }
            }
        }
        if matches!(n.kind(), "function_definition" | "lambda" | "class_definition") {
            continue;
        }
        let mut c = n.walk();
        stack.extend(n.named_children(&mut c));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const KERNEL: &str = r#"import triton
import triton.language as tl


@triton.jit
def k(x, w, s, idx, y, n, B: tl.constexpr):
    i_c, i_r = tl.program_id(0), tl.program_id(1)
    o = i_c * B + tl.arange(0, B)
    p_x = x + i_r * n + o
    j = tl.load(idx + i_r)
    p_s = s + j * n + o
    b_w = tl.load(w + i_r * n + tl.arange(0, B))
    b_s = tl.load(p_s)
    for t in range(0, 4):
        b_x = tl.load(p_x + t * B, mask=o < n, other=0.)
        b_s = b_s + b_x * b_w
    tl.store(p_s, b_s)
    tl.store(y + i_r * n + o, b_s.to(y.dtype.element_ty))
    b_z = tl.load(tl.make_block_ptr(x, (n,), (1,), (0,), (B,), (0,)))
"#;

    fn roles() -> Vec<(String, &'static str, Role)> {
        let tree = kidiom_syntax::parse_tree(kidiom_syntax::Lang::Python, KERNEL).unwrap().unwrap();
        memory_accesses(KERNEL, &tree).into_iter().map(|a| (a.base, a.op, a.role)).collect()
    }

    #[test]
    fn roles_come_from_data_flow() {
        let r = roles();
        let find = |base: &str, op: &str| r.iter().find(|(b, o, _)| b == base && *o == op).map(|x| x.2);
        assert_eq!(find("s", "load"), Some(Role::State), "{r:?}");
        assert_eq!(find("s", "store"), Some(Role::State));
        assert_eq!(find("x", "load"), Some(Role::Streamed), "depends on both axes through p_x: {r:?}");
        assert_eq!(find("w", "load"), Some(Role::Shared), "no axis 0 in its address");
        assert_eq!(find("idx", "load"), Some(Role::Shared));
        assert_eq!(find("y", "store"), Some(Role::Output));
        // a block pointer from a call cannot be followed: no role, no hint
        assert_eq!(r.len(), 6, "{r:?}");
    }

    #[test]
    fn a_load_the_loop_does_not_move_is_reused_and_a_helper_has_no_roles() {
        let src = r#"import triton
import triton.language as tl


@triton.jit
def k(x, w, u, s, y, n, NT, B: tl.constexpr):
    i_c, i_r = tl.program_id(0), tl.program_id(1)
    o = i_c * B + tl.arange(0, B)
    p_s = s + i_r * n + o
    p_u = u + i_r * n + o
    b_s = tl.load(p_s)
    for t in range(0, NT):
        b_x = tl.load(x + (i_r * NT + t) * n + o)
        b_w = tl.load(w + i_r * n + o)
        b_u = tl.load(p_u)
        p_u += n
        b_s = b_s * b_w + b_x + b_u
        tl.store(y + (i_r * NT + t) * n + o, b_s)
    tl.store(p_s, b_s)


@triton.jit
def helper(p, q):
    tl.store(q, tl.load(p))
"#;
        let tree = kidiom_syntax::parse_tree(kidiom_syntax::Lang::Python, src).unwrap().unwrap();
        let r: Vec<_> = memory_accesses(src, &tree).into_iter().map(|a| (a.base, a.op, a.role, a.why)).collect();
        let find = |base: &str, op: &str| r.iter().find(|x| x.0 == base && x.1 == op).map(|x| (x.2, x.3.clone()));
        assert_eq!(find("s", "load").map(|x| x.0), Some(Role::State), "{r:?}");
        assert_eq!(find("x", "load").map(|x| x.0), Some(Role::Streamed), "moves with t: {r:?}");
        assert_eq!(find("u", "load").map(|x| x.0), Some(Role::Streamed), "advanced by the loop (`p_u += n`): {r:?}");
        let (role, why) = find("w", "load").expect("w");
        assert_eq!(role, Role::Shared, "the same bytes at every step: {r:?}");
        assert!(why.contains("every step of the loop at line 12"), "{why}");
        assert_eq!(find("y", "store").map(|x| x.0), Some(Role::Output));
        assert!(
            find("p", "load").is_none() && find("q", "store").is_none(),
            "a helper's pointers are its callers': {r:?}"
        );
    }

    #[test]
    fn hints_suit_roles() {
        assert!(hint_suits("\"evict_first\"", "load", Role::Streamed));
        assert!(!hint_suits("'evict_first'", "load", Role::State));
        assert!(hint_suits("\"evict_last\"", "load", Role::Shared));
        assert!(!hint_suits("\"evict_last\"", "store", Role::Output));
        assert!(hint_suits("\".cg\"", "store", Role::Output));
        assert!(hint_suits("\".ca\"", "load", Role::State));
        assert!(!hint_suits("\".cv\"", "load", Role::Streamed));
    }
}
