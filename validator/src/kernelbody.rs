//! A Triton kernel's body is device code on every path. Under Triton's
//! interpreter it runs as Python, so a branch that only the CPU's shapes
//! take could open a file, read the environment or reach a socket, and no
//! GPU compile would ever see it (the GPU's constexprs prune the branch).
//! So the static gate reads every `@triton.jit` body a candidate changes and
//! refuses, whatever branch it sits on, what Triton's frontend would not
//! compile there:
//! - a call of anything but `triton.language` (under any alias, with its
//!   `math`/`extra` modules), another `@triton.jit` function of the file,
//!   a method of a value (`x.to(...)`), or the builtins Triton's frontend
//!   lowers (`range`, `min`, `max`, `len`, `print`, casts);
//! - any use of a module imported from elsewhere (`os.environ`,
//!   `time.time()`, `sys.modules`), of the builtins that reach the host
//!   (`open`, `__import__`, `getattr`, `globals`, ...), or of a dunder
//!   attribute (`__class__`, `__globals__`);
//! - statements Triton has no device form for: `import`, `with`, `try`,
//!   `global`, `nonlocal`, `lambda`, `yield`, `await`, nested
//!   `def`/`class`.
//!
//! A construct the baseline's kernels already use is the trusted kernel's
//! own (a helper imported from the project, say): only what a candidate
//! adds is judged. Each finding is named with its line.

use std::collections::{HashMap, HashSet};

use kidiom_syntax::{KernelKind, Lang, kernel_ranges, parse_tree};
use tree_sitter::Node;

/// Builtins Triton's code generator lowers in a kernel body.
const DEVICE_BUILTINS: &[&str] = &["range", "min", "max", "len", "print", "abs", "int", "float", "bool", "isinstance"];

/// Builtins that reach the host however they are used (called, passed, stored).
const HOST_BUILTINS: &[&str] = &[
    "open",
    "__import__",
    "eval",
    "exec",
    "compile",
    "getattr",
    "setattr",
    "delattr",
    "hasattr",
    "globals",
    "locals",
    "vars",
    "dir",
    "input",
    "breakpoint",
    "exit",
    "quit",
    "memoryview",
    "object",
    "type",
    "super",
    "id",
    "hash",
    "help",
];

/// What a file's imports bind: names to the module path they stand for.
#[derive(Debug, Default)]
struct Imports {
    /// `tl` -> `triton.language`, `os` -> `os`, `exp2` -> `fla.ops.utils.exp2`.
    names: HashMap<String, String>,
}

impl Imports {
    fn of(root: Node, text: &str) -> Imports {
        let mut names = HashMap::new();
        let mut cursor = root.walk();
        for stmt in root.named_children(&mut cursor) {
            collect_imports(stmt, text, &mut names);
        }
        Imports { names }
    }

    /// Whether `name` stands for Triton (the module or anything imported from it).
    fn is_triton(&self, name: &str) -> bool {
        self.names.get(name).is_some_and(|m| m == "triton" || m.starts_with("triton."))
    }

    /// Whether `name` is bound by an import of something other than Triton.
    fn is_foreign(&self, name: &str) -> bool {
        self.names.contains_key(name) && !self.is_triton(name)
    }
}

/// Whether a dotted path is Triton's device language (`triton.language`,
/// its `math`/`extra` modules, anything in them) or one of the two pure
/// integer helpers a body may compute a constexpr with. The rest of
/// `triton` (`triton.runtime`, `triton.knobs`, ...) is host code: it could
/// tell the interpreter from a GPU.
fn is_device_path(path: &str) -> bool {
    path == "triton.language"
        || path.starts_with("triton.language.")
        || ["triton.cdiv", "triton.next_power_of_2"].contains(&path)
}

/// The imports of one statement (module level, or inside `if`/`try` at module level).
fn collect_imports(stmt: Node, text: &str, names: &mut HashMap<String, String>) {
    let t = |n: Node| text[n.byte_range()].to_string();
    match stmt.kind() {
        "import_statement" => {
            let mut c = stmt.walk();
            for n in stmt.named_children(&mut c) {
                match n.kind() {
                    // `import a.b` binds `a`
                    "dotted_name" => {
                        let full = t(n);
                        let first = full.split('.').next().unwrap_or("").to_string();
                        names.insert(first.clone(), first);
                    }
                    "aliased_import" => {
                        if let (Some(m), Some(a)) = (n.child_by_field_name("name"), n.child_by_field_name("alias")) {
                            names.insert(t(a), t(m));
                        }
                    }
                    _ => {}
                }
            }
        }
        "import_from_statement" => {
            let module = stmt.child_by_field_name("module_name").map(t).unwrap_or_default();
            let mut c = stmt.walk();
            for n in stmt.children_by_field_name("name", &mut c) {
                match n.kind() {
                    "dotted_name" => {
                        names.insert(t(n), format!("{module}.{}", t(n)));
                    }
                    "aliased_import" => {
                        if let (Some(m), Some(a)) = (n.child_by_field_name("name"), n.child_by_field_name("alias")) {
                            names.insert(t(a), format!("{module}.{}", t(m)));
                        }
                    }
                    _ => {}
                }
            }
        }
        // imports guarded at module level (`try: import x` / `if TYPE_CHECKING: ...`)
        "if_statement" | "try_statement" | "block" | "else_clause" | "except_clause" | "finally_clause" => {
            let mut c = stmt.walk();
            for n in stmt.named_children(&mut c) {
                collect_imports(n, text, names);
            }
        }
        _ => {}
    }
}

/// One construct a kernel body may not hold: what it is (the same text in
/// the baseline and the candidate) and its line (1-based) in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    pub(crate) construct: String,
    pub(crate) line: usize,
}

/// The constructs of host code in the `@triton.jit` bodies of `cand` that
/// no body of `base` holds: what the candidate adds (a construct the
/// trusted kernel already uses, such as a helper imported from its project,
/// may be used again). `Err` when a text does not parse.
pub(crate) fn added_host_code(base: &str, cand: &str) -> Result<Vec<Finding>, String> {
    let known: HashSet<String> = findings(base)?.into_iter().map(|f| f.construct).collect();
    let mut added: Vec<Finding> = findings(cand)?.into_iter().filter(|f| !known.contains(&f.construct)).collect();
    // one mention of a construct per line
    let mut seen = HashSet::new();
    added.retain(|f| seen.insert((f.construct.clone(), f.line)));
    Ok(added)
}

/// Every host construct in the `@triton.jit` bodies of `text`.
fn findings(text: &str) -> Result<Vec<Finding>, String> {
    let tree = parse_tree(Lang::Python, text)
        .map_err(|e| format!("{e:?}"))?
        .ok_or_else(|| "the file does not parse".to_string())?;
    let root = tree.root_node();
    let imports = Imports::of(root, text);
    let kernels = kernel_ranges(Lang::Python, text, &tree);
    // the file's own @triton.jit functions, which a kernel may call
    let mut jitted: HashSet<String> = HashSet::new();
    let mut defs = Vec::new();
    for k in kernels.iter().filter(|k| k.kind == KernelKind::Triton) {
        let Some(node) = root.descendant_for_byte_range(k.range.start, k.range.end) else { continue };
        let Some(def) = function_of(node) else { continue };
        if let Some(name) = def.child_by_field_name("name") {
            jitted.insert(text[name.byte_range()].to_string());
        }
        defs.push(def);
    }
    let mut out = Vec::new();
    for def in defs {
        let Some(body) = def.child_by_field_name("body") else { continue };
        let mut locals = local_names(body, text);
        locals.extend(parameter_names(def, text));
        let ctx = Ctx { text, imports: &imports, jitted: &jitted, locals: &locals };
        visit(body, &ctx, &mut out);
    }
    Ok(out)
}

/// The `function_definition` of a kernel's range (the decorated definition's).
fn function_of(node: Node) -> Option<Node> {
    match node.kind() {
        "function_definition" => Some(node),
        "decorated_definition" => node.child_by_field_name("definition"),
        _ => (0..node.named_child_count()).filter_map(|i| node.named_child(i as u32)).find_map(function_of),
    }
}

/// A function's parameter names (they shadow imports).
fn parameter_names(def: Node, text: &str) -> Vec<String> {
    let Some(params) = def.child_by_field_name("parameters") else { return Vec::new() };
    let mut c = params.walk();
    params
        .named_children(&mut c)
        .filter_map(|p| match p.kind() {
            "identifier" => Some(p),
            _ => p.child_by_field_name("name").or_else(|| p.named_child(0)).filter(|n| n.kind() == "identifier"),
        })
        .map(|n| text[n.byte_range()].to_string())
        .collect()
}

/// Names assigned or bound as loop variables in a body (they shadow imports).
fn local_names(body: Node, text: &str) -> HashSet<String> {
    let mut out = HashSet::new();
    let mut stack = vec![body];
    while let Some(n) = stack.pop() {
        let target = match n.kind() {
            "assignment" | "augmented_assignment" => n.child_by_field_name("left"),
            "for_statement" => n.child_by_field_name("left"),
            _ => None,
        };
        if let Some(t) = target {
            let mut ts = vec![t];
            while let Some(x) = ts.pop() {
                if x.kind() == "identifier" {
                    out.insert(text[x.byte_range()].to_string());
                }
                let mut c = x.walk();
                ts.extend(
                    x.named_children(&mut c)
                        .filter(|c| matches!(c.kind(), "identifier" | "pattern_list" | "tuple_pattern")),
                );
            }
        }
        let mut c = n.walk();
        stack.extend(n.named_children(&mut c));
    }
    out
}

struct Ctx<'a> {
    text: &'a str,
    imports: &'a Imports,
    jitted: &'a HashSet<String>,
    locals: &'a HashSet<String>,
}

impl Ctx<'_> {
    fn text(&self, n: Node) -> &str {
        &self.text[n.byte_range()]
    }

    fn push(&self, n: Node, construct: String, out: &mut Vec<Finding>) {
        out.push(Finding { construct, line: n.start_position().row + 1 });
    }

    /// The leftmost name of `a.b.c` (`a`), when the chain is names only.
    fn root_name<'n>(&self, n: Node<'n>) -> Option<Node<'n>> {
        match n.kind() {
            "identifier" => Some(n),
            "attribute" => self.root_name(n.child_by_field_name("object")?),
            _ => None,
        }
    }
}

/// Collapses whitespace, so a construct reads the same wherever it is laid out.
fn squeeze(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn visit(n: Node, ctx: &Ctx, out: &mut Vec<Finding>) {
    match n.kind() {
        "import_statement" | "import_from_statement" | "future_import_statement" => {
            ctx.push(n, format!("`{}`", squeeze(ctx.text(n))), out);
            return;
        }
        "with_statement"
        | "try_statement"
        | "global_statement"
        | "nonlocal_statement"
        | "lambda"
        | "yield"
        | "await"
        | "class_definition"
        | "function_definition"
        | "decorated_definition"
        | "exec_statement"
        | "print_statement" => {
            let head: String = ctx.text(n).lines().next().unwrap_or("").trim().chars().take(60).collect();
            ctx.push(n, format!("`{}` ({})", head, n.kind().replace('_', " ")), out);
            return;
        }
        "call" => {
            if let Some(f) = n.child_by_field_name("function") {
                check_callee(f, n, ctx, out);
            }
        }
        "attribute" => {
            let attr = n.child_by_field_name("attribute").map(|a| ctx.text(a)).unwrap_or("");
            if attr.starts_with("__") && attr.ends_with("__") {
                ctx.push(n, format!("`{}` (a dunder attribute)", squeeze(ctx.text(n))), out);
                return;
            }
            // `os.environ`, `sys.modules`, `triton.runtime...`: a module's attribute outside
            // Triton's device language, called or not
            if let Some(r) = ctx.root_name(n) {
                let name = ctx.text(r);
                if let Some(module) = ctx.imports.names.get(name).filter(|_| !ctx.locals.contains(name)) {
                    let chain: String = squeeze(ctx.text(n)).chars().filter(|c| !c.is_whitespace()).collect();
                    let path = format!("{module}{}", &chain[name.len()..]);
                    if !is_device_path(&path) {
                        let why = if ctx.imports.is_foreign(name) {
                            format!("module `{name}`")
                        } else {
                            "not triton.language".to_string()
                        };
                        ctx.push(n, format!("`{chain}` ({why})"), out);
                        return;
                    }
                }
            }
        }
        "identifier" => {
            let name = ctx.text(n);
            if HOST_BUILTINS.contains(&name) && !ctx.locals.contains(name) {
                ctx.push(n, format!("`{name}` (a host builtin)"), out);
            }
        }
        _ => {}
    }
    let mut c = n.walk();
    for child in n.named_children(&mut c) {
        visit(child, ctx, out);
    }
}

/// A call's callee: Triton, a jitted function of the file, a device
/// builtin or a method of a value; anything else is host code.
fn check_callee(f: Node, call: Node, ctx: &Ctx, out: &mut Vec<Finding>) {
    let bad = match f.kind() {
        "identifier" => {
            let name = ctx.text(f);
            let ok = ctx.jitted.contains(name)
                || ctx.locals.contains(name)
                || DEVICE_BUILTINS.contains(&name)
                || ctx.imports.names.get(name).is_some_and(|p| is_device_path(p))
                || HOST_BUILTINS.contains(&name); // named once, by the identifier rule
            (!ok).then(|| {
                if let Some(path) = ctx.imports.names.get(name) {
                    format!("`{name}(...)` (imported from `{path}`)")
                } else {
                    format!("`{name}(...)` (not Triton, not a kernel of this file)")
                }
            })
        }
        // `tl.exp(...)`, `x.to(...)`: Triton's, or a value's method; a foreign
        // module's is found by the attribute rule
        "attribute" => None,
        _ => Some(format!("`{}(...)` (a computed callee)", squeeze(ctx.text(f)))),
    };
    if let Some(b) = bad {
        ctx.push(call, b, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "import os\nimport triton\nimport triton.language as tl\nfrom triton.language.extra import libdevice\nfrom .helpers import exp2\n\n\n@triton.jit\ndef helper(x):\n    return x * 2\n\n\n@triton.jit\ndef k(x_ptr, y_ptr, N: tl.constexpr, FLAG: tl.constexpr):\n    i = tl.program_id(0).to(tl.int64)\n    x = tl.load(x_ptr + i)\n    for j in tl.static_range(2):\n        x = helper(x) + libdevice.exp(x) + exp2(x) + min(j, 1)\n    tl.store(y_ptr + i, x)\n\n\ndef launch(x, y):\n    k[(1,)](x, y, N=4, FLAG=True)\n    return os.environ.get('X')\n";

    fn added(new_body: &str) -> Vec<String> {
        let cand = BASE.replace("    tl.store(y_ptr + i, x)\n", &format!("{new_body}    tl.store(y_ptr + i, x)\n"));
        assert_ne!(cand, BASE);
        added_host_code(BASE, &cand).expect("parses").into_iter().map(|f| f.construct).collect()
    }

    #[test]
    fn the_baseline_kernel_and_device_code_pass() {
        assert!(added_host_code(BASE, BASE).unwrap().is_empty());
        // triton, a value's methods, a jitted helper, a device builtin, a helper the baseline calls
        assert!(added("    x = tl.exp2(x).to(tl.float32) + helper(x) + max(1, 2) + exp2(x)\n").is_empty());
        // host code in the launcher is the host-code rule's, not this one's
        let cand = BASE.replace("os.environ.get('X')", "os.environ.get('Y')");
        assert!(added_host_code(BASE, &cand).unwrap().is_empty());
    }

    #[test]
    fn host_code_in_a_kernel_body_is_found_on_any_branch() {
        let found = added("    if FLAG:\n        f = open('/tmp/x', 'w')\n        f.write('pwned')\n");
        assert_eq!(found, ["`open` (a host builtin)"], "{found:?}");
        let found = added("    if N < 8:\n        x = x + len(os.environ.get('TRITON_INTERPRET', ''))\n");
        assert_eq!(found, ["`os.environ.get` (module `os`)"], "{found:?}");
        let found = added("    import socket\n");
        assert_eq!(found, ["`import socket`"], "{found:?}");
        let found = added("    x = x.__class__\n");
        assert_eq!(found, ["`x.__class__` (a dunder attribute)"], "{found:?}");
        let found = added("    t = sorted([1])\n");
        assert_eq!(found, ["`sorted(...)` (not Triton, not a kernel of this file)"], "{found:?}");
        let found = added("    with tl.static_range(1):\n        pass\n");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("with statement"), "{found:?}");
        let found = added("    g = getattr(tl, 'load')\n");
        assert_eq!(found, ["`getattr` (a host builtin)"], "{found:?}");
        let found = added("    x = x + triton.runtime.driver.active.get_current_device()\n");
        assert_eq!(found, ["`triton.runtime.driver.active.get_current_device` (not triton.language)"], "{found:?}");
        let found = added("    z = (lambda: 1)()\n");
        assert!(found.iter().any(|f| f.contains("lambda")), "{found:?}");
    }

    #[test]
    fn a_call_imported_from_elsewhere_is_host_code_unless_the_baseline_calls_it() {
        let base = BASE.replace("from .helpers import exp2\n", "from .helpers import exp2, log2\n");
        let cand = base.replace("    tl.store(y_ptr + i, x)\n", "    x = log2(x)\n    tl.store(y_ptr + i, x)\n");
        let found: Vec<String> = added_host_code(&base, &cand).unwrap().into_iter().map(|f| f.construct).collect();
        assert_eq!(found, ["`log2(...)` (imported from `.helpers.log2`)"], "{found:?}");
        // the same helper once more than the baseline calls it is the baseline's own
        let cand = base.replace("exp2(x) + min", "exp2(x) + exp2(x) + min");
        assert!(added_host_code(&base, &cand).unwrap().is_empty());
    }

    #[test]
    fn a_local_name_shadows_an_import() {
        // `os` bound in the kernel is a value of the kernel's, not the module
        let found = added("    os = tl.load(x_ptr)\n    x = x + os.to(tl.float32)\n");
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn findings_name_their_lines() {
        let cand = BASE.replace("    tl.store(y_ptr + i, x)\n", "    import os as o2\n    tl.store(y_ptr + i, x)\n");
        let f = added_host_code(BASE, &cand).unwrap();
        let line = cand.lines().position(|l| l.contains("import os as o2")).unwrap() + 1;
        assert_eq!(f.iter().map(|f| f.line).collect::<Vec<_>>(), [line]);
    }
}
