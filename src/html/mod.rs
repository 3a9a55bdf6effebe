//! The review as a static site (`kidiom review --html DIR`, `kidiom run
//! --html DIR`): `index.html` lists every candidate with its verdict and key
//! numbers, and `c/<name>.html` shows one candidate: the side-by-side diff,
//! the pattern's upstream evidence, each gate's record with its plots and
//! commands. No server and no network: the pages open from `file://`, with
//! one local stylesheet.
//!
//! Templates are askama's (`templates/html/`, checked at compile time,
//! HTML-escaped by default), highlighting is tree-sitter-highlight's with
//! the grammars the miner parses with, plots are plotters' SVG backend.

mod diff;
mod evidence;
mod highlight;
mod links;
mod markup;
mod pages;
mod plot;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use askama::Template;
use kidiom_patterns::{Candidate, Catalog, Pattern};
use rayon::prelude::*;

const STYLE: &str = include_str!("../../templates/html/style.css");

/// A file in a site's folder that says kidiom wrote it: only then are
/// candidate pages of an earlier run that are gone now removed.
const MARKER: &str = ".kidiom-site";

/// Where the candidate pages live, relative to the index.
const PAGES: &str = "c";

/// What was written.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Site {
    pub(crate) dir: PathBuf,
    pub(crate) index: PathBuf,
    pub(crate) pages: usize,
    /// Pages of candidates no longer listed, removed.
    pub(crate) removed: usize,
}

impl Site {
    /// The page of `id`, if the site has one.
    pub(crate) fn page(&self, id: &str) -> PathBuf {
        self.dir.join(page_name(id))
    }
}

/// The page of a candidate, relative to the site's folder: `c/` and the id
/// with every character but `[A-Za-z0-9._-]` made `_` (ids hold `@`, `/`,
/// `#`), shortened, then 8 hex digits of the id's hash (two ids that differ
/// only in those characters get two pages).
pub(crate) fn page_name(id: &str) -> String {
    let mut safe: String = id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .take(96)
        .collect();
    if safe.starts_with('.') || safe.is_empty() {
        safe.insert(0, '_');
    }
    let hash = kidiom_miner::blob_id(id.as_bytes());
    format!("{PAGES}/{safe}-{}.html", &hash[..8.min(hash.len())])
}

/// Writes the site of `cands` into `dir`.
pub(crate) fn write_site(cat: &Catalog, cands: &[Candidate], dir: &Path) -> Result<Site> {
    let pages_dir = dir.join(PAGES);
    std::fs::create_dir_all(&pages_dir).with_context(|| format!("creating {}", pages_dir.display()))?;
    let ours = dir.join(MARKER).exists();
    write(&dir.join(MARKER), "kidiom review --html: this folder is generated; its pages are rewritten\n")?;
    write(&dir.join("style.css"), STYLE)?;
    let corpora = cat.corpora()?;
    let mut patterns: HashMap<String, Option<Pattern>> = HashMap::new();
    for c in cands {
        if !patterns.contains_key(&c.pattern_id) {
            patterns.insert(c.pattern_id.clone(), cat.get(&c.pattern_id)?);
        }
    }
    // pages in parallel: highlighting and plots are the work
    cands.par_iter().try_for_each(|c| -> Result<()> {
        let cx = pages::Context { pattern: patterns.get(&c.pattern_id).and_then(Option::as_ref), corpora: &corpora };
        let html = pages::candidate_page(c, &cx).render().with_context(|| format!("rendering the page of {}", c.id))?;
        write(&dir.join(page_name(&c.id)), &html)
    })?;
    let removed = if ours { remove_stale(&pages_dir, cands)? } else { 0 };
    let rows: Vec<pages::IndexRow> = cands.iter().map(|c| pages::index_row(c, page_name(&c.id))).collect();
    let index = pages::IndexPage {
        catalog: cat.path().display().to_string(),
        verdicts: pages::facets(rows.iter().map(|r| r.verdict.as_str())),
        kernels: pages::facets(rows.iter().map(|r| r.path.as_str())),
        categories: pages::facets(rows.iter().map(|r| r.category.as_str())),
        rows,
    };
    let html = index.render().context("rendering index.html")?;
    let index_path = dir.join("index.html");
    write(&index_path, &html)?;
    Ok(Site { dir: dir.to_path_buf(), index: index_path, pages: cands.len(), removed })
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Removes the `.html` pages under `c/` that no candidate of this site has.
fn remove_stale(pages_dir: &Path, cands: &[Candidate]) -> Result<usize> {
    let keep: std::collections::HashSet<String> =
        cands.iter().filter_map(|c| page_name(&c.id).strip_prefix("c/").map(str::to_string)).collect();
    let mut removed = 0;
    for e in std::fs::read_dir(pages_dir).with_context(|| format!("reading {}", pages_dir.display()))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().to_string();
        if name.ends_with(".html") && !keep.contains(&name) && e.file_type()?.is_file() {
            std::fs::remove_file(e.path()).with_context(|| format!("removing {}", e.path().display()))?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// How `open` went.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Opened {
    /// Handed to this program.
    With(String),
    /// No browser: why.
    NoBrowser(String),
}

/// Opens `page` in a browser: `$BROWSER`, else `open` on macOS, else (with
/// a display) xdg-open, chromium, google-chrome, firefox; the first found on
/// `PATH`. Without a display nothing is started (xdg-open would fall back to
/// a text browser in this terminal).
pub(crate) fn open(page: &Path) -> Opened {
    let url = format!("file://{}", page.canonicalize().unwrap_or_else(|_| page.to_path_buf()).display());
    let mut tries: Vec<String> = Vec::new();
    if let Some(b) = std::env::var_os("BROWSER").filter(|b| !b.is_empty()) {
        tries.extend(b.to_string_lossy().split(':').map(str::to_string));
    }
    let display = ["DISPLAY", "WAYLAND_DISPLAY"].iter().any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
    if cfg!(target_os = "macos") {
        tries.push("open".into());
    } else if display {
        for b in ["xdg-open", "chromium", "chromium-browser", "google-chrome", "firefox"] {
            tries.push(b.into());
        }
    }
    for b in &tries {
        let Some(program) = find_program(b) else { continue };
        let child = std::process::Command::new(&program)
            .arg(&url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if let Ok(mut child) = child {
            // a launcher (xdg-open) exits soon; a browser keeps running, on its own
            std::thread::sleep(std::time::Duration::from_millis(300));
            match child.try_wait() {
                Ok(Some(status)) if !status.success() => continue,
                _ => return Opened::With(b.clone()),
            }
        }
    }
    if tries.is_empty() {
        return Opened::NoBrowser("no display ($DISPLAY and $WAYLAND_DISPLAY are unset) and no $BROWSER".into());
    }
    Opened::NoBrowser(format!("none of {} found on PATH or started", tries.join(", ")))
}

/// `name` as given when it is a path, else its first match on `PATH`.
fn find_program(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.is_file().then_some(p);
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_names_are_safe_and_distinct() {
        let a = page_name("py-keyword-tl-dot@kernels/kda/prefill.py#65e3e29d");
        assert!(a.starts_with("c/py-keyword-tl-dot_kernels_kda_prefill.py_65e3e29d-"), "{a}");
        assert!(a.ends_with(".html"));
        let b = page_name("py-keyword-tl-dot@kernels/kda/prefill.py_65e3e29d");
        assert_ne!(a, b, "ids that differ only in punctuation get two pages");
        for id in ["../../etc/passwd", "..", "", "a\0b", "<script>", "é/ü"] {
            let n = page_name(id);
            let file = n.strip_prefix("c/").expect("under c/");
            assert!(!file.contains('/') && !file.starts_with('.'), "{id:?} -> {n}");
            assert!(file.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)), "{id:?} -> {n}");
        }
        assert!(page_name(&"x".repeat(500)).len() < 120);
    }
}
