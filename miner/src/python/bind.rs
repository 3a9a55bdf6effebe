//! What Python names and kernel parameters are bound to: the module's
//! top-level statements run symbolically, kernel defaults and autotune
//! configurations, and the values launches in the file pass.

use std::collections::BTreeMap;

use tree_sitter::Node;

use super::{Ctx, MAX_EVAL_DEPTH, keyword_args, named, parameter_name};
use crate::values::{ValueExpr, canonical_literals, condition_text};

/// Runs the module's top-level statements symbolically: assignments,
/// `if`/`elif`/`else` blocks (a name assigned in the branches holds a
/// conditional) and `from ... import` (a name from another module).
pub(super) fn bind_block(ctx: &Ctx, block: Node, env: &mut BTreeMap<String, ValueExpr>, depth: usize) {
    if depth > MAX_EVAL_DEPTH {
        return;
    }
    for stmt in named(block) {
        match stmt.kind() {
            "expression_statement" => {
                for e in named(stmt) {
                    if e.kind() == "assignment" {
                        bind_assignment(ctx, e, env);
                    } else if e.kind() == "augmented_assignment"
                        && let Some(l) = e.child_by_field_name("left").filter(|l| l.kind() == "identifier")
                    {
                        env.insert(ctx.text(l).to_string(), ValueExpr::opaque(ctx.text(l)));
                    }
                }
            }
            "if_statement" => bind_if(ctx, stmt, env, depth),
            "import_from_statement" => {
                let Some(module) = stmt.child_by_field_name("module_name") else { continue };
                let module: String = ctx.text(module).chars().filter(|c| !c.is_whitespace()).collect();
                let mut c = stmt.walk();
                for name in stmt.children_by_field_name("name", &mut c) {
                    let (n, local) = if name.kind() == "aliased_import" {
                        match (name.child_by_field_name("name"), name.child_by_field_name("alias")) {
                            (Some(n), Some(a)) => (ctx.text(n), ctx.text(a)),
                            _ => continue,
                        }
                    } else {
                        (ctx.text(name), ctx.text(name))
                    };
                    env.insert(local.to_string(), ValueExpr::Import { module: module.clone(), name: n.to_string() });
                }
            }
            _ => {}
        }
    }
}

/// `A = B = value`, `A: T = value`; other targets forget what they held.
fn bind_assignment(ctx: &Ctx, a: Node, env: &mut BTreeMap<String, ValueExpr>) {
    let mut targets = Vec::new();
    let mut cur = a;
    let value = loop {
        if let Some(l) = cur.child_by_field_name("left") {
            targets.push(l);
        }
        match cur.child_by_field_name("right") {
            Some(r) if r.kind() == "assignment" => cur = r,
            other => break other,
        }
    };
    let value = value.map(|v| {
        let lookup = |name: &str| env.get(name).cloned();
        ctx.eval(v, &lookup, 0)
    });
    for t in targets {
        if t.kind() == "identifier" {
            let name = ctx.text(t).to_string();
            match &value {
                Some(v) => env.insert(name, v.clone()),
                None => continue, // an annotation without a value binds nothing
            };
        } else {
            // `A, B = ...`: what they held before is no longer known.
            kidiom_syntax::preorder(t, |n| {
                if n.kind() == "identifier" {
                    env.insert(ctx.text(n).to_string(), ValueExpr::opaque(ctx.text(n)));
                }
                !matches!(n.kind(), "attribute" | "subscript")
            });
        }
    }
}

/// An `if` block: each branch runs from the state before it; a name a
/// branch assigns holds `then if cond else otherwise` afterwards.
fn bind_if(ctx: &Ctx, stmt: Node, env: &mut BTreeMap<String, ValueExpr>, depth: usize) {
    let mut branches: Vec<(String, BTreeMap<String, ValueExpr>)> = Vec::new();
    let mut otherwise: Option<BTreeMap<String, ValueExpr>> = None;
    let run = |block: Option<Node>| {
        let mut e = env.clone();
        if let Some(b) = block {
            bind_block(ctx, b, &mut e, depth + 1);
        }
        e
    };
    let cond = |n: Option<Node>| condition_text(&canonical_literals(n.map(|c| ctx.text(c)).unwrap_or("")));
    branches.push((cond(stmt.child_by_field_name("condition")), run(stmt.child_by_field_name("consequence"))));
    let mut c = stmt.walk();
    for alt in stmt.children_by_field_name("alternative", &mut c) {
        if alt.kind() == "elif_clause" {
            branches.push((cond(alt.child_by_field_name("condition")), run(alt.child_by_field_name("consequence"))));
        } else if alt.kind() == "else_clause" {
            otherwise = Some(run(alt.child_by_field_name("body")));
        }
    }
    let mut names: Vec<String> = Vec::new();
    for e in branches.iter().map(|b| &b.1).chain(otherwise.iter()) {
        for (k, v) in e {
            if env.get(k) != Some(v) && !names.contains(k) {
                names.push(k.clone());
            }
        }
    }
    for name in names {
        let mut acc: Option<ValueExpr> = otherwise.as_ref().unwrap_or(env).get(&name).cloned();
        for (cond, e) in branches.iter().rev() {
            acc = match (e.get(&name).cloned(), acc) {
                (Some(then), Some(other)) if then == other => Some(then),
                (Some(then), Some(other)) => {
                    Some(ValueExpr::Cond { cond: cond.clone(), then: Box::new(then), otherwise: Box::new(other) })
                }
                (then, other) => then.or(other),
            };
        }
        if let Some(v) = acc {
            env.insert(name, v);
        }
    }
}

/// Adds `value` to what `param` of `kernel` is given.
pub(super) fn give(ctx: &mut Ctx, kernel: &str, param: &str, value: ValueExpr) {
    let m = ctx.param_values.entry(kernel.to_string()).or_default();
    let v = match m.remove(param) {
        Some(old) => old.or(value),
        None => value,
    };
    m.insert(param.to_string(), v);
}

/// The Triton function a module-level binding names (`tl.math.exp2`), in
/// canonical form; of a conditional (`fast.exp2 if FAST else tl.exp2`), the
/// branch that is plain Triton, which holds wherever the other does not.
pub(super) fn triton_function(ctx: &Ctx, v: &ValueExpr) -> Option<String> {
    let mut found = Vec::new();
    triton_functions(ctx, v, &mut found);
    found.iter().find(|f| !f.contains(".extra.")).or(found.first()).cloned()
}

fn triton_functions(ctx: &Ctx, v: &ValueExpr, out: &mut Vec<String>) {
    let dotted = |t: &str| t.split('.').all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'));
    match v {
        ValueExpr::Opaque { text } if dotted(text) => {
            let c = ctx.canonical(text);
            if c.starts_with("tl.") {
                out.push(c);
            }
        }
        ValueExpr::Cond { then, otherwise, .. } => {
            triton_functions(ctx, then, out);
            triton_functions(ctx, otherwise, out);
        }
        ValueExpr::OneOf { items } => items.iter().for_each(|i| triton_functions(ctx, i, out)),
        _ => {}
    }
}

/// What launches in this file pass for kernel parameters
/// (`kernel[grid](x, PRECISION="ieee")`).
pub(super) fn collect_launch_values(ctx: &mut Ctx, root: Node) {
    let mut given: Vec<(String, String, ValueExpr)> = Vec::new();
    kidiom_syntax::preorder(root, |n| {
        if n.kind() != "call" {
            return true;
        }
        let Some(value) = n
            .child_by_field_name("function")
            .filter(|f| f.kind() == "subscript")
            .and_then(|f| f.child_by_field_name("value"))
        else {
            return true;
        };
        let kernel = ctx.text(value);
        let Some(params) = ctx.kernel_params.get(kernel) else { return true };
        for (kw, v) in keyword_args(ctx, n) {
            if params.contains(kw) {
                let lookup = |name: &str| ctx.lookup_module(name);
                given.push((kernel.to_string(), kw.to_string(), ctx.eval(v, &lookup, 0)));
            }
        }
        true
    });
    for (kernel, param, v) in given {
        give(ctx, &kernel, &param, v);
    }
}

/// Top-level (and class-level) kernels, so that launches before or after the
/// definition are recognised.
pub(super) fn collect_kernels(ctx: &mut Ctx, root: Node) {
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
        let kernel = ctx.text(name).to_string();
        ctx.kernel_params.insert(kernel.clone(), names);
        // What the parameters are given before any launch: defaults, then autotune configurations.
        let mut given: Vec<(String, ValueExpr)> = Vec::new();
        let lookup = |n: &str| ctx.lookup_module(n);
        for p in named(params) {
            if let (Some(n), Some(v)) = (parameter_name(p), p.child_by_field_name("value")) {
                given.push((ctx.text(n).to_string(), ctx.eval(v, &lookup, 0)));
            }
        }
        let mut c = item.walk();
        for d in item.named_children(&mut c).filter(|d| d.kind() == "decorator") {
            kidiom_syntax::preorder(d, |n| {
                if n.kind() != "call" {
                    return true;
                }
                let is_config = n
                    .child_by_field_name("function")
                    .is_some_and(|f| ctx.canonical(ctx.text(f)).rsplit('.').next() == Some("Config"));
                let first = n.child_by_field_name("arguments").and_then(|a| named(a).into_iter().next());
                if let Some(dict) = first.filter(|d| is_config && d.kind() == "dictionary") {
                    for pair in named(dict).into_iter().filter(|p| p.kind() == "pair") {
                        let (Some(k), Some(v)) = (pair.child_by_field_name("key"), pair.child_by_field_name("value"))
                        else {
                            continue;
                        };
                        if k.kind() == "string" {
                            let key = ctx.text(k).trim_matches(|c| c == '\'' || c == '"').to_string();
                            given.push((key, ctx.eval(v, &lookup, 0)));
                        }
                    }
                }
                true
            });
        }
        for (param, v) in given {
            give(ctx, &kernel, &param, v);
        }
    }
}
