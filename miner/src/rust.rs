//! Usage facts from Rust files: PyO3 functions and the methods they call on
//! their `Python` token (`py.allow_threads(...)` releases the GIL).

use kidiom_syntax::{Lang, Skip};
use syn::visit::Visit;

use crate::facts::{FactsBuilder, FamilyKey, Lines, Mechanism};

/// Scope: `#[pyfunction]` functions and `#[pymethods]` methods.
pub const PYO3_FN: &str = "pyo3-fn";

fn has_attr(attrs: &[syn::Attribute], names: &[&str]) -> bool {
    attrs.iter().any(|a| a.path().segments.last().is_some_and(|s| names.iter().any(|n| s.ident == n)))
}

/// Names of parameters typed `Python<'_>`.
fn python_params(sig: &syn::Signature) -> Vec<String> {
    sig.inputs
        .iter()
        .filter_map(|arg| match arg {
            syn::FnArg::Typed(pt) => {
                let is_py = match &*pt.ty {
                    syn::Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == "Python"),
                    _ => false,
                };
                match (&*pt.pat, is_py) {
                    (syn::Pat::Ident(id), true) => Some(id.ident.to_string()),
                    _ => None,
                }
            }
            _ => None,
        })
        .collect()
}

struct Visitor<'a> {
    lines: Lines<'a>,
    out: FactsBuilder,
    in_pymethods: bool,
}

impl Visitor<'_> {
    fn pyo3_fn(&mut self, sig: &syn::Signature, block: &syn::Block) {
        self.out.kernels += 1;
        self.out.scope(PYO3_FN, 1);
        let py = python_params(sig);
        let mut calls = Calls { py: &py, found: Vec::new() };
        calls.visit_block(block);
        let mut seen = std::collections::HashSet::new();
        for (method, row) in calls.found {
            let new = seen.insert(method.clone());
            let ex = self.lines.example(row);
            let k = FamilyKey {
                lang: Lang::Rust,
                mechanism: Mechanism::Pyo3Call,
                subject: PYO3_FN.into(),
                decoration: method,
            };
            self.out.site(k, None, false, new, || ex);
        }
    }
}

struct Calls<'p> {
    py: &'p [String],
    found: Vec<(String, usize)>,
}

impl<'ast> Visit<'ast> for Calls<'_> {
    fn visit_expr_method_call(&mut self, m: &'ast syn::ExprMethodCall) {
        if let syn::Expr::Path(p) = &*m.receiver
            && p.path.segments.len() == 1
            && self.py.iter().any(|n| p.path.segments[0].ident == n)
        {
            let row = m.method.span().start().line.saturating_sub(1);
            self.found.push((m.method.to_string(), row));
        }
        syn::visit::visit_expr_method_call(self, m);
    }
}

impl<'ast> Visit<'ast> for Visitor<'_> {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if has_attr(&f.attrs, &["pyfunction"]) {
            self.pyo3_fn(&f.sig, &f.block);
        }
        syn::visit::visit_item_fn(self, f);
    }
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        let prev = self.in_pymethods;
        self.in_pymethods = has_attr(&i.attrs, &["pymethods"]);
        syn::visit::visit_item_impl(self, i);
        self.in_pymethods = prev;
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if self.in_pymethods {
            self.pyo3_fn(&f.sig, &f.block);
        }
        syn::visit::visit_impl_item_fn(self, f);
    }
}

/// Maximum bracket depth handed to syn, whose parser recurses.
const SYN_MAX_DEPTH: usize = 128;

pub(crate) fn extract(src: &str) -> Result<FactsBuilder, Skip> {
    // syn is a recursive-descent parser; deep nesting would overflow the stack.
    let limits = kidiom_syntax::Limits { max_bytes: u64::MAX, max_depth: SYN_MAX_DEPTH };
    kidiom_syntax::decode(src.as_bytes(), &limits)?;
    let file = syn::parse_file(src).map_err(|_| Skip::ParseFailed)?;
    let mut v = Visitor { lines: Lines::new(src), out: FactsBuilder::default(), in_pymethods: false };
    v.visit_file(&file);
    Ok(v.out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pyo3_functions_and_gil_release() {
        let src = r#"
use pyo3::prelude::*;
#[pyfunction]
fn transfer(py: Python<'_>, n: usize) -> usize { py.allow_threads(|| n * 2) }
#[pyfunction]
fn blocking(n: usize) -> usize { n }
struct S;
#[pymethods]
impl S { fn get(&self, py: Python<'_>) -> usize { py.allow_threads(|| 1) } }
impl S { fn not_bound(&self, py: Python<'_>) -> usize { py.allow_threads(|| 1) } }
"#;
        let f = extract(src).expect("parses").finish();
        assert_eq!(f.kernels, 3);
        let (_, fam) = f.families.iter().find(|(k, _)| k.decoration == "allow_threads").expect("allow_threads");
        assert_eq!(fam.occurrences, 2);
        assert_eq!(f.scopes.get(PYO3_FN), Some(&3));
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let src = format!("fn f() {{ {}1{} }}", "(".repeat(5000), ")".repeat(5000));
        assert_eq!(extract(&src).err(), Some(Skip::TooDeep(SYN_MAX_DEPTH)));
    }
}
