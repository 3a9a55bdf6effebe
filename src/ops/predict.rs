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
use kidiom_validator::ValidatorBuilder;
use kidiom_validator::published::{self, ExpectedErrors, Fitted, RowInput, RowScore, Work};

use crate::config::Config;

/// A kernel at a shape: what is profiled once however many rows need it.
type KernelAt = (String, BTreeMap<String, u64>);

/// What to check.
pub(crate) struct Options {
    /// The folder of published sources.
    pub(crate) dir: PathBuf,
    pub(crate) python: Option<PathBuf>,
    pub(crate) timeout: Duration,
    /// Kernels profiled at a time (0: one per CPU).
    pub(crate) jobs: usize,
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
    let validator = ValidatorBuilder::new(&root)
        .harness(Some(super::harness_dir(&root)?))
        .targets(cfg.targets())
        .python(opts.python.clone())
        .timeout(opts.timeout)
        .device_model(cfg.device_model()?)
        .build()
        .context("reading the kernel manifests")?;
    // a state-precision variant has its kernel's shape variables
    let kernel_vars = |name: &str| -> Option<Vec<String>> {
        let k = validator.kernels();
        let base = k.variants.iter().find(|v| v.name == name).map_or(name, |v| v.variant_of.as_str());
        let m = k.manifests.iter().find(|m| m.name == base)?;
        Some(m.shapes.bench.keys().cloned().collect())
    };
    // each (kernel, shape) once, however many rows need it
    let mut wanted: BTreeMap<KernelAt, Option<Result<Work, String>>> = BTreeMap::new();
    let mut plans = Vec::new(); // (source, row index, baseline key, improved key)
    let mut unscored = Vec::new();
    for s in &sources {
        let all = (0..s.rows.len()).collect::<Vec<_>>();
        if let Some(why) = &s.predict.skip {
            unscored.push(Unscored { source: s.id(), rows: all, why: why.clone(), declared: true });
            continue;
        }
        if !devices.contains_key(&s.device) {
            let why = format!("no [devices.{}] in kidiom.toml", s.device);
            unscored.push(Unscored { source: s.id(), rows: all, why, declared: false });
            continue;
        }
        let (Some(b), Some(i)) = (&s.predict.baseline, &s.predict.improved) else { continue };
        for (index, row) in s.rows.iter().enumerate() {
            let mut keys = Vec::new();
            for k in [b, i] {
                let Some(vars) = kernel_vars(k) else {
                    unscored.push(Unscored {
                        source: s.id(),
                        rows: vec![index],
                        why: format!("no kernel {k} here"),
                        declared: false,
                    });
                    break;
                };
                match s.kernel_shape(row, &vars) {
                    Ok(shape) => keys.push((k.clone(), shape)),
                    Err(e) => {
                        unscored.push(Unscored {
                            source: s.id(),
                            rows: vec![index],
                            why: format!("{k}: {e}"),
                            declared: false,
                        });
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
    let keys: Vec<KernelAt> = wanted.keys().cloned().collect();
    let jobs = if opts.jobs == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { opts.jobs };
    let done: Mutex<Vec<Option<Result<Work, String>>>> = Mutex::new(vec![None; keys.len()]);
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(keys.len()).max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((kernel, shape)) = keys.get(i) else { break };
                    let work = match validator.profile_at(kernel, None, Some(shape)) {
                        Ok(r) => match r.profile {
                            Some(p) => Ok(Work {
                                kernel: kernel.clone(),
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
    for (k, w) in keys.into_iter().zip(done) {
        wanted.insert(k, w);
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
                let why = [(&kb.0, b), (&ki.0, i)]
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
    let configured =
        Fitted::of(devices.get(&cfg.predict.device).unwrap_or(&kidiom_validator::predict::DeviceModel::h200()));
    let fitted = published::fit(&inputs, &devices, &configured);
    let rows = published::score(&inputs, &devices, &fitted);
    let by = made_by(&opts.dir);
    let expected = published::expected(&rows, &by, Some(fitted));
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
    let before = Fitted { min_kernel_us: 0.0, launch_graph_us: 3.0, launch_us: 3.0, ..configured };
    let roofs_only = published::score(&roofs, &devices, &before);
    let roofs_only = published::expected(&roofs_only, &by, None);
    // what the occupancy terms add: the roofs with the launch costs fitted, no launch configuration
    let roofs_fit = published::fit(&roofs, &devices, &configured);
    let roofs_fitted = published::expected(&published::score(&roofs, &devices, &roofs_fit), &by, Some(roofs_fit));
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
