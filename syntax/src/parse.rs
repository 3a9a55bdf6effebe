//! Parsing: one tree-sitter parser per language and thread, and the checks
//! that turn unreadable input into a [`Skip`] before any parser sees it.

use std::cell::RefCell;

use serde::{Deserialize, Serialize};
use tree_sitter::{Parser, Tree};

use crate::lang::Lang;

/// Why a file was not mined. Skips are data: they are counted and reported,
/// and mining carries on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "reason", content = "detail")]
pub enum Skip {
    /// A NUL byte in the first 8 KiB.
    Binary,
    /// Not valid UTF-8.
    InvalidUtf8,
    /// Larger than the configured limit (bytes).
    TooLarge(u64),
    /// Bracket nesting deeper than the configured limit.
    TooDeep(usize),
    /// The file could not be read (permissions, I/O).
    Unreadable(String),
    /// The git object is missing from the repository.
    MissingObject,
    /// The parser gave up.
    ParseFailed,
}

impl Skip {
    /// A short stable name, for summaries.
    pub fn name(&self) -> &'static str {
        match self {
            Skip::Binary => "binary",
            Skip::InvalidUtf8 => "invalid-utf8",
            Skip::TooLarge(_) => "too-large",
            Skip::TooDeep(_) => "too-deep",
            Skip::Unreadable(_) => "unreadable",
            Skip::MissingObject => "missing-object",
            Skip::ParseFailed => "parse-failed",
        }
    }
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::TooLarge(n) => write!(f, "too large ({n} bytes)"),
            Skip::TooDeep(n) => write!(f, "nesting deeper than {n}"),
            Skip::Unreadable(e) => write!(f, "unreadable: {e}"),
            other => f.write_str(other.name()),
        }
    }
}

/// Limits applied before parsing.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Files larger than this are skipped.
    pub max_bytes: u64,
    /// Files whose bracket nesting exceeds this are skipped.
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_bytes: 8 << 20, max_depth: 1_000 }
    }
}

/// Decodes bytes into text, or says why not.
pub fn decode<'a>(bytes: &'a [u8], limits: &Limits) -> Result<&'a str, Skip> {
    if bytes.len() as u64 > limits.max_bytes {
        return Err(Skip::TooLarge(bytes.len() as u64));
    }
    if memchr::memchr(0, &bytes[..bytes.len().min(8192)]).is_some() {
        return Err(Skip::Binary);
    }
    let text = std::str::from_utf8(bytes).map_err(|_| Skip::InvalidUtf8)?;
    let depth = max_nesting(bytes);
    if depth > limits.max_depth {
        return Err(Skip::TooDeep(limits.max_depth));
    }
    Ok(text)
}

/// The deepest bracket nesting, ignoring nothing: strings and comments with
/// unbalanced brackets only make the estimate larger, never unsafe.
fn max_nesting(bytes: &[u8]) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for &b in bytes {
        match b {
            b'(' | b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

thread_local! {
    static PARSERS: RefCell<Vec<(Lang, Parser)>> = const { RefCell::new(Vec::new()) };
}

/// Parses with tree-sitter (Python, CUDA, C++); `None` for Rust, which the
/// miner parses with syn.
pub fn parse_tree(lang: Lang, text: &str) -> Result<Option<Tree>, Skip> {
    parse_with(lang, text, None)
}

/// Re-parses `text` incrementally from `old`, a tree of the previous text
/// already told about the edits (`Tree::edit`): only the changed regions are
/// parsed again. The result is the same tree a fresh parse would give.
pub fn reparse(lang: Lang, text: &str, old: &Tree) -> Result<Option<Tree>, Skip> {
    parse_with(lang, text, Some(old))
}

fn parse_with(lang: Lang, text: &str, old: Option<&Tree>) -> Result<Option<Tree>, Skip> {
    let Some(language) = crate::grammar::language(lang) else { return Ok(None) };
    PARSERS.with(|cell| {
        let mut parsers = cell.borrow_mut();
        let idx = match parsers.iter().position(|(l, _)| *l == lang) {
            Some(i) => i,
            None => {
                let mut p = Parser::new();
                p.set_language(language).map_err(|_| Skip::ParseFailed)?;
                parsers.push((lang, p));
                parsers.len() - 1
            }
        };
        let parser = &mut parsers[idx].1;
        parser.parse(text, old).map(Some).ok_or(Skip::ParseFailed)
    })
}

/// Visits the nodes under `root` in pre-order without recursion (trees can
/// nest 10,000 deep); `visit` returns whether to descend into the node.
pub fn preorder<'t>(root: tree_sitter::Node<'t>, mut visit: impl FnMut(tree_sitter::Node<'t>) -> bool) {
    let mut cursor = root.walk();
    loop {
        if visit(cursor.node()) && cursor.goto_first_child() {
            continue;
        }
        loop {
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_rejects_bad_input() {
        let l = Limits { max_bytes: 100, max_depth: 5 };
        assert_eq!(decode(b"abc\0def", &l), Err(Skip::Binary));
        assert_eq!(decode(&[0xff, 0xfe, b'a'], &l), Err(Skip::InvalidUtf8));
        assert_eq!(decode(&[b'a'; 101], &l), Err(Skip::TooLarge(101)));
        assert_eq!(decode(b"((((((x))))))", &l), Err(Skip::TooDeep(5)));
        assert_eq!(decode(b"f(x)", &l), Ok("f(x)"));
    }

    #[test]
    fn every_tree_sitter_language_parses_an_empty_file() {
        for &lang in Lang::ALL {
            let tree = parse_tree(lang, "").unwrap();
            assert_eq!(tree.is_some(), lang != Lang::Rust, "{lang}");
        }
    }
}
