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
//!
//! Git and PyPI corpora and history mining ([`history`]) read repositories
//! and archives (git2, tar, zip, flate2): the default `repositories`
//! feature. Without it, the records, directory corpora and extraction stay,
//! so that the catalog and the validator build without those crates.
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
mod rewritable;
mod rust;
mod shapes;
mod values;

pub use aliases::{CallAlias, resolve_call_aliases};
#[cfg(feature = "repositories")]
pub use corpus::mirror_path;
pub use corpus::{Corpus, CorpusFile, Listing, Manifest, SourceKind, StatKey, cache_dir};
pub use error::{Error, Result};
pub use facts::{Example, FamilyFacts, FamilyKey, FileFacts, Mechanism, call_scope};
pub use idiom::{Category, FileInput, Idiom, IdiomExample, MineConfig, Support, aggregate, slug};
use kidiom_syntax::{DeviceMacros, KNOWN_DEVICE_MACROS, Lang, Limits, Skip, blob_id, merge_device_macro, parse_tree};
pub use parse::dump_tree;
pub use prefilter::Prefilter;
pub use values::{ResolvedValue, ValueExpr, canonical_literals, is_literal};

/// Version of the fact extractors: cached facts from another version are
/// recomputed. Bump it whenever extraction changes what it records.
pub const FACTS_VERSION: u32 = 6;

/// The cache key for a file's facts: extractor version, limits, and for
/// C/C++ the device macros (they decide which functions are kernels).
pub fn facts_fingerprint(lang: Lang, limits: &Limits, macros: &DeviceMacros) -> String {
    let mut key = format!("v{FACTS_VERSION};{};{}", limits.max_bytes, limits.max_depth);
    if matches!(lang, Lang::Cuda | Lang::Cpp) {
        for (k, v) in macros {
            key.push_str(&format!(";{k}={v}"));
        }
    }
    blob_id(key.as_bytes())
}

/// The device macros a corpus's C/C++ is parsed under: the known ones,
/// those recorded in facts reused from the cache, and those defined in the
/// fresh texts, merged in that order.
pub fn corpus_device_macros<'a>(
    reused: impl IntoIterator<Item = &'a FileFacts>,
    fresh: impl IntoIterator<Item = (Lang, &'a str)>,
) -> DeviceMacros {
    let mut macros: DeviceMacros = KNOWN_DEVICE_MACROS.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    for facts in reused {
        for (name, body) in &facts.device_macros {
            merge_device_macro(&mut macros, name.clone(), body.clone());
        }
    }
    for (lang, text) in fresh {
        if matches!(lang, Lang::Cuda | Lang::Cpp) {
            for (name, body) in kidiom_syntax::scan_device_macros(text) {
                merge_device_macro(&mut macros, name, body);
            }
        }
    }
    macros
}

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
