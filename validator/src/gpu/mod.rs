//! The GPU gate that the candidate cannot touch (SPEC §8, "The GPU gate is
//! owned by Rust"; design notes in `shared/gpu-gate.md`): the candidate
//! contributes device code only, a cubin and a launch spec per shape made
//! without a GPU; kidiom checks the spec against the cubin's ELF, then
//! launches and times it itself on a stream it owns, baseline and candidate
//! interleaved, every call's buffers checked on the host against expected
//! values that never reach the device.
//!
//! - `spec`: the launch spec (`launch.json`), what a cubin assumes about its
//!   arguments, and the input sets and expected outputs beside it.
//! - `device`: the [`device::Device`] trait, what the gate needs from a GPU;
//!   `cuda` implements it with cudarc, `cpu` on the host for tests (a Rust
//!   closure plays the cubin).
//! - `gate`: the orchestration, [`gate::run_gate`]: rotation, poisoning,
//!   guards, ABBA, every call checked on the host.
//! - `stats`: median, p10/p90, noise floor, speedup, bandwidth and flags.
//! - `load`: a spec directory read as a variant and its input sets (`.npy`).
//! - `tensor`: element types, poison and the error metrics.
//!
//! [`gate_on_cuda`] puts them together: two spec directories, a CUDA
//! device or `needs-gpu`, the outcome.

pub mod cpu;
pub mod cuda;
#[cfg(feature = "cupti")]
pub mod cupti;
pub mod device;
pub mod gate;
pub mod load;
pub mod spec;
pub mod stats;
pub mod tensor;

#[cfg(test)]
mod planted;

use std::path::Path;

use gate::{GateOutcome, GateVerdict, Miss, Plan, Which};

/// The gate on CUDA device `ordinal`, from two spec directories: the
/// baseline's (trusted: its input sets and expected values are the only
/// ones used) and the candidate's (its `launch.json` and cubin only;
/// anything else in it is ignored). `plan`'s sets are replaced by the
/// baseline's. Without the driver library or a device the answer is
/// `needs-gpu` with the reason; a panic inside the driver bindings (a
/// symbol the installed driver lacks) is an `error`, never a crash.
pub fn gate_on_cuda(ordinal: usize, baseline: &Path, candidate: &Path, mut plan: Plan) -> GateOutcome {
    let error = |reason: String| GateOutcome { verdict: GateVerdict::Error { reason }, ..GateOutcome::needs_gpu("") };
    let base = match load::variant(baseline) {
        Ok(v) => v,
        Err(e) => return error(format!("the baseline's spec: {e}")),
    };
    plan.sets = match load::sets(baseline, &base.spec) {
        Ok(s) => s,
        Err(e) => return error(format!("the baseline's input sets: {e}")),
    };
    let cand = match load::variant(candidate) {
        Ok(v) => v,
        Err(e) => {
            let miss = Miss { variant: Which::Candidate, call: None, tensor: None, what: e.to_string() };
            return GateOutcome { verdict: GateVerdict::Rejected(miss), ..GateOutcome::needs_gpu("") };
        }
    };
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match cuda::CudaDevice::open(ordinal) {
        Ok(mut dev) => gate::run_gate(&mut dev, &base, &cand, &plan),
        Err(e @ (device::DeviceError::NoDriver | device::DeviceError::NoDevice(_))) => {
            GateOutcome::needs_gpu(e.to_string())
        }
        Err(e) => error(format!("opening the CUDA device: {e}")),
    }));
    run.unwrap_or_else(|p| {
        let why = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into());
        error(format!("the CUDA driver bindings failed: {why}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_dir(dir: &Path, cubin: &str) {
        let spec = serde_json::json!({
            "format": 1, "kernel": "k", "cubin": cubin, "cubin_sha256": "",
            "shape": {}, "grid": [1, 1, 1], "block": [32, 1, 1], "shared_bytes": 0, "num_ctas": 1,
            "params": [{"kind": "tensor", "name": "x", "dtype": "u8", "role": "input", "align": 1}]
        });
        std::fs::write(dir.join("launch.json"), spec.to_string()).unwrap();
        std::fs::write(dir.join("kernel.cubin"), b"\x7fELF").unwrap();
        std::fs::create_dir_all(dir.join("inputs/set0")).unwrap();
        let mut npy = b"\x93NUMPY\x01\x00".to_vec();
        let h = "{'descr': '|u1', 'fortran_order': False, 'shape': (1,), }\n";
        npy.extend((h.len() as u16).to_le_bytes());
        npy.extend(h.as_bytes());
        npy.push(7);
        std::fs::write(dir.join("inputs/set0/x.npy"), npy).unwrap();
    }

    #[test]
    fn without_a_driver_the_gate_needs_a_gpu_and_a_broken_spec_is_judged_first() {
        let (b, c) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        spec_dir(b.path(), "kernel.cubin");
        spec_dir(c.path(), "missing.cubin");
        let plan = || Plan::new(Vec::new(), gate::Tolerance { rel_l2: 1e-3, max_abs_rel: 1e-3 });
        let o = gate_on_cuda(0, b.path(), c.path(), plan());
        let GateVerdict::Rejected(m) = &o.verdict else { panic!("{o:?}") };
        assert!(m.call.is_none() && m.what.contains("missing.cubin"), "{m}");
        let o = gate_on_cuda(0, c.path(), b.path(), plan());
        assert!(
            matches!(&o.verdict, GateVerdict::Error { reason } if reason.starts_with("the baseline's spec")),
            "{o:?}"
        );
        if cuda::driver_present() {
            eprintln!("skipped the no-driver half: this machine has a CUDA driver library");
            return;
        }
        spec_dir(c.path(), "kernel.cubin");
        let o = gate_on_cuda(0, b.path(), c.path(), plan());
        assert_eq!(
            o.verdict,
            GateVerdict::NeedsGpu { reason: "no CUDA driver library (libcuda.so) on this machine".into() },
            "{o:?}"
        );
        assert_eq!(o.calls, 0);
    }
}
