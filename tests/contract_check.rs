//! Issue #43 end to end, in a folder outside the repository with no
//! kidiom.toml: `kidiom init` writes the project file, `kidiom check` runs
//! the unmodified kernel against its contract at the manifest's sizes and at
//! odd sizes, a contract mistake is the contract's error (never a
//! candidate's rejection), and a verdict given under a contract that changed
//! since is stale and judged again by `kidiom run`.

use std::path::Path;
use std::process::Output;

/// A kernel of our own (not one of kidiom's): each row's mean of `x * sigmoid(g)`, a reduction.
const GATED_MEAN: &str = include_str!("fixtures/own_folder/gated_mean.py");

/// The reference the user writes (and a wrong one: the sum, not the mean).
const REFERENCE: &str = r#"    xx, gg = x["x"].astype(np.float64), x["g"].astype(np.float64)
    return {"out": (xx / (1 + np.exp(-gg))).sum(axis=-1) * x["scale"] / xx.shape[-1]}"#;

/// A second kernel whose launcher's grid holds only at multiples of its block.
const SCALE: &str = r#"import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, a, BLOCK: tl.constexpr):
    # x, y: [n]
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * a, mask=m)


def scale(x, y, a=2.0):
    n = x.shape[0]
    scale_kernel[(n // 64,)](x, y, n, a, BLOCK=64)
    return y
"#;

/// Runs kidiom in `dir`: its exit code and everything it printed (stdout, then stderr).
fn kidiom(dir: &Path, corpora: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = output(dir, corpora, args);
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Runs kidiom in `dir` with `--json`: its exit code and stdout read as JSON.
fn kidiom_json(dir: &Path, corpora: &Path, args: &[&str]) -> (Option<i32>, serde_json::Value) {
    let out = output(dir, corpora, args);
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), json)
}

fn output(dir: &Path, corpora: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_kidiom"))
        .current_dir(dir)
        .env("KIDIOM_CACHE", dir.join(".cache"))
        .env("KIDIOM_CONTENT_CACHE", crate::util::content_cache())
        .env("KIDIOM_CORPORA", corpora)
        .args(args)
        .output()
        .expect("spawn kidiom")
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).expect("read");
    assert!(text.contains(from), "{} has no {from:?}:\n{text}", path.display());
    std::fs::write(path, text.replacen(from, to, 1)).expect("write");
}

/// Fills the `skeleton` init wrote for `gated_mean` as its user would: the reference, the sizes,
/// the shapes init could not read (`g_shape`: the shape of `g`).
fn fill(dir: &Path, skeleton: &str, reference: &str, g_shape: &str) {
    let contract = dir.join("mine/gated_mean_contract.py");
    let text = skeleton.to_string();
    let start = text.find("    raise NotImplementedError").expect("the reference left to write");
    let end = start + text[start..].find('\n').expect("line end");
    let mut text = format!("{}{reference}{}", &text[..start], &text[end..]);
    let g = text.lines().find(|l| l.trim_start().starts_with("\"g\":")).expect("g's line").to_string();
    text = text.replace(&g, &format!("        \"g\": ({g_shape}, \"float32\"),"));
    std::fs::write(&contract, text).expect("write");
    sizes(
        &dir.join("mine/gated_mean.toml"),
        "n_rows = 3, n_cols = 64",
        "n_rows = 4096, n_cols = 1024",
        "n_rows = 8, n_cols = 128",
    );
}

/// The user's sizes in a skeleton's manifest: its `cpu`, `gpu` and `bench` lines.
fn sizes(manifest: &Path, cpu: &str, gpu: &str, bench: &str) {
    let text = std::fs::read_to_string(manifest).expect("read");
    let text: String = text
        .lines()
        .map(|l| match l.split_whitespace().next() {
            Some("cpu") => format!("cpu = [{{ {cpu} }}]"),
            Some("gpu") => format!("gpu = [{{ {gpu} }}]"),
            Some("bench") => format!("bench = {{ {bench} }}"),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(manifest, text).expect("write");
}

#[test]
fn a_folder_of_our_own_from_init_to_a_checked_contract_and_stale_verdicts() {
    let _cpu = crate::util::cpu_heavy();
    let d = tempfile::tempdir().expect("tempdir");
    let (dir, corpora) = (d.path().join("project"), d.path().join("shipped"));
    let write = |p: &Path, text: &str| {
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    };
    write(&dir.join("mine/gated_mean.py"), GATED_MEAN);
    write(&dir.join("other/scale.py"), SCALE);
    // the corpora kidiom ships, stood in for by small folders of our own (no network here): one
    // holds the eviction-policy idiom twice beside its undecorated form
    let upstream = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(p, q, r, o):\n    \
                    a = tl.load(p, eviction_policy=\"evict_last\")\n    b = tl.load(q, eviction_policy=\"evict_last\")\n    \
                    c = tl.load(r)\n    tl.store(o, a + b + c)\n";
    for name in ["fla", "deepgemm", "sglang", "mooncake"] {
        write(&corpora.join(format!("{name}/k.py")), upstream);
        write(
            &corpora.join(format!("{name}.toml")),
            &format!("name = \"{name}\"\nkind = \"dir\"\nsource = \"{}\"\n", corpora.join(name).display()),
        );
    }
    write(&corpora.join("snapshot.json"), "{}");

    // init in a folder with no kidiom.toml: the skeleton, its guesses, and the project file
    let (code, text) = kidiom(&dir, &corpora, &["init", "mine/gated_mean.py"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("also wrote kidiom.toml"), "{text}");
    let toml = std::fs::read_to_string(dir.join("kidiom.toml")).expect("kidiom.toml written");
    assert!(toml.contains("\"kidiom:fla\"") && toml.contains("snapshot = \"kidiom:snapshot\""), "{toml}");
    assert!(toml.contains("targets = [\"mine\"]"), "{toml}");
    let contract = std::fs::read_to_string(dir.join("mine/gated_mean_contract.py")).expect("contract");
    let skeleton = contract.as_str();
    assert!(contract.contains("GUESSES = {") && contract.contains("\"shape of g\""), "{contract}");
    // the stored value is a tl.sum's: one dimension fewer than the inputs, judged as one slice
    assert!(contract.contains("\"out\": ((n_rows,), \"float32\")"), "{contract}");
    assert!(contract.contains("SLICE_AXES = {\"out\": 0}"), "{contract}");
    // a second init elsewhere leaves kidiom.toml as it is, and says the kernel is not a target
    let (code, text) = kidiom(&dir, &corpora, &["init", "other/scale.py"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("leave other/scale.py out") && text.contains("--targets other"), "{text}");
    assert_eq!(std::fs::read_to_string(dir.join("kidiom.toml")).expect("kidiom.toml"), toml);

    // the sum where the mean is meant: the contract's mistake, said as one, also by validation
    let wrong = REFERENCE.replace(" / xx.shape[-1]", "");
    fill(&dir, skeleton, &wrong, "(n_rows, n_cols)");
    let (code, text) = kidiom(&dir, &corpora, &["check", "mine/gated_mean.py"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("the contract or the kernel is wrong: the unmodified kernel fails"), "{text}");
    let faster = GATED_MEAN.replace("BLOCK_C=64", "BLOCK_C=128");
    std::fs::write(dir.join("block.diff"), kidiom_rewriter::unified("mine/gated_mean.py", GATED_MEAN, &faster, 1))
        .expect("write");
    let (code, report) =
        kidiom_json(&dir, &corpora, &["validate", "--patch", "block.diff", "--device", "cpu", "--json"]);
    assert_eq!(code, Some(1), "{report:#}");
    let v = &report["candidates"][0]["verdict"];
    assert_eq!((v["kind"].as_str(), v["gate"].as_str()), (Some("error"), Some("static")), "{report:#}");
    assert!(
        v["reason"].as_str().is_some_and(|r| r.starts_with("the contract or the kernel is wrong: the unmodified")),
        "not the candidate's fault: {report:#}"
    );

    // a wrong guess of g's shape (init reads (n_rows, n_cols) from g's address; here it is the
    // one-size guess init makes where nothing says), kept by a user who checks one row only on
    // the CPU: out of bounds where more rows run (the GPU sizes' specializations, the odd sizes),
    // and the guess named
    let guessed = "\"shape of g\": \"(n_rows, n_cols)\"";
    assert!(skeleton.contains(guessed), "{skeleton}");
    fill(&dir, &skeleton.replace(guessed, "\"shape of g\": \"(n_cols)\""), REFERENCE, "(n_cols,)");
    edit(
        &dir.join("mine/gated_mean.toml"),
        "cpu = [{ n_rows = 3, n_cols = 64 }]",
        "cpu = [{ n_rows = 1, n_cols = 64 }]",
    );
    let (code, text) = kidiom(&dir, &corpora, &["check", "mine/gated_mean.py"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("out-of-bounds read"), "{text}");
    assert!(text.contains("kidiom init guessed shape of g = (n_cols)") && text.contains("(GUESSES)"), "{text}");
    // a grid that covers only whole blocks: right at n = 128, wrong at the odd n = 129
    std::fs::write(
        dir.join("other/scale_contract.py"),
        std::fs::read_to_string(dir.join("other/scale_contract.py"))
            .expect("read")
            .replace(
                "    raise NotImplementedError(\"kidiom init: write the float64 reference of scale_kernel: return {'y': ...} from x\")",
                "    return {\"y\": x[\"x\"].astype(np.float64) * x[\"a\"]}",
            ),
    )
    .expect("write");
    // every size a multiple of the block, as a first contract often has
    sizes(&dir.join("other/scale.toml"), "n = 128", "n = 1048576", "n = 1048576");
    let (code, text) = kidiom(&dir, &corpora, &["check", "other/scale.toml"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("fails at odd sizes {n:129}") && text.contains("[shapes] exact"), "{text}");
    // a contract that says its sizes are whole blocks (its reference refuses others): the odd sizes
    // prove nothing then, and say so, rather than blame the kernel for sizes the contract excludes
    edit(
        &dir.join("other/scale_contract.py"),
        "    return {\"y\": x[\"x\"]",
        "    assert x[\"x\"].shape[0] % 64 == 0, \"whole blocks only\"\n    return {\"y\": x[\"x\"]",
    );
    let (code, text) = kidiom(&dir, &corpora, &["check", "other/scale.toml"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("the odd sizes proved nothing where the contract cannot make them"), "{text}");
    assert!(text.contains("whole blocks only"), "{text}");

    // the contract right: it passes at both sets of sizes, and the second check is remembered
    fill(&dir, skeleton, REFERENCE, "(n_rows, n_cols)");
    let (code, text) = kidiom(&dir, &corpora, &["check", "mine"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("the unmodified kernel meets its contract (1 case at the manifest's sizes, 1 at odd sizes"));
    let (_, again) = kidiom_json(&dir, &corpora, &["check", "mine", "--json"]);
    assert_eq!(again["contracts"][0]["cached"], true, "{again:#}");

    // the whole loop in this folder, on kidiom's corpora (here: the stand-ins), then a contract
    // change: the verdict is stale in the review and judged again by the next run
    let (code, text) = kidiom(&dir, &corpora, &["run", "--no-search", "--device", "cpu"]);
    assert!(matches!(code, Some(0 | 1)), "{text}");
    assert!(text.contains("candidates on mine: 1 (1 needs-gpu)"), "{text}");
    // what the candidate cost, harness call by harness call
    let (_, cands) = kidiom_json(&dir, &corpora, &["review", "--json"]);
    let mined = cands.as_array().and_then(|a| a.iter().find(|c| c["pattern_id"] != "manual")).expect("a candidate");
    let phases = mined["evidence"]["phases"].as_array().expect("phases");
    let names: Vec<&str> = phases.iter().filter_map(|p| p["name"].as_str()).collect();
    for want in ["compile candidate", "check candidate", "profile candidate"] {
        assert!(names.contains(&want), "{names:?}");
    }
    assert!(phases.iter().all(|p| p["seconds"].as_f64().is_some_and(|s| s > 0.0)), "{phases:?}");
    // the manual edit's error was given under the wrong reference: stale since it was fixed
    let row = |review: &str, pattern: &str| {
        review.lines().find(|l| l.contains(pattern)).unwrap_or_else(|| panic!("no {pattern} in\n{review}")).to_string()
    };
    let (_, review) = kidiom(&dir, &corpora, &["review"]);
    assert!(row(&review, "manual").contains("stale: error (static)"), "{review}");
    assert!(row(&review, "eviction-policy").contains(" needs-gpu"), "{review}");
    edit(&dir.join("mine/gated_mean.toml"), "rel_l2 = 1e-5", "rel_l2 = 2e-5");
    let (_, review) = kidiom(&dir, &corpora, &["review"]);
    assert!(row(&review, "eviction-policy").contains("stale: needs-gpu"), "{review}");
    let (code, text) = kidiom(&dir, &corpora, &["run", "--no-search", "--device", "cpu"]);
    assert!(matches!(code, Some(0 | 1)), "{text}");
    assert!(text.contains("1 verdict given under a contract that has changed since: judged again"), "{text}");
    let (_, review) = kidiom(&dir, &corpora, &["review"]);
    assert!(!row(&review, "eviction-policy").contains("stale") && review.contains("needs-gpu"), "{review}");
    // the run judges its own candidates; the edit of one's own is judged again by `kidiom validate`
    assert!(row(&review, "manual").contains("stale"), "{review}");
}

/// A manifest named outright that does not parse (a `[python]` table written twice) says why,
/// not that there is no manifest.
#[test]
fn a_manifest_that_does_not_parse_is_named_with_its_error() {
    let d = crate::init::workdir("kidiom-check-");
    let dir = d.path().join("project");
    std::fs::create_dir_all(dir.join("ops")).expect("mkdir");
    std::fs::write(dir.join("ops/scale.py"), SCALE).expect("write");
    let (code, out) = kidiom(&dir, &d.path().join("shipped"), &["init", "ops/scale.py"]);
    assert_eq!(code, Some(0), "{out}");
    let manifest = dir.join("ops/scale.toml");
    let text = std::fs::read_to_string(&manifest).expect("manifest");
    std::fs::write(&manifest, format!("{text}\n[python]\npath = [\"..\"]\n[python]\npath = [\"..\"]\n"))
        .expect("write");
    let (code, out) = kidiom(&dir, &d.path().join("shipped"), &["check", "ops/scale.toml"]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("not a kernel manifest kidiom can read: manifest ") && out.contains("ops/scale.toml"),
        "{out}"
    );
    assert!(out.contains("duplicate key `python`"), "{out}");
    assert!(!out.contains("no Triton or CUDA kernel manifest"), "{out}");
}
