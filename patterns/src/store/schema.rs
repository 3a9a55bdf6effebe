//! The catalog schema and its migrations.
//!
//! The schema is an API boundary: other tools may read the catalog with
//! plain SQL. Version `n` of the schema is the result of applying the first
//! `n` entries of [`MIGRATIONS`] in order; `PRAGMA user_version` records how
//! many have been applied and `PRAGMA application_id` marks the file as a
//! kidiom catalog. A migration is only ever appended, never edited.
//!
//! Version 1:
//!
//! | table | key | columns |
//! |---|---|---|
//! | `corpora` | `name` | `kind` (git/dir/pypi), `source`, `revision`, `mined_at` (RFC 3339, UTC) |
//! | `files` | `(corpus, path)` | `lang`, `blob`, `stat_size`, `stat_mtime_ns` (both NULL when unknown), `fingerprint`, `outcome` (`parsed`/`no-kernels`/`skipped`), `skip_reason` (a [`kidiom_syntax::Skip`] name), `skip` (the `Skip` as JSON), `facts` (the [`kidiom_miner::FileFacts`] as JSON, when parsed) |
//! | `patterns` | `id` | `kind`, `language`, `category`, `title`, `rationale`, `before`, `after`, `score` |
//! | `support` | `(pattern_id, ord)` | `corpus`, `revision`, `occurrences`, `files`, `opportunities` |
//! | `pattern_values` | `(pattern_id, ord)` | `value`, `count` (most frequent first, by `ord`) |
//! | `examples` | `(pattern_id, ord)` | `corpus`, `path`, `line`, `snippet` |
//! | `commits` | `(pattern_id, ord)` | `commit_id`, `summary`, `date` |
//! | `patterns_fts` | rowid = `patterns.rowid` | FTS5 over `id`, `title`, `rationale`, `before`, `after`, `snippets` (the examples' snippets, one per line), `hole_values` (the histogram's values, one per line) |
//!
//! Version 2 adds `candidates`, version 3 the history-mining cache
//! (`history`, `history_commits`); see the crate README.
//!
//! Version 4 is the ranked search: `patterns.mechanism` (what the idiom
//! does, in words; see [`crate::glossary`]), and `patterns_search`, an FTS5
//! table (tokenizer `porter unicode61 remove_diacritics 2`: words are
//! stemmed) replacing `patterns_fts`, rowid = `patterns.rowid`, columns
//! `title`, `mechanism`, `identifiers` (the id and the names in `before`
//! and `after`), `hole_values`, `commit_messages`, `examples` (snippets),
//! `rationale`. Migrating to it fills the mechanism of every pattern that
//! has none and rebuilds the index ([`super::search::rebuild`]).
//!
//! Version 5 adds to `pattern_values` what a value that is a name resolves
//! to: `resolved` (the expression shown, `"ieee" if IS_NPU else "tf32x3"`;
//! NULL when unresolved) and `literals` (a JSON array of the literals it can
//! hold, every branch in definition order; `[]` when none). Rows of older
//! catalogs keep their values and count, unresolved.
//!
//! Version 6 adds the categories `api` (plain API usage) and `refactor`
//! (renames and API refactors from history), and an index on
//! `patterns.category`.
//!
//! Version 7 adds `pattern_merges`: patterns that are one rewrite (a usage
//! idiom and the history edits that make its change, rules equal up to the
//! names of their holes) are stored as one, the kept pattern with the
//! others' support added; this table holds every member as mined (`id`,
//! `into_id` the kept pattern's id, `kind`, `pattern` its JSON), so a
//! merged-away id still names its pattern and mining again starts from the
//! originals.
//!
//! Version 8 adds `host_baselines`: the host speed gate's baseline history,
//! `key` (the harness's bench key: baseline build, service parameters, bench
//! shape, machine), `kernel`, `machine` (JSON: host, cpu, cpus, python),
//! `requests_per_s` (a JSON array, oldest first, at most 20) and
//! `updated_at` (RFC 3339, UTC).
//!
//! Child tables reference `patterns(id)` with `ON DELETE CASCADE`. Enum
//! columns hold the lowercase names printed by `name()` (`usage`, `python`,
//! `precision`).

/// Marks a SQLite file as a kidiom catalog (`PRAGMA application_id`): "kidm".
pub(crate) const APPLICATION_ID: i64 = 0x6b69_646d;

/// The migration steps; the schema version is the number applied.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: corpora, the per-file mining cache, patterns and their search index.
    r#"
CREATE TABLE corpora (
    name      TEXT PRIMARY KEY NOT NULL,
    kind      TEXT NOT NULL,
    source    TEXT NOT NULL,
    revision  TEXT NOT NULL,
    mined_at  TEXT NOT NULL
);
CREATE TABLE files (
    corpus        TEXT NOT NULL,
    path          TEXT NOT NULL,
    lang          TEXT NOT NULL,
    blob          TEXT NOT NULL,
    stat_size     INTEGER,
    stat_mtime_ns INTEGER,
    fingerprint   TEXT NOT NULL,
    outcome       TEXT NOT NULL CHECK (outcome IN ('parsed', 'no-kernels', 'skipped')),
    skip_reason   TEXT,
    skip          TEXT,
    facts         TEXT,
    PRIMARY KEY (corpus, path)
);
CREATE TABLE patterns (
    id         TEXT PRIMARY KEY NOT NULL,
    kind       TEXT NOT NULL,
    language   TEXT NOT NULL,
    category   TEXT NOT NULL,
    title      TEXT NOT NULL,
    rationale  TEXT NOT NULL,
    before     TEXT NOT NULL,
    after      TEXT NOT NULL,
    score      REAL NOT NULL
);
CREATE INDEX patterns_kind ON patterns (kind);
CREATE TABLE support (
    pattern_id    TEXT NOT NULL REFERENCES patterns (id) ON DELETE CASCADE,
    ord           INTEGER NOT NULL,
    corpus        TEXT NOT NULL,
    revision      TEXT NOT NULL,
    occurrences   INTEGER NOT NULL,
    files         INTEGER NOT NULL,
    opportunities INTEGER NOT NULL,
    PRIMARY KEY (pattern_id, ord)
);
CREATE INDEX support_corpus ON support (corpus);
CREATE TABLE pattern_values (
    pattern_id TEXT NOT NULL REFERENCES patterns (id) ON DELETE CASCADE,
    ord        INTEGER NOT NULL,
    value      TEXT NOT NULL,
    count      INTEGER NOT NULL,
    PRIMARY KEY (pattern_id, ord)
);
CREATE TABLE examples (
    pattern_id TEXT NOT NULL REFERENCES patterns (id) ON DELETE CASCADE,
    ord        INTEGER NOT NULL,
    corpus     TEXT NOT NULL,
    path       TEXT NOT NULL,
    line       INTEGER NOT NULL,
    snippet    TEXT NOT NULL,
    PRIMARY KEY (pattern_id, ord)
);
CREATE TABLE commits (
    pattern_id TEXT NOT NULL REFERENCES patterns (id) ON DELETE CASCADE,
    ord        INTEGER NOT NULL,
    commit_id  TEXT NOT NULL,
    summary    TEXT NOT NULL,
    date       TEXT NOT NULL,
    PRIMARY KEY (pattern_id, ord)
);
CREATE VIRTUAL TABLE patterns_fts USING fts5 (id, title, rationale, before, after, snippets, hole_values);
"#,
    // 2: rewrite candidates (`kidiom apply`), their diffs and review status.
    r#"
CREATE TABLE candidates (
    id          TEXT PRIMARY KEY NOT NULL,
    pattern_id  TEXT NOT NULL,
    path        TEXT NOT NULL,
    base_blob   TEXT NOT NULL,
    result_blob TEXT NOT NULL,
    value       TEXT,
    sites       INTEGER NOT NULL,
    diff        TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('proposed', 'applied', 'accepted', 'rejected', 'stale', 'validated')),
    provenance  TEXT NOT NULL,
    evidence    TEXT NOT NULL DEFAULT '{}',
    commit_id   TEXT,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE INDEX candidates_path ON candidates (path);
CREATE INDEX candidates_pattern ON candidates (pattern_id);
"#,
    // 3: the history-mining cache: per corpus the extraction fingerprint
    // and newest commit mined, and per mined commit its concrete edits.
    r#"
CREATE TABLE history (
    corpus       TEXT PRIMARY KEY NOT NULL,
    fingerprint  TEXT NOT NULL,
    last_commit  TEXT NOT NULL,
    mined_at     TEXT NOT NULL
);
CREATE TABLE history_commits (
    corpus     TEXT NOT NULL,
    commit_id  TEXT NOT NULL,
    time       INTEGER NOT NULL,
    edits      INTEGER NOT NULL,
    data       TEXT NOT NULL,
    PRIMARY KEY (corpus, commit_id)
);
"#,
    // 4: ranked search: each pattern's mechanism in words, and a stemmed
    // index with one column per field (weighted at query time). The
    // index's rows are written by `catalog::search::rebuild` after the step.
    r#"
ALTER TABLE patterns ADD COLUMN mechanism TEXT NOT NULL DEFAULT '';
DROP TABLE patterns_fts;
CREATE VIRTUAL TABLE patterns_search USING fts5 (
    title, mechanism, identifiers, hole_values, commit_messages, examples, rationale,
    tokenize = 'porter unicode61 remove_diacritics 2'
);
"#,
    // 5: what a histogram value that is a name resolves to: the expression
    // shown, and the literals it can hold (a JSON array of strings).
    r#"
ALTER TABLE pattern_values ADD COLUMN resolved TEXT;
ALTER TABLE pattern_values ADD COLUMN literals TEXT NOT NULL DEFAULT '[]';
"#,
    // 6: two new values of `patterns.category`, `api` and `refactor` (listings hide
    // refactors by default and rank both below optimizations), with an index for that
    // filter; an older kidiom, which would read the new categories as corrupt rows,
    // refuses the catalog instead.
    r#"
CREATE INDEX patterns_category ON patterns (category);
"#,
    // 7: patterns that are one rewrite, merged: each member as mined (JSON of a
    // `Pattern`), the kept one's id in `into_id` (its own for the kept one).
    r#"
CREATE TABLE pattern_merges (
    id       TEXT PRIMARY KEY NOT NULL,
    into_id  TEXT NOT NULL,
    kind     TEXT NOT NULL,
    pattern  TEXT NOT NULL
);
CREATE INDEX pattern_merges_into ON pattern_merges (into_id);
"#,
    // 8: the host speed gate's baseline history, per bench key (hostbench.rs).
    r#"
CREATE TABLE host_baselines (
    key             TEXT PRIMARY KEY NOT NULL,
    kernel          TEXT NOT NULL,
    machine         TEXT NOT NULL,
    requests_per_s  TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);
"#,
];

/// The version whose step created the current search index: migrating a
/// catalog from below it rebuilds the index's rows.
pub(crate) const SEARCH_INDEX_VERSION: i64 = 4;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;
