//! Corpora and usage-idiom extraction for kidiom; parsing and kernel
//! finding are `kidiom_syntax`'s.
//!
//! # Brief overview
//!
//! A [`Manifest`] names a corpus (a git repository at a revision, a
//! directory, or a PyPI source distribution); [`Corpus::open`] lists its
//! files. [`extract`] parses one file and returns its [`FileFacts`]: how
//! often each decoration appears on each construct inside kernels, and how
//! often the construct appears at all. [`aggregate`] folds the facts of many
//! files into [`Idiom`]s — decorations that recur and whose undecorated form
//! also exists.
//!
//! ```
//! use kidiom_miner::{MineConfig, aggregate, extract, FileInput};
//! use kidiom_syntax::Lang;
//!
//! let src = "import triton\nimport triton.language as tl\n\
//! @triton.jit\ndef k(x, BT: tl.constexpr):\n    i = tl.program_id(0).to(tl.int64)\n    j = tl.program_id(1)\n";
//! let facts = extract(Lang::Python, src, &Default::default()).unwrap();
//! assert_eq!(facts.kernels, 1);
//! let files = [FileInput { corpus: "demo", revision: "", path: "k.py", lang: Lang::Python, facts: &facts }];
//! let cfg = MineConfig { min_occurrences: 1, min_files: 1, ..Default::default() };
//! let idioms = aggregate(files, &cfg);
//! assert!(idioms.iter().any(|i| i.id == "py-method-wrap-tl-program-id-to"));
//! ```
#![warn(missing_docs)]

mod aliases;
pub mod classify;
mod corpus;
mod cxx;
mod error;
mod facts;
pub mod history;
mod idiom;
mod parse;
mod prefilter;
mod python;
mod rust;
mod values;

pub use aliases::{CallAlias, resolve_call_aliases};
pub use corpus::{Corpus, CorpusFile, Listing, Manifest, SourceKind, StatKey, cache_dir, mirror_path};
pub use error::{Error, Result};
pub use facts::{Example, FamilyFacts, FamilyKey, FileFacts, Mechanism, call_scope};
pub use idiom::{Category, FileInput, Idiom, IdiomExample, MineConfig, Support, aggregate, slug};
pub use parse::dump_tree;
pub use prefilter::Prefilter;
pub use values::{ResolvedValue, ValueExpr, canonical_literals, is_literal};
// The syntax layer under the miner, re-exported for the binary only
// (src/ops/mine.rs and src/ops/history.rs are being rewritten; they and the
// rest of src/ switch to `kidiom_syntax` directly afterwards). Library
// crates import these from `kidiom_syntax`.
#[doc(no_inline)]
pub use kidiom_syntax::{
    DeviceMacros, KNOWN_DEVICE_MACROS, KernelKind, KernelRange, Lang, Limits, Skip, blob_id, decode, kernel_ranges,
    merge_device_macro, named_enum, parse_tree, preorder, reparse, scan_device_macros, tree_files,
};

/// Version of the fact extractors: cached facts from another version are
/// recomputed. Bump it whenever extraction changes what it records.
pub const FACTS_VERSION: u32 = 6;

/// Options for extracting one file.
#[derive(Debug, Clone, Default)]
pub struct ExtractOptions {
    /// Macros known to expand to device qualifiers (C/C++).
    pub device_macros: DeviceMacros,
}

/// Parses one file and extracts its usage facts. Trees with error nodes are
/// still mined; each site records whether it lies under an error node.
pub fn extract(lang: Lang, text: &str, opts: &ExtractOptions) -> std::result::Result<FileFacts, Skip> {
    let facts = match lang {
        Lang::Python => {
            let tree = parse_tree(lang, text)?.ok_or(Skip::ParseFailed)?;
            python::extract(text, &tree)
        }
        Lang::Cuda | Lang::Cpp => {
            let tree = parse_tree(lang, text)?.ok_or(Skip::ParseFailed)?;
            cxx::extract(lang, text, &tree, &opts.device_macros)
        }
        Lang::Rust => rust::extract(text)?,
    };
    Ok(facts.finish())
}
