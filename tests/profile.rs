//! `kidiom profile` and the predictions in every validation (issue #23): the
//! work of our Triton decode counted on the CPU against its floor, a
//! candidate that adds a re-read rejected as predicted slower, a neutral one
//! predicted near 1x and listed with its prediction.

use crate::project::*;

const DECODE: &str = "kernels/kda/decode.py";

#[test]
fn the_decode_s_profile_names_its_lines_and_its_floor() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    let out = env
        .cmd()
        .env("KIDIOM_PYTHON", &py)
        .args(["profile", "--kernel", "kda.decode", "--json"])
        .output()
        .expect("spawn");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let p = &v["profiles"][0];
    assert_eq!(p["kernel"], "kda.decode");
    // the bench shape: N = 64, HV = 32, K = V = 128; the state is read once and written once
    let state = 64.0 * 32.0 * 128.0 * 128.0 * 4.0;
    let t = &p["totals"];
    let (load, store) = (t["load_bytes"].as_f64().unwrap(), t["store_bytes"].as_f64().unwrap());
    assert!((load - state) / state > 0.0 && (load - state) / state < 0.15, "{t}");
    assert!((store - state).abs() / state < 0.02, "{t}");
    assert_eq!(t["reread_bytes"], 0, "{t}");
    let ratio = p["traffic_ratio"].as_f64().unwrap();
    assert!((1.0..1.1).contains(&ratio), "{ratio}");
    // tl.exp(b_g) on a [BK] vector: K per (sequence, head) and value block of 32 columns
    assert_eq!(t["special_calls"].as_u64(), Some(64 * 32 * 128 * 4), "{t}");
    let line = |needle: &str| {
        p["lines"].as_array().unwrap().iter().find(|l| l["text"].as_str().is_some_and(|s| s.contains(needle))).cloned()
    };
    let state_load = line("b_s = tl.load(p_s").expect("the state's load is a line");
    assert_eq!(state_load["load_bytes"].as_f64(), Some(state));
    let pred = &p["predicted"];
    assert_eq!((pred["label"].as_str(), pred["bound"].as_str()), (Some("prediction"), Some("memory")), "{pred}");
    // the table a person reads
    let out = env.cmd().env("KIDIOM_PYTHON", &py).args(["profile", "--kernel", "kda.decode"]).output().expect("spawn");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("traffic ratio 1.0") && text.contains("a prediction, not a measurement"), "{text}");
    // a kernel that is not there, and --source without --kernel
    let bad = env.cmd().env("KIDIOM_PYTHON", &py).args(["profile", "--kernel", "nope"]).output().expect("spawn");
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no kernel named nope"));
}

#[test]
fn a_candidate_that_reads_its_state_again_is_predicted_slower() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    // a second, real (volatile: no compiler merges it) read of the whole state before the update
    let update = "    b_s = b_s + b_k[:, None] * b_d[None, :]\n";
    let reread = format!(
        "    b_s = b_s * 0.5 + tl.load(p_s, mask=m_s, other=0., volatile=True) * tl.exp(b_g)[:, None] * 0.5\n{update}"
    );
    plant(&env, "reads-state-twice", "memory", DECODE, &edit(&env, DECODE, update, &reread));
    let exp = "    b_s = b_s * tl.exp(b_g)[:, None]\n";
    plant(
        &env,
        "exp2",
        "math",
        DECODE,
        &edit(&env, DECODE, exp, "    b_s = b_s * tl.exp2(b_g * 1.4426950408889634)[:, None]\n"),
    );
    let (report, _) = validate(&env, &py, &["--pending", "--seeds", "1", "--no-consistency", "--timeout", "600"]);
    let slow = by_id(&report, "reads-state-twice");
    assert_eq!(verdict(slow), ("rejected".to_string(), "static".to_string()), "{slow:#}");
    let reason = slow["verdict"]["reason"].as_str().unwrap_or("");
    assert!(reason.starts_with("predicted slower: the work profile predicts"), "{reason}");
    let p = &slow["prediction"];
    assert!(p["speedup"].as_f64().unwrap() < 0.8, "{p}");
    assert!(p["reread_bytes"][1].as_u64().unwrap() > 0, "{p}");
    let neutral = by_id(&report, "exp2");
    assert_eq!(verdict(neutral).0, "needs-gpu", "{neutral:#}");
    let s = neutral["prediction"]["speedup"].as_f64().expect("a prediction");
    assert!((0.95..1.05).contains(&s), "an exp2 swap moves no bytes: {s}");
    assert_eq!(neutral["prediction"]["label"], "prediction");
    // review lists the prediction, strongest first
    let db = env.db();
    let out = env.run(&["review", "--db", db.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    let (a, b) = (text.find("exp2").unwrap(), text.find("reads-state-twice").unwrap());
    assert!(a < b, "the stronger prediction first:\n{text}");
    assert!(text.contains("predicted"), "{text}");
    // the bound that decides the prediction is in the full table
    let out = env.run(&["review", "--wide", "--db", db.to_str().unwrap()]);
    let wide = String::from_utf8_lossy(&out.stdout);
    assert!(wide.contains("x memory"), "{wide}");
    // every prediction names its expected error: unknown here (the project has no check figures)
    let id = env.run(&["review", "exp2", "--db", db.to_str().unwrap()]);
    let one = String::from_utf8_lossy(&id.stdout);
    assert!(one.contains("expected error unknown"), "{one}");
}

/// The redundancy report of our CUDA decode (issue #24): the second loop's
/// state read and exp, each finding with its lines, its predicted gain and
/// the rewrite that removes it; and of our Triton decode, the exp every
/// program of a row computes alike, which no rewrite removes yet.
#[test]
fn the_redundancy_report_names_lines_gains_and_the_rewrite_or_its_absence() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    let profile = |kernel: &str| {
        let out = env.cmd().env("KIDIOM_PYTHON", &py).args(["profile", "--kernel", kernel, "--json"]).output();
        let out = out.expect("spawn");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        v["profiles"][0]["redundancy"].as_array().cloned().expect("a redundancy report")
    };
    let cu = read(&env, "kernels/kda_cuda/decode.cu");
    let line_of = |needle: &str| cu.lines().position(|l| l.contains(needle)).map(|i| i as u64 + 1).expect(needle);
    let (first, second) = (line_of("p += expf(g_n[i])"), line_of("float s_ij = expf(g_n[i])"));
    let found = profile("kda_cuda.decode");
    let lines = |f: &serde_json::Value| -> Vec<u64> {
        f["lines"].as_array().expect("lines").iter().filter_map(|l| l["line"].as_u64()).collect()
    };
    // the largest gain first: the state read again, 1.4x and more on its own
    assert_eq!((found[0]["kind"].as_str(), lines(&found[0])), (Some("reread"), vec![second]), "{found:#?}");
    assert!(found[0]["predicted_speedup"].as_f64().expect("gain") >= 1.4, "{found:#?}");
    assert_eq!(found[0]["removed_by"][0], "cu-reuse-across-loops", "{found:#?}");
    let kind = |k: &str| found.iter().find(|f| f["kind"] == k).unwrap_or_else(|| panic!("no {k}: {found:#?}"));
    // exp of the second loop repeats the first's, 2 N HV K V evaluations where N HV K are distinct
    let repeated = kind("repeated-call");
    assert_eq!((lines(repeated), repeated["amount"].as_u64()), (vec![second], Some(64 * 32 * 128 * 128)));
    let uniform = kind("uniform-call");
    assert_eq!(lines(uniform), vec![first, second], "{uniform:#}");
    assert_eq!(uniform["removed_by"][0], "cu-reuse-across-loops-shared", "{uniform:#}");

    let found = profile("kda.decode");
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0]["kind"], "uniform-call");
    assert_eq!(found[0]["removed_by"].as_array().map(Vec::len), Some(0));
    let fix = found[0]["fix"].as_str().expect("fix");
    assert!(fix.starts_with("no rewrite form yet") && fix.contains("kidiom validate --patch"), "{fix}");
    let text = env.cmd().env("KIDIOM_PYTHON", &py).args(["profile", "--kernel", "kda.decode"]).output().expect("spawn");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("[uniform call] line ") && text.contains("no rewrite form yet"), "{text}");
}
