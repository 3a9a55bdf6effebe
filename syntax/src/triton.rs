//! How a Python file names Triton: its import aliases (`import triton as
//! tr`, `from triton import language as tl`), dotted names resolved through
//! them to one canonical spelling (`tl.exp2`), and which decorators make a
//! function a Triton kernel. Kernel finding and the miner's Python
//! extractor read names the same way through [`ImportAliases`].

use std::collections::HashMap;

use tree_sitter::Node;

/// A Python module's top-level imports: each local name and the dotted
/// name it stands for.
#[derive(Debug, Clone, Default)]
pub struct ImportAliases {
    names: HashMap<String, String>,
}

impl ImportAliases {
    /// The imports among the top-level statements under `root`, a parsed
    /// Python module of `src`.
    pub fn of(root: Node, src: &str) -> ImportAliases {
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
        ImportAliases { names: map }
    }

    /// Whether `name` is bound by an import.
    pub fn binds(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    /// Resolves import aliases and writes Triton's language module as `tl`.
    pub fn canonical(&self, dotted: &str) -> String {
        let dotted: String = dotted.chars().filter(|c| !c.is_whitespace()).collect();
        let (head, rest) = match dotted.split_once('.') {
            Some((h, r)) => (h, Some(r)),
            None => (dotted.as_str(), None),
        };
        let full = match (self.names.get(head), rest) {
            (Some(t), Some(r)) => format!("{t}.{r}"),
            (Some(t), None) => t.clone(),
            (None, _) => return dotted,
        };
        if let Some(r) = full.strip_prefix("triton.language.math.") {
            // Every public function of `triton.language.math` is re-exported as
            // `triton.language.<name>` (the same object): one function, one name.
            format!("tl.{r}")
        } else if let Some(r) = full.strip_prefix("triton.language.") {
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

    /// Whether the `decorator` node (of `src`) makes its function a Triton
    /// kernel, called (`@triton.jit(...)`) or not.
    pub fn is_kernel_decorator(&self, decorator: Node, src: &str) -> bool {
        let Some(expr) = decorator.named_child(0) else { return false };
        let target = if expr.kind() == "call" { expr.child_by_field_name("function") } else { Some(expr) };
        let Some(target) = target else { return false };
        is_triton_kernel_decorator(&self.canonical(src.get(target.byte_range()).unwrap_or("")))
    }
}

/// `triton.jit`, `triton.autotune`, `triton.heuristics` (and their
/// `triton.runtime` spellings) mark a function as a Triton kernel.
pub fn is_triton_kernel_decorator(canonical: &str) -> bool {
    canonical.starts_with("triton") && matches!(canonical.rsplit('.').next(), Some("jit" | "autotune" | "heuristics"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Lang, parse_tree};

    #[test]
    fn names_resolve_through_imports_to_one_spelling() {
        let src = "import triton as tr\nimport triton.language as tl\nfrom triton.language import math as m\n";
        let tree = parse_tree(Lang::Python, src).unwrap().unwrap();
        let a = ImportAliases::of(tree.root_node(), src);
        assert!(a.binds("tr") && a.binds("m") && !a.binds("triton"));
        assert_eq!(a.canonical("tl.load"), "tl.load");
        assert_eq!(a.canonical("m.exp2"), "tl.exp2");
        assert_eq!(a.canonical("tr.jit"), "triton.jit");
        assert_eq!(a.canonical("torch.exp"), "torch.exp");
        assert!(is_triton_kernel_decorator("triton.runtime.jit"));
        assert!(!is_triton_kernel_decorator("functools.cache"));
    }
}
