//! Rewrite candidates: one per (pattern, target file), with the unified
//! diff, the git blob it applies to and its review status.

use rusqlite::params;
use serde::{Deserialize, Serialize};

use super::{At, Catalog};
use crate::error::Result;
use crate::record::{Provenance, StoredEvidence, VerdictKind, candidate_id};

/// Where a candidate stands in review.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[derive(strum::Display, strum::EnumString, strum::IntoStaticStr, strum::VariantArray)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum CandidateStatus {
    /// Proposed by a dry run; nothing written.
    Proposed,
    /// Written to the working tree by `apply --write`.
    Applied,
    /// Committed on the review branch by `accept` (stored and printed as
    /// `accepted`, the command's word).
    #[serde(rename = "accepted")]
    #[strum(serialize = "accepted")]
    Committed,
    /// Rejected by a reviewer or the validator.
    Rejected,
    /// Its target changed since it was proposed.
    Stale,
    /// Every validation gate passed (stored and printed as `validated`).
    #[serde(rename = "validated")]
    #[strum(serialize = "validated")]
    Passed,
}

kidiom_syntax::named_enum!(CandidateStatus);

impl CandidateStatus {
    /// The status a new verdict moves a candidate in this status to; `None`
    /// when it stays. The latest verdict decides, except for a candidate
    /// already committed (accepted) or stale; one judged earlier and now
    /// undecided (`needs-gpu`, `unverified`, `error`) is pending again.
    pub fn after(self, verdict: VerdictKind) -> Option<CandidateStatus> {
        use CandidateStatus::*;
        let next = match verdict {
            VerdictKind::Accepted => Passed,
            VerdictKind::Rejected => Rejected,
            VerdictKind::NeedsGpu | VerdictKind::Unverified | VerdictKind::Error
                if matches!(self, Passed | Rejected) =>
            {
                Proposed
            }
            VerdictKind::NeedsGpu | VerdictKind::Unverified | VerdictKind::Error => return None,
        };
        (next != self && !matches!(self, Committed | Stale)).then_some(next)
    }
}

/// One rewrite candidate (table `candidates`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// `<pattern-id>@<path>#<8 hex digits of the diff's blob id>`.
    pub id: String,
    /// The pattern it applies.
    pub pattern_id: String,
    /// The target, relative to the repository root (or as given outside one).
    pub path: String,
    /// Git blob id of the file the diff applies to.
    pub base_blob: String,
    /// Git blob id of the rewritten file.
    pub result_blob: String,
    /// The value written for `$V`, if any.
    pub value: Option<String>,
    /// Sites rewritten.
    pub sites: u64,
    /// Unified diff (`git apply` accepts it from the repository root).
    pub diff: String,
    /// Review status.
    pub status: CandidateStatus,
    /// The pattern's provenance (support, examples, commits) when proposed.
    pub provenance: Provenance,
    /// Validation evidence, filled in by the validator.
    pub evidence: StoredEvidence,
    /// The review-branch commit, once accepted.
    pub commit_id: Option<String>,
    /// RFC 3339, UTC.
    pub created_at: String,
    /// RFC 3339, UTC.
    pub updated_at: String,
}

impl Candidate {
    /// The one way to make a candidate: a proposed rewrite of `path` by
    /// `pattern_id`, its id from the diff ([`candidate_id`]), one site, no
    /// value, no evidence yet. Set the rest with struct update syntax.
    pub fn new(
        pattern_id: &str,
        path: &str,
        diff: String,
        (base_blob, result_blob): (String, String),
        provenance: Provenance,
    ) -> Candidate {
        Candidate {
            id: candidate_id(pattern_id, path, &diff),
            pattern_id: pattern_id.into(),
            path: path.into(),
            base_blob,
            result_blob,
            value: None,
            sites: 1,
            diff,
            status: CandidateStatus::Proposed,
            provenance,
            evidence: StoredEvidence::Empty,
            commit_id: None,
            created_at: String::new(),
            updated_at: String::new(),
        }
    }

    /// The id people type and tables show: the 8 hex digits after `#` (the
    /// diff's blob id), as git shows a commit; the whole id where it has none.
    pub fn short_id(&self) -> &str {
        short_id(&self.id)
    }
}

/// [`Candidate::short_id`] of an id (a validation's evidence names its candidate by id).
pub fn short_id(id: &str) -> &str {
    match id.rsplit_once('#') {
        Some((_, hash)) if !hash.is_empty() => hash,
        _ => id,
    }
}

/// Whether `s` can be the start of a short id (4 to 8 hex digits, `#` first or not).
fn hash_prefix(s: &str) -> Option<&str> {
    let h = s.strip_prefix('#').unwrap_or(s);
    (4..=8).contains(&h.len()).then_some(h).filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
}

const COLS: &str = "id, pattern_id, path, base_blob, result_blob, value, sites, diff, status, provenance, evidence, \
                    commit_id, created_at, updated_at";

impl Catalog {
    /// Stores a candidate, replacing one with the same id (its creation
    /// time is kept). `created_at`/`updated_at` are set by the catalog.
    /// Proposing again the same diff on the same blob keeps what is known of
    /// it (status, evidence, review commit): the validation still holds.
    pub fn put_candidate(&self, c: &Candidate) -> Result<()> {
        put(&self.conn, &self.path, c)
    }

    /// Stores many candidates in one transaction (one sync, not one per row).
    pub fn put_candidates(&mut self, cands: &[Candidate]) -> Result<()> {
        let tx = self.conn.transaction().at(&self.path)?;
        for c in cands {
            put(&tx, &self.path, c)?;
        }
        tx.commit().at(&self.path)
    }

    /// Candidates, newest first (then by id), optionally of one status.
    pub fn candidates(&self, status: Option<CandidateStatus>) -> Result<Vec<Candidate>> {
        let sql = format!("SELECT {COLS} FROM candidates WHERE ?1 IS NULL OR status = ?1 ORDER BY created_at DESC, id");
        self.query_candidates(&sql, params![status.map(CandidateStatus::name)])
    }

    /// The candidate with this id, else those whose id starts with it, else
    /// those whose short id ([`Candidate::short_id`], 4 to 8 hex digits)
    /// starts with it: none, the one, or every match when several do.
    pub fn find_candidates(&self, id: &str) -> Result<Vec<Candidate>> {
        let exact = self.query_candidates(&format!("SELECT {COLS} FROM candidates WHERE id = ?1"), params![id])?;
        if !exact.is_empty() {
            return Ok(exact);
        }
        let like = format!("{}%", id.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"));
        let by_prefix = self.query_candidates(
            &format!("SELECT {COLS} FROM candidates WHERE id LIKE ?1 ESCAPE '\\' ORDER BY id"),
            params![like],
        )?;
        let Some(hash) = hash_prefix(id).filter(|_| by_prefix.is_empty()) else { return Ok(by_prefix) };
        // a short id (or the start of one), as tables show it: the hex after the id's last `#`
        let hash = hash.to_ascii_lowercase();
        let mut found = self.query_candidates(
            &format!("SELECT {COLS} FROM candidates WHERE id LIKE '%#' || ?1 || '%' ORDER BY id"),
            params![hash],
        )?;
        found.retain(|c| c.id.contains('#') && short_id(&c.id).starts_with(&hash));
        Ok(found)
    }

    /// Sets a candidate's status (and review commit); false when no such id.
    pub fn set_candidate_status(&self, id: &str, status: CandidateStatus, commit_id: Option<&str>) -> Result<bool> {
        let n = self
            .conn
            .execute(
                "UPDATE candidates SET status = ?2, commit_id = COALESCE(?3, commit_id),
                     updated_at = strftime('%Y-%m-%dT%H:%M:%SZ', 'now') WHERE id = ?1",
                params![id, status.name(), commit_id],
            )
            .at(&self.path)?;
        Ok(n > 0)
    }

    /// Replaces a candidate's evidence; false when no such id.
    pub fn set_candidate_evidence(&self, id: &str, evidence: &StoredEvidence) -> Result<bool> {
        let text = evidence.to_value().to_string();
        let n = self
            .conn
            .execute(
                "UPDATE candidates SET evidence = ?2, updated_at = strftime('%Y-%m-%dT%H:%M:%SZ', 'now') WHERE id = ?1",
                params![id, text],
            )
            .at(&self.path)?;
        Ok(n > 0)
    }

    fn query_candidates(&self, sql: &str, p: impl rusqlite::Params) -> Result<Vec<Candidate>> {
        // the diff as bytes: one with bytes that are not UTF-8 (written by another tool) is read with
        // U+FFFD in their place, rather than making every candidate unreadable
        type Row = (String, String, String, String, String, Option<String>, i64, Vec<u8>, String, String, String);
        let mut st = self.conn.prepare_cached(sql).at(&self.path)?;
        let rows: Vec<(Row, Option<String>, String, String)> = st
            .query_map(p, |r| {
                Ok((
                    (
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get_ref(7)?.as_bytes().map(<[u8]>::to_vec).unwrap_or_default(),
                        r.get(8)?,
                        r.get(9)?,
                        r.get(10)?,
                    ),
                    r.get(11)?,
                    r.get(12)?,
                    r.get(13)?,
                ))
            })
            .and_then(|rows| rows.collect())
            .at(&self.path)?;
        rows.into_iter()
            .map(
                |(
                    (id, pattern_id, path, base_blob, result_blob, value, sites, diff, status, prov, ev),
                    commit_id,
                    created_at,
                    updated_at,
                )| {
                    let status = CandidateStatus::from_name(&status)
                        .ok_or_else(|| self.corrupt("candidates", &id, format!("unknown status {status:?}")))?;
                    // decoded once, here: text that is not JSON is a damaged row; JSON of any shape reads
                    let provenance: serde_json::Value = serde_json::from_str(&prov)
                        .map_err(|e| self.corrupt("candidates", &id, format!("bad provenance JSON: {e}")))?;
                    let evidence = serde_json::from_str(&ev)
                        .map_err(|e| self.corrupt("candidates", &id, format!("bad evidence JSON: {e}")))?;
                    let (provenance, evidence) = (Provenance::decode(&provenance), StoredEvidence::decode(evidence));
                    Ok(Candidate {
                        id,
                        pattern_id,
                        path,
                        base_blob,
                        result_blob,
                        value,
                        sites: u64::try_from(sites).unwrap_or(0),
                        diff: String::from_utf8(diff)
                            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
                        status,
                        provenance,
                        evidence,
                        commit_id,
                        created_at,
                        updated_at,
                    })
                },
            )
            .collect()
    }
}

fn put(conn: &rusqlite::Connection, path: &std::path::Path, c: &Candidate) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO candidates (id, pattern_id, path, base_blob, result_blob, value, sites, diff, status,
                     provenance, evidence, commit_id, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12,
                     strftime('%Y-%m-%dT%H:%M:%SZ', 'now'), strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
                 ON CONFLICT (id) DO UPDATE SET pattern_id = excluded.pattern_id, path = excluded.path,
                     base_blob = excluded.base_blob, result_blob = excluded.result_blob, value = excluded.value,
                     sites = excluded.sites, diff = excluded.diff,
                     status = CASE WHEN excluded.status = 'proposed' AND excluded.evidence = '{}' AND candidates.base_blob = excluded.base_blob THEN candidates.status ELSE excluded.status END,
                     provenance = excluded.provenance,
                     evidence = CASE WHEN excluded.status = 'proposed' AND excluded.evidence = '{}' AND candidates.base_blob = excluded.base_blob THEN candidates.evidence ELSE excluded.evidence END,
                     commit_id = CASE WHEN excluded.status = 'proposed' AND excluded.evidence = '{}' AND candidates.base_blob = excluded.base_blob THEN candidates.commit_id ELSE excluded.commit_id END,
                     updated_at = excluded.updated_at",
    )
    .and_then(|mut st| {
        st.execute(params![
            c.id,
            c.pattern_id,
            c.path,
            c.base_blob,
            c.result_blob,
            c.value,
            i64::try_from(c.sites).unwrap_or(i64::MAX),
            c.diff,
            c.status.name(),
            c.provenance.to_value().to_string(),
            c.evidence.to_value().to_string(),
            c.commit_id,
        ])
    })
    .at(path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(id: &str, status: CandidateStatus) -> Candidate {
        Candidate {
            id: id.into(),
            pattern_id: "p".into(),
            path: "k.py".into(),
            base_blob: "a".repeat(40),
            result_blob: "b".repeat(40),
            value: Some("'ieee'".into()),
            sites: 2,
            diff: "--- a/k.py\n+++ b/k.py\n".into(),
            status,
            provenance: Provenance::decode(&serde_json::json!({"support": []})),
            evidence: StoredEvidence::Empty,
            commit_id: None,
            created_at: String::new(),
            updated_at: String::new(),
        }
    }

    #[test]
    fn the_latest_verdict_decides_the_status_unless_committed_or_stale() {
        use CandidateStatus as S;
        use VerdictKind as V;
        assert_eq!(S::Proposed.after(V::Accepted), Some(S::Passed));
        assert_eq!(S::Applied.after(V::Rejected), Some(S::Rejected));
        assert_eq!(S::Passed.after(V::NeedsGpu), Some(S::Proposed));
        assert_eq!(S::Rejected.after(V::Error), Some(S::Proposed));
        assert_eq!(S::Proposed.after(V::NeedsGpu), None);
        assert_eq!(S::Passed.after(V::Accepted), None);
        assert_eq!(S::Committed.after(V::Rejected), None);
        assert_eq!(S::Stale.after(V::Accepted), None);
    }

    #[test]
    fn proposing_the_same_rewrite_again_keeps_its_evidence() {
        let cat = Catalog::open_in_memory().unwrap();
        let c = cand("p@k.py#0001", CandidateStatus::Proposed);
        cat.put_candidate(&c).unwrap();
        let ev = StoredEvidence::decode(serde_json::json!({"verdict": {"kind": "needs-gpu"}}));
        assert!(cat.set_candidate_evidence(&c.id, &ev).unwrap());
        cat.put_candidate(&c).unwrap();
        assert_eq!(cat.find_candidates(&c.id).unwrap()[0].evidence, ev);
        // On another blob the old evidence no longer holds.
        let moved = Candidate { base_blob: "c".repeat(40), ..c.clone() };
        cat.put_candidate(&moved).unwrap();
        assert_eq!(cat.find_candidates(&c.id).unwrap()[0].evidence, StoredEvidence::Empty);
    }

    #[test]
    fn candidates_round_trip_and_change_status() {
        let cat = Catalog::open_in_memory().unwrap();
        cat.put_candidate(&cand("p@k.py#0001", CandidateStatus::Proposed)).unwrap();
        cat.put_candidate(&cand("p@k.py#0002", CandidateStatus::Applied)).unwrap();
        let all = cat.candidates(None).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].value.as_deref(), Some("'ieee'"));
        assert!(!all[0].created_at.is_empty());
        assert_eq!(cat.candidates(Some(CandidateStatus::Applied)).unwrap().len(), 1);
        assert_eq!(cat.find_candidates("p@k.py#0001").unwrap().len(), 1);
        let mut cat2 = Catalog::open_in_memory().unwrap();
        cat2.put_candidates(&all).unwrap();
        assert_eq!(cat2.candidates(None).unwrap().len(), 2);
        assert_eq!(cat.find_candidates("p@k.py#000").unwrap().len(), 2);
        assert!(cat.find_candidates("nope").unwrap().is_empty());
        assert!(cat.set_candidate_status("p@k.py#0001", CandidateStatus::Committed, Some("c0ffee")).unwrap());
        let c = &cat.find_candidates("p@k.py#0001").unwrap()[0];
        assert_eq!((c.status, c.commit_id.as_deref()), (CandidateStatus::Committed, Some("c0ffee")));
        assert!(!cat.set_candidate_status("missing", CandidateStatus::Rejected, None).unwrap());
        let odd = StoredEvidence::decode(serde_json::json!({"verdict": "needs-gpu"}));
        assert!(cat.set_candidate_evidence("p@k.py#0002", &odd).unwrap());
        assert_eq!(cat.find_candidates("p@k.py#0002").unwrap()[0].evidence.to_value(), odd.to_value());
    }
}
