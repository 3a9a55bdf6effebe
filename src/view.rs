//! Views the front ends share (the terminal and the HTML review): how a
//! record is laid out as rows, whoever draws them. The service layer
//! (`ops`) returns records; it lays nothing out.

use kidiom_patterns::record::SiteSummary;
use kidiom_validator::sitesearch::SiteSearch;

/// The folder (with its `/`) every path in `paths` lies under, or "".
pub(crate) fn shared_folder<'a>(mut paths: impl Iterator<Item = &'a str>) -> String {
    let Some(first) = paths.next() else { return String::new() };
    let mut shared: Vec<&str> = first.split('/').collect();
    shared.pop();
    for p in paths {
        let parts: Vec<&str> = p.split('/').collect();
        let n = shared.iter().zip(&parts[..parts.len() - 1]).take_while(|(a, b)| a == b).count();
        shared.truncate(n);
    }
    shared.iter().map(|s| format!("{s}/")).collect()
}

/// A candidate's verdict in one cell: its kind, and for a rejection or an
/// error the gate that decided it (`rejected (correctness)`); `-` before
/// any validation.
pub(crate) fn verdict_cell(c: &kidiom_patterns::Candidate) -> String {
    c.evidence.verdict().map_or_else(|| "-".into(), verdict_text)
}

/// A verdict's kind, with the gate that decided a rejection or an error.
pub(crate) fn verdict_text(v: &kidiom_patterns::record::Verdict) -> String {
    use kidiom_patterns::record::VerdictKind;
    match v.gate {
        Some(g) if matches!(v.kind, VerdictKind::Rejected | VerdictKind::Error) => format!("{} ({g})", v.kind.name()),
        _ => v.kind.name().to_string(),
    }
}

/// A site search's front as table rows (for `review`, its HTML page and
/// `apply`), the point `mark` flagged.
pub(crate) fn front_rows(s: &SiteSummary, mark: Option<usize>) -> Option<Vec<Vec<String>>> {
    let lengths: Vec<String> = s.lengths.iter().map(|t| format!("err T={t}")).collect();
    let mut head = vec!["".to_string(), "sites: values".to_string()];
    head.extend(lengths);
    head.extend(["instr".into(), "spill B".into(), "local".into(), "tensor".into(), "roles".into()]);
    let mut rows = vec![head];
    let base = s.points.iter().find(|p| p.is("baseline"))?;
    let base_ins = base.figures.as_ref().map(|f| f.instructions).unwrap_or(0).max(1);
    let mut shown: Vec<usize> = (0..s.points.len())
        .filter(|&i| ["front", "chosen", "baseline", "all-sites"].iter().any(|r| s.points[i].is(r)))
        .collect();
    shown.sort_by(|&a, &b| s.points[a].last_error().total_cmp(&s.points[b].last_error()));
    for i in shown {
        let p = &s.points[i];
        let mut row = vec![
            if Some(i) == mark { "->".into() } else { String::new() },
            SiteSearch::describe_with(&s.values, &p.assignment),
        ];
        row.extend(p.error.iter().map(|e| e.map(|e| format!("{e:.2e}")).unwrap_or_else(|| "-".into())));
        match &p.figures {
            Some(f) => row.extend([
                format!("{} ({:.2}x)", f.instructions, f.instructions as f64 / base_ins as f64),
                f.spill_store_bytes.to_string(),
                f.local.to_string(),
                f.tensor.to_string(),
            ]),
            None => row.extend(["-".into(), "-".into(), "-".into(), "-".into()]),
        }
        let mut roles = p.roles.join(",");
        if !p.predicted_slower.is_empty() {
            roles.push_str(" (predicted slower)");
        }
        row.push(roles);
        rows.push(row);
    }
    Some(rows)
}

/// The scale layouts a variant's storage names (its `layout`, else its `scale` or `scales` word).
const LAYOUTS: &[&str] = &["none", "tensor", "head_k", "tile", "row", "head", "channel"];

/// One state-precision variant's validation, as the reviews compare them.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct VariantView {
    /// The candidate that carries it.
    pub(crate) candidate: String,
    /// The variant's name (`kda.decode.state-bf16`).
    pub(crate) variant: String,
    /// `bf16`, `fp8e4m3`, `int8`.
    pub(crate) dtype: String,
    /// The scale layout (`none`, `tensor`, `head_k`, `tile`).
    pub(crate) scale: String,
    /// The verdict's kind, and its reason.
    pub(crate) verdict: String,
    pub(crate) reason: String,
    /// The predicted speedup from the state bytes (a prediction, never a measurement).
    pub(crate) predicted: Option<f64>,
    /// The precision gate's figures (curves, errors, bytes per step, crossing).
    pub(crate) figures: kidiom_patterns::record::PrecisionFigures,
}

/// The state-precision variants of one kernel, with its fp32 drift.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct PrecisionFamily {
    /// The kernel they are variants of (`kda.decode`).
    pub(crate) kernel: String,
    /// The fp32 kernel's drift (steps, curve), from a variant's run.
    pub(crate) baseline_steps: Vec<i64>,
    pub(crate) baseline: kidiom_patterns::record::DriftCurve,
    /// Its state bytes per step.
    pub(crate) baseline_bytes: Option<u64>,
    /// The variants, fewest bytes last (as they were written: bf16, fp8, int8).
    pub(crate) variants: Vec<VariantView>,
}

/// The validated state-precision variants among `cands`, by kernel (the
/// latest validation of each variant).
pub(crate) fn precision_families(cands: &[kidiom_patterns::Candidate]) -> Vec<PrecisionFamily> {
    use kidiom_patterns::record::Gate;
    let mut latest: std::collections::BTreeMap<(String, String), (u64, VariantView)> = Default::default();
    let mut baselines: std::collections::BTreeMap<String, (u64, PrecisionFamily)> = Default::default();
    for c in cands {
        let Some(e) = c.evidence.evidence() else { continue };
        let Some(rec) = e.gate(Gate::Precision) else { continue };
        let f = rec.precision_figures();
        let name = if f.variant.is_empty() { c.id.clone() } else { f.variant.clone() };
        let kernel = if f.variant_of.is_empty() { "?".to_string() } else { f.variant_of.clone() };
        let view = VariantView {
            candidate: c.id.clone(),
            variant: name.clone(),
            dtype: f.dtype.clone(),
            scale: ["layout", "scale", "scales"]
                .iter()
                .find_map(|k| f.storage.get(*k).and_then(|s| s.as_str()).filter(|s| LAYOUTS.contains(s)))
                .unwrap_or("none")
                .to_string(),
            verdict: e.verdict.kind.name().to_string(),
            reason: e.verdict.reason.clone(),
            predicted: e.prediction.as_ref().map(|p| p.speedup).filter(|s| s.is_finite()),
            figures: f.clone(),
        };
        if !f.baseline_drift.o.is_empty() || !f.baseline_drift.state.is_empty() {
            let fam = PrecisionFamily {
                kernel: kernel.clone(),
                baseline_steps: f.steps.clone(),
                baseline: f.baseline_drift.clone(),
                baseline_bytes: f.bytes_per_step.map(|b| b.baseline),
                variants: Vec::new(),
            };
            match baselines.get(&kernel) {
                Some((t, _)) if *t >= e.started_at => {}
                _ => {
                    baselines.insert(kernel.clone(), (e.started_at, fam));
                }
            }
        }
        match latest.get(&(kernel.clone(), name.clone())) {
            Some((t, _)) if *t >= e.started_at => {}
            _ => {
                latest.insert((kernel, name), (e.started_at, view));
            }
        }
    }
    let mut out: Vec<PrecisionFamily> = Vec::new();
    for ((kernel, _), (_, view)) in latest {
        if out.last().is_none_or(|f| f.kernel != kernel) {
            let fam = baselines.remove(&kernel).map(|(_, f)| f).unwrap_or(PrecisionFamily {
                kernel: kernel.clone(),
                baseline_steps: Vec::new(),
                baseline: Default::default(),
                baseline_bytes: None,
                variants: Vec::new(),
            });
            out.push(fam);
        }
        if let Some(f) = out.last_mut() {
            f.variants.push(view);
        }
    }
    for f in &mut out {
        // most bytes first: fp32's neighbour bf16, then fp8 and int8
        f.variants.sort_by(|a, b| {
            let bytes = |v: &VariantView| std::cmp::Reverse(v.figures.bytes_per_step.map(|b| b.variant));
            bytes(a).cmp(&bytes(b)).then_with(|| a.variant.cmp(&b.variant))
        });
    }
    out
}

fn sci(x: Option<f64>) -> String {
    match x {
        Some(x) if x.is_nan() => "nan".into(),
        Some(x) => format!("{x:.2e}"),
        None => "-".into(),
    }
}

/// One row per variant (fp32 first): dtype, scales, bytes per step, the
/// predicted speedup, worst errors, the crossing step, the verdict.
pub(crate) fn family_rows(f: &PrecisionFamily) -> Vec<Vec<String>> {
    let mut rows = vec![
        [
            "variant",
            "state",
            "scales",
            "bytes/step",
            "x fewer",
            "predicted",
            "worst o",
            "worst state",
            "vs simulated",
            "crossed at",
            "verdict",
        ]
        .map(String::from)
        .to_vec(),
    ];
    // the fp32 kernel's worst over its curve (the variants' are the harness's worst)
    let last = |xs: &[kidiom_patterns::record::Num]| {
        xs.iter().filter(|n| !n.0.is_nan()).map(|n| n.0).fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
    };
    rows.push(vec![
        format!("{} (baseline)", f.kernel),
        "fp32".into(),
        "-".into(),
        f.baseline_bytes.map(|b| b.to_string()).unwrap_or_else(|| "-".into()),
        "1.00".into(),
        "1.00x".into(),
        sci(last(&f.baseline.o)),
        sci(last(&f.baseline.state)),
        "-".into(),
        "-".into(),
        "-".into(),
    ]);
    for v in &f.variants {
        let g = &v.figures;
        let n = |x: Option<kidiom_patterns::record::Num>| x.map(|n| n.0);
        rows.push(vec![
            v.variant.clone(),
            v.dtype.clone(),
            v.scale.clone(),
            g.bytes_per_step.map(|b| b.variant.to_string()).unwrap_or_else(|| "-".into()),
            g.bytes_per_step.and_then(|b| b.ratio()).map(|r| format!("{r:.2}")).unwrap_or_else(|| "-".into()),
            v.predicted.map(|p| format!("{p:.2}x")).unwrap_or_else(|| "-".into()),
            sci(n(g.vs_float64.o)),
            sci(n(g.vs_float64.state)),
            sci(match (n(g.vs_simulated.o), n(g.vs_simulated.state)) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            }),
            g.crossed_at.map(|s| s.to_string()).unwrap_or_else(|| "-".into()),
            v.verdict.clone(),
        ]);
    }
    rows
}

/// Which error a drift table shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drift {
    /// The output's.
    O,
    /// The state's.
    State,
}

/// The drift curves side by side: one row per step (at most `max_rows`,
/// spread over the run, first and last kept), one column per curve (fp32
/// first), each the relative error against float64.
pub(crate) fn drift_rows(f: &PrecisionFamily, which: Drift, max_rows: usize) -> Vec<Vec<String>> {
    use kidiom_patterns::record::{DriftCurve, Num};
    let pick = |c: &DriftCurve| -> Vec<Num> {
        match which {
            Drift::O => c.o.clone(),
            Drift::State => c.state.clone(),
        }
    };
    let mut series: Vec<(String, Vec<i64>, Vec<Num>)> =
        vec![("fp32".into(), f.baseline_steps.clone(), pick(&f.baseline))];
    for v in &f.variants {
        let label = if v.scale == "none" { v.dtype.clone() } else { format!("{} ({})", v.dtype, v.scale) };
        series.push((label, v.figures.steps.clone(), pick(&v.figures.drift)));
    }
    let mut steps: Vec<i64> = series.iter().flat_map(|(_, s, _)| s.iter().copied()).collect();
    steps.sort_unstable();
    steps.dedup();
    let shown: Vec<i64> = if steps.len() <= max_rows || max_rows < 2 {
        steps
    } else {
        let mut s: Vec<i64> = (0..max_rows).map(|i| steps[i * (steps.len() - 1) / (max_rows - 1)]).collect();
        s.dedup();
        s
    };
    let what = match which {
        Drift::O => "o",
        Drift::State => "state",
    };
    let mut head = vec![format!("step ({what} rel err)")];
    head.extend(series.iter().map(|(l, _, _)| l.clone()));
    let mut rows = vec![head];
    for step in shown {
        let mut row = vec![step.to_string()];
        for (_, s, ys) in &series {
            let y = s.iter().position(|x| *x == step).and_then(|i| ys.get(i)).map(|n| n.0);
            row.push(sci(y));
        }
        rows.push(row);
    }
    rows
}

#[cfg(test)]
mod shared_folder_tests {
    #[test]
    fn the_shared_folder_is_whole_components() {
        let f = |v: &[&str]| super::shared_folder(v.iter().copied());
        assert_eq!(f(&["kernels/kda/decode.py", "kernels/kda_cuda/decode.cu"]), "kernels/");
        assert_eq!(f(&["kernels/kda/decode.py", "kernels/kda/prefill.py"]), "kernels/kda/");
        assert_eq!(f(&["kernels/kda/decode.py", "ops/x.py"]), "");
        assert_eq!(f(&["decode.py"]), "");
        assert_eq!(f(&[]), "");
    }
}
