use git2::{ObjectType, Oid, Repository, TreeWalkMode, TreeWalkResult};
use kidiom_syntax::Skip;

use super::{CorpusFile, FileFilter, Listing, Location};
use crate::error::{Error, Result};

/// Opens a repository by path, or by URL through a bare clone in the cache,
/// and resolves `rev` to a commit id.
pub(super) fn open(source: &str, rev: Option<&str>) -> Result<(Repository, String)> {
    let repo = if super::looks_like_url(source) {
        open_url(source)?
    } else {
        Repository::open(source).map_err(|e| Error::git(source, e.message()))?
    };
    let rev = rev.unwrap_or("HEAD");
    let obj =
        repo.revparse_single(rev).map_err(|e| Error::git(source, format!("revision {rev:?}: {}", e.message())))?;
    let commit = obj
        .peel_to_commit()
        .map_err(|e| Error::git(source, format!("revision {rev:?} is not a commit: {}", e.message())))?;
    let id = commit.id().to_string();
    drop(obj);
    drop(commit);
    Ok((repo, id))
}

/// How long a clone may take before the corpus is reported unavailable.
const CLONE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// The cache location of a URL's bare clone: `<cache>/git/<owner>+<name>`.
pub fn mirror_path(url: &str) -> std::path::PathBuf {
    let trimmed = url.trim_end_matches('/').trim_end_matches(".git");
    let mut parts = trimmed.rsplit(['/', ':']);
    let name = parts.next().unwrap_or("repo");
    let owner = parts.next().unwrap_or("upstream");
    super::cache_dir().join("git").join(format!("{owner}+{name}"))
}

fn open_url(url: &str) -> Result<Repository> {
    let dir = mirror_path(url);
    if let Ok(r) = Repository::open(&dir) {
        return Ok(r);
    }
    // git2 is built without network transports; the git CLI brings its own.
    // A machine that cannot reach the host must not hang the run: give up after a while.
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    let partial = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    let args = ["clone", "--bare", "--quiet", url].map(String::from);
    let args = [&args[..], &[partial.to_string_lossy().into_owned()]].concat();
    let env = [("GIT_TERMINAL_PROMPT".to_string(), "0".to_string())];
    let git = std::path::Path::new("git");
    let failure = match kidiom_exec::run_with_deadline(git, &args, std::path::Path::new("."), &env, CLONE_TIMEOUT) {
        Ok(o) if o.code == Some(0) => None,
        Ok(o) if o.timed_out => Some(format!("no answer in {} s", CLONE_TIMEOUT.as_secs())),
        Ok(o) => Some(o.stderr_tail.lines().last().unwrap_or("").chars().take(200).collect::<String>()),
        Err(kidiom_exec::Error::Spawn { cause, .. }) => {
            return Err(Error::git(url, format!("cannot run git to clone: {cause}")));
        }
        Err(e) => return Err(Error::git(url, format!("cannot run git to clone: {e}"))),
    };
    if let Some(why) = failure {
        let _ = std::fs::remove_dir_all(&partial);
        return Err(Error::git(
            url,
            format!("clone failed ({why}); put a clone at {} or point `source` at a local path", dir.display()),
        ));
    }
    std::fs::rename(&partial, &dir).map_err(|e| Error::io(&dir, e))?;
    Repository::open(&dir).map_err(|e| Error::git(url, e.message()))
}

pub(super) fn list(repo: &Repository, commit: &str, filter: &FileFilter) -> Result<Listing> {
    let oid = Oid::from_str(commit).map_err(|e| Error::git(commit, e.message()))?;
    let tree =
        repo.find_commit(oid).and_then(|c| c.tree()).map_err(|e| Error::git(repo.path().display(), e.message()))?;
    let mut files = Vec::new();
    let mut skips = Vec::new();
    let odb = repo.odb().map_err(|e| Error::git(repo.path().display(), e.message()))?;
    tree.walk(TreeWalkMode::PreOrder, |dir, entry| {
        if entry.kind() != Some(ObjectType::Blob) {
            return TreeWalkResult::Ok;
        }
        let Some(name) = entry.name() else { return TreeWalkResult::Ok };
        let path = format!("{dir}{name}");
        let Some(lang) = filter.keep(&path) else { return TreeWalkResult::Ok };
        if entry.filemode() == 0o120000 {
            return TreeWalkResult::Ok; // symlinks point elsewhere in the tree or outside it
        }
        match odb.read_header(entry.id()) {
            Ok((size, _)) => files.push(CorpusFile {
                path,
                lang,
                size: size as u64,
                blob: Some(entry.id().to_string()),
                stat: None,
                location: Location::Blob(entry.id()),
            }),
            Err(_) => skips.push((path, Skip::MissingObject)),
        }
        TreeWalkResult::Ok
    })
    .map_err(|e| Error::git(repo.path().display(), e.message()))?;
    Ok(Listing { files, skipped: skips })
}

pub(super) fn read(repo: &Repository, oid: Oid) -> std::result::Result<Vec<u8>, Skip> {
    match repo.find_blob(oid) {
        Ok(b) => Ok(b.content().to_vec()),
        Err(_) => Err(Skip::MissingObject),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_syntax_crates_blob_ids_are_git2s() {
        // kidiom_syntax hashes without git2; both name the same content the same way.
        for bytes in [&b""[..], b"hello\n", b"\0\xff binary", &[b'x'; 70_000]] {
            let git = Oid::hash_object(ObjectType::Blob, bytes).unwrap().to_string();
            assert_eq!(kidiom_syntax::blob_id(bytes), git);
        }
    }
}
