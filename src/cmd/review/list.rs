//! `kidiom review` without an id: the candidates, strongest predicted
//! speedup first, with their verdicts.

use std::collections::HashSet;
use std::process::ExitCode;

use anyhow::Result;
use kidiom_patterns::{Candidate, CandidateStatus, Catalog};

use crate::output::{self, Keep};

pub(super) fn run(
    cat: &Catalog,
    status: Option<CandidateStatus>,
    json: bool,
    wide: bool,
    stale: &HashSet<String>,
) -> Result<ExitCode> {
    let cands = cat.candidates(status)?;
    if json {
        output::json(&cands)?;
    } else {
        print_candidates(&cands, wide, stale)?;
    }
    Ok(if cands.is_empty() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// The candidates' table (`kidiom run -v` prints this run's): fitted to
/// [`output::WIDTH`] columns with short ids, or every field in full with
/// `wide`. A verdict given under a contract that has changed since (the ids
/// in `stale`) reads `stale`.
pub(crate) fn print_candidates(cands: &[Candidate], wide: bool, stale: &HashSet<String>) -> Result<()> {
    let rows = rows(cands, wide, stale);
    // the pattern keeps its start, the file its end; every other column stays whole
    let rows = if wide { rows } else { output::fit(&rows, output::WIDTH, &[(1, Keep::Head), (2, Keep::Tail)], 12) };
    output::table(&rows)?;
    if !wide && !cands.is_empty() {
        output::line(
            "verdict -: not validated yet. ids are short: `kidiom review ID` takes one (or its start); --wide: full",
        )?;
    }
    if !stale.is_empty() && cands.iter().any(|c| stale.contains(&c.id)) {
        output::line("stale: judged under a contract that has changed since; `kidiom run` judges it again")?;
    }
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

/// The table: a header, then one row per candidate. Narrow: the short id,
/// the pattern, the file and the verdict with its gate each in a column of
/// its own; `wide` adds the full id, status, sites, creation time and the
/// site search's roles.
fn rows(cands: &[Candidate], wide: bool, stale: &HashSet<String>) -> Vec<Vec<String>> {
    let head: &[&str] = if wide {
        &["id", "pattern", "file", "status", "sites", "created", "verdict", "measured", "predicted", "search"]
    } else {
        &["id", "pattern", "file", "verdict", "measured", "predicted"]
    };
    let mut rows = vec![head.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    // the predicted speedup a reviewer can count on first: discounted by its expected error on
    // published measurements (`kidiom predict --check`), then the speedup itself; candidates
    // without a prediction keep their order after
    let predicted = |c: &Candidate| {
        let p = c.evidence.evidence()?.prediction.as_ref().filter(|p| p.speedup.is_finite())?;
        Some((p.discounted(), p.speedup))
    };
    let mut listed: Vec<&Candidate> = cands.iter().collect();
    listed.sort_by(|a, b| match (predicted(a), predicted(b)) {
        (Some(x), Some(y)) => y.0.total_cmp(&x.0).then(y.1.total_cmp(&x.1)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    // narrow: paths under the folder they all share, named once in the header
    let base = if wide { String::new() } else { crate::view::shared_folder(listed.iter().map(|c| c.path.as_str())) };
    if !base.is_empty() {
        rows[0][2] = format!("file in {base}");
    }
    for c in listed {
        let ev = c.evidence.evidence();
        let verdict = match crate::view::verdict_cell(c) {
            v if stale.contains(&c.id) => format!("stale: {v}"),
            v => v,
        };
        let speed = ev.and_then(|e| e.speed_headline()).unwrap_or_else(|| "-".into());
        let predicted = ev.and_then(|e| e.prediction.as_ref());
        rows.push(if wide {
            vec![
                c.id.clone(),
                c.pattern_id.clone(),
                c.path.clone(),
                c.status.to_string(),
                c.sites.to_string(),
                c.created_at.clone(),
                verdict,
                speed,
                predicted.map_or_else(|| "-".into(), |p| format!("{} {}", p.short(), p.bound.name())),
                c.provenance.search_roles().join(","),
            ]
        } else {
            vec![
                c.short_id().to_string(),
                c.pattern_id.clone(),
                c.path.strip_prefix(base.as_str()).unwrap_or(&c.path).to_string(),
                verdict,
                // the noise floor and the bound are in `kidiom review ID` and --wide
                speed.split(" (noise").next().unwrap_or(&speed).to_string(),
                predicted.map_or_else(|| "-".into(), |p| p.short()),
            ]
        });
    }
    rows
}
