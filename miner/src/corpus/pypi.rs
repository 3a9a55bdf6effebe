//! Source distributions from PyPI.
//!
//! SGLang's repository is over 1 GB; its sdist is a few MB. We fetch the
//! sdist once from the index's simple API (`sdist.py`: the file, checked
//! against the index's sha256, nothing built), or where that fails with
//! `python3 -m pip download --no-binary :all:` (which prepares the
//! package's metadata first, in an environment it installs the build
//! requirements into: SGLang's takes about 25 s), unpack it under the cache
//! and reuse the unpacked tree on every later run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};

/// How long `pip download` may take before the corpus is reported unavailable.
const PIP_TIMEOUT: Duration = Duration::from_secs(600);

/// The simple-API download (see the module's comment).
const SDIST_PY: &str = include_str!("sdist.py");

/// Fetches `name==version` (once) and returns the unpacked root and the version.
pub(super) fn fetch(spec: &str, cache: &Path) -> Result<(PathBuf, String)> {
    fetch_from(spec, cache, None)
}

/// [`fetch`] from the index at `index` (None: pip's configured index, else PyPI).
fn fetch_from(spec: &str, cache: &Path, index: Option<&str>) -> Result<(PathBuf, String)> {
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
    let pypi = |message: String| Error::Pypi { spec: spec.into(), message };
    let direct = [
        "-c".to_string(),
        SDIST_PY.to_string(),
        name.to_string(),
        version.to_string(),
        dl.to_string_lossy().into_owned(),
        index.unwrap_or("").to_string(),
    ];
    // the index's own file first; pip (its configuration, its errors) where that fails
    let direct_failed = match kidiom_exec::run(&python, &direct, Path::new("."), &[], PIP_TIMEOUT) {
        Ok(_) => None,
        Err(kidiom_exec::Error::Command(e)) => Some(e.stderr_tail.lines().last().unwrap_or("").trim().to_string()),
        Err(e) => Some(e.to_string()),
    };
    let mut args =
        ["-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:", "--dest"].map(String::from).to_vec();
    args.extend([dl.to_string_lossy().into_owned(), format!("{name}=={version}")]);
    if let Some(index) = index {
        args.extend(["--index-url".to_string(), index.to_string()]);
    }
    let pypi = |message: String| match &direct_failed {
        Some(d) if !d.is_empty() => pypi(format!("{message} (the simple API before it: {d})")),
        _ => pypi(message),
    };
    match direct_failed.as_ref().map(|_| kidiom_exec::run(&python, &args, Path::new("."), &[], PIP_TIMEOUT)) {
        None | Some(Ok(_)) => {}
        Some(Err(kidiom_exec::Error::Spawn { cause, .. })) => {
            return Err(pypi(format!("cannot run {}: {cause}", python.display())));
        }
        Some(Err(kidiom_exec::Error::Command(e))) if e.timed_out() => {
            return Err(pypi(format!("pip download: no answer in {} s", PIP_TIMEOUT.as_secs())));
        }
        Some(Err(kidiom_exec::Error::Command(e))) => {
            let tail: Vec<&str> = e.stderr_tail.lines().rev().take(3).collect();
            let said = tail.into_iter().rev().collect::<Vec<_>>().join(" | ");
            return Err(pypi(format!("pip download failed: {said}")));
        }
        Some(Err(e)) => return Err(pypi(e.to_string())),
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

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;

    use super::*;

    /// An sdist `name-version.tar.gz` holding `name-version/pkg/kernel.py`.
    fn sdist(name: &str, version: &str) -> Vec<u8> {
        let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
        let body = b"import triton\n";
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, format!("{name}-{version}/pkg/kernel.py"), &body[..]).unwrap();
        tar.into_inner().unwrap().finish().unwrap()
    }

    fn sha256(bytes: &[u8], dir: &Path) -> String {
        let f = dir.join("hash-me");
        std::fs::write(&f, bytes).unwrap();
        let py = kidiom_exec::find_python(Path::new("."));
        let code = "import hashlib,sys;print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())";
        let out = std::process::Command::new(py).args(["-c", code]).arg(&f).output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// A package index on 127.0.0.1 serving (path, content type, body) and 404 for the rest.
    fn index(pages: Vec<(String, &'static str, Vec<u8>)>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/simple", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for mut s in listener.incoming().flatten() {
                let mut line = String::new();
                let mut r = BufReader::new(s.try_clone().unwrap());
                let _ = r.read_line(&mut line);
                let mut header = String::new();
                while r.read_line(&mut header).is_ok_and(|n| n > 2) {
                    header.clear();
                }
                let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                let (status, kind, body) = match pages.iter().find(|(p, _, _)| *p == path) {
                    Some((_, kind, body)) => ("200 OK", *kind, body.clone()),
                    None => ("404 Not Found", "text/plain", b"no".to_vec()),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes()).and_then(|_| s.write_all(&body));
            }
        });
        url
    }

    #[test]
    fn the_sdist_comes_from_the_simple_api_checked_against_its_hash() {
        let tmp = tempfile::tempdir().unwrap();
        let (good, json) = (sdist("demo_pkg", "1.0"), sdist("jsonpkg", "2.0"));
        let (h_good, h_json) = (sha256(&good, tmp.path()), sha256(&json, tmp.path()));
        let html = format!(
            "<html><body><a href=\"/files/demo_pkg-0.9.tar.gz#sha256={h_good}\">demo_pkg-0.9.tar.gz</a>\
             <a href=\"../../files/demo_pkg-1.0.tar.gz#sha256={h_good}\">demo_pkg-1.0.tar.gz</a>\
             <a href=\"/files/bad-1.0.tar.gz#sha256={h_good}\">demo-pkg-1.1.tar.gz</a></body></html>"
        );
        let page = serde_json::json!({"meta": {"api-version": "1.0"}, "files": [
            {"filename": "jsonpkg-2.0.tar.gz", "url": "/files/jsonpkg-2.0.tar.gz", "hashes": {"sha256": h_json}}]});
        let wrong = format!("<a href=\"/files/demo_pkg-1.0.tar.gz#sha256={}\">tampered-1.0.tar.gz</a>", "0".repeat(64));
        let url = index(vec![
            ("/simple/demo-pkg/".into(), "text/html", html.into_bytes()),
            ("/files/demo_pkg-1.0.tar.gz".into(), "application/gzip", good),
            ("/simple/jsonpkg/".into(), "application/vnd.pypi.simple.v1+json", page.to_string().into_bytes()),
            ("/files/jsonpkg-2.0.tar.gz".into(), "application/gzip", json),
            ("/simple/tampered/".into(), "text/html", wrong.into_bytes()),
        ]);
        // PEP 503 (HTML), the name normalised (demo_pkg == demo-pkg), the right version picked
        let (root, version) = fetch_from("demo_pkg==1.0", tmp.path(), Some(&url)).unwrap();
        assert_eq!(version, "1.0");
        assert!(root.join("pkg/kernel.py").is_file(), "{}", root.display());
        // PEP 691 (JSON)
        let (root, _) = fetch_from("jsonpkg==2.0", tmp.path(), Some(&url)).unwrap();
        assert!(root.join("pkg/kernel.py").is_file());
        // a file whose hash is not the index's is refused (and pip, asked next, refuses it too)
        let e = fetch_from("tampered==1.0", tmp.path(), Some(&url)).unwrap_err().to_string();
        assert!(e.contains("is not the index's"), "{e}");
        assert!(!tmp.path().join("pypi/tampered-1.0/.complete").exists());
        let left: Vec<_> = std::fs::read_dir(tmp.path().join("pypi/tampered-1.0/download")).unwrap().collect();
        assert!(left.is_empty(), "nothing kept of a refused file: {left:?}");
        // a version the index does not list
        let e = fetch_from("jsonpkg==3.0", tmp.path(), Some(&url)).unwrap_err().to_string();
        assert!(e.contains("lists no source distribution of jsonpkg 3.0"), "{e}");
    }
}
