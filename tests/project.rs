//! What the tests that run the kernel harness share: a project holding a copy
//! of our kernels, the harness's Python, planted candidates, and readers of
//! `kidiom validate --json`.

use std::path::{Path, PathBuf};

use kidiom_patterns::record::{Provenance, StoredEvidence};
use kidiom_patterns::{Candidate, CandidateStatus, Catalog};
use serde_json::Value;

use crate::util::Env;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The project's harness Python, or a printed reason to skip. Asked once per test binary: each
/// ask imports numpy and Triton (0.3 core-seconds, 32 asks in the suite).
pub fn python() -> Option<PathBuf> {
    static FOUND: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    let py = std::env::var_os("KIDIOM_PYTHON").map(PathBuf::from).unwrap_or_else(|| repo().join(".venv/bin/python"));
    let found = FOUND.get_or_init(|| {
        let ok = std::process::Command::new(&py)
            .args(["-c", "import numpy, triton, pybind11"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        ok.then(|| py.clone())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "no Python with numpy, triton and pybind11 at {} (CI must run these tests: scripts/setup-python.sh)",
            py.display()
        );
        eprintln!(
            "skipping: no Python with numpy, triton and pybind11 at {} (run scripts/setup-python.sh)",
            py.display()
        );
    }
    found.clone()
}

/// Copies a tree with the workspace's one walk (hidden entries and `__pycache__` left out).
pub fn copy_dir(from: &Path, to: &Path) {
    for src in kidiom_syntax::tree_files(from).expect("walk") {
        let dst = to.join(src.strip_prefix(from).expect("under from"));
        std::fs::create_dir_all(dst.parent().expect("parent")).expect("mkdir");
        std::fs::copy(&src, &dst).expect("copy");
    }
}

/// A project holding a copy of kernels/ and an empty catalog.
pub fn project() -> Env {
    let env = Env::new();
    copy_dir(&repo().join("kernels"), &env.path().join("kernels"));
    Catalog::open(&env.db()).expect("catalog");
    env
}

/// Mines the corpus directory `dir` (under the project) as corpus `up` into the project's catalog.
pub fn mine_upstream_dir(env: &Env, dir: &Path) {
    let db = env.db();
    let out = env.run(&["mine", dir.to_str().expect("utf8"), "--name", "up", "--db", db.to_str().expect("utf8"), "-q"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

pub fn read(env: &Env, rel: &str) -> String {
    std::fs::read_to_string(env.path().join(rel)).expect("read")
}

/// Stores a candidate rewriting `rel` from its current text to `new`.
pub fn plant(env: &Env, id: &str, category: &str, rel: &str, new: &str) {
    plant_as(env, id, &format!("test-{category}"), serde_json::json!({"category": category}), rel, new);
}

/// [`plant`] with the pattern id and the provenance `kidiom apply` would record.
pub fn plant_as(env: &Env, id: &str, pattern: &str, provenance: Value, rel: &str, new: &str) {
    let old = read(env, rel);
    assert_ne!(old, new, "{id}: the planted edit changed nothing");
    let cat = Catalog::open(&env.db()).expect("catalog");
    cat.put_candidate(&Candidate {
        id: id.into(),
        pattern_id: pattern.into(),
        path: rel.into(),
        base_blob: kidiom_syntax::blob_id(old.as_bytes()),
        result_blob: kidiom_syntax::blob_id(new.as_bytes()),
        value: None,
        sites: 1,
        diff: kidiom_rewriter::unified(rel, &old, new, 3),
        status: CandidateStatus::Proposed,
        provenance: Provenance::decode(&provenance),
        evidence: StoredEvidence::Empty,
        commit_id: None,
        created_at: String::new(),
        updated_at: String::new(),
    })
    .expect("put");
}

pub fn edit(env: &Env, rel: &str, from: &str, to: &str) -> String {
    let text = read(env, rel);
    assert_eq!(text.matches(from).count(), 1, "{from:?} must occur once in {rel}");
    text.replace(from, to)
}

pub fn validate(env: &Env, py: &Path, args: &[&str]) -> (Value, std::process::Output) {
    validate_with(env, py, &[], args)
}

/// [`validate`] with `vars` added to kidiom's environment.
pub fn validate_with(env: &Env, py: &Path, vars: &[(&str, &Path)], args: &[&str]) -> (Value, std::process::Output) {
    let db = env.db();
    let mut all = vec!["validate", "--db", db.to_str().expect("utf8"), "--device", "cpu", "--json"];
    all.extend_from_slice(args);
    let mut cmd = env.cmd();
    cmd.env("KIDIOM_PYTHON", py).envs(vars.iter().copied());
    let out = cmd.args(&all).output().expect("spawn");
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (json, out)
}

pub fn by_id<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["candidates"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["candidate"] == id))
        .unwrap_or_else(|| panic!("no evidence for {id} in {report:#}"))
}

pub fn gate<'a>(ev: &'a Value, name: &str) -> &'a Value {
    ev["gates"].as_array().and_then(|g| g.iter().find(|r| r["gate"] == name)).unwrap_or(&Value::Null)
}

pub fn verdict(ev: &Value) -> (String, String) {
    (
        ev["verdict"]["kind"].as_str().unwrap_or("").to_string(),
        ev["verdict"]["gate"].as_str().unwrap_or("-").to_string(),
    )
}
