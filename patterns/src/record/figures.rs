//! Gate figures: what each gate measured, typed. A [`GateRecord`] keeps its
//! `metrics`, `before` and `after` as the JSON they were stored as (so a
//! record of any earlier version still reads); the validator writes them
//! from these types ([`GateRecord::set_metrics`], [`GateRecord::set_sides`])
//! and every reader decodes them here, through one accessor per gate. A
//! figure a record does not have decodes as absent (`None`, empty).
//!
//! Open-ended on purpose, and kept as typed maps or JSON values: the syntax
//! gate's files (one entry per touched path), a speed variant's samples
//! (whatever arrays the harness keeps: [`SpeedSide`]), and what the
//! validator's own types describe that the catalog does not know (the
//! manifest's tolerance, the harness's consistency and sandbox reports, a
//! prediction's per-side roofline and work profile).

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::evidence::GateRecord;

/// A number as the harness and the validator write it: a JSON number,
/// `"inf"` / `"-inf"`, or `null` (NaN). Serialized the same way.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Num(pub f64);

impl Num {
    /// The value if it is finite.
    pub fn finite(self) -> Option<f64> {
        self.0.is_finite().then_some(self.0)
    }
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Num, D::Error> {
        match Value::deserialize(d)? {
            Value::Number(n) => n.as_f64().map(Num).ok_or_else(|| serde::de::Error::custom("number out of range")),
            Value::Null => Ok(Num(f64::NAN)),
            Value::String(s) => match s.to_ascii_lowercase().as_str() {
                "inf" | "+inf" | "infinity" => Ok(Num(f64::INFINITY)),
                "-inf" | "-infinity" => Ok(Num(f64::NEG_INFINITY)),
                "nan" => Ok(Num(f64::NAN)),
                _ => Err(serde::de::Error::custom(format!("expected a number, \"inf\" or null, found {s:?}"))),
            },
            other => Err(serde::de::Error::custom(format!("expected a number, \"inf\" or null, found {other}"))),
        }
    }
}

impl Serialize for Num {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let x = self.0;
        if x.is_nan() {
            s.serialize_none()
        } else if x.is_infinite() {
            s.serialize_str(if x > 0.0 { "inf" } else { "-inf" })
        } else {
            s.serialize_f64(x)
        }
    }
}

/// A figure that does not fit its type (a record another version or a
/// hand wrote) reads as absent, and only that figure: the rest still read.
fn or_absent<'de, D: Deserializer<'de>, T: DeserializeOwned + Default>(d: D) -> Result<T, D::Error> {
    Ok(T::deserialize(Value::deserialize(d)?).unwrap_or_default())
}

/// A list whose items that do not fit are left out.
fn each_that_fits<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<Vec<T>>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(items) => Some(items.into_iter().filter_map(|v| T::deserialize(v).ok()).collect()),
        _ => None,
    })
}

/// Counts whose entries that are not integers are left out.
fn counts<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, i64>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Object(m) => m.into_iter().filter_map(|(k, v)| Some((k, v.as_i64()?))).collect(),
        _ => BTreeMap::new(),
    })
}

/// The syntax gate's figures of one touched file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FileSyntax {
    /// `false` when no parser knows the file type.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub parsed: Option<bool>,
    /// Why it was not parsed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub reason: Option<String>,
    /// The language it was parsed as (`python`, `cuda`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub language: Option<String>,
    /// Error nodes in the baseline.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub error_nodes_before: Option<u64>,
    /// Error nodes in the candidate.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub error_nodes_after: Option<u64>,
}

/// The syntax gate's figures: per touched path (a typed map: the paths are the diff's).
pub type SyntaxFigures = BTreeMap<String, FileSyntax>;

/// A numeric flag a diff changed: the mention and how many more (or fewer) there are.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NumericFlag {
    /// The flag and its value as written.
    pub mention: FlagMention,
    /// Added minus removed occurrences (negative: removed).
    pub delta: i64,
}

/// A numeric flag as written (`input_precision` = `"ieee"`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlagMention {
    /// The flag (`input_precision`, `__expf`, `cast`).
    pub flag: String,
    /// Its value as written (`"ieee"`), empty for bare names.
    pub value: String,
}

/// The static gate's figures. Which are there depends on where it stopped:
/// the contract files or the host code it rejected, else the numeric flags,
/// then the compile's difference and the prediction.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StaticFigures {
    /// Contract files the diff touches (rejected).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub contract_files: Option<Vec<String>>,
    /// Host code outside the kernels the diff changes, or host code it adds
    /// inside a Triton kernel's body, each with its line (rejected).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub host_code: Option<Vec<String>>,
    /// Numeric flags the diff changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub numeric_flags: Option<Vec<NumericFlag>>,
    /// Lines changed (the larger of removed and added).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub changed_lines: Option<u64>,
    /// Whether the pattern is a precision pattern (numeric flags may change).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub precision_pattern: Option<bool>,
    /// The compile's target (`sm_90a`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub arch: Option<String>,
    /// After minus before of every number both compiles have.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub delta: Option<BTreeMap<String, i64>>,
    /// The work profiles' roofline prediction, or why there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub prediction: Option<PredictionFigures>,
    /// The constexpr branch arms the candidate adds or changes, with which
    /// of the CPU's cases and the GPU's shapes reach each.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub branches: Option<Vec<BranchCoverage>>,
}

/// An arm of a constexpr `if` in a kernel's body that the candidate adds or
/// changes, and who reaches it: the reviewer sees which code each gate ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BranchCoverage {
    /// The file's line of the arm's first statement.
    pub line: u64,
    /// `then` or `else`.
    #[serde(deserialize_with = "or_absent")]
    pub arm: String,
    /// The `if`'s test, as source.
    #[serde(deserialize_with = "or_absent")]
    pub test: String,
    /// The CPU cases that reach it (indices into the manifest's `shapes.cpu`).
    #[serde(deserialize_with = "or_absent")]
    pub cpu_cases: Vec<usize>,
    /// The GPU shapes that reach it (indices into `shapes.gpu`); the CPU runs
    /// them in the specialization cases.
    #[serde(deserialize_with = "or_absent")]
    pub gpu_shapes: Vec<usize>,
}

/// A prediction as the static gate records it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PredictionFigures {
    /// Always `"prediction"`.
    #[serde(deserialize_with = "or_absent")]
    pub label: String,
    /// Why no prediction could be made.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub error: Option<String>,
    /// The device model's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub device: Option<String>,
    /// The baseline's roofline time (the validator's `predict::Prediction`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub baseline: Option<Value>,
    /// The candidate's roofline time.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub candidate: Option<Value>,
    /// Baseline time over candidate time.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub speedup: Option<f64>,
    /// Both work profiles' totals, traffic ratio and counting (the validator's wire types).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub profile: Option<Value>,
}

/// One compile's figures (a static record's `before` and `after`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompileFigures {
    /// Target (`sm_90a`).
    #[serde(deserialize_with = "or_absent")]
    pub arch: String,
    /// Registers per thread.
    #[serde(deserialize_with = "or_absent")]
    pub registers: Option<i64>,
    /// Bytes spilled to local memory (stores).
    #[serde(deserialize_with = "or_absent")]
    pub spill_store_bytes: Option<i64>,
    /// Bytes reloaded from spills.
    #[serde(deserialize_with = "or_absent")]
    pub spill_load_bytes: Option<i64>,
    /// Stack frame.
    #[serde(deserialize_with = "or_absent")]
    pub stack_bytes: Option<i64>,
    /// Local memory.
    #[serde(deserialize_with = "or_absent")]
    pub local_bytes: Option<i64>,
    /// Static shared memory.
    #[serde(deserialize_with = "or_absent")]
    pub shared_static_bytes: Option<i64>,
    /// Dynamic shared memory (Triton).
    #[serde(deserialize_with = "or_absent")]
    pub shared_dynamic_bytes: Option<i64>,
    /// SASS instructions in total.
    #[serde(deserialize_with = "or_absent")]
    pub instructions: Option<i64>,
    /// SASS instructions by class (`fp32`, `tensor`, `global_load`, ...).
    #[serde(deserialize_with = "counts")]
    pub by_class: BTreeMap<String, i64>,
    /// SASS instructions by base opcode.
    #[serde(deserialize_with = "counts")]
    pub by_opcode: BTreeMap<String, i64>,
    /// Compile time of the kernel itself (Triton).
    #[serde(deserialize_with = "or_absent")]
    pub compile_seconds: Option<f64>,
}

impl CompileFigures {
    /// A one-line summary: `regs 255, spills 2008/2572 B, smem 1024+122880 B, 6960 instr (fp32 2712, tensor 104, ...)`.
    pub fn summary(&self) -> String {
        let mut classes: Vec<(&String, &i64)> = self.by_class.iter().collect();
        classes.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let top: Vec<String> = classes.iter().take(5).map(|(k, v)| format!("{k} {v}")).collect();
        if self.registers.is_none() && self.spill_store_bytes.is_none() {
            // a host build: no registers or spills to speak of, only its instructions
            return match self.instructions {
                Some(n) if top.is_empty() => format!("{n} instr"),
                Some(n) => format!("{n} instr ({})", top.join(", ")),
                None => "built".to_string(),
            };
        }
        let o = |x: Option<i64>| x.map(|v| v.to_string()).unwrap_or_else(|| "?".into());
        format!(
            "regs {}, spills {}/{} B, smem {}+{} B, {} instr ({})",
            o(self.registers),
            o(self.spill_store_bytes),
            o(self.spill_load_bytes),
            o(self.shared_static_bytes),
            o(self.shared_dynamic_bytes),
            o(self.instructions),
            top.join(", ")
        )
    }

    /// Tensor-core instructions (the `tensor` class), 0 when there are none.
    pub fn tensor(&self) -> i64 {
        self.by_class.get("tensor").copied().unwrap_or(0)
    }
}

/// The worst errors of one output over a check's cases.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorstError {
    /// The largest relative L2 error (`"inf"` when one was not finite).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub rel_l2: Option<Num>,
    /// The largest max-abs over max-reference error.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub max_abs_rel: Option<Num>,
    /// The worst slice's relative L2 error.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub slice_rel_l2: Option<Num>,
    /// Non-finite values, over all cases.
    #[serde(deserialize_with = "or_absent")]
    pub nonfinite: u64,
}

/// The worst errors of a check, per output name (a typed map: the outputs are the kernel's).
pub type WorstErrors = BTreeMap<String, WorstError>;

/// One point of an error-versus-length curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    /// The length.
    #[serde(rename = "T")]
    pub t: i64,
    /// The relative L2 error there.
    pub rel_l2: Num,
    /// The max absolute error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_abs: Option<Num>,
    /// The relative L2 error of the last chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_chunk_rel_l2: Option<Num>,
    /// The relative L2 error of the final state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_rel_l2: Option<Num>,
    /// The max absolute error of the final state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_max_abs: Option<Num>,
}

/// The correctness gate's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CorrectnessFigures {
    /// How the check ran (`interpreter-tf32`, `native`, ...).
    #[serde(deserialize_with = "or_absent")]
    pub mode: String,
    /// Its seeds.
    #[serde(deserialize_with = "or_absent")]
    pub seeds: Vec<u64>,
    /// How many cases.
    #[serde(deserialize_with = "or_absent")]
    pub cases: u64,
    /// The worst errors.
    #[serde(deserialize_with = "or_absent")]
    pub worst: WorstErrors,
    /// The manifest's tolerances (the validator's `Tolerance`).
    #[serde(deserialize_with = "or_absent")]
    pub tolerance: Value,
    /// The harness's prefill + decode consistency report, where it made one.
    #[serde(deserialize_with = "or_absent")]
    pub consistency: Option<Value>,
    /// The failed cases, as the harness words them.
    #[serde(deserialize_with = "or_absent")]
    pub failures: Vec<String>,
    /// Always `true`: the check ran beside the compiles.
    #[serde(deserialize_with = "or_absent")]
    pub ran_alongside_static: bool,
    /// `cpp` kernels: what the worker's sandbox applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub sandbox: Option<Value>,
}

/// One side of a correctness record (`before`: the baseline; `after`: the candidate).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ErrorSide {
    /// The error-versus-length curve, for a precision rewrite.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "each_that_fits")]
    pub curve: Option<Vec<CurvePoint>>,
    /// The worst errors (the candidate's side).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub worst: Option<WorstErrors>,
}

/// The metric of a host target's speed record: requests/s and request
/// latency of the service bench, each window in a process of its own.
pub const SERVICE_REQUESTS: &str = "service-requests";
/// The host metric of older records: the scheduler thread's throughput
/// gap, baseline and candidate in one process (read, no longer written).
pub const SCHEDULER_THROUGHPUT: &str = "scheduler-throughput";

/// The speed gate's figures, for a GPU kernel or a host target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SpeedFigures {
    /// A host target: the scheduler thread's throughput while transfers run.
    Host(HostSpeedFigures),
    /// A GPU kernel: interleaved timings.
    Gpu(GpuSpeedFigures),
}

impl SpeedFigures {
    /// Baseline over candidate (a host target: throughput under transfers).
    pub fn speedup(&self) -> Option<f64> {
        match self {
            SpeedFigures::Host(h) => h.speedup,
            SpeedFigures::Gpu(g) => g.speedup,
        }
    }

    /// The noise floor the speedup is judged against.
    pub fn noise_floor(&self) -> Option<f64> {
        match self {
            SpeedFigures::Host(h) => h.noise_floor,
            SpeedFigures::Gpu(g) => g.noise_floor,
        }
    }

    /// The host bench's metric (`service-requests`, or `scheduler-throughput`
    /// in older records); `None` for a GPU kernel.
    pub fn metric(&self) -> Option<&str> {
        match self {
            SpeedFigures::Host(h) => Some(&h.metric),
            SpeedFigures::Gpu(_) => None,
        }
    }
}

/// A GPU kernel's speed figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuSpeedFigures {
    /// Baseline median over candidate median (always written; absent in a
    /// record that measured nothing).
    #[serde(deserialize_with = "or_absent")]
    pub speedup: Option<f64>,
    /// The noise floor.
    #[serde(deserialize_with = "or_absent")]
    pub noise_floor: Option<f64>,
    /// Whether the speedup is beyond the noise.
    #[serde(deserialize_with = "or_absent")]
    pub significant: bool,
    /// The manifest's floor (the harness's own shape).
    #[serde(deserialize_with = "or_absent")]
    pub floor: Option<Value>,
    /// The bench shape.
    #[serde(deserialize_with = "or_absent")]
    pub shape: Option<Value>,
    /// Timed iterations per variant.
    #[serde(deserialize_with = "or_absent")]
    pub iters: Option<u64>,
    /// What the harness flagged.
    #[serde(deserialize_with = "or_absent")]
    pub flags: Vec<String>,
    /// Who timed it: `gpu-gate` (kidiom's own GPU gate, the candidate's
    /// device code only) or `untrusted-bench` (the harness's bench, which
    /// imports the candidate into the timing process); absent in older records.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "or_absent")]
    pub timed_by: Option<String>,
    /// The GPU gate's own evidence: the cubin hashes, its RNG seed, the
    /// device, the calls made, the worst errors and its notes.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "or_absent")]
    pub gate: Option<Value>,
}

/// A host target's speed figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostSpeedFigures {
    /// `service-requests` (`scheduler-throughput` in older records): what
    /// tells a host record from a GPU one.
    pub metric: String,
    /// Requests/s of the service, candidate over baseline (older records:
    /// the scheduler's throughput under transfers).
    #[serde(default, deserialize_with = "or_absent")]
    pub speedup: Option<f64>,
    /// The noise floor.
    #[serde(default, deserialize_with = "or_absent")]
    pub noise_floor: Option<f64>,
    /// Whether the gain is beyond the noise.
    #[serde(default, deserialize_with = "or_absent")]
    pub significant: bool,
    /// The baseline's scheduler gap.
    #[serde(default, deserialize_with = "or_absent")]
    pub gap_baseline: Option<f64>,
    /// The candidate's scheduler gap.
    #[serde(default, deserialize_with = "or_absent")]
    pub gap_candidate: Option<f64>,
    /// The baseline's requests/s.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "or_absent")]
    pub requests_baseline: Option<f64>,
    /// The candidate's requests/s.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "or_absent")]
    pub requests_candidate: Option<f64>,
    /// The candidate's p99 request latency over the baseline's.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "or_absent")]
    pub latency_ratio: Option<f64>,
    /// The manifest's floor.
    #[serde(default, deserialize_with = "or_absent")]
    pub floor: Option<Value>,
    /// The bench shape.
    #[serde(default, deserialize_with = "or_absent")]
    pub shape: Option<Value>,
    /// Rounds measured.
    #[serde(default, deserialize_with = "or_absent")]
    pub rounds: u64,
    /// The variant of each measured window pair, in run order.
    #[serde(default, deserialize_with = "or_absent")]
    pub order: Vec<String>,
    /// What the harness flagged.
    #[serde(default, deserialize_with = "or_absent")]
    pub flags: Vec<String>,
}

/// One variant of a speed record (`before`, `after`): the timings or gaps
/// the harness reported, with whatever else it keeps (samples, bandwidth):
/// a typed map, since the harness decides the keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SpeedSide(pub serde_json::Map<String, Value>);

impl SpeedSide {
    /// The number under `key`.
    pub fn number(&self, key: &str) -> Option<f64> {
        self.0.get(key).and_then(Value::as_f64)
    }

    /// `(p10, median, p90)` under these keys (the host bench's gap, a GPU bench's µs).
    pub fn percentiles(&self, p10: &str, median: &str, p90: &str) -> Option<(f64, f64, f64)> {
        Some((self.number(p10)?, self.number(median)?, self.number(p90)?))
    }

    /// Every array of numbers it holds, by key.
    pub fn samples(&self) -> impl Iterator<Item = (&str, Vec<f64>)> {
        self.0.iter().filter_map(|(k, v)| {
            let arr = v.as_array()?;
            let xs: Vec<f64> = arr.iter().filter_map(Value::as_f64).collect();
            (!xs.is_empty() && xs.len() == arr.len()).then_some((k.as_str(), xs))
        })
    }
}

/// `v` as a `T`; a figure that does not fit (an older or foreign record) is absent.
fn decode<T: DeserializeOwned>(v: Option<&Value>) -> Option<T> {
    v.filter(|v| !v.is_null()).and_then(|v| T::deserialize(v).ok())
}

/// A relative error of the output `o` and of the recurrent state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OutputStateError {
    /// The output's.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub o: Option<Num>,
    /// The state's.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub state: Option<Num>,
}

/// One drift curve: per decode step, the relative errors of the output and of the state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DriftCurve {
    /// The output's error at each step.
    #[serde(deserialize_with = "or_absent")]
    pub o: Vec<Num>,
    /// The state's error at each step.
    #[serde(deserialize_with = "or_absent")]
    pub state: Vec<Num>,
}

/// State bytes moved per decode step, the variant's and the fp32 baseline's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BytesPerStep {
    /// The variant's (reduced-precision state and its scales).
    #[serde(deserialize_with = "or_absent")]
    pub variant: u64,
    /// The fp32 baseline's.
    #[serde(deserialize_with = "or_absent")]
    pub baseline: u64,
}

/// The precision gate's figures: a state-precision variant (a manifest with
/// `variant_of` and `[storage]`) judged against its simulated reference and
/// float64 over many decode steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PrecisionFigures {
    /// The variant's manifest name (`kda.decode.state-bf16`).
    #[serde(deserialize_with = "or_absent")]
    pub variant: String,
    /// The kernel it is a variant of (`kda.decode`).
    #[serde(deserialize_with = "or_absent")]
    pub variant_of: String,
    /// The storage (tensor, dtype, scale layout, scales tensor), as the manifest says it.
    #[serde(deserialize_with = "or_absent")]
    pub storage: Value,
    /// The state's dtype (`bf16`, `fp8e4m3`, `int8`), from the storage.
    #[serde(deserialize_with = "or_absent")]
    pub dtype: String,
    /// Worst error against float64.
    #[serde(deserialize_with = "or_absent")]
    pub vs_float64: OutputStateError,
    /// Worst error against the simulated reference (the reference with the
    /// variant's rounding at the same places): the kernel's own error.
    #[serde(deserialize_with = "or_absent")]
    pub vs_simulated: OutputStateError,
    /// The stored state's worst distance from the simulated reference, in
    /// rounding steps of its format (where the harness counts it so).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub simulated_state_units: Option<Num>,
    /// The decode steps the curves are sampled at.
    #[serde(deserialize_with = "or_absent")]
    pub steps: Vec<i64>,
    /// The variant's drift against float64.
    #[serde(deserialize_with = "or_absent")]
    pub drift: DriftCurve,
    /// The fp32 baseline's drift on the same inputs.
    #[serde(deserialize_with = "or_absent")]
    pub baseline_drift: DriftCurve,
    /// The first step whose error is beyond the budget (none: within it throughout).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub crossed_at: Option<i64>,
    /// The error budget (the manifest's `[budget]`, as the harness applied it).
    #[serde(deserialize_with = "or_absent")]
    pub budget: Value,
    /// State bytes per decode step.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "or_absent")]
    pub bytes_per_step: Option<BytesPerStep>,
    /// What failed, as the harness words it.
    #[serde(deserialize_with = "or_absent")]
    pub failures: Vec<String>,
}

impl BytesPerStep {
    /// Baseline bytes over the variant's (how much less the state moves).
    pub fn ratio(&self) -> Option<f64> {
        (self.variant > 0).then(|| self.baseline as f64 / self.variant as f64)
    }
}

/// `f` as stored JSON (a figure type always serializes).
fn encode<T: Serialize>(f: &T) -> Value {
    serde_json::to_value(f).unwrap_or(Value::Null)
}

impl GateRecord {
    /// Sets the gate's figures (`metrics`).
    pub fn set_metrics<T: Serialize>(&mut self, figures: &T) {
        self.metrics = encode(figures);
    }

    /// Sets the baseline's and the candidate's figures (`before`, `after`).
    pub fn set_sides<B: Serialize, A: Serialize>(&mut self, before: Option<&B>, after: Option<&A>) {
        self.before = before.map(encode);
        self.after = after.map(encode);
    }

    /// The syntax gate's figures.
    pub fn syntax_figures(&self) -> SyntaxFigures {
        decode(Some(&self.metrics)).unwrap_or_default()
    }

    /// The static gate's figures.
    pub fn static_figures(&self) -> StaticFigures {
        decode(Some(&self.metrics)).unwrap_or_default()
    }

    /// The static gate's compiles, baseline and candidate.
    pub fn compiles(&self) -> (Option<CompileFigures>, Option<CompileFigures>) {
        (decode(self.before.as_ref()), decode(self.after.as_ref()))
    }

    /// The correctness gate's figures.
    pub fn correctness_figures(&self) -> CorrectnessFigures {
        decode(Some(&self.metrics)).unwrap_or_default()
    }

    /// The correctness gate's sides, baseline and candidate (empty where absent).
    pub fn error_sides(&self) -> (ErrorSide, ErrorSide) {
        (decode(self.before.as_ref()).unwrap_or_default(), decode(self.after.as_ref()).unwrap_or_default())
    }

    /// The precision gate's figures.
    pub fn precision_figures(&self) -> PrecisionFigures {
        decode(Some(&self.metrics)).unwrap_or_default()
    }

    /// The speed gate's figures, where it measured.
    pub fn speed_figures(&self) -> Option<SpeedFigures> {
        decode(Some(&self.metrics))
    }

    /// The speed gate's variants, baseline and candidate.
    pub fn speed_sides(&self) -> (Option<SpeedSide>, Option<SpeedSide>) {
        (decode(self.before.as_ref()), decode(self.after.as_ref()))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::record::{Gate, GateStatus};

    #[test]
    fn figures_write_the_keys_they_always_had_and_read_back() {
        let mut rec = GateRecord::new(Gate::Correctness, GateStatus::Passed, "");
        let mut worst = WorstErrors::new();
        worst.insert(
            "o".into(),
            WorstError {
                rel_l2: Some(Num(f64::INFINITY)),
                max_abs_rel: Some(Num(1e-3)),
                nonfinite: 2,
                ..Default::default()
            },
        );
        let f = CorrectnessFigures { mode: "native".into(), cases: 3, worst, ..Default::default() };
        rec.set_metrics(&f);
        assert_eq!(rec.metrics["worst"], json!({"o": {"rel_l2": "inf", "max_abs_rel": 1e-3, "nonfinite": 2}}));
        assert_eq!(rec.metrics["consistency"], Value::Null, "present, as json! wrote it");
        assert!(rec.metrics.get("sandbox").is_none());
        assert_eq!(rec.correctness_figures(), f);
        // a GPU bench's figures and a host bench's read apart
        rec.metrics = json!({"speedup": 1.5, "noise_floor": 0.01, "significant": true, "floor": null, "shape": null,
                             "iters": 50, "flags": []});
        assert_eq!(rec.speed_figures().map(|s| (s.speedup(), s.metric().is_none())), Some((Some(1.5), true)));
        rec.metrics = json!({"metric": "scheduler-throughput", "speedup": 1.2, "noise_floor": 0.02, "significant": true,
                             "gap_baseline": 0.3, "gap_candidate": 0.1, "floor": null, "shape": null, "rounds": 5,
                             "order": [], "flags": []});
        assert_eq!(
            rec.speed_figures().and_then(|s| s.metric().map(str::to_string)).as_deref(),
            Some("scheduler-throughput")
        );
        // a record that measured nothing has no speedup
        let skipped = GateRecord::new(Gate::Speed, GateStatus::Skipped, "");
        assert_eq!(skipped.speed_figures().and_then(|s| s.speedup()), None);
    }
}
