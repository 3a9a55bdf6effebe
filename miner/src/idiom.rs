//! Aggregation: the facts of many files become idioms.
//!
//! A decoration is an idiom when it recurs (thresholds in [`MineConfig`]) and
//! the undecorated form also exists: that contrast is the rewrite. Value
//! variants (`input_precision="ieee"`, `"tf32"`) are one idiom with a value
//! histogram. Function choices (`exp2` over `exp`) are synthesized here from
//! call counts, because only the whole corpus says which sibling forms exist.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::classify;
pub use crate::classify::Category;
use crate::facts::{Example, FamilyKey, FileFacts, Mechanism};
use crate::rewritable::guidance;
use crate::values::{ModuleIndex, ResolvedValue};
use kidiom_syntax::Lang;

/// Thresholds for calling a recurring decoration an idiom.
#[derive(Debug, Clone)]
pub struct MineConfig {
    /// Decorated sites needed in all corpora together.
    pub min_occurrences: u64,
    /// Files with a decorated site needed in all corpora together.
    pub min_files: u64,
    /// Corpora with a decorated site needed.
    pub min_corpora: u64,
    /// Require the undecorated form to exist somewhere.
    pub require_contrast: bool,
    /// Examples kept per idiom.
    pub max_examples: usize,
}

impl Default for MineConfig {
    fn default() -> Self {
        MineConfig { min_occurrences: 2, min_files: 1, min_corpora: 1, require_contrast: true, max_examples: 5 }
    }
}

/// The facts of one file, with where they came from.
#[derive(Debug, Clone, Copy)]
pub struct FileInput<'a> {
    /// Corpus name.
    pub corpus: &'a str,
    /// The corpus revision mined.
    pub revision: &'a str,
    /// Path within the corpus.
    pub path: &'a str,
    /// The file's language.
    pub lang: Lang,
    /// Its facts.
    pub facts: &'a FileFacts,
}

/// How well an idiom is supported in one corpus.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Support {
    /// Corpus name.
    pub corpus: String,
    /// Revision mined.
    pub revision: String,
    /// Decorated sites.
    pub occurrences: u64,
    /// Files with a decorated site.
    pub files: u64,
    /// Sites matching `before` that lack the idiom.
    pub opportunities: u64,
}

/// One example of an idiom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdiomExample {
    /// Corpus name.
    pub corpus: String,
    /// Path within the corpus.
    pub path: String,
    /// 1-based line.
    pub line: u32,
    /// The source line.
    pub snippet: String,
}

/// A mined usage idiom.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Idiom {
    /// Stable readable slug.
    pub id: String,
    /// Its family.
    pub key: FamilyKey,
    /// What it is for.
    pub category: Category,
    /// One line.
    pub title: String,
    /// Why, with the numbers.
    pub rationale: String,
    /// Where it applies (ast-grep syntax; empty when it has no rewrite).
    pub before: String,
    /// Its shape and the rewrite template.
    pub after: String,
    /// Per corpus.
    pub support: Vec<Support>,
    /// Values seen in its hole, most frequent first.
    pub values: Vec<(String, u64)>,
    /// What the values that are names resolve to, by value: from the
    /// definitions in their file, or in another module of the same corpus
    /// that the file imports them from. Values that resolve to no literal
    /// are absent.
    #[serde(default)]
    pub resolved: BTreeMap<String, ResolvedValue>,
    /// Examples.
    pub examples: Vec<IdiomExample>,
    /// Sites under parse-error nodes.
    pub in_error: u64,
    /// Ranking score (higher is stronger evidence).
    pub score: f64,
}

impl Idiom {
    /// Decorated sites over all corpora.
    pub fn occurrences(&self) -> u64 {
        self.support.iter().map(|s| s.occurrences).sum()
    }
    /// Opportunities over all corpora.
    pub fn opportunities(&self) -> u64 {
        self.support.iter().map(|s| s.opportunities).sum()
    }
}

#[derive(Default)]
struct Acc {
    occurrences: u64,
    units: u64,
    files: u64,
    in_error: u64,
    values: BTreeMap<String, u64>,
    /// Value -> its resolutions, each with the sites it covers.
    resolved: BTreeMap<String, Vec<(ResolvedValue, u64)>>,
    examples: Vec<IdiomExample>,
}

/// Adds `n` sites to `r` among a value's resolutions.
fn add_resolution(rs: &mut Vec<(ResolvedValue, u64)>, r: ResolvedValue, n: u64) {
    match rs.iter_mut().find(|(x, _)| *x == r) {
        Some(e) => e.1 += n,
        None => rs.push((r, n)),
    }
}

/// Distinct expressions shown for one value bound differently in different files.
const MAX_ALTERNATIVES: usize = 3;

/// One resolution of a value bound differently in different files: its
/// expressions as alternatives (`a | b`, most sites first, the first seen on
/// a tie) and the literals of all, in the same order.
fn pick_resolution(mut rs: Vec<(ResolvedValue, u64)>) -> Option<ResolvedValue> {
    // Stable: equal counts keep their first-seen order.
    rs.sort_by_key(|r| std::cmp::Reverse(r.1));
    if rs.len() == 1 {
        return rs.pop().map(|(r, _)| r);
    }
    let mut exprs: Vec<String> = Vec::new();
    let mut literals: Vec<String> = Vec::new();
    for (r, _) in &rs {
        // A conditional among alternatives is parenthesized, as Python would need.
        let e =
            if r.expr.contains(" if ") && !r.expr.contains(" | ") { format!("({})", r.expr) } else { r.expr.clone() };
        if !exprs.contains(&e) {
            exprs.push(e);
        }
        for l in &r.literals {
            if !literals.contains(l) {
                literals.push(l.clone());
            }
        }
    }
    let more = exprs.len() > MAX_ALTERNATIVES;
    exprs.truncate(MAX_ALTERNATIVES);
    if more {
        exprs.push("…".into());
    }
    Some(ResolvedValue { expr: crate::values::shorten(&exprs.join(" | "), crate::values::MAX_EXPR), literals })
}

/// Folds file facts into idioms, optimizations first ([`Category::rank`]),
/// then by score (then id).
pub fn aggregate<'a>(files: impl IntoIterator<Item = FileInput<'a>>, cfg: &MineConfig) -> Vec<Idiom> {
    let Folded { mut fams, scopes, revisions, call_examples } = fold(files, cfg);
    synthesize_variants(&scopes, &call_examples, &mut fams, cfg);
    keep_hint_wrappers(&scopes, &mut fams);
    // Regroup per family across corpora.
    let mut by_key: BTreeMap<FamilyKey, Vec<(String, Acc)>> = BTreeMap::new();
    for ((corpus, key), acc) in fams {
        by_key.entry(key).or_default().push((corpus, acc));
    }
    let mut out: Vec<Idiom> = by_key
        .into_iter()
        .filter_map(|(key, per_corpus)| family_idiom(key, per_corpus, &scopes, &revisions, cfg))
        .collect();
    // Optimizations first (by category rank), then by score.
    out.sort_by(|a, b| {
        a.category
            .rank()
            .cmp(&b.category.rank())
            .then_with(|| b.score.total_cmp(&a.score))
            .then_with(|| a.id.cmp(&b.id))
    });
    out
}

/// Scope totals per (corpus, lang, scope): units, and files holding it.
type Scopes = BTreeMap<(String, Lang, String), (u64, u64)>;

/// Every file's facts, counted per (corpus, family) and per scope.
struct Folded {
    fams: BTreeMap<(String, FamilyKey), Acc>,
    scopes: Scopes,
    revisions: BTreeMap<String, String>,
    call_examples: BTreeMap<(Lang, String), IdiomExample>,
}

/// Counts the files' facts per (corpus, family) and per scope, resolving
/// the names their values hold through their corpus's modules.
fn fold<'a>(files: impl IntoIterator<Item = FileInput<'a>>, cfg: &MineConfig) -> Folded {
    let files: Vec<FileInput<'a>> = files.into_iter().collect();
    // The Python modules of each corpus, where imported names are resolved;
    // a corpus never resolves a name from another.
    let mut modules: BTreeMap<&str, ModuleIndex<'a>> = BTreeMap::new();
    for f in &files {
        if f.lang == Lang::Python {
            modules.entry(f.corpus).or_default().add(f.path, &f.facts.constants);
        }
    }
    let no_modules = ModuleIndex::default();
    // (corpus, family) -> counts; (corpus, lang, scope) -> totals.
    let mut fams: BTreeMap<(String, FamilyKey), Acc> = BTreeMap::new();
    let mut scopes: BTreeMap<(String, Lang, String), (u64, u64)> = BTreeMap::new();
    let mut revisions: BTreeMap<String, String> = BTreeMap::new();
    let mut call_examples: BTreeMap<(Lang, String), IdiomExample> = BTreeMap::new();
    for f in files {
        let index = modules.get(f.corpus).unwrap_or(&no_modules);
        revisions.entry(f.corpus.to_string()).or_insert_with(|| f.revision.to_string());
        for (scope, n) in &f.facts.scopes {
            let e = scopes.entry((f.corpus.to_string(), f.lang, scope.clone())).or_default();
            e.0 += u64::from(*n);
            e.1 += 1;
        }
        for (callee, ex) in &f.facts.call_examples {
            call_examples.entry((f.lang, callee.clone())).or_insert_with(|| example(f, ex));
        }
        for (key, ff) in &f.facts.families {
            let acc = fams.entry((f.corpus.to_string(), key.clone())).or_default();
            acc.occurrences += u64::from(ff.occurrences);
            acc.units += u64::from(ff.units);
            acc.files += 1;
            acc.in_error += u64::from(ff.in_error);
            for (v, n) in &ff.values {
                *acc.values.entry(v.clone()).or_default() += u64::from(*n);
            }
            for (v, expr) in &ff.resolved {
                if let Some(r) = index.resolve(f.path, expr) {
                    let n = ff.values.get(v).copied().map_or(1, u64::from);
                    add_resolution(acc.resolved.entry(v.clone()).or_default(), r, n);
                }
            }
            // One example per file first, so examples span files.
            if acc.examples.len() < cfg.max_examples
                && let Some(ex) = ff.examples.first()
            {
                acc.examples.push(example(f, ex));
            }
        }
    }
    Folded { fams, scopes, revisions, call_examples }
}

/// Keeps the wrapper families that are hints.
fn keep_hint_wrappers(scopes: &Scopes, fams: &mut BTreeMap<(String, FamilyKey), Acc>) {
    // A wrapper is a hint when some file uses it as a pass-through (`x = W(x, 16)`)
    // and its trailing arguments are constants in at least 95% of its calls.
    let count = |prefix: &str| {
        let mut m: BTreeMap<(Lang, String), u64> = BTreeMap::new();
        for ((_, l, s), (n, _)) in scopes {
            if let Some(w) = s.strip_prefix(prefix) {
                *m.entry((*l, w.to_string())).or_default() += n;
            }
        }
        m
    };
    let (passthrough, varying) = (count(crate::python::PASSTHROUGH), count(crate::python::VARYING));
    let mut calls: BTreeMap<(Lang, String), u64> = BTreeMap::new();
    for ((_, k), acc) in fams.iter() {
        if k.mechanism == Mechanism::Wrapper {
            *calls.entry((k.lang, k.decoration.clone())).or_default() += acc.occurrences;
        }
    }
    fams.retain(|(_, k), _| {
        let w = (k.lang, k.decoration.clone());
        k.mechanism != Mechanism::Wrapper
            || (passthrough.contains_key(&w)
                && varying.get(&w).copied().unwrap_or(0) * 20 <= calls.get(&w).copied().unwrap_or(0))
    });
}

/// The idiom of one family over its corpora, unless its support falls
/// short of the configuration's minimums.
fn family_idiom(
    key: FamilyKey,
    per_corpus: Vec<(String, Acc)>,
    scopes: &Scopes,
    revisions: &BTreeMap<String, String>,
    cfg: &MineConfig,
) -> Option<Idiom> {
    let scope = key.scope();
    let mut support = Vec::new();
    let mut values: BTreeMap<String, u64> = BTreeMap::new();
    let mut resolutions: BTreeMap<String, Vec<(ResolvedValue, u64)>> = BTreeMap::new();
    let mut examples = Vec::new();
    let mut in_error = 0;
    for (corpus, acc) in per_corpus {
        let opportunities = if key.mechanism == Mechanism::Variant {
            acc.units // synthesized: units holds the calls to the plain form
        } else {
            let total = scopes.get(&(corpus.clone(), key.lang, scope.clone())).map(|t| t.0).unwrap_or(0);
            total.saturating_sub(acc.units)
        };
        for (v, n) in acc.values {
            *values.entry(v).or_default() += n;
        }
        for (v, rs) in acc.resolved {
            let all = resolutions.entry(v).or_default();
            for (r, n) in rs {
                add_resolution(all, r, n);
            }
        }
        examples.extend(acc.examples);
        in_error += acc.in_error;
        support.push(Support {
            revision: revisions.get(&corpus).cloned().unwrap_or_default(),
            corpus,
            occurrences: acc.occurrences,
            files: acc.files,
            opportunities,
        });
    }
    let occ: u64 = support.iter().map(|s| s.occurrences).sum();
    let nfiles: u64 = support.iter().map(|s| s.files).sum();
    let ncorpora = support.iter().filter(|s| s.occurrences > 0).count() as u64;
    let opp: u64 = support.iter().map(|s| s.opportunities).sum();
    if occ < cfg.min_occurrences || nfiles < cfg.min_files || ncorpora < cfg.min_corpora {
        return None;
    }
    if cfg.require_contrast && opp == 0 {
        return None;
    }
    examples.truncate(cfg.max_examples);
    let mut values: Vec<(String, u64)> = values.into_iter().collect();
    values.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let resolved = resolutions.into_iter().filter_map(|(v, rs)| Some((v, pick_resolution(rs)?))).collect();
    let counts = Counts { occ, nfiles, ncorpora, opp, in_error };
    Some(describe(key, support, values, resolved, examples, counts))
}

fn example(f: FileInput, ex: &Example) -> IdiomExample {
    IdiomExample { corpus: f.corpus.to_string(), path: f.path.to_string(), line: ex.line, snippet: ex.snippet.clone() }
}

fn last_segment(callee: &str) -> Option<&str> {
    if callee.starts_with('.') || callee.starts_with('$') {
        return None; // methods and launches have no sibling forms
    }
    callee.rsplit(['.', ':']).next().filter(|s| !s.is_empty())
}

#[allow(clippy::type_complexity)]
fn synthesize_variants(
    scopes: &BTreeMap<(String, Lang, String), (u64, u64)>,
    call_examples: &BTreeMap<(Lang, String), IdiomExample>,
    fams: &mut BTreeMap<(String, FamilyKey), Acc>,
    cfg: &MineConfig,
) {
    // (corpus, lang, last segment) -> (calls, files, full callee names)
    let mut calls: BTreeMap<(String, Lang, String), (u64, u64, BTreeMap<String, u64>)> = BTreeMap::new();
    for ((corpus, lang, scope), (n, files)) in scopes {
        let Some(callee) = scope.strip_prefix("call:") else { continue };
        let Some(seg) = last_segment(callee) else { continue };
        let e = calls.entry((corpus.clone(), *lang, seg.to_string())).or_default();
        e.0 += n;
        e.1 += files;
        *e.2.entry(callee.to_string()).or_default() += n;
    }
    let segs: BTreeSet<(Lang, String)> = calls.keys().map(|(_, l, s)| (*l, s.clone())).collect();
    for (lang, b) in &segs {
        for (lang_a, a) in segs.range((*lang, String::new())..) {
            if lang_a != lang {
                break;
            }
            if !classify::is_variant(*lang, a, b) {
                continue;
            }
            let key =
                FamilyKey { lang: *lang, mechanism: Mechanism::Variant, subject: a.clone(), decoration: b.clone() };
            for ((corpus, l, seg), (n, files, names)) in &calls {
                if l != lang || seg != b {
                    continue;
                }
                let plain = calls.get(&(corpus.clone(), *lang, a.clone())).map(|c| c.0).unwrap_or(0);
                let mut examples = Vec::new();
                for name in names.keys() {
                    if let Some(ex) = call_examples.get(&(*lang, name.clone()))
                        && examples.len() < cfg.max_examples
                    {
                        examples.push(ex.clone());
                    }
                }
                fams.insert(
                    (corpus.clone(), key.clone()),
                    Acc {
                        occurrences: *n,
                        units: plain,
                        files: *files,
                        in_error: 0,
                        values: names.clone(),
                        resolved: BTreeMap::new(),
                        examples,
                    },
                );
            }
        }
    }
}

/// The slug of an id made of `parts`: lowercase ASCII alphanumerics, every
/// other run of characters (and each join) one `-`, trimmed.
pub fn slug(parts: &[&str]) -> String {
    let mut s = String::new();
    for p in parts {
        for c in p.chars() {
            if c.is_ascii_alphanumeric() {
                s.push(c.to_ascii_lowercase());
            } else if !s.ends_with('-') && !s.is_empty() {
                s.push('-');
            }
        }
        if !s.ends_with('-') {
            s.push('-');
        }
    }
    s.trim_matches('-').to_string()
}

/// An idiom's totals over all corpora.
struct Counts {
    occ: u64,
    nfiles: u64,
    ncorpora: u64,
    opp: u64,
    in_error: u64,
}

fn describe(
    key: FamilyKey,
    support: Vec<Support>,
    values: Vec<(String, u64)>,
    resolved: BTreeMap<String, ResolvedValue>,
    examples: Vec<IdiomExample>,
    counts: Counts,
) -> Idiom {
    let Counts { occ, nfiles, ncorpora, opp, in_error } = counts;
    let (s, d) = (key.subject.as_str(), key.decoration.as_str());
    let top = values.first().map(|v| v.0.as_str()).unwrap_or("");
    let (title, before, after) = match crate::shapes::shape(key.mechanism, d) {
        Some(shape) => {
            let vars = crate::shapes::Vars {
                subject: s,
                decoration: d,
                top,
                what: &if s == crate::python::LAUNCH { "kernel launches".to_string() } else { format!("`{s}`") },
                qualifier: if s == crate::cxx::CUDA_GLOBAL { "__global__" } else { "__device__" },
                guard: if is_identifier(top) { top } else { "$G" },
            };
            let render = |t: &str| crate::shapes::render(t, &vars);
            (render(shape.title), render(shape.before), render(shape.after))
        }
        // A variant's templates come from the pair of names.
        None => {
            let b = if top.is_empty() { d.to_string() } else { top.to_string() };
            let a = match b.rsplit_once(d) {
                Some((q, _)) => format!("{q}{s}"),
                None => s.to_string(),
            };
            match exact_variant(key.lang, s, d) {
                // Exact identities are rewritten through `tl.`, Triton's own spelling.
                Some((before, after)) => (format!("`{d}` over `{s}`"), before, after),
                None => (format!("`{d}` over `{s}`"), format!("{a}($$$ARGS)"), format!("{b}($$$ARGS)")),
            }
        }
    };
    let category = classify::usage(&key, &values);
    // A rewrite is offered only where its `after` follows from its `before` and a
    // value most sites hold, and keeps the program's meaning (SPEC §7); the
    // others keep their `after` shape as evidence and get an empty `before`.
    let not_applicable = guidance(&key, category, &before, &after, &values, &resolved);
    let before = if not_applicable.is_some() { String::new() } else { before };
    let adoption = occ as f64 / (occ + opp).max(1) as f64;
    let rationale = format!(
        "{} in {} file{} across {} corp{}; {} site{} lack{} it ({:.0}% adoption).{}",
        plural(occ, "occurrence"),
        nfiles,
        if nfiles == 1 { "" } else { "s" },
        ncorpora,
        if ncorpora == 1 { "us" } else { "ora" },
        opp,
        if opp == 1 { "" } else { "s" },
        if opp == 1 { "s" } else { "" },
        adoption * 100.0,
        if values.len() > 1 { format!(" Values: {}.", top_values(&values)) } else { String::new() },
    );
    let rationale = match not_applicable {
        Some(why) => format!("{rationale} Not rewritten automatically: {why}."),
        None => rationale,
    };
    // Evidence grows with occurrences, files and corpora; what is not an
    // optimization (`dtype=` on `tl.zeros`, uncategorized decorations) weighs half.
    let weight = if category.is_optimization() { 1.0 } else { 0.5 };
    let evidence = (occ as f64).ln_1p() * (1.0 + (nfiles as f64).ln_1p()) * ncorpora as f64 * (0.5 + adoption);
    let score = (evidence * weight * 1000.0).round() / 1000.0;
    let id = slug(&[key.lang.slug(), key.mechanism.name(), s, d]);
    Idiom { id, key, category, title, rationale, before, after, support, values, resolved, examples, in_error, score }
}

/// Variant pairs with an exact identity, as (before, after) templates:
/// `exp(x) = exp2(x * log2(e))` and `log(x) = log2(x) * ln(2)`. A plain
/// rename would change the result, so other pairs are not rewritten.
pub(crate) fn exact_variant(lang: Lang, plain: &str, variant: &str) -> Option<(String, String)> {
    match (lang, plain, variant) {
        (Lang::Python, "exp", "exp2") => Some(("tl.exp($X)".into(), "tl.exp2($X * 1.4426950408889634)".into())),
        (Lang::Python, "log", "log2") => Some(("tl.log($X)".into(), "(tl.log2($X) * 0.6931471805599453)".into())),
        _ => None,
    }
}

pub(crate) fn is_identifier(s: &str) -> bool {
    let mut cs = s.chars();
    cs.next().is_some_and(|c| c.is_alphabetic() || c == '_') && cs.all(|c| c.is_alphanumeric() || c == '_')
}

fn plural(n: u64, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

fn top_values(values: &[(String, u64)]) -> String {
    values.iter().take(4).map(|(v, n)| format!("{v} ({n})")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewritable::{holes, one_of_many};

    #[test]
    fn variant_morphology() {
        use crate::classify::is_variant;
        let py = Lang::Python;
        assert!(is_variant(py, "exp", "exp2"));
        assert!(is_variant(py, "log", "log2"));
        assert!(is_variant(Lang::Cuda, "expf", "__expf"));
        assert!(is_variant(py, "range", "static_range"));
        assert!(is_variant(py, "exp", "safe_exp"));
        assert!(!is_variant(Lang::Cuda, "cast", "static_cast"));
        assert!(!is_variant(py, "exp", "expand"));
        assert!(!is_variant(Lang::Cpp, "scale", "scale4"));
        assert!(!is_variant(Lang::Cuda, "max", "reduce_max"));
        assert!(!is_variant(py, "exp2", "exp22"));
        assert!(!is_variant(py, "load", "load"));
        assert!(!is_variant(py, "_x", "__x"));
    }

    #[test]
    fn classify_examples() {
        assert_eq!(Category::classify("input_precision tl.dot \"ieee\""), Category::Precision);
        assert_eq!(Category::classify("to tl.program_id tl.int64"), Category::Addressing);
        assert_eq!(Category::classify("eviction_policy tl.load"), Category::Memory);
        assert_eq!(Category::classify("exp2 exp"), Category::Math);
        assert_eq!(Category::classify("py::gil_scoped_release binding-fn"), Category::Concurrency);
    }

    #[test]
    fn slugs_are_readable() {
        assert_eq!(slug(&["py", "keyword", "tl.dot", "input_precision"]), "py-keyword-tl-dot-input-precision");
        assert_eq!(
            slug(&["cu", "qualifier", "cuda-global", "__launch_bounds__"]),
            "cu-qualifier-cuda-global-launch-bounds"
        );
    }

    fn py(src: &str) -> FileFacts {
        crate::extract(Lang::Python, src, &Default::default()).expect("parses")
    }

    /// The `tl.dot` `input_precision=` idiom mined from `files` (corpus, path, facts).
    fn dot_idiom(files: &[(&str, &str, &FileFacts)]) -> Idiom {
        let cfg = MineConfig { min_occurrences: 1, min_files: 1, ..Default::default() };
        let inputs = files.iter().map(|(corpus, path, facts)| FileInput {
            corpus,
            revision: "r",
            path,
            lang: Lang::Python,
            facts,
        });
        aggregate(inputs, &cfg)
            .into_iter()
            .find(|i| i.id == "py-keyword-tl-dot-input-precision")
            .expect("the input_precision idiom")
    }

    const KERNEL: &str = "import triton\nimport triton.language as tl\n";

    fn uses(value: &str) -> String {
        format!("{KERNEL}@triton.jit\ndef k(a):\n    tl.dot(a, a, input_precision={value})\n    tl.dot(a, a)\n")
    }

    #[test]
    fn quotes_merge_and_counts_add_up() {
        let a = py(&format!("{}    tl.dot(a, a, input_precision='ieee')\n", uses("'ieee'")));
        let b = py(&uses("\"ieee\""));
        let c = py(&uses("'tf32'"));
        let i = dot_idiom(&[("x", "a.py", &a), ("x", "b.py", &b), ("y", "c.py", &c)]);
        assert_eq!(i.values, [("\"ieee\"".to_string(), 3), ("\"tf32\"".to_string(), 1)]);
        assert!(i.rationale.contains("\"ieee\" (3)"), "{}", i.rationale);
    }

    #[test]
    fn an_imported_name_resolves_within_its_corpus_only() {
        let consts = py(&format!("{KERNEL}PREC = tl.constexpr('ieee' if ON_NPU else 'tf32x3')\n"));
        let k_rel = py(&format!("from .consts import PREC\n{}", uses("PREC")));
        let k_abs = py(&format!("from pkg.consts import PREC as P\n{}", uses("P")));
        let i = dot_idiom(&[
            ("x", "src/pkg/consts.py", &consts),
            ("x", "src/pkg/k.py", &k_rel),
            ("x", "src/pkg/m.py", &k_abs),
        ]);
        let want = ResolvedValue {
            expr: "\"ieee\" if ON_NPU else \"tf32x3\"".into(),
            literals: vec!["\"ieee\"".into(), "\"tf32x3\"".into()],
        };
        assert_eq!(i.resolved.get("PREC"), Some(&want));
        assert_eq!(i.resolved.get("P"), Some(&want));

        // The same module in another corpus is not used.
        let i = dot_idiom(&[("other", "src/pkg/consts.py", &consts), ("x", "src/pkg/k.py", &k_rel)]);
        assert_eq!(i.values, [("PREC".to_string(), 1)]);
        assert!(i.resolved.is_empty(), "{:?}", i.resolved);
    }

    #[test]
    fn a_name_found_nowhere_stays_unresolved() {
        let k = py(&format!("from pkg.consts import MISSING\n{}", uses("MISSING")));
        let other = py(&format!("{}    tl.dot(a, a, input_precision=NOWHERE)\n", uses("LOCAL")));
        let i = dot_idiom(&[("x", "k.py", &k), ("x", "o.py", &other)]);
        assert_eq!(i.values.len(), 3);
        assert!(i.resolved.is_empty(), "{:?}", i.resolved);
    }

    #[test]
    fn a_name_bound_differently_in_two_files_shows_both_most_sites_first() {
        let a = py(&format!(
            "{KERNEL}P = 'ieee'\n@triton.jit\ndef k(a):\n    tl.dot(a, a, input_precision=P)\n    tl.dot(a, a, input_precision=P)\n"
        ));
        let b = py(&format!("P = 'tf32'\n{}", uses("P")));
        let i = dot_idiom(&[("x", "b.py", &b), ("x", "a.py", &a)]);
        let r = i.resolved.get("P").expect("resolved");
        assert_eq!(r.expr, "\"ieee\" | \"tf32\"");
        assert_eq!(r.literals, ["\"ieee\"", "\"tf32\""]);
        // Conditionals among alternatives are parenthesized.
        let c = py(&format!("P = 'bf16x3' if X else 'tf32'\n{}", uses("P")));
        let i = dot_idiom(&[("x", "a.py", &a), ("x", "c.py", &c)]);
        assert_eq!(i.resolved["P"].expr, "\"ieee\" | (\"bf16x3\" if X else \"tf32\")");
        assert_eq!(i.resolved["P"].literals, ["\"ieee\"", "\"bf16x3\"", "\"tf32\""]);
    }

    /// The idioms of one file of `lang`, mined with every threshold at one.
    fn mined(lang: Lang, src: &str) -> Vec<Idiom> {
        let facts = crate::extract(lang, src, &Default::default()).expect("parses");
        let cfg = MineConfig { min_occurrences: 1, min_files: 1, ..Default::default() };
        aggregate([FileInput { corpus: "c", revision: "r", path: "k", lang, facts: &facts }], &cfg)
    }

    /// Why `id` is guidance only (`None`: it has a rewrite).
    fn why<'a>(idioms: &'a [Idiom], id: &str) -> Option<&'a str> {
        let i = idioms.iter().find(|i| i.id == id).unwrap_or_else(|| panic!("no {id} in {idioms:#?}"));
        let why = i.rationale.split_once("Not rewritten automatically: ").map(|w| w.1);
        assert_eq!(i.before.is_empty(), why.is_some(), "{id}: {i:#?}");
        why
    }

    #[test]
    fn launch_options_are_rewrites_of_a_launch_and_other_launch_keywords_are_not() {
        let src = format!(
            "{KERNEL}@triton.jit
def k(x, B: tl.constexpr):
    pass

def launch(x):
    k[(1,)](x, B=16, num_warps=8, num_stages=2)
    k[(2,)](x, B=16, num_warps=8, num_ctas=2)
    k[(3,)](x, B=32)
    k[(4,)](x, B=32, num_warps=2)
    k[(5,)](x, B=32, num_warps=1)
"
        );
        let py = mined(Lang::Python, &src);
        // no value holds at more than half the sites: a tuning knob is a rewrite all the same
        assert_eq!(why(&py, "py-keyword-kernel-grid-num-warps"), None);
        assert_eq!(why(&py, "py-keyword-kernel-grid-num-stages"), None);
        let warps = py.iter().find(|i| i.id == "py-keyword-kernel-grid-num-warps").expect("num_warps");
        assert_eq!(
            (warps.before.as_str(), warps.after.as_str()),
            ("$KERNEL[$GRID]($$$ARGS)", "$KERNEL[$GRID]($$$ARGS, num_warps=$V)")
        );
        assert!(
            why(&py, "py-keyword-kernel-grid-num-ctas").is_some_and(|w| w.contains("outside the launch configuration")),
            "{py:#?}"
        );
        // a constexpr is the kernel's argument, not a launch keyword
        assert!(py.iter().all(|i| i.id != "py-keyword-kernel-grid-b"));
    }

    #[test]
    fn rewritability_follows_from_the_templates_and_the_histogram() {
        let src = format!(
            "{KERNEL}PREC = 'ieee'
@triton.autotune(configs=[], key=['N'])
@triton.jit
def k(x, y, N: tl.constexpr, M):
    i = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    a = tl.load(x + i, mask=i < N, other=0.0)
    b = tl.load(x + j)
    a1 = tl.load(x, eviction_policy='evict_first')
    a2 = tl.load(x, eviction_policy='evict_last')
    a3 = tl.load(x, eviction_policy=POLICY)
    a4 = tl.load(x, eviction_policy=POLICY, cache_modifier=CM)
    tl.atomic_add(y, a, sem='relaxed')
    tl.atomic_add(y, b)
    c = tl.dot(a, b, input_precision=PREC)
    d = tl.dot(a, b)
    for t in tl.static_range(4):
        e = tl.sum(a, axis=0) + tl.sum(b) + safe_exp(a) + tl.exp(b)
    for t in tl.range(0, 4):
        pass
    z = tl.cast(a, tl.float16, fp_downcast_rounding='rtne') + tl.cast(b, tl.float16)
    w = a.to(tl.float16, hint=1) + b.to(tl.float16)
@triton.jit
def k2(x):
    pass
"
        );
        let py = mined(Lang::Python, &src);
        // Rewrites: a value most sites hold (a name counts for the literal it is bound to),
        // a library sibling.
        assert_eq!(why(&py, "py-method-wrap-tl-program-id-to"), None);
        assert_eq!(why(&py, "py-keyword-tl-dot-input-precision"), None);
        assert_eq!(why(&py, "py-variant-range-static-range"), None);
        // Plain API usage: part of what the call computes.
        for id in ["py-keyword-tl-load-mask", "py-keyword-tl-load-other", "py-keyword-tl-sum-axis"] {
            assert!(why(&py, id).is_some_and(|w| w.contains("part of what the code computes")), "{id}");
        }
        assert!(why(&py, "py-keyword-tl-load-mask").is_some_and(|w| w.contains("which elements are accessed")));
        // A weaker memory order changes what is guaranteed.
        assert!(why(&py, "py-keyword-tl-atomic-add-sem").is_some_and(|w| w.contains("a weaker ordering")));
        assert!(why(&py, "py-keyword-tl-cast-fp-downcast-rounding").is_some_and(|w| w.contains("narrowing")));
        assert!(why(&py, "py-keyword-to-hint").is_some_and(|w| w.contains("method of any receiver")));
        // Values: none writable; or none that most sites hold.
        assert!(why(&py, "py-keyword-tl-load-cache-modifier").is_some_and(|w| w.contains("no value")));
        assert!(why(&py, "py-keyword-tl-load-eviction-policy").is_some_and(|w| w.contains("1 of 4 sites")));
        // Arguments chosen per kernel; one parameter among many; a sibling of the corpus's own.
        assert!(why(&py, "py-decorator-triton-kernel-triton-autotune").is_some_and(|w| w.contains("arguments")));
        assert!(why(&py, "py-annotation-triton-param-tl-constexpr").is_some_and(|w| w.contains("one element")));
        assert!(why(&py, "py-variant-exp-safe-exp").is_some_and(|w| w.contains("`safe_exp` is defined in its corpus")));

        let cu = mined(
            Lang::Cuda,
            "__device__ __forceinline__ float f(float x) { return x; }
__device__ float g(float x) { return x; }
__global__ void k(float* __restrict__ a, float* b, int n) {
    #pragma unroll
    for (int i = 0; i < 4; i++) { a[i] = b[i]; }
    for (int i = 0; i < n; i++) { a[i] = __expf(b[i]) + expf(b[i]); __syncthreads(); }
}
__global__ void h(float* a) { a[0] = 0; }
",
        );
        // Token and line prefixes; a toolkit sibling.
        assert_eq!(why(&cu, "cu-qualifier-cuda-device-forceinline"), None);
        assert_eq!(why(&cu, "cu-pragma-loop-unroll"), None);
        assert_eq!(why(&cu, "cu-variant-expf-expf"), None);
        // An assertion kidiom cannot check; a construct of its own.
        assert!(why(&cu, "cu-param-qualifier-pointer-param-restrict").is_some_and(|w| w.contains("no other pointer")));
        assert!(why(&cu, "cu-intrinsic-kernel-syncthreads").is_some_and(|w| w.contains("construct of its own")));
    }

    #[test]
    fn optimizations_come_first_and_plain_api_weighs_half() {
        let src = format!(
            "{KERNEL}@triton.jit\ndef k(x):\n    i = tl.program_id(0).to(tl.int64)\n    j = tl.program_id(1)\n{}",
            "    a = tl.load(x, mask=m)\n    a = tl.load(x, mask=m)\n    a = tl.load(x, mask=m)\n    b = tl.load(x)\n"
        );
        let idioms = mined(Lang::Python, &src);
        let ranks: Vec<u8> = idioms.iter().map(|i| i.category.rank()).collect();
        assert!(ranks.windows(2).all(|w| w[0] <= w[1]), "{ranks:?}");
        let mask = idioms.iter().find(|i| i.id == "py-keyword-tl-load-mask").expect("mask");
        let to = idioms.iter().find(|i| i.id == "py-method-wrap-tl-program-id-to").expect("to");
        assert_eq!((mask.category, to.category), (Category::Api, Category::Addressing));
        assert!(mask.occurrences() > to.occurrences());
        assert!(idioms.iter().position(|i| i.id == to.id) < idioms.iter().position(|i| i.id == mask.id));
    }

    #[test]
    fn the_supported_value_counts_what_names_hold() {
        use kidiom_rewriter::{supported_value, writable_value};
        let lits = |ls: &[&str]| ls.iter().map(|l| l.to_string()).collect::<Vec<_>>();
        let (a, b) = (lits(&["\"tf32\"", "\"ieee\""]), lits(&[]));
        let bars = [("P", 5, a.as_slice()), ("\"ieee\"", 2, b.as_slice()), ("LOCAL", 3, b.as_slice())];
        let s = supported_value(Lang::Python, bars).expect("a value");
        assert_eq!((s.value.as_str(), s.sites, s.total), ("\"ieee\"", 7, 10));
        // Ties go to the first seen; nothing writable is nothing.
        let bars = [("\"a\"", 1, b.as_slice()), ("\"b\"", 1, b.as_slice())];
        assert_eq!(supported_value(Lang::Python, bars).map(|s| s.value), Some("\"a\"".to_string()));
        assert_eq!(supported_value(Lang::Python, [("LOCAL", 3, b.as_slice())]), None);
        assert!(writable_value(Lang::Python, "tl.int64") && !writable_value(Lang::Python, "b_k.dtype"));
        assert!(writable_value(Lang::Cuda, "128") && !writable_value(Lang::Cuda, "1024, 1"));
        // Template holes and list positions.
        assert_eq!(holes("tl.dot($$$ARGS, input_precision=$V)").into_iter().collect::<Vec<_>>(), ["$$$ARGS", "$V"]);
        assert!(one_of_many("def $F($$$A, $P, $$$B)"));
        assert!(!one_of_many("tl.dot($$$ARGS)") && !one_of_many("f($$$A, x, $$$B)"));
    }
}
