//! The harness runs of the static and correctness gates: the baseline tree
//! prepared beside the candidate, then the compiles, checks and profiles
//! launched together.

use std::sync::atomic::{AtomicBool, Ordering};

use kidiom_syntax::blob_id;

use super::{Touched, Validation};
use crate::backend::python::{Harness, HarnessRun, HarnessStatus};
use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::request::{Kernel, Request};
use crate::tree::baseline_tree;
use crate::validator::Validator;

/// A fresh base seed for the correctness gate (one per validator).
pub(crate) fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish() % 1_000_000_007
}

/// The harness runs of the static and correctness gates (they overlap).
pub(crate) struct HarnessResults {
    pub(crate) base_compile: HarnessRun,
    pub(crate) cand_compile: HarnessRun,
    pub(crate) cand_check: HarnessRun,
    /// The baseline's check, for the error curve of a precision rewrite.
    pub(crate) base_check: Option<HarnessRun>,
    /// Whether the baseline compile came from this validator's cache.
    pub(crate) cached: bool,
    /// Whether the baseline's check and profile did (another candidate of the run made them).
    pub(crate) base_check_cached: bool,
    pub(crate) base_profile_cached: bool,
    /// The work profiles of baseline and candidate, for the prediction
    /// (`None`: no device model, or a host C++ kernel, measured directly).
    pub(crate) profiles: Option<(HarnessRun, HarnessRun)>,
}

/// The baseline tree in a temporary directory, and the candidate's source beside it.
pub(crate) struct Prepared {
    tmp: tempfile::TempDir,
    pub(crate) harness: Harness,
    pub(crate) cand_src: String,
}

/// The baseline tree with its contract, and the candidate source beside it.
pub(crate) fn prepare(v: &Validator, t: &Touched) -> Result<Prepared> {
    let tmp = tempfile::Builder::new()
        .prefix("kidiom-validate-")
        .tempdir()
        .map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let tree = tmp.path().join("tree");
    baseline_tree(v, &tree)?;
    // the baseline source in the tree is the baseline text (the file on disk may be the candidate)
    let base_file = tree.join(&t.path);
    std::fs::write(&base_file, &t.base).map_err(|e| Error::io(&base_file, e))?;
    let cand_file = tmp.path().join("candidate").join(&t.path);
    if let Some(parent) = cand_file.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    std::fs::write(&cand_file, &t.cand).map_err(|e| Error::io(&cand_file, e))?;
    let cand_src = cand_file.to_string_lossy().to_string();
    let harness = Harness { python: v.python.clone(), root: tree, fleet: v.fleet.clone() };
    Ok(Prepared { harness, cand_src, tmp })
}

impl Prepared {
    /// The validation's own temporary directory (the tree and the candidate lie in it).
    pub(crate) fn scratch(&self) -> &std::path::Path {
        self.tmp.path()
    }
}

/// Runs the compiles (baseline cached per blob) and the correctness checks
/// together. The candidate's check does not depend on its compile; it is
/// killed if the compile fails, and the gates are still judged in order.
pub(crate) fn launch(
    v: &Validator,
    run: &mut Validation<'_>,
    p: &Prepared,
    manifest: &Manifest,
    precision: bool,
) -> Result<HarnessResults> {
    let name = manifest.name.clone();
    let base_text = std::fs::read(p.harness.root.join(manifest.source_path()))
        .map_err(|e| Error::io(p.harness.root.join(manifest.source_path()), e))?;
    let key = (name.clone(), blob_id(&base_text));
    let seed = v.opts.seed.unwrap_or(v.run_seed);
    // the same seed for every candidate of the run: the harness computes the baseline's errors
    // per case once, in the validator's directory (never shown to a candidate's sandbox)
    let baseline_cache = v.baseline_cache.as_ref().map(|d| d.path().to_string_lossy().into_owned());
    run.seeds = (0..v.opts.seeds as u64).map(|i| seed + i).collect();
    let curve = precision && manifest.curve.is_some();
    let arg = manifest.harness_arg(&p.harness.root);
    let (kernel, device) = (Kernel::of(&arg), v.opts.device.name());
    let compile = |source: Option<&'_ str>| Request::Compile { kernel, source, shape: None }.argv();
    let profile_args = |source: Option<&'_ str>| Request::Profile { kernel, source, timeout: None, shape: None }.argv();
    let check = |source, seeds, curve, consistency, baseline_cache| {
        Request::Check { kernel, source, seeds, seed, device, curve, consistency, baseline_cache }.argv()
    };
    let cand_args =
        check(Some(p.cand_src.as_str()), v.opts.seeds, curve, v.opts.consistency, baseline_cache.as_deref());
    let limit = run.remaining();
    let cancel = AtomicBool::new(false);
    let harness = &p.harness;
    // a panic in a harness thread is a bug of ours, never the candidate's
    let panicked = |what: &str| Error::Internal(format!("the {what} thread panicked"));
    let profile = v.opts.device_model.is_some() && manifest.language != crate::manifest::KernelLanguage::Cpp;
    let (base_run, cand_run, cand_check, base_check, profiles) = std::thread::scope(|s| {
        // the profiles run beside the rest; each is a sandboxed run of the kernel on the CPU
        let profiles = profile.then(|| {
            s.spawn(|| {
                // cancelled with the candidate's runs: a candidate stopped at its compile needs no
                // baseline profile (a cancelled run is not kept; the next candidate makes it)
                let (base, base_cached) =
                    v.profiled.get_or_run(&key, || harness.call_cancellable(&profile_args(None), limit, &cancel));
                let cand = harness.call_cancellable(&profile_args(Some(&p.cand_src)), limit, &cancel);
                (base, cand, base_cached)
            })
        });
        let b = s.spawn(|| {
            let (compiled, cached) = v.compiled.get_or_run(&key, || harness.call(&compile(None), limit));
            let ok = matches!(&compiled, Ok(r) if r.status == HarnessStatus::Ok);
            // the baseline's own curve: the same for every precision candidate of the run (one seed)
            let check = (curve && ok).then(|| {
                v.checked
                    .get_or_run(&key, || harness.call_cancellable(&check(None, 1, true, false, None), limit, &cancel))
            });
            (compiled, check, cached)
        });
        let c = s.spawn(|| harness.call_cancellable(&cand_args, limit, &cancel));
        let cr = harness.call(&compile(Some(&p.cand_src)), limit);
        if !matches!(&cr, Ok(r) if r.status == HarnessStatus::Ok) {
            cancel.store(true, Ordering::Relaxed);
        } else if let (Ok(cand), Some(limits)) = (&cr, v.opts.static_limits) {
            // the static gate comes first: a candidate its figures reject (predicted slower) is
            // not checked for correctness (the baseline's compile: this run's, waited for, or
            // another candidate's)
            let (base, _) = v.compiled.get_or_run(&key, || harness.call(&compile(None), limit));
            if base.is_ok_and(|b| predicted_slower(&limits, &b, cand, profile)) {
                cancel.store(true, Ordering::Relaxed);
            }
        }
        let (compiled, check, cached) = b.join().unwrap_or_else(|_| (Err(panicked("baseline")), None, false));
        let cc = c.join().unwrap_or_else(|_| Err(panicked("check")));
        let profiles =
            profiles.map(|h| h.join().unwrap_or_else(|_| (Err(panicked("profile")), Err(panicked("profile")), false)));
        (compiled, cr, cc, (check, cached), profiles)
    });
    let (base_check, cached) = base_check;
    let base_check_cached = base_check.as_ref().is_some_and(|(_, c)| *c);
    let base_check = base_check.map(|(r, _)| r);
    let base_profile_cached = profiles.as_ref().is_some_and(|(_, _, c)| *c);
    let profiles = match profiles {
        Some((b, c, _)) => Some((b?, c?)),
        None => None,
    };
    Ok(HarnessResults {
        base_compile: base_run?,
        cand_compile: cand_run?,
        cand_check: cand_check?,
        base_check: base_check.transpose()?,
        cached,
        base_check_cached,
        base_profile_cached,
        profiles,
    })
}

/// Whether the static limits reject the candidate's compile against the
/// baseline's (both read as the static gate reads them; unreadable: no).
/// With work profiles to come (`counted`), the code's size alone does not.
fn predicted_slower(limits: &crate::gates::StaticLimits, base: &HarnessRun, cand: &HarnessRun, counted: bool) -> bool {
    use crate::backend::cpu::{ReadCompile, StaticMetrics};
    let read = |r: &HarnessRun| {
        (r.status == HarnessStatus::Ok)
            .then(|| crate::wire::body::<crate::wire::Compile>(r, "compile").ok())
            .flatten()
            .map(|c| StaticMetrics::from_wire(&c))
    };
    matches!((read(base), read(cand)), (Some(b), Some(c))
        if !limits.resource_regressions(&b, &c).is_empty() || (!counted && limits.code_size(&b, &c).is_some()))
}
