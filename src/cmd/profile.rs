//! `kidiom profile`: a kernel's work counted on the CPU, by source line like
//! a line profiler's, against its manifest's floor, with the roofline
//! prediction (`ops::profile`).
//!
//! Exit codes: 0 every kernel profiled; 1 some could not be (the reason is
//! printed); 2 the command failed.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};
use kidiom_validator::ProfileReport;
use kidiom_validator::published::ExpectedErrors;

use crate::cmd::args::{HarnessArgs, OutputArgs};
use crate::config::Config;
use crate::{ops, output};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The kernel (manifest name: kda.decode, kda.prefill, kda_cuda.decode); default: every GPU kernel.
    #[arg(long, value_name = "NAME")]
    kernel: Option<String>,
    /// A file to profile in the kernel's place (a candidate); needs --kernel.
    #[arg(long, value_name = "FILE", requires = "kernel")]
    source: Option<PathBuf>,
    /// A shape in place of the manifest's bench shape, every variable given: `N=1,H=16,HV=32,K=128,V=128,S=1`.
    #[arg(long, value_name = "VAR=N,...", requires = "kernel")]
    shape: Option<String>,
    #[command(flatten)]
    harness: HarnessArgs,
    #[command(flatten)]
    output: OutputArgs,
}

/// `N=1,H=16` as a shape: each variable once, a positive integer.
fn parse_shape(text: &str) -> Result<std::collections::BTreeMap<String, u64>> {
    let mut out = std::collections::BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = part.split_once('=') else { bail!("--shape {text:?}: {part:?} is not VAR=N") };
        let n: u64 = v
            .trim()
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| anyhow::anyhow!("--shape {text:?}: {} = {v:?} is not a positive integer", k.trim()))?;
        if out.insert(k.trim().to_string(), n).is_some() {
            bail!("--shape {text:?}: {} given twice", k.trim());
        }
    }
    if out.is_empty() {
        bail!("--shape {text:?}: no VAR=N");
    }
    Ok(out)
}

/// `n` in the largest of `units` it reaches, one decimal; below them all, whole with `base`.
fn scaled(n: f64, units: [(&str, f64); 3], base: &str) -> String {
    match units.iter().find(|(_, f)| n >= *f) {
        Some((u, f)) => format!("{:.1} {u}", n / f),
        None => format!("{n:.0}{base}"),
    }
}

/// `1.5 GB`, `403.1 MB`, `512 B`.
pub(crate) fn bytes(n: f64) -> String {
    scaled(n, [("GB", 1e9), ("MB", 1e6), ("kB", 1e3)], " B")
}

/// `67.1 M`, `262.1 k`, `12`.
pub(crate) fn count(n: f64) -> String {
    scaled(n, [("G", 1e9), ("M", 1e6), ("k", 1e3)], "")
}

fn shape(s: &std::collections::BTreeMap<String, serde_json::Value>) -> String {
    s.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

fn print_one(r: &ProfileReport, errors: Option<&ExpectedErrors>, shape_given: bool) -> Result<()> {
    let Some(p) = &r.profile else {
        output::line(&format!("{} ({}): no profile: {}", r.kernel, r.source, r.problem.as_deref().unwrap_or("?")))?;
        return Ok(());
    };
    let t = &p.totals;
    output::line(&format!(
        "{} ({}) at {} {}, on {}",
        r.kernel,
        r.source,
        if shape_given { "the shape" } else { "the bench shape" },
        shape(&p.shape),
        r.device.as_deref().unwrap_or("the CPU")
    ))?;
    let how = if p.counted.exact {
        "counted whole".to_string()
    } else {
        format!(
            "counted at {} ({} of {} programs), scaled x{}",
            shape(&p.counted.shape),
            p.counted.programs,
            p.counted.programs_total,
            (p.counted.scale * 1e4).round() / 1e4
        )
    };
    output::line(&format!("  {how}{}", p.counted.note.as_deref().map(|n| format!("; {n}")).unwrap_or_default()))?;
    output::line(&format!(
        "  moved {} (loads {}, stores {}; re-read {}) against the floor's {}: traffic ratio {:.2}",
        bytes((t.load_bytes + t.store_bytes) as f64),
        bytes(t.load_bytes as f64),
        bytes(t.store_bytes as f64),
        bytes(t.reread_bytes as f64),
        bytes(p.floor.bytes),
        p.traffic_ratio
    ))?;
    let special: Vec<String> = p.special.iter().map(|(k, v)| format!("{k} {}", count(*v as f64))).collect();
    output::line(&format!(
        "  special functions {}{}; flops {} (floor {}); dot MACs {}; {} launch{} a call",
        count(t.special_calls as f64),
        if special.is_empty() { String::new() } else { format!(" ({})", special.join(", ")) },
        count(t.flops as f64),
        count(p.floor.flops),
        count(t.dot_macs as f64),
        p.launches,
        if p.launches == 1 { "" } else { "es" }
    ))?;
    if let Some(l) = &p.launch_limits {
        if l.findings.is_empty() {
            output::line(&format!(
                "  launch limits: none reached at the manifest's {} gpu and bench shapes",
                l.shapes
            ))?;
        }
        for f in &l.findings {
            output::line(&format!("  launch defect: {f}"))?;
        }
    }
    if let Some(pr) = &r.prediction {
        for l in prediction_lines(pr, r.launch_problem.as_deref()) {
            output::line(&format!("  {l}"))?;
        }
        output::line(&format!("  {}", time_error(errors, &r.kernel)))?;
    }
    let mut rows = vec![vec![
        "line".to_string(),
        "loads".into(),
        "stores".into(),
        "re-read".into(),
        "special".into(),
        "flops".into(),
        "dot MACs".into(),
        "source".into(),
    ]];
    let dash = |n: u64, f: fn(f64) -> String| if n == 0 { "-".to_string() } else { f(n as f64) };
    for l in &p.lines {
        rows.push(vec![
            l.line.to_string(),
            dash(l.load_bytes, bytes),
            dash(l.store_bytes, bytes),
            dash(l.reread_bytes, bytes),
            dash(l.special_calls, count),
            dash(l.flops, count),
            dash(l.dot_macs, count),
            l.text.trim().chars().take(70).collect(),
        ]);
    }
    output::table(&rows)?;
    print_redundancy(r)
}

/// The redundancy report: a finding a line, its predicted gain, and what removes it.
fn print_redundancy(r: &ProfileReport) -> Result<()> {
    if r.redundancy.is_empty() {
        return output::line("  redundancy: nothing the profile shows done twice");
    }
    output::line(&format!(
        "  redundancy ({} finding{}, predicted gains):",
        r.redundancy.len(),
        plural(r.redundancy.len())
    ))?;
    for f in &r.redundancy {
        let lines: Vec<String> = f.lines.iter().map(|l| l.line.to_string()).collect();
        output::line(&format!(
            "    [{}] line{} {}: {}; {:.2}x predicted without it",
            kind_word(f.kind),
            plural(lines.len()),
            lines.join(", "),
            f.what,
            f.predicted_speedup
        ))?;
        output::line(&format!("      {}", f.fix))?;
    }
    Ok(())
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn kind_word(k: kidiom_validator::redundancy::FindingKind) -> &'static str {
    use kidiom_validator::redundancy::FindingKind as K;
    match k {
        K::Reread => "re-read",
        K::RepeatedCall => "repeated call",
        K::UniformCall => "uniform call",
    }
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let cfg = Config::load()?;
    if a.source.is_some() && a.kernel.is_none() {
        bail!("--source needs --kernel: the file is profiled in that kernel's place");
    }
    let shape = a.shape.as_deref().map(parse_shape).transpose()?;
    let shape_given = shape.is_some();
    let opts = ops::profile::Options {
        kernel: a.kernel,
        source: a.source,
        shape,
        python: a.harness.python.clone(),
        timeout: a.harness.timeout(),
    };
    let reports = ops::profile::profile(&cfg, &opts)?;
    let errors = cfg.expected_errors();
    if a.output.json {
        let out: Vec<serde_json::Value> = reports.iter().map(|r| report_json(r, errors.as_ref())).collect();
        output::json(&serde_json::json!({"version": 1, "profiles": out}))?;
    } else {
        for (i, r) in reports.iter().enumerate() {
            if i > 0 {
                output::line("")?;
            }
            print_one(r, errors.as_ref(), shape_given)?;
        }
    }
    Ok(if reports.iter().all(|r| r.profile.is_some()) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// One kernel's JSON: the profile's fields at the top, `predicted` beside them.
/// A prediction in lines: the time and what decides it, the launch's
/// occupancy, then each term with its share of the time.
pub(crate) fn prediction_lines(
    pr: &kidiom_validator::predict::Prediction,
    launch_problem: Option<&str>,
) -> Vec<String> {
    let mut out = vec![format!(
        "predicted {:.2} us on {} under a {}, {}-bound: a prediction, not a measurement",
        pr.us,
        pr.device,
        pr.timing.name(),
        pr.bound.name()
    )];
    match (&pr.launch, launch_problem) {
        (Some(l), _) => out.push(format!(
            "launch: {} programs of {} threads, {} resident per SM, {:.2} waves; the bytes move at {:.0} GB/s",
            l.programs, l.threads, l.resident_per_sm, l.waves, l.achieved_gbps
        )),
        (None, Some(why)) => out.push(format!("launch: no configuration ({why}): the roofs alone")),
        (None, None) => {}
    }
    for t in pr.shares() {
        let how = if t.adds { "" } else { ", under the deciding term" };
        out.push(format!("  {:>6.1}%  {:>8.2} us  {}{how}", 100.0 * t.share, t.us, t.name));
    }
    out
}

/// How far off a predicted time of `kernel` was on published measurements
/// (`kidiom predict --check`'s held-out rows).
fn time_error(errors: Option<&ExpectedErrors>, kernel: &str) -> String {
    let Some(e) = errors else {
        return "expected error unknown: no `kidiom predict --check` figures ([predict] expected_error)".into();
    };
    match e.for_kernel(kernel) {
        Some(k) => format!(
            "expected error {:.0}% (worst {:.0}%, {} held-out published times predicted with {kernel})",
            100.0 * k.time.median,
            100.0 * k.time.worst,
            k.time.n
        ),
        None => format!(
            "expected error unknown for {kernel}: no published row is predicted with it (every row's: {:.0}%, worst {:.0}%)",
            100.0 * e.all.time.median,
            100.0 * e.all.time.worst
        ),
    }
}

fn report_json(r: &ProfileReport, errors: Option<&ExpectedErrors>) -> serde_json::Value {
    let mut v = match &r.profile {
        Some(p) => serde_json::to_value(p).unwrap_or_default(),
        None => serde_json::json!({}),
    };
    if let Some(o) = v.as_object_mut() {
        o.insert("kernel".into(), r.kernel.clone().into());
        o.insert("source".into(), r.source.clone().into());
        o.insert("device".into(), serde_json::json!(r.device));
        o.insert("predicted".into(), serde_json::json!(r.prediction));
        o.insert("launch".into(), serde_json::json!(r.launch));
        // the held-out error of this kernel's predicted times (null: none known)
        o.insert("expected_error".into(), serde_json::json!(errors.and_then(|e| e.for_kernel(&r.kernel))));
        if let Some(pr) = &r.prediction {
            let shares: Vec<_> = pr
                .shares()
                .iter()
                .map(|t| serde_json::json!({"term": t.name, "us": t.us, "share": t.share, "adds": t.adds}))
                .collect();
            o.insert("prediction_terms".into(), shares.into());
        }
        o.insert("redundancy".into(), serde_json::json!(r.redundancy));
        if let Some(e) = &r.problem {
            o.insert("error".into(), e.clone().into());
        }
    }
    v
}
