//! A host C++ module (a pybind11 extension, `language = "cpp"`) is loaded into
//! the check's worker and called there, one call at a time. What a candidate
//! adds that runs when the module loads, or that keeps state from one call to
//! the next, is seen by no check of single calls (issue #50, class 4): a
//! memo of earlier transfers, a count that changes behaviour after the
//! checks' last call, code that reaches other modules at import. Refused at
//! static: a variable with static storage that can change (a function's
//! `static`, a `thread_local`, a variable at namespace scope), a load hook
//! (a constructor attribute, an init section), and a statement the
//! candidate adds to the module's initializer (`PYBIND11_MODULE`) other than
//! a binding (`m.def(...)`, whose arguments may change: a call guard).

use std::collections::HashMap;

use crate::devicepath::{Finding, persistent_state, variable_storage};

/// What `cand` adds over `base` (the trusted module's own are not new).
/// `Err` when a side does not parse (the syntax gate's business).
pub(crate) fn added_module_state(base: &str, cand: &str) -> Result<Vec<Finding>, String> {
    let mut known: HashMap<String, usize> = HashMap::new();
    for f in module_state(base)? {
        *known.entry(f.name).or_default() += 1;
    }
    let mut out = Vec::new();
    for f in module_state(cand)? {
        match known.get_mut(&f.name) {
            Some(n) if *n > 0 => *n -= 1,
            _ => out.push(f),
        }
    }
    Ok(out)
}

fn module_state(text: &str) -> Result<Vec<Finding>, String> {
    let mut out = persistent_state(text)?;
    let tree = kidiom_syntax::parse_tree(kidiom_syntax::Lang::Cpp, text)
        .map_err(|e| format!("{e:?}"))?
        .ok_or_else(|| "the file does not parse".to_string())?;
    kidiom_syntax::preorder(tree.root_node(), |node| {
        let src = text.get(node.byte_range()).unwrap_or_default();
        let line = node.start_position().row + 1;
        match node.kind() {
            "function_definition" => {
                if let Some(module) = src.trim_start().strip_prefix("PYBIND11_MODULE") {
                    let var = module_variable(module);
                    if let Some(body) = node.child_by_field_name("body") {
                        initializer_statements(body, text, &var, &mut out);
                    }
                }
                false
            }
            "declaration" if namespace_variable(node, text) => {
                out.push(Finding { name: format!("`{}` (state kept across calls)", head(src)), line });
                false
            }
            _ => true,
        }
    });
    Ok(out)
}

/// `(name, m) { ...`: the module object's name, `m`.
fn module_variable(after_macro: &str) -> String {
    let args = after_macro.split(')').next().unwrap_or_default();
    args.rsplit(',').next().unwrap_or_default().trim().to_string()
}

/// Each statement of the initializer that is not a binding: named by its
/// text, so that the baseline's own statements are known by it.
fn initializer_statements(body: tree_sitter::Node, text: &str, var: &str, out: &mut Vec<Finding>) {
    let mut cursor = body.walk();
    for stmt in body.named_children(&mut cursor) {
        if stmt.kind() == "comment" {
            continue;
        }
        let src = text.get(stmt.byte_range()).unwrap_or_default();
        let flat = src.split_whitespace().collect::<Vec<_>>().join(" ");
        let binding = !var.is_empty()
            && stmt.kind() == "expression_statement"
            && (flat.starts_with(&format!("{var}.def(")) || flat.starts_with(&format!("{var}.doc()")));
        if !binding {
            let line = stmt.start_position().row + 1;
            out.push(Finding { name: format!("`{}` (code run when the module loads)", head(&flat)), line });
        }
    }
}

/// A declaration at namespace scope (not in a function or a class) of a
/// variable that can change: no `const`/`constexpr`, no `extern`, not a
/// function's prototype.
fn namespace_variable(node: tree_sitter::Node, text: &str) -> bool {
    let mut p = node.parent();
    while let Some(n) = p {
        if matches!(n.kind(), "compound_statement" | "field_declaration_list" | "template_declaration") {
            return false;
        }
        p = n.parent();
    }
    variable_storage(node, text).is_some_and(|s| !s.iter().any(|c| c == "extern"))
}

/// A declaration's head, up to its initializer: `static std::set<int> seen`.
fn head(src: &str) -> String {
    let h = src.split(['=', ';', '{']).next().unwrap_or(src).split_whitespace().collect::<Vec<_>>().join(" ");
    if h.chars().count() > 80 { format!("{}...", h.chars().take(80).collect::<String>()) } else { h }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODULE: &str = r#"#include <pybind11/pybind11.h>
namespace py = pybind11;
namespace {
constexpr int kPages = 4;
const char* const kName = "kv";
int helper(int x);
}
void gather(int n) {
    py::gil_scoped_release release;
    for (int i = 0; i < n; ++i) {}
}
PYBIND11_MODULE(kv_transfer, m) {
    m.doc() = "doc";
    m.def("gather", &gather, py::arg("n"));
}
"#;

    fn found(cand: &str) -> Vec<String> {
        added_module_state(MODULE, cand)
            .expect("parses")
            .into_iter()
            .map(|f| format!("{} @{}", f.name, f.line))
            .collect()
    }

    #[test]
    fn the_baselines_own_module_adds_nothing() {
        assert!(found(MODULE).is_empty(), "{:?}", found(MODULE));
        // a call guard on a binding, a new binding: bindings may change
        let guarded = MODULE.replace(
            "m.def(\"gather\", &gather, py::arg(\"n\"));",
            "m.def(\"gather\", &gather, py::arg(\"n\"), py::call_guard<py::gil_scoped_release>());\n    m.def(\"g2\", &gather);",
        );
        assert!(found(&guarded).is_empty(), "{:?}", found(&guarded));
    }

    #[test]
    fn state_kept_across_calls_is_found() {
        let local = MODULE.replace(
            "    py::gil_scoped_release release;\n",
            "    static std::set<const void*> seen;\n    thread_local int calls = 0;\n",
        );
        let f = found(&local);
        assert!(f.iter().any(|s| s.starts_with("`static std::set<const void*> seen` (state kept across")), "{f:?}");
        assert!(f.iter().any(|s| s.starts_with("`thread_local int calls` (state kept across")), "{f:?}");
        let global = MODULE.replace("int helper(int x);\n", "int helper(int x);\nint calls = 0;\n");
        assert_eq!(found(&global), vec!["`int calls` (state kept across calls) @7".to_string()]);
        let object = MODULE.replace("void gather", "static std::vector<int> memo;\nvoid gather");
        assert_eq!(found(&object), vec!["`static std::vector<int> memo` (state kept across calls) @8".to_string()]);
    }

    #[test]
    fn code_run_when_the_module_loads_is_found() {
        let exec = MODULE.replace(
            "    m.doc() = \"doc\";\n",
            "    m.doc() = \"doc\";\n    {\n        py::dict g;\n        py::exec(R\"PY(import sys)PY\", g);\n    }\n",
        );
        let f = found(&exec);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].starts_with("`") && f[0].contains("(code run when the module loads) @14"), "{f:?}");
        let hook = format!("{MODULE}__attribute__((constructor)) static void early() {{}}\n");
        assert!(found(&hook).iter().any(|s| s.contains("`constructor` (native code run when the library loads)")));
        let call = MODULE.replace("    m.doc() = \"doc\";\n", "    m.doc() = \"doc\";\n    gather(3);\n");
        assert_eq!(found(&call), vec!["`gather(3)` (code run when the module loads) @14".to_string()]);
    }
}
