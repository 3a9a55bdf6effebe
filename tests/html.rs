//! `kidiom review --html DIR` (and `run --html`, `review --open`): the site
//! rendered for planted candidates whose evidence has the validator's
//! shapes, and for candidates validated on this CPU by `kidiom validate`,
//! loaded in headless Chromium (screenshots that are not blank, every
//! candidate and verdict in the DOM after its script ran), no broken local
//! link, a plot wherever a page has its data, catalog text escaped. Then
//! hostile input: markup and `javascript:` in catalog text, evidence of any
//! shape and number, binary and huge diffs, a folder that cannot take the
//! site, a locked or corrupt catalog, no candidates.
//!
//! Without Chromium the browser checks skip with a printed reason, except
//! under `CI`, where they fail; so do the harness checks without `.venv`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kidiom_patterns::record::{Provenance, StoredEvidence};
use kidiom_patterns::{
    Candidate, CandidateStatus, Catalog, CommitRef, IdiomExample, Lang, Pattern, Support, ValueCount,
};
use serde_json::{Value, json};

use crate::util::Env;

const EVIL: &str = "<script>alert('kidiom')</script>";

const OLD: &str = "@triton.jit\ndef k(x, o, B: tl.constexpr):\n    a = tl.load(x + tl.arange(0, B))\n    b = tl.dot(a, a)\n    tl.store(o + tl.arange(0, B), b)\n";

fn gate(
    name: &str,
    status: &str,
    summary: &str,
    before: Value,
    after: Value,
    metrics: Value,
    commands: &[&str],
) -> Value {
    json!({
        "gate": name, "status": status, "summary": summary, "metrics": metrics, "before": before, "after": after,
        "device": "cpu (triton interpreter)", "versions": {"python": "3.11.7", "triton": "3.9.0"},
        "commands": commands, "seconds": 1.5, "log": null,
    })
}

fn figures(instr: i64, spills: i64, tensor: i64) -> Value {
    json!({"arch": "sm_90a", "registers": 255, "spill_store_bytes": spills, "spill_load_bytes": spills + 500,
           "stack_bytes": 1976, "local_bytes": 0, "shared_static_bytes": 1024, "shared_dynamic_bytes": 65536,
           "instructions": instr,
           "by_class": {"fp32": instr / 2, "int": instr / 4, "local": instr / 8, "tensor": tensor, "global_load": 63},
           "by_opcode": {"FFMA": 10}, "compile_seconds": 0.8})
}

fn curve(errs: &[f64]) -> Value {
    json!(
        [64, 128, 256]
            .iter()
            .zip(errs)
            .map(|(t, e)| json!({"T": t, "rel_l2": e, "max_abs": e / 10.0}))
            .collect::<Vec<_>>()
    )
}

fn evidence(id: &str, kernel: &str, gates: Vec<Value>, verdict: Value) -> Value {
    json!({
        "format": 1, "candidate": id, "pattern": "p", "category": "precision", "target": "kernels/k.py",
        "kernel": kernel, "verdict": verdict, "gates": gates, "device": "auto", "commit": null,
        "seeds": [7, 8, 9], "started_at": 1764547200u64, "seconds": 42.0, "validator": "0.1.0",
    })
}

fn verdict(kind: &str, gate: Option<&str>, reason: &str) -> Value {
    json!({"kind": kind, "gate": gate, "reason": reason, "log": null, "flags": []})
}

fn syntax() -> Value {
    gate("syntax", "passed", "no new error nodes", Value::Null, Value::Null, json!({}), &[])
}

fn static_gate(status: &str, b: (i64, i64, i64), a: (i64, i64, i64)) -> Value {
    let cmds = [
        "python -m kernels.harness compile --kernel kda.prefill --json",
        "python -m kernels.harness compile --kernel kda.prefill --source /tmp/c/kernels/k.py --json",
    ];
    gate(
        "static",
        status,
        "compiled for sm_90a",
        figures(b.0, b.1, b.2),
        figures(a.0, a.1, a.2),
        json!({"arch": "sm_90a", "changed_lines": 1}),
        &cmds,
    )
}

fn correctness() -> Value {
    gate(
        "correctness",
        "passed",
        "15 cases passed; error curve improved",
        json!({"curve": curve(&[5.2e-4, 5.4e-4, 5.7e-4])}),
        json!({"curve": curve(&[7.7e-6, 8.3e-6, 8.5e-6]), "worst": {"o": {"rel_l2": 8.3e-6, "nonfinite": 0}}}),
        json!({"mode": "interpreter-tf32", "cases": 15}),
        &["python -m kernels.harness check --kernel kda.prefill --source /tmp/c/kernels/k.py --seeds 3 --json"],
    )
}

/// What one planted candidate carries.
struct Plant {
    id: String,
    evidence: Value,
    provenance: Value,
    path: &'static str,
    new: String,
}

fn search_summary() -> Value {
    let point = |a: Value, e: [f64; 3], instr: i64, roles: &[&str]| {
        json!({"assignment": a, "error": e, "roles": roles, "predicted_slower": [],
               "figures": {"instructions": instr, "local": 1214, "tensor": 104, "registers": 255, "spill_store_bytes": 2008}})
    };
    json!({
        "values": ["\"ieee\"", "\"tf32x3\""], "lengths": [64, 128, 256],
        "sites": [{"line": 4, "text": "b = tl.dot(a, a)"}, {"line": 9, "text": "c = tl.dot(b, b)"}],
        "points": [
            point(json!([null, null]), [4.8e-4, 5.9e-4, 4.9e-4], 6960, &["baseline", "front"]),
            point(json!([1, null]), [2e-5, 2e-5, 2.1e-5], 8000, &["front", "chosen"]),
            point(json!([1, 1]), [8e-6, 8e-6, 8.5e-6], 10120, &["all-sites", "front"]),
            point(json!([0, 0]), [1e-7, 1e-7, 1e-7], 69576, &["all-sites"]),
        ],
        "why": "the cheapest variant within 3x of the loosest all-sites fix",
    })
}

fn provenance(category: &str, extra: Value) -> Value {
    let mut p = json!({
        "category": category, "title": "`input_precision=` on `tl.dot`", "kind": "usage",
        "before": "tl.dot($$$ARGS)", "after": "tl.dot($$$ARGS, input_precision=$V)",
        "rationale": "170 occurrences in 14 files across 2 corpora",
        "mechanism": "Chooses how tl.dot feeds fp32 operands to the tensor cores.",
        "support": [{"corpus": "up", "revision": "3b5a594133958449a1feaf1c9e0fc1b553e34a28", "files": 10,
                     "occurrences": 119, "opportunities": 1129}],
        "examples": [{"corpus": "up", "path": "fla/ops/cp/chunk_bwd.py", "line": 277,
                      "snippet": "    b_m = tl.dot(b_m_chunk, b_m, input_precision=CP_DOT_PRECISION)"}],
        "commits": [],
    });
    if let (Some(p), Some(e)) = (p.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            p.insert(k.clone(), v.clone());
        }
    }
    p
}

/// The candidates of the site: one per verdict and evidence shape.
fn plants() -> Vec<Plant> {
    let precision = "py-keyword-tl-dot-input-precision@kernels/k.py#65e3e29d".to_string();
    let host = "cpp-guard-binding-fn-py-gil-scoped-release@kernels/kv/kv.cpp#edbb2dc6".to_string();
    let slower = "py-keyword-tl-dot-input-precision@kernels/k.py#49c14d08".to_string();
    let gpu = "py-variant-exp-exp2@kernels/k.py#9a61d297".to_string();
    let evil = format!("evil{EVIL}@kernels/k.py#0badc0de");
    let gaps = |g: f64| {
        json!({"gap": g, "gap_p10": g - 0.02, "gap_p90": g + 0.03, "gaps": [g - 0.02, g, g + 0.01, g + 0.03],
                               "median_us": 700.0, "p10_us": 650.0, "p90_us": 900.0, "samples": 240})
    };
    vec![
        Plant {
            evidence: evidence(
                &precision,
                "kda.prefill",
                vec![
                    syntax(),
                    static_gate("passed", (6960, 2008, 104), (10120, 2592, 156)),
                    correctness(),
                    gate(
                        "speed",
                        "skipped",
                        "needs a GPU: kernels ran on the CPU",
                        Value::Null,
                        Value::Null,
                        json!({}),
                        &[],
                    ),
                ],
                verdict("needs-gpu", None, "syntax, static, correctness passed; speed needs a GPU"),
            ),
            provenance: provenance(
                "precision",
                json!({"search": {"kind": "values-by-site", "roles": ["front", "chosen"], "assignment": "1 of 2: \"ieee\"",
                                  "point": 1, "summary": search_summary()}}),
            ),
            id: precision,
            path: "kernels/k.py",
            new: OLD.replace("tl.dot(a, a)", "tl.dot(a, a, input_precision=\"ieee\")"),
        },
        Plant {
            evidence: evidence(
                &host,
                "kv_transfer",
                vec![
                    syntax(),
                    static_gate("passed", (1510, 0, 0), (1609, 0, 0)),
                    gate(
                        "speed",
                        "passed",
                        "scheduler gap 54.3% -> 1.5% (noise floor 8.5%, significant)",
                        gaps(0.54),
                        gaps(0.015),
                        json!({"metric": "scheduler-throughput", "speedup": 2.13, "noise_floor": 0.085, "significant": true,
                               "gap_baseline": 0.54, "gap_candidate": 0.015, "flags": []}),
                        &["python -m kernels.harness bench --kernel kv_transfer --device cpu --json"],
                    ),
                ],
                verdict("accepted", None, "scheduler gap 54.3% -> 1.5% (noise floor 8.5%, significant)"),
            ),
            provenance: provenance("concurrency", json!({})),
            id: host,
            path: "kernels/kv/kv.cpp",
            new: "void f() {\n  py::gil_scoped_release r;\n  work();\n}\n".into(),
        },
        Plant {
            evidence: evidence(
                &slower,
                "kda.prefill",
                vec![syntax(), static_gate("failed", (6960, 2008, 104), (69576, 67448, 0))],
                verdict("rejected", Some("static"), "predicted slower: instructions 6960 -> 69576 (10.0x > 2x)"),
            ),
            provenance: provenance("precision", json!({})),
            id: slower,
            path: "kernels/k.py",
            new: OLD.replace("tl.dot(a, a)", "tl.dot(a, a, input_precision=\"tf32x3\")"),
        },
        Plant {
            evidence: evidence(
                &gpu,
                "kda.decode",
                vec![
                    syntax(),
                    static_gate("passed", (3000, 0, 0), (2900, 0, 0)),
                    correctness(),
                    gate(
                        "speed",
                        "passed",
                        "baseline 10.0 us, candidate 5.8 us: 1.710x (noise floor 2.0%, significant)",
                        json!({"median_us": 10.0, "p10_us": 9.6, "p90_us": 10.5, "min_us": 9.5, "samples": 200}),
                        json!({"median_us": 5.8, "p10_us": 5.6, "p90_us": 6.1, "min_us": 5.5, "samples": 200}),
                        json!({"speedup": 1.71, "noise_floor": 0.02, "significant": true, "flags": []}),
                        &["python -m kernels.harness bench --kernel kda.decode --device cuda --iters 200 --json"],
                    ),
                ],
                verdict("accepted", None, "baseline 10.0 us, candidate 5.8 us: 1.710x"),
            ),
            provenance: provenance("math", json!({})),
            id: gpu,
            path: "kernels/k.py",
            new: OLD.replace("b = tl.dot(a, a)", "b = tl.exp2(a)"),
        },
        // not validated, and catalog text with markup in every field that a page shows
        Plant {
            evidence: json!({}),
            provenance: provenance(
                "memory",
                json!({"title": EVIL, "rationale": EVIL, "mechanism": EVIL,
                       "examples": [{"corpus": "up", "path": "a/b.py", "line": 3, "snippet": format!("x = '{EVIL}'")}],
                       "commits": [{"id": "0123456789abcdef0123456789abcdef01234567", "summary": EVIL, "date": "2025-01-01"}]}),
            ),
            id: evil,
            path: "kernels/k.py",
            new: OLD.replace("b = tl.dot(a, a)", &format!("b = tl.dot(a, a)  # {EVIL}")),
        },
    ]
}

fn base_text(path: &str) -> &'static str {
    if path.ends_with(".cpp") { "void f() {\n  work();\n}\n" } else { OLD }
}

/// A catalog with the corpus `up` (a GitHub source), the pattern of the
/// precision candidates (for its value histogram) and `plants`.
fn planted(db: &Path, plants: &[Plant]) {
    let mut cat = Catalog::open(db).expect("catalog");
    let mut p = Pattern::usage(
        "py-keyword-tl-dot-input-precision",
        Lang::Python,
        "tl.dot($$$ARGS)",
        "tl.dot($$$ARGS, input_precision=$V)",
        &[],
    );
    p.values = [("SOLVE_TRIL_DOT_PRECISION", 80), ("\"ieee\"", 36), ("DOT_PRECISION", 20)]
        .iter()
        .map(|(v, n)| ValueCount { value: v.to_string(), count: *n, resolved: None, literals: vec![] })
        .collect();
    p.support = vec![Support {
        corpus: "up".into(),
        revision: "3b5a594133958449a1feaf1c9e0fc1b553e34a28".into(),
        occurrences: 119,
        files: 10,
        opportunities: 1129,
    }];
    p.examples =
        vec![IdiomExample { corpus: "up".into(), path: "x.py".into(), line: 1, snippet: "tl.dot(a, b)".into() }];
    p.commits = vec![CommitRef { id: "abc1234".into(), summary: "use ieee".into(), date: String::new() }];
    let tx = cat.begin().expect("begin");
    tx.put_corpus("up", "git", "https://github.com/kvcache-ai/Mooncake", "3b5a594133958449a1feaf1c9e0fc1b553e34a28")
        .expect("corpus");
    tx.put_pattern(&p).expect("pattern");
    tx.commit().expect("commit");
    for pl in plants {
        let old = base_text(pl.path);
        cat.put_candidate(&Candidate {
            id: pl.id.clone(),
            pattern_id: pl.id.split('@').next().unwrap_or("").to_string(),
            path: pl.path.into(),
            base_blob: kidiom_syntax::blob_id(old.as_bytes()),
            result_blob: kidiom_syntax::blob_id(pl.new.as_bytes()),
            value: Some("\"ieee\"".into()),
            sites: 1,
            diff: kidiom_rewriter::unified(pl.path, old, &pl.new, 3),
            status: CandidateStatus::Proposed,
            provenance: Provenance::decode(&pl.provenance),
            evidence: StoredEvidence::Empty,
            commit_id: None,
            created_at: String::new(),
            updated_at: String::new(),
        })
        .expect("put");
        if !pl.evidence.as_object().is_some_and(|o| o.is_empty()) {
            assert!(
                cat.set_candidate_evidence(&pl.id, &StoredEvidence::decode(pl.evidence.clone())).expect("evidence"),
                "{}",
                pl.id
            );
        }
    }
}

/// Text as an HTML serializer writes it in a text node.
fn text_node(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// HTML text with its character references decoded (askama writes `&#60;`,
/// our highlighter `&lt;`).
pub fn unescape(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let Some(end) = rest.find(';').filter(|&e| e < 10) else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let entity = &rest[1..end];
        let c = match entity {
            "lt" => Some('<'),
            "gt" => Some('>'),
            "amp" => Some('&'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            e => e.strip_prefix('#').and_then(|n| n.parse::<u32>().ok()).and_then(char::from_u32),
        };
        match c {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The page of each candidate, in the order of `ids`, from the index's links.
pub fn pages(dir: &Path, index: &str, ids: &[&str]) -> Vec<PathBuf> {
    let mut links: Vec<(String, String)> = Vec::new();
    let mut rest = index;
    while let Some(i) = rest.find("<a href=\"c/") {
        rest = &rest[i + "<a href=\"".len()..];
        let (Some(q), Some(close)) = (rest.find('"'), rest.find("</a>")) else { break };
        let text_start = rest.find('>').map(|g| g + 1).unwrap_or(close);
        links.push((unescape(&rest[..q]), unescape(&rest[text_start..close])));
    }
    ids.iter()
        .map(|id| {
            let (href, _) =
                links.iter().find(|(_, text)| text == id).unwrap_or_else(|| panic!("no link to {id} in the index"));
            dir.join(href)
        })
        .collect()
}

/// The kinds of the plots a page draws (`<figure data-plot="KIND"><svg`), sorted.
fn plot_kinds(html: &str) -> Vec<String> {
    let mut out: Vec<String> = html
        .split("data-plot=\"")
        .skip(1)
        .filter_map(|rest| {
            let (kind, after) = rest.split_once('"')?;
            after.starts_with("><svg").then(|| kind.to_string())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Every `href="..."` and `src="..."` value of a page.
fn hrefs(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    for attr in ["href=\"", "src=\""] {
        let mut rest = html;
        while let Some(i) = rest.find(attr) {
            rest = &rest[i + attr.len()..];
            if let Some(end) = rest.find('"') {
                out.push(rest[..end].replace("&amp;", "&"));
                rest = &rest[end..];
            }
        }
    }
    out
}

/// Relative links of the page at `page` that name no file under `dir`.
fn broken_links(dir: &Path, page: &Path) -> Vec<String> {
    let html = std::fs::read_to_string(page).expect("page");
    let base = page.parent().expect("parent");
    let root = dir.canonicalize().expect("dir");
    hrefs(&html)
        .into_iter()
        .filter(|h| {
            !(h.starts_with("https://") || h.starts_with("http://") || h.starts_with('#') || h.starts_with("data:"))
        })
        .filter(|h| {
            let file = h.split(['#', '?']).next().unwrap_or("");
            let target = base.join(file);
            !(target.is_file() && target.canonicalize().is_ok_and(|t| t.starts_with(&root)))
        })
        .collect()
}

/// Headless Chromium, or a printed reason to skip (a failure under `CI`).
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|b| std::env::split_paths(&path).map(move |d| d.join(b)))
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "no chromium on PATH (CI must run the browser tests: scripts/test.sh installs the Debian package)"
        );
        eprintln!("skipping: no chromium on PATH (apt-get install chromium)");
    }
    found
}

/// One headless Chromium at a time (two cores), each with its own profile
/// and a deadline.
static BROWSER: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn headless(bin: &Path, args: &[&str], url: &str) -> String {
    let _one = BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let profile = tempfile::tempdir().expect("profile");
    let out = tempfile::NamedTempFile::new().expect("out");
    let mut child = Command::new(bin)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .stdout(out.reopen().expect("reopen"))
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn chromium");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match child.try_wait().expect("wait") {
            Some(s) => {
                assert!(s.success(), "chromium {args:?} {url}: {s}");
                break;
            }
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("chromium {args:?} {url}: no result in 120 s");
            }
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    std::fs::read_to_string(out.path()).expect("chromium output")
}

/// A screenshot of `page`, checked not blank: decoded, many colours, and
/// more than a sliver of pixels away from the background. Kept in
/// `$KIDIOM_HTML_SHOTS` when that is set.
fn screenshot(bin: &Path, page: &Path, name: &str) {
    let dir = tempfile::tempdir().expect("tmp");
    let png = dir.path().join(name);
    headless(bin, &[&format!("--screenshot={}", png.display()), "--window-size=1400,1000"], &url(page));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).expect("png")));
    let mut reader = decoder.read_info().expect("png header");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("png frame");
    let bpp = info.color_type.samples();
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(bpp).collect();
    let mut counts: std::collections::HashMap<&[u8], usize> = std::collections::HashMap::new();
    for p in &pixels {
        *counts.entry(p).or_default() += 1;
    }
    let background = counts.values().copied().max().unwrap_or(0);
    let drawn = 1.0 - background as f64 / pixels.len().max(1) as f64;
    assert!(
        counts.len() >= 16 && drawn > 0.01,
        "{name}: {} colours, {:.2}% drawn: a blank page",
        counts.len(),
        drawn * 100.0
    );
    if let Some(keep) = std::env::var_os("KIDIOM_HTML_SHOTS") {
        std::fs::create_dir_all(&keep).expect("shots dir");
        std::fs::copy(&png, Path::new(&keep).join(name)).expect("keep shot");
    }
}

fn url(page: &Path) -> String {
    format!("file://{}", page.canonicalize().expect("page").display())
}

fn review_html(env: &Env, dir: &str) -> std::process::Output {
    let db = env.db();
    let out = env.run(&["review", "--db", db.to_str().expect("utf8"), "--html", dir]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out
}

#[test]
fn the_site_shows_every_candidate_with_its_evidence() {
    let env = Env::new();
    let plants = plants();
    planted(&env.db(), &plants);
    let out = review_html(&env, "site");
    let dir = env.path().join("site");
    assert!(String::from_utf8_lossy(&out.stdout).contains("wrote the review of 5 candidates"));
    let index = std::fs::read_to_string(dir.join("index.html")).expect("index");
    let ids: Vec<&str> = plants.iter().map(|p| p.id.as_str()).collect();
    let pages = pages(&dir, &index, &ids);
    assert!(pages.iter().all(|p| p.is_file()), "{pages:?}");
    assert_eq!(std::fs::read_dir(dir.join("c")).expect("c").count(), plants.len(), "a page per candidate");
    // the only script anywhere is the index's own; catalog text is escaped
    assert_eq!(index.matches("<script").count(), 1, "{index}");
    assert!(!index.contains(EVIL) && unescape(&index).contains(&plants[4].id));
    for p in &pages {
        let html = std::fs::read_to_string(p).expect("page");
        assert!(!html.contains("<script"), "{}: a script on a candidate page", p.display());
        assert!(!html.contains(EVIL), "{}: unescaped catalog text", p.display());
        let broken = broken_links(&dir, p);
        assert!(broken.is_empty(), "{}: broken links {broken:?}", p.display());
    }
    assert!(broken_links(&dir, &dir.join("index.html")).is_empty());

    let page = |id: &str| {
        let i = plants.iter().position(|p| p.id == id).expect("planted");
        std::fs::read_to_string(&pages[i]).expect("page")
    };
    // a plot wherever its data is, and none where it is not: error curve, instruction mix,
    // speed samples (a host bench's gaps per round, a GPU bench's percentiles), the search's
    // front, the pattern's value histogram
    let expected: [&[&str]; 5] =
        [&["curve", "front", "mix", "values"], &["mix", "speed"], &["mix", "values"], &["curve", "mix", "speed"], &[]];
    for (p, want) in plants.iter().zip(expected) {
        assert_eq!(plot_kinds(&page(&p.id)), want, "{}", p.id);
    }
    let precision = page(&plants[0].id);
    assert!(precision.contains("https://github.com/kvcache-ai/Mooncake/blob/3b5a594133958449a1feaf1c9e0fc1b553e34a28/fla/ops/cp/chunk_bwd.py#L277"));
    assert!(precision.contains("<span class=\"hl-"), "highlighted code");
    assert!(precision.contains("python -m kernels.harness check --kernel kda.prefill"), "the gate's commands");
    assert!(unescape(&precision).contains("kidiom validate 'py-keyword-tl-dot-input-precision@kernels/k.py#65e3e29d'"));
    let evil = page(&plants[4].id);
    // title, rationale, mechanism, example, commit, both sides of the diff and the raw diff: shown, escaped
    assert!(unescape(&evil).matches(EVIL).count() >= 7, "{}", unescape(&evil));
    assert!(evil.contains("https://github.com/kvcache-ai/Mooncake/commit/0123456789abcdef0123456789abcdef01234567"));
    assert!(evil.contains("Not validated yet"));

    let Some(bin) = chromium() else { return };
    let dom = headless(&bin, &["--dump-dom"], &url(&dir.join("index.html")));
    for (p, v) in plants.iter().zip(["needs-gpu", "accepted", "rejected", "accepted", "not validated"]) {
        assert!(dom.contains(&text_node(&p.id)), "{} not in the index's DOM", p.id);
        let row = dom.split("<tr ").find(|r| r.contains(&text_node(&p.id))).expect("row");
        assert!(row.contains(&format!(">{v}</span>")), "{}: verdict {v} not in its row:\n{row}", p.id);
    }
    assert!(dom.contains("5 of 5 shown"), "the index's script ran");
    assert!(!dom.contains("<script>alert"), "no planted script in the DOM");
    let cand = headless(&bin, &["--dump-dom"], &url(&pages[0]));
    for kind in ["curve", "mix", "front"] {
        assert!(cand.contains(&format!("data-plot=\"{kind}\"><svg")), "no {kind} plot in the candidate's DOM");
    }
    assert!(cand.contains(&text_node(&plants[0].id)));
    screenshot(&bin, &dir.join("index.html"), "index.png");
    screenshot(&bin, &pages[0], "candidate.png");
}

#[test]
fn a_second_site_in_the_same_folder_drops_gone_candidates() {
    let env = Env::new();
    let plants = plants();
    planted(&env.db(), &plants[..2]);
    review_html(&env, "site");
    let dir = env.path().join("site");
    // a status filter: one candidate now
    let db = env.db();
    let ok =
        env.run(&["review", "--db", db.to_str().expect("utf8"), "--html", "site", "--json", "--status", "validated"]);
    assert_eq!(ok.status.code(), Some(1), "none listed: 1, as for a list");
    let v: Value = serde_json::from_slice(&ok.stdout).expect("json");
    assert_eq!(v["html"]["pages"], 0);
    assert_eq!(v["html"]["removed"], 2, "{v}");
    assert_eq!(std::fs::read_dir(dir.join("c")).expect("c").count(), 0);
    // a folder kidiom did not write keeps what is in it
    let other = env.path().join("mine/c");
    std::fs::create_dir_all(&other).expect("mkdir");
    std::fs::write(other.join("notes.html"), "mine").expect("write");
    review_html(&env, "mine");
    assert!(other.join("notes.html").is_file());
    // nor once kidiom has written there: only the pages it wrote are removed
    let none = env.run(&["review", "--db", db.to_str().expect("utf8"), "--html", "mine", "--status", "validated"]);
    assert_eq!(none.status.code(), Some(1));
    assert_eq!(std::fs::read_to_string(other.join("notes.html")).expect("kept"), "mine");
    assert_eq!(std::fs::read_dir(&other).expect("c").count(), 1, "its two pages removed, the notes kept");
}

#[test]
fn open_hands_the_page_to_a_browser_or_says_there_is_none() {
    let env = Env::new();
    planted(&env.db(), &plants()[..1]);
    let db = env.db();
    let db = db.to_str().expect("utf8");
    // no display, no $BROWSER: nothing is started, and it says so
    let out = env
        .cmd()
        .args(["review", "--db", db, "--open"])
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("BROWSER")
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("no browser to open it") && err.contains("file://"), "{err}");
    assert!(env.path().join("review/index.html").is_file(), "--open alone writes review/ beside the catalog");
    // a display and an xdg-open on PATH: it gets the candidate's page
    let bin = env.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let log = env.path().join("opened.txt");
    let script = bin.join("xdg-open");
    std::fs::write(&script, format!("#!/bin/sh\necho \"$1\" > '{}'\n", log.display())).expect("script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = env
        .cmd()
        .args(["review", "py-keyword-tl-dot", "--db", db, "--open", "--html", "site"])
        .env("PATH", &bin)
        .env("DISPLAY", ":99")
        .env_remove("BROWSER")
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("with xdg-open"), "{err}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !log.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let opened = std::fs::read_to_string(&log).expect("xdg-open ran");
    assert!(opened.starts_with("file:///") && opened.contains("/site/c/py-keyword-tl-dot-input-precision"), "{opened}");
}

#[test]
fn run_writes_the_site_at_the_end_of_the_loop() {
    let env = Env::new();
    planted(&env.path().join("run.sqlite"), &plants()[..1]);
    env.write("near/k.py", format!("import triton\nimport triton.language as tl\n\n{OLD}"));
    env.write("near.toml", "name = \"near\"\nkind = \"dir\"\nsource = \"near\"\n");
    env.write("kidiom.toml", "[catalog]\npath = \"run.sqlite\"\n[mine]\ncorpora = [\"near.toml\"]\n");
    let v = env.json(&["run", "--no-validate", "--json", "--html", "site"]);
    assert_eq!(v["html"]["pages"], 1, "{}", v["html"]);
    let index = std::fs::read_to_string(env.path().join("site/index.html")).expect("index");
    assert!(index.contains("py-keyword-tl-dot-input-precision@kernels/k.py#65e3e29d"));
}

/// Not a check: the catalog `bench/html.sh` times `review --html` on.
/// `KIDIOM_BENCH_DB` names the file, `KIDIOM_BENCH_CANDIDATES` how many
/// candidates (the planted ones above in turn: each verdict, evidence shape
/// and plot); run with `--ignored`.
#[test]
#[ignore = "a fixture for bench/html.sh"]
fn bench_catalog() {
    let db = PathBuf::from(std::env::var_os("KIDIOM_BENCH_DB").expect("KIDIOM_BENCH_DB"));
    let n: usize = std::env::var("KIDIOM_BENCH_CANDIDATES").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let base = plants();
    let many: Vec<Plant> = (0..n)
        .map(|i| {
            let b = &base[i % base.len()];
            Plant {
                id: format!("{}-{i}", b.id),
                evidence: b.evidence.clone(),
                provenance: b.provenance.clone(),
                path: b.path,
                new: b.new.clone(),
            }
        })
        .collect();
    planted(&db, &many);
}

// ---- candidates validated on this CPU ----------------------------------

/// An upstream corpus where `exp2` is written for `exp`, and one `exp`
/// left: mined, it yields the `exp2`-over-`exp` variant, which applies to
/// our decode kernel's one `tl.exp`.
const UP_EXP2: &str = r#"import triton
import triton.language as tl


@triton.jit
def up_a(x, y, BT: tl.constexpr):
    a = tl.load(x + tl.arange(0, BT))
    b = tl.exp2(a * 1.4426950408889634)
    c = tl.exp2(b)
    d = tl.exp(c)
    tl.store(y + tl.arange(0, BT), d)
"#;

const DEC: &str = "kernels/kda/decode.py";

/// The kinds of plot a candidate's page must draw, read from its evidence
/// and pattern alone (not from the site's code): instruction classes where
/// the static gate counted some, the error curve where the correctness gate
/// has a positive finite point, speed where both variants hold samples or
/// percentiles, the histogram where the pattern has values, the front where
/// the candidate came from a search.
fn plots_due(evidence: &Value, pattern: &Value) -> Vec<String> {
    let gate = |name: &str| {
        evidence["gates"].as_array().and_then(|g| g.iter().find(|r| r["gate"] == name)).cloned().unwrap_or_default()
    };
    let mut due = Vec::new();
    let st = gate("static");
    let classes =
        |side: &Value| side["by_class"].as_object().is_some_and(|o| o.values().any(|n| n.as_f64() > Some(0.0)));
    if classes(&st["before"]) || classes(&st["after"]) {
        due.push("mix");
    }
    let co = gate("correctness");
    let point = |p: &Value| {
        let ok = |v: &Value| v.as_f64().is_some_and(|x| (1e-150..=1e150).contains(&x));
        ok(&p["T"]) && ok(&p["rel_l2"])
    };
    if ["before", "after"].iter().any(|s| co[*s]["curve"].as_array().is_some_and(|c| c.iter().any(point))) {
        due.push("curve");
    }
    let sp = gate("speed");
    let samples = |side: &Value| {
        side.as_object().map(|o| {
            o.iter()
                .filter(|(_, v)| v.as_array().is_some_and(|a| !a.is_empty() && a.iter().all(Value::is_number)))
                .map(|(k, _)| k.clone())
                .collect::<Vec<_>>()
        })
    };
    let pct = |side: &Value| ["p10_us", "median_us", "p90_us"].iter().all(|k| side[*k].is_number());
    let (b, a) = (samples(&sp["before"]).unwrap_or_default(), samples(&sp["after"]).unwrap_or_default());
    if b.iter().any(|k| a.contains(k)) || (pct(&sp["before"]) && pct(&sp["after"])) {
        due.push("speed");
    }
    if pattern["values"].as_array().is_some_and(|v| v.iter().any(|v| v["count"].as_u64() > Some(0))) {
        due.push("values");
    }
    due.sort();
    due.into_iter().map(str::to_string).collect()
}

#[test]
fn the_site_of_candidates_validated_on_this_cpu() {
    let Some(py) = crate::project::python() else { return };
    let browser = chromium();
    let _cpu = crate::util::cpu_heavy();
    let env = crate::project::project();
    let db = env.db();
    let dbs = db.to_str().expect("utf8");
    env.write("up/up.py", UP_EXP2);
    let out = env.run(&["mine", "up", "--name", "up", "--db", dbs, "-q"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let applied = env.json(&["apply", DEC, "--pattern", "py-variant-exp-exp2", "--db", dbs, "--json"]);
    let exp2 = applied["candidates"][0]["id"].as_str().expect("a candidate").to_string();
    // two planted bugs: a changed sign (caught by the correctness gate), a broken parse (by syntax)
    use crate::project::{edit, plant};
    plant(&env, "sign", "math", DEC, &edit(&env, DEC, "b_beta * (b_v - b_p)", "b_beta * (b_v + b_p)"));
    let unclosed =
        edit(&env, DEC, "b_p = tl.sum(b_s * b_k[:, None], axis=0)", "b_p = tl.sum(b_s * b_k[:, None], axis=0");
    plant(&env, "parse", "other", DEC, &unclosed);
    let started = Instant::now();
    let (report, out) =
        crate::project::validate(&env, &py, &["--pending", "--seeds", "1", "--no-consistency", "--timeout", "300"]);
    eprintln!("validated 3 candidates in {:.1} s", started.elapsed().as_secs_f64());
    assert_eq!(out.status.code(), Some(1), "rejections exit 1: {}", String::from_utf8_lossy(&out.stderr));
    let expect =
        [(exp2.as_str(), "needs-gpu", "-"), ("sign", "rejected", "correctness"), ("parse", "rejected", "syntax")];
    for (id, v, g) in expect {
        let ev = crate::project::by_id(&report, id);
        assert_eq!(crate::project::verdict(ev), (v.to_string(), g.to_string()), "{id}: {ev:#}");
    }

    review_html(&env, "site");
    let dir = env.path().join("site");
    let index = std::fs::read_to_string(dir.join("index.html")).expect("index");
    let ids: Vec<&str> = expect.iter().map(|(id, _, _)| *id).collect();
    let pages = pages(&dir, &index, &ids);
    assert!(broken_links(&dir, &dir.join("index.html")).is_empty());
    let listed = env.json(&["review", "--db", dbs, "--json"]);
    let pattern = env.json(&["catalog", "show", "py-variant-exp-exp2", "--db", dbs, "--json"]);
    let pattern = if pattern.is_array() { pattern[0].clone() } else { pattern };
    for (id, page) in ids.iter().zip(&pages) {
        let html = std::fs::read_to_string(page).expect("page");
        let broken = broken_links(&dir, page);
        assert!(broken.is_empty(), "{id}: broken links {broken:?}");
        let c = listed.as_array().and_then(|a| a.iter().find(|c| c["id"] == *id)).expect("listed");
        let p = if c["pattern_id"] == "py-variant-exp-exp2" { &pattern } else { &Value::Null };
        let due = plots_due(&c["evidence"], p);
        assert_eq!(plot_kinds(&html), due, "{id}: the plots its evidence has data for");
        // each gate's record, with its commands
        for g in c["evidence"]["gates"].as_array().expect("gates") {
            assert!(html.contains(&format!("id=\"gate-{}\"", g["gate"].as_str().expect("name"))), "{id}");
            for cmd in g["commands"].as_array().into_iter().flatten() {
                assert!(unescape(&html).contains(cmd.as_str().expect("cmd")), "{id}: command {cmd} not shown");
            }
        }
    }
    assert!(plot_kinds(&std::fs::read_to_string(&pages[0]).expect("page")).contains(&"mix".to_string()));
    // the error numbers of the sign bug, as the validator measured them, in the index
    let worst = crate::project::by_id(&report, "sign")["gates"]
        .as_array()
        .and_then(|g| g.iter().find(|r| r["gate"] == "correctness"))
        .and_then(|r| r["metrics"]["worst"]["o"]["rel_l2"].as_f64())
        .expect("sign's worst rel_l2");
    assert!(index.contains(&format!("{worst:.2e}")), "{worst:.2e} not in the index");

    let Some(bin) = browser else { return };
    let dom = headless(&bin, &["--dump-dom"], &url(&dir.join("index.html")));
    for (id, v, _) in expect {
        let row =
            dom.split("<tr ").find(|r| r.contains(&text_node(id))).unwrap_or_else(|| panic!("{id} not in the DOM"));
        assert!(row.contains(&format!(">{v}</span>")), "{id}: verdict {v} not in its row:\n{row}");
    }
    assert!(dom.contains("3 of 3 shown"), "the index's script ran");
    let page = headless(&bin, &["--dump-dom"], &url(&pages[0]));
    assert!(page.contains(&text_node(&exp2)) && page.contains(">needs-gpu</span>"));
    assert!(page.contains("data-plot=\"mix\"><svg"), "the instruction mix drawn in the browser's DOM");
    screenshot(&bin, &dir.join("index.html"), "validated-index.png");
    screenshot(&bin, &pages[0], "validated-candidate.png");
}

// ---- hostile input -------------------------------------------------------

/// Sets a column of a candidate's row as raw SQL text (bytes that need not
/// be JSON, nor UTF-8).
fn set_raw(db: &Path, id: &str, column: &str, value: &[u8]) {
    let conn = rusqlite::Connection::open(db).expect("open");
    let n = conn
        .execute(
            &format!("UPDATE candidates SET {column} = CAST(?2 AS TEXT) WHERE id = ?1"),
            rusqlite::params![id, value],
        )
        .expect("update");
    assert_eq!(n, 1, "{id}");
}

/// Every file under `dir`, relative.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            if e.file_type().expect("type").is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path().strip_prefix(dir).expect("under").display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn catalog_text_makes_no_markup_no_foreign_link_and_no_path() {
    let env = Env::new();
    let base = plants();
    let ids = [
        "\"><script>alert(1)</script>@k.py#1".to_string(),
        "../../../../tmp/kidiom-evil@kernels/k.py#2".to_string(),
        "a'b\"c</script><!--<style>@k.py#3".to_string(),
        "/etc/passwd".to_string(),
    ];
    let hostile = json!({
        "title": "</script><script>alert(2)</script>", "rationale": "\"'><img src=x onerror=alert(3)>",
        "mechanism": "</style><a href=\"javascript:alert(4)\">x</a>",
        "support": [{"corpus": "js", "revision": "abc", "files": "\"><b>", "occurrences": 1, "opportunities": 1},
                    {"corpus": "up", "revision": "3b5a594133958449a1feaf1c9e0fc1b553e34a28", "files": 1,
                     "occurrences": 1, "opportunities": 1}],
        "examples": [{"corpus": "js", "path": "x.py", "line": 1, "snippet": "</script>"},
                     {"corpus": "up", "path": "javascript:alert(5)", "line": "\"><b>", "snippet": "x"}],
        "commits": [{"id": "javascript:alert(6)", "summary": "</script>", "date": "\"><b>"}],
    });
    let plants: Vec<Plant> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let b = &base[i % 4];
            let mut evidence = b.evidence.clone();
            evidence["verdict"]["reason"] = json!("</script>\"'><svg onload=alert(7)>");
            evidence["gates"][0]["commands"] = json!(["echo '</script>' \"$(rm -rf /)\""]);
            Plant {
                id: id.clone(),
                evidence,
                provenance: provenance("memory</script>", hostile.clone()),
                path: b.path,
                new: format!("{}# </script><script>alert(8)</script> \u{202e}evil\n", base_text(b.path)),
            }
        })
        .collect();
    planted(&env.db(), &plants);
    {
        let mut cat = Catalog::open(&env.db()).expect("catalog");
        let tx = cat.begin().expect("begin");
        tx.put_corpus("js", "git", "javascript:alert(9)//github.com/o/r", "abc").expect("corpus");
        tx.commit().expect("commit");
    }
    review_html(&env, "site");
    let dir = env.path().join("site");
    // every file inside the site's folder, each page under c/, nothing anywhere else
    let files = files_under(&dir);
    assert_eq!(files.len(), 3 + ids.len(), "{files:?}");
    assert!(files.iter().filter(|f| f.starts_with("c/")).count() == ids.len(), "{files:?}");
    assert!(!Path::new("/tmp/kidiom-evil@kernels").exists());
    let index = std::fs::read_to_string(dir.join("index.html")).expect("index");
    assert_eq!(index.matches("<script").count(), 1, "the index's own script only");
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let pages = pages(&dir, &index, &id_refs);
    for page in std::iter::once(dir.join("index.html")).chain(pages.iter().cloned()) {
        let html = std::fs::read_to_string(&page).expect("page");
        if page.starts_with(dir.join("c")) {
            assert!(
                !html.contains("<script") && !html.contains("<img") && !html.contains("<svg onload"),
                "{}",
                page.display()
            );
            assert!(!html.contains('\u{202e}'), "a direction override is shown, not obeyed");
            assert!(html.contains("&lt;U+202E&gt;"));
        }
        for h in hrefs(&html) {
            let local = !h.contains(':') && !h.starts_with('/');
            assert!(local || h.starts_with("https://github.com/"), "{}: link {h}", page.display());
        }
        assert!(broken_links(&dir, &page).is_empty(), "{}", page.display());
    }
    let Some(bin) = chromium() else { return };
    let dom = headless(&bin, &["--dump-dom"], &url(&dir.join("index.html")));
    assert_eq!(dom.matches("<script").count(), 1, "one script element in the browser's DOM");
    for id in &ids {
        assert!(dom.contains(&text_node(id)), "{id} not shown as text");
    }
    let page = headless(&bin, &["--dump-dom"], &url(&pages[0]));
    assert!(!page.contains("<script") && !page.contains("<img"), "no element from catalog text");
}

#[test]
fn evidence_of_any_shape_gives_a_page_and_plots_only_drawable_numbers() {
    let env = Env::new();
    let base = plants();
    let cur = |pts: Value| json!({"curve": pts});
    let mut odd = base[0].evidence.clone();
    // the correctness gate: nothing a log axis can show; the static gate at the ends of i64
    odd["gates"][2]["before"] =
        cur(json!([{"T": 64, "rel_l2": 0.0}, {"T": -1, "rel_l2": 1e-3}, {"T": 128, "rel_l2": "inf"}]));
    odd["gates"][2]["after"] =
        cur(json!([{"T": 64, "rel_l2": -1.0}, {"T": 1e308, "rel_l2": 1e308}, {"T": "x", "rel_l2": 5e-324}]));
    odd["gates"][1]["before"]["instructions"] = json!(i64::MAX);
    odd["gates"][1]["after"]["instructions"] = json!(i64::MIN);
    odd["gates"][1]["before"]["by_class"] = json!({"fp32": 1e308, "int": -5, "huge": f64::MAX});
    let mut mixed = base[0].evidence.clone();
    // good points among bad ones: drawn
    mixed["gates"][2]["after"] =
        cur(json!([{"T": 64, "rel_l2": 1e-300}, {"T": 128, "rel_l2": 2e-6}, {"T": 256, "rel_l2": 3e-6}]));
    let mut many = base[1].evidence.clone();
    let big: Vec<f64> = (0..200_000).map(|i| f64::from(i % 977) / 1000.0).collect();
    many["gates"][2]["before"]["gaps"] = json!(big);
    many["gates"][2]["metrics"]["speedup"] = json!("fast");
    let mut wrong = base[3].evidence.clone();
    wrong["gates"][3]["before"] = json!("not an object");
    wrong["gates"][3]["metrics"] = json!([1, 2]);
    let shapes: Vec<(&str, Value)> = vec![
        ("odd", odd),
        ("mixed", mixed),
        ("many", many),
        ("wrong-types", wrong),
        ("names-a-verdict", json!({"verdict": {"kind": "accepted"}, "gates": "none"})),
        ("array", json!([1, 2, 3])),
        ("string", json!("accepted")),
        ("missing", json!({"format": 1, "candidate": "x"})),
    ];
    let plants: Vec<Plant> = shapes
        .iter()
        .map(|(name, e)| Plant {
            id: format!("py-keyword-tl-dot-input-precision@k.py#{name}"),
            evidence: e.clone(),
            // provenance of the wrong shapes too
            provenance: if *name == "wrong-types" {
                json!({"category": 7, "title": ["x"], "support": "all", "examples": [1, null, {"line": -5, "corpus": {}}],
                       "commits": {"id": 3}, "search": {"kind": "memory-roles", "roles": "front", "point": -1,
                       "sites": [1, "a", {"line": {}}], "summary": {"points": "many", "lengths": [1e308]}}})
            } else {
                provenance("precision", json!({}))
            },
            path: "kernels/k.py",
            new: base[0].new.clone(),
        })
        .collect();
    planted(&env.db(), &plants);
    let started = Instant::now();
    review_html(&env, "site");
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
    let dir = env.path().join("site");
    let index = std::fs::read_to_string(dir.join("index.html")).expect("index");
    let ids: Vec<&str> = plants.iter().map(|p| p.id.as_str()).collect();
    let pages = pages(&dir, &index, &ids);
    let kinds = |i: usize| plot_kinds(&std::fs::read_to_string(&pages[i]).expect("page"));
    assert_eq!(kinds(0), ["mix", "values"], "no curve: no point a log axis can show");
    assert!(kinds(1).contains(&"curve".to_string()));
    assert!(kinds(2).contains(&"speed".to_string()));
    let odd = std::fs::read_to_string(&pages[0]).expect("page");
    assert!(odd.contains(&format!("{} → {}", i64::MAX, i64::MIN)), "the figures as stored");
    for (i, p) in plants.iter().enumerate().skip(4) {
        let row = index.split("<tr ").find(|r| unescape(r).contains(&p.id)).expect("row");
        assert!(row.contains(">unreadable evidence</span>"), "{}: not believed:\n{row}", p.id);
        let html = std::fs::read_to_string(&pages[i]).expect("page");
        assert!(
            html.contains("not the validator&#39;s record") || html.contains("not the validator's record"),
            "{}",
            p.id
        );
    }
}

#[test]
fn binary_odd_byte_and_huge_diffs_give_pages() {
    let env = Env::new();
    let base = plants();
    let mut plants: Vec<Plant> = ["binary", "bytes", "huge"]
        .iter()
        .map(|n| Plant {
            id: format!("p@kernels/k.py#{n}"),
            evidence: base[0].evidence.clone(),
            provenance: provenance("precision", json!({})),
            path: "kernels/k.py",
            new: base[0].new.clone(),
        })
        .collect();
    plants.truncate(3);
    planted(&env.db(), &plants);
    let binary = "diff --git a/kernels/w.bin b/kernels/w.bin\nindex 1..2 100644\nGIT binary patch\nliteral 3\nKcmZ?d\n\n\
diff --git a/x.png b/x.png\nBinary files a/x.png and b/x.png differ\n";
    set_raw(&env.db(), &plants[0].id, "diff", binary.as_bytes());
    let mut bytes =
        b"--- a/kernels/k.py\n+++ b/kernels/k.py\n@@ -1,2 +1,2 @@\n a\n-b\xff\xfe\x00\x1b[31m\n+b\x01\xe2\x80\xae\n"
            .to_vec();
    bytes.extend_from_slice(b"\\ No newline at end of file\n");
    set_raw(&env.db(), &plants[1].id, "diff", &bytes);
    let n = 100_000;
    let mut huge = format!("--- a/kernels/k.py\n+++ b/kernels/k.py\n@@ -1,{n} +1,{n} @@\n");
    for i in 0..n / 2 {
        huge.push_str(&format!("-    x_{i} = tl.load(p + {i}, mask=m)  # the old line, padded to a length\n"));
        huge.push_str(&format!("+    x_{i} = tl.load(p + {i}, mask=m, eviction_policy=\"evict_last\")  # new\n"));
    }
    assert!(huge.len() > 5_000_000);
    set_raw(&env.db(), &plants[2].id, "diff", huge.as_bytes());
    let started = Instant::now();
    review_html(&env, "site");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(60), "{took:?}");
    let dir = env.path().join("site");
    let index = std::fs::read_to_string(dir.join("index.html")).expect("index");
    let ids: Vec<&str> = plants.iter().map(|p| p.id.as_str()).collect();
    let pages = pages(&dir, &index, &ids);
    let read = |i: usize| std::fs::read_to_string(&pages[i]).expect("page");
    let b = read(0);
    assert_eq!(b.matches("binary file: no text to show").count(), 2, "both binary files say so");
    let odd = read(1);
    assert!(odd.contains('\u{fffd}'), "bytes that are not UTF-8 shown as U+FFFD");
    assert!(odd.contains("title=\"U+0000\"") && odd.contains("title=\"U+001B\"") && odd.contains("&lt;U+202E&gt;"));
    assert!(!odd.contains('\0') && !odd.contains('\u{1b}') && !odd.contains('\u{202e}'));
    let h = read(2);
    assert!(h.len() < 12_000_000, "{} bytes", h.len());
    assert!(h.contains("A long change:"), "it says what it left out");
    // the first 5000 lines of the hunk side by side (2500 removed beside 2500 added), the rest in the raw view
    assert!(
        h.contains("class=\"ln add\">2500<") && !h.contains("class=\"ln add\">2501<"),
        "the first rows side by side"
    );
    let Some(bin) = chromium() else { return };
    let dom = headless(&bin, &["--dump-dom"], &url(&pages[2]));
    assert!(dom.contains("A long change:"), "the browser loaded the long page");
}

#[test]
fn a_folder_that_cannot_take_the_site_is_an_error_and_nothing_is_lost() {
    let env = Env::new();
    planted(&env.db(), &plants()[..2]);
    let db = env.db();
    let dbs = db.to_str().expect("utf8");
    let review = |dir: &str| env.run(&["review", "--db", dbs, "--html", dir]);
    let one_line = |out: &std::process::Output, has: &str| {
        assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("kidiom: error: ") && err.trim_end().lines().count() == 1, "{err}");
        assert!(err.contains(has), "{has:?} not in: {err}");
    };
    // a file
    env.write("afile", "keep me");
    one_line(&review("afile"), "is a file, not a folder");
    assert_eq!(std::fs::read_to_string(env.path().join("afile")).expect("kept"), "keep me");
    // under a file
    one_line(&review("afile/site"), "afile/site");
    // a folder of the user's that holds an index.html: not replaced
    env.write("mine/index.html", "my index");
    env.write("mine/style.css", "my style");
    one_line(&review("mine"), "kidiom did not write");
    assert_eq!(std::fs::read_to_string(env.path().join("mine/index.html")).expect("kept"), "my index");
    assert!(!env.path().join("mine/c").exists(), "nothing written");
    // a site whose c/ is a link elsewhere: no page is written (or removed) there
    review_html(&env, "site");
    let elsewhere = env.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    std::fs::write(elsewhere.join("x.html"), "theirs").expect("write");
    std::fs::rename(env.path().join("site/c"), env.path().join("site-c")).expect("move");
    std::os::unix::fs::symlink(&elsewhere, env.path().join("site/c")).expect("link");
    one_line(&review("site"), "not a folder");
    assert_eq!(std::fs::read_dir(&elsewhere).expect("dir").count(), 1);
    // a marker that is not kidiom's
    env.write("fake/.kidiom-site", "c/../../catalog.sqlite\n");
    one_line(&review("fake"), "is not kidiom's");
    assert!(db.is_file());
    // an unwritable site (where permissions bind: not as root): the old site stays whole
    std::fs::remove_file(env.path().join("site/c")).expect("unlink");
    std::fs::rename(env.path().join("site-c"), env.path().join("site/c")).expect("move back");
    let index = std::fs::read_to_string(env.path().join("site/index.html")).expect("index");
    use std::os::unix::fs::PermissionsExt;
    let ro = std::fs::Permissions::from_mode(0o555);
    std::fs::set_permissions(env.path().join("site"), ro.clone()).expect("chmod");
    std::fs::set_permissions(env.path().join("site/c"), ro).expect("chmod");
    let root = std::fs::write(env.path().join("site/probe"), "x").is_ok();
    if root {
        eprintln!("skipping the read-only folder: permissions do not bind this user (root)");
    } else {
        one_line(&review("site"), "writing");
        assert_eq!(std::fs::read_to_string(env.path().join("site/index.html")).expect("index"), index);
    }
    for d in ["site", "site/c"] {
        std::fs::set_permissions(env.path().join(d), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
}

#[test]
fn a_locked_or_corrupt_catalog_is_an_error_before_anything_is_written() {
    let env = Env::new();
    let plants = plants();
    planted(&env.db(), &plants[..2]);
    let db = env.db();
    let dbs = db.to_str().expect("utf8");
    review_html(&env, "site");
    let index = std::fs::read_to_string(env.path().join("site/index.html")).expect("index");
    let fails = |args: &[&str], has: &str| {
        let mut all = vec!["review", "--html", "site"];
        all.extend_from_slice(args);
        let out = env.cmd().args(&all).env("KIDIOM_LOCK_TIMEOUT_MS", "200").output().expect("run");
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(has) && err.trim_end().lines().count() == 1, "{has:?}: {err}");
        assert_eq!(std::fs::read_to_string(env.path().join("site/index.html")).expect("index"), index, "the site kept");
    };
    // a writer mid-transaction does not stop a reader (the catalog is in WAL mode)
    {
        let w = rusqlite::Connection::open(&db).expect("open");
        w.execute_batch("BEGIN IMMEDIATE; UPDATE candidates SET sites = 99;").expect("write");
        let out = env.run(&["review", "--db", dbs, "--html", "other"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let other = std::fs::read_to_string(env.path().join("other/index.html")).expect("index");
        assert!(!other.contains(">99<"), "the committed catalog, not the writer's");
        // one that holds the file exclusively does, after the lock timeout
        w.execute_batch("ROLLBACK; PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; UPDATE candidates SET sites = 2;")
            .expect("lock");
        fails(&["--db", dbs], "locked");
    }
    // evidence that is not JSON at all: the catalog is damaged, and the row is named
    set_raw(&db, &plants[0].id, "evidence", b"{not json");
    fails(&["--db", dbs], &plants[0].id);
    // not a database
    let bad = env.write("bad.sqlite", vec![b'x'; 4096]);
    fails(&["--db", bad.to_str().expect("utf8")], "bad.sqlite");
    assert_eq!(std::fs::read(&bad).expect("kept"), vec![b'x'; 4096], "left as it was");
    // no catalog
    fails(&["--db", "missing.sqlite"], "no catalog");
    assert!(!env.path().join("missing.sqlite").exists());
}

#[test]
fn no_candidates_give_an_index_that_says_so() {
    let env = Env::new();
    Catalog::open(&env.db()).expect("catalog");
    let db = env.db();
    let out = env.run(&["review", "--db", db.to_str().expect("utf8"), "--html", "site"]);
    assert_eq!(out.status.code(), Some(1), "none listed: 1, as for a list");
    let index = std::fs::read_to_string(env.path().join("site/index.html")).expect("index");
    assert!(index.contains("No candidates in"), "{index}");
    assert!(!index.contains("<table") && !index.contains("<script"), "no empty table, no script for it");
    assert!(index.contains("<title>kidiom review: 0 candidates</title>"));
    let Some(bin) = chromium() else { return };
    let dom = headless(&bin, &["--dump-dom"], &url(&env.path().join("site/index.html")));
    assert!(dom.contains("No candidates in"));
    screenshot(&bin, &env.path().join("site/index.html"), "empty-index.png");
}
