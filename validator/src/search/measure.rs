//! Measuring variants with the harness's `sweep` (kernels/harness/sweep.py).
//!
//! The variants are written beside a copy of the baseline `kernels/` tree
//! (the contract comes from the baseline, as for every gate) and measured
//! in one harness call: the error curve at the manifest's CPU lengths under
//! the TF32-faithful interpreter, and the ahead-of-time compile's figures.
//! The harness caches both by the variant's bytes.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Assignment;
use crate::backend::python::{Harness, HarnessStatus};
use crate::error::{Error, Result};
use crate::manifest::Manifest;

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
}

#[derive(Deserialize)]
struct SweepOut {
    variants: Vec<SweepVariant>,
}

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
}

#[derive(Deserialize)]
struct CurvePoint {
    #[serde(default)]
    rel_l2: Option<serde_json::Value>,
}

/// The harness's `sweep` over a temporary copy of the baseline tree.
pub struct HarnessMeasure<'a> {
    pub(crate) harness: Harness,
    pub(crate) manifest: &'a Manifest,
    pub(crate) dir: &'a Path,
    pub(crate) jobs: usize,
    pub(crate) limit: Duration,
    pub(crate) batch: usize,
}

impl Measure for HarnessMeasure<'_> {
    fn lengths(&self) -> Vec<i64> {
        self.manifest.curve.as_ref().map(|c| c.cpu_t.clone()).unwrap_or_default()
    }

    fn measure(&mut self, variants: &[(Assignment, String)], compile: bool) -> Result<Vec<Measured>> {
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
        let args: Vec<String> = vec![
            "sweep".into(),
            "--kernel".into(),
            self.manifest.name.clone(),
            "--variants".into(),
            spec.to_string_lossy().into(),
            "--jobs".into(),
            self.jobs.max(1).to_string(),
        ];
        let run = self.harness.call(&args, self.limit)?;
        if run.status != HarnessStatus::Ok {
            let why = run.json["error"].as_str().map(str::to_string).unwrap_or_else(|| run.log());
            return Err(Error::Search(format!("the harness's sweep failed: {why}")));
        }
        let out: SweepOut = serde_json::from_value(run.json.clone())
            .map_err(|e| Error::Search(format!("the harness's sweep printed unexpected JSON: {e}")))?;
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
