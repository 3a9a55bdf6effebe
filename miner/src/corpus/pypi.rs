//! Source distributions from PyPI, fetched with the standard client.
//!
//! SGLang's repository is over 1 GB; its sdist is a few MB. We ask
//! `python3 -m pip download --no-binary :all:` for the sdist once, unpack it
//! under the cache and reuse the unpacked tree on every later run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};

/// How long `pip download` may take before the corpus is reported unavailable.
const PIP_TIMEOUT: Duration = Duration::from_secs(600);

/// Fetches `name==version` (once) and returns the unpacked root and the version.
pub(super) fn fetch(spec: &str, cache: &Path) -> Result<(PathBuf, String)> {
    let (name, version) = spec
        .split_once("==")
        .map(|(n, v)| (n.trim(), v.trim()))
        .filter(|(n, v)| !n.is_empty() && !v.is_empty())
        .ok_or_else(|| Error::Pypi { spec: spec.into(), message: "expected name==version".into() })?;
    let base = cache.join("pypi").join(format!("{name}-{version}"));
    let unpacked = base.join("src");
    let stamp = base.join(".complete");
    if stamp.exists() {
        return Ok((single_root(&unpacked), version.to_string()));
    }
    let dl = base.join("download");
    std::fs::create_dir_all(&dl).map_err(|e| Error::io(&dl, e))?;
    // the Python the harness and the rest of kidiom use
    let python = kidiom_exec::find_python(Path::new("."));
    let mut args =
        ["-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:", "--dest"].map(String::from).to_vec();
    args.extend([dl.to_string_lossy().into_owned(), format!("{name}=={version}")]);
    let pypi = |message: String| Error::Pypi { spec: spec.into(), message };
    match kidiom_exec::run(&python, &args, Path::new("."), &[], PIP_TIMEOUT) {
        Ok(_) => {}
        Err(kidiom_exec::Error::Spawn { cause, .. }) => {
            return Err(pypi(format!("cannot run {}: {cause}", python.display())));
        }
        Err(kidiom_exec::Error::Command(e)) if e.timed_out() => {
            return Err(pypi(format!("pip download: no answer in {} s", PIP_TIMEOUT.as_secs())));
        }
        Err(kidiom_exec::Error::Command(e)) => {
            let tail: Vec<&str> = e.stderr_tail.lines().rev().take(3).collect();
            let said = tail.into_iter().rev().collect::<Vec<_>>().join(" | ");
            return Err(pypi(format!("pip download failed: {said}")));
        }
        Err(e) => return Err(pypi(e.to_string())),
    }
    let archive = std::fs::read_dir(&dl)
        .map_err(|e| Error::io(&dl, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            let n = p.to_string_lossy();
            n.ends_with(".tar.gz") || n.ends_with(".zip")
        })
        .ok_or_else(|| Error::Pypi { spec: spec.into(), message: "pip left no .tar.gz or .zip".into() })?;
    // Unpack next to the final place, then rename: a killed run leaves no half tree.
    let tmp = base.join("src.partial");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    unpack(&archive, &tmp).map_err(|m| Error::Pypi { spec: spec.into(), message: m })?;
    let _ = std::fs::remove_dir_all(&unpacked);
    std::fs::rename(&tmp, &unpacked).map_err(|e| Error::io(&unpacked, e))?;
    std::fs::write(&stamp, b"").map_err(|e| Error::io(&stamp, e))?;
    Ok((single_root(&unpacked), version.to_string()))
}

/// An sdist unpacks to one `name-version/` folder; mine from inside it.
fn single_root(dir: &Path) -> PathBuf {
    let entries: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    match entries.as_slice() {
        [only] if only.is_dir() => only.clone(),
        _ => dir.to_path_buf(),
    }
}

fn unpack(archive: &Path, dest: &Path) -> std::result::Result<(), String> {
    let f = std::fs::File::open(archive).map_err(|e| e.to_string())?;
    if archive.to_string_lossy().ends_with(".zip") {
        let mut z = zip::ZipArchive::new(f).map_err(|e| e.to_string())?;
        z.extract(dest).map_err(|e| e.to_string())
    } else {
        let mut t = tar::Archive::new(flate2::read::GzDecoder::new(f));
        // `unpack` refuses entries that escape `dest` (absolute or `..` paths).
        t.unpack(dest).map_err(|e| e.to_string())
    }
}
