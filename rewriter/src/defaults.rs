//! Arguments a rewrite passes at the value the callee takes anyway.
//!
//! `tl.dot(a, b, out_dtype=tl.float32)` is `tl.dot(a, b)`: Triton's
//! signature defaults `out_dtype` to `float32`; `k[grid](x, num_warps=4)` is
//! `k[grid](x)`: a launch takes CUDA's options' defaults (`num_warps=4`,
//! `num_stages=3`, `CUDAOptions` in Triton 3.x's NVIDIA backend). A rewrite whose only change
//! is such arguments does nothing; like a nil cast, it is judged on the
//! parsed files (comments and layout aside), so every way of making a
//! candidate is held to it.

use kidiom_syntax::{Lang, kernel_launches, parse_tree, preorder};
use tree_sitter::Node;

/// `(callee, keyword, the default's spellings)`, from Triton's
/// `language/core.py` signatures of `dot`, `load` and `store`.
const DEFAULTS: &[(&str, &str, &[&str])] = &[
    ("tl.dot", "out_dtype", &["tl.float32"]),
    ("tl.dot", "acc", &["None"]),
    ("tl.dot", "input_precision", &["None"]),
    ("tl.dot", "allow_tf32", &["None"]),
    ("tl.dot", "max_num_imprecise_acc", &["None"]),
    ("tl.load", "mask", &["None"]),
    ("tl.load", "other", &["None"]),
    ("tl.load", "cache_modifier", &["\"\"", "''"]),
    ("tl.load", "eviction_policy", &["\"\"", "''"]),
    ("tl.load", "volatile", &["False"]),
    ("tl.store", "mask", &["None"]),
    ("tl.store", "cache_modifier", &["\"\"", "''"]),
    ("tl.store", "eviction_policy", &["\"\"", "''"]),
];

/// The callee a launch's keywords are told by in [`DEFAULTS`].
const LAUNCH: &str = "kernel launch";

/// `(keyword, the default's spellings)` of a kernel launch
/// (`KERNEL[GRID](...)`, [`kidiom_syntax::kernel_launches`]), from
/// `triton/backends/nvidia/compiler.py`'s `CUDAOptions` (Triton 3.x).
const LAUNCH_DEFAULTS: &[(&str, &[&str])] = &[("num_warps", &["4"]), ("num_stages", &["3"])];

/// Why the rewrite of `base` to `result` does nothing (`None`: it does
/// something, or that cannot be told): its only change is keyword
/// arguments at their defaults. Python only.
pub fn nil_arguments(lang: Lang, base: &str, result: &str) -> Option<String> {
    if lang != Lang::Python || base == result {
        return None;
    }
    let (old, old_args) = tokens_without_defaults(base)?;
    let (new, new_args) = tokens_without_defaults(result)?;
    if old != new {
        return None;
    }
    let mut args: Vec<String> = new_args.into_iter().filter(|a| !old_args.contains(a)).collect();
    args.sort();
    args.dedup();
    if args.is_empty() {
        return None; // comments or layout only: not this rule's to judge
    }
    Some(format!("its only change passes {} at the default the callee takes anyway", args.join(", ")))
}

/// The file as its tokens (comments, and keyword arguments at their
/// defaults with their comma, left out; one line per source line, with its
/// indentation), and the arguments left out (`out_dtype=tl.float32 on tl.dot`).
fn tokens_without_defaults(text: &str) -> Option<(String, Vec<String>)> {
    let tree = parse_tree(Lang::Python, text).ok().flatten()?;
    if tree.root_node().has_error() {
        return None;
    }
    let src = text.as_bytes();
    let launches: Vec<usize> = kernel_launches(text, &tree).into_iter().map(|l| l.call.start).collect();
    let mut cut: Vec<(usize, usize)> = Vec::new();
    let mut left_out = Vec::new();
    preorder(tree.root_node(), |n| {
        if let Some((callee, kw)) = default_argument(n, src, &launches) {
            let start = n.prev_sibling().filter(|p| p.kind() == ",").map(|p| p.start_byte()).unwrap_or(n.start_byte());
            cut.push((start, n.end_byte()));
            left_out.push(if callee == LAUNCH {
                format!("`{kw}` on a {callee}")
            } else {
                format!("`{kw}` on `{callee}`")
            });
            return false;
        }
        true
    });
    let mut out = String::with_capacity(text.len());
    let mut row = usize::MAX;
    preorder(tree.root_node(), |n| {
        if cut.iter().any(|&(s, e)| n.start_byte() >= s && n.end_byte() <= e) || n.kind() == "comment" {
            return false;
        }
        // a string is one token: its spaces are part of what it means
        if n.child_count() > 0 && n.kind() != "string" {
            return true;
        }
        let p = n.start_position();
        if p.row != row {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', p.column));
            row = p.row;
        } else {
            out.push(' ');
        }
        out.push_str(n.utf8_text(src).unwrap_or(""));
        false
    });
    Some((out, left_out))
}

/// `keyword=value` inside a call of a [`DEFAULTS`] callee, or a kernel
/// launch (whose calls start at `launches`), at its default.
fn default_argument(n: Node, src: &[u8], launches: &[usize]) -> Option<(&'static str, String)> {
    if n.kind() != "keyword_argument" {
        return None;
    }
    let call = n.parent().filter(|p| p.kind() == "argument_list")?.parent().filter(|c| c.kind() == "call")?;
    let name = n.child_by_field_name("name")?.utf8_text(src).ok()?;
    let value = n.child_by_field_name("value")?.utf8_text(src).ok()?;
    if launches.contains(&call.start_byte()) {
        return LAUNCH_DEFAULTS
            .iter()
            .find(|(k, vs)| *k == name && vs.contains(&value.trim()))
            .map(|(k, _)| (LAUNCH, format!("{k}={}", value.trim())));
    }
    let callee = call.child_by_field_name("function")?.utf8_text(src).ok()?;
    DEFAULTS
        .iter()
        .find(|(c, k, vs)| *c == callee && *k == name && vs.contains(&value.trim()))
        .map(|(c, k, _)| (*c, format!("{k}={}", value.trim())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "import triton.language as tl\n\n@triton.jit\ndef k(a, b, p):\n    x = tl.dot(a, b)  # [M, N]\n    tl.store(p, x)\n";

    #[test]
    fn an_argument_at_its_default_does_nothing_and_any_other_does() {
        let nil = BASE.replace("tl.dot(a, b)  # [M, N]", "tl.dot(a, b, out_dtype=tl.float32)      # [M, N]");
        let why = nil_arguments(Lang::Python, BASE, &nil).expect("out_dtype=tl.float32 is tl.dot's default");
        assert!(why.contains("`out_dtype=tl.float32` on `tl.dot`"), "{why}");
        let hint = BASE.replace("tl.store(p, x)", "tl.store(p, x, eviction_policy=\"\")");
        assert!(nil_arguments(Lang::Python, BASE, &hint).is_some());
        for real in [
            BASE.replace("tl.dot(a, b)", "tl.dot(a, b, out_dtype=tl.float16)"),
            BASE.replace("tl.dot(a, b)", "tl.dot(a, b, input_precision=\"ieee\")"),
            BASE.replace("tl.store(p, x)", "tl.store(p, x, eviction_policy=\"evict_last\")"),
            // a default spelled on another callee is not that callee's default
            BASE.replace("tl.store(p, x)", "tl.store(p, foo(x, out_dtype=tl.float32))"),
            // the default argument beside a real change
            BASE.replace("tl.dot(a, b)", "tl.dot(a, b * 2, out_dtype=tl.float32)"),
            // a change inside a string keeps its spaces
            BASE.replace("tl.store(p, x)", "tl.store(p, x)\n    s = 'a  b'"),
        ] {
            assert_eq!(nil_arguments(Lang::Python, BASE, &real), None, "{real}");
        }
        // comments and layout alone are not this rule's
        assert_eq!(nil_arguments(Lang::Python, BASE, &BASE.replace("# [M, N]", "# M x N")), None);
        assert_eq!(nil_arguments(Lang::Cuda, BASE, &nil), None);
    }

    const LAUNCHER: &str = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(a, B: tl.constexpr):\n    tl.store(a, tl.load(a))\n\ndef launch(a, configs):\n    k[(1,)](a, B=16)\n    triton.Config({}, num_warps=8)\n    return a\n";

    #[test]
    fn a_launch_at_tritons_default_options_does_nothing() {
        for nil in ["k[(1,)](a, B=16, num_warps=4)", "k[(1,)](a, B=16, num_stages=3)", "k[(1,)](a, num_warps=4, B=16)"]
        {
            let cand = LAUNCHER.replace("k[(1,)](a, B=16)", nil);
            let why = nil_arguments(Lang::Python, LAUNCHER, &cand).unwrap_or_else(|| panic!("{nil} is the default"));
            assert!(
                why.contains("passes `num_")
                    && why.ends_with("` on a kernel launch at the default the callee takes anyway"),
                "{why}"
            );
        }
        for real in [
            "k[(1,)](a, B=16, num_warps=8)",
            "k[(1,)](a, B=16, num_stages=2)",
            "k[(1,)](a, B=16, num_warps=4, num_stages=4)",
            // a grid changed beside the default
            "k[(2,)](a, B=16, num_warps=4)",
        ] {
            assert_eq!(
                nil_arguments(Lang::Python, LAUNCHER, &LAUNCHER.replace("k[(1,)](a, B=16)", real)),
                None,
                "{real}"
            );
        }
        // the launch default is a launch's, not any call's: `triton.Config` takes no default here,
        // nor does the subscript call of a name that is no kernel
        let config = LAUNCHER.replace("num_warps=8)", "num_warps=8, num_stages=3)");
        assert_eq!(nil_arguments(Lang::Python, LAUNCHER, &config), None);
        let other = LAUNCHER.replace("    return a\n", "    configs[0](a)\n    return a\n");
        let other_nil = other.replace("configs[0](a)", "configs[0](a, num_warps=4)");
        assert_eq!(nil_arguments(Lang::Python, &other, &other_nil), None);
    }
}
