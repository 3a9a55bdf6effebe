//! The kidiom rewrite engine: ast-grep-style templates, the structural
//! matcher, rewrites compiled from a `before`/`after` pair, and applying them
//! to texts: edits, conflicts, unified diffs and atomic writes.
//!
//! # Brief overview
//!
//! A [`RewriteSpec`] (id, language, `before`, `after`, the value histogram)
//! compiles into a [`Rewrite`] ([`Rewrite::new`]); the catalog converts its
//! patterns into specs in one place, and history mining builds specs from its
//! rules to prove them. [`matcher`] finds a template's sites in a parsed file
//! ([`Template`], [`find`]). [`rewrite`] applies one compiled rewrite to one
//! text until nothing changes, resolving overlapping sites deterministically
//! ([`resolve`]), and refuses results that parse worse than the input or
//! that would change again. [`unified`] renders the change as a diff
//! `git apply` accepts; [`atomic_write`] puts it on disk.
//!
//! ```
//! use kidiom_rewriter::{Rewrite, RewriteSpec};
//! use kidiom_syntax::Lang;
//!
//! let spec = RewriteSpec::usage(
//!     "py-keyword-tl-dot-input-precision",
//!     Lang::Python,
//!     "tl.dot($$$ARGS)",
//!     "tl.dot($$$ARGS, input_precision=$V)",
//!     &["\"ieee\""],
//! );
//! let src = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(a, b):\n    c = tl.dot(a, b)\n";
//! let rw = Rewrite::new(&spec, None).unwrap();
//! let out = kidiom_rewriter::rewrite(&rw, Lang::Python, src, "k.py").unwrap().unwrap();
//! assert!(out.text.ends_with("c = tl.dot(a, b, input_precision=\"ieee\")\n"));
//! // Idempotent: a second application finds nothing to do.
//! assert!(kidiom_rewriter::rewrite(&rw, Lang::Python, &out.text, "k.py").unwrap().is_none());
//! let diff = kidiom_rewriter::unified("k.py", src, &out.text, 3);
//! assert!(diff.contains("+    c = tl.dot(a, b, input_precision=\"ieee\")"));
//! ```
#![deny(missing_docs)]

mod casts;
mod conflict;
mod defaults;
mod diff;
mod edit;
mod error;
pub mod matcher;
mod names;
pub mod reuse;
mod reuse_triton;
mod spec;
mod state_cast;
#[cfg(test)]
mod testutil;
mod values;
mod write;

pub use casts::nil_casts;
pub use conflict::resolve;
pub use defaults::nil_arguments;
pub use diff::{patched, unified};
pub use edit::{Outcome, apply_edits, parse_errors, rewrite, rewrite_parsed, rewrite_sites, rewrite_with_tree, sites};
pub use error::{Error, Result};
pub use matcher::{Edit, MatchError, Rewrite, Scope, SiteEdits, Template, edited_tree, find, roles};
pub use names::unbound_names;
pub use reuse::{KEPT_MAX, ReuseForm};
pub use spec::{RewriteSpec, SpecValue};
pub use values::{Supported, respelled, supported_value, writable_value};
pub use write::{atomic_write, check_writable};
