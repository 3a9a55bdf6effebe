//! Search latency on a large catalog: `bench/search.sh` runs it.
//!
//!     cargo run --release -p kidiom-patterns --example search_bench -- [PATTERNS] [CATALOG]
//!
//! Without CATALOG it writes a synthetic catalog of PATTERNS patterns
//! (default 5000; ids, titles, templates, mechanisms, examples, values and
//! commits shaped like mined ones, deterministic) to a temporary file. With
//! CATALOG it searches a copy of that catalog (the copy is migrated, never
//! the file itself). Every question of `tests/search_questions.toml` is
//! searched 30 times at the MCP tool's default limit (20); it prints the
//! latency per query (median, 95th percentile, worst) over all of them.

use std::time::{Duration, Instant};

use kidiom_patterns::{Catalog, Category, CommitRef, Filter, IdiomExample, Kind, Lang, Pattern, Support, ValueCount};

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn pick<'a>(&mut self, xs: &'a [&'a str]) -> &'a str {
        xs[(self.next() % xs.len() as u64) as usize]
    }
}

const SUBJECTS: &[&str] = &[
    "tl.load",
    "tl.store",
    "tl.dot",
    "tl.range",
    "triton.jit",
    "triton.Config",
    "kernel-grid",
    "tl.program-id",
    "tl.sum",
    "tl.max",
    "tl.zeros",
    "tl.make-block-ptr",
    "triton-kernel",
    "triton-param",
    "cuda-global",
    "cuda-device",
    "pointer-param",
    "loop",
    "kernel",
    "binding-fn",
    "binding-def",
    "pyo3-fn",
    "exp",
    "log",
    "range",
    "tl.atomic-add",
    "tl.cumsum",
    "tl.where",
    "tl.arange",
    "tl.full",
];
const WORDS: &[&str] = &[
    "eviction",
    "policy",
    "cache",
    "modifier",
    "boundary",
    "check",
    "stages",
    "warps",
    "precision",
    "input",
    "dtype",
    "axis",
    "mask",
    "other",
    "padding",
    "option",
    "sem",
    "scope",
    "keep",
    "dims",
    "order",
    "shape",
    "strides",
    "offsets",
    "block",
    "size",
    "num",
    "ctas",
    "launch",
    "bounds",
    "restrict",
    "forceinline",
    "unroll",
    "shfl",
    "sync",
    "ldg",
    "expf",
    "asm",
    "reinterpret",
    "cast",
    "gil",
    "scoped",
    "release",
    "acquire",
    "call",
    "guard",
    "allow",
    "threads",
    "multiple",
    "contiguous",
    "exp2",
    "log2",
    "static",
    "fast",
    "safe",
    "approx",
    "int64",
    "float32",
    "bf16",
    "fp8",
    "scale",
    "bias",
    "residual",
    "norm",
    "rope",
    "softmax",
    "attention",
    "decode",
    "prefill",
    "kv",
    "page",
    "token",
    "chunk",
    "state",
    "gate",
    "beta",
    "alpha",
    "delta",
    "rule",
    "fused",
];
const SNIPPETS: &[&str] = &[
    "b_q = tl.load(p_q, boundary_check=(0, 1))",
    "acc += tl.dot(b_k, b_v, input_precision=\"ieee\")",
    "o = tl.exp2(s * 1.4426950408889634)",
    "i_t = tl.program_id(0).to(tl.int64)",
    "float4 v = *reinterpret_cast<const float4*>(src + i);",
    "py::gil_scoped_release release;",
    "#pragma unroll",
    "v += __shfl_xor_sync(0xffffffff, v, o);",
    "x = tl.load(x_ptr + offs, mask=m, other=0.0, eviction_policy=\"evict_last\")",
    "for i in tl.static_range(4):",
    "__global__ void __launch_bounds__(256) k(const float* __restrict__ x)",
    "m.def(\"copy\", &copy, py::call_guard<py::gil_scoped_release>());",
    "py.allow_threads(|| self.transfer(blocks))",
];
const SUMMARIES: &[&str] = &[
    "[Perf] fuse the gate into the chunk kernel",
    "Fix int32 overflow in varlen offsets",
    "use exp2 in the softmax of decode attention",
    "[Kernel] tune num_warps for H100",
    "Release the GIL while waiting for the transfer",
    "refactor: rename the state tensors",
    "[Bugfix] mask the tail block",
    "vectorize the KV copy with float4",
];

fn synthetic(n: usize, answers: &[String]) -> Vec<Pattern> {
    let mut rng = Lcg(0x5eed);
    let mut out: Vec<Pattern> = Vec::with_capacity(n);
    let mut seen = std::collections::HashSet::new();
    let langs = [(Lang::Python, "py"), (Lang::Cuda, "cu"), (Lang::Cpp, "cpp"), (Lang::Rust, "rs")];
    let mut i = 0usize;
    while out.len() < n {
        // The question set's answers first, then generated ids.
        let (id, lang) = match answers.get(i) {
            Some(a) => {
                let lang = langs.iter().find(|(_, s)| a.starts_with(&format!("{s}-"))).map_or(Lang::Python, |l| l.0);
                (a.clone(), lang)
            }
            None => {
                let (lang, slug_lang) = langs[(rng.next() % 4) as usize];
                let all = kidiom_miner::Mechanism::ALL;
                let mech = all[(rng.next() % all.len() as u64) as usize].name();
                let subject = rng.pick(SUBJECTS);
                let deco = format!("{}_{}", rng.pick(WORDS), rng.pick(WORDS));
                (kidiom_miner::slug(&[slug_lang, mech, subject, &deco, &format!("{}", rng.next() % 7)]), lang)
            }
        };
        i += 1;
        if !seen.insert(id.clone()) {
            continue;
        }
        let kind = if rng.next().is_multiple_of(10) && i > answers.len() { Kind::Edit } else { Kind::Usage };
        let words: Vec<&str> = (0..3).map(|_| rng.pick(WORDS)).collect();
        let mut p =
            Pattern::usage(&id, lang, "tl.load($$$ARGS)", &format!("tl.load($$$ARGS, {}=$V)", words.join("_")), &[]);
        p.kind = kind;
        p.category = Category::ALL[(rng.next() % 10) as usize];
        p.title = format!("`{}=` on `{}`", words.join("_"), rng.pick(SUBJECTS));
        let (occ, opp) = (2 + rng.next() % 200, rng.next() % 300);
        p.rationale = format!(
            "{occ} occurrences in {} files across {} corpora; {opp} sites lack it ({:.0}% adoption).",
            1 + occ / 3,
            1 + rng.next() % 4,
            occ as f64 * 100.0 / (occ + opp) as f64
        );
        p.support = vec![Support {
            corpus: "fla".into(),
            revision: "0123456789abcdef".into(),
            occurrences: occ,
            files: 1 + occ / 3,
            opportunities: opp,
        }];
        p.values = (0..1 + rng.next() % 4)
            .map(|k| ValueCount {
                value: format!("\"{}\"", rng.pick(WORDS)),
                count: 10 - k,
                resolved: None,
                literals: Vec::new(),
            })
            .collect();
        p.examples = (0..5)
            .map(|k| IdiomExample {
                corpus: "fla".into(),
                path: format!("fla/ops/{}/{}.py", rng.pick(WORDS), rng.pick(WORDS)),
                line: 10 + k,
                snippet: rng.pick(SNIPPETS).to_string(),
            })
            .collect();
        if kind == Kind::Edit {
            p.commits = (0..1 + rng.next() % 3)
                .map(|k| CommitRef {
                    id: format!("{k:040x}"),
                    summary: rng.pick(SUMMARIES).into(),
                    date: String::new(),
                })
                .collect();
        }
        p.score = (rng.next() % 1000) as f64 / 100.0;
        p.mechanism = kidiom_patterns::glossary::builtin().describe(&p);
        out.push(p);
    }
    out
}

#[derive(serde::Deserialize)]
struct Questions {
    question: Vec<Question>,
}

#[derive(serde::Deserialize)]
struct Question {
    ask: String,
    answer: String,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.first().map(|a| a.parse()).transpose()?.unwrap_or(5000);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let questions: Questions = toml::from_str(&std::fs::read_to_string(root.join("tests/search_questions.toml"))?)?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("catalog.sqlite");
    let what = match args.get(1) {
        Some(src) => {
            // A copy made by SQLite (`VACUUM INTO`), so the original is never migrated.
            let src = rusqlite::Connection::open_with_flags(src, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
            src.execute("VACUUM INTO ?1", [path.to_string_lossy()])?;
            format!("a copy of {}", args[1])
        }
        None => {
            let answers: Vec<String> = questions.question.iter().map(|q| q.answer.clone()).collect();
            let ps = synthetic(n, &answers);
            let mut cat = Catalog::open(&path)?;
            let t = Instant::now();
            let tx = cat.begin()?;
            let (usage, edit): (Vec<Pattern>, Vec<Pattern>) = ps.into_iter().partition(|p| p.kind == Kind::Usage);
            tx.replace_patterns(Kind::Usage, &usage)?;
            tx.replace_patterns(Kind::Edit, &edit)?;
            tx.commit()?;
            format!("{n} synthetic patterns (written and indexed in {:.2} s)", t.elapsed().as_secs_f64())
        }
    };
    let t = Instant::now();
    let cat = Catalog::open(&path)?;
    let opened = t.elapsed();
    let patterns = cat.stats()?.patterns;
    let filter = Filter { limit: Some(20), ..Filter::default() };
    for q in &questions.question {
        cat.search_hits(&q.ask, &filter)?;
    }
    let mut times: Vec<Duration> = Vec::new();
    for _ in 0..30 {
        for q in &questions.question {
            let t = Instant::now();
            let hits = cat.search_hits(&q.ask, &filter)?;
            times.push(t.elapsed());
            std::hint::black_box(hits);
        }
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    println!("catalog: {what}; {patterns} patterns; opened (and migrated) in {:.1} ms", ms(opened));
    println!(
        "search_hits, limit 20, {} queries x 30: median {:.2} ms, p95 {:.2} ms, max {:.2} ms",
        questions.question.len(),
        ms(at(0.5)),
        ms(at(0.95)),
        ms(at(1.0))
    );
    Ok(())
}
