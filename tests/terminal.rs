//! The terminal output of the commands, without `--json`, as a user sees
//! it: snapshots (insta) of `catalog list|show|stats|search`, `apply`, `review`
//! (list and one candidate), the `run` summary, and the error lines.
//! Paths, times and durations are replaced by placeholders; everything else
//! is compared as printed. A change to what users read shows up as a
//! snapshot diff to review (`cargo insta review`).

use crate::util::Env;

/// The corpus: Triton kernels with and without two decorations, and CUDA
/// kernels with and without `__launch_bounds__`.
fn corpus(env: &Env) {
    let k = "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x, BT: tl.constexpr):\n    a = tl.dot(x, x, input_precision=\"ieee\")\n    b = tl.dot(x, x)\n    tl.store(x, a, mask=m)\n";
    for i in 0..3 {
        env.write(&format!("c/k{i}.py"), k);
    }
    env.write(
        "c/k.cu",
        "__global__ void __launch_bounds__(128) k(float* __restrict__ x) {}\n__global__ void j(float* x) {}\n__global__ void __launch_bounds__(64) i(float* x) {}\n__global__ void __launch_bounds__(256) h(float* x) {}\n",
    );
}

/// Output with what varies between runs replaced: the test's directory,
/// timestamps, durations and rates.
fn stable(env: &Env, text: &str) -> String {
    let dir = env.path().to_string_lossy().to_string();
    let mut s = text.replace(&dir, "[DIR]");
    if let Ok(canon) = env.path().canonicalize() {
        s = s.replace(&canon.to_string_lossy().to_string(), "[DIR]");
    }
    for (pat, with) in [
        (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "[TIME]"),
        (r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "[TIME]"),
        (r"\b\d+\.\d+s\b", "[SECS]"),
        (r"\b\d+\.\d+ ?ms\b", "[MS]"),
    ] {
        s = regex::Regex::new(pat).expect("pattern").replace_all(&s, with).into_owned();
    }
    s
}

/// stdout, then stderr under a rule, of one command.
fn shown(env: &Env, args: &[&str]) -> String {
    // Without a harness Python: mechanisms then do not quote the installed Triton's docstrings,
    // which change between Triton versions (tests/catalog.rs checks the quoting).
    let out = env.cmd().args(args).env("KIDIOM_PYTHON", "/nonexistent/python").output().expect("spawn kidiom");
    let mut s = format!("$ kidiom {}\n", args.join(" "));
    s.push_str(&String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr);
    if !err.is_empty() {
        s.push_str("--- stderr\n");
        s.push_str(&err);
    }
    s.push_str(&format!("--- exit {}\n", out.status.code().unwrap_or(-1)));
    stable(env, &s)
}

#[test]
fn the_catalog_as_a_user_reads_it() {
    let env = Env::new();
    corpus(&env);
    let db = env.db().to_string_lossy().to_string();
    let mine = shown(&env, &["mine", "c", "--db", &db, "--min-files", "1", "-q"]);
    insta::assert_snapshot!("mine", mine);
    insta::assert_snapshot!("catalog_list", shown(&env, &["catalog", "list", "--db", &db]));
    insta::assert_snapshot!(
        "catalog_show",
        shown(&env, &["catalog", "show", "py-keyword-tl-dot-input-precision", "--db", &db])
    );
    insta::assert_snapshot!("catalog_stats", shown(&env, &["catalog", "stats", "--db", &db]));
    insta::assert_snapshot!("catalog_search", shown(&env, &["catalog", "search", "tf32 precision", "--db", &db]));
}

/// The corpus mined, and a kernel `kernels/t.py` with a plain `tl.dot`:
/// the env, its catalog's path, and what `apply` of the precision idiom printed.
fn applied() -> (Env, String, String) {
    let env = Env::new();
    corpus(&env);
    let db = env.db().to_string_lossy().to_string();
    shown(&env, &["mine", "c", "--db", &db, "--min-files", "1", "--json"]);
    env.write(
        "kernels/t.py",
        "import triton\nimport triton.language as tl\n\n@triton.jit\ndef t(x, y):\n    acc = tl.dot(x, y)  # [BT, BK] @ [BK, BV]\n    tl.store(y, acc)\n",
    );
    let apply = shown(&env, &["apply", "kernels/t.py", "--pattern", "py-keyword-tl-dot-input-precision", "--db", &db]);
    (env, db, apply)
}

#[test]
fn apply_and_review_as_a_user_reads_them() {
    let (env, db, apply) = applied();
    insta::assert_snapshot!("apply", apply);
    insta::assert_snapshot!("review_list", shown(&env, &["review", "--db", &db]));
    insta::assert_snapshot!("review_one", shown(&env, &["review", "py-keyword-tl-dot-input-precision", "--db", &db]));
}

#[test]
fn a_short_id_or_its_start_names_a_candidate_in_every_command() {
    let (env, db, _) = applied();
    let listed = env.json(&["review", "--db", &db, "--json"]);
    let full = listed[0]["id"].as_str().expect("an id").to_string();
    let short = full.rsplit('#').next().expect("a short id").to_string();
    // the table shows the short id first on the candidate's row
    let table = shown(&env, &["review", "--db", &db]);
    assert!(table.lines().any(|l| l.starts_with(&short)), "{table}");
    assert!(!table.contains(&full), "the narrow table has no full id: {table}");
    assert!(shown(&env, &["review", "--wide", "--db", &db]).contains(&full));
    // the short id, its first 4 digits, with `#`, and in upper case all name it
    for given in [short.clone(), short[..4].to_string(), format!("#{short}"), short.to_uppercase()] {
        let one = env.json(&["review", &given, "--db", &db, "--json"]);
        assert_eq!(one["candidate"]["id"].as_str(), Some(full.as_str()), "{given}");
    }
    // fewer than 4 digits is no short id: the error says what an id can be
    let out = env.run(&["review", &short[..3], "--db", &db]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("4 to 8 hex digits"), "{err}");
    // accept takes it too (and refuses an unvalidated candidate, naming it in full)
    let out = env.run(&["accept", &short, "--db", &db]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(&full), "{err}");
}

#[test]
fn a_run_summary_as_a_user_reads_it() {
    let env = Env::new();
    corpus(&env);
    env.write(
        "kidiom.toml",
        "[catalog]\npath = \"cat.sqlite\"\n[mine]\ncorpora = [\"c\"]\nmin_occurrences = 2\nmin_files = 1\nmin_corpora = 1\nhistory = false\n",
    );
    insta::assert_snapshot!("run", shown(&env, &["run", "--no-validate", "--top", "5", "-q"]));
}

#[test]
fn error_lines_say_what_failed_once() {
    let env = Env::new();
    corpus(&env);
    let db = env.db().to_string_lossy().to_string();
    let mut all = String::new();
    for args in [
        vec!["catalog", "list", "--db", "missing.sqlite"],
        vec!["mine", "/nonexistent-kidiom-corpus", "--db", &db],
        vec!["catalog", "list", "--category", "speedy", "--db", &db],
        vec!["validate", "--device", "tpu", "--pending"],
    ] {
        all.push_str(&shown(&env, &args));
    }
    env.json(&["mine", "c", "--db", &db, "--min-files", "1", "--json"]);
    env.write("not-a-catalog.sqlite", "this is text, not SQLite\n");
    for args in [
        vec!["catalog", "show", "no-such-pattern", "--db", &db],
        vec!["apply", "c/k0.py", "--pattern", "no-such-pattern", "--db", &db],
        vec!["review", "zzz", "--db", &db],
        vec!["catalog", "list", "--db", "not-a-catalog.sqlite"],
    ] {
        all.push_str(&shown(&env, &args));
    }
    insta::assert_snapshot!("errors", all);
}
