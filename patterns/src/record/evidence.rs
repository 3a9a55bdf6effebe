//! Evidence: one record per gate that ran, and the whole validation of a
//! candidate (what is stored in the catalog next to its diff). The
//! validator produces it; the catalog stores it and every reader reads it
//! from here.

use serde::{Deserialize, Serialize};

use super::verdict::{Gate, Verdict};

/// The version of the evidence JSON; fields are only added within a version.
pub const EVIDENCE_FORMAT: u32 = 1;

/// How one gate ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[derive(strum::Display, strum::EnumString, strum::IntoStaticStr, strum::VariantArray)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum GateStatus {
    /// It passed.
    Passed,
    /// It failed: the candidate is rejected here.
    Failed,
    /// It did not run here (speed on a CPU; a CUDA variant the CPU emulation cannot run).
    Skipped,
    /// It could not finish (timeout, crash, broken environment).
    Error,
}

kidiom_syntax::named_enum!(GateStatus);

/// What one gate measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateRecord {
    /// The gate.
    pub gate: Gate,
    /// How it ended.
    pub status: GateStatus,
    /// One line with the deciding numbers.
    pub summary: String,
    /// The gate's numbers (gate-specific keys).
    pub metrics: serde_json::Value,
    /// The baseline's numbers, where the gate compares.
    pub before: Option<serde_json::Value>,
    /// The candidate's numbers, where the gate compares.
    pub after: Option<serde_json::Value>,
    /// Where it ran (`cpu (triton interpreter)`, `none (ahead-of-time)`, `cuda (NVIDIA H200)`).
    pub device: Option<String>,
    /// Tool versions (python, numpy, triton, torch, ...).
    pub versions: serde_json::Value,
    /// The exact commands run, in order.
    pub commands: Vec<String>,
    /// Wall time of the gate.
    pub seconds: f64,
    /// The log of a failure or error (harness error, traceback, stderr tail).
    pub log: Option<String>,
    /// Where each command ran when not on this machine (the Ray executor):
    /// node, GPU, attempts. Empty (and absent from the JSON) for local runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<Placement>,
}

impl GateRecord {
    /// A record with no numbers yet.
    pub fn new(gate: Gate, status: GateStatus, summary: impl Into<String>) -> GateRecord {
        GateRecord {
            gate,
            status,
            summary: summary.into(),
            metrics: serde_json::Value::Object(Default::default()),
            before: None,
            after: None,
            device: None,
            versions: serde_json::Value::Null,
            commands: Vec::new(),
            seconds: 0.0,
            log: None,
            placements: Vec::new(),
        }
    }
}

/// The validation of one candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// [`EVIDENCE_FORMAT`].
    pub format: u32,
    /// The candidate's id.
    pub candidate: String,
    /// Its pattern.
    pub pattern: String,
    /// The pattern's category (`precision`, `memory`, ...).
    pub category: Option<String>,
    /// The target file, relative to the root.
    pub target: String,
    /// The kernel (manifest name) it changes, if any.
    pub kernel: Option<String>,
    /// The verdict.
    pub verdict: Verdict,
    /// One record per gate that ran, in order.
    pub gates: Vec<GateRecord>,
    /// The device the validation asked for (`auto`, `cpu`, `cuda`).
    pub device: String,
    /// `git rev-parse HEAD` of the root, if it is a repository.
    pub commit: Option<String>,
    /// The seeds of the correctness gate.
    pub seeds: Vec<u64>,
    /// When it started (seconds since the Unix epoch).
    pub started_at: u64,
    /// Wall time of the whole validation.
    pub seconds: f64,
    /// The validator's version.
    pub validator: String,
    /// The roofline prediction from the work profiles of baseline and
    /// candidate (absent where no profile could be made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prediction: Option<Predicted>,
    /// The digest of the kernel's contract (manifest, contract module,
    /// reference) it was judged under: a verdict whose contract has changed
    /// since is stale, and `kidiom run` judges the candidate again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<String>,
    /// The harness calls this validation made itself, in order, with their
    /// wall time (a baseline's compile or profile another candidate of the
    /// run made is not among them). They overlap in time: they do not add up
    /// to [`Evidence::seconds`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<Phase>,
}

/// One harness call of a validation (`contract`, `compile baseline`,
/// `check candidate`, `profile candidate`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// What it was.
    pub name: String,
    /// Its wall time.
    pub seconds: f64,
}

/// A candidate's predicted time against its baseline's: roofline times from
/// work profiles counted on the CPU. A prediction, never a measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Predicted {
    /// Always `"prediction"`.
    pub label: String,
    /// The device model's name.
    pub device: String,
    /// The baseline's predicted µs per call.
    pub baseline_us: f64,
    /// The candidate's predicted µs per call.
    pub candidate_us: f64,
    /// `baseline_us / candidate_us`.
    pub speedup: f64,
    /// What bounds the candidate (`memory`, `compute`, `special-functions`, ...).
    pub bound: Bound,
    /// Bytes moved over the floor's, baseline and candidate.
    pub traffic_ratio: (f64, f64),
    /// Bytes re-read by the same program or thread, baseline and candidate.
    pub reread_bytes: (u64, u64),
    /// How far off such a predicted speedup was on published measurements
    /// (`kidiom predict --check`'s held-out rows); `None`: not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_error: Option<ExpectedError>,
}

/// The held-out error of predicted speedups of one kind of kernel
/// (`kidiom predict --check`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExpectedError {
    /// The kernel whose published rows it is of; `None`: no row predicted
    /// with this kernel, the figures are every row's.
    #[serde(default)]
    pub kernel: Option<String>,
    /// The median of |predicted / published speedup - 1|.
    pub median: f64,
    /// The largest.
    pub worst: f64,
    /// Over how many held-out rows.
    pub rows: usize,
}

impl ExpectedError {
    /// `expected error 8% (worst 43%, 54 published speedups of kda.decode)`.
    pub fn text(&self) -> String {
        let of = match &self.kernel {
            Some(k) => format!("{} published speedups of {k}", self.rows),
            None => format!("no published row of this kernel; {} of other kernels", self.rows),
        };
        format!("expected error {:.0}% (worst {:.0}%, {of})", 100.0 * self.median, 100.0 * self.worst)
    }

    /// The speedup discounted by the median error: what a reviewer can
    /// count on, the order the review lists predictions in (an unknown
    /// kernel's is discounted by every row's worst).
    pub fn discounted(&self, speedup: f64) -> f64 {
        let e = if self.kernel.is_some() { self.median } else { self.worst };
        speedup * (1.0 - e).max(0.0)
    }
}

impl Predicted {
    /// `predicted 1.42x (memory-bound, H200; expected error 8% (worst 43%, ...))`.
    pub fn headline(&self) -> String {
        let error = self.expected_error.as_ref().map_or_else(
            || "expected error unknown: no `kidiom predict --check` figures".to_string(),
            ExpectedError::text,
        );
        format!("predicted {:.2}x ({}-bound, {}; {error})", self.speedup, self.bound.name(), self.device)
    }

    /// `1.42x ±8%`; `1.42x` where the error is not known (a record made
    /// before `kidiom predict --check`, or without its figures).
    pub fn short(&self) -> String {
        match &self.expected_error {
            Some(e) => {
                format!("{:.2}x ±{:.0}%", self.speedup, 100.0 * if e.kernel.is_some() { e.median } else { e.worst })
            }
            None => format!("{:.2}x", self.speedup),
        }
    }

    /// The speedup a reviewer can count on ([`ExpectedError::discounted`];
    /// an unknown error counts as none known: the speedup discounted to 0).
    pub fn discounted(&self) -> f64 {
        self.expected_error.as_ref().map_or(0.0, |e| e.discounted(self.speedup))
    }
}

impl Evidence {
    /// The record of `gate`, if it ran.
    pub fn gate(&self, gate: Gate) -> Option<&GateRecord> {
        self.gates.iter().find(|r| r.gate == gate)
    }

    /// The speed gate's result in a few words, where it measured one:
    /// `475 -> 690 requests/s (noise 2.1%)` for a host target's service
    /// bench, `gap 48.1% -> 0.9%` for an older host record, `1.71x` for a
    /// GPU kernel.
    pub fn speed_headline(&self) -> Option<String> {
        speed_headline(self.gate(Gate::Speed)?)
    }
}

/// [`Evidence::speed_headline`] of one speed record.
pub fn speed_headline(r: &GateRecord) -> Option<String> {
    let m = r.speed_figures()?;
    if m.metric() == Some(super::figures::SERVICE_REQUESTS) {
        let (b, c) = r.speed_sides();
        let (b, c) = (b?.number("requests_per_s")?, c?.number("requests_per_s")?);
        let noise = m.noise_floor().map(|n| format!(" (noise {:.1}%)", n * 100.0)).unwrap_or_default();
        return Some(format!("{b:.0} -> {c:.0} requests/s{noise}"));
    }
    if m.metric() == Some(super::figures::SCHEDULER_THROUGHPUT) {
        let (b, c) = r.speed_sides();
        let (b, c) = (b?.number("gap")?, c?.number("gap")?);
        let noise = m.noise_floor().map(|n| format!(" (noise {:.1}%)", n * 100.0)).unwrap_or_default();
        return Some(format!("gap {:.1}% -> {:.1}%{noise}", b * 100.0, c * 100.0));
    }
    m.speedup().filter(|s| s.is_finite()).map(|s| format!("{s:.2}x"))
}

/// What decides a predicted time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bound {
    /// Global memory traffic.
    Memory,
    /// FP32 arithmetic.
    Compute,
    /// Special-function units.
    SpecialFunctions,
    /// Tensor cores.
    TensorCores,
    /// Launch overhead (the work itself is smaller).
    Launch,
    /// Memory latency: too few bytes in flight to reach the bandwidth (few
    /// resident programs, each waiting on its loads).
    Latency,
}

impl Bound {
    /// Its name in prose.
    pub fn name(self) -> &'static str {
        match self {
            Bound::Memory => "memory",
            Bound::Compute => "compute",
            Bound::SpecialFunctions => "special functions",
            Bound::TensorCores => "tensor cores",
            Bound::Launch => "launch",
            Bound::Latency => "memory latency",
        }
    }
}

/// Where one harness call ran on the fleet: the fleet's own type, stored as it is.
pub use kidiom_exec::Placement;

/// A candidate's stored evidence, read once: none yet, the validator's
/// record, or something else (written by hand, by another tool, or
/// damaged), kept as it is and never taken for a verdict.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum StoredEvidence {
    /// None stored: not validated (`{}` in the catalog).
    #[default]
    Empty,
    /// The validator's record.
    Evidence(Box<Evidence>),
    /// Not the validator's record: the JSON as stored, and why it does not read.
    Unreadable {
        /// The stored JSON.
        raw: serde_json::Value,
        /// Why it is not an [`Evidence`].
        why: String,
        /// The verdict it names, where its `"verdict"` has the validator's
        /// shape (a record written by hand or by another tool). Accept, the
        /// loop and MCP go by it; the site shows the record as unreadable.
        verdict: Option<Verdict>,
    },
}

impl StoredEvidence {
    /// Reads stored evidence JSON: `{}` or `null` is [`StoredEvidence::Empty`].
    /// A record of a later [`EVIDENCE_FORMAT`] is unreadable, never guessed at.
    pub fn decode(v: serde_json::Value) -> StoredEvidence {
        if v.is_null() || v.as_object().is_some_and(|o| o.is_empty()) {
            return StoredEvidence::Empty;
        }
        if let Some(f) = v.get("format").and_then(serde_json::Value::as_u64)
            && f > u64::from(EVIDENCE_FORMAT)
        {
            let why = format!("evidence format {f} is newer than this kidiom's ({EVIDENCE_FORMAT})");
            return StoredEvidence::Unreadable { raw: v, why, verdict: None };
        }
        match serde_json::from_value::<Evidence>(v.clone()) {
            Ok(e) => StoredEvidence::Evidence(Box::new(e)),
            Err(e) => {
                let verdict = v.get("verdict").and_then(|x| serde_json::from_value(x.clone()).ok());
                StoredEvidence::Unreadable { raw: v, why: e.to_string(), verdict }
            }
        }
    }

    /// The validator's record, if that is what is stored.
    pub fn evidence(&self) -> Option<&Evidence> {
        match self {
            StoredEvidence::Evidence(e) => Some(e),
            _ => None,
        }
    }

    /// Its verdict: the validator's record's, or the one a record written
    /// elsewhere names in the validator's shape.
    pub fn verdict(&self) -> Option<&Verdict> {
        match self {
            StoredEvidence::Empty => None,
            StoredEvidence::Evidence(e) => Some(&e.verdict),
            StoredEvidence::Unreadable { verdict, .. } => verdict.as_ref(),
        }
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        matches!(self, StoredEvidence::Empty)
    }

    /// The stored JSON (keys sorted, as the catalog has always written them).
    pub fn to_value(&self) -> serde_json::Value {
        match self {
            StoredEvidence::Empty => serde_json::Value::Object(Default::default()),
            StoredEvidence::Evidence(e) => serde_json::to_value(e).unwrap_or_default(),
            StoredEvidence::Unreadable { raw, .. } => raw.clone(),
        }
    }
}

impl From<Evidence> for StoredEvidence {
    fn from(e: Evidence) -> Self {
        StoredEvidence::Evidence(Box::new(e))
    }
}

impl Serialize for StoredEvidence {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for StoredEvidence {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(StoredEvidence::decode(serde_json::Value::deserialize(d)?))
    }
}
