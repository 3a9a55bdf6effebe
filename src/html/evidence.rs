//! Reading a candidate's evidence for the site: the verdict and the gate
//! that decided it, the static gate's key figures, the correctness gate's
//! error numbers and curves, the speed gate's speedup and samples.

use kidiom_patterns::record::{
    CompileFigures, ErrorSide, Num, SCHEDULER_THROUGHPUT, SERVICE_REQUESTS, SpeedFigures, SpeedSide, StoredEvidence,
};
use kidiom_validator::{Evidence, Gate, GateRecord, GateStatus, VerdictKind};
#[cfg(test)]
use serde_json::Value;

/// A number shown in a table cell, with the key it sorts by.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cell {
    pub(crate) text: String,
    /// A second, smaller line (the relative change, the output, the length).
    pub(crate) note: String,
    /// Empty when there is nothing to sort by (the row sorts last).
    pub(crate) sort: String,
}

impl Cell {
    pub(crate) fn none() -> Cell {
        Cell { text: "-".into(), note: String::new(), sort: String::new() }
    }

    fn num(text: String, note: String, key: f64) -> Cell {
        Cell { text, note, sort: if key.is_finite() { format!("{key}") } else { String::new() } }
    }

    /// Text and note on one line.
    pub(crate) fn full(&self) -> String {
        if self.note.is_empty() { self.text.clone() } else { format!("{} ({})", self.text, self.note) }
    }
}

/// The evidence of a candidate, parsed when it has the validator's shape.
#[cfg(test)]
pub(crate) fn parse(v: &Value) -> Option<Evidence> {
    StoredEvidence::decode(v.clone()).evidence().cloned()
}

/// What the index says of evidence that is not the validator's.
pub(crate) const UNREADABLE: &str = "unreadable evidence";

/// The verdict's name: `not validated` without evidence, `unreadable
/// evidence` for a record that is not the validator's.
pub(crate) fn verdict(read: &StoredEvidence) -> String {
    // the site believes only the validator's whole record, never a verdict named in another
    match read {
        StoredEvidence::Empty => "not validated".into(),
        StoredEvidence::Evidence(e) => e.verdict.kind.name().to_string(),
        StoredEvidence::Unreadable { .. } => UNREADABLE.into(),
    }
}

/// The gate that decided the verdict: the failing or erroring gate; for
/// `needs-gpu` the first gate that did not run; for `accepted` the last gate.
pub(crate) fn deciding_gate(ev: &Evidence) -> Option<Gate> {
    if let Some(g) = ev.verdict.gate {
        return Some(g);
    }
    match ev.verdict.kind {
        VerdictKind::NeedsGpu => ev.gates.iter().find(|r| r.status == GateStatus::Skipped).map(|r| r.gate),
        _ => ev.gates.last().map(|r| r.gate),
    }
}

/// `before -> after` of an integer figure, sorted by the relative change.
fn delta(b: Option<i64>, a: Option<i64>, unit: &str) -> Cell {
    match (b, a) {
        (Some(b), Some(a)) => {
            // i128: figures from the catalog may be anywhere in i64
            let rel = if b != 0 {
                (i128::from(a) - i128::from(b)) as f64 / b as f64
            } else if a == 0 {
                0.0
            } else {
                f64::INFINITY
            };
            let pct = if b != 0 && a != b { format!("{:+.0}%", rel * 100.0) } else { String::new() };
            let key = if rel.is_finite() { rel } else { 1e9 };
            Cell::num(format!("{b} → {a}{unit}"), pct, key)
        }
        (None, Some(a)) => Cell::num(format!("{a}{unit}"), String::new(), 0.0),
        _ => Cell::none(),
    }
}

/// The static gate's key figures: instructions, spilled bytes (stores),
/// registers, tensor-core instructions.
pub(crate) struct StaticFigures {
    pub(crate) instructions: Cell,
    pub(crate) spills: Cell,
    pub(crate) registers: Cell,
    pub(crate) tensor: Cell,
}

pub(crate) fn static_figures(ev: Option<&Evidence>) -> StaticFigures {
    let (b, a) = ev.and_then(|e| e.gate(Gate::Static)).map(GateRecord::compiles).unwrap_or_default();
    let (b, a) = (b.as_ref(), a.as_ref());
    let fig = |f: fn(&CompileFigures) -> Option<i64>| (b.and_then(f), a.and_then(f));
    let (ib, ia) = fig(|c| c.instructions);
    let (sb, sa) = fig(|c| c.spill_store_bytes);
    let (rb, ra) = fig(|c| c.registers);
    let (tb, ta) = fig(|c| Some(c.tensor()));
    StaticFigures {
        instructions: delta(ib, ia, ""),
        spills: delta(sb, sa, " B"),
        registers: delta(rb, ra, ""),
        tensor: delta(tb, ta, ""),
    }
}

pub(crate) fn fmt_e(x: f64) -> String {
    if x.is_finite() { format!("{x:.2e}") } else { "inf".into() }
}

/// The largest rel_l2 over the outputs the correctness gate judged.
pub(crate) fn worst_rel_l2(ev: Option<&Evidence>) -> Cell {
    let Some(rec) = ev.and_then(|e| e.gate(Gate::Correctness)) else { return Cell::none() };
    let worst = rec.error_sides().1.worst.unwrap_or_else(|| rec.correctness_figures().worst);
    let mut max: Option<(f64, &str)> = None;
    for (name, m) in &worst {
        // a NaN (stored as null) is not a number to show, as it never was
        if let Some(Num(x)) = m.rel_l2.filter(|x| !x.0.is_nan())
            && max.is_none_or(|(y, _)| x > y)
        {
            max = Some((x, name));
        }
    }
    match max {
        Some((x, name)) => Cell::num(fmt_e(x), name.to_string(), x),
        None => Cell::none(),
    }
}

/// One point of an error curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CurvePoint {
    pub(crate) t: f64,
    pub(crate) rel_l2: f64,
}

/// The error-versus-length curve of one side of a correctness record.
pub(crate) fn curve(side: &ErrorSide) -> Vec<CurvePoint> {
    side.curve.iter().flatten().map(|p| CurvePoint { t: p.t as f64, rel_l2: p.rel_l2.0 }).collect()
}

/// The curves of a correctness record, baseline and candidate.
pub(crate) fn curves(rec: &GateRecord) -> (Vec<CurvePoint>, Vec<CurvePoint>) {
    let (b, a) = rec.error_sides();
    (curve(&b), curve(&a))
}

/// The curves' end points, `T=256: 5.72e-04 → 8.55e-06`, sorted by the
/// candidate's error there.
pub(crate) fn curve_end(ev: Option<&Evidence>) -> Cell {
    let Some(rec) = ev.and_then(|e| e.gate(Gate::Correctness)) else { return Cell::none() };
    let (b, a) = curves(rec);
    match (b.last(), a.last()) {
        (Some(b), Some(a)) => {
            Cell::num(format!("{} → {}", fmt_e(b.rel_l2), fmt_e(a.rel_l2)), format!("T={}", a.t), a.rel_l2)
        }
        (None, Some(a)) => Cell::num(fmt_e(a.rel_l2), format!("T={}", a.t), a.rel_l2),
        _ => Cell::none(),
    }
}

/// The speed gate's result with its noise floor, where it measured one:
/// a GPU kernel's speedup, a host target's requests/s (SPEC §8; the
/// scheduler gap in older records); sorted
/// by the speedup.
pub(crate) fn speed(ev: Option<&Evidence>) -> Cell {
    let Some(rec) = ev.and_then(|e| e.gate(Gate::Speed)) else { return Cell::none() };
    let m = rec.speed_figures();
    let Some(speedup) = m.as_ref().and_then(SpeedFigures::speedup).filter(|s| s.is_finite()) else {
        return Cell { text: status_word(rec).into(), note: String::new(), sort: String::new() };
    };
    let noise = m.as_ref().and_then(SpeedFigures::noise_floor).map(|n| format!("noise {:.1}%", n * 100.0));
    let (b, c) = rec.speed_sides();
    let gap = |side: &Option<SpeedSide>| side.as_ref().and_then(|v| v.number("gap"));
    let rps = |side: &Option<SpeedSide>| side.as_ref().and_then(|v| v.number("requests_per_s"));
    if m.as_ref().and_then(SpeedFigures::metric) == Some(SERVICE_REQUESTS)
        && let (Some(b), Some(c)) = (rps(&b), rps(&c))
    {
        let note = [Some(format!("{speedup:.2}x")), noise].into_iter().flatten().collect::<Vec<_>>().join(", ");
        return Cell::num(format!("{b:.0} → {c:.0} req/s"), note, speedup);
    }
    if m.as_ref().and_then(SpeedFigures::metric) == Some(SCHEDULER_THROUGHPUT)
        && let (Some(b), Some(c)) = (gap(&b), gap(&c))
    {
        let note = [Some(format!("{speedup:.2}x")), noise].into_iter().flatten().collect::<Vec<_>>().join(", ");
        return Cell::num(format!("gap {:.1}% → {:.1}%", b * 100.0, c * 100.0), note, speedup);
    }
    Cell::num(format!("{speedup:.2}x"), noise.unwrap_or_default(), speedup)
}

/// The roofline prediction from the work profiles: `1.42x`, with what
/// bounds it and that it is a prediction.
pub(crate) fn predicted(ev: Option<&Evidence>) -> Cell {
    let Some(p) = ev.and_then(|e| e.prediction.as_ref()).filter(|p| p.speedup.is_finite()) else {
        return Cell::none();
    };
    // sorted by the speedup discounted by its expected error on published measurements
    let error = p.expected_error.as_ref().map_or_else(|| "expected error unknown".to_string(), |e| e.text());
    Cell::num(p.short(), format!("predicted, {}-bound; {error}", p.bound.name()), p.discounted())
}

/// `passed`, `failed`, `skipped`, `error`.
pub(crate) fn status_word(rec: &GateRecord) -> &'static str {
    match rec.status {
        GateStatus::Passed => "passed",
        GateStatus::Failed => "failed",
        GateStatus::Skipped => "skipped",
        GateStatus::Error => "error",
    }
}

/// The samples of one variant of a speed record: every array of numbers it
/// holds (`gaps` per round of a host bench, per-iteration timings where the
/// harness keeps them), and its p10/median/p90 where reported.
pub(crate) struct Samples {
    pub(crate) key: String,
    pub(crate) values: Vec<f64>,
}

/// The sample arrays both variants of a speed record hold, by key.
pub(crate) fn speed_samples(rec: &GateRecord) -> Vec<(Samples, Samples)> {
    let (Some(b), Some(a)) = rec.speed_sides() else { return Vec::new() };
    let after: Vec<(&str, Vec<f64>)> = a.samples().collect();
    let mut out = Vec::new();
    for (key, bx) in b.samples() {
        if let Some((_, ax)) = after.iter().find(|(k, _)| *k == key) {
            out.push((
                Samples { key: key.to_string(), values: bx },
                Samples { key: key.to_string(), values: ax.clone() },
            ));
        }
    }
    out
}

/// `(p10, median, p90)` of a variant: `<prefix>_p10`, `<prefix>` or
/// `median_<unit>`, `<prefix>_p90` (the host bench's gap, a GPU bench's µs).
pub(crate) fn percentiles(side: Option<&SpeedSide>, p10: &str, median: &str, p90: &str) -> Option<(f64, f64, f64)> {
    side?.percentiles(p10, median, p90)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(gates: Value, verdict: Value) -> Evidence {
        serde_json::from_value(json!({
            "format": 1, "candidate": "c", "pattern": "p", "category": "precision", "target": "k.py",
            "kernel": "kda.prefill", "verdict": verdict, "gates": gates, "device": "auto", "commit": null,
            "seeds": [1], "started_at": 0, "seconds": 1.0, "validator": "0.1.0"
        }))
        .expect("evidence")
    }

    fn rec(gate: &str, status: &str, before: Value, after: Value, metrics: Value) -> Value {
        json!({"gate": gate, "status": status, "summary": "", "metrics": metrics, "before": before, "after": after,
               "device": null, "versions": null, "commands": [], "seconds": 0.0, "log": null})
    }

    #[test]
    fn figures_from_each_gate() {
        let st = rec(
            "static",
            "passed",
            json!({"instructions": 6960, "spill_store_bytes": 2008, "registers": 255, "by_class": {"tensor": 104}}),
            json!({"instructions": 10120, "spill_store_bytes": 2592, "registers": 255, "by_class": {"fp32": 1}}),
            json!({}),
        );
        let co = rec(
            "correctness",
            "passed",
            json!({"curve": [{"T": 64, "rel_l2": 5e-4}, {"T": 256, "rel_l2": 6e-4}]}),
            json!({"curve": [{"T": 64, "rel_l2": 1e-6}, {"T": 256, "rel_l2": 2e-6}],
                   "worst": {"o": {"rel_l2": 3e-6}, "state": {"rel_l2": "inf"}}}),
            json!({}),
        );
        let sp = rec(
            "speed",
            "passed",
            json!({"median_us": 10.0, "p10_us": 9.0, "p90_us": 11.0, "us": [9.0, 10.0, 11.0]}),
            json!({"median_us": 5.0, "p10_us": 4.0, "p90_us": 6.0, "us": [4.0, 5.0, 6.0]}),
            json!({"speedup": 2.0, "noise_floor": 0.02}),
        );
        let e =
            ev(json!([st, co, sp]), json!({"kind": "accepted", "gate": null, "reason": "", "log": null, "flags": []}));
        let f = static_figures(Some(&e));
        assert_eq!(f.instructions.full(), "6960 → 10120 (+45%)");
        assert_eq!(f.spills.full(), "2008 → 2592 B (+29%)");
        assert_eq!(f.registers.full(), "255 → 255");
        assert_eq!(f.tensor.full(), "104 → 0 (-100%)");
        assert_eq!(worst_rel_l2(Some(&e)).full(), "inf (state)");
        assert_eq!(curve_end(Some(&e)).full(), "6.00e-4 → 2.00e-6 (T=256)");
        assert_eq!(speed(Some(&e)).full(), "2.00x (noise 2.0%)");
        assert_eq!(speed(Some(&e)).sort, "2");
        assert_eq!(deciding_gate(&e), Some(Gate::Speed));
        let s = speed_samples(e.gate(Gate::Speed).expect("speed"));
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].1.values, vec![4.0, 5.0, 6.0]);
        assert_eq!(
            percentiles(e.gate(Gate::Speed).and_then(|r| r.speed_sides().1).as_ref(), "p10_us", "median_us", "p90_us"),
            Some((4.0, 5.0, 6.0))
        );
    }

    #[test]
    fn figures_at_the_ends_of_i64_do_not_overflow() {
        let c = delta(Some(i64::MAX), Some(i64::MIN), "");
        assert_eq!(c.text, format!("{} → {}", i64::MAX, i64::MIN));
        assert_eq!(c.note, "-200%");
        let c = delta(Some(0), Some(i64::MAX), "");
        assert_eq!(c.sort, "1000000000");
        assert_eq!(delta(Some(-5), Some(-5), "").full(), "-5 → -5");
    }

    #[test]
    fn a_host_target_shows_its_services_requests_per_second() {
        let sp = rec(
            "speed",
            "passed",
            json!({"requests_per_s": 474.6, "requests_per_s_all": [470.0, 480.0], "gap": 0.37}),
            json!({"requests_per_s": 689.7, "requests_per_s_all": [680.0, 690.0], "gap": 0.02}),
            json!({"metric": "service-requests", "speedup": 1.45, "noise_floor": 0.021}),
        );
        let e = ev(json!([sp]), json!({"kind": "accepted", "gate": null, "reason": "", "log": null, "flags": []}));
        let c = speed(Some(&e));
        assert_eq!(c.full(), "475 → 690 req/s (1.45x, noise 2.1%)");
        assert_eq!(e.speed_headline().as_deref(), Some("475 -> 690 requests/s (noise 2.1%)"));
        let keys: Vec<String> =
            speed_samples(e.gate(Gate::Speed).expect("speed")).into_iter().map(|s| s.0.key).collect();
        assert_eq!(keys, ["requests_per_s_all"]);
    }

    /// An older record (the scheduler-throughput metric) still reads.
    #[test]
    fn a_host_target_shows_its_scheduler_gap() {
        let sp = rec(
            "speed",
            "passed",
            json!({"gap": 0.543, "gaps": [0.5, 0.55]}),
            json!({"gap": 0.015, "gaps": [0.01, 0.02]}),
            json!({"metric": "scheduler-throughput", "speedup": 2.13, "noise_floor": 0.085}),
        );
        let e = ev(json!([sp]), json!({"kind": "accepted", "gate": null, "reason": "", "log": null, "flags": []}));
        let c = speed(Some(&e));
        assert_eq!(c.full(), "gap 54.3% → 1.5% (2.13x, noise 8.5%)");
        assert_eq!(c.sort, "2.13");
        assert_eq!(speed_samples(e.gate(Gate::Speed).expect("speed"))[0].0.key, "gaps");
    }

    #[test]
    fn no_evidence_is_not_validated() {
        assert!(parse(&json!({})).is_none());
        assert!(parse(&json!({"verdict": "odd"})).is_none());
        assert_eq!(verdict(&StoredEvidence::decode(json!({}))), "not validated");
        assert_eq!(verdict(&StoredEvidence::decode(Value::Null)), "not validated");
        // a record that names a verdict but is not the validator's is not believed
        assert_eq!(
            verdict(&StoredEvidence::decode(json!({"verdict": {"kind": "accepted"}, "gates": "x"}))),
            UNREADABLE
        );
        assert_eq!(verdict(&StoredEvidence::decode(json!([1, 2]))), UNREADABLE);
        assert_eq!(static_figures(None).instructions, Cell::none());
        let e = ev(
            json!([
                rec("syntax", "passed", json!(null), json!(null), json!({})),
                rec("speed", "skipped", json!(null), json!(null), json!({}))
            ]),
            json!({"kind": "needs-gpu", "gate": null, "reason": "", "log": null, "flags": []}),
        );
        assert_eq!(deciding_gate(&e), Some(Gate::Speed));
        assert_eq!(speed(Some(&e)).text, "skipped");
    }
}
