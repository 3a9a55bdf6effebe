//! Values of a decoration's hole: one spelling per Python literal, and what
//! a named value can hold.
//!
//! Extraction writes every Python string literal of a value with double
//! quotes ([`canonical_literals`]), so `'ieee'` and `"ieee"` are one bar of
//! the histogram. A value that is a name (`input_precision=DOT_PRECISION`)
//! is recorded with a [`ValueExpr`]: what the name is bound to in its file
//! (a module-level definition, a kernel parameter's launch values, or an
//! import). Aggregation follows imports to other files of the same corpus
//! ([`ModuleIndex`]) and keeps, per value, a short expression and the
//! literals it can hold ([`ResolvedValue`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Longest condition text shown in a resolved expression.
const MAX_COND: usize = 60;
/// Longest resolved expression kept.
pub(crate) const MAX_EXPR: usize = 160;
/// Deepest chain of imports (and nesting) followed.
const MAX_DEPTH: usize = 8;

/// What a named value is bound to, as far as one file can tell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum ValueExpr {
    /// A literal in canonical spelling (`"ieee"`, `16`, `True`).
    Literal {
        /// Its text.
        text: String,
    },
    /// `then if cond else otherwise`: a conditional expression, or an
    /// `if`/`else` whose branches define the name.
    Cond {
        /// The condition, on one line, shortened.
        cond: String,
        /// The value when it holds.
        then: Box<ValueExpr>,
        /// The value otherwise.
        otherwise: Box<ValueExpr>,
    },
    /// Any of these (a kernel parameter's default and launch values).
    OneOf {
        /// The alternatives, in source order.
        items: Vec<ValueExpr>,
    },
    /// `from module import name`: resolved against the corpus at aggregation.
    Import {
        /// The module as written (`.utils`, `pkg.consts`).
        module: String,
        /// The name in that module.
        name: String,
    },
    /// Anything else, as written.
    Opaque {
        /// Its text.
        text: String,
    },
}

impl ValueExpr {
    /// An opaque expression of `text`.
    pub(crate) fn opaque(text: &str) -> ValueExpr {
        ValueExpr::Opaque { text: text.to_string() }
    }

    /// Whether following this expression can yield a literal.
    pub(crate) fn may_resolve(&self) -> bool {
        match self {
            ValueExpr::Literal { .. } | ValueExpr::Import { .. } => true,
            ValueExpr::Cond { then, otherwise, .. } => then.may_resolve() || otherwise.may_resolve(),
            ValueExpr::OneOf { items } => items.iter().any(ValueExpr::may_resolve),
            ValueExpr::Opaque { .. } => false,
        }
    }

    /// Whether a literal appears in it (imports not followed).
    pub(crate) fn has_literal(&self) -> bool {
        match self {
            ValueExpr::Literal { .. } => true,
            ValueExpr::Cond { then, otherwise, .. } => then.has_literal() || otherwise.has_literal(),
            ValueExpr::OneOf { items } => items.iter().any(ValueExpr::has_literal),
            ValueExpr::Import { .. } | ValueExpr::Opaque { .. } => false,
        }
    }

    /// `self`, or an alternative of both (deduplicated).
    pub(crate) fn or(self, other: ValueExpr) -> ValueExpr {
        if self == other {
            return self;
        }
        let mut items = match self {
            ValueExpr::OneOf { items } => items,
            e => vec![e],
        };
        let more = match other {
            ValueExpr::OneOf { items } => items,
            e => vec![e],
        };
        for e in more {
            if !items.contains(&e) {
                items.push(e);
            }
        }
        ValueExpr::OneOf { items }
    }

    /// The expression as shown: Python's conditional form, alternatives
    /// joined by ` | `.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_into(&mut out, false);
        shorten(&out, MAX_EXPR)
    }

    fn render_into(&self, out: &mut String, nested: bool) {
        match self {
            ValueExpr::Literal { text } | ValueExpr::Opaque { text } => out.push_str(text),
            ValueExpr::Import { name, .. } => out.push_str(name),
            ValueExpr::Cond { cond, then, otherwise } => {
                if nested {
                    out.push('(');
                }
                then.render_into(out, true);
                out.push_str(" if ");
                out.push_str(cond);
                out.push_str(" else ");
                otherwise.render_into(out, false);
                if nested {
                    out.push(')');
                }
            }
            ValueExpr::OneOf { items } => {
                let mut seen: Vec<String> = Vec::new();
                for e in items {
                    let mut s = String::new();
                    e.render_into(&mut s, true);
                    if !seen.contains(&s) {
                        seen.push(s);
                    }
                }
                let many = seen.len() > 1 && nested;
                if many {
                    out.push('(');
                }
                out.push_str(&seen.join(" | "));
                if many {
                    out.push(')');
                }
            }
        }
    }

    /// The literals it can hold: every branch, in source order, deduplicated.
    pub fn literals(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.literals_into(&mut out);
        out
    }

    fn literals_into(&self, out: &mut Vec<String>) {
        match self {
            ValueExpr::Literal { text } => {
                if !out.contains(text) {
                    out.push(text.clone());
                }
            }
            ValueExpr::Cond { then, otherwise, .. } => {
                then.literals_into(out);
                otherwise.literals_into(out);
            }
            ValueExpr::OneOf { items } => items.iter().for_each(|e| e.literals_into(out)),
            ValueExpr::Import { .. } | ValueExpr::Opaque { .. } => {}
        }
    }
}

/// What a named value resolved to: a short expression to show and the
/// literals it can hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedValue {
    /// The expression (`"ieee" if IS_NPU else "tf32x3"`).
    pub expr: String,
    /// Its literals in canonical spelling, every branch, deduplicated.
    pub literals: Vec<String>,
}

/// The Python modules of one corpus, by dotted name, with the constants
/// each defines: where imports are resolved.
#[derive(Debug, Default)]
pub(crate) struct ModuleIndex<'a> {
    /// Dotted module name -> (path, constants); for two files of one name, the shorter path.
    modules: BTreeMap<String, (&'a str, &'a BTreeMap<String, ValueExpr>)>,
}

impl<'a> ModuleIndex<'a> {
    /// Adds a file of the corpus.
    pub(crate) fn add(&mut self, path: &'a str, constants: &'a BTreeMap<String, ValueExpr>) {
        let Some(name) = module_name(path) else { return };
        match self.modules.get(&name) {
            Some((p, _)) if p.len() <= path.len() => {}
            _ => {
                self.modules.insert(name, (path, constants));
            }
        }
    }

    /// The file that `from module import ...` in the file at `from` reads.
    fn find(&self, from: &str, module: &str) -> Option<(&'a str, &'a BTreeMap<String, ValueExpr>)> {
        find_module(&self.modules, from, module).copied()
    }

    /// Follows the imports of `expr` (written in the file at `from`):
    /// `None` when nothing in it can hold a literal.
    pub(crate) fn resolve(&self, from: &str, expr: &ValueExpr) -> Option<ResolvedValue> {
        let e = self.substitute(from, expr, 0);
        let literals = e.literals();
        (!literals.is_empty()).then(|| ResolvedValue { expr: e.render(), literals })
    }

    fn substitute(&self, from: &str, expr: &ValueExpr, depth: usize) -> ValueExpr {
        if depth > MAX_DEPTH {
            return ValueExpr::opaque("…");
        }
        match expr {
            ValueExpr::Import { module, name } => match self.find(from, module) {
                Some((path, constants)) => match constants.get(name) {
                    Some(e) => self.substitute(path, e, depth + 1),
                    None => ValueExpr::opaque(name),
                },
                None => ValueExpr::opaque(name),
            },
            ValueExpr::Cond { cond, then, otherwise } => ValueExpr::Cond {
                cond: cond.clone(),
                then: Box::new(self.substitute(from, then, depth + 1)),
                otherwise: Box::new(self.substitute(from, otherwise, depth + 1)),
            },
            ValueExpr::OneOf { items } => {
                ValueExpr::OneOf { items: items.iter().map(|e| self.substitute(from, e, depth + 1)).collect() }
            }
            e => e.clone(),
        }
    }
}

/// The module `from module import ...`, written in the file at `from`,
/// reads, among `modules` (dotted name -> (path, ...)): relative imports
/// from the importing file's package; absolute ones by name, or by suffix
/// where the corpus holds the package under a prefix (`src/`).
pub(crate) fn find_module<'m, V: ModuleFile>(
    modules: &'m BTreeMap<String, V>,
    from: &str,
    module: &str,
) -> Option<&'m V> {
    let dots = module.chars().take_while(|c| *c == '.').count();
    if dots > 0 {
        // Relative: the importing file's package, then one package up per extra dot.
        let mut parts: Vec<&str> = from.split('/').collect();
        parts.pop();
        for _ in 1..dots {
            parts.pop()?;
        }
        let rest = &module[dots..];
        let mut name = parts.join(".");
        if !rest.is_empty() {
            if !name.is_empty() {
                name.push('.');
            }
            name.push_str(rest);
        }
        return modules.get(&name);
    }
    if let Some(m) = modules.get(module) {
        return Some(m);
    }
    let suffix = format!(".{module}");
    modules.iter().filter(|(n, _)| n.ends_with(&suffix)).map(|(_, m)| m).min_by_key(|m| (m.path().len(), m.path()))
}

/// An entry of a module index: it knows its file's path.
pub(crate) trait ModuleFile {
    fn path(&self) -> &str;
}

impl<T> ModuleFile for (&str, T) {
    fn path(&self) -> &str {
        self.0
    }
}

/// `a/b/c.py` -> `a.b.c`; `a/b/__init__.py` -> `a.b`; other files: `None`.
pub(crate) fn module_name(path: &str) -> Option<String> {
    let stem = path.strip_suffix(".py")?;
    let stem = stem.strip_suffix("/__init__").unwrap_or(stem);
    if stem.is_empty() || stem == "__init__" {
        return None;
    }
    Some(stem.replace('/', "."))
}

/// Shortens `s` to at most `max` characters, ending in `…` when cut.
pub(crate) fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A condition on one line (whitespace collapsed, comments dropped), shortened.
pub(crate) fn condition_text(s: &str) -> String {
    let no_comments: String = s.lines().map(strip_comment).collect::<Vec<_>>().join(" ");
    let collapsed = no_comments.split_whitespace().collect::<Vec<_>>().join(" ");
    shorten(&collapsed, MAX_COND)
}

/// A line without its `#` comment (a `#` inside a string is kept).
fn strip_comment(line: &str) -> &str {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '#' => return &line[..i],
            None => {}
        }
    }
    line
}

/// `text` with every Python string literal spelled with double quotes:
/// `'ieee'` becomes `"ieee"`, `r'\d'` becomes `r"\d"`, `'say "hi"'`
/// becomes `"say \"hi\""`. Prefixes are kept as written. A string that
/// cannot be respelled without changing it (a raw, f- or triple-quoted
/// string holding a `"`) is kept as it is, as is everything outside strings.
pub fn canonical_literals(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '#' {
            // A comment runs to the end of its line.
            let end = rest.find('\n').unwrap_or(rest.len());
            out.push_str(&rest[..end]);
            rest = &rest[end..];
        } else if c == '\'' || c == '"' {
            match split_string(rest) {
                Some((lit, tail)) => {
                    out.push_str(&respell(lit, ""));
                    rest = tail;
                }
                None => {
                    out.push_str(rest);
                    rest = "";
                }
            }
        } else if c.is_alphanumeric() || c == '_' {
            let end = rest.find(|ch: char| !(ch.is_alphanumeric() || ch == '_')).unwrap_or(rest.len());
            let word = &rest[..end];
            let after = &rest[end..];
            if is_string_prefix(word) && (after.starts_with('\'') || after.starts_with('"')) {
                match split_string(after) {
                    Some((lit, tail)) => {
                        out.push_str(&respell(lit, word));
                        rest = tail;
                    }
                    None => {
                        out.push_str(word);
                        out.push_str(after);
                        rest = "";
                    }
                }
            } else {
                out.push_str(word);
                rest = after;
            }
        } else {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

fn is_string_prefix(word: &str) -> bool {
    matches!(word.to_ascii_lowercase().as_str(), "r" | "u" | "b" | "f" | "br" | "rb" | "fr" | "rf")
}

/// Splits a string literal (starting at its quote) from what follows;
/// `None` when it is not terminated.
fn split_string(s: &str) -> Option<(&str, &str)> {
    let q = s.chars().next()?;
    let triple: String = std::iter::repeat_n(q, 3).collect();
    let (open, close) = if s.starts_with(&triple) { (3, triple.as_str()) } else { (1, &s[..1]) };
    let body = &s[open..];
    let mut escaped = false;
    for (i, c) in body.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        if c == '\\' {
            escaped = true;
        } else if body[i..].starts_with(close) {
            let end = open + i + close.len();
            return Some((&s[..end], &s[end..]));
        } else if open == 1 && c == '\n' {
            return None;
        }
    }
    None
}

/// One string literal (`lit`, starting at its quote; `prefix` written
/// before it) in double quotes.
fn respell(lit: &str, prefix: &str) -> String {
    let keep = || format!("{prefix}{lit}");
    if !lit.starts_with('\'') {
        return keep();
    }
    let triple = lit.starts_with("'''");
    let n = if triple { 3 } else { 1 };
    let body = &lit[n..lit.len() - n];
    let p = prefix.to_ascii_lowercase();
    let (raw, fstr) = (p.contains('r'), p.contains('f'));
    let quotes = &"\"\"\""[..n];
    if !body.contains('"') {
        let body = if raw { body.to_string() } else { unescape_single_quotes(body) };
        return format!("{prefix}{quotes}{body}{quotes}");
    }
    if raw || fstr || triple {
        return keep();
    }
    let mut out = String::with_capacity(body.len() + 4);
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\'') => out.push('\''),
                Some(next) => {
                    out.push('\\');
                    out.push(next);
                }
                None => out.push('\\'),
            },
            '"' => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    format!("{prefix}\"{out}\"")
}

/// `\'` -> `'` (other escapes kept as written).
fn unescape_single_quotes(body: &str) -> String {
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('\'') => out.push('\''),
                Some(next) => {
                    out.push('\\');
                    out.push(next);
                }
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether a value is itself a literal: one string literal (any prefix and
/// quotes), a number (`16`, `-1.5e-3`, `0x1F`, `1.0f`), `True`, `False` or
/// `None`.
pub fn is_literal(value: &str) -> bool {
    let v = value.trim();
    if matches!(v, "True" | "False" | "None") {
        return true;
    }
    // A string: optional prefix, then exactly one literal.
    let start = v.find(['\'', '"']).unwrap_or(v.len());
    let (prefix, lit) = v.split_at(start);
    if !lit.is_empty() && (prefix.is_empty() || is_string_prefix(prefix)) {
        return split_string(lit).is_some_and(|(_, tail)| tail.is_empty());
    }
    is_number(v)
}

fn is_number(v: &str) -> bool {
    let v = v.strip_prefix('-').unwrap_or(v);
    let mut chars = v.chars().peekable();
    let first_ok = match chars.peek() {
        Some(c) if c.is_ascii_digit() => true,
        Some('.') => v.chars().nth(1).is_some_and(|c| c.is_ascii_digit()),
        _ => false,
    };
    if !first_ok {
        return false;
    }
    let mut prev = ' ';
    for c in v.chars() {
        let ok =
            c.is_ascii_alphanumeric() || c == '_' || c == '.' || ((c == '-' || c == '+') && matches!(prev, 'e' | 'E'));
        if !ok {
            return false;
        }
        prev = c;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(s: &str) -> ValueExpr {
        ValueExpr::Literal { text: s.into() }
    }

    #[test]
    fn single_and_double_quotes_are_one_spelling() {
        assert_eq!(canonical_literals("'ieee'"), "\"ieee\"");
        assert_eq!(canonical_literals("\"ieee\""), "\"ieee\"");
        assert_eq!(canonical_literals("tl.constexpr('tf32')"), "tl.constexpr(\"tf32\")");
        assert_eq!(canonical_literals("'a' if X else 'b'"), "\"a\" if X else \"b\"");
        assert_eq!(canonical_literals("'''doc'''"), "\"\"\"doc\"\"\"");
    }

    #[test]
    fn prefixes_and_escapes_are_kept() {
        assert_eq!(canonical_literals("r'\\d+'"), "r\"\\d+\"");
        assert_eq!(canonical_literals("b'ab'"), "b\"ab\"");
        assert_eq!(canonical_literals("f'{x}'"), "f\"{x}\"");
        assert_eq!(canonical_literals("'it\\'s'"), "\"it's\"");
        assert_eq!(canonical_literals("'a\\nb'"), "\"a\\nb\"");
        // `r` as a word, not a prefix.
        assert_eq!(canonical_literals("r + br"), "r + br");
    }

    #[test]
    fn strings_holding_quotes_stay_the_same_string() {
        assert_eq!(canonical_literals("'say \"hi\"'"), "\"say \\\"hi\\\"\"");
        assert_eq!(canonical_literals("\"it's\""), "\"it's\"");
        // Raw, f- and triple-quoted strings holding `"` cannot be respelled.
        assert_eq!(canonical_literals("r'a\"b'"), "r'a\"b'");
        assert_eq!(canonical_literals("f'{d[\"k\"]}'"), "f'{d[\"k\"]}'");
        assert_eq!(canonical_literals("'''a\"b'''"), "'''a\"b'''");
        // A quote in a comment does not start a string.
        assert_eq!(canonical_literals("x  # don't\n'y'"), "x  # don't\n\"y\"");
        // Unterminated: kept.
        assert_eq!(canonical_literals("'abc"), "'abc");
    }

    #[test]
    fn literals_are_recognised() {
        for v in ["\"ieee\"", "'ieee'", "r\"x\"", "16", "-1", "1.5e-3", "0x1F", "1.0f", ".5", "True", "None", "False"] {
            assert!(is_literal(v), "{v}");
        }
        for v in ["DOT_PRECISION", "tl.float32", "\"a\" + \"b\"", "\"a\" if X else \"b\"", "x1", "", "e5", "\"a\"\"b\""]
        {
            assert!(!is_literal(v), "{v}");
        }
    }

    #[test]
    fn conditions_collapse_to_one_shortened_line() {
        assert_eq!(condition_text("A and  # why\n   not B"), "A and not B");
        let long = "X".repeat(100);
        let c = condition_text(&long);
        assert_eq!(c.chars().count(), 60);
        assert!(c.ends_with('…'));
    }

    #[test]
    fn expressions_render_and_list_literals_in_order() {
        let inner =
            ValueExpr::Cond { cond: "B".into(), then: Box::new(lit("\"b\"")), otherwise: Box::new(lit("\"c\"")) };
        let e = ValueExpr::Cond { cond: "A".into(), then: Box::new(inner.clone()), otherwise: Box::new(lit("\"b\"")) };
        assert_eq!(e.render(), "(\"b\" if B else \"c\") if A else \"b\"");
        assert_eq!(e.literals(), ["\"b\"", "\"c\""]);
        let chain = ValueExpr::Cond { cond: "A".into(), then: Box::new(lit("\"a\"")), otherwise: Box::new(inner) };
        assert_eq!(chain.render(), "\"a\" if A else \"b\" if B else \"c\"");
        let one = lit("\"x\"").or(lit("\"y\"")).or(lit("\"x\""));
        assert_eq!(one.render(), "\"x\" | \"y\"");
        assert_eq!(one.literals(), ["\"x\"", "\"y\""]);
    }

    #[test]
    fn imports_resolve_within_the_index() {
        let consts: BTreeMap<String, ValueExpr> = [("P".to_string(), lit("\"ieee\""))].into();
        let reexport: BTreeMap<String, ValueExpr> =
            [("Q".to_string(), ValueExpr::Import { module: ".consts".into(), name: "P".into() })].into();
        let mut idx = ModuleIndex::default();
        idx.add("src/pkg/consts.py", &consts);
        idx.add("src/pkg/sub/__init__.py", &reexport);
        let rel = ValueExpr::Import { module: ".consts".into(), name: "P".into() };
        let got = idx.resolve("src/pkg/k.py", &rel).expect("relative import");
        assert_eq!((got.expr.as_str(), got.literals.as_slice()), ("\"ieee\"", ["\"ieee\"".to_string()].as_slice()));
        let abs = ValueExpr::Import { module: "pkg.consts".into(), name: "P".into() };
        assert!(idx.resolve("other/k.py", &abs).is_some(), "absolute, under a prefix");
        let up = ValueExpr::Import { module: "..consts".into(), name: "P".into() };
        assert!(idx.resolve("src/pkg/sub/k.py", &up).is_some(), "two dots: one package up");
        // A package's __init__ is its module; relative imports in it are from the package.
        let via = ValueExpr::Import { module: "pkg.sub".into(), name: "Q".into() };
        assert!(idx.resolve("src/x.py", &via).is_none(), "`.consts` from pkg/sub is pkg/sub/consts");
        let missing = ValueExpr::Import { module: "pkg.consts".into(), name: "NOPE".into() };
        assert_eq!(idx.resolve("src/pkg/k.py", &missing), None);
        let external = ValueExpr::Import { module: "triton.language".into(), name: "P".into() };
        assert_eq!(idx.resolve("src/pkg/k.py", &external), None);
    }
}
