//! Cast-at-load / cast-at-store on a Triton kernel's state (issue #27): the
//! loads of a tensor the kernel also stores (role `state`, from the data
//! flow of `matcher::roles`) are converted to fp32 at the load
//! (`tl.load(...).to(tl.float32)`), and their stores cast back to the
//! pointer's element type (`tl.store(p, (v).to(p.dtype.element_ty), ...)`).
//! On an fp32 state nothing changes; the kernel becomes agnostic of the
//! state's storage dtype, so a variant can keep it in bf16, fp8 or int8 and
//! the math stays in fp32 (SGLang's and FLA's recurrent kernels do this).
//! A load already followed by `.to(` or a value already ending in `.to(...)`
//! is left as it is, so the rewrite is idempotent.

use kidiom_syntax::Lang;
use tree_sitter::{Node, Tree};

use crate::matcher::roles::{Role, memory_accesses};
use crate::matcher::{Edit, SiteEdits};

pub(crate) fn site_edits(lang: Lang, src: &str, tree: &Tree) -> Vec<SiteEdits> {
    if lang != Lang::Python {
        return Vec::new();
    }
    let root = tree.root_node();
    let text = |n: Node| src.get(n.byte_range()).unwrap_or("");
    let mut out = Vec::new();
    for a in memory_accesses(src, tree).into_iter().filter(|a| a.role == Role::State) {
        let Some(call) = root.descendant_for_byte_range(a.site.start, a.site.end) else { continue };
        if call.kind() != "call" || call.byte_range() != a.site {
            continue;
        }
        let edits = match a.op {
            "load" => {
                let cast = call
                    .parent()
                    .filter(|p| p.kind() == "attribute")
                    .and_then(|p| p.child_by_field_name("attribute"))
                    .is_some_and(|n| text(n) == "to");
                if cast {
                    continue;
                }
                // the call's own spelling of triton.language (`tl` in `tl.load`)
                let function = call.child_by_field_name("function").map(text).unwrap_or("");
                let tl = function.strip_suffix(".load").filter(|m| !m.is_empty()).unwrap_or("tl");
                vec![Edit { range: a.site.end..a.site.end, text: format!(".to({tl}.float32)") }]
            }
            "store" => {
                let Some(args) = call.child_by_field_name("arguments") else { continue };
                let mut c = args.walk();
                let positional: Vec<Node> =
                    args.named_children(&mut c).filter(|n| n.kind() != "keyword_argument").collect();
                let (Some(ptr), Some(value)) = (positional.first(), positional.get(1)) else { continue };
                if already_cast(value, src) {
                    continue;
                }
                let simple = |n: &Node| matches!(n.kind(), "identifier" | "attribute" | "call" | "subscript");
                let p = if ptr.kind() == "identifier" { text(*ptr).to_string() } else { format!("({})", text(*ptr)) };
                let cast = format!(".to({p}.dtype.element_ty)");
                let r = value.byte_range();
                if simple(value) {
                    vec![Edit { range: r.end..r.end, text: cast }]
                } else {
                    vec![
                        Edit { range: r.start..r.start, text: "(".into() },
                        Edit { range: r.end..r.end, text: format!("){cast}") },
                    ]
                }
            }
            _ => continue,
        };
        out.push(SiteEdits { site: a.site.clone(), edits });
    }
    out.sort_by_key(|s| (s.site.start, s.site.end));
    out
}

/// `v.to(...)` or `(...).to(...)`: the value is already converted.
fn already_cast(value: &Node, src: &str) -> bool {
    value.kind() == "call"
        && value
            .child_by_field_name("function")
            .filter(|f| f.kind() == "attribute")
            .and_then(|f| f.child_by_field_name("attribute"))
            .is_some_and(|a| src.get(a.byte_range()) == Some("to"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ReuseForm, Rewrite, RewriteSpec, rewrite};

    fn run(src: &str) -> Option<String> {
        let spec = RewriteSpec {
            transform: Some(ReuseForm::StateCast),
            ..RewriteSpec::usage("c", Lang::Python, "$F($$$A)", "state cast", &[])
        };
        let rw = Rewrite::new(&spec, None).expect("compiles");
        rewrite(&rw, Lang::Python, src, "k.py").expect("rewrites").map(|o| o.text)
    }

    const DECODE: &str = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(q, pool, slots, o, K: tl.constexpr):\n    i = tl.program_id(0)\n    slot = tl.load(slots + i)\n    p_s = pool + slot * K + tl.arange(0, K)\n    b_q = tl.load(q + i * K + tl.arange(0, K)).to(tl.float32)\n    b_s = tl.load(p_s, mask=None)\n    b_s = b_s * 0.5 + b_q\n    tl.store(p_s, b_s * 2.0, mask=None)\n    tl.store(o + i * K + tl.arange(0, K), b_s)\n";

    #[test]
    fn the_state_is_cast_at_its_load_and_back_at_its_store_and_nothing_else_changes() {
        let out = run(DECODE).expect("a site");
        assert!(out.contains("    b_s = tl.load(p_s, mask=None).to(tl.float32)\n"), "{out}");
        assert!(out.contains("    tl.store(p_s, (b_s * 2.0).to(p_s.dtype.element_ty), mask=None)\n"), "{out}");
        // the index, the streamed input and the output are not state
        assert!(out.contains("    slot = tl.load(slots + i)\n"), "{out}");
        assert!(out.contains("    tl.store(o + i * K + tl.arange(0, K), b_s)\n"), "{out}");
        // idempotent
        assert_eq!(run(&out), None);
    }
}
