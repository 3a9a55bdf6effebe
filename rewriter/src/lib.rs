//! Applying kidiom patterns to targets: edits, conflicts, unified diffs,
//! atomic writes and the review branch.
//!
//! # Brief overview
//!
//! [`rewrite`] applies one compiled [`Rewrite`] to one text until nothing
//! changes, resolving overlapping sites deterministically ([`resolve`]),
//! and refuses results that parse worse than the input or that would
//! change again. [`unified`] renders the change as a diff `git apply`
//! accepts; [`atomic_write`] puts it on disk; [`commit_review`] commits it
//! on the review branch without touching the user's checkout.
//!
//! ```
//! use kidiom_patterns::{Category, Kind, Lang, Pattern, ValueCount};
//! use kidiom_patterns::matcher::Rewrite;
//!
//! let p = Pattern {
//!     id: "py-keyword-tl-dot-input-precision".into(),
//!     kind: Kind::Usage,
//!     language: Lang::Python,
//!     category: Category::Precision,
//!     title: String::new(),
//!     rationale: String::new(),
//!     mechanism: String::new(),
//!     before: "tl.dot($$$ARGS)".into(),
//!     after: "tl.dot($$$ARGS, input_precision=$V)".into(),
//!     support: vec![],
//!     values: vec![ValueCount { value: "\"ieee\"".into(), count: 3, resolved: None, literals: vec![] }],
//!     examples: vec![],
//!     commits: vec![],
//!     score: 1.0,
//! };
//! let src = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(a, b):\n    c = tl.dot(a, b)\n";
//! let rw = Rewrite::new(&p, None).unwrap();
//! let out = kidiom_rewriter::rewrite(&rw, Lang::Python, src, "k.py").unwrap().unwrap();
//! assert!(out.text.ends_with("c = tl.dot(a, b, input_precision=\"ieee\")\n"));
//! // Idempotent: a second application finds nothing to do.
//! assert!(kidiom_rewriter::rewrite(&rw, Lang::Python, &out.text, "k.py").unwrap().is_none());
//! let diff = kidiom_rewriter::unified("k.py", src, &out.text, 3);
//! assert!(diff.contains("+    c = tl.dot(a, b, input_precision=\"ieee\")"));
//! ```
#![deny(missing_docs)]

mod branch;
mod conflict;
mod diff;
mod edit;
mod error;
mod names;
mod write;

pub use branch::{DEFAULT_BRANCH, ReviewCommit, commit_review, repo_root, uncommitted};
pub use conflict::resolve;
pub use diff::unified;
pub use edit::{Outcome, apply_edits, parse_errors, rewrite, rewrite_parsed, rewrite_sites, rewrite_with_tree, sites};
pub use error::{Error, Result};
pub use kidiom_patterns::matcher::Rewrite;
pub use names::unbound_names;
pub use write::{atomic_write, check_writable};
