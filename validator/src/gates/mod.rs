//! The gates, in order: syntax, static, correctness, speed (one module
//! each). A failed gate stops the later ones; every gate that ran leaves a
//! [`GateRecord`].
//!
//! Rules enforced here rather than by convention:
//! - the contract (manifest, reference, tolerances, shapes, harness) always
//!   comes from the baseline tree, copied into a temporary directory; the
//!   candidate contributes only its kernel source file, passed to the harness
//!   with `--source`;
//! - a rewrite touching a contract file, or host code in a kernel source
//!   (a launcher, module-level code, imports), is rejected at the static gate;
//! - numeric flags may change only under a `precision` pattern;
//! - every kernel run is a harness subprocess with a deadline, and a timeout
//!   anywhere (the harness's own or the validator's kill) is an `error`;
//! - what the harness prints is read as typed wire format v1; a missing or
//!   malformed field the verdict depends on is an `error` naming it;
//! - speed is compared only within one process (interleaved A/B): on a GPU
//!   kidiom's own `gpu-gate`, which runs the candidate's device code only
//!   (the harness's in-process `bench` only with `--untrusted-bench`, its
//!   evidence marked untrusted);
//! - a speedup beyond the hardware's bound or implausible for the size of
//!   the change is flagged and never accepted.

mod correctness;
mod gpu;
mod launch;
mod precision;
mod speed;
mod static_gate;
mod syntax;
mod validation;

pub(crate) use gpu::GATE_SETS;
pub(crate) use launch::fresh_seed;
pub use static_gate::StaticLimits;
pub(crate) use validation::Validation;

use kidiom_syntax::blob_id;

use crate::backend::python::{HarnessRun, HarnessStatus};
use crate::error::Result;
use crate::evidence::GateRecord;
use crate::patch::{self, FilePatch};
use crate::verdict::{Gate, Verdict};
use crate::wire::Header;

/// A speedup beyond this for an edit of at most [`SMALL_EDIT_LINES`] changed lines is flagged.
const SMALL_EDIT_SPEEDUP: f64 = 3.0;
const SMALL_EDIT_LINES: usize = 3;
/// Any speedup beyond this is flagged.
const MAX_PLAUSIBLE_SPEEDUP: f64 = 5.0;

/// One touched file: its baseline and candidate texts.
pub(crate) struct Touched {
    pub(crate) path: String,
    pub(crate) base: String,
    pub(crate) cand: String,
}

/// Device, versions and command of a harness run, for a record. A run that
/// was skipped names no device: it ran on none.
fn stamp(rec: &mut GateRecord, run: &HarnessRun, header: Option<&Header>) {
    if rec.device.is_none() && run.status != HarnessStatus::Skipped {
        rec.device = header.and_then(|h| h.device.clone());
    }
    if rec.versions.is_null() {
        rec.versions = header.and_then(|h| h.versions.clone()).unwrap_or(serde_json::Value::Null);
    }
    note(rec, run);
}

/// The command of a harness run, and where it ran when that was not here.
fn note(rec: &mut GateRecord, run: &HarnessRun) {
    rec.commands.push(run.process.command.clone());
    if let Some(p) = &run.placement {
        rec.placements.push(p.clone());
    }
}

/// Runs the gates in order on the candidate of `run`; the first that fails
/// gives the verdict. `Err` only when the validation itself could not be set
/// up (the temporary tree could not be written).
pub(crate) fn in_order(run: &mut Validation<'_>) -> Result<Verdict> {
    let v = run.v;
    // shared with the other candidates' gates until the speed gate, which measures alone
    let sharing = v.timing.read().unwrap_or_else(std::sync::PoisonError::into_inner);
    // a state-precision variant as it is in the tree (`kidiom validate --kernel`): its own gate
    if let Some((variant, base)) =
        v.kernels.variants.iter().find(|x| x.path == run.c.path).and_then(|x| v.kernels.variant(&x.name))
    {
        return Ok(precision::gate(run, variant, base, None));
    }
    let files = match patch::parse(&run.c.diff) {
        Ok(f) if !f.is_empty() => f,
        Ok(_) => return Ok(Verdict::error(None, "the candidate's diff is empty", "")),
        Err(e) => return Ok(Verdict::error(None, e.to_string(), "")),
    };
    let touched = match texts(run, &files) {
        Ok(t) => t,
        Err(e) => return Ok(Verdict::error(None, e, "")),
    };
    // 1. syntax
    if let Some(v) = syntax::gate(run, &touched) {
        return Ok(v);
    }
    // a diff to a state-precision variant's own source: the variant with the candidate's source
    if let Some((variant, base)) = v.kernels.variant_for_source(&run.c.path)
        && let Some(t) = touched.iter().find(|t| t.path == run.c.path)
    {
        let dir = tempfile::Builder::new()
            .prefix("kidiom-variant-")
            .tempdir()
            .map_err(|e| crate::error::Error::io(std::env::temp_dir(), e))?;
        let file = dir.path().join(t.path.rsplit('/').next().unwrap_or("variant.py"));
        std::fs::write(&file, &t.cand).map_err(|e| crate::error::Error::io(&file, e))?;
        return Ok(precision::gate(run, variant, base, Some(&file)));
    }
    // 2. static, the part that needs no harness: contract, host code, numeric flags
    let scan = match static_gate::scan(v, run, &files, &touched) {
        Ok(s) => s,
        Err(v) => return Ok(v),
    };
    let manifest = scan.manifest.clone();
    run.kernel = Some(manifest.clone());
    let prepared = launch::prepare(v, &touched[scan.touched])?;
    // the unmodified kernel against its own contract, once per kernel and baseline text, before
    // any figure of a candidate: a contract it fails is the contract's error, not the candidate's
    if let Some(v) = contract_first(v, run, &prepared, &manifest, &scan.rec, &touched[scan.touched]) {
        return Ok(v);
    }
    let runs = launch::launch(v, run, &prepared, &manifest, scan.precision)?;
    // what this candidate's harness calls cost (a baseline run another candidate made is not its)
    let mut paid: Vec<(&str, &HarnessRun)> = Vec::new();
    if !runs.cached {
        paid.push(("compile baseline", &runs.base_compile));
    }
    paid.extend([("compile candidate", &runs.cand_compile), ("check candidate", &runs.cand_check)]);
    if let Some(b) = runs.base_check.as_ref().filter(|_| !runs.base_check_cached) {
        paid.push(("check baseline", b));
    }
    if let Some((b, c)) = &runs.profiles {
        if !runs.base_profile_cached {
            paid.push(("profile baseline", b));
        }
        paid.push(("profile candidate", c));
    }
    for (name, h) in paid {
        run.phase(name, h);
    }
    // a contract the harness cannot use (e.g. a reference `kidiom init` left to write) stops
    // here, before any figure of the candidate is judged: its own line, verbatim
    if let Some(v) = static_gate::contract_error(run, &scan.rec, &runs) {
        return Ok(v);
    }
    // 2. static, the compiles
    if let Some(v) = static_gate::judge_compiles(run, scan.rec, &scan.flag_text, &runs, &manifest.name) {
        return Ok(v);
    }
    // 3. correctness (its processes ran alongside the compiles)
    let native = match correctness::judge(run, &manifest, &runs) {
        Ok(native) => native,
        Err(v) => return Ok(v),
    };
    // 4. speed
    drop(sharing);
    Ok(speed::gate(run, &prepared, &manifest, scan.changed_lines, scan.precision, native))
}

/// The contract check of the candidate's kernel ([`crate::contract`]) on the
/// baseline tree; the verdict that stops the candidate when the unmodified
/// kernel fails it (at the static gate, as every contract error: `error`,
/// never the candidate's rejection). A check that could not finish lets the
/// gates go on: they meet the same problem and name it.
fn contract_first(
    v: &crate::validator::Validator,
    run: &mut Validation<'_>,
    p: &launch::Prepared,
    manifest: &crate::manifest::Manifest,
    rec: &GateRecord,
    t: &Touched,
) -> Option<Verdict> {
    if manifest.language == crate::manifest::KernelLanguage::Cpp {
        return None; // host C++: its checks are its own (ThreadSanitizer, the service figures)
    }
    let key = (manifest.name.clone(), blob_id(t.base.as_bytes()));
    let limit = run.remaining();
    let (checked, cached) =
        v.contracts.get_or_run_answered(&key, || crate::contract::run(&p.harness, &p.harness.root, manifest, limit));
    let h = checked.ok()?;
    if !cached {
        run.phase("contract", &h);
    }
    let report = crate::contract::report(manifest, &h);
    let line = report.problem()?;
    let mut rec = rec.clone();
    note(&mut rec, &h);
    if cached {
        run.notes.push("the contract check: this run's, made for an earlier candidate of the kernel".into());
    }
    Some(run.stop(
        rec,
        crate::evidence::GateStatus::Error,
        line.clone(),
        Verdict::error(Some(Gate::Static), line, h.log()),
    ))
}

/// Baseline and candidate texts of every file the diff touches. Files a
/// diff cannot change as text (binary, renamed) are left out when they
/// are contract (the static gate rejects them) and an error otherwise.
fn texts(run: &mut Validation<'_>, files: &[FilePatch]) -> std::result::Result<Vec<Touched>, String> {
    let v = run.v;
    let mut out = Vec::new();
    for f in files {
        if let Some(what) = f.unsupported() {
            if f.paths().iter().any(|p| v.kernels.is_contract(p)) {
                continue;
            }
            return Err(format!("{}: {what} cannot be validated; a candidate changes text", f.path));
        }
        let abs = v.opts.root.join(&f.path);
        let current = match std::fs::read(&abs) {
            Ok(b) => String::from_utf8(b).map_err(|_| format!("{} is not UTF-8", f.path))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(format!("reading {}: {e}", f.path)),
        };
        let blob = blob_id(current.as_bytes());
        let primary = f.path == run.c.path;
        let (base, cand) = if primary && blob == run.c.result_blob && blob != run.c.base_blob {
            // applied with --write: the file on disk is the candidate
            run.notes.push("validated against the file before `apply --write`".into());
            (patch::apply(&current, f, true).map_err(|e| e.to_string())?, current)
        } else {
            if primary && blob != run.c.base_blob {
                run.notes.push(format!("{} changed since the candidate was proposed", f.path));
            }
            let cand = patch::apply(&current, f, false).map_err(|e| format!("stale candidate: {e}"))?;
            (current, cand)
        };
        out.push(Touched { path: f.path.clone(), base, cand });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::launch::HarnessResults;
    use super::*;
    use crate::device::Device;
    use crate::evidence::{Evidence, GateStatus};
    use crate::manifest::Manifest;
    use crate::validator::ValidatorBuilder;
    use crate::verdict::{Gate, VerdictKind};
    use crate::wire::tests::{run as harness_run, with_header};

    const MANIFEST: &str = r#"
format = 1
name = "kda.decode"
op = "kda_decode"
language = "triton"
source = "decode.py"
entry = "kda_decode_kernel"
launcher = "kda_decode"
reference = "kernels.kda.reference:naive_decode_kda"
[tolerance]
rel_l2 = 5e-3
slice_rel_l2 = 1e-2
max_abs_rel = 2e-2
[shapes]
cpu = [{ N = 1 }]
gpu = []
bench = { N = 64 }
[floor]
bytes = "N"
flops = "N"
"#;

    fn compile_ok() -> Value {
        with_header(
            "compile",
            "ok",
            json!({"arch": "sm_90a", "resources": {"registers": 91, "spill_store_bytes": 0},
                   "instructions": {"total": 432, "by_class": {"fp32": 197}, "by_opcode": {}}}),
        )
    }

    fn check_passed() -> Value {
        with_header(
            "check",
            "passed",
            json!({"mode": "interpreter-tf32", "passed": true, "failures": [], "cases": [
                {"id": "c", "passed": true, "outputs": {"o": {"rel_l2": 1e-7, "max_abs_rel": 1e-7, "nonfinite": 0}}}]}),
        )
    }

    /// `f` on a run of a bare candidate of `path` in an empty tree, for judging made-up harness output.
    pub(crate) fn bare_run<T>(path: &str, kernel: Option<Manifest>, f: impl FnOnce(Validation<'_>) -> T) -> T {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("kernels")).unwrap();
        let v = ValidatorBuilder::new(dir.path()).device(Device::Cpu).build().unwrap();
        let c = crate::input::CandidateInput::bare(path);
        let seeds = if kernel.is_some() { vec![1] } else { Vec::new() };
        let mut run = Validation::new(&v, &c);
        run.kernel = kernel;
        run.seeds = seeds;
        f(run)
    }

    /// Judges the static and correctness gates on made-up harness runs.
    fn judge(cand_compile: HarnessRun, cand_check: HarnessRun) -> Evidence {
        let manifest = Manifest::parse(MANIFEST, "kernels/kda/decode.toml").unwrap();
        bare_run(&manifest.source_path(), Some(manifest.clone()), |run| {
            judge_in(run, &manifest, cand_compile, cand_check)
        })
    }

    fn judge_in(
        run: Validation<'_>,
        manifest: &Manifest,
        cand_compile: HarnessRun,
        cand_check: HarnessRun,
    ) -> Evidence {
        judge_profiled(run, manifest, cand_compile, cand_check, None)
    }

    fn judge_profiled(
        mut run: Validation<'_>,
        manifest: &Manifest,
        cand_compile: HarnessRun,
        cand_check: HarnessRun,
        profiles: Option<(HarnessRun, HarnessRun)>,
    ) -> Evidence {
        let runs = HarnessResults {
            base_compile: harness_run(HarnessStatus::Ok, compile_ok()),
            cand_compile,
            cand_check,
            base_check: None,
            cached: false,
            base_check_cached: false,
            base_profile_cached: false,
            profiles,
        };
        let rec = GateRecord::new(Gate::Static, GateStatus::Passed, "");
        let verdict = match static_gate::judge_compiles(&mut run, rec, &[], &runs, "kda.decode") {
            Some(v) => v,
            None => match correctness::judge(&mut run, manifest, &runs) {
                Ok(_) => Verdict::needs_gpu("passed"),
                Err(v) => v,
            },
        };
        run.finish(verdict)
    }

    pub(crate) fn kind(e: &Evidence) -> (VerdictKind, Option<Gate>) {
        (e.verdict.kind, e.verdict.gate)
    }

    #[test]
    fn an_unfinished_contract_is_an_error_with_the_harness_line_unchanged() {
        let manifest = Manifest::parse(MANIFEST, "kernels/kda/decode.toml").unwrap();
        let line =
            "my.rmsnorm: contract rmsnorm_contract.py: reference() is not written yet (kidiom init left it for you)";
        let reply = json!({"wire": "kidiom-harness", "version": 1, "command": "check", "status": "error",
                           "error_kind": "contract", "error": line, "traceback": "Traceback ...\nNotImplementedError"});
        let ev = bare_run(&manifest.source_path(), Some(manifest.clone()), |mut run| {
            let runs = HarnessResults {
                base_compile: harness_run(HarnessStatus::Ok, compile_ok()),
                cand_compile: harness_run(HarnessStatus::Ok, compile_ok()),
                cand_check: harness_run(HarnessStatus::Error, reply.clone()),
                base_check: None,
                cached: false,
                base_check_cached: false,
                base_profile_cached: false,
                profiles: None,
            };
            let rec = GateRecord::new(Gate::Static, GateStatus::Passed, "");
            let v = static_gate::contract_error(&mut run, &rec, &runs).expect("a contract error stops the gates");
            run.finish(v)
        });
        assert_eq!(kind(&ev), (VerdictKind::Error, Some(Gate::Static)));
        assert_eq!(ev.verdict.reason, line);
        // an error of another kind is the gates' to judge
        let other = harness_run(HarnessStatus::Error, json!({"error": "boom"}));
        assert!(other.contract_error().is_none());
    }

    /// A `profile` reply with these state reads (the decode at the bench shape).
    fn profile(state_reads: u64) -> Value {
        let kv: u64 = 64 * 32 * 128 * 128;
        with_header(
            "profile",
            "ok",
            json!({"shape": {"N": 64}, "counted": {"shape": {"N": 2}, "programs": 64, "programs_total": 2048,
                   "scale": 32.0, "exact": false},
                   "totals": {"load_bytes": state_reads * kv * 4, "store_bytes": kv * 4,
                              "reread_bytes": (state_reads - 1) * kv * 4, "special_calls": 2 * kv,
                              "flops": 7 * kv, "dot_macs": 0},
                   "floor": {"bytes": (2 * kv * 4) as f64, "flops": (7 * kv) as f64},
                   "traffic_ratio": (state_reads + 1) as f64 / 2.0, "launches": 1, "lines": []}),
        )
    }

    #[test]
    fn the_work_profiles_predict_and_a_predicted_slowdown_is_rejected() {
        let manifest = Manifest::parse(MANIFEST, "kernels/kda/decode.toml").unwrap();
        let judge_runs = |base: HarnessRun, cand: HarnessRun| {
            bare_run(&manifest.source_path(), Some(manifest.clone()), |run| {
                let (compile, check) = (compile_ok(), check_passed());
                let (compile, check) = (harness_run(HarnessStatus::Ok, compile), harness_run(HarnessStatus::Ok, check));
                judge_profiled(run, &manifest, compile, check, Some((base, cand)))
            })
        };
        let judge_pair = |base: Value, cand: Value| {
            judge_runs(harness_run(HarnessStatus::Ok, base), harness_run(HarnessStatus::Ok, cand))
        };
        // the second read of the state removed: a prediction, recorded and labelled as one
        let e = judge_pair(profile(2), profile(1));
        let p = e.prediction.clone().expect("a prediction");
        assert_eq!((p.label.as_str(), p.bound), ("prediction", crate::predict::Bound::Memory));
        assert!((1.40..1.50).contains(&p.speedup), "{p:?}");
        assert_eq!(p.traffic_ratio, (1.5, 1.0));
        let st = e.gate(Gate::Static).unwrap();
        assert!(st.summary.contains("predicted 1.4"), "{}", st.summary);
        assert_eq!(st.static_figures().prediction.map(|p| p.label).as_deref(), Some("prediction"));
        assert_eq!(kind(&e).0, VerdictKind::NeedsGpu, "{e:?}");
        // a re-read added: predicted slower than the limit allows, rejected at static
        let e = judge_pair(profile(1), profile(3));
        assert_eq!(kind(&e), (VerdictKind::Rejected, Some(Gate::Static)), "{e:?}");
        assert!(e.verdict.reason.starts_with("predicted slower: the work profile predicts"), "{}", e.verdict.reason);
        // the baseline's own program under the interpreter (memory hints only): not counted again,
        // the baseline's counts stand for the candidate's, and the record says so
        let same = with_header("profile", "ok", json!({"same_program": "differs only in memory hints"}));
        let e = judge_pair(profile(2), same);
        let p = e.prediction.clone().expect("a prediction from the baseline's profile");
        assert!((p.speedup - 1.0).abs() < 1e-12 && p.traffic_ratio == (1.5, 1.5), "{p:?}");
        assert!(e.verdict.reason.contains("work profile is the baseline's: differs only in memory hints"), "{e:?}");
        // a profile that could not be made is a note, not a verdict
        let skipped = with_header("profile", "skipped", json!({"reason": "the CPU cannot run it"}));
        let e = judge_runs(harness_run(HarnessStatus::Ok, profile(2)), harness_run(HarnessStatus::Skipped, skipped));
        assert_eq!(kind(&e).0, VerdictKind::NeedsGpu, "{e:?}");
        assert!(e.prediction.is_none());
        assert!(
            e.verdict.reason.contains("no prediction: the candidate's profile was skipped"),
            "{}",
            e.verdict.reason
        );
    }

    #[test]
    fn code_that_grows_with_less_counted_work_is_not_predicted_slower_by_its_size() {
        let manifest = Manifest::parse(MANIFEST, "kernels/kda/decode.toml").unwrap();
        // three times the baseline's instructions (a guarded fallback path), half the state reads
        let mut bigger = compile_ok();
        bigger["instructions"]["total"] = json!(3 * 432);
        let run_with = |profiles: Option<(HarnessRun, HarnessRun)>, compile: &Value| {
            bare_run(&manifest.source_path(), Some(manifest.clone()), |run| {
                let (c, k) =
                    (harness_run(HarnessStatus::Ok, compile.clone()), harness_run(HarnessStatus::Ok, check_passed()));
                judge_profiled(run, &manifest, c, k, profiles)
            })
        };
        let counted = |b: u64, c: u64| {
            Some((harness_run(HarnessStatus::Ok, profile(b)), harness_run(HarnessStatus::Ok, profile(c))))
        };
        let e = run_with(counted(2, 1), &bigger);
        assert_eq!(kind(&e).0, VerdictKind::NeedsGpu, "{e:?}");
        assert!(e.verdict.reason.contains("the code grew, not the work"), "{}", e.verdict.reason);
        // the same growth with no less work, or with nothing counted: the size stands for the work
        let e = run_with(counted(2, 2), &bigger);
        assert_eq!(kind(&e), (VerdictKind::Rejected, Some(Gate::Static)), "{e:?}");
        assert!(e.verdict.reason.contains("instructions 432 -> 1296"), "{}", e.verdict.reason);
        let e = run_with(None, &bigger);
        assert_eq!(kind(&e), (VerdictKind::Rejected, Some(Gate::Static)), "{e:?}");
    }

    #[test]
    fn a_timeout_anywhere_is_an_error_never_a_rejection() {
        let ok = || harness_run(HarnessStatus::Ok, check_passed());
        // the harness's own alarm during the compile
        let alarm = harness_run(
            HarnessStatus::Error,
            with_header("compile", "error", json!({"error": "harness timed out after 1.0 s"})),
        );
        let e = judge(alarm, ok());
        assert_eq!(kind(&e), (VerdictKind::Error, Some(Gate::Static)), "{e:?}");
        assert!(e.verdict.reason.contains("timed out"), "{}", e.verdict.reason);
        assert_eq!(e.gates.last().map(|g| g.status), Some(GateStatus::Error));
        // the validator's deadline kill during the compile
        let killed = harness_run(HarnessStatus::TimedOut, Value::Null);
        let e = judge(killed, ok());
        assert_eq!(kind(&e), (VerdictKind::Error, Some(Gate::Static)), "{e:?}");
        assert!(e.verdict.reason.contains("timed out"), "{}", e.verdict.reason);
        // the same in the correctness check
        let alarm = harness_run(
            HarnessStatus::Error,
            with_header("check", "error", json!({"error": "harness timed out after 9.0 s"})),
        );
        let e = judge(harness_run(HarnessStatus::Ok, compile_ok()), alarm);
        assert_eq!(kind(&e), (VerdictKind::Error, Some(Gate::Correctness)), "{e:?}");
        assert!(e.verdict.reason.contains("timed out"), "{}", e.verdict.reason);
        let e = judge(harness_run(HarnessStatus::Ok, compile_ok()), harness_run(HarnessStatus::TimedOut, Value::Null));
        assert!(e.verdict.reason.contains("timed out"), "{}", e.verdict.reason);
        // a real compile error is still a rejection
        let broken = harness_run(
            HarnessStatus::Error,
            with_header("compile", "error", json!({"error": "CompilationError: at 12:4: unsupported op"})),
        );
        let e = judge(broken, ok());
        assert_eq!(kind(&e), (VerdictKind::Rejected, Some(Gate::Static)), "{e:?}");
        assert!(e.verdict.reason.contains("does not compile for sm_90a"), "{}", e.verdict.reason);
    }

    #[test]
    fn a_skipped_check_names_no_device_and_says_correctness_was_not_checked() {
        let skipped = harness_run(
            HarnessStatus::Skipped,
            with_header("check", "skipped", json!({"reason": "the CUDA kernel cannot be emulated on the CPU"})),
        );
        let e = judge(harness_run(HarnessStatus::Ok, compile_ok()), skipped);
        assert_eq!(kind(&e), (VerdictKind::NeedsGpu, None), "{e:?}");
        assert!(e.verdict.reason.starts_with("correctness not checked on this CPU"), "{}", e.verdict.reason);
        assert!(e.verdict.flags.iter().any(|f| f.contains("cannot be emulated")), "{:?}", e.verdict.flags);
        let c = e.gate(Gate::Correctness).unwrap();
        assert_eq!((c.status, c.device.as_deref()), (GateStatus::Skipped, None));
        assert_eq!(e.gate(Gate::Speed).map(|g| g.status), Some(GateStatus::Skipped));
        assert!(e.gate(Gate::Static).unwrap().device.is_some(), "the compile did run somewhere");
    }

    #[test]
    fn malformed_harness_output_is_an_error_naming_the_field() {
        let mut compile = compile_ok();
        compile.as_object_mut().unwrap().remove("resources");
        let e = judge(harness_run(HarnessStatus::Ok, compile), harness_run(HarnessStatus::Ok, check_passed()));
        assert_eq!(kind(&e), (VerdictKind::Error, Some(Gate::Static)), "{e:?}");
        assert!(e.verdict.reason.contains("missing field `resources`"), "{}", e.verdict.reason);
        let mut check = check_passed();
        check["cases"][0]["outputs"]["o"]["rel_l2"] = json!("small");
        let e = judge(harness_run(HarnessStatus::Ok, compile_ok()), harness_run(HarnessStatus::Ok, check));
        assert_eq!(kind(&e), (VerdictKind::Error, Some(Gate::Correctness)), "{e:?}");
        assert!(e.verdict.reason.contains("cases[0].outputs.o.rel_l2"), "{}", e.verdict.reason);
        let mut lying = check_passed();
        lying["passed"] = json!(false);
        let e = judge(harness_run(HarnessStatus::Ok, compile_ok()), harness_run(HarnessStatus::Ok, lying));
        assert!(e.verdict.reason.contains("field `passed`"), "{}", e.verdict.reason);
        let e = judge(harness_run(HarnessStatus::Ok, compile_ok()), harness_run(HarnessStatus::Ok, check_passed()));
        assert_eq!(kind(&e), (VerdictKind::NeedsGpu, None), "a well-formed run passes: {e:?}");
    }

    #[test]
    fn a_task_whose_worker_died_twice_is_an_error_with_the_reason_and_the_placements_are_evidence() {
        let placed = |mut run: HarnessRun, node: &str, error: Option<&str>| {
            run.placement = Some(kidiom_exec::Placement {
                command: run.process.command.clone(),
                executor: "ray".into(),
                node: Some(node.into()),
                gpu: None,
                attempts: if error.is_some() { 2 } else { 1 },
                seconds: 1.0,
                harness: Some("abc".into()),
                failures: Vec::new(),
                error: error.map(str::to_string),
            });
            run
        };
        let died = placed(
            harness_run(HarnessStatus::Crashed, Value::Null),
            "n2 (10.0.0.2)",
            Some("worker died twice: attempt 1: WorkerCrashedError; attempt 2: WorkerCrashedError"),
        );
        let e = judge(placed(harness_run(HarnessStatus::Ok, compile_ok()), "n1 (10.0.0.1)", None), died);
        assert_eq!(kind(&e), (VerdictKind::Error, Some(Gate::Correctness)), "{e:?}");
        assert!(e.verdict.reason.starts_with("the correctness check crashed on the cluster"), "{}", e.verdict.reason);
        assert!(e.verdict.reason.contains("worker died twice"), "{}", e.verdict.reason);
        let nodes = |g: Gate| e.gate(g).unwrap().placements.iter().map(|p| p.node.clone()).collect::<Vec<_>>();
        assert_eq!(nodes(Gate::Static), [Some("n1 (10.0.0.1)".to_string())]);
        assert_eq!(nodes(Gate::Correctness), [Some("n2 (10.0.0.2)".to_string())]);
        // evidence without placements (local runs, older records) reads and writes as before
        let json = serde_json::to_value(
            e.gate(Gate::Syntax).cloned().unwrap_or_else(|| GateRecord::new(Gate::Syntax, GateStatus::Passed, "")),
        )
        .unwrap();
        assert!(json.get("placements").is_none());
        let back: GateRecord = serde_json::from_value(json).unwrap();
        assert!(back.placements.is_empty());
    }
}
