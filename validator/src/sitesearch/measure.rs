//! Measuring variants with the harness's `sweep` (kernels/harness/sweep.py).
//!
//! The variants are written beside a copy of the baseline `kernels/` tree
//! (the contract comes from the baseline, as for every gate) and measured
//! in one harness call: the error curve at the manifest's CPU lengths under
//! the TF32-faithful interpreter, and the ahead-of-time compile's figures.
//! The harness caches both by the variant's bytes.
//!
//! The time limit is the whole search's: each call gets what is left of it,
//! and a call that runs out of it (the harness killed, or variants stopped
//! at the sweep's deadline) fails the search with that reason, never as
//! variants that "failed" (which would read as variants that do not work).

use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::Assignment;
use crate::backend::python::{Harness, HarnessStatus};
use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::request::{Kernel, Request};

/// The static figures a search compares (from the sm_90 compile).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// SASS instructions in total.
    pub instructions: i64,
    /// Local-memory instructions (spill traffic, stack arrays).
    pub local: i64,
    /// Tensor-core instructions (HGMMA, HMMA).
    pub tensor: i64,
    /// Registers per thread.
    pub registers: Option<i64>,
    /// Bytes spilled (stores).
    pub spill_store_bytes: i64,
}

impl Figures {
    /// As the static gate's metrics, for its `StaticLimits`.
    pub fn metrics(&self) -> crate::StaticMetrics {
        let mut m = crate::StaticMetrics {
            instructions: Some(self.instructions),
            spill_store_bytes: Some(self.spill_store_bytes),
            registers: self.registers,
            ..Default::default()
        };
        m.by_class.insert("tensor".into(), self.tensor);
        m.by_class.insert("local".into(), self.local);
        m
    }
}

/// One measured variant.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measured {
    /// Which value each site got (`None`: left as it is).
    pub assignment: Assignment,
    /// Output error (rel. L2 against the float64 reference) at each CPU length.
    pub error: Vec<f64>,
    /// The compile's figures, when it was compiled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub figures: Option<Figures>,
    /// Why it could not be measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// Whether the harness had it cached.
    #[serde(skip)]
    pub cached: bool,
}

impl Measured {
    /// The error at the longest CPU length (`inf` when unmeasured).
    pub fn last_error(&self) -> f64 {
        self.error.last().copied().filter(|e| e.is_finite()).unwrap_or(f64::INFINITY)
    }
}

/// What the search asks of a measurer; the harness is one, tests have another.
pub trait Measure {
    /// The error curve (and with `compile`, the figures) of each variant.
    fn measure(&mut self, variants: &[(Assignment, String)], compile: bool) -> Result<Vec<Measured>>;
    /// The CPU lengths the errors are at.
    fn lengths(&self) -> Vec<i64>;
    /// The time left to the search (`None`: no limit).
    fn remaining(&self) -> Option<Duration> {
        None
    }
    /// Told after each batch: variants measured so far, and how many the
    /// search plans in all (an estimate until its last step).
    fn progress(&mut self, _done: usize, _planned: usize) {}
}

/// What hears of a search's progress (variants measured, planned).
pub type Progress<'a> = &'a (dyn Fn(usize, usize) + Sync);

#[derive(Deserialize)]
struct SweepOut {
    variants: Vec<SweepVariant>,
}

/// A harness call gets at least this long, else the search stops first.
const MIN_CALL: Duration = Duration::from_secs(5);

#[derive(Deserialize)]
struct SweepVariant {
    id: String,
    #[serde(default)]
    cached: bool,
    #[serde(default)]
    curve: Option<Vec<CurvePoint>>,
    #[serde(default, rename = "static")]
    figures: Option<Figures>,
    #[serde(default)]
    error: Option<String>,
    /// Stopped by the sweep's deadline (says nothing about the variant).
    #[serde(default)]
    timed_out: bool,
}

#[derive(Deserialize)]
struct CurvePoint {
    #[serde(default)]
    rel_l2: Option<serde_json::Value>,
}

/// The harness's `sweep` over a temporary copy of the baseline tree.
pub struct HarnessMeasure<'a> {
    harness: Harness,
    manifest: &'a Manifest,
    dir: &'a Path,
    jobs: usize,
    /// The whole search's time limit, from `started`.
    limit: Duration,
    started: Instant,
    batch: usize,
    progress: Option<Progress<'a>>,
}

impl<'a> HarnessMeasure<'a> {
    /// A measurer whose calls all share `limit`, counted from now.
    pub(crate) fn new(harness: Harness, manifest: &'a Manifest, dir: &'a Path, jobs: usize, limit: Duration) -> Self {
        HarnessMeasure { harness, manifest, dir, jobs, limit, started: Instant::now(), batch: 0, progress: None }
    }

    /// Tells `progress` of each batch measured.
    pub(crate) fn with_progress(mut self, progress: Option<Progress<'a>>) -> Self {
        self.progress = progress;
        self
    }

    fn out_of_time(&self, done: &str) -> Error {
        Error::Search(format!(
            "the search ran out of its time limit ({}s) {done}; raise it (`kidiom apply --timeout`; `kidiom run` gives a search three times its `--timeout`) or search one value (`--value`)",
            self.limit.as_secs()
        ))
    }
}

impl Measure for HarnessMeasure<'_> {
    fn lengths(&self) -> Vec<i64> {
        self.manifest.curve.as_ref().map(|c| c.cpu_t.clone()).unwrap_or_default()
    }

    fn remaining(&self) -> Option<Duration> {
        Some(self.limit.saturating_sub(self.started.elapsed()))
    }

    fn progress(&mut self, done: usize, planned: usize) {
        if let Some(p) = self.progress {
            p(done, planned.max(done));
        }
    }

    fn measure(&mut self, variants: &[(Assignment, String)], compile: bool) -> Result<Vec<Measured>> {
        let left = self.limit.saturating_sub(self.started.elapsed());
        if left < MIN_CALL {
            return Err(self.out_of_time(&format!("before measuring {} more variants", variants.len())));
        }
        self.batch += 1;
        let dir = self.dir.join(format!("batch-{}", self.batch));
        let file_name = Path::new(&self.manifest.source).file_name().map(|n| n.to_owned()).unwrap_or_default();
        let mut list = Vec::new();
        for (i, (_, text)) in variants.iter().enumerate() {
            let d = dir.join(format!("v{i}"));
            std::fs::create_dir_all(&d).map_err(|e| Error::io(&d, e))?;
            let f = d.join(&file_name);
            std::fs::write(&f, text).map_err(|e| Error::io(&f, e))?;
            list.push(serde_json::json!({"id": format!("v{i}"), "source": f.to_string_lossy()}));
        }
        let spec = dir.join("variants.json");
        let body = serde_json::json!({"variants": list, "compile": compile, "curve": true});
        std::fs::write(&spec, body.to_string()).map_err(|e| Error::io(&spec, e))?;
        let arg = self.manifest.harness_arg(&self.harness.root);
        let args = Request::Sweep { kernel: Kernel::of(&arg), variants: &spec, jobs: self.jobs }.argv();
        let run = self.harness.call(&args, left)?;
        if run.status == HarnessStatus::TimedOut {
            return Err(self.out_of_time(&format!("while measuring {} variants", variants.len())));
        }
        if let Some(line) = run.contract_error() {
            // the contract cannot be used: the harness's own line
            return Err(Error::Search(line.to_string()));
        }
        if run.status != HarnessStatus::Ok {
            let why = run.json["error"].as_str().map(str::to_string).unwrap_or_else(|| run.log());
            return Err(Error::Search(format!("the harness's sweep failed: {why}")));
        }
        let out: SweepOut = serde_json::from_value(run.json.clone())
            .map_err(|e| Error::Search(format!("the harness's sweep printed unexpected JSON: {e}")))?;
        let stopped = out.variants.iter().filter(|v| v.timed_out).count();
        if stopped > 0 {
            return Err(self.out_of_time(&format!("with {stopped} of {} variants unmeasured", variants.len())));
        }
        let mut measured = Vec::with_capacity(variants.len());
        for (i, (assignment, _)) in variants.iter().enumerate() {
            let id = format!("v{i}");
            let Some(v) = out.variants.iter().find(|v| v.id == id) else {
                return Err(Error::Search(format!("the harness's sweep left out variant {id}")));
            };
            let error = v
                .curve
                .as_deref()
                .unwrap_or_default()
                .iter()
                .map(|p| p.rel_l2.as_ref().and_then(serde_json::Value::as_f64).unwrap_or(f64::INFINITY))
                .collect();
            let failed = v.error.clone().or_else(|| (compile && v.figures.is_none()).then(|| "not compiled".into()));
            measured.push(Measured {
                assignment: assignment.clone(),
                error,
                figures: v.figures.clone(),
                failed,
                cached: v.cached,
            });
        }
        Ok(measured)
    }
}
