//! Mining on a Ray cluster: shards of files (usage) or of commits
//! (history) that `kidiom shard` mines on the nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use indicatif::ProgressBar;
use kidiom_miner::{CorpusFile, ExtractOptions, FACTS_VERSION, FileFacts, Prefilter};
use kidiom_patterns::FileOutcome;
use kidiom_syntax::{DeviceMacros, Lang, Limits, Skip, blob_id};
use rayon::prelude::*;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::usage::{Outcome, Read, Screen, process, screen};

/// Files per usage shard, at most (`KIDIOM_SHARD_FILES`).
const SHARD_FILES: usize = 64;
/// Bytes per usage shard, about (`KIDIOM_SHARD_BYTES`): a larger file goes alone.
const SHARD_BYTES: u64 = 4 << 20;
/// Commits per history shard (`KIDIOM_SHARD_COMMITS`): consecutive ones, which share file versions.
const SHARD_COMMITS: usize = 32;
/// How long one shard may run on its node (`KIDIOM_SHARD_DEADLINE_S`).
const SHARD_DEADLINE: Duration = Duration::from_secs(1800);
/// Shards waited on at once, one thread each; the fleet driver holds them
/// until the cluster has a slot, so this only bounds this side's threads.
const MAX_IN_FLIGHT: usize = 256;

/// Mining's parsing as tasks on a Ray cluster: shards of files (usage) or
/// of commits (history) that `kidiom shard` mines on the nodes, through one
/// fleet driver (`kidiom_exec::Fleet`) per run. Tasks return facts and
/// edits; the catalog is written here, as in a local run.
pub(crate) struct Remote {
    fleet: kidiom_exec::Fleet,
    kidiom: NodeKidiom,
    pub(crate) sizes: ShardSizes,
    deadline: Duration,
    /// Added to each task's environment.
    env: BTreeMap<String, String>,
}

/// The kidiom the nodes run.
enum NodeKidiom {
    /// This binary, shipped with the jobs (kept on each node by content, so it travels once).
    Ship(PathBuf),
    /// A program the nodes have (`KIDIOM_NODE_KIDIOM`): a name on their `PATH`, or a path.
    OnNode(String),
}

/// How work is cut into shards.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShardSizes {
    pub(crate) files: usize,
    pub(crate) bytes: u64,
    pub(crate) commits: usize,
}

/// What one corpus sent to the cluster, and what it cost.
#[derive(Debug, Default, Serialize)]
pub(crate) struct ShardReport {
    pub(crate) shards: u64,
    /// Files (usage) or commits (history) in them.
    pub(crate) items: u64,
    /// The nodes that ran them.
    pub(crate) nodes: BTreeSet<String>,
    /// Summed over the shards: `kidiom shard`'s own time (the mining).
    pub(crate) work_seconds: f64,
    /// Summed: the tasks' time on their nodes (files written, kidiom started, the mining).
    pub(crate) node_seconds: f64,
    /// Summed: the time shards waited in the driver for a free slot.
    pub(crate) queued_seconds: f64,
    /// Summed: each shard's time from admission to answer, less its mining and
    /// its wait: dispatch, shipping, the process start and the results' way back.
    pub(crate) overhead_seconds: f64,
    /// Shards whose first worker died (retried once).
    pub(crate) retried: u64,
    /// Starting the fleet driver and joining the cluster (0 when the run had already).
    pub(crate) connect_seconds: f64,
    /// From sending the first shard to the last answer.
    pub(crate) seconds: f64,
}

/// One shard: its job and the files the job names.
pub(crate) struct Shard {
    /// What it holds, for messages (`64 files from a/b.py`, `32 commits 1a2b..3c4d`).
    pub(crate) label: String,
    pub(crate) job: ShardJob,
    /// Relative path (under the task's scratch directory) -> content.
    pub(crate) files: BTreeMap<String, Vec<u8>>,
}

/// The job file a shard's `kidiom shard` reads (`job.json`).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub(crate) enum ShardJob {
    /// Mine files for usage facts.
    Facts(FactsJob),
    /// Mine commits for concrete edits.
    History(super::history::HistoryJob),
}

/// What `kidiom shard` prints: its own time and the shard's result.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ShardOutput<T> {
    pub(crate) seconds: f64,
    pub(crate) result: T,
}

/// A usage shard: files to mine exactly as the local run mines each one,
/// under the run's device macros and limits. Contents travel beside the job
/// file (`input`, relative to its directory).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct FactsJob {
    /// The driver's facts version: a node's kidiom must extract the same way.
    pub(crate) facts_version: u32,
    pub(crate) max_bytes: u64,
    pub(crate) max_depth: usize,
    /// The corpus's device macros (they decide which C++ functions are kernels).
    pub(crate) device_macros: DeviceMacros,
    pub(crate) files: Vec<FactsFile>,
}

/// One file of a usage shard.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct FactsFile {
    /// Its path in the corpus.
    pub(crate) path: String,
    pub(crate) lang: Lang,
    /// Its content, relative to the job file.
    pub(crate) input: String,
}

/// A usage shard's result: each file's outcome, in the job's order.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct FactsResult {
    pub(crate) files: Vec<FactsOutcome>,
}

/// One file's outcome ([`FileOutcome`] on the wire).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct FactsOutcome {
    pub(crate) path: String,
    #[serde(flatten)]
    pub(crate) outcome: WireOutcome,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub(crate) enum WireOutcome {
    Parsed { facts: Box<FileFacts> },
    NoKernels,
    Skipped { skip: Skip },
}

impl From<FileOutcome> for WireOutcome {
    fn from(o: FileOutcome) -> WireOutcome {
        match o {
            FileOutcome::Parsed(facts) => WireOutcome::Parsed { facts: Box::new(facts) },
            FileOutcome::NoKernels => WireOutcome::NoKernels,
            FileOutcome::Skipped(skip) => WireOutcome::Skipped { skip },
        }
    }
}

impl From<WireOutcome> for FileOutcome {
    fn from(o: WireOutcome) -> FileOutcome {
        match o {
            WireOutcome::Parsed { facts } => FileOutcome::Parsed(*facts),
            WireOutcome::NoKernels => FileOutcome::NoKernels,
            WireOutcome::Skipped { skip } => FileOutcome::Skipped(skip),
        }
    }
}

/// A finished shard.
struct Done<T> {
    result: T,
    /// `kidiom shard`'s own time.
    work: f64,
    reply: kidiom_exec::CommandReply,
}

impl ShardReport {
    fn add(&mut self, work: f64, r: &kidiom_exec::CommandReply) {
        self.work_seconds += work;
        self.node_seconds += r.seconds;
        self.queued_seconds += r.queued;
        self.overhead_seconds += (r.wall - r.queued - work).max(0.0);
        self.retried += u64::from(r.attempts > 1);
        if let Some(n) = &r.node {
            self.nodes.insert(n.clone());
        }
    }
}

impl Remote {
    /// The remote side of `executor`: `None` for the local one. Settings
    /// beyond the address come from the environment (docs/RAY.md):
    /// `KIDIOM_NODE_KIDIOM` (run that kidiom on the nodes instead of
    /// shipping this one), `KIDIOM_SHARD_FILES`, `KIDIOM_SHARD_BYTES`,
    /// `KIDIOM_SHARD_COMMITS`, `KIDIOM_SHARD_DEADLINE_S`.
    pub(crate) fn for_executor(executor: &kidiom_exec::Executor) -> Result<Option<std::sync::Arc<Remote>>> {
        let kidiom_exec::Executor::Ray { address } = executor else { return Ok(None) };
        let cwd = std::env::current_dir().context("reading the current directory")?;
        // the driver is the harness's `fleet` command: the harness of this project, else
        // of the checkout this kidiom was built from
        let built_from = Path::new(env!("CARGO_MANIFEST_DIR"));
        let harness = kidiom_exec::find_harness([cwd.as_path(), built_from]).with_context(|| {
            format!(
                "mining on Ray needs the harness (kernels/harness) for its driver: none in {} or {}; set KIDIOM_HARNESS",
                cwd.display(),
                built_from.display()
            )
        })?;
        let fleet = kidiom_exec::Fleet::new(kidiom_exec::find_python(&cwd), harness, address.clone());
        let kidiom = match std::env::var("KIDIOM_NODE_KIDIOM").ok().filter(|s| !s.is_empty()) {
            Some(program) => NodeKidiom::OnNode(program),
            None => NodeKidiom::Ship(std::env::current_exe().context("locating this kidiom binary to ship it")?),
        };
        let num = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok()).filter(|n| *n > 0);
        let sizes = ShardSizes {
            files: num("KIDIOM_SHARD_FILES").map_or(SHARD_FILES, |n| n as usize),
            bytes: num("KIDIOM_SHARD_BYTES").unwrap_or(SHARD_BYTES),
            commits: num("KIDIOM_SHARD_COMMITS").map_or(SHARD_COMMITS, |n| n as usize),
        };
        let deadline = num("KIDIOM_SHARD_DEADLINE_S").map_or(SHARD_DEADLINE, Duration::from_secs);
        // one task holds one CPU: its kidiom mines on one thread
        let mut env = BTreeMap::from([("RAYON_NUM_THREADS".to_string(), "1".to_string())]);
        if let Ok(v) = std::env::var("KIDIOM_SHARD_CRASH") {
            // test seam: forwarded to the nodes (`kidiom shard` crashes on a shard that names it)
            env.insert("KIDIOM_SHARD_CRASH".into(), v);
        }
        Ok(Some(std::sync::Arc::new(Remote { fleet, kidiom, sizes, deadline, env })))
    }

    /// Runs `shards` on the cluster, all in flight at once, and hands each
    /// result to `take` on this thread as it comes (shard index, result).
    /// The first failure (a shard's, or `take`'s) cancels the others and is
    /// the error.
    pub(crate) fn run<T: DeserializeOwned + Send>(
        &self,
        what: &str,
        shards: Vec<Shard>,
        mut take: impl FnMut(usize, T) -> Result<()>,
    ) -> Result<ShardReport> {
        let n = shards.len();
        let mut report = ShardReport { shards: n as u64, ..ShardReport::default() };
        if n == 0 {
            return Ok(report);
        }
        // connecting (starting the driver, joining the cluster) is timed apart from the shards
        let started = Instant::now();
        self.fleet
            .hello()
            .map_err(|e| anyhow::anyhow!("{what}: cannot reach the Ray cluster: {}", condense(&e.to_string())))?;
        report.connect_seconds = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let queue: Vec<Mutex<Option<Shard>>> = shards.into_iter().map(|s| Mutex::new(Some(s))).collect();
        let next = AtomicUsize::new(0);
        let cancel = AtomicBool::new(false);
        let (tx, rx) = mpsc::channel::<(usize, Result<Done<T>>)>();
        std::thread::scope(|scope| -> Result<()> {
            for _ in 0..n.min(MAX_IN_FLIGHT) {
                let tx = tx.clone();
                let (queue, next, cancel) = (&queue, &next, &cancel);
                scope.spawn(move || {
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        let Some(slot) = queue.get(i) else { break };
                        let Some(shard) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() else { continue };
                        let r = if cancel.load(Ordering::SeqCst) {
                            Err(anyhow::anyhow!("cancelled"))
                        } else {
                            self.run_one(i, n, what, shard, cancel)
                        };
                        if tx.send((i, r)).is_err() {
                            break;
                        }
                    }
                });
            }
            drop(tx);
            let mut failed: Option<anyhow::Error> = None;
            for (i, r) in rx {
                if failed.is_some() {
                    continue; // the others end cancelled; the first failure is the one to tell
                }
                let r = r.and_then(|d| {
                    report.add(d.work, &d.reply);
                    take(i, d.result)
                });
                if let Err(e) = r {
                    cancel.store(true, Ordering::SeqCst);
                    failed = Some(e);
                }
            }
            failed.map_or(Ok(()), Err)
        })?;
        report.seconds = started.elapsed().as_secs_f64();
        Ok(report)
    }

    fn run_one<T: DeserializeOwned>(
        &self,
        i: usize,
        n: usize,
        what: &str,
        shard: Shard,
        cancel: &AtomicBool,
    ) -> Result<Done<T>> {
        let name = format!("{what} shard {} of {n} ({})", i + 1, shard.label);
        let mut files = shard.files;
        files.insert("job.json".into(), serde_json::to_vec(&shard.job).context("writing a shard's job")?);
        let mut executables = BTreeMap::new();
        let program = match &self.kidiom {
            NodeKidiom::Ship(path) => {
                executables.insert("kidiom".to_string(), path.clone());
                "{base}/kidiom".to_string()
            }
            NodeKidiom::OnNode(program) => program.clone(),
        };
        let job = kidiom_exec::CommandJob {
            argv: vec![program, "shard".into(), "{base}/job.json".into()],
            files,
            executables,
            env: self.env.clone(),
            cpus: 1.0,
            deadline: self.deadline,
        };
        let reply = self
            .fleet
            .command(job, cancel)
            .map_err(|e| anyhow::anyhow!("{name}: the Ray driver failed: {}", condense(&e.to_string())))?;
        if !reply.succeeded() {
            let on = reply.node.as_deref().map(|n| format!(" on {n}")).unwrap_or_default();
            anyhow::bail!("{name} failed{on}: {}", why_failed(&reply));
        }
        let line = reply.stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
        let out: ShardOutput<T> =
            serde_json::from_str(line).with_context(|| format!("{name}: its output is not a shard result"))?;
        Ok(Done { result: out.result, work: out.seconds, reply })
    }
}

/// A driver's error on one line: it quotes the driver's stderr, of which
/// the first line and the last two tell.
fn condense(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    match lines.as_slice() {
        [first, .., a, b] if lines.len() > 3 => format!("{first} / ... / {a} / {b}"),
        _ => lines.join(" / "),
    }
}

/// Why a shard gave no result, in a line: the fleet's reason, or how
/// `kidiom shard` ended and the last of what it said.
fn why_failed(r: &kidiom_exec::CommandReply) -> String {
    let said: Vec<&str> = r.stderr_tail.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let said = said.iter().rev().take(2).rev().copied().collect::<Vec<_>>().join(" / ");
    let said = if said.chars().count() > 600 { said.chars().take(600).collect::<String>() + "..." } else { said };
    let how = if let Some(e) = &r.error {
        e.clone()
    } else if r.timed_out {
        "killed at its deadline".into()
    } else {
        match r.rc {
            Some(c) if c < 0 => format!("kidiom shard was killed by signal {}", -c),
            Some(c) => format!("kidiom shard exited with {c}"),
            None => "kidiom shard was killed".into(),
        }
    };
    if said.is_empty() { how } else { format!("{how}: {said}") }
}

/// `kidiom shard`: mines one shard on this node; `dir` holds its files.
pub(crate) fn run_shard(job: ShardJob, dir: &Path) -> Result<serde_json::Value> {
    let t = Instant::now();
    let result = match job {
        ShardJob::Facts(j) => serde_json::to_value(mine_facts(j, dir)?)?,
        ShardJob::History(j) => serde_json::to_value(super::history::mine_shard(j)?)?,
    };
    Ok(serde_json::to_value(ShardOutput { seconds: t.elapsed().as_secs_f64(), result })?)
}

/// A usage shard, on a node: each file as the local run (`usage`) mines it.
fn mine_facts(job: FactsJob, dir: &Path) -> Result<FactsResult> {
    if job.facts_version != FACTS_VERSION {
        anyhow::bail!(
            "this kidiom extracts facts v{FACTS_VERSION}, the job needs v{} (run the driver's kidiom: leave KIDIOM_NODE_KIDIOM unset to ship it)",
            job.facts_version
        );
    }
    let limits = Limits { max_bytes: job.max_bytes, max_depth: job.max_depth };
    let prefilter = Prefilter::new(&job.device_macros);
    let opts = ExtractOptions { device_macros: job.device_macros };
    let inputs = job
        .files
        .iter()
        .map(|f| {
            let p = dir.join(&f.input);
            std::fs::read(&p).map(|b| (f, b)).with_context(|| format!("reading {} ({})", p.display(), f.path))
        })
        .collect::<Result<Vec<_>>>()?;
    let files = inputs
        .into_par_iter()
        .map(|(f, bytes)| FactsOutcome {
            path: f.path.clone(),
            outcome: process(f.lang, &bytes, &limits, &prefilter, &opts).into(),
        })
        .collect();
    Ok(FactsResult { files })
}

/// The outcomes of `texts` with the parsing on the cluster: what the bytes
/// decide (skips, no kernel marker) is decided here, the rest goes out in
/// shards; each outcome lands at its file's place, as the local run's do.
pub(crate) fn remote_outcomes<'f>(
    remote: &Remote,
    texts: Vec<Read<'f>>,
    limits: &Limits,
    prefilter: &Prefilter,
    macros: &DeviceMacros,
    pb: &ProgressBar,
) -> Result<(Vec<Outcome<'f>>, ShardReport)> {
    let mut done: Vec<Option<Outcome<'f>>> = Vec::with_capacity(texts.len());
    let mut todo: Vec<(usize, &'f CorpusFile, String, Vec<u8>)> = Vec::new();
    for (i, Read { file: f, bytes }) in texts.into_iter().enumerate() {
        match bytes {
            Err(skip) => done.push(Some(Outcome {
                file: f,
                blob: f.blob.clone().unwrap_or_default(),
                outcome: FileOutcome::Skipped(skip),
            })),
            Ok(bytes) => {
                let blob = f.blob.clone().unwrap_or_else(|| blob_id(&bytes));
                match screen(f.lang, &bytes, limits, prefilter) {
                    Screen::Decided(outcome) => done.push(Some(Outcome { file: f, blob, outcome })),
                    Screen::Parse(_) => {
                        done.push(None);
                        todo.push((i, f, blob, bytes));
                    }
                }
            }
        }
    }
    pb.inc((done.len() - todo.len()) as u64);
    let items = todo.len() as u64;
    // consecutive files (listing order: neighbours in the tree), cut by count and size
    let mut groups: Vec<Vec<(usize, &'f CorpusFile, String)>> = Vec::new();
    let mut shards: Vec<Shard> = Vec::new();
    let mut members: Vec<(usize, &'f CorpusFile, String)> = Vec::new();
    let mut job_files: Vec<FactsFile> = Vec::new();
    let mut contents: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut size = 0u64;
    let mut flush = |members: &mut Vec<(usize, &'f CorpusFile, String)>,
                     job_files: &mut Vec<FactsFile>,
                     contents: &mut BTreeMap<String, Vec<u8>>| {
        if members.is_empty() {
            return;
        }
        let first = members.first().map(|m| m.1.path.as_str()).unwrap_or("");
        let label =
            if members.len() == 1 { first.to_string() } else { format!("{} files from {first}", members.len()) };
        shards.push(Shard {
            label,
            job: ShardJob::Facts(FactsJob {
                facts_version: FACTS_VERSION,
                max_bytes: limits.max_bytes,
                max_depth: limits.max_depth,
                device_macros: macros.clone(),
                files: std::mem::take(job_files),
            }),
            files: std::mem::take(contents),
        });
        groups.push(std::mem::take(members));
    };
    for (i, f, blob, bytes) in todo {
        let len = bytes.len() as u64;
        if !members.is_empty() && (members.len() >= remote.sizes.files || size + len > remote.sizes.bytes) {
            flush(&mut members, &mut job_files, &mut contents);
            size = 0;
        }
        let input = format!("in/{}", members.len());
        job_files.push(FactsFile { path: f.path.clone(), lang: f.lang, input: input.clone() });
        contents.insert(input, bytes);
        members.push((i, f, blob));
        size += len;
    }
    flush(&mut members, &mut job_files, &mut contents);
    let mut report = remote.run("usage", shards, |k, r: FactsResult| {
        let group = groups.get(k).ok_or_else(|| anyhow::anyhow!("an answer to no shard ({k})"))?;
        if r.files.len() != group.len() {
            anyhow::bail!("usage shard {} answered {} files of {}", k + 1, r.files.len(), group.len());
        }
        for ((i, f, blob), got) in group.iter().zip(r.files) {
            if got.path != f.path {
                anyhow::bail!("usage shard {} answered {} for {}", k + 1, got.path, f.path);
            }
            if let Some(slot) = done.get_mut(*i) {
                *slot = Some(Outcome { file: f, blob: blob.clone(), outcome: got.outcome.into() });
            }
        }
        pb.inc(group.len() as u64);
        Ok(())
    })?;
    report.items = items;
    let outcomes = done
        .into_iter()
        .map(|d| d.ok_or_else(|| anyhow::anyhow!("a file came back from no shard")))
        .collect::<Result<Vec<_>>>()?;
    Ok((outcomes, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(rc: Option<i32>, error: Option<&str>, stderr: &str) -> kidiom_exec::CommandReply {
        kidiom_exec::CommandReply {
            rc,
            error: error.map(String::from),
            stderr_tail: stderr.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_failed_shard_says_how_it_ended_and_the_last_it_said() {
        let r = reply(Some(2), None, "warming up\n\nkidiom: error: reading in/3: gone\n");
        assert_eq!(why_failed(&r), "kidiom shard exited with 2: warming up / kidiom: error: reading in/3: gone");
        assert_eq!(why_failed(&reply(Some(-9), None, "")), "kidiom shard was killed by signal 9");
        let died = reply(None, Some("worker died twice: attempt 1: X; attempt 2: Y"), "");
        assert_eq!(why_failed(&died), "worker died twice: attempt 1: X; attempt 2: Y");
        let late = kidiom_exec::CommandReply { timed_out: true, ..Default::default() };
        assert_eq!(why_failed(&late), "killed at its deadline");
        let long = "x".repeat(1000);
        assert!(why_failed(&reply(Some(1), None, &long)).ends_with("x..."));
    }

    #[test]
    fn a_drivers_error_fits_on_one_line() {
        assert_eq!(
            condense("cannot start Ray\n  \nTraceback\n  a\n  b\nRuntimeError: no"),
            "cannot start Ray / ... / b / RuntimeError: no"
        );
        assert_eq!(condense("one\ntwo"), "one / two");
    }

    #[test]
    fn outcomes_cross_the_wire_unchanged() {
        let facts = kidiom_miner::extract(
            Lang::Python,
            "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(a, b):\n    tl.store(b, tl.dot(a, a, input_precision=\"ieee\"))\n",
            &ExtractOptions::default(),
        )
        .unwrap();
        for o in [FileOutcome::Parsed(facts), FileOutcome::NoKernels, FileOutcome::Skipped(Skip::TooDeep(7))] {
            let wire = FactsOutcome { path: "a.py".into(), outcome: o.clone().into() };
            let back: FactsOutcome = serde_json::from_str(&serde_json::to_string(&wire).unwrap()).unwrap();
            assert_eq!(back.path, "a.py");
            assert_eq!(FileOutcome::from(back.outcome), o);
        }
    }
}
