//! Atomic writes: a temporary file in the target's directory, renamed
//! over the target, with the target's permissions.

use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

/// Checks that `path` can be replaced: a regular file (not a symlink), not
/// read-only.
pub fn check_writable(path: &Path) -> Result<()> {
    let io = |cause| Error::Io { path: path.to_path_buf(), cause };
    let meta = std::fs::symlink_metadata(path).map_err(io)?;
    if meta.file_type().is_symlink() {
        return Err(Error::BadTarget { path: path.to_path_buf(), reason: "is a symlink; not written through".into() });
    }
    if !meta.is_file() {
        return Err(Error::BadTarget { path: path.to_path_buf(), reason: "not a regular file".into() });
    }
    if meta.permissions().readonly() {
        return Err(Error::ReadOnly { path: path.to_path_buf() });
    }
    Ok(())
}

/// Replaces `path`'s contents with `bytes` atomically: readers see the old
/// file or the new one, never a mix, and a failure leaves the old file.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    check_writable(path)?;
    let io = |cause| Error::Io { path: path.to_path_buf(), cause };
    let perms = std::fs::metadata(path).map_err(io)?.permissions();
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new().prefix(".kidiom-").suffix(".tmp").tempfile_in(dir).map_err(io)?;
    tmp.write_all(bytes).map_err(io)?;
    tmp.as_file().sync_all().map_err(io)?;
    std::fs::set_permissions(tmp.path(), perms).map_err(io)?;
    tmp.persist(path).map_err(|e| io(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_atomically_keeping_the_mode() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k.py");
        std::fs::write(&p, "old").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o750)).unwrap();
        }
        atomic_write(&p, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o750);
        }
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file left");
    }

    #[test]
    fn refuses_read_only_files_and_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ro.py");
        std::fs::write(&p, "old").unwrap();
        let mut perms = std::fs::metadata(&p).unwrap().permissions();
        perms.set_readonly(true);
        std::fs::set_permissions(&p, perms).unwrap();
        assert!(matches!(atomic_write(&p, b"new"), Err(Error::ReadOnly { .. })));
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old");
        #[cfg(unix)]
        {
            let l = dir.path().join("link.py");
            std::os::unix::fs::symlink(&p, &l).unwrap();
            assert!(matches!(atomic_write(&l, b"new"), Err(Error::BadTarget { .. })));
        }
    }
}
