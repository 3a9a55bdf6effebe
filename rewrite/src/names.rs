//! Names a rewrite brings into a file that the file does not bind.

/// Bare names (`exp`, not `tl.exp`, a keyword or a hole) that a rewrite's
/// `after` brings in and that `target` never mentions as a bare name: the
/// rewritten file would fail with a NameError (an edit idiom that moved a
/// call to a helper its upstream imports, say).
pub fn unbound_names(before: &str, after: &str, target: &str) -> Vec<String> {
    const PY_WORDS: [&str; 12] =
        ["False", "True", "None", "and", "or", "not", "in", "is", "if", "else", "for", "lambda"];
    let bare = |text: &str| -> std::collections::BTreeSet<String> {
        let b = text.as_bytes();
        let mut out = std::collections::BTreeSet::new();
        let mut i = 0;
        while i < b.len() {
            if b[i].is_ascii_alphabetic() || b[i] == b'_' {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                let prev = text[..start].trim_end().chars().next_back();
                let next = text[i..].trim_start().chars().next();
                // Not an attribute, a hole, a keyword-argument name, or a string's content.
                let is_kwarg = next == Some('=') && !text[i..].trim_start().starts_with("==");
                if !matches!(prev, Some('.' | '$' | '"' | '\'')) && !is_kwarg {
                    out.insert(text[start..i].to_string());
                }
            } else {
                i += 1;
            }
        }
        out
    };
    let (old, new, have) = (bare(before), bare(after), bare(target));
    new.into_iter().filter(|n| !old.contains(n) && !have.contains(n) && !PY_WORDS.contains(&n.as_str())).collect()
}

#[cfg(test)]
mod tests {
    use super::unbound_names;

    #[test]
    fn names_a_rewrite_brings_in() {
        let target = "import triton.language as tl\n@triton.jit\ndef k(x):\n    y = tl.exp(x)\n";
        assert_eq!(unbound_names("tl.exp($B)", "exp($B)", target), ["exp"]);
        assert!(unbound_names("tl.exp($A)", "tl.exp2($A * 1.4426950408889634)", target).is_empty());
        assert!(unbound_names("tl.dot($A, $B)", "tl.dot($A, $B, allow_tf32=False)", target).is_empty());
        assert!(unbound_names("tl.program_id($$$A)", "tl.program_id($$$A).to($V)", target).is_empty());
        let imports = "from fla.ops.utils import exp\n";
        assert!(unbound_names("tl.exp($B)", "exp($B)", imports).is_empty());
    }
}
