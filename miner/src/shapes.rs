//! How each usage family is written: its title and its before/after
//! templates, one row per [`Mechanism`] (variants excepted: their templates
//! come from the pair of names, see `idiom::describe`).
//!
//! A row's text holds placeholders, filled by [`render`]: `%s` the subject,
//! `%d` the decoration, `%v` the value most sites hold (empty when none),
//! `%V` that value or `$T`, `%w` what a keyword is given on (`kernel
//! launches` or the callee), `%q` the C++ qualifier (`__global__` or
//! `__device__`), `%g` the guard's variable.

use crate::facts::Mechanism;

/// One way of writing a family.
pub(crate) struct Shape {
    pub(crate) mechanism: Mechanism,
    /// Only for this decoration (a more specific row comes first).
    pub(crate) decoration: Option<&'static str>,
    pub(crate) title: &'static str,
    pub(crate) before: &'static str,
    pub(crate) after: &'static str,
}

const fn row(mechanism: Mechanism, title: &'static str, before: &'static str, after: &'static str) -> Shape {
    Shape { mechanism, decoration: None, title, before, after }
}

/// The rows, looked up by [`shape`].
pub(crate) const SHAPES: &[Shape] = &[
    row(Mechanism::Keyword, "`%d=` on %w", "%s($$$ARGS)", "%s($$$ARGS, %d=$V)"),
    row(Mechanism::MethodWrap, "`%s(...).%d(%v)`", "%s($$$ARGS)", "%s($$$ARGS).%d($V)"),
    row(
        Mechanism::Decorator,
        "`@%d` on Triton kernels",
        "@triton.jit\ndef $F($$$PARAMS):\n    $$$BODY",
        "@%d($$$ARGS)\n@triton.jit\ndef $F($$$PARAMS):\n    $$$BODY",
    ),
    row(Mechanism::Annotation, "`%d` kernel parameters", "def $F($$$A, $P, $$$B)", "def $F($$$A, $P: %d, $$$B)"),
    Shape {
        mechanism: Mechanism::Qualifier,
        decoration: Some("__launch_bounds__"),
        title: "`%d` on `%q` functions",
        before: "%q $R $F($$$PARAMS) { $$$BODY }",
        after: "%q $R %d($V) $F($$$PARAMS) { $$$BODY }",
    },
    row(
        Mechanism::Qualifier,
        "`%d` on `%q` functions",
        "%q $R $F($$$PARAMS) { $$$BODY }",
        "%d %q $R $F($$$PARAMS) { $$$BODY }",
    ),
    row(Mechanism::ParamQualifier, "`%d` on kernel pointer parameters", "$T* $P", "$T* %d $P"),
    row(Mechanism::Pragma, "`#pragma %d` on kernel loops", "for ($$$HEAD) $BODY", "#pragma %d\nfor ($$$HEAD) $BODY"),
    row(Mechanism::Intrinsic, "`%d` intrinsic in kernels", "", "%d($$$ARGS)"),
    row(Mechanism::InlineAsm, "inline PTX in kernels", "", "asm volatile($$$ASM)"),
    row(Mechanism::VectorCast, "vector-width `reinterpret_cast` in kernels", "", "reinterpret_cast<%V>($E)"),
    // The guard as the first statement of a bound function; its variable is
    // the name upstream gives it most often (`release`).
    row(
        Mechanism::Guard,
        "`%d` guard in binding functions",
        "$R $F($$$PARAMS) { $$$BODY }",
        "$R $F($$$PARAMS) { %d %g; $$$BODY }",
    ),
    row(Mechanism::BindingArg, "`%d<%v>` on binding definitions", "$M.def($$$ARGS)", "$M.def($$$ARGS, %d<%V>())"),
    row(Mechanism::Wrapper, "`%d(...)` hints in Triton kernels", "", "$X = %d($X, $V)"),
    row(Mechanism::Pyo3Call, "`py.%d` in PyO3 functions", "", "py.%d(|| $$$BODY)"),
];

/// The row for a family: the first of its mechanism whose decoration, if
/// it names one, is `decoration`.
pub(crate) fn shape(mechanism: Mechanism, decoration: &str) -> Option<&'static Shape> {
    SHAPES.iter().find(|s| s.mechanism == mechanism && s.decoration.is_none_or(|d| d == decoration))
}

/// What a row's placeholders stand for.
pub(crate) struct Vars<'a> {
    pub(crate) subject: &'a str,
    pub(crate) decoration: &'a str,
    pub(crate) top: &'a str,
    pub(crate) what: &'a str,
    pub(crate) qualifier: &'a str,
    pub(crate) guard: &'a str,
}

/// `template` with its placeholders filled, in one pass (a value holding
/// `%` is not read again).
pub(crate) fn render(template: &str, v: &Vars) -> String {
    let mut out = String::with_capacity(template.len() + 16);
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('s') => out.push_str(v.subject),
            Some('d') => out.push_str(v.decoration),
            Some('v') => out.push_str(v.top),
            Some('V') => out.push_str(if v.top.is_empty() { "$T" } else { v.top }),
            Some('w') => out.push_str(v.what),
            Some('q') => out.push_str(v.qualifier),
            Some('g') => out.push_str(v.guard),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mechanism_but_variants_has_a_row() {
        // every variant, so a mechanism added later without a row fails here
        let all = <Mechanism as strum::VariantArray>::VARIANTS.iter().copied();
        for m in all {
            assert_eq!(shape(m, "x").is_some(), m != Mechanism::Variant, "{m:?}");
        }
        let lb = shape(Mechanism::Qualifier, "__launch_bounds__").map(|s| s.after);
        assert_eq!(lb, Some("%q $R %d($V) $F($$$PARAMS) { $$$BODY }"));
    }
}
