//! What Triton's own documentation says of an idiom, read at mine time from
//! the installed package of the harness's Python (SPEC §4's mechanism text;
//! issue: "the agent's questions").
//!
//! Python is asked only where the package lies (no `import triton`: that
//! costs seconds); its sources are parsed here with tree-sitter and the
//! docstrings of `triton.language` functions and of the `autotune` /
//! `heuristics` decorators read: `:param NAME:` / `:type NAME:` blocks for a
//! keyword idiom, the first paragraph for a decorator. Without a Python or a
//! Triton, nothing is added and mining goes on.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use kidiom_miner::{FamilyKey, Mechanism};
use kidiom_syntax::Lang;

/// Docstrings of the installed Triton: function name -> its docstring.
#[derive(Debug, Default)]
pub(crate) struct TritonDocs {
    docs: HashMap<String, String>,
    /// Where they were read (for the mechanism's attribution).
    pub(crate) version: String,
}

/// The files whose functions carry the documentation of the idioms kidiom mines.
const SOURCES: &[&str] = &["language/core.py", "language/standard.py", "runtime/autotuner.py", "runtime/jit.py"];

impl TritonDocs {
    /// Reads the docstrings of the Triton that `python` would import; empty when there is none.
    pub(crate) fn load(python: &Path) -> TritonDocs {
        let Some(dir) = package_dir(python) else { return TritonDocs::default() };
        let mut out = TritonDocs { version: version_of(&dir).unwrap_or_default(), ..Default::default() };
        for rel in SOURCES {
            if let Ok(text) = std::fs::read_to_string(dir.join(rel)) {
                out.read_source(&text);
            }
        }
        out
    }

    fn read_source(&mut self, src: &str) {
        let Ok(Some(tree)) = kidiom_syntax::parse_tree(Lang::Python, src) else { return };
        kidiom_syntax::preorder(tree.root_node(), |n| {
            // module-level functions only: a class's method of the same name (`load`) is not the API
            let mut parent = n.parent();
            if parent.is_some_and(|x| x.kind() == "decorated_definition") {
                parent = parent.and_then(|x| x.parent());
            }
            if n.kind() == "function_definition"
                && parent.is_some_and(|x| x.kind() == "module")
                && let Some(name) = n.child_by_field_name("name").and_then(|x| src.get(x.byte_range()))
                && let Some(body) = n.child_by_field_name("body")
                && let Some(first) = body.named_child(0)
                && first.kind() == "expression_statement"
                && let Some(s) = first.named_child(0).filter(|s| s.kind() == "string")
                && let Some(text) = src.get(s.byte_range())
            {
                // the first definition wins (core.py before the helpers that shadow names)
                self.docs.entry(name.to_string()).or_insert_with(|| text.trim_matches(['"', '\'']).to_string());
            }
            // nothing inside a function or class is API documentation
            !matches!(n.kind(), "function_definition" | "class_definition")
        });
    }

    /// Whether Triton documents `function` (`tl.multiple_of`) as a compiler
    /// hint ("Let the compiler know that ..."): `Some(false)` for a function
    /// it documents as something else (`tl.trans` permutes a tensor); `None`
    /// when it does not document it (or Triton's sources were not found).
    pub(crate) fn is_hint(&self, function: &str) -> Option<bool> {
        let name = function.rsplit('.').next().unwrap_or(function);
        let doc = self.docs.get(name)?;
        Some(doc.trim_start().starts_with("Let the compiler know"))
    }

    /// The documentation of an idiom, if Triton documents it.
    pub(crate) fn describe(&self, key: &FamilyKey) -> Option<String> {
        let last = |s: &str| s.rsplit('.').next().unwrap_or(s).to_string();
        match key.mechanism {
            Mechanism::Keyword => param_doc(self.docs.get(&last(&key.subject))?, &key.decoration),
            Mechanism::Decorator => first_paragraph(self.docs.get(&last(&key.decoration))?),
            _ => None,
        }
    }
}

/// The `:param NAME:` and `:type NAME:` blocks of a docstring, joined into one sentence run.
fn param_doc(doc: &str, name: &str) -> Option<String> {
    let mut out: Vec<String> = Vec::new();
    let mut inside = false;
    for line in doc.lines() {
        let t = line.trim();
        if t.starts_with(&format!(":param {name}:")) || t.starts_with(&format!(":type {name}:")) {
            inside = true;
            let rest = t.split_once(&format!("{name}:")).map(|(_, r)| r.trim()).unwrap_or("");
            let label = if t.starts_with(":type") { "values: " } else { "" };
            out.push(format!("{label}{rest}"));
        } else if inside && !t.is_empty() && !t.starts_with(':') {
            if let Some(last) = out.last_mut() {
                last.push(' ');
                last.push_str(t);
            }
        } else {
            inside = false;
        }
    }
    let text = clean(&out.join("; "));
    (!text.is_empty()).then_some(text)
}

/// The first paragraph of a docstring.
fn first_paragraph(doc: &str) -> Option<String> {
    let para: Vec<&str> =
        doc.lines().map(str::trim).skip_while(|l| l.is_empty()).take_while(|l| !l.is_empty()).collect();
    let text = clean(&para.join(" "));
    (!text.is_empty()).then_some(text)
}

/// Sphinx markup (`:code:\`x\``) as plain text, whitespace squashed.
fn clean(s: &str) -> String {
    s.replace(":code:", "").replace('`', "").split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The directory of the `triton` package `python` would import (none when
/// Python cannot say within a minute: the documentation is optional).
fn package_dir(python: &Path) -> Option<PathBuf> {
    let find = "import importlib.util as u; s = u.find_spec('triton'); print(s.origin if s else '')";
    let args = ["-I".to_string(), "-c".to_string(), find.to_string()];
    let out = kidiom_exec::run(python, &args, Path::new("."), &[], std::time::Duration::from_secs(60)).ok()?;
    let origin = out.stdout.trim().to_string();
    (!origin.is_empty()).then(|| Path::new(&origin).parent().map(Path::to_path_buf))?
}

/// `__version__ = '3.9.0'` in the package's `__init__.py`.
fn version_of(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("__init__.py")).ok()?;
    let line = text.lines().find(|l| l.trim_start().starts_with("__version__"))?;
    Some(line.split(['"', '\'']).nth(1)?.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = r#"
class Ptr:
    def load(self):
        """A method that shadows nothing."""

def load(pointer, mask=None, cache_modifier="", eviction_policy=""):
    """
    Return a tensor of data.

    :param cache_modifier: changes the cache option
    :type cache_modifier: str, optional, one of {"", ".ca"}, where ".ca" caches
        at all levels
    :param eviction_policy: changes the eviction policy
    :type eviction_policy: str, optional
    """
    return 0

def autotune(configs, key):
    """
    Decorator for auto-tuning a :code:`triton.jit`'d function.

    .. code-block:: python
    """
"#;

    fn key(mechanism: Mechanism, subject: &str, decoration: &str) -> FamilyKey {
        FamilyKey { lang: Lang::Python, mechanism, subject: subject.into(), decoration: decoration.into() }
    }

    #[test]
    fn params_and_decorators_are_read_from_docstrings() {
        let mut d = TritonDocs::default();
        d.read_source(SRC);
        assert_eq!(
            d.describe(&key(Mechanism::Keyword, "tl.load", "cache_modifier")).as_deref(),
            Some(
                "changes the cache option; values: str, optional, one of {\"\", \".ca\"}, where \".ca\" caches at all levels"
            )
        );
        assert_eq!(
            d.describe(&key(Mechanism::Keyword, "tl.load", "eviction_policy")).as_deref(),
            Some("changes the eviction policy; values: str, optional")
        );
        assert_eq!(
            d.describe(&key(Mechanism::Decorator, "triton-kernel", "triton.autotune")).as_deref(),
            Some("Decorator for auto-tuning a triton.jit'd function.")
        );
        assert_eq!(d.describe(&key(Mechanism::Keyword, "tl.load", "mask")), None);
        assert_eq!(d.describe(&key(Mechanism::Keyword, "tl.store", "mask")), None);
    }

    #[test]
    fn hints_are_what_triton_documents_as_hints() {
        let mut d = TritonDocs::default();
        d.read_source(
            "def multiple_of(input, values):\n    \"\"\"\n    Let the compiler know that the values are multiples.\n    \"\"\"\n\ndef trans(input, *dims):\n    \"\"\"\n    Permutes the dimensions of a tensor.\n    \"\"\"\n",
        );
        assert_eq!(d.is_hint("tl.multiple_of"), Some(true));
        assert_eq!(d.is_hint("tl.trans"), Some(false));
        assert_eq!(d.is_hint("tl.unknown"), None, "undocumented: the miner's own evidence decides");
    }

    #[test]
    fn no_python_no_docs() {
        let d = TritonDocs::load(Path::new("/nonexistent/python"));
        assert!(d.docs.is_empty());
    }
}
