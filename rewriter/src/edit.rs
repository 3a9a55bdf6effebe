//! Applying edits and finding a rewrite's fixed point.

use std::ops::Range;

pub use crate::matcher::apply_edits;
use crate::matcher::{Edit, Rewrite, edited_tree};
use kidiom_syntax::{Lang, parse_tree, preorder, reparse};
use tree_sitter::Tree;

use crate::conflict::resolve;
use crate::error::{Error, Result};

/// Rounds of rewriting before a rewrite is declared non-convergent.
const MAX_ROUNDS: usize = 8;

/// The result of applying one rewrite to one text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The rewritten text.
    pub text: String,
    /// Sites rewritten (over all rounds).
    pub sites: usize,
    /// Rounds needed to reach the fixed point (nested sites that
    /// conflicted in one round are rewritten in the next).
    pub rounds: usize,
    /// The byte ranges of the original text that changed, merged and
    /// sorted; every byte outside them is kept.
    pub spans: Vec<Range<usize>>,
}

/// Error and missing nodes in a parse of `src` (0 for Rust, which
/// tree-sitter does not parse here).
pub fn parse_errors(lang: Lang, src: &str) -> Result<usize> {
    let tree = parse_tree(lang, src).map_err(|s| Error::Unparsable { path: String::new(), reason: s.to_string() })?;
    Ok(tree.as_ref().map(count_errors).unwrap_or(0))
}

fn count_errors(tree: &Tree) -> usize {
    let mut n = 0;
    // Only subtrees that contain an error are worth entering.
    preorder(tree.root_node(), |node| {
        if node.is_error() || node.is_missing() {
            n += 1;
        }
        node.has_error()
    });
    n
}

/// Applies `rw` to `src` until nothing changes. `Ok(None)` when no site
/// lacks the idiom. The result re-parses with no more error nodes than
/// `src` had, and applying `rw` to it changes nothing; otherwise the
/// rewrite is dropped with an error. `path` only labels errors.
pub fn rewrite(rw: &Rewrite, lang: Lang, src: &str, path: &str) -> Result<Option<Outcome>> {
    let tree = parse_tree(lang, src)
        .map_err(|s| Error::Unparsable { path: path.into(), reason: s.to_string() })?
        .ok_or_else(|| Error::Unparsable { path: path.into(), reason: "no grammar".into() })?;
    rewrite_parsed(rw, lang, src, &tree, path)
}

/// [`rewrite`] on a text already parsed into `tree` (so that many
/// patterns share one parse; files without a site are never parsed again).
pub fn rewrite_parsed(rw: &Rewrite, lang: Lang, src: &str, tree: &Tree, path: &str) -> Result<Option<Outcome>> {
    Ok(rewrite_with_tree(rw, lang, src, tree, path)?.map(|(o, _)| o))
}

/// [`rewrite_parsed`], also returning the parse of the result, so that a
/// caller chaining rewrites on one file never parses it from scratch again.
pub fn rewrite_with_tree(
    rw: &Rewrite,
    lang: Lang,
    src: &str,
    tree: &Tree,
    path: &str,
) -> Result<Option<(Outcome, Tree)>> {
    fixed_point(&rw.id, lang, src, tree, path, |cur, cur_tree, _| rw.site_edits(cur, cur_tree))
}

/// The sites `rw` would rewrite in `src` (parsed into `tree`): the
/// matches that lack the idiom, in source order, nested ones included.
pub fn sites(rw: &Rewrite, src: &str, tree: &Tree) -> Vec<Range<usize>> {
    rw.site_edits(src, tree).into_iter().map(|s| s.site).collect()
}

/// Rewrites only the chosen sites, each with its own rewrite (one pattern
/// compiled with different values, say), and leaves every other site as it
/// is. A choice names a site by its range in `src`, as [`sites`] gives it
/// for that rewrite. Nested sites that conflict in one round are rewritten
/// in the next, like [`rewrite`] does; the result obeys the same checks.
/// `Ok(None)` when no chosen site is left to rewrite.
pub fn rewrite_sites(
    choices: &[(Range<usize>, &Rewrite)],
    lang: Lang,
    src: &str,
    tree: &Tree,
    path: &str,
) -> Result<Option<Outcome>> {
    let Some((_, first)) = choices.first() else { return Ok(None) };
    let id = first.id.clone();
    // One rewrite per distinct compiled value, in first-chosen order.
    let mut distinct: Vec<&Rewrite> = Vec::new();
    for (_, rw) in choices {
        if !distinct.iter().any(|d| std::ptr::eq(*d, *rw)) {
            distinct.push(rw);
        }
    }
    let out = fixed_point(&id, lang, src, tree, path, |cur, cur_tree, rounds| {
        let mut picked = Vec::new();
        for rw in &distinct {
            for se in rw.site_edits(cur, cur_tree) {
                // where this site starts in the original text
                let mut start = se.site.start;
                for earlier in rounds.iter().rev() {
                    start = back(earlier, start, true);
                }
                if choices.iter().any(|(r, c)| r.start == start && std::ptr::eq(*c, *rw)) {
                    picked.push(se);
                }
            }
        }
        picked
    })?;
    Ok(out.map(|(o, _)| o))
}

/// Rewrites `src` round by round until `site_edits` (given the current
/// text, its tree and the edits of the rounds so far) has nothing left;
/// overlapping sites wait for the next round. The result must re-parse with
/// no more error nodes than `src` had. `id` and `path` label errors.
fn fixed_point(
    id: &str,
    lang: Lang,
    src: &str,
    tree: &Tree,
    path: &str,
    mut site_edits: impl FnMut(&str, &Tree, &[Vec<Edit>]) -> Vec<crate::matcher::SiteEdits>,
) -> Result<Option<(Outcome, Tree)>> {
    let first = resolve(site_edits(src, tree, &[]));
    if first.0.is_empty() {
        return Ok(None);
    }
    let errors_before = count_errors(tree);
    let unparsable = |reason: String| Error::Unparsable { path: path.into(), reason };
    let mut cur = src.to_string();
    let mut cur_tree = tree.clone();
    let mut rounds: Vec<Vec<Edit>> = Vec::new();
    let mut sites = 0;
    let mut pending = Some(first);
    loop {
        let (edits, n) = match pending.take() {
            Some(r) => r,
            None => resolve(site_edits(&cur, &cur_tree, &rounds)),
        };
        if edits.is_empty() {
            break;
        }
        if rounds.len() == MAX_ROUNDS {
            return Err(Error::NotIdempotent { pattern: id.into(), path: path.into() });
        }
        let next =
            apply_edits(&cur, &edits).ok_or_else(|| Error::NotIdempotent { pattern: id.into(), path: path.into() })?;
        // Tell the old tree about the edits and re-parse only what changed;
        // the same tree then answers both "any sites left?" and "new errors?".
        cur_tree = reparse(lang, &next, &edited_tree(&cur_tree, &cur, &edits))
            .map_err(|s| unparsable(s.to_string()))?
            .ok_or_else(|| unparsable("no grammar".into()))?;
        cur = next;
        sites += n;
        rounds.push(edits);
    }
    if rounds.is_empty() {
        return Ok(None);
    }
    if count_errors(&cur_tree) > errors_before {
        return Err(Error::NewParseError { pattern: id.into(), path: path.into() });
    }
    let mut spans = original_spans(&rounds);
    if let Some((kept, more)) = keep_comment_columns(src, tree, &cur, &cur_tree) {
        cur_tree = parse_tree(lang, &kept)
            .map_err(|s| unparsable(s.to_string()))?
            .ok_or_else(|| unparsable("no grammar".into()))?;
        cur = kept;
        spans = merge_spans(spans.into_iter().chain(more).collect());
    }
    Ok(Some((Outcome { text: cur, sites, rounds: rounds.len(), spans }, cur_tree)))
}

/// Trailing comments aligned in a column stay in it, as a person editing
/// the line would keep them: where a rewrite lengthened the code before a
/// trailing comment, the blanks before the comment shrink by as much, down
/// to the gap the comment had or two blanks, whichever is less. Comments
/// are paired in order (a rewrite adds or removes none); `None` when no
/// comment moved or they cannot be paired. Also returns the ranges of
/// `src` whose bytes this changes.
fn keep_comment_columns(src: &str, tree: &Tree, out: &str, out_tree: &Tree) -> Option<(String, Vec<Range<usize>>)> {
    let trailing = |text: &str, tree: &Tree| -> Vec<(usize, usize, String)> {
        // (byte offset of the comment, blanks before it, its text), code before it on its line
        let mut v = Vec::new();
        preorder(tree.root_node(), |n| {
            if n.kind() == "comment" {
                let start = n.start_byte();
                let line_start = text[..start].rfind('\n').map(|i| i + 1).unwrap_or(0);
                let before = &text[line_start..start];
                let code = before.trim_end_matches([' ', '\t']);
                if !code.trim().is_empty() && !before.contains('\t') {
                    v.push((start, before.len() - code.len(), text[n.byte_range()].to_string()));
                }
            }
            true
        });
        v
    };
    let (old, new) = (trailing(src, tree), trailing(out, out_tree));
    if old.len() != new.len() || old.iter().zip(&new).any(|(a, b)| a.2 != b.2) {
        return None;
    }
    let column = |text: &str, at: usize| text[text[..at].rfind('\n').map(|i| i + 1).unwrap_or(0)..at].chars().count();
    let mut cuts: Vec<(usize, usize)> = Vec::new(); // (offset in `out` of the blanks to drop, how many)
    let mut spans = Vec::new();
    for ((o_at, o_gap, _), (n_at, n_gap, _)) in old.iter().zip(&new) {
        let (oc, nc) = (column(src, *o_at), column(out, *n_at));
        if nc <= oc {
            continue;
        }
        let keep = (*o_gap).min(2);
        let drop = (nc - oc).min(n_gap.saturating_sub(keep));
        if drop > 0 {
            cuts.push((n_at - drop, drop));
            spans.push(o_at - o_gap..*o_at);
        }
    }
    if cuts.is_empty() {
        return None;
    }
    let mut text = String::with_capacity(out.len());
    let mut pos = 0;
    for (at, n) in cuts {
        text.push_str(&out[pos..at]);
        pos = at + n;
    }
    text.push_str(&out[pos..]);
    Some((text, spans))
}

/// Maps the edits of every round back to byte ranges of the original.
fn original_spans(rounds: &[Vec<Edit>]) -> Vec<Range<usize>> {
    let mut spans: Vec<Range<usize>> = Vec::new();
    for (k, edits) in rounds.iter().enumerate() {
        for e in edits {
            let (mut s, mut t) = (e.range.start, e.range.end);
            for earlier in rounds[..k].iter().rev() {
                s = back(earlier, s, true);
                t = back(earlier, t, false);
            }
            spans.push(s..t.max(s));
        }
    }
    merge_spans(spans)
}

/// Sorted, with overlapping or touching ranges merged.
fn merge_spans(mut spans: Vec<Range<usize>>) -> Vec<Range<usize>> {
    spans.sort_by_key(|r| (r.start, r.end));
    let mut merged: Vec<Range<usize>> = Vec::new();
    for r in spans {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    merged
}

/// A position in the text after `edits` mapped to the text before them;
/// a position inside replacement text maps to the replaced range's start
/// (`start`) or end.
fn back(edits: &[Edit], pos: usize, start: bool) -> usize {
    let mut sorted: Vec<&Edit> = edits.iter().collect();
    sorted.sort_by_key(|e| (e.range.start, e.range.end));
    let mut delta: isize = 0; // new - old before the current edit
    for e in sorted {
        let new_start = (e.range.start as isize + delta) as usize;
        let new_end = new_start + e.text.len();
        if pos < new_start {
            break;
        }
        if pos <= new_end && (pos < new_end || !start) {
            return if start { e.range.start } else { e.range.end };
        }
        delta += e.text.len() as isize - (e.range.end - e.range.start) as isize;
    }
    (pos as isize - delta).max(0) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(r: Range<usize>, t: &str) -> Edit {
        Edit { range: r, text: t.into() }
    }

    #[test]
    fn applies_and_refuses_overlaps() {
        assert_eq!(apply_edits("abcdef", &[e(1..2, "X"), e(4..4, "+"), e(4..4, "-")]).unwrap(), "aXcd+-ef");
        assert!(apply_edits("abcdef", &[e(1..3, "X"), e(2..4, "Y")]).is_none());
        assert!(apply_edits("abc", &[e(2..9, "")]).is_none());
    }

    #[test]
    fn maps_positions_back() {
        // "abcdef" -> "aXXcdef" (b replaced by XX)
        let r = vec![e(1..2, "XX")];
        assert_eq!(back(&r, 0, true), 0);
        assert_eq!(back(&r, 2, true), 1);
        assert_eq!(back(&r, 3, true), 2);
        assert_eq!(back(&r, 6, false), 5);
        assert_eq!(original_spans(&[r.clone(), vec![e(4..4, "!")]]), vec![1..2, 3..3]);
    }

    #[test]
    fn rewrites_only_the_chosen_sites_each_with_its_value() {
        let src = "import triton\nimport triton.language as tl\n@triton.jit\ndef k(a):\n    x = tl.dot(a, a)\n    y = tl.dot(x, tl.dot(a, x))\n    z = tl.dot(y, a)\n";
        let pat = |v: &str| {
            crate::RewriteSpec::usage("p", Lang::Python, "tl.dot($$$ARGS)", "tl.dot($$$ARGS, input_precision=$V)", &[v])
        };
        let (ieee, x3) =
            (Rewrite::new(&pat("\"ieee\""), None).unwrap(), Rewrite::new(&pat("\"tf32x3\""), None).unwrap());
        let tree = parse_tree(Lang::Python, src).unwrap().unwrap();
        let all = sites(&ieee, src, &tree);
        assert_eq!(all.len(), 4, "{all:?}");
        // the outer and inner dot of line 6 (nested: two rounds), and the last one; not the first
        let choices = [(all[1].clone(), &x3), (all[2].clone(), &ieee), (all[3].clone(), &x3)];
        let out = rewrite_sites(&choices, Lang::Python, src, &tree, "k.py").unwrap().unwrap();
        assert!(out.text.contains("    x = tl.dot(a, a)\n"), "{}", out.text);
        assert!(
            out.text.contains("y = tl.dot(x, tl.dot(a, x, input_precision=\"ieee\"), input_precision=\"tf32x3\")"),
            "{}",
            out.text
        );
        assert!(out.text.contains("z = tl.dot(y, a, input_precision=\"tf32x3\")"), "{}", out.text);
        assert_eq!(out.sites, 3);
        // nothing chosen: nothing to do
        assert!(rewrite_sites(&[], Lang::Python, src, &tree, "k.py").unwrap().is_none());
        // every site with one rewrite equals the plain rewrite
        let every: Vec<_> = all.iter().map(|r| (r.clone(), &ieee)).collect();
        let a = rewrite_sites(&every, Lang::Python, src, &tree, "k.py").unwrap().unwrap();
        assert_eq!(a.text, rewrite(&ieee, Lang::Python, src, "k.py").unwrap().unwrap().text);
    }

    #[test]
    fn aligned_trailing_comments_keep_their_column() {
        let src = "import triton\nimport triton.language as tl\n@triton.jit\ndef k(a):\n    x = tl.dot(a, a)                                  # [B, K] @ [K, B] -> [B, B]\n    y = tl.dot(x, a)  # short gap\n    z = tl.dot(y, a)                  # [B, B] -> [B, B]\n    w = y  # untouched\n";
        let p = crate::RewriteSpec::usage(
            "p",
            Lang::Python,
            "tl.dot($$$ARGS)",
            "tl.dot($$$ARGS, input_precision=$V)",
            &["\"ieee\""],
        );
        let rw = Rewrite::new(&p, None).unwrap();
        let out = rewrite(&rw, Lang::Python, src, "k.py").unwrap().unwrap();
        let col = |text: &str, needle: &str| {
            let line = text.lines().find(|l| l.contains(needle)).unwrap();
            line.find('#').unwrap()
        };
        // room in the gap: the comment stays in its column
        assert_eq!(col(&out.text, "[K, B]"), col(src, "[K, B]"), "{}", out.text);
        // not enough room: it keeps two blanks (the gap it had) and moves only as far as it must
        assert!(out.text.contains("y = tl.dot(x, a, input_precision=\"ieee\")  # short gap"), "{}", out.text);
        let z = out.text.lines().find(|l| l.contains("z = ")).unwrap();
        assert!(z.contains("input_precision=\"ieee\")  # [B, B]"), "{z}");
        assert!(out.text.ends_with("    w = y  # untouched\n"));
        // the result is a fixed point and parses like the source
        assert!(rewrite(&rw, Lang::Python, &out.text, "k.py").unwrap().is_none());
        assert_eq!(parse_errors(Lang::Python, &out.text).unwrap(), 0);
    }

    #[test]
    fn counts_parse_errors() {
        assert_eq!(parse_errors(Lang::Python, "x = f(1)\n").unwrap(), 0);
        assert!(parse_errors(Lang::Python, "x = f(1\ny = )\n").unwrap() > 0);
    }
}

/// Property tests: rewriting mutated kernel sources never panics, and a
/// result never has more parse errors than its source.
#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;
    use crate::RewriteSpec;
    use crate::testutil::mutate;

    const TRITON: &str = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(x, o, T, BT: tl.constexpr):\n    i = tl.program_id(0)\n    a = tl.load(x + i * BT + tl.arange(0, BT), mask=i < T, other=0.0)\n    b = tl.dot(a, tl.dot(a, a))\n    c = tl.exp(b) + tl.exp(tl.exp(a))\n    tl.store(o + i, c, mask=i < T)\n";
    const CUDA: &str = "extern \"C\" __global__ void k(const float* x, float* o, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    for (int j = 0; j < 4; j++) { if (i < n) o[i] = expf(x[i]) + expf(expf(x[j])); }\n}\n";

    fn pattern(lang: Lang, before: &str, after: &str, value: &str) -> RewriteSpec {
        RewriteSpec::usage("p", lang, before, after, &[value])
    }

    fn rewrites() -> Vec<(Lang, Rewrite)> {
        [
            (Lang::Python, "tl.dot($$$ARGS)", "tl.dot($$$ARGS, input_precision=$V)", "\"ieee\""),
            (Lang::Python, "tl.exp($X)", "tl.exp2($X * 1.4426950408889634)", ""),
            (Lang::Python, "tl.load($$$ARGS)", "tl.load($$$ARGS, cache_modifier=$V)", "\".cg\""),
            (Lang::Cuda, "expf($X)", "__expf($X)", ""),
        ]
        .into_iter()
        .filter_map(|(lang, b, a, v)| Some((lang, Rewrite::new(&pattern(lang, b, a, v), None).ok()?)))
        .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

        #[test]
        fn rewriting_mutated_sources_never_panics_or_parses_worse(
            e in prop::collection::vec((any::<usize>(), any::<usize>(), "[(){}\\[\\]:,.@$#\"'=+*/ \n\tabxy0-9_]{0,6}"), 0..8),
        ) {
            let rws = rewrites();
            prop_assert!(rws.len() >= 3, "the test's own rewrites compile");
            for (lang, rw) in &rws {
                let src = mutate(if *lang == Lang::Python { TRITON } else { CUDA }, &e);
                let Ok(before) = parse_errors(*lang, &src) else { continue };
                if let Ok(Some(out)) = rewrite(rw, *lang, &src, "k") {
                    let after = parse_errors(*lang, &out.text).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert!(after <= before, "{before} -> {after} parse errors:\n{src}\n---\n{}", out.text);
                }
            }
        }
    }
}
