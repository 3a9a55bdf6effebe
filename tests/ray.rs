//! The Ray executor, on a Ray head on 127.0.0.1 that each test starts and
//! stops (`python -m kernels.harness fleet --head`; its guard stops it when
//! the test ends, fails or dies). Validation, through the validator's
//! library API: the same candidates with a fixed seed get the same verdicts,
//! reasons and numbers through Ray as locally, and the evidence names the
//! node of each harness run; a hanging kernel is an `error` at its deadline
//! and the run goes on. Mining, through `kidiom mine --executor`: usage and
//! history mined in shards on the cluster give the local run's catalog,
//! pattern for pattern, count for count, fact for fact; a shard that dies
//! fails the run with a message naming it and leaves the catalog as it was.
//! Skips with the reason where Ray cannot be imported (not in CI, where
//! scripts/setup-python.sh installs it).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use kidiom_validator::{CandidateInput, Device, Evidence, Executor, Gate, GateStatus, ValidatorBuilder, VerdictKind};
use serde_json::Value;

use crate::project::*;
use crate::util::Env;

/// The harness's Python when it can import Ray.
fn ray_python() -> Option<PathBuf> {
    let py = python()?;
    let ok = Command::new(&py).args(["-c", "import ray"]).output().map(|o| o.status.success()).unwrap_or(false);
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{} cannot import ray (CI must run this test: scripts/setup-python.sh)",
            py.display()
        );
        eprintln!("skipping: {} cannot import ray (run scripts/setup-python.sh)", py.display());
        return None;
    }
    Some(py)
}

/// A Ray head on 127.0.0.1, held by `fleet --head` until its stdin closes.
struct Head {
    child: Child,
    stdin: Option<ChildStdin>,
    address: String,
}

impl Head {
    fn start(py: &Path, root: &Path) -> Head {
        let mut child = Command::new(py)
            .args(["-m", "kernels.harness", "fleet", "--head", "--num-cpus", "2"])
            .current_dir(root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn fleet --head");
        let stdin = child.stdin.take();
        let mut line = String::new();
        let read = child.stdout.take().map(|o| BufReader::new(o).read_line(&mut line));
        // the guard exists before anything can fail: a failed start is stopped too
        let mut head = Head { child, stdin, address: String::new() };
        assert!(matches!(read, Some(Ok(n)) if n > 0), "fleet --head printed nothing");
        let v: serde_json::Value = serde_json::from_str(&line).expect("fleet --head: JSON");
        head.address = v["head"].as_str().unwrap_or_else(|| panic!("no head: {v}")).to_string();
        assert!(head.address.starts_with("127.0.0.1:"), "{}", head.address);
        head
    }
}

impl Drop for Head {
    fn drop(&mut self) {
        self.stdin.take(); // the holder stops the head and exits
        let until = Instant::now() + Duration::from_secs(90);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // its death still stops the head (SIGTERM on its parent's death)
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn candidate(root: &Path, id_edit: (&str, &str), rel: &str) -> CandidateInput {
    let old = std::fs::read_to_string(root.join(rel)).expect("read");
    assert_eq!(old.matches(id_edit.0).count(), 1, "{:?} must occur once in {rel}", id_edit.0);
    let new = old.replace(id_edit.0, id_edit.1);
    let diff = kidiom_rewriter::unified(rel, &old, &new, 3);
    CandidateInput::from_patch(root, &diff, Some(kidiom_patterns::Category::Math)).expect("a patch that applies")
}

/// A validator of `root`'s kernels on this CPU: one seed (11), no consistency runs.
fn cpu_validator(root: &Path, py: &Path) -> ValidatorBuilder {
    let mut builder = ValidatorBuilder::new(root);
    builder.python(Some(py.to_path_buf())).device(Device::Cpu).seeds(1).seed(Some(11)).consistency(false);
    builder
}

fn statuses(e: &Evidence) -> Vec<(Gate, GateStatus)> {
    e.gates.iter().map(|g| (g.gate, g.status)).collect()
}

#[test]
fn the_same_candidates_get_the_same_verdicts_through_ray_as_locally() {
    let Some(py) = ray_python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    let root = env.path();
    let head = Head::start(&py, root);
    let dec = "kernels/kda/decode.py";
    let cands = [
        // passes every CPU gate: needs a GPU for speed
        candidate(root, ("b_beta * (b_v - b_p)", "(b_v - b_p) * b_beta"), dec),
        // wrong: rejected at correctness with its error
        candidate(root, ("b_beta * (b_v - b_p)", "b_beta * (b_v + b_p)"), dec),
        // does not parse: rejected before any harness runs
        candidate(root, ("b_p = tl.sum(b_s * b_k[:, None], axis=0)", "b_p = tl.sum(b_s * b_k[:, None], axis=0"), dec),
    ];
    let mut builder = cpu_validator(root, &py);
    builder.timeout(Duration::from_secs(300));
    let local = builder.build().expect("local validator");
    let ray = builder.executor(Executor::Ray { address: Some(head.address.clone()) }).build().expect("ray validator");
    assert_eq!(ray.parallelism().expect("the driver connects"), 1, "2 CPUs, no GPU: one candidate at a time");

    let expected = [
        (VerdictKind::NeedsGpu, None),
        (VerdictKind::Rejected, Some(Gate::Correctness)),
        (VerdictKind::Rejected, Some(Gate::Syntax)),
    ];
    let mut first_through_ray = None;
    for (c, want) in cands.iter().zip(expected) {
        let here = local.validate(c).expect("local");
        let there = ray.validate(c).expect("ray");
        assert_eq!((here.verdict.kind, here.verdict.gate), want, "{here:#?}");
        assert_eq!((there.verdict.kind, there.verdict.gate), want, "{there:#?}");
        // the same reason: for the wrong candidate it quotes the same errors, to the last digit
        assert_eq!(there.verdict.reason, here.verdict.reason);
        assert_eq!(statuses(&there), statuses(&here));
        assert_eq!(there.seeds, here.seeds);
        for (a, b) in there.gates.iter().zip(&here.gates) {
            assert_eq!(a.summary, b.summary, "{}", a.gate);
            assert_eq!(a.device, b.device, "{}", a.gate);
            if a.gate == Gate::Correctness {
                assert_eq!(a.metrics["worst"], b.metrics["worst"], "the check's numbers");
            }
            if a.gate == Gate::Static {
                let figures = |r: &kidiom_validator::GateRecord| {
                    let mut f = r.after.clone().unwrap_or_default();
                    f.as_object_mut().map(|o| o.remove("compile_seconds"));
                    f
                };
                assert_eq!(figures(a), figures(b), "the compile's figures");
            }
            // where each harness run went
            assert!(b.placements.is_empty(), "local runs name no node");
            assert_eq!(a.placements.len(), if a.gate == Gate::Syntax { 0 } else { a.commands.len() }, "{a:#?}");
            for p in &a.placements {
                assert_eq!(p.executor, "ray");
                assert!(p.node.as_deref().is_some_and(|n| n.contains("127.0.0.1")), "{p:?}");
                assert_eq!((p.gpu.as_deref(), p.attempts, p.error.as_deref()), (None, 1, None), "{p:?}");
                assert!(p.harness.as_deref().is_some_and(|h| h.len() == 40), "{p:?}");
            }
        }
        eprintln!(
            "{}: {} locally in {:.1}s, through Ray in {:.1}s",
            c.id,
            here.verdict.describe(),
            here.seconds,
            there.seconds
        );
        first_through_ray.get_or_insert(there);
    }
    // the placements are part of the stored evidence (the first candidate's, as validated above)
    let json = serde_json::to_value(first_through_ray.expect("validated through Ray")).expect("json");
    let g = json["gates"].as_array().and_then(|g| g.iter().find(|g| g["gate"] == "correctness")).expect("gate");
    assert!(g["placements"][0]["node"].as_str().is_some_and(|n| n.contains("127.0.0.1")), "{g:#}");

    drop(ray);
    drop(head);
}

#[test]
fn a_kernel_that_never_ends_through_ray_is_an_error_at_its_deadline_and_the_next_goes_on() {
    // (split from the test above so that neither takes a minute: each starts its own head, 3 s)
    let Some(py) = ray_python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    let root = env.path();
    let head = Head::start(&py, root);
    let dec = "kernels/kda/decode.py";
    let wrong = candidate(root, ("b_beta * (b_v - b_p)", "b_beta * (b_v + b_p)"), dec);
    let mut builder = cpu_validator(root, &py);
    builder.executor(Executor::Ray { address: Some(head.address.clone()) });
    // a kernel that never ends: the task is killed at its deadline, an error; the run goes on
    let hang = candidate(
        root,
        ("    i_h = i_hv // (HV // H)\n", "    i_h = i_hv // (HV // H)\n    while i_h >= 0:\n        i_h += 0\n"),
        dec,
    );
    let short = builder.timeout(Duration::from_secs(25)).build().expect("ray validator");
    let started = Instant::now();
    let e = short.validate(&hang).expect("ray");
    assert_eq!((e.verdict.kind, e.verdict.gate), (VerdictKind::Error, Some(Gate::Correctness)), "{e:#?}");
    assert!(e.verdict.reason.contains("timed out"), "{}", e.verdict.reason);
    assert!(started.elapsed() < Duration::from_secs(70), "{:?}", started.elapsed());
    let after = short.validate(&wrong).expect("ray");
    assert_eq!(after.verdict.kind, VerdictKind::Rejected, "{after:#?}");
    drop(short);
    drop(head);
}

// ---------------------------------------------------------------- mining

/// A Triton file: one kernel with `tl.dot` (with `input_precision` or not),
/// a load with or without an eviction policy, `exp` or `exp2`, and a launch.
fn triton_file(i: usize, ieee: bool, evict: bool, exp2: bool) -> String {
    let dot = if ieee { "tl.dot(b_q, b_k, input_precision=\"ieee\")" } else { "tl.dot(b_q, b_k)" };
    let load = if evict { "tl.load(q + offs, eviction_policy=\"evict_last\")" } else { "tl.load(q + offs)" };
    let exp = if exp2 { "exp2" } else { "tl.exp" };
    format!(
        "import triton\nimport triton.language as tl\nfrom .op import exp2\n\n\n@triton.jit\ndef kernel_{i}(q, k, o, B: tl.constexpr):\n    offs = tl.arange(0, B)\n    b_q = {load}\n    b_k = tl.load(k + offs)\n    b_s = {dot}\n    b_o = {exp}(b_s)\n    tl.store(o + offs, b_o)\n\n\ndef launch_{i}(q, k, o):\n    kernel_{i}[(1,)](q, k, o, B=16, num_warps={})\n",
        if i.is_multiple_of(2) { 4 } else { 8 }
    )
}

/// A CUDA file; `dg` kernels are declared through a device macro that only `macros.cuh` defines.
fn cuda_file(i: usize, bounds: bool, unroll: bool) -> String {
    let lb = if bounds { "__launch_bounds__(256) " } else { "" };
    let pragma = if unroll { "  #pragma unroll\n" } else { "" };
    format!(
        "#include \"macros.cuh\"\n__global__ void {lb}scale_{i}(const float* __restrict__ x, float* y, int n) {{\n{pragma}  for (int j = 0; j < 4; ++j) {{ y[j] = __expf(x[j]); }}\n  for (int j = 0; j < n; ++j) {{ y[j] += 1.0f; }}\n}}\n\nDG_DEVICE float helper_{i}(float v) {{ return __expf(v); }}\n"
    )
}

/// A usage corpus in `dir`: Triton and CUDA files spread so that shards of
/// two files cut between a helper module and its users and between a macro
/// header and the files that use its macro; a binary file and a host file.
fn usage_corpus(env: &Env, dir: &str) {
    env.write(&format!("{dir}/pkg/op.py"), "import triton.language as tl\n\nexp2 = tl.math.exp2\n");
    for i in 0..9 {
        let text = triton_file(i, i % 3 != 0, i % 2 == 0, i % 4 != 1);
        env.write(&format!("{dir}/pkg/k{i}.py"), text);
    }
    env.write(&format!("{dir}/pkg/host.py"), "def host(x):\n    return x + 1\n");
    env.write(&format!("{dir}/pkg/blob.py"), b"triton\x00\x01\x02 not text".as_slice());
    env.write(
        &format!("{dir}/pkg/broken.py"),
        triton_file(20, true, true, true).replace("tl.store(o + offs, b_o)", "tl.store(o + offs, b_o"),
    );
    env.write(&format!("{dir}/csrc/macros.cuh"), "#pragma once\n#define DG_DEVICE __device__ __forceinline__\n");
    for i in 0..6 {
        env.write(&format!("{dir}/csrc/c{i}.cu"), cuda_file(i, i % 3 != 2, i % 2 == 0));
    }
}

/// One commit: its message and the files it writes.
type Step = (String, Vec<(String, String)>);

/// Commits `steps` on top of the repository at `dir` (made if need be), each an hour after the last.
fn commit_all(dir: &Path, steps: &[Step]) {
    let repo = git2::Repository::open(dir).or_else(|_| git2::Repository::init(dir)).expect("repository");
    for (message, files) in steps {
        let mut index = repo.index().expect("index");
        for (rel, text) in files {
            let p = dir.join(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(&p, text).expect("write");
            index.add_path(Path::new(rel)).expect("add");
        }
        index.write().expect("write index");
        let tree = repo.find_tree(index.write_tree().expect("tree")).expect("find tree");
        let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
        let when = parent.as_ref().map_or(1_700_000_000, |p| p.time().seconds() + 3600);
        let sig = git2::Signature::new("kidiom test", "test@kidiom.invalid", &git2::Time::new(when, 0)).expect("sig");
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &parents).expect("commit");
    }
}

/// A history with recurring kernel edits: `tl.dot` made `ieee` in four
/// commits, `tl.exp` made `tl.exp2` in three, a one-off change, a test file.
fn history_steps() -> Vec<Step> {
    let k = |name: &str, dot: &str, exp: &str| {
        format!(
            "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef {name}(q, k, o, T: tl.constexpr):\n    b_q = tl.load(q)\n    b_k = tl.load(k)\n    b_s = {dot}\n    b_o = {exp}(b_q)\n    tl.store(o, b_s + b_o)\n"
        )
    };
    let (plain, ieee) = ("tl.dot(b_q, b_k)", "tl.dot(b_q, b_k, input_precision=\"ieee\")");
    let names = ["a", "b", "c", "d", "e", "f"];
    let mut steps: Vec<Step> = vec![(
        "initial kernels".into(),
        names.iter().map(|n| (format!("ops/{n}.py"), k(&format!("k{n}"), plain, "tl.exp"))).collect(),
    )];
    for n in ["a", "b", "c", "d"] {
        steps.push((
            format!("precision: ieee dot in {n}"),
            vec![(format!("ops/{n}.py"), k(&format!("k{n}"), ieee, "tl.exp"))],
        ));
    }
    for n in ["a", "b", "e"] {
        let dot = if n == "e" { plain } else { ieee };
        steps.push((format!("[Perf] exp2 in {n}"), vec![(format!("ops/{n}.py"), k(&format!("k{n}"), dot, "tl.exp2"))]));
    }
    steps.push((
        "one-off".into(),
        vec![("ops/f.py".into(), k("kf", plain, "tl.exp").replace("tl.store(o,", "tl.store(o + 1,"))],
    ));
    steps.push(("tests".into(), vec![("tests/test_a.py".into(), "def test_a():\n    assert True\n".into())]));
    steps
}

/// `kidiom ARGS` in `env` with the harness's Python (the fleet driver's) and `vars`.
fn kidiom(env: &Env, py: &Path, args: &[&str], vars: &[(&str, &str)]) -> std::process::Output {
    let mut c = env.cmd();
    c.args(args).env("KIDIOM_PYTHON", py);
    for (k, v) in vars {
        c.env(k, v);
    }
    c.output().expect("spawn kidiom")
}

fn json_ok(args: &[&str], out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "kidiom {args:?} failed ({:?}):\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("kidiom {args:?}: not JSON ({e})"))
}

/// A value without its timestamps (`*_at`), which differ between any two runs.
fn without_timestamps(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter().filter(|(k, _)| !k.ends_with("_at")).map(|(k, v)| (k, without_timestamps(v))).collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(without_timestamps).collect()),
        other => other,
    }
}

/// Everything a catalog holds that mining writes: every pattern (`catalog
/// list --json --all`), and per corpus its cached files (blob, fingerprint),
/// skips, facts and history edits.
fn catalog_state(env: &Env, py: &Path, db: &Path, corpora: &[&str]) -> (Value, String) {
    let db_s = db.to_str().expect("utf8");
    let args = ["catalog", "list", "--json", "--all", "--db", db_s];
    let list = without_timestamps(json_ok(&args, &kidiom(env, py, &args, &[])));
    let cat = kidiom_patterns::Catalog::open(db).expect("catalog");
    let mut cache = String::new();
    for c in corpora {
        let files: std::collections::BTreeMap<_, _> = cat.cached_files(c).expect("files").into_iter().collect();
        let mut skipped = cat.skipped_files(c).expect("skips");
        skipped.sort_by(|a, b| a.0.cmp(&b.0));
        let (edits, bad) = cat.history_commits(c).expect("history");
        let edits: std::collections::BTreeMap<_, _> = edits.into_iter().collect();
        cache.push_str(&format!("{c}: {files:#?}\n{skipped:#?}\n{bad} {edits:#?}\n"));
    }
    cache.push_str(&format!("{:#?}", cat.all_facts().expect("facts")));
    (list, cache)
}

fn patterns_of<'a>(list: &'a Value, kind: &str) -> Vec<&'a Value> {
    list.as_array().expect("a list").iter().filter(|p| p["kind"] == kind).collect()
}

#[test]
fn mining_through_ray_gives_the_local_catalog() {
    let Some(py) = ray_python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = Env::new();
    usage_corpus(&env, "up");
    let hist = env.path().join("hist");
    commit_all(&hist, &history_steps());
    let head = Head::start(&py, &repo());
    let (local, ray) = (env.path().join("local.sqlite"), env.path().join("ray.sqlite"));
    let (local_s, ray_s) = (local.to_str().expect("utf8"), ray.to_str().expect("utf8"));
    let (up, hist_s) = ("up", hist.to_str().expect("utf8"));
    // several shards each: two files, two commits
    let small = [("KIDIOM_SHARD_FILES", "2"), ("KIDIOM_SHARD_COMMITS", "2"), ("RAY_ADDRESS", head.address.as_str())];
    // `ray`: Ray's own choice, $RAY_ADDRESS (the head's GCS address; Ray Client's per-connection
    // server is slow to start on a busy two-core machine)
    let ray_args = ["--executor", "ray"];

    // usage: a directory and a git corpus (read from the object database)
    let args = ["mine", up, hist_s, "--json", "--db", local_s];
    let here = json_ok(&args, &kidiom(&env, &py, &args, &[]));
    let args = [&["mine", up, hist_s, "--json", "--db", ray_s][..], &ray_args].concat();
    let there = json_ok(&args, &kidiom(&env, &py, &args, &small));
    assert!(here["corpora"][0].get("shards").is_none(), "a local run sends nothing: {here:#}");
    let shards = &there["corpora"][0]["shards"];
    assert!(shards["shards"].as_u64().is_some_and(|n| n >= 5), "{there:#}");
    assert!(shards["nodes"][0].as_str().is_some_and(|n| n.contains("127.0.0.1")), "{shards:#}");
    for (a, b) in here["corpora"].as_array().expect("corpora").iter().zip(there["corpora"].as_array().expect("corpora"))
    {
        for k in ["files", "parsed", "no_kernels", "skipped", "kernels", "with_parse_errors", "call_aliases"] {
            assert_eq!(a[k], b[k], "{k} of {}", a["name"]);
        }
    }
    assert_eq!(here["corpora"][0]["skipped"]["binary"], 1, "{here:#}");
    assert_eq!(
        here["corpora"][0]["call_aliases"]["exp2 -> tl.exp2"], 8,
        "the helper module's users, in other shards: {here:#}"
    );

    // history: commit ranges on the cluster, generalized here
    let args = ["mine", "--history", hist_s, "--json", "--db", local_s];
    let here = json_ok(&args, &kidiom(&env, &py, &args, &[]));
    let args = [&["mine", "--history", hist_s, "--json", "--db", ray_s][..], &ray_args].concat();
    let there = json_ok(&args, &kidiom(&env, &py, &args, &small));
    assert_eq!(there["corpora"][0]["shards"]["shards"], 5, "10 commits, 2 a shard: {there:#}");
    for k in ["commits", "mined", "edits", "files", "skipped", "dropped"] {
        assert_eq!(here["corpora"][0][k], there["corpora"][0][k], "{k}");
    }
    let counts = |v: &Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.retain(|k, _| !k.ends_with("_seconds"));
        }
        v
    };
    assert_eq!(counts(&here["stats"]), counts(&there["stats"]), "the generalizer saw the same edits");

    let (list, cache) = catalog_state(&env, &py, &local, &["up", "hist"]);
    let (ray_list, ray_cache) = catalog_state(&env, &py, &ray, &["up", "hist"]);
    // what the comparison compares: usage idioms of both corpora and the recurring edits
    let usage = patterns_of(&list, "usage");
    let edits = patterns_of(&list, "edit");
    for id in [
        "py-keyword-tl-dot-input-precision",
        "py-keyword-tl-load-eviction-policy",
        "cu-qualifier-cuda-global-launch-bounds",
        "cu-pragma-loop-unroll",
    ] {
        assert!(usage.iter().any(|p| p["id"].as_str().is_some_and(|i| i.starts_with(id))), "no {id} in {usage:#?}");
    }
    assert!(edits.iter().any(|p| p["after"] == "tl.dot(b_q, b_k, input_precision=\"ieee\")"), "{edits:#?}");
    assert!(edits.iter().any(|p| p["after"] == "tl.exp2(b_q)"), "{edits:#?}");
    assert_eq!(ray_list, list, "the catalog through Ray is the local one, pattern for pattern");
    assert_eq!(ray_cache, cache, "and file for file, fact for fact, edit for edit");

    // nothing changed: a rerun through Ray sends nothing and changes nothing
    let args = [&["mine", up, hist_s, "--json", "--db", ray_s][..], &ray_args].concat();
    let again = json_ok(&args, &kidiom(&env, &py, &args, &small));
    assert_eq!(again["corpora"][0]["shards"]["shards"], 0, "{again:#}");
    assert_eq!(catalog_state(&env, &py, &ray, &["up", "hist"]), (list, cache));
    drop(head);
}

/// A catalog mined through Ray from a usage corpus and a history, then new
/// files and commits (the first new commit's summary ends "(crash here)"):
/// the env, the Ray head, the catalog's path and the history's, and the
/// catalog's state before the new work.
fn shard_setup(py: &Path) -> (Env, Head, PathBuf, PathBuf, (Value, String)) {
    let env = Env::new();
    usage_corpus(&env, "up");
    let hist = env.path().join("hist");
    let mut steps = history_steps();
    let late = steps.split_off(6);
    commit_all(&hist, &steps);
    let head = Head::start(py, &repo());
    let db = env.path().join("ray.sqlite");
    let (db_s, hist_s) = (db.to_str().expect("utf8"), hist.to_str().expect("utf8"));
    let vars = shard_vars(&head);
    let small: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    for args in [&["mine", "up", "--json", "--db", db_s][..], &["mine", "--history", hist_s, "--json", "--db", db_s]] {
        let args = [args, &RAY_ARGS].concat();
        json_ok(&args, &kidiom(&env, py, &args, &small));
    }
    let before = catalog_state(&env, py, &db, &["up", "hist"]);
    assert!(!patterns_of(&before.0, "edit").is_empty(), "{:#}", before.0);

    // fresh work for the cluster: changed and new files, new commits
    env.write("up/pkg/k3.py", triton_file(3, true, true, true));
    env.write("up/pkg/k9.py", triton_file(9, true, false, true));
    let mut late = late;
    if let Some(first) = late.first_mut() {
        first.0 = format!("{} (crash here)", first.0);
    }
    commit_all(&hist, &late);
    (env, head, db, hist, before)
}

/// `ray`: Ray's own choice, $RAY_ADDRESS (the head's GCS address; Ray Client's per-connection
/// server is slow to start on a busy two-core machine)
const RAY_ARGS: [&str; 2] = ["--executor", "ray"];

/// Shards of two files and two commits, on `head`.
fn shard_vars(head: &Head) -> [(&'static str, String); 3] {
    [("KIDIOM_SHARD_FILES", "2".into()), ("KIDIOM_SHARD_COMMITS", "2".into()), ("RAY_ADDRESS", head.address.clone())]
}

/// Without a crash the runs of `shard_setup`'s new work finish through Ray and give what a local
/// run gives from scratch.
fn finishes_as_locally(env: &Env, py: &Path, head: &Head, db: &Path, hist: &Path, before: &(Value, String)) {
    let (db_s, hist_s) = (db.to_str().expect("utf8"), hist.to_str().expect("utf8"));
    let vars = shard_vars(head);
    let small: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    for args in [&["mine", "up", "--json", "--db", db_s][..], &["mine", "--history", hist_s, "--json", "--db", db_s]] {
        let args = [args, &RAY_ARGS].concat();
        json_ok(&args, &kidiom(env, py, &args, &small));
    }
    let local = env.path().join("local.sqlite");
    let local_s = local.to_str().expect("utf8");
    for args in
        [&["mine", "up", "--json", "--db", local_s][..], &["mine", "--history", hist_s, "--json", "--db", local_s]]
    {
        json_ok(args, &kidiom(env, py, args, &[]));
    }
    let after = catalog_state(env, py, db, &["up", "hist"]);
    assert_ne!(after.0, before.0, "the new commits and files count");
    assert_eq!(after, catalog_state(env, py, &local, &["up", "hist"]));
}

#[test]
fn a_usage_shard_that_dies_fails_the_run_and_leaves_the_catalog_as_it_was() {
    let Some(py) = ray_python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let (env, head, db, hist, before) = shard_setup(&py);
    let db_s = db.to_str().expect("utf8");
    // a usage shard's kidiom dies (SIGABRT, the test seam): the run fails, naming it
    let args = [&["mine", "up", "--json", "--db", db_s][..], &RAY_ARGS].concat();
    let crash =
        [("KIDIOM_SHARD_FILES", "2"), ("RAY_ADDRESS", head.address.as_str()), ("KIDIOM_SHARD_CRASH", "pkg/k3.py")];
    let out = kidiom(&env, &py, &args, &crash);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let line = err.lines().find(|l| l.starts_with("kidiom: error:")).unwrap_or_else(|| panic!("no error line: {err}"));
    for part in ["mining corpus up: usage shard ", "k3.py", "failed on ", "127.0.0.1", "killed by signal 6"] {
        assert!(line.contains(part), "{part:?} not in {line}");
    }
    assert_eq!(catalog_state(&env, &py, &db, &["up", "hist"]), before, "one transaction: nothing written");
    // (that the same work then finishes is the history test's last step: one run of it is enough)
    drop((hist, head));
}

#[test]
fn a_history_shard_that_dies_fails_the_run_before_any_rule_changes() {
    let Some(py) = ray_python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let (env, head, db, hist, before) = shard_setup(&py);
    let (db_s, hist_s) = (db.to_str().expect("utf8"), hist.to_str().expect("utf8"));
    // a history shard dies: the run fails before any rule changes
    let args = [&["mine", "--history", hist_s, "--json", "--db", db_s][..], &RAY_ARGS].concat();
    let crash =
        [("KIDIOM_SHARD_COMMITS", "2"), ("RAY_ADDRESS", head.address.as_str()), ("KIDIOM_SHARD_CRASH", "(crash here)")];
    let out = kidiom(&env, &py, &args, &crash);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("mining the history of corpus hist: history shard ") && err.contains("killed by signal 6"),
        "{err}"
    );
    assert_eq!(catalog_state(&env, &py, &db, &["up", "hist"]).0, before.0, "the patterns are as they were");
    // without the crash the same runs (usage and history) finish, as a local run does from scratch
    finishes_as_locally(&env, &py, &head, &db, &hist, &before);
    drop(head);
}
