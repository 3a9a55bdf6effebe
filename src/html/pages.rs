//! The two kinds of page, as askama templates (`templates/html/`), and the
//! views they print: every field is a plain string (escaped by askama) or a
//! [`Markup`] our own code made.

use std::collections::BTreeMap;

use askama::Template;
use kidiom_patterns::record::{CompileFigures, Provenance, SearchOrigin, StoredEvidence};
use kidiom_patterns::{Candidate, CorpusRow, Pattern};
use kidiom_validator::{Evidence, Gate, GateRecord};
use serde_json::Value;

use super::diff::{self, DiffFile};
use super::evidence::{self as ev, Cell};
use super::highlight::{self, Code};
use super::links;
use super::markup::{Markup, escape};
use super::plot;

/// One row of the index.
pub(crate) struct IndexRow {
    pub(crate) id: String,
    pub(crate) href: String,
    pub(crate) verdict: String,
    pub(crate) verdict_class: &'static str,
    pub(crate) gate: String,
    pub(crate) reason: String,
    pub(crate) status: String,
    pub(crate) pattern: String,
    pub(crate) title: String,
    pub(crate) category: String,
    pub(crate) path: String,
    /// The path with a line-break opportunity after each `/`.
    pub(crate) path_breakable: Markup,
    pub(crate) kernel: String,
    pub(crate) sites: u64,
    pub(crate) roles: String,
    pub(crate) instructions: Cell,
    pub(crate) spills: Cell,
    pub(crate) registers: Cell,
    pub(crate) tensor: Cell,
    pub(crate) worst: Cell,
    pub(crate) curve_end: Cell,
    pub(crate) speed: Cell,
    pub(crate) predicted: Cell,
}

/// A kernel's state-precision variants side by side: a table (fp32 first)
/// and the drift of the output and of the state by step, every variant on one chart.
pub(crate) struct FamilyView {
    pub(crate) kernel: String,
    pub(crate) head: Vec<String>,
    pub(crate) rows: Vec<Vec<String>>,
    pub(crate) plots: Vec<PlotView>,
}

pub(crate) fn family_view(f: &crate::view::PrecisionFamily) -> FamilyView {
    let mut rows = crate::view::family_rows(f);
    let head = if rows.is_empty() { Vec::new() } else { rows.remove(0) };
    let series = |name: &str, steps: &[i64], ys: &[kidiom_patterns::record::Num]| plot::Series {
        name: name.into(),
        points: steps.iter().zip(ys).map(|(s, y)| (*s as f64, y.0)).collect(),
    };
    let mut plots = Vec::new();
    for which in ["o", "state"] {
        let pick = |c: &kidiom_patterns::record::DriftCurve| if which == "o" { c.o.clone() } else { c.state.clone() };
        let mut all = vec![series("fp32", &f.baseline_steps, &pick(&f.baseline))];
        for v in &f.variants {
            let label = if v.scale == "none" { v.dtype.clone() } else { format!("{} ({})", v.dtype, v.scale) };
            all.push(series(&label, &v.figures.steps, &pick(&v.figures.drift)));
        }
        if let Some(svg) = plot::log_curve(&all, "decode step", &format!("{which} rel err")) {
            plots.push(PlotView {
                kind: "drift",
                caption: format!("{which}: error against float64 by decode step, every state precision (log scales)"),
                svg,
            });
        }
    }
    FamilyView { kernel: f.kernel.clone(), head, rows, plots }
}

/// A facet of the index (verdict, kernel file, category) and its count.
pub(crate) struct Facet {
    pub(crate) value: String,
    pub(crate) count: usize,
    /// The CSS class of a verdict facet.
    pub(crate) class: &'static str,
}

#[derive(Template)]
#[template(path = "html/index.html")]
pub(crate) struct IndexPage {
    pub(crate) catalog: String,
    pub(crate) rows: Vec<IndexRow>,
    /// The state-precision variants, per kernel, side by side.
    pub(crate) precision: Vec<FamilyView>,
    pub(crate) verdicts: Vec<Facet>,
    pub(crate) kernels: Vec<Facet>,
    pub(crate) categories: Vec<Facet>,
}

/// The CSS class of a verdict (a fixed set: never text from the catalog).
pub(crate) fn verdict_class(verdict: &str) -> &'static str {
    match verdict {
        "accepted" => "accepted",
        "rejected" => "rejected",
        "needs-gpu" => "needs-gpu",
        "unverified" => "unverified",
        "error" => "error",
        _ => "none",
    }
}

fn category(c: &Candidate, e: Option<&Evidence>) -> String {
    c.provenance
        .category()
        .map(str::to_string)
        .or_else(|| e.and_then(|e| e.category.clone()))
        .unwrap_or_else(|| "-".into())
}

pub(crate) fn index_row(c: &Candidate, href: String) -> IndexRow {
    let read = &c.evidence;
    let e = read.evidence();
    let verdict = ev::verdict(read);
    let st = ev::static_figures(e);
    IndexRow {
        id: c.id.clone(),
        href,
        verdict_class: verdict_class(&verdict),
        verdict,
        gate: e.and_then(ev::deciding_gate).map(|g| g.name().to_string()).unwrap_or_else(|| "-".into()),
        reason: match read {
            StoredEvidence::Evidence(e) => e.verdict.reason.clone(),
            StoredEvidence::Unreadable { why, .. } => format!("not the validator's record: {why}"),
            StoredEvidence::Empty => String::new(),
        },
        status: c.status.to_string(),
        pattern: patterns_of(c),
        title: c.provenance.title().to_string(),
        category: category(c, e),
        path: c.path.clone(),
        path_breakable: Markup::trusted(c.path.split('/').map(escape).collect::<Vec<_>>().join("/<wbr>")),
        kernel: e.and_then(|e| e.kernel.clone()).unwrap_or_default(),
        sites: c.sites,
        roles: c.provenance.search_roles().join(", "),
        instructions: st.instructions,
        spills: st.spills,
        registers: st.registers,
        tensor: st.tensor,
        worst: ev::worst_rel_l2(e),
        curve_end: ev::curve_end(e),
        speed: ev::speed(e),
        predicted: ev::predicted(e),
    }
}

/// Counts of each value, most frequent first.
pub(crate) fn facets<'a>(values: impl Iterator<Item = &'a str>) -> Vec<Facet> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for v in values {
        *counts.entry(v).or_default() += 1;
    }
    let mut out: Vec<Facet> =
        counts.into_iter().map(|(v, n)| Facet { value: v.to_string(), count: n, class: verdict_class(v) }).collect();
    out.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.value.cmp(&b.value)));
    out
}

/// A chart with what it shows.
pub(crate) struct PlotView {
    /// `curve`, `mix`, `speed`, `values`, `front` (the page's `data-plot`).
    pub(crate) kind: &'static str,
    pub(crate) caption: String,
    pub(crate) svg: Markup,
}

/// A figure before and after (the static gate's resources, curve points).
pub(crate) struct FigureRow {
    pub(crate) name: String,
    pub(crate) before: String,
    pub(crate) after: String,
    pub(crate) change: String,
}

/// One gate's record.
pub(crate) struct GateView {
    pub(crate) name: &'static str,
    pub(crate) status: &'static str,
    pub(crate) summary: String,
    pub(crate) device: String,
    pub(crate) seconds: String,
    pub(crate) versions: String,
    pub(crate) figures: Vec<FigureRow>,
    pub(crate) plots: Vec<PlotView>,
    pub(crate) commands: Vec<String>,
    pub(crate) log: Option<String>,
    pub(crate) metrics: String,
}

/// One corpus's support.
pub(crate) struct SupportRow {
    pub(crate) corpus: String,
    pub(crate) revision: String,
    pub(crate) files: String,
    pub(crate) occurrences: String,
    pub(crate) opportunities: String,
    pub(crate) link: Option<String>,
}

/// One bar of the value histogram.
pub(crate) struct ValueRow {
    pub(crate) value: String,
    pub(crate) count: u64,
    pub(crate) resolved: String,
}

/// An upstream example.
pub(crate) struct ExampleView {
    pub(crate) corpus: String,
    pub(crate) path: String,
    pub(crate) line: String,
    pub(crate) code: Vec<Markup>,
    pub(crate) link: Option<String>,
}

/// A commit an edit pattern was mined from.
pub(crate) struct CommitView {
    pub(crate) id: String,
    pub(crate) summary: String,
    pub(crate) date: String,
    pub(crate) link: Option<String>,
}

/// A per-site search the candidate came from.
pub(crate) struct SearchView {
    pub(crate) headline: String,
    pub(crate) sites: Vec<(String, String)>,
    pub(crate) head: Vec<String>,
    pub(crate) rows: Vec<(bool, Vec<String>)>,
    pub(crate) why: String,
    pub(crate) plot: Option<PlotView>,
}

#[derive(Template)]
#[template(path = "html/candidate.html")]
pub(crate) struct CandidatePage {
    pub(crate) id: String,
    pub(crate) row: IndexRow,
    pub(crate) flags: Vec<String>,
    pub(crate) verdict_log: Option<String>,
    pub(crate) commit_id: String,
    pub(crate) base_blob: String,
    pub(crate) value: String,
    pub(crate) rationale: String,
    pub(crate) mechanism: String,
    pub(crate) template_before: Vec<Markup>,
    pub(crate) template_after: Vec<Markup>,
    pub(crate) note: String,
    pub(crate) files: Vec<DiffFile>,
    /// Hunk lines not shown side by side (past [`diff::MAX_ROWS`]).
    pub(crate) omitted_rows: usize,
    pub(crate) raw_diff: Vec<(&'static str, Markup)>,
    /// Lines of the unified diff not on the page (past [`diff::MAX_RAW_BYTES`]).
    pub(crate) omitted_raw: usize,
    /// Why the evidence is not the validator's record, when it is not.
    pub(crate) unreadable: String,
    pub(crate) support: Vec<SupportRow>,
    pub(crate) values: Vec<ValueRow>,
    pub(crate) histogram: Option<PlotView>,
    pub(crate) examples: Vec<ExampleView>,
    pub(crate) commits: Vec<CommitView>,
    pub(crate) gates: Vec<GateView>,
    pub(crate) reproduce: String,
    /// The id as a shell word.
    pub(crate) reproduce_id: String,
    pub(crate) validated: String,
    pub(crate) search: Option<SearchView>,
    pub(crate) role_sites: Vec<Vec<String>>,
    pub(crate) raw_evidence: String,
}

/// What a candidate page needs from the catalog besides the candidate.
pub(crate) struct Context<'a> {
    pub(crate) pattern: Option<&'a Pattern>,
    pub(crate) corpora: &'a [CorpusRow],
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        v => v.to_string(),
    }
}

/// `'...'` for a POSIX shell.
fn shell_quote(x: &str) -> String {
    if x.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:@".contains(&b)) {
        return x.to_string();
    }
    format!("'{}'", x.replace('\'', "'\\''"))
}

pub(crate) fn candidate_page(c: &Candidate, cx: &Context<'_>) -> CandidatePage {
    let read = &c.evidence;
    let e = read.evidence();
    let prov = &c.provenance;
    let pattern = cx.pattern;
    let code = Code::from_path(&c.path);
    let tpl = |recorded: Option<&str>, fallback: Option<&str>| -> Vec<Markup> {
        let text = recorded.or(fallback).unwrap_or("");
        if text.is_empty() { Vec::new() } else { highlight::fragment(code, text) }
    };
    let note = if c.pattern_id == kidiom_validator::MANUAL_PATTERN {
        "an edit submitted as a patch with `kidiom validate --patch`, not from the catalog"
    } else if pattern.is_none() {
        "the pattern is no longer in the catalog; the evidence below is from when it was proposed"
    } else {
        ""
    };
    let device = e.map(|e| e.device.as_str()).unwrap_or("auto");
    let sbs = diff::side_by_side(&c.diff, diff::MAX_ROWS);
    let (raw_diff, omitted_raw) = diff::raw_lines(&c.diff, diff::MAX_RAW_BYTES);
    CandidatePage {
        id: c.id.clone(),
        row: index_row(c, String::new()),
        flags: e.map(|e| e.verdict.flags.clone()).unwrap_or_default(),
        verdict_log: e.and_then(|e| e.verdict.log.clone()),
        commit_id: c.commit_id.clone().unwrap_or_default(),
        base_blob: c.base_blob.clone(),
        value: c.value.clone().unwrap_or_default(),
        rationale: prov.rationale().or(pattern.map(|p| p.rationale.as_str())).unwrap_or("").to_string(),
        mechanism: prov.mechanism().or(pattern.map(|p| p.mechanism.as_str())).unwrap_or("").to_string(),
        template_before: tpl(prov.before(), pattern.map(|p| p.before.as_str())),
        template_after: tpl(prov.after(), pattern.map(|p| p.after.as_str())),
        note: note.into(),
        files: sbs.files,
        omitted_rows: sbs.omitted,
        raw_diff,
        omitted_raw,
        unreadable: match read {
            StoredEvidence::Unreadable { why, .. } => why.clone(),
            _ => String::new(),
        },
        support: support(prov, pattern, cx.corpora),
        values: values(pattern),
        histogram: histogram(pattern),
        examples: examples(prov, pattern, cx.corpora),
        commits: commits(prov, pattern, cx.corpora),
        gates: e.map(|e| e.gates.iter().map(gate_view).collect()).unwrap_or_default(),
        reproduce: format!("kidiom validate {} --device {}", shell_quote(&c.id), shell_quote(device)),
        reproduce_id: shell_quote(&c.id),
        validated: e.map(|e| format!("validator {} in {:.1} s", e.validator, e.seconds)).unwrap_or_default(),
        search: search(c),
        role_sites: role_sites(c),
        raw_evidence: match read {
            StoredEvidence::Unreadable { raw, .. } => serde_json::to_string_pretty(raw).unwrap_or_default(),
            _ => String::new(),
        },
    }
}

/// The revision of `corpus` the candidate's evidence was mined at (its
/// support row), else the catalog's.
fn revision<'a>(prov: &'a Provenance, corpus: &str, row: Option<&'a CorpusRow>) -> &'a str {
    prov.support()
        .iter()
        .find(|s| s.corpus == corpus)
        .map(|s| s.revision.as_str())
        .or(row.map(|r| r.revision.as_str()))
        .unwrap_or("")
}

fn corpus<'a>(corpora: &'a [CorpusRow], name: &str) -> Option<&'a CorpusRow> {
    corpora.iter().find(|r| r.name == name)
}

/// The recorded rows when there are any, else the pattern's own.
fn recorded_or<'a, T>(recorded: &'a [T], pattern: Option<&'a [T]>) -> &'a [T] {
    if recorded.is_empty() { pattern.unwrap_or_default() } else { recorded }
}

fn support(prov: &Provenance, pattern: Option<&Pattern>, corpora: &[CorpusRow]) -> Vec<SupportRow> {
    recorded_or(prov.support(), pattern.map(|p| p.support.as_slice()))
        .iter()
        .map(|r| SupportRow {
            link: corpus(corpora, &r.corpus).and_then(|c| links::tree(&c.source, &r.revision)),
            corpus: r.corpus.clone(),
            revision: r.revision.clone(),
            files: r.files.to_string(),
            occurrences: r.occurrences.to_string(),
            opportunities: r.opportunities.to_string(),
        })
        .collect()
}

fn values(pattern: Option<&Pattern>) -> Vec<ValueRow> {
    pattern
        .map(|p| {
            p.values
                .iter()
                .map(|v| ValueRow {
                    value: v.value.clone(),
                    count: v.count,
                    resolved: match (&v.resolved, v.literals.is_empty()) {
                        (Some(r), _) => r.clone(),
                        (None, false) => v.literals.join(" | "),
                        (None, true) => String::new(),
                    },
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The value histogram (the 15 most frequent values).
fn histogram(pattern: Option<&Pattern>) -> Option<PlotView> {
    let p = pattern?;
    let top: Vec<_> = p.values.iter().take(15).collect();
    let names: Vec<String> = top
        .iter()
        .map(|v| {
            if v.value.chars().count() > 40 {
                format!("{}…", v.value.chars().take(39).collect::<String>())
            } else {
                v.value.clone()
            }
        })
        .collect();
    let svg = plot::bars(&names, &[("sites".into(), top.iter().map(|v| v.count as f64).collect())], "sites upstream")?;
    Some(PlotView {
        kind: "values",
        caption: format!("values seen upstream ({} of {})", top.len(), p.values.len()),
        svg,
    })
}

fn examples(prov: &Provenance, pattern: Option<&Pattern>, corpora: &[CorpusRow]) -> Vec<ExampleView> {
    recorded_or(prov.examples(), pattern.map(|p| p.examples.as_slice()))
        .iter()
        .map(|x| {
            let row = corpus(corpora, &x.corpus);
            let link = row.and_then(|r| {
                links::blob(&r.source, revision(prov, &x.corpus, Some(r)), &x.path, Some(u64::from(x.line)))
            });
            ExampleView {
                code: highlight::fragment(Code::from_path(&x.path), &x.snippet),
                line: x.line.to_string(),
                corpus: x.corpus.clone(),
                path: x.path.clone(),
                link,
            }
        })
        .collect()
}

/// A commit links to the one GitHub repository among the pattern's corpora
/// (with several, which one holds it is not recorded: no link).
fn commits(prov: &Provenance, pattern: Option<&Pattern>, corpora: &[CorpusRow]) -> Vec<CommitView> {
    let mut sources: Vec<&str> = prov
        .support()
        .iter()
        .filter_map(|r| corpus(corpora, &r.corpus))
        .filter(|r| links::github_repo(&r.source).is_some())
        .map(|r| r.source.as_str())
        .collect();
    sources.dedup();
    let source = if sources.len() == 1 { sources.first().copied() } else { None };
    recorded_or(prov.commits(), pattern.map(|p| p.commits.as_slice()))
        .iter()
        .map(|k| CommitView {
            link: source.and_then(|src| links::commit(src, &k.id)),
            summary: k.summary.clone(),
            date: k.date.clone(),
            id: k.id.clone(),
        })
        .collect()
}

fn gate_view(r: &GateRecord) -> GateView {
    let mut plots = Vec::new();
    let mut figures = Vec::new();
    match r.gate {
        Gate::Static => {
            let (b, a) = r.compiles();
            figures = static_rows(b.as_ref(), a.as_ref());
            plots.extend(mix_plot(r));
        }
        Gate::Correctness => {
            figures = curve_rows(r);
            plots.extend(curve_plot(r));
        }
        Gate::Precision => {
            figures = precision_rows(r);
            plots.extend(precision_plots(r));
        }
        Gate::Speed => plots.extend(speed_plots(r)),
        Gate::Syntax => {}
    }
    GateView {
        name: r.gate.name(),
        status: ev::status_word(r),
        summary: r.summary.clone(),
        device: r.device.clone().unwrap_or_default(),
        seconds: format!("{:.2} s", r.seconds),
        versions: r
            .versions
            .as_object()
            .map(|o| o.iter().map(|(k, v)| format!("{k} {}", s(v))).collect::<Vec<_>>().join(", "))
            .unwrap_or_default(),
        figures,
        plots,
        commands: r.commands.clone(),
        log: r.log.clone(),
        metrics: serde_json::to_string_pretty(&r.metrics).unwrap_or_default(),
    }
}

/// The static gate's resources before and after.
fn static_rows(b: Option<&CompileFigures>, a: Option<&CompileFigures>) -> Vec<FigureRow> {
    type Field = fn(&CompileFigures) -> Option<i64>;
    const FIELDS: &[(Field, &str)] = &[
        (|c| c.instructions, "SASS instructions"),
        (|c| c.registers, "registers per thread"),
        (|c| c.spill_store_bytes, "spill stores (B)"),
        (|c| c.spill_load_bytes, "spill loads (B)"),
        (|c| c.stack_bytes, "stack (B)"),
        (|c| c.local_bytes, "local memory (B)"),
        (|c| c.shared_static_bytes, "static shared memory (B)"),
        (|c| c.shared_dynamic_bytes, "dynamic shared memory (B)"),
    ];
    let mut out = Vec::new();
    for (field, name) in FIELDS {
        let (bv, av) = (b.and_then(field), a.and_then(field));
        if bv.is_none() && av.is_none() {
            continue;
        }
        let show = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
        let change = match (bv, av) {
            (Some(b), Some(a)) if a != b => format!("{:+}", i128::from(a) - i128::from(b)),
            (Some(_), Some(_)) => "=".into(),
            _ => String::new(),
        };
        out.push(FigureRow { name: (*name).into(), before: show(bv), after: show(av), change });
    }
    out
}

/// Instruction classes before and after, the largest first.
fn mix_plot(r: &GateRecord) -> Option<PlotView> {
    let class = |v: Option<CompileFigures>| -> BTreeMap<String, f64> {
        v.map(|c| c.by_class.into_iter().map(|(k, n)| (k, n as f64)).collect()).unwrap_or_default()
    };
    let (b, a) = r.compiles();
    let (b, a) = (class(b), class(a));
    let mut names: Vec<String> = b.keys().chain(a.keys()).cloned().collect();
    names.sort();
    names.dedup();
    let size = |k: &String| b.get(k).copied().unwrap_or(0.0).max(a.get(k).copied().unwrap_or(0.0));
    names.sort_by(|x, y| size(y).total_cmp(&size(x)).then_with(|| x.cmp(y)));
    let get = |m: &BTreeMap<String, f64>| names.iter().map(|k| m.get(k).copied().unwrap_or(0.0)).collect::<Vec<_>>();
    let series = vec![("baseline".to_string(), get(&b)), ("candidate".to_string(), get(&a))];
    let svg = plot::bars(&names, &series, "SASS instructions")?;
    Some(PlotView { kind: "mix", caption: "instruction classes, baseline and candidate".into(), svg })
}

fn curve_rows(r: &GateRecord) -> Vec<FigureRow> {
    let (b, a) = ev::curves(r);
    a.iter()
        .map(|p| {
            let base = b.iter().find(|q| q.t == p.t).map(|q| q.rel_l2);
            FigureRow {
                name: format!("rel_l2 at T={}", p.t),
                before: base.map(ev::fmt_e).unwrap_or_else(|| "-".into()),
                after: ev::fmt_e(p.rel_l2),
                change: match base {
                    Some(x) if x > 0.0 && p.rel_l2.is_finite() => format!("{:.3}x", p.rel_l2 / x),
                    _ => String::new(),
                },
            }
        })
        .collect()
}

/// The precision gate's figures: worst errors, bytes per step, the crossing.
fn precision_rows(r: &GateRecord) -> Vec<FigureRow> {
    let f = r.precision_figures();
    let e = |n: Option<kidiom_patterns::record::Num>| n.map(|n| ev::fmt_e(n.0)).unwrap_or_else(|| "-".into());
    let last = |xs: &[kidiom_patterns::record::Num]| xs.iter().rev().find(|n| !n.0.is_nan()).copied();
    let row = |name: &str, before: String, after: String, change: String| FigureRow {
        name: name.into(),
        before,
        after,
        change,
    };
    let mut out = vec![
        row(
            "worst o vs float64 (fp32 at the last step → variant)",
            e(last(&f.baseline_drift.o)),
            e(f.vs_float64.o),
            String::new(),
        ),
        row(
            "worst state vs float64 (fp32 at the last step → variant)",
            e(last(&f.baseline_drift.state)),
            e(f.vs_float64.state),
            String::new(),
        ),
        row("worst vs the simulated reference (o, state)", e(f.vs_simulated.o), e(f.vs_simulated.state), String::new()),
    ];
    if let Some(u) = f.simulated_state_units {
        out.push(row(
            "stored state vs the simulated reference (rounding steps)",
            String::new(),
            e(Some(u)),
            String::new(),
        ));
    }
    if let Some(b) = f.bytes_per_step {
        out.push(row(
            "state bytes per step",
            b.baseline.to_string(),
            b.variant.to_string(),
            b.ratio().map(|x| format!("{x:.2}x fewer")).unwrap_or_default(),
        ));
    }
    out.push(row(
        "crossed the budget at step",
        String::new(),
        f.crossed_at.map(|s| s.to_string()).unwrap_or_else(|| "never".into()),
        String::new(),
    ));
    out
}

/// The drift of one variant beside its fp32 kernel's, output and state.
fn precision_plots(r: &GateRecord) -> Vec<PlotView> {
    let f = r.precision_figures();
    let series = |name: &str, steps: &[i64], ys: &[kidiom_patterns::record::Num]| plot::Series {
        name: name.into(),
        points: steps.iter().zip(ys).map(|(s, y)| (*s as f64, y.0)).collect(),
    };
    let label = if f.dtype.is_empty() { "variant".to_string() } else { f.dtype.clone() };
    let mut out = Vec::new();
    for (what, b, v) in [("o", &f.baseline_drift.o, &f.drift.o), ("state", &f.baseline_drift.state, &f.drift.state)] {
        let svg = plot::log_curve(
            &[series("fp32", &f.steps, b), series(&label, &f.steps, v)],
            "decode step",
            &format!("{what} rel err"),
        );
        if let Some(svg) = svg {
            out.push(PlotView {
                kind: "drift",
                caption: format!("{what}: error against float64 by decode step, fp32 and {label} (log scales)"),
                svg,
            });
        }
    }
    out
}

/// The error-versus-T curves of baseline and candidate.
fn curve_plot(r: &GateRecord) -> Option<PlotView> {
    let (b, a) = ev::curves(r);
    let series = |name: &str, c: &[ev::CurvePoint]| plot::Series {
        name: name.into(),
        points: c.iter().map(|p| (p.t, p.rel_l2)).collect(),
    };
    let svg = plot::log_curve(&[series("baseline", &b), series("candidate", &a)], "T (sequence length)", "rel_l2")?;
    Some(PlotView { kind: "curve", caption: "error against the float64 reference by length (log scale)".into(), svg })
}

/// The speed gate's samples: every array both variants hold, else the
/// reported percentiles alone.
fn speed_plots(r: &GateRecord) -> Vec<PlotView> {
    let (b, a) = r.speed_sides();
    let (b, a) = (b.as_ref(), a.as_ref());
    let mut out = Vec::new();
    for (bs, as_) in ev::speed_samples(r) {
        let summary = |side| {
            if bs.key == "gaps" { ev::percentiles(side, "gap_p10", "gap", "gap_p90") } else { None }
        };
        let rows = vec![
            plot::Distribution { name: "baseline".into(), samples: bs.values.clone(), summary: summary(b) },
            plot::Distribution { name: "candidate".into(), samples: as_.values.clone(), summary: summary(a) },
        ];
        if let Some(svg) = plot::distribution(&rows, &bs.key) {
            out.push(PlotView {
                kind: "speed",
                caption: format!(
                    "{}: {} and {} samples (bar: p10-p90, tick: median)",
                    bs.key,
                    bs.values.len(),
                    as_.values.len()
                ),
                svg,
            });
        }
    }
    let timings = |side| ev::percentiles(side, "p10_us", "median_us", "p90_us");
    if out.is_empty()
        && let (Some(tb), Some(ta)) = (timings(b), timings(a))
    {
        let rows = vec![
            plot::Distribution { name: "baseline".into(), samples: Vec::new(), summary: Some(tb) },
            plot::Distribution { name: "candidate".into(), samples: Vec::new(), summary: Some(ta) },
        ];
        if let Some(svg) = plot::distribution(&rows, "µs per call") {
            out.push(PlotView { kind: "speed", caption: "time per call (bar: p10-p90, tick: median)".into(), svg });
        }
    }
    out
}

/// The Pareto front of the search the candidate came from.
fn search(c: &Candidate) -> Option<SearchView> {
    let Some(SearchOrigin::Sites(search)) = &c.provenance.search else { return None };
    let sm = &search.summary;
    let point = search.point;
    let mut rows = crate::view::front_rows(sm, point)?;
    if rows.is_empty() {
        return None;
    }
    let head = rows.remove(0);
    let rows: Vec<(bool, Vec<String>)> = rows.into_iter().map(|r| (r.first().is_some_and(|m| m == "->"), r)).collect();
    let last_t = sm.lengths.last().map(i64::to_string).unwrap_or_default();
    let points: Vec<plot::FrontPoint> = sm
        .points
        .iter()
        .enumerate()
        .filter(|(_, p)| ["front", "chosen", "baseline", "all-sites"].iter().any(|r| p.is(r)))
        .filter_map(|(i, p)| {
            let label: Vec<&str> =
                p.roles.iter().map(String::as_str).filter(|r| ["baseline", "chosen"].contains(r)).collect();
            Some(plot::FrontPoint {
                instructions: p.figures.as_ref()?.instructions as f64,
                error: (*p.error.get(sm.lengths.len().checked_sub(1)?)?)?,
                label: label.join(", "),
                this: Some(i) == point,
            })
        })
        .collect();
    let plot = plot::front(&points, &format!("rel_l2 at T={last_t}")).map(|svg| PlotView {
        kind: "front",
        caption: "the front: error against instructions (ringed: this candidate)".into(),
        svg,
    });
    Some(SearchView {
        headline: format!(
            "{} of {} sites rewritten ({}); this candidate is {}",
            c.sites,
            sm.sites.len(),
            search.assignment,
            c.provenance.search_roles().join(", ")
        ),
        sites: sm.sites.iter().map(|x| (x.line.to_string(), x.text.clone())).collect(),
        head,
        rows,
        why: sm.why.clone(),
        plot,
    })
}

/// A memory-hint search's sites, each by the role of its tensor.
fn role_sites(c: &Candidate) -> Vec<Vec<String>> {
    let Some(SearchOrigin::MemoryRoles(r)) = &c.provenance.search else { return Vec::new() };
    r.sites
        .iter()
        .map(|x| vec![x.line.to_string(), x.base.clone(), x.role.clone(), x.value.clone(), x.why.clone()])
        .collect()
}

/// The candidate's pattern, then every other pattern that proposes the same change.
fn patterns_of(c: &Candidate) -> String {
    let all = c.provenance.patterns();
    if all.len() > 1 { all.join(", ") } else { c.pattern_id.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("a@b/c.py"), "a@b/c.py");
        assert_eq!(shell_quote("p@k.py#0a1b"), "'p@k.py#0a1b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }

    #[test]
    fn facets_count_most_frequent_first() {
        let f = facets(["b", "a", "b", "c"].into_iter());
        let got: Vec<(&str, usize)> = f.iter().map(|f| (f.value.as_str(), f.count)).collect();
        assert_eq!(got, vec![("b", 2), ("a", 1), ("c", 1)]);
    }
}
