//! The precision gate: a state-precision variant (a manifest with
//! `variant_of` and `[storage]`) judged as production judges it. The
//! harness's `precision` runs the variant for many decode steps beside its
//! fp32 kernel, against a simulated reference (float64 with the variant's
//! rounding at the same places: the kernel's own error) and against float64
//! (the drift the storage costs), within the manifest's `[budget]`.
//!
//! - the kernel misses its simulated reference: `rejected` (correctness,
//!   the harness's reason);
//! - the drift crosses the budget: `rejected`, naming the budget and the step;
//! - within it: `needs-gpu`, with a speedup predicted from the state bytes
//!   per step of variant and baseline (the roofline of `predict.rs`), until
//!   the GPU times it;
//! - a timeout, a crash, a harness error or a reply that does not fit:
//!   `error`, never `rejected`.
//!
//! The reply is read in `precision_wire.rs`, the one place that knows its shape.

use std::path::Path;

use kidiom_patterns::record::PrecisionFigures;

use super::Validation;
use crate::backend::python::{Harness, HarnessRun, HarnessStatus};
use crate::evidence::{GateRecord, GateStatus, Predicted};
use crate::manifest::{Manifest, Variant};
use crate::precision_wire::{self, ReplyStatus};
use crate::predict::{Bound, WorkTotals, predict, speedup};
use crate::request::Request;
use crate::tree::copy_tree;
use crate::verdict::{Gate, Verdict};

/// The words of a verdict whose precision check could not run here.
const NOT_CHECKED: &str = "precision not checked on this CPU";

/// Runs the precision gate on `variant` (its source replaced by `source`,
/// a candidate's, where there is one) in a copy of the baseline tree.
pub(crate) fn gate(run: &mut Validation<'_>, variant: &Variant, base: &Manifest, source: Option<&Path>) -> Verdict {
    let v = run.v;
    let rec = GateRecord::new(Gate::Precision, GateStatus::Passed, "");
    // the evidence names the variant; its contract is its kernel's
    run.kernel = Some(Manifest { name: variant.name.clone(), ..base.clone() });
    if run.remaining().is_zero() {
        return run.out_of_time(rec);
    }
    let tmp = match tempfile::Builder::new().prefix("kidiom-precision-").tempdir() {
        Ok(t) => t,
        Err(e) => {
            return run.stop(
                rec,
                GateStatus::Error,
                e.to_string(),
                Verdict::error(Some(Gate::Precision), format!("a temporary directory: {e}"), ""),
            );
        }
    };
    let tree = tmp.path().join("tree");
    if let Err(e) = copy_tree(&v.opts.root.join(&v.kernels.dir), &tree.join(&v.kernels.dir)) {
        let reason = format!("copying the baseline tree: {e}");
        return run.stop(rec, GateStatus::Error, reason.clone(), Verdict::error(Some(Gate::Precision), reason, ""));
    }
    let harness = Harness { python: v.python.clone(), root: tree, fleet: v.fleet.clone() };
    let seed = v.opts.seed.unwrap_or(v.run_seed);
    run.seeds = vec![seed];
    let source = source.map(|p| p.to_string_lossy().into_owned());
    let args = Request::Precision { kernel: &variant.name, source: source.as_deref(), seed, steps: None }.argv();
    match harness.call(&args, run.remaining()) {
        Ok(h) => judge(run, variant, &h),
        Err(e) => {
            let reason = format!("the precision check could not run: {e}");
            run.stop(rec, GateStatus::Error, reason.clone(), Verdict::error(Some(Gate::Precision), reason, ""))
        }
    }
}

/// The verdict on one `precision` run of `variant`.
pub(crate) fn judge(run: &mut Validation<'_>, variant: &Variant, h: &HarnessRun) -> Verdict {
    let mut rec = GateRecord::new(Gate::Precision, GateStatus::Passed, "");
    rec.seconds = h.process.seconds;
    super::note(&mut rec, h);
    if matches!(h.status, HarnessStatus::TimedOut | HarnessStatus::Crashed) {
        return run.harness_error(rec, h, "the precision check");
    }
    let reply = match precision_wire::read(&h.json) {
        Ok(r) => r,
        // an erroring harness that printed nothing readable is its error, not a wire fault
        Err(_) if h.status == HarnessStatus::Error => return run.harness_error(rec, h, "the precision check"),
        Err(e) => return run.wire_error(rec, h, &e),
    };
    rec.device = reply.device.clone();
    rec.versions = reply.versions.clone().unwrap_or(serde_json::Value::Null);
    let mut f = reply.figures.clone();
    fill_from_manifest(&mut f, variant);
    rec.set_metrics(&f);
    let gate = Some(Gate::Precision);
    if reply.status == ReplyStatus::Error || h.status == HarnessStatus::Error {
        let what = reply.error.clone().unwrap_or_else(|| "the harness reported an error".into());
        let timed_out = what.contains("timed out");
        let reason = if timed_out {
            format!("the precision check timed out ({:.1} s)", h.process.seconds)
        } else {
            format!("the precision check could not judge {}: {what}", variant.name)
        };
        return run.stop(rec, GateStatus::Error, reason.clone(), Verdict::error(gate, reason, h.log()));
    }
    if reply.status == ReplyStatus::Skipped {
        // a check that cannot run here is never the variant's failure, nor a pass
        let why = reply.reason.clone().unwrap_or_else(|| "the harness skipped it".into());
        run.flags.push(format!("{NOT_CHECKED}: {why}"));
        rec.status = GateStatus::Skipped;
        rec.summary = format!("{NOT_CHECKED}: {why}");
        run.records.push(rec);
        run.records.push(GateRecord::new(Gate::Speed, GateStatus::Skipped, "not measured: precision was not checked"));
        return Verdict::needs_gpu(format!("{NOT_CHECKED} ({why}); its drift and speed need a GPU"));
    }
    let worst = describe_errors(&f);
    let over_budget = f.crossed_at.is_some() || reply.beyond_budget;
    if reply.simulated_failed || (reply.status == ReplyStatus::Rejected && !over_budget) {
        let why = if f.failures.is_empty() { "the harness rejected it".to_string() } else { f.failures.join("; ") };
        let reason = format!("the kernel misses its simulated reference ({worst}): {why}");
        return run.stop(rec, GateStatus::Failed, reason.clone(), Verdict::rejected(Gate::Precision, reason));
    }
    if over_budget {
        let last = f.steps.last().map(|s| s.to_string()).unwrap_or_else(|| "?".into());
        let reason = match f.crossed_at {
            Some(step) => {
                format!("beyond the error budget {} from step {step} of {last} ({worst})", budget_text(&f.budget))
            }
            None => format!(
                "beyond the error budget {} ({worst}): {}",
                budget_text(&f.budget),
                if f.failures.is_empty() { "the harness says so".to_string() } else { f.failures.join("; ") }
            ),
        };
        return run.stop(rec, GateStatus::Failed, reason.clone(), Verdict::rejected(Gate::Precision, reason));
    }
    // within the budget: what it buys, predicted from the state bytes per step
    let Some(bytes) = f.bytes_per_step.filter(|b| b.variant > 0 && b.baseline > 0) else {
        let reason = "the harness's precision output does not fit: missing field `bytes_per_step` (variant and baseline, the prediction needs both)".to_string();
        let log = kidiom_exec::tail(&h.json.to_string(), 2000);
        return run.stop(rec, GateStatus::Error, reason.clone(), Verdict::error(gate, reason, log));
    };
    let within = format!(
        "within the error budget {} over {} steps ({worst})",
        budget_text(&f.budget),
        f.steps.last().copied().unwrap_or(0)
    );
    let mut summary = format!("{within}; state bytes per step {} -> {}", bytes.baseline, bytes.variant);
    if let Some(model) = run.v.opts.device_model.clone() {
        let side = |b: u64| predict(&WorkTotals { load_bytes: b, ..Default::default() }, 1, &model);
        let (pb, pc) = (side(bytes.baseline), side(bytes.variant));
        let s = speedup(&pb, &pc);
        let p = Predicted {
            label: "prediction".into(),
            device: model.name.clone(),
            baseline_us: pb.us,
            candidate_us: pc.us,
            speedup: s,
            bound: if pc.bound == Bound::Launch { Bound::Launch } else { Bound::Memory },
            traffic_ratio: (1.0, bytes.variant as f64 / bytes.baseline as f64),
            reread_bytes: (0, 0),
            // the published rows that put an fp32-state decode against a bf16-state one are this kind
            expected_error: run.v.opts.expected_errors.as_ref().and_then(|e| e.speedup_error(&variant.name)),
        };
        summary = format!("{summary}; {} from the state bytes", p.headline());
        run.prediction = Some(p);
    }
    let verdict = Verdict::needs_gpu(format!(
        "{summary}; speed not measured: the GPU gate does not time state-precision variants yet"
    ));
    rec.status = GateStatus::Passed;
    rec.summary = summary;
    run.records.push(rec);
    run.records.push(GateRecord::new(
        Gate::Speed,
        GateStatus::Skipped,
        "not timed: a state-precision variant needs a GPU",
    ));
    verdict
}

/// What the reply left out and the manifest says.
fn fill_from_manifest(f: &mut PrecisionFigures, variant: &Variant) {
    if f.variant.is_empty() {
        f.variant = variant.name.clone();
    }
    if f.variant_of.is_empty() {
        f.variant_of = variant.variant_of.clone();
    }
    if f.storage.is_null() {
        f.storage = variant.storage.raw.clone();
    }
    // the layout in one spelling, for the reviews
    if let Some(m) = f.storage.as_object_mut()
        && !m.get("layout").is_some_and(|l| l.is_string())
    {
        m.insert("layout".into(), variant.storage.scale.clone().into());
    }
    if f.dtype.is_empty() {
        f.dtype = variant.storage.dtype.clone();
    }
    if f.budget.is_null() {
        f.budget = variant.budget.clone();
    }
}

fn sci(n: Option<kidiom_patterns::record::Num>) -> String {
    match n {
        Some(x) if x.0.is_nan() => "nan".into(),
        Some(x) => format!("{:.1e}", x.0),
        None => "-".into(),
    }
}

/// `o 2.0e-3 / state 3.1e-3 vs float64, o 1.0e-6 vs simulated`.
fn describe_errors(f: &PrecisionFigures) -> String {
    let (a, s) = (&f.vs_float64, &f.vs_simulated);
    // the harness may count the stored state's distance in rounding steps of its format instead
    let state = match (s.state, f.simulated_state_units) {
        (None, Some(u)) => format!("{} rounding steps", u.0),
        (x, _) => sci(x),
    };
    format!("worst o {} / state {} vs float64, o {} / state {state} vs simulated", sci(a.o), sci(a.state), sci(s.o))
}

/// `{o = 1e-2, state = 5e-2}`, as the budget was written.
fn budget_text(b: &serde_json::Value) -> String {
    match b {
        serde_json::Value::Object(m) if !m.is_empty() => {
            let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            format!("{{{}}}", parts.join(", "))
        }
        serde_json::Value::Null => "(none given)".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::evidence::Evidence;
    use crate::gates::tests::bare_run;
    use crate::verdict::VerdictKind;
    use crate::wire::tests::run as harness_run;

    fn variant() -> Variant {
        let table: toml::Table = toml::from_str(
            "name = \"kda.decode.state-bf16\"\nvariant_of = \"kda.decode\"\nsource = \"decode_state_bf16.py\"\n\
             [storage]\ntensor = \"pool\"\ndtype = \"bf16\"\n[budget]\no = 1e-2\nstate = 2e-2\n",
        )
        .unwrap();
        Variant::parse(table, "kernels/kda/decode_state_bf16.toml").unwrap()
    }

    fn reply(status: &str) -> Value {
        json!({"status": status, "kernel": "kda.decode", "variant": "kda.decode.state-bf16",
               "storage": {"tensor": "pool", "dtype": "bf16", "scale": "none"},
               "errors": {"float64": {"o": 2e-3, "state": 3e-3}, "simulated": {"o": 1e-7, "state": 1e-7}},
               "drift": {"steps": [1, 64, 256], "variant": {"o": [1e-3, 2e-3, 2e-3], "state": [1e-3, 2e-3, 3e-3]},
                         "baseline": {"o": [1e-7, 1e-7, 2e-7], "state": [1e-7, 1e-7, 2e-7]},
                         "crossed_at": null, "budget": {"o": 1e-2, "state": 2e-2}},
               "bytes_per_step": {"variant": 134_217_728u64, "baseline": 268_435_456u64},
               "failures": []})
    }

    fn judged(status: HarnessStatus, json: Value) -> Evidence {
        let v = variant();
        bare_run("kernels/kda/decode_state_bf16.toml", None, |mut run| {
            let verdict = judge(&mut run, &v, &harness_run(status, json));
            run.finish(verdict)
        })
    }

    #[test]
    fn within_the_budget_is_needs_gpu_with_a_speedup_predicted_from_the_state_bytes() {
        let e = judged(HarnessStatus::Ok, reply("ok"));
        assert_eq!(e.verdict.kind, VerdictKind::NeedsGpu, "{e:?}");
        let p = e.prediction.clone().expect("a prediction");
        assert_eq!((p.label.as_str(), p.bound), ("prediction", Bound::Memory));
        assert!((1.8..2.0).contains(&p.speedup), "half the bytes, a launch beside: {p:?}");
        assert_eq!(p.traffic_ratio, (1.0, 0.5));
        assert!(
            e.verdict.reason.contains("within the error budget {o = 0.01, state = 0.02} over 256 steps"),
            "{}",
            e.verdict.reason
        );
        let rec = e.gate(Gate::Precision).unwrap();
        assert_eq!(rec.status, GateStatus::Passed);
        let f = rec.precision_figures();
        assert_eq!((f.dtype.as_str(), f.steps.len(), f.baseline_drift.o.len()), ("bf16", 3, 3));
        assert_eq!(f.bytes_per_step.and_then(|b| b.ratio()), Some(2.0));
        assert_eq!(e.gate(Gate::Speed).map(|g| g.status), Some(GateStatus::Skipped));
    }

    #[test]
    fn a_kernel_that_misses_its_simulated_reference_is_rejected_with_the_reason() {
        let mut r = reply("rejected");
        r["errors"]["simulated"]["o"] = json!(0.3);
        r["failures"] = json!(["o: rel_l2 3.0e-01 against the simulated reference > 1.0e-05"]);
        let e = judged(HarnessStatus::Failed, r);
        assert_eq!((e.verdict.kind, e.verdict.gate), (VerdictKind::Rejected, Some(Gate::Precision)), "{e:?}");
        assert!(e.verdict.reason.starts_with("the kernel misses its simulated reference"), "{}", e.verdict.reason);
        assert!(e.verdict.reason.contains("against the simulated reference > 1.0e-05"), "{}", e.verdict.reason);
        assert!(e.prediction.is_none());
        // the harness's flag alone says so, whatever the status
        let mut r = reply("ok");
        r["simulated_passed"] = json!(false);
        assert_eq!(judged(HarnessStatus::Ok, r).verdict.kind, VerdictKind::Rejected);
    }

    #[test]
    fn a_drift_that_crosses_the_budget_is_rejected_naming_the_budget_and_the_step() {
        let mut r = reply("rejected");
        r["drift"]["crossed_at"] = json!(64);
        let e = judged(HarnessStatus::Failed, r);
        assert_eq!((e.verdict.kind, e.verdict.gate), (VerdictKind::Rejected, Some(Gate::Precision)), "{e:?}");
        assert!(
            e.verdict.reason.starts_with("beyond the error budget {o = 0.01, state = 0.02} from step 64 of 256"),
            "{}",
            e.verdict.reason
        );
        assert_eq!(e.gate(Gate::Precision).unwrap().precision_figures().crossed_at, Some(64));
        // an `ok` that reports a crossing is judged by its numbers
        let mut r = reply("ok");
        r["drift"]["crossed_at"] = json!(200);
        assert_eq!(judged(HarnessStatus::Ok, r).verdict.kind, VerdictKind::Rejected);
    }

    #[test]
    fn a_check_that_cannot_run_here_is_needs_gpu_flagged_never_a_pass() {
        let e = judged(HarnessStatus::Skipped, json!({"status": "skipped", "reason": "fp8 needs a GPU"}));
        assert_eq!((e.verdict.kind, e.verdict.gate), (VerdictKind::NeedsGpu, None), "{e:?}");
        assert!(
            e.verdict.reason.starts_with("precision not checked on this CPU (fp8 needs a GPU)"),
            "{}",
            e.verdict.reason
        );
        assert!(e.verdict.flags.iter().any(|f| f.contains("fp8 needs a GPU")), "{:?}", e.verdict.flags);
        assert_eq!(e.gate(Gate::Precision).map(|g| g.status), Some(GateStatus::Skipped));
        assert!(e.prediction.is_none());
    }

    #[test]
    fn the_harness_shape_is_judged_the_same_way() {
        use crate::precision_wire::tests::harness_shape;
        let e = judged(HarnessStatus::Ok, harness_shape("within-budget"));
        assert_eq!(e.verdict.kind, VerdictKind::NeedsGpu, "{e:?}");
        assert!(e.prediction.as_ref().is_some_and(|p| p.speedup > 3.0), "{:?}", e.prediction);
        let e = judged(HarnessStatus::Failed, harness_shape("beyond-budget"));
        assert!(
            e.verdict.reason.starts_with("beyond the error budget {o_rel_l2 = 0.02} from step 40 of 64"),
            "{}",
            e.verdict.reason
        );
        let e = judged(HarnessStatus::Failed, harness_shape("kernel-error"));
        assert!(e.verdict.reason.starts_with("the kernel misses its simulated reference"), "{}", e.verdict.reason);
        assert!(e.verdict.reason.contains("beyond its quantization"), "{}", e.verdict.reason);
    }

    #[test]
    fn malformed_output_a_harness_error_or_a_timeout_is_an_error_never_a_rejection() {
        let cases = [
            (HarnessStatus::Ok, json!({"kernel": "k"}), "missing field `status`"),
            (HarnessStatus::Ok, json!({"status": "ok", "drift": {"crossed_at": "late"}}), "drift.crossed_at"),
            (
                HarnessStatus::Ok,
                {
                    let mut r = reply("ok");
                    r.as_object_mut().unwrap().remove("bytes_per_step");
                    r
                },
                "missing field `bytes_per_step`",
            ),
            (
                HarnessStatus::Error,
                json!({"status": "error", "error": "no module named kernels.kda.decode_state_bf16"}),
                "could not judge",
            ),
            (HarnessStatus::Error, json!({"status": "error", "error": "harness timed out after 9.0 s"}), "timed out"),
            (HarnessStatus::TimedOut, Value::Null, "timed out"),
            (HarnessStatus::Crashed, Value::Null, "crashed"),
            (HarnessStatus::Error, json!("garbage"), "failed to run"),
        ];
        for (status, json, words) in cases {
            let e = judged(status, json.clone());
            assert_eq!((e.verdict.kind, e.verdict.gate), (VerdictKind::Error, Some(Gate::Precision)), "{json}: {e:?}");
            assert!(e.verdict.reason.contains(words), "{json}: {}", e.verdict.reason);
        }
    }
}
