//! Whether a usage idiom is offered as a rewrite or kept as guidance,
//! derived from the idiom itself: its category, what its decoration
//! asserts, the holes its `after` adds, and the values its sites hold.

use std::collections::{BTreeMap, BTreeSet};

use kidiom_rewriter::supported_value;
use kidiom_syntax::{LAUNCH_OPTIONS, Lang};

use crate::classify::{self, Category};
use crate::facts::{FamilyKey, Mechanism};
use crate::idiom::{exact_variant, is_identifier};
use crate::values::ResolvedValue;

/// Why the idiom is guidance only, or `None` when a rewrite is offered.
/// Derived from the idiom itself, never from a list of idioms: its
/// category, what its decoration asserts, the holes its `after` adds to its
/// `before`, and whether its value histogram supports a value that can be
/// written at any site. Precision keywords are rewrites by design: they
/// change rounding, are category `precision`, and the validator gates them.
pub(crate) fn guidance(
    key: &FamilyKey,
    category: Category,
    before: &str,
    after: &str,
    values: &[(String, u64)],
    resolved: &BTreeMap<String, ResolvedValue>,
) -> Option<String> {
    let (s, d) = (key.subject.as_str(), key.decoration.as_str());
    if before.is_empty() {
        return Some(
            "it is a construct of its own, not a decoration of one: where it belongs is a design decision".into(),
        );
    }
    // A launch's configuration is the one thing a rewrite may change in host
    // code: its launch options, its grid and its constexpr block sizes (the
    // latter are kernel parameters, never mined as launch keywords).
    if key.mechanism == Mechanism::Keyword && s == crate::python::LAUNCH && !LAUNCH_OPTIONS.contains(&d) {
        return Some(format!(
            "`{d}=` is a launch option outside the launch configuration a rewrite may change in host code ({})",
            LAUNCH_OPTIONS.iter().map(|o| format!("`{o}=`")).collect::<Vec<_>>().join(", ")
        ));
    }
    let role = (key.mechanism == Mechanism::Keyword).then(|| classify::keyword_role(d)).flatten();
    if category == Category::Api {
        let what = match (role, key.mechanism) {
            (Some(r), _) => r.what,
            (None, Mechanism::MethodWrap) if d == "to" => "its target type follows from the operand",
            (None, Mechanism::MethodWrap) => "the method computes a value of its own",
            (None, Mechanism::Annotation) => "the parameter's type",
            _ => "its value follows from the site",
        };
        return Some(format!("`{d}` is part of what the code computes ({what}), so it is the author's to write"));
    }
    if let Some(caveat) = role.and_then(|r| r.caveat) {
        return Some(format!("`{d}=` sets {}: {caveat}", role.map_or("", |r| r.what)));
    }
    if let Some(a) = classify::assertion(d) {
        return Some(format!("{a}, which kidiom cannot check at a site"));
    }
    if s.starts_with('.') {
        return Some(format!("`{s}` is a method of any receiver, which a template cannot name"));
    }
    let top = values.first().map(|v| v.0.as_str()).unwrap_or("");
    if key.mechanism == Mechanism::Guard && !is_identifier(top) {
        return Some("the guard is constructed from its function's own values".into());
    }
    if key.mechanism == Mechanism::Variant && exact_variant(key.lang, s, d).is_none() && !library_name(key.lang, top) {
        return Some(format!("`{top}` is defined in its corpus, not in the language or its library"));
    }
    if one_of_many(before) {
        return Some("it applies to one element of a list (a parameter), and which one is the author's choice".into());
    }
    let have = holes(before);
    let fresh: Vec<String> = holes(after).into_iter().filter(|h| !have.contains(h)).collect();
    if fresh.iter().any(|h| h.starts_with("$$$")) {
        return Some(format!("`{d}` takes arguments chosen per site (configurations, keys)"));
    }
    if fresh.is_empty() {
        return None;
    }
    let tuning = key.mechanism == Mechanism::Keyword && s == crate::python::LAUNCH && LAUNCH_OPTIONS.contains(&d);
    let no_literals: Vec<String> = Vec::new();
    let bars =
        values.iter().map(|(v, n)| (v.as_str(), *n, resolved.get(v).map_or(&no_literals, |r| &r.literals).as_slice()));
    match supported_value(key.lang, bars) {
        None => Some(format!(
            "no value in its histogram can be written at every site ({}: neither literals nor library names)",
            values.iter().take(3).map(|v| format!("`{}`", v.0)).collect::<Vec<_>>().join(", ")
        )),
        // a launch option is a tuning knob: its value is the GPU's to choose, so every value
        // upstream writes is proposed (`kidiom apply`), not only one most sites agree on
        Some(v) if v.sites * 2 <= v.total && !tuning => Some(format!(
            "its value depends on the site: {}, the most common value that can be written, holds at {} of {} sites",
            v.value, v.sites, v.total
        )),
        Some(_) => None,
    }
}

/// The holes of a template (`$V`, `$$$ARGS`), each with its `$`s.
pub(crate) fn holes(t: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = t;
    while let Some(i) = rest.find('$') {
        let tail = &rest[i..];
        let dollars = tail.len() - tail.trim_start_matches('$').len();
        let name: String =
            tail[dollars..].chars().take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_').collect();
        if !name.is_empty() {
            out.insert(format!("{}{name}", &tail[..dollars]));
        }
        rest = &tail[dollars + name.len()..];
    }
    out
}

/// `before` picks one element out of a list with any neighbours
/// (`def $F($$$A, $P, $$$B)`): every element is a site, so where the
/// decoration belongs is not decided by the template.
pub(crate) fn one_of_many(before: &str) -> bool {
    let name = |n: &str| !n.is_empty() && n.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    let ends_in_sequence = |p: &str| p.rfind("$$$").is_some_and(|i| name(&p[i + 3..]));
    let single = |p: &str| p.strip_prefix('$').is_some_and(name);
    let parts: Vec<&str> = before.split(',').map(str::trim).collect();
    parts.windows(3).any(|w| ends_in_sequence(w[0]) && single(w[1]) && w[2].starts_with("$$$"))
}

/// A function name that exists wherever the code is compiled: Triton's
/// (`tl.static_range`) or, in C and C++, one reserved to the implementation
/// (`__expf`).
fn library_name(lang: Lang, name: &str) -> bool {
    match lang {
        Lang::Python => name.starts_with("tl.") || name.starts_with("triton."),
        Lang::Cuda | Lang::Cpp => name.starts_with("__"),
        Lang::Rust => false,
    }
}
