//! Usage facts from CUDA and C++ files: `__global__`/`__device__` functions
//! (also when declared through macros), their qualifiers, pointer-parameter
//! qualifiers, loop pragmas, intrinsics, inline PTX and vector casts, and in
//! binding files (pybind11, torch) scoped guards and `.def` extras.

use std::collections::HashSet;

use kidiom_syntax::{DEVICE_WORDS, DeviceMacros, Lang, known_device_macros, merge_device_macro, scan_device_macros};
use tree_sitter::{Node, Tree};

use crate::facts::{FactsBuilder, FamilyKey, Lines, Mechanism, normalize_value};
use crate::parse::Step;

/// Scope: `__global__` functions.
pub const CUDA_GLOBAL: &str = "cuda-global";
/// Scope: `__device__` functions.
pub const CUDA_DEVICE: &str = "cuda-device";
/// Scope: host functions in binding files.
pub const BINDING_FN: &str = "binding-fn";
/// Scope: `.def(...)` calls in binding files.
pub const BINDING_DEF: &str = "binding-def";
/// Scope: any kernel function (global or device).
pub const KERNEL: &str = "kernel";
/// Scope: pointer parameters of kernel functions.
pub const POINTER_PARAM: &str = "pointer-param";
/// Scope: loops inside kernel functions.
pub const LOOP: &str = "loop";

/// The literal markers of device or binding code, for the prefilter.
pub(crate) fn markers(macros: &DeviceMacros) -> Vec<String> {
    // Every device word is a marker, so a file that defines a device macro is
    // always parsed and its macros land in the cached facts.
    let mut m: Vec<String> =
        DEVICE_WORDS.iter().chain(&["PYBIND11_MODULE", "TORCH_LIBRARY", "pybind11"]).map(|s| s.to_string()).collect();
    m.extend(macros.keys().cloned());
    m
}

struct Ctx<'a> {
    lang: Lang,
    src: &'a str,
    lines: Lines<'a>,
    macros: &'a DeviceMacros,
    binding_file: bool,
    out: FactsBuilder,
}

impl<'a> Ctx<'a> {
    fn text(&self, n: Node) -> &'a str {
        self.src.get(n.byte_range()).unwrap_or("")
    }
    fn key(&self, mechanism: Mechanism, subject: &str, decoration: &str) -> FamilyKey {
        FamilyKey { lang: self.lang, mechanism, subject: subject.into(), decoration: decoration.into() }
    }
}

/// Tokens of a declaration prefix, with macros expanded (a few levels) and
/// `__launch_bounds__(...)` arguments kept as the token's value.
fn prefix_tokens(prefix: &str, macros: &DeviceMacros) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    expand(prefix, macros, 0, &mut out);
    out
}

fn expand(text: &str, macros: &DeviceMacros, level: u8, out: &mut Vec<(String, Option<String>)>) {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let word = &text[start..i];
            let mut args = None;
            let mut j = i;
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            if j < b.len() && b[j] == b'(' {
                let mut depth = 0usize;
                let open = j;
                while j < b.len() {
                    match b[j] {
                        b'(' => depth += 1,
                        b')' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
                args = Some(text[open + 1..j.min(b.len())].trim().to_string());
                i = (j + 1).min(b.len());
            }
            match macros.get(word) {
                Some(body) if level < 4 => expand(body, macros, level + 1, out),
                _ => out.push((word.to_string(), args)),
            }
        } else {
            i += 1;
        }
    }
}

/// Extracts usage facts from a parsed C++/CUDA file.
pub(crate) fn extract(lang: Lang, src: &str, tree: &Tree, extra: &DeviceMacros) -> FactsBuilder {
    let root = tree.root_node();
    let own = scan_device_macros(src);
    let mut macros = known_device_macros();
    for (name, body) in extra.iter().chain(own.iter().map(|(a, b)| (a, b))) {
        merge_device_macro(&mut macros, name.clone(), body.clone());
    }
    let binding_file = src.contains("PYBIND11_MODULE") || src.contains("TORCH_LIBRARY");
    let mut ctx = Ctx {
        lang,
        src,
        lines: Lines::new(src),
        macros: &macros,
        binding_file,
        out: FactsBuilder::with_errors(root.has_error()),
    };
    ctx.out.device_macros = own;
    walk(&mut ctx, root);
    ctx.out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum FnKind {
    Global,
    Device,
    Binding,
}

struct Frame<'t> {
    depth: usize,
    kind: FnKind,
    body: Node<'t>,
    /// Decorations already counted for this function (per-unit mechanisms).
    seen: HashSet<(Mechanism, String)>,
}

fn walk(ctx: &mut Ctx, root: Node) {
    let mut frames: Vec<Frame> = Vec::new();
    let mut errors_at: Vec<usize> = Vec::new();
    crate::parse::walk(root, |step| match step {
        Step::Enter(node, depth) => {
            if node.is_error() {
                errors_at.push(depth);
            }
            let in_error = !errors_at.is_empty();
            match node.kind() {
                "function_definition" if frames.is_empty() => {
                    if let Some(frame) = enter_function(ctx, node, depth, in_error) {
                        frames.push(frame);
                    }
                }
                "call_expression" => {
                    visit_call(ctx, node, frames.last_mut(), in_error);
                }
                "for_statement" | "for_range_loop" | "while_statement" | "do_statement" if in_kernel(&frames) => {
                    ctx.out.scope(LOOP, 1);
                }
                "preproc_call" if in_kernel(&frames) => visit_pragma(ctx, node, in_error),
                "gnu_asm_expression" | "asm_statement" => {
                    if let Some(f) = frames.last_mut().filter(|f| f.kind != FnKind::Binding) {
                        let code = node.child_by_field_name("assembly_code").map(|c| ctx.text(c)).unwrap_or("");
                        let mnemonic = code
                            .trim_matches(|c: char| c == '"' || c.is_whitespace())
                            .split(|c: char| c.is_whitespace() || c == '\\' || c == '"')
                            .next()
                            .unwrap_or("")
                            .to_string();
                        let new = f.seen.insert((Mechanism::InlineAsm, String::new()));
                        let ex = ctx.lines.example(node.start_position().row);
                        let k = ctx.key(Mechanism::InlineAsm, KERNEL, "asm");
                        ctx.out.site(k, Some(mnemonic), in_error, new, || ex);
                    }
                }
                "declaration" => {
                    if let Some(f) = frames.last()
                        && f.kind == FnKind::Binding
                    {
                        let body = f.body;
                        visit_guard(ctx, node, body, in_error);
                    }
                }
                _ => {}
            }
        }
        Step::Leave(depth) => {
            if frames.last().is_some_and(|f| f.depth == depth) {
                frames.pop();
            }
            if errors_at.last() == Some(&depth) {
                errors_at.pop();
            }
        }
    });
}

fn in_kernel(frames: &[Frame]) -> bool {
    frames.last().is_some_and(|f| f.kind != FnKind::Binding)
}

fn enter_function<'t>(ctx: &mut Ctx, node: Node<'t>, depth: usize, in_error: bool) -> Option<Frame<'t>> {
    let declarator = node.child_by_field_name("declarator")?;
    let body = node.child_by_field_name("body")?;
    let prefix = ctx.src.get(node.start_byte()..declarator.start_byte()).unwrap_or("");
    let tokens = prefix_tokens(prefix, ctx.macros);
    let has = |w: &str| tokens.iter().any(|(t, _)| t == w);
    let kind = if has("__global__") {
        FnKind::Global
    } else if has("__device__") {
        FnKind::Device
    } else if ctx.binding_file {
        FnKind::Binding
    } else {
        return None;
    };
    ctx.out.kernels += 1;
    let scope = match kind {
        FnKind::Global => CUDA_GLOBAL,
        FnKind::Device => CUDA_DEVICE,
        FnKind::Binding => BINDING_FN,
    };
    ctx.out.scope(scope, 1);
    if kind != FnKind::Binding {
        ctx.out.scope(KERNEL, 1);
        let row = node.start_position().row;
        let mut seen = HashSet::new();
        for (tok, args) in &tokens {
            if !tok.starts_with("__") || matches!(tok.as_str(), "__global__" | "__device__" | "__host__") {
                continue;
            }
            if !seen.insert(tok.clone()) {
                continue;
            }
            let ex = ctx.lines.example(row);
            let k = ctx.key(Mechanism::Qualifier, scope, tok);
            let value = args.as_deref().map(normalize_value);
            ctx.out.site(k, value, in_error, true, || ex);
        }
        visit_params(ctx, declarator, in_error);
    }
    Some(Frame { depth, kind, body, seen: HashSet::new() })
}

fn visit_params(ctx: &mut Ctx, declarator: Node, in_error: bool) {
    // The parameter list of the (possibly nested) function declarator.
    let mut d = declarator;
    let mut params = None;
    for _ in 0..8 {
        if let Some(p) = d.child_by_field_name("parameters") {
            params = Some(p);
            break;
        }
        match d.child_by_field_name("declarator") {
            Some(inner) => d = inner,
            None => break,
        }
    }
    let Some(params) = params else { return };
    let mut c = params.walk();
    for p in params.named_children(&mut c) {
        let Some(decl) = p.child_by_field_name("declarator") else { continue };
        if decl.kind() != "pointer_declarator" {
            continue;
        }
        ctx.out.scope(POINTER_PARAM, 1);
        let mut quals = Vec::new();
        let mut c2 = decl.walk();
        for q in decl.children(&mut c2) {
            if q.kind() == "type_qualifier" {
                quals.push(ctx.text(q).to_string());
            }
        }
        for q in quals.into_iter().filter(|q| q.starts_with("__") || q == "restrict") {
            let ex = ctx.lines.example(p.start_position().row);
            let k = ctx.key(Mechanism::ParamQualifier, POINTER_PARAM, &q);
            ctx.out.site(k, None, in_error, true, || ex);
        }
    }
}

fn callee_name(ctx: &Ctx, func: Node) -> Option<(String, Option<String>)> {
    match func.kind() {
        "identifier" => Some((ctx.text(func).to_string(), None)),
        "qualified_identifier" => {
            // `py::call_guard<T>` parses as a qualified name ending in a template.
            let text = ctx.text(func);
            match text.find('<') {
                Some(i) => Some((text[..i].trim().to_string(), Some(text[i..].to_string()))),
                None => Some((text.to_string(), None)),
            }
        }
        "template_function" => {
            let name = func.child_by_field_name("name")?;
            let args = func.child_by_field_name("arguments").map(|a| ctx.text(a).to_string());
            Some((ctx.text(name).to_string(), args))
        }
        "field_expression" => {
            let field = func.child_by_field_name("field")?;
            Some((format!(".{}", ctx.text(field)), None))
        }
        _ => None,
    }
}

fn visit_call(ctx: &mut Ctx, call: Node, frame: Option<&mut Frame>, in_error: bool) {
    let Some(func) = call.child_by_field_name("function") else { return };
    let Some((name, targs)) = callee_name(ctx, func) else { return };
    let row = call.start_position().row;
    if ctx.binding_file && name == ".def" {
        ctx.out.scope(BINDING_DEF, 1);
        let Some(args) = call.child_by_field_name("arguments") else { return };
        let mut c = args.walk();
        for a in args.named_children(&mut c) {
            if a.kind() != "call_expression" {
                continue;
            }
            let Some(f) = a.child_by_field_name("function") else { continue };
            if let Some((n, Some(t))) = callee_name(ctx, f) {
                let ex = ctx.lines.example(a.start_position().row);
                let v = pybind_alias(&normalize_value(t.trim_start_matches('<').trim_end_matches('>')));
                let k = ctx.key(Mechanism::BindingArg, BINDING_DEF, &pybind_alias(&n));
                ctx.out.site(k, Some(v), in_error, true, || ex);
            }
        }
        return;
    }
    let Some(frame) = frame else { return };
    if frame.kind == FnKind::Binding {
        return;
    }
    ctx.out.call(&name, || ctx.lines.example(row));
    if name.starts_with("__") && !name.starts_with("__builtin") {
        let new = frame.seen.insert((Mechanism::Intrinsic, name.clone()));
        let ex = ctx.lines.example(row);
        let k = ctx.key(Mechanism::Intrinsic, KERNEL, &name);
        ctx.out.site(k, None, in_error, new, || ex);
    }
    if name == "reinterpret_cast"
        && let Some(t) = targs
    {
        let ty: String =
            t.trim_start_matches('<').trim_end_matches('>').replace("const", "").split_whitespace().collect();
        let base = ty.trim_end_matches(['*', '&']);
        let base = base.rsplit("::").next().unwrap_or(base);
        if base.ends_with(['2', '4', '8']) {
            let new = frame.seen.insert((Mechanism::VectorCast, String::new()));
            let ex = ctx.lines.example(row);
            let k = ctx.key(Mechanism::VectorCast, KERNEL, "reinterpret_cast");
            ctx.out.site(k, Some(ty.clone()), in_error, new, || ex);
        }
    }
}

fn visit_pragma(ctx: &mut Ctx, node: Node, in_error: bool) {
    let directive = node.child_by_field_name("directive").map(|d| ctx.text(d)).unwrap_or("");
    if directive.trim() != "#pragma" {
        return;
    }
    let Some(next) = node.next_named_sibling() else { return };
    if !matches!(next.kind(), "for_statement" | "for_range_loop" | "while_statement" | "do_statement") {
        return;
    }
    let arg = node.child_by_field_name("argument").map(|a| ctx.text(a)).unwrap_or("").trim();
    let mut words = arg.splitn(2, |c: char| c.is_whitespace() || c == '(');
    let word = words.next().unwrap_or("").to_string();
    if word.is_empty() {
        return;
    }
    let rest = normalize_value(words.next().unwrap_or("").trim().trim_end_matches(')'));
    let value = if rest.is_empty() { "(none)".to_string() } else { rest };
    let ex = ctx.lines.example(node.start_position().row);
    let k = ctx.key(Mechanism::Pragma, LOOP, &word);
    ctx.out.site(k, Some(value), in_error, true, || ex);
}

/// `pybind11::x` as `py::x`: the alias every binding file declares, so that
/// both spellings of one idiom are one pattern.
fn pybind_alias(s: &str) -> String {
    s.replace("pybind11::", "py::")
}

/// A declaration whose variable is never mentioned again in its function
/// is there for its constructor and destructor: a scoped guard.
fn visit_guard(ctx: &mut Ctx, decl: Node, body: Node, in_error: bool) {
    let Some(ty) = decl.child_by_field_name("type") else { return };
    let Some(d) = decl.child_by_field_name("declarator") else { return };
    let name_node = if d.kind() == "init_declarator" { d.child_by_field_name("declarator") } else { Some(d) };
    let Some(name_node) = name_node.filter(|n| n.kind() == "identifier") else { return };
    let name = ctx.text(name_node);
    // Unused in its own block: sibling lambdas of a module body may reuse the name.
    let block_end = decl.parent().map(|p| p.end_byte()).unwrap_or(body.end_byte());
    let rest = ctx.src.get(decl.end_byte()..block_end).unwrap_or("");
    let used = rest.match_indices(name).any(|(i, _)| {
        let before = rest[..i].chars().next_back();
        let after = rest[i + name.len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !ident(before) && !ident(after)
    });
    if used {
        return;
    }
    let ty: String = pybind_alias(&ctx.text(ty).split_whitespace().collect::<Vec<_>>().join(" "));
    // The value is the declarator as written: a bare name (`release`) means the guard
    // needs nothing from its function and can be inserted anywhere; `g(dev)` does not.
    let value = normalize_value(ctx.text(d));
    let ex = ctx.lines.example(decl.start_position().row);
    let k = ctx.key(Mechanism::Guard, BINDING_FN, &ty);
    ctx.out.site(k, Some(value), in_error, true, || ex);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_macros_and_keeps_launch_bounds_args() {
        let mut m = DeviceMacros::new();
        m.insert("DG".into(), "__device__ __forceinline__".into());
        let toks = prefix_tokens("static DG __launch_bounds__(256, 1) void ", &m);
        let names: Vec<&str> = toks.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(names, ["static", "__device__", "__forceinline__", "__launch_bounds__", "void"]);
        assert_eq!(toks[3].1.as_deref(), Some("256, 1"));
    }

    fn facts(lang: Lang, src: &str) -> crate::FileFacts {
        crate::extract(lang, src, &crate::ExtractOptions::default()).expect("parses")
    }

    #[test]
    fn kernels_through_known_macros_and_templates() {
        let f = facts(
            Lang::Cuda,
            "template <int N> __global__ void k(float* x) {}\nCUTLASS_DEVICE void d(int a) {}\nvoid host() {}\n",
        );
        assert_eq!(f.kernels, 2);
        assert_eq!(f.scopes.get(CUDA_GLOBAL), Some(&1));
        assert_eq!(f.scopes.get(CUDA_DEVICE), Some(&1));
    }

    #[test]
    fn binding_guards_are_unused_declarations() {
        let f = facts(
            Lang::Cpp,
            "#include <pybind11/pybind11.h>\nvoid a() { py::gil_scoped_release r; work(); }\nvoid b() { Foo used; used.go(); }\nPYBIND11_MODULE(m, mod) { mod.def(\"a\", &a, py::call_guard<py::gil_scoped_release>()); }\n",
        );
        let guards: Vec<&str> = f
            .families
            .iter()
            .filter(|(k, _)| k.mechanism == Mechanism::Guard)
            .map(|(k, _)| k.decoration.as_str())
            .collect();
        assert_eq!(guards, ["py::gil_scoped_release"]);
        let arg = f.families.iter().find(|(k, _)| k.mechanism == Mechanism::BindingArg).expect("call_guard");
        assert_eq!(arg.0.decoration, "py::call_guard");
        assert_eq!(arg.1.values.get("py::gil_scoped_release"), Some(&1));
    }
}
