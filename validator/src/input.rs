//! What the validator takes: one rewrite as a unified diff against a file
//! under the root, from the catalog or from a patch.

use std::path::Path;

use kidiom_patterns::Category;
use kidiom_syntax::blob_id;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::patch;

/// The pattern id of a candidate that came from a patch rather than the catalog.
pub const MANUAL_PATTERN: &str = kidiom_patterns::record::MANUAL_KIND;

/// The pattern id of a state-precision variant as it is in the tree
/// (`kidiom validate --kernel VARIANT`): its target is the variant's manifest.
pub const VARIANT_PATTERN: &str = "variant";

/// One rewrite to validate: a unified diff against a file under the root.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateInput {
    /// The candidate's id.
    pub id: String,
    /// Its pattern ([`MANUAL_PATTERN`] for a patch that came from elsewhere).
    pub pattern_id: String,
    /// The pattern's category; numeric flags may change only under `precision`.
    pub category: Option<Category>,
    /// The target, relative to the root.
    pub path: String,
    /// Git blob id of the file the diff applies to.
    pub base_blob: String,
    /// Git blob id of the rewritten file.
    pub result_blob: String,
    /// The unified diff.
    pub diff: String,
    /// When the pattern is a decorator idiom (its `after` is a Python
    /// decorator), that decorator's callee: decorators of this callee, with
    /// literal arguments, are the idiom and not host code (`hostcode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decorator_idiom: Option<String>,
}

impl CandidateInput {
    /// A candidate of `path` with nothing else to it, for tests that judge
    /// made-up harness output.
    #[cfg(test)]
    pub(crate) fn bare(path: &str) -> CandidateInput {
        CandidateInput {
            id: "c".into(),
            pattern_id: "p".into(),
            category: None,
            path: path.into(),
            base_blob: String::new(),
            result_blob: String::new(),
            diff: String::new(),
            decorator_idiom: None,
        }
    }

    /// From a stored candidate; the category is taken from its provenance
    /// unless `category` names one (the pattern's, from the catalog).
    pub fn from_candidate(c: &kidiom_patterns::Candidate, category: Option<Category>) -> CandidateInput {
        let category = category.or_else(|| c.provenance.category().and_then(Category::from_name));
        // the pattern's `after`, as kidiom's own apply recorded it; a manual patch has none
        let decorator_idiom = (c.pattern_id != MANUAL_PATTERN)
            .then(|| c.provenance.after())
            .flatten()
            .and_then(crate::hostcode::DecoratorIdiom::from_template)
            .map(|d| d.callee);
        CandidateInput {
            id: c.id.clone(),
            pattern_id: c.pattern_id.clone(),
            category,
            path: c.path.clone(),
            base_blob: c.base_blob.clone(),
            result_blob: c.result_blob.clone(),
            diff: c.diff.clone(),
            decorator_idiom,
        }
    }

    /// A state-precision variant of `kernels` as it is under `root`: its
    /// target is the variant's manifest, its diff what the variant changes
    /// (its source against its kernel's; a variant that shares its kernel's
    /// source shows its manifest), so that a reviewer reads the change. Its
    /// id hashes what the precision gate judges: that diff, the manifest
    /// (storage, budget) and its contract module, so an edit to any of them
    /// is a new candidate and a verdict in the catalog holds for these files.
    pub fn from_variant(root: &Path, kernels: &crate::manifest::Kernels, name: &str) -> Result<CandidateInput> {
        let (variant, base) = kernels.variant(name).ok_or_else(|| {
            let known: Vec<&str> = kernels.variants.iter().map(|v| v.name.as_str()).collect();
            Error::Diff(format!("no state-precision variant {name:?} (variants: {})", known.join(", ")))
        })?;
        let read = |rel: &str| -> Result<String> {
            let abs = root.join(rel);
            let bytes = std::fs::read(&abs).map_err(|e| Error::io(&abs, e))?;
            String::from_utf8(bytes)
                .map_err(|_| Error::Patch { path: rel.into(), message: "the file is not UTF-8".into() })
        };
        let (src, base_src) = (variant.source_path(base), base.source_path());
        let own = if src != base_src { Some((read(&base_src)?, read(&src)?)) } else { None };
        let (before, after, diff) = if let Some((b, a)) = own.filter(|(b, a)| b != a) {
            let d = kidiom_rewriter::unified(&src, &b, &a, 3)
                .replacen(&format!("diff --git a/{src}"), &format!("diff --git a/{base_src}"), 1)
                .replacen(&format!("--- a/{src}"), &format!("--- a/{base_src}"), 1);
            (b, a, d)
        } else {
            let m = read(&variant.path)?;
            (String::new(), m.clone(), kidiom_rewriter::unified(&variant.path, "", &m, 3))
        };
        let mut judged = format!("{diff}\0{}", read(&variant.path)?);
        if let Some(contract) = variant.contract_path() {
            judged.push('\0');
            judged.push_str(&read(&contract)?);
        }
        let id = kidiom_patterns::record::candidate_id(VARIANT_PATTERN, &variant.path, &judged);
        Ok(CandidateInput {
            id,
            pattern_id: VARIANT_PATTERN.into(),
            category: Some(Category::Precision),
            path: variant.path.clone(),
            base_blob: blob_id(before.as_bytes()),
            result_blob: blob_id(after.as_bytes()),
            diff,
            decorator_idiom: None,
        })
    }

    /// An edit that did not come from the catalog (an agent's own): a unified
    /// diff against the files under `root` as they are now. Its pattern is
    /// [`MANUAL_PATTERN`], its id `manual@<path>#<diff hash>`, its target the
    /// diff's first file. `Err` when the diff does not parse or does not
    /// apply to that file.
    pub fn from_patch(root: &Path, diff: &str, category: Option<Category>) -> Result<CandidateInput> {
        let files = patch::parse(diff)?;
        let first = files.first().ok_or_else(|| Error::Diff("the patch changes no file".into()))?;
        let abs = root.join(&first.path);
        let current = match std::fs::read(&abs) {
            Ok(b) => String::from_utf8(b)
                .map_err(|_| Error::Patch { path: first.path.clone(), message: "the file is not UTF-8".into() })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(Error::io(abs, e)),
        };
        let result = patch::apply(&current, first, false)?;
        Ok(CandidateInput {
            id: kidiom_patterns::record::candidate_id(MANUAL_PATTERN, &first.path, diff),
            pattern_id: MANUAL_PATTERN.into(),
            category,
            path: first.path.clone(),
            base_blob: blob_id(current.as_bytes()),
            result_blob: blob_id(result.as_bytes()),
            diff: diff.to_string(),
            decorator_idiom: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_becomes_a_manual_candidate() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("kernels")).unwrap();
        std::fs::write(dir.path().join("kernels/k.py"), "a = 1\n").unwrap();
        let diff = kidiom_rewriter::unified("kernels/k.py", "a = 1\n", "a = 2\n", 3);
        let c = CandidateInput::from_patch(dir.path(), &diff, None).unwrap();
        assert_eq!(c.pattern_id, MANUAL_PATTERN);
        assert!(c.id.starts_with("manual@kernels/k.py#"), "{}", c.id);
        assert_eq!(c.base_blob, blob_id(b"a = 1\n"));
        assert_eq!(c.result_blob, blob_id(b"a = 2\n"));
        let stale = kidiom_rewriter::unified("kernels/k.py", "b = 1\n", "b = 2\n", 3);
        assert!(CandidateInput::from_patch(dir.path(), &stale, None).is_err());
        assert!(CandidateInput::from_patch(dir.path(), "nonsense\n", None).is_err());
    }
}
