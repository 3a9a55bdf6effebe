//! `kidiom run`: the whole loop on the defaults of kidiom.toml (`ops::run`):
//! mine, then a catalog summary, then apply on kernels/ (dry run:
//! candidates only), validation of its pending candidates, and a review
//! summary.

use std::process::ExitCode;

use anyhow::Result;

use crate::cmd::args::CommonArgs;
use crate::config::Config;
use crate::ops::run::Event;
use crate::{ops, output};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Patterns to show in the summary.
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Stop after mining: no apply, no validation.
    #[arg(long)]
    no_validate: bool,
    /// Where validated kernels run: auto, cpu or cuda.
    #[arg(long, default_value = "auto", value_parser = super::named::<kidiom_validator::Device>)]
    device: kidiom_validator::Device,
    /// Where mining's extraction and validation's harness calls run: local (here), or ray / ray://HOST:PORT
    /// (tasks on a Ray cluster; see docs/RAY.md).
    #[arg(long, value_name = "EXECUTOR", default_value = "local", value_parser = super::executor)]
    executor: kidiom_validator::Executor,
    /// Time limit of one candidate's validation, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    timeout: u64,
    /// Do not reject grossly worse static figures as "predicted slower" (limits: kidiom.toml [validate.static_limits]).
    #[arg(long)]
    allow_static_regression: bool,
    /// Rewrite every site of a precision pattern with one value instead of searching sites and values
    /// (kidiom.toml [search]).
    #[arg(long)]
    no_search: bool,
    /// Rewrite and validate the kernels under DIR (repeatable; each kernel with its manifest beside it,
    /// see `kidiom init`) instead of kidiom.toml's [run] targets or kernels/.
    #[arg(long = "targets", value_name = "DIR", num_args = 1.., value_delimiter = ',')]
    targets: Vec<std::path::PathBuf>,
    /// Also judge every state-precision variant that has no verdict for its sources yet (about a
    /// minute each on a CPU; kidiom.toml [run] variants = true does it on every run). Without it, only
    /// those whose sources changed since their verdict are judged.
    #[arg(long)]
    variants: bool,
    /// At the end, write the review as a static site into DIR (as `kidiom review --html DIR`).
    #[arg(long, value_name = "DIR")]
    html: Option<std::path::PathBuf>,
    /// The full report: every corpus's table, the top patterns, the verdict table and its evidence
    /// (by default, a short summary; `kidiom review` shows the same table later).
    #[arg(short, long)]
    verbose: bool,
    /// With -v, the verdict table with every field in full (full ids); otherwise fitted to 120 columns.
    #[arg(long)]
    wide: bool,
    #[command(flatten)]
    common: CommonArgs,
}

pub(crate) fn run(args: Args) -> Result<ExitCode> {
    // a folder with no kidiom.toml is a project on kidiom's defaults, written down for the user
    let path = std::path::Path::new("kidiom.toml");
    if !path.exists() {
        let targets: Vec<String> = if !args.targets.is_empty() {
            args.targets.iter().map(|t| t.display().to_string()).collect()
        } else if std::path::Path::new("kernels").is_dir() {
            vec!["kernels".into()]
        } else {
            vec![".".into()]
        };
        if Config::write_default(path, &targets)? && !args.common.output.quiet {
            eprintln!(
                "kidiom: wrote kidiom.toml (there was none here): kidiom's own corpora (kidiom:fla, kidiom:deepgemm, \
                 kidiom:sglang, kidiom:mooncake; from the user cache, else the snapshot kidiom ships), [run] targets {}",
                targets.join(", ")
            );
        }
    }
    let cfg = Config::load()?;
    let mut catalog = args.common.catalog.open(&cfg)?;
    let progress = !args.common.output.quiet && !args.common.output.json;
    let opts = ops::run::Options {
        top: args.top,
        no_validate: args.no_validate,
        device: args.device,
        executor: args.executor.clone(),
        timeout: std::time::Duration::from_secs(args.timeout.max(1)),
        allow_static_regression: args.allow_static_regression,
        no_search: args.no_search,
        progress_bars: progress,
        targets: if args.targets.is_empty() {
            cfg.targets()
        } else {
            args.targets.iter().map(|t| std::path::absolute(t).unwrap_or_else(|_| t.clone())).collect()
        },
        variants: args.variants || cfg.run.variants,
    };
    let bars = crate::progress::Bars::new();
    let tell = |e: Event| {
        if !progress {
            return;
        }
        match e {
            Event::Note(m) => bars.line(&format!("kidiom: {m}")),
            Event::Searching(done, planned) => bars.searching(done, planned),
            // the front is a table of its own: shown with -v (and by `kidiom review ID`)
            Event::Searched(s) if args.verbose => {
                let _ = super::apply::print_search(s);
            }
            Event::Searched(s) => {
                let _ = super::apply::print_search_header(s);
                eprintln!("  chosen: {}", s.why);
            }
            Event::Validating(i, n, c, ev) => bars.validating(i, n, c, ev),
        }
    };
    let report = ops::run::run(&cfg, &mut catalog, &opts, &tell)?;
    let html = match &args.html {
        Some(dir) => Some(crate::html::write_site(&catalog, &catalog.candidates(None)?, dir)?),
        None => None,
    };
    let shown = Shown { report: &report, html };
    if args.common.output.json {
        output::json(&shown)?;
    } else {
        let ours: std::collections::HashSet<&str> =
            report.apply.iter().flat_map(|a| &a.candidates).map(|c| c.id.as_str()).collect();
        // as stored after validation: the verdicts of this run and of earlier ones
        let stored: Vec<kidiom_patterns::Candidate> =
            catalog.candidates(None)?.into_iter().filter(|c| ours.contains(c.id.as_str())).collect();
        if args.verbose {
            print_full(&shown, args.wide)?;
            if !stored.is_empty() {
                output::line("")?;
                output::line("this run's candidates (as `kidiom review` lists them):")?;
                super::review::print_candidates(&stored, args.wide, &Default::default())?;
            }
            output::line("")?;
        }
        for l in summary_lines(&shown, &stored, &catalog.stats()?) {
            output::line(&l)?;
        }
    }
    // Some corpora may be unreachable on this machine; the loop still ran on the rest.
    let mined = report.mine.corpora.iter().filter(|c| c.error.is_none()).count();
    Ok(if mined == 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// `best by predicted speedup (roofline from CPU work profiles, H200; not measured): a 1.45x, b 1.02x`:
/// the candidates still in the running (accepted or needs-gpu), strongest first.
fn best_predicted(v: &ops::validate::Report) -> Option<String> {
    let mut best: Vec<(&str, f64, &str)> = v
        .candidates
        .iter()
        .filter(|e| {
            matches!(e.verdict.kind, kidiom_validator::VerdictKind::Accepted | kidiom_validator::VerdictKind::NeedsGpu)
        })
        .filter_map(|e| e.prediction.as_ref().map(|p| (e.candidate.as_str(), p.speedup, p.device.as_str())))
        .filter(|(_, s, _)| s.is_finite())
        .collect();
    best.sort_by(|a, b| b.1.total_cmp(&a.1));
    let device = best.first()?.2;
    let named: Vec<String> = best.iter().take(5).map(|(id, s, _)| format!("{id} {s:.2}x")).collect();
    Some(format!(
        "best by predicted speedup (a roofline over work counted on this CPU, {device}; not measured): {}",
        named.join(", ")
    ))
}

/// What `kidiom run` shows: the loop's report and the review site the
/// front end wrote from it (`--html`); also `kidiom run --json`.
#[derive(serde::Serialize)]
struct Shown<'a> {
    #[serde(flatten)]
    report: &'a ops::run::Report,
    #[serde(skip_serializing_if = "Option::is_none")]
    html: Option<crate::html::Site>,
}

/// The run's full report (`-v`): mining, history, the top patterns, apply, the verdict table, the site.
fn print_full(shown: &Shown, wide: bool) -> Result<()> {
    let r = shown.report;
    super::mine::print_report(&r.mine, false)?;
    if let Some(h) = &r.history {
        output::line("")?;
        super::mine::print_history_report(h, false)?;
    }
    output::line("")?;
    output::line(&format!("top {} patterns:", r.top.len()))?;
    super::catalog::print_list(&r.top, false)?;
    if let Some(a) = &r.apply {
        let n = a.candidates.len();
        output::line("")?;
        output::line(&format!("apply (dry run) on {}: {n} candidate{}", r.targets, if n == 1 { "" } else { "s" }))?;
        if let Some(line) = a.held_back.line() {
            output::line(&line)?;
        }
    }
    if let Some(v) = &r.validate {
        output::line("")?;
        output::line("review summary (kidiom review ID shows a diff beside its evidence):")?;
        super::validate::print_report(v, wide)?;
    }
    if let Some(v) = &r.validate
        && let Some(line) = best_predicted(v)
    {
        output::line("")?;
        output::line(&line)?;
    }
    if !r.verdicts.is_empty() {
        let parts: Vec<String> = r
            .verdicts
            .iter()
            .map(|(k, n)| {
                if k == "not validated" {
                    format!("{n} {k} (a search's alternatives, a launch option's further values: `kidiom validate ID`)")
                } else {
                    format!("{n} {k}")
                }
            })
            .collect();
        output::line("")?;
        output::line(&format!("verdicts of this run's candidates: {} (see `kidiom review`)", parts.join(", ")))?;
    }
    if let Some(site) = &shown.html {
        output::line("")?;
        output::line(&format!("review site: {} ({} candidates)", site.index.display(), site.pages))?;
    }
    Ok(())
}

/// Kernels shown with their best candidate, and candidates named per list.
const SHOWN: usize = 6;

/// The short summary a run ends with (about 30 lines at most): one line
/// per corpus, the catalog, each kernel's best candidate with its numbers,
/// the accepted ones, what waits for a GPU with the command to run there,
/// and where the review is. `ours` are this run's candidates as stored.
fn summary_lines(
    shown: &Shown,
    ours: &[kidiom_patterns::Candidate],
    stats: &kidiom_patterns::CatalogStats,
) -> Vec<String> {
    let r = shown.report;
    let mut out = vec!["mined:".to_string()];
    out.extend(r.mine.corpora.iter().map(|c| format!("  {}", corpus_line(r, c))));
    let kind = |k: &str| stats.by_kind.get(k).copied().unwrap_or(0);
    let merged = match stats.merged {
        0 => String::new(),
        n => format!("; {n} more merged into a pattern making the same rewrite"),
    };
    out.push(format!("catalog: {} usage and {} edit patterns{merged}", kind("usage"), kind("edit")));
    let Some(apply) = &r.apply else {
        out.push(format!(
            "top patterns: {}",
            r.top.iter().take(SHOWN).map(|p| p.id.as_str()).collect::<Vec<_>>().join(", ")
        ));
        out.push("(mining only: no apply, no validation; `kidiom run` without --no-validate goes on)".into());
        return out;
    };
    let counts: Vec<String> = r.verdicts.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let counts = if counts.is_empty() { String::new() } else { format!(" ({})", counts.join(", ")) };
    out.push(format!("candidates on {}: {}{counts}", r.targets, apply.candidates.len()));
    for (kernel, why) in &apply.contracts_failed {
        out.push(format!("  no candidates for {kernel}: {why}"));
    }
    if let Some(line) = apply.held_back.line() {
        let parts: Vec<String> = line.split("; ").map(String::from).collect();
        let (head, rest) = parts.split_first().map_or(("", &[][..]), |(h, r)| (h.as_str(), r));
        // `not proposed: N would ...`, one reason a piece, wrapped to the width
        let (label, first) = head.split_once(": ").map_or(("", head), |(l, f)| (l, f));
        let items: Vec<String> = std::iter::once(first.to_string()).chain(rest.iter().cloned()).collect();
        out.extend(output::wrap(&format!("  {label}: "), &items, ";", output::WIDTH));
    }
    out.extend(not_validated_line(ours));
    out.extend(best_per_kernel(ours));
    out.extend(variant_lines(&r.variants));
    let accepted: Vec<_> = ours.iter().filter(|c| verdict_of(c) == Some(VerdictKind::Accepted)).collect();
    if accepted.is_empty() {
        out.push("accepted: none".into());
    } else {
        // short id and pattern, wrapped to the width (`kidiom review ID` takes the short id)
        let mut named: Vec<String> =
            accepted.iter().take(SHOWN).map(|c| format!("{} {}", c.short_id(), c.pattern_id)).collect();
        if accepted.len() > SHOWN {
            named.push(format!("and {} more", accepted.len() - SHOWN));
        }
        out.extend(output::wrap("accepted: ", &named, ",", output::WIDTH));
    }
    let waiting: Vec<_> = ours.iter().filter(|c| verdict_of(c) == Some(VerdictKind::NeedsGpu)).collect();
    if !waiting.is_empty() {
        out.push(format!(
            "waiting for a GPU: {} candidate{}",
            waiting.len(),
            if waiting.len() == 1 { "" } else { "s" }
        ));
        out.push(
            "  on a GPU machine run: scripts/device-check.sh (or `kidiom validate --pending --device cuda`)".into(),
        );
    }
    out.push(match &shown.html {
        Some(site) => format!(
            "review: {} ({} page{}); `kidiom review ID` shows a diff beside its evidence",
            site.index.display(),
            site.pages,
            if site.pages == 1 { "" } else { "s" }
        ),
        None => {
            "review: `kidiom review` (the table), `kidiom review ID` (a diff and its evidence), `--html DIR` (a site)"
                .into()
        }
    });
    out.push("the full table and evidence: `kidiom run -v` or `kidiom review`".into());
    out.push(phases_line(&r.phases));
    out
}

/// Why this run's candidates without a verdict have none, one line: the
/// loop validates a site search's choice and the first upstream value of a
/// launch option; the others wait for `kidiom validate ID`.
fn not_validated_line(ours: &[kidiom_patterns::Candidate]) -> Option<String> {
    let waiting: Vec<_> = ours.iter().filter(|c| verdict_of(c).is_none()).collect();
    if waiting.is_empty() {
        return None;
    }
    let front = waiting.iter().filter(|c| !c.provenance.search_roles().is_empty()).count();
    let values = waiting.iter().filter(|c| c.provenance.search_roles().is_empty() && c.value.is_some()).count();
    let other = waiting.len() - front - values;
    let mut parts = Vec::new();
    if values > 0 {
        parts.push(format!("{values} further upstream values of an option"));
    }
    if front > 0 {
        parts.push(format!("{front} alternatives on a site search's front"));
    }
    if other > 0 {
        parts.push(format!("{other} with validation off or stopped"));
    }
    Some(format!("  not validated: {} (`kidiom validate ID` judges one)", parts.join(", ")))
}

/// The state-precision variants, two lines at most: their verdicts by kind
/// (judged by this run or an earlier one; a verdict holds while the
/// variant's sources are unchanged), and how to judge those not judged yet.
fn variant_lines(variants: &[ops::run::VariantStatus]) -> Vec<String> {
    if variants.is_empty() {
        return Vec::new();
    }
    let mut by: std::collections::BTreeMap<&str, usize> = Default::default();
    for v in variants {
        *by.entry(v.verdict.as_deref().unwrap_or("not judged yet")).or_default() += 1;
    }
    let counts: Vec<String> = by.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let judged = variants.iter().filter(|v| v.judged).count();
    let now = match judged {
        0 => String::new(),
        n => format!(" ({n} judged by this run: new or changed sources)"),
    };
    let mut out = vec![format!("state-precision variants: {} ({}){now}", variants.len(), counts.join(", "))];
    let waiting: Vec<&ops::run::VariantStatus> = variants.iter().filter(|v| v.verdict.is_none()).collect();
    if !waiting.is_empty() {
        let secs: u64 = waiting.iter().map(|v| v.cpu_seconds).sum();
        out.push(format!(
            "  not judged yet: `kidiom validate --kernel all` (about {} min on a CPU) or `kidiom run --variants`",
            secs.div_ceil(60)
        ));
    }
    out
}

/// Where the run's time went, one line: a newcomer sees what was slow.
fn phases_line(p: &crate::ops::run::Phases) -> String {
    let parts = [("mine", p.mine), ("history", p.history), ("snapshot", p.snapshot), ("apply", p.apply - p.search)];
    let mut shown: Vec<String> = parts.iter().filter(|(_, s)| *s >= 0.5).map(|(n, s)| format!("{n} {s:.0}s")).collect();
    if p.search >= 0.5 {
        shown.push(format!("site search {:.0}s", p.search));
    }
    if p.validate >= 0.5 {
        shown.push(format!("validation {:.0}s", p.validate));
    }
    format!("time: {:.0}s ({})", p.total, shown.join(", "))
}

use kidiom_validator::VerdictKind;

fn verdict_of(c: &kidiom_patterns::Candidate) -> Option<VerdictKind> {
    c.evidence.verdict().map(|v| v.kind)
}

/// `fla (git bc3b101a2b3c): 1234 files, 56 kernels; history 512 commits, 1890 edits`, or why not.
fn corpus_line(r: &ops::run::Report, c: &ops::mine::usage::CorpusReport) -> String {
    let snap = r.snapshot.iter().find(|f| f.corpus == c.name);
    let from_snapshot = snap.map(|f| match &f.skipped {
        Some(why) => format!("; not imported: {why}"),
        None => format!("; from the snapshot: {} usage, {} edit patterns", f.usage, f.edit),
    });
    let history = r.history.as_ref().and_then(|h| h.corpora.iter().find(|h| h.name == c.name));
    let history = match (history, &c.error) {
        // an unreachable corpus has no history to read: saying so again is noise
        (Some(_), Some(_)) | (None, _) => String::new(),
        (Some(h), None) => match &h.error {
            Some(_) => "; history not read".to_string(),
            None => format!("; history {} commits, {} edits", h.commits, h.edits),
        },
    };
    let tail = format!("{history}{}", from_snapshot.unwrap_or_default());
    match &c.error {
        Some(e) => {
            // the reason gets what the summary's width leaves (the whole of it is on stderr and in -v)
            let room = output::WIDTH.saturating_sub(2 + c.name.len() + ": not reachable ()".len() + tail.len());
            format!("{}: not reachable ({}){tail}", c.name, clip(e, room.max(20)))
        }
        None => {
            let rev: String = c.revision.chars().take(12).collect();
            let what = if rev.is_empty() { c.kind.clone() } else { format!("{} {rev}", c.kind) };
            format!("{} ({what}): {} files, {} kernels{tail}", c.name, c.files, c.kernels)
        }
    }
}

/// Each kernel's best candidate: accepted first, then waiting for a GPU,
/// then not judged, by predicted speedup, a site search's choice before
/// other candidates predicted alike; with its numbers.
fn best_per_kernel(ours: &[kidiom_patterns::Candidate]) -> Vec<String> {
    let rank = |c: &kidiom_patterns::Candidate| -> (u8, f64, bool) {
        let tier = match verdict_of(c) {
            Some(VerdictKind::Accepted) => 0,
            Some(VerdictKind::NeedsGpu) => 1,
            None | Some(VerdictKind::Unverified) => 2,
            Some(VerdictKind::Error) => 3,
            Some(VerdictKind::Rejected) => 4,
        };
        let predicted = c.evidence.evidence().and_then(|e| e.prediction.as_ref()).map_or(0.0, |p| p.speedup);
        let chosen = c.provenance.search_roles().iter().any(|r| r == "chosen");
        (tier, -if predicted.is_finite() { predicted } else { 0.0 }, !chosen)
    };
    let mut by_path: std::collections::BTreeMap<&str, &kidiom_patterns::Candidate> = Default::default();
    for c in ours {
        let e = by_path.entry(c.path.as_str()).or_insert(c);
        if rank(c).partial_cmp(&rank(e)) == Some(std::cmp::Ordering::Less) {
            *e = c;
        }
    }
    if by_path.is_empty() {
        return Vec::new();
    }
    let base = crate::view::shared_folder(by_path.keys().copied());
    let mut out =
        vec![if base.is_empty() { "best per kernel:".to_string() } else { format!("best per kernel (in {base}):") }];
    let mut rows = Vec::new();
    for (path, c) in by_path.iter().take(SHOWN) {
        let mut nums = vec![verdict_of(c).map_or("not validated".to_string(), |v| v.to_string())];
        if let Some(e) = c.evidence.evidence() {
            nums.extend(e.speed_headline());
            nums.extend(
                e.prediction.as_ref().filter(|p| p.speedup.is_finite()).map(|p| format!("predicted {}", p.short())),
            );
        }
        let also = c.provenance.also().len();
        let pattern = if also > 0 { format!("{} (+{also} same change)", c.pattern_id) } else { c.pattern_id.clone() };
        let path = path.strip_prefix(base.as_str()).unwrap_or(path);
        rows.push(vec![path.to_string(), c.short_id().to_string(), pattern, nums.join(", ")]);
    }
    // the file keeps its end and the pattern its start; the id and the numbers stay whole
    let rows = output::fit(&rows, output::WIDTH - 2, &[(0, output::Keep::Tail), (2, output::Keep::Head)], 16);
    out.extend(output::table_lines(&rows).into_iter().map(|l| format!("  {l}")));
    if by_path.len() > SHOWN {
        out.push(format!("  and {} more files", by_path.len() - SHOWN));
    }
    out
}

/// `s` cut to `n` characters.
fn clip(s: &str, n: usize) -> String {
    output::cut(s.lines().next().unwrap_or(""), n, output::Keep::Head)
}
