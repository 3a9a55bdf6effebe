//! Classification: what a pattern is for, from its own evidence.
//!
//! One classifier serves both kinds of pattern. A usage idiom is a
//! decoration added to a construct (its mechanism, its name, its value
//! histogram); an edit idiom is a change (the words its `before`/`after`
//! templates remove and add, where it is anchored, and its commits'
//! messages). Both are read with the same vocabulary:
//!
//! - [`word_category`]: words that name an optimization mechanism
//!   (`exp2`, `int64`, `constexpr`, `eviction_policy`, ...), matched as whole
//!   words or as `_`-separated parts (`USE_EXP2`, `states_in_fp32`), never
//!   as substrings (`logits` is not `log`, `expand` is not `exp`);
//! - [`keyword_role`]: what a Triton keyword argument does, a table of facts
//!   about Triton's language API (like the CUTLASS macro table in `cxx.rs`):
//!   masks, axes and result types are part of what a call computes (`api`),
//!   `input_precision=` or `eviction_policy=` are optimizations;
//! - CUDA intrinsic families (facts about the CUDA toolkit): warp shuffles
//!   are concurrency, `__h*2` packed math, conversions and barriers `api`;
//! - commit-message signals ("faster", "precision", "int64 overflow",
//!   "fuse", "recompile", ... and "rename", "refactor", "cleanup", ...).
//!
//! Which decorations are idioms is still decided by the counts; these tables
//! only say what a decoration or a change is for.

use std::collections::BTreeMap;

use kidiom_syntax::Lang;
use serde::{Deserialize, Serialize};

use crate::facts::{FamilyKey, Mechanism};

mod keywords;

pub use keywords::KeywordChange;
use keywords::keyword_category;

/// What an idiom is for. Optimizations first; [`Category::Other`],
/// [`Category::Api`] and [`Category::Refactor`] are not optimizations and
/// rank below them ([`Category::rank`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[derive(strum::Display, strum::EnumString, strum::IntoStaticStr, strum::VariantArray)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Category {
    /// Numeric precision of products and accumulators.
    Precision,
    /// Memory traffic: caching, eviction, vector width, aliasing.
    Memory,
    /// Compile-time specialization and its limits.
    Specialization,
    /// Launch configuration: warps, stages, occupancy bounds.
    Launch,
    /// Cheaper or more accurate math functions.
    Math,
    /// Index arithmetic width and alignment.
    Addressing,
    /// Threads, warps and the GIL.
    Concurrency,
    /// Fusing separate steps.
    Fusion,
    /// Removing redundant work.
    Redundancy,
    /// Anything else.
    Other,
    /// Plain API usage: an argument or call that is part of what the code
    /// computes (masks, axes, result types, barriers), not an optimization.
    Api,
    /// Renames, API migrations, imports and style: changes that keep what
    /// the code does and how fast.
    Refactor,
}

kidiom_syntax::named_enum!(Category);

impl Category {
    /// Whether patterns of this category make code faster or more exact
    /// (everything but `other`, `api` and `refactor`).
    pub fn is_optimization(self) -> bool {
        !matches!(self, Category::Other | Category::Api | Category::Refactor)
    }

    /// Where patterns of this category rank, lowest first: optimizations
    /// (0), then `other` (1), `api` (2) and `refactor` (3). Lists sort by
    /// rank before score.
    pub fn rank(self) -> u8 {
        match self {
            Category::Other => 1,
            Category::Api => 2,
            Category::Refactor => 3,
            _ => 0,
        }
    }

    /// The optimization the words of `text` name (see [`word_category`]),
    /// else [`Category::Other`].
    pub fn classify(text: &str) -> Category {
        vote(words(text).iter().filter_map(|w| word_category(w))).unwrap_or(Category::Other)
    }
}

/// The identifier-like words of a text (`tl.dot(a, input_precision=P)` ->
/// `tl`, `dot`, `a`, `input_precision`, `P`).
fn words(s: &str) -> Vec<&str> {
    s.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).collect()
}

/// Words that name an optimization wherever they occur whole.
const WORDS: &[(&str, Category)] = &[
    // Precision: formats and modes of products and accumulators.
    ("precision", Category::Precision),
    ("tf32", Category::Precision),
    ("tf32x3", Category::Precision),
    ("bf16x3", Category::Precision),
    ("bf16x6", Category::Precision),
    ("ieee", Category::Precision),
    ("fp32", Category::Precision),
    ("fp64", Category::Precision),
    ("float32", Category::Precision),
    ("float64", Category::Precision),
    ("bf16", Category::Precision),
    ("bfloat16", Category::Precision),
    ("fp16", Category::Precision),
    ("float16", Category::Precision),
    ("rtne", Category::Precision),
    ("rtz", Category::Precision),
    // Addressing: index width and alignment hints.
    ("int64", Category::Addressing),
    ("int32", Category::Addressing),
    ("int64_t", Category::Addressing),
    ("size_t", Category::Addressing),
    ("multiple_of", Category::Addressing),
    ("max_contiguous", Category::Addressing),
    ("max_constancy", Category::Addressing),
    // Concurrency: atomics, warp collectives, the GIL.
    ("atomic", Category::Concurrency),
    ("gil", Category::Concurrency),
    ("call_guard", Category::Concurrency),
    ("allow_threads", Category::Concurrency),
    ("shfl", Category::Concurrency),
    ("ballot", Category::Concurrency),
    ("relaxed", Category::Concurrency),
    ("acq_rel", Category::Concurrency),
    // Launch configuration.
    ("launch_bounds", Category::Launch),
    ("maxnreg", Category::Launch),
    ("occupancy", Category::Launch),
    // Specialization: what is fixed at compile time, and inlining.
    ("constexpr", Category::Specialization),
    ("do_not_specialize", Category::Specialization),
    ("specialize", Category::Specialization),
    ("heuristics", Category::Specialization),
    ("autotune", Category::Specialization),
    ("static_range", Category::Specialization),
    ("unroll", Category::Specialization),
    ("forceinline", Category::Specialization),
    ("noinline", Category::Specialization),
    ("inline", Category::Specialization),
    // Memory: cache hints, aliasing, vector width, asynchronous copies.
    ("eviction", Category::Memory),
    ("evict_first", Category::Memory),
    ("evict_last", Category::Memory),
    ("ldg", Category::Memory),
    ("restrict", Category::Memory),
    ("reinterpret_cast", Category::Memory),
    ("make_tensor_descriptor", Category::Memory),
    ("tensor_descriptor", Category::Memory),
    ("tma", Category::Memory),
    ("cp_async", Category::Memory),
    ("ldmatrix", Category::Memory),
    // Math: cheaper or exact forms of functions.
    ("exp", Category::Math),
    ("exp2", Category::Math),
    ("log", Category::Math),
    ("log2", Category::Math),
    ("expf", Category::Math),
    ("exp2f", Category::Math),
    ("logf", Category::Math),
    ("log2f", Category::Math),
    ("rsqrt", Category::Math),
    ("rcp", Category::Math),
    ("fma", Category::Math),
    ("fmaf", Category::Math),
    ("approx", Category::Math),
];

/// Words that name an optimization as a `_`-separated part of a longer
/// name (`USE_EXP2`, `DOT_PRECISION`, `states_in_fp32`, `NUM_STAGES`).
const PARTS: &[(&str, Category)] = &[
    ("precision", Category::Precision),
    ("tf32", Category::Precision),
    ("ieee", Category::Precision),
    ("fp32", Category::Precision),
    ("bf16", Category::Precision),
    ("fp16", Category::Precision),
    ("int64", Category::Addressing),
    ("atomic", Category::Concurrency),
    ("gil", Category::Concurrency),
    ("shfl", Category::Concurrency),
    ("warps", Category::Launch),
    ("stages", Category::Launch),
    ("constexpr", Category::Specialization),
    ("specialize", Category::Specialization),
    ("autotune", Category::Specialization),
    ("heuristics", Category::Specialization),
    ("unroll", Category::Specialization),
    ("eviction", Category::Memory),
    ("evict", Category::Memory),
    ("exp2", Category::Math),
    ("log2", Category::Math),
    ("fast", Category::Math),
    ("approx", Category::Math),
];

/// The optimization a word names: whole (leading and trailing `_` aside,
/// any case), as an optimizing Triton keyword ([`keyword_role`]) with a
/// name of its own (`input_precision`, not `key`), or by one of its
/// `_`-separated parts (`USE_EXP2`, `fla_cache_autotune`).
pub fn word_category(word: &str) -> Option<Category> {
    let w = word.trim_matches('_').to_ascii_lowercase();
    name_category(&w).or_else(|| w.split('_').find_map(|p| PARTS.iter().find(|(x, _)| *x == p).map(|(_, c)| *c)))
}

/// [`word_category`] without parts: the word is the name of the mechanism
/// itself (`exp2`, `tl.int64`'s `int64`, `input_precision`), not a name
/// someone gave a flag or a variable about it (`USE_EXP2`).
fn name_category(word: &str) -> Option<Category> {
    let w = word.trim_matches('_').to_ascii_lowercase();
    if w.is_empty() {
        return None;
    }
    if let Some((_, c)) = WORDS.iter().find(|(x, _)| *x == w) {
        return Some(*c);
    }
    keyword_role(&w).filter(|r| w.contains('_') && r.category.is_optimization()).map(|r| r.category)
}

/// Order in which tied votes are broken: the more specific first.
const PRIORITY: [Category; 9] = [
    Category::Precision,
    Category::Addressing,
    Category::Concurrency,
    Category::Launch,
    Category::Specialization,
    Category::Memory,
    Category::Math,
    Category::Fusion,
    Category::Redundancy,
];

/// The category with most votes; ties go to the more specific.
fn vote(cats: impl Iterator<Item = Category>) -> Option<Category> {
    let mut n: BTreeMap<Category, usize> = BTreeMap::new();
    for c in cats {
        *n.entry(c).or_default() += 1;
    }
    let best = n.values().copied().max()?;
    PRIORITY.into_iter().find(|c| n.get(c) == Some(&best)).or_else(|| n.into_iter().find(|e| e.1 == best).map(|e| e.0))
}

/// What a keyword argument of Triton's language API does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Role {
    /// The category of adding it.
    pub category: Category,
    /// What it decides, in a few words (`which elements are accessed`).
    pub what: &'static str,
    /// Why adding it is not a rewrite kidiom makes, for an optimization
    /// that changes what the program guarantees or is accepted only on some
    /// operands. (An `api` argument is never added: its value is the author's.)
    pub caveat: Option<&'static str>,
}

/// Triton keyword arguments: (name, category, what it decides, caveat or
/// ""). Facts about Triton's language API, not a list of idioms: which of
/// them recur, and where, is what mining finds out.
const TRITON_KEYWORDS: &[(&str, Category, &str, &str)] = &[
    // Which elements a memory access touches, and what masked-off lanes hold.
    ("mask", Category::Api, "which elements are accessed", ""),
    ("other", Category::Api, "the value of masked-off elements", ""),
    ("boundary_check", Category::Api, "which dimensions are bounds-checked", ""),
    ("padding_option", Category::Api, "the value of out-of-bounds elements", ""),
    // Shapes, axes and types of results.
    ("axis", Category::Api, "the dimension it works along", ""),
    ("dim", Category::Api, "the dimension it works along", ""),
    ("keep_dims", Category::Api, "the result's shape", ""),
    ("reverse", Category::Api, "the scan's direction", ""),
    ("dtype", Category::Api, "the result's type", ""),
    ("bitcast", Category::Api, "whether bits are reinterpreted instead of values converted", ""),
    ("acc", Category::Api, "an operand added to the product", ""),
    // A block pointer's description of its tensor.
    ("base", Category::Api, "the block's tensor", ""),
    ("shape", Category::Api, "the block's tensor", ""),
    ("strides", Category::Api, "the block's tensor", ""),
    ("offsets", Category::Api, "the block's position", ""),
    ("block_shape", Category::Api, "the block's shape", ""),
    ("order", Category::Api, "the block's layout", ""),
    // Autotuning: what must be restored between timed runs.
    ("restore_value", Category::Api, "the tensors the kernel writes in place", ""),
    ("reset_to_zero", Category::Api, "the tensors the kernel accumulates into", ""),
    // Memory ordering of atomics.
    (
        "sem",
        Category::Concurrency,
        "the atomic's memory ordering",
        "a weaker ordering is correct only where no other access depends on the atomic",
    ),
    (
        "scope",
        Category::Concurrency,
        "the atomic's visibility to other threads",
        "a narrower scope is correct only where no thread outside it reads the result",
    ),
    // Precision of products, accumulators and conversions.
    ("input_precision", Category::Precision, "the precision of the product", ""),
    ("allow_tf32", Category::Precision, "the precision of the product", ""),
    ("out_dtype", Category::Precision, "the accumulator's type", ""),
    ("max_num_imprecise_acc", Category::Precision, "how often FP8 products are accumulated exactly", ""),
    (
        "fp_downcast_rounding",
        Category::Precision,
        "the rounding of a narrowing conversion",
        "Triton accepts it only on narrowing floating-point conversions, which the operands at each site decide",
    ),
    // Cache behaviour.
    ("eviction_policy", Category::Memory, "how long the data stays in cache", ""),
    ("cache_modifier", Category::Memory, "which caches the access goes through", ""),
    (
        "volatile",
        Category::Memory,
        "whether a load may be served from cache",
        "whether a load must see other threads' writes depends on the algorithm",
    ),
    // Launch configuration.
    ("num_warps", Category::Launch, "warps per program", ""),
    ("num_stages", Category::Launch, "software-pipelining depth", ""),
    ("num_ctas", Category::Launch, "CTAs per cluster", ""),
    ("maxnreg", Category::Launch, "registers per thread", ""),
    // Loop and kernel specialization.
    ("loop_unroll_factor", Category::Specialization, "how far the loop is unrolled", ""),
    ("flatten", Category::Specialization, "whether nested loops are pipelined as one", ""),
    ("warp_specialize", Category::Specialization, "whether warps take producer and consumer roles", ""),
    ("disallow_acc_multi_buffer", Category::Specialization, "whether the accumulator is multi-buffered", ""),
    ("do_not_specialize", Category::Specialization, "which arguments are not specialized on", ""),
    ("do_not_specialize_on_alignment", Category::Specialization, "which arguments are not specialized on", ""),
    ("key", Category::Specialization, "which arguments retrigger autotuning", ""),
    ("prune_configs_by", Category::Specialization, "which configurations are timed", ""),
    ("configs", Category::Specialization, "the configurations timed", ""),
];

/// What the Triton keyword argument `name` does, if it is one.
pub fn keyword_role(name: &str) -> Option<Role> {
    TRITON_KEYWORDS.iter().find(|k| k.0 == name).map(|k| Role {
        category: k.1,
        what: k.2,
        caveat: Some(k.3).filter(|c| !c.is_empty()),
    })
}

/// Decorations that assert a property of the data which the compiler
/// cannot check (facts about CUDA and Triton): adding one where the
/// property does not hold is undefined behaviour or a wrong result.
const ASSERTIONS: &[(&str, &str)] = &[
    ("__restrict__", "`__restrict__` asserts that the pointer's data is reached through no other pointer"),
    ("tl.multiple_of", "`tl.multiple_of` asserts a divisibility that holds only for some launches"),
    ("tl.max_contiguous", "`tl.max_contiguous` asserts a contiguity that holds only for some inputs"),
    ("tl.assume", "`tl.assume` asserts a condition the compiler cannot check"),
];

/// Why adding the decoration `name` is not a rewrite kidiom can make safely,
/// when it asserts something about the data.
pub fn assertion(name: &str) -> Option<&'static str> {
    ASSERTIONS.iter().find(|a| a.0 == name).map(|a| a.1)
}

/// Fast-math and single-instruction bit intrinsics, without their `__`.
const CUDA_MATH: &[&str] = &[
    "exp",
    "log",
    "sin",
    "cos",
    "tan",
    "pow",
    "fdivide",
    "frcp",
    "fsqrt",
    "frsqrt",
    "saturate",
    "popc",
    "clz",
    "ffs",
    "fns",
    "brev",
    "byte_perm",
    "funnelshift",
    "sad",
    "mul24",
    "umul24",
    "mulhi",
    "umulhi",
];

/// The category of a CUDA intrinsic, by family (facts about the CUDA
/// toolkit's device functions).
fn cuda_intrinsic(name: &str) -> Category {
    let n = name.trim_start_matches('_');
    let starts = |ps: &[&str]| ps.iter().any(|p| n.starts_with(p));
    // Type names in a conversion's name (`__float22bfloat162_rn`, `__int_as_float`).
    let types = n
        .split(|c: char| c.is_ascii_digit() || c == '_')
        .filter(|t| {
            matches!(*t, "float" | "floats" | "half" | "halfs" | "bfloat" | "int" | "uint" | "ll" | "ull" | "double")
        })
        .count();
    if starts(&["syncthreads", "syncwarp", "threadfence", "trap", "nanosleep", "assert", "prof_trigger"]) {
        // Barriers and fences order what the algorithm needs ordered; traps stop it.
        Category::Api
    } else if starts(&["shfl", "ballot", "any_sync", "all_sync", "match_", "reduce_", "activemask", "uni_sync"]) {
        Category::Concurrency
    } else if starts(&[
        "ldg", "ldca", "ldcg", "ldcs", "ldlu", "ldcv", "stcg", "stcs", "stwb", "stwt", "cvta_", "prefetch",
    ]) {
        Category::Memory
    } else if types >= 2 || n.contains("_as_") || n.starts_with("nv_") {
        // Conversions between types.
        Category::Api
    } else if n.ends_with("_rn") || n.ends_with("_rz") || n.ends_with("_ru") || n.ends_with("_rd") {
        // Packed arithmetic (`__ffma2_rn`) is cheaper; scalar arithmetic with an
        // explicit rounding (`__fmaf_rn`) is never contracted: exactness.
        if n.contains('2') { Category::Math } else { Category::Precision }
    } else if n.starts_with('h') || starts(CUDA_MATH) {
        // Half-precision SIMD, fast-math and single-instruction bit functions.
        Category::Math
    } else {
        Category::Other
    }
}

/// The category of a conversion (`.to(...)`), from its value histogram: the
/// target most sites name, when it holds at least two thirds of them and is
/// a widening the field optimizes for (to 64-bit indices, to FP32
/// arithmetic); a conversion whose target varies with the site (the
/// operand's own type) is part of what the code computes.
fn conversion(values: &[(String, u64)]) -> Category {
    let total: u64 = values.iter().map(|v| v.1).sum();
    let Some((top, n)) = values.iter().max_by_key(|v| v.1) else { return Category::Api };
    if *n * 3 < total * 2 {
        return Category::Api;
    }
    target_category(top)
}

/// What converting to (or declaring) the type `t` is for.
fn target_category(t: &str) -> Category {
    let last = t.rsplit(['.', ':']).next().unwrap_or(t);
    match last {
        "int64" | "uint64" | "int64_t" => Category::Addressing,
        "float32" | "float64" => Category::Precision,
        _ => Category::Api,
    }
}

/// Words that make a sibling form of a function: `static_range`, `fast_expf`,
/// `safe_exp`. In C++ `static_` would pair `static_cast` with unrelated `cast`s.
fn variant_modifiers(lang: Lang) -> &'static [&'static str] {
    match lang {
        Lang::Python => &["static", "fast", "safe", "approx"],
        _ => &["fast", "safe", "approx"],
    }
}

/// `b` is a sibling form of `a`: a numeric-base suffix (`exp2`/`exp`), an
/// intrinsic prefix (`__expf`/`expf`) or a one-word modifier prefix
/// (`static_range`/`range`).
pub(crate) fn is_variant(lang: Lang, a: &str, b: &str) -> bool {
    if a == b || a.is_empty() || a.starts_with('_') {
        return false;
    }
    // Another base (`exp2`, `log10`), an intrinsic (`__expf`), or a modifier word.
    if let Some(base) = b.strip_prefix(a)
        && matches!(base, "2" | "10")
        && !a.ends_with(|c: char| c.is_ascii_digit())
    {
        return true;
    }
    if b.strip_prefix("__") == Some(a) {
        return true;
    }
    if let Some(prefix) = b.strip_suffix(a).and_then(|p| p.strip_suffix('_')) {
        return variant_modifiers(lang).contains(&prefix);
    }
    false
}

/// The category of a sibling-function choice (`exp2` over `exp`).
fn variant(plain: &str, variant: &str) -> Category {
    match variant.strip_suffix(plain) {
        Some("static_") => Category::Specialization,
        Some("safe_") => Category::Precision,
        Some("fast_" | "approx_" | "__") => Category::Math,
        _ if variant.starts_with(plain) => Category::Math,
        _ => Category::Other,
    }
}

/// The optimization named by the first of `texts` whose words name one.
fn lexicon<'a>(texts: impl IntoIterator<Item = &'a str>) -> Option<Category> {
    texts.into_iter().find_map(|t| vote(words(t).into_iter().filter_map(word_category)))
}

/// The category of a usage idiom: the decoration `key` adds, read by its
/// mechanism, with its value histogram (`values`, most frequent first).
pub fn usage(key: &FamilyKey, values: &[(String, u64)]) -> Category {
    let (s, d) = (key.subject.as_str(), key.decoration.as_str());
    let or_other = |c: Option<Category>| c.unwrap_or(Category::Other);
    match key.mechanism {
        Mechanism::Keyword => keyword_role(d).map(|r| r.category).unwrap_or_else(|| or_other(lexicon([d, s]))),
        Mechanism::MethodWrap if d == "to" => conversion(values),
        // Other methods (`.trans`, `.reshape`) compute.
        Mechanism::MethodWrap => lexicon([d]).unwrap_or(Category::Api),
        Mechanism::Annotation => match lexicon([d]) {
            Some(Category::Specialization) => Category::Specialization,
            // Otherwise it declares the parameter's type.
            _ => target_category(d),
        },
        Mechanism::Decorator
        | Mechanism::Qualifier
        | Mechanism::ParamQualifier
        | Mechanism::Pragma
        | Mechanism::Guard
        | Mechanism::BindingArg => or_other(lexicon([d])),
        // `py.allow_threads` / `py.detach` release the GIL; other methods of the token are API.
        Mechanism::Pyo3Call if matches!(d, "allow_threads" | "detach") => Category::Concurrency,
        Mechanism::Pyo3Call => Category::Api,
        Mechanism::Intrinsic => cuda_intrinsic(d),
        // Inline PTX in kernels is mostly loads, stores and copies the
        // compiler would not emit; vector casts widen accesses.
        Mechanism::InlineAsm | Mechanism::VectorCast => Category::Memory,
        // A hint (`tl.multiple_of`) is an optimization; any other pass-through
        // function (`tl.trans`) computes.
        Mechanism::Wrapper => lexicon([d]).unwrap_or(Category::Api),
        Mechanism::Variant => variant(s, d),
    }
}

/// What one commit message says about its change.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Signals {
    /// Optimizations it names.
    categories: Vec<Category>,
    /// It says the change is faster without saying how.
    perf: bool,
    /// It says the change is a rename, refactor or cleanup.
    refactor: bool,
}

/// Message words that name an optimization (a word matches a term it starts with).
const MESSAGE_TERMS: &[(&str, Category)] = &[
    ("precision", Category::Precision),
    ("accura", Category::Precision),
    ("numeric", Category::Precision),
    ("stabil", Category::Precision),
    ("fp32", Category::Precision),
    ("tf32", Category::Precision),
    ("ieee", Category::Precision),
    ("rounding", Category::Precision),
    ("underflow", Category::Precision),
    ("int64", Category::Addressing),
    ("addressing", Category::Addressing),
    ("illegal", Category::Addressing),
    ("fuse", Category::Fusion),
    ("fusing", Category::Fusion),
    ("fusion", Category::Fusion),
    ("specializ", Category::Specialization),
    ("specialis", Category::Specialization),
    ("recompil", Category::Specialization),
    ("constexpr", Category::Specialization),
    ("autotun", Category::Specialization),
    ("warps", Category::Launch),
    ("occupancy", Category::Launch),
    ("memory", Category::Memory),
    ("bandwidth", Category::Memory),
    ("evict", Category::Memory),
    ("coalesc", Category::Memory),
    ("vectoriz", Category::Memory),
    ("exp2", Category::Math),
    ("log2", Category::Math),
    ("fastmath", Category::Math),
    ("redundan", Category::Redundancy),
    ("unnecessar", Category::Redundancy),
    ("unneeded", Category::Redundancy),
    ("useless", Category::Redundancy),
    ("duplicat", Category::Redundancy),
    ("recomput", Category::Redundancy),
];

/// Message words that say "faster" without saying how.
const PERF_TERMS: &[&str] =
    &["faster", "speed", "perf", "optimi", "accelerat", "latency", "throughput", "efficien", "boost"];

/// Message words that say "same behaviour, other form".
const REFACTOR_TERMS: &[&str] = &[
    "renam",
    "refactor",
    "cleanup",
    "clean",
    "deprecat",
    "style",
    "lint",
    "format",
    "typo",
    "isort",
    "docs",
    "docstring",
    "simplif",
    "unify",
    "reorganiz",
    "restructur",
    "tidy",
    "polish",
    "migrat",
];

/// The signals of one commit message; `None` for a merge, whose message
/// names branches, not intent. Words with `_` in them are identifiers
/// (`fused_recurrent`, `head_first`) and say nothing by themselves.
fn message_signals(msg: &str) -> Option<Signals> {
    let m = msg.to_lowercase();
    if m.starts_with("merge ") {
        return None;
    }
    let ws: Vec<&str> =
        m.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty() && !w.contains('_')).collect();
    let has = |t: &str| ws.iter().any(|w| w.starts_with(t));
    let mut s = Signals::default();
    for (t, c) in MESSAGE_TERMS {
        if has(t) && !s.categories.contains(c) {
            s.categories.push(*c);
        }
    }
    // An overflow of indices is addressing; any other (an `exp`) is numerical.
    if has("overflow") {
        let index = ["int32", "int64", "pointer", "offset", "index", "indexing", "indices", "address", "large", "ima"];
        let c = if index.iter().any(|t| has(t)) { Category::Addressing } else { Category::Precision };
        if !s.categories.contains(&c) {
            s.categories.push(c);
        }
    }
    if ["ima", "oob"].iter().any(|t| ws.contains(t)) && !s.categories.contains(&Category::Addressing) {
        s.categories.push(Category::Addressing);
    }
    if ["fast exp", "fast math", "fast-math"].iter().any(|t| m.contains(t)) && !s.categories.contains(&Category::Math) {
        s.categories.push(Category::Math);
    }
    // Redundancy is the weakest reading: only when nothing more specific is named.
    if s.categories.len() > 1 {
        s.categories.retain(|c| *c != Category::Redundancy);
    }
    s.perf = PERF_TERMS.iter().any(|t| has(t)) || ws.contains(&"fast");
    // Removing an option or a parameter is an API change.
    let removes = ["remove", "delete", "drop"].iter().any(|t| has(t));
    let option =
        ["option", "parameter", "param", "argument", "arg", "args", "kwarg", "kwargs"].iter().any(|t| ws.contains(t));
    s.refactor = REFACTOR_TERMS.iter().any(|t| has(t)) || (removes && option);
    Some(s)
}

/// What most of the commits' messages agree on: an optimization that more
/// than half of them (and at least two) name, or `Refactor` when as many
/// say so and fewer name an optimization. A merge's message is not counted.
fn messages_agree<'a>(messages: impl IntoIterator<Item = &'a str>) -> Option<Category> {
    let sigs: Vec<Signals> = messages.into_iter().filter_map(message_signals).collect();
    let n = sigs.len();
    let agree = |v: usize| v >= 2 && v * 2 > n;
    let mut votes: BTreeMap<Category, usize> = BTreeMap::new();
    for s in &sigs {
        for c in &s.categories {
            *votes.entry(*c).or_default() += 1;
        }
    }
    let refactor = sigs.iter().filter(|s| s.refactor).count();
    let best = PRIORITY.into_iter().filter_map(|c| votes.get(&c).map(|v| (c, *v))).max_by_key(|(_, v)| *v);
    match best {
        Some((c, v)) if agree(v) && v >= refactor => Some(c),
        _ if agree(refactor) => Some(Category::Refactor),
        _ => None,
    }
}

/// A word that is a value, not a name: a number or a boolean.
fn is_value(w: &str) -> bool {
    w.chars().all(|c| c.is_ascii_digit()) || matches!(w, "True" | "False" | "true" | "false")
}

/// The category of an edit idiom, from what its change does: the words its
/// change `removed` and `added` (counted per occurrence, holes left out), the
/// first words it keeps (`context`: what it is anchored on), the keyword
/// arguments of Triton calls it adds, removes or retunes (`keywords`, from
/// its trees) and its commits' `messages`:
///
/// 1. an import statement is a refactor, whatever it imports;
/// 2. changed words that are the names of optimization mechanisms decide
///    (`exp` -> `exp2`, `int32` -> `int64`, `+ input_precision="ieee"`,
///    `- tl.constexpr`); a name someone gave a flag (`USE_EXP2`) does not;
/// 3. Triton keyword arguments decide next ([`keyword_category`]): a retuned
///    `num_warps=` is launch, an added `mask=` is `api` (what the load
///    reads), whatever the commit message says;
/// 4. a conversion or a Triton operation added or removed (`.to(x.dtype)`,
///    `tl.trans(b)`) changes what is computed: `api` (to a type that names an
///    optimization, rule 2 decided);
/// 5. a function swapped for a sibling form of it is that choice
///    (`scale` -> `fast_scale`, `range` -> `static_range`: see
///    [`is_variant`]); other names swapped for other names are a rename or an
///    API migration
///    (`offsets` -> `cu_seqlens`, `@contiguous` -> `@input_guard`, strides,
///    `boundary_check=` -> `mask=`);
/// 6. names only added or only removed are plumbing (arguments, return
///    values, parameters, autotuning keys: `return x, None` -> `return x,
///    None, None`), a refactor; unless the anchor is an optimization and
///    most commit messages say so too (`tl.exp(x)` -> `exp(x)`, "use fast
///    exp");
/// 7. a change of values or operators only is what most commit messages
///    agree on (an optimization, or a refactor), else `Other`.
pub fn edit<'a, S: AsRef<str>>(
    removed: &[S],
    added: &[S],
    context: &[S],
    keywords: &KeywordChange,
    messages: impl IntoIterator<Item = &'a str>,
) -> Category {
    if context.first().is_some_and(|w| matches!(w.as_ref(), "from" | "import")) {
        return Category::Refactor;
    }
    if let Some(c) = vote(removed.iter().chain(added).filter_map(|w| name_category(w.as_ref()))) {
        return c;
    }
    let named = |ws: &[S]| ws.iter().any(|w| !is_value(w.as_ref()));
    if let Some(c) = keyword_category(keywords, !named(removed) && !named(added)) {
        return c;
    }
    // A conversion (`.to(...)`) or a Triton operation (`tl.trans(...)`)
    // appears or disappears: the values change. (`tl.exp` -> a helper's
    // `exp` drops only the module: a migration, judged below.)
    let op = |ws: &[S]| {
        ws.iter().any(|w| w.as_ref() == "tl") && ws.iter().any(|w| !matches!(w.as_ref(), "tl") && !is_value(w.as_ref()))
    };
    if removed.iter().chain(added).any(|w| w.as_ref() == "to") || op(removed) || op(added) {
        return Category::Api;
    }
    // One function swapped for a sibling form of it (`scale` -> `fast_scale`,
    // `expf` -> `__expf`, `range` -> `static_range`), either way.
    for r in removed {
        for a in added {
            let (r, a) = (r.as_ref(), a.as_ref());
            if is_variant(Lang::Python, r, a) {
                return variant(r, a);
            }
            if is_variant(Lang::Python, a, r) {
                return variant(a, r);
            }
        }
    }
    if named(removed) && named(added) {
        return Category::Refactor;
    }
    // The value of a keyword that is part of what the call computes changed
    // (`mask=m` -> `mask=m & (o < T)`), and no name was swapped for another.
    if KeywordChange::roles(&keywords.changed).any(|r| r.category == Category::Api) {
        return Category::Api;
    }
    let agreed = messages_agree(messages);
    if named(removed) || named(added) {
        let anchor = vote(context.iter().filter_map(|w| name_category(w.as_ref())));
        return match anchor {
            Some(c) if agreed == Some(c) => c,
            _ => Category::Refactor,
        };
    }
    agreed.unwrap_or(Category::Other)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words a change removes and adds, and its context, as the history
    /// miner computes them (holes left out, counted per occurrence).
    fn change(before: &str, after: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
        let ws = |s: &str| -> Vec<String> {
            s.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
                .filter(|w| !w.is_empty() && !w.starts_with('$'))
                .map(str::to_string)
                .collect()
        };
        let (b, a) = (ws(before), ws(after));
        let mut n: BTreeMap<&str, i64> = BTreeMap::new();
        b.iter().for_each(|w| *n.entry(w).or_default() -= 1);
        a.iter().for_each(|w| *n.entry(w).or_default() += 1);
        let mut removed: Vec<String> = b.iter().filter(|w| n[w.as_str()] < 0).cloned().collect();
        let mut added: Vec<String> = a.iter().filter(|w| n[w.as_str()] > 0).cloned().collect();
        removed.dedup();
        added.dedup();
        let context = b.iter().filter(|w| !removed.contains(w)).take(2).cloned().collect();
        (removed, added, context)
    }

    /// The keyword arguments (`name=value` after `(` or `,`) of a template,
    /// as the history miner reads them from its trees.
    fn keywords(before: &str, after: &str) -> KeywordChange {
        let kws = |s: &str| -> Vec<(String, String)> {
            let mut out = Vec::new();
            let b = s.as_bytes();
            for (i, _) in s.match_indices('=') {
                let prev = i.checked_sub(1).map(|j| b[j]);
                if matches!(prev, Some(b'=' | b'!' | b'<' | b'>' | b' ')) || b.get(i + 1) == Some(&b'=') {
                    continue;
                }
                let head = &s[..i];
                let start = head.rfind(|c: char| !(c.is_alphanumeric() || c == '_')).map_or(0, |j| j + 1);
                let lead = head[..start].trim_end();
                if !(lead.ends_with('(') || lead.ends_with(',')) {
                    continue;
                }
                let rest = &s[i + 1..];
                let end = rest.find([',', ')']).unwrap_or(rest.len());
                out.push((head[start..].to_string(), rest[..end].trim().to_string()));
            }
            out
        };
        let (b, a) = (kws(before), kws(after));
        let mut k = KeywordChange::default();
        let names: std::collections::BTreeSet<&String> = b.iter().chain(&a).map(|(n, _)| n).collect();
        for n in names {
            let v = |side: &[(String, String)]| {
                side.iter().filter(|(x, _)| x == n).map(|x| x.1.clone()).collect::<Vec<_>>()
            };
            let (vb, va) = (v(&b), v(&a));
            if va.len() > vb.len() {
                k.added.push(n.clone());
            } else if va.len() < vb.len() {
                k.removed.push(n.clone());
            } else if va != vb {
                k.changed.push(n.clone());
            }
        }
        k
    }

    #[test]
    fn edits_are_classified_from_their_change_and_messages() {
        use Category::*;
        // (before, after, commit messages, category)
        let cases: &[(&str, &str, &[&str], Category)] = &[
            // Optimizations named by the change itself.
            ("tl.exp($A)", "tl.exp2($A)", &["[Perf] exp2 in ka"], Math),
            ("exp(b_g)", "exp2(b_g)", &["[KDA] Changed all exp to exp2"], Math),
            ("tl.math.exp2($A)", "tl.exp($A)", &["Clean the code"], Math),
            ("$A = tl.load($B + i_n).to(tl.int32)", "$A = tl.load($B + i_n).to(tl.int64)", &["Fix"], Addressing),
            ("i_n = tl.program_id($B)", "i_n = tl.program_id($B).to(tl.int64)", &[], Addressing),
            ("tl.dot($A, $B)", "tl.dot($A, $B, input_precision=\"ieee\")", &[], Precision),
            ("tl.dot($A, $B, allow_tf32=False)", "tl.dot($A, $B)", &["Refactor the kernel"], Precision),
            ("dtype = torch.bfloat16", "dtype = torch.float32", &["improve stability"], Precision),
            ("T: tl.constexpr", "T", &["[Misc.] Delete tl.constexpr for all Ts"], Specialization),
            ("@triton.jit", "@triton.jit(do_not_specialize=$A)", &["Avoid recompilation"], Specialization),
            ("triton.Config({$$$A}, num_warps=w)", "triton.Config({$$$A}, num_warps=w, num_stages=s)", &[], Launch),
            ("tl.load($A, mask=$B)", "tl.load($A, mask=$B, eviction_policy=\"evict_last\")", &[], Memory),
            ("tl.atomic_add($A, $B)", "tl.atomic_add($A, $B, sem=\"relaxed\")", &[], Concurrency),
            // A flag named after an optimization is plumbing for it, not the optimization.
            ("$A($$$B)", "$A($$$B, USE_EXP2=use_exp2)", &["[KDA] exp2 everywhere", "Switch to exp2"], Refactor),
            // A sibling form of a function, either way.
            ("y = scale(b_x)", "y = fast_scale(b_x)", &["a", "b"], Math),
            ("for i in range(N):\n    pass", "for i in static_range(N):\n    pass", &[], Specialization),
            ("y = fast_scale(b_x)", "y = scale(b_x)", &["revert"], Math),
            // Renames and API migrations: names swapped for other names.
            ("tl.load(offsets + i_n)", "tl.load(cu_seqlens + i_n)", &["[Perf] faster varlen"], Refactor),
            ("return $A.embed_tokens", "return $A.embeddings", &["Add causal inference"], Refactor),
            ("@contiguous", "@input_guard", &["Update wrapper"], Refactor),
            ("ctx.BT = BT", "ctx.chunk_size = chunk_size", &["[GLA] Support varlen mode"], Refactor),
            (
                "tl.make_block_ptr($A + $B * s_v_h, (T, V), (s_v_t, 1), ($C, $D), ($E, BV), (1, 0))",
                "tl.make_block_ptr($A + $B * T*V, (T, V), (V, 1), ($C, $D), ($E, BV), (1, 0))",
                &["[RWKV6] Fix bad strides"],
                Refactor,
            ),
            ("p_q += DK", "p_q += K", &["Update args"], Refactor),
            (
                "tl.load($A, boundary_check=(0,))",
                "tl.load($A, mask=$B, other=$C)",
                &["[Ops] Migrate kernels"],
                Refactor,
            ),
            ("head_first: bool = False", "**kwargs", &["[Cleanup] Remove deprecated head_first"], Refactor),
            // Imports, whatever they name.
            ("from typing import Tuple", "from typing import Optional, Tuple", &["Fuse kernels"], Refactor),
            ("from fla.ops.utils.op import exp", "from fla.ops.utils.op import exp2", &["exp2 everywhere"], Refactor),
            // Names only added or removed: plumbing, unless the anchor is an optimization.
            (
                "return $$$A, None",
                "return $$$A, None, None",
                &["Speed up via kernel fusing", "[ABC] fuse", "fix"],
                Refactor,
            ),
            ("$A.apply(q, k, v, $$$B)", "$A.apply(q, k, v, $$$B, offsets)", &["[GLA] Support varlen"], Refactor),
            ("tl.exp($B)", "exp($B)", &["[RWKV7] Use fast exp", "[OP] replace `tl.exp` with `exp2`"], Math),
            ("tl.exp($B)", "exp($B)", &["[RWKV7] Use fast exp", "fix"], Refactor),
            (
                "triton.autotune(configs=$A, key=[$$$B])",
                "triton.autotune(configs=$A, key=[$$$B, \"HV\"])",
                &["GVA", "GVA"],
                Refactor,
            ),
            // What the edit does decides before what its commit is titled: a
            // mask, a precision, a cache hint or a launch parameter is no refactor.
            ("tl.load($A)", "tl.load($A, mask=$B, other=0.0)", &["[Refactor] tidy loads", "cleanup"], Api),
            ("tl.store($A, $B)", "tl.store($A, $B, mask=$C)", &["Refactor"], Api),
            ("tl.load($A, mask=$B)", "tl.load($A, mask=$B & (o_t < T))", &["refactor"], Api),
            ("tl.load($A, mask=m_k)", "tl.load($A, mask=m_v)", &["rename"], Refactor),
            ("tl.dot($A, $B)", "tl.dot($A, $B, allow_tf32=False)", &["Refactor the kernel"], Precision),
            (
                "tl.dot($A, $B, input_precision=\"tf32\")",
                "tl.dot($A, $B, input_precision=\"ieee\")",
                &["refactor"],
                Precision,
            ),
            ("tl.load($A, mask=$B)", "tl.load($A, mask=$B, eviction_policy=$C)", &["Refactor"], Memory),
            ("triton.Config({}, num_warps=4)", "triton.Config({}, num_warps=8)", &["refactor configs"], Launch),
            (
                "triton.Config({}, num_stages=$A)",
                "triton.Config({}, num_stages=$A, num_warps=$B)",
                &["cleanup"],
                Launch,
            ),
            ("@triton.jit", "@triton.jit(do_not_specialize=$A)", &["Refactor"], Specialization),
            ("$A = tl.load($B)", "$A = tl.load($B).to(b_q.dtype)", &["cleanup"], Api),
            ("$A += tl.dot($B, tl.trans($C))", "$A += tl.dot($B, $C)", &["cleanup"], Api),
            ("b_o = b_a", "b_o = tl.where(m, b_a, 0)", &["Refactor"], Api),
            // Values and operators only: what most commit messages agree on.
            ("$A + $B", "$A * $B", &["Fix int32 overflow in offsets", "[NSA] int64 addressing"], Addressing),
            ("$A + $B", "$A * $B", &["Fix exp overflow", "Avoid NaN overflow"], Precision),
            ("$A + $B", "$A * $B", &["fuse the gate", "fuse norm"], Fusion),
            ("$A + $B", "$A * $B", &["Remove redundant masking", "Drop duplicated work"], Redundancy),
            ("$A + $B", "$A * $B", &["[Perf] Avoid recompilation", "specialize on T", "x"], Specialization),
            ("$A.f($B, False)", "$A.f($B, True)", &["Improve numerical precision", "precision of h0"], Precision),
            ("triton.Config({}, num_warps=4)", "triton.Config({}, num_warps=8)", &["more warps", "tune warps"], Launch),
            ("$A + $B", "$A * $B", &["Rename things", "cleanup"], Refactor),
            // A merge says nothing; one commit, or a split vote, decides nothing.
            ("$A + $B", "$A * $B", &["Merge pull request #4 from x/fuse-all", "fuse"], Other),
            ("$A + $B", "$A * $B", &["fuse", "precision", "fix"], Other),
            ("$A + $B", "$A * $B", &["Fix"], Other),
            ("pytest.mark.parametrize($A, [4])", "pytest.mark.parametrize($A, [2])", &["tests"], Other),
        ];
        for (before, after, msgs, want) in cases {
            let (r, a, c) = change(before, after);
            let got = edit(&r, &a, &c, &keywords(before, after), msgs.iter().copied());
            assert_eq!(got, *want, "{before:?} -> {after:?} ({msgs:?}): removed {r:?}, added {a:?}, context {c:?}");
        }
    }

    fn key(m: Mechanism, s: &str, d: &str) -> FamilyKey {
        let lang = if matches!(
            m,
            Mechanism::Keyword
                | Mechanism::MethodWrap
                | Mechanism::Annotation
                | Mechanism::Decorator
                | Mechanism::Wrapper
        ) {
            Lang::Python
        } else {
            Lang::Cuda
        };
        FamilyKey { lang, mechanism: m, subject: s.into(), decoration: d.into() }
    }

    #[test]
    fn usage_idioms_are_classified_by_mechanism_and_role() {
        use Category::*;
        use Mechanism::*;
        let vals = |vs: &[(&str, u64)]| vs.iter().map(|(v, n)| (v.to_string(), *n)).collect::<Vec<_>>();
        // (mechanism, subject, decoration, values, category)
        type Case<'a> = (Mechanism, &'a str, &'a str, &'a [(&'a str, u64)], Category);
        let cases: &[Case] = &[
            (Keyword, "tl.dot", "input_precision", &[("\"ieee\"", 3)], Precision),
            (Keyword, "tl.dot", "allow_tf32", &[("False", 3)], Precision),
            (Keyword, "tl.load", "eviction_policy", &[("\"evict_last\"", 3)], Memory),
            (Keyword, "triton.Config", "num_warps", &[("4", 3)], Launch),
            (Keyword, "triton.jit", "do_not_specialize", &[("[\"T\"]", 3)], Specialization),
            (Keyword, "tl.atomic_add", "sem", &[("\"relaxed\"", 3)], Concurrency),
            // Plain API: part of what the call computes.
            (Keyword, "tl.load", "mask", &[("mask", 3)], Api),
            (Keyword, "tl.load", "other", &[("0.0", 3)], Api),
            (Keyword, "tl.store", "boundary_check", &[("(0, 1)", 3)], Api),
            (Keyword, "tl.sum", "axis", &[("0", 3)], Api),
            (Keyword, "tl.full", "dtype", &[("tl.float32", 3)], Api),
            (Keyword, "tl.dot", "acc", &[("acc", 3)], Api),
            (Keyword, "triton.autotune", "restore_value", &[("[\"x\"]", 3)], Api),
            // Unknown keywords: their words, else other.
            (Keyword, "my_autotune", "prune", &[], Specialization),
            (Keyword, "helper", "verbose", &[], Other),
            // Conversions: by the target most sites name.
            (MethodWrap, "tl.program_id", "to", &[("tl.int64", 479), ("tl.int32", 1)], Addressing),
            (MethodWrap, "tl.load", "to", &[("tl.float32", 1538), ("tl.int64", 780), ("b_q.dtype", 8)], Api),
            (MethodWrap, "tl.dot", "to", &[("tl.float32", 9), ("b_k.dtype", 1)], Precision),
            (MethodWrap, "tl.trans", "to", &[("b_w.dtype", 20), ("tl.float32", 14)], Api),
            (MethodWrap, "reshape", "trans", &[("0,1", 2)], Api),
            (Annotation, "triton-param", "tl.constexpr", &[], Specialization),
            (Annotation, "triton-param", "tl.int64", &[], Addressing),
            (Annotation, "triton-param", "tl.int32", &[], Api),
            (Decorator, "triton-kernel", "triton.autotune", &[], Specialization),
            (Decorator, "triton-kernel", "fla_cache_autotune", &[], Specialization),
            (Qualifier, "cuda-device", "__forceinline__", &[], Specialization),
            (Qualifier, "cuda-global", "__launch_bounds__", &[], Launch),
            (ParamQualifier, "pointer-param", "__restrict__", &[], Memory),
            (Pragma, "loop", "unroll", &[], Specialization),
            (Guard, "binding-fn", "py::gil_scoped_release", &[], Concurrency),
            (Wrapper, "triton-kernel", "tl.multiple_of", &[], Addressing),
            (Wrapper, "triton-kernel", "tl.trans", &[], Api),
            (Variant, "exp", "exp2", &[], Math),
            (Variant, "expf", "__expf", &[], Math),
            (Variant, "range", "static_range", &[], Specialization),
            (Variant, "exp", "safe_exp", &[], Precision),
            // CUDA intrinsics by family.
            (Intrinsic, "kernel", "__shfl_xor_sync", &[], Concurrency),
            (Intrinsic, "kernel", "__reduce_add_sync", &[], Concurrency),
            (Intrinsic, "kernel", "__syncthreads", &[], Api),
            (Intrinsic, "kernel", "__syncwarp", &[], Api),
            (Intrinsic, "kernel", "__ldg", &[], Memory),
            (Intrinsic, "kernel", "__cvta_generic_to_shared", &[], Memory),
            (Intrinsic, "kernel", "__float22bfloat162_rn", &[], Api),
            (Intrinsic, "kernel", "__bfloat1622float2", &[], Api),
            (Intrinsic, "kernel", "__int_as_float", &[], Api),
            (Intrinsic, "kernel", "__nv_fp8_e4m3", &[], Api),
            (Intrinsic, "kernel", "__hfma2", &[], Math),
            (Intrinsic, "kernel", "__ffma2_rn", &[], Math),
            (Intrinsic, "kernel", "__fmaf_rn", &[], Precision),
            (Intrinsic, "kernel", "__expf", &[], Math),
            (Intrinsic, "kernel", "__popc", &[], Math),
            (Intrinsic, "kernel", "__trap", &[], Api),
            (Intrinsic, "kernel", "__mystery", &[], Other),
            (InlineAsm, "kernel", "asm", &[], Memory),
            (Pyo3Call, "pyo3-fn", "allow_threads", &[], Concurrency),
            (Pyo3Call, "pyo3-fn", "import", &[], Api),
        ];
        for (m, s, d, vs, want) in cases {
            assert_eq!(usage(&key(*m, s, d), &vals(vs)), *want, "{m:?} {s} {d}");
        }
    }

    #[test]
    fn words_match_whole_or_by_part_never_inside() {
        assert_eq!(word_category("exp"), Some(Category::Math));
        assert_eq!(word_category("USE_EXP2"), Some(Category::Math));
        assert_eq!(word_category("SOLVE_TRIL_DOT_PRECISION"), Some(Category::Precision));
        assert_eq!(word_category("__launch_bounds__"), Some(Category::Launch));
        assert_eq!(word_category("input_precision"), Some(Category::Precision));
        for w in ["logits", "expand_k", "expected", "contiguous", "input_guard", "offsets", "mask", "cu_seqlens"] {
            assert_eq!(word_category(w), None, "{w}");
        }
        assert_eq!(word_category("key"), None, "short keyword names are too common to be evidence");
        assert_eq!(Category::classify("to tl.program_id tl.int64"), Category::Addressing);
        assert_eq!(Category::classify("fused_recurrent logits"), Category::Other);
    }

    #[test]
    fn categories_round_trip_and_rank_optimizations_first() {
        for &c in Category::ALL {
            assert_eq!(Category::from_name(c.name()), Some(c));
            assert_eq!(serde_json::to_string(&c).unwrap_or_default(), format!("\"{}\"", c.name()));
            assert_eq!(c.rank() == 0, c.is_optimization(), "{c}");
        }
        assert!(Category::Other.rank() < Category::Api.rank() && Category::Api.rank() < Category::Refactor.rank());
        assert_eq!(Category::from_name("Refactor"), None);
    }
}
