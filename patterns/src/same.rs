//! Patterns that are one rewrite: a usage idiom and the history edits that
//! make the same change (`tl.program_id(...)` wrapped in `.to(tl.int64)`,
//! mined once from code and several times from commits), or two rules
//! equal up to the names of their holes.
//!
//! The key is the canonical rewrite: the templates tokenized, holes renamed
//! in order of appearance, a value hole replaced by the value the rewrite
//! writes (the engine compiles it); then the change itself (what is
//! inserted, deleted or replaced, and the expression it attaches to, its
//! arguments left out). Patterns with the same templates are one; patterns
//! with the same change are one with the pattern whose `before` is nothing
//! but that expression (it matches every site the others do), when there is
//! one. The catalog stores them merged (`store/merge.rs`).

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{Kind, Lang, Pattern, Support};

/// One token of a template.
fn tokens(t: &str) -> Vec<String> {
    let b = t.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        if c.is_ascii_whitespace() || c == b'\\' {
            i += 1;
            continue;
        }
        if c == b'$' {
            while i < b.len() && b[i] == b'$' {
                i += 1;
            }
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
        } else if c.is_ascii_alphanumeric() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || (b[i] == b'.' && c.is_ascii_digit()))
            {
                i += 1;
            }
        } else if c == b'"' || c == b'\'' {
            i += 1;
            while i < b.len() && b[i] != c {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
        } else {
            i += t[i..].chars().next().map_or(1, char::len_utf8);
        }
        out.push(t[start..i.min(t.len())].to_string());
    }
    out
}

fn is_hole(t: &str) -> bool {
    t.starts_with('$')
}

/// A pattern's rewrite with holes renamed in order (`$1`, `$$$2`), value
/// holes replaced by the value written; `None` for a pattern with no
/// rewrite (guidance only) or an empty `before`.
fn canonical(p: &Pattern) -> Option<(Vec<String>, Vec<String>)> {
    let rw = kidiom_rewriter::Rewrite::new(&kidiom_rewriter::RewriteSpec::from(p), None).ok()?;
    let (before, mut after) = (tokens(&p.before), tokens(&p.after));
    if before.is_empty() {
        return None;
    }
    let bound: BTreeSet<&String> = before.iter().filter(|t| is_hole(t) && *t != "$_").collect();
    if let Some(v) = rw.value() {
        let v = tokens(v);
        after = after
            .into_iter()
            .flat_map(|t| if is_hole(&t) && !bound.contains(&t) { v.clone() } else { vec![t] })
            .collect();
    }
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut rename = |t: String| {
        if !is_hole(&t) || t == "$_" {
            return t;
        }
        let n = names.len() + 1;
        let dollars = t.chars().take_while(|c| *c == '$').count();
        names.entry(t).or_insert_with(|| format!("{}{n}", "$".repeat(dollars))).clone()
    };
    let before: Vec<String> = before.into_iter().map(&mut rename).collect();
    let after: Vec<String> = after.into_iter().map(&mut rename).collect();
    Some((before, after))
}

/// The expression ending just before `at` in `toks` (a dotted name with its
/// calls and subscripts), and where it starts.
fn expression_before(toks: &[String], at: usize) -> usize {
    let mut i = at;
    loop {
        let Some(last) = i.checked_sub(1).and_then(|j| toks.get(j)) else { return i };
        if last == ")" || last == "]" {
            let (close, open) = if last == ")" { (")", "(") } else { ("]", "[") };
            let mut depth = 0;
            let mut j = i;
            while j > 0 {
                j -= 1;
                if toks[j] == close {
                    depth += 1;
                } else if toks[j] == open {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
            }
            i = j;
        } else if is_name(last) {
            i -= 1;
            if i > 0 && toks[i - 1] == "." {
                i -= 1;
                continue;
            }
            return i;
        } else {
            return i;
        }
    }
}

fn is_name(t: &str) -> bool {
    t.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_' || c == '$')
}

/// An expression's shape: its names, holes as `$_`, arguments as `(…)`.
fn shape(toks: &[String]) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for t in toks {
        match t.as_str() {
            "(" | "[" => {
                if depth == 0 {
                    out.push_str(if t == "(" { "(…" } else { "[…" });
                }
                depth += 1;
            }
            ")" | "]" => {
                depth -= 1;
                if depth == 0 {
                    out.push_str(t);
                }
            }
            _ if depth > 0 => {}
            t if is_hole(t) => out.push_str("$_"),
            t => out.push_str(t),
        }
    }
    out
}

/// The positions in `long` that `short` does not take when matched into it
/// greedily, in order; `None` when `short` is not a subsequence of `long`.
fn extra(short: &[String], long: &[String]) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    let mut j = 0;
    for t in short {
        while long.get(j)? != t {
            out.push(j);
            j += 1;
        }
        j += 1;
    }
    out.extend(j..long.len());
    Some(out)
}

/// One change of a rewrite: the expression it attaches to, what it takes
/// out and puts in, and the token after it when that binds (`(`, `[`, `.`).
type Change = (String, String, String, String);

/// The changes a canonical rewrite makes, and whether its `before` is
/// nothing but the expression (and call) they attach to.
fn changes(before: &[String], after: &[String]) -> (BTreeSet<Change>, bool) {
    // runs of positions in `toks` given by `idx` (sorted)
    let runs = |idx: &[usize]| -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = Vec::new();
        for &i in idx {
            match out.last_mut() {
                Some((_, end)) if *end == i => *end = i + 1,
                _ => out.push((i, i + 1)),
            }
        }
        out
    };
    let mut set = BTreeSet::new();
    let mut bare = true;
    let mut one = |toks: &[String], (s, e): (usize, usize), del: String, ins: String| {
        let start = expression_before(toks, s);
        let right = toks.get(e).filter(|t| matches!(t.as_str(), "(" | "[" | ".")).cloned().unwrap_or_default();
        // bare: the template is the expression, the change and (for a callee) a call on holes
        let tail = &toks[e..];
        let holes_call = tail.first().is_some_and(|t| t == "(")
            && tail.last().is_some_and(|t| t == ")")
            && tail[1..tail.len() - 1].iter().all(|t| is_hole(t) || t == ",");
        let anchor_holes =
            toks[start..s].iter().skip_while(|t| *t != "(").all(|t| is_hole(t) || "(),".contains(t.as_str()));
        bare &= start == 0 && anchor_holes && (tail.is_empty() || holes_call);
        set.insert((shape(&toks[start..s]), del, ins, right));
    };
    if let Some(ins) = extra(before, after) {
        for (s, e) in runs(&ins) {
            one(after, (s, e), String::new(), after[s..e].concat());
        }
    } else if let Some(del) = extra(after, before) {
        for (s, e) in runs(&del) {
            one(before, (s, e), before[s..e].concat(), String::new());
        }
    } else {
        let pre = before.iter().zip(after).take_while(|(a, b)| a == b).count();
        let suf = before[pre..].iter().rev().zip(after[pre..].iter().rev()).take_while(|(a, b)| a == b).count();
        let (del, ins) = (before[pre..before.len() - suf].concat(), after[pre..after.len() - suf].concat());
        one(before, (pre, before.len() - suf), del, ins);
    }
    let bare = bare && !set.is_empty();
    (set, bare)
}

/// Groups of patterns that are one rewrite: (the one kept, the others).
pub(crate) fn groups(patterns: &[Pattern]) -> Vec<(usize, Vec<usize>)> {
    type Key = (Lang, BTreeSet<Change>);
    // (index, canonical before, canonical after, bare)
    type Member = (usize, Vec<String>, Vec<String>, bool);
    let mut by_change: BTreeMap<Key, Vec<Member>> = BTreeMap::new();
    for (i, p) in patterns.iter().enumerate() {
        let Some((b, a)) = canonical(p) else { continue };
        let (set, bare) = changes(&b, &a);
        if set.is_empty() {
            continue;
        }
        by_change.entry((p.language, set)).or_default().push((i, b, a, bare));
    }
    // usage first (mined from code as it is), then the strongest, then by id
    let rank = |i: &usize| (patterns[*i].kind != Kind::Usage, -patterns[*i].score, patterns[*i].id.clone());
    let best = |mut m: Vec<usize>| -> Option<(usize, Vec<usize>)> {
        m.sort_by(|a, b| rank(a).partial_cmp(&rank(b)).unwrap_or(std::cmp::Ordering::Equal));
        (m.len() > 1).then(|| (m[0], m[1..].to_vec()))
    };
    let mut out = Vec::new();
    for (_, members) in by_change {
        let bare: Vec<usize> = members.iter().filter(|m| m.3).map(|m| m.0).collect();
        if let Some(&kept) =
            bare.iter().min_by(|a, b| rank(a).partial_cmp(&rank(b)).unwrap_or(std::cmp::Ordering::Equal))
        {
            let others = members.iter().map(|m| m.0).filter(|&i| i != kept).collect::<Vec<_>>();
            if !others.is_empty() {
                out.push((kept, others));
            }
            continue;
        }
        let mut same: BTreeMap<(&[String], &[String]), Vec<usize>> = BTreeMap::new();
        for (i, b, a, _) in &members {
            same.entry((b, a)).or_default().push(*i);
        }
        out.extend(same.into_values().filter_map(best));
    }
    out
}

/// `kept` with the support, examples and commits of `others` added, and a
/// sentence naming them. Its values stay its own: another pattern's hole
/// bindings are no values of this one's holes.
pub(crate) fn fold(kept: &Pattern, others: &[&Pattern]) -> Pattern {
    let mut p = kept.clone();
    for o in others {
        for s in &o.support {
            match p.support.iter_mut().find(|x| x.corpus == s.corpus && x.revision == s.revision) {
                Some(x) => {
                    x.occurrences += s.occurrences;
                    x.files += s.files;
                    x.opportunities = x.opportunities.max(s.opportunities);
                }
                None => p.support.push(Support { ..s.clone() }),
            }
        }
        for e in &o.examples {
            if !p.examples.iter().any(|x| x.corpus == e.corpus && x.path == e.path && x.line == e.line) {
                p.examples.push(e.clone());
            }
        }
        for c in &o.commits {
            if !p.commits.iter().any(|x| x.id == c.id) {
                p.commits.push(c.clone());
            }
        }
        p.score = p.score.max(o.score);
    }
    let ids: Vec<String> = others.iter().map(|o| format!("{} ({})", o.id, o.kind)).collect();
    p.rationale = format!(
        "{} The same rewrite was also mined as {}; their support is counted here.",
        p.rationale.trim_end(),
        ids.join(", ")
    );
    p
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::Category;
    use crate::store::tests::pattern;

    /// A pattern of `kind` with this rewrite and these values (also the store's merge tests').
    pub(crate) fn p(id: &str, kind: Kind, before: &str, after: &str, values: &[&str]) -> Pattern {
        let mut p = pattern(id, kind, Lang::Python, Category::Addressing, &[("fla", 3)], 1.0);
        p.before = before.into();
        p.after = after.into();
        p.values = Pattern::usage(id, Lang::Python, before, after, values).values;
        p
    }

    fn grouped(ps: &[Pattern]) -> Vec<(String, Vec<String>)> {
        groups(ps)
            .into_iter()
            .map(|(k, o)| (ps[k].id.clone(), o.into_iter().map(|i| ps[i].id.clone()).collect()))
            .collect()
    }

    #[test]
    fn a_usage_idiom_and_the_edits_making_its_change_are_one() {
        let ps = [
            p("wrap", Kind::Usage, "tl.program_id($$$A)", "tl.program_id($$$A).to($V)", &["tl.int64"]),
            p("e1", Kind::Edit, "$$$A = tl.program_id(0), $$$B", "$$$A = tl.program_id(0).to(tl.int64), $$$B", &[]),
            p(
                "e4",
                Kind::Edit,
                "$$$A = tl.program_id(0), tl.program_id(1), $$$B",
                "$$$A = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64), $$$B",
                &[],
            ),
            // another value, another change
            p("e32", Kind::Edit, "i = tl.program_id(0)", "i = tl.program_id(0).to(tl.int32)", &[]),
            // more than the cast: not the same rewrite
            p(
                "e5",
                Kind::Edit,
                "a, $B = tl.program_id(0), $C",
                "a, $B = tl.program_id(0).to(tl.int64), tl.program_id(1)",
                &[],
            ),
        ];
        assert_eq!(grouped(&ps), [("wrap".to_string(), vec!["e1".to_string(), "e4".to_string()])]);
    }

    #[test]
    fn rules_equal_up_to_hole_names_are_one_and_narrower_contexts_stay_apart() {
        let ps = [
            p("d1", Kind::Edit, "$A = tl.$B($$$C).to(tl.float32)", "$A = tl.$B($$$C)", &[]),
            p("d2", Kind::Edit, "tl.$X($$$Y).to(tl.float32)", "tl.$X($$$Y)", &[]),
            p("x1", Kind::Edit, "exp(b_g)", "exp2(b_g)", &[]),
            p("x2", Kind::Edit, "exp(b_gn)", "exp2(b_gn)", &[]),
            p("y1", Kind::Edit, "$Q = exp($A)", "$Q = exp2($A)", &[]),
            p("y2", Kind::Edit, "$R = exp($S)", "$R = exp2($S)", &[]),
        ];
        let g = grouped(&ps);
        assert!(g.contains(&("d2".to_string(), vec!["d1".to_string()])), "{g:?}");
        assert!(g.contains(&("y1".to_string(), vec!["y2".to_string()])), "{g:?}");
        assert_eq!(g.len(), 2, "exp(b_g) and exp(b_gn) bind different names: {g:?}");
    }
}
