//! Committing a candidate on the review branch.
//!
//! The working tree, the index and `HEAD` are left alone: the commit goes
//! on `kidiom/review` (created at `HEAD` the first time), one commit per
//! accepted rewrite, with the pattern, its provenance and the evidence as
//! trailers. The target on disk must still be the blob the candidate was
//! computed from; otherwise nothing happens and `apply` must be re-run.
//!
//! Only a candidate whose stored evidence has the verdict `accepted` (every
//! gate passed, speed included) is committed. `needs-gpu`, `rejected`,
//! `error` and a candidate never validated are refused with the verdict and
//! its reason, unless forced.

use std::path::Path;

use super::branch::{self, ReviewCommit};
use anyhow::{Context, Result, bail};
use kidiom_patterns::record::VerdictKind;
use kidiom_patterns::{Candidate, CandidateStatus, Catalog};
use kidiom_syntax::blob_id;

/// The commit message: subject, rationale, then `Kidiom-*` trailers.
pub(crate) fn message(c: &Candidate) -> String {
    let p = &c.provenance;
    let one_line = |x: &str| x.replace('\n', " ");
    let mut m =
        format!("kidiom: {} in {}\n\n{}\n\n", one_line(p.title()), c.path, one_line(p.rationale().unwrap_or("")));
    m.push_str(&format!("Kidiom-Pattern: {}\n", c.pattern_id));
    m.push_str(&format!("Kidiom-Candidate: {}\n", c.id));
    m.push_str(&format!("Kidiom-Category: {}\n", one_line(p.category().unwrap_or(""))));
    m.push_str(&format!("Kidiom-Kind: {}\n", one_line(p.kind())));
    if let Some(v) = &c.value {
        m.push_str(&format!("Kidiom-Value: {v}\n"));
    }
    m.push_str(&format!("Kidiom-Sites: {}\n", c.sites));
    m.push_str(&format!("Kidiom-Base-Blob: {}\n", c.base_blob));
    for sup in p.support() {
        m.push_str(&format!(
            "Kidiom-Support: {}@{} occurrences={} files={} opportunities={}\n",
            sup.corpus, sup.revision, sup.occurrences, sup.files, sup.opportunities
        ));
    }
    for e in p.examples() {
        m.push_str(&format!("Kidiom-Example: {}:{}:{}\n", e.corpus, e.path, e.line));
    }
    for k in p.commits() {
        m.push_str(&format!("Kidiom-Provenance-Commit: {}\n", k.id));
    }
    m.push_str(&format!("Kidiom-Evidence: {}\n", c.evidence.to_value()));
    m
}

/// Why `c` may not be committed without force: its verdict (with gate and
/// reason) when that is not `accepted`, or that it was never validated.
pub(crate) fn refusal(c: &Candidate) -> Option<String> {
    match c.evidence.verdict() {
        Some(v) if v.kind == VerdictKind::Accepted => None,
        Some(v) => {
            let at = v.gate.map(|g| format!(" at {g}")).unwrap_or_default();
            Some(format!("{} is not accepted by validation: its verdict is {}{at}: {}", c.id, v.kind, v.reason))
        }
        None => Some(format!("{} is not validated (run `kidiom validate {}` first)", c.id, c.id)),
    }
}

/// Commits candidate `id` on `branch` in the repository holding `root`;
/// returns the candidate id and the commit id. Refused unless its verdict is
/// `accepted` or `force` is set.
pub(crate) fn accept(cat: &Catalog, root: &Path, id: &str, branch: &str, force: bool) -> Result<(String, String)> {
    let c = super::candidates::find_one(cat, id)?;
    if c.status == CandidateStatus::Committed {
        bail!("{} is already accepted ({})", c.id, c.commit_id.as_deref().unwrap_or("no commit recorded"));
    }
    if !force && let Some(why) = refusal(&c) {
        bail!("refusing to commit: {why}; force it with `kidiom accept --force` (MCP: \"force\": true)");
    }
    if branch::repo_root(root).is_none() {
        bail!("{} is not in a git repository; `accept` commits on a review branch", root.display());
    }
    let abs = root.join(&c.path);
    let now = std::fs::read(&abs).with_context(|| format!("reading {}", abs.display()))?;
    let found = blob_id(&now);
    // An applied candidate's base is the file before --write; its result is what is on disk now.
    let expected = if c.status == CandidateStatus::Applied { &c.result_blob } else { &c.base_blob };
    if &found != expected {
        cat.set_candidate_status(&c.id, CandidateStatus::Stale, None)?;
        return Err(kidiom_rewriter::Error::Stale { path: abs, expected: expected.clone(), found }.into());
    }
    let mut msg = message(&c);
    if let Some(why) = refusal(&c) {
        // forced: the commit says what validation concluded
        msg.push_str(&format!("Kidiom-Forced: {}\n", why.replace('\n', " ")));
    }
    let commit = branch::commit_review(root, &ReviewCommit { branch, diff: &c.diff, message: &msg })?;
    cat.set_candidate_status(&c.id, CandidateStatus::Committed, Some(&commit))?;
    Ok((c.id, commit))
}
