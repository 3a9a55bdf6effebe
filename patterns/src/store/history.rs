//! The history-mining cache (schema step 3): per corpus, the fingerprint of
//! the edit extraction and the newest commit mined; per mined commit, its
//! [`CommitEdits`] as JSON. Each batch of mined commits is committed on its
//! own, so an interrupted run resumes where it stopped.

use std::collections::HashMap;

use kidiom_miner::history::CommitEdits;
use rusqlite::{OptionalExtension, params};

use super::{At, Catalog, MineTx};
use crate::error::{Error, Result};

/// What the cache knows of one corpus's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryState {
    /// The extraction fingerprint the cached commits were mined with.
    pub fingerprint: String,
    /// The newest commit of the last completed run.
    pub last_commit: String,
    /// When that run finished (RFC 3339, UTC).
    pub mined_at: String,
}

impl Catalog {
    /// The history state of `corpus`, if it was ever mined.
    pub fn history_state(&self, corpus: &str) -> Result<Option<HistoryState>> {
        self.conn
            .query_row("SELECT fingerprint, last_commit, mined_at FROM history WHERE corpus = ?1", [corpus], |r| {
                Ok(HistoryState { fingerprint: r.get(0)?, last_commit: r.get(1)?, mined_at: r.get(2)? })
            })
            .optional()
            .at(&self.path)
    }

    /// The cached commits of `corpus` by commit id. Rows that no longer
    /// decode are left out (they are mined again), and counted in the
    /// second value.
    pub fn history_commits(&self, corpus: &str) -> Result<(HashMap<String, CommitEdits>, usize)> {
        let mut st =
            self.conn.prepare("SELECT commit_id, data FROM history_commits WHERE corpus = ?1").at(&self.path)?;
        let rows: Vec<(String, String)> =
            st.query_map([corpus], |r| Ok((r.get(0)?, r.get(1)?))).and_then(|r| r.collect()).at(&self.path)?;
        let mut out = HashMap::with_capacity(rows.len());
        let mut bad = 0;
        for (id, data) in rows {
            match serde_json::from_str::<CommitEdits>(&data) {
                Ok(c) if c.commit.id == id => {
                    out.insert(id, c);
                }
                _ => bad += 1,
            }
        }
        Ok((out, bad))
    }
}

impl MineTx<'_> {
    /// Caches the edits of mined commits (replacing earlier rows).
    pub fn put_history_commits(&self, corpus: &str, commits: &[CommitEdits]) -> Result<()> {
        let mut st = self
            .tx
            .prepare_cached(
                "INSERT OR REPLACE INTO history_commits (corpus, commit_id, time, edits, data)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .at(self.path)?;
        for c in commits {
            let data = serde_json::to_string(c).map_err(|e| Error::Corrupt {
                path: self.path.to_path_buf(),
                table: "history_commits",
                row: format!("{corpus}:{}", c.commit.id),
                message: e.to_string(),
            })?;
            st.execute(params![corpus, c.commit.id, c.commit.time, c.edits.len() as i64, data]).at(self.path)?;
        }
        Ok(())
    }

    /// Records a completed run: the fingerprint and the newest commit mined.
    pub fn set_history_state(&self, corpus: &str, fingerprint: &str, last_commit: &str) -> Result<()> {
        self.tx
            .execute(
                "INSERT INTO history (corpus, fingerprint, last_commit, mined_at)
                 VALUES (?1, ?2, ?3, strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
                 ON CONFLICT (corpus) DO UPDATE SET fingerprint = excluded.fingerprint,
                     last_commit = excluded.last_commit, mined_at = excluded.mined_at",
                params![corpus, fingerprint, last_commit],
            )
            .at(self.path)?;
        Ok(())
    }

    /// Forgets a corpus's cached history (another fingerprint).
    pub fn clear_history(&self, corpus: &str) -> Result<()> {
        self.tx.execute("DELETE FROM history_commits WHERE corpus = ?1", [corpus]).at(self.path)?;
        self.tx.execute("DELETE FROM history WHERE corpus = ?1", [corpus]).at(self.path)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kidiom_miner::history::CommitMeta;

    fn commit(id: &str) -> CommitEdits {
        CommitEdits {
            commit: CommitMeta {
                id: id.into(),
                summary: "s".into(),
                date: "2025-01-01T00:00:00Z".into(),
                time: 1,
                tags: vec!["perf".into()],
            },
            edits: Vec::new(),
            skipped: Vec::new(),
            dropped: Default::default(),
            files: 2,
        }
    }

    #[test]
    fn history_cache_round_trips_and_survives_a_rollback() {
        let mut cat = Catalog::open_in_memory().unwrap();
        assert_eq!(cat.history_state("fla").unwrap(), None);
        let tx = cat.begin().unwrap();
        tx.put_history_commits("fla", &[commit("a"), commit("b")]).unwrap();
        tx.commit().unwrap();
        {
            let tx = cat.begin().unwrap();
            tx.put_history_commits("fla", &[commit("c")]).unwrap();
            tx.set_history_state("fla", "fp", "c").unwrap();
            // dropped: an interrupted run keeps the batches committed before
        }
        let (got, bad) = cat.history_commits("fla").unwrap();
        assert_eq!((got.len(), bad), (2, 0));
        assert_eq!(got["a"], commit("a"));
        assert_eq!(cat.history_state("fla").unwrap(), None);

        let tx = cat.begin().unwrap();
        tx.set_history_state("fla", "fp", "b").unwrap();
        tx.commit().unwrap();
        assert_eq!(cat.history_state("fla").unwrap().unwrap().last_commit, "b");
        cat.conn.execute("UPDATE history_commits SET data = '{' WHERE commit_id = 'a'", []).unwrap();
        let (got, bad) = cat.history_commits("fla").unwrap();
        assert_eq!((got.len(), bad), (1, 1));

        let tx = cat.begin().unwrap();
        tx.clear_history("fla").unwrap();
        tx.commit().unwrap();
        assert!(cat.history_commits("fla").unwrap().0.is_empty());
        assert_eq!(cat.history_state("fla").unwrap(), None);
    }
}
