//! The GIL idiom end to end: mined from a self-made binding corpus, refused
//! where a bound function touches a Python object after the release point,
//! applied to our KV-transfer module, and accepted by the speed gate measured
//! on this CPU (the scheduler thread's throughput gap while transfers run).

use serde_json::Value;

use crate::project::*;
use crate::util::Env;

const GUARD: &str = "cpp-guard-binding-fn-py-gil-scoped-release";
const CALL_GUARD: &str = "cpp-binding-arg-binding-def-py-call-guard";

/// Our own binding code, in the shapes upstream uses: a release as the first
/// statement of bound functions, `py::call_guard` on `.def`, and functions
/// that hold the GIL (the contrast that makes the decoration an idiom).
const UPSTREAM: &str = r#"#include <pybind11/pybind11.h>
namespace py = pybind11;

static void copy_blocks(long src, long dst, long n) {
  py::gil_scoped_release release;
  move_bytes(src, dst, n);
}

static void fill_blocks(long dst, long n, int v) {
  py::gil_scoped_release release;
  set_bytes(dst, n, v);
}

static long count_blocks(long n) {
  return n / 16;
}

static void flush(long dst) {
  sync_bytes(dst);
}

PYBIND11_MODULE(up, m) {
  m.def("copy_blocks", &copy_blocks);
  m.def("fill_blocks", &fill_blocks);
  m.def("count_blocks", &count_blocks);
  m.def("flush", &flush, py::call_guard<py::gil_scoped_release>());
  m.def("flush2", &flush, py::call_guard<py::gil_scoped_release>());
}
"#;

/// A binding file with one safe function and one that appends to a
/// `py::list` (a release before it would crash the interpreter).
const PLANTED: &str = r#"#include <pybind11/pybind11.h>
namespace py = pybind11;

static void copy_pages(long src, long dst, long n) {
  move_bytes(src, dst, n);
}

static void collect_pages(py::list out, long n) {
  for (long i = 0; i < n; i++) {
    out.append(i);
  }
}

PYBIND11_MODULE(planted, m) {
  m.def("copy_pages", &copy_pages);
  m.def("collect_pages", &collect_pages);
}
"#;

fn mine_upstream(env: &Env) {
    let up = env.write("upstream/up.cpp", UPSTREAM);
    mine_upstream_dir(env, up.parent().expect("dir"));
}

fn apply(env: &Env, target: &str, pattern: &str) -> Value {
    let db = env.db();
    let out = env.run(&["apply", target, "--pattern", pattern, "--db", db.to_str().expect("utf8"), "--json"]);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn the_release_is_mined_and_refused_where_python_objects_follow() {
    let env = Env::new();
    mine_upstream(&env);
    let db = env.db();
    let p = env.json(&["catalog", "show", GUARD, "--db", db.to_str().expect("utf8"), "--json"]);
    let p = if p.is_array() { p[0].clone() } else { p };
    assert_eq!(p["category"], "concurrency", "{p:#}");
    assert_eq!(p["before"], "$R $F($$$PARAMS) { $$$BODY }", "{p:#}");
    assert_eq!(p["after"], "$R $F($$$PARAMS) { py::gil_scoped_release release; $$$BODY }", "{p:#}");
    assert_eq!(p["values"][0]["value"], "release", "{p:#}");

    env.write("kernels/planted.cpp", PLANTED);
    for pattern in [GUARD, CALL_GUARD] {
        let report = apply(&env, "kernels/planted.cpp", pattern);
        let cands = report["candidates"].as_array().expect("candidates");
        assert_eq!(cands.len(), 1, "{pattern}: {report:#}");
        let diff = cands[0]["diff"].as_str().expect("diff");
        // the safe function gets the release, the py::list one does not
        assert!(diff.contains("copy_pages"), "{diff}");
        assert!(!diff.contains("+  py::gil_scoped_release release;\n   for"), "{diff}");
        assert!(!diff.contains("&collect_pages, py::call_guard"), "{diff}");
        let dropped = report["dropped"].as_array().expect("dropped");
        let why: Vec<&str> = dropped.iter().filter_map(|d| d["reason"].as_str()).collect();
        assert!(
            why.iter().any(|w| w.contains("collect_pages") && w.contains("`out` (py::list)")),
            "{pattern}: the refusal must name the function and the Python object: {why:?}"
        );
    }
    // the text output says it too
    let out = env.run(&["apply", "kernels/planted.cpp", "--pattern", GUARD, "--db", db.to_str().expect("utf8")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("dropped") && err.contains("py::list"), "{err}");
}

#[test]
fn the_release_in_our_kv_transfer_module_is_accepted_on_this_cpu() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_alone();
    let env = project();
    mine_upstream(&env);
    let target = "kernels/kv_transfer/kv_transfer.cpp";
    let report = apply(&env, target, GUARD);
    let cands = report["candidates"].as_array().expect("candidates");
    assert_eq!(cands.len(), 1, "{report:#}");
    let id = cands[0]["id"].as_str().expect("id").to_string();
    let diff = cands[0]["diff"].as_str().expect("diff");
    assert!(cands[0]["sites"].as_u64().is_some_and(|n| n >= 3), "gather, scatter and checksum: {diff}");

    // a planted candidate that crashes the module: isolated, rejected with the signal
    let text = std::fs::read_to_string(env.path().join(target)).expect("read");
    let anchor = text.find("std::memcpy").expect("the module copies with std::memcpy");
    let crash = format!("{}*(volatile int*)nullptr = 1; {}", &text[..anchor], &text[anchor..]);
    plant(&env, "crash", "concurrency", target, &crash);

    let (report, _) = validate(&env, &py, &[&id, "crash", "--seeds", "1", "--timeout", "600"]);
    let ev = by_id(&report, &id);
    assert_eq!(ev["verdict"]["kind"], "accepted", "{ev:#}");
    let speed = gate(ev, "speed");
    assert_eq!(speed["status"], "passed", "{speed:#}");
    assert_eq!(speed["metrics"]["metric"], "service-requests", "{speed:#}");
    let rps = |side: &str| speed[side]["requests_per_s"].as_f64().expect("requests/s");
    let noise = speed["metrics"]["noise_floor"].as_f64().expect("noise");
    assert!(
        rps("after") / rps("before") - 1.0 > noise,
        "requests/s {} -> {}, noise {noise}",
        rps("before"),
        rps("after")
    );
    let p99 = |side: &str| speed[side]["p99_us"].as_f64().expect("p99");
    assert!(p99("after") <= p99("before") * (1.0 + noise), "p99 {} -> {} us", p99("before"), p99("after"));
    // the scheduler's throughput and the transfers' bandwidth are shown beside the verdict's figures
    let gap = |side: &str| speed[side]["gap"].as_f64().expect("gap");
    assert!(gap("before") > gap("after"), "scheduler gap {} -> {}", gap("before"), gap("after"));
    assert!(speed["after"]["transfer_gbps"].as_f64().is_some_and(|g| g > 0.0), "{speed:#}");
    let order: Vec<&str> =
        speed["metrics"]["order"].as_array().expect("order").iter().filter_map(Value::as_str).collect();
    assert!(order.contains(&"baseline") && order.contains(&"candidate"), "{order:?}");
    eprintln!("{}", speed["summary"]);

    let crashed = by_id(&report, "crash");
    assert_eq!(crashed["verdict"]["kind"], "rejected", "{crashed:#}");
    assert_eq!(crashed["verdict"]["gate"], "correctness", "{crashed:#}");
    assert!(crashed["verdict"]["reason"].as_str().is_some_and(|r| r.contains("SIGSEGV")), "{crashed:#}");

    // the review table and the review of the candidate show the gap
    let db = env.db();
    let out = env.run(&["review", "--db", db.to_str().expect("utf8")]);
    let table = String::from_utf8_lossy(&out.stdout);
    let short = id.rsplit('#').next().unwrap_or(&id);
    assert!(table.lines().any(|l| l.starts_with(short) && l.contains("requests/s")), "{table}");
    let out = env.run(&["review", &id, "--db", db.to_str().expect("utf8")]);
    let one = String::from_utf8_lossy(&out.stdout);
    assert!(one.contains("requests/s") && one.contains("p99 latency") && one.contains("gil_scoped_release"), "{one}");
}
