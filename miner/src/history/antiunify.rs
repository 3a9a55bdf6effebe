//! Anti-unification: concrete edits become templates.
//!
//! 1. **Buckets** (Revisar): edits are grouped by the 1-cap of their before
//!    and after trees (root kind, child kinds, punctuation) plus the tokens
//!    the edit removes and adds. Only edits in one bucket are compared.
//! 2. **Groups**: edits with identical before and after tokens are one group.
//! 3. **Clusters** (Getafix): groups are merged greedily, most frequent
//!    first, into the cluster whose anti-unified template stays most
//!    concrete. Anti-unification walks all examples in lockstep: equal
//!    subtrees stay concrete, same-kind nodes are descended into, child
//!    lists of different lengths keep their common ends and put the middle
//!    in a sequence hole (`$$$A`), and anything else becomes a hole (`$A`).
//!    Holes are keyed by the values they take in every example, so one hole
//!    can appear on both sides; an after-side difference that no before-side
//!    hole explains makes the merge fail.
//! 4. **Validation**: every example is re-matched by the before template
//!    and the after template, instantiated with its bindings, must give the
//!    example's after tokens.

use std::collections::{BTreeMap, HashMap};

use super::pattern::{Binds, Pat};
use super::tree::{Tree, mix};

/// One training example: an edit's before and after trees (roots at 0).
#[derive(Debug)]
pub(crate) struct Ex<'a> {
    pub before: Tree<'a>,
    pub after: Tree<'a>,
}

/// A generalized edit.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Template {
    pub before: Pat,
    pub after: Pat,
    /// Hole count; `seq[h]` says whether hole `h` is a sequence hole.
    pub seq: Vec<bool>,
    /// `fresh[h]`: hole `h` is an after-only value ([`Pat::Fresh`]).
    pub fresh: Vec<bool>,
    /// Keyword arguments the edit adds, with their depth below the
    /// template's root: a site that already has one there is not a site.
    pub added: Vec<(String, u32)>,
    /// Mined at a larger anchor (the enclosing statement) because the
    /// smaller one was unsafe.
    pub lifted: bool,
}

impl Template {
    pub(crate) fn holes(&self) -> usize {
        self.seq.len()
    }

    /// Concrete tokens on both sides: higher is more specific.
    pub(crate) fn specificity(&self) -> usize {
        self.before.concrete_tokens() + self.after.concrete_tokens()
    }

    /// Whether it has after-only values.
    pub(crate) fn has_fresh(&self) -> bool {
        self.fresh.iter().any(|f| *f)
    }

    /// Re-matches an example and reproduces its after tokens; returns the
    /// bindings on success.
    pub(crate) fn validate(&self, ex: &Ex<'_>) -> Option<Binds> {
        self.validate_full(ex).map(|(b, _)| b)
    }

    /// [`Template::validate`], also returning the example's after-only
    /// values (the text of each [`Pat::Fresh`] hole in its after side):
    /// the after template, given those values, must reproduce the
    /// example's after tokens exactly.
    pub(crate) fn validate_full(&self, ex: &Ex<'_>) -> Option<(Binds, Vec<Option<String>>)> {
        let mut b = Binds::new(self.holes());
        if !self.before.matches(&ex.before, 0, &mut b) {
            return None;
        }
        let mut fresh_toks: Vec<Option<Vec<String>>> = vec![None; self.holes()];
        let mut fresh_text: Vec<Option<String>> = vec![None; self.holes()];
        if self.has_fresh() {
            let mut ba = Binds::new(self.holes());
            if !self.after.matches(&ex.after, 0, &mut ba) {
                return None;
            }
            for (h, f) in self.fresh.iter().enumerate() {
                if !*f {
                    continue;
                }
                let n = ba.one.get(h).copied().flatten()?;
                fresh_toks[h] = Some(ex.after.tokens(n).into_iter().map(str::to_string).collect());
                fresh_text[h] = Some(ex.after.text(n).to_string());
            }
        }
        let mut toks = Vec::new();
        self.after.instantiate(&ex.before, &b, &fresh_toks, &mut toks)?;
        (toks == ex.after.tokens(0)).then_some((b, fresh_text))
    }

    /// Usable as a rule: rooted in a concrete kind, anchored by a concrete
    /// identifier, not too many holes.
    pub(crate) fn usable(&self, max_holes: usize) -> bool {
        self.before.kind().is_some() && self.before.has_anchor() && self.holes() <= max_holes
    }
}

/// The bucket of an edit: the 1-caps of both sides and the token change.
pub(crate) fn bucket_key(ex: &Ex<'_>) -> u64 {
    let cap = |t: &Tree<'_>| {
        let root = t.nodes[0];
        let mut h = mix(u64::from(root.kind), u64::from(root.nkids));
        for k in t.kids(0) {
            let n = t.nodes[k as usize];
            h = mix(h, u64::from(n.kind));
            if !n.named && n.nkids == 0 {
                h = super::tree::hash_bytes(h, t.text(k).as_bytes());
            }
        }
        h
    };
    let bt = ex.before.tokens(0);
    // The values of added keyword arguments do not split buckets: edits
    // that add `kw=` with different values are one family.
    let skip: Vec<u32> = added_kw_values(ex);
    let at: Vec<&str> = (0..ex.after.nodes.len() as u32)
        .filter(|&i| ex.after.nodes[i as usize].nkids == 0 && !skip.iter().any(|&v| ex.after.contains(v, i)))
        .map(|i| ex.after.text(i))
        .collect();
    let mut count: BTreeMap<&str, i64> = BTreeMap::new();
    for t in &bt {
        *count.entry(t).or_default() -= 1;
    }
    for t in &at {
        *count.entry(t).or_default() += 1;
    }
    let mut h = mix(cap(&ex.before), cap(&ex.after));
    for (tok, c) in count {
        if c != 0 {
            h = mix(super::tree::hash_bytes(h, tok.as_bytes()), c as u64);
        }
    }
    h
}

/// The value nodes of the keyword arguments an edit adds: named `kw` more
/// often after than before.
pub(crate) fn added_kw_values(ex: &Ex<'_>) -> Vec<u32> {
    let mut out = Vec::new();
    for i in 0..ex.after.nodes.len() as u32 {
        let Some(name) = ex.after.kw_name(i) else { continue };
        if ex.after.kw_count(name) > ex.before.kw_count(name) {
            out.push(ex.after.kids(i)[2]);
        }
    }
    out
}

/// The key of an edit's group: its exact before and after tokens.
pub(crate) fn group_key(ex: &Ex<'_>) -> u64 {
    mix(ex.before.nodes[0].hash, ex.after.nodes[0].hash)
}

struct Au<'e, 'a> {
    exs: &'e [&'e Ex<'a>],
    one: HashMap<Vec<u64>, u16>,
    seqs: HashMap<Vec<u64>, u16>,
    fresh_keys: HashMap<Vec<u64>, u16>,
    seq: Vec<bool>,
    fresh: Vec<bool>,
    added: Vec<(String, u32)>,
    /// Kinds never descended into (string literals: a hole inside a string
    /// token is no pattern).
    atoms: &'e [u16],
}

impl Au<'_, '_> {
    fn tree(&self, i: usize, after: bool) -> &Tree<'_> {
        if after { &self.exs[i].after } else { &self.exs[i].before }
    }

    fn new_hole(&mut self, seq: bool) -> Option<u16> {
        let h = u16::try_from(self.seq.len()).ok()?;
        self.seq.push(seq);
        self.fresh.push(false);
        Some(h)
    }

    /// Whether the after-side column `ns` is a keyword argument that every
    /// example adds (same name, more of them after than before).
    fn added_kw(&self, ns: &[u32]) -> Option<String> {
        let name = self.exs[0].after.kw_name(ns[0])?;
        for (i, &n) in ns.iter().enumerate() {
            let ex = self.exs[i];
            if ex.after.kw_name(n) != Some(name) || ex.after.kw_count(name) <= ex.before.kw_count(name) {
                return None;
            }
        }
        Some(name.to_string())
    }

    fn au(&mut self, after: bool, ns: &[u32], depth: u32) -> Option<Pat> {
        let n = ns.len();
        let hashes: Vec<u64> = (0..n).map(|i| self.tree(i, after).nodes[ns[i] as usize].hash).collect();
        if after && let Some(name) = self.added_kw(ns) {
            if !self.added.iter().any(|(a, d)| *a == name && *d == depth) {
                self.added.push((name, depth));
            }
            if hashes.iter().all(|h| *h == hashes[0]) {
                return Some(Pat::concrete(self.tree(0, after), ns[0]));
            }
            // `name = value`: the name and `=` agree; the value may be
            // bound on the before side, or is a fresh after-only value.
            let exs = self.exs;
            let t0 = &exs[0].after;
            let kids = t0.kids(ns[0]);
            let vals: Vec<u32> = (0..n).map(|i| self.exs[i].after.kids(ns[i])[2]).collect();
            let vh: Vec<u64> = (0..n).map(|i| self.exs[i].after.nodes[vals[i] as usize].hash).collect();
            let value = if vh.iter().all(|h| *h == vh[0]) {
                Pat::concrete(t0, vals[0])
            } else if let Some(&h) = self.one.get(&vh) {
                Pat::Hole(h)
            } else {
                let h = match self.fresh_keys.get(&vh) {
                    Some(&h) => h,
                    None => {
                        let h = self.new_hole(false)?;
                        self.fresh[usize::from(h)] = true;
                        self.fresh_keys.insert(vh, h);
                        h
                    }
                };
                Pat::Fresh(h)
            };
            let kind = t0.nodes[ns[0] as usize].kind;
            return Some(Pat::Node { kind, kids: vec![Pat::concrete(t0, kids[0]), Pat::concrete(t0, kids[1]), value] });
        }
        if hashes.iter().all(|h| *h == hashes[0]) {
            return Some(Pat::concrete(self.tree(0, after), ns[0]));
        }
        if after && let Some(&h) = self.one.get(&hashes) {
            return Some(Pat::Hole(h));
        }
        let kind = self.tree(0, after).nodes[ns[0] as usize].kind;
        let atom = self.atoms.contains(&kind);
        let same_kind = !atom
            && (0..n).all(|i| {
                let x = self.tree(i, after).nodes[ns[i] as usize];
                x.kind == kind && x.nkids > 0
            });
        if same_kind {
            let kids: Vec<Vec<u32>> = (0..n).map(|i| self.tree(i, after).kids(ns[i])).collect();
            let len = kids[0].len();
            if kids.iter().all(|k| k.len() == len) {
                let mut pats = Vec::with_capacity(len);
                let mut ok = true;
                for j in 0..len {
                    let col: Vec<u32> = kids.iter().map(|k| k[j]).collect();
                    match self.au(after, &col, depth + 1) {
                        Some(p) => pats.push(p),
                        None => {
                            ok = false;
                            break;
                        }
                    }
                }
                if ok {
                    return Some(Pat::Node { kind, kids: pats });
                }
            } else if let Some(p) = self.sequence(after, kind, &kids, depth) {
                return Some(p);
            }
        }
        if after {
            return None;
        }
        let h = match self.one.get(&hashes) {
            Some(&h) => h,
            None => {
                let h = self.new_hole(false)?;
                self.one.insert(hashes, h);
                h
            }
        };
        Some(Pat::Hole(h))
    }

    /// Child lists of different lengths: common ends stay, the middle is a
    /// sequence hole.
    fn sequence(&mut self, after: bool, kind: u16, kids: &[Vec<u32>], depth: u32) -> Option<Pat> {
        let min = kids.iter().map(Vec::len).min()?;
        let h = |i: usize, k: u32| self.tree(i, after).nodes[k as usize].hash;
        // A column stays outside the sequence when it agrees, or (after
        // side) when it is a keyword argument every example adds.
        let col_ok = |col: &[u32]| {
            (0..kids.len()).all(|i| h(i, col[i]) == h(0, col[0])) || (after && self.added_kw(col).is_some())
        };
        let mut pre = 0;
        while pre < min && col_ok(&kids.iter().map(|k| k[pre]).collect::<Vec<u32>>()) {
            pre += 1;
        }
        let mut suf = 0;
        while suf < min - pre && col_ok(&kids.iter().map(|k| k[k.len() - 1 - suf]).collect::<Vec<u32>>()) {
            suf += 1;
        }
        let key: Vec<u64> = (0..kids.len())
            .map(|i| {
                let mid = &kids[i][pre..kids[i].len() - suf];
                mid.iter().fold(mix(0x5e9, mid.len() as u64), |acc, &k| mix(acc, h(i, k)))
            })
            .collect();
        let id = match self.seqs.get(&key) {
            Some(&id) => id,
            None if after => return None,
            None => {
                let id = self.new_hole(true)?;
                self.seqs.insert(key, id);
                id
            }
        };
        let mut pats: Vec<Pat> = Vec::with_capacity(pre + suf + 1);
        for j in 0..pre {
            let col: Vec<u32> = kids.iter().map(|k| k[j]).collect();
            pats.push(self.au(after, &col, depth + 1)?);
        }
        pats.push(Pat::Seq(id));
        for j in (0..suf).rev() {
            let col: Vec<u32> = kids.iter().map(|k| k[k.len() - 1 - j]).collect();
            pats.push(self.au(after, &col, depth + 1)?);
        }
        Some(Pat::Node { kind, kids: pats })
    }
}

/// Anti-unifies examples into one template; `None` when the after side
/// differs in a way no before-side hole explains.
pub(crate) fn anti_unify(exs: &[&Ex<'_>]) -> Option<Template> {
    if exs.is_empty() {
        return None;
    }
    let atoms = kidiom_syntax::grammar::atom_kinds();
    let mut au = Au {
        exs,
        one: HashMap::new(),
        seqs: HashMap::new(),
        fresh_keys: HashMap::new(),
        seq: Vec::new(),
        fresh: Vec::new(),
        added: Vec::new(),
        atoms,
    };
    let roots = vec![0u32; exs.len()];
    let before = au.au(false, &roots, 0)?;
    let after = au.au(true, &roots, 0)?;
    Some(Template { before, after, seq: au.seq, fresh: au.fresh, added: au.added, lifted: false })
}

/// A cluster: a template and the groups it covers.
#[derive(Debug)]
pub(crate) struct Cluster {
    pub template: Template,
    /// Indices into the group list given to [`cluster`].
    pub groups: Vec<usize>,
}

/// Greedy clustering of one bucket's groups (each given by a
/// representative example), most important first.
pub(crate) fn cluster(reps: &[&Ex<'_>], max_holes: usize, max_clusters: usize) -> Vec<Cluster> {
    let mut clusters: Vec<Cluster> = Vec::new();
    for (g, rep) in reps.iter().enumerate() {
        let mut best: Option<(usize, Template)> = None;
        for (ci, c) in clusters.iter().enumerate() {
            let mut members: Vec<&Ex<'_>> = c.groups.iter().map(|&i| reps[i]).collect();
            members.push(rep);
            let Some(t) = anti_unify(&members) else { continue };
            if !t.usable(max_holes) {
                continue;
            }
            if best.as_ref().is_none_or(|(_, b)| t.specificity() > b.specificity()) {
                best = Some((ci, t));
            }
        }
        match best {
            Some((ci, t)) => {
                clusters[ci].template = t;
                clusters[ci].groups.push(g);
            }
            None if clusters.len() < max_clusters => {
                if let Some(t) = anti_unify(&[rep]) {
                    clusters.push(Cluster { template: t, groups: vec![g] });
                }
            }
            None => {}
        }
    }
    clusters
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::tree::Tree;
    use kidiom_syntax::Lang;
    use kidiom_syntax::Limits;

    /// Parses `before => after` statement pairs and cuts each to its edit.
    fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String, Vec<u32>, Vec<u32>)> {
        let l = Limits::default();
        pairs
            .iter()
            .map(|(b, a)| {
                let tb = Tree::parse(Lang::Python, b, &l).unwrap();
                let ta = Tree::parse(Lang::Python, a, &l).unwrap();
                let (e, _) = crate::history::edit::cut(
                    Lang::Python,
                    "k.py",
                    ("x", "y"),
                    (&tb, &ta),
                    &crate::history::scope::Scope::ALL,
                    &crate::history::HistoryConfig::default(),
                );
                let e = e.into_iter().next().unwrap();
                (e.before, e.after, e.before_tree, e.after_tree)
            })
            .collect()
    }

    fn exs(o: &[(String, String, Vec<u32>, Vec<u32>)]) -> Vec<Ex<'_>> {
        o.iter()
            .map(|(b, a, bt, at)| Ex {
                before: Tree::from_flat(b, bt).unwrap(),
                after: Tree::from_flat(a, at).unwrap(),
            })
            .collect()
    }

    fn render(t: &Template, ex: &Ex<'_>) -> (String, String) {
        let b = t.validate(ex).unwrap();
        let before = crate::history::pattern::render(&ex.before, 0, &b, &t.seq);
        let mut ba = Binds::new(t.holes());
        assert!(t.after.matches(&ex.after, 0, &mut ba));
        let after = crate::history::pattern::render(&ex.after, 0, &ba, &t.seq);
        (before, after)
    }

    #[test]
    fn shared_holes_between_sides() {
        let o = owned(&[("x = exp(b_g)\n", "x = exp2(b_g)\n"), ("y = exp(b_a - b_b)\n", "y = exp2(b_a - b_b)\n")]);
        let e = exs(&o);
        let refs: Vec<&Ex<'_>> = e.iter().collect();
        assert_eq!(bucket_key(&e[0]), bucket_key(&e[1]));
        let t = anti_unify(&refs).unwrap();
        assert!(t.usable(8));
        assert_eq!(render(&t, &e[0]), ("exp($A)".into(), "exp2($A)".into()));
        assert!(t.validate(&e[1]).is_some());
    }

    #[test]
    fn strings_are_atoms() {
        let o = owned(&[
            ("x = f(\"fused_a\")\n", "x = g(\"fused_a\")\n"),
            ("x = f(\"fused_b\")\n", "x = g(\"fused_b\")\n"),
        ]);
        let e = exs(&o);
        let t = anti_unify(&[&e[0], &e[1]]).unwrap();
        assert_eq!(render(&t, &e[0]), ("f($A)".into(), "g($A)".into()));
    }

    #[test]
    fn unbound_after_holes_fail_unless_an_added_argument() {
        // A changed value that nothing on the before side explains: no template.
        let o = owned(&[("x = f(a, k=1)\n", "x = f(a, k=2)\n"), ("x = f(b, k=1)\n", "x = f(b, k=3)\n")]);
        let e = exs(&o);
        assert!(anti_unify(&[&e[0], &e[1]]).is_none());
        // An added keyword argument: its value is a fresh after-only hole,
        // one bucket for all values, and every example still reproduces.
        let o = owned(&[("x = f(a)\n", "x = f(a, mask=m)\n"), ("x = f(b)\n", "x = f(b, mask=n < N)\n")]);
        let e = exs(&o);
        assert_eq!(bucket_key(&e[0]), bucket_key(&e[1]));
        let t = anti_unify(&[&e[0], &e[1]]).unwrap();
        assert!(t.has_fresh());
        assert_eq!(t.added, [("mask".to_string(), 2)]);
        assert_eq!(render(&t, &e[1]), ("f($A)".into(), "f($A, mask=$B)".into()));
        let (_, fresh) = t.validate_full(&e[1]).unwrap();
        assert_eq!(fresh[1].as_deref(), Some("n < N"));
        // With differing argument lists, the added argument stays outside the sequence.
        let o = owned(&[
            ("x = tl.load(p)\n", "x = tl.load(p, eviction_policy=\"evict_last\")\n"),
            ("x = tl.load(q, mask=m)\n", "x = tl.load(q, mask=m, eviction_policy='evict_first')\n"),
        ]);
        let e = exs(&o);
        assert_eq!(bucket_key(&e[0]), bucket_key(&e[1]));
        let t = anti_unify(&[&e[0], &e[1]]).unwrap();
        assert_eq!(render(&t, &e[1]), ("tl.load($$$A)".into(), "tl.load($$$A, eviction_policy=$B)".into()));
        assert!(t.validate(&e[0]).is_some() && t.validate(&e[1]).is_some());
    }

    #[test]
    fn sequence_holes_for_argument_lists() {
        let o = owned(&[
            ("x = tl.load(p)\n", "x = tl.load(p, eviction_policy=\"evict_last\")\n"),
            ("x = tl.load(q, mask=m, other=0)\n", "x = tl.load(q, mask=m, other=0, eviction_policy=\"evict_last\")\n"),
        ]);
        let e = exs(&o);
        let t = anti_unify(&[&e[0], &e[1]]).unwrap();
        assert_eq!(render(&t, &e[1]), ("tl.load($$$A)".into(), "tl.load($$$A, eviction_policy=\"evict_last\")".into()));
    }

    #[test]
    fn clustering_keeps_different_changes_apart() {
        let o = owned(&[
            ("x = tl.exp(a)\n", "x = tl.exp2(a)\n"),
            ("x = foo(a)\n", "x = bar(a)\n"),
            ("x = tl.exp(b)\n", "x = tl.exp2(b)\n"),
        ]);
        let e = exs(&o);
        let refs: Vec<&Ex<'_>> = e.iter().collect();
        let c = cluster(&refs, 8, 100);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].groups, [0, 2]);
        // An anchorless merge (`$F($A)`) is not made.
        assert_eq!(c[1].groups, [1]);
    }
}
