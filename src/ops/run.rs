//! The whole loop on the defaults of kidiom.toml: mine (usage, and history
//! where asked), fill unreachable corpora from the shipped snapshot, apply
//! the catalog to kernels/ (dry run, with per-site search), validate this
//! run's pending candidates, and gather their verdicts.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kidiom_miner::SourceKind;
use kidiom_patterns::{Candidate, Catalog, Category, Filter, Kind, Pattern};
use kidiom_validator::Device;
use serde::Serialize;

use super::mine::{MineOptions, MineReport, PathInputs, manifests_for};
use crate::config::Config;

/// What the loop is asked to do (`kidiom run`'s flags).
pub(crate) struct Options {
    /// Patterns in the summary.
    pub(crate) top: usize,
    /// Stop after mining.
    pub(crate) no_validate: bool,
    pub(crate) device: Device,
    /// Where mining's parsing and validation's harness calls run.
    pub(crate) executor: kidiom_exec::Executor,
    /// One candidate's validation limit.
    pub(crate) timeout: Duration,
    pub(crate) allow_static_regression: bool,
    pub(crate) no_search: bool,
    /// Progress bars while mining.
    pub(crate) progress_bars: bool,
    /// The directories whose kernels are rewritten and validated, each kernel
    /// with its manifest beside it (`--targets`, else kidiom.toml's `[run]
    /// targets`; empty: kernels/).
    pub(crate) targets: Vec<PathBuf>,
    /// Judge every state-precision variant that has no verdict for its
    /// sources (`--variants`, or kidiom.toml's `[run] variants`); without it
    /// only those whose sources changed since their verdict in the catalog.
    pub(crate) variants: bool,
}

/// Everything one run did; also `kidiom run --json`.
#[derive(Serialize)]
pub(crate) struct Report {
    pub(crate) mine: MineReport,
    /// The history run (edit idioms), when kidiom.toml asks for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) history: Option<crate::ops::mine::history::HistoryReport>,
    pub(crate) top: Vec<Pattern>,
    /// The dry-run apply on kernels/, when the loop went on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) apply: Option<super::apply::Report>,
    /// Corpora this machine could not reach, filled in from the shipped snapshot.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) snapshot: Vec<super::snapshot::Filled>,
    /// Verdict counts of this run's candidates, earlier runs' verdicts included.
    pub(crate) verdicts: BTreeMap<String, usize>,
    /// The validation of this run's pending candidates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) validate: Option<super::validate::Report>,
    /// Wall seconds of each phase.
    pub(crate) phases: Phases,
    /// What apply and validation ran on (`kernels/`, or the targets), as shown.
    pub(crate) targets: String,
    /// The state-precision variants under kernels/ and their verdicts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) variants: Vec<VariantStatus>,
}

/// A state-precision variant as the run leaves it: judged by this run, or
/// by an earlier one (the verdict holds while its sources are unchanged),
/// or not judged yet (`kidiom validate --kernel all`, `kidiom run --variants`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct VariantStatus {
    pub(crate) name: String,
    /// Its candidate for the sources as they are (the id hashes them).
    pub(crate) candidate: String,
    /// The verdict for these sources; `None`: not judged yet.
    pub(crate) verdict: Option<String>,
    /// Judged by this run.
    pub(crate) judged: bool,
    /// Whether an earlier version of its sources has a verdict in the catalog.
    pub(crate) changed: bool,
    /// About how long judging it takes on a CPU (seconds), for the summary's estimate.
    pub(crate) cpu_seconds: u64,
}

/// About how long the precision gate takes per variant on a 2-core CPU
/// (bench/runs/2026-12-03-precision, 4096 drift steps: 52 to 55 s Triton,
/// 6 to 8 s CUDA): the Triton interpreter runs each step in ~7 ms, the CUDA
/// emulation in under 1 ms.
const VARIANT_SECONDS_TRITON: u64 = 60;
const VARIANT_SECONDS_CUDA: u64 = 10;

/// The state-precision variants under `root`'s kernels, stored as candidates,
/// each with whether this run judges it: every one without a verdict for its
/// sources when `all`, else those whose sources changed since a verdict.
fn variants_of_run(catalog: &Catalog, root: &std::path::Path, all: bool) -> Result<Vec<(Candidate, VariantStatus)>> {
    let kernels = kidiom_validator::Kernels::load(root, "kernels").context("reading the kernels' manifests")?;
    if kernels.variants.is_empty() {
        return Ok(Vec::new());
    }
    let stored = catalog.candidates(None)?;
    let mut out = Vec::new();
    for v in &kernels.variants {
        let c = super::candidates::store_variant(catalog, root, &kernels, &v.name)?;
        let verdict = c.evidence.verdict().map(|v| v.kind.name().to_string());
        let changed = stored.iter().any(|e| {
            e.pattern_id == kidiom_validator::VARIANT_PATTERN
                && e.path == c.path
                && e.id != c.id
                && e.evidence.verdict().is_some()
        });
        let cuda =
            kernels.manifest(&v.variant_of).is_some_and(|m| m.language == kidiom_validator::KernelLanguage::Cuda);
        let status = VariantStatus {
            name: v.name.clone(),
            candidate: c.id.clone(),
            judged: verdict.is_none() && (all || changed),
            verdict,
            changed,
            cpu_seconds: if cuda { VARIANT_SECONDS_CUDA } else { VARIANT_SECONDS_TRITON },
        };
        out.push((c, status));
    }
    Ok(out)
}

/// Wall seconds of each phase of a run (`bench/run-phases.sh` reads them).
#[derive(Debug, Default, Clone, Serialize)]
pub(crate) struct Phases {
    /// Usage mining of every corpus.
    pub(crate) mine: f64,
    /// History mining (0 when kidiom.toml does not ask for it).
    pub(crate) history: f64,
    /// Filling unreachable corpora from the shipped snapshot.
    pub(crate) snapshot: f64,
    /// The dry-run apply on kernels/, its site searches included.
    pub(crate) apply: f64,
    /// Of which the site searches.
    pub(crate) search: f64,
    /// Validation of this run's candidates.
    pub(crate) validate: f64,
    /// The whole run.
    pub(crate) total: f64,
}

/// What the loop tells its caller as it goes (the CLI prints these).
pub(crate) enum Event<'a> {
    /// A step starts, or something worth a line happened.
    Note(String),
    /// A site search measured this many variants of those it plans.
    Searching(usize, usize),
    /// A site search finished.
    Searched(&'a kidiom_validator::sitesearch::SiteSearch),
    /// A candidate's validation starts (`None`) or ended.
    Validating(usize, usize, &'a Candidate, Option<&'a kidiom_validator::Evidence>),
}

/// Whether a candidate needs this run's validation: pending, and not
/// already judged `needs-gpu` on a machine that still has no GPU; or judged
/// under a contract that has changed since (`stale`), unless accepted.
/// A site search's alternatives on its front wait for `kidiom validate ID`;
/// the loop validates its choice and the all-sites variants it compares with.
/// `gpu_here` is asked only for a candidate that waits for a GPU.
fn worth_validating(c: &Candidate, stale: bool, gpu_here: impl FnOnce() -> bool) -> bool {
    let roles = c.provenance.search_roles();
    if !roles.is_empty() && !roles.iter().any(|r| r == "chosen" || r == "all-sites") {
        return false;
    }
    if stale && c.status != kidiom_patterns::CandidateStatus::Committed {
        return true;
    }
    let waiting_for_gpu = c.evidence.verdict().is_some_and(|v| v.kind == kidiom_validator::VerdictKind::NeedsGpu);
    super::candidates::is_pending(c) && (!waiting_for_gpu || gpu_here())
}

/// The candidates that are a further value of a pattern already proposed on
/// the same file (a launch option's upstream values, most used first): the
/// loop validates the first, the others wait for `kidiom validate ID`, as a
/// search's alternatives do. On a CPU none of them can be ranked by speed,
/// and each costs a full validation.
fn later_values(cands: &[Candidate]) -> HashSet<String> {
    let mut seen = HashSet::new();
    cands
        .iter()
        .filter(|c| c.value.is_some() && c.provenance.search_roles().is_empty())
        .filter(|c| !seen.insert((c.pattern_id.as_str(), c.path.as_str())))
        .map(|c| c.id.clone())
        .collect()
}

/// Whether `device` is a GPU here; for `auto`, the harness in `root` says
/// (`kidiom_exec::gpu_present`), asked once.
fn gpu_here<'a>(device: Device, root: &'a std::path::Path) -> impl Fn() -> bool + 'a {
    let probed = std::sync::OnceLock::new();
    move || match device {
        Device::Cuda => true,
        Device::Cpu => false,
        Device::Auto => *probed.get_or_init(|| {
            // the harness that will run the kernels answers, from its own directory
            let Ok(harness) = super::harness_dir(root) else { return false };
            kidiom_exec::gpu_present(&kidiom_exec::find_python(&harness), &harness)
        }),
    }
}

/// Runs the loop on `catalog` with kidiom.toml's settings `cfg`: mining,
/// the snapshot's fill-in, then (unless told not to) apply and validate.
pub(crate) fn run(cfg: &Config, catalog: &mut Catalog, o: &Options, tell: &(dyn Fn(Event) + Sync)) -> Result<Report> {
    let started = Instant::now();
    let mut phases = Phases::default();
    let (manifests, mine, history) = mine_all(cfg, catalog, o, &mut phases)?;
    let t = Instant::now();
    let snapshot = fill_from_snapshot(cfg, catalog, &manifests, &mine, history.as_ref(), tell)?;
    phases.snapshot = t.elapsed().as_secs_f64();
    let top = catalog.list(&Filter { limit: Some(o.top), hide_refactor: true, ..Default::default() })?;
    let (mut apply, mut validate, mut variants) = (None, None, Vec::new());
    let mut verdicts: BTreeMap<String, usize> = BTreeMap::new();
    if !o.no_validate && (!o.targets.is_empty() || std::path::Path::new("kernels").is_dir()) {
        let t = Instant::now();
        let report = apply_to_kernels(cfg, catalog, o, tell)?;
        phases.apply = t.elapsed().as_secs_f64();
        phases.search = report.searches.iter().map(|s| s.seconds).sum();
        // This run's candidates on kernels/ (other candidates in the catalog, e.g. from
        // `kidiom apply` on another tree, are left to `kidiom validate`).
        let ours: HashSet<String> = report.candidates.iter().map(|c| c.id.clone()).collect();
        let later = later_values(&report.candidates);
        let mut first: HashSet<String> = ours.difference(&later).cloned().collect();
        // the state-precision variants under kernels/: each judged by the precision gate costs
        // a minute or so on a CPU (thousands of decode steps), so a run judges only those whose
        // sources changed since their verdict, or all with --variants / [run] variants
        let found = variants_of_run(catalog, &super::root()?, o.variants)?;
        first.extend(found.iter().filter(|(_, s)| s.judged).map(|(c, _)| c.id.clone()));
        variants = found.into_iter().map(|(_, s)| s).collect();
        apply = Some(report);
        let t = Instant::now();
        validate = validate_ours(cfg, catalog, o, &first, tell)?;
        phases.validate = t.elapsed().as_secs_f64();
        verdicts = verdicts_of(catalog, &ours)?;
        // as stored after validation
        let stored = catalog.candidates(None)?;
        for v in &mut variants {
            if let Some(c) = stored.iter().find(|c| c.id == v.candidate) {
                v.verdict = c.evidence.verdict().map(|k| k.kind.name().to_string());
            }
        }
    }
    phases.total = started.elapsed().as_secs_f64();
    let targets = shown_targets(&super::root()?, &o.targets);
    Ok(Report { mine, history, top, apply, snapshot, verdicts, validate, phases, targets, variants })
}

/// Mines the corpora kidiom.toml lists: usage, and history where asked,
/// through one fleet driver. Returns the manifests with both reports.
fn mine_all(
    cfg: &Config,
    catalog: &mut Catalog,
    o: &Options,
    phases: &mut Phases,
) -> Result<(Vec<kidiom_miner::Manifest>, MineReport, Option<crate::ops::mine::history::HistoryReport>)> {
    let t = Instant::now();
    let corpora = cfg.corpora()?;
    let manifests = manifests_for(&corpora, &PathInputs::default())?;
    if manifests.is_empty() {
        anyhow::bail!(
            "{} lists no corpora under [mine] corpora: name corpus manifests, repositories or directories there \
             (kidiom's own: corpora = [\"kidiom:fla\", \"kidiom:sglang\"]), or delete the file for kidiom's defaults",
            cfg.origin()
        );
    }
    // one fleet driver for the run's mining, usage and history alike
    let remote = super::mine::Remote::for_executor(&o.executor)?;
    let mopts = MineOptions {
        limits: cfg.limits(),
        config: cfg.mine_config(),
        progress: o.progress_bars,
        remote: remote.clone(),
    };
    let mine = super::mine::mine(catalog, manifests.clone(), &mopts)?;
    phases.mine = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let history = if cfg.mine.history {
        let git: Vec<_> = manifests.iter().filter(|m| m.kind == SourceKind::Git).cloned().collect();
        let hopts = crate::ops::mine::history::HistoryOptions {
            config: kidiom_miner::history::HistoryConfig { limits: cfg.limits(), ..Default::default() },
            progress: o.progress_bars,
            batch: 256,
            remote: remote.clone(),
        };
        Some(crate::ops::mine::history::mine(catalog, git, &hopts)?)
    } else {
        None
    };
    phases.history = t.elapsed().as_secs_f64();
    // the mining's driver leaves the cluster before validation starts its own
    drop((mopts, remote));
    Ok((manifests, mine, history))
}

/// Git corpora this machine could not reach (or read only through a
/// non-git fallback): their usage and edit idioms from the shipped snapshot.
fn fill_from_snapshot(
    cfg: &Config,
    catalog: &mut Catalog,
    manifests: &[kidiom_miner::Manifest],
    mine: &MineReport,
    history: Option<&crate::ops::mine::history::HistoryReport>,
    tell: &(dyn Fn(Event) + Sync),
) -> Result<Vec<super::snapshot::Filled>> {
    let Some(snap) = cfg.snapshot()? else { return Ok(Vec::new()) };
    let mut gaps: Vec<(String, Vec<Kind>)> = Vec::new();
    for m in manifests.iter().filter(|m| m.kind == SourceKind::Git) {
        let mut kinds = Vec::new();
        if mine.corpora.iter().any(|c| c.name == m.name && c.error.is_some()) {
            kinds.push(Kind::Usage);
        }
        let history_missing =
            history.is_some_and(|h| h.corpora.iter().find(|c| c.name == m.name).is_none_or(|c| c.error.is_some()));
        if history_missing {
            kinds.push(Kind::Edit);
        }
        if !kinds.is_empty() {
            gaps.push((m.name.clone(), kinds));
        }
    }
    if !gaps.is_empty() && !snap.exists() {
        tell(Event::Note(format!("no snapshot at {} to fill in {} unreachable corpora", snap.display(), gaps.len())));
        return Ok(Vec::new());
    }
    let snapshot = super::snapshot::fill(catalog, &snap, manifests, &gaps)?;
    for f in &snapshot {
        tell(Event::Note(super::snapshot::describe(f, &snap)));
    }
    Ok(snapshot)
}

/// The catalog applied to the kernel sources a manifest names (a dry run),
/// precision patterns searched per site unless turned off.
fn apply_to_kernels(
    cfg: &Config,
    catalog: &mut Catalog,
    o: &Options,
    tell: &(dyn Fn(Event) + Sync),
) -> Result<super::apply::Report> {
    let root = super::root()?;
    let shown = shown_targets(&root, &o.targets);
    tell(Event::Note(format!("applying the catalog to {shown} (dry run)")));
    // the kernel sources a manifest names: the files a candidate can be validated on (never
    // the harness's tests, whose planted kernels are contract)
    let mut manifests = if o.targets.is_empty() {
        kidiom_validator::Kernels::load(&root, "kernels")
            .with_context(|| format!("reading the kernel manifests under {}", root.join("kernels").display()))?
    } else {
        kidiom_validator::Kernels { dir: "kernels".into(), manifests: Vec::new(), variants: Vec::new() }
    };
    manifests.discover(&root, &o.targets).context("reading the targets' kernel manifests")?;
    if manifests.manifests.is_empty() {
        anyhow::bail!("no kernel manifest under {shown} (write one beside each kernel: `kidiom init KERNEL_FILE`)");
    }
    // each kernel's contract first: one the unmodified kernel fails (or a skeleton not finished)
    // gets no candidate, and the summary says why
    let failed = contracts_failed(&root, o, &manifests.manifests)?;
    for (kernel, why) in &failed {
        tell(Event::Note(format!("no candidates for {kernel}: {why}")));
    }
    manifests.manifests.retain(|m| !failed.iter().any(|(k, _)| *k == m.source_path()));
    let mut kernels: Vec<std::path::PathBuf> = manifests.manifests.iter().map(|m| root.join(m.source_path())).collect();
    kernels.sort();
    kernels.dedup();
    if kernels.is_empty() {
        // every kernel's contract failed: nothing to rewrite until one passes
        return Ok(super::apply::Report { contracts_failed: failed, ..Default::default() });
    }
    let validator = if cfg.search.enabled && !o.no_search {
        let mut opts = super::apply::search_validator_options(cfg, o.timeout * 3);
        opts.targets = o.targets.clone();
        Some(super::validate::build_validator(&root, &opts, None)?)
    } else {
        None
    };
    let note = |m: String| tell(Event::Note(m));
    let measured = |done: usize, planned: usize| tell(Event::Searching(done, planned));
    let req = super::apply::Request {
        targets: &kernels,
        patterns: &[],
        // renames and API refactors are history, not optimizations to propose
        filter: Filter { hide_refactor: true, ..Default::default() },
        value: None,
        write: false,
        force: false,
        search: validator.as_ref().map(|v| super::sitesearch::Options {
            validator: Some(v),
            jobs: cfg.search.jobs(),
            rule: cfg.search.rule(),
            limits: cfg.validate.static_limits,
            progress: &note,
            measured: Some(&measured),
        }),
    };
    let mut report = super::apply::apply(catalog, &root, &req)?;
    for s in &report.searches {
        tell(Event::Searched(s));
    }
    report.contracts_failed = failed;
    Ok(report)
}

/// The kernels of `manifests` whose unmodified code fails its contract
/// (the contract check, `kidiom check`): each one's source and the check's
/// line. Each answer is kept in the harness's content cache, so an
/// unchanged contract costs a lookup.
fn contracts_failed(
    root: &std::path::Path,
    o: &Options,
    manifests: &[kidiom_validator::Manifest],
) -> Result<Vec<(String, String)>> {
    let checked: Vec<&kidiom_validator::Manifest> =
        manifests.iter().filter(|m| m.language != kidiom_validator::KernelLanguage::Cpp).collect();
    if checked.is_empty() {
        return Ok(Vec::new());
    }
    let validator = kidiom_validator::ValidatorBuilder::new(root)
        .harness(Some(super::harness_dir(root)?))
        .targets(o.targets.clone())
        .timeout(o.timeout)
        .build()
        .context("reading the kernel manifests")?;
    let names: Vec<String> = checked.iter().map(|m| m.name.clone()).collect();
    let mut found: Vec<(String, String)> = checked
        .iter()
        .zip(validator.check_contracts(&names))
        // a check that cannot run here is left to validation, which names its problem
        .filter_map(|(m, r)| Some((m.source_path(), r.ok()?.problem()?)))
        .collect();
    found.sort();
    Ok(found)
}

/// The targets as a line shows them: `kernels/`, or each relative to the root.
fn shown_targets(root: &std::path::Path, targets: &[PathBuf]) -> String {
    match targets {
        [] => "kernels/".into(),
        t => t.iter().map(|p| p.strip_prefix(root).unwrap_or(p).display().to_string()).collect::<Vec<_>>().join(", "),
    }
}

/// Validates the candidates of this run (`ours`) that are worth it (see
/// [`worth_validating`]); `None` when there were none.
fn validate_ours(
    cfg: &Config,
    catalog: &mut Catalog,
    o: &Options,
    ours: &HashSet<String>,
    tell: &(dyn Fn(Event) + Sync),
) -> Result<Option<super::validate::Report>> {
    let root = super::root()?;
    let gpu = gpu_here(o.device, &root);
    let digests = super::candidates::contract_digests(&root, &o.targets);
    let stale = |c: &Candidate| super::candidates::contract_changed(c, &digests);
    let mut pending: Vec<_> = catalog
        .candidates(None)?
        .into_iter()
        .filter(|c| ours.contains(&c.id) && worth_validating(c, stale(c), &gpu))
        .collect();
    let again = pending.iter().filter(|c| stale(c)).count();
    if again > 0 {
        tell(Event::Note(format!(
            "{again} verdict{} given under a contract that has changed since: judged again",
            if again == 1 { "" } else { "s" }
        )));
    }
    // the longest validations first, so the last to finish is a short one (the cores stay busy
    // to the end): host C++ (builds, ThreadSanitizer, a speed measurement), then by the size of
    // the kernel's source, precision rewrites (an error curve more) before the rest
    let size = |p: &str| std::fs::metadata(root.join(p)).map(|m| m.len()).unwrap_or(0);
    pending.sort_by_cached_key(|c| {
        let host = [".cpp", ".cc", ".cxx"].iter().any(|e| c.path.ends_with(e));
        let precision = catalog.get(&c.pattern_id).ok().flatten().is_some_and(|p| p.category == Category::Precision);
        (!host, std::cmp::Reverse(size(&c.path)), !precision)
    });
    let vopts = super::validate::Options {
        device: o.device,
        timeout: o.timeout,
        seeds: kidiom_validator::DEFAULT_SEEDS,
        seed: None,
        consistency: true,
        python: None,
        executor: o.executor.clone(),
        static_limits: (!o.allow_static_regression).then_some(cfg.validate.static_limits),
        device_model: cfg.device_model()?,
        expected_errors: cfg.expected_errors(),
        untrusted_bench: false,
        targets: o.targets.clone(),
    };
    if pending.is_empty() {
        return Ok(None);
    }
    let n = pending.len();
    let mut progress =
        |i: usize, c: &Candidate, ev: Option<&kidiom_validator::Evidence>| tell(Event::Validating(i, n, c, ev));
    Ok(Some(super::validate::validate_all(catalog, &pending, &vopts, &mut progress)?))
}

/// Verdict counts of this run's candidates, including those judged by earlier runs.
fn verdicts_of(catalog: &Catalog, ours: &HashSet<String>) -> Result<BTreeMap<String, usize>> {
    let mut verdicts: BTreeMap<String, usize> = BTreeMap::new();
    for c in catalog.candidates(None)?.iter().filter(|c| ours.contains(&c.id)) {
        let kind = c.evidence.verdict().map(|v| v.kind.name()).unwrap_or("not validated").to_string();
        *verdicts.entry(kind).or_default() += 1;
    }
    Ok(verdicts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kidiom_patterns::Pattern;
    use kidiom_patterns::record::Provenance;
    use kidiom_syntax::Lang;

    fn cand(pattern: &str, path: &str, value: Option<&str>) -> Candidate {
        let p = Pattern::usage(pattern, Lang::Python, "a", "b", &[]);
        let diff = format!("{pattern} {path} {value:?}");
        let result = (String::new(), diff.clone());
        Candidate {
            value: value.map(String::from),
            ..Candidate::new(pattern, path, diff, result, Provenance::of_pattern(&p, value))
        }
    }

    #[test]
    fn only_the_first_value_of_a_pattern_on_a_file_is_validated_by_the_loop() {
        let cands = [
            cand("num-warps", "a.py", Some("8")),
            cand("num-warps", "a.py", Some("4")),
            cand("num-warps", "b.py", Some("8")),
            cand("hint", "a.py", None),
            cand("hint", "a.py", None),
            cand("num-warps", "a.py", Some("2")),
        ];
        let later = later_values(&cands);
        let want: HashSet<String> = [&cands[1], &cands[5]].iter().map(|c| c.id.clone()).collect();
        assert_eq!(later, want);
    }
}
