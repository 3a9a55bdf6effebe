//! Predicted time from a work profile: a roofline over the counts the
//! harness's `profile` made on the CPU (bytes, flops, special-function
//! evaluations, dot multiply-accumulates) and a named device's constants
//! (`kidiom.toml` `[devices.NAME]`).
//!
//! The prediction is the slowest of the four rates plus the launch overhead,
//! and `bound` names which one decides. It is always a *prediction*: every
//! record of it says so, and the device check prints it beside what a GPU
//! measures so the model's error is known.

use serde::{Deserialize, Serialize};

/// A device's throughput constants, each with where the number comes from.
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
    /// Overhead of one kernel launch, microseconds.
    pub launch_us: f64,
    /// Where each number comes from.
    #[serde(default)]
    pub sources: std::collections::BTreeMap<String, String>,
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
        ];
        for (k, v) in rates {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("device {}: {k} must be a positive number, not {v}", self.name));
            }
        }
        if !(self.launch_us.is_finite() && self.launch_us >= 0.0) {
            return Err(format!("device {}: launch_us must be zero or more, not {}", self.name, self.launch_us));
        }
        Ok(())
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

/// A predicted time: each roofline term and the one that decides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// Always `"prediction"`: a roofline over CPU counts, not a measurement.
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
    /// Launch overhead, µs.
    pub launch_us: f64,
}

/// The roofline time of `w` on `d`, for `launches` kernel launches per call.
pub fn predict(w: &WorkTotals, launches: u64, d: &DeviceModel) -> Prediction {
    let bytes = (w.load_bytes + w.store_bytes) as f64;
    let memory_us = bytes / (d.copy_gbps * 1e3);
    let compute_us = w.flops as f64 / (d.fp32_tflops * 1e6);
    let special_us = w.special_calls as f64 / (d.sfu_per_sm_clock * d.sm_count * d.clock_ghz * 1e3);
    let tensor_us = 2.0 * w.dot_macs as f64 / (d.tensor_tflops * 1e6);
    let launch_us = d.launch_us * launches.max(1) as f64;
    let terms = [
        (Bound::Memory, memory_us),
        (Bound::Compute, compute_us),
        (Bound::SpecialFunctions, special_us),
        (Bound::TensorCores, tensor_us),
    ];
    let (mut bound, mut work) = (Bound::Launch, 0.0);
    for (b, t) in terms {
        if t > work {
            (bound, work) = (b, t);
        }
    }
    if launch_us > work {
        bound = Bound::Launch;
    }
    Prediction {
        label: "prediction".into(),
        device: d.name.clone(),
        us: work + launch_us,
        bound,
        memory_us,
        compute_us,
        special_us,
        tensor_us,
        launch_us,
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
        // 403 MB at 4.3 TB/s = 93.6 us, 268 MB = 62.4 us (+ 3 us launch)
        assert!((twice.memory_us - 93.6).abs() < 0.5, "{twice:?}");
        assert!((once.memory_us - 62.4).abs() < 0.5, "{once:?}");
        let s = speedup(&twice, &once);
        assert!((1.40..1.50).contains(&s), "{s}");
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
        let tiny = WorkTotals { load_bytes: 1024, ..Default::default() };
        let p = predict(&tiny, 2, &d);
        assert_eq!((p.bound, p.launch_us), (Bound::Launch, 6.0));
        let bad = DeviceModel { copy_gbps: 0.0, ..DeviceModel::h200() };
        assert!(bad.check().unwrap_err().contains("copy_gbps"));
    }
}
