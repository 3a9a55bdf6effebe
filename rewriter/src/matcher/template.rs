//! Structural templates: ast-grep pattern text (`$A`, `$$$ARGS`, `$_`)
//! parsed with the target language's grammar into an owned tree.

use std::ops::Range;

use kidiom_syntax::{Lang, parse_tree};
use tree_sitter::Node;

use super::MatchError;

const SINGLE: &str = "__kidiom_mv_";
const SEQ: &str = "__kidiom_seq_";
const ANY: &str = "__kidiom_any_";
/// The definition a decorator pattern is parsed on.
const DECORATED: &str = "__kidiom_decorated";

/// What a template node stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Hole {
    /// Literal syntax: kind and children (or text, for leaves) must match.
    No,
    /// `$NAME`: exactly one node; a name used twice must match equal text.
    Single(String),
    /// `$$$NAME`: any run of nodes, possibly empty.
    Seq(String),
    /// `$_`: one node, not captured.
    Any,
}

/// One node of a parsed template.
#[derive(Debug, Clone)]
pub(crate) struct PNode {
    pub(crate) kind: String,
    pub(crate) named: bool,
    /// Leaf text (placeholders included), empty for inner nodes.
    pub(crate) text: String,
    pub(crate) hole: Hole,
    pub(crate) children: Vec<PNode>,
    /// Byte range in [`Template::text`].
    pub(crate) span: Range<usize>,
    /// Leaf index (pre-order among leaves and holes), `usize::MAX` for inner nodes.
    pub(crate) leaf: usize,
}

impl PNode {
    pub(crate) fn is_leaf(&self) -> bool {
        self.leaf != usize::MAX
    }
}

/// The shape of a template.
#[derive(Debug, Clone)]
pub(crate) enum Shape {
    /// A syntax tree matched node by node.
    Tree(PNode),
    /// `for ($$$HEAD) $BODY` (C/C++): any `for` loop.
    Loop,
    /// `QUAL $R $F($$$PARAMS) { $$$BODY }` (C/C++): a function definition
    /// whose declaration prefix holds the qualifier token `QUAL`.
    Function(String),
    /// `$R $F($$$PARAMS) { $$$BODY }` (C/C++): a function definition; the
    /// rewrites that use it keep to functions a binding module binds.
    BoundFunction,
    /// `$M.def($$$ARGS)` (C/C++): a binding module's `.def` call.
    DefCall,
}

/// A parsed structural pattern.
#[derive(Debug, Clone)]
pub struct Template {
    pub(crate) lang: Lang,
    /// The pattern as written.
    pub(crate) source: String,
    /// The pattern with placeholders standing for metavariables.
    pub(crate) text: String,
    pub(crate) shape: Shape,
    /// Leaves in order (clones of the tree's leaves, for alignment).
    pub(crate) leaves: Vec<PNode>,
}

impl Template {
    /// Parses `pattern` as `lang` code. A pattern that does not parse
    /// cleanly is an error: a matcher built on a broken tree would match
    /// the wrong sites.
    pub fn parse(lang: Lang, pattern: &str) -> Result<Template, MatchError> {
        let bad = |message: String| MatchError::Pattern { pattern: pattern.to_string(), message };
        let trimmed = pattern.trim();
        if trimmed.is_empty() {
            return Err(bad("empty pattern".into()));
        }
        let text = substitute(trimmed).map_err(bad)?;
        if matches!(lang, Lang::Cuda | Lang::Cpp)
            && let Some(shape) = cxx_shape(trimmed)
        {
            return Ok(Template { lang, source: pattern.into(), text, shape, leaves: Vec::new() });
        }
        if lang == Lang::Rust {
            return Err(bad("Rust patterns are not supported by the structural matcher".into()));
        }
        // A Python decorator (`@triton.jit`) parses only on a definition: give it one, and take
        // the decorator back out (its spans are the pattern's own, the definition comes after).
        let decorator = lang == Lang::Python && trimmed.starts_with('@') && !trimmed.contains('\n');
        let parsed = if decorator { format!("{text}\ndef {DECORATED}():\n    pass\n") } else { text.clone() };
        let tree = parse_tree(lang, &parsed)
            .map_err(|s| bad(format!("parser failed: {s}")))?
            .ok_or_else(|| bad("no tree-sitter grammar".into()))?;
        let root = tree.root_node();
        if root.has_error() {
            return Err(bad(format!("does not parse as {lang}")));
        }
        let node = if decorator {
            root.named_child(0)
                .filter(|d| d.kind() == "decorated_definition")
                .and_then(|d| d.named_child(0))
                .filter(|n| n.kind() == "decorator")
                .ok_or_else(|| bad("a decorator pattern must be one decorator".into()))?
        } else {
            unwrap_root(root).ok_or_else(|| bad("a pattern must be one expression, statement or definition".into()))?
        };
        let mut leaves = Vec::new();
        let tree = convert(node, &text, &mut leaves);
        Ok(Template { lang, source: pattern.into(), text, shape: Shape::Tree(tree), leaves })
    }

    /// The pattern as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The metavariable names (without `$`), in order of appearance.
    pub fn metavariables(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for l in &self.leaves {
            if let Hole::Single(n) | Hole::Seq(n) = &l.hole
                && !out.contains(n)
            {
                out.push(n.clone());
            }
        }
        out
    }
}

/// The template of a function definition with no qualifier.
pub(crate) const BOUND_FUNCTION: &str = "$R $F($$$PARAMS) { $$$BODY }";
/// The template of a binding module's `.def` call.
pub(crate) const DEF_CALL: &str = "$M.def($$$ARGS)";

/// `for ($$$HEAD) $BODY` and `QUAL $R $F($$$PARAMS) { $$$BODY }` do not
/// parse as C++ (a loop header needs `;`, a body statements); they are
/// recognised by their text.
fn cxx_shape(p: &str) -> Option<Shape> {
    let squash: String = p.split_whitespace().collect::<Vec<_>>().join(" ");
    if squash == "for ($$$HEAD) $BODY" {
        return Some(Shape::Loop);
    }
    if squash == BOUND_FUNCTION {
        return Some(Shape::BoundFunction);
    }
    if squash == DEF_CALL {
        return Some(Shape::DefCall);
    }
    let rest = squash.strip_suffix(" $R $F($$$PARAMS) { $$$BODY }")?;
    (rest.starts_with("__") && rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then(|| Shape::Function(rest.to_string()))
}

/// Replaces `$$$NAME`, `$NAME` and `$_` by identifiers the grammar accepts.
pub(crate) fn substitute(p: &str) -> Result<String, String> {
    let mut out = String::with_capacity(p.len() + 32);
    let b = p.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'$' {
            let ch = p[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
            continue;
        }
        let seq = p[i..].starts_with("$$$");
        let start = if seq { i + 3 } else { i + 1 };
        let mut j = start;
        while j < b.len() && (b[j].is_ascii_uppercase() || b[j].is_ascii_digit() || b[j] == b'_') {
            j += 1;
        }
        let name = &p[start..j];
        if name.is_empty() && !seq {
            return Err(format!("`$` at byte {i} is not followed by a metavariable name (A-Z, 0-9, _)"));
        }
        if name == "_" && !seq {
            out.push_str(ANY);
        } else if seq {
            out.push_str(SEQ);
            out.push_str(if name.is_empty() { "_" } else { name });
        } else {
            out.push_str(SINGLE);
            out.push_str(name);
        }
        i = j;
    }
    Ok(out)
}

/// The hole a placeholder text stands for.
pub(crate) fn hole_of(text: &str) -> Hole {
    let t = text.trim().trim_end_matches(';').trim_end();
    let ident = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if t == ANY {
        Hole::Any
    } else if let Some(n) = t.strip_prefix(SEQ).filter(|n| ident(n)) {
        Hole::Seq(n.to_string())
    } else if let Some(n) = t.strip_prefix(SINGLE).filter(|n| !n.is_empty() && ident(n)) {
        Hole::Single(n.to_string())
    } else {
        Hole::No
    }
}

/// Replaces placeholders in `text` by `f(name)`.
pub(crate) fn render(text: &str, mut f: impl FnMut(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("__kidiom_") {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        let placeholder = &tail[..end];
        let name = match hole_of(placeholder) {
            Hole::Single(n) | Hole::Seq(n) => n,
            Hole::Any => return Err("`$_` cannot appear in a rewrite".into()),
            Hole::No => return Err(format!("unknown placeholder {placeholder}")),
        };
        match f(&name) {
            Some(v) => out.push_str(&v),
            None => return Err(format!("metavariable ${name} has no value")),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    Ok(out)
}

fn unwrap_root(root: Node) -> Option<Node> {
    let mut node = root;
    loop {
        let mut c = node.walk();
        let named: Vec<Node> = node.named_children(&mut c).filter(|n| !is_comment(*n)).collect();
        match node.kind() {
            "module" | "translation_unit" | "expression_statement" if named.len() == 1 => {
                // A statement `x;` keeps its `;` out of the pattern.
                node = named[0];
            }
            "module" | "translation_unit" => return None,
            _ => return Some(node),
        }
    }
}

/// Comments and other extras (Python's `\` line continuation): never
/// part of a match, as the miner's trees leave them out too.
pub(crate) fn is_comment(n: Node) -> bool {
    n.kind() == "comment" || (n.is_extra() && !n.is_error())
}

fn convert(node: Node, text: &str, leaves: &mut Vec<PNode>) -> PNode {
    let src = text.get(node.byte_range()).unwrap_or("");
    let hole = if node.is_named() { hole_of(src) } else { Hole::No };
    let mut p = PNode {
        kind: node.kind().to_string(),
        named: node.is_named(),
        text: String::new(),
        hole,
        children: Vec::new(),
        span: node.byte_range(),
        leaf: usize::MAX,
    };
    if p.hole != Hole::No || node.child_count() == 0 {
        p.text = src.to_string();
        p.leaf = leaves.len();
        leaves.push(p.clone());
        return p;
    }
    let mut c = node.walk();
    for child in node.children(&mut c) {
        if is_comment(child) {
            continue;
        }
        p.children.push(convert(child, text, leaves));
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitutes_metavariables() {
        assert_eq!(substitute("f($A, $$$REST, $_)").unwrap(), "f(__kidiom_mv_A, __kidiom_seq_REST, __kidiom_any_)");
        assert_eq!(substitute("f($$$)").unwrap(), "f(__kidiom_seq__)");
        assert!(substitute("f($a)").is_err());
    }

    #[test]
    fn holes_and_leaves() {
        let t = Template::parse(Lang::Python, "tl.dot($$$ARGS, input_precision=$V)").unwrap();
        assert_eq!(t.metavariables(), ["ARGS", "V"]);
        let texts: Vec<&str> = t.leaves.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(texts[..4], ["tl", ".", "dot", "("]);
    }

    #[test]
    fn bad_patterns_are_errors() {
        for p in ["tl.dot(", "", "def f(:", "a b c d"] {
            assert!(Template::parse(Lang::Python, p).is_err(), "{p:?}");
        }
        assert!(matches!(Template::parse(Lang::Cuda, "for ($$$HEAD) $BODY").unwrap().shape, Shape::Loop));
        assert!(matches!(
            Template::parse(Lang::Cuda, "__device__ $R $F($$$PARAMS) { $$$BODY }").unwrap().shape,
            Shape::Function(_)
        ));
    }

    #[test]
    fn render_replaces_placeholders() {
        let t = substitute("f($A, $$$B)").unwrap();
        let r = render(&t, |n| Some(n.to_lowercase())).unwrap();
        assert_eq!(r, "f(a, b)");
        assert!(render(&t, |_| None).is_err());
    }
}
