//! Predicted time from a work profile and a launch's configuration: the
//! counts the harness's `profile` made on the CPU (bytes, flops,
//! special-function evaluations, dot multiply-accumulates), the compile's
//! figures (programs, threads, registers, shared memory) and a named
//! device's constants (`kidiom.toml` `[devices.NAME]`).
//!
//! One term per effect, each in microseconds so a reviewer sees why:
//! - `memory_us`: the bytes at the measured copy bandwidth (the roof);
//! - `latency_us`: what Little's law adds when the resident programs keep
//!   too few bytes in flight to reach the roof (bandwidth = bytes in flight
//!   / memory latency; resident programs from registers, shared memory and
//!   threads per program), each program also waiting `dependent_trips`
//!   round trips one after another;
//! - `waves_us`: what a last, partial wave of programs adds (wave quantization);
//! - `compute_us`, `special_us`, `tensor_us`: the compute roofs;
//! - `min_kernel_us`: what the device's minimum kernel time adds to a tiny kernel;
//! - `launch_us`: the launch, eager (the host's cost per launch, overlapping
//!   the kernels of back-to-back calls) or under a CUDA graph (per kernel node).
//!
//! It is always a *prediction*: every record of it says so, and
//! `kidiom predict --check` scores it against published measurements.

use serde::{Deserialize, Serialize};

/// A device's constants, each with where the number comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceModel {
    /// The device's name (`NVIDIA H200 SXM`).
    pub name: String,
    /// Peak memory bandwidth, GB/s (the data sheet's).
    pub hbm_gbps: f64,
    /// Measured device-to-device copy bandwidth, GB/s: what a streaming kernel reaches.
    pub copy_gbps: f64,
    /// FP32 (CUDA-core) rate, TFLOP/s.
    pub fp32_tflops: f64,
    /// Tensor-core rate for the dots' default precision (TF32, dense), TFLOP/s.
    pub tensor_tflops: f64,
    /// Special-function results per clock per SM (MUFU: exp2, log2, rsqrt, rcp, sin, cos).
    pub sfu_per_sm_clock: f64,
    /// Streaming multiprocessors.
    pub sm_count: f64,
    /// Boost clock, GHz.
    pub clock_ghz: f64,
    /// The host's cost of one eager kernel launch, microseconds.
    pub launch_us: f64,
    /// One kernel node of a CUDA graph's replay, microseconds.
    #[serde(default = "defaults::launch_graph_us")]
    pub launch_graph_us: f64,
    /// The shortest a kernel takes, launched and retired, microseconds.
    #[serde(default = "defaults::min_kernel_us")]
    pub min_kernel_us: f64,
    /// Latency of a load from device memory, nanoseconds.
    #[serde(default = "defaults::mem_latency_ns")]
    pub mem_latency_ns: f64,
    /// Bytes one thread keeps in flight (loads issued before the first is
    /// waited for); fitted on published measurements.
    #[serde(default = "defaults::inflight_bytes_per_thread")]
    pub inflight_bytes_per_thread: f64,
    /// Round trips to memory a program waits for one after another before
    /// its bytes stream (an index loaded before the row it names, a store
    /// after the load it needs); fitted on published measurements.
    #[serde(default = "defaults::dependent_trips")]
    pub dependent_trips: f64,
    /// Whether `copy_gbps` is fitted on published measurements (no copy
    /// bandwidth of this device has been measured): `kidiom predict --check`
    /// fits it on the training rows of the device.
    #[serde(default)]
    pub copy_fitted: bool,
    /// Resident threads per SM.
    #[serde(default = "defaults::max_threads_per_sm")]
    pub max_threads_per_sm: f64,
    /// Resident programs (thread blocks) per SM.
    #[serde(default = "defaults::max_programs_per_sm")]
    pub max_programs_per_sm: f64,
    /// 32-bit registers per SM.
    #[serde(default = "defaults::registers_per_sm")]
    pub registers_per_sm: f64,
    /// Shared memory per SM, bytes.
    #[serde(default = "defaults::shared_per_sm_bytes")]
    pub shared_per_sm_bytes: f64,
    /// Where each number comes from.
    #[serde(default)]
    pub sources: std::collections::BTreeMap<String, String>,
}

/// Hopper's and Blackwell's per-SM limits (the CUDA C++ Programming Guide's
/// table of compute capabilities 9.0 and 10.0), and the latency terms' values
/// before a fit.
mod defaults {
    pub(super) fn launch_graph_us() -> f64 {
        1.0
    }
    pub(super) fn min_kernel_us() -> f64 {
        2.0
    }
    pub(super) fn mem_latency_ns() -> f64 {
        450.0
    }
    pub(super) fn inflight_bytes_per_thread() -> f64 {
        64.0
    }
    pub(super) fn dependent_trips() -> f64 {
        1.0
    }
    pub(super) fn max_threads_per_sm() -> f64 {
        2048.0
    }
    pub(super) fn max_programs_per_sm() -> f64 {
        32.0
    }
    pub(super) fn registers_per_sm() -> f64 {
        65536.0
    }
    pub(super) fn shared_per_sm_bytes() -> f64 {
        233472.0
    }
}

impl DeviceModel {
    /// NVIDIA H200 SXM: the data sheet, CUDA's throughput table for compute
    /// capability 9.0, and the copy bandwidth measured for SPEC §11.
    pub fn h200() -> DeviceModel {
        let sources = [
            ("hbm_gbps", "NVIDIA H200 data sheet: 4.8 TB/s HBM3e"),
            ("copy_gbps", "SPEC §11: measured device-to-device copy on an H200, 4.3 TB/s"),
            ("fp32_tflops", "NVIDIA H200 data sheet: FP32 67 TFLOPS"),
            ("tensor_tflops", "NVIDIA H200 data sheet: TF32 Tensor Core 989 TFLOPS with sparsity, 494.7 dense"),
            ("sfu_per_sm_clock", "CUDA C++ Programming Guide, arithmetic instruction throughput, cc 9.0: 16"),
            ("sm_count", "NVIDIA H200 SXM: 132 SMs"),
            ("clock_ghz", "NVIDIA H100/H200 SXM boost clock 1.98 GHz"),
            ("launch_us", "typical CUDA kernel launch overhead, a few microseconds"),
        ];
        DeviceModel {
            name: "NVIDIA H200 SXM".into(),
            hbm_gbps: 4800.0,
            copy_gbps: 4300.0,
            fp32_tflops: 67.0,
            tensor_tflops: 494.7,
            sfu_per_sm_clock: 16.0,
            sm_count: 132.0,
            clock_ghz: 1.98,
            launch_us: 3.0,
            launch_graph_us: defaults::launch_graph_us(),
            min_kernel_us: defaults::min_kernel_us(),
            mem_latency_ns: defaults::mem_latency_ns(),
            inflight_bytes_per_thread: defaults::inflight_bytes_per_thread(),
            dependent_trips: defaults::dependent_trips(),
            copy_fitted: false,
            max_threads_per_sm: defaults::max_threads_per_sm(),
            max_programs_per_sm: defaults::max_programs_per_sm(),
            registers_per_sm: defaults::registers_per_sm(),
            shared_per_sm_bytes: defaults::shared_per_sm_bytes(),
            sources: sources.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    /// Why the constants cannot be used, if they cannot (a rate that is not
    /// a positive finite number).
    pub fn check(&self) -> Result<(), String> {
        let rates = [
            ("hbm_gbps", self.hbm_gbps),
            ("copy_gbps", self.copy_gbps),
            ("fp32_tflops", self.fp32_tflops),
            ("tensor_tflops", self.tensor_tflops),
            ("sfu_per_sm_clock", self.sfu_per_sm_clock),
            ("sm_count", self.sm_count),
            ("clock_ghz", self.clock_ghz),
            ("mem_latency_ns", self.mem_latency_ns),
            ("inflight_bytes_per_thread", self.inflight_bytes_per_thread),
            ("max_threads_per_sm", self.max_threads_per_sm),
            ("max_programs_per_sm", self.max_programs_per_sm),
            ("registers_per_sm", self.registers_per_sm),
            ("shared_per_sm_bytes", self.shared_per_sm_bytes),
        ];
        for (k, v) in rates {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("device {}: {k} must be a positive number, not {v}", self.name));
            }
        }
        for (k, v) in [
            ("dependent_trips", self.dependent_trips),
            ("launch_us", self.launch_us),
            ("launch_graph_us", self.launch_graph_us),
            ("min_kernel_us", self.min_kernel_us),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("device {}: {k} must be zero or more, not {v}", self.name));
            }
        }
        Ok(())
    }

    /// Programs of `launch` resident on one SM at a time: the fewest that
    /// threads, registers (allocated per warp, 256 at a time) and shared
    /// memory allow, at least one.
    pub fn resident_per_sm(&self, launch: &LaunchShape) -> f64 {
        let threads = launch.threads.max(1) as f64;
        let warps = (threads / 32.0).ceil();
        let mut n = self.max_programs_per_sm.min((self.max_threads_per_sm / (warps * 32.0)).floor());
        if let Some(r) = launch.registers.filter(|r| *r > 0) {
            let per_warp = ((r as f64 * 32.0) / 256.0).ceil() * 256.0;
            n = n.min((self.registers_per_sm / (per_warp * warps)).floor());
        }
        if let Some(b) = launch.shared_bytes.filter(|b| *b > 0) {
            n = n.min((self.shared_per_sm_bytes / b as f64).floor());
        }
        n.max(1.0)
    }
}

/// How calls are timed: eager launches back to back (the host's launch cost
/// overlaps the kernels before it) or a CUDA graph's replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Timing {
    /// Plain calls, one after another.
    Eager,
    /// A CUDA graph: each kernel a node, no host work per call.
    #[default]
    Graph,
    /// The kernels' own device time (a profiler's), no launch.
    Kernel,
}

impl Timing {
    /// Its name in prose.
    pub fn name(self) -> &'static str {
        match self {
            Timing::Eager => "eager",
            Timing::Graph => "CUDA graph",
            Timing::Kernel => "profiler (kernel time alone)",
        }
    }
}

/// A launch's configuration: what decides how many programs are resident
/// and how many bytes they keep in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchShape {
    /// Programs (Triton) or thread blocks (CUDA) of the grid.
    pub programs: u64,
    /// Threads per program (Triton: num_warps x 32).
    pub threads: u64,
    /// Registers per thread, where the compile says.
    #[serde(default)]
    pub registers: Option<u64>,
    /// Shared memory per program, bytes, where the compile says.
    #[serde(default)]
    pub shared_bytes: Option<u64>,
}

impl LaunchShape {
    /// From a compile's figures (the harness's `compile` JSON) and the
    /// profile's programs and threads per program (CUDA: the contract's
    /// block; Triton: none, the compile's num_warps says). `None` where
    /// neither says how many threads a program has.
    pub fn from_compile(compile: &serde_json::Value, programs: u64, threads: Option<u64>) -> Option<LaunchShape> {
        let int = |v: &serde_json::Value| v.as_u64().filter(|n| *n > 0);
        let triton = &compile["triton"];
        let threads = threads.filter(|t| *t > 0).or_else(|| int(&triton["num_warps"]).map(|w| 32 * w))?;
        let res = &compile["resources"];
        let shared = int(&triton["shared_bytes"]).or_else(|| {
            let s =
                res["shared_static_bytes"].as_u64().unwrap_or(0) + res["shared_dynamic_bytes"].as_u64().unwrap_or(0);
            (s > 0).then_some(s)
        });
        Some(LaunchShape {
            programs: programs.max(1),
            threads,
            registers: int(&res["registers"]),
            shared_bytes: shared,
        })
    }
}

/// The counts a prediction is made from (the harness's `profile` totals, at the bench shape).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkTotals {
    /// Global bytes loaded.
    pub load_bytes: u64,
    /// Global bytes stored.
    pub store_bytes: u64,
    /// Of the loaded bytes, those loaded again by the same program or thread.
    pub reread_bytes: u64,
    /// Special-function evaluations.
    pub special_calls: u64,
    /// Floating-point operations (outside dots).
    pub flops: u64,
    /// `tl.dot` multiply-accumulates.
    pub dot_macs: u64,
    /// Of the special-function evaluations, those the same program or thread
    /// made before on the same arguments (0 from a harness before them).
    #[serde(default)]
    pub repeat_calls: u64,
    /// Of the special-function evaluations, those another program of the
    /// launch or thread of the block made first (0 from a harness before them).
    #[serde(default)]
    pub uniform_calls: u64,
}

/// What decides a predicted time (stored in the evidence, so defined with it).
pub use kidiom_patterns::record::Bound;

/// A predicted time: each term and the one that decides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// Always `"prediction"`: a model over CPU counts, not a measurement.
    pub label: String,
    /// The device's name.
    pub device: String,
    /// Predicted microseconds per call.
    pub us: f64,
    /// What decides it.
    pub bound: Bound,
    /// Bytes at the measured copy bandwidth, µs.
    pub memory_us: f64,
    /// FP32 flops at the FP32 rate, µs.
    pub compute_us: f64,
    /// Special functions at the SFU rate, µs.
    pub special_us: f64,
    /// Dot MACs at the tensor-core rate, µs.
    pub tensor_us: f64,
    /// The launch's share of the call, µs (eager: what the host's launches
    /// take beyond the kernels; graph: the nodes).
    pub launch_us: f64,
    /// What too few bytes in flight add to the memory time, µs (Little's law).
    #[serde(default)]
    pub latency_us: f64,
    /// What the last, partial wave adds, µs.
    #[serde(default)]
    pub waves_us: f64,
    /// What the device's minimum kernel time adds, µs.
    #[serde(default)]
    pub min_kernel_us: f64,
    /// How the call is timed.
    #[serde(default)]
    pub timing: Timing,
    /// The launch's configuration the latency terms came from (`None`: no
    /// compile figures, the roofs and the launch alone).
    #[serde(default)]
    pub launch: Option<LaunchFigures>,
}

/// The occupancy a prediction assumed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LaunchFigures {
    /// Programs of the grid.
    pub programs: u64,
    /// Threads per program.
    pub threads: u64,
    /// Programs resident per SM.
    pub resident_per_sm: f64,
    /// Waves: programs over the SMs' resident programs.
    pub waves: f64,
    /// The bandwidth the resident programs reach, GB/s.
    pub achieved_gbps: f64,
}

impl Prediction {
    /// Each term with its share of the predicted time, largest first, terms
    /// of zero left out: those that add up to the time, then the roofs that
    /// run under the deciding one (`adds` false): why the prediction is what
    /// it is.
    pub fn shares(&self) -> Vec<Share> {
        let total = if self.us > 0.0 { self.us } else { 1.0 };
        let memory = self.memory_us + self.latency_us + self.waves_us;
        let roofs = [
            ("fp32 compute", self.compute_us),
            ("special functions", self.special_us),
            ("tensor cores", self.tensor_us),
        ];
        let top = roofs.iter().map(|r| r.1).fold(0.0, f64::max);
        let mut terms: Vec<(&'static str, f64, bool)> = vec![
            ("memory (bytes at the copy bandwidth)", self.memory_us, memory >= top),
            ("memory latency (bytes in flight)", self.latency_us, memory >= top),
            ("waves (a partial last wave)", self.waves_us, memory >= top),
            ("minimum kernel time", self.min_kernel_us, true),
            ("launch", self.launch_us, true),
        ];
        let mut decided = memory >= top;
        for (name, us) in roofs {
            // the first roof at the top decides; the rest run under it
            let adds = !decided && us == top;
            decided |= adds;
            terms.push((name, us, adds));
        }
        let mut out: Vec<Share> = terms
            .into_iter()
            .filter(|t| t.1 > 0.0)
            .map(|(name, us, adds)| Share { name, us, share: us / total, adds })
            .collect();
        out.sort_by(|a, b| b.adds.cmp(&a.adds).then(b.us.total_cmp(&a.us)));
        out
    }
}

/// One term of a prediction (`Prediction::shares`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share {
    /// The term, in prose.
    pub name: &'static str,
    /// Its microseconds.
    pub us: f64,
    /// Its microseconds over the predicted time.
    pub share: f64,
    /// Whether it adds to the time (false: a roof under the deciding one).
    pub adds: bool,
}

/// The roofline time of `w` on `d`, for `launches` kernel launches per call
/// under a CUDA graph (how a serving engine runs a decode step), without a
/// launch's configuration: the roofs, the minimum kernel time and the nodes.
pub fn predict(w: &WorkTotals, launches: u64, d: &DeviceModel) -> Prediction {
    predict_launch(w, launches, None, Timing::Graph, d)
}

/// The time of `w` on `d` for `launches` launches of the configuration
/// `launch` (`None`: the roofs alone), timed as `timing`.
///
/// The memory time runs wave by wave: `capacity` programs resident (SMs x
/// resident per SM), each moving its share of the bytes with at most
/// `threads x inflight_bytes_per_thread` in flight, so one wave of `n`
/// programs takes `bytes_per_program x max(latency / in_flight, n / roof)`.
/// Compute terms are the roofs over the whole grid. A kernel takes at least
/// `min_kernel_us`. Eager calls overlap the host's launches with the kernels
/// (the call takes the longer of the two); a graph adds a node per launch.
pub fn predict_launch(
    w: &WorkTotals,
    launches: u64,
    launch: Option<&LaunchShape>,
    timing: Timing,
    d: &DeviceModel,
) -> Prediction {
    let launches = launches.max(1) as f64;
    let bytes = (w.load_bytes + w.store_bytes) as f64;
    let roof = d.copy_gbps * 1e3; // bytes per µs
    let memory_us = bytes / roof;
    let compute_us = w.flops as f64 / (d.fp32_tflops * 1e6);
    let special_us = w.special_calls as f64 / (d.sfu_per_sm_clock * d.sm_count * d.clock_ghz * 1e3);
    let tensor_us = 2.0 * w.dot_macs as f64 / (d.tensor_tflops * 1e6);
    let (mut latency_us, mut waves_us, mut figures) = (0.0, 0.0, None);
    if let Some(l) = launch.filter(|l| l.programs > 0 && bytes > 0.0) {
        let programs = l.programs as f64;
        let resident = d.resident_per_sm(l);
        let capacity = (d.sm_count * resident).max(1.0);
        let per_program = bytes / programs;
        let in_flight = per_program.min(l.threads.max(1) as f64 * d.inflight_bytes_per_thread);
        let latency = d.mem_latency_ns / 1e3; // µs
        // a program alone: its dependent round trips, then its bytes a round trip per in-flight load
        let alone = latency * (d.dependent_trips + per_program / in_flight);
        // one wave of n programs (µs): each as if alone, unless together they pass the roof
        let wave = |n: f64| alone.max(per_program * n / roof);
        let full = (programs / capacity).floor();
        let rest = programs - full * capacity;
        let quantized = full * wave(capacity) + if rest > 0.0 { wave(rest) } else { 0.0 };
        let smooth = (alone * programs / programs.min(capacity)).max(memory_us);
        latency_us = (smooth - memory_us).max(0.0);
        waves_us = (quantized - smooth).max(0.0);
        figures = Some(LaunchFigures {
            programs: l.programs,
            threads: l.threads,
            resident_per_sm: resident,
            waves: programs / capacity,
            achieved_gbps: if quantized > 0.0 { bytes / quantized / 1e3 } else { d.copy_gbps },
        });
    }
    let terms = [
        (Bound::Memory, memory_us + latency_us + waves_us),
        (Bound::Compute, compute_us),
        (Bound::SpecialFunctions, special_us),
        (Bound::TensorCores, tensor_us),
    ];
    let (mut bound, mut body) = (Bound::Launch, 0.0);
    for (b, t) in terms {
        if t > body {
            (bound, body) = (b, t);
        }
    }
    if bound == Bound::Memory && latency_us + waves_us > memory_us {
        bound = Bound::Latency;
    }
    // each launch is a kernel of at least the minimum time; the work spreads over them
    let per_kernel = body / launches;
    let min_kernel_us = launches * (d.min_kernel_us - per_kernel).max(0.0);
    let kernels = body + min_kernel_us;
    let launch_us = match timing {
        Timing::Eager => (d.launch_us * launches - kernels).max(0.0),
        Timing::Graph => d.launch_graph_us * launches,
        Timing::Kernel => 0.0,
    };
    if min_kernel_us + launch_us > body {
        bound = Bound::Launch;
    }
    Prediction {
        label: "prediction".into(),
        device: d.name.clone(),
        us: kernels + launch_us,
        bound,
        memory_us,
        compute_us,
        special_us,
        tensor_us,
        launch_us,
        latency_us,
        waves_us,
        min_kernel_us,
        timing,
        launch: figures,
    }
}

/// Baseline time over candidate time (above 1: predicted faster).
pub fn speedup(baseline: &Prediction, candidate: &Prediction) -> f64 {
    if candidate.us > 0.0 { baseline.us / candidate.us } else { f64::INFINITY }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Our CUDA decode at the bench shape (N = 64, HV = 32, K = V = 128), SPEC §11.
    fn decode(state_reads: u64) -> WorkTotals {
        let kv = 64 * 32 * 128 * 128;
        WorkTotals {
            load_bytes: state_reads * kv * 4,
            store_bytes: kv * 4,
            reread_bytes: (state_reads - 1) * kv * 4,
            special_calls: 2 * kv,
            flops: 7 * kv,
            dot_macs: 0,
            ..Default::default()
        }
    }

    #[test]
    fn the_decode_is_memory_bound_and_its_second_read_costs_half_again() {
        let d = DeviceModel::h200();
        d.check().unwrap();
        let (twice, once) = (predict(&decode(2), 1, &d), predict(&decode(1), 1, &d));
        assert_eq!(twice.bound, Bound::Memory);
        // 403 MB at 4.3 TB/s = 93.6 us, 268 MB = 62.4 us, each + 1 us for its graph node
        assert!((twice.memory_us - 93.6).abs() < 0.5, "{twice:?}");
        assert!((once.memory_us - 62.4).abs() < 0.5, "{once:?}");
        assert_eq!((twice.launch_us, twice.us), (1.0, twice.memory_us + 1.0));
        let s = speedup(&twice, &once);
        assert!((1.45..1.50).contains(&s), "{s}");
        // eager, the host's 3 us launch runs under the kernel before it
        let eager = predict_launch(&decode(2), 1, None, Timing::Eager, &d);
        assert_eq!((eager.launch_us, eager.us), (0.0, eager.memory_us));
        assert_eq!(twice.label, "prediction");
        // 67 M special functions at 16 x 132 x 1.98 GHz: 16 us, well under the bytes
        assert!((twice.special_us - 16.0).abs() < 0.5, "{twice:?}");
    }

    #[test]
    fn each_term_can_decide_and_nothing_is_launch_bound_but_tiny_work() {
        let d = DeviceModel::h200();
        let sfu = WorkTotals { special_calls: 10_000_000_000, ..Default::default() };
        assert_eq!(predict(&sfu, 1, &d).bound, Bound::SpecialFunctions);
        let dots = WorkTotals { dot_macs: 1 << 40, ..Default::default() };
        assert_eq!(predict(&dots, 1, &d).bound, Bound::TensorCores);
        let flops = WorkTotals { flops: 1 << 40, ..Default::default() };
        assert_eq!(predict(&flops, 1, &d).bound, Bound::Compute);
        // two launches of a tiny kernel: two minimum kernels (2 x 2 us) under the host's 2 x 3 us
        let tiny = WorkTotals { load_bytes: 1024, ..Default::default() };
        let p = predict_launch(&tiny, 2, None, Timing::Eager, &d);
        assert_eq!(p.bound, Bound::Launch);
        assert!((p.us - 6.0).abs() < 1e-9 && (p.min_kernel_us - 4.0).abs() < 0.01, "{p:?}");
        let g = predict_launch(&tiny, 2, None, Timing::Graph, &d);
        assert!((g.us - (4.0 + 2.0)).abs() < 0.01 && g.launch_us == 2.0, "{g:?}");
        let bad = DeviceModel { copy_gbps: 0.0, ..DeviceModel::h200() };
        assert!(bad.check().unwrap_err().contains("copy_gbps"));
        let bad = DeviceModel { mem_latency_ns: f64::NAN, ..DeviceModel::h200() };
        assert!(bad.check().unwrap_err().contains("mem_latency_ns"));
    }

    /// A decode's state, `n` sequences of 32 heads, K = V = 128, fp32, read and written once.
    fn state(n: u64) -> WorkTotals {
        let kv = n * 32 * 128 * 128 * 4;
        WorkTotals { load_bytes: kv, store_bytes: kv, ..Default::default() }
    }

    #[test]
    fn a_small_batch_keeps_too_few_bytes_in_flight_to_reach_the_roof() {
        let d = DeviceModel::h200();
        // one sequence: 4 V-tiles x 32 heads = 128 programs of 64 threads, 32 kB each
        let launch = LaunchShape { programs: 128, threads: 64, registers: Some(64), ..Default::default() };
        let p = predict_launch(&state(1), 1, Some(&launch), Timing::Graph, &d);
        // 4.2 MB at the roof is about 1 us; 64 threads x 64 B in flight per program take
        // 8 round trips of 450 ns after the one it waits for first (its slot): 4.05 us
        assert!((p.memory_us - 0.98).abs() < 0.01, "{p:?}");
        assert!((p.memory_us + p.latency_us - 4.05).abs() < 0.01, "{p:?}");
        assert_eq!((p.bound, p.waves_us), (Bound::Latency, 0.0));
        let f = p.launch.unwrap();
        assert!(f.achieved_gbps < 0.3 * d.copy_gbps, "{f:?}");
        // 64 sequences: 8192 programs of 128 threads, 8 resident per SM (64 registers); the roof decides
        let big = LaunchShape { programs: 8192, threads: 128, ..launch };
        let q = predict_launch(&state(64), 1, Some(&big), Timing::Graph, &d);
        assert_eq!(q.bound, Bound::Memory);
        assert!(q.latency_us == 0.0 && (q.launch.unwrap().resident_per_sm - 8.0).abs() < 1e-9, "{q:?}");
    }

    #[test]
    fn a_launch_reads_from_the_compile_and_the_profile() {
        // Triton: num_warps and shared memory from Triton's figures, registers from ptxas
        let triton = serde_json::json!({"triton": {"num_warps": 4, "shared_bytes": 90112},
            "resources": {"registers": 168, "shared_static_bytes": 0}});
        let l = LaunchShape::from_compile(&triton, 128, None).unwrap();
        assert_eq!((l.programs, l.threads, l.registers, l.shared_bytes), (128, 128, Some(168), Some(90112)));
        // CUDA: the contract's block from the profile, static and dynamic shared memory added
        let cuda = serde_json::json!({"resources": {"registers": 32, "shared_static_bytes": 512, "shared_dynamic_bytes": 256}});
        let l = LaunchShape::from_compile(&cuda, 2048, Some(128)).unwrap();
        assert_eq!((l.threads, l.registers, l.shared_bytes), (128, Some(32), Some(768)));
        // neither says how many threads: no launch (the roofs alone)
        assert!(LaunchShape::from_compile(&cuda, 2048, None).is_none());
        assert!(LaunchShape::from_compile(&serde_json::json!({"triton": {"num_warps": 0}}), 1, None).is_none());
    }

    #[test]
    fn occupancy_comes_from_threads_registers_and_shared_memory() {
        let d = DeviceModel::h200();
        let l = |threads, registers, shared_bytes| LaunchShape { programs: 1, threads, registers, shared_bytes };
        assert_eq!(d.resident_per_sm(&l(128, None, None)), 16.0); // 2048 threads
        assert_eq!(d.resident_per_sm(&l(32, None, None)), 32.0); // 32 programs at most
        assert_eq!(d.resident_per_sm(&l(128, Some(255), None)), 2.0); // 65536 / (8192 x 4 warps)
        assert_eq!(d.resident_per_sm(&l(128, None, Some(90112))), 2.0); // 228 kB / 88 kB
        assert_eq!(d.resident_per_sm(&l(1024, Some(255), Some(300_000))), 1.0); // never below one
    }

    #[test]
    fn a_launch_configuration_changes_the_prediction() {
        let d = DeviceModel::h200();
        // 128 programs of 256 kB: 4 warps keep half the bytes in flight that 8 warps do
        // (1 + 32 round trips of 450 ns against 1 + 16, past the roof's 7.8 us)
        let w = WorkTotals { load_bytes: 128 * 262144, ..Default::default() };
        let four = LaunchShape { programs: 128, threads: 128, registers: Some(64), ..Default::default() };
        let eight = LaunchShape { threads: 256, ..four };
        let (a, b) = (
            predict_launch(&w, 1, Some(&four), Timing::Graph, &d),
            predict_launch(&w, 1, Some(&eight), Timing::Graph, &d),
        );
        assert!(a.us > 1.5 * b.us && (a.us - 1.0 - 14.85).abs() < 0.1, "{a:?} {b:?}");
        // one program past a full wave (132 x 8 + 1) waits its latency alone: 1 + 4 round trips
        let programs = 132 * 8 + 1;
        let bytes = WorkTotals { load_bytes: programs * 32768, ..Default::default() };
        let full = LaunchShape { programs, ..four };
        let q = predict_launch(&bytes, 1, Some(&full), Timing::Graph, &d);
        assert!((q.waves_us - 2.25).abs() < 0.02 && q.launch.unwrap().waves > 1.0, "{q:?}");
        let shares = a.shares();
        let adding: f64 = shares.iter().filter(|s| s.adds).map(|s| s.share).sum();
        assert!((adding - 1.0).abs() < 1e-9, "{shares:?}");
        assert_eq!(shares[0].name, "memory (bytes at the copy bandwidth)");
        // a roof under the memory time is shown, not added
        let mixed = WorkTotals { flops: 1 << 20, ..w };
        let m = predict_launch(&mixed, 1, Some(&four), Timing::Graph, &d).shares();
        assert!(m.iter().any(|s| s.name == "fp32 compute" && !s.adds), "{m:?}");
    }
}
