//! Launch configuration as an optimization surface (issue #24, item 2):
//! launch keyword idioms mined from a corpus this test writes (kernels
//! launched with `num_warps=8, num_stages=2` in several files, and without
//! them) become rewrites of our decode's launch in `kda_decode_launch`,
//! which the static gate lets through and the ahead-of-time compile builds
//! with the new configuration; a launch change with a tensor argument
//! swapped beside it is refused as host code; a corpus whose launches pass
//! Triton's defaults proposes nothing.

use kidiom_syntax::{Lang, kernel_launches, parse_tree};
use serde_json::Value;

use crate::project::*;
use crate::util::{Env, find};

const DECODE: &str = "kernels/kda/decode.py";

/// One upstream file: a kernel launched with `options` by one host
/// function, and without them by another.
fn upstream(i: usize, options: &str) -> String {
    format!(
        r#"import triton
import triton.language as tl


@triton.jit
def scale_kernel_{i}(x, o, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o + offs, tl.load(x + offs, mask=m) * 2, mask=m)


def scale_{i}(x, o):
    n = x.numel()
    scale_kernel_{i}[(triton.cdiv(n, 1024),)](x, o, n, BLOCK=1024{options})
    return o


def scale_small_{i}(x, o):
    n = x.numel()
    scale_kernel_{i}[(triton.cdiv(n, 128),)](x, o, n, BLOCK=128)
    return o
"#
    )
}

/// A project with a catalog mined from three upstream files whose launches pass `options`.
fn mined(options: &str) -> Env {
    let env = project();
    for i in 0..3 {
        env.write(&format!("upstream/ops{i}.py"), upstream(i, options));
    }
    mine_upstream_dir(&env, &env.path().join("upstream"));
    env
}

/// `kidiom apply --json` of the launch patterns to our decode (exit 1 when it proposes nothing).
fn apply(env: &Env) -> Value {
    let db = env.db();
    let out = env.run(&["apply", DECODE, "--category", "launch", "--db", db.to_str().expect("utf8"), "--json"]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("apply --json")
}

/// The removed and added lines of a unified diff (headers left out).
fn changed_lines(diff: &str) -> (Vec<&str>, Vec<&str>) {
    let body = diff.lines().filter(|l| !l.starts_with("---") && !l.starts_with("+++"));
    let (mut removed, mut added) = (Vec::new(), Vec::new());
    for l in body {
        if let Some(r) = l.strip_prefix('-') {
            removed.push(r);
        } else if let Some(a) = l.strip_prefix('+') {
            added.push(a);
        }
    }
    (removed, added)
}

#[test]
fn launch_options_mined_upstream_rewrite_our_decode_launch_and_pass_the_static_gate() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = mined(", num_warps=8, num_stages=2");
    let db = env.db();
    let dbs = db.to_str().expect("utf8");
    let listed = env.json(&["catalog", "list", "--db", dbs, "--json"]);
    for (id, kw) in
        [("py-keyword-kernel-grid-num-warps", "num_warps"), ("py-keyword-kernel-grid-num-stages", "num_stages")]
    {
        let p = find(&listed, id).unwrap_or_else(|| panic!("no {id} in {listed:#}"));
        assert_eq!(p["before"], "$KERNEL[$GRID]($$$ARGS)", "{p:#}");
        assert_eq!(p["after"], format!("$KERNEL[$GRID]($$$ARGS, {kw}=$V)"), "{p:#}");
        assert_eq!(p["category"], "launch", "{p:#}");
    }

    // one candidate per launch option, each touching only the launch call in `kda_decode_launch`
    let applied = apply(&env);
    let cands = applied["candidates"].as_array().expect("candidates");
    let mut ids: Vec<&str> = cands.iter().filter_map(|c| c["pattern_id"].as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["py-keyword-kernel-grid-num-stages", "py-keyword-kernel-grid-num-warps"], "{applied:#}");
    let base = read(&env, DECODE);
    let tree = parse_tree(Lang::Python, &base).expect("parse").expect("a tree");
    let launches = kernel_launches(&base, &tree);
    assert_eq!(launches.len(), 1, "our decode launches its kernel once");
    let call = &base[launches[0].call.clone()];
    let launcher =
        &base[base.find("def kda_decode_launch(").expect("launcher")..base.find("def kda_decode(").expect("public")];
    assert!(launcher.contains(call));
    for c in cands {
        let diff = c["diff"].as_str().expect("diff");
        let kw = if c["pattern_id"] == "py-keyword-kernel-grid-num-warps" { "num_warps=8" } else { "num_stages=2" };
        let (removed, added) = changed_lines(diff);
        assert_eq!((removed.len(), added.len()), (1, 1), "{diff}");
        assert!(call.contains(removed[0]), "the changed line is not the launch call's: {diff}");
        assert_eq!(added[0], removed[0].replace("BV=BV,", &format!("BV=BV, {kw},")), "{diff}");
        eprintln!("{diff}");
    }

    // a launch change with a tensor argument swapped beside it is host code
    let swapped =
        edit(&env, DECODE, "q=q, k=k,", "q=k, k=k,").replace("BK=BK, BV=BV,\n", "BK=BK, BV=BV, num_warps=8,\n");
    plant(&env, "launch-and-argument", "launch", DECODE, &swapped);

    let (report, _) = validate(&env, &py, &["--pending", "--seeds", "1", "--timeout", "300"]);
    let ev = by_id(&report, "launch-and-argument");
    assert_eq!(verdict(ev), ("rejected".to_string(), "static".to_string()), "{ev:#}");
    let reason = ev["verdict"]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("changes host code outside the kernel: kda_decode_launch"), "{reason}");

    for c in cands {
        let ev = by_id(&report, c["id"].as_str().expect("id"));
        assert_eq!(verdict(ev), ("needs-gpu".to_string(), "-".to_string()), "{ev:#}");
        assert_eq!(gate(ev, "syntax")["status"], "passed", "{ev:#}");
        let st = gate(ev, "static");
        assert_eq!(st["status"], "passed", "{st:#}");
        for side in ["before", "after"] {
            assert!(st[side]["registers"].as_i64().is_some_and(|r| r > 0), "{side}: {st:#}");
            assert!(st[side]["instructions"].as_i64().is_some_and(|n| n > 0), "{side}: {st:#}");
        }
        eprintln!("{}: {}", c["pattern_id"], st["summary"]);
        if c["pattern_id"] == "py-keyword-kernel-grid-num-warps" {
            // compiled with the launch's 8 warps: each thread holds half the state block
            let regs = (st["before"]["registers"].as_i64(), st["after"]["registers"].as_i64());
            let instrs = (st["before"]["instructions"].as_i64(), st["after"]["instructions"].as_i64());
            assert!(regs.1 < regs.0 && instrs.1 < instrs.0, "{regs:?} {instrs:?}: {st:#}");
        }
        assert_eq!(gate(ev, "correctness")["status"], "passed", "{ev:#}");
        assert_eq!(gate(ev, "speed")["status"], "skipped", "{ev:#}");
    }
}

#[test]
fn launches_at_tritons_defaults_are_not_proposed() {
    // upstream passes num_warps=4 and num_stages=3: what a launch takes anyway
    let env = mined(", num_warps=4, num_stages=3");
    let applied = apply(&env);
    assert_eq!(applied["candidates"].as_array().map(Vec::len), Some(0), "{applied:#}");
    assert_eq!(applied["held_back"]["nil_argument"], 2, "{applied:#}");
    for d in applied["dropped"].as_array().expect("dropped") {
        let why = d["reason"].as_str().unwrap_or("");
        assert!(
            why.contains("=3` on a kernel launch at the default")
                || why.contains("=4` on a kernel launch at the default"),
            "{why}"
        );
    }
    // the decode's launch is untouched on disk, and a value that is not the default is proposed
    assert!(!read(&env, DECODE).contains("num_warps"));
    let env = mined(", num_warps=2");
    let applied = apply(&env);
    let cands = applied["candidates"].as_array().expect("candidates");
    assert_eq!(cands.len(), 1, "{applied:#}");
    let diff = cands[0]["diff"].as_str().unwrap_or("");
    assert!(diff.contains("+        H=H, HV=HV, K=K, V=V, BK=BK, BV=BV, num_warps=2,"), "{diff}");
}

/// Upstream tunes its launches per kernel: no value of `num_warps` holds at
/// most sites, so each value it writes is a candidate of its own (the GPU
/// chooses; the CPU cannot rank them), Triton's default held back.
#[test]
fn each_value_upstream_writes_for_a_launch_option_is_a_candidate() {
    let env = project();
    for (i, w) in [8, 8, 2, 2, 1, 4].into_iter().enumerate() {
        env.write(&format!("upstream/ops{i}.py"), upstream(i, &format!(", num_warps={w}")));
    }
    mine_upstream_dir(&env, &env.path().join("upstream"));
    let applied = apply(&env);
    let mut values: Vec<String> = applied["candidates"]
        .as_array()
        .expect("candidates")
        .iter()
        .filter(|c| c["pattern_id"] == "py-keyword-kernel-grid-num-warps")
        .map(|c| {
            let (_, added) = changed_lines(c["diff"].as_str().expect("diff"));
            assert_eq!(added.len(), 1, "{c:#}");
            c["value"].as_str().expect("value").to_string()
        })
        .collect();
    values.sort();
    assert_eq!(values, ["1", "2", "8"], "{applied:#}");
    assert_eq!(applied["held_back"]["nil_argument"], 1, "num_warps=4 is the default: {applied:#}");
}
