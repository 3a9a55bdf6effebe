//! What history mining hands back, and what a catalog stores and reads
//! without mining: commits, their concrete edits, and rules. These need
//! no repository, so they are here, outside the `repositories` feature.

use std::collections::BTreeMap;

use kidiom_syntax::Lang;
use serde::{Deserialize, Serialize};

use crate::idiom::{Category, IdiomExample, Support};

/// A commit's identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitMeta {
    /// Full commit id.
    pub id: String,
    /// First line of the message.
    pub summary: String,
    /// Author date, RFC 3339 (UTC).
    pub date: String,
    /// Author time, seconds since the epoch.
    pub time: i64,
    /// Words of the message that hint at intent (`perf`, `speed`,
    /// `precision`, `overflow`, `fuse`, `redundant`).
    pub tags: Vec<String>,
}

/// A file of a commit that was not mined, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSkip {
    /// Path in the commit (`*` for the whole commit).
    pub path: String,
    /// A short reason: `added`, `deleted`, `renamed`, `binary`,
    /// `too-large`, `huge-diff`, `comments-only`, `parse-failed`,
    /// `unsupported-language`, `enormous-commit`, `missing-object`, ...
    pub reason: String,
}

/// What one commit yielded: the unit of the history cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitEdits {
    /// The commit.
    pub commit: CommitMeta,
    /// Its concrete edits.
    pub edits: Vec<ConcreteEdit>,
    /// Files not mined.
    pub skipped: Vec<FileSkip>,
    /// Changes cut but dropped, by reason.
    pub dropped: BTreeMap<EditDrop, u64>,
    /// Files whose trees were diffed.
    pub files: u64,
}

/// One concrete edit: a before subtree and the after subtree it became.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConcreteEdit {
    /// Path of the file in the commit.
    pub path: String,
    /// Its language.
    pub lang: Lang,
    /// 1-based line of the edit in the before version.
    pub line: u32,
    /// Byte offset of the before subtree in the before version.
    #[serde(default)]
    pub start: u32,
    /// The before subtree's text.
    pub before: String,
    /// The after subtree's text.
    pub after: String,
    /// The before subtree, flattened (kind, children, start, end per node).
    pub before_tree: Vec<u32>,
    /// The after subtree, flattened.
    pub after_tree: Vec<u32>,
    /// Blob id of the file before the commit.
    pub before_blob: String,
    /// Blob id of the file after the commit.
    pub after_blob: String,
    /// The enclosing statement, before and after: the larger anchor a rule
    /// is lifted to when the edit's own anchor gives an unsafe rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<EditContext>,
}

/// The enclosing statement of a [`ConcreteEdit`] (Getafix's next level of
/// context).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditContext {
    /// Byte offset of the statement in the before version.
    pub start: u32,
    /// Its text before.
    pub before: String,
    /// Its text after.
    pub after: String,
    /// Flattened before subtree.
    pub before_tree: Vec<u32>,
    /// Flattened after subtree.
    pub after_tree: Vec<u32>,
}

/// Why changes in a file yielded no (or fewer) edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EditDrop {
    /// The changed subtree holds a parse error.
    ParseError,
    /// The changed subtree is larger than the edit limit.
    TooLarge,
    /// No anchoring construct above the change.
    NoAnchor,
    /// The change lies outside every kernel and kernel launch.
    OutsideKernel,
}

/// How a rule fared when replayed on its training files.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Safety {
    /// Sites where the rule makes the edit the commit made.
    pub true_edits: u64,
    /// Sites where the rule would edit but the commit did not.
    pub false_edits: u64,
    /// Edits of the same shape in the training files that the rule does not cover.
    pub missed_edits: u64,
    /// The rule was specialized (a hole fixed to a value) to become safe.
    pub specialized: bool,
    /// Training examples re-matched and reproduced exactly (all of them).
    pub validated: u64,
}

/// A mined edit rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    /// Stable readable id.
    pub id: String,
    /// Language.
    pub lang: Lang,
    /// Category, from the change's words and, failing those, the commit messages.
    pub category: Category,
    /// One line.
    pub title: String,
    /// Why it is believed: commits, safety, messages.
    pub rationale: String,
    /// Before template (ast-grep syntax).
    pub before: String,
    /// After template (ast-grep syntax).
    pub after: String,
    /// Support per corpus: occurrences = concrete edits, files = distinct
    /// paths, opportunities = sites at the corpus's revision matching `before`.
    pub support: Vec<Support>,
    /// Values bound to holes in the training examples, most frequent first.
    pub values: Vec<(String, u64)>,
    /// Example edits.
    pub examples: Vec<IdiomExample>,
    /// The commits it was mined from, oldest first.
    pub commits: Vec<CommitMeta>,
    /// Recurrence times safety, plus a little for telling commit messages.
    pub score: f64,
    /// Replay results.
    pub safety: Safety,
}
