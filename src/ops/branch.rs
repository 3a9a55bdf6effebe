//! The review branch: one commit per accepted rewrite, made with git2
//! without touching the working tree, the index or `HEAD`.
//!
//! The branch (`kidiom/review` by default) starts at `HEAD` the first time.
//! Each accepted candidate's diff is applied to the branch tip's tree
//! (`git apply` semantics: the context must match) and committed on top,
//! so accepting two rewrites of one file stacks them. The user's checkout
//! is never modified; they merge or cherry-pick the branch when they want
//! the rewrites.

use std::path::{Path, PathBuf};

use git2::{Repository, Status};

/// Why the review branch could not take a commit, or git could not be read.
/// Messages are lowercase and one line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BranchError {
    /// A git operation failed.
    #[error("git: {context}: {cause}")]
    Git {
        /// What was being done.
        context: String,
        /// What libgit2 said (in the message, so not also a `source()`).
        cause: git2::Error,
    },
    /// The review branch cannot take the commit.
    #[error("review branch {branch}: {reason}")]
    Branch {
        /// The branch name.
        branch: String,
        /// Why.
        reason: String,
    },
}

type Result<T, E = BranchError> = std::result::Result<T, E>;

fn git(context: impl Into<String>) -> impl FnOnce(git2::Error) -> BranchError {
    let context = context.into();
    move |cause| BranchError::Git { context, cause }
}

/// The default review branch.
pub const DEFAULT_BRANCH: &str = "kidiom/review";

/// The working directory of the repository holding `path`, if any.
pub fn repo_root(path: &Path) -> Option<PathBuf> {
    let repo = Repository::discover(path).ok()?;
    repo.workdir().map(Path::to_path_buf)
}

/// The git status of `rel` (relative to the repository at `root`) in
/// words, or `None` when it is committed and unchanged.
pub fn uncommitted(root: &Path, rel: &Path) -> Result<Option<String>> {
    let repo = Repository::open(root).map_err(git(format!("opening {}", root.display())))?;
    let st = repo.status_file(rel).map_err(git(format!("status of {}", rel.display())))?;
    if st.is_empty() || st == Status::CURRENT {
        return Ok(None);
    }
    let mut words = Vec::new();
    for (flag, word) in [
        (Status::WT_NEW, "untracked"),
        (Status::INDEX_NEW, "added"),
        (Status::WT_MODIFIED, "modified"),
        (Status::INDEX_MODIFIED, "staged"),
        (Status::WT_DELETED, "deleted"),
        (Status::WT_RENAMED | Status::INDEX_RENAMED, "renamed"),
        (Status::WT_TYPECHANGE | Status::INDEX_TYPECHANGE, "type changed"),
        (Status::CONFLICTED, "conflicted"),
        (Status::IGNORED, "ignored"),
    ] {
        if st.intersects(flag) {
            words.push(word);
        }
    }
    Ok(Some(if words.is_empty() { format!("{st:?}") } else { words.join(", ") }))
}

/// One rewrite to commit on the review branch.
#[derive(Debug, Clone)]
pub struct ReviewCommit<'a> {
    /// The branch name (without `refs/heads/`).
    pub branch: &'a str,
    /// The unified diff, paths relative to the repository root.
    pub diff: &'a str,
    /// The commit message (subject, body and trailers).
    pub message: &'a str,
}

/// Commits `c` on its review branch in the repository at `root` and
/// returns the new commit id. Refuses when the branch is checked out (the
/// user's working tree would silently fall behind) or when the diff does
/// not apply to the branch tip.
pub fn commit_review(root: &Path, c: &ReviewCommit) -> Result<String> {
    let repo = Repository::open(root).map_err(git(format!("opening {}", root.display())))?;
    let refname = format!("refs/heads/{}", c.branch);
    let berr = |reason: String| BranchError::Branch { branch: c.branch.to_string(), reason };
    if git2::Reference::is_valid_name(&refname).not() {
        return Err(berr("not a valid branch name".into()));
    }
    if let Ok(head) = repo.head()
        && head.name() == Some(refname.as_str())
    {
        return Err(berr("is checked out; switch to another branch before accepting".into()));
    }
    let parent = match repo.find_reference(&refname) {
        Ok(r) => r.peel_to_commit().map_err(git(format!("reading {refname}")))?,
        Err(_) => repo
            .head()
            .and_then(|h| h.peel_to_commit())
            .map_err(|_| berr("the repository has no commit to start the branch from".into()))?,
    };
    let tree = parent.tree().map_err(git("reading the branch tree"))?;
    let diff = git2::Diff::from_buffer(c.diff.as_bytes()).map_err(git("parsing the candidate's diff"))?;
    let mut index = repo
        .apply_to_tree(&tree, &diff, None)
        .map_err(|e| berr(format!("the diff does not apply to its tip: {}", e.message())))?;
    let tree_id = index.write_tree_to(&repo).map_err(git("writing the tree"))?;
    let new_tree = repo.find_tree(tree_id).map_err(git("reading the new tree"))?;
    let sig = repo
        .signature()
        .or_else(|_| git2::Signature::now("kidiom", "kidiom@localhost"))
        .map_err(git("making a signature"))?;
    let oid = repo
        .commit(Some(&refname), &sig, &sig, c.message, &new_tree, &[&parent])
        .map_err(git(format!("committing on {refname}")))?;
    Ok(oid.to_string())
}

trait Not {
    fn not(self) -> bool;
}

impl Not for bool {
    fn not(self) -> bool {
        !self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_with(dir: &Path, file: &str, text: &str) -> Repository {
        let repo = Repository::init(dir).unwrap();
        std::fs::write(dir.join(file), text).unwrap();
        let mut idx = repo.index().unwrap();
        idx.add_path(Path::new(file)).unwrap();
        idx.write().unwrap();
        let tree = repo.find_tree(idx.write_tree().unwrap()).unwrap();
        let sig = git2::Signature::now("t", "t@t").unwrap();
        repo.commit(Some("HEAD"), &sig, &sig, "init", &tree, &[]).unwrap();
        drop(tree);
        repo
    }

    #[test]
    fn commits_on_the_branch_without_touching_head_or_worktree() {
        let dir = tempfile::tempdir().unwrap();
        let repo = repo_with(dir.path(), "k.py", "a\nb\n");
        let head_before = repo.head().unwrap().target().unwrap();
        let diff = kidiom_rewriter::unified("k.py", "a\nb\n", "a\nB\n", 3);
        let id =
            commit_review(dir.path(), &ReviewCommit { branch: DEFAULT_BRANCH, diff: &diff, message: "m\n" }).unwrap();
        assert_eq!(repo.head().unwrap().target().unwrap(), head_before);
        assert_eq!(std::fs::read_to_string(dir.path().join("k.py")).unwrap(), "a\nb\n");
        let c = repo.find_commit(git2::Oid::from_str(&id).unwrap()).unwrap();
        let blob = c.tree().unwrap().get_path(Path::new("k.py")).unwrap().to_object(&repo).unwrap();
        assert_eq!(blob.as_blob().unwrap().content(), b"a\nB\n");
        assert_eq!(uncommitted(dir.path(), Path::new("k.py")).unwrap(), None);
        // The same diff does not apply twice.
        assert!(
            commit_review(dir.path(), &ReviewCommit { branch: DEFAULT_BRANCH, diff: &diff, message: "m\n" }).is_err()
        );
        std::fs::write(dir.path().join("k.py"), "x\n").unwrap();
        assert_eq!(uncommitted(dir.path(), Path::new("k.py")).unwrap().as_deref(), Some("modified"));
    }
}
