//! Finding candidates and storing edits that did not come from the catalog.

use anyhow::{Context, Result, bail};
use kidiom_patterns::record::{ManualEdit, Origin, Provenance};
use kidiom_patterns::{Candidate, CandidateStatus, Catalog, Category};
use kidiom_validator::{CandidateInput, Kernels, MANUAL_PATTERN};

/// The one candidate `id` names (exactly or as a unique prefix).
pub(crate) fn find_one(cat: &Catalog, id: &str) -> Result<Candidate> {
    let mut found = cat.find_candidates(id)?;
    match found.len() {
        0 => bail!(
            "no candidate {id:?}: give a whole id, its start, or 4 to 8 hex digits of a short id (see `kidiom review`)"
        ),
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

/// The digest of each kernel's contract as it is now under `root` (the
/// kernels of kernels/ and of `targets`), by kernel name; kernels whose
/// manifests cannot be read are left out (their verdicts cannot be judged
/// stale).
pub(crate) fn contract_digests(
    root: &std::path::Path,
    targets: &[std::path::PathBuf],
) -> std::collections::HashMap<String, String> {
    let mut kernels = kidiom_validator::Kernels::load(root, "kernels").unwrap_or(kidiom_validator::Kernels {
        dir: "kernels".into(),
        manifests: Vec::new(),
        variants: Vec::new(),
    });
    if kernels.discover(root, targets).is_err() {
        return Default::default();
    }
    kernels.manifests.iter().map(|m| (m.name.clone(), m.contract_digest(root))).collect()
}

/// Whether `c`'s verdict was given under a contract that has changed since
/// (its evidence's digest against `digests`, [`contract_digests`]).
pub(crate) fn contract_changed(c: &Candidate, digests: &std::collections::HashMap<String, String>) -> bool {
    let Some(e) = c.evidence.evidence() else { return false };
    match (&e.kernel, &e.contract) {
        (Some(k), Some(d)) => digests.get(k).is_some_and(|now| now != d),
        _ => false,
    }
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

/// Stores the state-precision variant `name` (a manifest with `variant_of`
/// and `[storage]` under `kernels/`) as it is in the tree, as a candidate of
/// the pattern `variant` whose target is its manifest: the precision gate
/// judges it (`kidiom validate --kernel`, `kidiom run`).
pub(crate) fn store_variant(cat: &Catalog, root: &std::path::Path, kernels: &Kernels, name: &str) -> Result<Candidate> {
    let input = CandidateInput::from_variant(root, kernels, name).with_context(|| format!("the variant {name}"))?;
    let (variant, _) = kernels.variant(name).context("a variant")?;
    let s = &variant.storage;
    let scale = if s.scale == "none" { String::new() } else { format!(", {} scales", s.scale) };
    let provenance = Provenance {
        origin: Origin::Manual(ManualEdit {
            category: Some(Category::Precision.name().to_string()),
            title: format!("state-precision variant {name}: {} {} state{scale}", s.dtype, s.tensor),
            rationale: format!(
                "a hand-written variant of {} ({}) that keeps its state in {}, judged by the precision gate: \
                 drift against its simulated reference and float64 within its [budget], state bytes per step",
                variant.variant_of, variant.path, s.dtype
            ),
        }),
        search: None,
    };
    let sites = input.diff.lines().filter(|l| l.starts_with("@@")).count() as u64;
    let c = Candidate {
        id: input.id,
        sites,
        ..Candidate::new(
            kidiom_validator::VARIANT_PATTERN,
            &input.path,
            input.diff,
            (input.base_blob, input.result_blob),
            provenance,
        )
    };
    cat.put_candidate(&c).with_context(|| format!("storing {}", c.id))?;
    Ok(cat.find_candidates(&c.id)?.into_iter().find(|x| x.id == c.id).unwrap_or(c))
}

/// Every state-precision variant under `root`'s kernels, stored as candidates.
pub(crate) fn store_variants(cat: &Catalog, root: &std::path::Path) -> Result<Vec<Candidate>> {
    let kernels = Kernels::load(root, "kernels").context("reading the kernels' manifests")?;
    kernels.variants.iter().map(|v| store_variant(cat, root, &kernels, &v.name)).collect()
}
