//! Gate 2, static: the contract (no contract file touched, no host code changed
//! in a kernel source), the numeric-flag scan, and the ahead-of-time
//! compiles of baseline and candidate (their figures before and after).

use std::path::Path;
use std::time::Instant;

use kidiom_exec::tail;
use kidiom_patterns::Category;
use kidiom_patterns::record::{BranchCoverage, FlagMention, NumericFlag, PredictionFigures, StaticFigures};
use kidiom_syntax::Lang;
use serde_json::json;

use super::launch::HarnessResults;
use super::{Touched, Validation, note, stamp};
use crate::backend::cpu::{ReadCompile, StaticMetrics, delta};
use crate::backend::python::HarnessStatus;
use crate::evidence::{GateRecord, GateStatus, Predicted};
use crate::hostcode::{DecoratorIdiom, changed_host_code};
use crate::manifest::{KernelLanguage, Manifest};
use crate::patch::FilePatch;
use crate::predict::{Timing, predict_launch, speedup};
use crate::scan::{FlagChange, flag_changes};
use crate::validator::Validator;
use crate::verdict::{Gate, Verdict};
use crate::wire::{self, Compile, Profile};

/// How the harness's compile names a CPU case's specialization that Triton's
/// frontend refuses (triton/aot.py, `cpu_paths_triton`).
const NOT_TRITON_ON_CPU_PATH: &str = "not Triton on the path the CPU runs: ";

/// When a candidate's static figures are grossly worse than the baseline's, it is
/// rejected as "predicted slower" before any kernel runs (SPEC §8). `kidiom.toml`'s
/// `[validate.static_limits]` sets these; `--allow-static-regression` turns the rule off.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StaticLimits {
    /// Instructions may grow to at most this many times the baseline's.
    pub max_instructions_ratio: f64,
    /// Spilled bytes (stores) may not grow beyond this many times the baseline's ...
    pub max_spill_ratio: f64,
    /// ... and by more than this many bytes (both must hold to reject).
    pub max_spill_growth_bytes: i64,
    /// A kernel that used tensor-core instructions must keep some.
    pub keep_tensor_cores: bool,
    /// A candidate whose roofline prediction (from the work profiles) is
    /// this many times slower than the baseline's is rejected.
    pub max_predicted_slowdown: f64,
}

impl Default for StaticLimits {
    fn default() -> Self {
        StaticLimits {
            max_instructions_ratio: 2.0,
            max_spill_ratio: 4.0,
            max_spill_growth_bytes: 8192,
            keep_tensor_cores: true,
            max_predicted_slowdown: 1.2,
        }
    }
}

impl StaticLimits {
    /// Why `after` is predicted slower than `before`; empty when it is not.
    pub fn regressions(&self, before: &StaticMetrics, after: &StaticMetrics) -> Vec<String> {
        let mut out: Vec<String> = self.code_size(before, after).into_iter().collect();
        out.extend(self.resource_regressions(before, after));
        out
    }

    /// The instruction count grown beyond its ratio: a proxy for the work
    /// done, which a counted work profile replaces where there is one (a
    /// guarded fallback path doubles the code, not the work).
    pub fn code_size(&self, before: &StaticMetrics, after: &StaticMetrics) -> Option<String> {
        let (b, a) = (before.instructions?, after.instructions?);
        (b > 0 && a as f64 > self.max_instructions_ratio * b as f64).then(|| {
            format!("instructions {b} -> {a} ({:.1}x > {}x)", a as f64 / b as f64, self.max_instructions_ratio)
        })
    }

    /// Spills and lost tensor cores: what no profile of the work shows.
    pub fn resource_regressions(&self, before: &StaticMetrics, after: &StaticMetrics) -> Vec<String> {
        let mut out = Vec::new();
        let (sb, sa) = (before.spill_store_bytes.unwrap_or(0), after.spill_store_bytes.unwrap_or(0));
        if sa > sb + self.max_spill_growth_bytes && sa as f64 > self.max_spill_ratio * sb as f64 {
            out.push(format!(
                "spill stores {sb} -> {sa} B (> {}x and > +{} B)",
                self.max_spill_ratio, self.max_spill_growth_bytes
            ));
        }
        let tensor = |m: &StaticMetrics| m.by_class.get("tensor").copied().unwrap_or(0);
        if self.keep_tensor_cores && tensor(before) > 0 && tensor(after) == 0 {
            out.push(format!("tensor-core instructions {} -> 0", tensor(before)));
        }
        out
    }
}

/// What the static gate found before any compile.
pub(super) struct Scan {
    /// The kernel the candidate changes.
    pub(super) manifest: Manifest,
    /// Its entry in the touched files.
    pub(super) touched: usize,
    pub(super) changed_lines: usize,
    pub(super) precision: bool,
    pub(super) flag_text: Vec<String>,
    /// The gate's record so far (finished by [`judge_compiles`]).
    pub(super) rec: GateRecord,
}

/// The first harness run of `runs` that could not use the contract
/// ([`HarnessRun::contract_error`]) stops the validation at the static gate
/// with an `error` whose reason is the harness's line, unchanged.
pub(super) fn contract_error(run: &mut Validation<'_>, rec: &GateRecord, runs: &HarnessResults) -> Option<Verdict> {
    let mut all = vec![&runs.base_compile, &runs.cand_compile, &runs.cand_check];
    all.extend(runs.base_check.as_ref());
    if let Some((b, c)) = &runs.profiles {
        all.extend([b, c]);
    }
    let (h, line) = all.into_iter().find_map(|h| Some((h, h.contract_error()?.to_string())))?;
    let mut rec = rec.clone();
    note(&mut rec, h);
    Some(run.stop(rec, GateStatus::Error, line.clone(), Verdict::error(Some(Gate::Static), line, h.log())))
}

/// The contract, host-code and numeric-flag rules, and which kernel the
/// candidate changes; `Err` with the verdict when one of them stops it.
pub(super) fn scan(
    v: &Validator,
    run: &mut Validation<'_>,
    files: &[FilePatch],
    touched: &[Touched],
) -> Result<Scan, Verdict> {
    let started = Instant::now();
    let mut rec = GateRecord::new(Gate::Static, GateStatus::Passed, "");
    let finish = |rec: &mut GateRecord| rec.seconds = started.elapsed().as_secs_f64();

    // the frozen contract: every path the diff names (both sides of a rename)
    let mut contract: Vec<&str> = Vec::new();
    for p in files.iter().flat_map(FilePatch::paths) {
        if v.kernels.is_contract(p) && !contract.contains(&p) {
            contract.push(p);
        }
    }
    if !contract.is_empty() {
        rec.set_metrics(&StaticFigures {
            contract_files: Some(contract.iter().map(|p| p.to_string()).collect()),
            ..Default::default()
        });
        finish(&mut rec);
        let summary = format!("touches the frozen contract: {}", contract.join(", "));
        return Err(run.stop(rec, GateStatus::Failed, summary.clone(), Verdict::rejected(Gate::Static, summary)));
    }

    // host code in a Triton or CUDA source is contract too, but for its launches' configuration
    for t in touched {
        let Some(m) = v.kernels.for_source(&t.path) else { continue };
        if m.language == KernelLanguage::Cpp {
            continue; // host C++: all of the source is the kernel
        }
        let Some(lang) = Lang::from_path(Path::new(&t.path)) else { continue };
        let idiom = run.c.decorator_idiom.as_ref().map(|callee| DecoratorIdiom { callee: callee.clone() });
        match changed_host_code(lang, &t.base, &t.cand, idiom.as_ref()) {
            Ok(names) if names.is_empty() => {}
            Ok(names) => {
                rec.set_metrics(&StaticFigures { host_code: Some(names.clone()), ..Default::default() });
                finish(&mut rec);
                let summary = format!("changes host code outside the kernel: {} ({})", names.join(", "), t.path);
                return Err(run.stop(
                    rec,
                    GateStatus::Failed,
                    summary.clone(),
                    Verdict::rejected(Gate::Static, summary),
                ));
            }
            Err(e) => {
                finish(&mut rec);
                let summary = format!("cannot tell kernel from host code in {}: {e}", t.path);
                return Err(run.stop(
                    rec,
                    GateStatus::Error,
                    summary.clone(),
                    Verdict::error(Some(Gate::Static), summary, ""),
                ));
            }
        }
    }

    // a Triton kernel's body is device code on every branch (the interpreter would run host
    // Python where only the CPU's constexprs lead): what a candidate adds there that Triton
    // would not compile is refused before anything runs
    for t in touched {
        let Some(m) = v.kernels.for_source(&t.path) else { continue };
        if m.language != KernelLanguage::Triton || Lang::from_path(Path::new(&t.path)) != Some(Lang::Python) {
            continue;
        }
        match crate::kernelbody::added_host_code(&t.base, &t.cand) {
            Ok(found) if found.is_empty() => {}
            Ok(found) => {
                let named: Vec<String> = found.iter().map(|f| format!("{}, line {}", f.construct, f.line)).collect();
                finish(&mut rec);
                let summary = format!("host code in a kernel body: {} ({})", named.join("; "), t.path);
                return Err(refuse_code(run, rec, named, summary));
            }
            // a text that does not parse is the syntax gate's
            Err(_) => {}
        }
    }

    // a CUDA kernel's CPU checks run its emulation, built by the host's compiler: a preprocessor
    // condition on a macro the two compilers define differently picks code the device never runs
    for t in touched {
        let Some(m) = v.kernels.for_source(&t.path) else { continue };
        // a host module is loaded and called in the check's worker: no check of single calls sees
        // state it keeps between them, nor what it runs at import
        if m.language == KernelLanguage::Cpp
            && let Ok(found) = crate::hoststate::added_module_state(&t.base, &t.cand)
            && !found.is_empty()
        {
            let named: Vec<String> = found.iter().map(|f| format!("{}, line {}", f.name, f.line)).collect();
            finish(&mut rec);
            let summary = format!("state or code outside the calls the checks see: {} ({})", named.join("; "), t.path);
            return Err(refuse_code(run, rec, named, summary));
        }
        if m.language != KernelLanguage::Cuda {
            continue;
        }
        let found = crate::devicepath::added_platform_conditions(&t.base, &t.cand);
        if !found.is_empty() {
            let named: Vec<String> = found.iter().map(|f| format!("`{}`, line {}", f.name, f.line)).collect();
            finish(&mut rec);
            let summary = format!(
                "not the device's code on the path the CPU runs: a preprocessor condition on {} ({}): \
                 the emulation's compiler and NVRTC define it differently",
                named.join("; "),
                t.path
            );
            return Err(refuse_code(run, rec, named, summary));
        }
        // no check of single launches sees state a kernel keeps between them, nor code run when
        // the emulation's library loads
        if let Ok(found) = crate::devicepath::added_persistent_state(&t.base, &t.cand)
            && !found.is_empty()
        {
            let named: Vec<String> = found.iter().map(|f| format!("{}, line {}", f.name, f.line)).collect();
            finish(&mut rec);
            let summary =
                format!("state or code outside the launches the checks see: {} ({})", named.join("; "), t.path);
            return Err(refuse_code(run, rec, named, summary));
        }
    }

    // numeric flags: only under a precision pattern
    let (mut removed, mut added) = (Vec::new(), Vec::new());
    for f in files {
        let (r, a) = f.changed_lines();
        removed.extend(r);
        added.extend(a);
    }
    let changed_lines = removed.len().max(added.len());
    let flags: Vec<FlagChange> = flag_changes(&removed, &added);
    let flag_text: Vec<String> = flags.iter().map(FlagChange::describe).collect();
    let category = run.c.category;
    let precision = category == Some(Category::Precision);
    rec.set_metrics(&StaticFigures {
        numeric_flags: Some(flags.iter().map(numeric_flag).collect()),
        changed_lines: Some(changed_lines as u64),
        precision_pattern: Some(precision),
        ..Default::default()
    });
    if !flags.is_empty() && !precision {
        finish(&mut rec);
        let summary = format!(
            "numeric flags changed by a {} pattern (only precision patterns may): {}",
            category.map(|c| c.name()).unwrap_or("uncategorised"),
            flag_text.join(", ")
        );
        return Err(run.stop(rec, GateStatus::Failed, summary.clone(), Verdict::rejected(Gate::Static, summary)));
    }

    // exactly one kernel source
    let kernels: Vec<(usize, &Manifest)> =
        touched.iter().enumerate().filter_map(|(i, t)| Some((i, v.kernels.for_source(&t.path)?))).collect();
    match kernels.as_slice() {
        [(i, m)] if touched.len() == 1 => {
            Ok(Scan { manifest: (*m).clone(), touched: *i, changed_lines, precision, flag_text, rec })
        }
        [] => {
            finish(&mut rec);
            let summary = format!(
                "no kernel manifest under {}/ or beside {} names it as its source (`kidiom init {}` writes one)",
                v.kernels.dir, run.c.path, run.c.path
            );
            let reason = format!("{summary}; there is no contract to validate against");
            Err(run.stop(rec, GateStatus::Error, summary, Verdict::error(Some(Gate::Static), reason, "")))
        }
        _ => {
            finish(&mut rec);
            let summary = "the diff touches several files; a candidate must change one kernel source".to_string();
            Err(run.stop(rec, GateStatus::Error, summary.clone(), Verdict::error(Some(Gate::Static), summary, "")))
        }
    }
}

/// The compiles of baseline and candidate; `Some` verdict when the gate stops here.
pub(super) fn judge_compiles(
    run: &mut Validation<'_>,
    rec: GateRecord,
    flag_text: &[String],
    runs: &HarnessResults,
    name: &str,
) -> Option<Verdict> {
    let mut rec = rec;
    let (base, cand) = (&runs.base_compile, &runs.cand_compile);
    super::note(&mut rec, base);
    let header = wire::header(cand, "compile");
    stamp(&mut rec, cand, header.as_ref().ok());
    // the compiles' own wall time (they overlap the correctness check)
    rec.seconds = cand.process.seconds.max(if runs.cached { 0.0 } else { base.process.seconds });

    // the baseline must compile: otherwise nothing can be compared
    let before = match base.status {
        HarnessStatus::Ok => match wire::header(base, "compile").and_then(|_| wire::body::<Compile>(base, "compile")) {
            Ok(c) => c,
            Err(e) => return Some(run.wire_error(rec, base, &e)),
        },
        HarnessStatus::Error if !base.json["error"].as_str().is_some_and(|e| e.contains("timed out")) => {
            let summary = format!("the baseline {name} does not compile ahead of time");
            return Some(run.stop(
                rec,
                GateStatus::Error,
                summary.clone(),
                Verdict::error(Some(Gate::Static), summary, base.log()),
            ));
        }
        _ => return Some(run.harness_error(rec, base, "the baseline's compile")),
    };

    let header = match header {
        Ok(h) => h,
        Err(_) if matches!(cand.status, HarnessStatus::TimedOut | HarnessStatus::Crashed) => {
            return Some(run.harness_error(rec, cand, "the candidate's compile"));
        }
        Err(e) => return Some(run.wire_error(rec, cand, &e)),
    };
    let after = match cand.status {
        HarnessStatus::Ok => match wire::body::<Compile>(cand, "compile") {
            Ok(c) => c,
            Err(e) => return Some(run.wire_error(rec, cand, &e)),
        },
        // a timeout is never "does not compile": the harness's own alarm or the deadline's kill
        HarnessStatus::TimedOut | HarnessStatus::Crashed => {
            return Some(run.harness_error(rec, cand, "the candidate's compile"));
        }
        HarnessStatus::Error if header.timed_out() => {
            return Some(run.harness_error(rec, cand, "the candidate's compile"));
        }
        HarnessStatus::Skipped => {
            let summary = format!("the compile was skipped: {}", header.reason.as_deref().unwrap_or("no reason given"));
            return Some(run.stop(
                rec,
                GateStatus::Error,
                summary.clone(),
                Verdict::error(Some(Gate::Static), summary, cand.log()),
            ));
        }
        HarnessStatus::Error | HarnessStatus::Failed => {
            let err = header.error.as_deref().unwrap_or("compile failed");
            // a CPU case's specialization refused by Triton's frontend (triton/aot.py,
            // cpu_paths_triton): the interpreter would have run it as Python
            let summary = match err.find(NOT_TRITON_ON_CPU_PATH) {
                Some(i) => tail(err[i..].lines().next().unwrap_or_default(), 300).to_string(),
                None => format!("the candidate does not compile for {}: {}", before.arch, tail(err, 300)),
            };
            rec.log = Some(cand.log());
            return Some(run.stop(rec, GateStatus::Failed, summary.clone(), Verdict::rejected(Gate::Static, summary)));
        }
    };
    let arms = changed_arms(&before, &after);
    let (before, after) = (StaticMetrics::from_wire(&before), StaticMetrics::from_wire(&after));
    let d = delta(&before, &after);
    let limits = run.v.opts.static_limits;
    // with the work counted on both sides, the code's size alone does not predict the time
    let counted = runs.profiles.is_some();
    let code_size = limits.and_then(|l| l.code_size(&before, &after));
    let mut regressions = limits.map(|l| l.resource_regressions(&before, &after)).unwrap_or_default();
    if (!counted || !regressions.is_empty())
        && let Some(r) = &code_size
    {
        regressions.insert(0, r.clone());
    }
    if d.get("spill_store_bytes").is_some_and(|x| *x > 0) {
        run.notes.push(format!("spills grow by {} B", d["spill_store_bytes"]));
    }
    let mut figures = rec.static_figures();
    figures.delta = Some(d.clone());
    figures.arch = Some(after.arch.clone());
    figures.branches = (!arms.is_empty()).then(|| arms.iter().map(coverage).collect());
    rec.set_metrics(&figures);
    // the reviewer sees which code each gate ran: every arm the candidate adds or changes
    for arm in &arms {
        let gpu_only = if arm.cpu.is_empty() && !arm.gpu.is_empty() {
            "; only the GPU's shapes take it: the CPU runs it in their specialization cases only"
        } else {
            ""
        };
        run.notes.push(format!(
            "branch `if {}` ({}), line {}: CPU cases {:?}, GPU shapes {:?}{gpu_only}",
            tail(&arm.test, 120),
            arm.arm,
            arm.line,
            arm.cpu,
            arm.gpu
        ));
    }
    if let Some(arm) = arms.iter().find(|a| !a.cpu.is_empty() && a.gpu.is_empty()) {
        let reason = format!(
            "a branch only the CPU's shapes take: `if {}` ({}), line {} of {}: no GPU shape runs the code \
             the CPU's cases {:?} checked there",
            tail(&arm.test, 120),
            arm.arm,
            arm.line,
            run.c.path,
            arm.cpu
        );
        return Some(run.stop(rec, GateStatus::Failed, reason.clone(), Verdict::rejected(Gate::Static, reason)));
    }
    rec.summary = format!(
        "{}compiled for {}: before {}; after {}",
        if flag_text.is_empty() {
            String::new()
        } else {
            format!("numeric flags {} (precision pattern); ", flag_text.join(", "))
        },
        after.arch,
        before.summary(),
        after.summary()
    );
    rec.set_sides(Some(&before), Some(&after));
    if !regressions.is_empty() {
        let summary = format!("predicted slower: {} ({})", regressions.join("; "), rec.summary);
        let reason = format!("predicted slower: {}", regressions.join("; "));
        return Some(run.stop(rec, GateStatus::Failed, summary, Verdict::rejected(Gate::Static, reason)));
    }
    if let Some(slower) = judge_profiles(run, &mut rec, runs) {
        let summary = format!("predicted slower: {slower} ({})", rec.summary);
        let reason = format!("predicted slower: {slower}");
        return Some(run.stop(rec, GateStatus::Failed, summary, Verdict::rejected(Gate::Static, reason)));
    }
    if counted && let Some(size) = code_size {
        // the resources passed; the size is judged on the counted work's prediction, and with
        // none, or one of no gain, it stands for the work again
        match run.prediction.as_ref().map(|p| p.speedup).filter(|s| *s > 1.001) {
            Some(s) => {
                run.notes.push(format!("{size}, but the counted work predicts {s:.2}x: the code grew, not the work"))
            }
            None => {
                let summary = format!("predicted slower: {size} ({})", rec.summary);
                let reason = format!("predicted slower: {size}");
                return Some(run.stop(rec, GateStatus::Failed, summary, Verdict::rejected(Gate::Static, reason)));
            }
        }
    }
    run.records.push(rec);
    None
}

/// The work profiles' roofline prediction, into the static record and the
/// evidence; `Some(why)` when the candidate is predicted slower beyond the
/// limit. A profile that could not be made is a note, never a verdict: the
/// correctness gate judges a candidate that does not run.
fn judge_profiles(run: &mut Validation<'_>, rec: &mut GateRecord, runs: &HarnessResults) -> Option<String> {
    let (base, cand) = runs.profiles.as_ref()?;
    let model = run.v.opts.device_model.clone()?;
    super::note(rec, cand);
    let read = |r: &crate::backend::python::HarnessRun, who: &str| -> Result<Profile, String> {
        match r.status {
            HarnessStatus::Ok => wire::header(r, "profile")
                .and_then(|_| wire::body::<Profile>(r, "profile"))
                .map_err(|e| format!("{who}'s profile: {e}")),
            HarnessStatus::Skipped => {
                Err(format!("{who}'s profile was skipped: {}", r.json["reason"].as_str().unwrap_or("no reason given")))
            }
            _ => Err(format!("{who}'s profile failed: {}", tail(&r.log(), 300))),
        }
    };
    let mut figures = rec.static_figures();
    // the interpreter would run the baseline's own program (memory hints only): its counts
    let same_program = (cand.status == HarnessStatus::Ok).then(|| cand.json["same_program"].as_str()).flatten();
    let base_profile = read(base, "the baseline");
    let cand_profile = match (same_program, &base_profile) {
        (Some(why), Ok(b)) => {
            run.notes.push(format!("the candidate's work profile is the baseline's: {why}"));
            Ok(b.clone())
        }
        _ => read(cand, "the candidate"),
    };
    let (b, c) = match (base_profile, cand_profile) {
        (Ok(b), Ok(c)) => (b, c),
        (Err(e), _) | (_, Err(e)) => {
            figures.prediction =
                Some(PredictionFigures { label: "prediction".into(), error: Some(e.clone()), ..Default::default() });
            rec.set_metrics(&figures);
            run.notes.push(format!("no prediction: {e}"));
            return None;
        }
    };
    // each side's launch configuration from its own compile: num_warps, registers and shared
    // memory decide how many programs are resident and how many bytes they keep in flight
    let launch = |p: &Profile, compile: &crate::backend::python::HarnessRun| {
        (compile.status == HarnessStatus::Ok).then(|| p.launch(&compile.json)).flatten()
    };
    let (lb, lc) = (launch(&b, &runs.base_compile), launch(&c, &runs.cand_compile));
    let (pb, pc) = (
        predict_launch(&b.totals, b.launches, lb.as_ref(), Timing::Graph, &model),
        predict_launch(&c.totals, c.launches, lc.as_ref(), Timing::Graph, &model),
    );
    let s = speedup(&pb, &pc);
    let predicted = Predicted {
        label: "prediction".into(),
        device: model.name.clone(),
        baseline_us: pb.us,
        candidate_us: pc.us,
        speedup: s,
        bound: pc.bound,
        traffic_ratio: (b.traffic_ratio, c.traffic_ratio),
        reread_bytes: (b.totals.reread_bytes, c.totals.reread_bytes),
        expected_error: run
            .v
            .opts
            .expected_errors
            .as_ref()
            .and_then(|e| e.speedup_error(&run.kernel.as_ref().map(|k| k.name.clone()).unwrap_or_default())),
    };
    let side = |p: &Profile| json!({"totals": p.totals, "traffic_ratio": p.traffic_ratio, "counted": p.counted});
    figures.prediction = Some(PredictionFigures {
        label: "prediction".into(),
        error: None,
        device: Some(model.name.clone()),
        baseline: Some(json!(pb)),
        candidate: Some(json!(pc)),
        speedup: Some(s),
        profile: Some(json!({"baseline": side(&b), "candidate": side(&c)})),
    });
    rec.set_metrics(&figures);
    rec.summary = format!("{}; {}", rec.summary, predicted.headline());
    run.prediction = Some(predicted);
    let limit = run.v.opts.static_limits.map(|l| l.max_predicted_slowdown)?;
    (limit > 0.0 && s.is_finite() && s < 1.0 / limit).then(|| {
        format!(
            "the work profile predicts {:.1} us against the baseline's {:.1} us ({:.2}x, {}-bound on {}; limit {limit}x slower)",
            pc.us,
            pb.us,
            s,
            pc.bound.name(),
            model.name
        )
    })
}

/// A flag change as the record keeps it.
fn numeric_flag(f: &FlagChange) -> NumericFlag {
    NumericFlag {
        mention: FlagMention { flag: f.mention.flag.clone(), value: f.mention.value.clone() },
        delta: f.delta,
    }
}

/// A rejection at static for code a candidate adds to a kernel source: what
/// was found, each with its line, in the record and in the reason.
fn refuse_code(run: &mut Validation<'_>, mut rec: GateRecord, named: Vec<String>, summary: String) -> Verdict {
    rec.set_metrics(&StaticFigures { host_code: Some(named), ..Default::default() });
    run.stop(rec, GateStatus::Failed, summary.clone(), Verdict::rejected(Gate::Static, summary))
}

/// The candidate's constexpr branch arms that the baseline does not have
/// (a new test, or the same test with other code): who reaches each is the
/// candidate's business to show.
fn changed_arms(before: &Compile, after: &Compile) -> Vec<wire::BranchArm> {
    let arms = |c: &Compile| c.triton.as_ref().map(|t| t.branches.clone()).unwrap_or_default();
    let known: std::collections::HashSet<(String, String, String)> =
        arms(before).into_iter().map(|a| (a.test, a.arm, a.hash)).collect();
    arms(after).into_iter().filter(|a| !known.contains(&(a.test.clone(), a.arm.clone(), a.hash.clone()))).collect()
}

fn coverage(a: &wire::BranchArm) -> BranchCoverage {
    BranchCoverage {
        line: a.line,
        arm: a.arm.clone(),
        test: a.test.clone(),
        cpu_cases: a.cpu.clone(),
        gpu_shapes: a.gpu.clone(),
    }
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    fn m(instr: i64, spills: i64, tensor: i64) -> StaticMetrics {
        let mut s = StaticMetrics { instructions: Some(instr), spill_store_bytes: Some(spills), ..Default::default() };
        s.by_class.insert("tensor".into(), tensor);
        s
    }

    #[test]
    fn gross_regressions_are_predicted_slower() {
        let l = StaticLimits::default();
        // the all-sites ieee prefill: 10x instructions, 2 KB -> 67 KB spills, no tensor cores
        let r = l.regressions(&m(6960, 2008, 104), &m(69576, 67000, 0));
        assert_eq!(r.len(), 3, "{r:?}");
        // tf32x3 on all sites: 1.8x instructions, 4.2 KB spills, tensor cores kept
        assert!(l.regressions(&m(6960, 2008, 104), &m(12800, 4200, 312)).is_empty());
        // spills 4x but only +3 KB: not gross
        assert!(l.regressions(&m(100, 1000, 0), &m(100, 4500, 0)).is_empty());
    }
}
