//! Gate 4, speed. Triton and CUDA kernels are timed on a GPU only
//! (`needs-gpu` on a CPU), by kidiom's own GPU gate (`gpu.rs`: the
//! candidate's device code only, launched and checked by `kidiom gpu-gate`),
//! or, with `--untrusted-bench` only, by the harness's `bench`, which imports
//! the candidate into the timing process (its evidence marked untrusted).
//! Host C++ (`language = "cpp"`) is timed on any CPU by the service-level
//! bench, judged by [`judge_host`]. Both GPU paths end in [`judge_timed`].

use std::time::Instant;

use kidiom_patterns::record::{GpuSpeedFigures, HostSpeedFigures, SpeedFigures};

use super::launch::Prepared;
use super::{MAX_PLAUSIBLE_SPEEDUP, SMALL_EDIT_LINES, SMALL_EDIT_SPEEDUP, Validation, stamp};
use crate::backend::python::HarnessStatus;
use crate::device::Device;
use crate::evidence::{GateRecord, GateStatus};
use crate::manifest::{KernelLanguage, Manifest};
use crate::request::{BenchOn, Kernel, Request};
use crate::verdict::{Gate, Verdict};
use crate::wire::{self, Bench, BenchFailed, HostBench};

/// The speed gate.
pub(super) fn gate(
    run: &mut Validation<'_>,
    p: &Prepared,
    manifest: &Manifest,
    changed_lines: usize,
    precision: bool,
    native: bool,
) -> Verdict {
    let t0 = Instant::now();
    let mut rec = GateRecord::new(Gate::Speed, GateStatus::Skipped, "");
    // Host C++ (the KV-transfer module) is timed on whatever CPU this is.
    let host = manifest.language == KernelLanguage::Cpp;
    if !host && (!native || run.v.opts.device == Device::Cpu) {
        rec.summary = "needs a GPU: kernels ran on the CPU".into();
        run.records.push(rec);
        let passed: Vec<&str> =
            run.records.iter().filter(|r| r.status == GateStatus::Passed).map(|r| r.gate.name()).collect();
        return Verdict::needs_gpu(format!("{} passed; speed needs a GPU", passed.join(", ")));
    }
    if !host && !run.v.opts.untrusted_bench {
        return super::gpu::gate(run, p, manifest, changed_lines, precision, rec, t0);
    }
    // alone on the machine: no other candidate's gates run while this one is timed
    let v = run.v;
    let _alone = v.timing.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    let limit = run.remaining();
    if limit.is_zero() {
        return run.out_of_time(rec);
    }
    // host C++: rounds and windows are the manifest's [service] settings
    let on = if host { BenchOn::Cpu } else { BenchOn::Cuda { iters: run.v.opts.bench_iters } };
    let arg = manifest.harness_arg(&p.harness.root);
    let history = if host { run.v.opts.host_history.as_deref() } else { None };
    let args = Request::Bench { kernel: Kernel::of(&arg), source: &p.cand_src, on, history }.argv();
    let b = match p.harness.call(&args, limit) {
        Ok(b) => b,
        Err(e) => {
            let reason = e.to_string();
            return run.stop(rec, GateStatus::Error, reason.clone(), Verdict::error(Some(Gate::Speed), reason, ""));
        }
    };
    let header = wire::header(&b, "bench");
    stamp(&mut rec, &b, header.as_ref().ok());
    rec.seconds = t0.elapsed().as_secs_f64();
    let header = match header {
        Ok(h) => h,
        Err(_) if matches!(b.status, HarnessStatus::TimedOut | HarnessStatus::Crashed) => {
            return run.harness_error(rec, &b, "the bench");
        }
        Err(e) => return run.wire_error(rec, &b, &e),
    };
    match b.status {
        HarnessStatus::Ok => {}
        HarnessStatus::Failed => {
            let failed: BenchFailed = match wire::body(&b, "bench") {
                Ok(f) => f,
                Err(e) => return run.wire_error(rec, &b, &e),
            };
            let why = header.reason.as_deref().unwrap_or("the candidate failed the bench's correctness gate");
            let summary = match failed.failures.first() {
                Some(f) => format!("{why}: {f}"),
                None => why.to_string(),
            };
            return run.stop(rec, GateStatus::Failed, summary.clone(), Verdict::rejected(Gate::Speed, summary));
        }
        HarnessStatus::Skipped => {
            rec.summary = format!("skipped: {}", header.reason.as_deref().unwrap_or("needs a GPU"));
            run.records.push(rec);
            return Verdict::needs_gpu("CPU gates passed; the bench found no GPU");
        }
        HarnessStatus::Error | HarnessStatus::TimedOut | HarnessStatus::Crashed => {
            return run.harness_error(rec, &b, "the bench");
        }
    }
    if host {
        return match wire::host_bench(&b) {
            Ok(hb) => judge_host(run, rec, &hb),
            Err(e) => run.wire_error(rec, &b, &e),
        };
    }
    match wire::body::<Bench>(&b, "bench") {
        Ok(bench) => judge_gpu(run, rec, &bench, changed_lines, precision),
        Err(e) => run.wire_error(rec, &b, &e),
    }
}

/// The flag that marks a GPU timing made by the harness's in-process bench.
pub(super) const UNTRUSTED: &str =
    "untrusted timing: the harness's bench imported the candidate into the timing process (--untrusted-bench)";

/// The speed verdict of a GPU kernel from the harness's `bench` (`--untrusted-bench`).
fn judge_gpu(
    run: &mut Validation<'_>,
    mut rec: GateRecord,
    j: &Bench,
    changed_lines: usize,
    precision: bool,
) -> Verdict {
    run.marks.push(UNTRUSTED.into());
    rec.set_metrics(&SpeedFigures::Gpu(GpuSpeedFigures {
        speedup: Some(j.speedup.0),
        noise_floor: Some(j.noise_floor.0),
        significant: j.significant,
        floor: j.floor.clone(),
        shape: j.shape.clone(),
        iters: j.iters,
        flags: j.flags.clone(),
        timed_by: Some("untrusted-bench".into()),
        gate: None,
    }));
    rec.set_sides(Some(&j.results.baseline), Some(&j.results.candidate));
    let t = Timed {
        speedup: j.speedup.0,
        noise: j.noise_floor.0,
        significant: j.significant,
        base_us: j.results.baseline.median_us.0,
        cand_us: j.results.candidate.median_us.0,
        flags: j.flags.clone(),
        by: "the harness's bench, untrusted",
    };
    judge_timed(run, rec, &t, changed_lines, precision)
}

/// A GPU timing, whoever measured it.
pub(super) struct Timed {
    pub(super) speedup: f64,
    pub(super) noise: f64,
    pub(super) significant: bool,
    pub(super) base_us: f64,
    pub(super) cand_us: f64,
    /// What the measurer flagged (never accepted).
    pub(super) flags: Vec<String>,
    /// Who measured it, for a reason (`the bench`, `the GPU gate`).
    pub(super) by: &'static str,
}

/// The speed verdict of a GPU kernel (`rec` has its figures): a significant
/// speedup (precision rewrites may cost time: noted, not rejected),
/// plausible for its size.
pub(super) fn judge_timed(
    run: &mut Validation<'_>,
    rec: GateRecord,
    t: &Timed,
    changed_lines: usize,
    precision: bool,
) -> Verdict {
    let (speedup, noise, significant) = (t.speedup, t.noise, t.significant);
    if !speedup.is_finite() || !noise.is_finite() {
        let reason = format!("the timing (by {}) has a non-finite speedup ({speedup}) or noise floor ({noise})", t.by);
        return run.stop(rec, GateStatus::Error, reason.clone(), Verdict::error(Some(Gate::Speed), reason, ""));
    }
    for f in &t.flags {
        run.flags.push(f.clone());
    }
    if speedup > MAX_PLAUSIBLE_SPEEDUP && !run.flags.iter().any(|f| f.contains("implausible")) {
        run.flags.push(format!("speedup {speedup:.2}x is beyond any plausible local rewrite"));
    }
    if changed_lines <= SMALL_EDIT_LINES && speedup > SMALL_EDIT_SPEEDUP {
        run.flags.push(format!("speedup {speedup:.2}x is implausible for a {changed_lines}-line edit"));
    }
    let summary = format!(
        "baseline {:.1} us, candidate {:.1} us: {speedup:.3}x (noise floor {:.1}%, {}; timed by {})",
        t.base_us,
        t.cand_us,
        noise * 100.0,
        if significant { "significant" } else { "within noise" },
        t.by
    );
    let faster = significant && speedup > 1.0;
    if !precision && !faster {
        let reason = format!("no significant speedup: {summary}");
        return run.stop(rec, GateStatus::Failed, summary, Verdict::rejected(Gate::Speed, reason));
    }
    if precision && speedup < 1.0 {
        run.notes.push(format!("precision rewrite costs {:.1}% time", (1.0 / speedup - 1.0) * 100.0));
    }
    run.stop(rec, GateStatus::Passed, summary.clone(), Verdict::accepted(summary))
}

/// The speed verdict of a host target from the harness's `bench`: the
/// service's requests/s, candidate over baseline (SPEC §8), each window in a
/// process of its own, the variants interleaved. Accepted only when the gain
/// is beyond the noise and the candidate's p99 request latency is no worse
/// (beyond the noise) than the baseline's; the scheduler's throughput and the
/// transfers' bandwidth are shown beside. Plausibility (a gap below the noise,
/// transfers beyond the machine's copy bandwidth, a baseline far below its own
/// history on this machine) is the harness's `flags`: a flagged result is
/// never accepted.
fn judge_host(run: &mut Validation<'_>, mut rec: GateRecord, j: &HostBench) -> Verdict {
    let (base, cand) = (&j.results.baseline, &j.results.candidate);
    let figures = (
        base.requests_per_s.finite(),
        cand.requests_per_s.finite(),
        j.speedup.finite(),
        j.noise_floor.finite(),
        j.latency_ratio.finite(),
    );
    let (Some(rb), Some(rc), Some(speedup), Some(noise), Some(latency)) = figures else {
        let reason = "the host bench reports a non-finite requests/s, speedup, latency or noise floor".to_string();
        let log = format!(
            "requests/s {} -> {}, speedup {}, p99 ratio {}, noise floor {}",
            base.requests_per_s.0, cand.requests_per_s.0, j.speedup.0, j.latency_ratio.0, j.noise_floor.0
        );
        return run.stop(rec, GateStatus::Error, reason.clone(), Verdict::error(Some(Gate::Speed), reason, log));
    };
    let significant = j.significant;
    for f in &j.flags {
        run.flags.push(f.clone());
    }
    let num = |x: wire::Num, scale: f64, digits: usize| {
        x.finite().map(|x| format!("{:.*}", digits, x * scale)).unwrap_or_else(|| "?".into())
    };
    rec.set_metrics(&SpeedFigures::Host(HostSpeedFigures {
        metric: j.metric.clone(),
        speedup: Some(speedup),
        noise_floor: Some(noise),
        significant,
        gap_baseline: base.gap.finite(),
        gap_candidate: cand.gap.finite(),
        requests_baseline: Some(rb),
        requests_candidate: Some(rc),
        latency_ratio: Some(latency),
        floor: j.floor.clone(),
        shape: j.shape.clone(),
        rounds: j.rounds,
        order: j.order.clone(),
        flags: j.flags.clone(),
    }));
    rec.set_sides(Some(base), Some(cand));
    let summary = format!(
        "requests/s {rb:.1} -> {rc:.1}: {speedup:.2}x (noise floor {:.1}%, {}); p99 latency {} -> {} ms; \
         scheduler {} -> {} steps/s under transfers (gap {} -> {}%); transfers {} -> {} GB/s; {}",
        noise * 100.0,
        if significant { "significant" } else { "within noise" },
        num(base.p99_us, 1e-3, 1),
        num(cand.p99_us, 1e-3, 1),
        num(base.steps_per_s_loaded, 1.0, 0),
        num(cand.steps_per_s_loaded, 1.0, 0),
        num(base.gap, 100.0, 1),
        num(cand.gap, 100.0, 1),
        num(base.transfer_gbps, 1.0, 2),
        num(cand.transfer_gbps, 1.0, 2),
        j.processes.as_deref().map(|p| format!("processes: {p}")).unwrap_or_else(|| "processes: not reported".into()),
    );
    if !(significant && speedup > 1.0) {
        let why = if significant { "the service is slower" } else { "no significant gain" };
        let reason = format!("{why}: {summary}");
        return run.stop(rec, GateStatus::Failed, summary, Verdict::rejected(Gate::Speed, reason));
    }
    if latency > 1.0 + noise {
        let reason = format!("the service's p99 latency is worse ({latency:.2}x, beyond the noise): {summary}");
        return run.stop(rec, GateStatus::Failed, summary, Verdict::rejected(Gate::Speed, reason));
    }
    run.stop(rec, GateStatus::Passed, summary.clone(), Verdict::accepted(summary))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::verdict::VerdictKind;

    fn host_bench(rb: f64, rc: f64, latency: f64, noise: f64, significant: bool, flags: &[&str]) -> HostBench {
        let variant = |rps: f64, gap: f64| {
            json!({"requests_per_s": rps, "p50_us": 1e7 / rps, "p99_us": 1.2e7 / rps, "gap": gap,
                   "steps_per_s_alone": 1e4, "steps_per_s_loaded": 1e4 * (1.0 - gap), "transfer_gbps": 11.0,
                   "median_us": 640.0})
        };
        serde_json::from_value(json!({
            "metric": "service-requests", "speedup": rc / rb, "noise_floor": noise, "significant": significant,
            "latency_ratio": latency, "flags": flags, "order": ["baseline", "candidate", "candidate", "baseline"],
            "rounds": 2, "processes": "one per variant and window",
            "results": {"baseline": variant(rb, 0.37), "candidate": variant(rc, 0.02)}
        }))
        .unwrap()
    }

    /// Judges `j` in a bare run; returns the verdict (after flags) and the speed record.
    fn judge(j: &HostBench) -> (Verdict, Value) {
        super::super::tests::bare_run("kernels/x.cpp", None, |mut run| {
            let verdict = judge_host(&mut run, GateRecord::new(Gate::Speed, GateStatus::Skipped, ""), j);
            let rec = serde_json::to_value(&run.records[0]).unwrap();
            let ev = run.finish(verdict);
            (ev.verdict, rec)
        })
    }

    #[test]
    fn the_in_process_bench_is_marked_untrusted_and_still_judged() {
        let side = |us: f64| json!({"median_us": us, "p10_us": us * 0.99, "p90_us": us * 1.01});
        let j: Bench = serde_json::from_value(json!({
            "speedup": 1.5, "noise_floor": 0.01, "significant": true, "flags": [],
            "results": {"baseline": side(150.0), "candidate": side(100.0)}, "iters": 50
        }))
        .unwrap();
        let (v, rec) = super::super::tests::bare_run("kernels/kda/decode.py", None, |mut run| {
            let verdict = judge_gpu(&mut run, GateRecord::new(Gate::Speed, GateStatus::Skipped, ""), &j, 10, false);
            let rec = serde_json::to_value(&run.records[0]).unwrap();
            (run.finish(verdict).verdict, rec)
        });
        assert_eq!(v.kind, VerdictKind::Accepted, "the mark is no result to refuse: {v:?}");
        assert_eq!(v.flags, [UNTRUSTED]);
        assert_eq!(rec["metrics"]["timed_by"], "untrusted-bench");
    }

    #[test]
    fn host_speed_is_the_services_requests_per_second() {
        let (v, rec) = judge(&host_bench(475.0, 690.0, 0.7, 0.02, true, &[]));
        assert_eq!(v.kind, VerdictKind::Accepted, "{v:?}");
        assert!(v.reason.starts_with("requests/s 475.0 -> 690.0: 1.45x"), "{}", v.reason);
        assert!(v.reason.contains("gap 37.0 -> 2.0%") && v.reason.contains("processes: one per"), "{}", v.reason);
        assert_eq!(rec["status"], "passed");
        assert_eq!(rec["before"]["requests_per_s"], 475.0);
        assert_eq!(rec["before"]["median_us"], 640.0, "extra fields are kept in the evidence");
        assert_eq!(rec["metrics"]["order"][1], "candidate");
        assert_eq!(rec["metrics"]["requests_candidate"], 690.0);

        let (v, _) = judge(&host_bench(475.0, 478.0, 1.0, 0.02, false, &[]));
        assert_eq!((v.kind, v.gate), (VerdictKind::Rejected, Some(Gate::Speed)));
        assert!(v.reason.starts_with("no significant gain"), "{}", v.reason);

        // a better scheduler gap with fewer requests served is slower (a GIL release that then sleeps)
        let (v, _) = judge(&host_bench(475.0, 330.0, 1.6, 0.02, true, &[]));
        assert_eq!(v.kind, VerdictKind::Rejected);
        assert!(v.reason.starts_with("the service is slower"), "{}", v.reason);

        // more requests but a worse tail
        let (v, _) = judge(&host_bench(475.0, 600.0, 1.3, 0.02, true, &[]));
        assert_eq!(v.kind, VerdictKind::Rejected);
        assert!(v.reason.contains("p99 latency is worse"), "{}", v.reason);

        // a flagged gain is never accepted
        let (v, _) = judge(&host_bench(475.0, 690.0, 0.7, 0.02, true, &["baseline: outside its history"]));
        assert_eq!(v.kind, VerdictKind::Rejected);
        assert!(v.reason.contains("flagged for review"), "{}", v.reason);

        let mut nan = host_bench(475.0, 690.0, 0.7, 0.02, true, &[]);
        nan.latency_ratio = wire::Num(f64::NAN);
        let (v, _) = judge(&nan);
        assert_eq!((v.kind, v.gate), (VerdictKind::Error, Some(Gate::Speed)));
    }
}
