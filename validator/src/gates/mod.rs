//! The gates, in order: syntax, static, correctness, speed (one module
//! each). A failed gate stops the later ones; every gate that ran leaves a
//! [`GateRecord`].
//!
//! Rules enforced here rather than by convention:
//! - the contract (manifest, reference, tolerances, shapes, harness) always
//!   comes from the baseline tree, copied into a temporary directory; the
//!   candidate contributes only its kernel source file, passed to the harness
//!   with `--source`;
//! - a rewrite touching a contract file, or host code in a kernel source
//!   (a launcher, module-level code, imports), is rejected at the static gate;
//! - numeric flags may change only under a `precision` pattern;
//! - every kernel run is a harness subprocess with a deadline, and a timeout
//!   anywhere (the harness's own or the validator's kill) is an `error`;
//! - what the harness prints is read as typed wire format v1; a missing or
//!   malformed field the verdict depends on is an `error` naming it;
//! - speed is compared only within one harness process (interleaved A/B);
//! - a speedup beyond the hardware's bound or implausible for the size of
//!   the change is flagged and never accepted.

mod correctness;
mod speed;
mod static_gate;
mod syntax;

pub use static_gate::StaticLimits;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kidiom_exec::{Executor, Fleet, find_python};
use kidiom_patterns::Category;
use kidiom_syntax::blob_id;
use serde::{Deserialize, Serialize};

use crate::backend::python::{Harness, HarnessRun, HarnessStatus};
use crate::error::{Error, Result};
use crate::evidence::{EVIDENCE_FORMAT, Evidence, GateRecord, GateStatus};
use crate::manifest::{Kernels, Manifest};
use crate::patch::{self, FilePatch};
use crate::predict::DeviceModel;
use crate::verdict::{Gate, Verdict, VerdictKind};
use crate::wire::{Header, WireError};

/// Where kernels run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[derive(strum::Display, strum::EnumString, strum::IntoStaticStr, strum::VariantArray)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Device {
    /// A GPU when the harness finds one, else the CPU.
    #[default]
    Auto,
    /// The CPU (Triton's interpreter, the CUDA emulation): no speed gate.
    Cpu,
    /// A CUDA GPU; an error when there is none.
    Cuda,
}

kidiom_syntax::named_enum!(Device);

/// The pattern id of a candidate that came from a patch rather than the catalog.
pub const MANUAL_PATTERN: &str = kidiom_patterns::record::MANUAL_KIND;

/// One rewrite to validate: a unified diff against a file under the root.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateInput {
    /// The candidate's id.
    pub id: String,
    /// Its pattern ([`MANUAL_PATTERN`] for a patch that came from elsewhere).
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
    /// When the pattern is a decorator idiom (its `after` is a Python
    /// decorator), that decorator's callee: decorators of this callee, with
    /// literal arguments, are the idiom and not host code (`hostcode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decorator_idiom: Option<String>,
}

impl CandidateInput {
    /// From a stored candidate; the category is taken from its provenance
    /// unless `category` names one (the pattern's, from the catalog).
    pub fn from_candidate(c: &kidiom_patterns::Candidate, category: Option<Category>) -> CandidateInput {
        let category = category.or_else(|| c.provenance.category().and_then(Category::from_name));
        // the pattern's `after`, as kidiom's own apply recorded it; a manual patch has none
        let decorator_idiom = (c.pattern_id != MANUAL_PATTERN)
            .then(|| c.provenance.after())
            .flatten()
            .and_then(crate::hostcode::DecoratorIdiom::from_template)
            .map(|d| d.callee);
        CandidateInput {
            id: c.id.clone(),
            pattern_id: c.pattern_id.clone(),
            category,
            path: c.path.clone(),
            base_blob: c.base_blob.clone(),
            result_blob: c.result_blob.clone(),
            diff: c.diff.clone(),
            decorator_idiom,
        }
    }

    /// An edit that did not come from the catalog (an agent's own): a unified
    /// diff against the files under `root` as they are now. Its pattern is
    /// [`MANUAL_PATTERN`], its id `manual@<path>#<diff hash>`, its target the
    /// diff's first file. `Err` when the diff does not parse or does not
    /// apply to that file.
    pub fn from_patch(root: &Path, diff: &str, category: Option<Category>) -> Result<CandidateInput> {
        let files = patch::parse(diff)?;
        let first = files.first().ok_or_else(|| Error::Diff("the patch changes no file".into()))?;
        let abs = root.join(&first.path);
        let current = match std::fs::read(&abs) {
            Ok(b) => String::from_utf8(b)
                .map_err(|_| Error::Patch { path: first.path.clone(), message: "the file is not UTF-8".into() })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(Error::io(abs, e)),
        };
        let result = patch::apply(&current, first, false)?;
        Ok(CandidateInput {
            id: kidiom_patterns::record::candidate_id(MANUAL_PATTERN, &first.path, diff),
            pattern_id: MANUAL_PATTERN.into(),
            category,
            path: first.path.clone(),
            base_blob: blob_id(current.as_bytes()),
            result_blob: blob_id(result.as_bytes()),
            diff: diff.to_string(),
            decorator_idiom: None,
        })
    }
}

/// A speedup beyond this for an edit of at most [`SMALL_EDIT_LINES`] changed lines is flagged.
const SMALL_EDIT_SPEEDUP: f64 = 3.0;
const SMALL_EDIT_LINES: usize = 3;
/// Any speedup beyond this is flagged.
const MAX_PLAUSIBLE_SPEEDUP: f64 = 5.0;

/// Fresh random seeds of the correctness gate, unless told otherwise.
pub const DEFAULT_SEEDS: u32 = 3;

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
    static_limits: Option<StaticLimits>,
    executor: Executor,
    device_model: Option<DeviceModel>,
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
            seeds: DEFAULT_SEEDS,
            seed: None,
            consistency: true,
            bench_iters: 50,
            static_limits: Some(StaticLimits::default()),
            executor: Executor::Local,
            device_model: Some(DeviceModel::h200()),
        }
    }

    /// Where the harness runs (default [`Executor::Local`]). With
    /// [`Executor::Ray`] every validation and speed call is a task on the
    /// cluster, through one driver started on the first call and stopped
    /// when the [`Validator`] is dropped; the per-site search stays local.
    pub fn executor(&mut self, executor: Executor) -> &mut Self {
        self.executor = executor;
        self
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

    /// The static gate's "predicted slower" limits (default [`StaticLimits::default`]); `None` turns the rule off.
    pub fn static_limits(&mut self, limits: Option<StaticLimits>) -> &mut Self {
        self.static_limits = limits;
        self
    }

    /// The device the work profiles' roofline predicts times for (default
    /// [`DeviceModel::h200`]); `None`: no profiles, no predictions.
    pub fn device_model(&mut self, model: Option<DeviceModel>) -> &mut Self {
        self.device_model = model;
        self
    }

    /// Reads the manifests of the baseline tree.
    pub fn build(&self) -> Result<Validator> {
        let kernels = Kernels::load(&self.root, &self.kernels_dir)?;
        let python = self.python.clone().unwrap_or_else(|| find_python(&self.root));
        let fleet = match &self.executor {
            Executor::Local => None,
            Executor::Ray { address } => Some(Arc::new(Fleet::new(&python, &self.root, address.clone()))),
        };
        Ok(Validator {
            opts: self.clone(),
            kernels,
            python,
            commit: git_head(&self.root),
            compiled: Mutex::new(HashMap::new()),
            profiled: Mutex::new(HashMap::new()),
            fleet,
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
    /// Baseline work profiles, by kernel name and baseline blob.
    profiled: Mutex<HashMap<(String, String), HarnessRun>>,
    /// The Ray executor's driver (`None`: the harness runs here).
    fleet: Option<Arc<Fleet>>,
}

fn git_head(root: &Path) -> Option<String> {
    let args = ["rev-parse".to_string(), "HEAD".to_string()];
    let out = kidiom_exec::run(Path::new("git"), &args, root, &[], Duration::from_secs(30)).ok()?;
    let s = out.stdout.trim().to_string();
    (!s.is_empty()).then_some(s)
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
    for src in kidiom_syntax::tree_files(from)? {
        // a symlink is not copied: the baseline tree is regular files
        if !std::fs::symlink_metadata(&src).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let dst = to.join(src.strip_prefix(from).unwrap_or(&src));
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        std::fs::copy(&src, &dst).map_err(|e| Error::io(&src, e))?;
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
    prediction: Option<crate::evidence::Predicted>,
}

impl Run<'_> {
    fn remaining(&self) -> Duration {
        self.v.opts.timeout.saturating_sub(self.started.elapsed())
    }

    /// Ends `rec` as `status` with `summary` and returns `verdict`.
    fn stop(&mut self, mut rec: GateRecord, status: GateStatus, summary: String, verdict: Verdict) -> Verdict {
        rec.status = status;
        rec.summary = summary;
        if rec.log.is_none() {
            rec.log = verdict.log.clone();
        }
        self.records.push(rec);
        verdict
    }

    /// `rec`'s gate could not finish: the harness run `h` timed out, crashed
    /// or errored. A timeout (the harness's own or the deadline's) says so.
    fn harness_error(&mut self, rec: GateRecord, h: &HarnessRun, what: &str) -> Verdict {
        let gate = rec.gate;
        let timed_out = h.status == HarnessStatus::TimedOut
            || h.json.get("error").and_then(|e| e.as_str()).is_some_and(|e| e.contains("timed out"));
        let fleet_error = h.placement.as_ref().and_then(|p| p.error.as_deref());
        let reason = if timed_out {
            format!("{what} timed out ({:.1} s)", h.process.seconds)
        } else if let Some(e) = fleet_error.filter(|_| h.status == HarnessStatus::Crashed) {
            format!("{what} crashed on the cluster ({:.1} s): {e}", h.process.seconds)
        } else if h.status == HarnessStatus::Crashed {
            format!("{what} crashed ({:.1} s)", h.process.seconds)
        } else {
            format!("{what} failed to run ({:.1} s)", h.process.seconds)
        };
        self.stop(rec, GateStatus::Error, reason.clone(), Verdict::error(Some(gate), reason, h.log()))
    }

    /// `rec`'s gate read harness output that does not fit the wire format.
    fn wire_error(&mut self, rec: GateRecord, h: &HarnessRun, e: &WireError) -> Verdict {
        let gate = rec.gate;
        let reason = e.to_string();
        let log = kidiom_exec::tail(&h.json.to_string(), 2000);
        self.stop(rec, GateStatus::Error, reason.clone(), Verdict::error(Some(gate), reason, log))
    }

    /// The time limit ran out before `rec`'s gate could start.
    fn out_of_time(&mut self, rec: GateRecord) -> Verdict {
        let gate = rec.gate;
        let reason =
            format!("timed out: the limit of {:.0} s was reached before this gate", self.v.opts.timeout.as_secs_f64());
        self.stop(rec, GateStatus::Error, reason.clone(), Verdict::error(Some(gate), reason, ""))
    }

    fn finish(self, verdict: Verdict) -> Evidence {
        let mut verdict = verdict;
        for f in self.flags {
            if !verdict.flags.contains(&f) {
                verdict.flags.push(f);
            }
        }
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
            prediction: self.prediction,
        }
    }
}

/// Device, versions and command of a harness run, for a record. A run that
/// was skipped names no device: it ran on none.
fn stamp(rec: &mut GateRecord, run: &HarnessRun, header: Option<&Header>) {
    if rec.device.is_none() && run.status != HarnessStatus::Skipped {
        rec.device = header.and_then(|h| h.device.clone());
    }
    if rec.versions.is_null() {
        rec.versions = header.and_then(|h| h.versions.clone()).unwrap_or(serde_json::Value::Null);
    }
    note(rec, run);
}

/// The command of a harness run, and where it ran when that was not here.
fn note(rec: &mut GateRecord, run: &HarnessRun) {
    rec.commands.push(run.process.command.clone());
    if let Some(p) = &run.placement {
        rec.placements.push(stored_placement(p));
    }
}

/// The fleet's placement as the catalog stores it (the record type lives
/// with the evidence; the fleet's, with the exec crate below both).
fn stored_placement(p: &kidiom_exec::Placement) -> kidiom_patterns::record::Placement {
    kidiom_patterns::record::Placement {
        command: p.command.clone(),
        executor: p.executor.clone(),
        node: p.node.clone(),
        gpu: p.gpu.clone(),
        attempts: p.attempts,
        seconds: p.seconds,
        harness: p.harness.clone(),
        failures: p.failures.clone(),
        error: p.error.clone(),
    }
}

/// [`Validator::profile`]'s answer.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileReport {
    /// The kernel's name.
    pub kernel: String,
    /// Its manifest's source, relative to the root.
    pub source: String,
    /// Where it ran (`cpu (triton interpreter)`).
    pub device: Option<String>,
    /// The profile, when one was made.
    pub profile: Option<crate::wire::Profile>,
    /// Its roofline prediction, when there is a device model.
    pub prediction: Option<crate::predict::Prediction>,
    /// Why there is no profile.
    pub problem: Option<String>,
}

/// The harness runs of the static and correctness gates (they overlap).
struct Runs {
    base_compile: HarnessRun,
    cand_compile: HarnessRun,
    cand_check: HarnessRun,
    /// The baseline's check, for the error curve of a precision rewrite.
    base_check: Option<HarnessRun>,
    /// Whether the baseline compile came from this validator's cache.
    cached: bool,
    /// The work profiles of baseline and candidate, for the prediction
    /// (`None`: no device model, or a host C++ kernel, measured directly).
    profiles: Option<(HarnessRun, HarnessRun)>,
}

/// The baseline tree in a temporary directory, and the candidate's source beside it.
struct Prepared {
    _tmp: tempfile::TempDir,
    harness: Harness,
    cand_src: String,
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

    /// How many candidates to validate at once to keep the executor busy:
    /// 1 here; on a Ray cluster one per GPU, or per three CPUs on a cluster
    /// without GPUs (a candidate runs up to three CPU tasks at once). Starts
    /// the Ray driver if it is not running yet.
    pub fn parallelism(&self) -> Result<usize> {
        let Some(fleet) = &self.fleet else { return Ok(1) };
        let r = fleet.hello()?.resources;
        let (gpus, cpus) = (r.get("GPU").copied().unwrap_or(0.0), r.get("CPU").copied().unwrap_or(0.0));
        let n = if gpus >= 1.0 { gpus } else { cpus / 3.0 };
        Ok((n.floor() as usize).max(1))
    }

    /// Validates `inputs`, `width` at a time (see [`Validator::parallelism`]),
    /// handing each result to `done` on the calling thread as it is known,
    /// with its index. The order of completion is not the order of `inputs`.
    pub fn validate_all(&self, inputs: &[CandidateInput], width: usize, mut done: impl FnMut(usize, Result<Evidence>)) {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            for _ in 0..width.clamp(1, inputs.len().max(1)) {
                let (tx, next) = (tx.clone(), &next);
                s.spawn(move || {
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        let Some(c) = inputs.get(i) else { break };
                        if tx.send((i, self.validate(c))).is_err() {
                            break;
                        }
                    }
                });
            }
            drop(tx);
            for (i, r) in rx {
                done(i, r);
            }
        });
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
            prediction: None,
        };
        let verdict = self.gates(&mut run)?;
        Ok(run.finish(verdict))
    }

    /// The work profile of the kernel `name` (its manifest's source, or
    /// `source` in its place) from the harness's `profile`, in the check's
    /// sandbox, and its roofline prediction on the device model.
    pub fn profile(&self, name: &str, source: Option<&Path>) -> Result<ProfileReport> {
        let manifest = self.kernels.manifests.iter().find(|m| m.name == name).ok_or_else(|| {
            let known: Vec<&str> = self.kernels.manifests.iter().map(|m| m.name.as_str()).collect();
            Error::UnknownKernel { name: name.to_string(), known: known.join(", ") }
        })?;
        let mut args = vec!["profile".to_string(), "--kernel".into(), manifest.name.clone()];
        if let Some(s) = source {
            let abs = std::path::absolute(s).map_err(|e| Error::io(s, e))?;
            args.extend(["--source".into(), abs.to_string_lossy().into_owned()]);
        }
        args.extend(["--timeout".into(), self.opts.timeout.as_secs().max(1).to_string()]);
        let harness = Harness { python: self.python.clone(), root: self.opts.root.clone(), fleet: None };
        let run = harness.call(&args, self.opts.timeout + Duration::from_secs(10))?;
        let parsed = match run.status {
            HarnessStatus::Ok => crate::wire::header(&run, "profile")
                .and_then(|_| crate::wire::body::<crate::wire::Profile>(&run, "profile"))
                .map_err(|e| e.to_string()),
            HarnessStatus::Skipped => {
                Err(format!("skipped: {}", run.json["reason"].as_str().unwrap_or("no reason given")))
            }
            _ => Err(run.log()),
        };
        let (profile, problem) = match parsed {
            Ok(p) => (Some(p), None),
            Err(e) => (None, Some(e)),
        };
        let prediction = match (&profile, &self.opts.device_model) {
            (Some(p), Some(d)) => Some(crate::predict::predict(&p.totals, p.launches, d)),
            _ => None,
        };
        let device = run.json["device"].as_str().map(String::from);
        Ok(ProfileReport {
            kernel: manifest.name.clone(),
            source: manifest.source_path(),
            device,
            profile,
            prediction,
            problem,
        })
    }

    /// The per-site search of `req` on the kernel source `req.path`, whose
    /// baseline text is `baseline`; `text` renders an assignment as that
    /// source. Variants are measured by the harness's `sweep` beside a copy
    /// of the baseline tree (the contract never comes from a variant),
    /// `jobs` at a time. See [`crate::search`].
    pub fn search_sites<F: Fn(&crate::search::Assignment) -> Result<String>>(
        &self,
        req: &crate::search::Request,
        baseline: &str,
        jobs: usize,
        text: F,
    ) -> Result<crate::search::SiteSearch> {
        let manifest = self
            .kernels
            .for_source(req.path)
            .ok_or_else(|| Error::Search(format!("{} is no kernel's source (no manifest names it)", req.path)))?;
        if manifest.curve.is_none() {
            return Err(Error::Search(format!("{} has no [curve]: there is no error to search on", manifest.name)));
        }
        let tmp = tempfile::Builder::new()
            .prefix("kidiom-search-")
            .tempdir()
            .map_err(|e| Error::io(std::env::temp_dir(), e))?;
        let tree = tmp.path().join("tree");
        copy_tree(&self.opts.root.join(&self.kernels.dir), &tree.join(&self.kernels.dir))?;
        let base_file = tree.join(req.path);
        std::fs::write(&base_file, baseline).map_err(|e| Error::io(&base_file, e))?;
        let dir = tmp.path().join("variants");
        let harness = Harness::new(self.python.clone(), tree);
        let mut m = crate::search::HarnessMeasure::new(harness, manifest, &dir, jobs, self.opts.timeout);
        crate::search::run(req, &mut m, text)
    }

    /// Baseline and candidate texts of every file the diff touches. Files a
    /// diff cannot change as text (binary, renamed) are left out when they
    /// are contract (the static gate rejects them) and an error otherwise.
    fn texts(&self, run: &mut Run<'_>, files: &[FilePatch]) -> std::result::Result<Vec<Touched>, String> {
        let mut out = Vec::new();
        for f in files {
            if let Some(what) = f.unsupported() {
                if f.paths().iter().any(|p| self.kernels.is_contract(p)) {
                    continue;
                }
                return Err(format!("{}: {what} cannot be validated; a candidate changes text", f.path));
            }
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
        let files = match patch::parse(&run.c.diff) {
            Ok(f) if !f.is_empty() => f,
            Ok(_) => return Ok(Verdict::error(None, "the candidate's diff is empty", "")),
            Err(e) => return Ok(Verdict::error(None, e.to_string(), "")),
        };
        let touched = match self.texts(run, &files) {
            Ok(t) => t,
            Err(e) => return Ok(Verdict::error(None, e, "")),
        };
        // 1. syntax
        if let Some(v) = syntax::gate(run, &touched) {
            return Ok(v);
        }
        // 2. static, the part that needs no harness: contract, host code, numeric flags
        let scan = match static_gate::scan(self, run, &files, &touched) {
            Ok(s) => s,
            Err(v) => return Ok(v),
        };
        let manifest = scan.manifest.clone();
        run.kernel = Some(manifest.clone());
        let prepared = self.prepare(&touched[scan.touched])?;
        let runs = self.launch(run, &prepared, &manifest, scan.precision)?;
        // 2. static, the compiles
        if let Some(v) = static_gate::judge_compiles(run, scan.rec, &scan.flag_text, &runs, &manifest.name) {
            return Ok(v);
        }
        // 3. correctness (its processes ran alongside the compiles)
        let native = match correctness::judge(run, &manifest, &runs) {
            Ok(native) => native,
            Err(v) => return Ok(v),
        };
        // 4. speed
        Ok(speed::gate(run, &prepared, &manifest, scan.changed_lines, scan.precision, native))
    }

    /// The baseline tree with its contract, and the candidate source beside it.
    fn prepare(&self, t: &Touched) -> Result<Prepared> {
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
        let cand_src = cand_file.to_string_lossy().to_string();
        let harness = Harness { python: self.python.clone(), root: tree, fleet: self.fleet.clone() };
        Ok(Prepared { harness, cand_src, _tmp: tmp })
    }

    /// Runs the compiles (baseline cached per blob) and the correctness checks
    /// together. The candidate's check does not depend on its compile; it is
    /// killed if the compile fails, and the gates are still judged in order.
    fn launch(&self, run: &mut Run<'_>, p: &Prepared, manifest: &Manifest, precision: bool) -> Result<Runs> {
        let name = manifest.name.clone();
        let base_text = std::fs::read(p.harness.root.join(manifest.source_path()))
            .map_err(|e| Error::io(p.harness.root.join(manifest.source_path()), e))?;
        let key = (name.clone(), blob_id(&base_text));
        let cached = self.compiled.lock().ok().and_then(|m| m.get(&key).cloned());
        let compile_args = |source: Option<&str>| -> Vec<String> {
            let mut a = vec!["compile".to_string(), "--kernel".into(), name.clone()];
            if let Some(s) = source {
                a.extend(["--source".into(), s.to_string()]);
            }
            a
        };
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
        let cand_args = check_args(Some(&p.cand_src), self.opts.seeds, curve, self.opts.consistency);
        let limit = run.remaining();
        let cancel = AtomicBool::new(false);
        let harness = &p.harness;
        let panicked = |what: &str| Error::Diff(format!("the {what} thread panicked"));
        let profile = self.opts.device_model.is_some() && manifest.language != crate::manifest::KernelLanguage::Cpp;
        let profile_args = |source: Option<&str>| -> Vec<String> {
            let mut a = vec!["profile".to_string(), "--kernel".into(), name.clone()];
            if let Some(s) = source {
                a.extend(["--source".into(), s.to_string()]);
            }
            a
        };
        let base_profiled = self.profiled.lock().ok().and_then(|m| m.get(&key).cloned());
        let (base_run, cand_run, cand_check, base_check, profiles) = std::thread::scope(|s| {
            // the profiles run beside the rest; each is a sandboxed run of the kernel on the CPU
            let profiles = profile.then(|| {
                s.spawn(|| {
                    let base = match &base_profiled {
                        Some(r) => Ok(r.clone()),
                        None => harness.call(&profile_args(None), limit),
                    };
                    let cand = harness.call_cancellable(&profile_args(Some(&p.cand_src)), limit, &cancel);
                    (base, cand)
                })
            });
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
            let cr = harness.call(&compile_args(Some(&p.cand_src)), limit);
            if !matches!(&cr, Ok(r) if r.status == HarnessStatus::Ok) {
                cancel.store(true, Ordering::Relaxed);
            }
            let (compiled, check) = b.join().unwrap_or_else(|_| (Err(panicked("baseline")), None));
            let cc = c.join().unwrap_or_else(|_| Err(panicked("check")));
            let profiles =
                profiles.map(|h| h.join().unwrap_or_else(|_| (Err(panicked("profile")), Err(panicked("profile")))));
            (compiled, cr, cc, check, profiles)
        });
        let profiles = match profiles {
            Some((b, c)) => Some((b?, c?)),
            None => None,
        };
        if base_profiled.is_none()
            && let Some((b, _)) = &profiles
            && b.status == HarnessStatus::Ok
            && let Ok(mut m) = self.profiled.lock()
        {
            m.insert(key.clone(), b.clone());
        }
        let (base_compile, cand_compile) = (base_run?, cand_run?);
        if cached.is_none()
            && base_compile.status == HarnessStatus::Ok
            && let Ok(mut m) = self.compiled.lock()
        {
            m.insert(key, base_compile.clone());
        }
        Ok(Runs {
            base_compile,
            cand_compile,
            cand_check: cand_check?,
            base_check: base_check.transpose()?,
            cached: cached.is_some(),
            profiles,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::wire::tests::{run as harness_run, with_header};

    const MANIFEST: &str = r#"
format = 1
name = "kda.decode"
op = "kda_decode"
language = "triton"
source = "decode.py"
entry = "kda_decode_kernel"
launcher = "kda_decode"
reference = "kernels.kda.reference:naive_decode_kda"
[tolerance]
rel_l2 = 5e-3
slice_rel_l2 = 1e-2
max_abs_rel = 2e-2
[shapes]
cpu = [{ N = 1 }]
gpu = []
bench = { N = 64 }
[floor]
bytes = "N"
flops = "N"
"#;

    fn compile_ok() -> Value {
        with_header(
            "compile",
            "ok",
            json!({"arch": "sm_90a", "resources": {"registers": 91, "spill_store_bytes": 0},
                   "instructions": {"total": 432, "by_class": {"fp32": 197}, "by_opcode": {}}}),
        )
    }

    fn check_passed() -> Value {
        with_header(
            "check",
            "passed",
            json!({"mode": "interpreter-tf32", "passed": true, "failures": [], "cases": [
                {"id": "c", "passed": true, "outputs": {"o": {"rel_l2": 1e-7, "max_abs_rel": 1e-7, "nonfinite": 0}}}]}),
        )
    }

    /// `f` on a run of a bare candidate of `path` in an empty tree, for judging made-up harness output.
    pub(crate) fn bare_run<T>(path: &str, kernel: Option<Manifest>, f: impl FnOnce(Run<'_>) -> T) -> T {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("kernels")).unwrap();
        let v = ValidatorBuilder::new(dir.path()).device(Device::Cpu).build().unwrap();
        let c = CandidateInput {
            id: "c".into(),
            pattern_id: "p".into(),
            category: None,
            path: path.into(),
            base_blob: String::new(),
            result_blob: String::new(),
            diff: String::new(),
            decorator_idiom: None,
        };
        let seeds = if kernel.is_some() { vec![1] } else { Vec::new() };
        f(Run {
            v: &v,
            c: &c,
            started: Instant::now(),
            records: Vec::new(),
            kernel,
            seeds,
            flags: Vec::new(),
            notes: Vec::new(),
            prediction: None,
        })
    }

    /// Judges the static and correctness gates on made-up harness runs.
    fn judge(cand_compile: HarnessRun, cand_check: HarnessRun) -> Evidence {
        let manifest = Manifest::parse(MANIFEST, "kernels/kda/decode.toml").unwrap();
        bare_run(&manifest.source_path(), Some(manifest.clone()), |run| {
            judge_in(run, &manifest, cand_compile, cand_check)
        })
    }

    fn judge_in(run: Run<'_>, manifest: &Manifest, cand_compile: HarnessRun, cand_check: HarnessRun) -> Evidence {
        judge_profiled(run, manifest, cand_compile, cand_check, None)
    }

    fn judge_profiled(
        mut run: Run<'_>,
        manifest: &Manifest,
        cand_compile: HarnessRun,
        cand_check: HarnessRun,
        profiles: Option<(HarnessRun, HarnessRun)>,
    ) -> Evidence {
        let runs = Runs {
            base_compile: harness_run(HarnessStatus::Ok, compile_ok()),
            cand_compile,
            cand_check,
            base_check: None,
            cached: false,
            profiles,
        };
        let rec = GateRecord::new(Gate::Static, GateStatus::Passed, "");
        let verdict = match static_gate::judge_compiles(&mut run, rec, &[], &runs, "kda.decode") {
            Some(v) => v,
            None => match correctness::judge(&mut run, manifest, &runs) {
                Ok(_) => Verdict::needs_gpu("passed"),
                Err(v) => v,
            },
        };
        run.finish(verdict)
    }

    fn kind(e: &Evidence) -> (VerdictKind, Option<Gate>) {
        (e.verdict.kind, e.verdict.gate)
    }

    /// A `profile` reply with these state reads (the decode at the bench shape).
    fn profile(state_reads: u64) -> Value {
        let kv: u64 = 64 * 32 * 128 * 128;
        with_header(
            "profile",
            "ok",
            json!({"shape": {"N": 64}, "counted": {"shape": {"N": 2}, "programs": 64, "programs_total": 2048,
                   "scale": 32.0, "exact": false},
                   "totals": {"load_bytes": state_reads * kv * 4, "store_bytes": kv * 4,
                              "reread_bytes": (state_reads - 1) * kv * 4, "special_calls": 2 * kv,
                              "flops": 7 * kv, "dot_macs": 0},
                   "floor": {"bytes": (2 * kv * 4) as f64, "flops": (7 * kv) as f64},
                   "traffic_ratio": (state_reads + 1) as f64 / 2.0, "launches": 1, "lines": []}),
        )
    }

    #[test]
    fn the_work_profiles_predict_and_a_predicted_slowdown_is_rejected() {
        let manifest = Manifest::parse(MANIFEST, "kernels/kda/decode.toml").unwrap();
        let judge_runs = |base: HarnessRun, cand: HarnessRun| {
            bare_run(&manifest.source_path(), Some(manifest.clone()), |run| {
                let (compile, check) = (compile_ok(), check_passed());
                let (compile, check) = (harness_run(HarnessStatus::Ok, compile), harness_run(HarnessStatus::Ok, check));
                judge_profiled(run, &manifest, compile, check, Some((base, cand)))
            })
        };
        let judge_pair = |base: Value, cand: Value| {
            judge_runs(harness_run(HarnessStatus::Ok, base), harness_run(HarnessStatus::Ok, cand))
        };
        // the second read of the state removed: a prediction, recorded and labelled as one
        let e = judge_pair(profile(2), profile(1));
        let p = e.prediction.clone().expect("a prediction");
        assert_eq!((p.label.as_str(), p.bound), ("prediction", crate::predict::Bound::Memory));
        assert!((1.40..1.50).contains(&p.speedup), "{p:?}");
        assert_eq!(p.traffic_ratio, (1.5, 1.0));
        let st = e.gate(Gate::Static).unwrap();
        assert!(st.summary.contains("predicted 1.4"), "{}", st.summary);
        assert_eq!(st.metrics["prediction"]["label"], "prediction");
        assert_eq!(kind(&e).0, VerdictKind::NeedsGpu, "{e:?}");
        // a re-read added: predicted slower than the limit allows, rejected at static
        let e = judge_pair(profile(1), profile(3));
        assert_eq!(kind(&e), (VerdictKind::Rejected, Some(Gate::Static)), "{e:?}");
        assert!(e.verdict.reason.starts_with("predicted slower: the work profile predicts"), "{}", e.verdict.reason);
        // a profile that could not be made is a note, not a verdict
        let skipped = with_header("profile", "skipped", json!({"reason": "the CPU cannot run it"}));
        let e = judge_runs(harness_run(HarnessStatus::Ok, profile(2)), harness_run(HarnessStatus::Skipped, skipped));
        assert_eq!(kind(&e).0, VerdictKind::NeedsGpu, "{e:?}");
        assert!(e.prediction.is_none());
        assert!(
            e.verdict.reason.contains("no prediction: the candidate's profile was skipped"),
            "{}",
            e.verdict.reason
        );
    }

    #[test]
    fn a_timeout_anywhere_is_an_error_never_a_rejection() {
        let ok = || harness_run(HarnessStatus::Ok, check_passed());
        // the harness's own alarm during the compile
        let alarm = harness_run(
            HarnessStatus::Error,
            with_header("compile", "error", json!({"error": "harness timed out after 1.0 s"})),
        );
        let e = judge(alarm, ok());
        assert_eq!(kind(&e), (VerdictKind::Error, Some(Gate::Static)), "{e:?}");
        assert!(e.verdict.reason.contains("timed out"), "{}", e.verdict.reason);
        assert_eq!(e.gates.last().map(|g| g.status), Some(GateStatus::Error));
        // the validator's deadline kill during the compile
        let killed = harness_run(HarnessStatus::TimedOut, Value::Null);
        let e = judge(killed, ok());
        assert_eq!(kind(&e), (VerdictKind::Error, Some(Gate::Static)), "{e:?}");
        assert!(e.verdict.reason.contains("timed out"), "{}", e.verdict.reason);
        // the same in the correctness check
        let alarm = harness_run(
            HarnessStatus::Error,
            with_header("check", "error", json!({"error": "harness timed out after 9.0 s"})),
        );
        let e = judge(harness_run(HarnessStatus::Ok, compile_ok()), alarm);
        assert_eq!(kind(&e), (VerdictKind::Error, Some(Gate::Correctness)), "{e:?}");
        assert!(e.verdict.reason.contains("timed out"), "{}", e.verdict.reason);
        let e = judge(harness_run(HarnessStatus::Ok, compile_ok()), harness_run(HarnessStatus::TimedOut, Value::Null));
        assert!(e.verdict.reason.contains("timed out"), "{}", e.verdict.reason);
        // a real compile error is still a rejection
        let broken = harness_run(
            HarnessStatus::Error,
            with_header("compile", "error", json!({"error": "CompilationError: at 12:4: unsupported op"})),
        );
        let e = judge(broken, ok());
        assert_eq!(kind(&e), (VerdictKind::Rejected, Some(Gate::Static)), "{e:?}");
        assert!(e.verdict.reason.contains("does not compile for sm_90a"), "{}", e.verdict.reason);
    }

    #[test]
    fn a_skipped_check_names_no_device_and_says_correctness_was_not_checked() {
        let skipped = harness_run(
            HarnessStatus::Skipped,
            with_header("check", "skipped", json!({"reason": "the CUDA kernel cannot be emulated on the CPU"})),
        );
        let e = judge(harness_run(HarnessStatus::Ok, compile_ok()), skipped);
        assert_eq!(kind(&e), (VerdictKind::NeedsGpu, None), "{e:?}");
        assert!(e.verdict.reason.starts_with("correctness not checked on this CPU"), "{}", e.verdict.reason);
        assert!(e.verdict.flags.iter().any(|f| f.contains("cannot be emulated")), "{:?}", e.verdict.flags);
        let c = e.gate(Gate::Correctness).unwrap();
        assert_eq!((c.status, c.device.as_deref()), (GateStatus::Skipped, None));
        assert_eq!(e.gate(Gate::Speed).map(|g| g.status), Some(GateStatus::Skipped));
        assert!(e.gate(Gate::Static).unwrap().device.is_some(), "the compile did run somewhere");
    }

    #[test]
    fn malformed_harness_output_is_an_error_naming_the_field() {
        let mut compile = compile_ok();
        compile.as_object_mut().unwrap().remove("resources");
        let e = judge(harness_run(HarnessStatus::Ok, compile), harness_run(HarnessStatus::Ok, check_passed()));
        assert_eq!(kind(&e), (VerdictKind::Error, Some(Gate::Static)), "{e:?}");
        assert!(e.verdict.reason.contains("missing field `resources`"), "{}", e.verdict.reason);
        let mut check = check_passed();
        check["cases"][0]["outputs"]["o"]["rel_l2"] = json!("small");
        let e = judge(harness_run(HarnessStatus::Ok, compile_ok()), harness_run(HarnessStatus::Ok, check));
        assert_eq!(kind(&e), (VerdictKind::Error, Some(Gate::Correctness)), "{e:?}");
        assert!(e.verdict.reason.contains("cases[0].outputs.o.rel_l2"), "{}", e.verdict.reason);
        let mut lying = check_passed();
        lying["passed"] = json!(false);
        let e = judge(harness_run(HarnessStatus::Ok, compile_ok()), harness_run(HarnessStatus::Ok, lying));
        assert!(e.verdict.reason.contains("field `passed`"), "{}", e.verdict.reason);
        let e = judge(harness_run(HarnessStatus::Ok, compile_ok()), harness_run(HarnessStatus::Ok, check_passed()));
        assert_eq!(kind(&e), (VerdictKind::NeedsGpu, None), "a well-formed run passes: {e:?}");
    }

    #[test]
    fn a_task_whose_worker_died_twice_is_an_error_with_the_reason_and_the_placements_are_evidence() {
        let placed = |mut run: HarnessRun, node: &str, error: Option<&str>| {
            run.placement = Some(kidiom_exec::Placement {
                command: run.process.command.clone(),
                executor: "ray".into(),
                node: Some(node.into()),
                gpu: None,
                attempts: if error.is_some() { 2 } else { 1 },
                seconds: 1.0,
                harness: Some("abc".into()),
                failures: Vec::new(),
                error: error.map(str::to_string),
            });
            run
        };
        let died = placed(
            harness_run(HarnessStatus::Crashed, Value::Null),
            "n2 (10.0.0.2)",
            Some("worker died twice: attempt 1: WorkerCrashedError; attempt 2: WorkerCrashedError"),
        );
        let e = judge(placed(harness_run(HarnessStatus::Ok, compile_ok()), "n1 (10.0.0.1)", None), died);
        assert_eq!(kind(&e), (VerdictKind::Error, Some(Gate::Correctness)), "{e:?}");
        assert!(e.verdict.reason.starts_with("the correctness check crashed on the cluster"), "{}", e.verdict.reason);
        assert!(e.verdict.reason.contains("worker died twice"), "{}", e.verdict.reason);
        let nodes = |g: Gate| e.gate(g).unwrap().placements.iter().map(|p| p.node.clone()).collect::<Vec<_>>();
        assert_eq!(nodes(Gate::Static), [Some("n1 (10.0.0.1)".to_string())]);
        assert_eq!(nodes(Gate::Correctness), [Some("n2 (10.0.0.2)".to_string())]);
        // evidence without placements (local runs, older records) reads and writes as before
        let json = serde_json::to_value(
            e.gate(Gate::Syntax).cloned().unwrap_or_else(|| GateRecord::new(Gate::Syntax, GateStatus::Passed, "")),
        )
        .unwrap();
        assert!(json.get("placements").is_none());
        let back: GateRecord = serde_json::from_value(json).unwrap();
        assert!(back.placements.is_empty());
    }

    #[test]
    fn validate_all_hands_back_every_candidate_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("kernels")).unwrap();
        let v = ValidatorBuilder::new(dir.path()).build().unwrap();
        assert_eq!(v.parallelism().unwrap(), 1, "local: one at a time");
        let inputs: Vec<CandidateInput> = (0..7)
            .map(|i| CandidateInput {
                id: format!("c{i}"),
                pattern_id: "p".into(),
                category: None,
                path: "kernels/k.py".into(),
                base_blob: String::new(),
                result_blob: String::new(),
                diff: String::new(),
                decorator_idiom: None,
            })
            .collect();
        let mut seen = Vec::new();
        v.validate_all(&inputs, 3, |i, r| seen.push((i, r.map(|e| e.candidate))));
        seen.sort_by_key(|(i, _)| *i);
        let got: Vec<(usize, String)> = seen.into_iter().map(|(i, c)| (i, c.unwrap())).collect();
        assert_eq!(got, (0..7).map(|i| (i, format!("c{i}"))).collect::<Vec<_>>());
    }

    #[test]
    fn devices_have_names() {
        assert_eq!(Device::from_name("cuda"), Some(Device::Cuda));
        assert_eq!(Device::from_name("tpu"), None);
    }

    #[test]
    fn a_patch_becomes_a_manual_candidate() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("kernels")).unwrap();
        std::fs::write(dir.path().join("kernels/k.py"), "a = 1\n").unwrap();
        let diff = kidiom_rewrite::unified("kernels/k.py", "a = 1\n", "a = 2\n", 3);
        let c = CandidateInput::from_patch(dir.path(), &diff, None).unwrap();
        assert_eq!(c.pattern_id, MANUAL_PATTERN);
        assert!(c.id.starts_with("manual@kernels/k.py#"), "{}", c.id);
        assert_eq!(c.base_blob, blob_id(b"a = 1\n"));
        assert_eq!(c.result_blob, blob_id(b"a = 2\n"));
        let stale = kidiom_rewrite::unified("kernels/k.py", "b = 1\n", "b = 2\n", 3);
        assert!(CandidateInput::from_patch(dir.path(), &stale, None).is_err());
        assert!(CandidateInput::from_patch(dir.path(), "nonsense\n", None).is_err());
    }
}
