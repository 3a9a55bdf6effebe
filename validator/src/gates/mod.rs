//! The gates, in order: syntax, static, correctness, speed. A failed gate
//! stops the later ones; every gate that ran leaves a [`GateRecord`].
//!
//! Rules enforced here rather than by convention:
//! - the contract (manifest, reference, tolerances, shapes, harness) always
//!   comes from the baseline tree, copied into a temporary directory; the
//!   candidate contributes only its kernel source file, passed to the harness
//!   with `--source`;
//! - a rewrite touching a contract file is rejected at the static gate;
//! - numeric flags may change only under a `precision` pattern;
//! - speed is compared only within one harness process (interleaved A/B);
//! - a speedup beyond the hardware's bound or implausible for the size of
//!   the change is flagged and never accepted.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kidiom_miner::{Lang, blob_id};
use kidiom_patterns::Category;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::backend::cpu::{StaticMetrics, delta};
use crate::backend::python::{Harness, HarnessRun, HarnessStatus, find_python, tail};
use crate::error::{Error, Result};
use crate::evidence::{EVIDENCE_FORMAT, Evidence, GateRecord, GateStatus};
use crate::manifest::{Kernels, Manifest};
use crate::patch::{self, FilePatch};
use crate::scan::{FlagChange, flag_changes};
use crate::verdict::{Verdict, VerdictKind};

/// The gates, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Gate {
    /// The rewritten file parses with no new error nodes.
    Syntax,
    /// Contract and numeric-flag scan of the diff; ahead-of-time compile before/after.
    Static,
    /// Against the float64 reference over the shape matrix, several seeds.
    Correctness,
    /// Interleaved A/B on a GPU.
    Speed,
}

impl Gate {
    /// Every gate, in order.
    pub const ALL: [Gate; 4] = [Gate::Syntax, Gate::Static, Gate::Correctness, Gate::Speed];

    /// The lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Gate::Syntax => "syntax",
            Gate::Static => "static",
            Gate::Correctness => "correctness",
            Gate::Speed => "speed",
        }
    }
}

impl std::fmt::Display for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where kernels run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// A GPU when the harness finds one, else the CPU.
    #[default]
    Auto,
    /// The CPU (Triton's interpreter, the CUDA emulation): no speed gate.
    Cpu,
    /// A CUDA GPU; an error when there is none.
    Cuda,
}

impl Device {
    /// The name given to the harness's `--device`.
    pub fn name(self) -> &'static str {
        match self {
            Device::Auto => "auto",
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
        }
    }

    /// Parses `auto`, `cpu` or `cuda`.
    pub fn from_name(s: &str) -> Option<Device> {
        [Device::Auto, Device::Cpu, Device::Cuda].into_iter().find(|d| d.name() == s)
    }
}

/// One rewrite to validate: a unified diff against a file under the root.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateInput {
    /// The candidate's id.
    pub id: String,
    /// Its pattern.
    pub pattern_id: String,
    /// The pattern's category; numeric flags may change only under `precision`.
    pub category: Option<Category>,
    /// The target, relative to the root.
    pub path: String,
    /// Git blob id of the file the diff applies to.
    pub base_blob: String,
    /// Git blob id of the rewritten file.
    pub result_blob: String,
    /// The unified diff.
    pub diff: String,
}

impl CandidateInput {
    /// From a stored candidate; the category is taken from its provenance
    /// unless `category` names one (the pattern's, from the catalog).
    pub fn from_candidate(c: &kidiom_patterns::Candidate, category: Option<Category>) -> CandidateInput {
        let category = category.or_else(|| c.provenance["category"].as_str().and_then(Category::from_name));
        CandidateInput {
            id: c.id.clone(),
            pattern_id: c.pattern_id.clone(),
            category,
            path: c.path.clone(),
            base_blob: c.base_blob.clone(),
            result_blob: c.result_blob.clone(),
            diff: c.diff.clone(),
        }
    }
}

/// How far a precision rewrite's error curve may sit above the baseline's
/// at a length and still count as "no worse" (relative, plus an absolute
/// floor for errors near float rounding).
const CURVE_RTOL: f64 = 0.05;
const CURVE_ATOL: f64 = 1e-7;
/// A speedup beyond this for an edit of at most [`SMALL_EDIT_LINES`] changed lines is flagged.
const SMALL_EDIT_SPEEDUP: f64 = 3.0;
const SMALL_EDIT_LINES: usize = 3;
/// Any speedup beyond this is flagged.
const MAX_PLAUSIBLE_SPEEDUP: f64 = 5.0;

/// Options of a validation run.
#[derive(Debug, Clone)]
pub struct ValidatorBuilder {
    root: PathBuf,
    kernels_dir: String,
    python: Option<PathBuf>,
    device: Device,
    timeout: Duration,
    seeds: u32,
    seed: Option<u64>,
    consistency: bool,
    bench_iters: u32,
}

impl ValidatorBuilder {
    /// Validation of rewrites under `root` (the directory holding `kernels/`).
    pub fn new(root: impl Into<PathBuf>) -> ValidatorBuilder {
        ValidatorBuilder {
            root: root.into(),
            kernels_dir: "kernels".into(),
            python: None,
            device: Device::Auto,
            timeout: Duration::from_secs(600),
            seeds: 3,
            seed: None,
            consistency: true,
            bench_iters: 50,
        }
    }

    /// The kernels directory, relative to the root (default `kernels`).
    pub fn kernels_dir(&mut self, dir: impl Into<String>) -> &mut Self {
        self.kernels_dir = dir.into();
        self
    }

    /// The Python interpreter (default: `$KIDIOM_PYTHON`, `.venv/bin/python`, `python3`).
    pub fn python(&mut self, python: Option<PathBuf>) -> &mut Self {
        self.python = python;
        self
    }

    /// Where kernels run.
    pub fn device(&mut self, device: Device) -> &mut Self {
        self.device = device;
        self
    }

    /// The time limit of one candidate, all its subprocesses together.
    pub fn timeout(&mut self, timeout: Duration) -> &mut Self {
        self.timeout = timeout;
        self
    }

    /// Fresh seeds of the correctness gate (default 3).
    pub fn seeds(&mut self, seeds: u32) -> &mut Self {
        self.seeds = seeds.max(1);
        self
    }

    /// A fixed base seed (default: fresh per candidate).
    pub fn seed(&mut self, seed: Option<u64>) -> &mut Self {
        self.seed = seed;
        self
    }

    /// Whether the correctness gate also checks prefill(T) + decode(M) == prefill(T + M) (default on).
    pub fn consistency(&mut self, yes: bool) -> &mut Self {
        self.consistency = yes;
        self
    }

    /// Timed iterations per variant on a GPU (default 50).
    pub fn bench_iters(&mut self, iters: u32) -> &mut Self {
        self.bench_iters = iters.max(1);
        self
    }

    /// Reads the manifests of the baseline tree.
    pub fn build(&self) -> Result<Validator> {
        let kernels = Kernels::load(&self.root, &self.kernels_dir)?;
        let python = self.python.clone().unwrap_or_else(|| find_python(&self.root));
        Ok(Validator {
            opts: self.clone(),
            kernels,
            python,
            commit: git_head(&self.root),
            compiled: Mutex::new(HashMap::new()),
        })
    }
}

/// Validates candidates against the baseline tree under its root.
#[derive(Debug)]
pub struct Validator {
    opts: ValidatorBuilder,
    kernels: Kernels,
    python: PathBuf,
    commit: Option<String>,
    /// Baseline compiles, by kernel name and baseline blob.
    compiled: Mutex<HashMap<(String, String), HarnessRun>>,
}

fn git_head(root: &Path) -> Option<String> {
    let out = std::process::Command::new("git").args(["rev-parse", "HEAD"]).current_dir(root).output().ok()?;
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish() % 1_000_000_007
}

/// Copies a directory tree, leaving out caches and hidden entries.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).map_err(|e| Error::io(to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| Error::io(from, e))? {
        let entry = entry.map_err(|e| Error::io(from, e))?;
        let name = entry.file_name();
        let s = name.to_string_lossy();
        if s.starts_with('.') || s == "__pycache__" {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(&name));
        let ft = entry.file_type().map_err(|e| Error::io(&src, e))?;
        if ft.is_dir() {
            copy_tree(&src, &dst)?;
        } else if ft.is_file() {
            std::fs::copy(&src, &dst).map_err(|e| Error::io(&src, e))?;
        }
    }
    Ok(())
}

/// One touched file: its baseline and candidate texts.
struct Touched {
    path: String,
    base: String,
    cand: String,
}

/// The state of one validation as the gates run.
struct Run<'a> {
    v: &'a Validator,
    c: &'a CandidateInput,
    started: Instant,
    records: Vec<GateRecord>,
    kernel: Option<Manifest>,
    seeds: Vec<u64>,
    flags: Vec<String>,
    notes: Vec<String>,
}

impl Run<'_> {
    fn remaining(&self) -> Duration {
        self.v.opts.timeout.saturating_sub(self.started.elapsed())
    }

    fn finish(self, verdict: Verdict) -> Evidence {
        let mut verdict = verdict;
        verdict.flags.extend(self.flags);
        if verdict.kind == VerdictKind::Accepted && !verdict.flags.is_empty() {
            // a flagged result is never accepted
            verdict = Verdict {
                kind: VerdictKind::Rejected,
                gate: Some(Gate::Speed),
                reason: format!("flagged for review: {}", verdict.flags.join("; ")),
                log: None,
                flags: verdict.flags,
            };
        }
        if !self.notes.is_empty() {
            verdict.reason = format!("{} ({})", verdict.reason, self.notes.join("; "));
        }
        Evidence {
            format: EVIDENCE_FORMAT,
            candidate: self.c.id.clone(),
            pattern: self.c.pattern_id.clone(),
            category: self.c.category.map(|c| c.name().to_string()),
            target: self.c.path.clone(),
            kernel: self.kernel.map(|m| m.name),
            verdict,
            gates: self.records,
            device: self.v.opts.device.name().to_string(),
            commit: self.v.commit.clone(),
            seeds: self.seeds,
            started_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
                .saturating_sub(self.started.elapsed().as_secs()),
            seconds: self.started.elapsed().as_secs_f64(),
            validator: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// Numbers of a harness run for a record: device, versions, command.
fn stamp(rec: &mut GateRecord, run: &HarnessRun) {
    if rec.device.is_none() {
        rec.device = run.json["device"].as_str().map(str::to_string);
    }
    if rec.versions.is_null() {
        rec.versions = run.json["versions"].clone();
    }
    rec.commands.push(run.process.command.clone());
}

fn fmt_e(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.2e}")).unwrap_or_else(|| "?".into())
}

/// Worst numbers of a check: per output, the largest rel_l2, max_abs_rel and worst-slice rel_l2.
fn worst_errors(check: &Value) -> Value {
    let mut worst: serde_json::Map<String, Value> = Default::default();
    for case in check["cases"].as_array().into_iter().flatten() {
        for (name, m) in case["outputs"].as_object().into_iter().flatten() {
            let num = |v: &Value| v.as_f64().or_else(|| v.as_str().map(|_| f64::INFINITY));
            let e = worst
                .entry(name.clone())
                .or_insert_with(|| json!({"rel_l2": 0.0, "max_abs_rel": 0.0, "slice_rel_l2": 0.0, "nonfinite": 0}));
            for (key, src) in [
                ("rel_l2", &m["rel_l2"]),
                ("max_abs_rel", &m["max_abs_rel"]),
                ("slice_rel_l2", &m["worst_slice"]["rel_l2"]),
            ] {
                let v = num(src).unwrap_or(f64::INFINITY);
                if v > e[key].as_f64().unwrap_or(0.0) || !v.is_finite() {
                    e[key] = if v.is_finite() { json!(v) } else { json!("inf") };
                }
            }
            let nf = m["nonfinite"].as_i64().unwrap_or(0) + e["nonfinite"].as_i64().unwrap_or(0);
            e["nonfinite"] = json!(nf);
        }
    }
    Value::Object(worst)
}

/// The curve comparison of a precision rewrite: `Ok(summary)` or `Err(reason)`.
fn judge_curve(base: &Value, cand: &Value) -> std::result::Result<String, String> {
    let points = |v: &Value| -> Vec<(i64, f64)> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| Some((p["T"].as_i64()?, p["rel_l2"].as_f64().unwrap_or(f64::INFINITY))))
            .collect()
    };
    let (b, c) = (points(base), points(cand));
    if b.is_empty() || b.len() != c.len() || b.iter().zip(&c).any(|(x, y)| x.0 != y.0) {
        return Err(format!("error curves do not line up (baseline {} points, candidate {})", b.len(), c.len()));
    }
    let mut parts = Vec::new();
    for ((t, eb), (_, ec)) in b.iter().zip(&c) {
        parts.push(format!("T={t}: {eb:.2e} -> {ec:.2e}"));
        // NaN compares false: it is never "no worse"
        let no_worse = *ec <= eb * (1.0 + CURVE_RTOL) + CURVE_ATOL;
        if !no_worse {
            return Err(format!("error at T={t} is worse than the baseline: {ec:.2e} > {eb:.2e}"));
        }
    }
    let ((t, eb), (_, ec)) = (b[b.len() - 1], c[c.len() - 1]);
    let better = ec < eb;
    if !better {
        return Err(format!("error at the longest T={t} is not better than the baseline: {ec:.2e} >= {eb:.2e}"));
    }
    Ok(format!("error curve improved: {}", parts.join(", ")))
}

impl Validator {
    /// The kernels of the baseline tree.
    pub fn kernels(&self) -> &Kernels {
        &self.kernels
    }

    /// The Python interpreter the harness runs under.
    pub fn python(&self) -> &Path {
        &self.python
    }

    /// Runs the gates on one candidate. Candidate failures are verdicts;
    /// `Err` only when the validation itself could not be set up (the
    /// temporary tree could not be written).
    pub fn validate(&self, c: &CandidateInput) -> Result<Evidence> {
        let mut run = Run {
            v: self,
            c,
            started: Instant::now(),
            records: Vec::new(),
            kernel: None,
            seeds: Vec::new(),
            flags: Vec::new(),
            notes: Vec::new(),
        };
        let verdict = self.gates(&mut run)?;
        Ok(run.finish(verdict))
    }

    /// Baseline and candidate texts of every file the diff touches.
    fn texts(&self, run: &mut Run<'_>, files: &[FilePatch]) -> std::result::Result<Vec<Touched>, String> {
        let mut out = Vec::new();
        for f in files {
            let abs = self.opts.root.join(&f.path);
            let current = match std::fs::read(&abs) {
                Ok(b) => String::from_utf8(b).map_err(|_| format!("{} is not UTF-8", f.path))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                Err(e) => return Err(format!("reading {}: {e}", f.path)),
            };
            let blob = blob_id(current.as_bytes());
            let primary = f.path == run.c.path;
            let (base, cand) = if primary && blob == run.c.result_blob && blob != run.c.base_blob {
                // applied with --write: the file on disk is the candidate
                run.notes.push("validated against the file before `apply --write`".into());
                (patch::apply(&current, f, true).map_err(|e| e.to_string())?, current)
            } else {
                if primary && blob != run.c.base_blob {
                    run.notes.push(format!("{} changed since the candidate was proposed", f.path));
                }
                let cand = patch::apply(&current, f, false).map_err(|e| format!("stale candidate: {e}"))?;
                (current, cand)
            };
            out.push(Touched { path: f.path.clone(), base, cand });
        }
        Ok(out)
    }

    fn gates(&self, run: &mut Run<'_>) -> Result<Verdict> {
        let c = run.c;
        let files = match patch::parse(&c.diff) {
            Ok(f) if !f.is_empty() => f,
            Ok(_) => return Ok(Verdict::error(None, "the candidate's diff is empty", "")),
            Err(e) => return Ok(Verdict::error(None, e.to_string(), "")),
        };
        let touched = match self.texts(run, &files) {
            Ok(t) => t,
            Err(e) => return Ok(Verdict::error(None, e, "")),
        };

        // 1. syntax
        let t0 = Instant::now();
        let mut rec = GateRecord::new(Gate::Syntax, GateStatus::Passed, "");
        let mut counts = serde_json::Map::new();
        let mut worse = Vec::new();
        for t in &touched {
            let Some(lang) = Lang::from_path(Path::new(&t.path)) else {
                counts.insert(t.path.clone(), json!({"parsed": false, "reason": "no parser for this file type"}));
                continue;
            };
            match (kidiom_rewriter::parse_errors(lang, &t.base), kidiom_rewriter::parse_errors(lang, &t.cand)) {
                (Ok(b), Ok(a)) => {
                    counts.insert(t.path.clone(), json!({"language": format!("{lang:?}").to_lowercase(), "error_nodes_before": b, "error_nodes_after": a}));
                    if a > b {
                        worse.push(format!("{}: {b} -> {a} error nodes", t.path));
                    }
                }
                (_, Err(e)) | (Err(e), _) => worse.push(format!("{}: does not parse ({e})", t.path)),
            }
        }
        rec.metrics = Value::Object(counts);
        rec.seconds = t0.elapsed().as_secs_f64();
        if !worse.is_empty() {
            rec.status = GateStatus::Failed;
            rec.summary = worse.join("; ");
            let reason = format!("new parse errors: {}", rec.summary);
            run.records.push(rec);
            return Ok(Verdict::rejected(Gate::Syntax, reason));
        }
        rec.summary = "no new error nodes".into();
        run.records.push(rec);

        // 2. static: contract, numeric flags, ahead-of-time compile
        let t0 = Instant::now();
        let mut rec = GateRecord::new(Gate::Static, GateStatus::Passed, "");
        let contract: Vec<&str> =
            touched.iter().map(|t| t.path.as_str()).filter(|p| self.kernels.is_contract(p)).collect();
        if !contract.is_empty() {
            rec.status = GateStatus::Failed;
            rec.summary = format!("touches the frozen contract: {}", contract.join(", "));
            rec.metrics = json!({"contract_files": contract});
            rec.seconds = t0.elapsed().as_secs_f64();
            let reason = rec.summary.clone();
            run.records.push(rec);
            return Ok(Verdict::rejected(Gate::Static, reason));
        }
        let (mut removed, mut added) = (Vec::new(), Vec::new());
        for f in &files {
            let (r, a) = f.changed_lines();
            removed.extend(r);
            added.extend(a);
        }
        let changed_lines = removed.len().max(added.len());
        let flags: Vec<FlagChange> = flag_changes(&removed, &added);
        let flag_text: Vec<String> = flags.iter().map(FlagChange::describe).collect();
        let precision = c.category == Some(Category::Precision);
        rec.metrics = json!({"numeric_flags": flags, "changed_lines": changed_lines, "precision_pattern": precision});
        if !flags.is_empty() && !precision {
            rec.status = GateStatus::Failed;
            rec.summary = format!(
                "numeric flags changed by a {} pattern (only precision patterns may): {}",
                c.category.map(|c| c.name()).unwrap_or("uncategorised"),
                flag_text.join(", ")
            );
            rec.seconds = t0.elapsed().as_secs_f64();
            let reason = rec.summary.clone();
            run.records.push(rec);
            return Ok(Verdict::rejected(Gate::Static, reason));
        }
        let kernels: Vec<&Manifest> = touched.iter().filter_map(|t| self.kernels.for_source(&t.path)).collect();
        let manifest = match kernels.as_slice() {
            [m] if touched.len() == 1 => (*m).clone(),
            [] => {
                rec.status = GateStatus::Error;
                rec.summary = format!("no kernel manifest under {}/ has {} as its source", self.kernels.dir, c.path);
                rec.seconds = t0.elapsed().as_secs_f64();
                let reason = format!("{}; there is no contract to validate against", rec.summary);
                run.records.push(rec);
                return Ok(Verdict::error(Some(Gate::Static), reason, ""));
            }
            _ => {
                rec.status = GateStatus::Error;
                rec.summary = "the diff touches several files; a candidate must change one kernel source".into();
                rec.seconds = t0.elapsed().as_secs_f64();
                let reason = rec.summary.clone();
                run.records.push(rec);
                return Ok(Verdict::error(Some(Gate::Static), reason, ""));
            }
        };
        run.kernel = Some(manifest.clone());
        let t = &touched[0];

        // the baseline tree with its contract, and the candidate source beside it
        let tmp = tempfile::Builder::new()
            .prefix("kidiom-validate-")
            .tempdir()
            .map_err(|e| Error::io(std::env::temp_dir(), e))?;
        let tree = tmp.path().join("tree");
        copy_tree(&self.opts.root.join(&self.kernels.dir), &tree.join(&self.kernels.dir))?;
        // the baseline source in the tree is the baseline text (the file on disk may be the candidate)
        let base_file = tree.join(&t.path);
        std::fs::write(&base_file, &t.base).map_err(|e| Error::io(&base_file, e))?;
        let cand_file = tmp.path().join("candidate").join(&t.path);
        if let Some(parent) = cand_file.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        std::fs::write(&cand_file, &t.cand).map_err(|e| Error::io(&cand_file, e))?;
        let harness = Harness { python: self.python.clone(), root: tree.clone() };
        let cand_src = cand_file.to_string_lossy().to_string();
        let name = manifest.name.clone();

        let key = (name.clone(), blob_id(t.base.as_bytes()));
        let cached = self.compiled.lock().ok().and_then(|m| m.get(&key).cloned());
        let compile_args = |source: Option<&str>| -> Vec<String> {
            let mut a = vec!["compile".to_string(), "--kernel".into(), name.clone()];
            if let Some(s) = source {
                a.extend(["--source".into(), s.to_string()]);
            }
            a
        };
        // The correctness check starts with the compiles (it does not depend on them) and is
        // killed if the candidate fails to compile: the gates are still judged in order, and a
        // failed gate leaves no record of the later ones.
        let seed = self.opts.seed.unwrap_or_else(fresh_seed);
        run.seeds = (0..self.opts.seeds as u64).map(|i| seed + i).collect();
        let curve = precision && manifest.curve.is_some();
        let check_args = |source: Option<&str>, seeds: u32, with_curve: bool, consistency: bool| -> Vec<String> {
            let mut a = vec!["check".to_string(), "--kernel".into(), name.clone()];
            if let Some(s) = source {
                a.extend(["--source".into(), s.to_string()]);
            }
            a.extend(["--seeds".into(), seeds.to_string(), "--seed".into(), seed.to_string()]);
            a.extend(["--device".into(), self.opts.device.name().into()]);
            if !with_curve {
                a.push("--no-curve".into());
            }
            if !consistency {
                a.push("--no-consistency".into());
            }
            a
        };
        let cand_args = check_args(Some(&cand_src), self.opts.seeds, curve, self.opts.consistency);
        let limit = run.remaining();
        let cancel = AtomicBool::new(false);
        let panicked = |what: &str| Error::Diff(format!("the {what} thread panicked"));
        let (base_run, cand_run, cand_check, base_check) = std::thread::scope(|s| {
            let b = s.spawn(|| {
                let compiled = match &cached {
                    Some(r) => Ok(r.clone()),
                    None => harness.call(&compile_args(None), limit),
                };
                let ok = matches!(&compiled, Ok(r) if r.status == HarnessStatus::Ok);
                let check =
                    (curve && ok).then(|| harness.call_cancellable(&check_args(None, 1, true, false), limit, &cancel));
                (compiled, check)
            });
            let c = s.spawn(|| harness.call_cancellable(&cand_args, limit, &cancel));
            let cr = harness.call(&compile_args(Some(&cand_src)), limit);
            if !matches!(&cr, Ok(r) if r.status == HarnessStatus::Ok) {
                cancel.store(true, Ordering::Relaxed);
            }
            let (compiled, check) = b.join().unwrap_or_else(|_| (Err(panicked("baseline")), None));
            let cc = c.join().unwrap_or_else(|_| Err(panicked("check")));
            (compiled, cr, cc, check)
        });
        let (base_run, cand_run) = (base_run?, cand_run?);
        if cached.is_none()
            && base_run.status == HarnessStatus::Ok
            && let Ok(mut m) = self.compiled.lock()
        {
            m.insert(key, base_run.clone());
        }
        rec.commands.push(base_run.process.command.clone());
        stamp(&mut rec, &cand_run);
        // the compiles' own wall time (they overlap the correctness check)
        rec.seconds = cand_run.process.seconds.max(if cached.is_some() { 0.0 } else { base_run.process.seconds });
        if base_run.status != HarnessStatus::Ok {
            rec.status = GateStatus::Error;
            rec.summary = format!("the baseline {} does not compile ahead of time", name);
            rec.log = Some(base_run.log());
            let reason = rec.summary.clone();
            let log = base_run.log();
            run.records.push(rec);
            return Ok(Verdict::error(Some(Gate::Static), reason, log));
        }
        match cand_run.status {
            HarnessStatus::Ok => {}
            HarnessStatus::TimedOut | HarnessStatus::Crashed => {
                rec.status = GateStatus::Error;
                rec.summary = "the candidate's compile did not finish".into();
                rec.log = Some(cand_run.log());
                let log = cand_run.log();
                run.records.push(rec);
                return Ok(Verdict::error(Some(Gate::Static), "compile timed out or crashed", log));
            }
            _ => {
                rec.status = GateStatus::Failed;
                let err = cand_run.json["error"].as_str().unwrap_or("compile failed").to_string();
                rec.summary = format!("the candidate does not compile for sm_90a: {}", tail(&err, 300));
                rec.log = Some(cand_run.log());
                let reason = rec.summary.clone();
                run.records.push(rec);
                return Ok(Verdict::rejected(Gate::Static, reason));
            }
        }
        let (before, after) =
            (StaticMetrics::from_compile_json(&base_run.json), StaticMetrics::from_compile_json(&cand_run.json));
        let d = delta(&before, &after);
        if d.get("spill_store_bytes").is_some_and(|x| *x > 0) {
            run.notes.push(format!("spills grow by {} B", d["spill_store_bytes"]));
        }
        let mut m = rec.metrics.as_object().cloned().unwrap_or_default();
        m.insert("delta".into(), json!(d));
        m.insert("arch".into(), json!(after.arch));
        rec.metrics = Value::Object(m);
        rec.summary = format!(
            "{}compiled for {}: before {}; after {}",
            if flag_text.is_empty() {
                String::new()
            } else {
                format!("numeric flags {} (precision pattern); ", flag_text.join(", "))
            },
            after.arch,
            before.summary(),
            after.summary()
        );
        rec.before = Some(json!(before));
        rec.after = Some(json!(after));
        run.records.push(rec);

        // 3. correctness (its processes ran alongside the compiles; the times are their own)
        let mut rec = GateRecord::new(Gate::Correctness, GateStatus::Passed, "");
        let cand_check = cand_check?;
        let base_check = base_check.transpose()?;
        stamp(&mut rec, &cand_check);
        if let Some(b) = &base_check {
            rec.commands.push(b.process.command.clone());
        }
        rec.seconds = base_check.as_ref().map(|b| b.process.seconds).unwrap_or(0.0).max(cand_check.process.seconds);
        let mode = cand_check.json["mode"].as_str().unwrap_or("").to_string();
        let worst = worst_errors(&cand_check.json);
        rec.metrics = json!({
            "mode": mode,
            "seeds": run.seeds,
            "cases": cand_check.json["cases"].as_array().map(Vec::len).unwrap_or(0),
            "worst": worst,
            "tolerance": manifest.tolerance,
            "consistency": cand_check.json["consistency"],
            "failures": cand_check.json["failures"],
            "ran_alongside_static": true,
        });
        match cand_check.status {
            HarnessStatus::Ok => {}
            HarnessStatus::Failed => {
                rec.status = GateStatus::Failed;
                let failures: Vec<String> = cand_check.json["failures"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|f| f.as_str().map(str::to_string))
                    .collect();
                let n = failures.len();
                let shown: Vec<&str> = failures.iter().take(3).map(String::as_str).collect();
                rec.summary = format!(
                    "{n} failure{}: {}{}",
                    if n == 1 { "" } else { "s" },
                    shown.join("; "),
                    if n > 3 { "; ..." } else { "" }
                );
                let reason = rec.summary.clone();
                rec.after = Some(json!({"worst": worst}));
                run.records.push(rec);
                return Ok(Verdict::rejected(Gate::Correctness, reason));
            }
            HarnessStatus::Skipped => {
                rec.status = GateStatus::Skipped;
                let why = cand_check.json["reason"].as_str().unwrap_or("skipped").to_string();
                rec.summary = format!("not run on this machine: {why}");
                run.flags.push(format!("correctness not checked on the CPU: {why}"));
                run.records.push(rec);
                return Ok(self.speed(run, &harness, &manifest, &cand_src, changed_lines, precision, false));
            }
            HarnessStatus::TimedOut => {
                return Ok(self.harness_error(run, rec, &cand_check, "the correctness check timed out"));
            }
            HarnessStatus::Error | HarnessStatus::Crashed => {
                let what = if cand_check.json["error"].as_str().is_some_and(|e| e.contains("timed out")) {
                    "the correctness check timed out"
                } else {
                    "the correctness check crashed"
                };
                return Ok(self.harness_error(run, rec, &cand_check, what));
            }
        }
        let mut summary = format!(
            "{} cases passed over seeds {:?} ({mode}); worst {}",
            rec.metrics["cases"],
            run.seeds,
            worst
                .as_object()
                .map(|o| o
                    .iter()
                    .map(|(k, v)| format!("{k} rel_l2 {}", fmt_e(v["rel_l2"].as_f64())))
                    .collect::<Vec<_>>()
                    .join(", "))
                .unwrap_or_default()
        );
        if let Some(b) = &base_check {
            if b.status != HarnessStatus::Ok {
                rec.status = GateStatus::Error;
                rec.summary = "the baseline fails its own check; cannot compare error curves".into();
                rec.log = Some(b.log());
                let log = b.log();
                run.records.push(rec);
                return Ok(Verdict::error(Some(Gate::Correctness), "the baseline fails its own check", log));
            }
            rec.before = Some(json!({"curve": b.json["curve"]}));
            rec.after = Some(json!({"curve": cand_check.json["curve"], "worst": worst}));
            match judge_curve(&b.json["curve"], &cand_check.json["curve"]) {
                Ok(s) => summary = format!("{summary}; {s}"),
                Err(reason) => {
                    rec.status = GateStatus::Failed;
                    rec.summary = format!("precision rewrite: {reason}");
                    let reason = rec.summary.clone();
                    run.records.push(rec);
                    return Ok(Verdict::rejected(Gate::Correctness, reason));
                }
            }
        } else {
            rec.after = Some(json!({"worst": worst}));
        }
        rec.summary = summary;
        run.records.push(rec);
        let native = mode == "native";
        Ok(self.speed(run, &harness, &manifest, &cand_src, changed_lines, precision, native))
    }

    fn harness_error(&self, run: &mut Run<'_>, mut rec: GateRecord, h: &HarnessRun, what: &str) -> Verdict {
        rec.status = GateStatus::Error;
        rec.summary = format!("{what} ({:.1} s)", h.process.seconds);
        rec.log = Some(h.log());
        let gate = rec.gate;
        run.records.push(rec);
        Verdict::error(Some(gate), what, h.log())
    }

    fn timed_out(&self, run: &mut Run<'_>, mut rec: GateRecord, t0: Instant) -> Verdict {
        rec.status = GateStatus::Error;
        rec.seconds = t0.elapsed().as_secs_f64();
        rec.summary = format!("time limit of {:.0} s reached before this gate", self.opts.timeout.as_secs_f64());
        let gate = rec.gate;
        let reason = rec.summary.clone();
        run.records.push(rec);
        Verdict::error(Some(gate), reason, "")
    }

    /// 4. speed: on a GPU only.
    #[allow(clippy::too_many_arguments)]
    fn speed(
        &self,
        run: &mut Run<'_>,
        harness: &Harness,
        manifest: &Manifest,
        cand_src: &str,
        changed_lines: usize,
        precision: bool,
        native: bool,
    ) -> Verdict {
        let t0 = Instant::now();
        let mut rec = GateRecord::new(Gate::Speed, GateStatus::Skipped, "");
        // Host C++ (the KV-transfer module) is timed on whatever CPU this is.
        let host = manifest.language == crate::manifest::KernelLanguage::Cpp;
        if !host && (!native || self.opts.device == Device::Cpu) {
            rec.summary = "needs a GPU: kernels ran on the CPU".into();
            run.records.push(rec);
            let passed: Vec<&str> =
                run.records.iter().filter(|r| r.status == GateStatus::Passed).map(|r| r.gate.name()).collect();
            return Verdict::needs_gpu(format!("{} passed; speed needs a GPU", passed.join(", ")));
        }
        let limit = run.remaining();
        if limit.is_zero() {
            return self.timed_out(run, rec, t0);
        }
        let mut args = vec![
            "bench".to_string(),
            "--kernel".into(),
            manifest.name.clone(),
            "--source".into(),
            cand_src.to_string(),
        ];
        if host {
            // rounds and windows are the manifest's [service] settings
            args.extend(["--device".into(), "cpu".into()]);
        } else {
            args.extend(["--device".into(), "cuda".into(), "--iters".into(), self.opts.bench_iters.to_string()]);
        }
        // CUDA C++ kernels: timed in-process through cudarc when the feature is on and a
        // device answers (the kernel already ran natively in the correctness gate's
        // subprocess, so a hang would have been caught there); otherwise the harness.
        #[cfg(feature = "cuda")]
        let via_cudarc = (manifest.language == crate::manifest::KernelLanguage::Cuda)
            .then(|| cudarc_bench(harness, manifest, cand_src, self.opts.bench_iters as usize))
            .flatten();
        #[cfg(not(feature = "cuda"))]
        let via_cudarc: Option<HarnessRun> = None;
        let b = match via_cudarc {
            Some(b) => b,
            None => match harness.call(&args, limit) {
                Ok(b) => b,
                Err(e) => return Verdict::error(Some(Gate::Speed), e.to_string(), ""),
            },
        };
        stamp(&mut rec, &b);
        rec.seconds = t0.elapsed().as_secs_f64();
        match b.status {
            HarnessStatus::Ok => {}
            HarnessStatus::Failed => {
                rec.status = GateStatus::Failed;
                rec.summary = format!(
                    "the GPU correctness gate before timing failed: {}",
                    b.json["failures"].as_array().and_then(|f| f.first()).and_then(|f| f.as_str()).unwrap_or("?")
                );
                let reason = rec.summary.clone();
                run.records.push(rec);
                return Verdict::rejected(Gate::Speed, reason);
            }
            HarnessStatus::Skipped => {
                rec.summary = format!("skipped: {}", b.json["reason"].as_str().unwrap_or("needs a GPU"));
                run.records.push(rec);
                return Verdict::needs_gpu("CPU gates passed; the bench found no GPU");
            }
            _ => return self.harness_error(run, rec, &b, "the bench failed"),
        }
        let j = &b.json;
        if host {
            return self.judge_host(run, rec, j);
        }
        let speedup = j["speedup"].as_f64().unwrap_or(f64::NAN);
        let noise = j["noise_floor"].as_f64().unwrap_or(f64::NAN);
        let significant = j["significant"].as_bool().unwrap_or(false);
        for f in j["flags"].as_array().into_iter().flatten().filter_map(|f| f.as_str()) {
            run.flags.push(f.to_string());
        }
        if speedup > MAX_PLAUSIBLE_SPEEDUP && !run.flags.iter().any(|f| f.contains("implausible")) {
            run.flags.push(format!("speedup {speedup:.2}x is beyond any plausible local rewrite"));
        }
        if changed_lines <= SMALL_EDIT_LINES && speedup > SMALL_EDIT_SPEEDUP {
            run.flags.push(format!("speedup {speedup:.2}x is implausible for a {changed_lines}-line edit"));
        }
        rec.metrics = json!({
            "speedup": speedup, "noise_floor": noise, "significant": significant,
            "floor": j["floor"], "shape": j["shape"], "iters": j["iters"], "flags": j["flags"],
        });
        rec.before = Some(j["results"]["baseline"].clone());
        rec.after = Some(j["results"]["candidate"].clone());
        let med = |k: &str| j["results"][k]["median_us"].as_f64().unwrap_or(f64::NAN);
        rec.summary = format!(
            "baseline {:.1} us, candidate {:.1} us: {speedup:.3}x (noise floor {:.1}%, {})",
            med("baseline"),
            med("candidate"),
            noise * 100.0,
            if significant { "significant" } else { "within noise" }
        );
        let summary = rec.summary.clone();
        let faster = significant && speedup > 1.0;
        if !precision && !faster {
            rec.status = GateStatus::Failed;
            run.records.push(rec);
            return Verdict::rejected(Gate::Speed, format!("no significant speedup: {summary}"));
        }
        rec.status = GateStatus::Passed;
        run.records.push(rec);
        if precision && speedup < 1.0 {
            run.notes.push(format!("precision rewrite costs {:.1}% time", (1.0 / speedup - 1.0) * 100.0));
        }
        Verdict::accepted(summary)
    }
}

impl Validator {
    /// The speed verdict of a host target from the harness's `bench`: the
    /// scheduler thread's throughput gap while transfers run (SPEC §8), baseline
    /// and candidate interleaved in one process. Plausibility (a gap below the
    /// noise, transfers beyond the machine's copy bandwidth, more throughput
    /// recovered than was lost) is the harness's `flags`: a flagged result is
    /// never accepted.
    fn judge_host(&self, run: &mut Run<'_>, mut rec: GateRecord, j: &Value) -> Verdict {
        let num = |v: &Value| v.as_f64().filter(|x| x.is_finite());
        let (base, cand) = (&j["results"]["baseline"], &j["results"]["candidate"]);
        let (Some(gb), Some(gc), Some(speedup), Some(noise)) =
            (num(&base["gap"]), num(&cand["gap"]), num(&j["speedup"]), num(&j["noise_floor"]))
        else {
            rec.status = GateStatus::Error;
            rec.summary = "the host bench returned no gap, speedup or noise floor".into();
            rec.log = Some(tail(&j.to_string(), 2000));
            let reason = rec.summary.clone();
            run.records.push(rec);
            return Verdict::error(Some(Gate::Speed), reason, tail(&j.to_string(), 2000));
        };
        let significant = j["significant"].as_bool().unwrap_or(false);
        for f in j["flags"].as_array().into_iter().flatten().filter_map(|f| f.as_str()) {
            run.flags.push(f.to_string());
        }
        let gbps = |v: &Value| num(&v["transfer_gbps"]).map(|x| format!("{x:.2}")).unwrap_or_else(|| "?".into());
        rec.metrics = json!({
            "metric": j["metric"], "speedup": speedup, "noise_floor": noise, "significant": significant,
            "gap_baseline": gb, "gap_candidate": gc, "floor": j["floor"], "shape": j["shape"],
            "rounds": j["rounds"], "order": j["order"], "flags": j["flags"],
        });
        rec.before = Some(base.clone());
        rec.after = Some(cand.clone());
        rec.summary = format!(
            "scheduler gap {:.1}% -> {:.1}% (noise floor {:.1}%, {}); scheduler throughput under transfers {speedup:.2}x; transfers {} -> {} GB/s",
            gb * 100.0,
            gc * 100.0,
            noise * 100.0,
            if significant { "significant" } else { "within noise" },
            gbps(base),
            gbps(cand),
        );
        let summary = rec.summary.clone();
        if !(significant && speedup > 1.0 && gc < gb) {
            rec.status = GateStatus::Failed;
            run.records.push(rec);
            return Verdict::rejected(Gate::Speed, format!("no significant gain: {summary}"));
        }
        rec.status = GateStatus::Passed;
        run.records.push(rec);
        Verdict::accepted(summary)
    }
}

/// The speed gate of a CUDA C++ decode kernel through cudarc, shaped like the
/// harness's `bench` JSON; `None` when no device answers (the harness then runs).
#[cfg(feature = "cuda")]
fn cudarc_bench(harness: &Harness, manifest: &Manifest, cand_src: &str, iters: usize) -> Option<HarnessRun> {
    use crate::backend::cuda;
    use crate::backend::python::ProcessOutcome;
    let device = cuda::probe().ok()?;
    let started = Instant::now();
    let base_path = harness.root.join(manifest.source_path());
    let threads = manifest.block_threads.unwrap_or(128);
    let result = (|| -> std::result::Result<Value, String> {
        let base_text = std::fs::read_to_string(&base_path).map_err(|e| format!("{}: {e}", base_path.display()))?;
        let cand_text = std::fs::read_to_string(cand_src).map_err(|e| format!("{cand_src}: {e}"))?;
        let base = cuda::DecodeKernel::compile(&base_text, &manifest.entry, threads)?;
        let cand = cuda::DecodeKernel::compile(&cand_text, &manifest.entry, threads)?;
        let x = cuda::DecodeInputs::random(&manifest.shapes.bench, fresh_seed())?;
        let (ok, eo, es) = cand.check(&x, &manifest.tolerance)?;
        if !ok {
            return Ok(
                json!({"status": "failed", "failures": [format!("o rel_l2 {eo:.2e}, state rel_l2 {es:.2e} against float64")]}),
            );
        }
        let (tb, tc) = cuda::bench_interleaved(&base, &cand, &x, 10, iters)?;
        let speedup = tb.median_us / tc.median_us;
        let noise = [&tb, &tc].iter().map(|t| (t.p90_us - t.p10_us) / (2.0 * t.median_us)).fold(0.0f64, f64::max);
        Ok(json!({
            "status": "ok", "device": format!("cuda ({}, cudarc)", device.name), "speedup": speedup,
            "noise_floor": noise, "significant": (speedup - 1.0).abs() > noise, "shape": manifest.shapes.bench,
            "iters": iters, "flags": [], "results": {"baseline": tb, "candidate": tc},
        }))
    })();
    let (status, json) = match result {
        Ok(j) if j["status"] == "ok" => (HarnessStatus::Ok, j),
        Ok(j) => (HarnessStatus::Failed, j),
        Err(e) => (HarnessStatus::Error, json!({"status": "error", "error": e})),
    };
    Some(HarnessRun {
        status,
        process: ProcessOutcome {
            command: format!(
                "kidiom-validator cudarc bench {} (baseline {}, candidate {cand_src})",
                manifest.name,
                base_path.display()
            ),
            cwd: harness.root.to_string_lossy().into_owned(),
            code: Some(0),
            timed_out: false,
            cancelled: false,
            seconds: started.elapsed().as_secs_f64(),
            stdout: String::new(),
            stderr_tail: String::new(),
        },
        json,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curves_must_be_no_worse_everywhere_and_better_at_the_longest() {
        let curve = |xs: &[(i64, f64)]| json!(xs.iter().map(|(t, e)| json!({"T": t, "rel_l2": e})).collect::<Vec<_>>());
        let base = curve(&[(64, 5e-4), (128, 6e-4), (256, 7e-4)]);
        assert!(judge_curve(&base, &curve(&[(64, 1e-7), (128, 1e-7), (256, 2e-7)])).is_ok());
        let worse = judge_curve(&base, &curve(&[(64, 1e-7), (128, 9e-4), (256, 2e-7)])).unwrap_err();
        assert!(worse.contains("T=128"), "{worse}");
        let same = judge_curve(&base, &base).unwrap_err();
        assert!(same.contains("longest T=256"), "{same}");
        assert!(judge_curve(&base, &curve(&[(64, 1e-7)])).is_err());
        assert!(judge_curve(&json!(null), &json!(null)).is_err());
    }

    #[test]
    fn worst_errors_take_the_max_over_cases() {
        let check = json!({"cases": [
            {"outputs": {"o": {"rel_l2": 1e-4, "max_abs_rel": 1e-3, "worst_slice": {"rel_l2": 2e-4}, "nonfinite": 0}}},
            {"outputs": {"o": {"rel_l2": "inf", "max_abs_rel": 1e-2, "worst_slice": {"rel_l2": 3e-4}, "nonfinite": 4}}},
        ]});
        let w = worst_errors(&check);
        assert_eq!(w["o"]["rel_l2"], "inf");
        assert_eq!(w["o"]["max_abs_rel"], 1e-2);
        assert_eq!(w["o"]["nonfinite"], 4);
    }

    #[test]
    fn devices_and_gates_have_names() {
        assert_eq!(Device::from_name("cuda"), Some(Device::Cuda));
        assert_eq!(Device::from_name("tpu"), None);
        assert_eq!(Gate::ALL.map(Gate::name), ["syntax", "static", "correctness", "speed"]);
    }
}
