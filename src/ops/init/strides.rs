//! A tensor's shape read from the arithmetic of its address: `g + (bos * HV + i_hv) * K + o_k`
//! strides `o_k` by 1, `i_hv` by K and `bos` by HV * K, so g's last dims are (HV, K), and the
//! leading ones are whatever `bos` ranges over in a tensor whose shape the launcher says
//! (`v + (bos * HV + i_hv) * V + o_v` with v (B, T, HV, V): `bos` ranges over (B, T)). FLA's
//! launchers unpack `q`, `k` and `v` and leave the gates, betas and biases to the docstring.

use std::collections::BTreeMap;

use tree_sitter::Node;

use super::node_text;

/// One product of an address polynomial: a coefficient and its factors, sorted.
type Monomial = (i64, Vec<String>);

/// The most monomials an address may expand to (beyond that it is not a plain row-major address).
const MOST_TERMS: usize = 64;

/// What a kernel's local name stands for, where kidiom may read through it (`p = (i_t * H + i_h)
/// * K + o_k`, assigned once), else None: the name is a factor of its own.
pub(super) type Locals<'a, 't> = &'a dyn Fn(&str) -> Option<Node<'t>>;

/// Names are not read through more deeply than this (a chain of locals, never a cycle).
const DEEPEST: u8 = 6;

/// Expressions nested more deeply than this are no address kidiom reads (a generated
/// `x + 1 + 1 + ...` would otherwise recurse as deep as it is long).
const NESTED: u16 = 256;

/// An address expanded into a sum of products. A factor is a name, or an expression kidiom does
/// not expand (`i_nh // HV`, a call) spelled without spaces. `x[:, None]` is `x` broadcast.
/// `depth`: locals read through so far; `nest`: how deep in the expression.
fn expand<'t>(n: Node<'t>, text: &str, local: Locals<'_, 't>, depth: u8, nest: u16) -> Option<Vec<Monomial>> {
    if nest > NESTED {
        return None;
    }
    let atom = |s: String| Some(vec![(1, vec![s])]);
    let expand = |n: Node<'t>| expand(n, text, local, depth, nest + 1);
    let negated = |terms: Vec<Monomial>| terms.into_iter().map(|(c, f)| Some((c.checked_neg()?, f))).collect();
    match n.kind() {
        "parenthesized_expression" => expand(n.named_child(0)?),
        "integer" => Some(vec![(node_text(n, text).parse().ok()?, Vec::new())]),
        "identifier" => match local(node_text(n, text)).filter(|_| depth < DEEPEST) {
            Some(rhs) => self::expand(rhs, text, local, depth + 1, nest + 1),
            None => atom(node_text(n, text).to_string()),
        },
        "unary_operator" if node_text(n, text).starts_with('-') => negated(expand(n.child_by_field_name("argument")?)?),
        "binary_operator" => {
            let (l, r) = (n.child_by_field_name("left")?, n.child_by_field_name("right")?);
            let op = node_text(n.child_by_field_name("operator")?, text);
            match op {
                "+" | "-" => {
                    let mut out = expand(l)?;
                    let right = expand(r)?;
                    out.extend(if op == "-" { negated(right)? } else { right });
                    (out.len() <= MOST_TERMS).then_some(out)
                }
                "*" => {
                    let (a, b) = (expand(l)?, expand(r)?);
                    if a.len() * b.len() > MOST_TERMS {
                        return None;
                    }
                    let mut out = Vec::new();
                    for (ca, fa) in &a {
                        for (cb, fb) in &b {
                            let mut f: Vec<String> = fa.iter().chain(fb).cloned().collect();
                            f.sort();
                            out.push((ca.checked_mul(*cb)?, f));
                        }
                    }
                    Some(out)
                }
                _ => atom(spelled(n, text)),
            }
        }
        // `(i_n * H + i_h).to(tl.int64)`: the same value, wider
        "call"
            if n.child_by_field_name("function").is_some_and(|f| {
                f.kind() == "attribute"
                    && f.child_by_field_name("attribute").is_some_and(|a| node_text(a, text) == "to")
            }) =>
        {
            expand(n.child_by_field_name("function")?.child_by_field_name("object")?)
        }
        // `o_k[:, None]`: o_k along another axis, the same index
        "subscript"
            if n.child_by_field_name("value").is_some_and(|v| v.kind() == "identifier")
                && node_text(n, text).split_once('[').is_some_and(|(_, s)| {
                    s.trim_end_matches(']').split(',').all(|p| matches!(p.trim(), ":" | "None"))
                }) =>
        {
            atom(node_text(n.child_by_field_name("value")?, text).to_string())
        }
        _ => atom(spelled(n, text)),
    }
}

fn spelled(n: Node<'_>, text: &str) -> String {
    node_text(n, text).chars().filter(|c| !c.is_whitespace()).collect()
}

/// A row-major address: the dims its strides give, outermost first (`[HV, K]` for g above),
/// and the indices of its outermost stride, whose extent the strides do not say (`bos`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Layout {
    pub(super) inner: Vec<String>,
    pub(super) outer: Vec<String>,
    /// Each inner index with the dim it ranges over (`i_hv` -> HV, `o_k` -> K).
    pub(super) ranges: Vec<(String, String)>,
}

/// The layout of an address based on the pointer `base`: the sum of `parts` (the address,
/// `p_q = q + o_t[:, None] * (H*K) + o_k[None, :]`, and what the kernel adds to the pointer
/// itself, `q += (bos * H + i_h) * K`), in the launcher's size names: `size` maps a kernel name
/// that is a size to the launcher's name for it. A term of sizes alone (a step, `q += H * K`)
/// moves along the layout and says nothing of it. None where the offset is no row-major
/// address of sizes (strides passed as arguments, a coefficient, a term with two indices).
/// `block_strides`: a block pointer's strides (`tl.make_block_ptr(q, (T, K), (H*K, 1), ...)`),
/// each an index of its own times its stride.
/// `local`: the kernel's locals read through (see [`Locals`]).
pub(super) fn layout<'t>(
    parts: &[Node<'t>],
    block_strides: &[Node<'t>],
    base: &str,
    text: &str,
    size: &dyn Fn(&str) -> Option<String>,
    local: Locals<'_, 't>,
) -> Option<Layout> {
    let mut terms = Vec::new();
    for p in parts {
        terms.extend(expand(*p, text, local, 0, 0)?);
    }
    for (j, st) in block_strides.iter().enumerate() {
        let mut stride = match expand(*st, text, local, 0, 0)?.as_slice() {
            [(1, f)] => f.clone(),
            _ => return None,
        };
        stride.push(format!("#{base}.block_dim{j}")); // an index of this pointer's block alone
        terms.push((1, stride));
    }
    let is_base = |(c, f): &Monomial| *c == 1 && f.len() == 1 && f[0] == base;
    if !terms.iter().any(is_base) {
        return None;
    }
    terms.retain(|t| !is_base(t));
    // stride (sizes, sorted) -> the indices multiplied by it
    let mut by_stride: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
    for (c, f) in terms {
        let (sizes, indices): (Vec<String>, Vec<String>) = f.into_iter().partition(|x| size(x).is_some());
        if indices.is_empty() {
            continue;
        }
        if c != 1 || indices.len() != 1 || indices[0] == base {
            return None;
        }
        let mut stride: Vec<String> = sizes.iter().filter_map(|s| size(s)).collect();
        stride.sort();
        by_stride.entry(stride).or_default().extend(indices);
    }
    let mut strides: Vec<(Vec<String>, Vec<String>)> = by_stride.into_iter().collect();
    strides.sort_by_key(|(s, _)| s.len());
    if strides.first().is_none_or(|(s, _)| !s.is_empty()) {
        return None;
    }
    // each stride the one below times one more size: that size is the dim of the one below
    let mut inner = Vec::new();
    let mut ranges = Vec::new();
    for w in strides.windows(2) {
        let (below, above) = (&w[0], &w[1]);
        let extra = extra_factor(&below.0, &above.0)?;
        for i in &below.1 {
            ranges.push((i.clone(), extra.clone()));
        }
        inner.insert(0, extra);
    }
    let outer = strides.last().map(|(_, i)| i.clone()).unwrap_or_default();
    Some(Layout { inner, outer, ranges })
}

/// The one factor `above` has beyond `below` (None unless `below` divides it by exactly one).
fn extra_factor(below: &[String], above: &[String]) -> Option<String> {
    let mut rest: Vec<&String> = above.iter().collect();
    for b in below {
        let at = rest.iter().position(|r| *r == b)?;
        rest.remove(at);
    }
    match rest.as_slice() {
        [one] => Some((*one).clone()),
        _ => None,
    }
}

/// What each index ranges over, from every layout's inner indices and from the outer indices of
/// tensors whose dims are known (`known`: layout and dims); an index given two ranges has none.
pub(super) fn index_ranges(layouts: &[&Layout], known: &[(&Layout, &[String])]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Option<Vec<String>>> = BTreeMap::new();
    let mut note = |i: &str, dims: Vec<String>| {
        let e = out.entry(i.to_string()).or_insert_with(|| Some(dims.clone()));
        if e.as_ref().is_some_and(|d| *d != dims) {
            *e = None;
        }
    };
    for l in layouts {
        for (i, d) in &l.ranges {
            note(i, vec![d.clone()]);
        }
    }
    for (l, dims) in known {
        if let Some(lead) = dims.len().checked_sub(l.inner.len())
            && dims[lead..] == l.inner[..]
        {
            for i in &l.outer {
                note(i, dims[..lead].to_vec());
            }
        }
    }
    out.into_iter().filter_map(|(k, v)| Some((k, v?))).collect()
}

/// A tensor's dims from its layout: its outer index's range, then its inner dims.
pub(super) fn dims(l: &Layout, ranges: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    // several indices at the outer stride (`bos` and a block's row): the widest range says most
    let lead = l.outer.iter().filter_map(|i| ranges.get(i)).max_by_key(|r| r.len())?;
    let dims: Vec<String> = lead.iter().chain(&l.inner).cloned().collect();
    (!dims.is_empty()).then_some(dims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kidiom_syntax::{Lang, parse_tree};

    /// The layout of the address `expr` (Python) with base `base`; sizes are capitalised names.
    fn layout_of(expr: &str, base: &str) -> Option<Layout> {
        let tree = parse_tree(Lang::Python, expr).ok()??;
        let e = tree.root_node().named_child(0)?.named_child(0)?;
        let size = |s: &str| s.chars().next().is_some_and(|c| c.is_ascii_uppercase()).then(|| s.to_string());
        layout(&[e], &[], base, expr, &size, &|_| None)
    }

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn strides_give_the_inner_dims_and_a_known_tensor_the_outer() {
        let v = layout_of("v + (bos * HV + i_hv) * V + o_v", "v").expect("v");
        assert_eq!((v.inner.clone(), v.outer.clone()), (strs(&["HV", "V"]), strs(&["bos"])));
        let g = layout_of("g + (bos * HV + i_hv) * K + o_k", "g").expect("g");
        let beta = layout_of("beta + bos * HV + i_hv", "beta").expect("beta");
        let bias = layout_of("dt_bias + i_hv * K + o_k", "dt_bias").expect("bias");
        let a = layout_of("A_log + i_hv", "A_log").expect("A");
        let h0 = layout_of("h0 + (i_n * HV + i_hv) * K * V + o_k[:, None] * V + o_v[None, :]", "h0").expect("h0");
        assert_eq!(h0.inner, strs(&["HV", "K", "V"]));
        let vdims = strs(&["B", "T", "HV", "V"]);
        let ranges = index_ranges(&[&v, &g, &beta, &bias, &a, &h0], &[(&v, &vdims)]);
        assert_eq!(dims(&g, &ranges), Some(strs(&["B", "T", "HV", "K"])));
        assert_eq!(dims(&beta, &ranges), Some(strs(&["B", "T", "HV"])));
        assert_eq!(dims(&bias, &ranges), Some(strs(&["HV", "K"])));
        assert_eq!(dims(&a, &ranges), Some(strs(&["HV"])));
        // i_n's range is nowhere known
        assert_eq!(dims(&h0, &ranges), None);
    }

    #[test]
    fn a_pointer_moved_first_is_read_with_its_moves() {
        // `q += (bos * H + i_h) * K` then `p_q = q + o_t[:, None] * (H*K) + o_k[None, :]`, and a
        // step of sizes alone (`q += H * K`) that says nothing
        let src = "q + o_t[:, None] * (H*K) + o_k[None, :]\n(bos * H + i_h).to(tl.int64) * K\nH * K\n";
        let tree = parse_tree(Lang::Python, src).ok().flatten().expect("parse");
        let root = tree.root_node();
        let parts: Vec<Node<'_>> = (0..3).filter_map(|i| root.named_child(i)?.named_child(0)).collect();
        let size = |s: &str| matches!(s, "H" | "K").then(|| s.to_string());
        let l = layout(&parts, &[], "q", src, &size, &|_| None).expect("q");
        assert_eq!(l.inner, strs(&["H", "K"]));
        assert_eq!(l.outer.len(), 2, "bos and o_t both step by H * K: {l:?}");
        // without the pointer itself, no address of it
        assert_eq!(layout(&parts[1..], &[], "q", src, &size, &|_| None), None);
        // a block pointer over the moved q: `tl.make_block_ptr(q, (T, K), (H*K, 1), ...)`
        let src = "q\n(bos * H + i_h) * K\nH*K\n1\n";
        let tree = parse_tree(Lang::Python, src).ok().flatten().expect("parse");
        let n: Vec<Node<'_>> = (0..4).filter_map(|i| tree.root_node().named_child(i)?.named_child(0)).collect();
        let l = layout(&n[..2], &n[2..], "q", src, &size, &|_| None).expect("block");
        assert_eq!(l.inner, strs(&["H", "K"]));
    }

    #[test]
    fn a_local_offset_is_read_through() {
        // `p = (i_t * H + i_h) * K + o_k` then `tl.load(g + p)`
        let src = "g + p\n(i_t * H + i_h) * K + o_k\n";
        let tree = parse_tree(Lang::Python, src).ok().flatten().expect("parse");
        let n: Vec<Node<'_>> = (0..2).filter_map(|i| tree.root_node().named_child(i)?.named_child(0)).collect();
        let size = |s: &str| matches!(s, "H" | "K").then(|| s.to_string());
        assert_eq!(layout(&n[..1], &[], "g", src, &size, &|_| None).map(|l| l.inner), Some(vec![]));
        let local = |name: &str| (name == "p").then_some(n[1]);
        let l = layout(&n[..1], &[], "g", src, &size, &local).expect("through p");
        assert_eq!((l.inner, l.outer), (strs(&["H", "K"]), strs(&["i_t"])));
    }

    #[test]
    fn what_is_no_row_major_address_of_sizes_has_no_layout() {
        // a stride passed as an argument, a coefficient, two indices in a term, no unit stride
        assert_eq!(layout_of("x + row * stride_x + cols", "x").map(|l| l.inner), None);
        assert_eq!(layout_of("x + 2 * i * N + j", "x"), None);
        assert_eq!(layout_of("x + i * j * N + k", "x"), None);
        assert_eq!(layout_of("x + i * N", "x"), None);
        assert_eq!(layout_of("x + i * N + N", "x"), None);
        // two sizes between strides: their order is not readable
        assert_eq!(layout_of("x + i * H * K + j", "x"), None);
        // nested past what an address is, or a coefficient that cannot be negated: nothing, no panic
        let deep = format!("x + {}j{} + i * N", "(".repeat(300), ")".repeat(300));
        assert_eq!(layout_of(&deep, "x"), None);
        let long = format!("x + i * N + j{}", " + 1".repeat(5000));
        assert_eq!(layout_of(&long, "x"), None);
        assert_eq!(layout_of("x - -9223372036854775808 * i + j", "x"), None);
    }
}
