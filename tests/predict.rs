//! `kidiom predict --check` (issue #40): published rows predicted from our
//! kernels' profiles at each row's shape, scored, the latency terms fitted on
//! the declared half, the held-out errors written and named by every
//! prediction `kidiom profile` prints.

use crate::project::*;

/// A published source of three rows of small decodes on the built-in h200.
const SOURCE: &str = r#"
url = "https://example.org/pr/1"
device = "h200"
kind = "decode"
timed = "graph"
method = "CUDA graphs, median of 100"
baseline = "a V-tiled decode, fp32 state"
improved = "the same, bf16 state"
[predict]
baseline = "kda.decode"
improved = "kda.decode.state-bf16"
why = "the same step, the state in fp32 and in bf16"
shape = { N = "B", S = "B" }
[[rows]]
B = 1
H = 1
HV = 2
K = 32
V = 32
baseline_us = 3.0
improved_us = 2.5
[[rows]]
B = 2
H = 2
HV = 2
K = 32
V = 32
baseline_us = 3.2
improved_us = 2.6
[[rows]]
B = 4
H = 1
HV = 2
K = 32
V = 32
baseline_us = 3.5
improved_us = 2.8
"#;

const CHAIN: &str = r#"
url = "https://example.org/pr/2"
device = "h200"
kind = "chain"
timed = "graph"
method = "CUDA graphs"
baseline = "conv -> KDA -> norm"
improved = "one fused kernel"
[predict]
skip = "no conv or norm kernels of ours"
[[rows]]
B = 1
baseline_us = 12.4
improved_us = 8.3
"#;

#[test]
fn published_rows_are_predicted_scored_and_their_errors_named_by_every_prediction() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    let dir = env.path().join("published");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("decode.toml"), SOURCE).unwrap();
    std::fs::write(dir.join("chain.toml"), CHAIN).unwrap();
    let out = env
        .cmd()
        .env("KIDIOM_PYTHON", &py)
        .args(["predict", "--check", "published", "--json", "--write", "errors.json"])
        .output()
        .expect("spawn");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let c = &v["check"];
    let rows = c["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3, "{c:#}");
    // rows 0 and 2 of the file trained the fit, row 1 is held out
    let halves: Vec<bool> = rows.iter().map(|r| r["train"].as_bool().unwrap()).collect();
    assert_eq!(halves, [true, false, true]);
    for r in rows {
        for side in ["baseline", "improved"] {
            let s = &r[side];
            let (pred, publ) = (s["predicted_us"].as_f64().unwrap(), s["published_us"].as_f64().unwrap());
            assert!(pred > 0.0 && (s["ratio"].as_f64().unwrap() - pred / publ).abs() < 1e-9, "{s}");
            assert!((s["error"].as_f64().unwrap() - (pred / publ - 1.0).abs()).abs() < 1e-9, "{s}");
            let p = &s["prediction"];
            assert_eq!((p["label"].as_str(), p["timing"].as_str()), (Some("prediction"), Some("graph")), "{p}");
            // the compile at the row's shape gave the launch: 4 warps, the row's programs
            assert_eq!(p["launch"]["threads"], 128, "{p}");
        }
        // the bf16 state moves fewer bytes: never predicted slower
        assert!(r["predicted_speedup"].as_f64().unwrap() >= 1.0, "{r}");
    }
    assert_eq!(rows[0]["baseline"]["prediction"]["launch"]["programs"], 2, "one V-tile x 1 x 2 heads");
    // the held-out errors: one row, two sides
    assert_eq!(c["expected"]["all"]["time"]["n"], 2, "{c:#}");
    assert_eq!(c["expected"]["all"]["speedup"]["n"], 1);
    let unscored = c["unscored"].as_array().unwrap();
    assert_eq!(unscored.len(), 1, "{unscored:?}");
    assert_eq!((unscored[0]["source"].as_str(), unscored[0]["declared"].as_bool()), (Some("chain"), Some(true)));
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(env.path().join("errors.json")).unwrap()).unwrap();
    assert_eq!(written, c["expected"]);
    assert_eq!(written["by_kernel"]["kda.decode"]["time"]["n"], 1);

    // the table a person reads
    let text = env.cmd().env("KIDIOM_PYTHON", &py).args(["predict", "--check", "published"]).output().expect("spawn");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("2 trained the fit") && text.contains("1 held out"), "{text}");
    assert!(text.contains("not predicted (the source says why): chain"), "{text}");

    // every prediction `kidiom profile` prints names the error kidiom.toml points at
    std::fs::write(env.path().join("kidiom.toml"), "[predict]\nexpected_error = \"errors.json\"\n").unwrap();
    let profile = |k: &str| {
        let out = env.cmd().env("KIDIOM_PYTHON", &py).args(["profile", "--kernel", k]).output().expect("spawn");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let decode = profile("kda.decode");
    assert!(decode.contains("1 held-out published times predicted with kda.decode"), "{decode}");
    assert!(decode.contains("memory (bytes at the copy bandwidth)") && decode.contains("resident per SM"), "{decode}");
    // a damaged file: said, and the predictions say their error is unknown
    std::fs::write(env.path().join("errors.json"), "{not json").unwrap();
    let out = env.cmd().env("KIDIOM_PYTHON", &py).args(["profile", "--kernel", "kda.decode"]).output().expect("spawn");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("[predict] expected_error"), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("expected error unknown"), "{out:?}");
    std::fs::write(env.path().join("errors.json"), serde_json::to_string(&written).unwrap()).unwrap();
    let cuda = profile("kda_cuda.decode");
    assert!(cuda.contains("expected error unknown for kda_cuda.decode"), "{cuda}");
    // at a small batch: few programs, too few bytes in flight for the roof
    let small = env
        .cmd()
        .env("KIDIOM_PYTHON", &py)
        .args(["profile", "--kernel", "kda.decode", "--shape", "N=1,H=16,HV=32,K=128,V=128,S=1"])
        .output()
        .expect("spawn");
    let small = String::from_utf8_lossy(&small.stdout);
    assert!(small.contains("at the shape H=16 HV=32 K=128 N=1 S=1 V=128"), "{small}");
    assert!(small.contains("memory latency-bound") && small.contains("128 programs of 128 threads"), "{small}");
    for bad in ["N=0,H=16,HV=32,K=128,V=128,S=1", "N=1,N=2", "N1"] {
        let out = env.cmd().args(["profile", "--kernel", "kda.decode", "--shape", bad]).output().expect("spawn");
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--shape"), "{bad}");
    }
}

#[test]
fn sources_that_cannot_be_read_or_predicted_say_why() {
    let Some(py) = python() else { return };
    let env = project();
    let dir = env.path().join("published");
    std::fs::create_dir_all(&dir).unwrap();
    let check = |what: &str| {
        env.cmd().env("KIDIOM_PYTHON", &py).args(["predict", "--check", "published"]).output().expect(what)
    };
    // a kernel that is not there: the rows are listed, not scored (exit 1)
    std::fs::write(dir.join("x.toml"), SOURCE.replace("improved = \"kda.decode.state-bf16\"", "improved = \"nope\""))
        .unwrap();
    let out = check("unknown kernel");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("not scored: x rows [0, 1, 2]: no kernel nope here"));
    // a device kidiom.toml does not have
    std::fs::write(dir.join("x.toml"), SOURCE.replace("device = \"h200\"", "device = \"z9\"")).unwrap();
    let out = check("unknown device");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no [devices.z9] in kidiom.toml"));
    // not TOML, not UTF-8, a negative time: an error naming the file (exit 2)
    for (bytes, expect) in [
        (b"url = \n".to_vec(), "x.toml"),
        (vec![0xff, 0xfe, 0x00], "not UTF-8"),
        (SOURCE.replace("baseline_us = 3.0", "baseline_us = -3.0").into_bytes(), "baseline_us"),
    ] {
        std::fs::write(dir.join("x.toml"), bytes).unwrap();
        let out = check(expect);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("x.toml") && err.contains(expect), "{err}");
    }
    std::fs::remove_file(dir.join("x.toml")).unwrap();
    let out = check("empty");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no *.toml published source"));
}

/// The check on the committed measurements (bench/published) from the committed work
/// (work.json): fresh (no kernel of ours or harness code changed since it was made), the errors
/// it gives are the committed ones every prediction names, and they are what the README says.
#[test]
fn the_published_check_reproduces_its_committed_errors() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kidiom"))
        .current_dir(root)
        .args(["predict", "--check", "bench/published", "--json"])
        .output()
        .expect("spawn");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let c = &v["check"];
    assert_eq!(
        c["work"]["profiled"], 0,
        "the stored work is stale (a kernel of ours or the harness changed): run \
         `kidiom predict --check bench/published --refresh --write bench/published/expected-error.json` \
         and commit work.json and expected-error.json: {}",
        c["work"]
    );
    let committed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("bench/published/expected-error.json")).unwrap())
            .unwrap();
    assert_eq!(c["expected"], committed, "rewrite bench/published/expected-error.json with --write");
    // at least 25 rows from at least 4 sources, every held-out time within 2x of the published one
    let rows = c["rows"].as_array().unwrap();
    let sources: std::collections::BTreeSet<&str> = rows.iter().map(|r| r["source"].as_str().unwrap()).collect();
    assert!(rows.len() >= 25 && sources.len() >= 4, "{} rows, {sources:?}", rows.len());
    for r in rows.iter().filter(|r| r["train"] == false) {
        for side in ["baseline", "improved"] {
            let ratio = r[side]["ratio"].as_f64().unwrap();
            assert!((0.5..=2.0).contains(&ratio), "{} row {}: {side} {ratio}", r["source"], r["index"]);
        }
    }
    // kidiom.toml's values are the fitted ones
    assert_eq!(c["expected_configured"]["all"], c["expected"]["all"], "kidiom.toml's latency terms are not the fit's");
}
