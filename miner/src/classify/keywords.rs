//! What an edit does to the keyword arguments of Triton's calls, and what
//! that says about its category (read before commit messages are).

use super::{Category, Role, keyword_role, vote};

/// What an edit does to the keyword arguments of Triton's own calls
/// (`tl.load(p, mask=m)`, `triton.Config({}, num_warps=4)`,
/// `@triton.jit(do_not_specialize=...)`), read from its syntax trees by the
/// history miner: the names it adds, removes, and keeps with another value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeywordChange {
    /// Keyword arguments the edit adds (more of them after than before).
    pub added: Vec<String>,
    /// Keyword arguments it removes.
    pub removed: Vec<String>,
    /// Keyword arguments on both sides whose values differ.
    pub changed: Vec<String>,
}

impl KeywordChange {
    pub(super) fn roles<'k>(names: &'k [String]) -> impl Iterator<Item = Role> + 'k {
        names.iter().filter_map(|n| keyword_role(n))
    }
}

/// What the keyword arguments of Triton calls that an edit touches say it
/// does: an optimizing keyword added, removed or retuned is that optimization
/// (`num_warps=4` -> `=8` is launch, `input_precision="tf32"` -> `"ieee"`
/// precision); a keyword that is part of what the call computes (`mask=`,
/// `other=`, `dtype=`) added or removed is `api`, however the commit is
/// titled; one swapped for another (`boundary_check=` -> `mask=`) is an API
/// migration, left to the rules after this one. `values_only`: the change
/// swaps values only, no names.
pub(super) fn keyword_category(k: &KeywordChange, values_only: bool) -> Option<Category> {
    let touched = || KeywordChange::roles(&k.added).chain(KeywordChange::roles(&k.removed));
    // A retuned value (`num_warps=4` -> `=8`); names put in or taken out of a
    // keyword's value (`key=[..., "HV"]`) are plumbing, judged below.
    let retuned = KeywordChange::roles(&k.changed).filter(|_| values_only);
    let opt = vote(touched().chain(retuned).map(|r| r.category).filter(|c| c.is_optimization()));
    if opt.is_some() {
        return opt;
    }
    let api = |names: &[String]| KeywordChange::roles(names).any(|r| r.category == Category::Api);
    match (api(&k.added), api(&k.removed)) {
        (true, true) => None,
        (true, false) if !k.removed.iter().any(|n| keyword_role(n).is_some()) => Some(Category::Api),
        (false, true) if !k.added.iter().any(|n| keyword_role(n).is_some()) => Some(Category::Api),
        _ => None,
    }
}
