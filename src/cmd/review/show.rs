//! `kidiom review ID`: one candidate's diff beside the evidence for it
//! (support, examples, commits, the search that chose it, validation).

use std::process::ExitCode;

use anyhow::Result;
use kidiom_patterns::record::{RolesOrigin, SearchOrigin, SiteOrigin, StoredEvidence};
use kidiom_patterns::{Candidate, Catalog, Pattern};

use crate::{ops, output};

pub(super) fn run(cat: &Catalog, id: &str, json: bool) -> Result<ExitCode> {
    let c = ops::candidates::find_one(cat, id)?;
    let pattern = cat.get(&c.pattern_id)?;
    // a state-precision variant: its siblings beside it, fp32 first
    let family = if c.evidence.evidence().is_some_and(|e| e.gate(kidiom_patterns::record::Gate::Precision).is_some()) {
        let all = cat.candidates(None)?;
        crate::view::precision_families(&all).into_iter().find(|f| f.variants.iter().any(|v| v.candidate == c.id))
    } else {
        None
    };
    if json {
        let mut v = serde_json::json!({ "candidate": c, "pattern": pattern });
        if let Some(f) = &family {
            v["state_precision"] = serde_json::to_value(f)?;
        }
        output::json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    for l in header(&c, pattern.as_ref()) {
        output::line(&l)?;
    }
    match &c.provenance.search {
        Some(SearchOrigin::MemoryRoles(r)) => roles(&c, r)?,
        Some(SearchOrigin::Sites(s)) => sites(&c, s)?,
        None => {}
    }
    match review_lines(&c.evidence) {
        // evidence written by `kidiom validate`: the verdict, then one line per gate
        Some(lines) => {
            output::line("  validation:")?;
            for l in lines {
                output::line(&format!("    {l}"))?;
            }
        }
        None if c.evidence.is_empty() => output::line("  validation: none yet")?,
        None => output::line(&format!("  validation: {}", c.evidence.to_value()))?,
    }
    if let Some(f) = &family {
        output::line(&format!("  state precision of {} (this variant and its siblings, fp32 first):", f.kernel))?;
        for l in output::table_lines(&crate::view::family_rows(f)) {
            output::line(&format!("    {l}"))?;
        }
        for which in [crate::view::Drift::O, crate::view::Drift::State] {
            for l in output::table_lines(&crate::view::drift_rows(f, which, 8)) {
                output::line(&format!("    {l}"))?;
            }
        }
    }
    output::line("")?;
    output::raw(&c.diff)?;
    Ok(ExitCode::SUCCESS)
}

/// Status, target, the pattern and the upstream evidence for it.
fn header(c: &Candidate, pattern: Option<&Pattern>) -> Vec<String> {
    let prov = &c.provenance;
    let mut out = vec![
        format!("candidate {}", c.id),
        format!("  status:    {}{}", c.status, c.commit_id.as_deref().map(|x| format!(" ({x})")).unwrap_or_default()),
        format!("  target:    {} (blob {})", c.path, c.base_blob),
        format!("  sites:     {}", c.sites),
    ];
    if let Some(v) = &c.value {
        out.push(format!("  value:     {v}"));
    }
    out.push(format!("  pattern:   {} [{}] {}", c.pattern_id, prov.category().unwrap_or(""), prov.title()));
    // the other patterns that propose this very change (one candidate for all of them)
    for a in prov.also() {
        let support: u64 = a.support.iter().map(|s| s.occurrences).sum();
        out.push(format!("  also:      {} [{}] {} ({support} upstream)", a.pattern, a.category, a.title));
    }
    out.push(format!("  rationale: {}", prov.rationale().unwrap_or("")));
    // Candidates proposed before patterns had a mechanism: the pattern's own.
    let mechanism = prov.mechanism().or(pattern.map(|p| p.mechanism.as_str())).unwrap_or("");
    if !mechanism.is_empty() {
        out.push(format!("  mechanism: {mechanism}"));
    }
    out.push("  evidence upstream:".into());
    for s in prov.support() {
        out.push(format!(
            "    {}: {} occurrences in {} files, {} opportunities",
            output::at_revision(&s.corpus, &s.revision),
            s.occurrences,
            s.files,
            s.opportunities
        ));
    }
    for e in prov.examples() {
        out.push(format!("    e.g. {}:{}:{}  {}", e.corpus, e.path, e.line, e.snippet));
    }
    for k in prov.commits() {
        out.push(format!("    commit {} {}", k.id, k.summary));
    }
    if c.pattern_id == kidiom_validator::MANUAL_PATTERN {
        out.push("    (an edit submitted as a patch with `kidiom validate --patch`, not from the catalog)".into());
    } else if pattern.is_none() {
        out.push(
            "    (the pattern is no longer in the catalog; the evidence above is from when it was proposed)".into(),
        );
    }
    out
}

/// A memory-roles candidate: each site by the role of its tensor.
fn roles(c: &Candidate, r: &RolesOrigin) -> Result<()> {
    output::line(&format!(
        "  per-access hints ({}): {} of {} sites, each by the role of its tensor",
        r.assignment, c.sites, r.all_sites
    ))?;
    let mut rows = vec![["line", "tensor", "role", "value", "why"].map(String::from).to_vec()];
    for s in &r.sites {
        rows.push(vec![s.line.to_string(), s.base.clone(), s.role.clone(), s.value.clone(), s.why.clone()]);
    }
    for l in output::table_lines(&rows) {
        output::line(&format!("    {l}"))?;
    }
    Ok(())
}

/// A per-site search's candidate: the sites, the front, the choice.
fn sites(c: &Candidate, s: &SiteOrigin) -> Result<()> {
    let sm = &s.summary;
    let Some(rows) = crate::view::front_rows(sm, s.point) else { return Ok(()) };
    output::line(&format!(
        "  site search: {} of {} sites rewritten ({}); this candidate is {}",
        c.sites,
        sm.sites.len(),
        s.assignment,
        c.provenance.search_roles().join(", ")
    ))?;
    for (i, site) in sm.sites.iter().enumerate() {
        output::line(&format!("    site {}: line {}  {}", i + 1, site.line, site.text))?;
    }
    output::line(
        "    the front (error at each CPU length under the TF32-faithful interpreter, sm_90 figures; -> this candidate):",
    )?;
    for l in output::table_lines(&rows) {
        output::line(&format!("    {l}"))?;
    }
    output::line(&format!("    chosen: {}", sm.why))
}

/// A candidate's stored evidence for `kidiom review`: the verdict, then each gate.
fn review_lines(evidence: &StoredEvidence) -> Option<Vec<String>> {
    let e = evidence.evidence()?;
    let mut out = vec![format!(
        "{} (validated at {}, {:.1}s, device {})",
        e.verdict.describe(),
        crate::output::utc(e.started_at),
        e.seconds,
        e.device
    )];
    for g in &e.gates {
        out.push(format!("{:<11} {:<7} {:>6.1}s  {}", g.gate.name(), g.status.name(), g.seconds, g.summary));
    }
    for f in &e.verdict.flags {
        out.push(format!("flag: {f}"));
    }
    if let Some(log) = &e.verdict.log {
        out.extend(log.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev().map(|l| format!("log: {l}")));
    }
    Some(out)
}
