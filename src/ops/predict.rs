//! `kidiom predict --check DIR`: the device model against published
//! measurements (`kidiom_validator::published`). Each row's kernels are
//! profiled and compiled at the row's shape (the harness's caches keep
//! them), the latency terms fitted on the declared training half, and every
//! row scored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use kidiom_validator::published::{self, ExpectedErrors, Fitted, RowInput, RowScore, Work};

use crate::config::Config;

/// What is profiled: a kernel (its source edited as a source says) at a
/// shape, once however many rows need it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub(crate) struct KernelAt {
    pub(crate) kernel: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) edits: Vec<(String, String)>,
    pub(crate) shape: BTreeMap<String, u64>,
}

/// `work.json` beside the published rows: each kernel's work at each row's
/// shape, so the check needs no profile (`--refresh` makes them again).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct WorkFile {
    version: u32,
    entries: Vec<WorkEntry>,
}

/// One kernel's work at one shape, and what it was made from.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct WorkEntry {
    at: KernelAt,
    /// The git blob id of every input the work depends on (the kernel's
    /// edited source, manifest and contract; the harness's counting and
    /// compiling code): a changed input makes the entry stale.
    inputs: String,
    totals: kidiom_validator::predict::WorkTotals,
    launches: u64,
    launch: Option<kidiom_validator::predict::LaunchShape>,
}

/// The name of the stored work beside the published sources.
pub(crate) const WORK_FILE: &str = "work.json";
// 2: each entry holds the launch (programs, threads, registers, shared memory)
const WORK_VERSION: u32 = 2;

/// The harness's files that count work and compile it (the stored work's inputs).
const COUNTING: [&str; 5] = [
    "kernels/harness/triton/profile.py",
    "kernels/harness/triton/workprofile.py",
    "kernels/harness/triton/interp.py",
    "kernels/harness/triton/aot.py",
    "kernels/harness/triton/worker.py",
];

/// What to check.
pub(crate) struct Options {
    /// The folder of published sources.
    pub(crate) dir: PathBuf,
    pub(crate) python: Option<PathBuf>,
    pub(crate) timeout: Duration,
    /// Kernels profiled at a time (0: one per CPU).
    pub(crate) jobs: usize,
    /// Profile every kernel again and rewrite the stored work.
    pub(crate) refresh: bool,
}

/// Where the work came from.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub(crate) struct WorkCounts {
    /// Read from the stored work, its inputs unchanged.
    pub(crate) stored: usize,
    /// Profiled now (absent from the stored work, or stale, or `--refresh`).
    pub(crate) profiled: usize,
    /// Of those, stored entries whose inputs had changed.
    pub(crate) stale: usize,
    /// Whether the stored work was written.
    pub(crate) written: bool,
}

/// A source's rows that were not scored, and why.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Unscored {
    pub(crate) source: String,
    pub(crate) rows: Vec<usize>,
    pub(crate) why: String,
    /// Declared in the source (`[predict] skip`), not a failure.
    pub(crate) declared: bool,
}

/// The check's result.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Check {
    /// Every source read.
    pub(crate) sources: Vec<SourceSummary>,
    /// The scored rows.
    pub(crate) rows: Vec<RowScore>,
    /// Rows not scored.
    pub(crate) unscored: Vec<Unscored>,
    /// The parameters fitted on the training rows.
    pub(crate) fitted: Fitted,
    /// The parameters before the fit (kidiom.toml's device model).
    pub(crate) configured: Fitted,
    /// The held-out errors with the fitted parameters.
    pub(crate) expected: ExpectedErrors,
    /// The held-out errors with kidiom.toml's parameters.
    pub(crate) expected_configured: ExpectedErrors,
    /// The held-out errors of the roofline alone (the model before the
    /// latency terms: the roofs plus 3 us a launch).
    pub(crate) roofs_only: ExpectedErrors,
    /// Where each kernel's work came from.
    pub(crate) work: WorkCounts,
    /// The held-out errors of the roofs with the launch costs fitted the
    /// same way, without the occupancy terms (what Little's law and the
    /// waves add).
    pub(crate) roofs_fitted: ExpectedErrors,
}

/// One source as the report lists it.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct SourceSummary {
    pub(crate) id: String,
    pub(crate) url: String,
    pub(crate) device: String,
    pub(crate) kind: String,
    pub(crate) timed: published::Timed,
    pub(crate) rows: usize,
    pub(crate) baseline: Option<String>,
    pub(crate) improved: Option<String>,
}

/// The command that makes the expected errors, as they record it.
pub(crate) fn made_by(dir: &Path) -> String {
    format!("kidiom predict --check {}", dir.display())
}

/// Runs the check.
pub(crate) fn check(cfg: &Config, opts: &Options) -> Result<Check> {
    let root = super::root()?;
    let sources = published::read_dir(&opts.dir)?;
    let devices = cfg.device_models()?;
    let validator = super::profiling_validator(cfg, &root, opts.python.clone(), opts.timeout)?;
    // a state-precision variant has its kernel's shape variables; its files are its own and its kernel's
    let kernel_files = |name: &str| -> Option<(Vec<String>, String, Vec<String>)> {
        let k = validator.kernels();
        let variant = k.variants.iter().find(|v| v.name == name);
        let base = variant.map_or(name, |v| v.variant_of.as_str());
        let m = k.manifests.iter().find(|m| m.name == base)?;
        let source = variant.map_or_else(|| m.source_path(), |v| v.source_path(m));
        let mut files = vec![m.path.clone()];
        files.extend(m.contract_path());
        if let Some(v) = variant {
            files.push(v.path.clone());
            files.extend(v.contract_path());
        }
        Some((m.shapes.bench.keys().cloned().collect(), source, files))
    };
    // each kernel at each shape once, however many rows need it
    let mut wanted: BTreeMap<KernelAt, Option<Result<Work, String>>> = BTreeMap::new();
    let mut plans = Vec::new(); // (source, row index, baseline, improved)
    let mut unscored = Vec::new();
    for s in &sources {
        let all = (0..s.rows.len()).collect::<Vec<_>>();
        let not = |rows: Vec<usize>, why: String| Unscored { source: s.id(), rows, why, declared: false };
        if let Some(why) = &s.predict.skip {
            unscored.push(Unscored { source: s.id(), rows: all, why: why.clone(), declared: true });
            continue;
        }
        if !devices.contains_key(&s.device) {
            unscored.push(not(all, format!("no [devices.{}] in kidiom.toml", s.device)));
            continue;
        }
        let (Some(b), Some(i)) = (&s.predict.baseline, &s.predict.improved) else { continue };
        let sides = [(b, &s.predict.baseline_edits), (i, &s.predict.improved_edits)];
        for (index, row) in s.rows.iter().enumerate() {
            let mut keys = Vec::new();
            for (k, edits) in sides {
                let Some((vars, _, _)) = kernel_files(k) else {
                    unscored.push(not(vec![index], format!("no kernel {k} here")));
                    break;
                };
                match s.kernel_shape(row, &vars) {
                    Ok(shape) => keys.push(KernelAt { kernel: k.clone(), edits: edits.clone(), shape }),
                    Err(e) => {
                        unscored.push(not(vec![index], format!("{k}: {e}")));
                        break;
                    }
                }
            }
            if let [kb, ki] = &keys[..] {
                wanted.insert(kb.clone(), None);
                wanted.insert(ki.clone(), None);
                plans.push((s, index, kb.clone(), ki.clone()));
            }
        }
    }
    // what each needs: its edited source (written beside the others) and the digest of its inputs
    let scratch = tempfile::tempdir().context("a scratch folder for edited kernel sources")?;
    let counting: Vec<u8> = COUNTING.iter().flat_map(|f| std::fs::read(root.join(f)).unwrap_or_default()).collect();
    let mut prepared: BTreeMap<KernelAt, Result<(Option<PathBuf>, String), String>> = BTreeMap::new();
    for (n, at) in wanted.keys().enumerate() {
        let ready = (|| -> std::result::Result<(Option<PathBuf>, String), String> {
            let (_, source, files) = kernel_files(&at.kernel).ok_or_else(|| format!("no kernel {}", at.kernel))?;
            let text = std::fs::read_to_string(root.join(&source)).map_err(|e| format!("{source}: {e}"))?;
            let edited = published::apply_edits(&text, &at.edits)?;
            let mut bytes = edited.clone().into_bytes();
            for f in &files {
                bytes.extend(std::fs::read(root.join(f)).map_err(|e| format!("{f}: {e}"))?);
            }
            bytes.extend(&counting);
            let path = if at.edits.is_empty() {
                None
            } else {
                // the same file name: the module the launcher imports by
                let name = Path::new(&source).file_name().map(|n| n.to_os_string()).unwrap_or_default();
                let dir = scratch.path().join(n.to_string());
                std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                std::fs::write(dir.join(&name), &edited).map_err(|e| e.to_string())?;
                Some(dir.join(name))
            };
            Ok((path, kidiom_syntax::blob_id(&bytes)))
        })();
        prepared.insert(at.clone(), ready);
    }
    let work_path = opts.dir.join(WORK_FILE);
    let stored: WorkFile = match std::fs::read(&work_path) {
        Ok(bytes) if !opts.refresh => {
            serde_json::from_slice(&bytes).ok().filter(|w: &WorkFile| w.version == WORK_VERSION).with_context(|| {
                format!("{}: not kidiom's stored work; `--refresh` makes it again", work_path.display())
            })?
        }
        _ => WorkFile::default(),
    };
    let mut counts = WorkCounts::default();
    let mut todo = Vec::new();
    for (at, w) in wanted.iter_mut() {
        let Some(Ok((_, inputs))) = prepared.get(at) else { continue };
        match stored.entries.iter().find(|e| &e.at == at) {
            Some(e) if &e.inputs == inputs => {
                counts.stored += 1;
                *w = Some(Ok(Work {
                    kernel: at.kernel.clone(),
                    totals: e.totals,
                    launches: e.launches,
                    launch: e.launch,
                }));
            }
            found => {
                counts.stale += usize::from(found.is_some());
                todo.push(at.clone());
            }
        }
    }
    for (at, p) in &prepared {
        if let Err(e) = p {
            wanted.insert(at.clone(), Some(Err(e.clone())));
        }
    }
    counts.profiled = todo.len();
    let jobs = if opts.jobs == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { opts.jobs };
    let done: Mutex<Vec<Option<Result<Work, String>>>> = Mutex::new(vec![None; todo.len()]);
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(todo.len()).max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(at) = todo.get(i) else { break };
                    let source = match prepared.get(at) {
                        Some(Ok((p, _))) => p.clone(),
                        _ => continue,
                    };
                    let work = match validator.profile_at(&at.kernel, source.as_deref(), Some(&at.shape)) {
                        Ok(r) => match r.profile {
                            Some(p) => Ok(Work {
                                kernel: at.kernel.clone(),
                                totals: p.totals,
                                launches: p.launches,
                                launch: r.launch,
                            }),
                            None => Err(r.problem.unwrap_or_else(|| "no profile".into())),
                        },
                        Err(e) => Err(format!("{e:#}")),
                    };
                    if let Ok(mut d) = done.lock() {
                        d[i] = Some(work);
                    }
                }
            });
        }
    });
    let done = done.into_inner().unwrap_or_default();
    for (at, w) in todo.into_iter().zip(done) {
        wanted.insert(at, w);
    }
    if opts.refresh {
        // every entry the check profiled, in the order of the keys; failures are not stored
        let entries = wanted
            .iter()
            .filter_map(|(at, w)| {
                let (Some(Ok(w)), Some(Ok((_, inputs)))) = (w, prepared.get(at)) else { return None };
                Some(WorkEntry {
                    at: at.clone(),
                    inputs: inputs.clone(),
                    totals: w.totals,
                    launches: w.launches,
                    launch: w.launch,
                })
            })
            .collect();
        let text = serde_json::to_string_pretty(&WorkFile { version: WORK_VERSION, entries })? + "\n";
        std::fs::write(&work_path, text).with_context(|| format!("writing {}", work_path.display()))?;
        counts.written = true;
    }
    let mut inputs = Vec::new();
    for (s, index, kb, ki) in plans {
        let row = &s.rows[index];
        match (wanted.get(&kb).cloned().flatten(), wanted.get(&ki).cloned().flatten()) {
            (Some(Ok(b)), Some(Ok(i))) => inputs.push(RowInput {
                source: s.id(),
                index,
                device: s.device.clone(),
                timed: s.timed,
                shape: row.vars.clone(),
                published: (row.baseline_us, row.improved_us),
                work: (b, i),
            }),
            (b, i) => {
                let why = [(&kb.kernel, b), (&ki.kernel, i)]
                    .into_iter()
                    .filter_map(|(k, w)| match w {
                        Some(Ok(_)) => None,
                        Some(Err(e)) => Some(format!("{k} not profiled: {e}")),
                        None => Some(format!("{k} not profiled")),
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                unscored.push(Unscored { source: s.id(), rows: vec![index], why, declared: false });
            }
        }
    }
    let h200 = kidiom_validator::predict::DeviceModel::h200();
    let configured = Fitted::of(devices.get(&cfg.predict.device).unwrap_or(&h200), &devices);
    let fitted = published::fit(&inputs, &devices, &configured);
    let rows = published::score(&inputs, &devices, &fitted);
    let by = made_by(&opts.dir);
    let expected = published::expected(&rows, &by, Some(fitted.clone()));
    let expected_configured = published::expected(&published::score(&inputs, &devices, &configured), &by, None);
    // the model before the latency terms: the roofs plus 3 us a launch, no launch configuration
    let roofs: Vec<RowInput> = inputs
        .iter()
        .cloned()
        .map(|mut r| {
            (r.work.0.launch, r.work.1.launch) = (None, None);
            r
        })
        .collect();
    // (and the data sheets' bandwidth at the share SPEC §11 measured on the H200 where none is measured)
    let assumed = devices.iter().filter(|(_, d)| d.copy_fitted).map(|(k, d)| (k.clone(), 0.9 * d.hbm_gbps)).collect();
    let before =
        Fitted { min_kernel_us: 0.0, launch_graph_us: 3.0, launch_us: 3.0, copy_gbps: assumed, ..configured.clone() };
    let roofs_only = published::score(&roofs, &devices, &before);
    let roofs_only = published::expected(&roofs_only, &by, None);
    // what the occupancy terms add: the roofs with the launch costs fitted, no launch configuration
    let roofs_fit = published::fit(&roofs, &devices, &configured);
    let roofs_fitted =
        published::expected(&published::score(&roofs, &devices, &roofs_fit), &by, Some(roofs_fit.clone()));
    let summaries = sources
        .iter()
        .map(|s| SourceSummary {
            id: s.id(),
            url: s.url.clone(),
            device: s.device.clone(),
            kind: s.kind.clone(),
            timed: s.timed,
            rows: s.rows.len(),
            baseline: s.predict.baseline.clone(),
            improved: s.predict.improved.clone(),
        })
        .collect();
    merge_unscored(&mut unscored);
    Ok(Check {
        sources: summaries,
        rows,
        unscored,
        fitted,
        configured,
        expected,
        expected_configured,
        work: counts,
        roofs_only,
        roofs_fitted,
    })
}

/// One entry per source and reason, its rows together.
fn merge_unscored(u: &mut Vec<Unscored>) {
    let mut merged: Vec<Unscored> = Vec::new();
    for x in u.drain(..) {
        match merged.iter_mut().find(|m| m.source == x.source && m.why == x.why && m.declared == x.declared) {
            Some(m) => m.rows.extend(x.rows),
            None => merged.push(x),
        }
    }
    *u = merged;
}
