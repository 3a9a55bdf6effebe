//! Finding candidates and storing edits that did not come from the catalog.

use anyhow::{Context, Result, bail};
use kidiom_catalog::record::Provenance;
use kidiom_catalog::{Candidate, CandidateStatus, Catalog, Category};
use kidiom_validator::{CandidateInput, MANUAL_PATTERN};

/// The one candidate `id` names (exactly or as a unique prefix).
pub(crate) fn find_one(cat: &Catalog, id: &str) -> Result<Candidate> {
    let mut found = cat.find_candidates(id)?;
    match found.len() {
        0 => bail!("no candidate {id:?} (see `kidiom review`)"),
        1 => Ok(found.remove(0)),
        n => {
            let ids: Vec<&str> = found.iter().take(5).map(|c| c.id.as_str()).collect();
            bail!(
                "{id:?} names {n} candidates ({}{}); give more of the id",
                ids.join(", "),
                if n > 5 { ", ..." } else { "" }
            )
        }
    }
}

/// Whether a candidate still awaits a verdict that settles it.
pub(crate) fn is_pending(c: &Candidate) -> bool {
    matches!(c.status, CandidateStatus::Proposed | CandidateStatus::Applied)
}

/// Stores an edit that did not come from the catalog (a unified diff against
/// the files under `root`) as a candidate of the pattern `manual`.
pub(crate) fn store_patch(
    cat: &Catalog,
    root: &std::path::Path,
    diff: &str,
    category: Option<Category>,
) -> Result<Candidate> {
    if diff.trim().is_empty() {
        bail!("the patch is empty");
    }
    let input = CandidateInput::from_patch(root, diff, category).context("reading the patch")?;
    let sites = diff.lines().filter(|l| l.starts_with("@@")).count() as u64;
    let c = Candidate {
        // the validator's id for the patch (the same function names every candidate)
        id: input.id,
        sites,
        ..Candidate::new(
            MANUAL_PATTERN,
            &input.path,
            input.diff,
            (input.base_blob, input.result_blob),
            Provenance::manual(category.map(|c| c.name())),
        )
    };
    cat.put_candidate(&c).with_context(|| format!("storing {}", c.id))?;
    // the stored row (an earlier identical patch keeps its status)
    Ok(cat.find_candidates(&c.id)?.into_iter().find(|x| x.id == c.id).unwrap_or(c))
}
