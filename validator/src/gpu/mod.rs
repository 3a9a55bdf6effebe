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
//! - `elf`: what a cubin's ELF says about its kernel (entry, parameter
//!   layout, required block, undefined symbols, device globals).
//! - `check`: the spec checked against the cubin ([`check::check`], every
//!   refusal a one-line reason) and the arguments packed at the cubin's
//!   offsets ([`check::pack`]).
//! - `sha256`: the cubin hash a spec names.
//! - `device`: the [`device::Device`] trait, what the gate needs from a GPU;
//!   `cuda` implements it with cudarc, `cpu` on the host for tests (a Rust
//!   closure plays the cubin).
//! - `gate`: the orchestration, [`gate::run_gate`]: rotation, poisoning,
//!   guards, ABBA, every call checked on the host.
//! - `stats`: median, p10/p90, noise floor, speedup, bandwidth and flags.
//! - `load`: a spec directory read as a variant and its input sets (`.npy`).
//! - `tensor`: element types, poison and the error metrics.
//! - `process`: the gate as its own process (`kidiom gpu-gate`): its
//!   arguments, the spawn with a deadline, its JSON line read back.
//!
//! [`gate_on_cuda`] puts them together: two spec directories, a CUDA
//! device or `needs-gpu`, the outcome.

pub mod check;
pub mod cpu;
pub mod cuda;
#[cfg(feature = "cupti")]
pub mod cupti;
pub mod device;
pub mod elf;
pub mod gate;
pub mod load;
pub mod process;
pub mod sha256;
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
    // nothing launches that the spec and the cubin's ELF do not agree on; no GPU is needed to know
    if let Err(r) = check::check(&base.spec, &base.cubin) {
        return error(format!("the baseline's spec is refused: {r}"));
    }
    if let Err(r) = check::check(&cand.spec, &cand.cubin) {
        let miss = Miss { variant: Which::Candidate, call: None, tensor: None, what: format!("spec refused: {r}") };
        return GateOutcome { verdict: GateVerdict::Rejected(miss), ..GateOutcome::needs_gpu("") };
    }
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match cuda::CudaDevice::open(ordinal) {
        Ok(mut dev) => gate::run_gate(&mut dev, &base, &cand, &plan),
        Err(e @ (device::DeviceError::NoDriver | device::DeviceError::NoDevice(_))) => {
            GateOutcome::needs_gpu(e.to_string())
        }
        Err(e) => error(format!("opening the CUDA device: {e}")),
    }));
    let mut out = run.unwrap_or_else(|p| {
        let why = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into());
        error(format!("the CUDA driver bindings failed: {why}"))
    });
    if out.cubins.is_empty() {
        // both specs agree with their cubins: the hashes are the cubins' own
        out.cubins = [(Which::Baseline, &base), (Which::Candidate, &cand)]
            .into_iter()
            .map(|(w, v)| (w.to_string(), v.spec.cubin_sha256.clone()))
            .collect();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gpu/kda_decode_bench");

    fn npy(path: &Path, descr: &str, data: &[u8]) {
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        let h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (1,), }}\n");
        out.extend((h.len() as u16).to_le_bytes());
        out.extend(h.as_bytes());
        out.extend(data);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, out).unwrap();
    }

    /// Our decode's bench spec and cubin (the fixture), with one input set
    /// of one element per tensor; `cubin` names the cubin file.
    fn spec_dir(dir: &Path, cubin: &str) {
        let mut spec: serde_json::Value =
            serde_json::from_slice(&std::fs::read(format!("{FIXTURE}.launch.json")).unwrap()).unwrap();
        spec["cubin"] = cubin.into();
        std::fs::write(dir.join("launch.json"), spec.to_string()).unwrap();
        std::fs::copy(format!("{FIXTURE}.cubin"), dir.join("kernel.cubin")).unwrap();
        for p in spec["params"].as_array().unwrap() {
            let Some(name) = p["name"].as_str().filter(|_| p["kind"] == "tensor") else { continue };
            let (descr, bytes) = if p["dtype"] == "i64" { ("<i8", vec![0; 8]) } else { ("<f4", vec![0; 4]) };
            npy(&dir.join(format!("inputs/set0/{name}.npy")), descr, &bytes);
            if p["role"] != "input" {
                npy(&dir.join(format!("expected/set0/{name}.npy")), "<f8", &[0; 8]);
            }
        }
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
        // a spec the cubin disagrees with is refused before any device is asked for
        spec_dir(c.path(), "kernel.cubin");
        let mut bad: serde_json::Value =
            serde_json::from_slice(&std::fs::read(c.path().join("launch.json")).unwrap()).unwrap();
        bad["block"] = serde_json::json!([256, 1, 1]);
        std::fs::write(c.path().join("launch.json"), bad.to_string()).unwrap();
        let o = gate_on_cuda(0, b.path(), c.path(), plan());
        let GateVerdict::Rejected(m) = &o.verdict else { panic!("{o:?}") };
        assert!(m.what.starts_with("spec refused:") && m.what.contains("128"), "{m}");
        let o = gate_on_cuda(0, c.path(), b.path(), plan());
        assert!(
            matches!(&o.verdict, GateVerdict::Error { reason } if reason.starts_with("the baseline's spec is refused")),
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
