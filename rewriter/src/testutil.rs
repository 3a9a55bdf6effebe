//! Helpers shared by the property tests of the matcher and the applier.

/// `src` with `edits` applied: (position, length to remove, text to insert), on char boundaries.
pub(crate) fn mutate(src: &str, edits: &[(usize, usize, String)]) -> String {
    let mut chars: Vec<char> = src.chars().collect();
    for (at, del, ins) in edits {
        let at = at % (chars.len() + 1);
        let end = (at + del % 8).min(chars.len());
        chars.splice(at..end, ins.chars());
    }
    chars.into_iter().collect()
}
