//! Concrete edits: the smallest changed subtrees of one file in one commit,
//! grown to an anchoring construct (a call, a decorator, a parameter, a
//! statement) so that the edit carries enough unchanged context to be
//! applied elsewhere (Getafix keeps context for the same reason).

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::HistoryConfig;
use super::tree::{NONE, Tree};
use super::treediff;
use crate::lang::Lang;

/// One concrete edit: a before subtree and the after subtree it became.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConcreteEdit {
    /// Path of the file in the commit.
    pub path: String,
    /// Its language.
    pub lang: Lang,
    /// 1-based line of the edit in the before version.
    pub line: u32,
    /// The before subtree's text.
    pub before: String,
    /// The after subtree's text.
    pub after: String,
    /// The before subtree, flattened (kind, children, start, end per node).
    pub before_tree: Vec<u32>,
    /// The after subtree, flattened.
    pub after_tree: Vec<u32>,
    /// Blob id of the file before the commit.
    pub before_blob: String,
    /// Blob id of the file after the commit.
    pub after_blob: String,
}

/// Why changes in a file yielded no (or fewer) edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EditDrop {
    /// The changed subtree holds a parse error.
    ParseError,
    /// The changed subtree is larger than the edit limit.
    TooLarge,
    /// No anchoring construct above the change.
    NoAnchor,
}

pub(crate) fn language(lang: Lang) -> Option<&'static tree_sitter::Language> {
    static PY: OnceLock<tree_sitter::Language> = OnceLock::new();
    static CU: OnceLock<tree_sitter::Language> = OnceLock::new();
    static CPP: OnceLock<tree_sitter::Language> = OnceLock::new();
    match lang {
        Lang::Python => Some(PY.get_or_init(|| tree_sitter_python::LANGUAGE.into())),
        Lang::Cuda => Some(CU.get_or_init(|| tree_sitter_cuda::LANGUAGE.into())),
        Lang::Cpp => Some(CPP.get_or_init(|| tree_sitter_cpp::LANGUAGE.into())),
        Lang::Rust => None,
    }
}

pub(crate) fn kind_name(lang: Lang, kind: u16) -> &'static str {
    language(lang).and_then(|l| l.node_kind_for_id(kind)).unwrap_or("")
}

/// Kinds that give an edit enough context to be applied elsewhere.
pub(crate) fn is_anchor(lang: Lang, kind: &str) -> bool {
    match lang {
        Lang::Python => {
            matches!(
                kind,
                "call"
                    | "decorator"
                    | "typed_parameter"
                    | "typed_default_parameter"
                    | "default_parameter"
                    | "assignment"
                    | "augmented_assignment"
                    | "function_definition"
                    | "class_definition"
            ) || kind.ends_with("_statement")
        }
        Lang::Cuda | Lang::Cpp => {
            kind == "call_expression"
                || kind == "init_declarator"
                || kind.ends_with("_statement")
                || kind.ends_with("declaration")
                || kind.ends_with("_definition")
                || kind.starts_with("preproc_")
        }
        Lang::Rust => false,
    }
}

/// Cuts the concrete edits of one file pair. Returns the edits and the
/// changes that were dropped, with why.
pub(crate) fn cut(
    lang: Lang,
    path: &str,
    blobs: (&str, &str),
    a: &Tree<'_>,
    b: &Tree<'_>,
    cfg: &HistoryConfig,
) -> (Vec<ConcreteEdit>, Vec<EditDrop>) {
    let d = treediff::diff(a, b);
    let mut roots: Vec<(u32, u32)> = Vec::new();
    let mut drops = Vec::new();
    for &(x0, y0) in &d.edits {
        let (mut x, mut y) = (x0, y0);
        let mut ok = true;
        while !is_anchor(lang, kind_name(lang, a.nodes[x as usize].kind)) {
            let (px, py) = (a.nodes[x as usize].parent, b.nodes[y as usize].parent);
            if px == NONE || py == NONE || d.map[px as usize] != py {
                ok = false;
                break;
            }
            (x, y) = (px, py);
        }
        if !ok || x == 0 {
            drops.push(EditDrop::NoAnchor);
            continue;
        }
        roots.push((x, y));
    }
    roots.sort_unstable();
    roots.dedup();
    let mut kept: Vec<(u32, u32)> = Vec::new();
    for (x, y) in roots {
        if kept.last().is_some_and(|&(kx, _)| a.contains(kx, x)) {
            continue; // nested in an edit already kept
        }
        kept.push((x, y));
    }
    let mut out = Vec::new();
    for (x, y) in kept {
        let (nx, ny) = (a.nodes[x as usize], b.nodes[y as usize]);
        if nx.err || ny.err {
            drops.push(EditDrop::ParseError);
            continue;
        }
        if nx.size > cfg.max_edit_nodes || ny.size > cfg.max_edit_nodes {
            drops.push(EditDrop::TooLarge);
            continue;
        }
        out.push(ConcreteEdit {
            path: path.to_string(),
            lang,
            line: a.line_of(nx.start),
            before: a.text(x).to_string(),
            after: b.text(y).to_string(),
            before_tree: a.flat(x),
            after_tree: b.flat(y),
            before_blob: blobs.0.to_string(),
            after_blob: blobs.1.to_string(),
        });
    }
    (out, drops)
}

/// Whether every changed line of a textual diff is blank or a comment, so
/// the trees need not be parsed (the textual hunk prefilter).
pub(crate) fn comment_only(lang: Lang, old: &[u8], new: &[u8]) -> Option<bool> {
    let patch = git2::Patch::from_buffers(old, None, new, None, None).ok()?;
    let comment = match lang {
        Lang::Python => &["#"][..],
        _ => &["//", "/*", "*"][..],
    };
    for h in 0..patch.num_hunks() {
        let n = patch.num_lines_in_hunk(h).ok()?;
        for l in 0..n {
            let line = patch.line_in_hunk(h, l).ok()?;
            if !matches!(line.origin(), '+' | '-') {
                continue;
            }
            let t = String::from_utf8_lossy(line.content());
            let t = t.trim();
            if !t.is_empty() && !comment.iter().any(|c| t.starts_with(c)) {
                return Some(false);
            }
        }
    }
    Some(true)
}

/// Changed lines (added + deleted) between two texts.
pub(crate) fn changed_lines(old: &[u8], new: &[u8]) -> Option<usize> {
    let patch = git2::Patch::from_buffers(old, None, new, None, None).ok()?;
    let (_, add, del) = patch.line_stats().ok()?;
    Some(add + del)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::Limits;

    fn check(before: &str, after: &str) -> Vec<(String, String)> {
        let l = Limits::default();
        let a = Tree::parse(Lang::Python, before, &l).unwrap();
        let b = Tree::parse(Lang::Python, after, &l).unwrap();
        let (edits, _) = cut(Lang::Python, "k.py", ("b1", "b2"), &a, &b, &HistoryConfig::default());
        edits.into_iter().map(|e| (e.before, e.after)).collect()
    }

    #[test]
    fn edits_grow_to_an_anchor() {
        assert_eq!(
            check("x = tl.exp(b_g)\n", "x = tl.exp2(b_g)\n"),
            [("tl.exp(b_g)".to_string(), "tl.exp2(b_g)".to_string())]
        );
        assert_eq!(
            check("b = tl.dot(q, k)\n", "b = tl.dot(q, k, input_precision=\"ieee\")\n"),
            [("tl.dot(q, k)".to_string(), "tl.dot(q, k, input_precision=\"ieee\")".to_string())]
        );
        assert_eq!(
            check("def k(x, T: tl.constexpr):\n    pass\n", "def k(x, T):\n    pass\n"),
            [("T: tl.constexpr".to_string(), "T".to_string())]
        );
        assert_eq!(
            check("@triton.jit\ndef k(x):\n    pass\n", "@triton.jit(do_not_specialize=['T'])\ndef k(x):\n    pass\n"),
            [("@triton.jit".to_string(), "@triton.jit(do_not_specialize=['T'])".to_string())]
        );
    }

    #[test]
    fn broken_and_huge_changes_are_dropped() {
        assert!(check("x = f(a)\n", "x = f(a,, b)\n").is_empty());
        let big_args: Vec<String> = (0..300).map(|i| format!("a{i}")).collect();
        let after = format!("x = f({})\n", big_args.join(", "));
        assert!(check("x = f(a)\n", &after).is_empty());
    }

    #[test]
    fn textual_prefilter() {
        assert_eq!(comment_only(Lang::Python, b"x = 1\n# a\n", b"x = 1\n# b\n\n"), Some(true));
        assert_eq!(comment_only(Lang::Python, b"x = 1\n", b"x = 2\n"), Some(false));
        assert_eq!(changed_lines(b"a\nb\n", b"a\nc\n"), Some(2));
    }
}
