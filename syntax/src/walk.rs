//! The one directory walk of the workspace: the files under a directory
//! that a person would call its contents, in a stable order.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Whether a directory entry is noise: hidden (`.git`, `.venv`, editor
/// files) or Python's bytecode cache.
fn is_noise(name: &std::ffi::OsStr) -> bool {
    let name = name.to_string_lossy();
    name.starts_with('.') || name == "__pycache__"
}

/// Every regular file under `dir` (and symlinks, which are not followed:
/// the caller decides what a link may point at), hidden entries and
/// `__pycache__` left out, sorted by path. `dir` may itself be a file.
/// An unreadable entry is an error naming it: nothing is silently missed.
pub fn tree_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let walk = walkdir::WalkDir::new(dir)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || !is_noise(e.file_name()));
    let mut files = Vec::new();
    for entry in walk {
        let entry = entry.map_err(|e| {
            let path = e.path().unwrap_or(dir).to_path_buf();
            Error::io(path, e.into_io_error().unwrap_or_else(|| std::io::Error::other("a symlink loop")))
        })?;
        let ft = entry.file_type();
        if ft.is_file() || ft.is_symlink() {
            files.push(entry.into_path());
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_entries_and_bytecode_caches_are_left_out_and_the_order_is_stable() {
        let d = tempfile::tempdir().unwrap();
        for p in ["b/k.py", "a.py", ".git/HEAD", "b/__pycache__/k.pyc", "b/.hidden.py", "c/d/e.cu"] {
            let f = d.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(&f, "x").unwrap();
        }
        let got: Vec<String> = tree_files(d.path())
            .unwrap()
            .iter()
            .map(|p| p.strip_prefix(d.path()).unwrap().to_string_lossy().replace('\\', "/"))
            .collect();
        assert_eq!(got, ["a.py", "b/k.py", "c/d/e.cu"]);
        // a file is its own contents
        assert_eq!(tree_files(&d.path().join("a.py")).unwrap(), [d.path().join("a.py")]);
        // a missing directory is an error that names it
        let e = tree_files(&d.path().join("nope")).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
    }
}
