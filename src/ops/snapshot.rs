//! The shipped catalog snapshot (`corpora/snapshot.json`, made by
//! `scripts/snapshot.sh`): what `kidiom run` imports for a git corpus it
//! cannot reach, so that a machine without GitHub still gets the edit and
//! usage idioms of every default git corpus (FLA, DeepGEMM, Mooncake; FLA's
//! usage only where its PyPI fallback fails too), with the support rows a
//! machine with GitHub mines, marked as from the snapshot (their corpus
//! rows have kind `snapshot`).

use std::path::Path;

use anyhow::Result;
use kidiom_miner::Manifest;
use kidiom_patterns::{Catalog, Kind};
use serde::Serialize;

/// One corpus filled in from the snapshot.
#[derive(Debug, Serialize)]
pub(crate) struct Filled {
    pub(crate) corpus: String,
    pub(crate) revision: String,
    pub(crate) usage: usize,
    pub(crate) edit: usize,
    /// Why nothing was imported (the snapshot lacks the corpus, or is of another revision).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) skipped: Option<String>,
}

/// Imports from `snapshot`, for each corpus in `gaps` (name, kinds it
/// lacks), that corpus's patterns of those kinds, when the snapshot was
/// made at the revision its manifest pins.
pub(crate) fn fill(
    cat: &mut Catalog,
    snapshot: &Path,
    manifests: &[Manifest],
    gaps: &[(String, Vec<Kind>)],
) -> Result<Vec<Filled>> {
    if gaps.is_empty() {
        return Ok(Vec::new());
    }
    let file = read_catalog_file(snapshot)?;
    let source = snapshot.display().to_string();
    let mut out = Vec::new();
    let tx = cat.begin()?;
    for (name, kinds) in gaps {
        let pinned = manifests.iter().find(|m| &m.name == name).and_then(|m| m.revision.clone());
        let Some(c) = file.corpora.iter().find(|c| &c.name == name) else {
            out.push(Filled {
                corpus: name.clone(),
                revision: String::new(),
                usage: 0,
                edit: 0,
                skipped: Some(format!("{source} has no corpus {name}")),
            });
            continue;
        };
        if let Some(p) = pinned.filter(|p| !c.revision.starts_with(p.as_str()) && !p.starts_with(&c.revision)) {
            out.push(Filled {
                corpus: name.clone(),
                revision: c.revision.clone(),
                usage: 0,
                edit: 0,
                skipped: Some(format!("{source} holds {name} at {}, its manifest pins {p}", short(&c.revision))),
            });
            continue;
        }
        let r = tx.import(&file, &source, Some(std::slice::from_ref(name)), kinds)?;
        out.push(Filled {
            corpus: name.clone(),
            revision: c.revision.clone(),
            usage: r.usage,
            edit: r.edit,
            skipped: None,
        });
    }
    tx.commit()?;
    Ok(out)
}

fn short(rev: &str) -> &str {
    rev.get(..12).unwrap_or(rev)
}

/// One line per corpus filled in, for the run's output.
pub(crate) fn describe(f: &Filled, snapshot: &Path) -> String {
    match &f.skipped {
        Some(why) => format!("corpus {}: not reachable, and not imported: {why}", f.corpus),
        None => format!(
            "corpus {}: not reachable here; imported {} usage and {} edit patterns mined at {} from the snapshot {}",
            f.corpus,
            f.usage,
            f.edit,
            short(&f.revision),
            snapshot.display()
        ),
    }
}

/// Reads `path` as an exported catalog (`kidiom catalog import`, the shipped snapshot).
pub(crate) fn read_catalog_file(path: &Path) -> Result<kidiom_patterns::CatalogFile> {
    use anyhow::Context;
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(kidiom_patterns::CatalogFile::parse(&text, &path.display().to_string())?)
}
