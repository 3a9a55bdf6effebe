//! Concrete edits: the smallest changed subtrees of one file in one commit,
//! grown to an anchoring construct (a call, a decorator, a parameter, a
//! statement) so that the edit carries enough unchanged context to be
//! applied elsewhere (Getafix keeps context for the same reason).

use kidiom_syntax::{
    Lang,
    grammar::{is_anchor, kind_name},
};

use super::scope::Scope;
use super::tree::{NONE, Tree};
use super::treediff;
use super::{ConcreteEdit, EditContext, EditDrop, HistoryConfig};

/// Cuts the concrete edits of one file pair that lie in `scope`. Returns
/// the edits and the changes that were dropped, with why.
pub(crate) fn cut(
    lang: Lang,
    path: &str,
    blobs: (&str, &str),
    (a, b): (&Tree<'_>, &Tree<'_>),
    scope: &Scope<'_>,
    cfg: &HistoryConfig,
) -> (Vec<ConcreteEdit>, Vec<EditDrop>) {
    let d = treediff::diff(a, b);
    let mut roots: Vec<(u32, u32)> = Vec::new();
    let mut drops = Vec::new();
    for &(x0, y0) in &d.edits {
        let (mut x, mut y) = (x0, y0);
        let mut ok = true;
        while !is_anchor(lang, kind_name(lang, a.nodes[x as usize].kind)) {
            let (px, py) = (a.nodes[x as usize].parent, b.nodes[y as usize].parent);
            if px == NONE || py == NONE || d.map[px as usize] != py {
                ok = false;
                break;
            }
            (x, y) = (px, py);
        }
        if !ok || x == 0 {
            drops.push(EditDrop::NoAnchor);
            continue;
        }
        if !scope.allows(span(a, x), span(b, y)) {
            drops.push(EditDrop::OutsideKernel);
            continue;
        }
        roots.push((x, y));
    }
    roots.sort_unstable();
    roots.dedup();
    // Broken and oversized roots go first, so that the smaller changes
    // inside an oversized container (a statement inserted into a kernel
    // body next to a changed call) are still cut on their own.
    let mut kept: Vec<(u32, u32)> = Vec::new();
    let mut nested: Vec<(u32, u32)> = Vec::new();
    for (x, y) in roots {
        let (nx, ny) = (a.nodes[x as usize], b.nodes[y as usize]);
        if kept.last().is_some_and(|&(kx, _)| a.contains(kx, x)) {
            // Nested in an edit already kept: subsumed, unless it is a
            // local edit of its own (a call that gained a keyword argument
            // inside a call that gained one too), which is cut as well.
            if !nx.err && !ny.err && adds_keywords(a, b, &d.map, x, y) {
                nested.push((x, y));
            }
            continue;
        }
        if nx.err || ny.err {
            drops.push(EditDrop::ParseError);
            continue;
        }
        if nx.size > cfg.max_edit_nodes || ny.size > cfg.max_edit_nodes {
            drops.push(EditDrop::TooLarge);
            continue;
        }
        kept.push((x, y));
    }
    kept.extend(nested);
    kept.sort_unstable();
    let mut out = Vec::new();
    for (x, y) in kept {
        let nx = a.nodes[x as usize];
        let context = enclosing(lang, a, b, &d.map, (x, y), cfg)
            .filter(|&(p, q)| scope.allows(span(a, p), span(b, q)))
            .map(|(p, q)| EditContext {
                start: a.nodes[p as usize].start,
                before: a.text(p).to_string(),
                after: b.text(q).to_string(),
                before_tree: a.flat(p),
                after_tree: b.flat(q),
            });
        out.push(ConcreteEdit {
            path: path.to_string(),
            lang,
            line: a.line_of(nx.start),
            start: nx.start,
            before: a.text(x).to_string(),
            after: b.text(y).to_string(),
            before_tree: a.flat(x),
            after_tree: b.flat(y),
            before_blob: blobs.0.to_string(),
            after_blob: blobs.1.to_string(),
            context,
        });
    }
    (out, drops)
}

/// The byte range of node `n`.
fn span(t: &Tree<'_>, n: u32) -> (u32, u32) {
    let node = t.nodes[n as usize];
    (node.start, node.end)
}

/// Whether `x` became `y` by gaining keyword arguments in one argument
/// list, its other children unchanged or matched by the diff (changed
/// inside, as nested edits of their own).
fn adds_keywords(a: &Tree<'_>, b: &Tree<'_>, map: &[u32], x: u32, y: u32) -> bool {
    let same = |p: u32, q: u32| {
        let (np, nq) = (a.nodes[p as usize], b.nodes[q as usize]);
        np.hash == nq.hash && np.size == nq.size
    };
    let matched = |p: u32, q: u32| a.nodes[p as usize].kind == b.nodes[q as usize].kind && map[p as usize] == q;
    let (ka, kb) = (a.kids(x), b.kids(y));
    if map[x as usize] != y || ka.len() != kb.len() {
        return false;
    }
    let mut added = false;
    for (&p, &q) in ka.iter().zip(&kb) {
        if same(p, q) {
            continue;
        }
        if !matched(p, q) {
            return false;
        }
        let (ap, aq) = (a.kids(p), b.kids(q));
        let mut j = 0;
        for &k in &aq {
            if j < ap.len() && (same(ap[j], k) || matched(ap[j], k)) {
                j += 1;
            } else if b.kw_name(k).is_some() {
                added = true;
            } else if b.text(k) == "," && b.nodes[k as usize].nkids == 0 {
                continue;
            } else {
                return false;
            }
        }
        if j != ap.len() || !added {
            return false;
        }
    }
    added
}

/// The statement around an edit root: the nearest proper ancestor that is
/// an anchor other than a call, matched to its counterpart all the way up,
/// unbroken and within the size limit.
fn enclosing(
    lang: Lang,
    a: &Tree<'_>,
    b: &Tree<'_>,
    map: &[u32],
    (x, y): (u32, u32),
    cfg: &HistoryConfig,
) -> Option<(u32, u32)> {
    let (mut x, mut y) = (x, y);
    loop {
        let (px, py) = (a.nodes[x as usize].parent, b.nodes[y as usize].parent);
        if px == NONE || py == NONE || map[px as usize] != py || px == 0 {
            return None;
        }
        (x, y) = (px, py);
        let kind = kind_name(lang, a.nodes[x as usize].kind);
        if is_anchor(lang, kind) && !matches!(kind, "call" | "call_expression") {
            break;
        }
    }
    let (nx, ny) = (a.nodes[x as usize], b.nodes[y as usize]);
    let big = nx.size > cfg.max_edit_nodes || ny.size > cfg.max_edit_nodes;
    let block = matches!(
        kind_name(lang, nx.kind),
        "function_definition"
            | "class_definition"
            | "if_statement"
            | "for_statement"
            | "while_statement"
            | "with_statement"
            | "try_statement"
    );
    (!nx.err && !ny.err && !big && !block).then_some((x, y))
}

/// Whether every changed line is blank or a comment, so the trees need
/// not be parsed (the textual hunk prefilter).
pub(crate) fn comment_only(lang: Lang, old: &str, new: &str, hunks: &[Hunk]) -> bool {
    let comment = match lang {
        Lang::Python => &["#"][..],
        _ => &["//", "/*", "*"][..],
    };
    let (o, n): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    hunks.iter().all(|h| {
        let changed = o.iter().skip(h.old_start).take(h.old_len).chain(n.iter().skip(h.new_start).take(h.new_len));
        changed.map(|l| l.trim()).all(|t| t.is_empty() || comment.iter().any(|c| t.starts_with(c)))
    })
}

/// One hunk of a line diff without context: 0-based line ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hunk {
    pub old_start: usize,
    pub old_len: usize,
    pub new_start: usize,
    pub new_len: usize,
}

/// The hunks of a line diff between two texts (no context lines).
pub(crate) fn hunks(old: &[u8], new: &[u8]) -> Option<Vec<Hunk>> {
    let mut opts = git2::DiffOptions::new();
    opts.context_lines(0);
    let patch = git2::Patch::from_buffers(old, None, new, None, Some(&mut opts)).ok()?;
    let mut out = Vec::with_capacity(patch.num_hunks());
    for h in 0..patch.num_hunks() {
        let (hunk, _) = patch.hunk(h).ok()?;
        let (os, ol, ns, nl) = (
            hunk.old_start() as usize,
            hunk.old_lines() as usize,
            hunk.new_start() as usize,
            hunk.new_lines() as usize,
        );
        // A side with no lines names the line after which the change happens.
        out.push(Hunk {
            old_start: if ol == 0 { os } else { os.saturating_sub(1) },
            old_len: ol,
            new_start: if nl == 0 { ns } else { ns.saturating_sub(1) },
            new_len: nl,
        });
    }
    Some(out)
}

/// A pair of corresponding fragments: byte ranges of whole top-level
/// blocks in the old and new text, and the old fragment's first line (0-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Segment {
    pub old: std::ops::Range<usize>,
    pub new: std::ops::Range<usize>,
    pub old_line: u32,
}

fn line_starts(s: &str) -> Vec<usize> {
    let mut v = vec![0];
    v.extend(memchr::memchr_iter(b'\n', s.as_bytes()).map(|i| i + 1));
    if v.last() == Some(&s.len()) && !s.is_empty() {
        v.pop();
    }
    v
}

/// A Python line that starts a top-level statement.
fn is_top(line: &str) -> bool {
    let Some(c) = line.chars().next() else { return false };
    !(c.is_whitespace() || matches!(c, '#' | ')' | ']' | '}'))
}

/// Grows each hunk to the top-level Python blocks around it (a decorated
/// definition with all its decorators, an `if` with its `else`) and pairs
/// the old and new fragments; `None` when the mapping is not consistent.
///
/// A fragment's old bounds are lines outside every hunk, so each maps to
/// the new text by the line counts of the hunks before it (a fragment that
/// holds several hunks shifts by all of them).
pub(crate) fn segments(old: &str, new: &str, hunks: &[Hunk]) -> Option<Vec<Segment>> {
    let (lo, ln) = (line_starts(old), line_starts(new));
    let top = |i: usize| -> bool {
        let s = lo.get(i).copied().unwrap_or(old.len());
        let e = lo.get(i + 1).copied().unwrap_or(old.len());
        old.get(s..e).is_some_and(is_top)
    };
    let line = |i: usize| -> &str {
        let s = lo.get(i).copied().unwrap_or(old.len());
        old.get(s..).unwrap_or("")
    };
    // A top-level line that starts a block: not one that continues a
    // decorated definition (its `def`, or a decorator after another) or a
    // compound statement (`else:`, `except ...:`).
    let starts_block = |i: usize| -> bool {
        if !top(i) {
            return false;
        }
        let word = line(i).split(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap_or("");
        if matches!(word, "else" | "elif" | "except" | "finally") {
            return false;
        }
        !(0..i).rev().find(|&p| top(p)).is_some_and(|p| line(p).starts_with('@'))
    };
    // The hunk whose old lines strictly straddle line `l`, if any.
    let straddling = |l: usize| hunks.iter().find(|h| h.old_start < l && l < h.old_start + h.old_len);
    // New line of old line `l` (a line outside every hunk): hunks wholly
    // before it shift it; an insertion right at it belongs after it.
    let map = |l: usize| -> Option<usize> {
        if l >= lo.len() {
            return Some(ln.len());
        }
        let mut d: i64 = 0;
        for h in hunks {
            if h.old_start < l && h.old_start + h.old_len <= l {
                d += h.new_len as i64 - h.old_len as i64;
            }
        }
        usize::try_from(l as i64 + d).ok()
    };
    let n = lo.len();
    // Old line ranges, merged where they overlap.
    let mut raw: Vec<(usize, usize)> = Vec::new();
    for h in hunks {
        let (os, oe) = (h.old_start.min(n), (h.old_start + h.old_len).min(n));
        // Up to the top-level line that starts a block (a decorated
        // definition's first decorator); never inside a hunk.
        let mut s = os;
        loop {
            while s > 0 && !(s < n && starts_block(s)) {
                s -= 1;
            }
            match straddling(s) {
                Some(x) if x.old_start < s => s = x.old_start,
                _ => break,
            }
        }
        // Down to the next block after the hunk; never inside a hunk.
        let mut e = oe.max(s + 1).min(n);
        loop {
            while e < n && !starts_block(e) {
                e += 1;
            }
            match straddling(e) {
                Some(x) => e = (x.old_start + x.old_len).min(n),
                None => break,
            }
        }
        match raw.last_mut() {
            Some(last) if s < last.1 => last.1 = last.1.max(e),
            _ => raw.push((s, e)),
        }
    }
    let byte = |starts: &[usize], text: &str, i: usize| starts.get(i).copied().unwrap_or(text.len());
    let mut out = Vec::with_capacity(raw.len());
    let mut prev_end = 0;
    for (s, e) in raw {
        let (sn, en) = (if s == 0 { 0 } else { map(s)? }, map(e)?);
        if sn < prev_end || en < sn || en > ln.len() {
            return None;
        }
        prev_end = en;
        out.push(Segment {
            old: byte(&lo, old, s)..byte(&lo, old, e),
            new: byte(&ln, new, sn)..byte(&ln, new, en),
            old_line: s as u32,
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn segments_cover_whole_top_level_blocks() {
        let old = "import x\n\n@jit\ndef f(a):\n    return exp(a)\n\n\ndef g():\n    pass\n";
        let new = "import x\nimport y\n\n@jit\ndef f(a):\n    return exp2(a)\n\n\ndef g():\n    pass\n";
        let hs = hunks(old.as_bytes(), new.as_bytes()).unwrap();
        let segs = segments(old, new, &hs).unwrap();
        let texts: Vec<(&str, &str)> = segs.iter().map(|s| (&old[s.old.clone()], &new[s.new.clone()])).collect();
        assert_eq!(texts[0], ("import x\n\n", "import x\nimport y\n\n"), "{texts:?}");
        assert_eq!(texts[1], ("@jit\ndef f(a):\n    return exp(a)\n\n\n", "@jit\ndef f(a):\n    return exp2(a)\n\n\n"));
        assert_eq!(segs[1].old_line, 2);
        // A change in a multi-line decorator: the block is the whole
        // decorated definition, from its first decorator to its end.
        let old = "x = 1\n\n@triton.heuristics({\n    'A': f,\n})\n@triton.jit\ndef k(a):\n    pass\n\n\nif X:\n    y = 1\nelse:\n    y = 2\n";
        let new = old.replace("'A': f", "'A': g").replace("y = 2", "y = 3");
        let hs = hunks(old.as_bytes(), new.as_bytes()).unwrap();
        let segs = segments(old, &new, &hs).unwrap();
        let texts: Vec<&str> = segs.iter().map(|s| &old[s.old.clone()]).collect();
        assert_eq!(
            texts,
            [
                "@triton.heuristics({\n    'A': f,\n})\n@triton.jit\ndef k(a):\n    pass\n\n\n",
                "if X:\n    y = 1\nelse:\n    y = 2\n"
            ]
        );
    }

    use super::*;
    use kidiom_syntax::Limits;

    fn check(before: &str, after: &str) -> Vec<(String, String)> {
        let l = Limits::default();
        let a = Tree::parse(Lang::Python, before, &l).unwrap();
        let b = Tree::parse(Lang::Python, after, &l).unwrap();
        let (edits, _) = cut(Lang::Python, "k.py", ("b1", "b2"), (&a, &b), &Scope::ALL, &HistoryConfig::default());
        edits.into_iter().map(|e| (e.before, e.after)).collect()
    }

    #[test]
    fn nested_calls_that_gain_a_keyword_are_cut_too() {
        let e =
            check("b = tl.dot(tl.dot(a, b), c)\n", "b = tl.dot(tl.dot(a, b, allow_tf32=False), c, allow_tf32=False)\n");
        assert_eq!(
            e,
            [
                (
                    "tl.dot(tl.dot(a, b), c)".to_string(),
                    "tl.dot(tl.dot(a, b, allow_tf32=False), c, allow_tf32=False)".to_string()
                ),
                ("tl.dot(a, b)".to_string(), "tl.dot(a, b, allow_tf32=False)".to_string()),
            ]
        );
        // A nested change of another kind stays subsumed.
        let e = check("b = f(g(a), c)\n", "b = f(g(a + 1), c, k=1)\n");
        assert_eq!(e, [("f(g(a), c)".to_string(), "f(g(a + 1), c, k=1)".to_string())]);
    }

    #[test]
    fn edits_grow_to_an_anchor() {
        assert_eq!(
            check("x = tl.exp(b_g)\n", "x = tl.exp2(b_g)\n"),
            [("tl.exp(b_g)".to_string(), "tl.exp2(b_g)".to_string())]
        );
        assert_eq!(
            check("b = tl.dot(q, k)\n", "b = tl.dot(q, k, input_precision=\"ieee\")\n"),
            [("tl.dot(q, k)".to_string(), "tl.dot(q, k, input_precision=\"ieee\")".to_string())]
        );
        assert_eq!(
            check("def k(x, T: tl.constexpr):\n    pass\n", "def k(x, T):\n    pass\n"),
            [("T: tl.constexpr".to_string(), "T".to_string())]
        );
        assert_eq!(
            check("@triton.jit\ndef k(x):\n    pass\n", "@triton.jit(do_not_specialize=['T'])\ndef k(x):\n    pass\n"),
            [("@triton.jit".to_string(), "@triton.jit(do_not_specialize=['T'])".to_string())]
        );
    }

    #[test]
    fn broken_and_huge_changes_are_dropped() {
        assert!(check("x = f(a)\n", "x = f(a,, b)\n").is_empty());
        let big_args: Vec<String> = (0..300).map(|i| format!("a{i}")).collect();
        let after = format!("x = f({})\n", big_args.join(", "));
        assert!(check("x = f(a)\n", &after).is_empty());
    }

    #[test]
    fn textual_prefilter() {
        let (a, b) = ("x = 1\n# a\n", "x = 1\n# b\n\n");
        assert!(comment_only(Lang::Python, a, b, &hunks(a.as_bytes(), b.as_bytes()).unwrap()));
        let (a, b) = ("x = 1\n", "x = 2\n");
        assert!(!comment_only(Lang::Python, a, b, &hunks(a.as_bytes(), b.as_bytes()).unwrap()));
        assert_eq!(hunks(b"a\nb\n", b"a\nc\n").unwrap(), [Hunk { old_start: 1, old_len: 1, new_start: 1, new_len: 1 }]);
    }
}
