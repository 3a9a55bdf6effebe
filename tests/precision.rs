//! State precision (issue #27): the precision idioms in every mined catalog
//! with their upstream references, `kidiom validate --kernel VARIANT` through
//! the precision gate (against a stand-in harness that prints the
//! `precision` reply, so no Python kernel runs), and the reviews that show
//! the variants side by side (terminal, `review ID --json`, the HTML site).

use crate::util::Env;

/// A stand-in harness: `device` says no GPU, `precision` answers from the
/// variant's name (bf16 within its budget, fp8 crossing it at step 48, int8
/// missing its simulated reference), anything else is an error.
const HARNESS: &str = r#"
import json, sys
args = sys.argv[1:]
cmd = args[0] if args else ""
def out(obj, code=0):
    print(json.dumps(obj))
    sys.exit(code)
if cmd == "device":
    out({"wire": "kidiom-harness", "version": 1, "command": "device", "status": "ok", "cuda": False})
if cmd != "precision":
    out({"status": "error", "error": "the stand-in harness only answers precision"}, 2)
name = args[args.index("--kernel") + 1]
steps = [1, 2, 4, 8, 16, 32, 64, 128, 256]
base = {"o": [1e-7 * (1 + s / 256) for s in steps], "state": [2e-7 * (1 + s / 256) for s in steps]}
kinds = {
    "kda.decode.state-bf16": ("bf16", "none", 2, 3e-3, None, True),
    "kda.decode.state-fp8": ("fp8e4m3", "tensor", 4, 4e-2, 48, True),
    "kda.decode.state-int8": ("int8", "head_k", 4, 2e-2, None, False),
}
dtype, scale, shrink, err, crossed, sim_ok = kinds[name]
full = 268435456
reply = {
    "status": "ok" if crossed is None and sim_ok else "rejected",
    "kernel": "kda.decode", "variant": name,
    "storage": {"tensor": "pool", "dtype": dtype, "scale": scale},
    "errors": {"float64": {"o": err, "state": err * 1.5},
               "simulated": {"o": 1e-7 if sim_ok else 0.2, "state": 1e-7 if sim_ok else 0.3}},
    "drift": {"steps": steps,
              "variant": {"o": [err * s / 256 for s in steps], "state": [1.5 * err * s / 256 for s in steps]},
              "baseline": base, "crossed_at": crossed, "budget": {"o": 1e-2, "state": 2e-2}},
    "bytes_per_step": {"variant": full // shrink + (4096 if scale != "none" else 0), "baseline": full},
    "failures": [] if sim_ok else ["o: rel_l2 2.0e-01 against the simulated reference > 1.0e-05"],
}
out(reply, 0 if reply["status"] == "ok" else 1)
"#;

const DECODE_TOML: &str = r#"
format = 1
name = "kda.decode"
op = "kda_decode"
language = "triton"
source = "decode.py"
entry = "kda_decode_kernel"
launcher = "kda_decode"
reference = "kernels.kda.reference:naive_decode_kda"
[tolerance]
rel_l2 = 5e-3
slice_rel_l2 = 1e-2
max_abs_rel = 2e-2
[shapes]
cpu = [{ N = 1 }]
gpu = []
bench = { N = 64 }
[floor]
bytes = "N"
flops = "N"
"#;

const DECODE: &str = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef kda_decode_kernel(s, o, K: tl.constexpr):\n    i = tl.program_id(0)\n    p = s + i * K + tl.arange(0, K)\n    h = tl.load(p)\n    tl.store(p, h * 0.5)\n    tl.store(o + i, tl.sum(h))\n";

fn variant_toml(name: &str, file: &str, dtype: &str, scale: &str) -> String {
    format!(
        "name = \"{name}\"\nvariant_of = \"kda.decode\"\nsource = \"{file}\"\n[storage]\ntensor = \"pool\"\ndtype = \"{dtype}\"\nscale = \"{scale}\"\n[budget]\no = 1e-2\nstate = 2e-2\n"
    )
}

/// A project with the decode kernel, three state-precision variants and the stand-in harness.
fn project() -> Env {
    let env = Env::new();
    env.write("kernels/__init__.py", "");
    env.write("kernels/harness/__init__.py", "");
    env.write("kernels/harness/__main__.py", HARNESS);
    env.write("kernels/kda/__init__.py", "");
    env.write("kernels/kda/decode.toml", DECODE_TOML);
    env.write("kernels/kda/decode.py", DECODE);
    for (suffix, dtype, scale) in [("bf16", "bf16", "none"), ("fp8", "fp8e4m3", "tensor"), ("int8", "int8", "head_k")] {
        let file = format!("decode_state_{suffix}.py");
        let name = format!("kda.decode.state-{suffix}");
        env.write(&format!("kernels/kda/decode_state_{suffix}.toml"), variant_toml(&name, &file, dtype, scale));
        let cast = DECODE
            .replace("h = tl.load(p)", "h = tl.load(p).to(tl.float32)")
            .replace("h * 0.5)", "(h * 0.5).to(p.dtype.element_ty))");
        env.write(&format!("kernels/kda/{file}"), cast);
    }
    env
}

fn python_here() -> bool {
    std::process::Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success())
}

#[test]
fn every_mined_catalog_holds_the_precision_idioms_with_their_upstream_references() {
    let env = Env::new();
    crate::util::git_repo(
        &env.path().join("up"),
        &[(
            "k.py",
            b"import triton\nimport triton.language as tl\n@triton.jit\ndef k(p, q):\n    h = tl.load(p).to(tl.float32)\n    tl.store(q, h.to(q.dtype.element_ty))\n",
        )],
    );
    let db = env.db();
    let dbs = db.to_str().expect("utf8");
    let up = env.path().join("up");
    let out = env.run(&["mine", up.to_str().expect("utf8"), "--name", "up", "--db", dbs, "-q"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let found = env.json(&["catalog", "search", "bf16 state", "--db", dbs, "--json"]);
    let text = found.to_string();
    assert!(text.contains("py-state-cast-at-load-store"), "{found:#}");
    for (id, corpora) in [
        ("py-state-cast-at-load-store", &["sglang", "fla", "deepgemm"][..]),
        ("py-fold-static-fp8-scale", &["sglang", "deepgemm"][..]),
        ("py-amax-scale-beside-data", &["sglang", "fla", "deepgemm"][..]),
    ] {
        let p = env.json(&["catalog", "show", id, "--db", dbs, "--json"]);
        let p = if p.is_array() { p[0].clone() } else { p };
        assert_eq!(p["category"], "precision", "{p:#}");
        let support = p["support"].as_array().expect("support");
        for c in corpora {
            let row = support.iter().find(|s| s["corpus"] == *c).unwrap_or_else(|| panic!("{id}: no {c} in {p:#}"));
            assert!(row["occurrences"].as_u64().unwrap_or(0) > 0 && !row["revision"].as_str().unwrap_or("").is_empty());
        }
        let examples = p["examples"].as_array().expect("examples");
        assert!(!examples.is_empty());
        // references, never upstream text
        assert!(examples.iter().all(|e| e["snippet"] == "" && e["line"].as_u64().unwrap_or(0) > 0), "{p:#}");
    }
    let search = env.json(&["catalog", "search", "fp8 scale", "--db", dbs, "--json"]).to_string();
    assert!(search.contains("py-fold-static-fp8-scale") || search.contains("py-amax-scale-beside-data"), "{search}");

    // the cast-at-load/store is applied: the kernel's state (loaded and stored) only, once
    env.write("kernels/k.py", DECODE);
    let applied =
        env.json(&["apply", "kernels/k.py", "--pattern", "py-state-cast-at-load-store", "--db", dbs, "--json"]);
    let cands = applied["candidates"].as_array().expect("candidates");
    assert_eq!(cands.len(), 1, "{applied:#}");
    let diff = cands[0]["diff"].as_str().expect("diff");
    assert!(diff.contains("+    h = tl.load(p).to(tl.float32)\n"), "{diff}");
    assert!(diff.contains("+    tl.store(p, (h * 0.5).to(p.dtype.element_ty))\n"), "{diff}");
    assert!(!diff.contains("+    tl.store(o + i"), "the output is not state: {diff}");
    // the other two are guidance: no candidate, their reason said
    let out = env.run(&["apply", "kernels/k.py", "--pattern", "py-amax-scale-beside-data", "--db", dbs]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("variant"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn validate_kernel_judges_each_variant_and_the_reviews_show_them_side_by_side() {
    if !python_here() {
        eprintln!("skipped: no python3 for the stand-in harness");
        return;
    }
    let env = project();
    let db = env.db();
    let dbs = db.to_str().expect("utf8");
    drop(kidiom_patterns::Catalog::open(&db).expect("a catalog"));
    let out = env
        .cmd()
        .env("KIDIOM_PYTHON", "python3")
        .args(["validate", "--kernel", "all", "--device", "cpu", "--seed", "5", "--db", dbs, "--json"])
        .output()
        .expect("spawn");
    assert_eq!(out.status.code(), Some(1), "two variants rejected: {}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let verdicts: Vec<(String, String, String)> = report["candidates"]
        .as_array()
        .expect("candidates")
        .iter()
        .map(|e| {
            (
                e["kernel"].as_str().unwrap_or("").to_string(),
                e["verdict"]["kind"].as_str().unwrap_or("").to_string(),
                e["verdict"]["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let of = |k: &str| verdicts.iter().find(|v| v.0 == k).unwrap_or_else(|| panic!("{k}: {verdicts:#?}")).clone();
    let bf16 = of("kda.decode.state-bf16");
    assert_eq!(bf16.1, "needs-gpu", "{bf16:?}");
    assert!(bf16.2.contains("predicted 1.9") && bf16.2.contains("268435456 -> 134217728"), "{}", bf16.2);
    let fp8 = of("kda.decode.state-fp8");
    assert_eq!(fp8.1, "rejected");
    assert!(fp8.2.starts_with("beyond the error budget {o = 0.01, state = 0.02} from step 48 of 256"), "{}", fp8.2);
    let int8 = of("kda.decode.state-int8");
    assert_eq!(int8.1, "rejected");
    assert!(int8.2.starts_with("the kernel misses its simulated reference"), "{}", int8.2);
    // the command the gate ran
    let e = &report["candidates"][0];
    let cmd = e["gates"][0]["commands"][0].as_str().unwrap_or("");
    assert!(cmd.contains("precision --kernel kda.decode.state-") && cmd.contains("--seed 5"), "{cmd}");

    // the terminal: one table per kernel (fp32 first), then the drift of o and of the state by step
    let out = env.run(&["review", "--db", dbs]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let part = text.split_once("state precision of").map(|(_, p)| format!("state precision of{p}")).unwrap_or_default();
    insta::assert_snapshot!("review_state_precision", part);

    // one variant's review names its siblings, fp32 first, in JSON too
    let id = report["candidates"]
        .as_array()
        .and_then(|c| c.iter().find(|e| e["kernel"] == "kda.decode.state-bf16"))
        .and_then(|e| e["candidate"].as_str())
        .expect("the bf16 candidate")
        .to_string();
    let shown = env.json(&["review", &id, "--db", dbs, "--json"]);
    let fam = &shown["state_precision"];
    assert_eq!(fam["kernel"], "kda.decode", "{shown:#}");
    let dtypes: Vec<&str> =
        fam["variants"].as_array().expect("variants").iter().filter_map(|v| v["dtype"].as_str()).collect();
    assert_eq!(dtypes, ["bf16", "fp8e4m3", "int8"]);
    assert_eq!(fam["baseline_steps"].as_array().map(Vec::len), Some(9));
    assert_eq!(fam["variants"][0]["figures"]["drift"]["o"].as_array().map(Vec::len), Some(9));

    // the site: the index compares them on one chart per error, the page draws its own drift
    let out = env.run(&["review", "--db", dbs, "--html", "site"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let index = std::fs::read_to_string(env.path().join("site/index.html")).expect("index");
    assert!(index.contains("State precision of <code>kda.decode</code>"), "no comparison on the index");
    assert_eq!(index.matches("data-plot=\"drift\"><svg").count(), 2, "o and state charts");
    // every curve on the chart: plotters writes a legend's text as `>\nTEXT\n</text>`
    for legend in ["fp32", "bf16", "fp8e4m3 (tensor)", "int8 (head_k)"] {
        assert_eq!(index.matches(&format!(">\n{legend}\n</text>")).count(), 2, "legend {legend} on both charts");
    }
    let page = std::fs::read_dir(env.path().join("site/c"))
        .expect("pages")
        .filter_map(|e| e.ok())
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .find(|h| h.contains("state-bf16"))
        .expect("the bf16 page");
    assert_eq!(page.matches("data-plot=\"drift\"><svg").count(), 2, "its o and state drift beside fp32");
    assert!(page.contains("state bytes per step"));
}

/// `kidiom run` on the project with a one-file corpus, the stand-in harness
/// answering: its JSON report and summary.
fn run_loop(env: &Env, extra: &[&str]) -> (serde_json::Value, String) {
    let out = |json: bool| {
        let mut args = vec!["run", "--device", "cpu", "--no-search"];
        args.extend_from_slice(extra);
        if json {
            args.push("--json");
        }
        let o = env.cmd().env("KIDIOM_PYTHON", "python3").args(&args).output().expect("spawn");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    };
    let report: serde_json::Value = serde_json::from_slice(&out(true)).expect("JSON");
    // the summary of the same state (a second run judges nothing new)
    let text = String::from_utf8_lossy(&out(false)).to_string();
    (report, text)
}

/// (name, judged by this run, verdict) of each variant in a run's report.
fn variants_of(report: &serde_json::Value) -> Vec<(String, bool, String)> {
    report["variants"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .map(|v| {
                    (
                        v["name"].as_str().unwrap_or("").to_string(),
                        v["judged"].as_bool().unwrap_or(false),
                        v["verdict"].as_str().unwrap_or("-").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A variant costs a minute or so of the precision gate on a CPU: a run
/// judges none by default (a newcomer's first run stays short) and lists
/// them with how to judge them; `--variants` judges them all; after that a
/// run judges only a variant whose sources changed since its verdict.
#[test]
fn run_judges_variants_when_asked_or_when_their_sources_changed() {
    if !python_here() {
        eprintln!("skipped: no python3 for the stand-in harness");
        return;
    }
    let env = project();
    env.write("corpus/a.py", "x = 1\n");
    env.write("c.toml", "name = \"c\"\nkind = \"dir\"\nsource = \"corpus\"\n");
    env.write("kidiom.toml", "[catalog]\npath = \"cat.sqlite\"\n[mine]\ncorpora = [\"c.toml\"]\nhistory = false\n");
    let names = ["kda.decode.state-bf16", "kda.decode.state-fp8", "kda.decode.state-int8"];

    let (report, text) = run_loop(&env, &[]);
    let none: Vec<(String, bool, String)> = names.iter().map(|n| (n.to_string(), false, "-".to_string())).collect();
    assert_eq!(variants_of(&report), none, "{report:#}");
    assert!(text.contains("state-precision variants: 3 (3 not judged yet)"), "{text}");
    // three Triton variants at about a minute each
    assert!(text.contains("not judged yet: `kidiom validate --kernel all` (about 3 min on a CPU)"), "{text}");

    let (report, text) = run_loop(&env, &["--variants"]);
    let judged = [
        ("kda.decode.state-bf16", "needs-gpu"),
        ("kda.decode.state-fp8", "rejected"),
        ("kda.decode.state-int8", "rejected"),
    ];
    let want: Vec<(String, bool, String)> = judged.iter().map(|(n, v)| (n.to_string(), true, v.to_string())).collect();
    assert_eq!(variants_of(&report), want, "{report:#}");
    assert!(text.contains("state-precision variants: 3 (1 needs-gpu, 2 rejected)"), "{text}");
    assert!(!text.contains("not judged yet"), "{text}");

    // a changed manifest (its budget) is a new candidate: judged by a plain run, the others keep their verdicts
    let manifest = env.path().join("kernels/kda/decode_state_fp8.toml");
    let toml = std::fs::read_to_string(&manifest).expect("manifest");
    env.write("kernels/kda/decode_state_fp8.toml", toml.replace("o = 1e-2", "o = 2e-2"));
    let (report, text) = run_loop(&env, &[]);
    let mut want = want.clone();
    want.iter_mut().for_each(|v| v.1 = v.0 == "kda.decode.state-fp8");
    assert_eq!(variants_of(&report), want, "{report:#}");
    assert!(text.contains("state-precision variants: 3 (1 needs-gpu, 2 rejected)"), "{text}");
    // the summary is of a second run, which had nothing left to judge
    assert!(!text.contains("judged by this run"), "{text}");
}
