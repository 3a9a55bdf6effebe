//! Naming a rule: the words its change removes and adds give its id and,
//! with its commits' messages, its category; its templates give its title.

use std::collections::{BTreeMap, BTreeSet};

use kidiom_syntax::Lang;

use super::CommitMeta;
use super::antiunify::Ex;
use super::tree::Tree;
use crate::classify::KeywordChange;
use crate::idiom::Category;

/// Collapses whitespace runs (newlines included) to one space.
pub(super) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// [`one_line`], cut to `n` characters with an ellipsis.
pub(super) fn short(s: &str, n: usize) -> String {
    let s = one_line(s);
    if s.chars().count() <= n { s } else { format!("{}...", s.chars().take(n).collect::<String>()) }
}

fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
        .filter(|w| !w.is_empty() && !w.starts_with('$'))
        .map(str::to_string)
        .collect()
}

/// The words the change removes and adds.
pub(super) struct Change {
    removed: Vec<String>,
    added: Vec<String>,
    context: Vec<String>,
}

/// The words `before` loses and `after` gains (holes left out), and the
/// first two words they keep.
pub(super) fn change_words(before: &str, after: &str) -> Change {
    let (b, a) = (words(before), words(after));
    let mut count: BTreeMap<&str, i64> = BTreeMap::new();
    for w in &b {
        *count.entry(w).or_default() -= 1;
    }
    for w in &a {
        *count.entry(w).or_default() += 1;
    }
    let removed: Vec<String> =
        b.iter().filter(|w| count.get(w.as_str()).is_some_and(|c| *c < 0)).cloned().collect::<Vec<_>>();
    let added: Vec<String> = a.iter().filter(|w| count.get(w.as_str()).is_some_and(|c| *c > 0)).cloned().collect();
    let context = b.iter().filter(|w| !removed.contains(w)).take(2).cloned().collect();
    Change { removed: dedup(removed), added: dedup(added), context }
}

fn dedup(v: Vec<String>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    v.into_iter().filter(|w| seen.insert(w.clone())).collect()
}

/// The category of an edit rule: from the words its change removes and
/// adds, where it is anchored, the keyword arguments of Triton calls its
/// example changes, and its commits' messages (the classifier shared with
/// usage idioms, `crate::classify::edit`).
pub(super) fn categorize(change: &Change, keywords: &KeywordChange, commits: &[CommitMeta]) -> Category {
    crate::classify::edit(
        &change.removed,
        &change.added,
        &change.context,
        keywords,
        commits.iter().map(|m| m.summary.as_str()),
    )
}

/// The keyword arguments of Triton's own calls (a callee spelled `tl.*` or
/// `triton.*`) in one side of an edit: name and value text, in order. A
/// keyword of a kernel launch or of a helper is the author's own parameter,
/// not Triton's, and is left out.
fn triton_keywords<'s>(t: &Tree<'s>) -> Vec<(&'s str, String)> {
    let mut out = Vec::new();
    for n in 0..t.nodes.len() as u32 {
        let Some(name) = t.kw_name(n) else { continue };
        // keyword_argument -> argument_list -> call, whose first child is the callee.
        let call = t.nodes[n as usize].parent;
        let call = if call == super::tree::NONE { call } else { t.nodes[call as usize].parent };
        if call == super::tree::NONE || t.nodes[call as usize].nkids == 0 {
            continue;
        }
        let callee = t.text(call + 1);
        let head = callee.split('.').next().unwrap_or("");
        if !matches!(head, "tl" | "triton") || !callee.contains('.') {
            continue;
        }
        let value = t.kids(n).get(2).map(|&v| one_line(t.text(v))).unwrap_or_default();
        out.push((name, value));
    }
    out
}

/// What an edit example does to the keyword arguments of Triton's calls:
/// added, removed, and kept with other values.
pub(super) fn keyword_change(ex: &Ex<'_>) -> KeywordChange {
    let (b, a) = (triton_keywords(&ex.before), triton_keywords(&ex.after));
    let names: BTreeSet<&str> = b.iter().chain(&a).map(|(n, _)| *n).collect();
    let mut out = KeywordChange::default();
    for name in names {
        let vals = |side: &[(&str, String)]| -> Vec<String> {
            side.iter().filter(|(n, _)| *n == name).map(|(_, v)| v.clone()).collect()
        };
        let (vb, va) = (vals(&b), vals(&a));
        if va.len() > vb.len() {
            out.added.push(name.to_string());
        } else if va.len() < vb.len() {
            out.removed.push(name.to_string());
        } else if va != vb {
            out.changed.push(name.to_string());
        }
    }
    out
}

fn slug(words: &[String], max: usize) -> String {
    let s: Vec<String> = words
        .iter()
        .map(|w| {
            let w: String = w.to_ascii_lowercase().chars().map(|c| if c == '_' { '-' } else { c }).collect();
            w.chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect::<String>()
                .trim_matches('-')
                .to_string()
        })
        .filter(|w| !w.is_empty())
        .take(max)
        .collect();
    s.join("-")
}

/// A readable id: language, context words, and what is removed and added
/// (`py-edit-tl-exp-to-exp2`).
pub(super) fn make_id(lang: Lang, _before: &str, change: &Change) -> String {
    let mut parts = vec![lang.slug().to_string(), "edit".to_string()];
    let ctx = slug(&change.context, 2);
    if !ctx.is_empty() {
        parts.push(ctx);
    }
    match (change.removed.is_empty(), change.added.is_empty()) {
        (false, false) => {
            parts.push(slug(&change.removed, 3));
            parts.push("to".into());
            parts.push(slug(&change.added, 4));
        }
        (true, false) => {
            parts.push("add".into());
            parts.push(slug(&change.added, 4));
        }
        (false, true) => {
            parts.push("drop".into());
            parts.push(slug(&change.removed, 4));
        }
        (true, true) => parts.push("reshape".into()),
    }
    let mut id = parts.into_iter().filter(|p| !p.is_empty()).collect::<Vec<_>>().join("-");
    id.truncate(80);
    id.trim_end_matches('-').to_string()
}

/// `base`, or `base-2`, `base-3`, ... when taken; records the one returned.
pub(super) fn unique_id(ids: &mut BTreeSet<String>, base: &str) -> String {
    let mut id = base.to_string();
    let mut n = 2;
    while ids.contains(&id) {
        id = format!("{base}-{n}");
        n += 1;
    }
    ids.insert(id.clone());
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_name_the_change() {
        let c = change_words("tl.exp($A)", "tl.exp2($A)");
        assert_eq!(make_id(Lang::Python, "", &c), "py-edit-tl-exp-to-exp2");
        let c = change_words("tl.dot($A, $B)", "tl.dot($A, $B, input_precision=\"ieee\")");
        assert_eq!(make_id(Lang::Python, "", &c), "py-edit-tl-dot-add-input-precision-ieee");
        assert_eq!(categorize(&c, &KeywordChange::default(), &[]), Category::Precision);
        let mut ids = BTreeSet::new();
        assert_eq!(unique_id(&mut ids, "a"), "a");
        assert_eq!(unique_id(&mut ids, "a"), "a-2");
        assert_eq!(short("a\n  b", 10), "a b");
        assert_eq!(short("abcdef", 3), "abc...");
    }
}
