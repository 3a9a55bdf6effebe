//! The patterns written into kidiom ([`Kind::Transform`]): rewrites an
//! analysis makes, with no template and no corpus support of their own, and
//! the state-precision idioms (cast-at-load/store, scale folding, amax
//! scales), whose forms span several statements and a manifest, with the
//! upstream sites they were read from as their support (corpus, revision,
//! path and line; never upstream text). `kidiom mine` puts them in every
//! catalog it writes, so they are listed, searched and applied like the
//! mined ones.

use crate::model::{Category, IdiomExample, Kind, Lang, Pattern, Support};

/// `after` of the thread-local loop reuse (`kidiom_rewriter::reuse`).
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
    out.extend(precision());
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

/// The revisions the precision idioms' references were read at (SPEC §3's pins).
const SGLANG: (&str, &str) = ("sglang", "0.5.10.post1");
const FLA: (&str, &str) = ("fla", "0.6.0");
const DEEPGEMM: (&str, &str) = ("deepgemm", "54e22612409371d6364144b69086735beb54e98b");

/// `after` of the cast-at-load / cast-at-store idiom: kidiom's own analysis
/// (`kidiom_rewriter`'s state cast) makes the kernel storage-dtype agnostic.
pub const STATE_CAST: &str = "state cast-at-load cast-at-store";
/// `after` of the folded static scale.
pub const SCALE_FOLD: &str = "static scale folded into an existing scalar";
/// `after` of the amax scale stored beside the data.
pub const AMAX_SCALE: &str = "amax scale stored beside the data";

const STATE_CAST_APPLIED: &str = "Applied by kidiom's own analysis: the loads of a tensor the kernel also stores (its state, from the data flow) get `.to(tl.float32)` and their stores `.to(p.dtype.element_ty)`, so the kernel is agnostic of the state's storage dtype (nothing changes on fp32 state); the reduced-precision storage itself is a variant with its own manifest (`variant_of`, `[storage]`, `[budget]`), judged by `kidiom validate --kernel VARIANT`.";

const PRECISION_GUIDANCE: &str = "Not rewritten automatically: the storage dtype is the caller's (a pool, its scales, their layout), so the change is a variant with its own manifest (`variant_of`, `[storage]`, `[budget]`), written by hand and judged by `kidiom validate --kernel VARIANT` (or a diff to a variant's source with `kidiom validate --patch`).";

/// The state-precision idioms: fewer state bytes for a bandwidth-bound decode.
fn precision() -> Vec<Pattern> {
    vec![
        precision_pattern(
            "py-state-cast-at-load-store",
            "load reduced-precision state (bf16, fp8, int8), do the math in fp32, cast back at the store",
            "The recurrent state is loaded in its storage dtype and converted to fp32 at the load (`.to(tl.float32)`), every update is computed in fp32, and the store casts back to the pointer's element type (`.to(p.dtype.element_ty)`): the kernel is agnostic of the storage dtype, and a bf16 pool halves the state bytes of a bandwidth-bound decode step (fp8 or int8 quarter them, with a scale). Symptoms: decode moves 2·K·V·4 bytes of fp32 state per token and head, is memory-bound, and its state pool dominates memory; bf16 state, fp8 state, int8 state, lower precision storage, mixed precision, accumulate in fp32.",
            STATE_CAST,
            &[
                (SGLANG, "sglang/srt/layers/attention/fla/fused_recurrent.py", &[78, 121, 232, 265, 651, 740]),
                (SGLANG, "sglang/srt/layers/attention/fla/fused_sigmoid_gating_recurrent.py", &[105, 240]),
                (SGLANG, "sglang/srt/layers/attention/fla/chunk_delta_h.py", &[256, 261, 266, 271]),
                (FLA, "fla/ops/kda/fused_recurrent.py", &[149, 217, 232]),
                (FLA, "fla/ops/gated_delta_rule/fused_recurrent.py", &[112, 181]),
                (FLA, "fla/ops/generalized_delta_rule/iplr/fused_recurrent.py", &[80, 105]),
                (FLA, "fla/ops/generalized_delta_rule/dplr/fused_recurrent.py", &[84, 109]),
                (DEEPGEMM, "deep_gemm/include/deep_gemm/common/math.cuh", &[74]),
            ],
        ),
        precision_pattern(
            "py-fold-static-fp8-scale",
            "fold a static per-tensor fp8 scale into a scalar the kernel already multiplies by",
            "A per-tensor dequantization scale known before the launch (an fp8 cache's k_scale) is multiplied into a scalar the kernel applies anyway (the softmax scale, a decay, a gate) on the host, so dequantizing costs no extra multiply per element and no extra load. Symptoms: an fp8 or int8 state or cache needs a dequantize step; a scale per tensor; fp8 e4m3 storage with a static scale.",
            SCALE_FOLD,
            &[
                (SGLANG, "sglang/srt/layers/attention/triton_ops/decode_attention.py", &[763, 782]),
                (SGLANG, "sglang/srt/layers/attention/triton_ops/extend_attention.py", &[391]),
                (SGLANG, "sglang/srt/layers/attention/nsa_backend.py", &[2015]),
                (DEEPGEMM, "deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh", &[333, 336]),
                (DEEPGEMM, "deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d1d.cuh", &[308, 309]),
            ],
        ),
        precision_pattern(
            "py-amax-scale-beside-data",
            "quantize with a per-row or per-tile amax scale stored beside the data",
            "Each row or tile is quantized with its own scale, amax / the format's maximum (448 for fp8 e4m3, 127 for int8), clamped away from zero; the scale is stored beside the quantized data and multiplied back at the load, so a few outliers cost only their own tile's precision. Symptoms: per-tensor fp8 or int8 state loses precision where magnitudes vary across heads or rows; a state that drifts; per-head, per-row, per-tile, blockwise quantization; scales tensor.",
            AMAX_SCALE,
            &[
                (
                    SGLANG,
                    "sglang/srt/layers/quantization/fp8_kernel.py",
                    &[160, 161, 166, 210, 211, 1373, 1375, 1495, 1496],
                ),
                (FLA, "fla/modules/norm/layernorm_quant.py", &[42]),
                (DEEPGEMM, "deep_gemm/utils/math.py", &[34, 35, 45, 46, 57, 58, 66, 67]),
            ],
        ),
    ]
}

type Refs<'a> = &'a [((&'a str, &'a str), &'a str, &'a [u32])];

/// A precision idiom with its upstream references as support and examples (no snippet: no upstream text).
fn precision_pattern(id: &str, title: &str, mechanism: &str, after: &str, refs: Refs<'_>) -> Pattern {
    let mut support: Vec<Support> = Vec::new();
    let mut examples = Vec::new();
    for ((corpus, revision), path, lines) in refs {
        match support.iter_mut().find(|s| s.corpus == *corpus) {
            Some(s) => {
                s.occurrences += lines.len() as u64;
                s.files += 1;
            }
            None => support.push(Support {
                corpus: corpus.to_string(),
                revision: revision.to_string(),
                occurrences: lines.len() as u64,
                files: 1,
                opportunities: 0,
            }),
        }
        examples.extend(lines.iter().map(|&line| IdiomExample {
            corpus: corpus.to_string(),
            path: path.to_string(),
            line,
            snippet: String::new(),
        }));
    }
    let sites: u64 = support.iter().map(|s| s.occurrences).sum();
    let corpora: Vec<&str> = support.iter().map(|s| s.corpus.as_str()).collect();
    let applied = after == STATE_CAST;
    Pattern {
        kind: Kind::Transform,
        category: Category::Precision,
        title: title.into(),
        rationale: format!(
            "{sites} referenced sites in {}, read at the pinned revisions. {}",
            corpora.join(", "),
            if applied { STATE_CAST_APPLIED } else { PRECISION_GUIDANCE },
        ),
        mechanism: mechanism.into(),
        // where the analysis looks: any call in a Triton kernel (guidance: nowhere)
        before: if applied { "$F($$$ARGS)".into() } else { String::new() },
        after: after.into(),
        support,
        examples,
        // references, not a census: ranked with kidiom's other built-ins, below what mining measured
        score: 1.0,
        ..Pattern::usage(id, Lang::Python, "", "", &[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_precision_idioms_carry_their_references_and_no_upstream_text() {
        let ps: Vec<Pattern> = patterns().into_iter().filter(|p| p.category == Category::Precision).collect();
        let ids: Vec<&str> = ps.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["py-state-cast-at-load-store", "py-fold-static-fp8-scale", "py-amax-scale-beside-data"]);
        for p in &ps {
            let applied = p.after == STATE_CAST;
            assert_eq!(applied, p.id == "py-state-cast-at-load-store");
            assert_eq!(p.before.is_empty(), !applied, "{}: the other two are guidance", p.id);
            assert_eq!(p.rationale.contains("Not rewritten automatically: "), !applied, "{}", p.id);
            let spec = kidiom_rewriter::RewriteSpec::from(p);
            assert_eq!(spec.transform.is_some(), applied, "{}", p.id);
            assert!(p.examples.iter().all(|e| e.snippet.is_empty() && e.line > 0), "{}", p.id);
            assert_eq!(p.occurrences(), p.examples.len() as u64, "{}", p.id);
            assert!(p.support.iter().any(|s| s.corpus == "deepgemm"), "{}", p.id);
            assert!(p.support.iter().any(|s| s.corpus == "sglang"), "{}", p.id);
        }
        assert!(ps.iter().filter(|p| p.support.iter().any(|s| s.corpus == "fla")).count() >= 2);
    }
}
