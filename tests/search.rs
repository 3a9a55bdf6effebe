//! The per-site search (`kidiom apply --search`): on a copy of our KDA
//! prefill kernel, with a precision pattern mined from a self-made corpus
//! whose values are a literal and a module-level constant built from a
//! conditional, the search finds a variant far more accurate than TF32 at a
//! modest static cost, rejects the all-sites ieee variant as predicted
//! slower, and `review` shows the front beside the chosen candidate. Memory
//! hints are proposed per access by the role of its tensor.

use serde_json::Value;

use crate::project::*;

/// Upstream kernels where `tl.dot` carries `"ieee"` or a constant that is
/// `bf16x3` or `ieee` depending on a flag, and dots without a precision.
const UPSTREAM: &str = r#"import triton
import triton.language as tl

NEW_TRITON = True
PREC = tl.constexpr('bf16x3' if NEW_TRITON else 'ieee')


@triton.jit
def up_a(x, y, BT: tl.constexpr):
    a = tl.load(x + tl.arange(0, BT))
    b = tl.dot(a, a, input_precision=PREC)
    c = tl.dot(a, b, input_precision=PREC)
    d = tl.dot(b, c, input_precision="ieee")
    e = tl.dot(d, d)
    tl.store(y + tl.arange(0, BT), e)
"#;

/// Upstream loads with both eviction policies.
const HINTS: &str = r#"import triton
import triton.language as tl


@triton.jit
def up_b(x, s, y, BT: tl.constexpr):
    i = tl.program_id(0)
    a = tl.load(x + i * BT + tl.arange(0, BT), eviction_policy="evict_first")
    b = tl.load(s + tl.arange(0, BT), eviction_policy="evict_last")
    c = tl.load(s + BT + tl.arange(0, BT), eviction_policy="evict_last")
    d = tl.load(x + tl.arange(0, BT))
    tl.store(y + i * BT + tl.arange(0, BT), a + b + c + d)
"#;

fn mine(env: &crate::util::Env) {
    let up = env.write("upstream/up.py", UPSTREAM);
    env.write("upstream/hints.py", HINTS);
    mine_upstream_dir(env, up.parent().expect("dir"));
}

fn last_error(p: &Value) -> f64 {
    p["error"].as_array().and_then(|e| e.last()).and_then(Value::as_f64).unwrap_or(f64::INFINITY)
}

fn figure(p: &Value, k: &str) -> i64 {
    p["figures"][k].as_i64().unwrap_or_else(|| panic!("no figure {k}: {p:#}"))
}

#[test]
fn the_search_finds_a_precise_and_cheap_variant_and_rejects_ieee_everywhere() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    mine(&env);
    let db = env.db();
    let dbs = db.to_str().expect("utf8");
    let out = env
        .cmd()
        .env("KIDIOM_PYTHON", &py)
        .args([
            "apply",
            "kernels/kda/prefill.py",
            "--pattern",
            "py-keyword-tl-dot-input-precision",
            "--search",
            // what is chosen, not the time budget, is under test here: CI runs other heavy
            // tests beside this one, and at the default limit a slow first batch can make
            // the search skip its per-site phase (the budget has its own unit test)
            "--timeout",
            "7200",
            "--db",
            dbs,
            "--json",
        ])
        .output()
        .expect("spawn");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("json");
    let s = &report["searches"][0];
    // the constant resolved: both of its literals are tried, quotes are one value
    let values: Vec<&str> = s["values"].as_array().expect("values").iter().filter_map(Value::as_str).collect();
    assert!(values.contains(&"\"bf16x3\"") && values.contains(&"\"ieee\""), "{values:?}");
    assert_eq!(values.len(), 2, "{values:?}");
    assert_eq!(s["sites"].as_array().map(Vec::len), Some(10));
    let points = s["points"].as_array().expect("points");
    let base = points.iter().find(|p| p["roles"].as_array().expect("roles").contains(&"baseline".into())).unwrap();
    let (b_ins, b_spill, b_err) = (figure(base, "instructions"), figure(base, "spill_store_bytes"), last_error(base));
    assert!(b_err > 1e-4, "TF32 error at the longest CPU length: {b_err:e}");

    // ieee on every site: the most accurate, and predicted slower
    let ieee = values.iter().position(|v| *v == "\"ieee\"").expect("ieee");
    let all_ieee = points
        .iter()
        .find(|p| p["assignment"].as_array().expect("a").iter().all(|v| v.as_u64() == Some(ieee as u64)))
        .expect("the all-sites ieee variant");
    assert!(last_error(all_ieee) < 1e-6, "{all_ieee:#}");
    let slower = all_ieee["predicted_slower"].as_array().expect("list");
    assert!(!slower.is_empty() && slower[0].as_str().expect("s").starts_with("instructions"), "{all_ieee:#}");

    // the choice: error <= 1e-5, instructions <= 1.5x, spill stores <= 2x + 1 KB
    let chosen = &points[s["chosen"].as_u64().expect("a chosen point") as usize];
    let (err, ins, spill) = (last_error(chosen), figure(chosen, "instructions"), figure(chosen, "spill_store_bytes"));
    eprintln!(
        "chosen {}: error {err:e}, instructions {ins} (baseline {b_ins}), spills {spill} (baseline {b_spill})",
        chosen["assignment"]
    );
    assert!(err <= 1e-5, "{err:e}");
    assert!(ins as f64 <= 1.5 * b_ins as f64, "{ins} vs {b_ins}");
    assert!(spill <= 2 * b_spill + 1024, "{spill} vs {b_spill}");
    assert!(figure(chosen, "tensor") > 0);
    // it is on the front, and every front point is cheaper than any more accurate one
    let mut front: Vec<&Value> =
        points.iter().filter(|p| p["roles"].as_array().expect("roles").contains(&"front".into())).collect();
    assert!(front.iter().any(|p| std::ptr::eq(*p, chosen)));
    front.sort_by(|a, b| last_error(a).total_cmp(&last_error(b)));
    for w in front.windows(2) {
        assert!(figure(w[0], "instructions") > figure(w[1], "instructions"), "{:#} {:#}", w[0], w[1]);
    }
    // attribution: every site, both values
    assert_eq!(s["attribution"].as_array().map(Vec::len), Some(20), "notes: {:#}", s["notes"]);

    // the candidates: the choice among them, with the search in its provenance
    let cands = report["candidates"].as_array().expect("candidates");
    let chosen_c = cands
        .iter()
        .find(|c| c["provenance"]["search"]["roles"].as_array().is_some_and(|r| r.contains(&"chosen".into())))
        .expect("a chosen candidate");
    let id = chosen_c["id"].as_str().expect("id");
    let shown = env.run(&["review", id, "--db", dbs]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("site search:") && text.contains("the front"), "{text}");
    assert!(text.contains("->") && text.contains("predicted slower") && text.contains("chosen:"), "{text}");

    // again: every variant comes from the harness's cache
    let again = env
        .cmd()
        .env("KIDIOM_PYTHON", &py)
        .args(["apply", "kernels/kda/prefill.py", "--pattern", "py-keyword-tl-dot-input-precision", "--search"])
        .args(["--db", dbs, "--json"])
        .output()
        .expect("spawn");
    let again: Value = serde_json::from_slice(&again.stdout).expect("json");
    let s2 = &again["searches"][0];
    assert_eq!(s2["cached"], s2["measured"], "{s2:#}");
    assert_eq!(s2["chosen"], s["chosen"]);
}

#[test]
fn memory_hints_follow_the_role_of_each_tensor() {
    let env = project();
    mine(&env);
    let db = env.db();
    let report = env.json(&[
        "apply",
        "kernels/kda/decode.py",
        "--pattern",
        "py-keyword-tl-load-eviction-policy",
        "--search",
        "--db",
        db.to_str().expect("utf8"),
        "--json",
    ]);
    let cands = report["candidates"].as_array().expect("candidates");
    let by_role = cands
        .iter()
        .find(|c| c["provenance"]["search"]["roles"].as_array().is_some_and(|r| r.contains(&"chosen".into())))
        .expect("the by-role candidate");
    let diff = by_role["diff"].as_str().expect("diff");
    // the state pool is read and written back: keep it; v is read once by one program: stream it
    assert!(diff.contains("+    b_s = tl.load(p_s, mask=m_s, other=0., eviction_policy=\"evict_last\")"), "{diff}");
    assert!(diff.contains("b_v = tl.load(p_v, mask=m_v, other=0., eviction_policy=\"evict_first\")"), "{diff}");
    // q is read by every value block (grid axis 0): shared, kept
    assert!(diff.contains("b_q = tl.load(p_q, mask=m_k, other=0., eviction_policy=\"evict_last\")"), "{diff}");
    let sites = by_role["provenance"]["search"]["sites"].as_array().expect("sites");
    let role_of = |base: &str| sites.iter().find(|s| s["base"] == base).map(|s| s["role"].clone());
    assert_eq!(role_of("state"), Some("state".into()));
    assert_eq!(role_of("v"), Some("streamed".into()));
    assert_eq!(role_of("k"), Some("shared".into()));
    // and one candidate per role (state only, shared only, streamed only)
    let alternatives = cands
        .iter()
        .filter(|c| c["provenance"]["search"]["roles"].as_array().is_some_and(|r| r.contains(&"alternative".into())))
        .count();
    assert_eq!(alternatives, 3, "{report:#}");
}

#[test]
fn rewriting_our_prefill_kernel_keeps_its_shape_comments_in_their_column() {
    let env = project();
    mine(&env);
    let db = env.db();
    let out = env.json(&[
        "apply",
        "kernels/kda/prefill.py",
        "--pattern",
        "py-keyword-tl-dot-input-precision",
        "--value",
        "\"bf16x3\"",
        "--db",
        db.to_str().expect("utf8"),
        "--json",
    ]);
    let diff = out["candidates"][0]["diff"].as_str().expect("diff");
    let before = read(&env, "kernels/kda/prefill.py");
    let column = |line: &str| line.find("# [").map(|i| line[..i].chars().count());
    let mut checked = 0;
    for added in diff.lines().filter(|l| l.starts_with('+') && !l.starts_with("+++")) {
        let line = &added[1..];
        let Some(col) = column(line) else { continue };
        // the same statement before the rewrite: its text up to the inserted keyword
        let head = line.split(", input_precision").next().expect("head");
        let original = before.lines().find(|l| l.starts_with(head)).expect("original line");
        let want = column(original).expect("original comment");
        let code_len = line.split("  #").next().map(|c| c.trim_end().chars().count()).unwrap_or(0);
        // in its column, or two blanks after the code when the code reaches past it
        assert!(col == want || (code_len + 2 == col && col > want), "{original}\n{line}");
        checked += 1;
    }
    assert_eq!(checked, 10, "{diff}");
    let kept = diff
        .lines()
        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
        .filter(|l| {
            let line = &l[1..];
            let head = line.split(", input_precision").next().unwrap_or("");
            before.lines().find(|o| o.starts_with(head)).and_then(column) == column(line)
        })
        .count();
    assert!(kept >= 8, "most shape comments stay in their column: {kept} of 10\n{diff}");
}

/// `apply --search --json` on `targets` (exit status 1 when no candidate): the report.
fn search_report(env: &crate::util::Env, py: Option<&std::path::Path>, args: &[&str]) -> Value {
    let mut cmd = env.cmd();
    if let Some(py) = py {
        cmd.env("KIDIOM_PYTHON", py);
    }
    let db = env.db();
    let out = cmd
        .arg("apply")
        .args(args)
        .args(["--search", "--db", db.to_str().expect("utf8"), "--json"])
        .output()
        .expect("spawn");
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn a_file_no_manifest_names_is_not_searched_and_the_report_says_why() {
    // upstream code (here the corpus itself) has dots but no error curve and no kernel to compile
    let env = project();
    mine(&env);
    let report = search_report(&env, None, &["upstream/up.py", "--pattern", "py-keyword-tl-dot-input-precision"]);
    assert!(report.get("searches").is_none(), "{report:#}");
    let why = &report["not_searched"][0];
    assert_eq!(why["path"], "upstream/up.py");
    assert!(why["reason"].as_str().expect("reason").contains("no kernel manifest names upstream/up.py"), "{why:#}");
    let cands = report["candidates"].as_array().expect("candidates");
    assert_eq!(cands.len(), 1, "proposed as without --search: {report:#}");
    // and the terminal says it, beside the diff
    let db = env.db();
    let out = env.run(&[
        "apply",
        "upstream/up.py",
        "--pattern",
        "py-keyword-tl-dot-input-precision",
        "--search",
        "--db",
        db.to_str().expect("utf8"),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not searched: py-keyword-tl-dot-input-precision on upstream/up.py"), "{err}");
}

#[test]
fn without_kernels_memory_hints_are_placed_and_precision_is_not_searched() {
    let env = crate::util::Env::new();
    kidiom_patterns::Catalog::open(&env.db()).expect("catalog");
    mine(&env);
    let report = search_report(&env, None, &["upstream", "--pattern", "py-keyword-tl-load-eviction-policy"]);
    let cands = report["candidates"].as_array().expect("candidates");
    assert!(!cands.is_empty(), "hints need no manifest: {report:#}");
    let report = search_report(&env, None, &["upstream/up.py", "--pattern", "py-keyword-tl-dot-input-precision"]);
    let why = report["not_searched"][0]["reason"].as_str().expect("reason");
    // no manifest here (kernels/ or the targets) names the file: nothing to measure an error on
    assert!(why.contains("no kernel manifest names upstream/up.py"), "{why}");
}

#[test]
fn a_kernel_without_a_site_is_no_failed_search() {
    let env = project();
    mine(&env);
    let src = read(&env, "kernels/kda/prefill.py");
    // every dot already pinned: nothing for the pattern to add
    let mut pinned = String::new();
    let mut rest = src.as_str();
    while let Some(i) = rest.find("tl.dot(") {
        let (head, call) = rest.split_at(i + "tl.dot(".len());
        let mut depth = 1;
        let end = call
            .char_indices()
            .find(|&(_, c)| {
                depth += match c {
                    '(' => 1,
                    ')' => -1,
                    _ => 0,
                };
                depth == 0
            })
            .expect("closed")
            .0;
        pinned.push_str(head);
        pinned.push_str(&call[..end]);
        pinned.push_str(", input_precision=\"tf32\"");
        rest = &call[end..];
    }
    pinned.push_str(rest);
    assert_eq!(pinned.matches("input_precision").count(), 10);
    env.write("kernels/kda/prefill.py", &pinned);
    let report =
        search_report(&env, None, &["kernels/kda/prefill.py", "--pattern", "py-keyword-tl-dot-input-precision"]);
    assert!(report["candidates"].as_array().expect("c").is_empty(), "{report:#}");
    assert!(report["dropped"].as_array().expect("d").is_empty(), "{report:#}");
    assert!(report.get("searches").is_none(), "{report:#}");
}

/// Our prefill kernel with `line` inserted before `o_t = tl.arange(0, BT)`.
fn prefill_with(env: &crate::util::Env, line: &str) {
    let src = read(env, "kernels/kda/prefill.py");
    let anchor = "    o_t = tl.arange(0, BT)\n";
    assert!(src.contains(anchor));
    env.write("kernels/kda/prefill.py", src.replacen(anchor, &format!("{line}{anchor}"), 1));
}

#[test]
fn a_baseline_that_does_not_compile_is_refused_with_the_compilers_reason() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    mine(&env);
    // the bench shape (K = 128) fails it, the interpreter's shapes (K <= 32) do not
    prefill_with(&env, "    tl.static_assert(K < 128)\n");
    let report =
        search_report(&env, Some(&py), &["kernels/kda/prefill.py", "--pattern", "py-keyword-tl-dot-input-precision"]);
    assert!(report["candidates"].as_array().expect("c").is_empty());
    let why = report["dropped"][0]["reason"].as_str().expect("a reason");
    assert!(why.contains("kernels/kda/prefill.py as it is cannot be measured") && why.contains("compile"), "{why}");
    assert!(!why.contains('\n'), "one line: {why}");
}

#[test]
fn a_kernel_that_hangs_in_the_interpreter_ends_the_search_at_its_time_limit() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    mine(&env);
    prefill_with(&env, "    t_hang = T\n    while t_hang > 0:\n        t_hang = t_hang + 1\n");
    let started = std::time::Instant::now();
    let report = search_report(
        &env,
        Some(&py),
        &["kernels/kda/prefill.py", "--pattern", "py-keyword-tl-dot-input-precision", "--timeout", "20"],
    );
    assert!(started.elapsed().as_secs() < 120, "{:?}", started.elapsed());
    let why = report["dropped"][0]["reason"].as_str().expect("a reason");
    assert!(why.contains("ran out of its time limit (20s)"), "not a variant that 'failed': {why}");
    assert!(report.get("searches").is_none(), "no front from unmeasured variants: {report:#}");
}
