use crate::util::{Env, find};

fn mined(env: &Env) -> String {
    let k = "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x, BT: tl.constexpr):\n    a = tl.dot(x, x, input_precision=\"ieee\")\n    b = tl.dot(x, x)\n    tl.store(x, a, mask=m)\n";
    for i in 0..3 {
        env.write(&format!("c/k{i}.py"), k);
    }
    env.write("c/k.cu", "__global__ void __launch_bounds__(128) k(float* __restrict__ x) {}\n__global__ void j(float* x) {}\n__global__ void __launch_bounds__(64) i(float* x) {}\n__global__ void __launch_bounds__(256) h(float* x) {}\n");
    let db = env.db().to_str().expect("utf8").to_string();
    env.json(&["mine", "c", "--db", &db, "--min-files", "1", "--json"]);
    db
}

#[test]
fn list_filters_and_json_fields() {
    let env = Env::new();
    let db = mined(&env);
    let all = env.json(&["catalog", "list", "--db", &db, "--json"]);
    let p = find(&all, "py-keyword-tl-dot-input-precision").expect("pattern");
    for field in [
        "id",
        "kind",
        "language",
        "category",
        "title",
        "rationale",
        "before",
        "after",
        "support",
        "values",
        "examples",
        "commits",
        "score",
    ] {
        assert!(p.get(field).is_some(), "missing {field} in {p}");
    }
    assert_eq!(p["kind"], "usage");
    assert_eq!(p["language"], "python");
    assert_eq!(p["category"], "precision");
    for s in ["occurrences", "files", "opportunities", "corpus", "revision"] {
        assert!(p["support"][0].get(s).is_some(), "support lacks {s}");
    }
    let cuda = env.json(&["catalog", "list", "--db", &db, "--language", "cuda", "--json"]);
    assert!(cuda.as_array().expect("array").iter().all(|p| p["language"] == "cuda"));
    assert!(find(&cuda, "cu-qualifier-cuda-global-launch-bounds").is_some());
    let prec = env.json(&["catalog", "list", "--db", &db, "--category", "precision", "--json"]);
    assert!(prec.as_array().expect("array").iter().all(|p| p["category"] == "precision"));
    let strong = env.json(&["catalog", "list", "--db", &db, "--min-support", "3", "--json"]);
    assert!(!strong.as_array().expect("array").is_empty());
    assert!(strong.as_array().expect("array").iter().all(|p| crate::util::occurrences(p) >= 3));
    let one = env.json(&["catalog", "list", "--db", &db, "--limit", "1", "--json"]);
    assert_eq!(one.as_array().expect("array").len(), 1);
}

#[test]
fn show_search_and_errors() {
    let env = Env::new();
    let db = mined(&env);
    let p = env.json(&["catalog", "show", "py-keyword-tl-dot-input-precision", "--db", &db, "--json"]);
    assert_eq!(p["values"][0]["value"], "\"ieee\"");
    assert_eq!(p["values"][0]["count"], 3);
    let human = env.run(&["catalog", "show", "py-keyword-tl-dot-input-precision", "--db", &db]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("input_precision") && text.contains("k0.py"), "{text}");
    let hits = env.json(&["catalog", "search", "input_precision=\"ieee\"", "--db", &db, "--json"]);
    assert!(find(&hits, "py-keyword-tl-dot-input-precision").is_some(), "{hits}");
    let hits = env.json(&["catalog", "search", "tl.dot(", "--db", &db, "--json"]);
    assert!(!hits.as_array().expect("array").is_empty());
    let missing = env.run(&["catalog", "show", "no-such-pattern", "--db", &db]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no pattern with id"));
    let none = env.run(&["catalog", "list", "--db", env.path().join("absent.sqlite").to_str().expect("utf8")]);
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("no catalog at"));
}
