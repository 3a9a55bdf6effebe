//! Where the kernels of a file are, for matchers that must stay inside them.

use std::ops::Range;

use tree_sitter::{Node, Tree};

use crate::device::{DeviceMacros, known_device_macros, scan_device_macros};
use crate::lang::Lang;
use crate::parse::preorder;
use crate::triton::ImportAliases;

/// What kind of code a [`KernelRange`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelKind {
    /// A Triton kernel (a decorated definition, decorators included).
    Triton,
    /// A CUDA `__global__` function.
    Global,
    /// A CUDA `__device__` function.
    Device,
    /// A host function in a binding file (pybind11 / torch library).
    Binding,
}

/// One kernel's byte range in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRange {
    /// What it is.
    pub kind: KernelKind,
    /// Its bytes, from the first decorator or qualifier to the end of its body.
    pub range: Range<usize>,
}

/// The kernels of a parsed file: Triton kernels in Python; `__global__`,
/// `__device__` (also through device macros) and binding functions in
/// CUDA/C++. Rust has none here (PyO3 bindings are not rewritten).
pub fn kernel_ranges(lang: Lang, text: &str, tree: &Tree) -> Vec<KernelRange> {
    match lang {
        Lang::Python => triton_kernels(text, tree),
        Lang::Cuda | Lang::Cpp => cxx_kernels(text, tree),
        Lang::Rust => Vec::new(),
    }
}

/// The decorated definitions whose decorators resolve, through the file's
/// imports, to `triton.jit`, `triton.autotune` or `triton.heuristics`,
/// outermost only.
fn triton_kernels(text: &str, tree: &Tree) -> Vec<KernelRange> {
    let root = tree.root_node();
    let aliases = ImportAliases::of(root, text);
    let mut out = Vec::new();
    preorder(root, |node| {
        if node.kind() == "decorated_definition" {
            let mut c = node.walk();
            if node.named_children(&mut c).any(|d| d.kind() == "decorator" && aliases.is_kernel_decorator(d, text)) {
                out.push(KernelRange { kind: KernelKind::Triton, range: node.byte_range() });
                return false;
            }
        }
        true
    });
    out
}

fn cxx_kernels(text: &str, tree: &Tree) -> Vec<KernelRange> {
    let mut macros = known_device_macros();
    macros.extend(scan_device_macros(text));
    let binding_file = text.contains("PYBIND11_MODULE") || text.contains("TORCH_LIBRARY");
    let mut out = Vec::new();
    preorder(tree.root_node(), |node| {
        if node.kind() == "function_definition"
            && let Some(kind) = function_kind(node, text, &macros, binding_file)
        {
            out.push(KernelRange { kind, range: node.byte_range() });
            return false;
        }
        true
    });
    out
}

fn function_kind(node: Node, text: &str, macros: &DeviceMacros, binding_file: bool) -> Option<KernelKind> {
    let declarator = node.child_by_field_name("declarator")?;
    let prefix = text.get(node.start_byte()..declarator.start_byte()).unwrap_or("");
    let mut words: Vec<&str> = Vec::new();
    for w in prefix.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        match macros.get(w) {
            Some(body) => words.extend(body.split_whitespace()),
            None => words.push(w),
        }
    }
    if words.contains(&"__global__") {
        Some(KernelKind::Global)
    } else if words.contains(&"__device__") {
        Some(KernelKind::Device)
    } else if binding_file {
        Some(KernelKind::Binding)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(lang: Lang, src: &str) -> Vec<(KernelKind, String)> {
        let tree = crate::parse_tree(lang, src).unwrap().unwrap();
        kernel_ranges(lang, src, &tree).into_iter().map(|k| (k.kind, src[k.range].to_string())).collect()
    }

    #[test]
    fn finds_triton_kernels_through_aliases() {
        let src = "import triton as tr\n@tr.jit\ndef k(x):\n    pass\n\ndef host():\n    pass\n";
        let got = kinds(Lang::Python, src);
        assert_eq!(got.len(), 1);
        assert!(got[0].1.starts_with("@tr.jit"));
    }

    #[test]
    fn finds_cuda_kernels_and_macros() {
        let src = "#define DEV __device__ inline\nDEV float f(float x) { return x; }\n\
                   __global__ void k(float* x) {}\nvoid host() {}\n";
        let got: Vec<KernelKind> = kinds(Lang::Cuda, src).into_iter().map(|k| k.0).collect();
        assert_eq!(got, [KernelKind::Device, KernelKind::Global]);
    }
}
