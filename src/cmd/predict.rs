//! `kidiom predict --check DIR`: each published row predicted from our
//! kernels' profiles at its shape, against the published times (`ops::predict`).
//!
//! Exit codes: 0 every row scored; 1 some rows could not be (each listed
//! with why); 2 the command failed.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use kidiom_validator::published::{ErrorStats, Expected};

use crate::cmd::args::{HarnessArgs, OutputArgs};
use crate::config::Config;
use crate::{ops, output};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A folder of published measurements, one TOML file per source (bench/published).
    #[arg(long, value_name = "DIR")]
    check: PathBuf,
    /// Write the held-out errors here (JSON), for `[predict] expected_error` in kidiom.toml.
    #[arg(long, value_name = "FILE")]
    write: Option<PathBuf>,
    /// Kernels profiled at a time (0: one per CPU).
    #[arg(long, default_value_t = 0)]
    jobs: usize,
    /// Profile every row's kernels again and rewrite DIR/work.json (the work the check reads).
    #[arg(long)]
    refresh: bool,
    #[command(flatten)]
    harness: HarnessArgs,
    #[command(flatten)]
    output: OutputArgs,
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let cfg = Config::load()?;
    let opts = ops::predict::Options {
        dir: a.check.clone(),
        python: a.harness.python.clone(),
        timeout: a.harness.timeout(),
        jobs: a.jobs,
        refresh: a.refresh,
    };
    let check = ops::predict::check(&cfg, &opts)?;
    if let Some(w) = &a.write {
        let text = serde_json::to_string_pretty(&check.expected)? + "\n";
        std::fs::write(w, text).with_context(|| format!("writing {}", w.display()))?;
    }
    if a.output.json {
        output::json(&serde_json::json!({"version": 1, "check": check}))?;
    } else {
        print(&check)?;
    }
    // a source that says why no kernel of ours predicts it is listed, not a failure
    Ok(if check.unscored.iter().all(|u| u.declared) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// `12%`.
fn pct(x: f64) -> String {
    format!("{:.0}%", 100.0 * x)
}

fn stats(s: &ErrorStats) -> String {
    if s.n == 0 {
        "no rows".into()
    } else {
        format!("median {}, worst {} ({} predictions)", pct(s.median), pct(s.worst), s.n)
    }
}

fn expected(e: &Expected) -> String {
    format!("time {}; speedup {}", stats(&e.time), stats(&e.speedup))
}

fn print(c: &ops::predict::Check) -> Result<()> {
    let mut rows = vec![
        [
            "source",
            "row",
            "half",
            "device",
            "timed",
            "shape",
            "baseline",
            "pub us",
            "pred us",
            "err",
            "improved",
            "pub us",
            "pred us",
            "err",
            "speedup pub",
            "pred",
            "err",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for r in &c.rows {
        let shape = r.shape.iter().map(|(k, v)| format!("{k}{v}")).collect::<Vec<_>>().join(" ");
        let side = |s: &kidiom_validator::published::SideScore| {
            [s.kernel.clone(), format!("{:.1}", s.published_us), format!("{:.1}", s.predicted_us), pct(s.error)]
        };
        let mut row = vec![
            r.source.clone(),
            r.index.to_string(),
            if r.train { "train" } else { "held-out" }.into(),
            r.device.clone(),
            format!("{:?}", r.timed).to_lowercase(),
            shape,
        ];
        row.extend(side(&r.baseline));
        row.extend(side(&r.improved));
        row.extend([
            format!("{:.2}x", r.published_speedup),
            format!("{:.2}x", r.predicted_speedup),
            pct(r.speedup_error),
        ]);
        rows.push(row);
    }
    output::table(&rows)?;
    output::line("")?;
    let f = |p: &kidiom_validator::published::Fitted| {
        format!(
            "{} B in flight per thread, {} dependent round trips, minimum kernel {} us, graph node {} us, eager launch {} us{}",
            p.inflight_bytes_per_thread,
            p.dependent_trips,
            p.min_kernel_us,
            p.launch_graph_us,
            p.launch_us,
            p.copy_gbps.iter().map(|(k, v)| format!(", {k} copy {v:.0} GB/s")).collect::<String>()
        )
    };
    let train = c.rows.iter().filter(|r| r.train).count();
    output::line(&format!(
        "{} rows scored from {} sources: {} trained the fit (rows 0, 2, 4, ... of each file), {} held out",
        c.rows.len(),
        c.sources.len(),
        train,
        c.rows.len() - train
    ))?;
    let w = &c.work;
    output::line(&format!(
        "work: {} kernel shapes from {}, {} profiled now{}{}",
        w.stored + w.profiled,
        ops::predict::WORK_FILE,
        w.profiled,
        if w.stale > 0 { format!(" ({} stale: their kernel or the harness changed)", w.stale) } else { String::new() },
        if w.written { format!("; {} rewritten", ops::predict::WORK_FILE) } else { String::new() }
    ))?;
    output::line(&format!("fitted: {}", f(&c.fitted)))?;
    output::line(&format!("held-out error, fitted: {}", expected(&c.expected.all)))?;
    output::line(&format!(
        "held-out error, kidiom.toml's values ({}): {}",
        f(&c.configured),
        expected(&c.expected_configured.all)
    ))?;
    output::line(&format!("held-out error, the roofs alone (+3 us a launch): {}", expected(&c.roofs_only.all)))?;
    output::line(&format!(
        "held-out error, the roofs with the launch costs fitted, no occupancy terms: {}",
        expected(&c.roofs_fitted.all)
    ))?;
    for (k, e) in &c.expected.by_kernel {
        output::line(&format!("  {k}: {}", expected(e)))?;
    }
    // the held-out predictions off by more than 30%, with the term that decides each
    let misses: Vec<String> = c
        .rows
        .iter()
        .filter(|r| !r.train)
        .flat_map(|r| [("baseline", &r.baseline, r), ("improved", &r.improved, r)])
        .filter(|(_, s, _)| s.error > 0.3)
        .map(|(side, s, r)| {
            let top = s.prediction.shares().into_iter().find(|t| t.adds);
            format!(
                "  {} row {} {side} ({}): {:.1} us predicted, {:.1} published ({:.2}x); decided by {}-bound, its largest term {}",
                r.source,
                r.index,
                s.kernel,
                s.predicted_us,
                s.published_us,
                s.ratio,
                s.prediction.bound.name(),
                top.map_or("-".to_string(), |t| format!("{} ({:.0}%)", t.name, 100.0 * t.share))
            )
        })
        .collect();
    if !misses.is_empty() {
        output::line(&format!("held-out predictions off by more than 30% ({}):", misses.len()))?;
        for m in misses {
            output::line(&m)?;
        }
    }
    for u in &c.unscored {
        let how = if u.declared { "not predicted (the source says why)" } else { "not scored" };
        output::line(&format!("{how}: {} rows {:?}: {}", u.source, u.rows, u.why))?;
    }
    Ok(())
}
