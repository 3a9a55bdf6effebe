//! `kidiom review` without an id: the candidates, strongest predicted
//! speedup first, with their verdicts.

use std::process::ExitCode;

use anyhow::Result;
use kidiom_patterns::{Candidate, CandidateStatus, Catalog};

use crate::output;

pub(super) fn run(cat: &Catalog, status: Option<CandidateStatus>, json: bool) -> Result<ExitCode> {
    let cands = cat.candidates(status)?;
    if json {
        output::json(&cands)?;
    } else {
        output::table(&rows(&cands))?;
        print_precision(&cands)?;
    }
    Ok(if cands.is_empty() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// The candidates' table (`kidiom run -v` prints this run's).
pub(crate) fn print_candidates(cands: &[Candidate]) -> Result<()> {
    output::table(&rows(cands))?;
    print_precision(cands)
}

/// The state-precision variants side by side, per kernel: what each costs
/// in error and saves in state bytes, then the drift of the output and of
/// the state by decode step (fp32 first).
pub(crate) fn print_precision(cands: &[Candidate]) -> Result<()> {
    for f in crate::view::precision_families(cands) {
        output::line("")?;
        output::line(&format!(
            "state precision of {} (errors against float64; predicted from state bytes):",
            f.kernel
        ))?;
        for l in output::table_lines(&crate::view::family_rows(&f)) {
            output::line(&format!("  {l}"))?;
        }
        for which in [crate::view::Drift::O, crate::view::Drift::State] {
            for l in output::table_lines(&crate::view::drift_rows(&f, which, 8)) {
                output::line(&format!("  {l}"))?;
            }
        }
    }
    Ok(())
}

/// The table: a header, then one row per candidate.
fn rows(cands: &[Candidate]) -> Vec<Vec<String>> {
    let mut rows = vec![
        ["id", "status", "sites", "created", "verdict", "speed", "predicted", "search"].map(String::from).to_vec(),
    ];
    // strongest predicted speedup first; candidates without a prediction keep their order after
    let predicted =
        |c: &Candidate| c.evidence.evidence()?.prediction.as_ref().map(|p| p.speedup).filter(|s| s.is_finite());
    let mut listed: Vec<&Candidate> = cands.iter().collect();
    listed.sort_by(|a, b| match (predicted(a), predicted(b)) {
        (Some(x), Some(y)) => y.total_cmp(&x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    for c in listed {
        let ev = c.evidence.evidence();
        let verdict = c.evidence.verdict().map(|v| v.kind.name()).unwrap_or("-").to_string();
        let speed = ev.and_then(|e| e.speed_headline()).unwrap_or_else(|| "-".into());
        let prediction = ev
            .and_then(|e| e.prediction.as_ref())
            .map(|p| format!("{:.2}x {}", p.speedup, p.bound.name()))
            .unwrap_or_else(|| "-".into());
        rows.push(vec![
            c.id.clone(),
            c.status.to_string(),
            c.sites.to_string(),
            c.created_at.clone(),
            verdict,
            speed,
            prediction,
            c.provenance.search_roles().join(","),
        ]);
    }
    rows
}
