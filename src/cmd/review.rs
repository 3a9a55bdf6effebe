//! `kidiom review`: candidates with their status, and one candidate's diff
//! beside the evidence for it (support, examples, commits, validation).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use kidiom_patterns::{Candidate, CandidateStatus, Catalog};
use kidiom_validator::Evidence;

use crate::cli::CommonArgs;
use crate::config::Config;
use crate::{ops, output};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A candidate id (or a unique prefix); without it, list the candidates.
    id: Option<String>,
    /// Only candidates with this status (proposed, applied, accepted, rejected, stale, validated).
    #[arg(long, value_parser = super::named::<CandidateStatus>)]
    status: Option<CandidateStatus>,
    /// Write the review as a static site into DIR (index.html and a page per candidate; opens from file://).
    #[arg(long, value_name = "DIR")]
    html: Option<PathBuf>,
    /// Open the site in a browser (the candidate's page with an ID); without --html, the site is written to
    /// review/ beside the catalog.
    #[arg(long)]
    open: bool,
    #[command(flatten)]
    common: CommonArgs,
}

/// `--html DIR` / `--open`: the site of the listed candidates (and the one
/// `id` names), then the browser. With no candidate the site is written
/// (its index says there are none) and the exit code is 1, as for a list.
fn html(cat: &Catalog, a: &Args, dir: &Path) -> Result<ExitCode> {
    let mut cands = cat.candidates(a.status)?;
    let one = a.id.as_deref().map(|id| ops::candidates::find_one(cat, id)).transpose()?;
    if let Some(c) = &one
        && !cands.iter().any(|x| x.id == c.id)
    {
        cands.push(c.clone());
    }
    let site = write_site(cat, &cands, dir, a.common.output.json)?;
    if a.open {
        let page = one.as_ref().map(|c| site.page(&c.id)).unwrap_or_else(|| site.index.clone());
        match crate::html::open(&page) {
            crate::html::Opened::With(b) => eprintln!("kidiom: opened {} with {b}", page.display()),
            crate::html::Opened::NoBrowser(why) => {
                eprintln!("kidiom: no browser to open it ({why}); open file://{} yourself", page.display())
            }
        }
    }
    Ok(if cands.is_empty() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// Writes the site of `cands` into `dir` and says where (JSON with `json`).
pub(crate) fn write_site(cat: &Catalog, cands: &[Candidate], dir: &Path, json: bool) -> Result<crate::html::Site> {
    let site = crate::html::write_site(cat, cands, dir)?;
    if json {
        output::json(&serde_json::json!({ "html": &site }))?;
    } else {
        output::line(&format!(
            "wrote the review of {} candidate{} to {}",
            site.pages,
            if site.pages == 1 { "" } else { "s" },
            site.index.display()
        ))?;
    }
    Ok(site)
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let cfg = Config::load()?;
    let cat = a.common.catalog.open_existing(&cfg)?;
    if a.html.is_some() || a.open {
        let dir = match &a.html {
            Some(d) => d.clone(),
            None => a.common.catalog.path(&cfg).parent().unwrap_or(Path::new(".")).join("review"),
        };
        return html(&cat, &a, &dir);
    }
    let Some(id) = &a.id else {
        let cands = cat.candidates(a.status)?;
        if a.common.output.json {
            output::json(&cands)?;
        } else {
            let mut rows = vec![vec![
                "id".into(),
                "status".into(),
                "sites".into(),
                "created".into(),
                "verdict".into(),
                "speed".into(),
                "predicted".into(),
                "search".into(),
            ]];
            // strongest predicted speedup first; candidates without a prediction keep their order after
            let mut listed: Vec<(&kidiom_patterns::Candidate, Option<kidiom_validator::Evidence>)> = cands
                .iter()
                .map(|c| (c, serde_json::from_value::<kidiom_validator::Evidence>(c.evidence.clone()).ok()))
                .collect();
            let predicted = |e: &Option<kidiom_validator::Evidence>| {
                e.as_ref().and_then(|e| e.prediction.as_ref()).map(|p| p.speedup).filter(|s| s.is_finite())
            };
            listed.sort_by(|a, b| match (predicted(&a.1), predicted(&b.1)) {
                (Some(x), Some(y)) => y.total_cmp(&x),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            });
            for (c, ev) in listed {
                let verdict = c.evidence["verdict"]["kind"].as_str().unwrap_or("-").to_string();
                let speed = ev.as_ref().and_then(|e| e.speed_headline()).unwrap_or_else(|| "-".into());
                let prediction = ev
                    .as_ref()
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
                    ops::sitesearch::roles(c).join(","),
                ]);
            }
            output::table(&rows)?;
        }
        return Ok(if cands.is_empty() { ExitCode::from(1) } else { ExitCode::SUCCESS });
    };
    let c = ops::candidates::find_one(&cat, id)?;
    let pattern = cat.get(&c.pattern_id)?;
    if a.common.output.json {
        output::json(&serde_json::json!({ "candidate": c, "pattern": pattern }))?;
        return Ok(ExitCode::SUCCESS);
    }
    output::line(&format!("candidate {}", c.id))?;
    output::line(&format!(
        "  status:    {}{}",
        c.status,
        c.commit_id.as_deref().map(|x| format!(" ({x})")).unwrap_or_default()
    ))?;
    output::line(&format!("  target:    {} (blob {})", c.path, c.base_blob))?;
    output::line(&format!("  sites:     {}", c.sites))?;
    if let Some(v) = &c.value {
        output::line(&format!("  value:     {v}"))?;
    }
    let prov = &c.provenance;
    output::line(&format!(
        "  pattern:   {} [{}] {}",
        c.pattern_id,
        prov["category"].as_str().unwrap_or(""),
        prov["title"].as_str().unwrap_or("")
    ))?;
    output::line(&format!("  rationale: {}", prov["rationale"].as_str().unwrap_or("")))?;
    // Candidates proposed before patterns had a mechanism: the pattern's own.
    let mechanism = prov["mechanism"].as_str().or(pattern.as_ref().map(|p| p.mechanism.as_str())).unwrap_or("");
    if !mechanism.is_empty() {
        output::line(&format!("  mechanism: {mechanism}"))?;
    }
    output::line("  evidence upstream:")?;
    for s in prov["support"].as_array().into_iter().flatten() {
        output::line(&format!(
            "    {}: {} occurrences in {} files, {} opportunities",
            output::at_revision(s["corpus"].as_str().unwrap_or(""), s["revision"].as_str().unwrap_or("")),
            s["occurrences"],
            s["files"],
            s["opportunities"]
        ))?;
    }
    for e in prov["examples"].as_array().into_iter().flatten() {
        output::line(&format!(
            "    e.g. {}:{}:{}  {}",
            e["corpus"].as_str().unwrap_or(""),
            e["path"].as_str().unwrap_or(""),
            e["line"],
            e["snippet"].as_str().unwrap_or("")
        ))?;
    }
    for k in prov["commits"].as_array().into_iter().flatten() {
        output::line(&format!(
            "    commit {} {}",
            k["id"].as_str().unwrap_or(""),
            k["summary"].as_str().unwrap_or("")
        ))?;
    }
    if c.pattern_id == kidiom_validator::MANUAL_PATTERN {
        output::line("    (an edit submitted as a patch with `kidiom validate --patch`, not from the catalog)")?;
    } else if pattern.is_none() {
        output::line("    (the pattern is no longer in the catalog; the evidence above is from when it was proposed)")?;
    }
    let search = &prov["search"];
    if search["kind"] == "memory-roles" {
        output::line(&format!(
            "  per-access hints ({}): {} of {} sites, each by the role of its tensor",
            search["assignment"].as_str().unwrap_or(""),
            c.sites,
            search["all_sites"]
        ))?;
        let mut rows = vec![vec!["line".into(), "tensor".into(), "role".into(), "value".into(), "why".into()]];
        for site in search["sites"].as_array().into_iter().flatten() {
            let s = |k: &str| site[k].as_str().unwrap_or("").to_string();
            rows.push(vec![site["line"].to_string(), s("base"), s("role"), s("value"), s("why")]);
        }
        for l in output::table_lines(&rows) {
            output::line(&format!("    {l}"))?;
        }
    }
    if let Some(rows) = ops::sitesearch::front_rows(&search["summary"], search["point"].as_u64().map(|i| i as usize)) {
        let sm = &search["summary"];
        output::line(&format!(
            "  site search: {} of {} sites rewritten ({}); this candidate is {}",
            c.sites,
            sm["sites"].as_array().map(Vec::len).unwrap_or(0),
            search["assignment"].as_str().unwrap_or(""),
            ops::sitesearch::roles(&c).join(", ")
        ))?;
        for (i, site) in sm["sites"].as_array().into_iter().flatten().enumerate() {
            output::line(&format!(
                "    site {}: line {}  {}",
                i + 1,
                site["line"],
                site["text"].as_str().unwrap_or("")
            ))?;
        }
        output::line(
            "    the front (error at each CPU length under the TF32-faithful interpreter, sm_90 figures; -> this candidate):",
        )?;
        for l in output::table_lines(&rows) {
            output::line(&format!("    {l}"))?;
        }
        output::line(&format!("    chosen: {}", sm["why"].as_str().unwrap_or("")))?;
    }
    let ev = if c.evidence.as_object().is_some_and(|o| o.is_empty()) {
        "none yet".to_string()
    } else {
        c.evidence.to_string()
    };
    match review_lines(&c.evidence) {
        // evidence written by `kidiom validate`: the verdict, then one line per gate
        Some(lines) => {
            output::line("  validation:")?;
            for l in lines {
                output::line(&format!("    {l}"))?;
            }
        }
        None => output::line(&format!("  validation: {ev}"))?,
    }
    output::line("")?;
    output::raw(&c.diff)?;
    Ok(ExitCode::SUCCESS)
}

/// A candidate's stored evidence for `kidiom review`: the verdict, then each gate.
fn review_lines(evidence: &serde_json::Value) -> Option<Vec<String>> {
    let e: Evidence = serde_json::from_value(evidence.clone()).ok()?;
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
