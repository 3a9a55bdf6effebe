//! History mining: edit idioms from a git corpus's commits.
//!
//! # Brief overview
//!
//! [`commits`] lists a git corpus's first-parent history (a merge is
//! diffed against its first parent). [`mine_commits`] cuts every commit's
//! [`ConcreteEdit`]s, in parallel: for each modified file of a supported
//! language both versions are parsed (each distinct version once per run,
//! through a [`BlobCache`]), their trees diffed, and the smallest changed
//! subtrees inside kernels and kernel launches kept with their anchoring
//! context ([`CommitEdits`] are what a caller caches). Test and benchmark
//! files and host-only changes are not mined. [`generalize`] turns the concrete edits of one or
//! more corpora into [`Rule`]s: bucketed by shape, clustered by
//! anti-unification, validated on every example, replayed for safety on the
//! training files, checked by the matcher that applies rules, counted for
//! opportunities at each corpus's revision, categorized and scored.
//!
//! Bad input is data: deleted, added and renamed files, binary blobs,
//! enormous commits and diffs, unparsable revisions are skipped with a
//! reason ([`FileSkip`]) and mining carries on.
//!
//! The modules, in the order data flows through them: `commits` (the
//! first-parent chain), `mine` (per commit and file pair), `blobs` (file
//! versions parsed once), `scope` (kernels, launches, tests), `treediff`
//! and `edit` (concrete edits), `antiunify` (templates), `generalizer` (the
//! run's edits to safe candidates), `safety` and `replay` (candidates
//! matched against training files and revisions), `check` (rules proven
//! on their examples by the rewrite engine that applies them,
//! `kidiom_rewriter`), `rules` and `naming`
//! (what a rule says about itself). `tree` and `pattern` are the trees and
//! templates they share; the grammar facts are [`kidiom_syntax::grammar`]'s.
//! `records` holds what mining hands back and a catalog stores (commits,
//! concrete edits, rules); only it is built without the `repositories`
//! feature, as mining reads a repository's objects through git2.

mod records;

pub use records::{CommitEdits, CommitMeta, ConcreteEdit, EditContext, EditDrop, FileSkip, Rule, Safety};

// Mining reads commits and file versions from git repositories (git2): the
// `repositories` feature. Without it, the records above are all there is.
macro_rules! with_repositories {
    ($($item:item)*) => { $(#[cfg(feature = "repositories")] $item)* };
}

with_repositories! {
    mod alpha;
    mod antiunify;
    mod blobs;
    mod check;
    mod commits;
    mod edit;
    mod generalizer;
    mod mine;
    mod naming;
    mod pattern;
    mod replay;
    mod rules;
    mod safety;
    mod scope;
    mod tree;
    mod treediff;

    pub use blobs::{BlobCache, BlobCounts};
    pub use check::{CheckFailure, MAX_CHECKED_EXAMPLES, tokens_in};
    pub use commits::commits;
    pub use generalizer::{CorpusHistory, GeneralizeStats, HistoryResult, generalize, generalize_unchecked};
    pub use mine::mine_commits;
}

use kidiom_syntax::{Lang, Limits, grammar};

/// Version of the concrete-edit extraction: cached edits of another
/// version (or another grammar) are mined again.
pub const HISTORY_VERSION: u32 = 5;

/// The cache fingerprint: [`HISTORY_VERSION`], the grammars and the limits
/// that decide which edits are cut.
pub fn history_fingerprint(cfg: &HistoryConfig) -> String {
    let kinds: Vec<String> =
        [Lang::Python, Lang::Cuda, Lang::Cpp].iter().map(|l| grammar::kind_count(*l).to_string()).collect();
    format!(
        "v{HISTORY_VERSION};kinds={};edit={};lines={};files={};bytes={}",
        kinds.join(","),
        cfg.max_edit_nodes,
        cfg.max_changed_lines,
        cfg.max_files_per_commit,
        cfg.limits.max_bytes
    )
}

/// Options for history mining.
#[derive(Debug, Clone)]
pub struct HistoryConfig {
    /// Mine at most this many commits (the newest).
    pub max_commits: Option<usize>,
    /// Only commits authored at or after this time (seconds since the epoch).
    pub since: Option<i64>,
    /// Commits that modify more files of supported languages are skipped.
    pub max_files_per_commit: usize,
    /// Files with more changed lines than this in one commit are skipped.
    pub max_changed_lines: usize,
    /// Edits with more nodes than this on either side are dropped.
    pub max_edit_nodes: u32,
    /// Distinct commits a rule needs.
    pub min_commits: usize,
    /// Rules that stay unsafe after specialization are kept only at this
    /// precision (edits made / all edits on the training files) or above.
    pub min_precision: f64,
    /// Holes a rule may have.
    pub max_holes: usize,
    /// File size and nesting limits.
    pub limits: Limits,
    /// Benchmark floor: read and parse the file versions a run parses
    /// (each once, as the run does), diff and cut nothing.
    pub parse_only: bool,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            max_commits: None,
            since: None,
            max_files_per_commit: 400,
            max_changed_lines: 4_000,
            max_edit_nodes: 160,
            min_commits: 2,
            min_precision: 0.5,
            max_holes: 8,
            limits: Limits::default(),
            parse_only: false,
        }
    }
}
