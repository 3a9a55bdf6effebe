//! Usage facts from Python files: Triton kernels, their decorators,
//! parameters, calls, keyword arguments and method wraps, and launches.

use std::collections::{BTreeMap, HashMap, HashSet};

use kidiom_syntax::{ImportAliases, Lang};
use tree_sitter::{Node, Tree};

use crate::facts::{FactsBuilder, FamilyKey, Lines, Mechanism, normalize_value};
use crate::parse::Step;
use crate::values::{ValueExpr, canonical_literals, condition_text, is_literal};

mod bind;
use bind::{bind_block, collect_kernels, collect_launch_values, triton_function};

/// Deepest expression (or `if` block) evaluated for a value's binding.
const MAX_EVAL_DEPTH: usize = 16;

/// The scope counting Triton kernels.
pub const TRITON_KERNEL: &str = "triton-kernel";
/// The scope counting Triton kernel parameters.
pub const TRITON_PARAM: &str = "triton-param";
/// The callee name given to kernel launches `kernel[grid](...)`.
pub const LAUNCH: &str = "$KERNEL[$GRID]";

struct Ctx<'a> {
    src: &'a str,
    lines: Lines<'a>,
    aliases: ImportAliases,
    /// Kernel name -> its parameter names, for telling launch options from arguments.
    kernel_params: HashMap<String, HashSet<String>>,
    /// Pass-through wrappers already counted in the current kernel.
    kernel_wrappers: HashSet<String>,
    /// Module-level names after the module ran: what each is bound to.
    module: BTreeMap<String, ValueExpr>,
    /// Kernel name -> parameter -> what it is given (its default, autotune
    /// configurations, launches in this file).
    param_values: HashMap<String, BTreeMap<String, ValueExpr>>,
    /// The kernel being walked.
    kernel: Option<KernelScope>,
    out: FactsBuilder,
}

/// The names a kernel's body binds: its parameters and its locals.
struct KernelScope {
    name: String,
    params: HashSet<String>,
    locals: HashSet<String>,
}

impl<'a> Ctx<'a> {
    fn text(&self, n: Node) -> &'a str {
        self.src.get(n.byte_range()).unwrap_or("")
    }

    /// Resolves import aliases and writes Triton's language module as `tl`.
    fn canonical(&self, dotted: &str) -> String {
        self.aliases.canonical(dotted)
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
                if is_dotted(obj) && self.aliases.binds(head) {
                    Some(self.canonical(text))
                } else {
                    Some(format!(".{}", self.text(attr)))
                }
            }
            _ => None,
        }
    }

    /// A value's text in the histogram: string literals in double quotes,
    /// whitespace collapsed.
    fn value_text(&self, n: Node) -> String {
        normalize_value(&canonical_literals(self.text(n)))
    }

    /// What an expression holds, with names looked up by `lookup`.
    fn eval(&self, n: Node, lookup: &dyn Fn(&str) -> Option<ValueExpr>, depth: usize) -> ValueExpr {
        let opaque = || ValueExpr::Opaque { text: self.value_text(n) };
        if depth > MAX_EVAL_DEPTH {
            return opaque();
        }
        match n.kind() {
            "string" | "concatenated_string" => {
                let mut interpolated = false;
                kidiom_syntax::preorder(n, |c| {
                    interpolated |= c.kind() == "interpolation";
                    !interpolated
                });
                if interpolated { opaque() } else { ValueExpr::Literal { text: self.value_text(n) } }
            }
            "integer" | "float" | "true" | "false" | "none" => ValueExpr::Literal { text: self.value_text(n) },
            "unary_operator"
                if n.child_by_field_name("argument").is_some_and(|a| matches!(a.kind(), "integer" | "float")) =>
            {
                ValueExpr::Literal { text: self.value_text(n) }
            }
            "parenthesized_expression" => match named(n).as_slice() {
                [inner] => self.eval(*inner, lookup, depth + 1),
                _ => opaque(),
            },
            "conditional_expression" => match named(n).as_slice() {
                [then, cond, otherwise] => ValueExpr::Cond {
                    cond: condition_text(&canonical_literals(self.text(*cond))),
                    then: Box::new(self.eval(*then, lookup, depth + 1)),
                    otherwise: Box::new(self.eval(*otherwise, lookup, depth + 1)),
                },
                _ => opaque(),
            },
            "call" => {
                // `tl.constexpr(x)` holds what `x` holds.
                let is_constexpr =
                    n.child_by_field_name("function").is_some_and(|f| self.canonical(self.text(f)) == "tl.constexpr");
                let args = n.child_by_field_name("arguments").map(named).unwrap_or_default();
                match args.as_slice() {
                    [arg] if is_constexpr && arg.kind() != "keyword_argument" => self.eval(*arg, lookup, depth + 1),
                    _ => opaque(),
                }
            }
            "identifier" => lookup(self.text(n)).unwrap_or_else(opaque),
            _ => opaque(),
        }
    }

    /// A module-level name after the module ran.
    fn lookup_module(&self, name: &str) -> Option<ValueExpr> {
        self.module.get(name).cloned()
    }

    /// A name inside the current kernel: a parameter (what it is given), a
    /// local (unknown), else a module-level name.
    fn lookup_kernel(&self, name: &str) -> Option<ValueExpr> {
        if let Some(k) = &self.kernel {
            if k.params.contains(name) {
                return self.param_values.get(&k.name).and_then(|m| m.get(name)).cloned();
            }
            if k.locals.contains(name) {
                return None;
            }
        }
        self.lookup_module(name)
    }

    fn is_kernel_decorator(&self, dec: Node) -> bool {
        self.aliases.is_kernel_decorator(dec, self.src)
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

/// Named children but comments.
fn named<'t>(n: Node<'t>) -> Vec<Node<'t>> {
    let mut c = n.walk();
    n.named_children(&mut c).filter(|ch| ch.kind() != "comment").collect()
}

/// Names a kernel's body binds itself (assignments, loop variables), which
/// hide module-level names of the same spelling.
fn kernel_locals(ctx: &Ctx, def: Node) -> HashSet<String> {
    let mut out = HashSet::new();
    let Some(body) = def.child_by_field_name("body") else { return out };
    kidiom_syntax::preorder(body, |n| {
        let target = match n.kind() {
            "assignment" | "augmented_assignment" | "for_statement" => n.child_by_field_name("left"),
            "named_expression" => n.child_by_field_name("name"),
            _ => None,
        };
        if let Some(t) = target {
            kidiom_syntax::preorder(t, |m| {
                if m.kind() == "identifier" {
                    out.insert(ctx.text(m).to_string());
                }
                !matches!(m.kind(), "attribute" | "subscript")
            });
        }
        true
    });
    out
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
        aliases: ImportAliases::of(root, src),
        kernel_params: HashMap::new(),
        kernel_wrappers: HashSet::new(),
        module: BTreeMap::new(),
        param_values: HashMap::new(),
        kernel: None,
        out: FactsBuilder::with_errors(root.has_error()),
    };
    let mut module = BTreeMap::new();
    bind_block(&ctx, root, &mut module, 0);
    ctx.module = module;
    collect_kernels(&mut ctx, root);
    collect_launch_values(&mut ctx, root);
    walk(&mut ctx, root);
    ctx.out.constants =
        ctx.module.iter().filter(|(_, v)| v.has_literal()).map(|(k, v)| (k.clone(), v.clone())).collect();
    for (name, v) in &ctx.module {
        if let Some(f) = triton_function(&ctx, v) {
            ctx.out.functions.insert(name.clone(), f);
        }
        if let ValueExpr::Import { module, name: there } = v
            && ctx.out.has_call(name)
        {
            ctx.out.imported_calls.insert(name.clone(), (module.clone(), there.clone()));
        }
    }
    ctx.out
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
                    ctx.kernel = node.child_by_field_name("definition").map(|def| KernelScope {
                        name: def.child_by_field_name("name").map(|n| ctx.text(n).to_string()).unwrap_or_default(),
                        params: def
                            .child_by_field_name("parameters")
                            .map(|ps| {
                                named(ps)
                                    .into_iter()
                                    .filter_map(parameter_name)
                                    .map(|n| ctx.text(n).to_string())
                                    .collect()
                            })
                            .unwrap_or_default(),
                        locals: kernel_locals(ctx, def),
                    });
                    enter_kernel(ctx, node, &decorators, !errors_at.is_empty());
                }
            } else if node.kind() == "call" {
                visit_call(ctx, node, kernel_at.is_some(), !errors_at.is_empty());
            }
        }
        Step::Leave(depth) => {
            if kernel_at == Some(depth) {
                kernel_at = None;
                ctx.kernel = None;
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
            let v = ctx.value_text(value);
            let ex = ctx.lines.example(value.start_position().row);
            let k = key(Mechanism::Keyword, LAUNCH, kw);
            ctx.out.site(k.clone(), Some(v.clone()), in_error, true, || ex);
            record_binding(ctx, &k, &v, value, false);
        }
        return;
    } else {
        return;
    };
    let row = call.start_position().row;
    ctx.out.call(&callee, || ctx.lines.example(row));
    for (kw, value) in keyword_args(ctx, call) {
        let v = ctx.value_text(value);
        let ex = ctx.lines.example(value.start_position().row);
        let k = key(Mechanism::Keyword, &callee, kw);
        ctx.out.site(k.clone(), Some(v.clone()), in_error, true, || ex);
        record_binding(ctx, &k, &v, value, in_kernel);
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

/// Records what a value that is not itself a literal is bound to, when
/// that can lead to a literal (`DOT_PRECISION`, `tl.constexpr(PREC)`).
fn record_binding(ctx: &mut Ctx, k: &FamilyKey, v: &str, value: Node, in_kernel: bool) {
    if is_literal(v) {
        return;
    }
    let expr = if in_kernel {
        ctx.eval(value, &|n: &str| ctx.lookup_kernel(n), 0)
    } else {
        ctx.eval(value, &|n: &str| ctx.lookup_module(n), 0)
    };
    if expr.may_resolve() {
        ctx.out.resolve(k, v, expr);
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
    let value = normalize_value(&canonical_literals(&rest.iter().map(|n| ctx.text(*n)).collect::<Vec<_>>().join(", ")));
    let new = ctx.kernel_wrappers.insert(callee.to_string());
    let ex = ctx.lines.example(call.start_position().row);
    ctx.out.site(key(Mechanism::Wrapper, TRITON_KERNEL, callee), Some(value), in_error, new, || ex);
}

#[cfg(test)]
mod tests {
    use crate::facts::{FileFacts, Mechanism};
    use crate::{ExtractOptions, extract};
    use kidiom_syntax::Lang;

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

    /// The values and bindings of `input_precision=` on `tl.dot` in `src`.
    fn dot_values(src: &str) -> crate::FamilyFacts {
        let f = facts(src);
        f.families
            .into_iter()
            .find(|(k, _)| k.subject == "tl.dot" && k.decoration == "input_precision")
            .map(|(_, v)| v)
            .expect("a tl.dot input_precision site")
    }

    /// `(rendered expression, literals)` of a value's binding in its own file.
    fn bound(ff: &crate::FamilyFacts, value: &str) -> Option<(String, Vec<String>)> {
        ff.resolved.get(value).map(|e| (e.render(), e.literals()))
    }

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    const HEAD: &str = "import triton\nimport triton.language as tl\n";

    fn kernel(value: &str) -> String {
        format!("@triton.jit\ndef k(a, b):\n    tl.dot(a, b, input_precision={value})\n")
    }

    #[test]
    fn single_and_double_quoted_values_are_one_value() {
        let ff = dot_values(&format!(
            "{HEAD}@triton.jit\ndef k(a):\n    tl.dot(a, a, input_precision='ieee')\n    tl.dot(a, a, input_precision=\"ieee\")\n"
        ));
        assert_eq!(ff.values.get("\"ieee\""), Some(&2), "{:?}", ff.values);
        assert_eq!(ff.values.len(), 1);
        assert!(ff.resolved.is_empty(), "a literal needs no resolution");
    }

    #[test]
    fn a_constexpr_of_a_conditional_resolves() {
        let ff = dot_values(&format!(
            "{HEAD}IS_NPU = False\nPREC = tl.constexpr('ieee' if IS_NPU else 'tf32x3')\n{}",
            kernel("PREC")
        ));
        assert_eq!(
            bound(&ff, "PREC"),
            Some(("\"ieee\" if IS_NPU else \"tf32x3\"".into(), strs(&["\"ieee\"", "\"tf32x3\""])))
        );
    }

    #[test]
    fn an_if_else_block_resolves_to_a_conditional() {
        let src = format!(
            "{HEAD}from pkg.utils import HAS_TF32\nif HAS_TF32:\n    PREC = tl.constexpr('tf32')\nelse:\n    PREC = tl.constexpr('ieee')\n{}",
            kernel("PREC")
        );
        let ff = dot_values(&src);
        assert_eq!(
            bound(&ff, "PREC"),
            Some(("\"tf32\" if HAS_TF32 else \"ieee\"".into(), strs(&["\"tf32\"", "\"ieee\""])))
        );
        // elif chains nest; a branch that does not assign keeps the earlier value.
        let src = format!(
            "{HEAD}PREC = 'ieee'\nif A:\n    PREC = 'tf32'\nelif B:\n    pass\nelse:\n    PREC = 'bf16x3'\n{}",
            kernel("PREC")
        );
        let ff = dot_values(&src);
        assert_eq!(
            bound(&ff, "PREC"),
            Some((
                "\"tf32\" if A else \"ieee\" if B else \"bf16x3\"".into(),
                strs(&["\"tf32\"", "\"ieee\"", "\"bf16x3\""])
            ))
        );
    }

    #[test]
    fn a_compound_condition_is_kept_on_one_line() {
        let ff = dot_values(&format!(
            "{HEAD}P = tl.constexpr('bf16x3' if (NEW_TRITON and  # why\n    not IS_NPU) else 'ieee')\n{}",
            kernel("P")
        ));
        let (expr, lits) = bound(&ff, "P").expect("bound");
        assert_eq!(expr, "\"bf16x3\" if (NEW_TRITON and not IS_NPU) else \"ieee\"");
        assert_eq!(lits, strs(&["\"bf16x3\"", "\"ieee\""]));
    }

    #[test]
    fn a_plain_assignment_resolves_and_the_last_one_wins() {
        let ff = dot_values(&format!("{HEAD}P = 'tf32'\n{}P = \"ieee\"\n", kernel("P")));
        assert_eq!(bound(&ff, "P"), Some(("\"ieee\"".into(), strs(&["\"ieee\""]))));
        // Through another name, and a constexpr of a literal.
        let ff = dot_values(&format!("{HEAD}BASE = 'ieee'\nP = BASE\n{}", kernel("P")));
        assert_eq!(bound(&ff, "P"), Some(("\"ieee\"".into(), strs(&["\"ieee\""]))));
        let ff = dot_values(&format!("{HEAD}{}", kernel("tl.constexpr('ieee')")));
        assert_eq!(ff.values.keys().collect::<Vec<_>>(), ["tl.constexpr(\"ieee\")"]);
        assert_eq!(bound(&ff, "tl.constexpr(\"ieee\")"), Some(("\"ieee\"".into(), strs(&["\"ieee\""]))));
    }

    #[test]
    fn a_constexpr_parameter_resolves_to_what_launches_pass() {
        let src = format!(
            "{HEAD}@triton.autotune(configs=[triton.Config({{'PREC': 'tf32'}}, num_warps=4)], key=['n'])\n@triton.jit\ndef k(a, n, PREC: tl.constexpr, OTHER: tl.constexpr = 'bf16x3'):\n    tl.dot(a, a, input_precision=PREC)\n    tl.dot(a, a, input_precision=OTHER)\n\ndef host(a, p):\n    k[(1,)](a, 3, PREC=\"ieee\")\n    k[(1,)](a, 3, PREC='ieee', OTHER=p)\n"
        );
        let ff = dot_values(&src);
        assert_eq!(bound(&ff, "PREC"), Some(("\"tf32\" | \"ieee\"".into(), strs(&["\"tf32\"", "\"ieee\""]))));
        // A default, and a launch value that is the host function's own: shown, no literal.
        assert_eq!(bound(&ff, "OTHER"), Some(("\"bf16x3\" | p".into(), strs(&["\"bf16x3\""]))));
    }

    #[test]
    fn an_import_is_recorded_for_aggregation() {
        let src = format!("{HEAD}from .consts import PREC as P\n{}", kernel("P"));
        let ff = dot_values(&src);
        assert_eq!(
            ff.resolved.get("P"),
            Some(&crate::ValueExpr::Import { module: ".consts".into(), name: "PREC".into() })
        );
        // The module's own literal constants are kept for others' imports; imports are not.
        let f = facts(&format!(
            "{HEAD}from x import Y\nA = 'ieee'\nB = tl.constexpr('tf32' if Y else 'ieee')\nC = Y\nD = compute()\n"
        ));
        assert_eq!(f.constants.keys().collect::<Vec<_>>(), ["A", "B"]);
    }

    #[test]
    fn unresolvable_names_are_not_bound() {
        // Undefined, a kernel local hiding a module constant, a parameter no launch sets.
        let src = format!(
            "{HEAD}P = 'tf32'\n@triton.jit\ndef k(a, Q: tl.constexpr):\n    P = pick()\n    tl.dot(a, a, input_precision=P)\n    tl.dot(a, a, input_precision=Q)\n    tl.dot(a, a, input_precision=UNDEFINED)\n    tl.dot(a, a, input_precision=compute())\n"
        );
        let ff = dot_values(&src);
        assert_eq!(ff.values.len(), 4, "{:?}", ff.values);
        assert!(ff.resolved.is_empty(), "{:?}", ff.resolved);
    }
}
