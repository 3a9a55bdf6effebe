//! The miner's side of parsing: the entering/leaving walk its extractors
//! keep per-scope state with, and the debug dump that also covers Rust
//! (syn), which the `kidiom-syntax` crate does not parse.

use kidiom_syntax::{Lang, Skip, parse_tree};

/// One step of [`walk`]: entering a node at a depth, or leaving the node
/// entered last at that depth.
pub(crate) enum Step<'t> {
    Enter(tree_sitter::Node<'t>, usize),
    Leave(usize),
}

/// Visits every node under `root` in pre-order without recursion, telling
/// `f` when each is entered and left (extractors keep per-scope state).
pub(crate) fn walk<'t>(root: tree_sitter::Node<'t>, mut f: impl FnMut(Step<'t>)) {
    let mut cursor = root.walk();
    let mut depth = 0usize;
    loop {
        f(Step::Enter(cursor.node(), depth));
        if cursor.goto_first_child() {
            depth += 1;
            continue;
        }
        loop {
            f(Step::Leave(depth));
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return;
            }
            depth -= 1;
        }
    }
}

/// The s-expression of a file's tree, for `kidiom debug tree`.
pub fn dump_tree(lang: Lang, text: &str) -> Result<String, Skip> {
    match parse_tree(lang, text)? {
        Some(tree) => Ok(tree.root_node().to_sexp()),
        None => syn::parse_file(text).map(|f| format!("{f:#?}")).map_err(|_| Skip::ParseFailed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_language_parses_an_empty_file() {
        for &lang in Lang::ALL {
            assert!(dump_tree(lang, "").is_ok(), "{lang}");
        }
    }
}
