//! Functions bound by a pybind11 module (`m.def("name", &fn, ...)`) and
//! whether the GIL may be released in them.
//!
//! Releasing the GIL around a bound function's work is a known production
//! fix (a C++ copy holding it stalls every Python thread), and a known way to
//! crash an interpreter: after `py::gil_scoped_release` nothing may touch a
//! Python object. So a GIL-releasing rewrite is offered only where the
//! function, read after the release point, provably does not:
//!
//! - no parameter, local or global of a Python type (`py::object`,
//!   `py::list`, `py::array`, `py::buffer`, `PyObject*`, a `std::function`
//!   callback converted from a Python callable) is named;
//! - no `py::` / `pybind11::` function or type is used, except pybind11's C++
//!   exception classes (translated after the GIL is re-acquired);
//! - no Python C API (`PyList_Append`, `Py_INCREF`);
//! - the function does not return a Python object;
//! - every function of the same file that it calls passes the same test;
//! - it is a free function or a lambda (a method's object is not checked),
//!   defined once, in this file.
//!
//! A function that already releases (in its body, or through
//! `py::call_guard` on its `.def`) is not a site; one that re-acquires the
//! GIL itself is refused, since which statements the acquire covers is not
//! followed.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use tree_sitter::{Node, Tree};

/// The text that marks a GIL release (pybind11 and nanobind spell it alike).
pub(crate) const RELEASE: &str = "gil_scoped_release";

/// pybind11 names that are plain C++ and need no GIL.
const SAFE_PY_NAMES: &[&str] = &[
    "value_error",
    "type_error",
    "index_error",
    "key_error",
    "buffer_error",
    "stop_iteration",
    "attribute_error",
    "builtin_exception",
    "ssize_t",
    "size_t",
    "return_value_policy",
    RELEASE,
];

/// One `.def(...)` call of a binding module.
#[derive(Debug, Clone)]
pub(crate) struct Def {
    /// The whole call expression.
    pub call: Range<usize>,
    /// What it binds.
    pub target: Target,
    /// It carries `py::call_guard<...gil_scoped_release...>`.
    pub releases: bool,
    /// The receiver is not a plain module variable (`py::class_<T>(...).def`).
    pub method: bool,
}

/// What a `.def` binds.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// `&name`, `name` or `&ns::name`: the last segment, and the text as written.
    Named(String, String),
    /// A lambda: its byte range.
    Lambda(Range<usize>),
    /// Anything else (`py::overload_cast<...>(&f)`, a variable).
    Other(String),
}

/// A bound function that may take a GIL release as its first statement.
#[derive(Debug, Clone)]
pub(crate) struct Site {
    /// The function definition (or lambda).
    pub function: Range<usize>,
    /// Its body (`{ ... }`).
    pub body: Range<usize>,
}

/// A site the rewrite refused, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The bound function's name (or `lambda`), as the `.def` names it.
    pub function: String,
    /// Bytes of the `.def` call.
    pub site: Range<usize>,
    /// Why the GIL may not be released there.
    pub reason: String,
}

/// The binding analysis of one parsed file.
pub(crate) struct Bindings<'t, 's> {
    src: &'s str,
    tree: &'t Tree,
    pub defs: Vec<Def>,
    functions: HashMap<String, Vec<Node<'t>>>,
    globals: HashMap<String, String>,
}

fn text<'s>(src: &'s str, n: Node) -> &'s str {
    src.get(n.byte_range()).unwrap_or("")
}

fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether a type, as written, is (or holds) a Python object.
pub(crate) fn python_type(ty: &str) -> bool {
    let t: String = ty.split_whitespace().collect::<Vec<_>>().join(" ");
    let t = t.trim_start_matches("const ").trim_start_matches("static ");
    if t.starts_with("PyObject") || t.starts_with("std::function<") {
        return true;
    }
    for ns in ["py::", "pybind11::", "nb::", "nanobind::"] {
        if let Some(rest) = t.strip_prefix(ns) {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            return !SAFE_PY_NAMES.contains(&name.as_str());
        }
    }
    false
}

/// The declared name under a declarator (`&out`, `*p`, `x = 1`, `a[3]`).
fn declared_name<'s>(src: &'s str, mut d: Node) -> Option<&'s str> {
    for _ in 0..8 {
        match d.kind() {
            "identifier" | "field_identifier" => return Some(text(src, d)),
            _ => {
                d = d.child_by_field_name("declarator").or_else(|| d.named_child(0))?;
            }
        }
    }
    None
}

fn line_of(src: &str, byte: usize) -> (usize, String) {
    let b = byte.min(src.len());
    let line = src[..b].matches('\n').count() + 1;
    let start = src[..b].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let end = src[b..].find('\n').map(|i| b + i).unwrap_or(src.len());
    let mut t = src[start..end].trim().to_string();
    if t.len() > 80 {
        let mut cut = 77;
        while !t.is_char_boundary(cut) {
            cut -= 1;
        }
        t.truncate(cut);
        t.push_str("...");
    }
    (line, t)
}

impl<'t, 's> Bindings<'t, 's> {
    /// Reads the `.def` calls, the function definitions and the file-scope
    /// declarations of `tree` (parsed from `src`).
    pub fn new(src: &'s str, tree: &'t Tree) -> Bindings<'t, 's> {
        let mut defs = Vec::new();
        let mut functions: HashMap<String, Vec<Node<'t>>> = HashMap::new();
        let mut globals = HashMap::new();
        let root = tree.root_node();
        let mut cursor = root.walk();
        for top in root.named_children(&mut cursor) {
            if top.kind() == "declaration"
                && let Some(ty) = top.child_by_field_name("type")
                && python_type(text(src, ty))
            {
                let mut c = top.walk();
                for d in top.children_by_field_name("declarator", &mut c) {
                    if let Some(n) = declared_name(src, d) {
                        globals.insert(n.to_string(), squash(text(src, ty)));
                    }
                }
            }
        }
        kidiom_syntax::preorder(root, |node| {
            match node.kind() {
                "function_definition" => {
                    if let Some(name) = node.child_by_field_name("declarator").and_then(|d| function_name(src, d)) {
                        functions.entry(name).or_default().push(node);
                    }
                }
                "call_expression" => {
                    if let Some(d) = read_def(src, node) {
                        defs.push(d);
                    }
                }
                _ => {}
            }
            !node.is_error()
        });
        Bindings { src, tree, defs, functions, globals }
    }

    /// The bound functions that lack a GIL release, and the refused ones.
    pub fn release_sites(&self) -> (Vec<Site>, Vec<Refusal>) {
        let (mut sites, mut refused) = (Vec::new(), Vec::new());
        let mut seen: HashSet<Range<usize>> = HashSet::new();
        for def in &self.defs {
            match self.site(def) {
                Ok(Some(site)) => {
                    if seen.insert(site.function.clone()) {
                        sites.push(site);
                    }
                }
                Ok(None) => {}
                Err(r) => refused.push(r),
            }
        }
        (sites, refused)
    }

    /// The function `def` binds, if the GIL may be released over its whole
    /// body; `Ok(None)` when it already is released.
    pub fn site(&self, def: &Def) -> Result<Option<Site>, Refusal> {
        let refuse =
            |function: &str, reason: String| Refusal { function: function.to_string(), site: def.call.clone(), reason };
        let (name, func) = match &def.target {
            Target::Other(t) => return Err(refuse(t, format!("binds `{t}`, not a function kidiom can read"))),
            Target::Lambda(r) => {
                let Some(node) = self.node(r.clone(), "lambda_expression") else {
                    return Err(refuse("lambda", "the lambda could not be read".into()));
                };
                ("lambda".to_string(), node)
            }
            Target::Named(name, written) => {
                if def.method {
                    return Err(refuse(written, "a method: the members of its object are not checked".into()));
                }
                match self.functions.get(name).map(Vec::as_slice) {
                    None | Some([]) => {
                        return Err(refuse(
                            written,
                            format!("`{written}` is not defined in this file: its body cannot be checked"),
                        ));
                    }
                    Some([one]) => {
                        if inside_class(*one) {
                            return Err(refuse(written, "a method: the members of its object are not checked".into()));
                        }
                        (written.clone(), *one)
                    }
                    Some(_) => return Err(refuse(written, format!("`{written}` is overloaded in this file"))),
                }
            }
        };
        let Some(body) = func.child_by_field_name("body") else {
            return Err(refuse(&name, "it has no body".into()));
        };
        if def.releases || text(self.src, body).contains(RELEASE) {
            return Ok(None); // the idiom is already there
        }
        if body.named_child_count() == 0 {
            return Ok(None); // nothing to release the GIL for
        }
        let mut visiting = HashSet::new();
        match self.hazard(func, body.start_byte(), &mut visiting) {
            Some(h) => Err(refuse(&name, h)),
            None => Ok(Some(Site { function: func.byte_range(), body: body.byte_range() })),
        }
    }

    fn node(&self, r: Range<usize>, kind: &str) -> Option<Node<'t>> {
        let mut n = self.tree.root_node().descendant_for_byte_range(r.start, r.end)?;
        loop {
            if n.kind() == kind && n.byte_range() == r {
                return Some(n);
            }
            n = n.parent()?;
        }
    }

    /// Why `func` may not run without the GIL from byte `from` on; `None` when it may.
    fn hazard(&self, func: Node<'t>, from: usize, visiting: &mut HashSet<usize>) -> Option<String> {
        let src = self.src;
        if !visiting.insert(func.id()) {
            return None; // recursion: judged where it started
        }
        if let Some(ty) = func.child_by_field_name("type").map(|t| text(src, t))
            && python_type(ty)
        {
            return Some(format!("it returns `{}`, a Python object built without the GIL", squash(ty)));
        }
        // Python-typed names: globals, then parameters, then locals as they are declared.
        let mut py: HashMap<String, String> = self.globals.clone();
        py.extend(python_parameters(src, func));
        // Lambda captures by reference or by value of Python objects look like uses of outer names; they are caught as uses.
        let body = func.child_by_field_name("body")?;
        let mut found: Option<String> = None;
        kidiom_syntax::preorder(body, |n| {
            if found.is_some() {
                return false;
            }
            let after = n.start_byte() >= from;
            match n.kind() {
                "declaration" | "parameter_declaration" => {
                    if let Some(ty) = n.child_by_field_name("type") {
                        let t = text(src, ty);
                        if python_type(t) {
                            let mut c = n.walk();
                            let names: Vec<String> = n
                                .children_by_field_name("declarator", &mut c)
                                .filter_map(|d| declared_name(src, d).map(str::to_string))
                                .collect();
                            if after && n.kind() == "declaration" {
                                let (line, code) = line_of(src, n.start_byte());
                                found = Some(format!(
                                    "it makes a Python object (`{}`) after the release point, line {line}: `{code}`",
                                    squash(t)
                                ));
                            }
                            for name in names {
                                py.insert(name, squash(t));
                            }
                        }
                    }
                }
                "identifier" if after => found = identifier_hazard(src, n, &py),
                "qualified_identifier" if after => {
                    if let Some(h) = namespace_hazard(src, n) {
                        found = h;
                        return false;
                    }
                }
                "call_expression" if after => {
                    // A function of this file that it calls must pass the same test.
                    if let Some(f) = n.child_by_field_name("function")
                        && matches!(f.kind(), "identifier" | "qualified_identifier")
                    {
                        let callee = text(src, f).rsplit("::").next().unwrap_or("").trim().to_string();
                        if let Some([callee_fn]) = self.functions.get(&callee).map(Vec::as_slice)
                            && callee_fn.id() != func.id()
                            && let Some(cb) = callee_fn.child_by_field_name("body")
                            && let Some(h) = self.hazard(*callee_fn, cb.start_byte(), visiting)
                        {
                            found = Some(format!("it calls `{callee}`, where {h}"));
                        }
                    }
                }
                _ => {}
            }
            found.is_none()
        });
        found
    }
}

/// The Python-typed parameters of `func`: (name, type).
fn python_parameters(src: &str, func: Node) -> Vec<(String, String)> {
    let params = func.child_by_field_name("declarator").and_then(|d| {
        let mut n = d;
        for _ in 0..4 {
            if let Some(p) = n.child_by_field_name("parameters") {
                return Some(p);
            }
            n = n.child_by_field_name("declarator")?;
        }
        None
    });
    let mut out = Vec::new();
    if let Some(params) = params {
        let mut c = params.walk();
        for p in params.named_children(&mut c) {
            let Some(ty) = p.child_by_field_name("type") else { continue };
            if python_type(text(src, ty))
                && let Some(n) = p.child_by_field_name("declarator").and_then(|d| declared_name(src, d))
            {
                out.push((n.to_string(), squash(text(src, ty))));
            }
        }
    }
    out
}

/// Why the identifier `n` after the release point needs the GIL: a
/// Python-typed name of `py` or the Python C API (a field name is neither).
fn identifier_hazard(src: &str, n: Node, py: &HashMap<String, String>) -> Option<String> {
    let name = text(src, n);
    let is_field = n.parent().is_some_and(|p| {
        p.kind() == "field_expression" && p.child_by_field_name("field").is_some_and(|f| f.id() == n.id())
    });
    if is_field {
        return None;
    }
    let at = || line_of(src, n.start_byte());
    if let Some(ty) = py.get(name) {
        let (line, code) = at();
        Some(format!("it uses `{name}` ({ty}) after the release point, line {line}: `{code}`"))
    } else if is_c_api(name) {
        let (line, code) = at();
        Some(format!("it calls the Python C API (`{name}`) after the release point, line {line}: `{code}`"))
    } else {
        None
    }
}

/// For a qualified name in a Python binding namespace (`py::`, `nb::`, ...)
/// after the release point: `Some` with why it needs the GIL (`None` for its
/// C++ exception classes); `None` for any other namespace.
fn namespace_hazard(src: &str, n: Node) -> Option<Option<String>> {
    let t: String = text(src, n).split_whitespace().collect();
    let rest = ["py::", "pybind11::", "nb::", "nanobind::"].iter().find_map(|ns| t.strip_prefix(ns))?;
    let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    Some(if name == "gil_scoped_acquire" {
        Some("it re-acquires the GIL itself (`gil_scoped_acquire`); the statements it covers are not followed".into())
    } else if !SAFE_PY_NAMES.contains(&name.as_str()) {
        let (line, code) = line_of(src, n.start_byte());
        Some(format!("it uses `{t}` after the release point, line {line}: `{code}`"))
    } else {
        None
    })
}

fn is_c_api(name: &str) -> bool {
    let n = name.strip_prefix('_').unwrap_or(name);
    n.strip_prefix("Py").is_some_and(|r| r.starts_with(|c: char| c.is_ascii_uppercase() || c == '_'))
}

fn inside_class(n: Node) -> bool {
    let mut p = n.parent();
    while let Some(x) = p {
        if matches!(x.kind(), "class_specifier" | "struct_specifier" | "field_declaration_list") {
            return true;
        }
        p = x.parent();
    }
    false
}

/// The name a function definition's declarator declares (last segment of `ns::f`).
fn function_name(src: &str, d: Node) -> Option<String> {
    let mut n = d;
    for _ in 0..6 {
        match n.kind() {
            "function_declarator" => {
                let inner = n.child_by_field_name("declarator")?;
                let t = text(src, inner);
                return Some(t.rsplit("::").next().unwrap_or(t).trim().to_string());
            }
            _ => n = n.child_by_field_name("declarator")?,
        }
    }
    None
}

/// A `.def("name", target, extras...)` call.
fn read_def(src: &str, call: Node) -> Option<Def> {
    let f = call.child_by_field_name("function")?;
    if f.kind() != "field_expression" || f.child_by_field_name("field").map(|x| text(src, x)) != Some("def") {
        return None;
    }
    let receiver = f.child_by_field_name("argument")?;
    let args = call.child_by_field_name("arguments")?;
    let mut c = args.walk();
    let list: Vec<Node> = args.named_children(&mut c).filter(|a| a.kind() != "comment").collect();
    if list.len() < 2 || !matches!(list[0].kind(), "string_literal" | "raw_string_literal" | "concatenated_string") {
        return None;
    }
    let t = list[1];
    let target = match t.kind() {
        "lambda_expression" => Target::Lambda(t.byte_range()),
        "pointer_expression" | "identifier" | "qualified_identifier" => {
            let inner = if t.kind() == "pointer_expression" { t.child_by_field_name("argument")? } else { t };
            let written: String = text(src, inner).split_whitespace().collect();
            if matches!(inner.kind(), "identifier" | "qualified_identifier") && !written.contains('<') {
                let last = written.rsplit("::").next().unwrap_or(&written).to_string();
                Target::Named(last, written)
            } else {
                Target::Other(written)
            }
        }
        _ => Target::Other(squash(text(src, t))),
    };
    let releases = list[2..].iter().any(|a| {
        let s: String = text(src, *a).split_whitespace().collect();
        s.contains("call_guard<") && s.contains(RELEASE)
    });
    Some(Def { call: call.byte_range(), target, releases, method: receiver.kind() != "identifier" })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kidiom_syntax::{Lang, parse_tree};

    fn analyse(src: &str) -> (Vec<String>, Vec<(String, String)>) {
        let tree = parse_tree(Lang::Cpp, src).unwrap().unwrap();
        let b = Bindings::new(src, &tree);
        let (sites, refused) = b.release_sites();
        // a site by the Python name its `.def` gives it
        let names = sites
            .iter()
            .map(|s| {
                let f = &src[s.function.clone()];
                if f.starts_with('[') {
                    "lambda".to_string()
                } else {
                    f.split('(').next().unwrap_or("").split_whitespace().last().unwrap_or("").to_string()
                }
            })
            .collect();
        (names, refused.into_iter().map(|r| (r.function, r.reason)).collect())
    }

    const MODULE: &str = r#"
#include <pybind11/pybind11.h>
namespace py = pybind11;
struct View { char* data; long n; };
static py::object cache;
static void check(const View& v) { if (v.n < 0) throw py::value_error("negative"); }
static void copy(const View& a, View& b) { check(a); std::memcpy(b.data, a.data, a.n); }
static void appends(py::list out, int n) { out.append(n); }
static void log_py(const View& a) { py::print("copying"); }
static void copy_logged(const View& a, View& b) { log_py(a); std::memcpy(b.data, a.data, a.n); }
static long via_capi(PyObject* o) { return PyLong_AsLong(o); }
static void uses_global(int n) { cache = py::int_(n); }
static void calls_back(std::function<void(int)> cb) { cb(1); }
static py::list returns_list(int n) { return py::list(); }
static void done(View& b) { py::gil_scoped_release release; b.n = 0; }
static void guarded(View& b) { b.n = 1; }
static void empty() {}
PYBIND11_MODULE(kv, m) {
  m.def("copy", &copy, "doc");
  m.def("appends", &appends);
  m.def("copy_logged", &copy_logged);
  m.def("via_capi", &via_capi);
  m.def("uses_global", &uses_global);
  m.def("calls_back", &calls_back);
  m.def("returns_list", &returns_list);
  m.def("done", &done);
  m.def("guarded", &guarded, py::call_guard<py::gil_scoped_release>());
  m.def("empty", &empty);
  m.def("elsewhere", &other::elsewhere);
  m.def("lam", [](int x) { return x + 1; });
  m.def("lam_py", [](py::dict d) { return d.size(); });
}
"#;

    #[test]
    fn only_functions_that_touch_no_python_object_are_sites() {
        let (sites, refused) = analyse(MODULE);
        assert_eq!(sites, ["copy", "lambda"], "sites");
        let reason = |f: &str| refused.iter().find(|(n, _)| n == f).map(|(_, r)| r.clone()).unwrap_or_default();
        assert!(reason("appends").contains("`out` (py::list)"), "{}", reason("appends"));
        assert!(reason("copy_logged").contains("calls `log_py`"), "{}", reason("copy_logged"));
        assert!(
            reason("via_capi").contains("PyObject") || reason("via_capi").contains("C API"),
            "{}",
            reason("via_capi")
        );
        assert!(reason("uses_global").contains("`cache`"), "{}", reason("uses_global"));
        assert!(reason("calls_back").contains("`cb`"), "{}", reason("calls_back"));
        assert!(reason("returns_list").contains("returns `py::list`"), "{}", reason("returns_list"));
        assert!(reason("other::elsewhere").contains("not defined in this file"));
        assert!(reason("lambda").contains("py::dict"), "{}", reason("lambda"));
        // already released (body or call_guard) and empty functions are neither sites nor refusals
        for f in ["done", "guarded", "empty"] {
            assert!(!sites.contains(&f.to_string()) && reason(f).is_empty(), "{f}");
        }
    }

    #[test]
    fn python_types() {
        for t in ["py::object", "const py::array_t<float>&", "pybind11::list", "PyObject*", "std::function<void()>"] {
            assert!(python_type(t), "{t}");
        }
        for t in ["py::ssize_t", "int", "torch::Tensor", "const View&", "std::vector<int>"] {
            assert!(!python_type(t), "{t}");
        }
    }

    #[test]
    fn methods_and_overloads_are_refused() {
        let src = "struct P { void go() {} };\nvoid f(int) {}\nvoid f(long) {}\nPYBIND11_MODULE(kv, m) {\n  py::class_<P>(m, \"P\").def(\"go\", &P::go);\n  m.def(\"f\", &f);\n}\n";
        let (sites, refused) = analyse(src);
        assert!(sites.is_empty());
        assert!(refused.iter().any(|(_, r)| r.contains("method")), "{refused:?}");
        assert!(refused.iter().any(|(_, r)| r.contains("overloaded")), "{refused:?}");
    }
}
