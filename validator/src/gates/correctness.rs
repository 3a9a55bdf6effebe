//! Gate 3, correctness: the harness's `check` of the candidate against the
//! float64 reference (several fresh seeds over the shape matrix), and for
//! precision rewrites the error-versus-length curve against the baseline's.
//!
//! A check the harness skipped (a CUDA variant the CPU emulation cannot run)
//! is not a pass: the verdict is `needs-gpu` with the reason "correctness not
//! checked on this CPU" and a flag saying so, the record names no device, and
//! speed is not measured either.

use super::launch::HarnessResults;
use super::{Validation, stamp};
use crate::backend::python::{HarnessRun, HarnessStatus};
use crate::evidence::{GateRecord, GateStatus};
use crate::manifest::Manifest;
use crate::verdict::{Gate, Verdict};
use crate::wire::{self, Case, Check, CurvePoint, Header, Num, WireError};
use kidiom_patterns::record::{CorrectnessFigures, ErrorSide, WorstErrors};

/// How far a precision rewrite's error curve may sit above the baseline's
/// at a length and still count as "no worse" (relative, plus an absolute
/// floor for errors near float rounding).
const CURVE_RTOL: f64 = 0.05;
const CURVE_ATOL: f64 = 1e-7;

/// The flag and reason prefix of a check that did not run here.
pub(crate) const NOT_CHECKED: &str = "correctness not checked on this CPU";

fn fmt_e(x: f64) -> String {
    if x.is_finite() { format!("{x:.2e}") } else { "inf".into() }
}

/// Worst numbers of a check: per output, the largest rel_l2, max_abs_rel and
/// worst-slice rel_l2 (a non-finite one is `"inf"`), and the non-finite count.
pub(super) fn worst_errors(cases: &[Case]) -> WorstErrors {
    let mut worst = WorstErrors::new();
    for case in cases {
        for (name, m) in &case.outputs {
            let e = worst.entry(name.clone()).or_default();
            for (slot, v) in [
                (&mut e.rel_l2, m.rel_l2),
                (&mut e.max_abs_rel, m.max_abs_rel),
                (&mut e.slice_rel_l2, m.worst_slice.as_ref().map(|w| w.rel_l2)),
            ] {
                // not reported for this output (a concurrent checksum counts threads instead)
                let Some(Num(v)) = v else { continue };
                if !v.is_finite() {
                    *slot = Some(Num(f64::INFINITY));
                } else if slot.is_none_or(|old| old.0.is_finite() && v > old.0) {
                    *slot = Some(Num(v));
                }
            }
            e.nonfinite += m.nonfinite;
        }
    }
    worst
}

/// The curve comparison of a precision rewrite: `Ok(summary)` or `Err(reason)`.
/// No worse than the baseline at every length, better at the longest.
pub(super) fn judge_curve(base: &[CurvePoint], cand: &[CurvePoint]) -> Result<String, String> {
    if base.is_empty() || base.len() != cand.len() || base.iter().zip(cand).any(|(x, y)| x.t != y.t) {
        return Err(format!("error curves do not line up (baseline {} points, candidate {})", base.len(), cand.len()));
    }
    let mut parts = Vec::new();
    for (b, c) in base.iter().zip(cand) {
        let (t, eb, ec) = (b.t, b.rel_l2.0, c.rel_l2.0);
        parts.push(format!("T={t}: {eb:.2e} -> {ec:.2e}"));
        // NaN compares false: it is never "no worse"
        let no_worse = ec <= eb * (1.0 + CURVE_RTOL) + CURVE_ATOL;
        if !no_worse {
            return Err(format!("error at T={t} is worse than the baseline: {ec:.2e} > {eb:.2e}"));
        }
    }
    let (b, c) = (&base[base.len() - 1], &cand[cand.len() - 1]);
    let (t, eb, ec) = (b.t, b.rel_l2.0, c.rel_l2.0);
    let better = ec < eb;
    if !better {
        return Err(format!("error at the longest T={t} is not better than the baseline: {ec:.2e} >= {eb:.2e}"));
    }
    Ok(format!("error curve improved: {}", parts.join(", ")))
}

/// The correctness gate; `Ok(native)` when it passed (whether the kernel ran
/// natively on a GPU), `Err(verdict)` when the validation stops here.
pub(super) fn judge(run: &mut Validation<'_>, manifest: &Manifest, runs: &HarnessResults) -> Result<bool, Verdict> {
    let (mut rec, header, check) = read_check(run, runs)?;
    let passed = runs.cand_check.status == HarnessStatus::Ok;
    let mode = header.mode.clone().unwrap_or_default();
    let worst = worst_errors(&check.cases);
    rec.set_metrics(&CorrectnessFigures {
        mode: mode.clone(),
        seeds: run.seeds.clone(),
        cases: check.cases.len() as u64,
        worst: worst.clone(),
        tolerance: serde_json::to_value(manifest.tolerance).unwrap_or_default(),
        consistency: check.consistency.clone(),
        failures: check.failures.clone(),
        ran_alongside_static: true,
        sandbox: check.sandbox.clone(),
    });
    let worst_only = ErrorSide { curve: None, worst: Some(worst.clone()) };
    if !passed {
        let summary = failures(&check.failures);
        rec.set_sides(None::<&ErrorSide>, Some(&worst_only));
        return Err(run.stop(rec, GateStatus::Failed, summary.clone(), Verdict::rejected(Gate::Correctness, summary)));
    }
    // the seeds the cases ran (a reduced plan runs the first only)
    let mut seeds: Vec<u64> = check.cases.iter().filter_map(|c| c.seed).collect();
    seeds.sort_unstable();
    seeds.dedup();
    if seeds.is_empty() {
        seeds = run.seeds.clone();
    }
    let mut summary =
        format!("{} cases passed over seeds {:?} ({mode}); worst {}", check.cases.len(), seeds, worst_rel_l2(&worst));
    if let Some(same) = &check.same_program {
        summary = format!(
            "{summary}; {}{}",
            same.why,
            if same.not_run.is_empty() {
                String::new()
            } else {
                format!(
                    " (not run again for it: {}; its errors equal the baseline's on every case)",
                    same.not_run.join(", ")
                )
            }
        );
    }
    match &runs.base_check {
        Some(b) => {
            let (with_curves, curve) = compare_curves(run, rec, runs, b, &check, &worst)?;
            rec = with_curves;
            summary = format!("{summary}; {curve}");
        }
        None => rec.set_sides(None::<&ErrorSide>, Some(&worst_only)),
    }
    if let Some(cov) = &check.coverage {
        if let Some(why) = &cov.unverified {
            // every case passed, none ran the change: nothing about it is known
            let summary = format!("{summary}; {why}");
            return Err(run.stop(
                rec,
                GateStatus::Passed,
                summary,
                Verdict::unverified(Gate::Correctness, why.clone()),
            ));
        }
        if !cov.unrun.is_empty() {
            let lines = cov.unrun.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
            let note =
                format!("line{} {lines} of the change ran in no CPU case", if cov.unrun.len() == 1 { "" } else { "s" });
            summary = format!("{summary}; {note}");
            run.flags.push(note);
        }
    }
    rec.summary = summary;
    run.records.push(rec);
    Ok(mode == "native")
}

/// The candidate's check read and held to the wire format: its record
/// begun, its header and its body. `Err` when the validation stops here
/// (timed out, crashed, skipped, or output that does not fit).
fn read_check(run: &mut Validation<'_>, runs: &HarnessResults) -> Result<(GateRecord, Header, Check), Verdict> {
    let mut rec = GateRecord::new(Gate::Correctness, GateStatus::Passed, "");
    let cand = &runs.cand_check;
    let header = wire::header(cand, "check");
    stamp(&mut rec, cand, header.as_ref().ok());
    if let Some(b) = &runs.base_check {
        super::note(&mut rec, b);
    }
    rec.seconds = runs.base_check.as_ref().map(|b| b.process.seconds).unwrap_or(0.0).max(cand.process.seconds);
    let header = match header {
        Ok(h) => h,
        Err(_) if matches!(cand.status, HarnessStatus::TimedOut | HarnessStatus::Crashed) => {
            return Err(run.harness_error(rec, cand, "the correctness check"));
        }
        Err(e) => return Err(run.wire_error(rec, cand, &e)),
    };
    match cand.status {
        HarnessStatus::Ok | HarnessStatus::Failed => {}
        HarnessStatus::Skipped => return Err(skipped(run, rec, &header)),
        HarnessStatus::TimedOut | HarnessStatus::Crashed | HarnessStatus::Error => {
            return Err(run.harness_error(rec, cand, "the correctness check"));
        }
    }
    let check: Check = match wire::body(cand, "check") {
        Ok(c) => c,
        Err(e) => return Err(run.wire_error(rec, cand, &e)),
    };
    let passed = cand.status == HarnessStatus::Ok;
    if check.passed != passed {
        let e = WireError {
            command: "check".into(),
            message: format!("field `passed`: {} with status {:?}", check.passed, header.status),
        };
        return Err(run.wire_error(rec, cand, &e));
    }
    Ok((rec, header, check))
}

/// A failed check's summary: how many failures, the first three.
fn failures(failures: &[String]) -> String {
    let n = failures.len();
    let shown: Vec<&str> = failures.iter().take(3).map(String::as_str).collect();
    format!(
        "{n} failure{}: {}{}",
        if n == 1 { "" } else { "s" },
        if shown.is_empty() {
            "the harness reports a failed check and names no case".to_string()
        } else {
            shown.join("; ")
        },
        if n > 3 { "; ..." } else { "" }
    )
}

/// `name rel_l2 X` per output of [`worst_errors`]; outputs judged by counts
/// only (a concurrent checksum) have no rel_l2 to show.
fn worst_rel_l2(worst: &WorstErrors) -> String {
    worst
        .iter()
        .filter_map(|(k, w)| w.rel_l2.map(|e| format!("{k} rel_l2 {}", fmt_e(e.0))))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A precision rewrite's error curve against the baseline's (the
/// baseline's check `b`): the record with both curves and the comparison's
/// summary, or the verdict when the validation stops here.
fn compare_curves(
    run: &mut Validation<'_>,
    mut rec: GateRecord,
    runs: &HarnessResults,
    b: &HarnessRun,
    check: &Check,
    worst: &WorstErrors,
) -> Result<(GateRecord, String), Verdict> {
    let base: Check = match b.status {
        HarnessStatus::Ok => match wire::header(b, "check").and_then(|_| wire::body::<Check>(b, "check")) {
            Ok(c) => c,
            Err(e) => return Err(run.wire_error(rec, b, &e)),
        },
        HarnessStatus::Failed => {
            let summary = "the baseline fails its own check; cannot compare error curves".to_string();
            let v = Verdict::error(Some(Gate::Correctness), "the baseline fails its own check", b.log());
            return Err(run.stop(rec, GateStatus::Error, summary, v));
        }
        _ => return Err(run.harness_error(rec, b, "the baseline's check")),
    };
    let (Some(bc), Some(cc)) = (&base.curve, &check.curve) else {
        let which = if base.curve.is_none() { "baseline" } else { "candidate" };
        let e = WireError {
            command: "check".into(),
            message: format!("field `curve`: missing from the {which}'s check (the manifest asks for an error curve)"),
        };
        let h = if base.curve.is_none() { b } else { &runs.cand_check };
        return Err(run.wire_error(rec, h, &e));
    };
    let before = ErrorSide { curve: Some(bc.clone()), worst: None };
    rec.set_sides(Some(&before), Some(&ErrorSide { curve: Some(cc.clone()), worst: Some(worst.clone()) }));
    match judge_curve(bc, cc) {
        Ok(s) => Ok((rec, s)),
        Err(reason) => {
            let summary = format!("precision rewrite: {reason}");
            Err(run.stop(rec, GateStatus::Failed, summary.clone(), Verdict::rejected(Gate::Correctness, summary)))
        }
    }
}

/// The harness skipped the check: nothing was verified, and the verdict says so.
fn skipped(run: &mut Validation<'_>, mut rec: GateRecord, header: &Header) -> Verdict {
    let why = header.reason.clone().unwrap_or_else(|| "no reason given".into());
    rec.device = None;
    rec.status = GateStatus::Skipped;
    rec.summary = format!("not run on this machine: {why}");
    run.records.push(rec);
    run.flags.push(format!("{NOT_CHECKED}: {why}"));
    let speed = GateRecord::new(Gate::Speed, GateStatus::Skipped, "not measured: correctness was not checked");
    run.records.push(speed);
    Verdict::needs_gpu(format!("{NOT_CHECKED} ({why}); syntax and static passed; correctness and speed need a GPU"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn curve(xs: &[(i64, f64)]) -> Vec<CurvePoint> {
        serde_json::from_value(json!(xs.iter().map(|(t, e)| json!({"T": t, "rel_l2": e})).collect::<Vec<_>>())).unwrap()
    }

    #[test]
    fn curves_must_be_no_worse_everywhere_and_better_at_the_longest() {
        let base = curve(&[(64, 5e-4), (128, 6e-4), (256, 7e-4)]);
        assert!(judge_curve(&base, &curve(&[(64, 1e-7), (128, 1e-7), (256, 2e-7)])).is_ok());
        let worse = judge_curve(&base, &curve(&[(64, 1e-7), (128, 9e-4), (256, 2e-7)])).unwrap_err();
        assert!(worse.contains("T=128"), "{worse}");
        let same = judge_curve(&base, &base).unwrap_err();
        assert!(same.contains("longest T=256"), "{same}");
        assert!(judge_curve(&base, &curve(&[(64, 1e-7)])).is_err());
        assert!(judge_curve(&[], &[]).is_err());
        // a null (NaN) error is never "no worse"
        let nan: Vec<CurvePoint> = serde_json::from_value(
            json!([{"T": 64, "rel_l2": null}, {"T": 128, "rel_l2": 1e-7}, {"T": 256, "rel_l2": 1e-7}]),
        )
        .unwrap();
        assert!(judge_curve(&base, &nan).unwrap_err().contains("T=64"));
    }

    #[test]
    fn worst_errors_take_the_max_over_cases() {
        let cases: Vec<Case> = serde_json::from_value(json!([
            {"id": "a", "passed": true, "outputs": {"o": {"rel_l2": 1e-4, "max_abs_rel": 1e-3, "worst_slice": {"rel_l2": 2e-4}, "nonfinite": 0}}},
            {"id": "b", "passed": false, "outputs": {"o": {"rel_l2": "inf", "max_abs_rel": 1e-2, "worst_slice": {"rel_l2": 3e-4}, "nonfinite": 4}}},
            {"id": "c", "passed": true, "outputs": {"o": {"rel_l2": 1e-5, "max_abs_rel": 1e-5, "nonfinite": 0}}},
            {"id": "d", "passed": true, "outputs": {"checksum": {"mismatched_threads": 0}}},
        ]))
        .unwrap();
        // as stored
        let w = serde_json::to_value(worst_errors(&cases)).unwrap();
        assert_eq!(w["o"]["rel_l2"], "inf");
        assert_eq!(w["o"]["max_abs_rel"], 1e-2);
        assert_eq!(w["o"]["slice_rel_l2"], 3e-4);
        assert_eq!(w["o"]["nonfinite"], 4);
        assert!(w["checksum"]["rel_l2"].is_null(), "not reported: not shown as measured");
    }
}
