//! Rules that differ only in the names they bind are one rule.
//!
//! Specialization and clustering can leave several rules whose templates
//! are the same change spelled with other local names (`exp(b_g)` ->
//! `exp2(b_g)` and `exp(b_gn)` -> `exp2(b_gn)`; `i_n = tl.program_id(0)` ->
//! `i_n = tl.program_id(0).to(tl.int64)` and the same with `i_bh`). Such
//! rules are one idea: they become one rule whose differing names are a
//! hole, with the union of their support, commits, values and examples.
//!
//! A name counts as bound (a local or a parameter, which a rewrite keeps
//! as it finds it) when it is an identifier that is not a callee (`exp(`),
//! not an attribute or a module (`tl.`, `.dtype`), not a keyword argument's
//! name, not a Python keyword or constant, and appears on both sides of the
//! change (the same renaming on both sides). Everything else must be equal
//! token for token: `exp(x)` -> `exp2(x)` and `log(x)` -> `log2(x)` stay
//! two rules.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::naming::short;
use super::rules::score;
use super::{CommitMeta, Rule};
use crate::idiom::Support;

/// One token of a template, with its byte range.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Tok<'s> {
    text: &'s str,
    start: usize,
    ident: bool,
}

/// Splits a template into identifiers, holes, strings, numbers, comments
/// and single punctuation characters; whitespace is dropped.
fn lex(s: &str) -> Vec<Tok<'_>> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let ident = if c == b'$' || word(c) {
            i += 1;
            while i < b.len() && (word(b[i]) || (b[start] == b'$' && b[i] == b'$')) {
                i += 1;
            }
            c != b'$' && !c.is_ascii_digit()
        } else if c == b'"' || c == b'\'' {
            i += 1;
            while i < b.len() && b[i] != c {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
            false
        } else if c == b'#' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            false
        } else {
            i += 1;
            while i < b.len() && !s.is_char_boundary(i) {
                i += 1;
            }
            false
        };
        out.push(Tok { text: &s[start..i], start, ident });
    }
    out
}

/// Python words that are never bound names.
const RESERVED: &[&str] = &[
    "None", "True", "False", "and", "or", "not", "in", "is", "if", "else", "elif", "for", "while", "return", "def",
    "lambda", "import", "from", "as", "with", "pass", "break", "continue", "yield", "class", "global", "nonlocal",
    "assert", "del", "raise", "try", "except", "finally", "await", "async", "self",
];

/// Whether token `i` of `toks` may be a bound name.
fn bindable(toks: &[Tok<'_>], i: usize) -> bool {
    let t = &toks[i];
    if !t.ident || RESERVED.contains(&t.text) {
        return false;
    }
    let prev = i.checked_sub(1).map(|j| toks[j].text);
    let next = toks.get(i + 1).map(|t| t.text);
    let next2 = toks.get(i + 2).map(|t| t.text);
    // Callees, attributes and modules, keyword names (`f(name=`, not `name ==` or `x = `).
    let keyword = matches!(prev, Some("(" | ",")) && next == Some("=") && next2 != Some("=");
    !(prev == Some(".") || next == Some("(") || next == Some(".") || keyword)
}

/// A rule's shape with its bound names numbered: the key rules that
/// differ only in those names share, and the names (in key order).
fn shape(rule: &Rule) -> (String, Vec<String>) {
    let (b, a) = (lex(&rule.before), lex(&rule.after));
    let names = |ts: &[Tok<'_>]| -> BTreeSet<String> {
        (0..ts.len()).filter(|&i| bindable(ts, i)).map(|i| ts[i].text.to_string()).collect()
    };
    let (nb, na) = (names(&b), names(&a));
    let both: BTreeSet<&String> = nb.intersection(&na).collect();
    let mut order: Vec<String> = Vec::new();
    let mut key = String::new();
    for (side, ts) in [("B", &b), ("A", &a)] {
        key.push_str(side);
        for (i, t) in ts.iter().enumerate() {
            key.push('\u{1f}');
            if bindable(ts, i) && both.contains(&t.text.to_string()) {
                let n = order.iter().position(|o| o == t.text).unwrap_or_else(|| {
                    order.push(t.text.to_string());
                    order.len() - 1
                });
                key.push_str(&format!("\u{1}{n}"));
            } else {
                key.push_str(t.text);
            }
        }
    }
    (key, order)
}

/// The template `s` with bound names renamed: each name in `holes` becomes
/// its hole, in the positions where [`shape`] numbered it.
fn rewrite_names(s: &str, holes: &HashMap<String, String>, both: &BTreeSet<String>) -> String {
    let ts = lex(s);
    let mut out = String::with_capacity(s.len());
    let mut at = 0;
    for (i, t) in ts.iter().enumerate() {
        if !bindable(&ts, i) || !both.contains(t.text) {
            continue;
        }
        if let Some(h) = holes.get(t.text) {
            out.push_str(&s[at..t.start]);
            out.push_str(h);
            at = t.start + t.text.len();
        }
    }
    out.push_str(&s[at..]);
    out
}

/// A hole name neither template uses.
fn fresh_holes(rule: &Rule, n: usize) -> Vec<String> {
    let used: BTreeSet<String> = lex(&rule.before)
        .into_iter()
        .chain(lex(&rule.after))
        .filter(|t| t.text.starts_with('$'))
        .map(|t| t.text.trim_start_matches('$').to_string())
        .collect();
    let mut out = Vec::new();
    let letters = (b'A'..=b'Z').map(|c| (c as char).to_string());
    for name in letters.chain((1..).map(|k| format!("N{k}"))) {
        if out.len() == n {
            break;
        }
        if !used.contains(&name) {
            out.push(format!("${name}"));
        }
    }
    out
}

/// Merges the rules that differ only in the names they bind; the first of
/// each group in `rules`' order (the best scored) gives the merged rule its
/// id. Returns the rules in their order, and how many were merged away.
pub(super) fn merge_renamed(rules: Vec<Rule>) -> (Vec<Rule>, u64) {
    let mut groups: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    let shapes: Vec<(String, Vec<String>)> = rules.iter().map(shape).collect();
    for (i, (key, _)) in shapes.iter().enumerate() {
        groups.entry((rules[i].lang.slug().to_string(), key.clone())).or_default().push(i);
    }
    let mut into: Vec<Option<usize>> = vec![None; rules.len()];
    for members in groups.values() {
        for &m in &members[1..] {
            into[m] = Some(members[0]);
        }
    }
    let merged_away = into.iter().filter(|m| m.is_some()).count() as u64;
    if merged_away == 0 {
        return (rules, 0);
    }
    let mut slots: Vec<Option<Rule>> = rules.into_iter().map(Some).collect();
    let mut out = Vec::new();
    for i in 0..slots.len() {
        if into[i].is_some() {
            continue;
        }
        let Some(first) = slots[i].take() else { continue };
        let others: Vec<Rule> =
            (i + 1..slots.len()).filter(|&j| into[j] == Some(i)).filter_map(|j| slots[j].take()).collect();
        if others.is_empty() {
            out.push(first);
            continue;
        }
        let names: Vec<&Vec<String>> = std::iter::once(&shapes[i].1)
            .chain((i + 1..shapes.len()).filter(|&j| into[j] == Some(i)).map(|j| &shapes[j].1))
            .collect();
        out.push(merge(first, others, &names));
    }
    (out, merged_away)
}

/// One rule from `first` and `others`, whose bound names (in key order)
/// are `names` (`first`'s first): the names they do not all share become holes.
fn merge(first: Rule, others: Vec<Rule>, names: &[&Vec<String>]) -> Rule {
    let differ: Vec<usize> =
        (0..names[0].len()).filter(|&k| names.iter().any(|n| n.get(k) != names[0].get(k))).collect();
    let fresh = fresh_holes(&first, differ.len());
    let holes: HashMap<String, String> = differ.iter().zip(fresh).map(|(&k, h)| (names[0][k].clone(), h)).collect();
    let both: BTreeSet<String> = names[0].iter().cloned().collect();
    let before = rewrite_names(&first.before, &holes, &both);
    let after = rewrite_names(&first.after, &holes, &both);
    let mut spellings: BTreeSet<String> = BTreeSet::new();
    for n in names {
        for &k in &differ {
            if let Some(v) = n.get(k) {
                spellings.insert(v.clone());
            }
        }
    }
    let mut rule = first;
    let count = others.len();
    for o in others {
        absorb(&mut rule, o);
    }
    let commits: BTreeMap<(i64, String), CommitMeta> =
        rule.commits.drain(..).map(|c| ((c.time, c.id.clone()), c)).collect();
    rule.commits = commits.into_values().collect();
    rule.before = before;
    rule.after = after;
    rule.title = format!("`{}` -> `{}`", short(&rule.before, 50), short(&rule.after, 60));
    rule.score = score(&rule.commits, &rule.support, &rule.safety);
    let listed: Vec<&str> = spellings.iter().map(String::as_str).take(8).collect();
    let note = format!(
        " Merged with {count} rule(s) that make the same change with other names ({}): the names are a hole; \
         {} commits in all.",
        listed.join(", "),
        rule.commits.len()
    );
    if rule.rationale.len() + note.len() <= 2400 {
        rule.rationale.push_str(&note);
    }
    rule
}

/// Adds `o`'s support, values, examples, commits and replay counts to `r`.
fn absorb(r: &mut Rule, o: Rule) {
    for s in o.support {
        match r.support.iter_mut().find(|x| x.corpus == s.corpus && x.revision == s.revision) {
            Some(x) => add_support(x, &s),
            None => r.support.push(s),
        }
    }
    let mut values: BTreeMap<String, u64> = r.values.drain(..).collect();
    for (v, n) in o.values {
        *values.entry(v).or_default() += n;
    }
    let mut values: Vec<(String, u64)> = values.into_iter().collect();
    values.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    values.truncate(12);
    r.values = values;
    let seen: BTreeSet<(String, String, u32)> =
        r.examples.iter().map(|e| (e.corpus.clone(), e.path.clone(), e.line)).collect();
    for e in o.examples {
        if r.examples.len() < 5 && !seen.contains(&(e.corpus.clone(), e.path.clone(), e.line)) {
            r.examples.push(e);
        }
    }
    r.commits.extend(o.commits);
    let (s, t) = (&mut r.safety, o.safety);
    s.true_edits += t.true_edits;
    s.false_edits += t.false_edits;
    s.missed_edits += t.missed_edits;
    s.validated += t.validated;
    s.specialized |= t.specialized;
}

fn add_support(x: &mut Support, s: &Support) {
    x.occurrences += s.occurrences;
    x.files += s.files;
    x.opportunities += s.opportunities;
}

/// The commits of `rules`, for tests.
#[cfg(test)]
fn commit_ids(r: &Rule) -> Vec<&str> {
    r.commits.iter().map(|c: &CommitMeta| c.id.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idiom::{Category, IdiomExample};
    use kidiom_syntax::Lang;

    fn rule(id: &str, before: &str, after: &str, commits: &[&str]) -> Rule {
        Rule {
            id: id.into(),
            lang: Lang::Python,
            category: Category::Math,
            title: String::new(),
            rationale: "Made by hand.".into(),
            before: before.into(),
            after: after.into(),
            support: vec![Support {
                corpus: "fla".into(),
                revision: "r".into(),
                occurrences: commits.len() as u64,
                files: 1,
                opportunities: 2,
            }],
            values: Vec::new(),
            examples: vec![IdiomExample {
                corpus: "fla".into(),
                path: format!("{id}.py"),
                line: 3,
                snippet: "x".into(),
            }],
            commits: commits
                .iter()
                .map(|c| CommitMeta {
                    id: c.to_string(),
                    summary: "s".into(),
                    date: String::new(),
                    // the same commit, the same time, whichever rule names it
                    time: c.trim_start_matches('c').parse().unwrap_or(0),
                    tags: Vec::new(),
                })
                .collect(),
            score: 1.0,
            safety: Default::default(),
        }
    }

    #[test]
    fn rules_that_differ_only_in_bound_names_are_one_rule_with_their_support() {
        let rules = vec![
            rule("a", "exp(b_g)", "exp2(b_g)", &["c1", "c2"]),
            rule("b", "exp(b_gn)", "exp2(b_gn)", &["c3", "c2"]),
            rule("c", "i_n = tl.program_id(0)", "i_n = tl.program_id(0).to(tl.int64)", &["c4", "c5"]),
            rule("d", "i_bh = tl.program_id(0)", "i_bh = tl.program_id(0).to(tl.int64)", &["c6", "c7"]),
            rule("e", "i_t = tl.program_id(1)", "i_t = tl.program_id(1).to(tl.int64)", &["c8", "c9"]),
        ];
        let (out, merged) = merge_renamed(rules);
        assert_eq!(merged, 2);
        assert_eq!(out.len(), 3, "{out:#?}");
        let exp = &out[0];
        assert_eq!((exp.id.as_str(), exp.before.as_str(), exp.after.as_str()), ("a", "exp($A)", "exp2($A)"));
        assert_eq!(commit_ids(exp), ["c1", "c2", "c3"], "commits are a union");
        assert_eq!(exp.support[0].occurrences, 4);
        assert_eq!(exp.examples.len(), 2);
        assert!(exp.rationale.contains("b_g, b_gn"), "{}", exp.rationale);
        let pid = &out[1];
        assert_eq!(pid.before, "$A = tl.program_id(0)", "a literal that differs keeps the rules apart");
        assert_eq!(pid.after, "$A = tl.program_id(0).to(tl.int64)");
        assert_eq!(out[2].before, "i_t = tl.program_id(1)");
    }

    #[test]
    fn callees_attributes_keywords_and_one_sided_names_are_not_bound_names() {
        let rules = vec![
            rule("exp", "exp(x)", "exp2(x)", &["c1", "c2"]),
            rule("log", "log(x)", "log2(x)", &["c3", "c4"]),
            rule("dt", "b.to(q.dtype)", "b.to(q.dtype, fp_downcast_rounding=r)", &["c1", "c2"]),
            rule("dt2", "b.to(k.dtype)", "b.to(k.dtype, fp_downcast_rounding=r)", &["c3", "c4"]),
            rule("r1", "y = b_a", "y = b_b", &["c1", "c2"]),
            rule("r2", "y = b_c", "y = b_d", &["c3", "c4"]),
            rule("kw1", "f(a, mask=m)", "f(a, mask=m, other=0)", &["c1", "c2"]),
            rule("kw2", "f(a, msk=m)", "f(a, msk=m, other=0)", &["c3", "c4"]),
            rule("dup", "x = $A", "x = $A + 1", &["c5", "c6"]),
            rule("dup2", "x = $A", "x = $A + 1", &["c7", "c8"]),
        ];
        let (out, merged) = merge_renamed(rules);
        let ids: Vec<&str> = out.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["exp", "log", "dt", "dt2", "r1", "r2", "kw1", "kw2", "dup"], "{out:#?}");
        assert_eq!(merged, 1, "only the identical templates merge");
        assert_eq!(out[8].before, "x = $A", "identical templates keep theirs");
    }

    #[test]
    fn the_new_hole_avoids_the_holes_a_template_has() {
        let rules = vec![
            rule("a", "tl.dot($A, b_k)", "tl.dot($A, b_k, input_precision=$B)", &["c1", "c2"]),
            rule("b", "tl.dot($A, b_v)", "tl.dot($A, b_v, input_precision=$B)", &["c3", "c4"]),
        ];
        let (out, _) = merge_renamed(rules);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].before, "tl.dot($A, $C)");
        assert_eq!(out[0].after, "tl.dot($A, $C, input_precision=$B)");
    }

    #[test]
    fn lexing_keeps_strings_and_comments_whole() {
        let ts: Vec<&str> = lex("f(a, \"x y\") # c d\n+ $$$B").iter().map(|t| t.text).collect();
        assert_eq!(ts, ["f", "(", "a", ",", "\"x y\"", ")", "# c d", "+", "$$$B"]);
    }
}
