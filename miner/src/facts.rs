//! What one file contributes to mining: counts of decorated sites per
//! idiom family, counts of the scopes they could appear in, and a few
//! examples. Facts are small, serializable, and cached per blob in the
//! catalog, so an unchanged file is never parsed again.

use std::collections::BTreeMap;

use kidiom_syntax::Lang;
use serde::{Deserialize, Serialize};

use crate::values::ValueExpr;

/// The structural mechanism by which a decoration attaches to a construct.
///
/// The miner knows these mechanisms, not the idioms: which keyword, which
/// decorator, which qualifier recurs is what mining finds out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, strum::VariantArray)]
#[serde(rename_all = "kebab-case")]
pub enum Mechanism {
    /// A keyword argument on a call (`tl.dot(a, b, input_precision="ieee")`).
    Keyword,
    /// A decorator on a Triton kernel (`@triton.autotune(...)`).
    Decorator,
    /// A method applied to a call's result (`tl.program_id(0).to(tl.int64)`).
    MethodWrap,
    /// A type annotation on a kernel parameter (`BT: tl.constexpr`).
    Annotation,
    /// A function-level qualifier or attribute (`__launch_bounds__`, `__forceinline__`).
    Qualifier,
    /// A qualifier on a pointer parameter (`__restrict__`).
    ParamQualifier,
    /// A pragma attached to a loop (`#pragma unroll`).
    Pragma,
    /// A call to a compiler intrinsic (`__shfl_xor_sync`, `__ldg`).
    Intrinsic,
    /// Inline assembly (`asm volatile("ld.global.nc...")`).
    InlineAsm,
    /// A cast to a vector type (`reinterpret_cast<float4*>`).
    VectorCast,
    /// A scoped guard object in a binding function (`py::gil_scoped_release`).
    Guard,
    /// An extra argument on a binding definition (`py::call_guard<...>()`).
    BindingArg,
    /// A method called on the Python token in a PyO3 function (`py.allow_threads`).
    Pyo3Call,
    /// A pass-through function around an expression (`tl.multiple_of(x, 16)`).
    Wrapper,
    /// A choice of one function over a sibling form (`exp2` over `exp`);
    /// synthesized from call counts at aggregation time.
    Variant,
}

impl Mechanism {
    /// Every mechanism, in declaration order.
    pub const ALL: [Mechanism; 15] = [
        Mechanism::Keyword,
        Mechanism::Decorator,
        Mechanism::MethodWrap,
        Mechanism::Annotation,
        Mechanism::Qualifier,
        Mechanism::ParamQualifier,
        Mechanism::Pragma,
        Mechanism::Intrinsic,
        Mechanism::InlineAsm,
        Mechanism::VectorCast,
        Mechanism::Guard,
        Mechanism::BindingArg,
        Mechanism::Pyo3Call,
        Mechanism::Wrapper,
        Mechanism::Variant,
    ];

    /// The kebab-case name used in ids.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Keyword => "keyword",
            Mechanism::Decorator => "decorator",
            Mechanism::MethodWrap => "method-wrap",
            Mechanism::Annotation => "annotation",
            Mechanism::Qualifier => "qualifier",
            Mechanism::ParamQualifier => "param-qualifier",
            Mechanism::Pragma => "pragma",
            Mechanism::Intrinsic => "intrinsic",
            Mechanism::InlineAsm => "inline-asm",
            Mechanism::VectorCast => "vector-cast",
            Mechanism::Guard => "guard",
            Mechanism::BindingArg => "binding-arg",
            Mechanism::Pyo3Call => "pyo3-call",
            Mechanism::Wrapper => "wrapper",
            Mechanism::Variant => "variant",
        }
    }
}

/// Identifies an idiom family: the same decoration on the same subject.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FamilyKey {
    /// Language of the files it was seen in.
    pub lang: Lang,
    /// How the decoration attaches.
    pub mechanism: Mechanism,
    /// What it decorates: a callee (`tl.dot`) or a scope (`cuda-global`).
    pub subject: String,
    /// The decoration itself (`input_precision`, `__launch_bounds__`).
    pub decoration: String,
}

impl FamilyKey {
    /// The scope whose units could carry this decoration: the opportunities
    /// are that scope's count minus the units that carry it.
    pub fn scope(&self) -> String {
        match self.mechanism {
            Mechanism::Keyword | Mechanism::MethodWrap => call_scope(&self.subject),
            _ => self.subject.clone(),
        }
    }
}

/// The scope name that counts calls to `callee`.
pub fn call_scope(callee: &str) -> String {
    format!("call:{callee}")
}

/// One place an idiom was seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Example {
    /// 1-based line.
    pub line: u32,
    /// The trimmed source line.
    pub snippet: String,
}

/// Counts for one family in one file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FamilyFacts {
    /// Decorated sites.
    pub occurrences: u32,
    /// Scope units that carry the decoration (a kernel using `__shfl_xor_sync`
    /// twice is one unit); for per-site mechanisms this equals `occurrences`.
    pub units: u32,
    /// How often each value was seen in the decoration's hole (Python
    /// string literals spelled with double quotes).
    pub values: BTreeMap<String, u32>,
    /// What the values that are names (or wrap one, `tl.constexpr(NAME)`)
    /// are bound to in this file; imports are followed at aggregation.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resolved: BTreeMap<String, ValueExpr>,
    /// Sites under an error node of the parse tree.
    pub in_error: u32,
    /// A few examples.
    pub examples: Vec<Example>,
}

/// Everything mining keeps of one file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileFacts {
    /// Kernels found (Triton kernels, `__global__`/`__device__` functions, binding functions, PyO3 functions).
    pub kernels: u32,
    /// Whether the parse tree had error nodes.
    pub has_errors: bool,
    /// Unit counts per scope (`call:tl.dot`, `triton-kernel`, `loop`, ...).
    pub scopes: BTreeMap<String, u32>,
    /// Decorated sites per family.
    pub families: Vec<(FamilyKey, FamilyFacts)>,
    /// One example call per callee, for variant families.
    pub call_examples: BTreeMap<String, Example>,
    /// Macros this file defines that expand to device qualifiers (C/C++ only).
    pub device_macros: Vec<(String, String)>,
    /// Module-level names this file binds to literals (Python), for the
    /// imports of other files of its corpus.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub constants: BTreeMap<String, ValueExpr>,
    /// Module-level names this file binds to a Triton function (`exp2 =
    /// tl.math.exp2`, in any branch), canonical (`tl.exp2`), for the imports
    /// of other files of its corpus.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub functions: BTreeMap<String, String>,
    /// Bare names this file's kernels call that it imports from a module
    /// (`from .op import exp2`): name -> (module as written, name there).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub imported_calls: BTreeMap<String, (String, String)>,
}

impl FileFacts {
    /// Whether mining keeps these facts at all. A file without kernels is
    /// still kept when it defines device macros (re-runs need them), or
    /// module constants or names for Triton functions (other modules import
    /// them).
    pub fn worth_keeping(&self) -> bool {
        !(self.kernels == 0
            && self.families.is_empty()
            && self.scopes.is_empty()
            && self.device_macros.is_empty()
            && self.constants.is_empty()
            && self.functions.is_empty())
    }
}

/// Accumulates facts during extraction.
#[derive(Debug, Default)]
pub(crate) struct FactsBuilder {
    pub(crate) kernels: u32,
    pub(crate) has_errors: bool,
    scopes: BTreeMap<String, u32>,
    families: BTreeMap<FamilyKey, FamilyFacts>,
    call_examples: BTreeMap<String, Example>,
    pub(crate) device_macros: Vec<(String, String)>,
    pub(crate) constants: BTreeMap<String, ValueExpr>,
    pub(crate) functions: BTreeMap<String, String>,
    pub(crate) imported_calls: BTreeMap<String, (String, String)>,
}

const MAX_EXAMPLES_PER_FILE: usize = 3;

impl FactsBuilder {
    pub(crate) fn with_errors(has_errors: bool) -> Self {
        FactsBuilder { has_errors, ..Default::default() }
    }

    pub(crate) fn scope(&mut self, scope: &str, n: u32) {
        *self.scopes.entry(scope.to_string()).or_default() += n;
    }

    /// Whether a call to `callee` was recorded.
    pub(crate) fn has_call(&self, callee: &str) -> bool {
        self.scopes.contains_key(&call_scope(callee))
    }

    pub(crate) fn call(&mut self, callee: &str, ex: impl FnOnce() -> Example) {
        let s = call_scope(callee);
        *self.scopes.entry(s).or_default() += 1;
        if !self.call_examples.contains_key(callee) {
            self.call_examples.insert(callee.to_string(), ex());
        }
    }

    /// Records one decorated site.
    pub(crate) fn site(
        &mut self,
        key: FamilyKey,
        value: Option<String>,
        in_error: bool,
        new_unit: bool,
        ex: impl FnOnce() -> Example,
    ) {
        let f = self.families.entry(key).or_default();
        f.occurrences += 1;
        if new_unit {
            f.units += 1;
        }
        if in_error {
            f.in_error += 1;
        }
        if let Some(v) = value {
            *f.values.entry(v).or_default() += 1;
        }
        if f.examples.len() < MAX_EXAMPLES_PER_FILE {
            f.examples.push(ex());
        }
    }

    /// Records what a value seen at a site of `key` is bound to; a value
    /// bound differently at two sites of the file can hold either.
    pub(crate) fn resolve(&mut self, key: &FamilyKey, value: &str, expr: ValueExpr) {
        let Some(f) = self.families.get_mut(key) else { return };
        let e = match f.resolved.remove(value) {
            Some(old) => old.or(expr),
            None => expr,
        };
        f.resolved.insert(value.to_string(), e);
    }

    pub(crate) fn finish(self) -> FileFacts {
        FileFacts {
            kernels: self.kernels,
            has_errors: self.has_errors,
            scopes: self.scopes,
            families: self.families.into_iter().collect(),
            call_examples: self.call_examples,
            device_macros: self.device_macros,
            constants: self.constants,
            functions: self.functions,
            imported_calls: self.imported_calls,
        }
    }
}

/// Collapses whitespace and shortens a value for histograms.
pub(crate) fn normalize_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(80));
    let mut space = false;
    for c in s.chars() {
        if c.is_whitespace() {
            space = true;
            continue;
        }
        if space && !out.is_empty() {
            out.push(' ');
        }
        space = false;
        out.push(c);
        if out.len() >= 80 {
            out.push('…');
            break;
        }
    }
    out
}

/// Line lookup for examples.
pub(crate) struct Lines<'a> {
    src: &'a str,
    starts: Vec<usize>,
}

impl<'a> Lines<'a> {
    pub(crate) fn new(src: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(memchr::memchr_iter(b'\n', src.as_bytes()).map(|i| i + 1));
        Lines { src, starts }
    }

    /// The example for 0-based `row`.
    pub(crate) fn example(&self, row: usize) -> Example {
        let start = self.starts.get(row).copied().unwrap_or(self.src.len());
        let end = self.starts.get(row + 1).copied().unwrap_or(self.src.len());
        let line = self.src.get(start..end).unwrap_or("").trim();
        let snippet: String = line.chars().take(160).collect();
        Example { line: row as u32 + 1, snippet }
    }
}
