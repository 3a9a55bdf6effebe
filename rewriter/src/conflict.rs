//! Resolving overlapping sites deterministically.
//!
//! Sites are taken outermost first (by start, then by length, longest
//! first); a site whose edits would touch bytes another accepted site
//! edits — or insert at a position another site inserts at — waits for
//! the next round, where it is matched again on the rewritten text.

use std::ops::Range;

use crate::matcher::{Edit, SiteEdits};

/// The edits of the sites that can be applied together this round, and
/// how many sites they are.
pub fn resolve(mut sites: Vec<SiteEdits>) -> (Vec<Edit>, usize) {
    sites.sort_by_key(|s| (s.site.start, std::cmp::Reverse(s.site.end)));
    let mut taken: Vec<Range<usize>> = Vec::new();
    let mut out = Vec::new();
    let mut n = 0;
    for s in sites {
        if s.edits.is_empty() || s.edits.iter().any(|e| taken.iter().any(|t| clash(&e.range, t))) {
            continue;
        }
        taken.extend(s.edits.iter().map(|e| e.range.clone()));
        out.extend(s.edits);
        n += 1;
    }
    (out, n)
}

/// Two edit ranges clash when they share a byte, when one inserts strictly
/// inside the other, or when both insert at one position.
fn clash(a: &Range<usize>, b: &Range<usize>) -> bool {
    match (a.is_empty(), b.is_empty()) {
        (false, false) => a.start < b.end && b.start < a.end,
        (true, false) => b.start < a.start && a.start < b.end,
        (false, true) => a.start < b.start && b.start < a.end,
        (true, true) => a.start == b.start,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(r: Range<usize>, edits: &[(Range<usize>, &str)]) -> SiteEdits {
        SiteEdits {
            site: r,
            edits: edits.iter().map(|(r, t)| Edit { range: r.clone(), text: t.to_string() }).collect(),
        }
    }

    #[test]
    fn outer_sites_win_and_the_order_is_deterministic() {
        let inner = site(2..5, &[(3..3, "a")]);
        let outer = site(0..9, &[(3..3, "b"), (8..8, "c")]);
        let other = site(10..12, &[(11..11, "d")]);
        for order in [vec![inner.clone(), outer.clone(), other.clone()], vec![other, outer, inner]] {
            let (edits, n) = resolve(order);
            assert_eq!(n, 2);
            let texts: Vec<&str> = edits.iter().map(|e| e.text.as_str()).collect();
            assert_eq!(texts, ["b", "c", "d"]);
        }
    }

    #[test]
    fn clashes() {
        assert!(clash(&(0..3), &(2..5)));
        assert!(!clash(&(0..2), &(2..5)));
        assert!(clash(&(3..3), &(2..5)));
        assert!(!clash(&(2..2), &(2..5)));
        assert!(clash(&(4..4), &(4..4)));
    }
}
