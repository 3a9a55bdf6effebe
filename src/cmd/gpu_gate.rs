//! `kidiom gpu-gate` (hidden): the GPU gate's own process (SPEC §8, "The
//! GPU gate is owned by Rust"). It reads two spec directories, the
//! baseline's (its input sets and expected values are the only ones used)
//! and the candidate's (its launch spec and cubin only), runs the gate on a
//! CUDA device through cudarc and prints one JSON line, the outcome:
//! `verdict` (`kind`: `measured` with the timing, `rejected` with the call
//! and the check, `error`, `needs-gpu` with what is missing), `seed`,
//! `device`, `calls`, `worst` errors per variant and tensor, `notes`. The
//! caller gives the manifest's tolerances and owns the deadline. Exit code:
//! 0 measured, 1 rejected, 2 error, 3 needs-gpu (the harness's codes).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use kidiom_validator::gpu::gate::{Plan, Tolerance};
use kidiom_validator::gpu::gate_on_cuda;
use kidiom_validator::gpu::stats::Bounds;

use crate::output;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The baseline's spec directory (launch.json, the cubin, inputs/, expected/).
    #[arg(long)]
    baseline: PathBuf,
    /// The candidate's spec directory (launch.json and the cubin are read).
    #[arg(long)]
    candidate: PathBuf,
    /// The manifest's relative L2 tolerance.
    #[arg(long)]
    rel_l2: f64,
    /// The manifest's max-abs tolerance, relative to the reference's largest magnitude.
    #[arg(long)]
    max_abs_rel: f64,
    /// Warm-up rounds (checked, not timed).
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Timed rounds (each calls both variants, ABBA).
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// The RNG seed of the set order (default: drawn now).
    #[arg(long)]
    seed: Option<u64>,
    /// The manifest's floor bytes at this shape, for the achieved bandwidth.
    #[arg(long)]
    floor_bytes: Option<f64>,
    /// The device's peak bandwidth, GB/s.
    #[arg(long, default_value_t = 4800.0)]
    peak_gbps: f64,
    /// A speedup beyond this is flagged as implausible.
    #[arg(long, default_value_t = 4.0)]
    implausible_speedup: f64,
    /// The CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    ordinal: usize,
}

pub(crate) fn run(args: Args) -> Result<ExitCode> {
    let mut plan = Plan::new(Vec::new(), Tolerance { rel_l2: args.rel_l2, max_abs_rel: args.max_abs_rel });
    plan.warmup = args.warmup;
    plan.rounds = args.rounds;
    plan.seed = args.seed;
    plan.bounds = Bounds {
        floor_bytes: args.floor_bytes,
        peak_gbps: args.peak_gbps,
        implausible_speedup: args.implausible_speedup,
    };
    let out = gate_on_cuda(args.ordinal, &args.baseline, &args.candidate, plan);
    output::line(&serde_json::to_string(&out)?)?;
    Ok(ExitCode::from(kidiom_validator::gpu::process::exit_code(&out.verdict)))
}
