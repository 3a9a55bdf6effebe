//! Host code is contract. A rewrite of a Triton or CUDA kernel source may
//! change the kernels in it (`@triton.jit` functions, `__global__` and
//! `__device__` functions: the manifest's `entry` and its helpers), never the
//! host code around them: a launcher can call the reference instead of the
//! kernel, cache outputs, or change what is timed. Host C++ sources
//! (`language = "cpp"`) are kernels as a whole and have no such rule.
//!
//! Both texts are parsed, the kernels found with
//! [`kidiom_syntax::kernel_ranges`], and every top-level definition or
//! statement outside them (with any kernel nested in it cut out) is compared:
//! the ones that differ are named.
//!
//! A Triton kernel's decorators and its signature (parameter defaults,
//! annotations, return annotation) are host code although they sit on the
//! kernel: Python evaluates them when the module is imported, and
//! `autotune`/`heuristics` arguments run again at every launch. They are
//! compared like any host item, with one exception: a candidate whose
//! pattern is a decorator idiom (a [`DecoratorIdiom`]) may change decorators
//! of that idiom's callee, as long as every argument it writes is a literal
//! (or a `Config(...)` of literals, or a `lambda` over its own parameters
//! that calls nothing but a few pure helpers).
//!
//! A kernel launch's configuration is not contract (SPEC §8, "Launch
//! configuration"): in a launch `KERNEL[GRID](...)` of a kernel of the file
//! ([`kidiom_syntax::kernel_launches`]), the grid expression, `num_warps=`,
//! `num_stages=` and the keywords naming the kernel's `tl.constexpr`
//! parameters may change (for an imported kernel, only the launch options),
//! when every changed value only computes a value from names, literals and
//! a few pure helpers (`triton.cdiv`, `min`): no call that could run the
//! reference or touch a tensor. Each launch is compared with those parts
//! left out, so any other change to it (an argument, the kernel launched)
//! or around it is host code as before.

use std::collections::HashMap;
use std::ops::Range;

use kidiom_syntax::{KernelKind, Lang, Launch, Launched, kernel_launches, kernel_ranges, parse_tree};
use tree_sitter::Node;

/// One piece of host code: its name for a reason, and its text (kernels cut out, normalized).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Item {
    name: String,
    text: String,
    /// For a kernel's decorators: the kernel's name and each decorator, as
    /// (callee, whether its arguments are literals), so that a decorator
    /// idiom can be told apart from other decorator edits.
    decorators: Option<(String, Vec<(String, bool)>)>,
    /// For a kernel's decorators or signature: the kernel, and whether the
    /// item runs nothing but value construction (literal decorator
    /// arguments; literal defaults and annotations that are names).
    kernel: Option<(String, bool)>,
    /// The configuration of the launches in this item (`launch 1 of `k`:
    /// grid`), compared apart from its text.
    config: Vec<Slot>,
}

/// One part of a launch's configuration: which (`launch 1 of `k`:
/// `num_warps=``), its tokens, and whether its value only computes a value.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Slot {
    key: String,
    value: String,
    pure: bool,
}

/// The decorator a candidate's pattern adds or changes (its `after` is a
/// decorator, `@triton.jit(do_not_specialize=$A)`): decorators of this
/// callee may change, with literal arguments only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecoratorIdiom {
    /// The decorator's callee, last dotted part (`jit`, `autotune`, `heuristics`).
    pub callee: String,
}

impl DecoratorIdiom {
    /// The idiom of a pattern whose `after` template is a Python decorator.
    pub fn from_template(after: &str) -> Option<DecoratorIdiom> {
        let line = after.lines().map(str::trim).find(|l| !l.is_empty())?;
        let head = line.strip_prefix('@')?;
        let callee = head.split('(').next()?.trim();
        let last = callee.rsplit('.').next()?.trim();
        (!last.is_empty() && last.chars().all(|c| c.is_alphanumeric() || c == '_'))
            .then(|| DecoratorIdiom { callee: last.to_string() })
    }
}

/// The host code a candidate changes, named (`kda_decode_launch`,
/// `import numpy as np`, `module-level code `X = 1``), in the order it appears;
/// empty when only kernels changed. `Err` when a text cannot be parsed.
pub(crate) fn changed_host_code(
    lang: Lang,
    base: &str,
    cand: &str,
    idiom: Option<&DecoratorIdiom>,
) -> Result<Vec<String>, String> {
    let (mut b, mut c) = (items(lang, base)?, items(lang, cand)?);
    if let Some(idiom) = idiom {
        allow_decorator_idiom(idiom, &mut b, &mut c);
    }
    // a new kernel (a helper a rewrite adds) brings its own decorators and
    // signature: allowed when they only build values
    let known: Vec<String> = b.iter().filter_map(|i| i.kernel.as_ref().map(|(k, _)| k.clone())).collect();
    c.retain(|i| !i.kernel.as_ref().is_some_and(|(k, pure)| *pure && !known.contains(k)));
    let configs =
        |items: &mut Vec<Item>| -> Vec<Vec<Slot>> { items.iter_mut().map(|i| std::mem::take(&mut i.config)).collect() };
    let (bc, cc) = (configs(&mut b), configs(&mut c));
    if b == c {
        return Ok(changed_configuration(&c, &bc, &cc));
    }
    let mut count: HashMap<&str, i64> = HashMap::new();
    for i in &b {
        *count.entry(i.text.as_str()).or_default() += 1;
    }
    for i in &c {
        *count.entry(i.text.as_str()).or_default() -= 1;
    }
    let mut names: Vec<String> = Vec::new();
    // candidate items first (what it adds or changes), then what it removes
    for i in c.iter().chain(&b) {
        if count.get(i.text.as_str()).is_some_and(|n| *n != 0) && !names.contains(&i.name) {
            names.push(i.name.clone());
        }
    }
    if names.is_empty() {
        names.push("the order of host definitions".into());
    }
    Ok(names)
}

/// The items (of host code equal but for its launches' configuration)
/// whose launches' configuration changes to a value that does more than
/// compute a value, named with the part that does.
fn changed_configuration(items: &[Item], base: &[Vec<Slot>], cand: &[Vec<Slot>]) -> Vec<String> {
    let mut names = Vec::new();
    for ((item, b), c) in items.iter().zip(base).zip(cand) {
        let runs: Vec<&str> = c
            .iter()
            .filter(|s| !s.pure && !b.iter().any(|o| o.key == s.key && o.value == s.value))
            .map(|s| s.key.as_str())
            .collect();
        if !runs.is_empty() {
            names.push(format!(
                "{} (the launch configuration may change only to values computed from names, literals and pure helpers: {})",
                item.name,
                runs.join(", ")
            ));
        }
    }
    names
}

/// Drops, from both sides, a kernel's decorator items that differ only by
/// decorators of the idiom's callee whose arguments are all literals in the
/// candidate: that edit is the idiom being applied, not host code.
fn allow_decorator_idiom(idiom: &DecoratorIdiom, base: &mut Vec<Item>, cand: &mut Vec<Item>) {
    let others = |decs: &[(String, bool)]| -> Vec<String> {
        decs.iter().filter(|(callee, _)| callee_last(callee) != idiom.callee).map(|(d, _)| d.clone()).collect()
    };
    let mut allowed: Vec<String> = Vec::new();
    for c in cand.iter() {
        let Some((kernel, decs)) = &c.decorators else { continue };
        let Some(b) = base.iter().find(|b| b.decorators.as_ref().is_some_and(|(k, _)| k == kernel)) else { continue };
        let Some((_, base_decs)) = &b.decorators else { continue };
        let literal = decs.iter().filter(|(callee, _)| callee_last(callee) == idiom.callee).all(|(_, lit)| *lit);
        if literal && others(decs) == others(base_decs) {
            allowed.push(kernel.clone());
        }
    }
    let keep = |i: &Item| !i.decorators.as_ref().is_some_and(|(k, _)| allowed.contains(k));
    base.retain(keep);
    cand.retain(keep);
}

/// `triton.jit(...)` -> `jit`: the decorator's callee, last dotted part.
fn callee_last(decorator: &str) -> &str {
    let head = decorator.trim_start_matches('@').split('(').next().unwrap_or("").trim();
    head.rsplit('.').next().unwrap_or(head).trim()
}

/// A Triton kernel's decorators and signature, as host items.
fn kernel_host_items(node: Node, text: &str, out: &mut Vec<Item>) {
    if node.kind() != "decorated_definition" {
        return;
    }
    let Some(def) = node.child_by_field_name("definition") else { return };
    let kernel = field_text(def, "name", text).unwrap_or("(kernel)").to_string();
    let mut decs: Vec<(String, bool)> = Vec::new();
    let mut cursor = node.walk();
    for d in node.named_children(&mut cursor).filter(|d| d.kind() == "decorator") {
        let src = normalize(Lang::Python, text.get(d.byte_range()).unwrap_or(""));
        let src = src.split_whitespace().collect::<Vec<_>>().join(" ");
        decs.push((src, decorator_is_literal(d, text)));
    }
    let listed: Vec<&str> = decs.iter().map(|(d, _)| d.as_str()).collect();
    let literal = decs.iter().all(|(_, lit)| *lit);
    out.push(Item {
        name: format!("the decorators of `{kernel}` (they run on the host)"),
        text: format!("decorators of {kernel}: {}", listed.join(" | ")),
        decorators: Some((kernel.clone(), decs)),
        kernel: Some((kernel.clone(), literal)),
        config: Vec::new(),
    });
    let params = def.child_by_field_name("parameters");
    let ret = def.child_by_field_name("return_type");
    let pure = params.is_none_or(|p| parameters_pure(p, text)) && ret.is_none_or(is_name);
    let (params, ret) = (
        params.and_then(|p| text.get(p.byte_range())).unwrap_or(""),
        ret.and_then(|p| text.get(p.byte_range())).unwrap_or(""),
    );
    let sig = format!("{params} -> {ret}").split_whitespace().collect::<Vec<_>>().join(" ");
    out.push(Item {
        name: format!("the signature of `{kernel}` (defaults and annotations run on the host)"),
        text: format!("signature of {kernel}: {sig}"),
        decorators: None,
        kernel: Some((kernel, pure)),
        config: Vec::new(),
    });
}

/// Parameters whose defaults are literals and whose annotations are names
/// (`tl.constexpr`): evaluating them at import runs nothing.
fn parameters_pure(params: Node, text: &str) -> bool {
    let mut cursor = params.walk();
    params.named_children(&mut cursor).all(|p| {
        let default_ok = p.child_by_field_name("value").is_none_or(|v| is_literal(v, text, &[], 0));
        let annotation_ok = p.child_by_field_name("type").is_none_or(|t| {
            let mut c = t.walk();
            t.named_children(&mut c).all(is_name)
        });
        default_ok && annotation_ok
    })
}

/// `tl.constexpr`, `int`: a dotted name, which evaluating only looks up.
fn is_name(node: Node) -> bool {
    match node.kind() {
        "identifier" => true,
        "attribute" => node.child_by_field_name("object").is_some_and(is_name),
        "type" => {
            let mut c = node.walk();
            node.named_children(&mut c).all(is_name)
        }
        _ => false,
    }
}

/// Whether a decorator's arguments are literals: nothing in them can run
/// code when the module is imported or the kernel launched, beyond
/// building values (a `Config(...)`) and pure lambdas.
fn decorator_is_literal(decorator: Node, text: &str) -> bool {
    let mut cursor = decorator.walk();
    let Some(expr) = decorator.named_children(&mut cursor).find(|c| c.kind() != "comment") else { return false };
    match expr.kind() {
        "identifier" | "attribute" => true, // `@triton.jit`: no arguments
        "call" => expr.child_by_field_name("arguments").is_some_and(|a| arguments_literal(a, text, &[])),
        _ => false,
    }
}

/// Calls a decorator argument may make: value constructors and pure helpers.
const PURE_CALLS: &[&str] = &["Config", "next_power_of_2", "cdiv", "min", "max", "abs", "int", "bool", "float"];

fn arguments_literal(args: Node, text: &str, params: &[&str]) -> bool {
    let mut cursor = args.walk();
    args.named_children(&mut cursor).all(|a| match a.kind() {
        "comment" => true,
        "keyword_argument" => a.child_by_field_name("value").is_some_and(|v| is_literal(v, text, params, 0)),
        _ => is_literal(a, text, params, 0),
    })
}

fn is_literal(node: Node, text: &str, params: &[&str], depth: usize) -> bool {
    if depth > 64 {
        return false;
    }
    let all = |n: Node, params: &[&str]| {
        let mut cursor = n.walk();
        n.named_children(&mut cursor).all(|c| c.kind() == "comment" || is_literal(c, text, params, depth + 1))
    };
    match node.kind() {
        "integer" | "float" | "true" | "false" | "none" | "ellipsis" => true,
        "string" => {
            let mut cursor = node.walk();
            node.named_children(&mut cursor).all(|c| c.kind() != "interpolation")
        }
        "concatenated_string"
        | "list"
        | "tuple"
        | "set"
        | "dictionary"
        | "pair"
        | "parenthesized_expression"
        | "unary_operator"
        | "binary_operator"
        | "comparison_operator"
        | "boolean_operator"
        | "not_operator"
        | "conditional_expression" => all(node, params),
        // only the lambda's own parameters are names a value may read
        "identifier" => text.get(node.byte_range()).is_some_and(|n| params.contains(&n)),
        "subscript" => {
            node.child_by_field_name("value").is_some_and(|v| is_literal(v, text, params, depth + 1)) && {
                let mut cursor = node.walk();
                node.children_by_field_name("subscript", &mut cursor).all(|s| is_literal(s, text, params, depth + 1))
            }
        }
        "lambda" => {
            let names: Vec<&str> = node
                .child_by_field_name("parameters")
                .map(|p| {
                    let mut cursor = p.walk();
                    p.named_children(&mut cursor)
                        .filter(|c| c.kind() == "identifier")
                        .filter_map(|c| text.get(c.byte_range()))
                        .collect()
                })
                .unwrap_or_default();
            let mut all_params: Vec<&str> = params.to_vec();
            all_params.extend(names);
            node.child_by_field_name("body").is_some_and(|b| is_literal(b, text, &all_params, depth + 1))
        }
        "call" => {
            let callee = node.child_by_field_name("function").and_then(|f| text.get(f.byte_range())).unwrap_or("");
            let last = callee.rsplit('.').next().unwrap_or(callee);
            PURE_CALLS.contains(&last)
                && callee.split('.').all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'))
                && node.child_by_field_name("arguments").is_some_and(|a| arguments_literal(a, text, params))
        }
        _ => false,
    }
}

fn items(lang: Lang, text: &str) -> Result<Vec<Item>, String> {
    let tree = parse_tree(lang, text)
        .map_err(|e| format!("cannot parse: {e:?}"))?
        .ok_or_else(|| format!("no tree-sitter parser for {lang:?}"))?;
    let kernels: Vec<Range<usize>> = kernel_ranges(lang, text, &tree)
        .into_iter()
        .filter(|k| matches!(k.kind, KernelKind::Triton | KernelKind::Global | KernelKind::Device))
        .map(|k| k.range)
        .collect();
    let root = tree.root_node();
    let mut out = Vec::new();
    let mut launches: Vec<(Range<usize>, String, Vec<Slot>)> = Vec::new();
    if lang == Lang::Python {
        for k in &kernels {
            if let Some(node) = root.descendant_for_byte_range(k.start, k.end) {
                kernel_host_items(node, text, &mut out);
            }
        }
        launches = kernel_launches(text, &tree).iter().filter_map(|l| launch_parts(root, text, l)).collect();
    }
    let mut cursor = root.walk();
    for node in root.named_children(&mut cursor) {
        if node.kind() == "comment" {
            continue;
        }
        let r = node.byte_range();
        if kernels.iter().any(|k| k.start <= r.start && r.end <= k.end) {
            continue; // a kernel (or inside one)
        }
        // kernels cut out; each launch written without its configuration
        let mut swaps: Vec<(Range<usize>, &str)> = kernels.iter().map(|k| (k.clone(), "\n")).collect();
        swaps.extend(launches.iter().map(|(call, skeleton, _)| (call.clone(), skeleton.as_str())));
        let body = normalize(lang, &cut(text, r.clone(), &swaps));
        if body.is_empty() {
            continue;
        }
        let mut config: Vec<Slot> = Vec::new();
        for (i, (_, _, slots)) in launches.iter().filter(|(c, _, _)| r.start <= c.start && c.end <= r.end).enumerate() {
            config.extend(slots.iter().map(|s| Slot { key: format!("launch {}{}", i + 1, s.key), ..s.clone() }));
        }
        out.push(Item { name: name(lang, node, text), text: body, decorators: None, kernel: None, config });
    }
    Ok(out)
}

/// A launch as host code sees it: its call's bytes, the call written as
/// tokens without its configuration (`k[<grid>](x, o, N=N)`), and the
/// configuration (` of `k`: grid`, ` of `k`: `num_warps=``), each with its
/// tokens and whether it only computes a value.
fn launch_parts(root: Node, text: &str, l: &Launch) -> Option<(Range<usize>, String, Vec<Slot>)> {
    let call = root.descendant_for_byte_range(l.call.start, l.call.end)?;
    let call =
        std::iter::successors(Some(call), |n| n.parent()).find(|n| n.byte_range() == l.call && n.kind() == "call")?;
    let args = call.child_by_field_name("arguments")?;
    let mut slots = Vec::new();
    let grid = match l.launched {
        Launched::Defined { .. } => {
            let sub = call.child_by_field_name("function")?;
            let mut c = sub.walk();
            let parts: Vec<Node> = sub.children_by_field_name("subscript", &mut c).collect();
            let value = parts.iter().map(|p| tokens(*p, text)).collect::<Vec<_>>().join(" , ");
            slots.push(Slot {
                key: format!(" of `{}`: grid", l.kernel),
                value,
                pure: parts.iter().all(|p| is_pure(*p, text, 0)),
            });
            "<grid>".to_string()
        }
        Launched::Imported => text.get(l.grid.clone()).map(|g| g.split_whitespace().collect::<Vec<_>>().join(" "))?,
    };
    let mut kept = Vec::new();
    let mut c = args.walk();
    for a in args.named_children(&mut c).filter(|a| a.kind() != "comment") {
        let keyword = (a.kind() == "keyword_argument")
            .then(|| a.child_by_field_name("name").and_then(|n| text.get(n.byte_range())))
            .flatten();
        match (keyword, a.child_by_field_name("value")) {
            (Some(kw), Some(value)) if l.configures(kw) => slots.push(Slot {
                key: format!(" of `{}`: `{kw}=`", l.kernel),
                value: tokens(value, text),
                pure: is_pure(value, text, 0),
            }),
            _ => kept.push(tokens(a, text)),
        }
    }
    Some((l.call.clone(), format!("{}[{grid}]({})", l.kernel, kept.join(", ")), slots))
}

/// Methods a launch's configuration may call besides [`PURE_CALLS`]: a
/// tensor's sizes (`x.numel()`, `q.size(0)`), which a grid is computed from.
const SIZE_CALLS: &[&str] = &["numel", "size", "stride", "dim", "element_size"];

/// A node as its tokens, one blank apart (comments left out; a string is one token).
fn tokens(node: Node, text: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    kidiom_syntax::preorder(node, |n| {
        if n.kind() == "comment" {
            return false;
        }
        if n.child_count() > 0 && n.kind() != "string" {
            return true;
        }
        out.push(text.get(n.byte_range()).unwrap_or(""));
        false
    });
    out.join(" ")
}

/// Whether evaluating an expression only computes a value: literals, names,
/// attributes and subscripts of them, operators, tuples, conditionals,
/// lambdas of such, and calls of [`PURE_CALLS`] and [`SIZE_CALLS`] on such. A call of anything
/// else (the reference, a tensor's method), an assignment expression or a
/// comprehension could do more.
fn is_pure(node: Node, text: &str, depth: usize) -> bool {
    if depth > 64 {
        return false;
    }
    let all = |n: Node| {
        let mut cursor = n.walk();
        n.named_children(&mut cursor).all(|c| c.kind() == "comment" || is_pure(c, text, depth + 1))
    };
    match node.kind() {
        "integer" | "float" | "true" | "false" | "none" | "ellipsis" | "identifier" => true,
        "string" => {
            let mut cursor = node.walk();
            node.named_children(&mut cursor).all(|c| c.kind() != "interpolation")
        }
        "concatenated_string"
        | "attribute"
        | "subscript"
        | "slice"
        | "tuple"
        | "list"
        | "dictionary"
        | "pair"
        | "parenthesized_expression"
        | "unary_operator"
        | "binary_operator"
        | "comparison_operator"
        | "boolean_operator"
        | "not_operator"
        | "conditional_expression"
        | "keyword_argument"
        | "argument_list"
        // a lambda's parameter defaults are evaluated where it is written
        | "lambda"
        | "lambda_parameters"
        | "default_parameter"
        | "list_splat_pattern"
        | "dictionary_splat_pattern" => all(node),
        "call" => {
            let callee = node.child_by_field_name("function").and_then(|f| text.get(f.byte_range())).unwrap_or("");
            let last = callee.rsplit('.').next().unwrap_or(callee);
            (PURE_CALLS.contains(&last) || SIZE_CALLS.contains(&last))
                && callee.split('.').all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'))
                && node.child_by_field_name("arguments").is_some_and(all)
        }
        _ => false,
    }
}

/// `text[r]` with each of `swaps` inside it (a kernel, a launch) written as its replacement.
fn cut(text: &str, r: Range<usize>, swaps: &[(Range<usize>, &str)]) -> String {
    let mut out = String::new();
    let mut pos = r.start;
    let mut inside: Vec<&(Range<usize>, &str)> =
        swaps.iter().filter(|(k, _)| k.start >= r.start && k.end <= r.end).collect();
    inside.sort_by_key(|(k, _)| k.start);
    for (k, with) in inside {
        if k.start < pos {
            continue;
        }
        out.push_str(text.get(pos..k.start).unwrap_or(""));
        out.push_str(with);
        pos = k.end;
    }
    out.push_str(text.get(pos..r.end).unwrap_or(""));
    out
}

/// Python keeps its indentation (it is meaning) but not trailing spaces and
/// blank lines; C++ and CUDA compare with whitespace runs collapsed.
fn normalize(lang: Lang, s: &str) -> String {
    match lang {
        Lang::Python => s.lines().map(str::trim_end).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("\n"),
        _ => s.split_whitespace().collect::<Vec<_>>().join(" "),
    }
}

fn first_line(s: &str) -> String {
    let line = s.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    if line.chars().count() > 60 { format!("{}...", line.chars().take(60).collect::<String>()) } else { line.into() }
}

fn field_text<'a>(node: Node, field: &str, text: &'a str) -> Option<&'a str> {
    node.child_by_field_name(field).and_then(|n| text.get(n.byte_range()))
}

/// The name a reason gives to a top-level node.
fn name(lang: Lang, node: Node, text: &str) -> String {
    let src = text.get(node.byte_range()).unwrap_or("");
    let named = match (lang, node.kind()) {
        (Lang::Python, "function_definition" | "class_definition") => field_text(node, "name", text).map(String::from),
        (Lang::Python, "decorated_definition") => {
            node.child_by_field_name("definition").and_then(|d| field_text(d, "name", text)).map(String::from)
        }
        (Lang::Python, "import_statement" | "import_from_statement" | "future_import_statement") => {
            Some(first_line(src))
        }
        (_, "function_definition") => cxx_function_name(node, text),
        (_, "namespace_definition") => {
            Some(format!("namespace {}", field_text(node, "name", text).unwrap_or("(anonymous)")))
        }
        (_, "preproc_include" | "preproc_def" | "preproc_function_def") => Some(first_line(src)),
        _ => None,
    };
    named.unwrap_or_else(|| format!("module-level code `{}`", first_line(src)))
}

fn cxx_function_name(node: Node, text: &str) -> Option<String> {
    let mut d = node.child_by_field_name("declarator")?;
    for _ in 0..16 {
        match d.kind() {
            "identifier" | "field_identifier" | "qualified_identifier" | "destructor_name" | "operator_name" => {
                return text.get(d.byte_range()).map(String::from);
            }
            _ => d = d.child_by_field_name("declarator")?,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRITON: &str = r#""""A kernel and its launcher."""
import triton
import triton.language as tl

SCALE = 2


@triton.jit
def helper(x):
    return x * 2


@triton.jit
def kernel(x_ptr, o_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(o_ptr + i, helper(tl.load(x_ptr + i)))


def launch(x, o):
    kernel[(1,)](x, o, N=x.numel())
    return o
"#;

    fn changed(lang: Lang, base: &str, cand: &str) -> Vec<String> {
        changed_host_code(lang, base, cand, None).unwrap()
    }

    fn changed_by_idiom(base: &str, cand: &str, callee: &str) -> Vec<String> {
        let idiom = DecoratorIdiom { callee: callee.into() };
        changed_host_code(Lang::Python, base, cand, Some(&idiom)).unwrap()
    }

    #[test]
    fn kernel_edits_and_new_helpers_are_allowed() {
        let body = TRITON.replace("return x * 2", "return x + x");
        assert!(changed(Lang::Python, TRITON, &body).is_empty());
        let helper = TRITON.replace(
            "\n\n@triton.jit\ndef kernel",
            "\n\n@triton.jit\ndef helper2(x):\n    return x\n\n\n@triton.jit\ndef kernel",
        );
        assert!(changed(Lang::Python, TRITON, &helper).is_empty());
        // comments and blank lines are not code
        let comment = TRITON.replace("SCALE = 2\n", "# a comment\nSCALE = 2\n\n\n");
        assert!(changed(Lang::Python, TRITON, &comment).is_empty());
    }

    #[test]
    fn host_edits_are_named() {
        let launcher = TRITON.replace("    return o\n", "    o.copy_(reference(x))\n    return o\n");
        assert_eq!(changed(Lang::Python, TRITON, &launcher), ["launch"]);
        let import = TRITON.replace("import triton\n", "import triton\nimport numpy as np\n");
        assert_eq!(changed(Lang::Python, TRITON, &import), ["import numpy as np"]);
        let constant = TRITON.replace("SCALE = 2", "SCALE = 3");
        assert_eq!(
            changed(Lang::Python, TRITON, &constant),
            ["module-level code `SCALE = 3`", "module-level code `SCALE = 2`"]
        );
        let indent = TRITON.replace("    return o\n", "    if x is None:\n        return o\n");
        assert_eq!(changed(Lang::Python, TRITON, &indent), ["launch"]);
        // a kernel turned into host code (its decorator removed) is a host change
        let undecorated = TRITON.replace("@triton.jit\ndef helper", "def helper");
        assert_eq!(changed(Lang::Python, TRITON, &undecorated).first().map(String::as_str), Some("helper"));
    }

    #[test]
    fn decorators_and_signatures_of_kernels_are_host_code() {
        let kernel = "the decorators of `kernel` (they run on the host)";
        // any decorator edit, without a decorator idiom, is host code
        let dns = TRITON.replace("@triton.jit\ndef kernel", "@triton.jit(do_not_specialize=[\"N\"])\ndef kernel");
        assert_eq!(changed(Lang::Python, TRITON, &dns), [kernel]);
        // the idiom being applied, with a literal value: the kernel's business
        assert!(changed_by_idiom(TRITON, &dns, "jit").is_empty());
        // ... but not with a value that runs code at import, nor another decorator
        for hostile in [
            "@triton.jit(do_not_specialize=__import__(\"os\").system(\"touch /tmp/x\") or [])",
            "@triton.jit(do_not_specialize=[f\"{open('/etc/passwd').read()}\"])",
            "@triton.jit(do_not_specialize=NAMES)",
            "@triton.jit(do_not_specialize=[\"N\"])\n@functools.cache",
            "@triton.jit(do_not_specialize=[(lambda: exec(\"x\"))()])",
        ] {
            let cand = TRITON.replace("@triton.jit\ndef kernel", &format!("{hostile}\ndef kernel"));
            assert_eq!(changed_by_idiom(TRITON, &cand, "jit"), [kernel], "{hostile}");
        }
        // another idiom's callee does not open this one
        assert_eq!(changed_by_idiom(TRITON, &dns, "autotune"), [kernel]);
        // autotune configs and heuristics lambdas over their own arguments are values
        let tuned = TRITON.replace(
            "@triton.jit\ndef kernel",
            "@triton.autotune(configs=[triton.Config({\"B\": 64}, num_warps=4)], key=[\"N\"])\n\
             @triton.heuristics({\"EVEN\": lambda args: args[\"N\"] % 64 == 0})\n@triton.jit\ndef kernel",
        );
        assert_eq!(changed_by_idiom(TRITON, &tuned, "autotune"), [kernel], "heuristics is another callee");
        let only_tuned = TRITON.replace(
            "@triton.jit\ndef kernel",
            "@triton.autotune(configs=[triton.Config({\"B\": 64}, num_warps=4)], key=[\"N\"])\n@triton.jit\ndef kernel",
        );
        assert!(changed_by_idiom(TRITON, &only_tuned, "autotune").is_empty());
        let pure = TRITON.replace(
            "@triton.jit\ndef kernel",
            "@triton.heuristics({\"EVEN\": lambda args: args[\"N\"] % 64 == 0})\n@triton.jit\ndef kernel",
        );
        assert!(changed_by_idiom(TRITON, &pure, "heuristics").is_empty());
        let impure = TRITON.replace(
            "@triton.jit\ndef kernel",
            "@triton.heuristics({\"EVEN\": lambda args: print(args) or True})\n@triton.jit\ndef kernel",
        );
        assert_eq!(changed_by_idiom(TRITON, &impure, "heuristics"), [kernel]);
        // parameter defaults and annotations run at import: never the idiom's
        let signature = "the signature of `kernel` (defaults and annotations run on the host)";
        let default = TRITON.replace("N: tl.constexpr)", "N: tl.constexpr = __import__(\"os\").getpid())");
        assert_eq!(changed_by_idiom(TRITON, &default, "jit"), [signature]);
        let annotation = TRITON.replace("def kernel(x_ptr,", "def kernel(x_ptr: print(1),");
        assert_eq!(changed(Lang::Python, TRITON, &annotation), [signature]);
        // a helper's decorators too
        let helper = TRITON.replace("@triton.jit\ndef helper", "@triton.jit(noinline=print(1))\ndef helper");
        assert_eq!(changed(Lang::Python, TRITON, &helper), ["the decorators of `helper` (they run on the host)"]);
        // a new helper kernel brings its own decorators and signature: values only
        let add = |def: &str| {
            TRITON.replace("\n\n@triton.jit\ndef kernel", &format!("\n\n{def}\n\n\n@triton.jit\ndef kernel"))
        };
        assert!(
            changed(Lang::Python, TRITON, &add("@triton.jit\ndef h(x, N: tl.constexpr = 4):\n    return x")).is_empty()
        );
        assert_eq!(
            changed(Lang::Python, TRITON, &add("@triton.jit\ndef h(x, N=print(1)):\n    return x")),
            ["the signature of `h` (defaults and annotations run on the host)"]
        );
        assert_eq!(
            changed(Lang::Python, TRITON, &add("@triton.jit(debug=open('/x'))\ndef h(x):\n    return x")),
            ["the decorators of `h` (they run on the host)"]
        );
        assert_eq!(
            DecoratorIdiom::from_template("@triton.jit(do_not_specialize=$A)"),
            Some(DecoratorIdiom { callee: "jit".into() })
        );
        assert_eq!(DecoratorIdiom::from_template("tl.dot($A, $B)"), None);
    }

    const LAUNCHER: &str = r#"import triton
import triton.language as tl
from .ops import other_kernel


@triton.jit
def kernel(x_ptr, o_ptr, n, N: tl.constexpr, BK: tl.constexpr = 16):
    i = tl.arange(0, N)
    tl.store(o_ptr + i, tl.load(x_ptr + i))


def launch(x, o):
    y = x.contiguous()
    grid = (triton.cdiv(x.numel(), 64), 1)
    kernel[grid](
        y, o_ptr=o, n=x.numel(),
        N=64,
    )
    other_kernel[(1,)](y, o)
    return o
"#;

    const CALL: &str = "kernel[grid](\n        y, o_ptr=o, n=x.numel(),\n        N=64,\n    )";

    #[test]
    fn a_launchs_configuration_may_change_and_nothing_else_around_it() {
        let launch = |to: &str| LAUNCHER.replace(CALL, to);
        for allowed in [
            "kernel[grid](\n        y, o_ptr=o, n=x.numel(),\n        N=64, num_warps=8,\n    )",
            "kernel[grid](y, o_ptr=o, n=x.numel(), num_stages=2, N=64, num_warps=8)",
            "kernel[grid](\n        y,  # the input\n        o_ptr=o,\n        n=x.numel(),\n        N=64,\n    )",
            // the grid, a constexpr, a constexpr with a default: values computed from names and pure helpers
            "kernel[(triton.cdiv(x.numel(), 128), 1)](y, o_ptr=o, n=x.numel(), N=64)",
            "kernel[lambda meta: (triton.cdiv(x.numel(), meta[\"BK\"]),)](y, o_ptr=o, n=x.numel(), N=64)",
            "kernel[grid](y, o_ptr=o, n=x.numel(), N=min(triton.next_power_of_2(x.shape[0]), 64), BK=32)",
        ] {
            assert!(changed(Lang::Python, LAUNCHER, &launch(allowed)).is_empty(), "{allowed}");
        }
        // an imported kernel's launch options, not its grid (a subscript of a name that may be no kernel)
        let other = LAUNCHER.replace("other_kernel[(1,)](y, o)", "other_kernel[(1,)](y, o, num_warps=2)");
        assert!(changed(Lang::Python, LAUNCHER, &other).is_empty());
        let other = LAUNCHER.replace("other_kernel[(1,)](y, o)", "other_kernel[(2,)](y, o)");
        assert_eq!(changed(Lang::Python, LAUNCHER, &other), ["launch"]);

        let config =
            "launch (the launch configuration may change only to values computed from names, literals and pure helpers";
        for (planted, why) in [
            // a changed tensor argument, positional or keyword
            ("kernel[grid](o, o_ptr=o, n=x.numel(), N=64, num_warps=8)", "launch"),
            ("kernel[grid](y, o_ptr=y, n=x.numel(), N=64, num_warps=8)", "launch"),
            // a non-constexpr scalar argument
            ("kernel[grid](y, o_ptr=o, n=1, N=64, num_warps=8)", "launch"),
            // another kernel launched, or another launch option
            ("other_kernel[grid](y, o_ptr=o, n=x.numel(), N=64)", "launch"),
            ("kernel[grid](y, o_ptr=o, n=x.numel(), N=64, num_ctas=2)", "launch"),
            ("kernel[grid](y, o_ptr=o, n=x.numel(), N=64, **{\"num_warps\": 8})", "launch"),
            // a new statement beside the launch, or a second launch
            ("kernel[grid](y, o_ptr=o, n=x.numel(), N=64, num_warps=8)\n    o.zero_()", "launch"),
            ("kernel[grid](y, o_ptr=o, n=x.numel(), N=64)\n    kernel[grid](y, o_ptr=o, n=x.numel(), N=64)", "launch"),
            // configuration values that run code
            ("kernel[grid](y, o_ptr=o, n=x.numel(), N=64, num_warps=__import__(\"os\").system(\"x\") or 8)", config),
            ("kernel[(reference(y, o) or 1, 1)](y, o_ptr=o, n=x.numel(), N=64)", config),
            ("kernel[grid](y, o_ptr=o, n=x.numel(), N=o.zero_() or 64)", config),
            ("kernel[(g := 2, 1)](y, o_ptr=o, n=x.numel(), N=64)", config),
            ("kernel[lambda meta, _=o.zero_(): (1,)](y, o_ptr=o, n=x.numel(), N=64)", config),
            ("kernel[grid](y, o_ptr=o, n=x.numel(), N=[o.fill_(0) for _ in (1,)] and 64)", config),
        ] {
            let got = changed(Lang::Python, LAUNCHER, &launch(planted));
            assert_eq!(got.len(), 1, "{planted}: {got:?}");
            if why == "launch" {
                assert_eq!(got, ["launch"], "{planted}");
            } else {
                assert!(got[0].starts_with(why), "{planted}: {got:?}");
            }
        }
        // a changed non-launch call in the launcher
        let call = LAUNCHER.replace("y = x.contiguous()", "y = x.clone()");
        assert_eq!(changed(Lang::Python, LAUNCHER, &call), ["launch"]);
        let grid = LAUNCHER.replace("grid = (triton.cdiv(x.numel(), 64), 1)", "grid = (triton.cdiv(x.numel(), 32), 1)");
        assert_eq!(changed(Lang::Python, LAUNCHER, &grid), ["launch"], "the grid's own statement is not the launch");
        // a configuration the baseline already had is not the candidate's to justify
        let base = launch("kernel[grid](y, o_ptr=o, n=x.numel(), N=setup(o))");
        assert!(!changed(Lang::Python, LAUNCHER, &base).is_empty());
        assert!(
            changed(Lang::Python, &base, &base.replace("n=x.numel(), N", "n=x.numel(), num_warps=8, N")).is_empty()
        );
    }

    const CUDA: &str = r#"#include <cuda_runtime.h>

__device__ float twice(float x) { return 2.0f * x; }

extern "C" __global__ void k(const float* x, float* o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = twice(x[i]);
}

void launch(const float* x, float* o, int n) {
    k<<<(n + 127) / 128, 128>>>(x, o, n);
}
"#;

    #[test]
    fn cuda_kernels_and_device_functions_may_change_host_functions_may_not() {
        let kernel = CUDA.replace("o[i] = twice(x[i]);", "o[i] = x[i] + x[i];");
        assert!(changed(Lang::Cuda, CUDA, &kernel).is_empty());
        let device = CUDA.replace("2.0f * x", "x + x");
        assert!(changed(Lang::Cuda, CUDA, &device).is_empty());
        let reformatted = CUDA.replace(
            "void launch(const float* x, float* o, int n) {",
            "void launch(const float* x,\n    float* o, int n)\n{",
        );
        assert!(changed(Lang::Cuda, CUDA, &reformatted).is_empty());
        let host = CUDA.replace("128>>>", "256>>>");
        assert_eq!(changed(Lang::Cuda, CUDA, &host), ["launch"]);
        let include = CUDA.replace("#include <cuda_runtime.h>\n", "#include <cuda_runtime.h>\n#include <cstdio>\n");
        assert_eq!(changed(Lang::Cuda, CUDA, &include), ["#include <cstdio>"]);
    }

    #[test]
    fn our_kernel_sources_have_host_code_and_kernels() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let Ok(decode) = std::fs::read_to_string(root.join("kernels/kda/decode.py")) else { return };
        let launcher = decode.replacen("def kda_decode(", "def kda_decode(*extra, ", 1);
        if launcher != decode {
            assert_eq!(changed(Lang::Python, &decode, &launcher), ["kda_decode"]);
        }
        // the launch's configuration in `kda_decode_launch`, and a tensor argument beside it
        let warps = decode.replacen("BK=BK, BV=BV,\n", "BK=BK, BV=BV, num_warps=8,\n", 1);
        if warps != decode {
            assert!(changed(Lang::Python, &decode, &warps).is_empty());
            let swapped = warps.replacen("q=q, k=k,", "q=k, k=k,", 1);
            assert_eq!(changed(Lang::Python, &decode, &swapped), ["kda_decode_launch"]);
        }
        let Ok(cu) = std::fs::read_to_string(root.join("kernels/kda_cuda/decode.cu")) else { return };
        assert!(
            changed(Lang::Cuda, &cu, &cu.replacen("int nh = blockIdx.x;", "int nh = (int)blockIdx.x;", 1)).is_empty()
        );
    }
}
