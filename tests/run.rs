//! `kidiom run`: the summary a person reads at the end of the loop, on a
//! copy of our kernels and a small corpus of our own (no full run): its
//! line budget, one line per corpus, each kernel's best candidate, what
//! waits for a GPU with the command to run there, where the review is; and
//! `-v` with the full tables.

use kidiom_patterns::Catalog;
use kidiom_patterns::record::StoredEvidence;

use crate::project::*;
use crate::util::Env;
use crate::validate::UPSTREAM;

/// A project with the corpora `up` and `side` and a kidiom.toml naming them.
fn setup() -> Env {
    let env = project();
    for (dir, name) in [("up", "up"), ("side", "side")] {
        for i in 0..2 {
            env.write(&format!("{dir}/k{i}.py"), UPSTREAM);
        }
        env.write(&format!("{name}.toml"), format!("name = \"{name}\"\nkind = \"dir\"\nsource = \"{dir}\"\n"));
    }
    env.write(
        "kidiom.toml",
        "[catalog]\npath = \"cat.sqlite\"\n[mine]\ncorpora = [\"up.toml\", \"side.toml\"]\nmin_occurrences = 2\n\
         min_files = 1\nmin_corpora = 1\nhistory = false\n",
    );
    env
}

/// Every candidate `apply` proposes on the kernel sources, judged `needs-gpu`
/// already (as an earlier run on this CPU would have): the run validates
/// none of them again, so no harness runs here.
fn judged_needs_gpu(env: &Env) -> Vec<String> {
    let applied =
        env.json(&["apply", "kernels/kda", "kernels/kda_cuda", "kernels/kv_transfer", "--db", "cat.sqlite", "--json"]);
    // the run applies the catalog to the sources the kernels' manifests name, not to the
    // state-precision variants' own sources (decode_state_*: the precision gate judges those)
    let ids: Vec<String> = applied["candidates"]
        .as_array()
        .expect("candidates")
        .iter()
        .map(|c| c["id"].as_str().expect("id").to_string())
        .filter(|id| !id.contains("/decode_state_"))
        .collect();
    assert!(!ids.is_empty(), "{applied:#}");
    let cat = Catalog::open(&env.path().join("cat.sqlite")).expect("catalog");
    for id in &ids {
        let ev = serde_json::json!({
            "format": 1, "candidate": id, "pattern": "p", "category": "precision", "target": "kernels/kda/prefill.py",
            "kernel": "kda.prefill", "device": "cpu", "commit": null, "seeds": [1], "started_at": 1764547200u64,
            "seconds": 3.0, "validator": "0.1.0", "gates": [],
            "verdict": {"kind": "needs-gpu", "gate": null, "reason": "speed needs a GPU", "log": null, "flags": []},
        });
        assert!(cat.set_candidate_evidence(id, &StoredEvidence::decode(ev)).expect("evidence"));
    }
    ids
}

fn stdout(env: &Env, args: &[&str]) -> String {
    let out = env.cmd().args(args).output().expect("spawn kidiom");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_default_summary_is_short_and_says_what_to_do_next() {
    let env = setup();
    // mining first, so that apply has the catalog's patterns
    stdout(&env, &["run", "--no-validate", "-q"]);
    let ids = judged_needs_gpu(&env);
    let text = stdout(&env, &["run", "--device", "cpu", "--no-search", "--html", "site"]);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() <= 30, "{} lines:\n{text}", lines.len());
    // one line per corpus, right under the heading
    let at = lines.iter().position(|l| *l == "mined:").expect("a `mined:` heading");
    let corpora: Vec<&str> = lines[at + 1..].iter().take_while(|l| l.starts_with("  ")).copied().collect();
    assert_eq!(corpora.len(), 2, "{text}");
    assert!(
        corpora[0].trim_start().starts_with("up (dir") && corpora[1].trim_start().starts_with("side (dir"),
        "{text}"
    );
    assert!(corpora.iter().all(|l| l.contains("2 files")), "{text}");
    // each kernel's best candidate with its verdict; what waits for a GPU and the command for it
    // (a table under the folder the kernels share: file, short id, pattern, numbers)
    let best = lines.iter().position(|l| *l == "best per kernel (in kernels/):").expect("best per kernel");
    let bests: Vec<&str> = lines[best + 1..].iter().take_while(|l| l.starts_with("  ")).copied().collect();
    let prefill = bests.iter().find(|l| l.trim_start().starts_with("kda/prefill.py ")).expect("the prefill's best");
    assert!(prefill.ends_with("needs-gpu"), "{text}");
    let short = |id: &str| id.rsplit('#').next().unwrap_or(id).to_string();
    assert!(ids.iter().any(|id| prefill.contains(&short(id))), "{text}");
    // the state cast (issue #27) makes the decode storage-dtype agnostic
    let decode = bests.iter().find(|l| l.trim_start().starts_with("kda/decode.py ")).expect("the decode's best");
    assert!(decode.contains("py-state-cast-at-load-store"), "{text}");
    // a terminal of 120 columns shows every line whole
    assert!(lines.iter().all(|l| l.chars().count() <= 120), "{text}");
    assert!(text.contains(&format!("waiting for a GPU: {} candidate", ids.len())), "{ids:?} {text}");
    assert!(text.contains("scripts/device-check.sh"), "{text}");
    assert!(std::path::Path::new(&repo().join("scripts/device-check.sh")).is_file(), "the command named exists");
    assert!(text.contains("accepted: none"), "{text}");
    // where the review is: the site it wrote
    let site = env.path().join("site/index.html");
    assert!(site.is_file());
    let review = lines.iter().find(|l| l.starts_with("review: ")).expect("a review line");
    assert!(review.contains("site/index.html"), "{review}");
    // no evidence tables by default
    assert!(!text.contains("this run's candidates"), "{text}");
    assert!(!text.contains("top "), "{text}");

    // -v: the full tables as well
    let full = stdout(&env, &["run", "--device", "cpu", "--no-search", "-v"]);
    assert!(full.lines().count() > lines.len(), "{full}");
    assert!(full.contains("corpus  kind"), "the mining table: {full}");
    assert!(full.contains("this run's candidates"), "{full}");
    for id in &ids {
        // the table shows the short id (the hex after `#`) and fits 120 columns
        let short = id.rsplit('#').next().unwrap_or(id);
        assert!(full.lines().any(|l| l.starts_with(short) && l.contains("needs-gpu")), "{id} in the table: {full}");
    }
    let table = full.split("this run's candidates").nth(1).unwrap_or("");
    assert!(table.lines().all(|l| l.chars().count() <= 120), "the table fits 120 columns: {table}");
    assert!(full.contains("the full table and evidence: `kidiom run -v`"), "the summary still ends it: {full}");
}

#[test]
fn mining_only_says_so_in_a_few_lines() {
    let env = setup();
    let text = stdout(&env, &["run", "--no-validate"]);
    assert!(text.lines().count() <= 8, "{text}");
    assert!(text.contains("catalog: ") && text.contains("top patterns: py-keyword-tl-dot-input-precision"), "{text}");
    assert!(text.contains("mining only"), "{text}");
}
