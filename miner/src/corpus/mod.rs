//! Corpora: where source files come from.
//!
//! A corpus is described by a [`Manifest`] (TOML under `corpora/`) and
//! opened into a [`Corpus`] that lists [`CorpusFile`]s. Listing is cheap:
//! for git corpora the blob id comes from the tree, for directories from a
//! stat cache the caller supplies, so unchanged files are never read.
//!
//! Git and PyPI corpora need the `repositories` feature (git2, tar, zip,
//! flate2); without it only directories open, and the others are an error.

mod dir;
#[cfg(feature = "repositories")]
mod git;
#[cfg(feature = "repositories")]
mod pypi;

use std::path::{Path, PathBuf};

use globset::{Glob, GlobSet, GlobSetBuilder};
use kidiom_syntax::Lang;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub use dir::StatKey;
#[cfg(feature = "repositories")]
pub use git::mirror_path;

/// Why a git or PyPI corpus does not open in a build without the `repositories` feature.
#[cfg(not(feature = "repositories"))]
const NO_REPOSITORIES: &str = "kidiom-miner was built without the `repositories` feature";

/// Where a corpus comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[derive(strum::Display, strum::EnumString, strum::IntoStaticStr, strum::VariantArray)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum SourceKind {
    /// A git repository (local path or URL) at a revision; files are read
    /// from the object database, never checked out.
    Git,
    /// A plain directory.
    Dir,
    /// A PyPI source distribution `name==version`, fetched once into a cache.
    Pypi,
}

kidiom_syntax::named_enum!(SourceKind);

/// A corpus manifest: which upstream, which revision, which files.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The corpus name used in the catalog.
    pub name: String,
    /// git, dir or pypi.
    pub kind: SourceKind,
    /// git: a path or URL; dir: a path; pypi: `name==version`.
    pub source: String,
    /// git only: commit, tag or branch (default `HEAD`).
    #[serde(default)]
    pub revision: Option<String>,
    /// Globs of files to read (default: every file of a known language).
    #[serde(default)]
    pub include: Vec<String>,
    /// Globs of files to leave out.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Free text shown in listings.
    #[serde(default)]
    pub description: Option<String>,
    /// Another manifest (path relative to this one) to use when this corpus
    /// cannot be opened, e.g. the PyPI sdist of a repository not cloned here.
    #[serde(default)]
    pub fallback: Option<String>,
}

impl Manifest {
    /// Reads a manifest file; relative local sources are resolved against its folder.
    pub fn load(path: &Path) -> Result<Manifest> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let mut m: Manifest = toml::from_str(&text)
            .map_err(|e| Error::Manifest { path: path.to_path_buf(), message: e.message().to_string() })?;
        if m.name.trim().is_empty() {
            return Err(Error::Manifest { path: path.into(), message: "empty name".into() });
        }
        let base = path.parent().unwrap_or(Path::new("."));
        if m.kind != SourceKind::Pypi && !looks_like_url(&m.source) {
            m.source = resolve_local(base, &m.source).to_string_lossy().into_owned();
        }
        if let Some(f) = &m.fallback {
            m.fallback = Some(resolve_local(base, f).to_string_lossy().into_owned());
        }
        Ok(m)
    }

    /// A manifest for a plain path: a git repository (at `rev`, default HEAD) or a directory.
    pub fn for_path(path: &Path, name: Option<&str>, rev: Option<&str>) -> Result<Manifest> {
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        if !meta.is_dir() {
            return Err(Error::io(
                path,
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a directory or manifest"),
            ));
        }
        let abs = std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?;
        let default_name = abs
            .file_name()
            .map(|n| n.to_string_lossy().trim_end_matches(".git").to_string())
            .unwrap_or_else(|| "corpus".to_string());
        let is_git = is_bare_repository(&abs) || abs.join(".git").exists();
        Ok(Manifest {
            name: name.map(str::to_string).unwrap_or(default_name),
            kind: if is_git { SourceKind::Git } else { SourceKind::Dir },
            source: abs.to_string_lossy().into_owned(),
            revision: if is_git { Some(rev.unwrap_or("HEAD").to_string()) } else { None },
            include: Vec::new(),
            exclude: Vec::new(),
            description: None,
            fallback: None,
        })
    }
}

#[cfg(feature = "repositories")]
fn is_bare_repository(path: &Path) -> bool {
    git2::Repository::open_bare(path).is_ok()
}

/// Without git2, the layout of a bare repository (a git corpus that then
/// does not open, rather than a directory mined for nothing).
#[cfg(not(feature = "repositories"))]
fn is_bare_repository(path: &Path) -> bool {
    path.join("HEAD").is_file() && path.join("objects").is_dir() && path.join("refs").is_dir()
}

fn looks_like_url(s: &str) -> bool {
    s.contains("://") || s.starts_with("git@")
}

fn resolve_local(base: &Path, s: &str) -> PathBuf {
    if let Some(rest) = s.strip_prefix("~/")
        && let Some(home) = std::env::var_os("HOME")
    {
        return PathBuf::from(home).join(rest);
    }
    let p = Path::new(s);
    if p.is_absolute() { p.to_path_buf() } else { base.join(p) }
}

/// Where kidiom keeps fetched corpora: `$KIDIOM_CACHE`, else
/// `$XDG_CACHE_HOME/kidiom`, else `~/.cache/kidiom`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("KIDIOM_CACHE") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("kidiom");
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".cache").join("kidiom"),
        None => std::env::temp_dir().join("kidiom-cache"),
    }
}

/// One file of a corpus, listed but not yet read.
#[derive(Debug, Clone)]
pub struct CorpusFile {
    /// Path relative to the corpus root, with `/` separators.
    pub path: String,
    /// Language by extension.
    pub lang: Lang,
    /// Size in bytes.
    pub size: u64,
    /// The git blob id, when known without reading (git corpora).
    pub blob: Option<String>,
    /// Size and modification time, for directory corpora's stat cache.
    pub stat: Option<StatKey>,
    location: Location,
}

#[derive(Debug, Clone)]
enum Location {
    #[cfg(feature = "repositories")]
    Blob(git2::Oid),
    Disk(PathBuf),
}

impl CorpusFile {
    /// Reads a file that lives on disk (dir and pypi corpora) without the
    /// corpus handle, so it can happen on any thread; `None` for git blobs.
    pub fn read_from_disk(&self) -> Option<std::result::Result<Vec<u8>, kidiom_syntax::Skip>> {
        match &self.location {
            Location::Disk(p) => Some(dir::read(p)),
            #[cfg(feature = "repositories")]
            Location::Blob(_) => None,
        }
    }
}

/// The files of a corpus, and the entries that could not be listed.
#[derive(Debug, Default)]
pub struct Listing {
    /// Files to read.
    pub files: Vec<CorpusFile>,
    /// Paths that could not be listed, with why.
    pub skipped: Vec<(String, kidiom_syntax::Skip)>,
}

/// An opened corpus.
pub struct Corpus {
    /// The manifest it was opened from.
    pub manifest: Manifest,
    /// The resolved revision: a commit id for git, the version for pypi, empty for dir.
    pub revision: String,
    /// The directory files are read from (dir and pypi corpora).
    pub root: Option<PathBuf>,
    #[cfg(feature = "repositories")]
    repo: Option<git2::Repository>,
    filter: FileFilter,
}

impl std::fmt::Debug for Corpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Corpus").field("name", &self.manifest.name).field("revision", &self.revision).finish()
    }
}

/// Include/exclude globs plus the language filter.
#[derive(Debug, Clone)]
pub(crate) struct FileFilter {
    include: Option<GlobSet>,
    exclude: GlobSet,
}

impl FileFilter {
    pub(crate) fn new(include: &[String], exclude: &[String]) -> Result<FileFilter> {
        Ok(FileFilter {
            include: if include.is_empty() { None } else { Some(build_globs(include)?) },
            exclude: build_globs(exclude)?,
        })
    }

    /// The file's language when the filter keeps it.
    pub(crate) fn keep(&self, path: &str) -> Option<Lang> {
        let lang = Lang::from_path(Path::new(path))?;
        if let Some(inc) = &self.include
            && !inc.is_match(path)
        {
            return None;
        }
        if self.exclude.is_match(path) {
            return None;
        }
        Some(lang)
    }
}

fn build_globs(globs: &[String]) -> Result<GlobSet> {
    let mut b = GlobSetBuilder::new();
    for g in globs {
        let glob = Glob::new(g).map_err(|e| Error::Glob { glob: g.clone(), message: e.to_string() })?;
        b.add(glob);
    }
    b.build().map_err(|e| Error::Glob { glob: globs.join(","), message: e.to_string() })
}

impl Corpus {
    /// Opens a corpus: resolves the git revision, or fetches and unpacks a
    /// source distribution into the cache on first use.
    pub fn open(manifest: Manifest) -> Result<Corpus> {
        let filter = FileFilter::new(&manifest.include, &manifest.exclude)?;
        match manifest.kind {
            #[cfg(feature = "repositories")]
            SourceKind::Git => {
                let (repo, commit) = git::open(&manifest.source, manifest.revision.as_deref())?;
                Ok(Corpus { manifest, revision: commit, root: None, repo: Some(repo), filter })
            }
            #[cfg(not(feature = "repositories"))]
            SourceKind::Git => Err(Error::git(&manifest.source, NO_REPOSITORIES)),
            SourceKind::Dir => {
                let root = PathBuf::from(&manifest.source);
                if !root.is_dir() {
                    return Err(Error::io(&root, std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory")));
                }
                Ok(Corpus {
                    manifest,
                    revision: String::new(),
                    root: Some(root),
                    #[cfg(feature = "repositories")]
                    repo: None,
                    filter,
                })
            }
            #[cfg(feature = "repositories")]
            SourceKind::Pypi => {
                let (root, version) = pypi::fetch(&manifest.source, &cache_dir())?;
                Ok(Corpus { manifest, revision: version, root: Some(root), repo: None, filter })
            }
            #[cfg(not(feature = "repositories"))]
            SourceKind::Pypi => Err(Error::Pypi { spec: manifest.source, message: NO_REPOSITORIES.into() }),
        }
    }

    /// Lists the corpus's files of known languages that pass the globs.
    /// Entries that cannot be listed (unreadable directories) come back as skips.
    pub fn files(&self) -> Result<Listing> {
        #[cfg(feature = "repositories")]
        if let Some(repo) = &self.repo {
            return git::list(repo, &self.revision, &self.filter);
        }
        match &self.root {
            Some(root) => Ok(dir::list(root, &self.filter)),
            None => Ok(Listing::default()),
        }
    }

    /// Reads one file's bytes.
    pub fn read(&self, file: &CorpusFile) -> std::result::Result<Vec<u8>, kidiom_syntax::Skip> {
        match &file.location {
            Location::Disk(p) => dir::read(p),
            #[cfg(feature = "repositories")]
            Location::Blob(oid) => match &self.repo {
                Some(repo) => git::read(repo, *oid),
                None => Err(kidiom_syntax::Skip::MissingObject),
            },
        }
    }

    /// The git repository behind a git corpus.
    #[cfg(feature = "repositories")]
    pub fn repository(&self) -> Option<&git2::Repository> {
        self.repo.as_ref()
    }
}
