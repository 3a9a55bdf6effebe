//! Published GPU measurements as data, and how well the device model
//! predicts them (`kidiom predict --check`).
//!
//! One TOML file per public source (`bench/published/*.toml`): where the
//! numbers come from, the device, how they were timed, and one row per
//! measured shape with the baseline's and the improved version's times. Its
//! `[predict]` table names the kernels of ours that do the same computation
//! as each side (or says why none does). The check profiles those kernels at
//! each row's shape, predicts both sides on the row's device as the row was
//! timed, and scores the predictions: each time's error, each speedup's.
//!
//! The latency terms' parameters (bytes in flight per thread, an SM's time
//! to start a program, the minimum kernel time, a graph node's and an eager
//! launch's cost) are fitted on a
//! declared half of the rows (within each file, rows 0, 2, 4, ... train) and
//! the errors that count are the other half's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::predict::{DeviceModel, LaunchShape, Prediction, Timing, WorkTotals, predict_launch};

/// Why published measurements cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum PublishedError {
    /// A file or folder that cannot be read.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A file that is not a published source.
    #[error("{path}: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong, with where.
        message: String,
    },
}

/// How a source timed its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Timed {
    /// Plain calls back to back (the host's launch cost included).
    Eager,
    /// A CUDA graph's replay.
    Graph,
    /// The kernel's own device time (a profiler: CUPTI, Nsight), no launch.
    Kernel,
}

impl Timed {
    /// The device model's timing for it.
    pub fn timing(self) -> Timing {
        match self {
            Timed::Eager => Timing::Eager,
            Timed::Graph => Timing::Graph,
            Timed::Kernel => Timing::Kernel,
        }
    }
}

/// One public source's measurements.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// Where the numbers are.
    pub url: String,
    /// The source's title.
    #[serde(default)]
    pub title: String,
    /// When they were read.
    #[serde(default)]
    pub read: String,
    /// The device: a `[devices.NAME]` of kidiom.toml.
    pub device: String,
    /// The device as the source names it.
    #[serde(default)]
    pub reported_device: String,
    /// `decode`, `prefill` or `chain`.
    pub kind: String,
    /// How the calls were timed.
    pub timed: Timed,
    /// What the source says about its timing.
    pub method: String,
    /// The inputs' dtype.
    #[serde(default)]
    pub dtype: String,
    /// The recurrent state's dtype.
    #[serde(default)]
    pub state_dtype: String,
    /// What the baseline column is.
    pub baseline: String,
    /// What the improved column is.
    pub improved: String,
    /// The gate's form, as the source says.
    #[serde(default)]
    pub gate: String,
    /// How kidiom predicts the rows.
    pub predict: Mapping,
    /// The measurements.
    pub rows: Vec<Row>,
    /// The file it was read from (set on reading).
    #[serde(skip)]
    pub file: PathBuf,
}

/// `[predict]` of a source: the kernels of ours that compute what each side
/// computes, and how a row's variables give their shape.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mapping {
    /// The baseline's kernel (a manifest name under kernels/).
    #[serde(default)]
    pub baseline: Option<String>,
    /// The improved version's kernel.
    #[serde(default)]
    pub improved: Option<String>,
    /// Text edits of the baseline kernel's source, each `[old, new]` made
    /// exactly once: the source's launch configuration where it differs
    /// from ours (FLA's `BV = 8`, one warp).
    #[serde(default)]
    pub baseline_edits: Vec<(String, String)>,
    /// The same for the improved kernel.
    #[serde(default)]
    pub improved_edits: Vec<(String, String)>,
    /// Why these kernels are the same computation, and what differs.
    #[serde(default)]
    pub why: String,
    /// Why no kernel of ours predicts this source (then it is listed, not scored).
    #[serde(default)]
    pub skip: Option<String>,
    /// A kernel variable from a row variable (`N = "B"`) or a number (`S = 64`);
    /// a variable not named here is the row's variable of the same name.
    #[serde(default)]
    pub shape: BTreeMap<String, ShapeValue>,
}

/// A kernel variable's value in `[predict.shape]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ShapeValue {
    /// A number.
    Number(u64),
    /// The row's variable of this name.
    Variable(String),
}

/// One measured shape.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    /// The baseline's time, µs.
    pub baseline_us: f64,
    /// The improved version's time, µs.
    pub improved_us: f64,
    /// Anything row-specific.
    #[serde(default)]
    pub note: Option<String>,
    /// The shape's variables (`B`, `T`, `H`, `HV`, `K`, `V`).
    #[serde(flatten)]
    pub vars: BTreeMap<String, u64>,
}

/// `text` with each of `edits` (`[old, new]`) made; an `old` that is not in
/// the text exactly once is an error naming it.
pub fn apply_edits(text: &str, edits: &[(String, String)]) -> Result<String, String> {
    let mut out = text.to_string();
    for (old, new) in edits {
        match out.matches(old.as_str()).count() {
            1 => out = out.replacen(old.as_str(), new, 1),
            n => return Err(format!("the edit of {old:?} finds it {n} times in the kernel's source, not once")),
        }
    }
    Ok(out)
}

impl Source {
    /// The file's name without `.toml`: the source's id in reports.
    pub fn id(&self) -> String {
        self.file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
    }

    /// Whether row `index` of this file trains the fitted parameters (the
    /// declared half: rows 0, 2, 4, ...); the others score them.
    pub fn trains(index: usize) -> bool {
        index.is_multiple_of(2)
    }

    /// The shape `kernel` runs at for `row`: each of `vars` (the kernel's
    /// shape variables) from `[predict.shape]` or the row's variable of the
    /// same name.
    pub fn kernel_shape(&self, row: &Row, vars: &[String]) -> Result<BTreeMap<String, u64>, String> {
        let mut out = BTreeMap::new();
        for v in vars {
            let value = match self.predict.shape.get(v) {
                Some(ShapeValue::Number(n)) => Some(*n),
                Some(ShapeValue::Variable(name)) => row.vars.get(name).copied(),
                None => row.vars.get(v).copied(),
            };
            match value {
                Some(n) if n > 0 => out.insert(v.clone(), n),
                _ => return Err(format!("no positive value for the kernel's {v} in the row or [predict.shape]")),
            };
        }
        Ok(out)
    }
}

/// Reads every `*.toml` of `dir`, sorted by name.
pub fn read_dir(dir: &Path) -> Result<Vec<Source>, PublishedError> {
    let io = |e| PublishedError::Io { path: dir.to_path_buf(), source: e };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml") && p.is_file())
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(PublishedError::Format { path: dir.to_path_buf(), message: "no *.toml published source".into() });
    }
    files.iter().map(|f| read_source(f)).collect()
}

/// Reads one published source and checks what the check relies on.
pub fn read_source(path: &Path) -> Result<Source, PublishedError> {
    let bad = |m: String| PublishedError::Format { path: path.to_path_buf(), message: m };
    let meta = std::fs::metadata(path).map_err(|e| PublishedError::Io { path: path.to_path_buf(), source: e })?;
    if meta.len() > 4 << 20 {
        return Err(bad(format!("{} bytes: a published source is a small TOML file", meta.len())));
    }
    let bytes = std::fs::read(path).map_err(|e| PublishedError::Io { path: path.to_path_buf(), source: e })?;
    let text = String::from_utf8(bytes).map_err(|_| bad("not UTF-8 text".into()))?;
    let mut s: Source = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
    s.file = path.to_path_buf();
    if s.rows.is_empty() {
        return Err(bad("no [[rows]]".into()));
    }
    for (i, r) in s.rows.iter().enumerate() {
        for (what, t) in [("baseline_us", r.baseline_us), ("improved_us", r.improved_us)] {
            if !(t.is_finite() && t > 0.0) {
                return Err(bad(format!("rows[{i}]: {what} must be a positive number of microseconds, not {t}")));
            }
        }
    }
    let m = &s.predict;
    if m.skip.is_none() && (m.baseline.is_none() || m.improved.is_none()) {
        return Err(bad("[predict] names a baseline and an improved kernel, or says why not (skip)".into()));
    }
    Ok(s)
}

/// What a kernel does at one row's shape: the counts and launch the
/// prediction is made from.
#[derive(Debug, Clone, PartialEq)]
pub struct Work {
    /// The kernel's name.
    pub kernel: String,
    /// Its counts at the shape.
    pub totals: WorkTotals,
    /// Launches per call.
    pub launches: u64,
    /// Its launch's configuration, where the compile gave one.
    pub launch: Option<LaunchShape>,
}

/// One row to score: where it is and each side's work.
#[derive(Debug, Clone)]
pub struct RowInput {
    /// The source's id (its file name).
    pub source: String,
    /// The row's index in its file.
    pub index: usize,
    /// The source's device name.
    pub device: String,
    /// How it was timed.
    pub timed: Timed,
    /// The row's variables.
    pub shape: BTreeMap<String, u64>,
    /// The published times, µs.
    pub published: (f64, f64),
    /// The baseline's and the improved version's work.
    pub work: (Work, Work),
}

/// The fitted parameters: the latency terms, the same on every device, and
/// the copy bandwidth of each device none has measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fitted {
    /// Bytes one thread keeps in flight.
    pub inflight_bytes_per_thread: f64,
    /// Round trips a program waits for one after another.
    pub dependent_trips: f64,
    /// The minimum kernel time, µs.
    pub min_kernel_us: f64,
    /// One CUDA graph node, µs.
    pub launch_graph_us: f64,
    /// The host's cost of one eager launch, µs.
    pub launch_us: f64,
    /// The copy bandwidth of each device whose `copy_fitted` is set, GB/s.
    #[serde(default)]
    pub copy_gbps: BTreeMap<String, f64>,
}

impl Fitted {
    /// The parameters as `devices` have them (the latency terms of
    /// `configured`, the device kidiom predicts for).
    pub fn of(configured: &DeviceModel, devices: &BTreeMap<String, DeviceModel>) -> Fitted {
        Fitted {
            inflight_bytes_per_thread: configured.inflight_bytes_per_thread,
            dependent_trips: configured.dependent_trips,
            min_kernel_us: configured.min_kernel_us,
            launch_graph_us: configured.launch_graph_us,
            launch_us: configured.launch_us,
            copy_gbps: devices.iter().filter(|(_, d)| d.copy_fitted).map(|(k, d)| (k.clone(), d.copy_gbps)).collect(),
        }
    }

    /// Device `name`'s model `d` with these parameters.
    pub fn apply(&self, name: &str, d: &DeviceModel) -> DeviceModel {
        DeviceModel {
            inflight_bytes_per_thread: self.inflight_bytes_per_thread,
            dependent_trips: self.dependent_trips,
            min_kernel_us: self.min_kernel_us,
            launch_graph_us: self.launch_graph_us,
            launch_us: self.launch_us,
            copy_gbps: self.copy_gbps.get(name).copied().unwrap_or(d.copy_gbps),
            ..d.clone()
        }
    }
}

/// One side of a scored row.
#[derive(Debug, Clone, Serialize)]
pub struct SideScore {
    /// The kernel that predicted it.
    pub kernel: String,
    /// The published time, µs.
    pub published_us: f64,
    /// The predicted time, µs.
    pub predicted_us: f64,
    /// Predicted over published.
    pub ratio: f64,
    /// |predicted / published - 1|.
    pub error: f64,
    /// The prediction, every term.
    pub prediction: Prediction,
}

/// A scored row.
#[derive(Debug, Clone, Serialize)]
pub struct RowScore {
    /// The source's id.
    pub source: String,
    /// The row's index in its file.
    pub index: usize,
    /// Whether it trained the fitted parameters (else it is held out).
    pub train: bool,
    /// The device.
    pub device: String,
    /// How it was timed.
    pub timed: Timed,
    /// The row's variables.
    pub shape: BTreeMap<String, u64>,
    /// The baseline.
    pub baseline: SideScore,
    /// The improved version.
    pub improved: SideScore,
    /// The published speedup (baseline over improved).
    pub published_speedup: f64,
    /// The predicted speedup.
    pub predicted_speedup: f64,
    /// |predicted speedup / published speedup - 1|.
    pub speedup_error: f64,
}

/// The median and worst of some errors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorStats {
    /// How many.
    pub n: usize,
    /// Their median.
    pub median: f64,
    /// Their largest.
    pub worst: f64,
}

impl ErrorStats {
    /// Of `errors` (finite ones).
    pub fn of(errors: impl IntoIterator<Item = f64>) -> ErrorStats {
        let mut e: Vec<f64> = errors.into_iter().filter(|x| x.is_finite()).collect();
        if e.is_empty() {
            return ErrorStats::default();
        }
        e.sort_by(f64::total_cmp);
        let n = e.len();
        let median = if n % 2 == 1 { e[n / 2] } else { (e[n / 2 - 1] + e[n / 2]) / 2.0 };
        ErrorStats { n, median, worst: e[n - 1] }
    }
}

/// The held-out errors of one kind of prediction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Expected {
    /// Of predicted times.
    pub time: ErrorStats,
    /// Of predicted speedups.
    pub speedup: ErrorStats,
}

/// The expected error of kidiom's predictions, from the held-out rows: in
/// all and per kernel (each side a kernel predicted; a speedup counts for
/// both of its kernels). Written by `kidiom predict --check --write`, read
/// wherever a prediction is printed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExpectedErrors {
    /// The command that made it.
    pub made_by: String,
    /// Over every held-out row.
    pub all: Expected,
    /// Per kernel.
    pub by_kernel: BTreeMap<String, Expected>,
    /// The fitted parameters the errors are of.
    pub fitted: Option<Fitted>,
}

impl ExpectedErrors {
    /// The expected error of a prediction for `kernel`: its own rows', else `None`.
    pub fn for_kernel(&self, kernel: &str) -> Option<&Expected> {
        self.by_kernel.get(kernel).filter(|e| e.time.n > 0)
    }

    /// The expected error of a predicted speedup of `kernel`: its own
    /// held-out rows', else every row's (marked as such); `None` when the
    /// check scored no speedup.
    pub fn speedup_error(&self, kernel: &str) -> Option<crate::evidence::ExpectedError> {
        let (of, s) = match self.for_kernel(kernel).filter(|e| e.speedup.n > 0) {
            Some(e) => (Some(kernel.to_string()), e.speedup),
            None => (None, self.all.speedup),
        };
        (s.n > 0).then_some(crate::evidence::ExpectedError { kernel: of, median: s.median, worst: s.worst, rows: s.n })
    }

    /// Reads it from `path`.
    pub fn read(path: &Path) -> Result<ExpectedErrors, PublishedError> {
        let bytes = std::fs::read(path).map_err(|e| PublishedError::Io { path: path.to_path_buf(), source: e })?;
        serde_json::from_slice(&bytes)
            .map_err(|e| PublishedError::Format { path: path.to_path_buf(), message: e.to_string() })
    }
}

/// Scores `rows` with the devices' models under `fitted`.
pub fn score(rows: &[RowInput], devices: &BTreeMap<String, DeviceModel>, fitted: &Fitted) -> Vec<RowScore> {
    rows.iter()
        .filter_map(|r| {
            let d = fitted.apply(&r.device, devices.get(&r.device)?);
            let side = |w: &Work, published: f64| {
                let p = predict_launch(&w.totals, w.launches, w.launch.as_ref(), r.timed.timing(), &d);
                let ratio = p.us / published;
                SideScore {
                    kernel: w.kernel.clone(),
                    published_us: published,
                    predicted_us: p.us,
                    ratio,
                    error: (ratio - 1.0).abs(),
                    prediction: p,
                }
            };
            let (b, i) = (side(&r.work.0, r.published.0), side(&r.work.1, r.published.1));
            let published_speedup = r.published.0 / r.published.1;
            let predicted_speedup = b.predicted_us / i.predicted_us;
            Some(RowScore {
                source: r.source.clone(),
                index: r.index,
                train: Source::trains(r.index),
                device: r.device.clone(),
                timed: r.timed,
                shape: r.shape.clone(),
                speedup_error: (predicted_speedup / published_speedup - 1.0).abs(),
                baseline: b,
                improved: i,
                published_speedup,
                predicted_speedup,
            })
        })
        .collect()
}

/// The time errors' loss: the mean of |ln(predicted / published)| over both
/// sides of `scores` (every row counts, none dominates), the median
/// breaking ties.
fn loss(scores: &[RowScore]) -> (f64, f64) {
    let logs: Vec<f64> =
        scores.iter().flat_map(|s| [s.baseline.ratio.ln().abs(), s.improved.ratio.ln().abs()]).collect();
    let mean = logs.iter().sum::<f64>() / logs.len().max(1) as f64;
    (mean, ErrorStats::of(logs.iter().copied()).median)
}

/// `n + 1` values from 0 by `step`.
fn steps(n: usize, step: f64) -> Vec<f64> {
    (0..=n).map(|i| i as f64 * step).collect()
}

/// Fits the latency terms on the training rows of `rows`: a joint grid over
/// the bytes in flight per thread, the dependent round trips, the minimum
/// kernel time and a graph node's cost (they trade against each other on
/// the same rows), then each parameter alone on a finer grid, with the eager
/// launch's cost and each unmeasured device's copy bandwidth (a share of its
/// data sheet's), until nothing improves; the least mean log error wins.
/// `start` is kept where no value does better.
pub fn fit(rows: &[RowInput], devices: &BTreeMap<String, DeviceModel>, start: &Fitted) -> Fitted {
    let train: Vec<RowInput> = rows.iter().filter(|r| Source::trains(r.index)).cloned().collect();
    if train.is_empty() {
        return start.clone();
    }
    let loss_of = |f: &Fitted| loss(&score(&train, devices, f));
    let mut best = (start.clone(), loss_of(start));
    let consider = |f: Fitted, best: &mut (Fitted, (f64, f64))| {
        let l = loss_of(&f);
        if l < best.1 {
            *best = (f, l);
        }
    };
    let inflight = [8.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0, 256.0, 512.0];
    let trips = steps(8, 0.5);
    for &i in &inflight {
        for &t in &trips {
            for &m in &steps(20, 0.25) {
                for &g in &steps(4, 0.5) {
                    let f = Fitted {
                        inflight_bytes_per_thread: i,
                        dependent_trips: t,
                        min_kernel_us: m,
                        launch_graph_us: g,
                        ..start.clone()
                    };
                    consider(f, &mut best);
                }
            }
        }
    }
    // the devices whose copy bandwidth the rows fit
    let fitted_devices: Vec<&String> = devices
        .iter()
        .filter(|(k, d)| d.copy_fitted && train.iter().any(|r| &r.device == *k))
        .map(|(k, _)| k)
        .collect();
    for _ in 0..8 {
        let before = best.1;
        let mut tries: Vec<Fitted> = Vec::new();
        let b = best.0.clone();
        tries.extend(steps(64, 8.0).into_iter().skip(1).map(|v| Fitted { inflight_bytes_per_thread: v, ..b.clone() }));
        tries.extend(steps(32, 0.125).into_iter().map(|v| Fitted { dependent_trips: v, ..b.clone() }));
        tries.extend(steps(40, 0.125).into_iter().map(|v| Fitted { min_kernel_us: v, ..b.clone() }));
        tries.extend(steps(24, 0.125).into_iter().map(|v| Fitted { launch_graph_us: v, ..b.clone() }));
        tries.extend(steps(80, 1.0).into_iter().map(|v| Fitted { launch_us: v, ..b.clone() }));
        for name in &fitted_devices {
            let hbm = devices[*name].hbm_gbps;
            for share in (30..=100).step_by(2) {
                let mut f = b.clone();
                f.copy_gbps.insert((*name).clone(), hbm * share as f64 / 100.0);
                tries.push(f);
            }
        }
        for f in tries {
            consider(f, &mut best);
        }
        if best.1 >= before {
            break;
        }
    }
    best.0
}

/// The held-out errors of `scores`, in all and per kernel.
pub fn expected(scores: &[RowScore], made_by: &str, fitted: Option<Fitted>) -> ExpectedErrors {
    let held: Vec<&RowScore> = scores.iter().filter(|s| !s.train).collect();
    let of = |rows: &[&RowScore], kernel: Option<&str>| Expected {
        time: ErrorStats::of(
            rows.iter()
                .flat_map(|s| [&s.baseline, &s.improved])
                .filter(|side| kernel.is_none_or(|k| side.kernel == k))
                .map(|side| side.error),
        ),
        speedup: ErrorStats::of(
            rows.iter()
                .filter(|s| kernel.is_none_or(|k| s.baseline.kernel == k || s.improved.kernel == k))
                .map(|s| s.speedup_error),
        ),
    };
    let mut kernels: Vec<&str> =
        held.iter().flat_map(|s| [s.baseline.kernel.as_str(), s.improved.kernel.as_str()]).collect();
    kernels.sort_unstable();
    kernels.dedup();
    ExpectedErrors {
        made_by: made_by.to_string(),
        all: of(&held, None),
        by_kernel: kernels.into_iter().map(|k| (k.to_string(), of(&held, Some(k)))).collect(),
        fitted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    const SOURCE: &str = r#"
url = "https://example.org/pr/1"
device = "h200"
kind = "decode"
timed = "graph"
method = "CUDA graphs, median of 100"
baseline = "a V-tiled decode"
improved = "one block per head"
[predict]
baseline = "kda.decode"
improved = "kda_cuda.decode"
why = "the same step"
shape = { N = "B", S = "B" }
[[rows]]
B = 4
H = 16
HV = 16
K = 128
V = 128
baseline_us = 10.0
improved_us = 5.0
"#;

    #[test]
    fn a_source_reads_and_maps_its_rows_to_a_kernel_shape() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "one.toml", SOURCE);
        let s = read_dir(dir.path()).unwrap();
        assert_eq!((s.len(), s[0].id().as_str(), s[0].timed), (1, "one", Timed::Graph));
        let vars: Vec<String> = ["N", "H", "HV", "K", "V", "S"].iter().map(|v| v.to_string()).collect();
        let shape = s[0].kernel_shape(&s[0].rows[0], &vars).unwrap();
        assert_eq!((shape["N"], shape["S"], shape["HV"]), (4, 4, 16));
        let e = s[0].kernel_shape(&s[0].rows[0], &["T".to_string()]).unwrap_err();
        assert!(e.contains("kernel's T"), "{e}");
        assert!(Source::trains(0) && !Source::trains(1) && Source::trains(2));
    }

    #[test]
    fn broken_sources_are_errors_that_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("bad time", SOURCE.replace("baseline_us = 10.0", "baseline_us = -1.0"), "baseline_us"),
            ("no kernels", SOURCE.replace("baseline = \"kda.decode\"\n", ""), "[predict]"),
            ("unknown timing", SOURCE.replace("timed = \"graph\"", "timed = \"wall\""), "timed"),
            ("no rows", SOURCE[..SOURCE.find("[[rows]]").unwrap()].to_string(), "rows"),
        ];
        for (what, text, expect) in cases {
            let p = write(dir.path(), "x.toml", &text);
            let e = read_source(&p).unwrap_err().to_string();
            assert!(e.contains("x.toml") && e.contains(expect), "{what}: {e}");
        }
        std::fs::write(dir.path().join("x.toml"), [0xff, 0xfe, 0x00]).unwrap();
        assert!(read_source(&dir.path().join("x.toml")).unwrap_err().to_string().contains("UTF-8"));
        let empty = tempfile::tempdir().unwrap();
        assert!(read_dir(empty.path()).unwrap_err().to_string().contains("no *.toml"));
    }

    /// A row whose sides move `bytes` each in one launch of `programs` programs of 128 threads.
    fn row(index: usize, bytes: (u64, u64), programs: u64, published: (f64, f64)) -> RowInput {
        let work = |b: u64, k: &str| Work {
            kernel: k.into(),
            totals: WorkTotals { load_bytes: b, ..Default::default() },
            launches: 1,
            launch: Some(LaunchShape { programs, threads: 128, registers: Some(32), ..Default::default() }),
        };
        RowInput {
            source: "s".into(),
            index,
            device: "h200".into(),
            timed: Timed::Graph,
            shape: BTreeMap::new(),
            published,
            work: (work(bytes.0, "a"), work(bytes.1, "b")),
        }
    }

    #[test]
    fn the_fit_learns_from_the_training_rows_and_is_scored_on_the_others() {
        let devices = BTreeMap::from([("h200".to_string(), DeviceModel::h200())]);
        let start = Fitted::of(&DeviceModel::h200(), &devices);
        // rows made by the model itself at 256 bytes in flight and a 3 us minimum kernel: few
        // programs of 1 MB each, latency-bound (the bytes in flight decide), and two tiny ones
        let truth = Fitted { inflight_bytes_per_thread: 256.0, min_kernel_us: 3.0, ..start.clone() };
        let shapes = [(16, 16 << 20), (32, 32 << 20), (48, 48 << 20), (64, 64 << 20), (64, 4096), (128, 8192)];
        let mut rows: Vec<RowInput> = shapes
            .iter()
            .enumerate()
            .map(|(i, &(programs, bytes))| row(i, (bytes * 2, bytes), programs, (1.0, 1.0)))
            .collect();
        let made = score(&rows, &devices, &truth);
        for (r, s) in rows.iter_mut().zip(&made) {
            r.published = (s.baseline.predicted_us, s.improved.predicted_us);
        }
        let fitted = fit(&rows, &devices, &start);
        let scores = score(&rows, &devices, &fitted);
        let e = expected(&scores, "test", Some(fitted.clone()));
        assert!(e.all.time.n == 6 && e.all.time.worst < 0.05, "{fitted:?} {e:?}");
        assert!(e.by_kernel["a"].time.n == 3 && e.by_kernel["b"].speedup.n == 3, "{e:?}");
        // the untrained start is further off on the same held-out rows
        let before = expected(&score(&rows, &devices, &start), "test", None);
        assert!(before.all.time.median > e.all.time.median, "{before:?} {e:?}");
        // a held-out row never moves the fit
        let mut moved = rows.clone();
        moved[1].published = (1000.0, 1000.0);
        assert_eq!(fit(&moved, &devices, &start), fitted);
    }

    #[test]
    fn edits_are_made_once_each_or_are_an_error() {
        let e = |a: &str, b: &str| vec![(a.to_string(), b.to_string())];
        assert_eq!(apply_edits("BV = 32\nw = 4", &e("BV = 32", "BV = 8")).unwrap(), "BV = 8\nw = 4");
        assert!(apply_edits("x x", &e("x", "y")).unwrap_err().contains("2 times"));
        assert!(apply_edits("x", &e("z", "y")).unwrap_err().contains("0 times"));
    }

    #[test]
    fn error_stats_are_the_median_and_the_worst() {
        let s = ErrorStats::of([0.1, 0.5, 0.2, f64::NAN, 0.3]);
        assert_eq!((s.n, s.median, s.worst), (4, 0.25, 0.5));
        assert_eq!(ErrorStats::of([]), ErrorStats::default());
    }
}
