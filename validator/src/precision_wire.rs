//! The harness's `precision` reply, read tolerantly, in one place: a
//! state-precision variant judged against its simulated reference (the
//! float64 reference with the variant's rounding at the same places) and
//! against float64, over many decode steps, beside its fp32 kernel.
//!
//! The shape read (provisional until the harness's side is final; every
//! field but `status` is optional here, and the gate says which it needs):
//!
//! ```json
//! {"status": "ok" | "rejected" | "error", "kernel": "...", "variant": "...",
//!  "storage": {...},
//!  "errors": {"float64": {"o": x, "state": x}, "simulated": {"o": x, "state": x}},
//!  "drift": {"steps": [...], "variant": {"o": [...], "state": [...]},
//!            "baseline": {"o": [...], "state": [...]}, "crossed_at": n | null, "budget": {...}},
//!  "bytes_per_step": {"variant": n, "baseline": n},
//!  "failures": [...], "error": "..."}
//! ```
//!
//! The harness's own shape (kernels/harness/triton/precision.py) is read
//! too: `variant` as an object (`name`, `variant_of`, `storage`, `budget`),
//! `worst.vs_float64.{o_rel_l2,state_rel_l2}` and
//! `worst.vs_simulated.{o_rel_l2,state_units}` for `errors`, `drift.points`
//! (with `drift.steps` the count), `drift.curves.{variant,baseline}` and
//! `drift.crossing.variant` for the curves and the crossing, `reasons` for
//! `failures`, and `verdict` (`kernel-error`: the simulated reference
//! missed; `beyond-budget`: the budget crossed).
//!
//! Also read: `passed`/`failed` for `ok`/`rejected` (the other commands'
//! words), `skipped` with its `reason` (the check cannot run here), a wire header's `device` and `versions`, numbers as `"inf"` or
//! `null` (NaN), a curve as a list of points (`[{"step", "o", "state"}]`),
//! `crossed_at` and `budget` at the top level, failures as objects (their
//! `message`, `reason` or `check`), and `simulated_passed: false` or
//! `errors.simulated.passed: false` for a kernel that misses its simulated
//! reference. Unknown fields are ignored.

use serde_json::Value;

use kidiom_patterns::record::{BytesPerStep, DriftCurve, Num, OutputStateError, PrecisionFigures};

use crate::wire::WireError;

/// What the harness concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplyStatus {
    /// Within the budget, and the kernel meets its simulated reference.
    Ok,
    /// The kernel misses its simulated reference, or drifts beyond the budget.
    Rejected,
    /// The harness could not judge.
    Error,
    /// It cannot run here (the check needs a GPU); `reason` says why.
    Skipped,
}

/// A `precision` reply.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PrecisionReply {
    pub(crate) status: ReplyStatus,
    /// With `status: error`.
    pub(crate) error: Option<String>,
    /// With `status: skipped`.
    pub(crate) reason: Option<String>,
    /// Whether the harness says the kernel missed its simulated reference.
    pub(crate) simulated_failed: bool,
    /// Whether the harness says the error went beyond the budget (a crossing
    /// step is in the figures where the drift found one).
    pub(crate) beyond_budget: bool,
    /// The figures, as the evidence keeps them.
    pub(crate) figures: PrecisionFigures,
    /// Where it ran (a wire header's), and tool versions.
    pub(crate) device: Option<String>,
    pub(crate) versions: Option<Value>,
}

fn malformed(message: impl Into<String>) -> WireError {
    WireError { command: "precision".into(), message: message.into() }
}

/// A number: JSON number, `"inf"`, `null` (NaN); anything else is absent.
fn num(v: Option<&Value>) -> Option<Num> {
    let v = v?;
    serde_json::from_value::<Num>(v.clone()).ok()
}

fn nums(v: Option<&Value>) -> Vec<Num> {
    match v {
        Some(Value::Array(xs)) => xs.iter().map(|x| num(Some(x)).unwrap_or(Num(f64::NAN))).collect(),
        _ => Vec::new(),
    }
}

fn pair(v: Option<&Value>) -> OutputStateError {
    match v {
        Some(Value::Object(m)) => OutputStateError { o: num(m.get("o")), state: num(m.get("state")) },
        // one number: the output's
        Some(x) => OutputStateError { o: num(Some(x)), state: None },
        None => OutputStateError::default(),
    }
}

/// A curve as `{"o": [...], "state": [...]}` or as points `[{"step", "o", "state"}]`
/// (then its steps too).
fn curve(v: Option<&Value>) -> (DriftCurve, Vec<i64>) {
    match v {
        Some(Value::Object(m)) => (DriftCurve { o: nums(m.get("o")), state: nums(m.get("state")) }, Vec::new()),
        Some(Value::Array(points)) => {
            let mut c = DriftCurve::default();
            let mut steps = Vec::new();
            for p in points {
                c.o.push(num(p.get("o")).unwrap_or(Num(f64::NAN)));
                c.state.push(num(p.get("state")).unwrap_or(Num(f64::NAN)));
                if let Some(s) = p.get("step").and_then(Value::as_i64) {
                    steps.push(s);
                }
            }
            (c, steps)
        }
        _ => (DriftCurve::default(), Vec::new()),
    }
}

/// A byte count: a non-negative integer (a float is rounded); else `Err` naming the field.
fn bytes(v: Option<&Value>, field: &str) -> Result<Option<u64>, WireError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(x) => match (x.as_u64(), x.as_f64()) {
            (Some(n), _) => Ok(Some(n)),
            (None, Some(f)) if f.is_finite() && f >= 0.0 => Ok(Some(f.round() as u64)),
            _ => Err(malformed(format!("field `{field}` must be a byte count, found {x}"))),
        },
    }
}

fn failure_text(f: &Value) -> String {
    match f {
        Value::String(s) => s.clone(),
        Value::Object(m) => ["message", "reason", "check"]
            .iter()
            .find_map(|k| m.get(*k).and_then(Value::as_str))
            .map(str::to_string)
            .unwrap_or_else(|| f.to_string()),
        other => other.to_string(),
    }
}

/// Reads a `precision` reply. `Err` names what does not fit: no object, no
/// or an unknown `status`, or a present field of the wrong type that a
/// verdict depends on.
pub(crate) fn read(json: &Value) -> Result<PrecisionReply, WireError> {
    let o = json.as_object().ok_or_else(|| malformed("no JSON object"))?;
    let status = match o.get("status").and_then(Value::as_str) {
        Some("ok" | "passed") => ReplyStatus::Ok,
        Some("rejected" | "failed") => ReplyStatus::Rejected,
        Some("error") => ReplyStatus::Error,
        Some("skipped") => ReplyStatus::Skipped,
        Some(s) => return Err(malformed(format!("field `status`: unknown status {s:?}"))),
        None => return Err(malformed("missing field `status`")),
    };
    let text = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_string);
    // `variant`: a name, or the harness's object with the manifest's fields
    let var_obj = o.get("variant").filter(|v| v.is_object());
    let var_text = |k: &str| var_obj.and_then(|v| v.get(k)).and_then(Value::as_str).map(str::to_string);
    let errors = o.get("errors");
    let worst = o.get("worst");
    let drift = o.get("drift");
    let at = |k: &str| drift.and_then(|d| d.get(k)).or_else(|| o.get(k));
    let curves = drift.and_then(|d| d.get("curves"));
    let side = |k: &str| drift.and_then(|d| d.get(k)).or_else(|| curves.and_then(|c| c.get(k)));
    let (variant_curve, steps_from_points) = curve(side("variant"));
    let (baseline_curve, _) = curve(side("baseline"));
    let listed = |v: Option<&Value>| match v {
        Some(Value::Array(xs)) => xs.iter().filter_map(Value::as_i64).collect(),
        _ => Vec::new(),
    };
    let mut steps: Vec<i64> = listed(drift.and_then(|d| d.get("steps")));
    if steps.is_empty() {
        steps = listed(drift.and_then(|d| d.get("points")));
    }
    if steps.is_empty() {
        steps = steps_from_points;
    }
    let crossing = drift.and_then(|d| d.get("crossing")).and_then(|c| c.get("variant"));
    let crossed_at = match at("crossed_at").or(crossing) {
        None | Some(Value::Null) => None,
        Some(x) => {
            Some(x.as_i64().ok_or_else(|| malformed(format!("field `drift.crossed_at` must be a step, found {x}")))?)
        }
    };
    let bps = o.get("bytes_per_step");
    let bytes_per_step = match (
        bytes(bps.and_then(|b| b.get("variant")), "bytes_per_step.variant")?,
        bytes(bps.and_then(|b| b.get("baseline")), "bytes_per_step.baseline")?,
    ) {
        (Some(variant), Some(baseline)) => Some(BytesPerStep { variant, baseline }),
        _ => None,
    };
    let failures: Vec<String> = match o.get("failures").or_else(|| o.get("reasons")) {
        Some(Value::Array(fs)) => fs.iter().map(failure_text).collect(),
        Some(Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    };
    let simulated = errors.and_then(|e| e.get("simulated"));
    let worst_sim = worst.and_then(|w| w.get("vs_simulated"));
    let verdict = text("verdict");
    let simulated_failed = o.get("simulated_passed").and_then(Value::as_bool) == Some(false)
        || simulated.and_then(|s| s.get("passed")).and_then(Value::as_bool) == Some(false)
        || verdict.as_deref() == Some("kernel-error");
    let beyond_budget = verdict.as_deref() == Some("beyond-budget");
    let storage = o.get("storage").or_else(|| var_obj.and_then(|v| v.get("storage"))).cloned().unwrap_or(Value::Null);
    let rel = |w: Option<&Value>| OutputStateError {
        o: num(w.and_then(|w| w.get("o_rel_l2"))),
        state: num(w.and_then(|w| w.get("state_rel_l2"))),
    };
    let vs_float64 = match errors.and_then(|e| e.get("float64")) {
        Some(x) => pair(Some(x)),
        None => rel(worst.and_then(|w| w.get("vs_float64"))),
    };
    let vs_simulated = match simulated {
        Some(x) => pair(Some(x)),
        None => rel(worst_sim),
    };
    let budget = at("budget").or_else(|| var_obj.and_then(|v| v.get("budget"))).cloned().unwrap_or(Value::Null);
    let figures = PrecisionFigures {
        variant: var_text("name").or_else(|| text("variant")).unwrap_or_default(),
        variant_of: var_text("variant_of")
            .or_else(|| text("kernel"))
            .or_else(|| text("variant_of"))
            .unwrap_or_default(),
        dtype: storage.get("dtype").and_then(Value::as_str).unwrap_or_default().to_string(),
        storage,
        vs_float64,
        vs_simulated,
        simulated_state_units: num(worst_sim.and_then(|w| w.get("state_units"))),
        steps,
        drift: variant_curve,
        baseline_drift: baseline_curve,
        crossed_at,
        budget,
        bytes_per_step,
        failures,
    };
    Ok(PrecisionReply {
        status,
        error: text("error"),
        reason: text("reason"),
        simulated_failed,
        beyond_budget,
        figures,
        device: text("device"),
        versions: o.get("versions").cloned(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reads_the_provisional_shape() {
        let r = read(&json!({
            "status": "ok", "kernel": "kda.decode", "variant": "kda.decode.state-bf16",
            "storage": {"tensor": "pool", "dtype": "bf16", "scale": "none"},
            "errors": {"float64": {"o": 2e-3, "state": 3e-3}, "simulated": {"o": 1e-6, "state": "inf"}},
            "drift": {"steps": [1, 2, 4], "variant": {"o": [1e-3, 2e-3, null], "state": [1e-3, 2e-3, 3e-3]},
                      "baseline": {"o": [1e-7, 1e-7, 1e-7], "state": [1e-7, 2e-7, 3e-7]},
                      "crossed_at": null, "budget": {"o": 1e-2}},
            "bytes_per_step": {"variant": 1024, "baseline": 2048.0},
            "failures": [], "future": 1}))
        .unwrap();
        assert_eq!(r.status, ReplyStatus::Ok);
        let f = &r.figures;
        assert_eq!(
            (f.variant.as_str(), f.variant_of.as_str(), f.dtype.as_str()),
            ("kda.decode.state-bf16", "kda.decode", "bf16")
        );
        assert_eq!(f.steps, [1, 2, 4]);
        assert!(f.drift.o[2].0.is_nan());
        assert_eq!(f.vs_simulated.state, Some(Num(f64::INFINITY)));
        assert_eq!(f.bytes_per_step, Some(BytesPerStep { variant: 1024, baseline: 2048 }));
        assert_eq!(f.budget["o"], json!(1e-2));
        assert!(!r.simulated_failed && f.crossed_at.is_none());
    }

    #[test]
    fn points_failure_objects_and_the_other_words_read_too() {
        let r = read(&json!({"status": "failed", "crossed_at": 40,
            "drift": {"variant": [{"step": 8, "o": 1e-3, "state": 2e-3}, {"step": 16, "o": "inf"}]},
            "errors": {"simulated": {"o": 0.5, "passed": false}},
            "failures": [{"check": "simulated", "message": "o differs from the simulated reference"}, "x"]}))
        .unwrap();
        assert_eq!(r.status, ReplyStatus::Rejected);
        assert_eq!(r.figures.steps, [8, 16]);
        assert_eq!(r.figures.crossed_at, Some(40));
        assert!(r.simulated_failed);
        assert_eq!(r.figures.failures, ["o differs from the simulated reference", "x"]);
    }

    /// The reply kernels/harness/triton/precision.py writes (abridged).
    pub(crate) fn harness_shape(verdict: &str) -> Value {
        let status = if verdict == "within-budget" { "ok" } else { "rejected" };
        json!({"wire": "kidiom-harness", "version": 1, "command": "precision", "status": status,
            "device": "cpu (triton interpreter)",
            "variant": {"name": "kda.decode.state-fp8", "variant_of": "kda.decode",
                        "storage": {"tensor": "pool", "dtype": "fp8e4m3", "scale": "head_k", "scales": "pool_scale"},
                        "budget": {"o_rel_l2": 2e-2, "state_rel_l2": 4e-2, "steps": 4096},
                        "against_simulated": {"sim_units": 1.5, "sim_rel_l2": 1e-5}},
            "seed": 3, "mode": "interpreter",
            "bytes_per_step": {"shape": {"N": 64}, "variant": 67_633_152u64, "baseline": 268_435_456u64, "ratio": 0.252},
            "cases": [],
            "drift": {"shape": {"N": 1}, "steps": 64, "inputs": "long_memory", "budget": {"o_rel_l2": 2e-2},
                      "baseline_cached": false, "points": [1, 8, 64],
                      "curves": {"variant": {"o": [1e-3, 4e-3, 3e-2], "state": [2e-3, 5e-3, 5e-2]},
                                 "baseline": {"o": [1e-7, 1e-7, 2e-7], "state": [1e-7, 2e-7, 3e-7]},
                                 "simulated": {"o": [1e-3, 4e-3, 3e-2], "state": [2e-3, 5e-3, 5e-2]}},
                      "at": {"1": {}}, "crossing": {"variant": if verdict == "beyond-budget" { json!(40) } else { Value::Null },
                                                    "baseline": null},
                      "vs_simulated": {"max_state_units": 1.0, "max_o_rel_l2": 3e-6, "first_step_beyond": null}},
            "worst": {"vs_float64": {"o_rel_l2": 3e-2, "state_rel_l2": 5e-2},
                      "vs_simulated": {"o_rel_l2": 3e-6, "state_units": 1.0},
                      "baseline_vs_float64": {"o_rel_l2": 1e-7, "state_rel_l2": 2e-7}},
            "verdict": verdict,
            "reasons": if verdict == "kernel-error" { json!(["long: kernel error beyond its quantization: o is 3.0e-01"]) } else { json!([]) },
            "predicted_speedup": 3.97})
    }

    #[test]
    fn reads_the_harness_shape() {
        let r = read(&harness_shape("within-budget")).unwrap();
        assert_eq!(r.status, ReplyStatus::Ok);
        let f = &r.figures;
        assert_eq!(
            (f.variant.as_str(), f.variant_of.as_str(), f.dtype.as_str()),
            ("kda.decode.state-fp8", "kda.decode", "fp8e4m3")
        );
        assert_eq!(f.steps, [1, 8, 64]);
        assert_eq!((f.drift.o.len(), f.baseline_drift.state.len()), (3, 3));
        assert_eq!((f.vs_float64.o, f.vs_float64.state), (Some(Num(3e-2)), Some(Num(5e-2))));
        assert_eq!((f.vs_simulated.o, f.simulated_state_units), (Some(Num(3e-6)), Some(Num(1.0))));
        assert_eq!(f.bytes_per_step, Some(BytesPerStep { variant: 67_633_152, baseline: 268_435_456 }));
        assert_eq!(f.budget["o_rel_l2"], json!(2e-2));
        assert_eq!(f.storage["scales"], "pool_scale");
        assert!(!r.simulated_failed && !r.beyond_budget && f.crossed_at.is_none());
        let r = read(&harness_shape("beyond-budget")).unwrap();
        assert!(r.beyond_budget && !r.simulated_failed);
        assert_eq!(r.figures.crossed_at, Some(40));
        let r = read(&harness_shape("kernel-error")).unwrap();
        assert!(r.simulated_failed);
        assert_eq!(r.figures.failures, ["long: kernel error beyond its quantization: o is 3.0e-01"]);
    }

    #[test]
    fn what_does_not_fit_is_an_error_naming_the_field() {
        for (bad, field) in [
            (json!([1]), "no JSON object"),
            (json!({"kernel": "k"}), "missing field `status`"),
            (json!({"status": "maybe"}), "field `status`"),
            (json!({"status": "ok", "drift": {"crossed_at": "soon"}}), "drift.crossed_at"),
            (json!({"status": "ok", "bytes_per_step": {"variant": -1, "baseline": 4}}), "bytes_per_step.variant"),
        ] {
            let e = read(&bad).unwrap_err().to_string();
            assert!(e.contains(field), "{e}");
        }
    }
}
