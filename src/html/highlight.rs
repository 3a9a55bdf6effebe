//! Syntax highlighting of kernel code (Python/Triton, C++, CUDA) with
//! tree-sitter-highlight and the grammars' own highlight queries, as HTML
//! lines of `<span class="hl-...">`. Every byte of source goes through
//! [`escape`]: the only markup in the output is our own spans.

use std::sync::OnceLock;

use tree_sitter_highlight::{HighlightConfiguration, HighlightEvent, Highlighter};

use super::markup::{Markup, escape};

/// The captures we colour, in the order `configure` matches them (the
/// longest dotted prefix of a query's capture name that is listed here wins).
const NAMES: &[&str] = &[
    "comment",
    "string",
    "escape",
    "number",
    "constant",
    "constant.builtin",
    "keyword",
    "keyword.modifier",
    "type",
    "function",
    "function.builtin",
    "function.method",
    "constructor",
    "property",
    "operator",
    "variable.builtin",
    "embedded",
];

/// The language a file is highlighted as, by its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    Python,
    Cpp,
    Cuda,
}

impl Code {
    /// Every language, for the test that builds each configuration.
    #[cfg(test)]
    const ALL: [Code; 3] = [Code::Python, Code::Cpp, Code::Cuda];

    /// By the file name's extension; `None` for anything else (shown plain).
    pub(crate) fn from_path(path: &str) -> Option<Code> {
        let ext = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase())?;
        match ext.as_str() {
            "py" | "pyi" => Some(Code::Python),
            "cu" | "cuh" => Some(Code::Cuda),
            "c" | "cc" | "cpp" | "cxx" | "h" | "hh" | "hpp" | "hxx" | "inl" => Some(Code::Cpp),
            _ => None,
        }
    }

    /// The configuration, built once per process (compiling a query takes
    /// tens of milliseconds); `None` when its query does not compile.
    fn config(self) -> Option<&'static HighlightConfiguration> {
        static PY: OnceLock<Option<HighlightConfiguration>> = OnceLock::new();
        static CPP: OnceLock<Option<HighlightConfiguration>> = OnceLock::new();
        static CUDA: OnceLock<Option<HighlightConfiguration>> = OnceLock::new();
        let cell = match self {
            Code::Python => &PY,
            Code::Cpp => &CPP,
            Code::Cuda => &CUDA,
        };
        cell.get_or_init(|| build(self).ok()).as_ref()
    }
}

/// The C constructs tree-sitter-cpp's query inherits from tree-sitter-c's,
/// which its crate does not ship (our own short query, rather than a second
/// 4 MB grammar compiled for its query text).
const C_BASE: &str = include_str!("c_base.scm");

fn build(code: Code) -> Result<HighlightConfiguration, tree_sitter::QueryError> {
    let (language, name, query) = match code {
        Code::Python => {
            (tree_sitter_python::LANGUAGE.into(), "python", tree_sitter_python::HIGHLIGHTS_QUERY.to_string())
        }
        Code::Cpp => {
            (tree_sitter_cpp::LANGUAGE.into(), "cpp", format!("{}\n{C_BASE}", tree_sitter_cpp::HIGHLIGHT_QUERY))
        }
        // tree-sitter-cuda extends the C++ grammar (`__launch_bounds__`, `<<<...>>>`);
        // its query adds to the C++ one, as its "inherits: cpp" line says
        Code::Cuda => (
            tree_sitter_cuda::LANGUAGE.into(),
            "cuda",
            format!("{}\n{}\n{C_BASE}", tree_sitter_cuda::HIGHLIGHTS_QUERY, tree_sitter_cpp::HIGHLIGHT_QUERY),
        ),
    };
    let mut config = HighlightConfiguration::new(language, name, &query, "", "")?;
    config.configure(NAMES);
    Ok(config)
}

/// The CSS class of a capture (`hl-constant-builtin`).
fn class(index: usize) -> String {
    format!("hl-{}", NAMES.get(index).copied().unwrap_or("other").replace('.', "-"))
}

/// `text` as HTML, one entry per line (no newline characters), highlighted
/// when `code` is known and the text parses at all; otherwise escaped plain.
/// Spans never cross a line: each line closes and reopens them.
pub(crate) fn lines(code: Option<Code>, text: &str) -> Vec<Markup> {
    let plain = || text.split('\n').map(|l| Markup::trusted(escape(l))).collect();
    let Some(config) = code.and_then(Code::config) else { return plain() };
    let mut highlighter = Highlighter::new();
    let Ok(events) = highlighter.highlight(config, text.as_bytes(), None, None, |_| None) else { return plain() };
    let mut out = Vec::new();
    let mut line = String::new();
    let mut open: Vec<String> = Vec::new();
    for event in events {
        match event {
            Ok(HighlightEvent::HighlightStart(h)) => {
                let c = class(h.0);
                line.push_str(&format!("<span class=\"{c}\">"));
                open.push(c);
            }
            Ok(HighlightEvent::HighlightEnd) => {
                if open.pop().is_some() {
                    line.push_str("</span>");
                }
            }
            Ok(HighlightEvent::Source { start, end }) => {
                let Some(chunk) = text.get(start..end) else { continue };
                let mut parts = chunk.split('\n');
                if let Some(first) = parts.next() {
                    line.push_str(&escape(first));
                }
                for part in parts {
                    line.push_str(&"</span>".repeat(open.len()));
                    out.push(Markup::trusted(std::mem::take(&mut line)));
                    for c in &open {
                        line.push_str(&format!("<span class=\"{c}\">"));
                    }
                    line.push_str(&escape(part));
                }
            }
            // a cancelled or failed highlight: the text without colours
            Err(_) => return plain(),
        }
    }
    line.push_str(&"</span>".repeat(open.len()));
    out.push(Markup::trusted(line));
    out
}

/// A fragment of code (a hunk's side, an upstream snippet): its common
/// indentation is taken off before parsing (an indented fragment of Python
/// is a syntax error at its first line) and put back on every line.
pub(crate) fn fragment(code: Option<Code>, text: &str) -> Vec<Markup> {
    let indent = text
        .split('\n')
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start_matches([' ', '\t']).len())
        .min()
        .unwrap_or(0);
    if indent == 0 {
        return lines(code, text);
    }
    let dedented: Vec<&str> = text.split('\n').map(|l| l.get(indent..).unwrap_or("")).collect();
    let prefixes: Vec<&str> = text.split('\n').map(|l| l.get(..indent).unwrap_or(l)).collect();
    lines(code, &dedented.join("\n"))
        .into_iter()
        .zip(prefixes)
        .map(|(m, p)| Markup::trusted(format!("{}{}", escape(p), m.as_str())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_language_has_a_configuration() {
        for code in Code::ALL {
            if let Err(e) = build(code) {
                panic!("{code:?}: the highlight query does not compile: {e}");
            }
        }
    }

    #[test]
    fn keywords_strings_and_comments_get_classes() {
        let py = lines(Some(Code::Python), "def f(x):\n    return \"a<b\"  # c&d\n");
        assert_eq!(py.len(), 3, "a line per line, the empty last one included");
        assert!(py[0].as_str().contains("<span class=\"hl-keyword\">def</span>"), "{}", py[0].as_str());
        assert!(py[1].as_str().contains("hl-string"), "{}", py[1].as_str());
        assert!(py[1].as_str().contains("&lt;b"), "source text is escaped: {}", py[1].as_str());
        assert!(py[1].as_str().contains("<span class=\"hl-comment\"># c&amp;d</span>"), "{}", py[1].as_str());
        let cu = lines(Some(Code::Cuda), "__global__ void k(float* x) {\n  // hi\n  return;\n}");
        assert!(cu[0].as_str().contains("hl-keyword-modifier"), "{}", cu[0].as_str());
        assert!(cu[0].as_str().contains("<span class=\"hl-type\">void</span>"), "{}", cu[0].as_str());
        assert!(cu[1].as_str().contains("hl-comment"), "{}", cu[1].as_str());
        let cpp = lines(Some(Code::Cpp), "#include <x>\nint f() { return 1; }");
        assert!(cpp[1].as_str().contains("<span class=\"hl-keyword\">return</span>"), "{}", cpp[1].as_str());
    }

    #[test]
    fn spans_are_closed_on_every_line() {
        let out = lines(Some(Code::Python), "x = \"\"\"a\nb\nc\"\"\"\n");
        for l in &out {
            assert_eq!(l.as_str().matches("<span").count(), l.as_str().matches("</span>").count(), "{}", l.as_str());
        }
        assert!(out[1].as_str().contains("hl-string"), "a string's middle line keeps its colour");
    }

    #[test]
    fn fragments_keep_their_indentation_and_unknown_files_are_plain() {
        let out = fragment(Some(Code::Python), "    if x:\n        y = tl.dot(a, b)");
        assert!(out[0].as_str().starts_with("    <span class=\"hl-keyword\">if</span>"), "{}", out[0].as_str());
        assert!(out[1].as_str().starts_with("        "), "{}", out[1].as_str());
        let plain = lines(Code::from_path("notes.txt"), "<script>");
        assert_eq!(plain[0].as_str(), "&lt;script&gt;");
    }
}
