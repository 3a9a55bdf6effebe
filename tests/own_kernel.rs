//! docs/OWN-KERNEL.md, "Validate your own kernel", followed literally: its fenced
//! blocks are the steps (a `file=PATH` block is written, a
//! `replace=PATH:FUNCTION` block replaces that function, each `sh` line is
//! run, and its `# -> A | B` comment is what its output must say). The
//! kernel lives in a git repository of its own under the target directory,
//! with no kernels/ and no harness: kidiom brings its own.

use std::path::Path;

use crate::init::workdir;

/// One step of the walk-through.
#[derive(Debug)]
enum Step {
    /// Write this file.
    File { path: String, text: String },
    /// Replace the top-level function `func` of `path` with `text`.
    Replace { path: String, func: String, text: String },
    /// Run this command line; its output says one of `expect`.
    Run { line: String, expect: Vec<String> },
}

fn walkthrough_steps() -> Vec<Step> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/OWN-KERNEL.md");
    let section = std::fs::read_to_string(&path).expect("docs/OWN-KERNEL.md");
    assert!(section.starts_with("# Validate your own kernel\n"), "docs/OWN-KERNEL.md is the walk-through");
    let mut steps = Vec::new();
    let mut lines = section.lines();
    while let Some(l) = lines.next() {
        let Some(info) = l.strip_prefix("```") else { continue };
        let mut body = String::new();
        for b in lines.by_ref() {
            if b.starts_with("```") {
                break;
            }
            body.push_str(b);
            body.push('\n');
        }
        let mut words = info.split_whitespace();
        let lang = words.next().unwrap_or("");
        let attr = words.next();
        match (lang, attr) {
            ("sh", _) => {
                for cmd in body.lines().map(str::trim).filter(|c| !c.is_empty() && !c.starts_with('#')) {
                    let (line, expect) = match cmd.split_once("# ->") {
                        Some((c, e)) => (c.trim(), e.split('|').map(|x| x.trim().to_string()).collect()),
                        None => (cmd, Vec::new()),
                    };
                    steps.push(Step::Run { line: line.to_string(), expect });
                }
            }
            (_, Some(a)) if a.starts_with("file=") => {
                steps.push(Step::File { path: a["file=".len()..].to_string(), text: body });
            }
            (_, Some(a)) if a.starts_with("replace=") => {
                let (path, func) = a["replace=".len()..].split_once(':').expect("replace=PATH:FUNCTION");
                steps.push(Step::Replace { path: path.into(), func: func.into(), text: body });
            }
            _ => {}
        }
    }
    steps
}

/// `text` with its top-level `def func(` replaced by `new` (up to the next
/// top-level statement).
fn replace_function(text: &str, func: &str, new: &str) -> String {
    let head = format!("def {func}(");
    let start = text.find(&head).unwrap_or_else(|| panic!("no {head} in:\n{text}"));
    let after = &text[start..];
    let mut end = after.len();
    let mut offset = 0;
    for (i, line) in after.split_inclusive('\n').enumerate() {
        if i > 0 && !line.trim().is_empty() && !line.starts_with([' ', '\t']) {
            end = offset;
            break;
        }
        offset += line.len();
    }
    let tail = &after[end..];
    let sep = if tail.is_empty() { "" } else { "\n\n" };
    format!("{}{}{sep}{}", &text[..start], new.trim_end_matches('\n').to_string() + "\n", tail)
}

#[test]
fn the_walkthrough_is_a_complete_path_to_a_verdict() {
    let steps = walkthrough_steps();
    let runs: Vec<&str> =
        steps.iter().filter_map(|s| if let Step::Run { line, .. } = s { Some(line.as_str()) } else { None }).collect();
    assert!(runs.iter().any(|l| l.starts_with("kidiom init ")), "{steps:?}");
    assert!(runs.iter().filter(|l| l.starts_with("kidiom validate ")).count() >= 2, "{steps:?}");
    assert!(steps.iter().any(|s| matches!(s, Step::File { path, .. } if path.ends_with(".py"))), "{steps:?}");
    assert!(steps.iter().any(|s| matches!(s, Step::Replace { func, .. } if func == "reference")), "{steps:?}");
    for s in &steps {
        if let Step::Run { line, expect } = s {
            assert!(line.starts_with("kidiom "), "only kidiom commands: {line}");
            assert!(!expect.is_empty(), "each command says what it prints: {line}");
        }
    }
    let replaced = replace_function(
        "import numpy as np\n\n\ndef a():\n    return 1\n\n\ndef reference(x):\n    raise X\n\n\ndef b():\n    pass\n",
        "reference",
        "def reference(x):\n    return {}\n",
    );
    assert_eq!(
        replaced,
        "import numpy as np\n\n\ndef a():\n    return 1\n\n\ndef reference(x):\n    return {}\n\n\ndef b():\n    pass\n"
    );
}

/// Whether kidiom's output says `e`: a verdict (`needs-gpu`, ...) as a
/// candidate's verdict in the table, not in the counts line ("0 needs-gpu");
/// anything else as text.
fn says(text: &str, e: &str) -> bool {
    if ["accepted", "rejected", "needs-gpu", "error"].contains(&e) {
        // the verdict table's row: short id, pattern, verdict (with its gate when rejected)
        text.lines().any(|l| {
            let mut cells = l.split_whitespace().skip(1);
            cells.next() == Some("manual") && cells.next() == Some(e)
        })
    } else {
        text.contains(e)
    }
}

/// Whether the harness kidiom was built with reads manifests by path.
fn harness_takes_manifests(py: &Path) -> bool {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::process::Command::new(py)
        .args(["-m", "kernels.harness", "check", "--help"])
        .current_dir(repo)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("--manifest"))
        .unwrap_or(false)
}

#[test]
fn the_walkthrough_runs_from_nothing_to_a_verdict() {
    let Some(py) = crate::project::python() else { return };
    if !harness_takes_manifests(&py) {
        eprintln!("skipping: the harness has no --manifest (format-2 contracts, issue #26) yet");
        return;
    }
    let _cpu = crate::util::cpu_heavy();
    let d = workdir("kidiom-own-");
    let root = d.path();
    git2::Repository::init(root).expect("git init");
    for step in walkthrough_steps() {
        match step {
            Step::File { path, text } => {
                let p = root.join(&path);
                std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
                std::fs::write(&p, text).expect("write");
            }
            Step::Replace { path, func, text } => {
                let p = root.join(&path);
                let old = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{path}: {e}"));
                std::fs::write(&p, replace_function(&old, &func, &text)).expect("write");
            }
            Step::Run { line, expect } => {
                let args: Vec<&str> = line.split_whitespace().skip(1).collect();
                let out = std::process::Command::new(env!("CARGO_BIN_EXE_kidiom"))
                    .current_dir(root)
                    .env("KIDIOM_PYTHON", &py)
                    .env("KIDIOM_CACHE", root.join(".cache"))
                    .env("KIDIOM_CONTENT_CACHE", crate::util::content_cache())
                    .env_remove("KIDIOM_HARNESS")
                    .args(&args)
                    .output()
                    .expect("spawn kidiom");
                let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
                assert!(
                    expect.iter().any(|e| says(&text, e)),
                    "`{line}` must say one of {expect:?} (exit {:?}):\n{text}",
                    out.status.code()
                );
                if expect.iter().any(|e| e.contains("not written yet")) {
                    // the harness's one line, unchanged, and the verdict is error
                    assert!(text.contains("error"), "{text}");
                    // (the terminal wraps the line at words: wherever the path ends it)
                    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
                    assert!(
                        words.contains("rmsnorm_contract.py: reference() is not written yet"),
                        "the line names the contract: {text}"
                    );
                    assert_eq!(out.status.code(), Some(1), "an error verdict: {text}");
                }
            }
        }
    }
}

/// A stand-in harness that answers every call as the format-2 harness does
/// for a contract whose reference `kidiom init` left unwritten, and logs
/// what it was asked.
const STAND_IN: &str = r#"import json, os, sys
args = sys.argv[1:]
with open(os.environ["KIDIOM_TEST_LOG"], "a") as log:
    log.write(json.dumps({"argv": args, "cwd": os.getcwd(), "pythonpath": os.environ.get("PYTHONPATH", "")}) + "\n")
if args[:1] == ["device"]:
    print(json.dumps({"wire": "kidiom-harness", "command": "device", "cuda": False}))
    sys.exit(0)
manifest = args[args.index("--manifest") + 1]
assert os.path.isfile(manifest), manifest
line = "rmsnorm: contract rmsnorm_contract.py: reference() is not written yet (kidiom init left it for you)"
print(json.dumps({"wire": "kidiom-harness", "version": 1, "command": args[0], "status": "error",
                  "error_kind": "contract", "error": line}))
sys.exit(2)
"#;

#[test]
fn an_unfinished_contract_is_the_harness_line_and_an_error_verdict() {
    let d = workdir("kidiom-own-");
    let (root, harness) = (d.path().join("project"), d.path().join("harness"));
    for (rel, text) in
        [("kernels/__init__.py", ""), ("kernels/harness/__init__.py", ""), ("kernels/harness/__main__.py", STAND_IN)]
    {
        let p = harness.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }
    std::fs::create_dir_all(root.join("ops")).expect("mkdir");
    git2::Repository::init(&root).expect("git init");
    std::fs::write(root.join("ops/rmsnorm.py"), crate::init::RMSNORM).expect("write");
    let log = d.path().join("calls.jsonl");
    // a relative KIDIOM_PYTHON is relative to where kidiom started, though the harness runs elsewhere
    let Some(python3) = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("python3"))
        .find(|p| p.is_file())
    else {
        eprintln!("skipping: no python3 to run the stand-in harness");
        return;
    };
    std::fs::create_dir_all(root.join(".tools")).expect("mkdir");
    std::os::unix::fs::symlink(&python3, root.join(".tools/python")).expect("symlink");
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_kidiom"))
            .current_dir(&root)
            .env("KIDIOM_HARNESS", &harness)
            .env("KIDIOM_PYTHON", ".tools/python")
            .env("KIDIOM_TEST_LOG", &log)
            .env("KIDIOM_CACHE", root.join(".cache"))
            .env("KIDIOM_CONTENT_CACHE", crate::util::content_cache())
            .args(args)
            .output()
            .expect("spawn kidiom")
    };
    let out = run(&["init", "ops/rmsnorm.py"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let old = crate::init::RMSNORM;
    let new = old.replace("y = x / tl.sqrt(ms + eps) * w", "y = x * tl.rsqrt(ms + eps) * w");
    std::fs::write(root.join("ops/rsqrt.diff"), kidiom_rewriter::unified("ops/rmsnorm.py", old, &new, 1))
        .expect("write");
    let out = run(&["validate", "--patch", "ops/rsqrt.diff", "--device", "cpu", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !log.exists() {
        eprintln!("skipping: no python3 to run the stand-in harness ({stderr})");
        return;
    }
    assert_eq!(out.status.code(), Some(1), "an error verdict: {stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let v = &report["candidates"][0]["verdict"];
    assert_eq!(v["kind"], "error", "{report:#}");
    assert_eq!(
        v["reason"],
        "rmsnorm: contract rmsnorm_contract.py: reference() is not written yet (kidiom init left it for you)",
        "the harness's line, unchanged"
    );
    // every call named the manifest by its path in the validation's tree, which holds the harness
    let calls: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert!(!calls.is_empty());
    for c in &calls {
        let argv: Vec<&str> = c["argv"].as_array().expect("argv").iter().filter_map(|a| a.as_str()).collect();
        assert!(!argv.contains(&"--kernel"), "{argv:?}");
        let cwd = c["cwd"].as_str().expect("cwd");
        let manifest = argv[argv.iter().position(|a| *a == "--manifest").expect("--manifest") + 1];
        assert_eq!(manifest, format!("{cwd}/ops/rmsnorm.toml"), "a copy in the tree the harness runs in");
        assert!(c["pythonpath"].as_str().expect("pythonpath").starts_with(cwd), "{c}");
    }
    // the frozen contract: a candidate that edits the manifest is rejected
    let manifest = std::fs::read_to_string(root.join("ops/rmsnorm.toml")).expect("read");
    let looser = manifest.replace("rel_l2 = 1e-5", "rel_l2 = 1.0");
    std::fs::write(root.join("ops/loose.diff"), kidiom_rewriter::unified("ops/rmsnorm.toml", &manifest, &looser, 1))
        .expect("write");
    let out = run(&["validate", "--patch", "ops/loose.diff", "--device", "cpu", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let v = &report["candidates"][0]["verdict"];
    assert_eq!((v["kind"].as_str(), v["gate"].as_str()), (Some("rejected"), Some("static")), "{report:#}");
}

#[test]
fn run_takes_its_targets_from_the_flag_or_kidiom_toml() {
    let d = workdir("kidiom-own-");
    let root = d.path();
    git2::Repository::init(root).expect("git init");
    let write = |rel: &str, text: &str| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    };
    write("ops/rmsnorm.py", crate::init::RMSNORM);
    write("corp.toml", "name = \"c\"\nkind = \"dir\"\nsource = \"ops\"\n");
    write("kidiom.toml", "[mine]\ncorpora = [\"corp.toml\"]\n\n[run]\ntargets = [\"ops\"]\n");
    std::fs::create_dir_all(root.join("empty")).expect("mkdir");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kidiom"))
            .current_dir(root)
            .env("KIDIOM_CACHE", root.join(".cache"))
            .env("KIDIOM_CONTENT_CACHE", crate::util::content_cache())
            .args(args)
            .output()
            .expect("spawn kidiom");
        (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    };
    // no manifest yet: said in one line, with what writes one
    let (code, text) = run(&["run", "--no-search"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("no kernel manifest under ops") && text.contains("kidiom init"), "{text}");
    let (code, text) = run(&["init", "ops/rmsnorm.py"]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = run(&["run", "--no-search"]);
    assert!(text.contains("applying the catalog to ops (dry run)"), "{text}");
    assert!(text.contains("candidates on ops: 0"), "{code:?}: {text}");
    // the skeleton's contract is not finished: no candidate for it, and the summary says why
    assert!(text.contains("no candidates for ops/rmsnorm.py") && text.contains("is not written yet"), "{text}");
    // `apply` with no target looks there too (a catalog from the run above)
    let (code, text) = run(&["apply", "--json"]);
    assert!(matches!(code, Some(0 | 1)), "{text}");
    let report: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(report["files"], 2, "ops/rmsnorm.py and its contract module: {report:#}");
    let (code, text) = run(&["run", "--no-search", "--targets", "empty"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("no kernel manifest under empty"), "{text}");
}
