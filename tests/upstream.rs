//! Issue #48: a kernel written the upstream way, as it is. tests/fixtures/upstream/gated_norm.py
//! (our own) has a torch launcher that allocates and returns its outputs, `*g.shape` unpacking,
//! an autograd Function, `@triton.autotune` over three configs, `@triton.heuristics` and four
//! mode flags. `kidiom init` reads it, every tensor's shape included; the test fills in what a
//! user must (the sizes, the floor, the reference); `kidiom validate` takes an exact rewrite
//! to `needs-gpu`, rejects one that is right under one autotune config only, naming the config,
//! and calls one inside a branch no case takes (the contract FIXES the flag) `unverified`,
//! until the flag is left free and a case takes it.

use crate::own_kernels::{Completion, complete, edited, failures};
use crate::project::{by_id, gate, plant, python, repo, verdict};
use crate::util::Env;

/// The user's model is RMS-normed only: `is_rms` keeps its one value in every case.
const FIXED: &str = "FIXED = [\"is_rms\"]\n\n\n";

const DONE: Completion = Completion {
    manifest: &[
        ("cpu =", "cpu = [{ B = 2, T = 5, H = 1, D = 40 }, { B = 1, T = 3, H = 2, D = 64 }]"),
        ("gpu =", "gpu = [{ B = 4, T = 64, H = 4, D = 128 }]"),
        ("bench =", "bench = { B = 4, T = 64, H = 4, D = 128 }"),
        ("bytes =", "bytes = \"4 * (2 * B * T * H * D + 2 * B * T * H + 2 * D)\""),
        ("flops =", "flops = \"8 * B * T * H * D\""),
    ],
    // every tensor's shape is init's: `*g.shape` unpacked, the rest from the kernel's strides
    contract: &[],
    extra: FIXED,
    reference: r#"def reference(x):
    v = x["x"].astype(np.float64)
    if not x["is_rms"]:
        v = v - v.mean(-1, keepdims=True)
    r = 1.0 / np.sqrt((v * v).mean(-1) + x["eps"])
    y = v * r[..., None]
    if x["weight"] is not None:
        y = y * x["weight"]
    if x["bias"] is not None:
        y = y + x["bias"]
    g = x["g"].astype(np.float64)
    return {"y": y * (1.0 / (1.0 + np.exp(-g)) if x["gate_sigmoid"] else g)[..., None], "rstd": r}
"#,
};

#[test]
fn a_kernel_written_the_upstream_way_goes_from_init_to_needs_gpu() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = Env { dir: crate::init::workdir("kidiom-upstream-") };
    git2::Repository::init(env.path()).expect("git init");
    let source = std::fs::read_to_string(repo().join("tests/fixtures/upstream/gated_norm.py")).expect("fixture");
    let rel = "ops/gated_norm.py";
    env.write(rel, &source);

    let r = env.json(&["init", rel, "--json"]);
    assert_eq!((r["entry"].as_str(), r["launcher"].as_str()), (Some("gated_norm_fwd_kernel"), Some("gated_norm_fwd")));
    let contract = crate::project::read(&env, "ops/gated_norm_contract.py");
    for line in [
        "RETURNS = [\"y\", \"rstd\"]",
        "OPTIONAL = [\"weight\", \"bias\"]",
        "\"g\": ((B, T, H), \"float32\")",
        "\"rstd\": ((B, T, H), \"float32\")",
        // `D = x.shape[-1]` alone would give x three dims; its address `x + i_m * D + o_d`, with
        // i_m ranging over g's (B, T, H), gives four
        "\"x\": ((B, T, H, D), \"float32\")",
        "\"y\": ((B, T, H, D), \"float32\")",
        "\"weight\": ((D,), \"float32\")",
        "\"bias\": ((D,), \"float32\")",
        "\"is_rms\": True,",
        "\"gate_sigmoid\": False,",
    ] {
        assert!(contract.contains(line), "{line}:\n{contract}");
    }
    complete(&env, "gated_norm", &DONE);

    // an exact rewrite (a product's operands swapped) and one right only with one row per program
    let same = edited(
        &source,
        "tl.store(y + i_m * D + o_d, b_y * b_g, mask=m)",
        "tl.store(y + i_m * D + o_d, b_g * b_y, mask=m)",
    );
    plant(&env, "swapped", "math", rel, &same);
    plant(&env, "unmasked-rows", "math", rel, &edited(&source, "m = m_d & (i_m < M)", "m = m_d"));
    // a change inside `if not IS_RMS:`, which no case takes while the contract fixes the flag
    let centre = "b_x = tl.where(m, b_x - tl.sum(b_x, axis=0) / D, 0.0)";
    plant(
        &env,
        "layer-norm-only",
        "math",
        rel,
        &edited(&source, centre, &centre.replace("/ D, 0.0)", "* (1.0 / D), 0.0)")),
    );
    let (report, _) = crate::project::validate(&env, &py, &["--pending", "--seeds", "1", "--timeout", "300"]);

    let ev = by_id(&report, "swapped");
    assert_eq!(verdict(ev), ("needs-gpu".to_string(), "-".to_string()), "{ev:#}");
    for g in ["syntax", "static", "correctness"] {
        assert_eq!(gate(ev, g)["status"], "passed", "{g}: {ev:#}");
    }
    let ev = by_id(&report, "layer-norm-only");
    assert_eq!(verdict(ev), ("unverified".to_string(), "correctness".to_string()), "{ev:#}");
    let line = source.lines().position(|l| l.contains(centre)).expect("the line") + 1;
    let reason = ev["verdict"]["reason"].as_str().unwrap_or("");
    assert!(reason.contains(&format!("no CPU case ran the change (line {line})")), "{reason}");
    assert!(gate(ev, "speed").is_null(), "nothing after the gate that could not verify it: {ev:#}");
    let ev = by_id(&report, "unmasked-rows");
    assert_eq!(verdict(ev), ("rejected".to_string(), "correctness".to_string()), "{ev:#}");
    let f = failures(ev);
    assert!(
        f.iter().any(|l| l.contains("autotune config 2 of 3 of gated_norm_fwd_kernel (ROWS=4")
            && l.contains("out-of-bounds write")
            && l.contains("y (allocated by the launcher)")),
        "{f:#?}"
    );

    // the flag left free, the odd cases take the branch: the same rewrite is verified
    let py_rel = "ops/gated_norm_contract.py";
    let contract = crate::project::read(&env, py_rel);
    env.write(py_rel, edited(&contract, FIXED, ""));
    let (report, _) = crate::project::validate(&env, &py, &["layer-norm-only", "--seeds", "1", "--timeout", "300"]);
    let ev = by_id(&report, "layer-norm-only");
    assert_eq!(verdict(ev), ("needs-gpu".to_string(), "-".to_string()), "{ev:#}");
}
