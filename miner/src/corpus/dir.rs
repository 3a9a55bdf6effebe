use std::path::{Path, PathBuf};

use kidiom_syntax::Skip;
use serde::{Deserialize, Serialize};

use super::{CorpusFile, FileFilter, Listing, Location};

/// Size and modification time of a file on disk: when both match a cached
/// entry, the file's blob id is taken from the cache without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatKey {
    /// Size in bytes.
    pub size: u64,
    /// Modification time in nanoseconds since the epoch.
    pub mtime_ns: i64,
}

pub(super) fn list(root: &Path, filter: &FileFilter) -> Listing {
    let mut files = Vec::new();
    let mut skips = Vec::new();
    let walk = walkdir::WalkDir::new(root).follow_links(false).sort_by_file_name();
    for entry in walk {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                let path = e
                    .path()
                    .and_then(|p| p.strip_prefix(root).ok())
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                skips.push((path, Skip::Unreadable(e.to_string())));
                continue;
            }
        };
        let is_link = entry.file_type().is_symlink();
        if !entry.file_type().is_file() && !is_link {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(root) else { continue };
        let rel = rel.to_string_lossy().replace('\\', "/");
        if rel.split('/').any(|c| c == ".git") {
            continue;
        }
        let Some(lang) = filter.keep(&rel) else { continue };
        // A symlinked source file is read through its link; a dangling one is reported.
        let meta =
            if is_link { std::fs::metadata(entry.path()) } else { entry.metadata().map_err(std::io::Error::other) };
        if is_link && meta.as_ref().is_ok_and(|m| !m.is_file()) {
            continue;
        }
        match meta {
            Ok(meta) => {
                let mtime_ns = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_nanos() as i64)
                    .unwrap_or(0);
                files.push(CorpusFile {
                    path: rel,
                    lang,
                    size: meta.len(),
                    blob: None,
                    stat: Some(StatKey { size: meta.len(), mtime_ns }),
                    location: Location::Disk(entry.path().to_path_buf()),
                });
            }
            Err(e) => skips.push((rel, Skip::Unreadable(e.to_string()))),
        }
    }
    Listing { files, skipped: skips }
}

pub(super) fn read(path: &PathBuf) -> std::result::Result<Vec<u8>, Skip> {
    std::fs::read(path).map_err(|e| Skip::Unreadable(e.to_string()))
}
