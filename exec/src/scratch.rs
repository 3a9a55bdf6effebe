//! Where kidiom and every program it starts keep their scratch files.
//!
//! A validation copies kernel trees, and the harness passes every array of
//! every kernel call through a file of its own: thousands of small files per
//! candidate. On a disk's journal creating one costs milliseconds (about 5 ms
//! of wall and 0.7 ms of kernel CPU on the 2-core CI VM's ext4), on a
//! RAM-backed tmpfs 0.1 ms. So unless `TMPDIR` says where, scratch goes to a
//! directory of this user's own under `/dev/shm` when that is a tmpfs with
//! room ([`MIN_FREE`]); anything doubtful about it (a link, another owner,
//! open permissions) and the system's default stays.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The RAM-backed filesystem where Linux has one.
pub const SHARED_MEMORY: &str = "/dev/shm";

/// The least room a RAM-backed filesystem must have to hold scratch: the
/// host bench's arrays reach hundreds of MiB, and a container's default
/// 64 MiB `/dev/shm` would fill.
pub const MIN_FREE: u64 = 2 << 30;

/// `statfs`'s `f_type` of a tmpfs (linux/magic.h).
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// Points `TMPDIR` at a private directory under [`SHARED_MEMORY`] when
/// `TMPDIR` is unset and that filesystem is a tmpfs with [`MIN_FREE`] free;
/// returns the directory chosen, if any. Rust's `tempfile`, Python's
/// `tempfile` and the compilers kidiom runs all read `TMPDIR`.
///
/// # Safety
///
/// Sets an environment variable: call it first thing in `main`, before any
/// thread starts.
pub unsafe fn prefer_memory_for_scratch() -> Option<PathBuf> {
    if std::env::var_os("TMPDIR").is_some_and(|t| !t.is_empty()) {
        return None;
    }
    let base = Path::new(SHARED_MEMORY);
    let (is_tmpfs, free) = filesystem(base)?;
    if !is_tmpfs || free < MIN_FREE {
        return None;
    }
    // SAFETY: getuid cannot fail and touches no memory of ours.
    let uid = unsafe { libc::getuid() };
    let dir = private_dir(base, uid)?;
    // SAFETY: the caller guarantees no other thread is running (see above).
    unsafe { std::env::set_var("TMPDIR", &dir) };
    Some(dir)
}

/// Whether the filesystem holding `path` is a tmpfs, and the bytes free to
/// an unprivileged user on it.
fn filesystem(path: &Path) -> Option<(bool, u64)> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: zeroed is a valid statfs; `c` is a NUL-terminated path that
    // outlives the call, and `st` is written by it only.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // the field types differ between libcs
    let (kind, avail, bsize) = (st.f_type as i64, st.f_bavail as u64, st.f_bsize as u64);
    Some((kind == TMPFS_MAGIC, avail.saturating_mul(bsize)))
}

/// `base/kidiom-<uid>`, made with mode 0700 if it is not there; `None`
/// unless it is a real directory (not a link) owned by `uid` that no one
/// else may enter: in a directory everyone may write, another user could
/// have made it first.
fn private_dir(base: &Path, uid: u32) -> Option<PathBuf> {
    let dir = base.join(format!("kidiom-{uid}"));
    if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(&dir)
        && e.kind() != std::io::ErrorKind::AlreadyExists
    {
        return None;
    }
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    let private = meta.is_dir() && meta.uid() == uid && meta.permissions().mode() & 0o077 == 0;
    private.then_some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me(dir: &Path) -> u32 {
        std::fs::metadata(dir).unwrap().uid()
    }

    #[test]
    fn a_private_directory_is_made_once_and_kept() {
        let base = tempfile::tempdir().unwrap();
        let uid = me(base.path());
        let dir = private_dir(base.path(), uid).unwrap();
        assert_eq!(dir, base.path().join(format!("kidiom-{uid}")));
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        std::fs::write(dir.join("kept"), "x").unwrap();
        assert_eq!(private_dir(base.path(), uid), Some(dir.clone()));
        assert!(dir.join("kept").exists());
    }

    #[test]
    fn a_directory_others_made_or_may_enter_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let uid = me(base.path());
        // a link planted where the directory goes, pointing at a directory of ours
        let target = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(target.path(), base.path().join(format!("kidiom-{uid}"))).unwrap();
        assert_eq!(private_dir(base.path(), uid), None);
        // open to others
        let open = tempfile::tempdir().unwrap();
        let dir = open.path().join(format!("kidiom-{uid}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(private_dir(open.path(), uid), None);
        // another owner
        assert_eq!(private_dir(base.path(), uid.wrapping_add(1)), None);
        // a file where the directory goes
        let file = tempfile::tempdir().unwrap();
        std::fs::write(file.path().join(format!("kidiom-{uid}")), "").unwrap();
        assert_eq!(private_dir(file.path(), uid), None);
    }

    #[test]
    fn the_filesystem_says_whether_it_is_a_tmpfs() {
        // /proc is never a tmpfs; a missing path has no filesystem
        assert_eq!(filesystem(Path::new("/proc")).map(|f| f.0), Some(false));
        assert_eq!(filesystem(Path::new("/nonexistent/kidiom")), None);
        if let Some((true, free)) = filesystem(Path::new(SHARED_MEMORY)) {
            assert!(free > 0);
        }
    }
}
