//! The kidiom pattern model and its SQLite catalog.
//!
//! # Brief overview
//!
//! A [`Pattern`] is one mined idiom (SPEC §4): a stable id, its kind, language
//! and category, `before`/`after` structural patterns, support per corpus,
//! a value histogram, examples, commits, a score and a `mechanism` text (what
//! it does, from the [`glossary`]). Usage idioms from the miner convert with
//! `Pattern::from(idiom)`; the rewrite engine compiles a pattern through
//! `kidiom_rewriter::RewriteSpec::from(&pattern)`.
//!
//! A [`Catalog`] is one SQLite file holding the patterns (with a ranked
//! FTS5 search index, [`Catalog::search_hits`]), the corpora mined and a per-file mining cache. All writes of a
//! run go through one [`MineTx`]: dropped without [`MineTx::commit`], it
//! leaves the catalog as it was. The schema is versioned and documented in
//! the crate README; it is an API boundary.
//!
//! A [`Candidate`] is one proposed rewrite of a file; what it came from and
//! what the validator concluded are the typed [`record`] (`Provenance`,
//! `Evidence`), stored as JSON and decoded once, in that module.
//!
//! ```
//! use kidiom_patterns::{Catalog, Category, Filter, Kind, Lang, Pattern};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let mut cat = Catalog::open(&dir.path().join(".kidiom/catalog.sqlite")).unwrap();
//! let p = Pattern {
//!     id: "py-keyword-tl-dot-input-precision".into(),
//!     kind: Kind::Usage,
//!     language: Lang::Python,
//!     category: Category::Precision,
//!     title: "tl.dot with an explicit input_precision".into(),
//!     rationale: "TF32 products lose precision on FP32 inputs".into(),
//!     mechanism: "Chooses TF32 or full fp32 products on the tensor cores".into(),
//!     before: "tl.dot($A, $B)".into(),
//!     after: "tl.dot($A, $B, input_precision=$P)".into(),
//!     support: vec![],
//!     values: vec![],
//!     examples: vec![],
//!     commits: vec![],
//!     score: 1.0,
//! };
//! let tx = cat.begin().unwrap();
//! tx.replace_patterns(Kind::Usage, &[p.clone()]).unwrap();
//! tx.commit().unwrap();
//!
//! assert_eq!(cat.list(&Filter::default()).unwrap(), vec![p.clone()]);
//! assert_eq!(cat.search("tl.dot(", &Filter::default()).unwrap()[0].id, p.id);
//! ```
#![deny(missing_docs)]

pub mod builtin;
mod error;
pub mod export;
pub mod glossary;
mod mined;
mod model;
pub mod record;
mod same;
mod store;

pub use error::{Error, Result};
pub use model::{Category, CommitRef, IdiomExample, Kind, Lang, Pattern, Support, ValueCount};
pub use store::{
    CachedFile, Candidate, CandidateStatus, Catalog, CatalogFile, CatalogStats, CorpusRow, DEFAULT_BUSY_TIMEOUT,
    EXCHANGE_FORMAT, EXCHANGE_VERSION, ExportedCorpus, FileOutcome, Filter, HOST_BASELINE_KEEP, HistoryState,
    HostBaseline, ImportReport, MineTx, SCHEMA_VERSION, SearchHit, StoredFacts, TermMatch, Via, Why, merge, short_id,
};
