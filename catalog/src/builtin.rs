//! The patterns written into kidiom ([`Kind::Transform`]): rewrites an
//! analysis makes, with no template and no corpus support of their own.
//! `kidiom mine` puts them in every catalog it writes, so they are listed,
//! searched and applied like the mined ones.

use crate::model::{Category, Kind, Lang, Pattern};

/// `after` of the thread-local loop reuse (`kidiom_rewrite::reuse`).
pub const REUSE_LOCAL: &str = "reuse-across-loops local";
/// `after` of the loop reuse that keeps block-uniform values in shared memory.
pub const REUSE_SHARED: &str = "reuse-across-loops shared";
/// `after` of the reuse within a block of a Triton kernel, in a temporary.
pub const REUSE_TEMPORARY: &str = "reuse-in-block temporary";

const REUSE_MECHANISM: &str = "Code that computes again what it already computed (a loop repeating an earlier loop over the same range, or a block evaluating the same pure call on the same arguments twice, or reading the same global data again with no store between) keeps the first values and reuses them: fewer special-function evaluations and less global memory traffic in a bandwidth-bound kernel. Symptoms: the kernel reads its state twice, evaluates exp twice per element, moves more bytes than its floor, is slower than its memory bandwidth allows.";

/// Every built-in pattern, for every language it applies to.
pub fn patterns() -> Vec<Pattern> {
    // CUDA kernels only: in host C++ the compiler's own loop optimizations see the same reuse
    let mut out = vec![reuse(
        "cu-reuse-across-loops",
        Lang::Cuda,
        REUSE_LOCAL,
        "keep what a later loop recomputes in a thread-local array",
        "each value is computed once per thread, kept in an array of a compile-time bound; a loop whose extent exceeds it takes the original path",
    )];
    out.push(reuse(
        "cu-reuse-across-loops-shared",
        Lang::Cuda,
        REUSE_SHARED,
        "compute what every thread of a block recomputes once per block, in shared memory",
        "values no thread of a block computes differently are computed once per block into shared memory behind a barrier (the rest as in cu-reuse-across-loops)",
    ));
    out.push(Pattern {
        // where it looks: any call of Triton's language in a kernel's block
        before: "$F($$$ARGS)".into(),
        ..reuse(
            "py-reuse-in-block",
            Lang::Python,
            REUSE_TEMPORARY,
            "evaluate a pure call or a load that a block repeats once, into a temporary",
            "a special function (exp, log, sqrt, sigmoid, ...) or a global load that one block of a Triton kernel evaluates again on the same arguments, with nothing between that changes them (no assignment of a name it reads; for a load no store, atomic or helper call), is evaluated once into a temporary before its first use",
        )
    });
    out
}

fn reuse(id: &str, language: Lang, after: &str, title: &str, how: &str) -> Pattern {
    Pattern {
        kind: Kind::Transform,
        category: Category::Redundancy,
        title: title.into(),
        rationale: format!("Redundant work removed: {how}. Found by kidiom's own analysis, not mined."),
        mechanism: REUSE_MECHANISM.into(),
        // where it looks: sibling loops with the same header
        before: "for ($$$HEAD) $BODY".into(),
        after: after.into(),
        score: 1.0,
        ..Pattern::usage(id, language, "", "", &[])
    }
}
