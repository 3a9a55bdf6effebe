//! `kidiom validate`: rewrites of a copy of our KDA kernels, on a CPU, through
//! the gates. A precision rewrite mined from a self-made corpus and applied
//! with `kidiom apply`; planted wrong rewrites (a changed sign, a dropped
//! mask, a skipped store, a broken parse, a manifest edit, numeric flags
//! under a non-precision pattern); a kernel that hangs.
//!
//! The harness runs under the project's `.venv` (scripts/setup-python.sh);
//! without it the tests that run it skip with a printed reason, except in CI
//! (`CI` set), where a missing venv fails them. The static rules (contract,
//! host code) and `--patch` with a syntax error need no Python.

use std::path::{Path, PathBuf};
use std::time::Instant;

use kidiom_patterns::{CandidateStatus, Catalog};
use serde_json::Value;

use crate::project::*;

/// An upstream corpus where `tl.dot` carries an explicit precision, and a
/// dot without one: mined, it yields the precision pattern (also tests/run.rs's).
pub(crate) const UPSTREAM: &str = r#"import triton
import triton.language as tl


@triton.jit
def up_a(x, y, BT: tl.constexpr):
    a = tl.load(x + tl.arange(0, BT))
    b = tl.dot(a, a, input_precision="ieee")
    c = tl.dot(a, b, input_precision="ieee")
    d = tl.dot(b, c)
    tl.store(y + tl.arange(0, BT), d)
"#;

#[test]
fn ieee_prefill_is_predicted_slower_and_otherwise_needs_gpu_with_its_error_curve_improved() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    let up = env.write("upstream/up.py", UPSTREAM);
    let db = env.db();
    let dbs = db.to_str().expect("utf8");
    let out = env.run(&["mine", up.parent().and_then(Path::to_str).expect("utf8"), "--name", "up", "--db", dbs, "-q"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let applied = env.json(&[
        "apply",
        "kernels/kda/prefill.py",
        "--pattern",
        "py-keyword-tl-dot-input-precision",
        "--value",
        "\"ieee\"",
        "--db",
        dbs,
        "--json",
    ]);
    let cands = applied["candidates"].as_array().expect("candidates");
    assert_eq!(cands.len(), 1, "{applied:#}");
    let id = cands[0]["id"].as_str().expect("id").to_string();
    assert!(cands[0]["diff"].as_str().expect("diff").contains("input_precision=\"ieee\""));

    // By default its static figures (10x instructions, spills, no tensor cores) predict it slower.
    let (report, _) = validate(&env, &py, &[&id, "--seeds", "1", "--no-consistency", "--timeout", "400"]);
    let ev = by_id(&report, &id);
    assert_eq!(verdict(ev), ("rejected".into(), "static".into()), "{ev:#}");
    let reason = ev["verdict"]["reason"].as_str().unwrap_or("");
    assert!(reason.starts_with("predicted slower: instructions"), "{reason}");
    assert!(reason.contains("tensor-core instructions"), "{reason}");

    // Allowed to regress statically, it goes through the CPU gates with its curve.
    let started = Instant::now();
    let (report, out) = validate(
        &env,
        &py,
        &[&id, "--seeds", "2", "--no-consistency", "--timeout", "400", "--allow-static-regression"],
    );
    let ev = by_id(&report, &id);
    assert_eq!(verdict(ev), ("needs-gpu".into(), "-".into()), "{ev:#}");
    assert_eq!(out.status.code(), Some(0));
    eprintln!("ieee candidate validated in {:.1}s", started.elapsed().as_secs_f64());

    // syntax: no new error nodes
    assert_eq!(gate(ev, "syntax")["status"], "passed");
    // static: the flag change is allowed under a precision pattern; figures before and after
    let st = gate(ev, "static");
    assert_eq!(st["status"], "passed", "{st:#}");
    assert_eq!(st["metrics"]["numeric_flags"][0]["mention"]["flag"], "input_precision");
    for side in ["before", "after"] {
        assert!(st[side]["registers"].as_i64().is_some_and(|r| r > 0), "{side}: {st:#}");
        assert!(st[side]["instructions"].as_i64().is_some_and(|n| n > 0), "{side}: {st:#}");
        assert!(st[side]["spill_store_bytes"].is_i64(), "{side}: {st:#}");
        assert!(st[side]["by_class"]["fp32"].as_i64().is_some_and(|n| n > 0), "{side}: {st:#}");
    }
    // IEEE dots leave the tensor cores: the instruction mix must show it
    assert_ne!(st["before"]["by_class"]["tensor"], st["after"]["by_class"]["tensor"], "{st:#}");
    eprintln!("static: {}", st["summary"]);
    // correctness: the error curve, no worse anywhere and better at the longest T
    let cr = gate(ev, "correctness");
    assert_eq!(cr["status"], "passed", "{cr:#}");
    let before = cr["before"]["curve"].as_array().expect("baseline curve");
    let after = cr["after"]["curve"].as_array().expect("candidate curve");
    assert_eq!(before.len(), 3);
    for (b, a) in before.iter().zip(after) {
        let (eb, ea) = (b["rel_l2"].as_f64().expect("f64"), a["rel_l2"].as_f64().expect("f64"));
        assert!(ea * 10.0 < eb, "T={}: {ea:e} is not well below the TF32 baseline {eb:e}", b["T"]);
    }
    assert!(cr["summary"].as_str().expect("summary").contains("error curve improved"), "{cr:#}");
    assert_eq!(ev["seeds"].as_array().map(Vec::len), Some(2));
    assert_eq!(gate(ev, "speed")["status"], "skipped");
    for g in ev["gates"].as_array().expect("gates") {
        assert!(g["seconds"].as_f64().is_some(), "{g:#}");
    }
    assert!(gate(ev, "correctness")["commands"][0].as_str().expect("cmd").contains("kernels.harness check"));

    // stored: review shows the evidence next to the diff; the candidate stays pending
    let shown = env.json(&["review", &id, "--db", dbs, "--json"]);
    assert_eq!(shown["candidate"]["evidence"]["verdict"]["kind"], "needs-gpu");
    assert_eq!(shown["candidate"]["status"], "proposed");
    let text = env.run(&["review", &id, "--db", dbs]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("needs-gpu"), "{text}");
    assert!(text.contains("static") && text.contains("regs"), "{text}");
    assert!(text.contains("input_precision=\"ieee\""), "{text}");
}

#[test]
fn planted_wrong_rewrites_are_rejected_at_the_right_gate() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    let dec = "kernels/kda/decode.py";
    plant(&env, "sign", "math", dec, &edit(&env, dec, "b_beta * (b_v - b_p)", "b_beta * (b_v + b_p)"));
    plant(
        &env,
        "mask",
        "memory",
        dec,
        &edit(
            &env,
            dec,
            "tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_v)",
            "tl.store(p_o, b_o.to(p_o.dtype.element_ty))",
        ),
    );
    plant(&env, "store", "redundancy", dec, &edit(&env, dec, "    tl.store(p_s, b_s, mask=m_s)\n", ""));
    plant(
        &env,
        "parse",
        "other",
        dec,
        &edit(&env, dec, "b_p = tl.sum(b_s * b_k[:, None], axis=0)", "b_p = tl.sum(b_s * b_k[:, None], axis=0"),
    );
    plant(
        &env,
        "flags",
        "memory",
        "kernels/kda/prefill.py",
        &edit(&env, "kernels/kda/prefill.py", "tl.dot(b_T, b_v)", "tl.dot(b_T, b_v, input_precision=\"tf32x3\")"),
    );
    plant(
        &env,
        "manifest",
        "other",
        "kernels/kda/decode.toml",
        &edit(&env, "kernels/kda/decode.toml", "rel_l2 = 5e-3", "rel_l2 = 5e-1"),
    );
    plant(
        &env,
        "reference",
        "other",
        "kernels/kda/reference.py",
        &format!("{}\n# touched\n", read(&env, "kernels/kda/reference.py")),
    );

    let (report, out) = validate(&env, &py, &["--pending", "--seeds", "1", "--timeout", "300"]);
    assert_eq!(out.status.code(), Some(1), "rejections exit 1");
    assert_eq!(report["summary"]["rejected"], 7, "{report:#}");
    let expect = [
        ("sign", "correctness"),
        ("mask", "correctness"),
        ("store", "correctness"),
        ("parse", "syntax"),
        ("flags", "static"),
        ("manifest", "static"),
        ("reference", "static"),
    ];
    for (id, g) in expect {
        let ev = by_id(&report, id);
        assert_eq!(verdict(ev), ("rejected".to_string(), g.to_string()), "{id}: {ev:#}");
        // no later gate ran
        let last = ev["gates"].as_array().and_then(|a| a.last()).expect("gates");
        assert_eq!(last["gate"], g, "{id}");
        assert_eq!(last["status"], "failed", "{id}");
    }
    let reason = |id: &str| by_id(&report, id)["verdict"]["reason"].as_str().unwrap_or("").to_string();
    // the numbers are in the verdict
    assert!(reason("sign").contains("rel_l2"), "{}", reason("sign"));
    let sign = gate(by_id(&report, "sign"), "correctness");
    assert!(sign["metrics"]["worst"]["o"]["rel_l2"].as_f64().is_some_and(|e| e > 5e-3), "{sign:#}");
    assert!(reason("mask").contains("out-of-bounds") || reason("mask").contains("padding"), "{}", reason("mask"));
    assert!(reason("store").contains("state"), "{}", reason("store"));
    assert!(reason("parse").contains("error nodes"), "{}", reason("parse"));
    assert!(reason("flags").contains("input_precision=\"tf32x3\""), "{}", reason("flags"));
    assert!(reason("manifest").contains("frozen contract: kernels/kda/decode.toml"), "{}", reason("manifest"));
    assert!(reason("reference").contains("kernels/kda/reference.py"), "{}", reason("reference"));
    // statuses stored
    let cat = Catalog::open(&env.db()).expect("catalog");
    for (id, _) in expect {
        let c = &cat.find_candidates(id).expect("find")[0];
        assert_eq!(c.status, CandidateStatus::Rejected, "{id}");
        assert_eq!(c.evidence.to_value()["verdict"]["kind"], "rejected", "{id}");
    }
    // nothing pending is left
    let (_, out) = validate(&env, &py, &["--pending"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_hanging_kernel_is_an_error_after_its_time_limit_and_the_run_goes_on() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    let dec = "kernels/kda/decode.py";
    // an endless loop the compiler accepts: i_h never changes
    let hang = edit(
        &env,
        dec,
        "    i_h = i_hv // (HV // H)\n",
        "    i_h = i_hv // (HV // H)\n    while i_h >= 0:\n        i_h += 0\n",
    );
    plant(&env, "hang", "other", dec, &hang);
    plant(
        &env,
        "manifest",
        "other",
        "kernels/kda/decode.toml",
        &edit(&env, "kernels/kda/decode.toml", "bench = { N = 64,", "bench = { N = 8,"),
    );
    let started = Instant::now();
    // a temporary directory of this run's own: what validation leaves there is left behind
    let tmp = tempfile::tempdir().expect("tempdir");
    let (report, out) =
        validate_with(&env, &py, &[("TMPDIR", tmp.path())], &["hang", "manifest", "--seeds", "1", "--timeout", "25"]);
    let secs = started.elapsed().as_secs_f64();
    let left: Vec<_> = std::fs::read_dir(tmp.path()).expect("list").flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "validation left {left:?} in its temporary directory");
    assert_eq!(out.status.code(), Some(1));
    let ev = by_id(&report, "hang");
    assert_eq!(verdict(ev), ("error".into(), "correctness".into()), "{ev:#}");
    assert!(ev["verdict"]["reason"].as_str().unwrap_or("").contains("timed out"), "{ev:#}");
    assert!(ev["verdict"]["log"].as_str().is_some_and(|l| !l.is_empty()), "{ev:#}");
    assert!(ev["seconds"].as_f64().is_some_and(|s| s < 40.0), "{ev:#}");
    // the run went on
    assert_eq!(verdict(by_id(&report, "manifest")), ("rejected".into(), "static".into()));
    assert!(secs < 90.0, "{secs}");
    // an error leaves the candidate pending, with its evidence
    let cat = Catalog::open(&env.db()).expect("catalog");
    let c = &cat.find_candidates("hang").expect("find")[0];
    assert_eq!(c.status, CandidateStatus::Proposed);
    assert_eq!(c.evidence.to_value()["verdict"]["kind"], "error");
}

#[test]
fn bad_invocations_fail_with_one_line() {
    let env = project();
    let db = env.db();
    let out = env.run(&["validate", "--db", db.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--pending"));
    let out = env.run(&["validate", "nope", "--db", db.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no candidate \"nope\""));
    let out = env.run(&["validate", "--pending", "--db", db.to_str().expect("utf8"), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["candidates"], serde_json::json!([]));
}

/// `diff --git` headers with an `index` line, as `git diff` writes them, for each file.
fn git_diff(files: &[(&str, &str, &str)]) -> String {
    let mut out = String::new();
    for (rel, old, new) in files {
        let d = kidiom_rewriter::unified(rel, old, new, 3);
        let (first, rest) = d.split_once('\n').expect("header");
        out.push_str(&format!("{first}\nindex 1234567..89abcde 100644\n{rest}"));
    }
    out
}

/// Rules of the static gate that need no Python: a multi-file git diff that
/// touches a manifest, and host code changed in a kernel source.
#[test]
fn contract_and_host_code_edits_are_rejected_at_static() {
    let env = project();
    let (dec, toml) = ("kernels/kda/decode.py", "kernels/kda/decode.toml");
    let (dec_text, toml_text) = (read(&env, dec), read(&env, toml));
    // a kernel edit plus a tolerance edit in one git diff
    let kernel_edit = edit(&env, dec, "b_beta * (b_v - b_p)", "b_beta * (b_v - b_p) * 1.0");
    let multi = git_diff(&[
        (dec, dec_text.as_str(), kernel_edit.as_str()),
        (toml, toml_text.as_str(), edit(&env, toml, "rel_l2 = 5e-3", "rel_l2 = 5e-1").as_str()),
    ]);
    plant(&env, "multi", "other", dec, &kernel_edit);
    let cat = Catalog::open(&env.db()).expect("catalog");
    let mut c = cat.find_candidates("multi").expect("find").remove(0);
    c.diff = multi;
    cat.put_candidate(&c).expect("put");
    // host code: the launcher, and a new import
    plant(
        &env,
        "launcher",
        "memory",
        dec,
        &edit(
            &env,
            dec,
            "    BV = min(triton.next_power_of_2(V), 32)\n",
            "    BV = min(triton.next_power_of_2(V), 64)\n",
        ),
    );
    plant(&env, "import", "memory", dec, &edit(&env, dec, "import triton\n", "import triton\nimport numpy as np\n"));

    let py = std::env::var_os("KIDIOM_PYTHON").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("python3"));
    let (report, out) = validate(&env, &py, &["--pending", "--seeds", "1", "--timeout", "60"]);
    assert_eq!(out.status.code(), Some(1));
    for id in ["multi", "launcher", "import"] {
        let ev = by_id(&report, id);
        assert_eq!(verdict(ev), ("rejected".to_string(), "static".to_string()), "{id}: {ev:#}");
        assert_eq!(gate(ev, "syntax")["status"], "passed", "{id}");
        assert!(gate(ev, "correctness").is_null(), "{id}: no later gate ran");
    }
    let reason = |id: &str| by_id(&report, id)["verdict"]["reason"].as_str().unwrap_or("").to_string();
    assert!(reason("multi").contains("frozen contract: kernels/kda/decode.toml"), "{}", reason("multi"));
    assert!(
        reason("launcher").contains("changes host code outside the kernel: kda_decode_launch"),
        "{}",
        reason("launcher")
    );
    assert!(
        reason("import").contains("changes host code outside the kernel: import numpy as np"),
        "{}",
        reason("import")
    );
}

/// `kidiom validate --patch`: an edit of one's own, from a file or stdin,
/// stored as a `manual` candidate with its evidence and shown by `review`.
#[test]
fn validate_patch_from_a_file_and_from_stdin() {
    let env = project();
    let dec = "kernels/kda/decode.py";
    let text = read(&env, dec);
    let db = env.db();
    let dbs = db.to_str().expect("utf8");
    // a file: the edit breaks the parse (rejected at syntax, before any harness runs)
    let broken = edit(&env, dec, "b_p = tl.sum(b_s * b_k[:, None], axis=0)", "b_p = tl.sum(b_s * b_k[:, None], axis=0");
    let patch = env.write("edit.patch", git_diff(&[(dec, text.as_str(), broken.as_str())]));
    let (report, out) = validate(&env, Path::new("python3"), &["--patch", patch.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let ev = &report["candidates"][0];
    assert_eq!(verdict(ev), ("rejected".into(), "syntax".into()), "{ev:#}");
    assert_eq!(ev["pattern"], "manual");
    let id = ev["candidate"].as_str().expect("id").to_string();
    assert!(id.starts_with("manual@kernels/kda/decode.py#"), "{id}");

    // stdin, with a category: host code changed (rejected at static)
    let host = edit(&env, dec, "    return o\n\n\ndef kda_decode(", "    return o.clone()\n\n\ndef kda_decode(");
    let mut child = env
        .cmd()
        .args(["validate", "--db", dbs, "--device", "cpu", "--json", "--patch", "-", "--category", "memory"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(kidiom_rewriter::unified(dec, &text, &host, 3).as_bytes()).expect("write");
    }
    let out = child.wait_with_output().expect("wait");
    let report: Value = serde_json::from_slice(&out.stdout).expect("json");
    let ev = &report["candidates"][0];
    assert_eq!(verdict(ev), ("rejected".into(), "static".into()), "{ev:#}");
    assert_eq!(ev["category"], "memory");
    assert!(ev["verdict"]["reason"].as_str().is_some_and(|r| r.contains("kda_decode_launch")), "{ev:#}");

    // both are stored with their evidence; review shows them
    let listed = env.json(&["review", "--db", dbs, "--json"]);
    let manual: Vec<&Value> = listed.as_array().expect("list").iter().filter(|c| c["pattern_id"] == "manual").collect();
    assert_eq!(manual.len(), 2, "{listed:#}");
    let shown = env.run(&["review", &id, "--db", dbs]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("rejected at syntax") && shown.contains("validate --patch"), "{shown}");
    // nothing in the tree changed
    assert_eq!(read(&env, dec), text);

    // a patch that does not apply, an empty one, and --category without --patch are errors
    let stale = env.write("stale.patch", kidiom_rewriter::unified(dec, "nothing like it\n", "x\n", 3));
    let out = env.run(&["validate", "--db", dbs, "--patch", stale.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not match"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let empty = env.write("empty.patch", "");
    assert_eq!(env.run(&["validate", "--db", dbs, "--patch", empty.to_str().expect("utf8")]).status.code(), Some(2));
    assert_eq!(env.run(&["validate", "--db", dbs, "--category", "memory"]).status.code(), Some(2));
    let out = env.run(&["validate", "--db", dbs, "--category", "memory", "--pending"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--patch"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A CUDA variant with a barrier cannot run under the CPU emulation: its
/// correctness is not checked, and the verdict says so.
#[test]
fn a_check_the_cpu_cannot_run_is_not_a_pass() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    let cu = "kernels/kda_cuda/decode.cu";
    plant(
        &env,
        "barrier",
        "other",
        cu,
        // a memory fence across the device: nothing a CPU emulation can stand behind
        &edit(&env, cu, "    int nh = blockIdx.x;\n", "    int nh = blockIdx.x;\n    __threadfence();\n"),
    );
    let (report, _) = validate(&env, &py, &["barrier", "--seeds", "1", "--timeout", "300"]);
    let ev = by_id(&report, "barrier");
    assert_eq!(ev["verdict"]["kind"], "needs-gpu", "{ev:#}");
    let reason = ev["verdict"]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("correctness not checked on this CPU"), "{reason}");
    assert!(
        ev["verdict"]["flags"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f.as_str().is_some_and(|f| f.contains("not checked")))),
        "{ev:#}"
    );
    let cr = gate(ev, "correctness");
    assert_eq!(cr["status"], "skipped", "{cr:#}");
    assert!(cr["device"].is_null(), "a skipped check names no device: {cr:#}");
    assert_eq!(gate(ev, "static")["status"], "passed", "{ev:#}");
}

/// `--device cuda` on a machine without CUDA: a check that cannot run here is
/// never the candidate's failure. The harness asks what is missing (the
/// driver library, torch, a device) before any worker or candidate code runs,
/// and the verdict is `needs-gpu` naming it, not `rejected` at correctness.
#[test]
fn device_cuda_without_cuda_needs_a_gpu_and_says_what_is_missing() {
    let Some(py) = python() else { return };
    let no_cuda = std::process::Command::new(&py)
        .args(["-c", "import ctypes\ntry:\n    ctypes.CDLL('libcuda.so.1')\nexcept OSError:\n    raise SystemExit(1)"])
        .status()
        .is_ok_and(|s| !s.success());
    if !no_cuda {
        eprintln!("skipped: this machine has a CUDA driver library");
        return;
    }
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    let dec = "kernels/kda/decode.py";
    let same = edit(&env, dec, "b_p = tl.sum(b_s * b_k[:, None], axis=0)", "b_p = tl.sum(b_k[:, None] * b_s, axis=0)");
    plant(&env, "harmless", "other", dec, &same);
    let db = env.db();
    let out = env
        .cmd()
        .env("KIDIOM_PYTHON", &py)
        .args(["validate", "--db", db.to_str().expect("utf8"), "--device", "cuda", "--json", "harmless"])
        .output()
        .expect("spawn");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    let ev = by_id(&report, "harmless");
    assert_eq!(ev["verdict"]["kind"], "needs-gpu", "{ev:#}");
    let reason = ev["verdict"]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("no CUDA driver library (libcuda.so)"), "{reason}");
    assert!(!reason.contains("broke the worker"), "{reason}");
    assert_eq!(gate(ev, "correctness")["status"], "skipped", "{ev:#}");
    assert_eq!(gate(ev, "static")["status"], "passed", "{ev:#}");
    // nothing of the GPU gate ran: no launch spec was made, no gate process started
    let commands = ev["gates"].as_array().into_iter().flatten().flat_map(|g| g["commands"].as_array().cloned());
    for c in commands.flatten() {
        let c = c.as_str().unwrap_or("");
        assert!(!c.contains(" spec ") && !c.contains("gpu-gate"), "{c}");
    }
}

/// Our decode's bench spec and cubin (the validator's fixture).
fn decode_fixture() -> (Value, Vec<u8>) {
    let fixture = repo().join("validator/tests/fixtures/gpu/kda_decode_bench");
    let spec = std::fs::read(fixture.with_extension("launch.json")).expect("fixture spec");
    let cubin = std::fs::read(fixture.with_extension("cubin")).expect("fixture cubin");
    (serde_json::from_slice(&spec).expect("fixture JSON"), cubin)
}

/// A spec directory `side` under `env` for `spec`: its launch.json and one
/// input set of one element per tensor (expected values for what it writes);
/// the cubin is the caller's.
fn spec_dir(env: &crate::util::Env, side: &str, spec: &Value) -> PathBuf {
    let npy = |descr: &str, data: &[u8]| {
        let h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (1,), }}\n");
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend((h.len() as u16).to_le_bytes());
        out.extend(h.as_bytes());
        out.extend(data);
        out
    };
    env.write(&format!("{side}/launch.json"), spec.to_string());
    for p in spec["params"].as_array().expect("params") {
        let Some(name) = p["name"].as_str().filter(|_| p["kind"] == "tensor") else { continue };
        let (descr, bytes) = if p["dtype"] == "i64" { ("<i8", vec![0; 8]) } else { ("<f4", vec![0; 4]) };
        env.write(&format!("{side}/inputs/set0/{name}.npy"), npy(descr, &bytes));
        if p["role"] != "input" {
            env.write(&format!("{side}/expected/set0/{name}.npy"), npy("<f8", &[0; 8]));
        }
    }
    env.path().join(side)
}

/// `kidiom gpu-gate` (the GPU gate's own process) judges the specs before
/// any device: a candidate spec directory without its cubin, or with a
/// cubin that is not the one its spec names, is rejected (exit 1); on a
/// machine without a CUDA driver the rest is `needs-gpu` (exit 3); one JSON
/// line either way.
#[test]
fn the_gpu_gate_process_judges_the_specs_before_any_device() {
    let env = crate::util::Env::new();
    let (spec, cubin) = decode_fixture();
    for side in ["base", "cand"] {
        spec_dir(&env, side, &spec);
    }
    env.write("base/kernel.cubin", &cubin);
    let gate = |env: &crate::util::Env| {
        let out = env
            .cmd()
            .args([
                "gpu-gate",
                "--baseline",
                "base",
                "--candidate",
                "cand",
                "--rel-l2",
                "5e-3",
                "--max-abs-rel",
                "2e-2",
            ])
            .output()
            .expect("spawn");
        let line: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("not one JSON line ({e}): {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), line)
    };
    let (code, line) = gate(&env);
    assert_eq!((code, line["verdict"]["kind"].as_str()), (Some(1), Some("rejected")), "{line:#}");
    assert!(line["verdict"]["what"].as_str().is_some_and(|w| w.contains("kernel.cubin")), "{line:#}");
    // a cubin that is not the one its spec names is refused before any device is asked for
    let mut tampered = cubin.clone();
    if let Some(last) = tampered.last_mut() {
        *last ^= 1;
    }
    env.write("cand/kernel.cubin", &tampered);
    let (code, line) = gate(&env);
    assert_eq!((code, line["verdict"]["kind"].as_str()), (Some(1), Some("rejected")), "{line:#}");
    assert!(line["verdict"]["what"].as_str().is_some_and(|w| w.contains("sha256")), "{line:#}");
    if kidiom_validator::gpu::cuda::driver_present() {
        eprintln!("skipped the no-driver half: this machine has a CUDA driver library");
        return;
    }
    env.write("cand/kernel.cubin", &cubin);
    let (code, line) = gate(&env);
    assert_eq!(code, Some(3), "{line:#}");
    assert_eq!(line["verdict"]["kind"], "needs-gpu", "{line:#}");
    assert_eq!(line["verdict"]["reason"], "no CUDA driver library (libcuda.so) on this machine", "{line:#}");
    assert_eq!(line["calls"], 0);
}

/// The speed gate's way to the GPU gate: `kidiom gpu-gate` found as an
/// executable, given two spec directories made from our decode's bench
/// spec and cubin (the fixture) and its line read back with the cubin
/// hashes. A candidate whose spec halves the grid's y (half the blocks
/// skipped) is not refused by the ELF check (the grid is no part of the
/// ELF): it reaches the device, where its unwritten outputs are caught
/// (`scripts/device-check.sh` plants it on a GPU); here it needs a GPU.
#[test]
fn the_gpu_gate_process_is_spawned_and_its_line_read() {
    use kidiom_validator::gpu::gate::{GateVerdict, Tolerance};
    use kidiom_validator::gpu::process::{self, GateArgs};
    let (spec, cubin) = decode_fixture();
    let env = crate::util::Env::new();
    let dir = |side: &str, spec: &Value| {
        env.write(&format!("{side}/kernel.cubin"), &cubin);
        spec_dir(&env, side, spec)
    };
    let mut halved = spec.clone();
    halved["grid"][1] = Value::from(spec["grid"][1].as_u64().expect("grid y") / 2);
    let args = GateArgs {
        baseline: dir("base", &spec),
        candidate: dir("cand", &halved),
        tolerance: Tolerance { rel_l2: 5e-3, max_abs_rel: 2e-2 },
        warmup: 1,
        rounds: 5,
        floor_bytes: Some(1e9),
        seed: Some(1),
        ordinal: 0,
    };
    let run = process::run(Path::new(env!("CARGO_BIN_EXE_kidiom")), &args, std::time::Duration::from_secs(60))
        .expect("kidiom gpu-gate starts");
    assert!(run.process.command.contains("gpu-gate --baseline"), "{}", run.process.command);
    let out = run.outcome.unwrap_or_else(|e| panic!("{e}: {}", run.process.stderr_tail));
    let sha = spec["cubin_sha256"].as_str().expect("sha");
    assert_eq!(out.cubins.get("baseline").map(String::as_str), Some(sha), "{out:?}");
    assert_eq!(out.cubins.get("candidate").map(String::as_str), Some(sha), "{out:?}");
    if kidiom_validator::gpu::cuda::driver_present() {
        eprintln!("skipped the no-driver half: this machine has a CUDA driver library");
        return;
    }
    assert_eq!(run.process.code, Some(3));
    assert_eq!(
        out.verdict,
        GateVerdict::NeedsGpu { reason: "no CUDA driver library (libcuda.so) on this machine".into() },
        "the halved grid passes the ELF check: {out:?}"
    );
    // a spec the cubin disagrees with is refused before any device is asked for: exit 1, read as such
    let mut bad = spec.clone();
    bad["block"] = serde_json::json!([256, 1, 1]);
    let args = GateArgs { candidate: dir("bad", &bad), ..args };
    let run = process::run(Path::new(env!("CARGO_BIN_EXE_kidiom")), &args, std::time::Duration::from_secs(60))
        .expect("kidiom gpu-gate starts");
    assert_eq!(run.process.code, Some(1));
    let out = run.outcome.expect("a rejection is a line too");
    assert!(matches!(&out.verdict, GateVerdict::Rejected(m) if m.what.starts_with("spec refused")), "{out:?}");
}
