//! Text edits: what a rewrite makes of a site ([`Edit`], [`SiteEdits`]),
//! applying them to a text ([`apply_edits`]) and telling the old tree about
//! them so a re-parse parses only what changed ([`edited_tree`]).

use std::ops::Range;

/// Replace `range` of the target by `text` (an insertion when empty).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Edit {
    /// Bytes replaced.
    pub range: Range<usize>,
    /// Their replacement.
    pub text: String,
}

/// The edits for one site: applied together or not at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteEdits {
    /// The matched site.
    pub site: Range<usize>,
    /// Its edits, in order.
    pub edits: Vec<Edit>,
}

/// Applies non-overlapping edits (sorted by position; insertions at one
/// position keep their order). `None` when edits overlap or fall outside
/// the text.
pub fn apply_edits(src: &str, edits: &[Edit]) -> Option<String> {
    let mut sorted: Vec<(usize, &Edit)> = edits.iter().enumerate().collect();
    sorted.sort_by_key(|(i, e)| (e.range.start, e.range.end, *i));
    let mut out = String::with_capacity(src.len() + 64);
    let mut at = 0;
    for (_, e) in sorted {
        if e.range.start < at || e.range.end > src.len() {
            return None;
        }
        out.push_str(src.get(at..e.range.start)?);
        out.push_str(&e.text);
        at = e.range.end;
    }
    out.push_str(src.get(at..)?);
    Some(out)
}

/// `tree` (of `old`) told about `edits`, so that re-parsing the edited
/// text with it (`kidiom_syntax::reparse`) parses only what changed.
pub fn edited_tree(tree: &tree_sitter::Tree, old: &str, edits: &[Edit]) -> tree_sitter::Tree {
    let newlines: Vec<usize> = old.bytes().enumerate().filter(|(_, b)| *b == b'\n').map(|(i, _)| i).collect();
    let mut sorted: Vec<&Edit> = edits.iter().collect();
    // last edit first: each edit's offsets are still those of the old text
    sorted.sort_by_key(|e| std::cmp::Reverse((e.range.start, e.range.end)));
    let mut edited = tree.clone();
    for e in sorted {
        edited.edit(&input_edit(old, &newlines, e));
    }
    edited
}

/// The tree-sitter description of one edit of `old`: where it starts, where
/// the replaced bytes ended, and where the new text ends.
fn input_edit(old: &str, newlines: &[usize], e: &Edit) -> tree_sitter::InputEdit {
    let start = e.range.start.min(old.len());
    let old_end = e.range.end.clamp(start, old.len());
    let start_position = point_at(newlines, start);
    let new_end_position = match e.text.rfind('\n') {
        Some(i) => {
            tree_sitter::Point { row: start_position.row + e.text.matches('\n').count(), column: e.text.len() - i - 1 }
        }
        None => tree_sitter::Point { row: start_position.row, column: start_position.column + e.text.len() },
    };
    tree_sitter::InputEdit {
        start_byte: start,
        old_end_byte: old_end,
        new_end_byte: start + e.text.len(),
        start_position,
        old_end_position: point_at(newlines, old_end),
        new_end_position,
    }
}

/// Row and column of a byte offset, given the offsets of every newline.
fn point_at(newlines: &[usize], byte: usize) -> tree_sitter::Point {
    let row = newlines.partition_point(|&n| n < byte);
    let column = if row == 0 { byte } else { byte - newlines[row - 1] - 1 };
    tree_sitter::Point { row, column }
}

#[cfg(test)]
mod tests {
    use kidiom_syntax::Lang;

    use super::*;

    #[test]
    fn incremental_reparse_equals_a_fresh_parse() {
        let src = "import triton\nimport triton.language as tl\n@triton.jit\ndef k(a):\n    x = tl.dot(a, a)\n    y = tl.dot(x, a)\n";
        let e = Edit { range: 56..56, text: ", input_precision=\"ieee\"".into() };
        let tree = kidiom_syntax::parse_tree(Lang::Python, src).unwrap().unwrap();
        let next = apply_edits(src, std::slice::from_ref(&e)).unwrap();
        let inc = kidiom_syntax::reparse(Lang::Python, &next, &edited_tree(&tree, src, &[e])).unwrap().unwrap();
        let fresh = kidiom_syntax::parse_tree(Lang::Python, &next).unwrap().unwrap();
        assert_eq!(inc.root_node().to_sexp(), fresh.root_node().to_sexp());
        assert_eq!(inc.root_node().end_byte(), fresh.root_node().end_byte());
    }

    #[test]
    fn points_count_rows_and_columns() {
        let text = "ab\ncd\n\nx";
        let nl: Vec<usize> = text.bytes().enumerate().filter(|(_, b)| *b == b'\n').map(|(i, _)| i).collect();
        assert_eq!(point_at(&nl, 0), tree_sitter::Point { row: 0, column: 0 });
        assert_eq!(point_at(&nl, 2), tree_sitter::Point { row: 0, column: 2 });
        assert_eq!(point_at(&nl, 3), tree_sitter::Point { row: 1, column: 0 });
        assert_eq!(point_at(&nl, 7), tree_sitter::Point { row: 3, column: 0 });
    }
}
