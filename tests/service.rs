//! Trust, round four, classes 1 and 2 (issue #50): the host speed gate's
//! `accepted` cannot be bought. Planted KV-transfer modules through
//! `kidiom validate`, each with the honest GIL release beside it:
//!
//! | class | planted | expected |
//! |---|---|---|
//! | 1 isolation of measurement | a module whose `gather` wraps the baseline's (when loaded in the same process) in a 3 ms native spin that holds the GIL | speed: no significant gain (each window in a process of its own) |
//! | 2 the service as the metric | releases the GIL, then sleeps in each `gather`: the scheduler runs freely while the transfers crawl | speed: the service is slower (requests/s and p99), though its scheduler gap is smaller |
//! | 2 | remembers every transfer by its addresses (in a Python set) and skips a repeat | correctness (check's repeated phase) or speed (the service's state differs from the reference replay) |
//! | 4 | the same memo in a C++ `static` | static: state kept across calls |
//! | twin | the GIL release | accepted on requests/s, p99 no worse |
//! | 1 | the twin again, its baseline's history in the catalog set 20x higher | not accepted: the baseline is far below its history |

use serde_json::Value;

use crate::project::*;

const KV: &str = "kernels/kv_transfer/kv_transfer.cpp";
const MODULE: &str = "PYBIND11_MODULE(kv_transfer, m) {\n";
const GATHER_LOOP: &str =
    "    if (p.page_bytes == 0) return;\n    for (size_t i = 0; i < n; ++i) {\n        const uint8_t* src";

/// `py::gil_scoped_release release;` first in gather, scatter and checksum.
fn release_gil(text: &str) -> String {
    let mut out = text.to_string();
    for head in [
        "void gather(const BufferView& pool, const BufferView& page_ids, const BufferView& out) {\n",
        "void scatter(const BufferView& buf, const BufferView& page_ids, const BufferView& pool) {\n",
        "uint64_t checksum(const BufferView& buf) {\n",
    ] {
        assert_eq!(out.matches(head).count(), 1, "{head}");
        out = out.replace(head, &format!("{head}    py::gil_scoped_release release;\n"));
    }
    out
}

/// Run by the module's `gather` at every call (a static initializer would be
/// refused at static): every other `kv_transfer` module in the process (the
/// baseline, when both share one) gets a `gather` that first spins 3 ms in
/// native code, holding the GIL. `_me` marks this module; `_spin` is a binding.
const SLOW_THE_OTHER: &str = r#"    {
        py::dict g;
        g["__builtins__"] = py::module_::import("builtins");
        py::exec(R"PY(
import sys
for _name, _mod in list(sys.modules.items()):
    if _name.endswith('.kv_transfer') and not hasattr(_mod, '_me') and not hasattr(_mod.gather, '_slowed'):
        _spin = next(m for m in sys.modules.values() if hasattr(m, '_me') and hasattr(m, '_spin'))._spin
        def _slow(*args, _inner=_mod.gather, _spin=_spin):
            _spin()
            return _inner(*args)
        _slow._slowed = True
        _mod.gather = _slow
)PY", g);
    }
"#;

/// The bindings it adds: a spin, and its own mark.
const SPIN_AND_MARK: &str = r#"    m.def("_spin", [] {
        const auto t0 = std::chrono::steady_clock::now();
        while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(3)) {}
    });
    m.def("_me", [] { return true; });
"#;

#[test]
fn the_host_speed_gate_cannot_be_bought() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_alone(); // four service benches, timed
    let env = project();
    let base = std::fs::read_to_string(env.path().join(KV)).expect("read");
    assert_eq!(base.matches(MODULE).count(), 1);
    assert_eq!(base.matches(GATHER_LOOP).count(), 1);

    let honest = release_gil(&base);
    plant(&env, "releases-the-gil", "concurrency", KV, &honest);
    plant(
        &env,
        "slows-the-baseline-when-called",
        "concurrency",
        KV,
        &base
            .replace(
                "#include <pybind11/pybind11.h>\n",
                "#include <pybind11/pybind11.h>\n#include <pybind11/eval.h>\n#include <chrono>\n",
            )
            .replace(MODULE, &format!("{MODULE}{SPIN_AND_MARK}"))
            .replacen(GATHER_LOOP, &format!("{SLOW_THE_OTHER}{GATHER_LOOP}"), 1),
    );
    let sleeps =
        honest.replace("#include <vector>\n", "#include <vector>\n#include <chrono>\n#include <thread>\n").replacen(
            GATHER_LOOP,
            &format!("    std::this_thread::sleep_for(std::chrono::milliseconds(2));\n{GATHER_LOOP}"),
            1,
        );
    plant(&env, "releases-the-gil-then-sleeps", "concurrency", KV, &sleeps);
    let (report, _) = validate(&env, &py, &["--pending", "--seeds", "1", "--no-consistency", "--timeout", "900"]);
    let reason = |id: &str| by_id(&report, id)["verdict"]["reason"].as_str().unwrap_or("").to_string();
    let speed = |id: &str| gate(by_id(&report, id), "speed").clone();
    let rps = |s: &Value, side: &str| s[side]["requests_per_s"].as_f64().unwrap_or(f64::NAN);

    // the twin: accepted on the service's figures, in processes of its own
    let ev = by_id(&report, "releases-the-gil");
    assert_eq!(ev["verdict"]["kind"], "accepted", "{ev:#}");
    let s = speed("releases-the-gil");
    assert_eq!(s["metrics"]["metric"], "service-requests", "{s:#}");
    assert!(
        reason("releases-the-gil").contains("processes: one per variant and window"),
        "{}",
        reason("releases-the-gil")
    );
    let honest_base = rps(&s, "before");

    // class 1: what the module does cannot reach the baseline's windows
    let ev = by_id(&report, "slows-the-baseline-when-called");
    assert_eq!(verdict(ev), ("rejected".to_string(), "speed".to_string()), "{ev:#}");
    let s = speed("slows-the-baseline-when-called");
    let r = reason("slows-the-baseline-when-called");
    assert!(r.contains("processes: one per variant and window"), "{r}");
    // the baseline served as many requests as in the twin's bench: nothing slowed it
    let b = rps(&s, "before");
    assert!((b / honest_base - 1.0).abs() < 0.25, "baseline {b} requests/s here, {honest_base} beside the twin: {r}");

    // class 2: a freer scheduler is no gain when the requests wait for their transfers
    let ev = by_id(&report, "releases-the-gil-then-sleeps");
    assert_eq!(verdict(ev), ("rejected".to_string(), "speed".to_string()), "{ev:#}");
    let r = reason("releases-the-gil-then-sleeps");
    assert!(r.starts_with("the service is slower: requests/s"), "{r}");
    let s = speed("releases-the-gil-then-sleeps");
    let gap = |side: &str| s[side]["gap"].as_f64().unwrap_or(f64::NAN);
    assert!(
        gap("after") < gap("before"),
        "the scheduler's own figure improves ({} -> {}): {r}",
        gap("before"),
        gap("after")
    );
    let gbps = |side: &str| s[side]["transfer_gbps"].as_f64().unwrap_or(f64::NAN);
    assert!(gbps("after") < gbps("before"), "the transfers slow ({} -> {} GB/s): {r}", gbps("before"), gbps("after"));

    // class 1: the baseline's history is the catalog's, one row per bench key (baseline build,
    // service, shape, machine), a figure per unflagged bench
    let conn = rusqlite::Connection::open(env.db()).expect("open the catalog");
    let rows: Vec<(String, String, String, String)> = conn
        .prepare("SELECT key, kernel, machine, requests_per_s FROM host_baselines")
        .and_then(|mut st| st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?.collect())
        .expect("host_baselines");
    assert_eq!(rows.len(), 1, "one baseline, one machine: {rows:?}");
    let (key, kernel, machine, figures) = &rows[0];
    let figures: Vec<f64> = serde_json::from_str(figures).expect("figures");
    let machine: Value = serde_json::from_str(machine).expect("machine");
    assert_eq!(kernel, "kv_transfer");
    assert!(machine["cpus"].as_u64().is_some_and(|n| n > 0) && machine["host"].is_string(), "{machine}");
    // the twin, the module that slows the other and the one that sleeps were benched
    assert!(figures.len() >= 3 && figures.iter().all(|f| *f > 0.0), "{figures:?}");
    assert!(figures.iter().any(|f| (f / honest_base - 1.0).abs() < 1e-9), "the twin's baseline: {figures:?}");
    // a history far above today's figures (as if the machine had always served 20x more): the
    // twin's next bench is out of its history, and is not accepted
    let high = serde_json::to_string(&vec![honest_base * 20.0; 3]).expect("json");
    conn.execute("UPDATE host_baselines SET requests_per_s = ?1 WHERE key = ?2", rusqlite::params![high, key])
        .expect("update");
    let (again, _) = validate(&env, &py, &["releases-the-gil", "--seeds", "1", "--no-consistency", "--timeout", "900"]);
    let ev = by_id(&again, "releases-the-gil");
    assert_ne!(ev["verdict"]["kind"], "accepted", "{ev:#}");
    let flags = ev["verdict"]["flags"].to_string();
    assert!(flags.contains("far below its history on this machine"), "{ev:#}");
    // a flagged figure does not join the history
    let after: String = conn
        .query_row("SELECT requests_per_s FROM host_baselines WHERE key = ?1", [key], |r| r.get(0))
        .expect("history");
    assert_eq!(serde_json::from_str::<Vec<f64>>(&after).expect("figures"), vec![honest_base * 20.0; 3]);
}

/// The memos: wrong results that only a repeated call shows, caught before any timing (their
/// test, apart from the timed one above, needs no CPU of its own).
#[test]
fn a_memo_of_earlier_transfers_is_caught_before_the_speed_gate() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    let base = std::fs::read_to_string(env.path().join(KV)).expect("read");
    assert_eq!(base.matches(GATHER_LOOP).count(), 1);
    // every transfer seen before, by its three addresses: a repeat is skipped. Kept in a Python
    // set (a C++ `static` would be refused at static: `memo-in-a-static`)
    let memo = r#"    {
        py::object key = py::make_tuple(size_t(pool.data), size_t(page_ids.data), size_t(out.data));
        py::object seen = py::module_::import("sys").attr("__dict__").attr("setdefault")("_kv_seen", py::set());
        if (seen.attr("__contains__")(key).cast<bool>()) return;
        seen.attr("add")(key);
    }
"#;
    plant(&env, "memo-by-address", "concurrency", KV, &base.replacen(GATHER_LOOP, &format!("{memo}{GATHER_LOOP}"), 1));
    let memo = "    static std::set<std::tuple<const uint8_t*, const uint8_t*, const uint8_t*>> seen;\n    \
                if (!seen.insert({pool.data, page_ids.data, out.data}).second) return;\n";
    let memo_text = base
        .replace("#include <vector>\n", "#include <vector>\n#include <set>\n#include <tuple>\n")
        .replacen(GATHER_LOOP, &format!("{memo}{GATHER_LOOP}"), 1);
    plant(&env, "memo-in-a-static", "concurrency", KV, &memo_text);

    let (report, _) = validate(&env, &py, &["--pending", "--seeds", "1", "--no-consistency", "--timeout", "900"]);
    let reason = |id: &str| by_id(&report, id)["verdict"]["reason"].as_str().unwrap_or("").to_string();
    // class 2: a memo of earlier transfers skips a call that must copy again: caught by check's
    // repeated concurrent phase (a module that holds the GIL never overlaps, so the phase runs
    // again with the same calls) or, else, by the service's exchange ring
    let ev = by_id(&report, "memo-by-address");
    let r = reason("memo-by-address");
    match verdict(ev) {
        (kind, gate) if kind == "rejected" && gate == "correctness" => {
            assert!(r.contains("wrote bytes that differ from the reference"), "{r}")
        }
        (kind, gate) if kind == "rejected" && gate == "speed" => {
            assert!(r.contains("state differs from the reference replay"), "{r}")
        }
        other => panic!("memo-by-address: {other:?}: {ev:#}"),
    }
    // class 4: the same memo in a C++ `static` is state no check of single calls sees
    let ev = by_id(&report, "memo-in-a-static");
    assert_eq!(verdict(ev), ("rejected".to_string(), "static".to_string()), "{ev:#}");
    let r = reason("memo-in-a-static");
    assert!(
        r.starts_with("state or code outside the calls the checks see: `static std::set<std::tuple<const uint8_t*"),
        "{r}"
    );
}
