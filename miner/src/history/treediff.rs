//! A GumTree-style tree diff between two versions of a file.
//!
//! Top-down: identical subtrees (equal structural hashes) are matched
//! first, as anchors, by a longest common subsequence over each matched
//! pair's children. Then the unanchored children are paired up: runs of
//! equal length whose kinds agree are descended into, the bottom-up step
//! that recovers containers (a call whose argument changed is still the
//! same call). What cannot be paired is an edit: the smallest pair of
//! subtrees that contains a change. A subtree that reappears whole inside
//! its counterpart (`x` becoming `x.to(tl.int64)`) is a wrap, and is cut as
//! one edit rather than descended into.
//!
//! The walk uses an explicit stack, never recursion.

use super::tree::{NONE, Tree};

/// The diff of two trees.
#[derive(Debug)]
pub(crate) struct Diff {
    /// Before node -> after node, for matched nodes ([`NONE`] otherwise).
    pub map: Vec<u32>,
    /// Edit roots: the smallest changed (before, after) subtree pairs.
    pub edits: Vec<(u32, u32)>,
    /// Child lists too long to align were given up on.
    pub gave_up: bool,
}

/// Children lists longer than this product are not aligned by LCS.
const MAX_LCS_CELLS: usize = 400_000;

/// Diffs two trees from their roots.
pub(crate) fn diff(a: &Tree<'_>, b: &Tree<'_>) -> Diff {
    let mut d = Diff { map: vec![NONE; a.nodes.len()], edits: Vec::new(), gave_up: false };
    if a.nodes.is_empty() || b.nodes.is_empty() {
        return d;
    }
    let mut stack = vec![(0u32, 0u32)];
    while let Some((x, y)) = stack.pop() {
        let (nx, ny) = (a.nodes[x as usize], b.nodes[y as usize]);
        if nx.hash == ny.hash && nx.size == ny.size {
            for i in 0..nx.size {
                d.map[(x + i) as usize] = y + i;
            }
            continue;
        }
        let same_kind = nx.kind == ny.kind && nx.nkids > 0 && ny.nkids > 0;
        if !same_kind || b.has_descendant_hash(y, nx.hash) || a.has_descendant_hash(x, ny.hash) {
            d.edits.push((x, y));
            continue;
        }
        d.map[x as usize] = y;
        let (ka, kb) = (a.kids(x), b.kids(y));
        let ha: Vec<u64> = ka.iter().map(|&k| a.nodes[k as usize].hash).collect();
        let hb: Vec<u64> = kb.iter().map(|&k| b.nodes[k as usize].hash).collect();
        let Some(pairs) = align(&ha, &hb) else {
            d.gave_up = true;
            d.edits.push((x, y));
            continue;
        };
        // Walk anchors; between consecutive anchors lies a gap.
        let (mut i, mut j) = (0usize, 0usize);
        let mut container_edit = false;
        let mut todo: Vec<(u32, u32)> = Vec::new();
        let mut cut: Vec<(u32, u32)> = Vec::new();
        for &(pi, pj) in pairs.iter().chain(std::iter::once(&(ka.len(), kb.len()))) {
            let (ga, gb) = (&ka[i..pi], &kb[j..pj]);
            if ga.len() == gb.len() {
                for (&p, &q) in ga.iter().zip(gb) {
                    if a.nodes[p as usize].kind == b.nodes[q as usize].kind && a.nodes[p as usize].nkids > 0 {
                        todo.push((p, q));
                    } else {
                        cut.push((p, q));
                    }
                }
            } else {
                container_edit = true;
            }
            if pi < ka.len() {
                todo.push((ka[pi], kb[pj]));
            }
            i = pi + 1;
            j = pj + 1;
        }
        if container_edit {
            // An insertion or deletion among the children: the container is
            // the edit. The changed children that could still be paired are
            // descended into too: when the container is too large to be an
            // edit (a function body, the module), the changes inside it are
            // still edits of their own; when it is kept, they lie nested in
            // it and are subsumed.
            d.edits.push((x, y));
            d.edits.extend(cut);
            stack.extend(todo);
        } else {
            d.edits.extend(cut);
            stack.extend(todo);
        }
    }
    d.edits.sort_unstable();
    d
}

/// Longest common subsequence of two hash lists, as index pairs; `None`
/// when the lists are too long to align.
fn align(a: &[u64], b: &[u64]) -> Option<Vec<(usize, usize)>> {
    let mut pre = 0;
    while pre < a.len() && pre < b.len() && a[pre] == b[pre] {
        pre += 1;
    }
    let mut suf = 0;
    while suf < a.len() - pre && suf < b.len() - pre && a[a.len() - 1 - suf] == b[b.len() - 1 - suf] {
        suf += 1;
    }
    let (ma, mb) = (&a[pre..a.len() - suf], &b[pre..b.len() - suf]);
    let mut out: Vec<(usize, usize)> = (0..pre).map(|i| (i, i)).collect();
    if !ma.is_empty() && !mb.is_empty() {
        if ma.len() * mb.len() > MAX_LCS_CELLS {
            return None;
        }
        let (n, m) = (ma.len(), mb.len());
        let mut t = vec![0u32; (n + 1) * (m + 1)];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                t[i * (m + 1) + j] = if ma[i] == mb[j] {
                    t[(i + 1) * (m + 1) + j + 1] + 1
                } else {
                    t[(i + 1) * (m + 1) + j].max(t[i * (m + 1) + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n && j < m {
            if ma[i] == mb[j] {
                out.push((pre + i, pre + j));
                i += 1;
                j += 1;
            } else if t[(i + 1) * (m + 1) + j] >= t[i * (m + 1) + j + 1] {
                i += 1;
            } else {
                j += 1;
            }
        }
    }
    out.extend((0..suf).map(|k| (a.len() - suf + k, b.len() - suf + k)));
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kidiom_syntax::Lang;
    use kidiom_syntax::Limits;

    fn edits(before: &str, after: &str) -> Vec<(String, String)> {
        let l = Limits::default();
        let a = Tree::parse(Lang::Python, before, &l).unwrap();
        let b = Tree::parse(Lang::Python, after, &l).unwrap();
        let d = diff(&a, &b);
        d.edits.iter().map(|&(x, y)| (a.text(x).to_string(), b.text(y).to_string())).collect()
    }

    #[test]
    fn smallest_changed_subtrees() {
        let e = edits("x = tl.exp(b_g)\ny = 2\n", "x = tl.exp2(b_g)\ny = 2\n");
        assert_eq!(e, [("exp".into(), "exp2".into())]);
        let e = edits("a = f(x)\nb = f(y)\n", "a = f(x)\nb = f(y, mask=m)\n");
        assert_eq!(e, [("(y)".into(), "(y, mask=m)".into())]);
        assert!(edits("f(x)\n", "f(x)  # only a comment\n").is_empty());
    }

    #[test]
    fn wraps_are_one_edit() {
        let e = edits("i = tl.program_id(0)\n", "i = tl.program_id(0).to(tl.int64)\n");
        assert_eq!(e, [("tl.program_id(0)".into(), "tl.program_id(0).to(tl.int64)".into())]);
    }

    #[test]
    fn two_changes_two_edits() {
        let e = edits("x = exp(a) * exp(b)\n", "x = exp2(a) * exp2(b)\n");
        assert_eq!(e.len(), 2, "{e:?}");
    }

    #[test]
    fn lcs_aligns_around_insertions() {
        assert_eq!(align(&[1, 2, 3], &[1, 9, 2, 3]).unwrap(), [(0, 0), (1, 2), (2, 3)]);
        assert_eq!(align(&[5, 1, 6], &[1, 7]).unwrap(), [(1, 0)]);
        assert_eq!(align(&[], &[1]).unwrap(), []);
    }
}
