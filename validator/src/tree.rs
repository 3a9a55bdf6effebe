//! The baseline tree, copied: the contract always comes from a copy of the
//! baseline's `kernels/`, never from the candidate.

use std::path::Path;

use crate::error::{Error, Result};

/// Copies a directory tree, leaving out caches and hidden entries.
pub(crate) fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).map_err(|e| Error::io(to, e))?;
    for src in kidiom_syntax::tree_files(from)? {
        // a symlink is not copied: the baseline tree is regular files
        if !std::fs::symlink_metadata(&src).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let dst = to.join(src.strip_prefix(from).unwrap_or(&src));
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        std::fs::copy(&src, &dst).map_err(|e| Error::io(&src, e))?;
    }
    Ok(())
}
