//! A compact syntax tree for history mining: tree-sitter's tree lowered
//! into a preorder arena with structural hashes.
//!
//! In preorder the subtree of node `i` is the index range `i..i + size`, so
//! every walk here is a loop over a range, never a recursion: tree-sitter
//! trees can be thousands of levels deep. Comments and other extras are left
//! out, so an edit that only touches comments changes no hash.

use kidiom_syntax::{Lang, Limits, Skip};

/// No node.
pub(crate) const NONE: u32 = u32::MAX;

/// One node of a [`Tree`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Node {
    /// tree-sitter kind id.
    pub kind: u16,
    /// Named (not a punctuation or keyword token).
    pub named: bool,
    /// An error or missing node lies in this subtree.
    pub err: bool,
    /// Byte range in the tree's source.
    pub start: u32,
    pub end: u32,
    /// Nodes in the subtree, itself included.
    pub size: u32,
    /// Number of children.
    pub nkids: u32,
    /// Parent, or [`NONE`] for the root.
    pub parent: u32,
    /// Structural hash: kind and children, or kind and text for a leaf.
    pub hash: u64,
}

/// A syntax tree over borrowed source text.
#[derive(Debug)]
pub(crate) struct Tree<'s> {
    pub src: &'s str,
    pub nodes: Vec<Node>,
}

const K: u64 = 0x517c_c1b7_2722_0a95;

#[inline]
pub(crate) fn mix(h: u64, x: u64) -> u64 {
    (h.rotate_left(5) ^ x).wrapping_mul(K)
}

pub(crate) fn hash_bytes(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = mix(seed, bytes.len() as u64);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = mix(h, u64::from_le_bytes(w));
    }
    for &b in chunks.remainder() {
        h = mix(h, u64::from(b));
    }
    h
}

impl<'s> Tree<'s> {
    /// Parses a whole file. Rust files are not tree-sitter parsed and give
    /// [`Skip::ParseFailed`] here (history mining covers tree-sitter languages).
    pub(crate) fn parse(lang: Lang, src: &'s str, limits: &Limits) -> Result<Tree<'s>, Skip> {
        kidiom_syntax::decode(src.as_bytes(), limits)?;
        let ts = kidiom_syntax::parse_tree(lang, src)?.ok_or(Skip::ParseFailed)?;
        Ok(Tree::lower(src, &ts))
    }

    /// Lowers a whole tree-sitter tree over `src`.
    pub(crate) fn lower(src: &'s str, ts: &tree_sitter::Tree) -> Tree<'s> {
        let mut nodes: Vec<Node> = Vec::new();
        lower_subtree(&mut nodes, ts.root_node(), NONE);
        let mut t = Tree { src, nodes };
        t.finish();
        t
    }

    /// Lowers the top-level statements of a whole-file tree that overlap
    /// one of `ranges`, under the file's root: enough to match
    /// templates inside the ranges, at a fraction of lowering the file.
    pub(crate) fn lower_overlapping(
        src: &'s str,
        ts: &tree_sitter::Tree,
        ranges: &[std::ops::Range<usize>],
    ) -> Tree<'s> {
        let root = ts.root_node();
        let mut nodes = vec![file_root(root, root.start_byte()..root.end_byte(), root.is_error() || root.is_missing())];
        for n in top_level(root) {
            let (s, e) = (n.start_byte(), n.end_byte());
            if ranges.iter().any(|r| r.start < e && s < r.end) {
                lower_subtree(&mut nodes, n, 0);
            }
        }
        let mut t = Tree { src, nodes };
        t.finish();
        t
    }

    /// Lowers the top-level statements of a whole-file tree that lie in
    /// `range` (byte offsets of whole lines) under a root of the file
    /// root's kind: the tree a parse of `src[range]` alone gives, with
    /// offsets into `src`. `None` when a statement straddles an end of
    /// `range` or the file has a parse error (then the fragment must be
    /// parsed on its own).
    pub(crate) fn lower_top(src: &'s str, ts: &tree_sitter::Tree, range: std::ops::Range<usize>) -> Option<Tree<'s>> {
        let root = ts.root_node();
        if root.has_error() {
            return None;
        }
        let mut nodes = vec![file_root(root, range.clone(), false)];
        for n in top_level(root) {
            let (s, e) = (n.start_byte(), n.end_byte());
            if s >= range.end {
                break;
            }
            if (s < range.start && e > range.start) || e > range.end {
                return None;
            }
            if s >= range.start {
                lower_subtree(&mut nodes, n, 0);
            }
        }
        let mut t = Tree { src, nodes };
        t.finish();
        Some(t)
    }

    /// Rebuilds a tree from its [`Tree::flat`] form over `src` (the
    /// subtree's own text). Returns `None` when the encoding is inconsistent.
    pub(crate) fn from_flat(src: &'s str, flat: &[u32]) -> Option<Tree<'s>> {
        if !flat.len().is_multiple_of(4) || flat.is_empty() {
            return None;
        }
        let mut nodes = Vec::with_capacity(flat.len() / 4);
        // Remaining child slots per open ancestor.
        let mut open: Vec<(u32, u32)> = Vec::new();
        for q in flat.chunks_exact(4) {
            let (k, nk, s, e) = (q[0], q[1], q[2], q[3]);
            if s > e || e as usize > src.len() || !src.is_char_boundary(s as usize) || !src.is_char_boundary(e as usize)
            {
                return None;
            }
            while let Some(&(_, 0)) = open.last() {
                open.pop();
            }
            let parent = match open.last_mut() {
                Some((p, left)) => {
                    *left -= 1;
                    *p
                }
                None if nodes.is_empty() => NONE,
                None => return None,
            };
            let idx = nodes.len() as u32;
            nodes.push(Node {
                kind: (k & 0xffff) as u16,
                named: k & 0x1_0000 != 0,
                err: k & 0x2_0000 != 0,
                start: s,
                end: e,
                size: 1,
                nkids: nk,
                parent,
                hash: 0,
            });
            if nk > 0 {
                open.push((idx, nk));
            }
        }
        if open.iter().any(|(_, left)| *left != 0) {
            return None;
        }
        let mut t = Tree { src, nodes };
        t.finish();
        Some(t)
    }

    /// Sizes, error flags and hashes, children before parents.
    fn finish(&mut self) {
        for i in (0..self.nodes.len()).rev() {
            let n = self.nodes[i];
            let mut h = mix(u64::from(n.kind), u64::from(n.named));
            if n.nkids == 0 {
                let text = self.src.as_bytes().get(n.start as usize..n.end as usize).unwrap_or_default();
                h = hash_bytes(h, text);
                self.nodes[i].hash = h;
            } else {
                let (mut size, mut err) = (1u32, n.err);
                let mut k = i + 1;
                for _ in 0..n.nkids {
                    let Some(c) = self.nodes.get(k) else { break };
                    h = mix(h, c.hash);
                    size += c.size;
                    err |= c.err;
                    k += c.size as usize;
                }
                self.nodes[i].hash = h;
                self.nodes[i].size = size;
                self.nodes[i].err = err;
            }
        }
    }

    /// The children of `n`, in order.
    pub(crate) fn kids(&self, n: u32) -> Vec<u32> {
        let node = self.nodes[n as usize];
        let mut out = Vec::with_capacity(node.nkids as usize);
        let mut k = n + 1;
        for _ in 0..node.nkids {
            out.push(k);
            k += self.nodes[k as usize].size;
        }
        out
    }

    /// The source text of `n`.
    pub(crate) fn text(&self, n: u32) -> &'s str {
        let node = &self.nodes[n as usize];
        self.src.get(node.start as usize..node.end as usize).unwrap_or("")
    }

    /// The leaf tokens of `n`'s subtree, in order.
    pub(crate) fn tokens(&self, n: u32) -> Vec<&'s str> {
        let size = self.nodes[n as usize].size;
        (n..n + size).filter(|&i| self.nodes[i as usize].nkids == 0).map(|i| self.text(i)).collect()
    }

    /// Whether `d` lies in the subtree of `a`.
    pub(crate) fn contains(&self, a: u32, d: u32) -> bool {
        d >= a && d < a + self.nodes[a as usize].size
    }

    /// Whether a proper descendant of `n` has hash `h`.
    pub(crate) fn has_descendant_hash(&self, n: u32, h: u64) -> bool {
        let size = self.nodes[n as usize].size;
        (n + 1..n + size).any(|i| self.nodes[i as usize].hash == h)
    }

    /// The name of keyword argument `n` (its first child), if `n` is one
    /// (`name=value` in Python).
    pub(crate) fn kw_name(&self, n: u32) -> Option<&'s str> {
        let node = self.nodes[n as usize];
        (node.kind == kidiom_syntax::grammar::keyword_argument_kind() && node.nkids == 3).then(|| self.text(n + 1))
    }

    /// How many keyword arguments named `name` lie in the tree.
    pub(crate) fn kw_count(&self, name: &str) -> usize {
        (0..self.nodes.len() as u32).filter(|&i| self.kw_name(i) == Some(name)).count()
    }

    /// Depth of the subtree of `n` (1 for a leaf), computed without recursion.
    #[cfg(test)]
    pub(crate) fn depth(&self, n: u32) -> u32 {
        let size = self.nodes[n as usize].size;
        let mut depth = vec![0u32; size as usize];
        let mut max = 0;
        for i in n..n + size {
            let p = self.nodes[i as usize].parent;
            let d = if i == n || p == NONE { 1 } else { depth[(p - n) as usize] + 1 };
            depth[(i - n) as usize] = d;
            max = max.max(d);
        }
        max
    }

    /// 1-based line of byte offset `b`.
    pub(crate) fn line_of(&self, b: u32) -> u32 {
        let end = (b as usize).min(self.src.len());
        memchr::memchr_iter(b'\n', &self.src.as_bytes()[..end]).count() as u32 + 1
    }

    /// The subtree of `n` as flat quadruples `(kind|flags, kids, start, end)`
    /// with offsets relative to `n`'s start; [`Tree::from_flat`] reads it back.
    pub(crate) fn flat(&self, n: u32) -> Vec<u32> {
        let root = self.nodes[n as usize];
        let size = root.size;
        let mut out = Vec::with_capacity(size as usize * 4);
        for i in n..n + size {
            let x = self.nodes[i as usize];
            let k = u32::from(x.kind) | (u32::from(x.named) << 16) | (u32::from(x.err) << 17);
            out.extend_from_slice(&[k, x.nkids, x.start - root.start, x.end - root.start]);
        }
        out
    }
}

/// Appends the lowered subtree of `top` (comments and other extras left
/// out) with `parent` as its parent, in preorder, without recursion.
fn lower_subtree(nodes: &mut Vec<Node>, top: tree_sitter::Node<'_>, parent: u32) {
    // A cursor made at `top` never leaves its subtree.
    let mut cur = top.walk();
    // Index of the lowered node the cursor's parent is, per depth.
    let mut stack: Vec<u32> = Vec::new();
    loop {
        let n = cur.node();
        if !n.is_extra() || n.is_error() {
            let p = stack.last().copied().unwrap_or(parent);
            let idx = nodes.len() as u32;
            nodes.push(Node {
                kind: n.kind_id(),
                named: n.is_named(),
                err: n.is_error() || n.is_missing(),
                start: n.start_byte() as u32,
                end: n.end_byte() as u32,
                size: 1,
                nkids: 0,
                parent: p,
                hash: 0,
            });
            if p != NONE {
                nodes[p as usize].nkids += 1;
            }
            if cur.goto_first_child() {
                stack.push(idx);
                continue;
            }
        }
        if cur.goto_next_sibling() {
            continue;
        }
        if !climb(&mut cur, &mut stack) {
            break;
        }
    }
}

fn climb(cur: &mut tree_sitter::TreeCursor<'_>, stack: &mut Vec<u32>) -> bool {
    loop {
        if !cur.goto_parent() {
            return false;
        }
        stack.pop();
        if cur.goto_next_sibling() {
            return true;
        }
    }
}

/// The root of a lowered tree: the file root's kind over `span`; its
/// children are lowered after it.
fn file_root(root: tree_sitter::Node<'_>, span: std::ops::Range<usize>, err: bool) -> Node {
    Node {
        kind: root.kind_id(),
        named: root.is_named(),
        err,
        start: span.start as u32,
        end: span.end as u32,
        size: 1,
        nkids: 0,
        parent: NONE,
        hash: 0,
    }
}

/// The top-level children of a file root, in order (extras included, as
/// the cursor gives them).
fn top_level(root: tree_sitter::Node<'_>) -> Vec<tree_sitter::Node<'_>> {
    let mut cur = root.walk();
    root.children(&mut cur).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowers_and_round_trips_through_flat() {
        let src = "x = tl.exp(b_g)  # note\ny = 1\n";
        let t = Tree::parse(Lang::Python, src, &Limits::default()).unwrap();
        assert_eq!(t.nodes[0].size as usize, t.nodes.len());
        assert!(t.tokens(0).contains(&"exp"));
        assert!(!t.tokens(0).iter().any(|s| s.contains("note")), "comments are left out");
        let call = (0..t.nodes.len() as u32).find(|&i| t.text(i) == "tl.exp(b_g)").unwrap();
        let flat = t.flat(call);
        let text = t.text(call);
        let back = Tree::from_flat(text, &flat).unwrap();
        assert_eq!(back.nodes[0].hash, t.nodes[call as usize].hash);
        assert_eq!(back.tokens(0), t.tokens(call));
        assert!(Tree::from_flat(text, &flat[..flat.len() - 4]).is_none());
        assert!(Tree::from_flat("x", &flat).is_none());
    }

    #[test]
    fn top_level_statements_lowered_from_the_whole_file_are_the_fragment_parsed_alone() {
        let l = Limits::default();
        let src = "import x\n\n# note\n@jit\ndef f(a):\n    return a  # c\n\n\nY = f(1)\n";
        let ts = kidiom_syntax::parse_tree(Lang::Python, src).unwrap().unwrap();
        let at = |s: &str| src.find(s).unwrap();
        let range = at("# note")..at("Y =");
        let part = Tree::lower_top(src, &ts, range.clone()).unwrap();
        let alone = Tree::parse(Lang::Python, &src[range.clone()], &l).unwrap();
        assert_eq!(part.nodes.len(), alone.nodes.len());
        for (p, a) in part.nodes.iter().zip(&alone.nodes) {
            assert_eq!((p.kind, p.size, p.nkids, p.parent, p.hash), (a.kind, a.size, a.nkids, a.parent, a.hash));
        }
        assert_eq!(part.text(1), "@jit\ndef f(a):\n    return a  # c");
        assert_eq!(part.nodes[1].start as usize, at("@jit"), "offsets are the file's");
        // A range that cuts a statement in two is no fragment.
        assert!(Tree::lower_top(src, &ts, at("def f")..at("Y =")).is_none());
        assert_eq!(Tree::lower(src, &ts).nodes.len(), Tree::parse(Lang::Python, src, &l).unwrap().nodes.len());
    }

    #[test]
    fn deep_input_does_not_overflow() {
        let src = format!("x = {}1{}\n", "(".repeat(5000), ")".repeat(5000));
        let t = Tree::parse(Lang::Python, &src, &Limits { max_bytes: 1 << 20, max_depth: 10_000 }).unwrap();
        assert!(t.depth(0) > 5000);
        assert_eq!(t.nodes[0].size as usize, t.nodes.len());
    }

    #[test]
    fn same_code_same_hash_other_code_other_hash() {
        let l = Limits::default();
        let a = Tree::parse(Lang::Python, "f(a, b)\n", &l).unwrap();
        let b = Tree::parse(Lang::Python, "f(a,   b)  # c\n", &l).unwrap();
        let c = Tree::parse(Lang::Python, "f(a, c)\n", &l).unwrap();
        assert_eq!(a.nodes[0].hash, b.nodes[0].hash);
        assert_ne!(a.nodes[0].hash, c.nodes[0].hash);
    }
}
