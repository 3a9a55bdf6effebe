//! What a launcher and its kernel do that their parameter lists do not say: which branches
//! of the launcher run under its parameters' defaults (FLA's `if inplace_final_state:
//! final_state = initial_state`), which mode flags change what it allocates or aliases, which
//! tensors the kernel reads only as indices (their values address other tensors), and which
//! tensors the kernel addresses alike (`q` as `k`).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use kidiom_syntax::preorder;
use tree_sitter::Node;

use super::{ALLOCATORS, callee_name, identifiers, node_text};

/// The launcher's branches under its flags' defaults.
#[derive(Debug, Default)]
pub(super) struct Paths {
    /// Bodies of branches that do not run when every flag has its default.
    pub(super) skipped: Vec<Range<usize>>,
    /// Flags whose branches allocate a tensor or make one name another (`final_state =
    /// initial_state`): they change what the call writes and returns, not only how.
    pub(super) structural: BTreeSet<String>,
}

impl Paths {
    /// Inside a branch that does not run under the defaults.
    pub(super) fn skips(&self, n: Node<'_>) -> bool {
        self.skipped.iter().any(|r| r.start <= n.start_byte() && n.end_byte() <= r.end)
    }

    /// How many branches that do not run under the defaults hold `n` (0: it runs).
    pub(super) fn depth(&self, n: Node<'_>) -> usize {
        self.skipped.iter().filter(|r| r.start <= n.start_byte() && n.end_byte() <= r.end).count()
    }
}

/// Conditions nested more deeply than this depend, as far as kidiom reads, on something else (a
/// generated `f and f and ...` would otherwise recurse as deep as it is long).
const DEEPEST_CONDITION: u16 = 64;

/// A condition's value when each flag has its default: `flag`, `not flag`, `a and b`, `a or b`
/// (None: it depends on something else).
fn value(cond: Node<'_>, text: &str, flags: &BTreeMap<String, bool>) -> Option<bool> {
    value_at(cond, text, flags, 0)
}

fn value_at(cond: Node<'_>, text: &str, flags: &BTreeMap<String, bool>, depth: u16) -> Option<bool> {
    if depth > DEEPEST_CONDITION {
        return None;
    }
    let value = |c: Node<'_>| value_at(c, text, flags, depth + 1);
    match cond.kind() {
        "identifier" => flags.get(node_text(cond, text)).copied(),
        "parenthesized_expression" => cond.named_child(0).and_then(value),
        "not_operator" => cond.child_by_field_name("argument").and_then(value).map(|v| !v),
        "boolean_operator" => {
            let l = cond.child_by_field_name("left").and_then(value);
            let r = cond.child_by_field_name("right").and_then(value);
            let op = cond.child_by_field_name("operator").map(|o| node_text(o, text)).unwrap_or("");
            match (op, l, r) {
                ("and", Some(false), _) | ("and", _, Some(false)) => Some(false),
                ("and", Some(true), Some(true)) => Some(true),
                ("or", Some(true), _) | ("or", _, Some(true)) => Some(true),
                ("or", Some(false), Some(false)) => Some(false),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Whether a block assigns a tensor: an allocation, or a name made another tensor's name
/// (`final_state = initial_state`, where `tensor` says `initial_state` is one).
fn assigns_a_tensor(block: Node<'_>, text: &str, tensor: &dyn Fn(&str) -> bool) -> bool {
    let mut found = false;
    preorder(block, |n| {
        if n.kind() == "assignment"
            && let Some(r) = n.child_by_field_name("right")
        {
            found |= (r.kind() == "call" && ALLOCATORS.contains(&callee_name(r, text).as_str()))
                || (r.kind() == "identifier" && tensor(node_text(r, text)));
        }
        !found
    });
    found
}

/// The branches of the launcher's body `body` that run under the flags' defaults (`flags`: the
/// bool parameters and their defaults), and the flags whose branches assign tensors.
pub(super) fn default_paths(
    body: Node<'_>,
    text: &str,
    flags: &BTreeMap<String, bool>,
    tensor: &dyn Fn(&str) -> bool,
) -> Paths {
    let mut paths = Paths::default();
    preorder(body, |n| {
        match n.kind() {
            "function_definition" | "class_definition" | "lambda" => return false,
            "if_statement" => {}
            _ => return true,
        }
        // the chain: (condition, block) of the `if` and each `elif`, then the `else` block
        let mut arms: Vec<(Option<Node<'_>>, Node<'_>)> = Vec::new();
        if let Some(b) = n.child_by_field_name("consequence") {
            arms.push((n.child_by_field_name("condition"), b));
        }
        let mut c = n.walk();
        for alt in n.children_by_field_name("alternative", &mut c) {
            match alt.kind() {
                "elif_clause" => {
                    if let Some(b) = alt.child_by_field_name("consequence") {
                        arms.push((alt.child_by_field_name("condition"), b));
                    }
                }
                "else_clause" => {
                    if let Some(b) = alt.child_by_field_name("body") {
                        arms.push((None, b));
                    }
                }
                _ => {}
            }
        }
        let mentioned: BTreeSet<String> = arms
            .iter()
            .filter_map(|(c, _)| *c)
            .flat_map(|c| identifiers(c, text))
            .filter(|i| flags.contains_key(i))
            .collect();
        if !mentioned.is_empty() && arms.iter().any(|(_, b)| assigns_a_tensor(*b, text, tensor)) {
            paths.structural.extend(mentioned);
        }
        // the arm that runs: the first whose condition holds, every one before it false
        let mut taken = None;
        for (i, (cond, _)) in arms.iter().enumerate() {
            match cond.map(|c| value(c, text, flags)) {
                None => {
                    taken = Some(i); // `else`
                    break;
                }
                Some(Some(true)) => {
                    taken = Some(i);
                    break;
                }
                Some(Some(false)) => {}
                Some(None) => return true, // depends on more than the flags: every arm may run
            }
        }
        for (i, (_, b)) in arms.iter().enumerate() {
            if Some(i) != taken {
                paths.skipped.push(b.byte_range());
            }
        }
        true
    });
    paths
}

/// The kernel's parameters that it reads only as indices: a value loaded from them is part of
/// an address another load or store uses (`bos = tl.load(cu_seqlens + i_n)`, then
/// `q + bos * H`; `h0 + tl.load(ssm_state_indices + i) * stride`). `addresses`: the first
/// argument of every load and store; `assigned`: each local's right-hand sides; `params_of`:
/// the parameters an address expression reaches.
pub(super) fn index_params<'t>(
    addresses: &[Node<'t>],
    assigned: &BTreeMap<String, Vec<Node<'t>>>,
    text: &str,
    params_of: &dyn Fn(&[Node<'t>]) -> BTreeSet<String>,
) -> BTreeSet<String> {
    // every expression an address is computed from, through the locals it names
    let mut exprs: Vec<Node<'t>> = addresses.to_vec();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut at = 0;
    while at < exprs.len() {
        for id in identifiers(exprs[at], text) {
            if seen.insert(id.clone())
                && let Some(rhs) = assigned.get(&id)
            {
                exprs.extend(rhs.iter().copied());
            }
        }
        at += 1;
    }
    // the loads inside them: what they load from is an offset
    let mut out = BTreeSet::new();
    for e in exprs {
        preorder(e, |n| {
            if n.kind() == "call"
                && callee_name(n, text) == "load"
                && let Some(a) = n.child_by_field_name("arguments").and_then(|a| a.named_child(0))
            {
                out.extend(params_of(&[a]));
            }
            true
        });
    }
    out
}

/// Each pointer parameter's address, as its first `p = param + ...` spells it with the parameter
/// left out (`_+(bos*H+i_h)*K+o_k` for both `q` and `k`): tensors addressed alike are most
/// often shaped alike.
pub(super) fn address_shapes(
    assigned: &BTreeMap<String, Vec<Node<'_>>>,
    alias_first: &BTreeMap<String, String>,
    pointers: &BTreeSet<String>,
    text: &str,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (local, rhs) in assigned {
        let Some(p) = alias_first.get(local).filter(|p| pointers.contains(*p)) else { continue };
        let Some(first) = rhs.first() else { continue };
        let spelled: String = node_text(*first, text).chars().filter(|c| !c.is_whitespace()).collect();
        let Some(rest) = spelled.strip_prefix(p.as_str()) else { continue };
        if rest.starts_with('+') && !out.contains_key(p) {
            out.insert(p.clone(), format!("_{rest}"));
        }
    }
    out
}

/// The dims a tensor's indexed sizes place (`v.shape[2]` is HV, `v.shape[-1]` is V): its
/// fewest dims, each known one in place, None where nothing names it; None where two names
/// claim one place.
pub(super) fn placed_dims(idx: &[(i64, String)]) -> Option<Vec<Option<String>>> {
    let front = idx.iter().filter(|(i, _)| *i >= 0).map(|(i, _)| *i + 1).max().unwrap_or(0);
    let back = idx.iter().filter(|(i, _)| *i < 0).map(|(i, _)| -*i).max().unwrap_or(0);
    placed_dims_at(idx, usize::try_from(front + back).ok()?)
}

/// [`placed_dims`] at a given rank (at least the fewest that places them all).
pub(super) fn placed_dims_at(idx: &[(i64, String)], rank: usize) -> Option<Vec<Option<String>>> {
    let mut dims: Vec<Option<String>> = vec![None; rank];
    for (i, v) in idx {
        let at = if *i >= 0 { usize::try_from(*i).ok()? } else { rank.checked_sub(usize::try_from(-*i).ok()?)? };
        match dims.get_mut(at)? {
            Some(had) if had != v => return None,
            slot => *slot = Some(v.clone()),
        }
    }
    Some(dims)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx(pairs: &[(i64, &str)]) -> Vec<(i64, String)> {
        pairs.iter().map(|(i, n)| (*i, n.to_string())).collect()
    }

    #[test]
    fn indexed_sizes_take_their_places_at_the_fewest_dims_or_a_given_rank() {
        let some = |v: &[Option<&str>]| Some(v.iter().map(|o| o.map(str::to_string)).collect::<Vec<_>>());
        // `HV = v.shape[2]`, `V = v.shape[-1]`: four dims at least
        assert_eq!(placed_dims(&idx(&[(2, "HV"), (-1, "V")])), some(&[None, None, Some("HV"), Some("V")]));
        // `HQ = q.shape[2]` beside a tensor of four: q at four
        assert_eq!(placed_dims_at(&idx(&[(2, "HQ")]), 4), some(&[None, None, Some("HQ"), None]));
        assert_eq!(placed_dims_at(&idx(&[(-1, "V")]), 4), some(&[None, None, None, Some("V")]));
        // two names for one place, or a rank too small to hold them: no placing
        assert_eq!(placed_dims_at(&idx(&[(1, "A"), (-1, "B")]), 2), None);
        assert_eq!(placed_dims_at(&idx(&[(3, "A")]), 2), None);
    }
}
