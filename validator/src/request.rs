//! What the validator asks the harness: one typed request per harness
//! command, rendered as its argv here and nowhere else. It is the sending
//! half of the wire format; `wire.rs` reads the replies.

use std::path::Path;

/// A harness command line (`python -m kernels.harness <argv>`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Request<'a> {
    /// `compile`: the sm_90 ahead-of-time compile's figures.
    Compile {
        /// The kernel: its manifest's name, or its manifest's path.
        kernel: Kernel<'a>,
        /// A source in place of the manifest's (the candidate's).
        source: Option<&'a str>,
        /// A shape (JSON object) in place of the manifest's bench shape.
        shape: Option<&'a str>,
    },
    /// `check`: correctness against the reference.
    Check {
        /// The kernel: its manifest's name, or its manifest's path.
        kernel: Kernel<'a>,
        /// A source in place of the manifest's (the candidate's).
        source: Option<&'a str>,
        /// How many seeds, from `seed` on.
        seeds: u32,
        /// The base seed.
        seed: u64,
        /// Where the kernel runs (`auto`, `cpu`, `cuda`).
        device: &'a str,
        /// Whether to measure the error-versus-length curve.
        curve: bool,
        /// Whether to check prefill(T) + decode(M) == prefill(T + M).
        consistency: bool,
        /// Where the judging harness keeps the baseline's errors per case for
        /// the run's other checks (the validator's own directory; `None`: none).
        baseline_cache: Option<&'a str>,
    },
    /// `check --odd-sizes`: the manifest's own kernel against its contract,
    /// at its CPU shapes and at odd sizes, one fixed seed (the contract check).
    Contract {
        /// The kernel: its manifest's name, or its manifest's path.
        kernel: Kernel<'a>,
    },
    /// `profile`: the work profile of one launch.
    Profile {
        /// The kernel: its manifest's name, or its manifest's path.
        kernel: Kernel<'a>,
        /// A source in place of the manifest's (the candidate's).
        source: Option<&'a str>,
        /// The harness's own time limit in seconds (`None`: its default).
        timeout: Option<u64>,
        /// A shape (JSON object) in place of the manifest's bench shape.
        shape: Option<&'a str>,
    },
    /// `bench`: baseline and candidate interleaved in one process.
    Bench {
        /// The kernel: its manifest's name, or its manifest's path.
        kernel: Kernel<'a>,
        /// The candidate's source.
        source: &'a str,
        /// How it is timed.
        on: BenchOn,
        /// Host C++: where the baseline's history is read and written (the
        /// catalog's, through a directory `kidiom validate` fills and reads back).
        history: Option<&'a Path>,
    },
    /// `spec`: the GPU gate's launch specs, cubins, input sets and expected
    /// values, one directory per shape under `out` (no GPU needed).
    Spec {
        /// The kernel: its manifest's name, or its manifest's path.
        kernel: Kernel<'a>,
        /// A source in place of the manifest's (the candidate's); `None`: the
        /// baseline's, from a process that never imported a candidate.
        source: Option<&'a str>,
        /// Where the spec directories go.
        out: &'a Path,
        /// Input sets per shape (0: the launch spec and cubin only).
        sets: u32,
        /// The shape labels to emit (`bench`, `gpu0`, ...; empty: every one).
        shapes: &'a [&'a str],
    },
    /// `precision`: a state-precision variant's drift against its simulated
    /// reference and float64, beside its fp32 kernel's.
    Precision {
        /// The variant's manifest name.
        kernel: &'a str,
        /// A source in place of the variant's (a hand-written candidate).
        source: Option<&'a str>,
        /// The seed of the inputs.
        seed: u64,
        /// Decode steps (`None`: the harness's default).
        steps: Option<u32>,
    },
    /// `sweep`: many variants measured in one call.
    Sweep {
        /// The kernel: its manifest's name, or its manifest's path.
        kernel: Kernel<'a>,
        /// The JSON file listing the variants.
        variants: &'a Path,
        /// Variants measured at once.
        jobs: usize,
    },
}

/// Which kernel a request is about, as the harness is told: `--kernel NAME`
/// (a manifest in the harness tree's `kernels/`) or `--manifest PATH` (any
/// other manifest, a copy in the validation's tree); [`crate::Manifest::harness_arg`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Kernel<'a> {
    flag: &'static str,
    value: &'a str,
}

impl<'a> Kernel<'a> {
    /// The kernel named `name` in the harness tree.
    #[cfg(test)]
    pub(crate) fn name(name: &'a str) -> Kernel<'a> {
        Kernel { flag: "--kernel", value: name }
    }

    /// From [`crate::Manifest::harness_arg`]'s answer.
    pub(crate) fn of(arg: &'a (&'static str, String)) -> Kernel<'a> {
        Kernel { flag: arg.0, value: &arg.1 }
    }
}

/// Where `bench` times a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BenchOn {
    /// On this CPU, with the manifest's `[service]` rounds and windows (host C++).
    Cpu,
    /// On a CUDA GPU, this many timed iterations per variant.
    Cuda {
        /// Timed iterations per variant.
        iters: u32,
    },
}

impl Request<'_> {
    /// The argv after `python -m kernels.harness`.
    pub(crate) fn argv(&self) -> Vec<String> {
        let mut a: Vec<String> = Vec::new();
        let mut push = |xs: &[&str]| a.extend(xs.iter().map(|s| s.to_string()));
        match self {
            Request::Compile { kernel, source, shape } => {
                push(&["compile", kernel.flag, kernel.value]);
                if let Some(s) = source {
                    push(&["--source", s]);
                }
                if let Some(s) = shape {
                    push(&["--shape", s]);
                }
            }
            Request::Check { kernel, source, seeds, seed, device, curve, consistency, baseline_cache } => {
                push(&["check", kernel.flag, kernel.value]);
                if let Some(s) = source {
                    push(&["--source", s]);
                }
                push(&["--seeds", &seeds.to_string(), "--seed", &seed.to_string()]);
                push(&["--device", device]);
                if !curve {
                    push(&["--no-curve"]);
                }
                if !consistency {
                    push(&["--no-consistency"]);
                }
                if let Some(dir) = baseline_cache {
                    push(&["--baseline-cache", dir]);
                }
            }
            Request::Contract { kernel } => {
                push(&["check", kernel.flag, kernel.value, "--seeds", "1", "--seed", "0", "--device", "cpu"]);
                push(&["--no-curve", "--odd-sizes"]);
            }
            Request::Profile { kernel, source, timeout, shape } => {
                push(&["profile", kernel.flag, kernel.value]);
                if let Some(s) = source {
                    push(&["--source", s]);
                }
                if let Some(s) = shape {
                    push(&["--shape", s]);
                }
                if let Some(t) = timeout {
                    push(&["--timeout", &t.to_string()]);
                }
            }
            Request::Bench { kernel, source, on, history } => {
                push(&["bench", kernel.flag, kernel.value, "--source", source]);
                match on {
                    BenchOn::Cpu => push(&["--device", "cpu"]),
                    BenchOn::Cuda { iters } => push(&["--device", "cuda", "--iters", &iters.to_string()]),
                }
                if let Some(h) = history {
                    push(&["--history-dir", &h.display().to_string()]);
                }
            }
            Request::Spec { kernel, source, out, sets, shapes } => {
                push(&["spec", kernel.flag, kernel.value]);
                if let Some(s) = source {
                    push(&["--source", s]);
                }
                push(&["--out", &out.to_string_lossy(), "--sets", &sets.to_string()]);
                if !shapes.is_empty() {
                    push(&["--shapes", &shapes.join(",")]);
                }
            }
            Request::Precision { kernel, source, seed, steps } => {
                push(&["precision", "--kernel", kernel]);
                if let Some(s) = source {
                    push(&["--source", s]);
                }
                push(&["--seed", &seed.to_string()]);
                if let Some(n) = steps {
                    push(&["--steps", &n.to_string()]);
                }
            }
            Request::Sweep { kernel, variants, jobs } => {
                let variants = variants.to_string_lossy();
                push(&[
                    "sweep",
                    kernel.flag,
                    kernel.value,
                    "--variants",
                    &variants,
                    "--jobs",
                    &jobs.max(&1).to_string(),
                ]);
            }
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_request_renders_the_argv_the_harness_reads() {
        let check = Request::Check {
            kernel: Kernel::name("kda.decode"),
            source: Some("/tmp/c/decode.py"),
            seeds: 3,
            seed: 7,
            device: "cpu",
            curve: false,
            consistency: true,
            baseline_cache: None,
        };
        assert_eq!(
            check.argv().join(" "),
            "check --kernel kda.decode --source /tmp/c/decode.py --seeds 3 --seed 7 --device cpu --no-curve"
        );
        let cached = Request::Check {
            kernel: Kernel::name("k"),
            source: None,
            seeds: 1,
            seed: 2,
            device: "cpu",
            curve: true,
            consistency: false,
            baseline_cache: Some("/tmp/b"),
        };
        assert_eq!(
            cached.argv().join(" "),
            "check --kernel k --seeds 1 --seed 2 --device cpu --no-consistency --baseline-cache /tmp/b"
        );
        assert_eq!(
            Request::Compile { kernel: Kernel::name("k"), source: None, shape: None }.argv().join(" "),
            "compile --kernel k"
        );
        let profile = Request::Profile { kernel: Kernel::name("k"), source: None, timeout: Some(9), shape: None };
        assert_eq!(profile.argv().join(" "), "profile --kernel k --timeout 9");
        let at = Request::Profile { kernel: Kernel::name("k"), source: None, timeout: None, shape: Some("{\"N\":1}") };
        assert_eq!(at.argv().join(" "), "profile --kernel k --shape {\"N\":1}");
        let bench = Request::Bench {
            kernel: Kernel::name("k"),
            source: "s.py",
            on: BenchOn::Cuda { iters: 50 },
            history: None,
        };
        assert_eq!(bench.argv().join(" "), "bench --kernel k --source s.py --device cuda --iters 50");
        let host = Request::Bench {
            kernel: Kernel::name("kv"),
            source: "m.cpp",
            on: BenchOn::Cpu,
            history: Some(Path::new("/h")),
        };
        assert_eq!(host.argv().join(" "), "bench --kernel kv --source m.cpp --device cpu --history-dir /h");
        let spec = Request::Spec {
            kernel: Kernel::name("k"),
            source: Some("c.py"),
            out: Path::new("/t/c"),
            sets: 0,
            shapes: &["bench"],
        };
        assert_eq!(spec.argv().join(" "), "spec --kernel k --source c.py --out /t/c --sets 0 --shapes bench");
        let spec = Request::Spec { kernel: Kernel::name("k"), source: None, out: Path::new("o"), sets: 3, shapes: &[] };
        assert_eq!(spec.argv().join(" "), "spec --kernel k --out o --sets 3");
        let precision = Request::Precision { kernel: "kda.decode.state-bf16", source: None, seed: 3, steps: Some(256) };
        assert_eq!(precision.argv().join(" "), "precision --kernel kda.decode.state-bf16 --seed 3 --steps 256");
        let precision = Request::Precision { kernel: "v", source: Some("c.py"), seed: 1, steps: None };
        assert_eq!(precision.argv().join(" "), "precision --kernel v --source c.py --seed 1");
        let sweep = Request::Sweep { kernel: Kernel::name("k"), variants: Path::new("v.json"), jobs: 0 };
        assert_eq!(sweep.argv().join(" "), "sweep --kernel k --variants v.json --jobs 1");
        // a manifest the harness does not find by name goes by its path, wherever --kernel would
        let arg = ("--manifest", "/t/tree/ops/rmsnorm.toml".to_string());
        let compile = Request::Compile { kernel: Kernel::of(&arg), source: Some("/t/c/rmsnorm.py"), shape: None };
        assert_eq!(compile.argv().join(" "), "compile --manifest /t/tree/ops/rmsnorm.toml --source /t/c/rmsnorm.py");
    }
}
