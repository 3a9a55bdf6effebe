//! `kidiom review`: candidates with their status, and one candidate's diff
//! beside the evidence for it (support, examples, commits, validation).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use kidiom_patterns::{Candidate, CandidateStatus, Catalog};

use crate::cmd::args::CommonArgs;
use crate::config::Config;
use crate::{ops, output};

mod list;
pub(crate) use list::print_candidates;
mod show;

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
    /// Every field in full (full candidate ids, status, sites, creation time); the table is otherwise fitted to
    /// 120 columns.
    #[arg(long)]
    wide: bool,
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
    match &a.id {
        None => {
            let digests = crate::ops::candidates::contract_digests(&crate::ops::root()?, &cfg.targets());
            let stale = cat
                .candidates(a.status)?
                .iter()
                .filter(|c| crate::ops::candidates::contract_changed(c, &digests))
                .map(|c| c.id.clone())
                .collect();
            list::run(&cat, a.status, a.common.output.json, a.wide, &stale)
        }
        Some(id) => show::run(&cat, id, a.common.output.json),
    }
}
