//! `kidiom catalog export --format json` and `catalog import`: a round trip
//! that keeps every pattern, an idempotent second import, a snapshot without
//! source lines, bad files refused; and `kidiom run` filling in a git corpus
//! it cannot reach from the shipped snapshot.

use serde_json::Value;

use crate::util::Env;

const KERNEL: &str = r#"import triton
import triton.language as tl


@triton.jit
def k(x, y, BT: tl.constexpr):
    a = tl.load(x + tl.arange(0, BT))
    b = tl.dot(a, a, input_precision="ieee")
    c = tl.dot(a, b, input_precision="ieee")
    d = tl.dot(b, c)
    e = tl.exp2(d) + tl.exp(d)
    f = tl.exp2(e)
    tl.store(y + tl.arange(0, BT), f)
"#;

fn mined(env: &Env, db: &str) {
    env.write("up/k.py", KERNEL);
    env.write("up/k2.py", KERNEL.replace("def k(", "def k2("));
    let out = env.run(&["mine", "up", "--name", "up", "--db", db, "-q"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn list(env: &Env, db: &str) -> Value {
    env.json(&["catalog", "list", "--db", db, "--json", "--limit", "1000"])
}

#[test]
fn export_import_round_trips_and_a_second_import_changes_nothing() {
    let env = Env::new();
    let a = env.path().join("a.sqlite");
    let a = a.to_str().expect("utf8");
    mined(&env, a);
    let before = list(&env, a);
    assert!(before.as_array().is_some_and(|p| !p.is_empty()), "{before:#}");
    let file = env.path().join("cat.json");
    let out = env.run(&["catalog", "export", "--format", "json", "--db", a, "--out", file.to_str().expect("utf8")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let exported: Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
    assert_eq!(exported["format"], "kidiom-patterns");
    assert_eq!(exported["version"], 1);
    assert_eq!(exported["corpora"][0]["name"], "up");

    let b = env.path().join("b.sqlite");
    let b = b.to_str().expect("utf8");
    for round in 0..2 {
        let r = env.json(&["catalog", "import", file.to_str().expect("utf8"), "--db", b, "--json"]);
        // kidiom's own (transform) patterns are in every catalog, never in an export
        let n = before.as_array().map(|ps| ps.iter().filter(|p| p["kind"] != "transform").count()).unwrap_or(0) as u64;
        let (added, merged) = (r["added"].as_u64(), r["merged"].as_u64());
        assert_eq!((added, merged), if round == 0 { (Some(n), Some(0)) } else { (Some(0), Some(n)) }, "{r:#}");
        assert_eq!(list(&env, b), before, "round {round}");
    }
    let stats = env.json(&["catalog", "stats", "--db", b, "--json"]);
    assert_eq!(stats["corpora"][0]["kind"], "snapshot", "{stats:#}");
}

#[test]
fn a_snapshot_holds_no_source_lines_and_bad_files_are_refused() {
    let env = Env::new();
    let db = env.path().join("a.sqlite");
    let db = db.to_str().expect("utf8");
    mined(&env, db);
    let snap = env.json(&["catalog", "export", "--format", "json", "--snapshot", "--db", db]);
    assert_eq!(snap["snapshot"], true);
    let text = snap.to_string();
    assert!(!text.contains("tl.load(x + tl.arange(0, BT))"), "a source line leaked into the snapshot");
    for p in snap["patterns"].as_array().expect("patterns") {
        for e in p["examples"].as_array().expect("examples") {
            assert_eq!(e["snippet"], "", "{e}");
            assert!(e["line"].as_u64().is_some_and(|l| l > 0) && e["path"].as_str().is_some());
        }
    }
    for (name, body, want) in [
        ("garbage.json", "{ not json", "not JSON"),
        ("other.json", r#"{"format": "something-else", "version": 1}"#, "not a kidiom-patterns file"),
        ("newer.json", r#"{"format": "kidiom-patterns", "version": 7, "corpora": [], "patterns": []}"#, "newer"),
    ] {
        let f = env.write(name, body);
        let out = env.run(&["catalog", "import", f.to_str().expect("utf8"), "--db", db]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(want) && err.lines().count() == 1, "{err}");
    }
    // nothing was lost
    assert!(list(&env, db).as_array().is_some_and(|p| !p.is_empty()));
}

#[test]
fn run_fills_in_an_unreachable_git_corpus_from_the_snapshot() {
    let env = Env::new();
    let src = env.path().join("src.sqlite");
    let src = src.to_str().expect("utf8");
    mined(&env, src);
    // the snapshot of corpus "up" at revision r1, renamed as the git corpus "far"
    let mut snap = env.json(&["catalog", "export", "--format", "json", "--snapshot", "--db", src]);
    snap["corpora"][0]["name"] = "far".into();
    snap["corpora"][0]["revision"] = "1111111111111111111111111111111111111111".into();
    for p in snap["patterns"].as_array_mut().expect("patterns") {
        for s in p["support"].as_array_mut().expect("support") {
            s["corpus"] = "far".into();
            s["revision"] = "1111111111111111111111111111111111111111".into();
        }
        for e in p["examples"].as_array_mut().expect("examples") {
            e["corpus"] = "far".into();
        }
    }
    env.write("snapshot.json", snap.to_string());
    env.write(
        "far.toml",
        "name = \"far\"\nkind = \"git\"\nsource = \"/nonexistent/far.git\"\nrevision = \"1111111111111111111111111111111111111111\"\n",
    );
    env.write("near/k.py", KERNEL);
    env.write("near.toml", "name = \"near\"\nkind = \"dir\"\nsource = \"near\"\n");
    env.write(
        "kidiom.toml",
        "[catalog]\npath = \"run.sqlite\"\n[mine]\ncorpora = [\"near.toml\", \"far.toml\"]\nhistory = true\nsnapshot = \"snapshot.json\"\n",
    );
    let out = env.run(&["run", "--no-validate"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("corpus far: not reachable here; imported"), "{err}");
    assert!(err.contains("from the snapshot"), "{err}");
    let shown = list(&env, "run.sqlite");
    let from_far = shown
        .as_array()
        .expect("patterns")
        .iter()
        .filter(|p| p["support"].as_array().is_some_and(|s| s.iter().any(|s| s["corpus"] == "far")))
        .count();
    assert!(from_far > 0, "{shown:#}");
    let stats = env.json(&["catalog", "stats", "--db", "run.sqlite", "--json"]);
    let far = stats["corpora"].as_array().and_then(|c| c.iter().find(|c| c["name"] == "far")).cloned();
    assert_eq!(far.map(|c| c["kind"].clone()), Some("snapshot".into()), "{stats:#}");
    // a second run imports again and ends in the same state
    let out = env.run(&["run", "--no-validate"]);
    assert!(out.status.success());
    assert_eq!(list(&env, "run.sqlite"), shown);
}

/// The snapshot the repository ships covers every git corpus `kidiom run`
/// mines by default, at the revision its manifest pins (its history mined),
/// with the usage idioms of each that has no fallback to mine them from
/// (DeepGEMM, Mooncake), so a machine without GitHub is filled in for all.
#[test]
fn the_shipped_snapshot_covers_every_default_git_corpus() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let config: toml::Value =
        toml::from_str(&std::fs::read_to_string(root.join("kidiom.toml")).expect("kidiom.toml")).expect("toml");
    let snap: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("corpora/snapshot.json")).expect("snapshot"))
            .expect("json");
    let corpora = config["mine"]["corpora"].as_array().expect("[mine] corpora");
    let (mut git, mut edits) = (0, 0);
    for c in corpora {
        let m = kidiom_miner::Manifest::load(&root.join(c.as_str().expect("path"))).expect("manifest");
        if m.kind != kidiom_miner::SourceKind::Git {
            continue;
        }
        git += 1;
        let pinned = m.revision.clone().expect("a git corpus of kidiom.toml is pinned");
        let held = snap["corpora"].as_array().into_iter().flatten().find(|s| s["name"] == m.name.as_str());
        let held = held.unwrap_or_else(|| panic!("corpora/snapshot.json has no corpus {}", m.name));
        assert_eq!(held["revision"].as_str(), Some(pinned.as_str()), "{}", m.name);
        let kinds: Vec<&str> = snap["patterns"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["support"].as_array().into_iter().flatten().any(|s| s["corpus"] == m.name.as_str()))
            .filter_map(|p| p["kind"].as_str())
            .collect();
        if m.fallback.is_none() {
            assert!(kinds.contains(&"usage"), "{}: no usage idioms in the snapshot", m.name);
        }
        edits += kinds.iter().filter(|k| **k == "edit").count();
    }
    assert!(git >= 3, "kidiom.toml's git corpora: {git}");
    // Histories are mined together; a corpus may have no recurring edits of its own.
    assert!(edits > 0, "no edit idioms in the snapshot");
}
