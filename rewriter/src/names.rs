//! Names a rewrite brings into a file that the file does not bind.
//!
//! Judged on the parsed files, not on their text: a word in a comment or a
//! docstring (`# exp(G_i - G_j)`) binds nothing, which is how a bare `exp`
//! once slipped through to fail at static with a NameError.

use std::collections::BTreeSet;

use kidiom_syntax::{Lang, parse_tree, preorder};
use tree_sitter::Node;

/// The free names of `result` (referenced, bound nowhere in the module, not
/// a builtin) that `base` did not already reference freely: names the
/// rewrite from `base` to `result` brings in and that would fail with a
/// NameError. Python only; other languages (and texts that do not parse)
/// give none, since their headers may declare anything.
pub fn unbound_names(lang: Lang, base: &str, result: &str) -> Vec<String> {
    if lang != Lang::Python {
        return Vec::new();
    }
    let (Some(old), Some(new)) = (free_names(base), free_names(result)) else { return Vec::new() };
    new.difference(&old).cloned().collect()
}

/// The names `text` references but binds nowhere (scopes ignored: a name
/// bound anywhere counts as bound, so only a name bound nowhere is free);
/// `None` when it does not parse, and none at all under `from m import *`.
fn free_names(text: &str) -> Option<BTreeSet<String>> {
    let tree = parse_tree(Lang::Python, text).ok().flatten()?;
    let (mut refs, mut bound) = (BTreeSet::new(), BTreeSet::new());
    let mut star = false;
    let name = |n: Node| n.utf8_text(text.as_bytes()).unwrap_or("").to_string();
    preorder(tree.root_node(), |n| {
        match n.kind() {
            "identifier" if is_reference(n) => {
                refs.insert(name(n));
            }
            "wildcard_import" => star = true,
            _ => {}
        }
        for target in binding_targets(n) {
            preorder(target, |m| {
                if m.kind() == "identifier" {
                    bound.insert(name(m));
                }
                true
            });
        }
        true
    });
    if star {
        return Some(BTreeSet::new());
    }
    Some(refs.into_iter().filter(|r| !bound.contains(r) && !BUILTINS.contains(&r.as_str())).collect())
}

/// Whether an identifier node is a use of a name: not an attribute after a
/// dot, nor a keyword argument's name.
fn is_reference(n: Node) -> bool {
    let Some(parent) = n.parent() else { return true };
    let is_field = |field: &str| parent.child_by_field_name(field).is_some_and(|c| c.id() == n.id());
    match parent.kind() {
        "attribute" => !is_field("attribute"),
        "keyword_argument" => !is_field("name"),
        _ => true,
    }
}

/// The subtrees of `n` whose identifiers it binds (an over-approximation:
/// `a[i] = x` counts `a` and `i` as bound, which only ever spares a name).
fn binding_targets(n: Node) -> Vec<Node> {
    let field = |f: &str| n.child_by_field_name(f).into_iter().collect::<Vec<_>>();
    match n.kind() {
        "assignment" | "augmented_assignment" | "for_statement" | "for_in_clause" => field("left"),
        "function_definition" | "class_definition" => field("name"),
        "named_expression" => field("name"),
        "parameters" | "lambda_parameters" | "global_statement" | "nonlocal_statement" => vec![n],
        "as_pattern" => field("alias"),
        "import_statement" | "import_from_statement" => {
            let mut out = Vec::new();
            let mut cur = n.walk();
            for c in n.children_by_field_name("name", &mut cur) {
                match c.kind() {
                    // `import a.b` binds `a`
                    "dotted_name" => out.extend(c.named_child(0)),
                    "aliased_import" => out.extend(c.child_by_field_name("alias")),
                    _ => out.push(c),
                }
            }
            out
        }
        "with_item" | "except_clause" => {
            // `with x as y` / `except E as e` (older grammars put the alias here)
            let mut cur = n.walk();
            n.named_children(&mut cur).filter(|c| c.kind() == "as_pattern_target").collect()
        }
        "as_pattern_target" => vec![n],
        _ => Vec::new(),
    }
}

/// Python's builtins, and the names every module has.
const BUILTINS: &[&str] = &[
    "abs",
    "aiter",
    "all",
    "anext",
    "any",
    "ascii",
    "bin",
    "bool",
    "breakpoint",
    "bytearray",
    "bytes",
    "callable",
    "chr",
    "classmethod",
    "compile",
    "complex",
    "delattr",
    "dict",
    "dir",
    "divmod",
    "enumerate",
    "eval",
    "exec",
    "filter",
    "float",
    "format",
    "frozenset",
    "getattr",
    "globals",
    "hasattr",
    "hash",
    "help",
    "hex",
    "id",
    "input",
    "int",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "list",
    "locals",
    "map",
    "max",
    "memoryview",
    "min",
    "next",
    "object",
    "oct",
    "open",
    "ord",
    "pow",
    "print",
    "property",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "setattr",
    "slice",
    "sorted",
    "staticmethod",
    "str",
    "sum",
    "super",
    "tuple",
    "type",
    "vars",
    "zip",
    "__import__",
    "__name__",
    "__file__",
    "__doc__",
    "__spec__",
    "__package__",
    "__builtins__",
    "__debug__",
    "NotImplemented",
    "Ellipsis",
    "self",
    "cls",
    "Exception",
    "BaseException",
    "ArithmeticError",
    "AssertionError",
    "AttributeError",
    "EOFError",
    "FloatingPointError",
    "ImportError",
    "IndexError",
    "KeyError",
    "KeyboardInterrupt",
    "LookupError",
    "MemoryError",
    "NameError",
    "NotImplementedError",
    "OSError",
    "OverflowError",
    "RecursionError",
    "RuntimeError",
    "StopIteration",
    "SystemExit",
    "TypeError",
    "ValueError",
    "ZeroDivisionError",
    "Warning",
    "DeprecationWarning",
    "UserWarning",
    "RuntimeWarning",
    "True",
    "False",
    "None",
];

#[cfg(test)]
mod tests {
    use super::unbound_names;
    use kidiom_syntax::Lang;

    const KERNEL: &str = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x, n: tl.constexpr):\n    # exp(G_i - G_j) = exp(G_i) / exp(G_j)\n    \"\"\"exp of x\"\"\"\n    y = tl.exp(x)\n    return y\n";

    fn check(base: &str, from: &str, to: &str) -> Vec<String> {
        unbound_names(Lang::Python, base, &base.replacen(from, to, 1))
    }

    #[test]
    fn a_bare_name_mentioned_only_in_comments_and_strings_is_unbound() {
        assert_eq!(check(KERNEL, "tl.exp(x)", "exp(x)"), ["exp"]);
    }

    #[test]
    fn names_the_file_binds_imports_or_builtins_are_not() {
        assert!(check(KERNEL, "tl.exp(x)", "tl.exp2(x * 1.4426950408889634)").is_empty());
        assert!(check(KERNEL, "tl.exp(x)", "tl.exp(x).to(tl.float32, bitcast=False)").is_empty());
        assert!(check(KERNEL, "tl.exp(x)", "tl.exp(x) * n + abs(x)").is_empty(), "parameters and builtins");
        let imported = KERNEL.replace("import triton\n", "import triton\nfrom fla.ops.utils import exp\n");
        assert!(check(&imported, "tl.exp(x)", "exp(x)").is_empty());
        let aliased = KERNEL.replace("import triton\n", "import triton\nfrom m import exp2 as exp\n");
        assert!(check(&aliased, "tl.exp(x)", "exp(x)").is_empty());
        let defined = format!("{KERNEL}\ndef exp(v):\n    return v\n");
        assert!(check(&defined, "tl.exp(x)", "exp(x)").is_empty());
        let star = KERNEL.replace("import triton\n", "import triton\nfrom m import *\n");
        assert!(check(&star, "tl.exp(x)", "exp(x)").is_empty());
    }

    #[test]
    fn a_name_bound_by_the_rewrite_itself_or_already_free_is_not_its_doing() {
        assert!(check(KERNEL, "    y = tl.exp(x)\n", "    z = x\n    y = tl.exp(z)\n").is_empty());
        let broken = KERNEL.replace("y = tl.exp(x)", "y = tl.exp(w)");
        assert!(check(&broken, "tl.exp(w)", "tl.exp(w) + 1").is_empty(), "w was free before");
        assert_eq!(check(KERNEL, "tl.exp(x)", "tl.exp(x) + helper(x)"), ["helper"]);
        assert!(unbound_names(Lang::Cuda, "a", "b").is_empty());
    }
}
