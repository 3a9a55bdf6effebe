//! `kidiom apply`, `review`, `accept` and `catalog export`: golden diffs on
//! self-written kernels, `git apply --check`, idempotency, a generated
//! property test, bad input, and the ast-grep round trip.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use kidiom_patterns::Pattern;
use kidiom_rewriter::{Rewrite, RewriteSpec};
use kidiom_syntax::Lang;

use crate::util::{Env, Lcg, git_repo};

/// The upstream corpus the tests mine: every idiom appears decorated and plain.
const UP_A: &str = r#"import triton
import triton.language as tl


@triton.jit
def ka(x, y, K: tl.constexpr):
    i = tl.program_id(0).to(tl.int64)
    a = tl.load(x + i, eviction_policy="evict_last")
    b = tl.dot(a, a, input_precision="ieee")
    c = tl.dot(a, b, input_precision="ieee")
    d = tl.exp2(c)
    tl.store(y + i, d)


@triton.jit
def kb(x, y):
    j = tl.program_id(1).to(tl.int64)
    e = tl.exp2(tl.load(x + j, eviction_policy="evict_last"))
    tl.store(y + j, tl.exp(e))
"#;
const UP_B: &str = r#"import triton
import triton.language as tl


@triton.jit
def kc(x, y):
    i = tl.program_id(0).to(tl.int64)
    n = tl.program_id(1)
    a = tl.load(x + i, eviction_policy="evict_last")
    a2 = tl.load(x + n)
    b = tl.dot(a, a, input_precision=DOT_PRECISION)
    b2 = tl.dot(a, b)
    tl.store(y + i, tl.exp2(b2))
"#;
const UP_C: &str = r#"__forceinline__ __device__ float sq(float x) { return x * x; }
__forceinline__ __device__ float cube(float x) { return x * x * x; }
__device__ float plain(float x) { return x; }

__global__ void k1(float* x, int n) {
    #pragma unroll
    for (int i = 0; i < 4; i++) { x[i] = sq(x[i]); }
    #pragma unroll
    for (int i = 0; i < 8; i++) { x[i] = cube(x[i]); }
    for (int i = 0; i < n; i++) { x[i] = plain(x[i]); }
}
"#;
const UP_D: &str = r#"__forceinline__ __device__ float tw(float x) { return 2 * x; }

__global__ void k2(float* x, int n) {
    #pragma unroll
    for (int i = 0; i < 4; i++) { x[i] = tw(x[i]); }
    #pragma unroll 2
    for (int i = 0; i < 8; i++) { x[i] += 1; }
}
"#;

/// Our kernel: comments, multi-line calls, trailing commas, nested calls,
/// host code that must not change, and sites that already have the idiom.
const KERNEL_PY: &str = r#"import triton
import triton.language as tl


@triton.jit
def step(q, k, o, T, BT: tl.constexpr):
    i_t, i_h = tl.program_id(0), tl.program_id(1).to(tl.int64)
    b_q = tl.load(q + i_t)  # [BT]
    b_k = tl.load(
        k + i_t,
        mask=i_t < T,
    )
    b_a = tl.dot(b_q, b_k)  # tl.dot(x, y) in a comment stays
    b_b = tl.dot(
        b_q,
        tl.dot(b_a, b_k, input_precision="tf32"),  # already explicit
    )
    b_c = tl.exp(b_a - b_b) * tl.exp(tl.exp(b_q))
    s = "tl.exp(b_q) in a string stays"
    tl.store(o + i_t, b_c)


def host(q):
    return tl.dot(q, q) + tl.exp(q)
"#;

const KERNEL_CU: &str = r#"__device__ float helper(float x) { return x + 1.0f; }

extern "C" __global__ void kern(float* x, int n) {
    for (int i = 0; i < n; i++) {
        x[i] = helper(x[i]);
    }
    #pragma unroll 4
    for (int j = 0; j < 4; j++) { x[j] += 1.0f; }
}

void host_loop(float* x, int n) {
    for (int i = 0; i < n; i++) { x[i] = 0; }
}
"#;

/// Mines the upstream corpus into the env's catalog and makes the env a git
/// repository holding our kernels.
fn setup() -> Env {
    let env = Env::new();
    let up = tempfile::tempdir().expect("tempdir");
    for (name, text) in [("a.py", UP_A), ("b.py", UP_B), ("c.cu", UP_C), ("d.cu", UP_D)] {
        std::fs::write(up.path().join(name), text).expect("write");
    }
    let db = env.db();
    let out =
        env.run(&["mine", up.path().to_str().expect("utf8"), "--name", "up", "--db", db.to_str().expect("utf8"), "-q"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    git_repo(env.path(), &[("kernels/step.py", KERNEL_PY.as_bytes()), ("kernels/kern.cu", KERNEL_CU.as_bytes())]);
    // The catalog lives in the repository too; keep it out of git status.
    std::fs::write(env.path().join(".git/info/exclude"), "catalog.sqlite*\n").expect("exclude");
    env
}

fn apply_json(env: &Env, extra: &[&str]) -> serde_json::Value {
    let db = env.db();
    let mut args = vec!["apply", "--db", db.to_str().expect("utf8"), "--json"];
    args.extend_from_slice(extra);
    env.json(&args)
}

fn candidates(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["candidates"].as_array().cloned().unwrap_or_default()
}

fn diff_of<'a>(cands: &'a [serde_json::Value], pattern: &str, path: &str) -> &'a str {
    cands
        .iter()
        .find(|c| c["pattern_id"] == pattern && c["path"] == path)
        .and_then(|c| c["diff"].as_str())
        .unwrap_or_else(|| panic!("no candidate {pattern} on {path}"))
}

fn git_apply_check(dir: &Path, diff: &str) {
    let p = dir.join(".kidiom-test.diff");
    std::fs::write(&p, diff).expect("write diff");
    let out =
        Command::new("git").args(["apply", "--check", ".kidiom-test.diff"]).current_dir(dir).output().expect("git");
    std::fs::remove_file(&p).expect("rm");
    assert!(out.status.success(), "git apply --check rejects:\n{diff}\n{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn golden_diffs_on_our_kernels() {
    let env = setup();
    let report = apply_json(&env, &[]);
    let cands = candidates(&report);
    let ids: BTreeSet<String> = cands.iter().map(|c| format!("{} {}", c["pattern_id"], c["path"])).collect();
    assert_eq!(
        ids.iter().map(String::as_str).collect::<Vec<_>>(),
        [
            "\"cu-pragma-loop-unroll\" \"kernels/kern.cu\"",
            "\"cu-qualifier-cuda-device-forceinline\" \"kernels/kern.cu\"",
            "\"py-keyword-tl-dot-input-precision\" \"kernels/step.py\"",
            "\"py-keyword-tl-load-eviction-policy\" \"kernels/step.py\"",
            "\"py-method-wrap-tl-program-id-to\" \"kernels/step.py\"",
            "\"py-variant-exp-exp2\" \"kernels/step.py\"",
        ]
    );
    assert_eq!(
        diff_of(&cands, "py-keyword-tl-dot-input-precision", "kernels/step.py"),
        r#"diff --git a/kernels/step.py b/kernels/step.py
--- a/kernels/step.py
+++ b/kernels/step.py
@@ -10,10 +10,10 @@
         k + i_t,
         mask=i_t < T,
     )
-    b_a = tl.dot(b_q, b_k)  # tl.dot(x, y) in a comment stays
+    b_a = tl.dot(b_q, b_k, input_precision="ieee")  # tl.dot(x, y) in a comment stays
     b_b = tl.dot(
         b_q,
-        tl.dot(b_a, b_k, input_precision="tf32"),  # already explicit
+        tl.dot(b_a, b_k, input_precision="tf32"), input_precision="ieee",  # already explicit
     )
     b_c = tl.exp(b_a - b_b) * tl.exp(tl.exp(b_q))
     s = "tl.exp(b_q) in a string stays"
"#
    );
    assert_eq!(
        diff_of(&cands, "py-variant-exp-exp2", "kernels/step.py"),
        r#"diff --git a/kernels/step.py b/kernels/step.py
--- a/kernels/step.py
+++ b/kernels/step.py
@@ -15,7 +15,7 @@
         b_q,
         tl.dot(b_a, b_k, input_precision="tf32"),  # already explicit
     )
-    b_c = tl.exp(b_a - b_b) * tl.exp(tl.exp(b_q))
+    b_c = tl.exp2((b_a - b_b) * 1.4426950408889634) * tl.exp2(tl.exp2(b_q * 1.4426950408889634) * 1.4426950408889634)
     s = "tl.exp(b_q) in a string stays"
     tl.store(o + i_t, b_c)
 
"#
    );
    assert_eq!(
        diff_of(&cands, "py-method-wrap-tl-program-id-to", "kernels/step.py"),
        r#"diff --git a/kernels/step.py b/kernels/step.py
--- a/kernels/step.py
+++ b/kernels/step.py
@@ -4,7 +4,7 @@
 
 @triton.jit
 def step(q, k, o, T, BT: tl.constexpr):
-    i_t, i_h = tl.program_id(0), tl.program_id(1).to(tl.int64)
+    i_t, i_h = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
     b_q = tl.load(q + i_t)  # [BT]
     b_k = tl.load(
         k + i_t,
"#
    );
    assert_eq!(
        diff_of(&cands, "py-keyword-tl-load-eviction-policy", "kernels/step.py"),
        r#"diff --git a/kernels/step.py b/kernels/step.py
--- a/kernels/step.py
+++ b/kernels/step.py
@@ -5,10 +5,10 @@
 @triton.jit
 def step(q, k, o, T, BT: tl.constexpr):
     i_t, i_h = tl.program_id(0), tl.program_id(1).to(tl.int64)
-    b_q = tl.load(q + i_t)  # [BT]
+    b_q = tl.load(q + i_t, eviction_policy="evict_last")  # [BT]
     b_k = tl.load(
         k + i_t,
-        mask=i_t < T,
+        mask=i_t < T, eviction_policy="evict_last",
     )
     b_a = tl.dot(b_q, b_k)  # tl.dot(x, y) in a comment stays
     b_b = tl.dot(
"#
    );
    assert_eq!(
        diff_of(&cands, "cu-pragma-loop-unroll", "kernels/kern.cu"),
        r#"diff --git a/kernels/kern.cu b/kernels/kern.cu
--- a/kernels/kern.cu
+++ b/kernels/kern.cu
@@ -1,6 +1,7 @@
 __device__ float helper(float x) { return x + 1.0f; }
 
 extern "C" __global__ void kern(float* x, int n) {
+    #pragma unroll
     for (int i = 0; i < n; i++) {
         x[i] = helper(x[i]);
     }
"#
    );
    assert_eq!(
        diff_of(&cands, "cu-qualifier-cuda-device-forceinline", "kernels/kern.cu"),
        "diff --git a/kernels/kern.cu b/kernels/kern.cu\n--- a/kernels/kern.cu\n+++ b/kernels/kern.cu\n@@ -1,4 +1,4 @@\n-__device__ float helper(float x) { return x + 1.0f; }\n+__forceinline__ __device__ float helper(float x) { return x + 1.0f; }\n \n extern \"C\" __global__ void kern(float* x, int n) {\n     for (int i = 0; i < n; i++) {\n"
    );
    for c in &cands {
        git_apply_check(env.path(), c["diff"].as_str().expect("diff"));
        assert_eq!(c["status"], "proposed");
    }
    // A dry run writes nothing.
    assert_eq!(std::fs::read_to_string(env.path().join("kernels/step.py")).expect("read"), KERNEL_PY);
}

#[test]
fn write_is_idempotent_and_parses() {
    let env = setup();
    let first = apply_json(&env, &["--write"]);
    assert_eq!(candidates(&first).len(), 6);
    let written = std::fs::read_to_string(env.path().join("kernels/step.py")).expect("read");
    assert!(written.contains("b_a = tl.dot(b_q, b_k, input_precision=\"ieee\")"));
    assert!(written.ends_with("def host(q):\n    return tl.dot(q, q) + tl.exp(q)\n"), "host code unchanged");
    for (rel, lang) in [("kernels/step.py", Lang::Python), ("kernels/kern.cu", Lang::Cuda)] {
        let text = std::fs::read_to_string(env.path().join(rel)).expect("read");
        assert_eq!(kidiom_rewriter::parse_errors(lang, &text).expect("parse"), 0, "{rel}");
    }
    // The tree is now dirty: --write refuses without --force.
    let db = env.db();
    let out = env.run(&["apply", "--db", db.to_str().expect("utf8"), "--write"]);
    assert_eq!(out.status.code(), Some(1), "nothing left to rewrite: {}", String::from_utf8_lossy(&out.stderr));
    let out = env.run(&["apply", "--db", db.to_str().expect("utf8"), "--write", "--force", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let second: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(candidates(&second).is_empty(), "applying twice changes nothing: {second}");
    assert_eq!(std::fs::read_to_string(env.path().join("kernels/step.py")).expect("read"), written);
}

#[test]
fn write_refuses_uncommitted_changes_unless_forced() {
    let env = setup();
    let p = env.path().join("kernels/step.py");
    std::fs::write(&p, format!("{KERNEL_PY}# local edit\n")).expect("write");
    let db = env.db();
    let out = env.run(&["apply", "--db", db.to_str().expect("utf8"), "--write"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("uncommitted changes (modified)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read_to_string(&p).expect("read").ends_with("# local edit\n"));
    assert_eq!(
        std::fs::read_to_string(env.path().join("kernels/kern.cu")).expect("read"),
        KERNEL_CU,
        "nothing half-written"
    );
    let forced = apply_json(&env, &["--write", "--force"]);
    assert!(!candidates(&forced).is_empty());
}

#[test]
fn bad_input_is_a_clear_error() {
    let env = setup();
    let db = env.db();
    let dbs = db.to_str().expect("utf8");
    // A pattern that does not parse.
    let conn = rusqlite::Connection::open(&db).expect("open");
    conn.execute(
        "INSERT INTO patterns (id, kind, language, category, title, rationale, before, after, score)
         VALUES ('bad', 'usage', 'python', 'other', 't', 'r', 'tl.dot(', 'tl.dot()', 0)",
        [],
    )
    .expect("insert");
    drop(conn);
    let out = env.run(&["apply", "--db", dbs, "--pattern", "bad"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not parse"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = env.run(&["apply", "--db", dbs, "--pattern", "no-such-pattern"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no pattern"));
    // A symlink out of the tree.
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("x.py"), KERNEL_PY).expect("write");
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(outside.path().join("x.py"), env.path().join("kernels/link.py")).expect("symlink");
        let out = env.run(&["apply", "--db", dbs, "kernels/link.py"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("outside"), "{}", String::from_utf8_lossy(&out.stderr));
        // Walking the directory skips it with a warning; the real kernels still get candidates.
        let out = env.run(&["apply", "--db", dbs, "kernels"]);
        assert_eq!(out.status.code(), Some(0));
        std::fs::remove_file(env.path().join("kernels/link.py")).expect("rm");
    }
    // A binary target.
    env.write("kernels/blob.py", b"import x\0\x01\x02");
    let out = env.run(&["apply", "--db", dbs, "kernels/blob.py"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("binary"), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_file(env.path().join("kernels/blob.py")).expect("rm");
    // A read-only file.
    let p = env.path().join("kernels/step.py");
    let mut perms = std::fs::metadata(&p).expect("meta").permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&p, perms).expect("chmod");
    let out = env.run(&["apply", "--db", dbs, "--write"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("read-only"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&p).expect("read"), KERNEL_PY);
    assert_eq!(
        std::fs::read_to_string(env.path().join("kernels/kern.cu")).expect("read"),
        KERNEL_CU,
        "nothing half-written"
    );
}

#[test]
fn review_and_accept_commit_on_the_review_branch() {
    let env = setup();
    let report = apply_json(&env, &["--pattern", "py-keyword-tl-dot-input-precision"]);
    let cands = candidates(&report);
    assert_eq!(cands.len(), 1);
    let id = cands[0]["id"].as_str().expect("id").to_string();
    assert!(id.starts_with("py-keyword-tl-dot-input-precision@kernels/step.py#"), "{id}");
    let db = env.db();
    let dbs = db.to_str().expect("utf8");
    let listed = env.json(&["review", "--db", dbs, "--json"]);
    assert_eq!(listed[0]["id"], id.as_str());
    let shown = env.run(&["review", &id, "--db", dbs]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("up: 3 occurrences in 2 files"), "{text}");
    assert!(text.contains("+    b_a = tl.dot(b_q, b_k, input_precision=\"ieee\")"), "{text}");

    let repo = git2::Repository::open(env.path()).expect("repo");
    let head = repo.head().expect("head").target().expect("oid");
    // never validated: refused, naming why; nothing is committed
    let refused = env.run(&["accept", &id, "--db", dbs]);
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("is not validated") && err.contains("--force"), "{err}");
    assert!(repo.find_branch("kidiom/review", git2::BranchType::Local).is_err(), "nothing committed");
    // a verdict short of accepted is refused with the verdict and its reason
    let cat = kidiom_patterns::Catalog::open(&db).expect("catalog");
    for (kind, gate, reason) in [
        ("needs-gpu", None, "syntax, static, correctness passed; speed needs a GPU"),
        ("rejected", Some("correctness"), "1 failure: o rel_l2 1.2e-01 > 5.0e-03"),
        ("error", Some("correctness"), "the correctness check timed out (25.0 s)"),
    ] {
        let ev =
            serde_json::json!({"verdict": {"kind": kind, "gate": gate, "reason": reason, "log": null, "flags": []}});
        cat.set_candidate_evidence(&id, &kidiom_patterns::record::StoredEvidence::decode(ev.clone()))
            .expect("evidence");
        let out = env.run(&["accept", &id, "--db", dbs]);
        assert_eq!(out.status.code(), Some(2), "{kind}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("its verdict is {kind}")) && err.contains(reason), "{kind}: {err}");
    }
    assert!(repo.find_branch("kidiom/review", git2::BranchType::Local).is_err(), "nothing committed");
    // --force commits it anyway, and the commit says what validation concluded
    let accepted = env.json(&["accept", &id, "--db", dbs, "--json", "--force"]);
    let commit = repo
        .find_commit(git2::Oid::from_str(accepted["commit"].as_str().expect("commit")).expect("oid"))
        .expect("commit");
    assert_eq!(repo.head().expect("head").target().expect("oid"), head, "HEAD untouched");
    assert_eq!(
        std::fs::read_to_string(env.path().join("kernels/step.py")).expect("read"),
        KERNEL_PY,
        "worktree untouched"
    );
    let msg = commit.message().expect("msg");
    assert!(msg.contains("Kidiom-Pattern: py-keyword-tl-dot-input-precision\n"), "{msg}");
    assert!(msg.contains(&format!("Kidiom-Candidate: {id}\n")), "{msg}");
    assert!(msg.contains("Kidiom-Support: up@ occurrences=3 files=2"), "{msg}");
    assert!(msg.contains("Kidiom-Forced: ") && msg.contains("its verdict is error"), "{msg}");
    let branch = repo.find_branch("kidiom/review", git2::BranchType::Local).expect("branch");
    assert_eq!(branch.get().target(), Some(commit.id()));
    let blob = commit
        .tree()
        .expect("tree")
        .get_path(Path::new("kernels/step.py"))
        .expect("entry")
        .to_object(&repo)
        .expect("obj");
    assert!(
        String::from_utf8_lossy(blob.as_blob().expect("blob").content())
            .contains("tl.dot(b_q, b_k, input_precision=\"ieee\")")
    );
    let listed = env.json(&["review", "--db", dbs, "--json", "--status", "accepted"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(1));
}

#[test]
fn accept_refuses_a_changed_target() {
    let env = setup();
    let report = apply_json(&env, &["--pattern", "py-variant-exp-exp2"]);
    let id = candidates(&report)[0]["id"].as_str().expect("id").to_string();
    std::fs::write(env.path().join("kernels/step.py"), KERNEL_PY.replace("b_q + 0", "b_q")).expect("write");
    std::fs::write(env.path().join("kernels/step.py"), format!("# changed\n{KERNEL_PY}")).expect("write");
    let db = env.db();
    // an accepted verdict needs no --force; the changed target still stops it
    let ev =
        serde_json::json!({"verdict": {"kind": "accepted", "gate": null, "reason": "1.3x", "log": null, "flags": []}});
    kidiom_patterns::Catalog::open(&db)
        .expect("catalog")
        .set_candidate_evidence(&id, &kidiom_patterns::record::StoredEvidence::decode(ev.clone()))
        .expect("evidence");
    let out = env.run(&["accept", &id, "--db", db.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("changed since the candidate was proposed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let repo = git2::Repository::open(env.path()).expect("repo");
    assert!(repo.find_branch("kidiom/review", git2::BranchType::Local).is_err(), "nothing committed");
}

#[test]
fn an_accepted_verdict_commits_without_force() {
    let env = setup();
    let report = apply_json(&env, &["--pattern", "py-variant-exp-exp2"]);
    let id = candidates(&report)[0]["id"].as_str().expect("id").to_string();
    let db = env.db();
    let ev =
        serde_json::json!({"verdict": {"kind": "accepted", "gate": null, "reason": "1.3x", "log": null, "flags": []}});
    kidiom_patterns::Catalog::open(&db)
        .expect("catalog")
        .set_candidate_evidence(&id, &kidiom_patterns::record::StoredEvidence::decode(ev.clone()))
        .expect("evidence");
    let accepted = env.json(&["accept", &id, "--db", db.to_str().expect("utf8"), "--json"]);
    let repo = git2::Repository::open(env.path()).expect("repo");
    let commit = repo
        .find_commit(git2::Oid::from_str(accepted["commit"].as_str().expect("commit")).expect("oid"))
        .expect("commit");
    assert!(!commit.message().expect("msg").contains("Kidiom-Forced"));
}

fn pattern(id: &str, lang: Lang, before: &str, after: &str, value: &str) -> Pattern {
    Pattern::usage(id, lang, before, after, &[value])
}

/// A generated Triton file: random statements mixing every construct the
/// patterns touch, with comments, strings, multi-line calls, nesting,
/// already-decorated sites and host code.
fn generate(rng: &mut Lcg) -> String {
    let exprs =
        ["b_a", "b_b + 1", "tl.exp(b_a)", "b_a * b_b", "-b_a", "tl.dot(b_a, b_b)", "b_c[:, None]", "(b_a - b_b)"];
    let mut s = String::from("import triton\nimport triton.language as tl\n\n\n");
    for k in 0..1 + rng.below(3) {
        s.push_str(&format!("@triton.jit\ndef kern{k}(x, y, T, BT: tl.constexpr):\n"));
        s.push_str("    i_t = tl.program_id(0)\n    b_a = tl.load(x + i_t)\n    b_b = b_a\n    b_c = b_a\n");
        for _ in 0..2 + rng.below(12) {
            let e = *rng.pick(&exprs);
            let f = *rng.pick(&exprs);
            let line = match rng.below(12) {
                0 => format!("    b_c = tl.dot({e}, {f})\n"),
                1 => format!("    b_c = tl.dot(\n        {e},  # left\n        {f},\n    )\n"),
                2 => format!("    b_c = tl.dot({e}, {f}, input_precision=\"tf32\")\n"),
                3 => format!("    b_c = tl.exp({e}) + tl.exp(tl.exp({f}))\n"),
                4 => "    i_h = tl.program_id(1)\n".to_string(),
                5 => "    i_h = tl.program_id(axis=1).to(tl.int32)\n".to_string(),
                6 => format!("    b_c = tl.load(x + i_t, mask={e} > 0, other=0.)  # [BT]\n"),
                7 => format!("    tl.store(y + i_t, {e}, mask=i_t < T,)\n"),
                8 => format!("    # tl.exp({e}) in a comment\n    s = 'tl.dot({e}, {f})'\n"),
                9 => format!(
                    "    if T > 0:\n        b_c = tl.exp({e})\n    else:\n        b_c = tl.dot({e}, {f}, allow_tf32=False)\n"
                ),
                10 => format!("    for i in range(T):\n        b_c += tl.exp2({e})\n"),
                _ => format!("    b_c = tl.dot(tl.dot({e}, {f}), tl.exp({e}))\n"),
            };
            s.push_str(&line);
        }
        s.push_str("    tl.store(y + i_t, b_c)\n\n\n");
    }
    if rng.below(2) == 0 {
        s.push_str("def host(x):\n    return tl.dot(x, x) + tl.exp(x) + tl.program_id(0)\n");
    }
    if rng.below(4) == 0 {
        s.push_str("def broken(:\n    pass\n"); // a parse error that must not grow
    }
    s
}

/// Every byte outside `spans` is kept, in order.
fn kept_outside(orig: &str, new: &str, spans: &[std::ops::Range<usize>]) -> bool {
    let mut segs = Vec::new();
    let mut at = 0;
    for r in spans {
        segs.push(&orig[at..r.start]);
        at = r.end;
    }
    segs.push(&orig[at..]);
    let (first, last) = (segs[0], segs[segs.len() - 1]);
    if !new.starts_with(first) || !new.ends_with(last) {
        return false;
    }
    let mut cursor = first.len();
    for s in &segs[1..segs.len() - 1] {
        match new[cursor..].find(s) {
            Some(i) => cursor += i + s.len(),
            None => return false,
        }
    }
    cursor <= new.len() - last.len()
}

#[test]
fn property_every_pattern_on_many_files() {
    let pats = [
        pattern("kw", Lang::Python, "tl.dot($$$ARGS)", "tl.dot($$$ARGS, input_precision=$V)", "\"ieee\""),
        pattern("ev", Lang::Python, "tl.load($$$ARGS)", "tl.load($$$ARGS, eviction_policy=$V)", "'evict_last'"),
        pattern("st", Lang::Python, "tl.store($$$ARGS)", "tl.store($$$ARGS, eviction_policy=$V)", "'evict_first'"),
        pattern("wrap", Lang::Python, "tl.program_id($$$ARGS)", "tl.program_id($$$ARGS).to($V)", "tl.int64"),
        pattern("exp", Lang::Python, "tl.exp($X)", "tl.exp2($X * 1.4426950408889634)", ""),
        pattern("log", Lang::Python, "tl.exp($X)", "(tl.exp2($X) * 0.5)", ""),
    ];
    let rws: Vec<Rewrite> = pats.iter().map(|p| Rewrite::new(&RewriteSpec::from(p), None).expect("compiles")).collect();
    let mut rng = Lcg(0x6b69_646d);
    let mut files: Vec<String> = (0..150).map(|_| generate(&mut rng)).collect();
    files.push(KERNEL_PY.to_string());
    files.push(UP_A.to_string());
    files.push(UP_B.to_string());
    let mut rewritten = 0;
    for (i, src) in files.iter().enumerate() {
        let errors = kidiom_rewriter::parse_errors(Lang::Python, src).expect("parse");
        for rw in &rws {
            let out = match kidiom_rewriter::rewrite(rw, Lang::Python, src, "gen.py") {
                Ok(Some(o)) => o,
                Ok(None) => continue,
                Err(e) => panic!("file {i}, {}: {e}\n{src}", rw.id),
            };
            rewritten += 1;
            assert!(
                kidiom_rewriter::parse_errors(Lang::Python, &out.text).expect("parse") <= errors,
                "file {i} {}",
                rw.id
            );
            assert!(
                kept_outside(src, &out.text, &out.spans),
                "file {i} {}: bytes outside the edits changed\n{}",
                rw.id,
                out.text
            );
            let again = kidiom_rewriter::rewrite(rw, Lang::Python, &out.text, "gen.py").expect("rewrite");
            assert!(again.is_none(), "file {i} {}: not idempotent", rw.id);
            // Host code never changes.
            for host in ["return tl.dot(x, x) + tl.exp(x) + tl.program_id(0)", "return tl.dot(q, q) + tl.exp(q)"] {
                if src.contains(host) {
                    assert!(out.text.contains(host), "file {i} {}: host code changed", rw.id);
                }
            }
            let diff = kidiom_rewriter::unified("gen.py", src, &out.text, 3);
            assert!(diff.starts_with("diff --git a/gen.py b/gen.py\n"));
        }
    }
    assert!(rewritten > 300, "the generator exercises the patterns ({rewritten} rewrites)");
}

/// `ast-grep` from the repository's .venv, or on PATH.
fn ast_grep() -> Option<std::path::PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/ast-grep");
    if venv.exists() {
        return Some(venv);
    }
    for name in ["ast-grep", "sg"] {
        if Command::new(name).arg("--version").output().is_ok_and(|o| o.status.success()) {
            return Some(name.into());
        }
    }
    None
}

#[test]
fn astgrep_export_round_trips() {
    let Some(sg) = ast_grep() else {
        let required = std::env::var_os("CI").is_some() || std::env::var_os("KIDIOM_REQUIRE_AST_GREP").is_some();
        assert!(
            !required,
            "ast-grep is required (CI or KIDIOM_REQUIRE_AST_GREP set) but neither .venv/bin/ast-grep nor ast-grep/sg on PATH exists; run scripts/setup-python.sh"
        );
        eprintln!("skipping astgrep_export_round_trips: ast-grep not installed (run scripts/setup-python.sh)");
        return;
    };
    let env = setup();
    let db = env.db();
    let dbs = db.to_str().expect("utf8");
    let rules = env.path().join("rules.yml");
    let out =
        env.run(&["catalog", "export", "--format", "ast-grep", "--db", dbs, "--out", rules.to_str().expect("utf8")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sarif = env.json(&["catalog", "export", "--format", "sarif", "--db", dbs, "kernels"]);
    let mut ours = BTreeSet::new();
    for r in sarif["runs"][0]["results"].as_array().expect("results") {
        let loc = &r["locations"][0]["physicalLocation"];
        ours.insert((
            r["ruleId"].as_str().expect("rule").to_string(),
            loc["artifactLocation"]["uri"].as_str().expect("uri").to_string(),
            loc["region"]["startLine"].as_u64().expect("line"),
            loc["region"]["startColumn"].as_u64().expect("col"),
        ));
    }
    let scan = Command::new(&sg)
        .args(["scan", "--rule", "rules.yml", "--json=compact", "kernels"])
        .current_dir(env.path())
        .output()
        .expect("run ast-grep");
    assert!(scan.status.success() || scan.status.code() == Some(1), "{}", String::from_utf8_lossy(&scan.stderr));
    let found: serde_json::Value = serde_json::from_slice(&scan.stdout).expect("ast-grep JSON");
    let mut theirs = BTreeSet::new();
    for m in found.as_array().expect("array") {
        theirs.insert((
            m["ruleId"].as_str().expect("rule").to_string(),
            m["file"].as_str().expect("file").to_string(),
            m["range"]["start"]["line"].as_u64().expect("line") + 1,
            m["range"]["start"]["column"].as_u64().expect("col") + 1,
        ));
    }
    // a transform's sites are kidiom's loop analysis, which no YAML rule can say: not exported
    let exported = std::fs::read_to_string(&rules).expect("rules");
    let exported: BTreeSet<&str> =
        exported.lines().filter_map(|l| l.strip_prefix("id: ")).map(|i| i.trim().trim_matches('"')).collect();
    assert!(!exported.contains("cu-reuse-across-loops"), "{exported:?}");
    ours.retain(|(r, ..)| exported.contains(r.as_str()));
    assert!(ours.len() >= 10, "{ours:?}");
    assert_eq!(ours, theirs, "ast-grep with the exported rules finds the same sites as kidiom");
}

/// Two patterns whose rewrites give the very same file: one candidate, both
/// patterns in its provenance, shown by `review`; and a rewrite bringing in
/// a name the kernel does not bind (it only says the word in a comment) is
/// not proposed, and the run says how many were not.
#[test]
fn one_candidate_per_change_and_nothing_that_cannot_work() {
    let env = Env::new();
    let db = env.db();
    let dbs = db.to_str().expect("utf8");
    let mut wide =
        Pattern::usage("p-wide", Lang::Python, "tl.dot($$$A)", "tl.dot($$$A, input_precision=$V)", &["\"ieee\""]);
    wide.score = 2.0;
    let narrow =
        Pattern::usage("p-narrow", Lang::Python, "tl.dot($A, $B)", "tl.dot($A, $B, input_precision=\"ieee\")", &[]);
    let bare_exp = Pattern::usage("p-bare-exp", Lang::Python, "tl.exp($A)", "exp($A)", &[]);
    {
        let mut cat = kidiom_patterns::Catalog::open(&db).expect("catalog");
        let tx = cat.begin().expect("tx");
        tx.replace_patterns(kidiom_patterns::Kind::Usage, &[wide, narrow, bare_exp]).expect("patterns");
        tx.commit().expect("commit");
    }
    env.write(
        "k.py",
        "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x, y):\n    # exp(x) by the dot, in words\n    a = tl.dot(x, y)\n    tl.store(y, tl.exp(a))\n",
    );
    let out = env.run(&["apply", "k.py", "--db", dbs, "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let cands = candidates(&report);
    assert_eq!(cands.len(), 1, "{report:#}");
    assert_eq!(cands[0]["pattern_id"], "p-wide", "the stronger pattern stands for the change");
    assert_eq!(cands[0]["provenance"]["also"][0]["pattern"], "p-narrow", "{report:#}");
    assert_eq!(report["held_back"]["same_change"], 1);
    assert_eq!(report["held_back"]["unbound_name"], 1);
    let dropped = report["dropped"].as_array().expect("dropped");
    assert!(
        dropped.iter().any(|d| d["pattern"] == "p-bare-exp" && d["reason"].as_str().is_some_and(|r| r.contains("exp")))
    );
    // the terminal says it in one line
    let out = env.run(&["apply", "k.py", "--db", dbs]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().filter(|l| l.contains("not proposed: ")).count(), 1, "{err}");
    let id = cands[0]["id"].as_str().expect("id");
    let shown = env.run(&["review", id, "--db", dbs]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("  also:      p-narrow"), "{text}");
}
