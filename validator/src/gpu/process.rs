//! The GPU gate as its own process, `kidiom gpu-gate` (SPEC §8, "The GPU
//! gate is owned by Rust"): the arguments its caller gives it
//! ([`GateArgs`]), the spawn with a deadline through `kidiom_exec` (the one
//! place processes start), and its one JSON line read back as the
//! [`GateOutcome`] it printed. The exit code must agree with the verdict it
//! prints (0 measured, 1 rejected, 2 error, 3 needs-gpu); anything else (a
//! timeout, a signal, no line, a line that does not parse, a code that
//! disagrees) is a reason the caller reports as an `error`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kidiom_exec::ProcessOutcome;

use super::gate::{GateOutcome, GateVerdict, Tolerance};

/// What `kidiom gpu-gate` is told.
#[derive(Debug, Clone, PartialEq)]
pub struct GateArgs {
    /// The baseline's spec directory (its input sets and expected values are the only ones used).
    pub baseline: PathBuf,
    /// The candidate's spec directory (its launch spec and cubin only).
    pub candidate: PathBuf,
    /// The manifest's tolerances.
    pub tolerance: Tolerance,
    /// Warm-up rounds (checked, not timed).
    pub warmup: usize,
    /// Timed rounds (each calls both variants).
    pub rounds: usize,
    /// The manifest's floor bytes at the shape, for the achieved bandwidth.
    pub floor_bytes: Option<f64>,
    /// The set order's seed (`None`: the gate draws one).
    pub seed: Option<u64>,
    /// The CUDA device ordinal.
    pub ordinal: usize,
}

impl GateArgs {
    /// The argv after `kidiom`.
    pub fn argv(&self) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "gpu-gate".into(),
            "--baseline".into(),
            self.baseline.to_string_lossy().into_owned(),
            "--candidate".into(),
            self.candidate.to_string_lossy().into_owned(),
            "--rel-l2".into(),
            format!("{:e}", self.tolerance.rel_l2),
            "--max-abs-rel".into(),
            format!("{:e}", self.tolerance.max_abs_rel),
            "--warmup".into(),
            self.warmup.to_string(),
            "--rounds".into(),
            self.rounds.to_string(),
            "--ordinal".into(),
            self.ordinal.to_string(),
        ];
        if let Some(b) = self.floor_bytes {
            a.extend(["--floor-bytes".into(), format!("{b:e}")]);
        }
        if let Some(s) = self.seed {
            a.extend(["--seed".into(), s.to_string()]);
        }
        a
    }
}

/// One run of the gate's process.
#[derive(Debug, Clone)]
pub struct GateRun {
    /// How the process ended, its command line and output.
    pub process: ProcessOutcome,
    /// The outcome it printed, or why there is none to believe.
    pub outcome: Result<GateOutcome, String>,
}

/// Runs `exe gpu-gate ...` (the `kidiom` binary) with a deadline and reads
/// its line. `Err` only when the process could not be started.
pub fn run(exe: &Path, args: &GateArgs, limit: Duration) -> kidiom_exec::Result<GateRun> {
    let cwd = std::env::temp_dir();
    let process = kidiom_exec::run_with_deadline(exe, &args.argv(), &cwd, &[], limit)?;
    let outcome = read(&process);
    Ok(GateRun { process, outcome })
}

/// The exit code `kidiom gpu-gate` ends with for a verdict.
pub fn exit_code(v: &GateVerdict) -> u8 {
    match v {
        GateVerdict::Measured(_) => 0,
        GateVerdict::Rejected(_) => 1,
        GateVerdict::Error { .. } => 2,
        GateVerdict::NeedsGpu { .. } => 3,
    }
}

/// The outcome a finished gate process printed: its last non-empty line
/// of stdout, which its exit code must agree with.
pub fn read(p: &ProcessOutcome) -> Result<GateOutcome, String> {
    if p.timed_out {
        return Err(format!("the GPU gate timed out ({:.1} s)", p.seconds));
    }
    let Some(code) = p.code else {
        return Err(format!("the GPU gate was ended by a signal ({:.1} s)", p.seconds));
    };
    let Some(line) = p.stdout.lines().rev().find(|l| !l.trim().is_empty()) else {
        return Err(format!("the GPU gate printed nothing (exit {code})"));
    };
    let out: GateOutcome = serde_json::from_str(line)
        .map_err(|e| format!("the GPU gate's line does not parse ({e}): {}", kidiom_exec::tail(line, 300)))?;
    let want = exit_code(&out.verdict);
    if i32::from(want) != code {
        return Err(format!("the GPU gate exited {code}, but its verdict says {want}"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::gate::{Call, Miss, Which};
    use super::super::stats::{Bounds, compare};
    use super::*;

    fn process(code: Option<i32>, stdout: &str) -> ProcessOutcome {
        ProcessOutcome {
            command: "kidiom gpu-gate".into(),
            cwd: "/tmp".into(),
            code,
            timed_out: false,
            cancelled: false,
            seconds: 1.0,
            stdout: stdout.into(),
            stderr_tail: String::new(),
            stragglers_killed: Vec::new(),
        }
    }

    #[test]
    fn the_argv_is_what_gpu_gate_reads() {
        let a = GateArgs {
            baseline: "b".into(),
            candidate: "c".into(),
            tolerance: Tolerance { rel_l2: 5e-3, max_abs_rel: 2e-2 },
            warmup: 2,
            rounds: 20,
            floor_bytes: Some(1.5e9),
            seed: Some(7),
            ordinal: 0,
        };
        assert_eq!(
            a.argv().join(" "),
            "gpu-gate --baseline b --candidate c --rel-l2 5e-3 --max-abs-rel 2e-2 --warmup 2 --rounds 20 \
             --ordinal 0 --floor-bytes 1.5e9 --seed 7"
        );
    }

    #[test]
    fn every_verdict_round_trips_and_its_exit_code_must_agree() {
        // no floor: figures that are not whole numbers need not survive JSON to the last bit
        let b = Bounds { floor_bytes: None, peak_gbps: 4800.0, implausible_speedup: 4.0 };
        let measured = GateOutcome {
            verdict: GateVerdict::Measured(compare(&[10.0; 6], &[5.0; 6], &b)),
            ..GateOutcome::needs_gpu("")
        };
        let miss = Miss {
            variant: Which::Candidate,
            call: Some(Call { index: 3, warmup: false, set: 1 }),
            tensor: Some("o".into()),
            what: "NaN left".into(),
        };
        let rejected = GateOutcome { verdict: GateVerdict::Rejected(miss), ..GateOutcome::needs_gpu("") };
        let error = GateOutcome { verdict: GateVerdict::Error { reason: "x".into() }, ..GateOutcome::needs_gpu("") };
        for o in [measured, rejected, error, GateOutcome::needs_gpu("no driver")] {
            let line = serde_json::to_string(&o).unwrap();
            let code = i32::from(exit_code(&o.verdict));
            assert_eq!(read(&process(Some(code), &format!("warming up\n{line}\n"))).unwrap(), o);
            let wrong = read(&process(Some((code + 1) % 4), &line)).unwrap_err();
            assert!(wrong.contains("but its verdict says"), "{wrong}");
        }
        // a NaN figure is written as null and read back as NaN
        let mut t = compare(&[10.0; 6], &[5.0; 6], &b);
        t.noise_floor = f64::NAN;
        let line =
            serde_json::to_string(&GateOutcome { verdict: GateVerdict::Measured(t), ..GateOutcome::needs_gpu("") })
                .unwrap();
        let back = read(&process(Some(0), &line)).unwrap();
        assert!(matches!(back.verdict, GateVerdict::Measured(t) if t.noise_floor.is_nan()));
    }

    #[test]
    fn a_process_that_did_not_answer_says_why() {
        let mut p = process(None, "");
        assert!(read(&p).unwrap_err().contains("signal"));
        p.timed_out = true;
        assert!(read(&p).unwrap_err().contains("timed out"));
        assert!(read(&process(Some(2), "")).unwrap_err().contains("printed nothing (exit 2)"));
        assert!(read(&process(Some(0), "{\"verdict\": 1}")).unwrap_err().contains("does not parse"));
    }
}
