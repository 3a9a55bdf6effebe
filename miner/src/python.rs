//! Usage facts from Python files: Triton kernels, their decorators,
//! parameters, calls, keyword arguments and method wraps, and launches.

use std::collections::{HashMap, HashSet};

use tree_sitter::{Node, Tree};

use crate::facts::{FactsBuilder, FamilyKey, Lines, Mechanism, normalize_value};
use crate::lang::Lang;
use crate::parse::Step;

/// The scope counting Triton kernels.
pub const TRITON_KERNEL: &str = "triton-kernel";
/// The scope counting Triton kernel parameters.
pub const TRITON_PARAM: &str = "triton-param";
/// The callee name given to kernel launches `kernel[grid](...)`.
pub const LAUNCH: &str = "$KERNEL[$GRID]";

struct Ctx<'a> {
    src: &'a str,
    lines: Lines<'a>,
    aliases: HashMap<String, String>,
    /// Kernel name -> its parameter names, for telling launch options from arguments.
    kernel_params: HashMap<String, HashSet<String>>,
    /// Pass-through wrappers already counted in the current kernel.
    kernel_wrappers: HashSet<String>,
    out: FactsBuilder,
}

impl<'a> Ctx<'a> {
    fn text(&self, n: Node) -> &'a str {
        self.src.get(n.byte_range()).unwrap_or("")
    }

    /// Resolves import aliases and writes Triton's language module as `tl`.
    fn canonical(&self, dotted: &str) -> String {
        let dotted: String = dotted.chars().filter(|c| !c.is_whitespace()).collect();
        let (head, rest) = match dotted.split_once('.') {
            Some((h, r)) => (h, Some(r)),
            None => (dotted.as_str(), None),
        };
        let full = match (self.aliases.get(head), rest) {
            (Some(t), Some(r)) => format!("{t}.{r}"),
            (Some(t), None) => t.clone(),
            (None, _) => return dotted,
        };
        if let Some(r) = full.strip_prefix("triton.language.") {
            format!("tl.{r}")
        } else if full == "triton.language" {
            "tl".to_string()
        } else if full.starts_with("triton") && full.split('.').count() <= 3 {
            full
        } else {
            // Deep module paths (`triton.experimental.gluon.language.load`) read
            // better under the alias their authors chose (`gl.load`).
            dotted
        }
    }

    /// The name a call's function is known by: a dotted name, `.method`
    /// for methods on expressions, or the launch marker.
    fn callee(&self, func: Node) -> Option<String> {
        match func.kind() {
            "identifier" => Some(self.canonical(self.text(func))),
            "attribute" => {
                let obj = func.child_by_field_name("object")?;
                let attr = func.child_by_field_name("attribute")?;
                let text = self.text(func);
                let head = text.split('.').next().unwrap_or("").trim();
                // A dotted name counts when it starts at an import; `b_A.to` is a method on a local.
                if is_dotted(obj) && self.aliases.contains_key(head) {
                    Some(self.canonical(text))
                } else {
                    Some(format!(".{}", self.text(attr)))
                }
            }
            _ => None,
        }
    }

    fn is_kernel_decorator(&self, dec: Node) -> bool {
        let Some(expr) = dec.named_child(0) else { return false };
        let target = if expr.kind() == "call" { expr.child_by_field_name("function") } else { Some(expr) };
        let Some(target) = target else { return false };
        is_triton_kernel_decorator(&self.canonical(self.text(target)))
    }
}

fn is_dotted(n: Node) -> bool {
    let mut cur = n;
    // Bounded walk down an attribute chain; deep chains are not names.
    for _ in 0..64 {
        match cur.kind() {
            "identifier" => return true,
            "attribute" => match cur.child_by_field_name("object") {
                Some(o) => cur = o,
                None => return false,
            },
            _ => return false,
        }
    }
    false
}

/// `triton.jit`, `triton.autotune`, `triton.heuristics` (and their
/// `triton.runtime` spellings) mark a function as a Triton kernel.
pub fn is_triton_kernel_decorator(canonical: &str) -> bool {
    canonical.starts_with("triton") && matches!(canonical.rsplit('.').next(), Some("jit" | "autotune" | "heuristics"))
}

fn collect_aliases(root: Node, src: &str) -> HashMap<String, String> {
    let text = |n: Node| src.get(n.byte_range()).unwrap_or("").to_string();
    let mut map = HashMap::new();
    let mut cursor = root.walk();
    for stmt in root.named_children(&mut cursor) {
        match stmt.kind() {
            "import_statement" => {
                let mut c = stmt.walk();
                for name in stmt.children_by_field_name("name", &mut c) {
                    if name.kind() == "aliased_import" {
                        if let (Some(n), Some(a)) =
                            (name.child_by_field_name("name"), name.child_by_field_name("alias"))
                        {
                            map.insert(text(a), text(n));
                        }
                    } else {
                        let full = text(name);
                        let head = full.split('.').next().unwrap_or("").to_string();
                        map.insert(head.clone(), head);
                    }
                }
            }
            "import_from_statement" => {
                let Some(module) = stmt.child_by_field_name("module_name") else { continue };
                let module = text(module);
                let mut c = stmt.walk();
                for name in stmt.children_by_field_name("name", &mut c) {
                    if name.kind() == "aliased_import" {
                        if let (Some(n), Some(a)) =
                            (name.child_by_field_name("name"), name.child_by_field_name("alias"))
                        {
                            map.insert(text(a), format!("{module}.{}", text(n)));
                        }
                    } else {
                        let n = text(name);
                        map.insert(n.clone(), format!("{module}.{n}"));
                    }
                }
            }
            _ => {}
        }
    }
    map
}

fn parameter_name<'t>(p: Node<'t>) -> Option<Node<'t>> {
    match p.kind() {
        "identifier" => Some(p),
        "typed_parameter" => p.named_child(0).filter(|n| n.kind() == "identifier"),
        "default_parameter" | "typed_default_parameter" => p.child_by_field_name("name"),
        _ => None,
    }
}

/// Extracts usage facts from a parsed Python file.
pub(crate) fn extract(src: &str, tree: &Tree) -> FactsBuilder {
    let root = tree.root_node();
    let mut ctx = Ctx {
        src,
        lines: Lines::new(src),
        aliases: collect_aliases(root, src),
        kernel_params: HashMap::new(),
        kernel_wrappers: HashSet::new(),
        out: FactsBuilder::with_errors(root.has_error()),
    };
    collect_kernels(&mut ctx, root);
    walk(&mut ctx, root);
    ctx.out
}

/// Top-level (and class-level) kernels, so that launches before or after the
/// definition are recognised.
fn collect_kernels(ctx: &mut Ctx, root: Node) {
    let mut cursor = root.walk();
    for item in root.named_children(&mut cursor) {
        if item.kind() != "decorated_definition" {
            continue;
        }
        let mut c = item.walk();
        let is_kernel = item.named_children(&mut c).any(|d| d.kind() == "decorator" && ctx.is_kernel_decorator(d));
        if !is_kernel {
            continue;
        }
        let Some(def) = item.child_by_field_name("definition") else { continue };
        let (Some(name), Some(params)) = (def.child_by_field_name("name"), def.child_by_field_name("parameters"))
        else {
            continue;
        };
        let mut c = params.walk();
        let names = params.named_children(&mut c).filter_map(parameter_name).map(|n| ctx.text(n).to_string()).collect();
        ctx.kernel_params.insert(ctx.text(name).to_string(), names);
    }
}

fn key(mechanism: Mechanism, subject: &str, decoration: &str) -> FamilyKey {
    FamilyKey { lang: Lang::Python, mechanism, subject: subject.to_string(), decoration: decoration.to_string() }
}

/// One iterative depth-first pass (deeply nested input must not overflow the stack).
fn walk(ctx: &mut Ctx, root: Node) {
    // Depth at which the current kernel began, and error-node nesting.
    let mut kernel_at: Option<usize> = None;
    let mut errors_at: Vec<usize> = Vec::new();
    crate::parse::walk(root, |step| match step {
        Step::Enter(node, depth) => {
            if node.is_error() {
                errors_at.push(depth);
            }
            if node.kind() == "decorated_definition" && kernel_at.is_none() {
                let mut c = node.walk();
                let decorators: Vec<Node> = node.named_children(&mut c).filter(|d| d.kind() == "decorator").collect();
                if decorators.iter().any(|d| ctx.is_kernel_decorator(*d)) {
                    kernel_at = Some(depth);
                    enter_kernel(ctx, node, &decorators, !errors_at.is_empty());
                }
            } else if node.kind() == "call" {
                visit_call(ctx, node, kernel_at.is_some(), !errors_at.is_empty());
            }
        }
        Step::Leave(depth) => {
            if kernel_at == Some(depth) {
                kernel_at = None;
            }
            if errors_at.last() == Some(&depth) {
                errors_at.pop();
            }
        }
    });
}

fn enter_kernel(ctx: &mut Ctx, node: Node, decorators: &[Node], in_error: bool) {
    ctx.out.kernels += 1;
    ctx.kernel_wrappers.clear();
    ctx.out.scope(TRITON_KERNEL, 1);
    let mut seen = HashSet::new();
    for d in decorators {
        let Some(expr) = d.named_child(0) else { continue };
        let target = if expr.kind() == "call" { expr.child_by_field_name("function") } else { Some(expr) };
        let Some(target) = target else { continue };
        let name = ctx.canonical(ctx.text(target));
        if expr.kind() != "call" {
            // A bare `@triton.jit` is a call without keywords: the contrast for `@triton.jit(...)`.
            let ex = ctx.lines.example(d.start_position().row);
            ctx.out.call(&name, || ex);
        }
        if name.ends_with(".jit") || !seen.insert(name.clone()) {
            continue;
        }
        let row = d.start_position().row;
        let ex = ctx.lines.example(row);
        ctx.out.site(key(Mechanism::Decorator, TRITON_KERNEL, &name), None, in_error, true, || ex);
    }
    let Some(def) = node.child_by_field_name("definition") else { return };
    let Some(params) = def.child_by_field_name("parameters") else { return };
    let mut c = params.walk();
    for p in params.named_children(&mut c) {
        if parameter_name(p).is_none() {
            continue;
        }
        ctx.out.scope(TRITON_PARAM, 1);
        if let Some(ty) = p.child_by_field_name("type") {
            let ann = ctx.canonical(ctx.text(ty));
            let ex = ctx.lines.example(p.start_position().row);
            ctx.out.site(key(Mechanism::Annotation, TRITON_PARAM, &ann), None, in_error, true, || ex);
        }
    }
}

fn visit_call(ctx: &mut Ctx, call: Node, in_kernel: bool, in_error: bool) {
    let Some(func) = call.child_by_field_name("function") else { return };
    let callee = if in_kernel {
        match ctx.callee(func) {
            Some(c) => c,
            None => return,
        }
    } else if func.kind() == "subscript" {
        // A launch `kernel[grid](...)` of a kernel defined in this file.
        let Some(value) = func.child_by_field_name("value") else { return };
        let name = ctx.text(value);
        if !ctx.kernel_params.contains_key(name) {
            return;
        }
        let params = ctx.kernel_params.get(name).cloned().unwrap_or_default();
        let row = call.start_position().row;
        let ex = ctx.lines.example(row);
        ctx.out.call(LAUNCH, || ex.clone());
        for (kw, value) in keyword_args(ctx, call) {
            if params.contains(kw) {
                continue; // an argument of the kernel, not a launch option
            }
            let v = normalize_value(ctx.text(value));
            let ex = ctx.lines.example(value.start_position().row);
            ctx.out.site(key(Mechanism::Keyword, LAUNCH, kw), Some(v), in_error, true, || ex);
        }
        return;
    } else {
        return;
    };
    let row = call.start_position().row;
    ctx.out.call(&callee, || ctx.lines.example(row));
    for (kw, value) in keyword_args(ctx, call) {
        let v = normalize_value(ctx.text(value));
        let ex = ctx.lines.example(value.start_position().row);
        ctx.out.site(key(Mechanism::Keyword, &callee, kw), Some(v), in_error, true, || ex);
    }
    visit_wrapper(ctx, call, &callee, in_error);
    // `callee(...).method(args)`: the call is the object of an attribute that is itself called.
    if let Some(attr) = call.parent().filter(|p| p.kind() == "attribute")
        && attr.child_by_field_name("object") == Some(call)
        && let Some(outer) = attr.parent().filter(|p| p.kind() == "call")
        && outer.child_by_field_name("function") == Some(attr)
        && let Some(method) = attr.child_by_field_name("attribute")
    {
        let args = outer.child_by_field_name("arguments").map(|a| ctx.text(a)).unwrap_or("()");
        let inner = args.trim().trim_start_matches('(').trim_end_matches(')');
        let v = ctx.canonical(inner.trim());
        let ex = ctx.lines.example(row);
        let method = ctx.text(method).to_string();
        ctx.out.site(key(Mechanism::MethodWrap, &callee, &method), Some(v), in_error, true, || ex);
    }
}

fn keyword_args<'t>(ctx: &Ctx<'t>, call: Node<'t>) -> Vec<(&'t str, Node<'t>)> {
    let Some(args) = call.child_by_field_name("arguments") else { return Vec::new() };
    let mut c = args.walk();
    args.named_children(&mut c)
        .filter(|a| a.kind() == "keyword_argument")
        .filter_map(|a| Some((ctx.text(a.child_by_field_name("name")?), a.child_by_field_name("value")?)))
        .collect()
}

/// The scope prefix recording that a function was seen as a pass-through
/// (`x = f(x, ...)`): such a function decorates an expression without
/// changing its value (`tl.multiple_of`, `tl.max_contiguous`).
pub const PASSTHROUGH: &str = "passthrough:";

/// The scope prefix counting calls whose trailing arguments are not
/// compile-time constants: a hint's are (`16`, `(1, BD)`, `BLOCK`).
pub const VARYING: &str = "varying:";

/// Literals, UPPERCASE (constexpr) names, and tuples or arithmetic of them.
fn constant_like(ctx: &Ctx, n: Node, depth: usize) -> bool {
    if depth > 8 {
        return false;
    }
    match n.kind() {
        "integer" | "float" | "true" | "false" | "none" | "string" => true,
        "identifier" => ctx.text(n).chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'),
        "tuple" | "list" | "parenthesized_expression" | "binary_operator" | "unary_operator" => {
            let mut c = n.walk();
            n.named_children(&mut c).all(|ch| constant_like(ctx, ch, depth + 1))
        }
        _ => false,
    }
}

/// `W(expr, hint...)` inside a kernel. Every such call is a candidate; the
/// aggregation keeps only functions that some file uses as a pass-through.
fn visit_wrapper(ctx: &mut Ctx, call: Node, callee: &str, in_error: bool) {
    if callee.starts_with('.') {
        return;
    }
    let Some(args) = call.child_by_field_name("arguments") else { return };
    let mut c = args.walk();
    let positional: Vec<Node> = args.named_children(&mut c).filter(|a| a.kind() != "keyword_argument").collect();
    let [first, rest @ ..] = positional.as_slice() else { return };
    if rest.is_empty() {
        return;
    }
    if let Some(assign) = call.parent().filter(|p| p.kind() == "assignment")
        && assign.child_by_field_name("right") == Some(call)
        && assign.child_by_field_name("left").is_some_and(|l| ctx.text(l) == ctx.text(*first))
    {
        ctx.out.scope(&format!("{PASSTHROUGH}{callee}"), 1);
    }
    if !rest.iter().all(|n| constant_like(ctx, *n, 0)) {
        ctx.out.scope(&format!("{VARYING}{callee}"), 1);
    }
    let value = normalize_value(&rest.iter().map(|n| ctx.text(*n)).collect::<Vec<_>>().join(", "));
    let new = ctx.kernel_wrappers.insert(callee.to_string());
    let ex = ctx.lines.example(call.start_position().row);
    ctx.out.site(key(Mechanism::Wrapper, TRITON_KERNEL, callee), Some(value), in_error, new, || ex);
}

/// Byte ranges of the Triton kernels of a parsed file (the decorated
/// definitions whose decorators resolve, through the file's imports, to
/// `triton.jit`, `triton.autotune` or `triton.heuristics`), outermost only.
pub(crate) fn kernel_ranges(src: &str, tree: &Tree) -> Vec<std::ops::Range<usize>> {
    let root = tree.root_node();
    let ctx = Ctx {
        src,
        lines: Lines::new(src),
        aliases: collect_aliases(root, src),
        kernel_params: HashMap::new(),
        kernel_wrappers: HashSet::new(),
        out: FactsBuilder::default(),
    };
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    crate::parse::preorder(root, |node| {
        if node.kind() == "decorated_definition" {
            let mut c = node.walk();
            if node.named_children(&mut c).any(|d| d.kind() == "decorator" && ctx.is_kernel_decorator(d)) {
                out.push(node.byte_range());
                return false;
            }
        }
        true
    });
    out
}

#[cfg(test)]
mod tests {
    use crate::facts::{FileFacts, Mechanism};
    use crate::{ExtractOptions, Lang, extract};

    fn facts(src: &str) -> FileFacts {
        extract(Lang::Python, src, &ExtractOptions::default()).expect("parses")
    }

    fn occ(f: &FileFacts, mechanism: Mechanism, subject: &str, decoration: &str) -> u32 {
        f.families
            .iter()
            .find(|(k, _)| k.mechanism == mechanism && k.subject == subject && k.decoration == decoration)
            .map_or(0, |(_, v)| v.occurrences)
    }

    #[test]
    fn kernels_are_found_under_any_alias() {
        let cases = [
            ("import triton\n@triton.jit\ndef k(x): pass\n", 1),
            ("import triton as tr\n@tr.jit\ndef k(x): pass\n", 1),
            ("from triton import jit\n@jit\ndef k(x): pass\n", 1),
            ("import triton\n@triton.autotune(configs=[], key=[])\ndef k(x): pass\n", 1),
            ("import triton\n@triton.heuristics({})\n@triton.jit(do_not_specialize=['T'])\ndef k(x, T): pass\n", 1),
            ("import numba\n@numba.jit\ndef k(x): pass\n", 0),
            ("def jit(f): return f\n@jit\ndef k(x): pass\n", 0),
        ];
        for (src, kernels) in cases {
            assert_eq!(facts(src).kernels, kernels, "{src}");
        }
    }

    #[test]
    fn aliases_resolve_to_tl() {
        let f = facts(
            "import triton\nfrom triton import language as T\n@triton.jit\ndef k(a):\n    T.dot(a, a, input_precision='ieee')\n",
        );
        assert_eq!(occ(&f, Mechanism::Keyword, "tl.dot", "input_precision"), 1);
        assert_eq!(f.scopes.get("call:tl.dot"), Some(&1));
    }

    #[test]
    fn host_code_and_comments_are_not_sites() {
        let f = facts(
            "import triton\nimport triton.language as tl\n# tl.dot(a, b, input_precision='ieee')\ndef host(a):\n    return tl.dot(a, a, input_precision='ieee')\n",
        );
        assert_eq!(occ(&f, Mechanism::Keyword, "tl.dot", "input_precision"), 0);
        assert_eq!(f.kernels, 0);
    }

    #[test]
    fn method_wraps_on_locals_are_methods() {
        let f = facts(
            "import triton\nimport triton.language as tl\n@triton.jit\ndef k(a):\n    b_A = a\n    b_A.to(tl.float32, fp_downcast_rounding='rtne')\n    tl.program_id(0).to(tl.int64)\n",
        );
        assert_eq!(occ(&f, Mechanism::Keyword, ".to", "fp_downcast_rounding"), 1);
        let wrap = f.families.iter().find(|(k, _)| k.mechanism == Mechanism::MethodWrap).expect("wrap");
        assert_eq!(wrap.0.subject, "tl.program_id");
        assert_eq!(wrap.1.values.get("tl.int64"), Some(&1));
    }

    #[test]
    fn hints_record_pass_through_and_constant_arguments() {
        let f = facts(
            "import triton\nimport triton.language as tl\n@triton.jit\ndef k(p, BD: tl.constexpr):\n    p = tl.multiple_of(p, 16)\n    m = tl.maximum(m, x)\n",
        );
        assert_eq!(f.scopes.get("passthrough:tl.multiple_of"), Some(&1));
        assert_eq!(f.scopes.get("varying:tl.multiple_of"), None);
        assert_eq!(f.scopes.get("varying:tl.maximum"), Some(&1));
    }
}
