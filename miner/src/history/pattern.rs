//! Edit templates: syntax-tree patterns with holes, their matcher, and
//! their rendering in ast-grep syntax (`$A` one node, `$$$A` a sequence).
//!
//! Templates are built from edits of bounded size (see
//! [`super::HistoryConfig::max_edit_nodes`]), so the recursion over a
//! template's depth is bounded; the trees they are matched against are
//! walked by index ranges.

use super::tree::{Tree, mix};

/// A template node.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Pat {
    /// One node, bound on the before side.
    Hole(u16),
    /// A run of sibling nodes (arguments, parameters, statements).
    Seq(u16),
    /// An after-only value: the value of a keyword argument the edit adds,
    /// which differs between examples and is bound nowhere on the before
    /// side (`input_precision=$V`). Its values are the rule's histogram.
    Fresh(u16),
    /// A concrete subtree, matched by its structural hash.
    Concrete {
        hash: u64,
        kind: u16,
        tokens: Vec<String>,
        /// It holds a named token with a letter (an identifier, a keyword argument).
        anchor: bool,
    },
    /// A node of this kind whose children match `kids`.
    Node { kind: u16, kids: Vec<Pat> },
}

/// What a match bound: per hole, a node (or a run of siblings) of the
/// matched tree; and every hole occurrence's byte range, for rendering.
#[derive(Debug, Clone, Default)]
pub(crate) struct Binds {
    pub one: Vec<Option<u32>>,
    /// First node and count of a sequence, and the run's hash.
    pub seq: Vec<Option<(u32, u32, u64)>>,
    pub occ: Vec<(u16, u32, u32)>,
}

impl Binds {
    pub(crate) fn new(holes: usize) -> Binds {
        Binds { one: vec![None; holes], seq: vec![None; holes], occ: Vec::new() }
    }
}

impl Pat {
    /// The concrete pattern of `n`'s subtree.
    pub(crate) fn concrete(t: &Tree<'_>, n: u32) -> Pat {
        let node = t.nodes[n as usize];
        let anchor = (n..n + node.size).any(|i| {
            let x = t.nodes[i as usize];
            x.nkids == 0 && x.named && t.text(i).chars().any(char::is_alphabetic)
        });
        Pat::Concrete {
            hash: node.hash,
            kind: node.kind,
            tokens: t.tokens(n).into_iter().map(str::to_string).collect(),
            anchor,
        }
    }

    /// The root kind, when the template has one.
    pub(crate) fn kind(&self) -> Option<u16> {
        match self {
            Pat::Concrete { kind, .. } | Pat::Node { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// The hash the first child of every match has, when the template fixes
    /// it: a cheap test before [`Pat::matches`].
    pub(crate) fn first_kid_hash(&self) -> Option<u64> {
        match self {
            Pat::Node { kids, .. } => match kids.first() {
                Some(Pat::Concrete { hash, .. }) => Some(*hash),
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether node `n` of `t` can match at all: same kind, and the same
    /// first child where the template fixes it.
    pub(crate) fn may_match(&self, t: &Tree<'_>, n: u32) -> bool {
        let node = t.nodes[n as usize];
        match self {
            Pat::Concrete { hash, .. } => node.hash == *hash,
            Pat::Node { kind, .. } => {
                node.kind == *kind
                    && self.first_kid_hash().is_none_or(|h| node.nkids > 0 && t.nodes[n as usize + 1].hash == h)
            }
            _ => true,
        }
    }

    /// Whether it holds a concrete identifier-like token.
    pub(crate) fn has_anchor(&self) -> bool {
        match self {
            Pat::Concrete { anchor, .. } => *anchor,
            Pat::Node { kids, .. } => kids.iter().any(Pat::has_anchor),
            _ => false,
        }
    }

    /// The longest identifier-like concrete token: every match's text holds it.
    pub(crate) fn longest_word(&self) -> Option<&str> {
        match self {
            Pat::Concrete { tokens, .. } => tokens
                .iter()
                .filter(|t| t.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_'))
                .max_by_key(|t| t.len())
                .map(String::as_str),
            Pat::Node { kids, .. } => kids.iter().filter_map(Pat::longest_word).max_by_key(|t| t.len()),
            _ => None,
        }
    }

    /// Concrete tokens in the template.
    pub(crate) fn concrete_tokens(&self) -> usize {
        match self {
            Pat::Concrete { tokens, .. } => tokens.len(),
            Pat::Node { kids, .. } => kids.iter().map(Pat::concrete_tokens).sum(),
            _ => 0,
        }
    }

    /// Replaces hole `h` by a concrete pattern.
    pub(crate) fn substitute(&self, h: u16, with: &Pat) -> Pat {
        match self {
            Pat::Hole(x) if *x == h => with.clone(),
            Pat::Node { kind, kids } => {
                Pat::Node { kind: *kind, kids: kids.iter().map(|k| k.substitute(h, with)).collect() }
            }
            other => other.clone(),
        }
    }

    /// Matches at node `n` of `t`.
    pub(crate) fn matches(&self, t: &Tree<'_>, n: u32, b: &mut Binds) -> bool {
        match self {
            Pat::Concrete { hash, .. } => t.nodes[n as usize].hash == *hash,
            Pat::Hole(h) | Pat::Fresh(h) => {
                let slot = usize::from(*h);
                if slot >= b.one.len() {
                    return false;
                }
                match b.one[slot] {
                    Some(prev) if t.nodes[prev as usize].hash != t.nodes[n as usize].hash => return false,
                    Some(_) => {}
                    None => b.one[slot] = Some(n),
                }
                let node = t.nodes[n as usize];
                b.occ.push((*h, node.start, node.end));
                true
            }
            Pat::Seq(_) => false,
            Pat::Node { kind, kids } => {
                if t.nodes[n as usize].kind != *kind {
                    return false;
                }
                let tk = t.kids(n);
                let end = t.nodes[n as usize].end;
                match_kids(kids, &tk, t, end, b)
            }
        }
    }

    /// The tokens the template produces under `b` (bound in `t`); `None`
    /// when it uses a hole that `b` leaves unbound. An after-only value
    /// ([`Pat::Fresh`]) is written from `fresh` when given there, else as
    /// one [`WILD`] token that stands for any value.
    pub(crate) fn instantiate(
        &self,
        t: &Tree<'_>,
        b: &Binds,
        fresh: &[Option<Vec<String>>],
        out: &mut Vec<String>,
    ) -> Option<()> {
        self.instantiate_with(t, b, fresh, &|n, out| out.extend(t.tokens(n).into_iter().map(str::to_string)), out)
    }

    /// [`Pat::instantiate`], with the tokens of each bound node written by
    /// `emit` (the safety replay writes nested sites as the commit left them).
    pub(crate) fn instantiate_with(
        &self,
        t: &Tree<'_>,
        b: &Binds,
        fresh: &[Option<Vec<String>>],
        emit: &dyn Fn(u32, &mut Vec<String>),
        out: &mut Vec<String>,
    ) -> Option<()> {
        match self {
            Pat::Concrete { tokens, .. } => out.extend(tokens.iter().cloned()),
            Pat::Fresh(h) => match fresh.get(usize::from(*h)) {
                Some(Some(v)) => out.extend(v.iter().cloned()),
                _ => out.push(WILD.to_string()),
            },
            Pat::Hole(h) => {
                let n = (*b.one.get(usize::from(*h))?)?;
                emit(n, out);
            }
            Pat::Seq(h) => {
                let (first, count, _) = (*b.seq.get(usize::from(*h))?)?;
                let mut k = first;
                for _ in 0..count {
                    emit(k, out);
                    k += t.nodes[k as usize].size;
                }
            }
            Pat::Node { kids, .. } => {
                for k in kids {
                    k.instantiate_with(t, b, fresh, emit, out)?;
                }
            }
        }
        Some(())
    }
}

/// The token [`Pat::instantiate`] writes for an after-only value it was
/// not given: matches one or more tokens in [`contains_run`].
pub(crate) const WILD: &str = "\u{0}*";

/// The most tokens one [`WILD`] stands for.
const MAX_WILD: usize = 64;

/// Whether `needle` (which may hold [`WILD`] tokens, each standing for one
/// or more tokens) occurs as a contiguous run of `hay`.
pub(crate) fn contains_run<S: AsRef<str>>(hay: &[S], needle: &[String]) -> bool {
    if needle.is_empty() {
        return false;
    }
    (0..hay.len()).any(|start| run_at(hay, start, needle))
}

fn run_at<S: AsRef<str>>(hay: &[S], start: usize, needle: &[String]) -> bool {
    // Backtracking over wildcards, iteratively: (hay position, needle position).
    let mut stack = vec![(start, 0usize)];
    while let Some((i, j)) = stack.pop() {
        if j == needle.len() {
            return true;
        }
        if i >= hay.len() {
            continue;
        }
        if needle[j] == WILD {
            // One token, then as many more as the rest allows.
            for k in (i + 1..=hay.len().min(i + MAX_WILD)).rev() {
                stack.push((k, j + 1));
            }
        } else if hay[i].as_ref() == needle[j] {
            stack.push((i + 1, j + 1));
        }
    }
    false
}

fn seq_hash(t: &Tree<'_>, kids: &[u32]) -> u64 {
    kids.iter().fold(mix(0x5e9, kids.len() as u64), |h, &k| mix(h, t.nodes[k as usize].hash))
}

/// Matches a child list, with backtracking over sequence holes.
fn match_kids(ps: &[Pat], ts: &[u32], t: &Tree<'_>, parent_end: u32, b: &mut Binds) -> bool {
    let Some((p, rest)) = ps.split_first() else { return ts.is_empty() };
    match p {
        Pat::Seq(h) => {
            let slot = usize::from(*h);
            if slot >= b.seq.len() {
                return false;
            }
            let at = |len: usize| -> (u32, u32) {
                let start = ts.first().map_or(parent_end, |&k| t.nodes[k as usize].start);
                if len == 0 {
                    return (start, start);
                }
                (start, t.nodes[ts[len - 1] as usize].end)
            };
            if let Some((_, count, hash)) = b.seq[slot] {
                let count = count as usize;
                if count > ts.len() || seq_hash(t, &ts[..count]) != hash {
                    return false;
                }
                let (s, e) = at(count);
                b.occ.push((*h, s, e));
                return match_kids(rest, &ts[count..], t, parent_end, b);
            }
            // Fewest remaining pattern nodes that need a tree node each.
            let needed = rest.iter().filter(|p| !matches!(p, Pat::Seq(_))).count();
            for len in 0..=ts.len().saturating_sub(needed) {
                let saved = b.clone();
                let first = ts.first().copied().unwrap_or(0);
                b.seq[slot] = Some((first, len as u32, seq_hash(t, &ts[..len])));
                let (s, e) = at(len);
                b.occ.push((*h, s, e));
                if match_kids(rest, &ts[len..], t, parent_end, b) {
                    return true;
                }
                *b = saved;
            }
            false
        }
        p => {
            let Some((&n, tail)) = ts.split_first() else { return false };
            p.matches(t, n, b) && match_kids(rest, tail, t, parent_end, b)
        }
    }
}

/// The name of hole `h`: A..Z, then H26, H27, ...
pub(crate) fn hole_name(h: u16) -> String {
    if h < 26 { char::from(b'A' + h as u8).to_string() } else { format!("H{h}") }
}

/// Renders the text of node `n` of `t` with every hole occurrence of a
/// successful match replaced by its ast-grep metavariable.
pub(crate) fn render(t: &Tree<'_>, n: u32, b: &Binds, seq: &[bool]) -> String {
    let node = t.nodes[n as usize];
    let mut occ = b.occ.clone();
    occ.sort_by_key(|o| (o.1, o.2));
    let mut out = String::new();
    let mut pos = node.start;
    for (h, s, e) in occ {
        if s < pos {
            continue; // nested in an occurrence already rendered
        }
        out.push_str(t.src.get(pos as usize..s as usize).unwrap_or(""));
        let is_seq = seq.get(usize::from(h)).copied().unwrap_or(false);
        // A sequence hole binds its separators too (`x, `); keep them outside
        // the metavariable so it never runs into the next token (`$$$Atorch`).
        let bound = t.src.get(s as usize..e as usize).unwrap_or("");
        let is_sep = |c: char| c == ',' || c.is_whitespace();
        let (lead, trail) = if is_seq && !bound.trim_matches(is_sep).is_empty() {
            let body = bound.trim_start_matches(is_sep);
            (&bound[..bound.len() - body.len()], &body[body.trim_end_matches(is_sep).len()..])
        } else {
            ("", "")
        };
        out.push_str(lead);
        out.push_str(if is_seq { "$$$" } else { "$" });
        out.push_str(&hole_name(h));
        out.push_str(trail);
        pos = e;
    }
    out.push_str(t.src.get(pos as usize..node.end as usize).unwrap_or(""));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kidiom_syntax::Lang;
    use kidiom_syntax::Limits;

    fn call(t: &Tree<'_>, text: &str) -> u32 {
        (0..t.nodes.len() as u32).rev().find(|&i| t.text(i) == text).unwrap()
    }

    #[test]
    fn holes_bind_consistently_and_sequences_backtrack() {
        let l = Limits::default();
        let pt = Tree::parse(Lang::Python, "f(a, a)\n", &l).unwrap();
        let root = call(&pt, "f(a, a)");
        // f($A, $A): build by hand from the concrete tree.
        let kids = pt.kids(root);
        let args = pt.kids(kids[1]);
        let pat = Pat::Node {
            kind: pt.nodes[root as usize].kind,
            kids: vec![
                Pat::concrete(&pt, kids[0]),
                Pat::Node {
                    kind: pt.nodes[kids[1] as usize].kind,
                    kids: vec![
                        Pat::concrete(&pt, args[0]),
                        Pat::Hole(0),
                        Pat::concrete(&pt, args[2]),
                        Pat::Hole(0),
                        Pat::concrete(&pt, args[4]),
                    ],
                },
            ],
        };
        let t = Tree::parse(Lang::Python, "f(x + 1, x + 1)\nf(x, y)\n", &l).unwrap();
        let yes = call(&t, "f(x + 1, x + 1)");
        let no = call(&t, "f(x, y)");
        let mut b = Binds::new(1);
        assert!(pat.matches(&t, yes, &mut b));
        assert_eq!(render(&t, yes, &b, &[false]), "f($A, $A)");
        assert!(!pat.matches(&t, no, &mut Binds::new(1)));

        // f($$$A, y) matches f(x, y) and binds `x ,`.
        let pat2 = Pat::Node {
            kind: pt.nodes[root as usize].kind,
            kids: vec![
                Pat::concrete(&pt, kids[0]),
                Pat::Node {
                    kind: pt.nodes[kids[1] as usize].kind,
                    kids: vec![Pat::concrete(&pt, args[0]), Pat::Seq(0), Pat::concrete(&pt, args[4])],
                },
            ],
        };
        let mut b = Binds::new(1);
        assert!(pat2.matches(&t, no, &mut b));
        assert_eq!(render(&t, no, &b, &[true]), "f($$$A)");
        let mut toks = Vec::new();
        pat2.instantiate(&t, &b, &[], &mut toks).unwrap();
        assert_eq!(toks.join(" "), "f ( x , y )");
    }
}
