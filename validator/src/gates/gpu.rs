//! Gate 4 for Triton and CUDA kernels on a GPU: kidiom's own GPU gate (SPEC
//! §8, "The GPU gate is owned by Rust"). The candidate contributes device
//! code only:
//!
//! 1. no CUDA driver library here: `needs-gpu`, before any spec is made;
//! 2. the harness's `spec` (run here, never on a fleet: the gate runs here)
//!    writes the bench shape's launch spec and cubin twice, side by side: the
//!    baseline's with [`GATE_SETS`] input sets and their float64 expected
//!    values, from a process that never imported a candidate (cached per
//!    kernel and baseline blob under the validator's own directory), and the
//!    candidate's with none (its compile runs in the sandboxed worker; only
//!    its `launch.json` and cubin are read);
//! 3. `kidiom gpu-gate` (this executable, a process of its own with the
//!    validation's deadline, alone on the machine) checks both specs against
//!    their cubins, launches and times them interleaved on a stream it owns,
//!    checks every call's buffers on the host, and prints one JSON line;
//! 4. [`judge`] maps it: `measured` is judged as every GPU timing is
//!    ([`judge_timed`]), `rejected` is a rejection at correctness naming the
//!    call, `error` an error, `needs-gpu` (no device) `needs-gpu`. The record
//!    says the timing is the gate's (`timed_by`), with the cubin hashes, the
//!    seed, the device, the calls and the gate's notes.
//!
//! Only the bench shape is timed: the manifest's gpu shapes are the
//! harness's `check` on the GPU (the correctness gate), and each shape here
//! costs a compile and its input sets (the decode's bench set is ~1.7 GB).

use std::path::PathBuf;
use std::time::Instant;

use kidiom_patterns::record::{GpuSpeedFigures, SpeedFigures};
use kidiom_syntax::blob_id;
use serde_json::json;

use super::launch::Prepared;
use super::speed::{Timed, judge_timed};
use super::{Validation, note};
use crate::backend::python::{Harness, HarnessRun, HarnessStatus};
use crate::error::Error;
use crate::evidence::{GateRecord, GateStatus};
use crate::gpu::gate::{GateOutcome, GateVerdict, Tolerance};
use crate::gpu::process::{self, GateArgs};
use crate::manifest::Manifest;
use crate::request::{Kernel, Request};
use crate::verdict::{Gate, Verdict};
use crate::wire::{self, SpecDir, Specs};

/// Input sets of the baseline's spec, rotated over the calls (at least two
/// so that no call's inputs are the previous call's).
pub(crate) const GATE_SETS: u32 = 3;
/// The shapes the gate times.
const GATE_SHAPES: &[&str] = &["bench"];
/// Warm-up rounds (checked like the timed ones).
const WARMUP: usize = 2;
/// What a record's `timed_by` says of this gate's timing.
pub(crate) const TIMED_BY: &str = "gpu-gate";

/// Why the gate could not get as far as a verdict of its own.
struct Failure {
    reason: String,
    log: String,
}

impl Failure {
    fn new(reason: impl Into<String>, log: impl Into<String>) -> Failure {
        Failure { reason: reason.into(), log: log.into() }
    }
}

/// The GPU gate: see the module doc.
pub(super) fn gate(
    run: &mut Validation<'_>,
    p: &Prepared,
    manifest: &Manifest,
    changed_lines: usize,
    precision: bool,
    mut rec: GateRecord,
    t0: Instant,
) -> Verdict {
    if !crate::gpu::cuda::driver_present() {
        let reason = match run.v.fleet {
            None => "no CUDA driver library (libcuda.so) on this machine",
            // the cluster checked correctness on its GPUs; the gate runs here
            Some(_) => {
                "no CUDA driver library (libcuda.so) where kidiom runs (the GPU gate runs here, not on the \
                 cluster; --untrusted-bench times on the cluster)"
            }
        };
        rec.summary = format!("skipped: {reason}");
        run.records.push(rec);
        return Verdict::needs_gpu(format!("CPU gates passed; the GPU gate: {reason}"));
    }
    if run.remaining().is_zero() {
        return run.out_of_time(rec);
    }
    let failed = |run: &mut Validation<'_>, rec: GateRecord, f: Failure| {
        run.stop(rec, GateStatus::Error, f.reason.clone(), Verdict::error(Some(Gate::Speed), f.reason, f.log))
    };
    let (base, cand) = match specs(run, p, manifest, &mut rec) {
        Ok(s) => s,
        Err(f) => return failed(run, rec, f),
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return failed(run, rec, Failure::new(format!("the kidiom executable for the GPU gate: {e}"), "")),
    };
    let args = GateArgs {
        baseline: PathBuf::from(&base.dir),
        candidate: PathBuf::from(&cand.dir),
        tolerance: Tolerance { rel_l2: manifest.tolerance.rel_l2, max_abs_rel: manifest.tolerance.max_abs_rel },
        warmup: WARMUP,
        rounds: run.v.opts.bench_iters as usize,
        floor_bytes: base.floor_bytes.and_then(|b| b.finite()),
        seed: None,
        ordinal: 0,
    };
    // alone on the machine: no other candidate's gates run while this one is timed
    let v = run.v;
    let _alone = v.timing.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    let limit = run.remaining();
    if limit.is_zero() {
        return run.out_of_time(rec);
    }
    let gr = match process::run(&exe, &args, limit) {
        Ok(r) => r,
        Err(e) => return failed(run, rec, Failure::new(format!("starting the GPU gate: {e}"), "")),
    };
    rec.commands.push(gr.process.command.clone());
    rec.seconds = t0.elapsed().as_secs_f64();
    match gr.outcome {
        Ok(o) => judge(run, rec, &o, &base, changed_lines, precision),
        Err(reason) => failed(run, rec, Failure::new(reason, gr.process.stderr_tail.clone())),
    }
}

/// The bench shape's spec directories, the baseline's and the candidate's,
/// made at once (each a harness process of its own).
fn specs(
    run: &Validation<'_>,
    p: &Prepared,
    manifest: &Manifest,
    rec: &mut GateRecord,
) -> Result<(SpecDir, SpecDir), Failure> {
    let v = run.v;
    let harness = Harness::new(v.python.clone(), p.harness.root.clone());
    let kernel = manifest.name.as_str();
    let src = p.harness.root.join(manifest.source_path());
    let text = std::fs::read(&src).map_err(|e| Failure::new(format!("reading {}: {e}", src.display()), ""))?;
    let key = (manifest.name.clone(), blob_id(&text));
    let base_out = match &v.baseline_cache {
        Some(d) => d.path().join("gpu-specs").join(format!("{kernel}-{}", key.1)),
        None => p.scratch().join("baseline-specs"),
    };
    let cand_out = p.scratch().join("candidate-specs");
    let arg = manifest.harness_arg(&p.harness.root);
    let which = Kernel::of(&arg);
    let base_args =
        Request::Spec { kernel: which, source: None, out: &base_out, sets: v.opts.gate_sets, shapes: GATE_SHAPES }
            .argv();
    let cand_args =
        Request::Spec { kernel: which, source: Some(&p.cand_src), out: &cand_out, sets: 0, shapes: GATE_SHAPES }.argv();
    let limit = run.remaining();
    let (b, c) = std::thread::scope(|s| {
        let b = s.spawn(|| match v.baseline_cache {
            Some(_) => v.specced.get_or_run(&key, || harness.call(&base_args, limit)).0,
            None => harness.call(&base_args, limit),
        });
        let c = harness.call(&cand_args, limit);
        let b = b.join().unwrap_or_else(|_| Err(Error::Internal("the baseline's spec thread panicked".into())));
        (b, c)
    });
    let b = b.map_err(|e| Failure::new(format!("the baseline's launch spec: {e}"), ""))?;
    let c = c.map_err(|e| Failure::new(format!("the candidate's launch spec: {e}"), ""))?;
    let base = read_spec(rec, &b, "the baseline")?;
    let cand = read_spec(rec, &c, "the candidate")?;
    Ok((base, cand))
}

/// The bench shape's directory from a `spec` run, its command noted in `rec`.
fn read_spec(rec: &mut GateRecord, r: &HarnessRun, who: &str) -> Result<SpecDir, Failure> {
    note(rec, r);
    let header = wire::header(r, "spec").map_err(|e| Failure::new(format!("{who}'s launch spec: {e}"), r.log()))?;
    if r.status != HarnessStatus::Ok {
        let why = header.error.or(header.reason).unwrap_or_else(|| format!("status {}", header.status));
        return Err(Failure::new(format!("{who}'s launch spec could not be made: {why}"), r.log()));
    }
    if rec.versions.is_null() {
        rec.versions = header.versions.unwrap_or_default();
    }
    let specs: Specs = wire::body(r, "spec").map_err(|e| Failure::new(format!("{who}'s launch spec: {e}"), r.log()))?;
    specs
        .specs
        .into_iter()
        .find(|d| d.label == "bench")
        .ok_or_else(|| Failure::new(format!("{who}'s launch spec has no bench shape"), r.log()))
}

/// The verdict of the gate's outcome `o` at the bench shape `bench`.
fn judge(
    run: &mut Validation<'_>,
    mut rec: GateRecord,
    o: &GateOutcome,
    bench: &SpecDir,
    changed_lines: usize,
    precision: bool,
) -> Verdict {
    let evidence = json!({
        "seed": o.seed, "device": o.device, "calls": o.calls, "cubins": o.cubins,
        "worst": o.worst, "notes": o.notes, "clock": "CUDA events around the launch alone; CUPTI's kernel records the second clock where present",
    });
    let mut figures = GpuSpeedFigures {
        floor: bench.floor_bytes.map(|b| json!({"bytes": b.0})),
        shape: Some(bench.shape.clone()),
        timed_by: Some(TIMED_BY.into()),
        gate: Some(evidence),
        ..GpuSpeedFigures::default()
    };
    if !matches!(o.verdict, GateVerdict::NeedsGpu { .. }) {
        rec.device = Some(o.device.clone());
    }
    match &o.verdict {
        GateVerdict::Measured(t) => {
            figures.speedup = Some(t.speedup);
            figures.noise_floor = Some(t.noise_floor);
            figures.significant = t.significant;
            figures.iters = Some(t.candidate.calls as u64);
            figures.flags = t.flags.clone();
            rec.set_metrics(&SpeedFigures::Gpu(figures));
            rec.set_sides(Some(&t.baseline), Some(&t.candidate));
            let timed = Timed {
                speedup: t.speedup,
                noise: t.noise_floor,
                significant: t.significant,
                base_us: t.baseline.median_us,
                cand_us: t.candidate.median_us,
                flags: t.flags.clone(),
                by: "kidiom's GPU gate",
            };
            judge_timed(run, rec, &timed, changed_lines, precision)
        }
        GateVerdict::Rejected(m) => {
            rec.set_metrics(&SpeedFigures::Gpu(figures));
            let reason = format!("the GPU gate: {m}");
            run.stop(rec, GateStatus::Failed, reason.clone(), Verdict::rejected(Gate::Correctness, reason))
        }
        GateVerdict::Error { reason } => {
            rec.set_metrics(&SpeedFigures::Gpu(figures));
            let reason = format!("the GPU gate: {reason}");
            run.stop(rec, GateStatus::Error, reason.clone(), Verdict::error(Some(Gate::Speed), reason, ""))
        }
        GateVerdict::NeedsGpu { reason } => {
            rec.set_metrics(&SpeedFigures::Gpu(figures));
            rec.summary = format!("skipped: {reason}");
            run.records.push(rec);
            Verdict::needs_gpu(format!("CPU gates passed; the GPU gate: {reason}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::gpu::gate::{Call, Miss, Which};
    use crate::gpu::stats::{Bounds, compare};
    use crate::verdict::VerdictKind;

    fn bench() -> SpecDir {
        SpecDir {
            label: "bench".into(),
            shape: json!({"N": 64}),
            dir: "/tmp/x".into(),
            cubin_sha256: "ab".into(),
            floor_bytes: Some(wire::Num(2e8)),
        }
    }

    fn outcome(verdict: GateVerdict) -> GateOutcome {
        let mut o = GateOutcome::needs_gpu("");
        o.verdict = verdict;
        o.device = "NVIDIA H200 (sm_90)".into();
        o.calls = 44;
        o.cubins = [("baseline".to_string(), "aa".to_string()), ("candidate".to_string(), "cc".to_string())].into();
        o
    }

    /// The verdict (after flags and marks) and the speed record of `o`, for a `lines`-line edit.
    fn judged(o: &GateOutcome, lines: usize) -> (crate::verdict::Verdict, Value) {
        super::super::tests::bare_run("kernels/kda/decode.py", None, |mut run| {
            let rec = GateRecord::new(Gate::Speed, GateStatus::Skipped, "");
            let verdict = judge(&mut run, rec, o, &bench(), lines, false);
            let rec = serde_json::to_value(run.records.last().unwrap()).unwrap();
            (run.finish(verdict).verdict, rec)
        })
    }

    fn bounds() -> Bounds {
        Bounds { floor_bytes: Some(2e8), peak_gbps: 4800.0, implausible_speedup: 4.0 }
    }

    #[test]
    fn a_measured_speedup_is_judged_as_every_gpu_timing_and_says_who_timed_it() {
        let base = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0];
        let fast: Vec<f64> = base.iter().map(|b| b / 1.5).collect();
        let (v, rec) = judged(&outcome(GateVerdict::Measured(compare(&base, &fast, &bounds()))), 10);
        assert_eq!(v.kind, VerdictKind::Accepted, "{v:?}");
        assert!(v.reason.starts_with("baseline 100.0 us, candidate 66.7 us: 1.500x"), "{}", v.reason);
        assert!(v.reason.ends_with("timed by kidiom's GPU gate)"), "{}", v.reason);
        assert!(v.flags.is_empty(), "{:?}", v.flags);
        assert_eq!(rec["status"], "passed");
        assert_eq!(rec["device"], "NVIDIA H200 (sm_90)");
        assert_eq!(rec["metrics"]["timed_by"], "gpu-gate");
        assert_eq!(rec["metrics"]["gate"]["cubins"]["candidate"], "cc");
        assert_eq!(rec["metrics"]["gate"]["calls"], 44);
        assert_eq!(rec["metrics"]["floor"]["bytes"], 2e8);
        assert_eq!(rec["metrics"]["iters"], 6);
        assert_eq!(rec["before"]["median_us"], 100.0);
        assert!(rec["after"]["achieved_gbps"].as_f64().is_some_and(|g| g > 2900.0 && g < 3100.0), "{rec:#}");
        // within noise: rejected at speed
        let same = [100.2, 100.8, 99.1, 100.4, 99.7, 100.1];
        let (v, _) = judged(&outcome(GateVerdict::Measured(compare(&base, &same, &bounds()))), 10);
        assert_eq!((v.kind, v.gate), (VerdictKind::Rejected, Some(Gate::Speed)), "{v:?}");
        assert!(v.reason.starts_with("no significant speedup"), "{}", v.reason);
        // 3.5x from a two-line edit: flagged, never accepted
        let much: Vec<f64> = base.iter().map(|b| b / 3.5).collect();
        let (v, _) = judged(&outcome(GateVerdict::Measured(compare(&base, &much, &bounds()))), 2);
        assert_eq!(v.kind, VerdictKind::Rejected, "{v:?}");
        assert!(v.flags.iter().any(|f| f.contains("implausible for a 2-line edit")), "{:?}", v.flags);
        // the gate's own flags (beyond the peak) are never accepted either
        let b = Bounds { floor_bytes: Some(1e12), ..bounds() };
        let (v, _) = judged(&outcome(GateVerdict::Measured(compare(&base, &fast, &b))), 10);
        assert_eq!(v.kind, VerdictKind::Rejected, "{v:?}");
        assert!(v.flags.iter().any(|f| f.contains("beyond the device's peak")), "{:?}", v.flags);
    }

    /// The real harness's `spec`, baseline and candidate side by side, read
    /// as the gate reads them (no input sets: this tests the wiring, and
    /// `kernels/tests/test_spec.py` what the sets hold).
    #[test]
    fn the_specs_are_made_side_by_side_and_their_bench_shape_read() {
        let Some(py) = crate::gpu::check::tests::python() else { return };
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut b = crate::validator::ValidatorBuilder::new(&root);
        b.python(Some(py));
        b.gate_sets = 0;
        let v = b.build().unwrap();
        let path = "kernels/kda/decode.py";
        let base = std::fs::read_to_string(root.join(path)).unwrap();
        let cand = base.replace("b_p = tl.sum(b_s * b_k[:, None], axis=0)", "b_p = tl.sum(b_k[:, None] * b_s, axis=0)");
        assert_ne!(base, cand);
        let t = super::super::Touched { path: path.into(), base, cand };
        let p = super::super::launch::prepare(&v, &t).unwrap();
        let manifest = v.kernels.for_source(path).unwrap().clone();
        let c = crate::input::CandidateInput::bare(path);
        let run = Validation::new(&v, &c);
        let mut rec = GateRecord::new(Gate::Speed, GateStatus::Skipped, "");
        let (b, c) = specs(&run, &p, &manifest, &mut rec).unwrap_or_else(|f| panic!("{}\n{}", f.reason, f.log));
        let cache = v.baseline_cache.as_ref().unwrap().path();
        assert!(std::path::Path::new(&b.dir).starts_with(cache), "the baseline's specs are the validator's: {}", b.dir);
        assert!(
            std::path::Path::new(&c.dir).starts_with(p.scratch()),
            "the candidate's are the validation's: {}",
            c.dir
        );
        assert_eq!((b.label.as_str(), b.shape.clone()), ("bench", json!(manifest.shapes.bench)));
        assert!(b.floor_bytes.and_then(|f| f.finite()).is_some_and(|f| f > 1e8), "{b:?}");
        for d in [&b.dir, &c.dir] {
            let d = std::path::Path::new(d);
            assert!(d.join("launch.json").is_file() && d.join("kernel.cubin").is_file(), "{}", d.display());
        }
        let commands: Vec<&String> = rec.commands.iter().collect();
        assert_eq!(commands.len(), 2, "{commands:?}");
        assert!(commands[0].contains(" spec --kernel kda.decode --out ") && !commands[0].contains("--source"));
        assert!(commands[1].contains(" spec --kernel kda.decode --source ") && commands[1].contains("--sets 0"));
        assert!(rec.versions.is_object(), "{:?}", rec.versions);
        // the baseline's specs are made once per kernel and blob: the same directory again
        let mut again = GateRecord::new(Gate::Speed, GateStatus::Skipped, "");
        let (b2, _) = specs(&run, &p, &manifest, &mut again).unwrap_or_else(|f| panic!("{}", f.reason));
        assert_eq!(b2, b);
    }

    #[test]
    fn a_gate_rejection_is_a_rejection_at_correctness_naming_the_call() {
        let miss = Miss {
            variant: Which::Candidate,
            call: Some(Call { index: 5, warmup: false, set: 2 }),
            tensor: Some("o".into()),
            what: "3 NaN left (poison not overwritten)".into(),
        };
        let (v, rec) = judged(&outcome(GateVerdict::Rejected(miss)), 10);
        assert_eq!((v.kind, v.gate), (VerdictKind::Rejected, Some(Gate::Correctness)), "{v:?}");
        assert_eq!(v.reason, "the GPU gate: candidate call 5 (set 2): o: 3 NaN left (poison not overwritten)");
        assert_eq!(rec["status"], "failed");
        assert_eq!(rec["metrics"]["timed_by"], "gpu-gate");
    }

    #[test]
    fn a_gate_error_is_an_error_and_no_device_needs_a_gpu() {
        let (v, rec) = judged(&outcome(GateVerdict::Error { reason: "the baseline fails its own check".into() }), 10);
        assert_eq!((v.kind, v.gate), (VerdictKind::Error, Some(Gate::Speed)), "{v:?}");
        assert_eq!(v.reason, "the GPU gate: the baseline fails its own check");
        assert_eq!(rec["status"], "error");
        let (v, rec) = judged(&GateOutcome::needs_gpu("no CUDA device: CUDA_ERROR_NO_DEVICE"), 10);
        assert_eq!(v.kind, VerdictKind::NeedsGpu, "{v:?}");
        assert_eq!(v.reason, "CPU gates passed; the GPU gate: no CUDA device: CUDA_ERROR_NO_DEVICE");
        assert_eq!(rec["status"], "skipped");
        assert!(rec["device"].is_null(), "nothing ran on a device: {rec:#}");
    }
}
