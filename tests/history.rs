//! `kidiom mine --history`: planted recurring edits are found, one-off noise
//! and unsafe generalizations are not, bad input is skipped with reasons,
//! and re-runs and interrupted runs resume from the cache.

use std::path::Path;

use crate::util::Env;

/// Builds a git history in `dir`: each step writes (or deletes, with
/// `None`) files and commits with a message. Returns the commit ids.
/// One commit: its message and the files it writes (`None` deletes).
type Step<'a> = (&'a str, Vec<(&'a str, Option<Vec<u8>>)>);

fn history(dir: &Path, steps: &[Step<'_>]) -> Vec<git2::Oid> {
    let repo = git2::Repository::init(dir).expect("init");
    let sig =
        git2::Signature::new("kidiom test", "test@kidiom.invalid", &git2::Time::new(1_700_000_000, 0)).expect("sig");
    let mut out = Vec::new();
    for (i, (message, files)) in steps.iter().enumerate() {
        let mut index = repo.index().expect("index");
        for (rel, content) in files {
            let p = dir.join(rel);
            match content {
                Some(bytes) => {
                    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
                    std::fs::write(&p, bytes).expect("write");
                    index.add_path(Path::new(rel)).expect("add");
                }
                None => {
                    let _ = std::fs::remove_file(&p);
                    index.remove_path(Path::new(rel)).expect("remove");
                }
            }
        }
        index.write().expect("write index");
        let tree = repo.find_tree(index.write_tree().expect("tree")).expect("find tree");
        let parents: Vec<git2::Commit<'_>> =
            out.last().map(|id| repo.find_commit(*id).expect("parent")).into_iter().collect();
        let parent_refs: Vec<&git2::Commit<'_>> = parents.iter().collect();
        let sig = git2::Signature::new(
            "kidiom test",
            "test@kidiom.invalid",
            &git2::Time::new(1_700_000_000 + i as i64 * 3600, 0),
        )
        .unwrap_or_else(|_| sig.clone());
        let id = repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &parent_refs).expect("commit");
        out.push(id);
    }
    out
}

/// A Triton file with a kernel whose body is `body` (indented by the caller).
fn kernel(name: &str, body: &str) -> Vec<u8> {
    format!(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef {name}(q, k, o, T: tl.constexpr):\n{body}\n\n\ndef helper_{name}(x):\n    return x\n"
    )
    .into_bytes()
}

fn s(b: &str) -> Option<Vec<u8>> {
    Some(b.as_bytes().to_vec())
}

fn edit_patterns(env: &Env) -> Vec<serde_json::Value> {
    let v = env.json(&["catalog", "list", "--kind", "edit", "--json", "--db", env.db().to_str().expect("utf8")]);
    v.as_array().cloned().unwrap_or_default()
}

fn mine(env: &Env, repo: &Path, extra: &[&str]) -> serde_json::Value {
    let db = env.db();
    let mut args =
        vec!["mine", "--history", repo.to_str().expect("utf8"), "--json", "--db", db.to_str().expect("utf8")];
    args.extend_from_slice(extra);
    env.json(&args)
}

#[test]
fn recurring_edits_are_found_and_noise_is_not() {
    let env = Env::new();
    let repo = env.path().join("repo");
    let a0 = "    b_a = tl.load(q)\n    b_o = tl.exp(b_a)\n    tl.store(o, b_o)";
    let b0 = "    b_b = tl.load(k)\n    b_o = tl.exp(b_b * 2.0)\n    tl.store(o, b_o)";
    let c0 = "    b_q = tl.load(q)\n    b_o = tl.exp(b_q - 1.0)\n    tl.store(o, b_o)";
    let d0 = "    b_q = tl.load(q)\n    b_k = tl.load(k)\n    b_s = tl.dot(b_q, b_k)\n    tl.store(o, b_s)";
    let e0 = "    b_v = tl.load(k)\n    b_s = tl.dot(b_v, b_v)\n    tl.store(o, b_s)";
    history(
        &repo,
        &[
            (
                "initial kernels",
                vec![
                    ("a.py", Some(kernel("ka", a0))),
                    ("b.py", Some(kernel("kb", b0))),
                    ("c.py", Some(kernel("kc", c0))),
                    ("d.py", Some(kernel("kd", d0))),
                    ("e.py", Some(kernel("ke", e0))),
                ],
            ),
            ("[Perf] exp2 in ka", vec![("a.py", Some(kernel("ka", &a0.replace("tl.exp(", "tl.exp2("))))]),
            ("use exp2 in kb for speed", vec![("b.py", Some(kernel("kb", &b0.replace("tl.exp(", "tl.exp2("))))]),
            ("kc: exp2", vec![("c.py", Some(kernel("kc", &c0.replace("tl.exp(", "tl.exp2("))))]),
            // One-off noise: a rename made once.
            (
                "rename helper",
                vec![(
                    "a.py",
                    Some(kernel("ka", &a0.replace("tl.exp(", "tl.exp2(").replace("tl.store(o", "tl.store(o + 1"))),
                )],
            ),
            (
                "fix precision of dot",
                vec![(
                    "d.py",
                    Some(kernel("kd", &d0.replace("tl.dot(b_q, b_k)", "tl.dot(b_q, b_k, input_precision=\"ieee\")"))),
                )],
            ),
            (
                "precision: ieee dot in ke",
                vec![(
                    "e.py",
                    Some(kernel("ke", &e0.replace("tl.dot(b_v, b_v)", "tl.dot(b_v, b_v, input_precision=\"ieee\")"))),
                )],
            ),
        ],
    );
    let report = mine(&env, &repo, &[]);
    assert_eq!(report["corpora"][0]["commits"], 7, "{report:#}");
    let pats = edit_patterns(&env);
    let exp = pats
        .iter()
        .find(|p| p["before"] == "tl.exp($A)" && p["after"] == "tl.exp2($A)")
        .unwrap_or_else(|| panic!("no exp -> exp2 rule in {pats:#?}"));
    assert_eq!(exp["kind"], "edit");
    assert_eq!(exp["commits"].as_array().map(Vec::len), Some(3));
    assert_eq!(exp["commits"][0]["summary"], "[Perf] exp2 in ka", "oldest first");
    assert!(exp["commits"][0]["date"].as_str().is_some_and(|d| d.starts_with("2023-11-14T")));
    assert_eq!(exp["support"][0]["occurrences"], 3);
    assert_eq!(exp["support"][0]["files"], 3);
    assert_eq!(exp["category"], "math");
    let values: Vec<&str> = exp["values"].as_array().unwrap().iter().filter_map(|v| v["value"].as_str()).collect();
    assert!(values.contains(&"b_b * 2.0"), "{values:?}");

    let dot = pats
        .iter()
        .find(|p| {
            p["after"] == "tl.dot($A, $B, input_precision=\"ieee\")"
                || p["after"] == "tl.dot($A, $A, input_precision=\"ieee\")"
        })
        .unwrap_or_else(|| panic!("no dot precision rule in {pats:#?}"));
    assert_eq!(dot["category"], "precision");
    assert_eq!(dot["commits"].as_array().map(Vec::len), Some(2));

    // The one-off edit recurs in no other commit: no rule.
    assert!(!pats.iter().any(|p| p["after"].as_str().is_some_and(|a| a.contains("o + 1"))), "{pats:#?}");
}

#[test]
fn unsafe_generalizations_are_rejected_or_specialized() {
    let env = Env::new();
    let repo = env.path().join("repo");
    // Each commit turns one `scale(...)` into `fast_scale(...)` and leaves
    // two other calls alone: `scale($A) -> fast_scale($A)` would make edits
    // the authors did not. Two commits agree on `b_x`: that specialization is safe.
    let body = |a: &str, b: &str| format!("    y = {a}(b_x)\n    z = {b}(b_y)\n    w = scale(b_w)\n    v = scale(b_v)");
    let body2 = |a: &str| format!("    y = {a}(b_r)\n    z = scale(b_y)\n    w = scale(b_w)");
    history(
        &repo,
        &[
            (
                "init",
                vec![
                    ("a.py", Some(kernel("ka", &body("scale", "scale")))),
                    ("b.py", Some(kernel("kb", &body("scale", "scale")))),
                    ("c.py", Some(kernel("kc", &body2("scale")))),
                ],
            ),
            ("a", vec![("a.py", Some(kernel("ka", &body("fast_scale", "scale"))))]),
            ("b", vec![("b.py", Some(kernel("kb", &body("fast_scale", "scale"))))]),
            ("c", vec![("c.py", Some(kernel("kc", &body2("fast_scale"))))]),
        ],
    );
    mine(&env, &repo, &[]);
    let pats = edit_patterns(&env);
    let fast: Vec<&serde_json::Value> =
        pats.iter().filter(|p| p["after"].as_str().is_some_and(|a| a.contains("fast_scale"))).collect();
    assert!(!fast.iter().any(|p| p["before"] == "scale($A)"), "unsafe rule kept: {fast:#?}");
    let spec = fast.iter().find(|p| p["before"] == "scale(b_x)").unwrap_or_else(|| panic!("{pats:#?}"));
    assert_eq!(spec["after"], "fast_scale(b_x)");
    assert_eq!(spec["commits"].as_array().map(Vec::len), Some(2));
    assert!(spec["rationale"].as_str().is_some_and(|r| r.contains("specialized")), "{spec:#}");
}

#[test]
fn bad_input_is_skipped_with_reasons() {
    let env = Env::new();
    let repo = env.path().join("repo");
    let base = "    b_o = tl.exp(q)";
    let mut big: Vec<(String, Option<Vec<u8>>)> =
        (0..401).map(|i| (format!("many/m{i}.py"), s(&format!("x = {}\n", i + 1)))).collect();
    // A kernel file (host-only files are passed over before any diff).
    let huge_before: String =
        std::iter::once("import triton\n".to_string()).chain((0..2500).map(|i| format!("v{i} = {i}\n"))).collect();
    let huge_after: String = std::iter::once("import triton\n".to_string())
        .chain((0..2500).map(|i| format!("v{i} = {}\n", i + 1)))
        .collect();
    let first: Vec<(&str, Option<Vec<u8>>)> = vec![
        ("k.py", Some(kernel("k", base))),
        ("gone.py", Some(kernel("g", base))),
        ("moved.py", Some(kernel("m", base))),
        ("bin.py", Some(b"x = 1\n".to_vec())),
        ("huge.py", s(&huge_before)),
        ("broken.py", s("def f(:\n    return tl.exp(x)\n")),
    ];
    let mut first = first;
    let mut small: Vec<(String, Option<Vec<u8>>)> =
        (0..401).map(|i| (format!("many/m{i}.py"), s(&format!("x = {i}\n")))).collect();
    first.extend(small.iter_mut().map(|(p, c)| (p.as_str(), c.take())));
    let mut many: Vec<(&str, Option<Vec<u8>>)> = big.iter_mut().map(|(p, c)| (p.as_str(), c.take())).collect();
    many.push(("k.py", Some(kernel("k", &base.replace("exp(", "exp2(")))));
    history(
        &repo,
        &[
            ("init", first),
            (
                "assorted",
                vec![
                    ("gone.py", None),
                    ("moved.py", None),
                    ("moved2.py", Some(kernel("m", base))),
                    ("bin.py", Some(b"\x00\x01binary\x00".to_vec())),
                    ("huge.py", s(&huge_after)),
                    ("broken.py", s("def f(:\n    return tl.exp2(x)\n")),
                ],
            ),
            ("enormous", many),
        ],
    );
    let report = mine(&env, &repo, &[]);
    let c = &report["corpora"][0];
    let skipped = c["skipped"].as_object().expect("skipped");
    for reason in ["deleted", "added", "binary", "huge-diff", "enormous-commit", "root-commit"] {
        assert!(skipped.contains_key(reason), "no {reason} in {c:#}");
    }
    assert!(c["error"].is_null());
}

#[test]
fn a_directory_corpus_gets_a_clear_message() {
    let env = Env::new();
    env.write("plain/k.py", "x = 1\n");
    let out = env.run(&["mine", "--history", "plain", "--db", env.db().to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("history mining needs a git corpus"), "{err}");
}

#[test]
fn reruns_mine_only_new_commits_and_interrupted_runs_resume() {
    let env = Env::new();
    let repo = env.path().join("repo");
    let mut steps = vec![("init", vec![("k.py", Some(kernel("k", "    b = tl.exp(q)\n    c = tl.exp(k)")))])];
    steps.push(("one", vec![("k.py", Some(kernel("k", "    b = tl.exp2(q)\n    c = tl.exp(k)")))]));
    steps.push(("two", vec![("k.py", Some(kernel("k", "    b = tl.exp2(q)\n    c = tl.exp2(k)")))]));
    steps.push(("three", vec![("l.py", Some(kernel("l", "    b = 1")))]));
    history(&repo, &steps);
    let db = env.db();
    let args = ["mine", "--history", repo.to_str().expect("utf8"), "--json", "--db", db.to_str().expect("utf8")];
    // Killed after two batches of one commit.
    let out = env
        .cmd()
        .args(args)
        .env("KIDIOM_HISTORY_BATCH", "1")
        .env("KIDIOM_HISTORY_ABORT_AFTER_BATCHES", "2")
        .output()
        .expect("spawn");
    assert_eq!(out.status.code(), None, "killed, not exited: {}", String::from_utf8_lossy(&out.stderr));
    let r = env.json(&args);
    assert_eq!((r["corpora"][0]["cached"].as_u64(), r["corpora"][0]["mined"].as_u64()), (Some(2), Some(2)), "{r:#}");
    let first = edit_patterns(&env);
    assert!(first.iter().any(|p| p["before"] == "tl.exp($A)"), "{first:#?}");
    // Nothing new: everything cached, same patterns.
    let r = env.json(&args);
    assert_eq!((r["corpora"][0]["cached"].as_u64(), r["corpora"][0]["mined"].as_u64()), (Some(4), Some(0)));
    assert_eq!(edit_patterns(&env), first);
    // One new commit: only it is mined.
    let repo2 = git2::Repository::open(&repo).expect("open");
    std::fs::write(repo.join("m.py"), kernel("m", "    b = 2")).expect("write");
    let mut index = repo2.index().expect("index");
    index.add_path(Path::new("m.py")).expect("add");
    index.write().expect("write");
    let tree = repo2.find_tree(index.write_tree().expect("tree")).expect("tree");
    let head = repo2.head().expect("head").peel_to_commit().expect("commit");
    let sig = git2::Signature::now("t", "t@kidiom.invalid").expect("sig");
    repo2.commit(Some("HEAD"), &sig, &sig, "four", &tree, &[&head]).expect("commit");
    let r = env.json(&args);
    assert_eq!((r["corpora"][0]["cached"].as_u64(), r["corpora"][0]["mined"].as_u64()), (Some(4), Some(1)));
    // --max-commits limits the walk to the newest commits.
    let r = mine(&env, &repo, &["--max-commits", "2"]);
    assert_eq!(r["corpora"][0]["commits"], 2);
}

#[test]
fn an_added_keyword_with_differing_values_is_one_rule_with_a_histogram() {
    let env = Env::new();
    let repo = env.path().join("repo");
    let a0 = "    b_q = tl.load(q)\n    b_s = tl.dot(b_q, b_q)\n    tl.store(o, b_s)";
    let b0 = "    b_k = tl.load(k)\n    b_s = tl.dot(b_k, b_k * 2.0)\n    tl.store(o, b_s)";
    let c0 = "    b_v = tl.load(k)\n    b_s = tl.dot(b_v - 1.0, b_v)\n    tl.store(o, b_s)";
    let add = |body: &str, v: &str| body.replace(")\n    tl.store", &format!(", input_precision={v})\n    tl.store"));
    history(
        &repo,
        &[
            (
                "init",
                vec![
                    ("a.py", Some(kernel("ka", a0))),
                    ("b.py", Some(kernel("kb", b0))),
                    ("c.py", Some(kernel("kc", c0))),
                ],
            ),
            ("ieee dot in ka", vec![("a.py", Some(kernel("ka", &add(a0, "\"ieee\""))))]),
            ("tf32 dot in kb", vec![("b.py", Some(kernel("kb", &add(b0, "\"tf32\""))))]),
            ("configurable precision in kc", vec![("c.py", Some(kernel("kc", &add(c0, "DOT_PRECISION"))))]),
        ],
    );
    mine(&env, &repo, &[]);
    let pats = edit_patterns(&env);
    let dots: Vec<&serde_json::Value> =
        pats.iter().filter(|p| p["after"].as_str().is_some_and(|a| a.contains("input_precision="))).collect();
    assert_eq!(dots.len(), 1, "value variants are one rule: {dots:#?}");
    let dot = dots[0];
    assert_eq!(dot["before"], "tl.dot($A, $B)", "{dot:#}");
    let after = dot["after"].as_str().unwrap_or("");
    assert!(after.starts_with("tl.dot($A, $B, input_precision=$"), "{after}");
    assert_eq!(dot["commits"].as_array().map(Vec::len), Some(3));
    let values: Vec<&str> = dot["values"].as_array().unwrap().iter().filter_map(|v| v["value"].as_str()).collect();
    for v in ["\"ieee\"", "\"tf32\"", "DOT_PRECISION"] {
        assert!(values.contains(&v), "{v} not in {values:?}");
    }
    assert_eq!(dot["category"], "precision");
}

#[test]
fn a_partial_promotion_is_mined_at_the_enclosing_statement() {
    let env = Env::new();
    let repo = env.path().join("repo");
    // Each commit promotes the program id assigned to `i_n` and leaves the
    // ones in `i_h` and `i_k` alone: `tl.program_id(0) -> ...to(tl.int64)`
    // would make edits the authors did not; one level up, the assignment
    // to `i_n` is the rule.
    let body = |n: &str, h: &str, x: &str| {
        format!(
            "    i_n = tl.program_id({n})\n    i_h = tl.program_id({h}) % H\n    i_k = tl.program_id({h}) // H\n    b = tl.load({x} + i_n * T + i_h + i_k)\n    tl.store(o, b)"
        )
    };
    let promote = |s: &str| s.replace("i_n = tl.program_id(0)", "i_n = tl.program_id(0).to(tl.int64)");
    let (a0, b0, c0) = (body("0", "0", "q"), body("0", "0", "k"), body("0", "0", "o"));
    history(
        &repo,
        &[
            (
                "init",
                vec![
                    ("a.py", Some(kernel("ka", &a0))),
                    ("b.py", Some(kernel("kb", &b0))),
                    ("c.py", Some(kernel("kc", &c0))),
                ],
            ),
            ("[Fix] int64 offsets in ka", vec![("a.py", Some(kernel("ka", &promote(&a0))))]),
            ("[Fix] avoid overflow in kb", vec![("b.py", Some(kernel("kb", &promote(&b0))))]),
            ("int64 in kc", vec![("c.py", Some(kernel("kc", &promote(&c0))))]),
        ],
    );
    let report = mine(&env, &repo, &[]);
    assert!(report["stats"]["lifted"].as_u64().is_some_and(|n| n >= 1), "{report:#}");
    let pats = edit_patterns(&env);
    assert!(
        !pats.iter().any(|p| p["before"] == "tl.program_id($A)" || p["before"] == "tl.program_id(0)"),
        "the call-level rule is unsafe: {pats:#?}"
    );
    let lifted = pats
        .iter()
        .find(|p| p["before"] == "i_n = tl.program_id(0)")
        .unwrap_or_else(|| panic!("no statement-level rule in {pats:#?}"));
    assert_eq!(lifted["after"], "i_n = tl.program_id(0).to(tl.int64)");
    assert_eq!(lifted["commits"].as_array().map(Vec::len), Some(3));
    assert!(
        lifted["rationale"].as_str().is_some_and(|r| r.contains("lifted") && r.contains("and 0 they did not")),
        "{lifted:#}"
    );
    assert_eq!(lifted["category"], "addressing");
}

#[test]
fn a_history_run_keeps_the_edit_rules_of_other_corpora() {
    let env = Env::new();
    let steps = |name: &str| {
        let k0 = "    b = tl.exp(q)\n    c = tl.load(k)";
        vec![
            (
                "init",
                vec![("a.py", Some(kernel(&format!("{name}a"), k0))), ("b.py", Some(kernel(&format!("{name}b"), k0)))],
            ),
            ("exp2 a", vec![("a.py", Some(kernel(&format!("{name}a"), &k0.replace("exp(", "exp2("))))]),
            ("exp2 b", vec![("b.py", Some(kernel(&format!("{name}b"), &k0.replace("exp(", "exp2("))))]),
        ]
    };
    let one = env.path().join("one");
    let two = env.path().join("two");
    history(&one, &steps("x"));
    history(&two, &steps("y"));
    mine(&env, &one, &[]);
    let first = edit_patterns(&env);
    assert!(first.iter().any(|p| p["support"][0]["corpus"] == "one"), "{first:#?}");
    mine(&env, &two, &[]);
    let after = edit_patterns(&env);
    // the same rule from both corpora is one pattern with the support of each (catalog merge)
    let corpora: Vec<&str> = after
        .iter()
        .flat_map(|p| p["support"].as_array().into_iter().flatten())
        .filter_map(|s| s["corpus"].as_str())
        .collect();
    assert!(corpora.contains(&"one") && corpora.contains(&"two"), "{after:#?}");
}

#[test]
fn nested_calls_that_gain_a_keyword_are_cut_one_by_one() {
    let env = Env::new();
    let repo = env.path().join("repo");
    let a0 = "    b_q = tl.load(q)\n    b_s = tl.dot(tl.dot(b_q, b_q), b_q)\n    tl.store(o, b_s)";
    let a1 = "    b_q = tl.load(q)\n    b_s = tl.dot(tl.dot(b_q, b_q, input_precision=\"ieee\"), b_q, input_precision=\"ieee\")\n    tl.store(o, b_s)";
    let b0 = "    b_k = tl.load(k)\n    b_s = tl.dot(tl.dot(b_k, b_k * 2.0), b_k)\n    tl.store(o, b_s)";
    let b1 = "    b_k = tl.load(k)\n    b_s = tl.dot(tl.dot(b_k, b_k * 2.0, input_precision=\"ieee\"), b_k, input_precision=\"ieee\")\n    tl.store(o, b_s)";
    let c0 = "    b_v = tl.load(k)\n    b_s = tl.dot(b_v - 1.0, b_v)\n    tl.store(o, b_s)";
    let c1 = "    b_v = tl.load(k)\n    b_s = tl.dot(b_v - 1.0, b_v, input_precision=\"ieee\")\n    tl.store(o, b_s)";
    let ids = history(
        &repo,
        &[
            (
                "init",
                vec![
                    ("a.py", Some(kernel("ka", a0))),
                    ("b.py", Some(kernel("kb", b0))),
                    ("c.py", Some(kernel("kc", c0))),
                ],
            ),
            ("ieee dots in ka", vec![("a.py", Some(kernel("ka", a1)))]),
            ("ieee dots in kb", vec![("b.py", Some(kernel("kb", b1)))]),
            ("ieee dot in kc", vec![("c.py", Some(kernel("kc", c1)))]),
        ],
    );
    mine(&env, &repo, &[]);
    let pats = edit_patterns(&env);
    // The nested form recurs too and may be a rule of its own; the single
    // call is one rule, trained on every commit.
    let dots: Vec<&serde_json::Value> = pats
        .iter()
        .filter(|p| p["after"].as_str().is_some_and(|a| a.contains("input_precision=\"ieee\"")))
        .filter(|p| p["before"] == "tl.dot($A, $B)")
        .collect();
    assert_eq!(dots.len(), 1, "one rule for the single call: {pats:#?}");
    let dot = dots[0];
    assert_eq!(dot["before"], "tl.dot($A, $B)", "{dot:#}");
    assert_eq!(dot["after"], "tl.dot($A, $B, input_precision=\"ieee\")", "{dot:#}");
    let commits = dot["commits"].to_string();
    for id in &ids[1..] {
        assert!(commits.contains(&id.to_string()[..10]), "{id} not in {commits}");
    }
    // Both calls of each nested site are edits the commits made; no false
    // or missed edit.
    let why = dot["rationale"].as_str().unwrap_or("");
    assert!(why.contains("makes 5 of the commits' edits and 0 they did not make"), "{why}");
    assert!(why.contains("0 edits of the same shape there are not covered"), "{why}");
}

/// A kernel file: a Triton kernel whose body is `body`, and a host
/// function that launches it with `launch` and returns `ret`.
fn kernel_and_host(body: &str, launch: &str, ret: &str) -> Vec<u8> {
    format!(
        "from typing import Optional\nimport triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(q, o, T: tl.constexpr):\n{body}\n\n\ndef host(q, o, T):\n    grid = (triton.cdiv(T, 64),)\n    {launch}\n    return {ret}\n"
    )
    .into_bytes()
}

#[test]
fn only_kernels_and_launches_are_mined_never_tests_or_host_code() {
    let env = Env::new();
    let repo = env.path().join("repo");
    let body = |f: &str, x: &str| format!("    b = tl.load(q)\n    tl.store(o, tl.{f}(b * {x}))");
    let launch = |w: u32| format!("k[grid](q, o, T, num_warps={w})");
    // Each commit makes the same three changes in a kernel file (exp2 in
    // the kernel, more warps at the launch, one more return value in the
    // host function) and the same two in a test file (exp2, a parameter).
    let file = |f: &str, x: &str, w: u32, ret: &str| kernel_and_host(&body(f, x), &launch(w), ret);
    let test = |f: &str, x: &str, ps: &str| {
        let kernel = String::from_utf8(kernel_and_host(&body(f, x), &launch(4), "o")).unwrap_or_default();
        format!(
            "import pytest\n{kernel}\n\n@pytest.mark.parametrize(\"T\", [{ps}])\ndef test_k(T):\n    host(None, None, T)\n"
        )
    };
    let mut init = Vec::new();
    for (p, x) in [("a.py", "1"), ("b.py", "2"), ("c.py", "3")] {
        init.push((p, Some(file("exp", x, 4, "o, None"))));
    }
    for (p, x) in [("tests/ops/test_a.py", "1"), ("tests/ops/test_b.py", "2"), ("benchmarks/bench_c.py", "3")] {
        init.push((p, s(&test("exp", x, "64"))));
    }
    let change = |kp: &'static str, tp: &'static str, x: &str| {
        vec![(kp, Some(file("exp2", x, 8, "o, None, None"))), (tp, s(&test("exp2", x, "64, 128")))]
    };
    history(
        &repo,
        &[
            ("init", init),
            ("[Perf] exp2 and more warps in a", change("a.py", "tests/ops/test_a.py", "1")),
            ("exp2 and more warps in b", change("b.py", "tests/ops/test_b.py", "2")),
            ("exp2 and more warps in c", change("c.py", "benchmarks/bench_c.py", "3")),
        ],
    );
    let report = mine(&env, &repo, &[]);
    let c = &report["corpora"][0];
    assert_eq!(c["skipped"]["test-file"], 3, "{c:#}");
    assert!(c["dropped"]["outside-kernel"].as_u64().is_some_and(|n| n >= 3), "the host returns: {c:#}");
    let pats = edit_patterns(&env);
    // The kernel edit and the launch edit are rules, trained on the kernel files only.
    let exp = pats
        .iter()
        .find(|p| p["before"] == "tl.exp(b * $A)" && p["after"] == "tl.exp2(b * $A)")
        .unwrap_or_else(|| panic!("no exp -> exp2 rule in {pats:#?}"));
    assert_eq!(exp["support"][0]["occurrences"], 3, "{exp:#}");
    assert_eq!(exp["support"][0]["files"], 3, "{exp:#}");
    let paths: Vec<&str> = exp["examples"].as_array().unwrap().iter().filter_map(|e| e["path"].as_str()).collect();
    assert!(paths.iter().all(|p| !p.contains("test") && !p.contains("bench")), "{paths:?}");
    assert!(
        pats.iter().any(|p| p["after"].as_str().is_some_and(|a| a.contains("num_warps=8"))),
        "no launch rule in {pats:#?}"
    );
    // Host plumbing and test parameters are not.
    for p in &pats {
        let text = format!("{} {}", p["before"], p["after"]);
        assert!(!text.contains("None") && !text.contains("pytest") && !text.contains("128"), "{p:#}");
    }
}

#[test]
fn a_file_version_is_parsed_once_however_many_commits_touch_it() {
    let env = Env::new();
    let repo = env.path().join("repo");
    // Five commits change one kernel in turn: five file pairs, ten file
    // versions, six distinct versions.
    let version = |n: usize| kernel("k", &format!("    b = tl.load(q)\n    c = b * {n}\n    tl.store(o, c)"));
    let steps: Vec<Step<'_>> =
        (0..6).map(|n| (if n == 0 { "init" } else { "change" }, vec![("k.py", Some(version(n)))])).collect();
    history(&repo, &steps);
    let report = mine(&env, &repo, &[]);
    let c = &report["corpora"][0];
    assert_eq!(c["files"], 5, "{c:#}");
    assert_eq!(c["file_versions"], 10, "{c:#}");
    assert_eq!(c["parsed_blobs"], 6, "each version once: {c:#}");
    let incremental = c["incremental_parses"].as_u64().unwrap_or(0);
    assert!((1..6).contains(&incremental), "the others re-parsed from a neighbour: {c:#}");
    assert_eq!(c["edits"], 5, "{c:#}");
}

/// Mines `repo` with the library, checking rules with the rewrite engine
/// (`checked`) or accepting every example: generalization as it was before
/// the applying matcher had a say.
fn generalize_with(repo: &Path, checked: bool) -> kidiom_miner::history::HistoryResult {
    use kidiom_miner::history::{self, BlobCache, CorpusHistory, HistoryConfig};
    let manifest = kidiom_miner::Manifest {
        name: "repo".into(),
        kind: kidiom_miner::SourceKind::Git,
        source: repo.to_str().expect("utf8").into(),
        revision: None,
        include: vec![],
        exclude: vec![],
        description: None,
        fallback: None,
    };
    let corpus = kidiom_miner::Corpus::open(manifest).expect("open");
    let cfg = HistoryConfig::default();
    let metas = history::commits(&corpus, &cfg).expect("commits");
    let blobs = BlobCache::default();
    let mined = history::mine_commits(&corpus, &metas, &cfg, &blobs, &|| {}).expect("mine");
    let corpora = [CorpusHistory { corpus: &corpus, commits: &mined }];
    if checked {
        history::generalize(&corpora, &cfg, &blobs)
    } else {
        history::generalize_unchecked(&corpora, &cfg, &blobs)
    }
}

/// A [`Step`] whose paths are owned.
type OwnedStep<'a> = (&'a str, Vec<(String, Option<Vec<u8>>)>);

/// [`history`] of steps with owned paths.
fn owned_history(repo: &Path, steps: &[OwnedStep<'_>]) {
    let borrowed: Vec<Step<'_>> =
        steps.iter().map(|(m, fs)| (*m, fs.iter().map(|(p, c)| (p.as_str(), c.clone())).collect())).collect();
    history(repo, &borrowed);
}

/// Three kernels; each commit moves `other=` after `mask=` in one of them
/// (the miner's matcher is positional, the applying one reads keyword
/// arguments in any order), and each turns one `tl.exp` into `tl.exp2`.
fn reorder_history(repo: &Path) {
    let body =
        |exp: &str, args: &str| format!("    b_a = tl.load(q, {args})\n    b_o = {exp}(b_a)\n    tl.store(o, b_o)");
    let (old, new) = ("other=0.0, mask=T > 0", "mask=T > 0, other=0.0");
    let files = |k: &str, exp: &str, args: &str| (format!("{k}.py"), Some(kernel(k, &body(exp, args))));
    let step = |k: &str| -> Vec<(String, Option<Vec<u8>>)> { vec![files(k, "tl.exp2", new)] };
    let init: Vec<(String, Option<Vec<u8>>)> = ["ka", "kb", "kc"].iter().map(|k| files(k, "tl.exp", old)).collect();
    let steps: Vec<OwnedStep<'_>> = vec![("init", init), ("ka", step("ka")), ("kb", step("kb")), ("kc", step("kc"))];
    owned_history(repo, &steps);
}

#[test]
fn a_rule_the_applying_matcher_reads_otherwise_is_dropped_and_counted() {
    let env = Env::new();
    let repo = env.path().join("repo");
    reorder_history(&repo);
    let reorder = |r: &&kidiom_miner::history::Rule| r.before.contains("other=0.0, mask=");
    // The miner's own matcher validates the reordering on every example...
    let loose = generalize_with(&repo, false);
    let r = loose.rules.iter().find(reorder).unwrap_or_else(|| panic!("no reorder rule: {:#?}", loose.rules));
    assert_eq!(r.commits.len(), 3, "{r:#?}");
    assert_eq!(loose.stats.apply_check_failed, 0);
    // ...but `apply` finds every such site already reordered (keyword
    // arguments match in any order there), so it would never make the edit.
    let checked = generalize_with(&repo, true);
    assert!(!checked.rules.iter().any(|r| reorder(&r)), "{:#?}", checked.rules);
    assert!(checked.stats.apply_check_failed >= 3, "{:#?}", checked.stats);
    assert!(checked.stats.apply_check_failures.get("no-site").is_some_and(|n| *n >= 3), "{:#?}", checked.stats);
    assert!(checked.stats.apply_check_dropped >= 1, "{:#?}", checked.stats);
    // The exp2 rule comes through, proven on its examples.
    let exp = checked.rules.iter().find(|r| r.after.contains("tl.exp2(")).unwrap_or_else(|| panic!("{checked:#?}"));
    assert_eq!(exp.commits.len(), 3);
    assert!(checked.stats.apply_checked > checked.stats.apply_check_failed);
}

/// Six edit families made by hand in each of three kernels, one kernel per
/// commit, and the keyword reordering above (which `apply` cannot make).
/// Some name a different tensor in each kernel, so their rules have holes.
fn families_history(repo: &Path) {
    let body = |name: &str, v: usize| {
        let w = format!("b_{name}");
        let prec = if v == 3 { "\"tf32\"" } else { "\"ieee\"" };
        let [exp, dot, sum, acc, ar, load, zeros] = if v == 0 {
            [
                "tl.exp(b_a)".to_string(),
                format!("tl.dot(b_a, {w})"),
                "tl.sum(b_a,  # rows\n        axis=0)".to_string(),
                format!("b_o += tl.dot(b_a, tl.trans({w}))"),
                "tl.arange(0, BT)".to_string(),
                "tl.load(q, other=0.0, mask=T > 0)".to_string(),
                "h = tl.zeros([BT], dtype=tl.float32)".to_string(),
            ]
        } else {
            [
                "tl.exp2(b_a)".to_string(),
                format!("tl.dot(b_a, {w}, input_precision={prec})"),
                "tl.sum(b_a,  # rows\n        axis=0, keep_dims=True)".to_string(),
                format!("b_o += tl.dot(b_a, {w})"),
                "tl.arange(0, min(BT, T))".to_string(),
                "tl.load(q, mask=T > 0, other=0.0)".to_string(),
                "b_h = tl.zeros([BT], dtype=tl.float32)".to_string(),
            ]
        };
        format!(
            "    b_a = {load}\n    {w} = tl.load(k)\n    b_e = {exp}\n    b_d = {dot}\n    b_s = {sum}\n    b_o = b_e\n    {acc}\n    i = {ar}\n    {zeros}\n    tl.store(o, b_o)"
        )
    };
    let k = |name: &str, v: usize| (format!("{name}.py"), Some(kernel(name, &body(name, v))));
    let steps: Vec<OwnedStep<'_>> = vec![
        ("init", vec![k("ka", 0), k("kb", 0), k("kc", 0)]),
        ("ka: exp2, ieee dot, keep dims", vec![k("ka", 1)]),
        ("kb: exp2, ieee dot, keep dims", vec![k("kb", 2)]),
        ("kc: exp2, tf32 dot, keep dims", vec![k("kc", 3)]),
    ];
    owned_history(repo, &steps);
}

#[test]
fn every_mined_edit_rule_reapplies_to_its_examples_with_apply() {
    let env = Env::new();
    let repo = env.path().join("repo");
    families_history(&repo);
    let report = mine(&env, &repo, &[]);
    assert!(report["stats"]["apply_checked"].as_u64().is_some_and(|n| n > 0), "{report:#}");
    let cat = kidiom_patterns::Catalog::open(&env.db()).expect("catalog");
    let filter = kidiom_patterns::Filter { kind: Some(kidiom_patterns::Kind::Edit), ..Default::default() };
    let rules = cat.list(&filter).expect("list");
    assert!(rules.len() >= 6, "{:#?}", rules.iter().map(|p| (&p.before, &p.after)).collect::<Vec<_>>());
    assert!(!rules.iter().any(|p| p.before.contains("other=0.0, mask=")), "the reordering cannot be applied");
    let git = git2::Repository::open(&repo).expect("repo");
    let squash = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
    for p in &rules {
        assert!(!p.examples.is_empty(), "{}", p.id);
        for ex in &p.examples {
            let (before, after) = ex.snippet.split_once("  =>  ").expect("snippet");
            // The example's before-file: the parent version in one of the rule's commits.
            let files: Vec<String> = p
                .commits
                .iter()
                .filter_map(|c| {
                    let commit = git.find_commit(git2::Oid::from_str(&c.id).ok()?).ok()?;
                    let blob = commit.parent(0).ok()?.tree().ok()?.get_path(Path::new(&ex.path)).ok()?;
                    let text = String::from_utf8(git.find_blob(blob.id()).ok()?.content().to_vec()).ok()?;
                    squash(&text).contains(&squash(before)).then_some(text)
                })
                .collect();
            assert!(!files.is_empty(), "{}: no before-file for {ex:?}", p.id);
            // `apply`'s machinery: the compiled rewrite, to its fixed point,
            // with each value of the rule's histogram (or none).
            let values: Vec<Option<&str>> = if p.values.is_empty() {
                vec![None]
            } else {
                p.values.iter().map(|v| Some(v.value.as_str())).collect()
            };
            let reapplied = files.iter().any(|text| {
                values.iter().any(|v| {
                    let Ok(rw) = kidiom_rewriter::Rewrite::new(&kidiom_rewriter::RewriteSpec::from(p), *v) else {
                        return false;
                    };
                    let out = kidiom_rewriter::rewrite(&rw, p.language, text, &ex.path).expect("rewrite");
                    out.is_some_and(|o| squash(&o.text).contains(&squash(after)))
                })
            });
            assert!(reapplied, "{} ({} -> {}) does not reapply to {ex:?}", p.id, p.before, p.after);
        }
    }
}

/// One Triton kernel of the families history: each `Some` family is made.
fn family_kernel(name: &str, made: &[&str], precision: &str) -> Vec<u8> {
    let has = |f: &str| made.contains(&f);
    let pick = |f: &str, yes: &str, no: &str| if has(f) { yes.to_string() } else { no.to_string() };
    let off = pick("rename", "cu_seqlens", "offsets");
    let dot = |slot: &str| pick(slot, &format!(", input_precision={precision}"), "");
    format!(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit{dns}\ndef {name}(x, h, o, {off}, T: tl.constexpr):\n    \
         i_b = tl.program_id(0){int64}\n    o_t = i_b * T + tl.arange(0, 16)\n    b_x = tl.load(x + o_t{mask})\n    \
         b_h = tl.load(h + o_t{evict})\n    b_n = tl.load({off} + i_b)\n    b_g = tl.{exp}(b_x)\n    \
         b_s = tl.dot(b_x, b_h{d1})\n    b_t = tl.dot(b_h, b_x{d2})\n    b_u = tl.dot(b_s, b_t{d3})\n    \
         tl.store(o + o_t, b_s + b_t + b_u + b_g + b_n)\n\n\ndef launch_{name}(x, h, o, n, T):\n    \
         {name}[(1,)](x, h, o, n, T)\n",
        dns = pick("dns", "(do_not_specialize=[\"T\"])", ""),
        int64 = pick("int64", ".to(tl.int64)", ""),
        mask = pick("mask", ", mask=o_t < T, other=0.0", ""),
        evict = pick("evict", ", eviction_policy=\"evict_last\"", ""),
        exp = pick("exp2", "exp2", "exp"),
        d1 = dot("dot1"),
        d2 = dot("dot2"),
        d3 = dot("dot3"),
    )
    .into_bytes()
}

/// Three kernels whose authors, one commit per kernel and family, add an
/// explicit dot precision (each at one dot of three: the others they leave
/// alone), switch `exp` to `exp2`, promote the program id to int64, stop
/// specializing on `T`, mask a load, add an eviction hint, and rename a
/// parameter. Some of the commits that change what the code computes are
/// titled as refactors; the rename is titled as a fix.
fn families_of_fla_history(repo: &Path) {
    let kernels = ["ka", "kb", "kc"];
    let mut made: Vec<Vec<&str>> = vec![Vec::new(); 3];
    let precision = ["\"ieee\"", "\"ieee\"", "\"tf32x3\""];
    let file =
        |k: usize, made: &[&str]| (format!("{}.py", kernels[k]), Some(family_kernel(kernels[k], made, precision[k])));
    let mut steps: Vec<OwnedStep<'_>> = vec![("init", (0..3).map(|k| file(k, &[])).collect())];
    let families: [(&str, [&str; 3]); 7] = [
        ("dot", ["[KDA] ieee dot for the inverse", "Refactor the dot calls", "fix drift at long context"]),
        ("exp2", ["use exp2", "Cleanup the gate", "[Perf] exp2"]),
        ("int64", ["fix int64 overflow", "Refactor program ids", "large batch"]),
        ("dns", ["avoid recompiling", "Refactor the decorator", "fewer compiles"]),
        ("mask", ["[Refactor] tidy loads", "Refactor loads", "guard the tail"]),
        ("evict", ["keep h in L2", "Refactor: hints", "evict last"]),
        ("rename", ["Fix the varlen kernels", "Fix varlen", "Fix"]),
    ];
    let messages: Vec<String> = families.iter().flat_map(|(_, m)| m.iter().map(|s| s.to_string())).collect();
    let mut i = 0;
    for (family, _) in &families {
        for (k, made_k) in made.iter_mut().enumerate() {
            // The dot family changes a different one of the three dots in each kernel.
            let slot: &'static str = match (*family, k) {
                ("dot", 0) => "dot1",
                ("dot", 1) => "dot2",
                ("dot", _) => "dot3",
                (f, _) => {
                    ["exp2", "int64", "dns", "mask", "evict", "rename"].into_iter().find(|x| *x == f).unwrap_or("")
                }
            };
            made_k.push(slot);
            steps.push((messages[i].as_str(), vec![file(k, made_k)]));
            i += 1;
        }
    }
    owned_history(repo, &steps);
}

#[test]
fn each_family_its_authors_made_is_found_classified_by_what_it_does_and_shown() {
    let env = Env::new();
    let repo = env.path().join("repo");
    families_of_fla_history(&repo);
    let report = mine(&env, &repo, &[]);
    assert_eq!(report["corpora"][0]["commits"], 22, "{report:#}");
    let shown = edit_patterns(&env);
    let all =
        env.json(&["catalog", "list", "--kind", "edit", "--all", "--json", "--db", env.db().to_str().expect("utf8")]);
    let all = all.as_array().cloned().unwrap_or_default();
    let text = |p: &serde_json::Value, k: &str| p[k].as_str().unwrap_or("").to_string();
    let listing = |ps: &[serde_json::Value]| -> String {
        ps.iter()
            .map(|p| {
                format!("{} [{}] {} -> {}\n", text(p, "id"), text(p, "category"), text(p, "before"), text(p, "after"))
            })
            .collect()
    };
    // (family, what its rule's after-template adds, its category)
    let families: &[(&str, &str, &str)] = &[
        ("explicit dot precision", "input_precision=", "precision"),
        ("exp -> exp2", "tl.exp2(", "math"),
        ("int64 promotion", ".to(tl.int64)", "addressing"),
        ("do_not_specialize", "do_not_specialize=", "specialization"),
        ("mask added to a load", "mask=", "api"),
        ("eviction hint added", "eviction_policy=", "memory"),
    ];
    for (family, adds, category) in families {
        let rule =
            shown.iter().find(|p| text(p, "after").contains(adds) && !text(p, "before").contains(adds)).unwrap_or_else(
                || panic!("{family}: no rule shown by default; shown:\n{}all:\n{}", listing(&shown), listing(&all)),
            );
        assert_eq!(text(rule, "category"), *category, "{family}: {}", listing(&shown));
        let commits = rule["commits"].as_array().map_or(0, Vec::len);
        assert!(commits >= 2, "{family}: {commits} commits: {rule:#}");
    }
    // Authors gave the dot its precision at one site of three in each kernel:
    // the rule is kept with the sites they left alone counted as false edits.
    let dot = shown.iter().find(|p| text(p, "after").contains("input_precision=")).expect("dot rule");
    assert_eq!(dot["commits"].as_array().map_or(0, Vec::len), 3, "{dot:#}");
    let values: Vec<String> = dot["values"].as_array().into_iter().flatten().map(|v| text(v, "value")).collect();
    assert!(values.contains(&"\"ieee\"".to_string()) && values.contains(&"\"tf32x3\"".to_string()), "{values:?}");
    // The rename is mined, a refactor, and hidden unless asked for.
    let rename = all
        .iter()
        .find(|p| text(p, "after").contains("cu_seqlens") && text(p, "before").contains("offsets"))
        .unwrap_or_else(|| panic!("no rename rule:\n{}", listing(&all)));
    assert_eq!(text(rename, "category"), "refactor", "{}", listing(&all));
    assert!(!shown.iter().any(|p| text(p, "after").contains("cu_seqlens")), "{}", listing(&shown));
}
