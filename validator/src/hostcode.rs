//! Host code is contract. A rewrite of a Triton or CUDA kernel source may
//! change the kernels in it (`@triton.jit` functions, `__global__` and
//! `__device__` functions: the manifest's `entry` and its helpers), never the
//! host code around them: a launcher can call the reference instead of the
//! kernel, cache outputs, or change what is timed. Host C++ sources
//! (`language = "cpp"`) are kernels as a whole and have no such rule.
//!
//! Both texts are parsed, the kernels found with
//! [`kidiom_miner::kernel_ranges`], and every top-level definition or
//! statement outside them (with any kernel nested in it cut out) is compared:
//! the ones that differ are named.

use std::collections::HashMap;
use std::ops::Range;

use kidiom_miner::{KernelKind, Lang, kernel_ranges, parse_tree};
use tree_sitter::Node;

/// One piece of host code: its name for a reason, and its text (kernels cut out, normalized).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Item {
    name: String,
    text: String,
}

/// The host code a candidate changes, named (`kda_decode_launch`,
/// `import numpy as np`, `module-level code `X = 1``), in the order it appears;
/// empty when only kernels changed. `Err` when a text cannot be parsed.
pub(crate) fn changed_host_code(lang: Lang, base: &str, cand: &str) -> Result<Vec<String>, String> {
    let (b, c) = (items(lang, base)?, items(lang, cand)?);
    if b == c {
        return Ok(Vec::new());
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
    let mut cursor = root.walk();
    for node in root.named_children(&mut cursor) {
        if node.kind() == "comment" {
            continue;
        }
        let r = node.byte_range();
        if kernels.iter().any(|k| k.start <= r.start && r.end <= k.end) {
            continue; // a kernel (or inside one)
        }
        let body = normalize(lang, &cut(text, r, &kernels));
        if body.is_empty() {
            continue;
        }
        out.push(Item { name: name(lang, node, text), text: body });
    }
    Ok(out)
}

/// `text[r]` without the kernel ranges inside it.
fn cut(text: &str, r: Range<usize>, kernels: &[Range<usize>]) -> String {
    let mut out = String::new();
    let mut pos = r.start;
    let mut inside: Vec<&Range<usize>> = kernels.iter().filter(|k| k.start >= r.start && k.end <= r.end).collect();
    inside.sort_by_key(|k| k.start);
    for k in inside {
        if k.start < pos {
            continue;
        }
        out.push_str(text.get(pos..k.start).unwrap_or(""));
        out.push('\n');
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
        changed_host_code(lang, base, cand).unwrap()
    }

    #[test]
    fn kernel_edits_and_new_helpers_are_allowed() {
        let body = TRITON.replace("return x * 2", "return x + x");
        assert!(changed(Lang::Python, TRITON, &body).is_empty());
        let decorated = TRITON.replace("@triton.jit\ndef kernel", "@triton.jit(do_not_specialize=[\"N\"])\ndef kernel");
        assert!(changed(Lang::Python, TRITON, &decorated).is_empty());
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
        assert_eq!(changed(Lang::Python, TRITON, &undecorated), ["helper"]);
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
        let Ok(cu) = std::fs::read_to_string(root.join("kernels/kda_cuda/decode.cu")) else { return };
        assert!(
            changed(Lang::Cuda, &cu, &cu.replacen("int nh = blockIdx.x;", "int nh = (int)blockIdx.x;", 1)).is_empty()
        );
    }
}
