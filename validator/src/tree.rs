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

/// The file in a validation tree that names the root its manifests were copied from.
pub(crate) const SOURCE_ROOT_MARKER: &str = ".kidiom-source-root";

/// Files copied from the directory of a manifest outside the harness tree:
/// what a kernel, its contract and its relations are made of (and may import).
const CONTRACT_DIR_FILES: &[&str] = &["py", "toml", "cu", "cuh", "h", "hpp", "cpp", "cc", "cxx", "c", "json"];

/// A validation's tree at `tree`: the harness directory's `kernels/` (the
/// harness and the contracts kidiom ships; the root's own when it holds the
/// harness), and, at their paths relative to the root, the directories of
/// the manifests that lie elsewhere, their source-like files only, not
/// their subdirectories. The harness runs in `tree`; those manifests are
/// passed as `--manifest <tree>/<path>`.
pub(crate) fn baseline_tree(v: &crate::validator::Validator, tree: &Path) -> Result<()> {
    let dir = &v.kernels.dir;
    copy_tree(&v.harness_root.join(dir), &tree.join(dir))?;
    // where the copied manifests came from: a manifest's `[python] path` (the kernel's own project,
    // which is not copied) is read from there (kernels/harness/manifest.py)
    let root = std::fs::canonicalize(&v.opts.root).unwrap_or_else(|_| v.opts.root.clone());
    let marker = tree.join(SOURCE_ROOT_MARKER);
    std::fs::write(&marker, root.to_string_lossy().as_bytes()).map_err(|e| Error::io(&marker, e))?;
    for rel in v.kernels.outside_dirs() {
        let from = v.opts.root.join(&rel);
        let to = tree.join(&rel);
        std::fs::create_dir_all(&to).map_err(|e| Error::io(&to, e))?;
        let entries = std::fs::read_dir(&from).map_err(|e| Error::io(&from, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&from, e))?;
            let path = entry.path();
            let wanted = path.extension().and_then(|x| x.to_str()).is_some_and(|x| CONTRACT_DIR_FILES.contains(&x));
            // regular files only: a symlink is not followed out of the user's tree
            if !wanted || !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let dst = to.join(entry.file_name());
            std::fs::copy(&path, &dst).map_err(|e| Error::io(&path, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_tree_is_validated_beside_the_harness_it_does_not_hold() {
        let d = tempfile::tempdir().unwrap();
        let (root, harness) = (d.path().join("user"), d.path().join("kidiom"));
        let write = |p: std::path::PathBuf, text: &str| {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write(harness.join("kernels/harness/__main__.py"), "");
        write(root.join("ops/rmsnorm.py"), "kernel\n");
        write(root.join("ops/rmsnorm_contract.py"), "ARGS = []\n");
        write(root.join("ops/weights.bin"), "data");
        write(root.join("ops/sub/other.py"), "x\n");
        let manifest = "format = 2\nname = \"rmsnorm\"\nlanguage = \"triton\"\nsource = \"rmsnorm.py\"\n\
                        entry = \"k\"\nlauncher = \"rmsnorm\"\ncontract = \"rmsnorm_contract.py\"\n\
                        [tolerance]\nrel_l2 = 1e-5\nslice_rel_l2 = 1e-4\nmax_abs_rel = 1e-4\n\
                        [shapes]\ncpu = [{ N = 4 }]\ngpu = []\nbench = { N = 8 }\n\
                        [floor]\nbytes = \"4 * N\"\nflops = \"N\"\n";
        write(root.join("ops/rmsnorm.toml"), manifest);
        let v = crate::ValidatorBuilder::new(&root)
            .harness(Some(harness.clone()))
            .targets(vec!["ops".into()])
            .build()
            .unwrap();
        assert_eq!(v.harness_root(), harness);
        let m = v.kernels().named("rmsnorm").unwrap();
        assert!(!m.named, "a user's manifest goes by its path");
        let tree = d.path().join("tree");
        baseline_tree(&v, &tree).unwrap();
        assert!(tree.join("kernels/harness/__main__.py").is_file(), "the harness from kidiom's tree");
        for f in ["ops/rmsnorm.py", "ops/rmsnorm.toml", "ops/rmsnorm_contract.py"] {
            assert!(tree.join(f).is_file(), "{f}");
        }
        assert!(!tree.join("ops/weights.bin").exists(), "source-like files only");
        assert!(!tree.join("ops/sub").exists(), "not the subdirectories");
        assert_eq!(m.harness_arg(&tree).1, tree.join("ops/rmsnorm.toml").to_string_lossy());
        // the root they came from, for what a manifest reads beside them (`[python] path`)
        let named = std::fs::read_to_string(tree.join(SOURCE_ROOT_MARKER)).unwrap();
        assert_eq!(std::path::PathBuf::from(named), std::fs::canonicalize(&root).unwrap());
    }
}
