//! The validator: its options ([`ValidatorBuilder`]) and what it does with
//! them ([`Validator`]): run the gates on candidates, profile a kernel, and
//! search a kernel's sites. The gates themselves are in `gates/`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::backend::python::{Harness, HarnessRun, HarnessStatus};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::evidence::Evidence;
use crate::gates::{StaticLimits, Validation};
use crate::input::CandidateInput;
use crate::manifest::{KernelLanguage, Kernels};
use crate::predict::DeviceModel;
use crate::request::{Kernel, Request};
use crate::tree::baseline_tree;
use kidiom_exec::Executor;
use kidiom_exec::Fleet;
use kidiom_exec::find_python;
use kidiom_syntax::Lang;

/// Fresh random seeds of the correctness gate, unless told otherwise.
pub const DEFAULT_SEEDS: u32 = 3;

/// Options of a validation run.
#[derive(Debug, Clone)]
pub struct ValidatorBuilder {
    pub(crate) root: PathBuf,
    pub(crate) kernels_dir: String,
    /// The directory holding the harness (`kernels/harness`); `None`: the root.
    pub(crate) harness: Option<PathBuf>,
    /// Directories (relative to the root, or absolute) walked for kernel manifests.
    pub(crate) targets: Vec<PathBuf>,
    pub(crate) python: Option<PathBuf>,
    pub(crate) device: Device,
    pub(crate) timeout: Duration,
    pub(crate) seeds: u32,
    pub(crate) seed: Option<u64>,
    pub(crate) consistency: bool,
    pub(crate) bench_iters: u32,
    pub(crate) untrusted_bench: bool,
    /// Input sets of the baseline's GPU gate spec ([`crate::gates::GATE_SETS`]; tests make fewer).
    pub(crate) gate_sets: u32,
    pub(crate) static_limits: Option<StaticLimits>,
    pub(crate) executor: Executor,
    pub(crate) device_model: Option<DeviceModel>,
    /// The held-out errors of `kidiom predict --check`: each prediction says its own.
    pub(crate) expected_errors: Option<crate::published::ExpectedErrors>,
    /// Where the host speed gate's baseline history is read and written.
    pub(crate) host_history: Option<PathBuf>,
}

impl ValidatorBuilder {
    /// Validation of rewrites under `root` (the directory holding `kernels/`).
    pub fn new(root: impl Into<PathBuf>) -> ValidatorBuilder {
        ValidatorBuilder {
            root: root.into(),
            kernels_dir: "kernels".into(),
            harness: None,
            targets: Vec::new(),
            python: None,
            device: Device::Auto,
            timeout: Duration::from_secs(600),
            seeds: DEFAULT_SEEDS,
            seed: None,
            consistency: true,
            bench_iters: 50,
            untrusted_bench: false,
            gate_sets: crate::gates::GATE_SETS,
            static_limits: Some(StaticLimits::default()),
            executor: Executor::Local,
            device_model: Some(DeviceModel::h200()),
            expected_errors: None,
            host_history: None,
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

    /// The directory holding the harness (`<dir>/kernels/harness`), when the
    /// root does not: the harness and the contracts kidiom ships are copied
    /// from there into each validation's tree (default: the root).
    pub fn harness(&mut self, dir: Option<PathBuf>) -> &mut Self {
        self.harness = dir;
        self
    }

    /// Directories to walk for kernel manifests besides the kernels
    /// directory ([`Kernels::discover`]): a user's own kernels, with their
    /// format-2 contracts, anywhere under the root.
    pub fn targets(&mut self, dirs: Vec<PathBuf>) -> &mut Self {
        self.targets = dirs;
        self
    }

    /// The Python interpreter (default: `$KIDIOM_PYTHON`, `.venv/bin/python`
    /// of the root, then of the harness's directory, `python3`).
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

    /// A fixed base seed (default: a fresh one per [`Validator`], shared by
    /// the candidates it validates, so that the baseline's errors on those
    /// inputs are computed once per kernel, seed and shape).
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

    /// Whether a GPU kernel's speed is timed by the harness's `bench`, which
    /// imports the candidate into the timing process (default off: kidiom's
    /// own GPU gate times the candidate's device code only). Its evidence is
    /// marked untrusted in the record and in the verdict's flags.
    pub fn untrusted_bench(&mut self, yes: bool) -> &mut Self {
        self.untrusted_bench = yes;
        self
    }

    /// Where the host speed gate keeps the baseline's history (a directory
    /// of the harness's files, one per bench key); `None`: the harness's own
    /// (its cache). `kidiom validate` passes one it fills from the catalog.
    pub fn host_history(&mut self, dir: Option<PathBuf>) -> &mut Self {
        self.host_history = dir;
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

    /// The held-out errors of `kidiom predict --check` (`None`: a
    /// prediction says its error is unknown).
    pub fn expected_errors(&mut self, errors: Option<crate::published::ExpectedErrors>) -> &mut Self {
        self.expected_errors = errors;
        self
    }

    /// Reads the manifests of the baseline tree.
    pub fn build(&self) -> Result<Validator> {
        let harness_root = self.harness.clone().unwrap_or_else(|| self.root.clone());
        let mut kernels = Kernels::load(&self.root, &self.kernels_dir)?;
        if harness_root != self.root {
            // the harness runs from another tree's kernels/: these go by their paths
            for m in &mut kernels.manifests {
                m.named = false;
            }
        }
        kernels.discover(&self.root, &self.targets)?;
        let python = self.python.clone().unwrap_or_else(|| {
            let p = find_python(&self.root);
            if p == Path::new("python3") { find_python(&harness_root) } else { p }
        });
        let fleet = match &self.executor {
            Executor::Local => None,
            Executor::Ray { address } => Some(Arc::new(Fleet::new(&python, &harness_root, address.clone()))),
        };
        // here only: a task on a cluster runs where this directory does not exist
        let baseline_cache = match fleet {
            None => Some(
                tempfile::Builder::new()
                    .prefix("kidiom-baseline-")
                    .tempdir()
                    .map_err(|e| Error::io(std::env::temp_dir(), e))?,
            ),
            Some(_) => None,
        };
        Ok(Validator {
            opts: self.clone(),
            harness_root,
            kernels,
            python,
            commit: git_head(&self.root),
            compiled: BaselineRuns::default(),
            profiled: BaselineRuns::default(),
            checked: BaselineRuns::default(),
            specced: BaselineRuns::default(),
            contracts: BaselineRuns::default(),
            run_seed: crate::gates::fresh_seed(),
            baseline_cache,
            fleet,
            timing: std::sync::RwLock::new(()),
        })
    }
}

/// Validates candidates against the baseline tree under its root.
#[derive(Debug)]
pub struct Validator {
    pub(crate) opts: ValidatorBuilder,
    /// The directory holding the harness (the root, or kidiom's own tree).
    pub(crate) harness_root: PathBuf,
    pub(crate) kernels: Kernels,
    pub(crate) python: PathBuf,
    pub(crate) commit: Option<String>,
    /// Baseline compiles, by kernel name and baseline blob.
    pub(crate) compiled: BaselineRuns,
    /// Baseline work profiles, by kernel name and baseline blob.
    pub(crate) profiled: BaselineRuns,
    /// The baseline's own check with its error curve (precision rewrites).
    pub(crate) checked: BaselineRuns,
    /// The baseline's GPU gate specs (written under `baseline_cache`).
    pub(crate) specced: BaselineRuns,
    /// The contract checks ([`crate::contract`]), passed or failed.
    pub(crate) contracts: BaselineRuns,
    /// The base seed of every candidate's check when none is fixed.
    pub(crate) run_seed: u64,
    /// Where the harness keeps the baseline's errors per case between the
    /// checks of this validator (`None` on a cluster); removed with it.
    pub(crate) baseline_cache: Option<tempfile::TempDir>,
    /// The Ray executor's driver (`None`: the harness runs here).
    pub(crate) fleet: Option<Arc<Fleet>>,
    /// Candidates validated at once share the machine through their gates
    /// (read); a speed measurement takes it alone (write), so that one
    /// candidate's checks never load the cores another's timing measures.
    pub(crate) timing: std::sync::RwLock<()>,
}

/// Baseline harness runs by kernel name and baseline blob, each computed
/// once even when candidates are validated at once: the first to need one
/// runs it while the others wait for its answer.
#[derive(Debug, Default)]
pub(crate) struct BaselineRuns(Mutex<HashMap<(String, String), Slot>>);

/// One baseline run, locked while the first to need it computes it.
type Slot = Arc<Mutex<Option<HarnessRun>>>;

impl BaselineRuns {
    /// The run stored for `key`, else `run()`'s (kept when it succeeded);
    /// the flag says whether it was stored.
    pub(crate) fn get_or_run(
        &self,
        key: &(String, String),
        run: impl FnOnce() -> Result<HarnessRun>,
    ) -> (Result<HarnessRun>, bool) {
        self.get_or_run_with(key, run, false)
    }

    fn get_or_run_with(
        &self,
        key: &(String, String),
        run: impl FnOnce() -> Result<HarnessRun>,
        keep_failed: bool,
    ) -> (Result<HarnessRun>, bool) {
        let slot = {
            let mut m = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            m.entry(key.clone()).or_default().clone()
        };
        let mut held = slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(r) = held.as_ref() {
            return (Ok(r.clone()), true);
        }
        let r = run();
        if let Ok(ok) = &r
            && (ok.status == HarnessStatus::Ok || (keep_failed && ok.status == HarnessStatus::Failed))
        {
            *held = Some(ok.clone());
        }
        (r, false)
    }

    /// As [`Self::get_or_run`], keeping a failed answer too (a check that
    /// ran to its end: the same inputs fail the same way).
    pub(crate) fn get_or_run_answered(
        &self,
        key: &(String, String),
        run: impl FnOnce() -> Result<HarnessRun>,
    ) -> (Result<HarnessRun>, bool) {
        self.get_or_run_with(key, run, true)
    }
}

fn git_head(root: &Path) -> Option<String> {
    let args = ["rev-parse".to_string(), "HEAD".to_string()];
    let out = kidiom_exec::run(Path::new("git"), &args, root, &[], std::time::Duration::from_secs(30)).ok()?;
    let s = out.stdout.trim().to_string();
    (!s.is_empty()).then_some(s)
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
    /// Its prediction under a CUDA graph, when there is a device model.
    pub prediction: Option<crate::predict::Prediction>,
    /// The launch's configuration from the compile at the same shape, when
    /// it compiled (`None`: the prediction has the roofs alone).
    pub launch: Option<crate::predict::LaunchShape>,
    /// Why there is no launch configuration, when there is none.
    pub launch_problem: Option<String>,
    /// Why there is no profile.
    pub problem: Option<String>,
    /// What the profile shows the kernel does more than once, largest
    /// predicted gain first ([`crate::redundancy`]).
    pub redundancy: Vec<crate::redundancy::Finding>,
}

impl Validator {
    /// The kernels of the baseline tree.
    pub fn kernels(&self) -> &Kernels {
        &self.kernels
    }

    /// The directory the harness comes from (`<dir>/kernels/harness`).
    pub fn harness_root(&self) -> &Path {
        &self.harness_root
    }

    /// The Python interpreter the harness runs under.
    pub fn python(&self) -> &Path {
        &self.python
    }

    /// How many candidates to validate at once to keep the executor busy:
    /// here one per CPU (a candidate's harness calls wait on Python starts
    /// and files as much as they compute); on a Ray cluster one per GPU, or
    /// per three CPUs on a cluster without GPUs (a candidate runs up to three
    /// CPU tasks at once). Starts the Ray driver if it is not running yet.
    pub fn parallelism(&self) -> Result<usize> {
        let Some(fleet) = &self.fleet else {
            return Ok(std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
        };
        let r = fleet.hello()?.resources;
        let (gpus, cpus) = (r.get("GPU").copied().unwrap_or(0.0), r.get("CPU").copied().unwrap_or(0.0));
        let n = if gpus >= 1.0 { gpus } else { cpus / 3.0 };
        Ok((n.floor() as usize).max(1))
    }

    /// Validates `inputs`, `width` at a time (see [`Validator::parallelism`]),
    /// telling `done` on the calling thread when each starts (`None`) and
    /// its result when it is known, with its index. The order of completion
    /// is not the order of `inputs`; the verdicts are those of one at a time
    /// (each candidate has its own tree and harness processes; what they
    /// share, the baseline's runs, is the same whoever computes it). After a
    /// validation that could not run at all (`Err`), no other starts.
    pub fn validate_all(
        &self,
        inputs: &[CandidateInput],
        width: usize,
        mut done: impl FnMut(usize, Option<Result<Evidence>>),
    ) {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            for _ in 0..width.clamp(1, inputs.len().max(1)) {
                let (tx, next, stop) = (tx.clone(), &next, &stop);
                s.spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        let Some(c) = inputs.get(i) else { break };
                        if tx.send((i, None)).is_err() {
                            break;
                        }
                        let r = self.validate(c);
                        if r.is_err() {
                            stop.store(true, Ordering::SeqCst);
                        }
                        if tx.send((i, Some(r))).is_err() {
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
        let mut validation = Validation::new(self, c);
        let verdict = crate::gates::in_order(&mut validation)?;
        Ok(validation.finish(verdict))
    }

    /// [`Validator::check_contract`] of each of `names`, one per CPU of this
    /// machine at once (each runs here, never on a cluster); the answers in
    /// `names`' order.
    pub fn check_contracts(&self, names: &[String]) -> Vec<Result<crate::ContractReport>> {
        let width = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, names.len().max(1));
        let next = std::sync::atomic::AtomicUsize::new(0);
        let answers: Vec<Mutex<Option<Result<crate::ContractReport>>>> =
            names.iter().map(|_| Mutex::new(None)).collect();
        std::thread::scope(|s| {
            for _ in 0..width {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        let Some(n) = names.get(i) else { break };
                        *answers[i].lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                            Some(self.check_contract(n));
                    }
                });
            }
        });
        answers
            .into_iter()
            .map(|a| {
                a.into_inner()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .unwrap_or_else(|| Err(Error::Internal("a contract check's thread ended without an answer".into())))
            })
            .collect()
    }

    /// The contract check of the kernel `name` as it is in the root: the
    /// unmodified kernel against its contract at every CPU shape and at odd
    /// sizes ([`crate::contract`]; `kidiom check`).
    pub fn check_contract(&self, name: &str) -> Result<crate::ContractReport> {
        let manifest = self.kernels.manifests.iter().find(|m| m.name == name).ok_or_else(|| {
            let known: Vec<&str> = self.kernels.manifests.iter().map(|m| m.name.as_str()).collect();
            Error::UnknownKernel { name: name.to_string(), known: known.join(", ") }
        })?;
        let harness = Harness { python: self.python.clone(), root: self.harness_root.clone(), fleet: None };
        // in the harness's own directory, the manifest by name there or by its path in the root
        let run = crate::contract::run(&harness, &self.opts.root, manifest, self.opts.timeout)?;
        Ok(crate::contract::report(manifest, &run))
    }

    /// The work profile of the kernel `name` (its manifest's source, or
    /// `source` in its place) from the harness's `profile`, in the check's
    /// sandbox, and its roofline prediction on the device model.
    pub fn profile(&self, name: &str, source: Option<&Path>) -> Result<ProfileReport> {
        self.profile_at(name, source, None)
    }

    /// [`Validator::profile`] at `shape` (the manifest's shape variables,
    /// each given) in place of the manifest's bench shape: the counts and the
    /// compile's launch configuration there (`kidiom predict --check`).
    pub fn profile_at(
        &self,
        name: &str,
        source: Option<&Path>,
        shape: Option<&std::collections::BTreeMap<String, u64>>,
    ) -> Result<ProfileReport> {
        // a state-precision variant is profiled as itself (its own bytes) on its kernel's manifest
        let variant = self.kernels.variants.iter().find(|v| v.name == name);
        let base = variant.map_or(name, |v| v.variant_of.as_str());
        let manifest = self.kernels.manifests.iter().find(|m| m.name == base).ok_or_else(|| {
            let known: Vec<&str> = self
                .kernels
                .manifests
                .iter()
                .map(|m| m.name.as_str())
                .chain(self.kernels.variants.iter().map(|v| v.name.as_str()))
                .collect();
            Error::UnknownKernel { name: name.to_string(), known: known.join(", ") }
        })?;
        let source_path = variant.map_or_else(|| manifest.source_path(), |v| v.source_path(manifest));
        let given = source;
        let source = match source {
            Some(s) => Some(std::path::absolute(s).map_err(|e| Error::io(s, e))?.to_string_lossy().into_owned()),
            None => None,
        };
        let timeout = Some(self.opts.timeout.as_secs().max(1));
        // in the harness's own directory, the manifest by name there or by its path in the root
        let arg = match variant {
            Some(v) => ("--manifest", self.opts.root.join(&v.path).to_string_lossy().into_owned()),
            None => manifest.harness_arg(&self.opts.root),
        };
        let shape = shape.map(|s| serde_json::to_string(s).unwrap_or_default());
        let shape = shape.as_deref();
        let args = Request::Profile { kernel: Kernel::of(&arg), source: source.as_deref(), timeout, shape }.argv();
        let compile_args = Request::Compile { kernel: Kernel::of(&arg), source: source.as_deref(), shape }.argv();
        let harness = Harness { python: self.python.clone(), root: self.harness_root.clone(), fleet: None };
        let limit = self.opts.timeout + Duration::from_secs(10);
        // the compile (its launch configuration) beside the profile; a host kernel has neither
        let device_code = manifest.language != KernelLanguage::Cpp;
        let (run, compiled) = std::thread::scope(|s| {
            let compiled = device_code.then(|| s.spawn(|| harness.call(&compile_args, limit)));
            let run = harness.call(&args, limit);
            let compiled =
                compiled.map(|h| h.join().map_err(|_| Error::Internal("the compile thread panicked".into())));
            (run, compiled)
        });
        let run = run?;
        let compiled = match compiled {
            Some(c) => Some(c??),
            None => None,
        };
        let parsed = match run.status {
            HarnessStatus::Ok => crate::wire::header(&run, "profile")
                .and_then(|_| crate::wire::body::<crate::wire::Profile>(&run, "profile"))
                .map_err(|e| e.to_string()),
            HarnessStatus::Skipped => {
                Err(format!("skipped: {}", run.json["reason"].as_str().unwrap_or("no reason given")))
            }
            // a contract the harness cannot use is its one line
            _ => Err(run.contract_error().map(String::from).unwrap_or_else(|| run.log())),
        };
        let (profile, problem) = match parsed {
            Ok(p) => (Some(p), None),
            Err(e) => (None, Some(e)),
        };
        let (launch, launch_problem) = match (&profile, &compiled) {
            (Some(p), Some(c)) if c.status == HarnessStatus::Ok => match p.launch(&c.json) {
                Some(l) => (Some(l), None),
                None => (None, Some("the compile gives no threads per program".to_string())),
            },
            (Some(_), Some(c)) => (None, Some(format!("the compile failed: {}", kidiom_exec::tail(&c.log(), 300)))),
            _ => (None, None),
        };
        let prediction = match (&profile, &self.opts.device_model) {
            (Some(p), Some(d)) => Some(crate::predict::predict_launch(
                &p.totals,
                p.launches,
                launch.as_ref(),
                crate::predict::Timing::Graph,
                d,
            )),
            _ => None,
        };
        let device = run.json["device"].as_str().map(String::from);
        let redundancy = match &profile {
            Some(p) => {
                // the text the profile's lines are of: the file given, else the kernel's own
                let (path, file) = match given {
                    Some(g) => (g.display().to_string(), g.to_path_buf()),
                    None => (source_path.clone(), self.opts.root.join(&source_path)),
                };
                let text = std::fs::read_to_string(&file).map_err(|e| Error::io(&file, e))?;
                let lang = match manifest.language {
                    KernelLanguage::Triton => Lang::Python,
                    KernelLanguage::Cuda => Lang::Cuda,
                    KernelLanguage::Cpp => Lang::Cpp,
                };
                crate::redundancy::findings(p, self.opts.device_model.as_ref(), lang, &text, &path)
            }
            None => Vec::new(),
        };
        Ok(ProfileReport {
            kernel: name.to_string(),
            source: source_path,
            device,
            profile,
            prediction,
            launch,
            launch_problem,
            problem,
            redundancy,
        })
    }

    /// The per-site search of `req` on the kernel source `req.path`, whose
    /// baseline text is `baseline`; `text` renders an assignment as that
    /// source. Variants are measured by the harness's `sweep` beside a copy
    /// of the baseline tree (the contract never comes from a variant),
    /// `jobs` at a time; `progress` hears of each batch. See [`crate::sitesearch`].
    pub fn search_sites<F: Fn(&crate::sitesearch::Assignment) -> Result<String>>(
        &self,
        req: &crate::sitesearch::Request,
        baseline: &str,
        jobs: usize,
        progress: Option<crate::sitesearch::Progress<'_>>,
        text: F,
    ) -> Result<crate::sitesearch::SiteSearch> {
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
        baseline_tree(self, &tree)?;
        let base_file = tree.join(req.path);
        std::fs::write(&base_file, baseline).map_err(|e| Error::io(&base_file, e))?;
        let dir = tmp.path().join("variants");
        let harness = Harness::new(self.python.clone(), tree);
        let mut m = crate::sitesearch::HarnessMeasure::new(harness, manifest, &dir, jobs, self.opts.timeout)
            .with_progress(progress);
        crate::sitesearch::search(req, &mut m, text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_all_hands_back_every_candidate_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("kernels")).unwrap();
        let v = ValidatorBuilder::new(dir.path()).build().unwrap();
        let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        assert_eq!(v.parallelism().unwrap(), cpus, "local: one per CPU");
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
        let (mut started, mut seen) = (Vec::new(), Vec::new());
        v.validate_all(&inputs, 3, |i, r| match r {
            None => started.push(i),
            Some(r) => {
                assert!(started.contains(&i), "{i} is announced before its result");
                seen.push((i, r.map(|e| e.candidate)))
            }
        });
        seen.sort_by_key(|(i, _)| *i);
        started.sort();
        assert_eq!(started, (0..7).collect::<Vec<_>>());
        let got: Vec<(usize, String)> = seen.into_iter().map(|(i, c)| (i, c.unwrap())).collect();
        assert_eq!(got, (0..7).map(|i| (i, format!("c{i}"))).collect::<Vec<_>>());
    }
}
