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

use anyhow::{Context, Result, bail};
use askama::Template;
use kidiom_patterns::{Candidate, Catalog, Pattern};
use rayon::prelude::*;

const STYLE: &str = include_str!("../../templates/html/style.css");

/// A file in a site's folder that says kidiom wrote it, and lists the
/// candidate pages it wrote: only those are ever removed (when their
/// candidate is no longer listed) or overwritten without asking.
const MARKER: &str = ".kidiom-site";

const MARKER_HEAD: &str = "kidiom review --html: this folder is generated; its pages are rewritten";

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
    let hash = kidiom_syntax::blob_id(id.as_bytes());
    format!("{PAGES}/{safe}-{}.html", &hash[..8.min(hash.len())])
}

/// Writes the site of `cands` into `dir`: the pages first, the index last,
/// each file whole or not at all (written beside its place, then renamed).
///
/// `dir` may be new, empty, or a site kidiom wrote before. In any other
/// folder, a file the site would replace (`index.html`, `style.css`, a page)
/// is an error before anything is written: nothing of the user's is
/// overwritten or removed.
pub(crate) fn write_site(cat: &Catalog, cands: &[Candidate], dir: &Path) -> Result<Site> {
    let pages_dir = dir.join(PAGES);
    let names: Vec<String> = cands.iter().map(|c| page_name(&c.id)).collect();
    let before = prepare(dir, &names)?;
    let corpora = cat.corpora()?;
    let mut patterns: HashMap<String, Option<Pattern>> = HashMap::new();
    for c in cands {
        if !patterns.contains_key(&c.pattern_id) {
            patterns.insert(c.pattern_id.clone(), cat.get(&c.pattern_id)?);
        }
    }
    // the marker lists what this run may write before it writes: a run cut
    // short leaves no page the next run would take for the user's
    let mut listed: Vec<String> = before.iter().cloned().chain(names.iter().cloned()).collect();
    listed.sort();
    listed.dedup();
    write_marker(dir, &listed)?;
    // pages in parallel: highlighting and plots are the work
    cands.par_iter().zip(names.par_iter()).try_for_each(|(c, name)| -> Result<()> {
        let cx = pages::Context { pattern: patterns.get(&c.pattern_id).and_then(Option::as_ref), corpora: &corpora };
        let html = pages::candidate_page(c, &cx).render().with_context(|| format!("rendering the page of {}", c.id))?;
        write(&dir.join(name), &html)
    })?;
    write(&dir.join("style.css"), STYLE)?;
    let rows: Vec<pages::IndexRow> =
        cands.iter().zip(&names).map(|(c, name)| pages::index_row(c, name.clone())).collect();
    let index = pages::IndexPage {
        catalog: cat.path().display().to_string(),
        precision: crate::view::precision_families(cands).iter().map(pages::family_view).collect(),
        verdicts: pages::facets(rows.iter().map(|r| r.verdict.as_str())),
        kernels: pages::facets(rows.iter().map(|r| r.path.as_str())),
        categories: pages::facets(rows.iter().map(|r| r.category.as_str())),
        rows,
    };
    let html = index.render().context("rendering index.html")?;
    let index_path = dir.join("index.html");
    write(&index_path, &html)?;
    write_marker(dir, &names)?;
    let removed = remove_stale(&pages_dir, &before, &names)?;
    Ok(Site { dir: dir.to_path_buf(), index: index_path, pages: cands.len(), removed })
}

/// Checks `dir` before anything is written and creates it (and `c/`);
/// returns the pages an earlier run listed in its marker.
fn prepare(dir: &Path, names: &[String]) -> Result<Vec<String>> {
    let kind = |p: &Path| std::fs::symlink_metadata(p).ok().map(|m| m.file_type());
    match kind(dir) {
        Some(t) if t.is_symlink() && !dir.is_dir() => bail!("{} is a link to no folder", dir.display()),
        Some(t) if !t.is_symlink() && !t.is_dir() => bail!("{} is a file, not a folder", dir.display()),
        _ => {}
    }
    let pages_dir = dir.join(PAGES);
    // `c/` as a link would put pages (and their removal) in another folder
    if let Some(t) = kind(&pages_dir)
        && !t.is_dir()
    {
        bail!("{} is not a folder (a file or a link): the site's pages go there", pages_dir.display());
    }
    let marker = dir.join(MARKER);
    let before = match std::fs::read_to_string(&marker) {
        Ok(text) if text.starts_with(MARKER_HEAD) => Some(listed_pages(&text)),
        Ok(_) => bail!("{} is not kidiom's (it does not start as kidiom writes it)", marker.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("reading {}", marker.display())),
    };
    if before.is_none() {
        let mut taken: Vec<PathBuf> = ["index.html", "style.css"]
            .iter()
            .map(|f| dir.join(f))
            .chain(names.iter().map(|n| dir.join(n)))
            .filter(|p| kind(p).is_some())
            .collect();
        if !taken.is_empty() {
            let n = taken.len();
            taken.truncate(3);
            let shown: Vec<String> = taken.iter().map(|p| p.display().to_string()).collect();
            bail!(
                "{} holds files kidiom did not write that the site would replace ({}{}): write the site into a new \
                 or empty folder, or into one kidiom wrote",
                dir.display(),
                shown.join(", "),
                if n > 3 { format!(" and {} more", n - 3) } else { String::new() }
            );
        }
    }
    std::fs::create_dir_all(&pages_dir).with_context(|| format!("creating {}", pages_dir.display()))?;
    Ok(before.unwrap_or_default())
}

/// The page names a marker lists: `c/<name>.html` lines, nothing else.
fn listed_pages(text: &str) -> Vec<String> {
    text.lines()
        .skip(1)
        .filter(|l| l.strip_prefix("c/").is_some_and(|f| f.ends_with(".html") && is_page_file(f)))
        .map(str::to_string)
        .collect()
}

/// A file name `page_name` could have made (no folder, no leading dot).
fn is_page_file(f: &str) -> bool {
    !f.is_empty() && !f.starts_with('.') && f.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

fn write_marker(dir: &Path, pages: &[String]) -> Result<()> {
    let mut text = format!("{MARKER_HEAD}\n");
    for p in pages {
        text.push_str(p);
        text.push('\n');
    }
    write(&dir.join(MARKER), &text)
}

/// Writes `path` whole or not at all: a temporary file beside it, renamed
/// over it (removed again when anything fails).
fn write(path: &Path, text: &str) -> Result<()> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_file_name(format!(".kidiom-{}-{n}.tmp", std::process::id()));
    let done = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        std::io::Write::write_all(&mut f, text.as_bytes())?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done.with_context(|| format!("writing {}", path.display()))
}

/// Removes the pages an earlier run wrote (`before`) that this run did not
/// (`now`); files kidiom did not write are never touched.
fn remove_stale(pages_dir: &Path, before: &[String], now: &[String]) -> Result<usize> {
    let keep: std::collections::HashSet<&str> = now.iter().map(String::as_str).collect();
    let mut removed = 0;
    for name in before.iter().filter(|n| !keep.contains(n.as_str())) {
        let Some(file) = name.strip_prefix("c/") else { continue };
        let path = pages_dir.join(file);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() => {
                std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
                removed += 1;
            }
            _ => {}
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

    #[test]
    fn a_marker_lists_only_page_files() {
        let text = format!(
            "{MARKER_HEAD}\nc/a-0123abcd.html\nc/../x.html\n../c/y.html\nc/.hidden.html\nc/sub/z.html\nc/b.txt\n"
        );
        assert_eq!(listed_pages(&text), ["c/a-0123abcd.html"]);
        assert!(listed_pages(MARKER_HEAD).is_empty(), "a marker of an earlier version lists nothing");
    }
}
