//! The harness's Python and what the harness says about this machine.
//!
//! One finder for the interpreter ([`find_python`]): the validator runs the
//! harness with it, mining its Ray driver and its look-up of Triton's
//! documentation, the PyPI corpus its `pip download`. One GPU probe
//! ([`gpu_present`]): it asks the harness (`python -m kernels.harness
//! device`), so kidiom's `Device::Auto` and the harness's own `--device
//! auto` cannot disagree.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use crate::process::run_with_deadline;

/// How long the GPU probe may take (it imports torch where there is one).
const PROBE_LIMIT: Duration = Duration::from_secs(120);

/// The directory kidiom started in (see [`remember_start_dir`]).
static START_DIR: OnceLock<PathBuf> = OnceLock::new();

/// Remembers the current directory as the one kidiom started in, before
/// anything changes it (the MCP server enters its root): a relative
/// `$KIDIOM_PYTHON` is relative to it, wherever the harness later runs.
pub fn remember_start_dir() {
    if let Ok(d) = std::env::current_dir() {
        let _ = START_DIR.set(d);
    }
}

/// `python` as the harness's cwd cannot change it: a relative path with a
/// directory in it (`.venv/bin/python`) joined to the directory kidiom
/// started in; a bare name (`python3`) is left to `PATH`.
fn resolve_python(python: PathBuf) -> PathBuf {
    if python.is_absolute() || python.components().count() < 2 {
        return python;
    }
    match START_DIR.get().cloned().or_else(|| std::env::current_dir().ok()) {
        Some(start) => start.join(python),
        None => python,
    }
}

/// The first usable Python: `$KIDIOM_PYTHON` (a relative path is relative
/// to where kidiom started), `<root>/.venv/bin/python`, `python3`.
pub fn find_python(root: &Path) -> PathBuf {
    if let Some(p) = std::env::var_os("KIDIOM_PYTHON").filter(|p| !p.is_empty()) {
        return resolve_python(PathBuf::from(p));
    }
    let venv = root.join(".venv/bin/python");
    if venv.exists() {
        return venv;
    }
    PathBuf::from("python3")
}

/// Whether `dir` holds the harness (`kernels/harness/__main__.py`), the
/// package whose `python -m kernels.harness` commands kidiom runs.
pub fn holds_harness(dir: &Path) -> bool {
    dir.join("kernels/harness/__main__.py").is_file()
}

/// The first of `dirs` that [`holds_harness`], `$KIDIOM_HARNESS` before them
/// all when it is set.
pub fn find_harness<'a>(dirs: impl IntoIterator<Item = &'a Path>) -> Option<PathBuf> {
    let env = std::env::var_os("KIDIOM_HARNESS").filter(|p| !p.is_empty()).map(PathBuf::from);
    env.into_iter().chain(dirs.into_iter().map(Path::to_path_buf)).find(|d| holds_harness(d))
}

/// Whether the harness under `python` in `root` would run kernels on a
/// CUDA GPU here: the answer of `python -m kernels.harness device`, the
/// same test its `--device auto` makes (torch, and `torch.cuda.is_available()`).
/// A harness that cannot answer (no Python, a crash, past the time limit)
/// is a machine without a GPU, as the harness itself decides.
pub fn gpu_present(python: &Path, root: &Path) -> bool {
    let args = ["-m".to_string(), "kernels.harness".to_string(), "device".to_string()];
    let env = [("PYTHONDONTWRITEBYTECODE".to_string(), "1".to_string())];
    let Ok(out) = run_with_deadline(python, &args, root, &env, PROBE_LIMIT) else { return false };
    out.code == Some(0)
        && out.stdout.lines().rev().find_map(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok()).is_some_and(
            |v| v.get("command").and_then(|c| c.as_str()) == Some("device") && v.get("cuda") == Some(&true.into()),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_harness_is_found_by_its_main_module() {
        let d = tempfile::tempdir().unwrap();
        assert!(!holds_harness(d.path()));
        std::fs::create_dir_all(d.path().join("kernels/harness")).unwrap();
        std::fs::write(d.path().join("kernels/harness/__main__.py"), "").unwrap();
        assert!(holds_harness(d.path()));
        let none = tempfile::tempdir().unwrap();
        if std::env::var_os("KIDIOM_HARNESS").is_none() {
            assert_eq!(find_harness([none.path(), d.path()]), Some(d.path().to_path_buf()));
        }
    }

    #[test]
    fn a_relative_python_is_relative_to_where_kidiom_started() {
        remember_start_dir();
        let start = std::env::current_dir().unwrap();
        assert_eq!(resolve_python(PathBuf::from(".venv/bin/python")), start.join(".venv/bin/python"));
        assert_eq!(resolve_python(PathBuf::from("python3")), PathBuf::from("python3"));
        assert_eq!(resolve_python(PathBuf::from("/usr/bin/python3")), PathBuf::from("/usr/bin/python3"));
    }

    #[test]
    fn the_gpu_probe_is_the_harness_answer() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("kernels/harness")).unwrap();
        std::fs::write(d.path().join("kernels/__init__.py"), "").unwrap();
        std::fs::write(d.path().join("kernels/harness/__init__.py"), "").unwrap();
        let main = d.path().join("kernels/harness/__main__.py");
        let python = Path::new("python3");
        std::fs::write(&main, "print('{\"wire\": \"kidiom-harness\", \"command\": \"device\", \"cuda\": true}')\n")
            .unwrap();
        if run_with_deadline(python, &["-c".into(), "pass".into()], d.path(), &[], PROBE_LIMIT).is_err() {
            eprintln!("skipping: no python3");
            return;
        }
        assert!(gpu_present(python, d.path()));
        std::fs::write(&main, "print('{\"command\": \"device\", \"cuda\": false}')\n").unwrap();
        assert!(!gpu_present(python, d.path()));
        std::fs::write(&main, "raise SystemExit(2)\n").unwrap();
        assert!(!gpu_present(python, d.path()));
        assert!(!gpu_present(Path::new("/nonexistent/python"), d.path()));
    }
}
