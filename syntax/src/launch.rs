//! Kernel launches in a Python file's host code: `KERNEL[GRID](ARGS)`
//! where `KERNEL` is a Triton kernel the file defines (`@triton.jit`,
//! possibly under `autotune` or `heuristics`) or a name it imports. A
//! launch's configuration (its grid, the launch options of
//! [`LAUNCH_OPTIONS`], and for a kernel of the file the keywords naming its
//! `tl.constexpr` parameters) is what a rewrite may change in host code;
//! the rewrite engine and the static gate read launches here, the same way.

use std::ops::Range;

use tree_sitter::{Node, Tree};

use crate::parse::preorder;
use crate::triton::ImportAliases;

/// The launch options that are part of a launch's configuration: how many
/// warps run a program, and how deep loops are software-pipelined. Other
/// keywords a launch takes (`num_ctas`, `maxnreg`, `enable_fp_fusion`)
/// change more than the schedule (clusters, register caps, rounding).
pub const LAUNCH_OPTIONS: &[&str] = &["num_warps", "num_stages"];

/// What is launched: a kernel of the file, or a name the file imports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launched {
    /// A Triton kernel defined in the file.
    Defined {
        /// Its parameters annotated `tl.constexpr`, in order.
        constexprs: Vec<String>,
        /// It is under `@triton.autotune`, whose configurations pass the
        /// launch options themselves (a launch that passes one too fails).
        autotuned: bool,
    },
    /// A name bound by an import (`from .ops import kernel`): launched with
    /// a subscript, but what it is cannot be read here.
    Imported,
}

/// One launch `KERNEL[GRID](ARGS)` in host code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The whole call's bytes.
    pub call: Range<usize>,
    /// The kernel's name as written.
    pub kernel: String,
    /// The grid expression's bytes (inside the brackets).
    pub grid: Range<usize>,
    /// What the name stands for.
    pub launched: Launched,
}

impl Launch {
    /// Whether `keyword` may change at this launch without changing what is
    /// computed: a launch option, or a `tl.constexpr` parameter of the
    /// kernel (for an imported kernel, only a launch option).
    pub fn configures(&self, keyword: &str) -> bool {
        LAUNCH_OPTIONS.contains(&keyword)
            || matches!(&self.launched, Launched::Defined { constexprs, .. } if constexprs.iter().any(|c| c == keyword))
    }

    /// Whether the launched kernel is autotuned (its launch options come from its configurations).
    pub fn autotuned(&self) -> bool {
        matches!(self.launched, Launched::Defined { autotuned: true, .. })
    }
}

/// The launches of kernels in the host code of a parsed Python file, in
/// source order; calls inside kernels and under parse errors are not
/// launches.
pub fn kernel_launches(text: &str, tree: &Tree) -> Vec<Launch> {
    let root = tree.root_node();
    let aliases = ImportAliases::of(root, text);
    let kernels = defined_kernels(root, text, &aliases);
    let mut out = Vec::new();
    preorder(root, |node| {
        if node.is_error() || kernels.iter().any(|k| k.range == node.byte_range()) {
            return false; // under an error, or a kernel's own body
        }
        if let Some(l) = launch_at(node, text, &aliases, &kernels) {
            out.push(l);
        }
        true
    });
    out
}

/// A kernel of the file: its definition's range (decorators included), name and launch facts.
struct Kernel {
    range: Range<usize>,
    name: String,
    constexprs: Vec<String>,
    autotuned: bool,
}

fn defined_kernels(root: Node, text: &str, aliases: &ImportAliases) -> Vec<Kernel> {
    let src = |n: Node| text.get(n.byte_range()).unwrap_or("");
    let mut out = Vec::new();
    preorder(root, |node| {
        if node.kind() != "decorated_definition" {
            return true;
        }
        let mut c = node.walk();
        let decorators: Vec<Node> = node.named_children(&mut c).filter(|d| d.kind() == "decorator").collect();
        if !decorators.iter().any(|d| aliases.is_kernel_decorator(*d, text)) {
            return true;
        }
        let Some(def) = node.child_by_field_name("definition") else { return false };
        let autotuned = decorators.iter().any(|d| {
            let expr = d.named_child(0);
            let target =
                expr.and_then(|e| if e.kind() == "call" { e.child_by_field_name("function") } else { Some(e) });
            target.is_some_and(|t| aliases.canonical(src(t)).rsplit('.').next() == Some("autotune"))
        });
        let mut constexprs = Vec::new();
        if let Some(params) = def.child_by_field_name("parameters") {
            let mut pc = params.walk();
            for p in params.named_children(&mut pc) {
                let Some(ty) = p.child_by_field_name("type") else { continue };
                if aliases.canonical(src(ty)) != "tl.constexpr" {
                    continue;
                }
                let name = if p.kind() == "typed_parameter" {
                    p.named_child(0).filter(|n| n.kind() == "identifier")
                } else {
                    p.child_by_field_name("name")
                };
                if let Some(n) = name {
                    constexprs.push(src(n).to_string());
                }
            }
        }
        if let Some(name) = def.child_by_field_name("name") {
            out.push(Kernel { range: node.byte_range(), name: src(name).to_string(), constexprs, autotuned });
        }
        false
    });
    out
}

fn launch_at(node: Node, text: &str, aliases: &ImportAliases, kernels: &[Kernel]) -> Option<Launch> {
    if node.kind() != "call" {
        return None;
    }
    let sub = node.child_by_field_name("function").filter(|f| f.kind() == "subscript")?;
    let value = sub.child_by_field_name("value").filter(|v| v.kind() == "identifier")?;
    let name = text.get(value.byte_range())?;
    let launched = match kernels.iter().find(|k| k.name == name) {
        Some(k) => Launched::Defined { constexprs: k.constexprs.clone(), autotuned: k.autotuned },
        // an imported name, not Triton's own modules (`tl[...]` is no launch)
        None if aliases.binds(name) && !aliases.canonical(name).starts_with("triton") => Launched::Imported,
        None => return None,
    };
    let mut c = sub.walk();
    let parts: Vec<Node> = sub.children_by_field_name("subscript", &mut c).collect();
    let (first, last) = (parts.first()?, parts.last()?);
    Some(Launch {
        call: node.byte_range(),
        kernel: name.to_string(),
        grid: first.start_byte()..last.end_byte(),
        launched,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Lang, parse_tree};

    const SRC: &str = r#"import triton
import triton.language as tl
from .ops import other_kernel
from triton import cdiv


@triton.jit
def k(x, o, N, BK: tl.constexpr, BV: tl.constexpr = 32):
    tl.store(o, tl.load(x))


@triton.autotune(configs=[triton.Config({}, num_warps=4)], key=["N"])
@triton.jit
def tuned(x, BT: tl.constexpr):
    pass


def launch(x, o, handlers):
    grid = (cdiv(x.numel(), 64), 1)
    k[grid](x, o, x.numel(), BK=64, num_warps=8)
    tuned[(1,)](x, BT=16)
    other_kernel[(2, 3)](x)
    handlers[0](x)
    cdiv[1](x)
    return o
"#;

    #[test]
    fn launches_of_the_files_kernels_and_imported_names() {
        let tree = parse_tree(Lang::Python, SRC).unwrap().unwrap();
        let got = kernel_launches(SRC, &tree);
        let names: Vec<(&str, &str)> = got.iter().map(|l| (l.kernel.as_str(), &SRC[l.grid.clone()])).collect();
        assert_eq!(names, [("k", "grid"), ("tuned", "(1,)"), ("other_kernel", "(2, 3)")]);
        assert!(SRC[got[0].call.clone()].starts_with("k[grid](x, o,") && SRC[got[0].call.clone()].ends_with("=8)"));
        assert_eq!(got[0].launched, Launched::Defined { constexprs: vec!["BK".into(), "BV".into()], autotuned: false });
        assert!(got[1].autotuned() && !got[0].autotuned());
        assert_eq!(got[2].launched, Launched::Imported);
        // what a launch's configuration is
        assert!(got[0].configures("num_warps") && got[0].configures("BV") && !got[0].configures("N"));
        assert!(!got[0].configures("num_ctas") && !got[0].configures("x"));
        assert!(got[2].configures("num_stages") && !got[2].configures("BK"));
    }
}
