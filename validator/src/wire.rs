//! The harness's JSON, typed: wire format version 1 (docs/HARNESS.md).
//!
//! Every object has a [`Header`]; what follows depends on the command and
//! the status. The fields a gate decides on are required here, so a renamed
//! or malformed field is an `error` verdict that names it (never a NaN that
//! quietly becomes "no significant speedup"). Fields that are only reported
//! are optional, and unknown fields are ignored: within version 1 the
//! harness only adds fields.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::backend::python::{HarnessRun, HarnessStatus};

/// The `wire` field of every object.
pub(crate) const WIRE: &str = "kidiom-harness";
/// The version this validator reads.
pub(crate) const VERSION: u64 = 1;

/// Harness output that does not fit the wire format.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("the harness's {command} output does not fit wire format {VERSION}: {message}")]
pub(crate) struct WireError {
    /// `compile`, `check` or `bench`.
    pub(crate) command: String,
    /// What is wrong, naming the field.
    pub(crate) message: String,
}

/// A number the harness writes as a JSON number, `"inf"` / `"-inf"`, or
/// `null` (NaN); a curve point. Both are stored in the evidence as read, so
/// they are the record's types.
pub(crate) use kidiom_patterns::record::{CurvePoint, Num};

/// The fields every object has.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Header {
    /// Always [`WIRE`].
    pub(crate) wire: String,
    /// [`VERSION`].
    pub(crate) version: u64,
    /// The command that ran.
    pub(crate) command: String,
    /// `ok`, `passed`, `failed`, `skipped`, `error`.
    pub(crate) status: String,
    /// With `status: error`.
    #[serde(default)]
    pub(crate) error: Option<String>,
    /// With `status: skipped` (and bench `failed`).
    #[serde(default)]
    pub(crate) reason: Option<String>,
    /// Where it ran.
    #[serde(default)]
    pub(crate) device: Option<String>,
    /// check/bench: `interpreter-tf32`, `interpreter`, `native`, `host`.
    #[serde(default)]
    pub(crate) mode: Option<String>,
    /// Tool versions.
    #[serde(default)]
    pub(crate) versions: Option<Value>,
}

impl Header {
    /// Whether the harness reports that its own time limit ran out.
    pub(crate) fn timed_out(&self) -> bool {
        self.status == "error" && self.error.as_deref().is_some_and(|e| e.contains("timed out"))
    }
}

/// A compile's numbers (`status: ok`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Compile {
    /// `sm_90a`, `host-x86_64`.
    pub(crate) arch: String,
    /// Registers, spills, shared memory (`{}` for host builds).
    pub(crate) resources: Resources,
    /// The static instruction mix (host builds without objdump have `notes` instead).
    #[serde(default)]
    pub(crate) instructions: Option<Instructions>,
    /// Triton's own figures.
    #[serde(default)]
    pub(crate) triton: Option<TritonCompile>,
}

/// `resources` of a compile; every figure may be absent.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct Resources {
    #[serde(default)]
    pub(crate) registers: Option<i64>,
    #[serde(default)]
    pub(crate) stack_bytes: Option<i64>,
    #[serde(default)]
    pub(crate) shared_static_bytes: Option<i64>,
    #[serde(default)]
    pub(crate) shared_dynamic_bytes: Option<i64>,
    #[serde(default)]
    pub(crate) local_bytes: Option<i64>,
    #[serde(default)]
    pub(crate) spill_store_bytes: Option<i64>,
    #[serde(default)]
    pub(crate) spill_load_bytes: Option<i64>,
}

/// `instructions` of a compile.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Instructions {
    pub(crate) total: i64,
    #[serde(default)]
    pub(crate) by_class: BTreeMap<String, i64>,
    #[serde(default)]
    pub(crate) by_opcode: BTreeMap<String, i64>,
}

/// `triton` of a compile.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct TritonCompile {
    #[serde(default)]
    pub(crate) compile_seconds: Option<f64>,
    /// Every arm of the kernel's constexpr branches, with the CPU cases and
    /// GPU shapes that reach it (triton/branches.py).
    #[serde(default)]
    pub(crate) branches: Vec<BranchArm>,
}

/// One arm of a constexpr `if` in a kernel's body (`compile`'s `branches`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct BranchArm {
    /// The file's line of the arm's first statement.
    pub(crate) line: u64,
    /// `then` or `else`.
    pub(crate) arm: String,
    /// The `if`'s test, as source.
    pub(crate) test: String,
    /// Names the arm's code (its statements' syntax trees).
    pub(crate) hash: String,
    /// Indices of the CPU cases (the manifest's `shapes.cpu`) that reach it.
    pub(crate) cpu: Vec<usize>,
    /// Indices of the GPU shapes (`shapes.gpu`) that reach it.
    pub(crate) gpu: Vec<usize>,
}

/// A work profile (`profile`, `status: ok`): counts made on the CPU and
/// scaled to the manifest's bench shape (docs/HARNESS.md, "profile").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// The bench shape the totals are for.
    pub shape: BTreeMap<String, Value>,
    /// What was run and how it was scaled.
    pub counted: Counted,
    /// Totals at the bench shape.
    pub totals: crate::predict::WorkTotals,
    /// Special-function evaluations by function.
    #[serde(default)]
    pub special: BTreeMap<String, u64>,
    /// The manifest's floor at the bench shape.
    pub floor: ProfileFloor,
    /// Bytes moved over the floor's bytes.
    pub traffic_ratio: f64,
    /// Kernel launches per call.
    pub launches: u64,
    /// Threads per program where the launch says (CUDA: the contract's
    /// block); absent: the compile's num_warps says.
    #[serde(default)]
    pub threads_per_program: Option<u64>,
    /// Counts by source line (bench-scaled), lines with any count.
    #[serde(default)]
    pub lines: Vec<ProfileLine>,
    /// The launch-limit check at the manifest's gpu and bench shapes.
    #[serde(default)]
    pub launch_limits: Option<LaunchLimits>,
}

impl Profile {
    /// The launch this profile's kernel makes, from its compile's figures:
    /// programs and threads (the contract's block for CUDA, else num_warps),
    /// registers and shared memory. `None` where nothing says how many
    /// threads a program has.
    pub fn launch(&self, compile: &Value) -> Option<crate::predict::LaunchShape> {
        crate::predict::LaunchShape::from_compile(compile, self.counted.programs_total, self.threads_per_program)
    }
}

/// `launch_limits` of a profile: the kernel's own launch defects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchLimits {
    /// Manifest shapes whose launches were recorded.
    pub shapes: u64,
    /// Each defect in one line: a grid axis past its limit, or growing past
    /// it with a shape variable; a tensor past 32-bit offsets.
    #[serde(default)]
    pub findings: Vec<String>,
}

/// `counted` of a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Counted {
    /// The shape actually run.
    pub shape: BTreeMap<String, Value>,
    /// Programs (Triton) or blocks (CUDA) run.
    pub programs: u64,
    /// Programs at the bench shape.
    pub programs_total: u64,
    /// The factor the counts were scaled by.
    pub scale: f64,
    /// Whether the counted shape is the bench shape itself.
    pub exact: bool,
    /// How it was scaled, or why the work is not uniform.
    #[serde(default)]
    pub note: Option<String>,
}

/// `floor` of a profile.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProfileFloor {
    /// Bytes every correct implementation moves.
    pub bytes: f64,
    /// Its arithmetic.
    pub flops: f64,
}

/// One line of a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileLine {
    /// The line in the kernel source (1-based).
    pub line: u32,
    /// Its text.
    #[serde(default)]
    pub text: String,
    /// Global bytes loaded.
    #[serde(default)]
    pub load_bytes: u64,
    /// Global bytes stored.
    #[serde(default)]
    pub store_bytes: u64,
    /// Bytes loaded again by the same program or thread.
    #[serde(default)]
    pub reread_bytes: u64,
    /// Special-function evaluations.
    #[serde(default)]
    pub special_calls: u64,
    /// Floating-point operations.
    #[serde(default)]
    pub flops: u64,
    /// Dot multiply-accumulates.
    #[serde(default)]
    pub dot_macs: u64,
    /// Of the special-function evaluations, those the same program (Triton) or
    /// thread (CUDA) already made earlier in the call: the same function on
    /// the same arguments (a whole-array digest under Triton, the operands'
    /// bits in CUDA). At most `special_calls`; 0 from a harness before them.
    #[serde(default)]
    pub repeat_calls: u64,
    /// Of the special-function evaluations, those another program of the same
    /// launch (Triton) or thread of the same block (CUDA) made first: work
    /// every program or thread computes identically. At most `special_calls`;
    /// 0 from a harness before them.
    #[serde(default)]
    pub uniform_calls: u64,
}

/// A check's result (`status: passed` or `failed`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Check {
    pub(crate) passed: bool,
    pub(crate) failures: Vec<String>,
    pub(crate) cases: Vec<Case>,
    #[serde(default)]
    pub(crate) seeds: Option<Vec<u64>>,
    /// The error-versus-length curve, where the manifest asks for it.
    #[serde(default)]
    pub(crate) curve: Option<Vec<CurvePoint>>,
    #[serde(default)]
    pub(crate) consistency: Option<Value>,
    /// `cpp` kernels: what the worker's sandbox applied.
    #[serde(default)]
    pub(crate) sandbox: Option<Value>,
    /// `cpp` kernels: the ThreadSanitizer run.
    #[serde(default)]
    pub(crate) tsan: Option<Value>,
    /// The candidate is the baseline's program under the interpreter (memory
    /// hints only): why, and the parts of the check not run for it.
    #[serde(default)]
    pub(crate) same_program: Option<SameProgram>,
    /// Which lines of the change some case ran (a Triton candidate on a CPU).
    #[serde(default)]
    pub(crate) coverage: Option<Coverage>,
}

/// The candidate's changed lines against what the cases ran.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Coverage {
    /// Changed lines (1-based, in the candidate).
    #[serde(default)]
    pub(crate) changed: Vec<u64>,
    /// Of them, those inside function bodies, which a run can be seen to reach.
    #[serde(default)]
    pub(crate) watched: Vec<u64>,
    /// Of the watched, those no case ran.
    #[serde(default)]
    pub(crate) unrun: Vec<u64>,
    /// Set when no case ran any of the change: why it is unverified.
    #[serde(default)]
    pub(crate) unverified: Option<String>,
}

/// Why a check ran a reduced plan: the candidate runs the baseline's own
/// program on this device.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct SameProgram {
    pub(crate) why: String,
    #[serde(default)]
    pub(crate) not_run: Vec<String>,
}

/// One case of a check.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Case {
    pub(crate) id: String,
    pub(crate) passed: bool,
    /// Per output name, its error metrics (empty for bad-input cases).
    pub(crate) outputs: BTreeMap<String, Metrics>,
    #[serde(default)]
    pub(crate) failures: Vec<String>,
    #[serde(default)]
    pub(crate) seed: Option<u64>,
    /// The baseline's numbers on the same inputs, where the harness reports them.
    #[serde(default)]
    pub(crate) baseline: Option<Value>,
    /// How often the kernel was launched, where the harness counts it.
    #[serde(default)]
    pub(crate) launches: Option<Value>,
    /// Whether the inputs came back unchanged.
    #[serde(default)]
    pub(crate) inputs_unchanged: Option<Value>,
}

/// The error metrics of one output against the reference. They are
/// reported, not judged (the harness decides `passed`), and an output may
/// carry other counts instead (a concurrent checksum: `mismatched_threads`),
/// so each is optional; one that is present must be a number.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Metrics {
    #[serde(default)]
    pub(crate) rel_l2: Option<Num>,
    #[serde(default)]
    pub(crate) max_abs_rel: Option<Num>,
    #[serde(default)]
    pub(crate) max_abs: Option<Num>,
    #[serde(default)]
    pub(crate) worst_slice: Option<WorstSlice>,
    #[serde(default)]
    pub(crate) nonfinite: u64,
}

/// The worst slice of an output.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct WorstSlice {
    pub(crate) rel_l2: Num,
}

/// `spec` (`status: ok`): the spec directories it wrote, one per shape.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Specs {
    pub(crate) specs: Vec<SpecDir>,
}

/// One shape's spec directory.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct SpecDir {
    /// `gpu0`, ..., `bench`.
    pub(crate) label: String,
    /// The shape.
    pub(crate) shape: Value,
    /// The directory (launch.json, the cubin, inputs/, expected/).
    pub(crate) dir: String,
    /// Its cubin's sha256.
    pub(crate) cubin_sha256: String,
    /// The manifest's floor bytes at the shape (computed by the harness, never by the candidate).
    #[serde(default)]
    pub(crate) floor_bytes: Option<Num>,
}

/// A bench whose correctness gate failed (`status: failed`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct BenchFailed {
    #[serde(default)]
    pub(crate) failures: Vec<String>,
}

/// Baseline and candidate of a bench.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Results<T> {
    pub(crate) baseline: T,
    pub(crate) candidate: T,
}

/// A GPU bench (`status: ok`): interleaved timings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Bench {
    pub(crate) speedup: Num,
    pub(crate) noise_floor: Num,
    pub(crate) significant: bool,
    pub(crate) results: Results<Timing>,
    pub(crate) flags: Vec<String>,
    #[serde(default)]
    pub(crate) floor: Option<Value>,
    #[serde(default)]
    pub(crate) shape: Option<Value>,
    #[serde(default)]
    pub(crate) iters: Option<u64>,
}

/// One variant's timings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Timing {
    pub(crate) median_us: Num,
    pub(crate) p10_us: Num,
    pub(crate) p90_us: Num,
    /// Everything else the harness reports (samples, bandwidth, ...), kept as written.
    #[serde(flatten)]
    pub(crate) extra: serde_json::Map<String, Value>,
}

/// The metric of a host bench: the service's requests/s.
pub(crate) const SERVICE_REQUESTS: &str = "service-requests";

/// A host C++ bench (`status: ok`, metric `service-requests`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct HostBench {
    pub(crate) metric: String,
    /// Median over rounds of candidate / baseline requests/s.
    pub(crate) speedup: Num,
    pub(crate) noise_floor: Num,
    pub(crate) significant: bool,
    /// The candidate's p99 request latency over the baseline's.
    pub(crate) latency_ratio: Num,
    pub(crate) results: Results<HostVariant>,
    pub(crate) flags: Vec<String>,
    /// The variant of each measured window, in run order.
    pub(crate) order: Vec<String>,
    pub(crate) rounds: u64,
    /// How the windows were isolated (`one per variant and window`).
    #[serde(default)]
    pub(crate) processes: Option<String>,
    #[serde(default)]
    pub(crate) floor: Option<Value>,
    #[serde(default)]
    pub(crate) shape: Option<Value>,
    #[serde(default)]
    pub(crate) checksums: Option<Value>,
}

/// One variant of a host bench.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct HostVariant {
    /// Median over windows of requests done per second.
    pub(crate) requests_per_s: Num,
    /// Request latency (arrival to done) over every request of every window, microseconds.
    pub(crate) p50_us: Num,
    pub(crate) p99_us: Num,
    /// Median over windows of 1 - loaded/alone scheduler steps per second.
    pub(crate) gap: Num,
    pub(crate) steps_per_s_alone: Num,
    pub(crate) steps_per_s_loaded: Num,
    pub(crate) transfer_gbps: Num,
    /// Everything else (per-window lists, transfer timings), kept as written.
    #[serde(flatten)]
    pub(crate) extra: serde_json::Map<String, Value>,
}

/// Reads `v` as a `T`, naming the field that does not fit.
fn read<T: DeserializeOwned>(command: &str, v: &Value) -> Result<T, WireError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let message = if path == "." || path.is_empty() { inner } else { format!("field `{path}`: {inner}") };
        WireError { command: command.to_string(), message }
    })
}

/// The header of a harness run's JSON, checked against the command asked
/// for and against the exit status.
pub(crate) fn header(run: &HarnessRun, command: &str) -> Result<Header, WireError> {
    let bad = |message: String| WireError { command: command.to_string(), message };
    if !run.json.is_object() {
        return Err(bad("no JSON object on stdout".into()));
    }
    let h: Header = read(command, &run.json)?;
    if h.wire != WIRE {
        return Err(bad(format!("field `wire`: {:?}, expected {WIRE:?}", h.wire)));
    }
    if h.version != VERSION {
        return Err(bad(format!("field `version`: {}, this validator reads {VERSION}", h.version)));
    }
    if h.command != command {
        return Err(bad(format!("field `command`: {:?}, expected {command:?}", h.command)));
    }
    let expected: &[&str] = match run.status {
        HarnessStatus::Ok => &["ok", "passed"],
        HarnessStatus::Failed => &["failed"],
        HarnessStatus::Error => &["error"],
        HarnessStatus::Skipped => &["skipped"],
        HarnessStatus::TimedOut | HarnessStatus::Crashed => return Ok(h),
    };
    if !expected.contains(&h.status.as_str()) {
        return Err(bad(format!(
            "field `status`: {:?} does not match the exit code {:?}",
            h.status,
            run.process.code.unwrap_or(-1)
        )));
    }
    Ok(h)
}

/// The body of a run as `T` (after [`header`]).
pub(crate) fn body<T: DeserializeOwned>(run: &HarnessRun, command: &str) -> Result<T, WireError> {
    read(command, &run.json)
}

/// A host bench's body; its metric must be the one this validator judges.
pub(crate) fn host_bench(run: &HarnessRun) -> Result<HostBench, WireError> {
    let b: HostBench = body(run, "bench")?;
    if b.metric != SERVICE_REQUESTS {
        return Err(WireError {
            command: "bench".into(),
            message: format!("field `metric`: {:?}, expected {SERVICE_REQUESTS:?}", b.metric),
        });
    }
    Ok(b)
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;
    use kidiom_exec::ProcessOutcome;

    pub(crate) fn run(status: HarnessStatus, json: Value) -> HarnessRun {
        let code = match status {
            HarnessStatus::Ok => Some(0),
            HarnessStatus::Failed => Some(1),
            HarnessStatus::Error => Some(2),
            HarnessStatus::Skipped => Some(3),
            _ => None,
        };
        HarnessRun {
            status,
            process: ProcessOutcome {
                command: "python -m kernels.harness".into(),
                cwd: "/".into(),
                code,
                timed_out: status == HarnessStatus::TimedOut,
                cancelled: false,
                seconds: 1.0,
                stdout: String::new(),
                stderr_tail: String::new(),
                stragglers_killed: Vec::new(),
            },
            json,
            placement: None,
        }
    }

    pub(crate) fn with_header(command: &str, status: &str, body: Value) -> Value {
        let mut v = json!({"wire": WIRE, "version": 1, "command": command, "status": status, "kernel": "k",
                           "device": "cpu (host)", "future_field": {"nested": [1, 2]}});
        if let (Some(o), Some(b)) = (v.as_object_mut(), body.as_object()) {
            o.extend(b.clone());
        }
        v
    }

    #[test]
    fn numbers_may_be_inf_or_null() {
        let n: Vec<Num> = serde_json::from_value(json!([1.5, "inf", "-inf", null])).unwrap();
        assert_eq!(n[0], Num(1.5));
        assert_eq!(n[1].0, f64::INFINITY);
        assert_eq!(n[2].0, f64::NEG_INFINITY);
        assert!(n[3].0.is_nan() && n[3].finite().is_none());
        assert!(serde_json::from_value::<Num>(json!("fast")).is_err());
        assert_eq!(
            serde_json::to_value([Num(2.0), Num(f64::INFINITY), Num(f64::NAN)]).unwrap(),
            json!([2.0, "inf", null])
        );
    }

    #[test]
    fn headers_are_checked_against_the_command_and_the_exit_code() {
        let ok = run(HarnessStatus::Ok, with_header("compile", "ok", json!({})));
        assert_eq!(header(&ok, "compile").unwrap().device.as_deref(), Some("cpu (host)"));
        let e = header(&ok, "check").unwrap_err();
        assert!(e.message.contains("field `command`"), "{e}");
        let mismatch = run(HarnessStatus::Ok, with_header("check", "failed", json!({})));
        assert!(header(&mismatch, "check").unwrap_err().message.contains("exit code"));
        let mut v2 = with_header("check", "passed", json!({}));
        v2["version"] = json!(2);
        assert!(header(&run(HarnessStatus::Ok, v2), "check").unwrap_err().message.contains("version"));
        let mut nowire = with_header("check", "passed", json!({}));
        nowire.as_object_mut().unwrap().remove("wire");
        let e = header(&run(HarnessStatus::Ok, nowire), "check").unwrap_err();
        assert!(e.to_string().contains("missing field `wire`"), "{e}");
        assert!(header(&run(HarnessStatus::Crashed, Value::Null), "check").is_err());
        let timeout =
            run(HarnessStatus::Error, with_header("check", "error", json!({"error": "harness timed out after 1.0 s"})));
        assert!(header(&timeout, "check").unwrap().timed_out());
    }

    #[test]
    fn a_renamed_or_malformed_field_is_named() {
        let bench = json!({
            "metric": "service-requests", "speedup": 1.45, "noise_floor": 0.02, "significant": true,
            "latency_ratio": 0.7, "flags": [], "order": ["baseline", "candidate"], "rounds": 2,
            "results": {
                "baseline": {"requests_per_s": 475.0, "p50_us": 17e3, "p99_us": 20e3, "gap": 0.48,
                             "steps_per_s_alone": 1e4, "steps_per_s_loaded": 5e3, "transfer_gbps": 7.8,
                             "median_us": 640.0, "samples": 3},
                "candidate": {"requests_per_s": 690.0, "p50_us": 11e3, "p99_us": 14e3, "gap": 0.01,
                              "steps_per_s_alone": 1e4, "steps_per_s_loaded": 9.9e3, "transfer_gbps": 11.6}
            }
        });
        let r = run(HarnessStatus::Ok, with_header("bench", "ok", bench.clone()));
        let b = host_bench(&r).unwrap();
        assert_eq!(b.results.baseline.gap, Num(0.48));
        assert_eq!(b.results.baseline.extra["samples"], 3, "extra fields are kept");
        let mut renamed = bench.clone();
        let gap = renamed["results"]["candidate"].as_object_mut().unwrap().remove("gap").unwrap();
        renamed["results"]["candidate"]["scheduler_gap"] = gap;
        let e = host_bench(&run(HarnessStatus::Ok, with_header("bench", "ok", renamed))).unwrap_err();
        assert!(e.message.contains("results.candidate") && e.message.contains("missing field `gap`"), "{e}");
        let mut bad = bench.clone();
        bad["speedup"] = json!("fast");
        let e = host_bench(&run(HarnessStatus::Ok, with_header("bench", "ok", bad))).unwrap_err();
        assert!(e.message.starts_with("field `speedup`"), "{e}");
        let mut other = bench;
        other["metric"] = json!("latency");
        assert!(
            host_bench(&run(HarnessStatus::Ok, with_header("bench", "ok", other)))
                .unwrap_err()
                .message
                .contains("metric")
        );
    }

    #[test]
    fn checks_with_optional_fields() {
        let check = json!({
            "passed": false, "failures": ["c1 seed=1: o rel_l2 1e-1"], "seeds": [1],
            "sandbox": {"process": "separate worker"},
            "cases": [{"id": "c1", "passed": false, "seed": 1, "outputs": {"o": {"rel_l2": "inf", "max_abs": null,
                       "max_abs_rel": 0.5, "worst_slice": {"index": [0, 1], "rel_l2": 0.2}, "nonfinite": 3}},
                       "baseline": {"o": {"rel_l2": 1e-7}}, "launches": 1, "inputs_unchanged": true}],
            "curve": [{"T": 64, "rel_l2": 1e-4}]
        });
        let c: Check = body(&run(HarnessStatus::Failed, check.clone()), "check").unwrap();
        assert_eq!(c.cases[0].outputs["o"].rel_l2, Some(Num(f64::INFINITY)));
        assert_eq!(c.cases[0].outputs["o"].nonfinite, 3);
        assert_eq!(c.curve.as_ref().map(Vec::len), Some(1));
        // an output with other counts (a concurrent checksum) is fine; a malformed number is not
        let mut other = check.clone();
        other["cases"][0]["outputs"]["checksum"] = json!({"mismatched_threads": 0});
        assert!(body::<Check>(&run(HarnessStatus::Failed, other), "check").is_ok());
        let mut bad = check;
        bad["cases"][0]["outputs"]["o"]["rel_l2"] = json!([1]);
        let e = body::<Check>(&run(HarnessStatus::Failed, bad), "check").unwrap_err();
        assert!(e.message.contains("cases[0].outputs.o") && e.message.contains("rel_l2"), "{e}");
    }

    /// Outputs the harness wrote (trimmed), read as the gates read them.
    #[test]
    fn reads_real_harness_output() {
        let compile = json!({"wire": "kidiom-harness", "version": 1, "command": "compile", "status": "ok",
            "device": "none (ahead-of-time)", "arch": "sm_90a", "language": "triton",
            "triton": {"num_warps": 4, "compile_seconds": 0.55},
            "resources": {"registers": 91, "stack_bytes": 0, "shared_static_bytes": 1024, "local_bytes": 0,
                          "spill_store_bytes": 0, "spill_load_bytes": 0, "shared_dynamic_bytes": 512},
            "instructions": {"total": 432, "by_class": {"fp32": 197}, "by_opcode": {"FFMA": 68}}, "ptx_lines": 1021});
        let r = run(HarnessStatus::Ok, compile);
        header(&r, "compile").unwrap();
        let c: Compile = body(&r, "compile").unwrap();
        assert_eq!(c.resources.registers, Some(91));
        let host = json!({"wire": "kidiom-harness", "version": 1, "command": "compile", "status": "ok",
            "arch": "host-x86_64", "resources": {}, "notes": "no objdump"});
        let c: Compile = body(&run(HarnessStatus::Ok, host), "compile").unwrap();
        assert!(c.instructions.is_none() && c.resources.registers.is_none());
    }

    /// A profile of our CUDA decode (trimmed): the second loop's exp all
    /// repeats, both loops' exp uniform in all threads but one per block.
    #[test]
    fn reads_a_profile_with_its_redundancy_counts() {
        let profile = json!({"wire": "kidiom-harness", "version": 1, "command": "profile", "status": "ok",
            "device": "cpu (cooperative-thread CUDA emulation, device path __CUDA_ARCH__ 900)", "mode": "emulation",
            "shape": {"N": 64, "H": 16, "HV": 32, "K": 128, "V": 128, "S": 64},
            "counted": {"shape": {"N": 1, "H": 1, "HV": 2, "K": 128, "V": 128, "S": 2}, "programs": 2,
                        "programs_total": 2048, "scale": 1024.0, "exact": false, "note": "scaled by 2048 / 2"},
            "totals": {"load_bytes": 290553856u64, "store_bytes": 135266304u64, "reread_bytes": 142606336u64,
                       "special_calls": 67108864u64, "flops": 269221888u64, "dot_macs": 0,
                       "repeat_calls": 33554432u64, "uniform_calls": 66584576u64},
            "special": {"exp": 67108864u64}, "floor": {"bytes": 272638464.0, "flops": 234881024.0},
            "traffic_ratio": 1.5618, "launches": 1, "launch_limits": {"shapes": 5, "findings": []},
            "lines": [
                {"line": 47, "text": "p += expf(g_n[i]) * s[i * V + j] * k_n[i];", "load_bytes": 142606336u64,
                 "store_bytes": 0, "reread_bytes": 0, "special_calls": 33554432u64, "flops": 100663296u64,
                 "dot_macs": 0, "repeat_calls": 0, "uniform_calls": 33292288u64},
                {"line": 53, "text": "float s_ij = expf(g_n[i]) * s[i * V + j] + k_n[i] * d;",
                 "load_bytes": 142606336u64, "store_bytes": 0, "reread_bytes": 142606336u64,
                 "special_calls": 33554432u64, "flops": 100663296u64, "dot_macs": 0,
                 "repeat_calls": 33554432u64, "uniform_calls": 33292288u64}]});
        let r = run(HarnessStatus::Ok, profile.clone());
        header(&r, "profile").unwrap();
        let p: Profile = body(&r, "profile").unwrap();
        assert_eq!((p.lines[0].repeat_calls, p.lines[0].uniform_calls), (0, 33292288));
        assert_eq!(p.lines[1].repeat_calls, p.lines[1].special_calls);
        assert_eq!(p.lines[1].uniform_calls, 33292288);
        assert_eq!(p.totals.special_calls, 67108864);
        // a profile from a harness before the redundancy counts: they read as 0
        let mut older = profile;
        for l in older["lines"].as_array_mut().unwrap() {
            let l = l.as_object_mut().unwrap();
            l.remove("repeat_calls");
            l.remove("uniform_calls");
        }
        let p: Profile = body(&run(HarnessStatus::Ok, older), "profile").unwrap();
        assert!(p.lines.iter().all(|l| l.repeat_calls == 0 && l.uniform_calls == 0));
        assert_eq!(p.lines[1].special_calls, 33554432);
    }
}
