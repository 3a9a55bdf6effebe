//! What edit mining looks at: kernels and their launch sites, never tests.
//!
//! An edit is mined only when it lies inside a kernel
//! ([`kidiom_syntax::kernel_ranges`]: a Triton kernel with its decorators, which
//! hold its autotune and heuristics configuration; a CUDA `__global__` or
//! `__device__` function) or a kernel launch (`kernel[grid](...)` of a
//! Triton kernel of the same file, `kernel<<<grid, block>>>(...)` in
//! CUDA), on both sides of the commit. Host plumbing (wrappers, argument
//! shuffling, imports) and test and benchmark files are not what the
//! catalog is about: their refactors recur too, but are no idioms.

use std::ops::Range;
use std::sync::OnceLock;

use kidiom_syntax::{DeviceMacros, KernelKind, Lang, kernel_ranges, known_device_macros};

use crate::prefilter::Prefilter;

/// Whether `path` is a test or benchmark file: a `tests`, `test`,
/// `benchmarks` or `benchmark` directory on its path, or a file named
/// `test_*`, `*_test` or `conftest.py`.
pub(crate) fn is_test_path(path: &str) -> bool {
    let mut parts: Vec<&str> = path.split('/').collect();
    let file = parts.pop().unwrap_or("");
    if parts.iter().any(|d| matches!(*d, "tests" | "test" | "benchmarks" | "benchmark")) {
        return true;
    }
    let stem = file.rsplit_once('.').map_or(file, |(s, _)| s);
    file == "conftest.py" || stem.starts_with("test_") || stem.ends_with("_test")
}

/// Whether a text can hold a kernel at all (the literal prefilter), so
/// that a file whose versions cannot is never parsed.
pub(crate) fn may_hold_kernels(lang: Lang, text: &str) -> bool {
    static PREFILTER: OnceLock<Prefilter> = OnceLock::new();
    let p = PREFILTER.get_or_init(|| {
        let macros: DeviceMacros = known_device_macros();
        Prefilter::new(&macros)
    });
    p.may_contain_kernels(lang, text.as_bytes())
}

/// The byte ranges of a parsed file's kernels and kernel launches, in
/// order (a launch may lie inside a kernel's range).
pub(crate) fn kernel_scope(lang: Lang, text: &str, tree: &tree_sitter::Tree) -> Vec<Range<usize>> {
    if !may_hold_kernels(lang, text) {
        return Vec::new();
    }
    let kernels: Vec<Range<usize>> = kernel_ranges(lang, text, tree)
        .into_iter()
        .filter(|k| matches!(k.kind, KernelKind::Triton | KernelKind::Global | KernelKind::Device))
        .map(|k| k.range)
        .collect();
    let mut out = match lang {
        Lang::Python => triton_launches(text, tree, &kernels),
        Lang::Cuda | Lang::Cpp => cuda_launches(text, tree),
        Lang::Rust => Vec::new(),
    };
    out.extend(kernels);
    out.sort_by_key(|r| (r.start, r.end));
    out
}

/// `kernel[grid](...)` calls of the Triton kernels defined in the file.
fn triton_launches(text: &str, tree: &tree_sitter::Tree, kernels: &[Range<usize>]) -> Vec<Range<usize>> {
    let root = tree.root_node();
    let mut out = Vec::new();
    for k in kernels {
        let Some(name) = root
            .descendant_for_byte_range(k.start, k.end)
            .and_then(|d| d.child_by_field_name("definition"))
            .and_then(|f| f.child_by_field_name("name"))
            .and_then(|n| text.get(n.byte_range()))
        else {
            continue;
        };
        for at in memchr::memmem::find_iter(text.as_bytes(), name.as_bytes()) {
            let Some(id) = root.descendant_for_byte_range(at, at + name.len()) else { continue };
            if id.kind() != "identifier" || id.byte_range() != (at..at + name.len()) {
                continue;
            }
            let launch =
                id.parent().filter(|s| s.kind() == "subscript" && s.child_by_field_name("value") == Some(id)).and_then(
                    |s| s.parent().filter(|c| c.kind() == "call" && c.child_by_field_name("function") == Some(s)),
                );
            if let Some(call) = launch {
                out.push(call.byte_range());
            }
        }
    }
    out
}

/// `kernel<<<grid, block>>>(...)` calls.
fn cuda_launches(text: &str, tree: &tree_sitter::Tree) -> Vec<Range<usize>> {
    let root = tree.root_node();
    let mut out = Vec::new();
    for at in memchr::memmem::find_iter(text.as_bytes(), b"<<<") {
        let mut node = root.descendant_for_byte_range(at, at + 3);
        // The `<<<` token, its `kernel_call_syntax`, then the call.
        for _ in 0..4 {
            let Some(n) = node else { break };
            if n.kind() == "call_expression" {
                let mut c = n.walk();
                if n.children(&mut c).any(|k| k.kind() == "kernel_call_syntax") {
                    out.push(n.byte_range());
                }
                break;
            }
            node = n.parent();
        }
    }
    out
}

/// A version's kernel and launch ranges.
pub(crate) type Ranges<'r> = &'r [Range<usize>];

/// Where a file pair's edits may lie: inside a range of the old version's
/// scope before, and of the new version's after. Offsets of the trees cut
/// (a fragment's start) are added first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scope<'r> {
    /// Old and new ranges; `None`: anywhere (unscoped cutting, in tests).
    pub ranges: Option<(Ranges<'r>, Ranges<'r>)>,
    /// Byte offset of the old and new trees in their files.
    pub offsets: (u32, u32),
}

impl Scope<'_> {
    /// Anywhere.
    #[cfg(test)]
    pub(crate) const ALL: Scope<'static> = Scope { ranges: None, offsets: (0, 0) };

    /// Whether an edit of old bytes `before` into new bytes `after` (in
    /// tree offsets) lies in scope on both sides.
    pub(crate) fn allows(&self, before: (u32, u32), after: (u32, u32)) -> bool {
        let Some((old, new)) = self.ranges else { return true };
        let (bo, ao) = (self.offsets.0 as usize, self.offsets.1 as usize);
        within(old, before.0 as usize + bo, before.1 as usize + bo)
            && within(new, after.0 as usize + ao, after.1 as usize + ao)
    }
}

/// Whether `start..end` lies inside one of `ranges`.
pub(crate) fn within(ranges: &[Range<usize>], start: usize, end: usize) -> bool {
    ranges.iter().any(|r| r.start <= start && end <= r.end)
}

/// Whether `range` overlaps one of `ranges`.
pub(crate) fn overlaps(ranges: &[Range<usize>], range: &Range<usize>) -> bool {
    ranges.iter().any(|r| r.start < range.end && range.start < r.end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tests_and_benchmarks_are_recognised_by_path() {
        for p in [
            "tests/ops/test_gla.py",
            "fla/test/x.py",
            "benchmarks/ops/bench.py",
            "a/test_utils.py",
            "csrc/gemm_test.cu",
            "conftest.py",
        ] {
            assert!(is_test_path(p), "{p}");
        }
        for p in ["fla/ops/gla/chunk.py", "fla/ops/utils/testing_helpers.py", "contest.py", "latest/x.py"] {
            assert!(!is_test_path(p), "{p}");
        }
    }

    fn scope_texts(lang: Lang, src: &str) -> Vec<&str> {
        let tree = kidiom_syntax::parse_tree(lang, src).unwrap().unwrap();
        kernel_scope(lang, src, &tree).into_iter().map(|r| &src[r]).collect()
    }

    #[test]
    fn kernels_and_their_launches_are_in_scope_host_code_is_not() {
        let src = "import triton\nimport triton.language as tl\n\n\
                   @triton.heuristics({'A': lambda a: True})\n@triton.jit\ndef k(x, A: tl.constexpr):\n    pass\n\n\n\
                   def host(x):\n    y = x + 1\n    k[(1,)](y, A=True, num_warps=4)\n    other[(1,)](y)\n    return y\n";
        let got = scope_texts(Lang::Python, src);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].starts_with("@triton.heuristics") && got[0].ends_with("pass"));
        assert_eq!(got[1], "k[(1,)](y, A=True, num_warps=4)");
        assert!(scope_texts(Lang::Python, "def host(x):\n    return x\n").is_empty());
        let cu = "__global__ void k(float* x) { x[0] = 1; }\nvoid h(float* x) { int n = 1; k<<<1, 2>>>(x); }\n";
        let got = scope_texts(Lang::Cuda, cu);
        assert_eq!(got, ["__global__ void k(float* x) { x[0] = 1; }", "k<<<1, 2>>>(x)"]);
    }

    #[test]
    fn an_edit_is_in_scope_when_both_sides_are() {
        let (old, new) = ([Range { start: 10, end: 20 }], [Range { start: 30, end: 45 }]);
        let s = Scope { ranges: Some((&old, &new)), offsets: (0, 20) };
        assert!(s.allows((12, 18), (12, 20)));
        assert!(!s.allows((12, 18), (0, 5)), "the after side lies outside");
        assert!(!s.allows((5, 12), (12, 20)), "the before side straddles");
        assert!(Scope::ALL.allows((0, 1), (0, 1)));
        assert!(overlaps(&old, &(19..25)) && !overlaps(&old, &(20..25)));
    }
}
