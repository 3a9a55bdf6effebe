//! Catalog patterns as rewrite candidates on target files.
//!
//! Dry run by default: each (pattern, file) with at least one site becomes
//! a candidate, computed against the file as it is on disk, stored in the
//! catalog (status `proposed`). With `write`, the candidates of one file
//! are chained (each computed on the previous one's result), every target
//! is checked first (clean in git unless `force`, writable, unchanged since
//! it was read), and only then are files replaced, each atomically; the
//! candidates are stored as `applied`. Precision patterns on kernels with
//! an error curve may be searched per site instead (`ops::sitesearch`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use kidiom_patterns::record::Provenance;
use kidiom_patterns::{Candidate, CandidateStatus, Catalog, Filter, Pattern};
use kidiom_rewriter::{Rewrite, RewriteSpec, Scope};
use kidiom_syntax::{Lang, blob_id, parse_tree};
use rayon::prelude::*;
use serde::Serialize;

use super::targets::{self, Skipped, Target};
use crate::config::Config;

/// The patterns selected by `--pattern`/`--category`/`--kind`, compiled.
/// Named patterns that cannot be compiled are errors; others are reported
/// as not applicable.
pub(crate) fn rewrites(cat: &Catalog, ids: &[String], filter: Filter, value: Option<&str>) -> Result<Compiled> {
    let mut pats = Vec::new();
    if ids.is_empty() {
        pats = cat.list(&filter)?;
    } else {
        for id in ids {
            // a merged-away id names the pattern it was merged into
            let kept = cat.merged_into(id)?;
            match cat.get(id)?.or(kept.as_deref().map(|k| cat.get(k)).transpose()?.flatten()) {
                Some(p) => pats.push(p),
                None => bail!("no pattern {id:?} in the catalog (see `kidiom catalog list`)"),
            }
        }
    }
    let mut ok = Vec::new();
    let mut skipped = Vec::new();
    for p in pats {
        let spec = RewriteSpec::from(&p);
        match Rewrite::new(&spec, value) {
            // a launch option is a tuning knob the CPU cannot rank: each value upstream writes is
            // a candidate of its own, for the GPU to choose between
            Ok(rw) if value.is_none() && rw.scope() == Scope::Launches && rw.value().is_some() => {
                let values = crate::ops::sitesearch::values(&p, None, rw.value());
                for v in values.iter().take(MAX_LAUNCH_VALUES) {
                    if let Ok(rw) = Rewrite::new(&spec, Some(v)) {
                        ok.push((p.clone(), rw));
                    }
                }
            }
            Ok(rw) => ok.push((p, rw)),
            // A pattern asked for by name must work; the rest are reported.
            Err(e) if !ids.is_empty() => return Err(e.into()),
            Err(e) => skipped.push(NotApplicable { pattern: p.id.clone(), reason: e.to_string() }),
        }
    }
    Ok((ok, skipped))
}

/// The most values of one launch option proposed (in the histogram's order).
const MAX_LAUNCH_VALUES: usize = 4;

/// The compiled rewrites, and the patterns without one.
pub(crate) type Compiled = (Vec<(Pattern, Rewrite)>, Vec<NotApplicable>);

#[derive(Debug, Serialize)]
pub(crate) struct NotApplicable {
    pub(crate) pattern: String,
    pub(crate) reason: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct Dropped {
    pub(crate) pattern: String,
    pub(crate) path: String,
    pub(crate) reason: String,
}

/// What one `apply` did; also the JSON of `apply --json` and of the MCP tools.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Report {
    pub(crate) write: bool,
    /// Files met while walking the targets that could not be read as sources.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) skipped: Vec<Skipped>,
    pub(crate) candidates: Vec<Candidate>,
    pub(crate) dropped: Vec<Dropped>,
    /// How many rewrites were not proposed because kidiom knew they would
    /// fail or do nothing, and how many were the same change as another.
    pub(crate) held_back: HeldBack,
    pub(crate) not_applicable: Vec<NotApplicable>,
    pub(crate) files: usize,
    pub(crate) patterns: usize,
    /// The per-site searches run (their candidates are in `candidates`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) searches: Vec<kidiom_validator::sitesearch::SiteSearch>,
    /// With a search: candidates proposed with one value on every site instead, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) not_searched: Vec<Dropped>,
    /// `kidiom run`: kernels left out because the unmodified kernel fails
    /// its contract (its source, and the contract check's line).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) contracts_failed: Vec<(String, String)>,
    pub(crate) seconds: f64,
}

/// What to apply, where, and how.
pub(crate) struct Request<'a> {
    pub(crate) targets: &'a [PathBuf],
    pub(crate) patterns: &'a [String],
    pub(crate) filter: Filter,
    pub(crate) value: Option<&'a str>,
    pub(crate) write: bool,
    pub(crate) force: bool,
    /// Search sites and values of precision patterns on kernels with an
    /// error curve, instead of rewriting every site with one value.
    pub(crate) search: Option<crate::ops::sitesearch::Options<'a>>,
}

/// The candidates of one file (dry run: each against the file as it is;
/// `write`: chained), what was dropped, and the final text when it changed.
fn rewrite_file(
    t: &Target,
    rws: &[(Pattern, Rewrite)],
    write: bool,
    searched: &(dyn Fn(&Pattern, &Rewrite, &Target) -> bool + Sync),
) -> FileOutcome {
    let (mut cands, mut dropped, mut held_back) = (Vec::new(), Vec::new(), Vec::new());
    if !t.may_hold_kernels() || !rws.iter().any(|(p, _)| p.language == t.lang) {
        return (cands, dropped, held_back, None);
    }
    let Some(mut tree) = parse_tree(t.lang, &t.text).ok().flatten() else {
        dropped.push(Dropped { pattern: String::new(), path: t.rel.clone(), reason: "cannot parse".into() });
        return (cands, dropped, held_back, None);
    };
    let mut cur = t.text.clone();
    for (p, rw) in rws.iter().filter(|(p, _)| p.language == t.lang) {
        if searched(p, rw, t) {
            continue;
        }
        let base = if write { cur.as_str() } else { t.text.as_str() };
        for r in rw.refusals(base, &tree) {
            let line = base.get(..r.site.start).map(|s| s.matches('\n').count() + 1).unwrap_or(0);
            let reason = format!("not at `{}` (line {line}): {}", r.function, r.reason);
            dropped.push(Dropped { pattern: p.id.clone(), path: t.rel.clone(), reason });
        }
        match kidiom_rewriter::rewrite_with_tree(rw, t.lang, base, &tree, &t.rel) {
            Ok(Some((out, out_tree))) => {
                if let Some(held) = vet(t.lang, base, &out.text) {
                    dropped.push(Dropped { pattern: p.id.clone(), path: t.rel.clone(), reason: held.reason(&t.rel) });
                    held_back.push(held);
                    continue;
                }
                let diff = kidiom_rewriter::unified(&t.rel, base, &out.text, 3);
                cands.push(Candidate {
                    value: rw.value().map(str::to_string),
                    sites: out.sites as u64,
                    status: if write { CandidateStatus::Applied } else { CandidateStatus::Proposed },
                    ..Candidate::new(
                        &p.id,
                        &t.rel,
                        diff,
                        (blob_id(base.as_bytes()), blob_id(out.text.as_bytes())),
                        Provenance::of_pattern(p, rw.value()),
                    )
                });
                if write {
                    cur = out.text;
                    tree = out_tree;
                }
            }
            Ok(None) => {}
            Err(e) => dropped.push(Dropped { pattern: p.id.clone(), path: t.rel.clone(), reason: e.to_string() }),
        }
    }
    let changed = (write && cur != t.text).then_some(cur);
    (cands, dropped, held_back, changed)
}

/// One file's candidates, what was dropped (and which of those kidiom knew
/// would fail or do nothing), and its final text under `write`.
type FileOutcome = (Vec<Candidate>, Vec<Dropped>, Vec<Held>, Option<String>);

/// Why a rewrite kidiom can tell in advance will fail or do nothing is not proposed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Held {
    /// The rewritten file uses names it neither defines nor imports (a NameError).
    Unbound(Vec<String>),
    /// Its only change is casts to the type the value already has.
    Nil(String),
    /// Its only change passes arguments at the callee's defaults.
    NilArgument(String),
}

impl Held {
    fn reason(&self, rel: &str) -> String {
        match self {
            Held::Unbound(names) => {
                format!("the rewrite uses {}, which {rel} neither defines nor imports", names.join(", "))
            }
            Held::Nil(why) | Held::NilArgument(why) => format!("the rewrite does nothing: {why}"),
        }
    }
}

/// Whether the rewrite of `base` to `result` is one kidiom knows will fail
/// (a name the file does not bind) or change nothing (nil casts); judged on
/// the files, so every way of making a candidate is held to it.
fn vet(lang: Lang, base: &str, result: &str) -> Option<Held> {
    let missing = kidiom_rewriter::unbound_names(lang, base, result);
    if !missing.is_empty() {
        return Some(Held::Unbound(missing));
    }
    kidiom_rewriter::nil_casts(lang, base, result)
        .map(Held::Nil)
        .or_else(|| kidiom_rewriter::nil_arguments(lang, base, result).map(Held::NilArgument))
}

/// What was not proposed, or not proposed twice, and why (counts).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct HeldBack {
    /// Rewrites that would bring in a name the target does not bind.
    pub(crate) unbound_name: usize,
    /// Rewrites whose only change is a cast to the type the value has.
    pub(crate) nil_cast: usize,
    /// Rewrites (or whole site searches) whose only change passes an
    /// argument at the callee's default.
    pub(crate) nil_argument: usize,
    /// Candidates with the same resulting file as another, folded into it.
    pub(crate) same_change: usize,
}

impl HeldBack {
    fn count(&mut self, h: &Held) {
        match h {
            Held::Unbound(_) => self.unbound_name += 1,
            Held::Nil(_) => self.nil_cast += 1,
            Held::NilArgument(_) => self.nil_argument += 1,
        }
    }

    /// The one line a run prints (`None`: nothing held back).
    pub(crate) fn line(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.unbound_name > 0 {
            parts.push(format!("{} would use a name the file does not bind", self.unbound_name));
        }
        if self.nil_cast > 0 {
            parts.push(format!("{} would only cast values to the type they have", self.nil_cast));
        }
        if self.nil_argument > 0 {
            parts.push(format!("{} would only pass an argument at its default", self.nil_argument));
        }
        if self.same_change > 0 {
            parts.push(format!(
                "{} made the same change as another (one candidate, all its patterns)",
                self.same_change
            ));
        }
        (!parts.is_empty()).then(|| format!("not proposed: {}", parts.join("; ")))
    }
}

/// One candidate per change: candidates of the same target with the same
/// resulting file (or, for a searched one, the same measured file) are one,
/// the others' patterns in its provenance. The one
/// kept is a searched candidate (its search says more), written in the
/// current spelling, else the one of the highest-scored pattern, else the
/// first by pattern id.
pub(crate) fn one_per_change(cands: Vec<Candidate>) -> (Vec<Candidate>, usize) {
    use std::collections::HashMap;
    let score = |c: &Candidate| c.provenance.pattern().map(|p| p.score).unwrap_or(f64::NEG_INFINITY);
    // a candidate written in an argument's current spelling is kept over one in an older spelling
    let respelled = |c: &Candidate| measured_blob(c).is_some();
    // the same id twice (one diff reached twice, say by a search's choice and its all-sites
    // variant) is one stored row, the later one, as storing them one after the other did
    let mut last: HashMap<String, usize> = HashMap::new();
    for (i, c) in cands.iter().enumerate() {
        last.insert(c.id.clone(), i);
    }
    let cands: Vec<Candidate> =
        cands.into_iter().enumerate().filter(|(i, c)| last.get(&c.id) == Some(i)).map(|(_, c)| c).collect();
    // one change: the same target and base, and a resulting file in common, its own or the one a
    // search measured for it (`allow_tf32=False` everywhere is `input_precision="ieee"` everywhere),
    // through any chain of candidates: a union of the candidates that share a file
    let mut parent: Vec<usize> = (0..cands.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut owner: HashMap<(String, String, String), usize> = HashMap::new();
    for (i, c) in cands.iter().enumerate() {
        for blob in std::iter::once(c.result_blob.clone()).chain(measured_blob(c)) {
            let key = (c.path.clone(), c.base_blob.clone(), blob);
            match owner.get(&key) {
                Some(&j) => {
                    let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                    parent[a.max(b)] = a.min(b);
                }
                None => {
                    owner.insert(key, i);
                }
            }
        }
    }
    let mut groups: HashMap<usize, Vec<Candidate>> = HashMap::new();
    let mut order = Vec::new();
    for (i, c) in cands.into_iter().enumerate() {
        let r = root(&mut parent, i);
        if !groups.contains_key(&r) {
            order.push(r);
        }
        groups.entry(r).or_default().push(c);
    }
    let (mut out, mut folded) = (Vec::new(), 0);
    for key in order {
        let Some(mut group) = groups.remove(&key) else { continue };
        group.sort_by(|a, b| {
            (b.provenance.search.is_some().cmp(&a.provenance.search.is_some()))
                .then(respelled(a).cmp(&respelled(b)))
                .then(score(b).total_cmp(&score(a)))
                .then(a.pattern_id.cmp(&b.pattern_id))
        });
        let rest = group.split_off(1);
        let Some(mut kept) = group.pop() else { continue };
        folded += rest.len();
        let others: Vec<_> = rest
            .iter()
            .flat_map(|c| {
                let mine = c.provenance.pattern().map(kidiom_patterns::record::AlsoProposed::from);
                mine.into_iter().chain(c.provenance.also().iter().cloned())
            })
            .collect();
        kept.provenance.add_also(others);
        out.push(kept);
    }
    (out, folded)
}

/// The blob a search measured for a candidate, when not its own file.
fn measured_blob(c: &Candidate) -> Option<String> {
    match &c.provenance.search {
        Some(kidiom_patterns::record::SearchOrigin::Sites(o)) => o.measured_blob.clone(),
        _ => None,
    }
}

/// Proposes (or, with `write`, applies) the selected patterns on the
/// targets under `root`, and stores the candidates in the catalog.
pub(crate) fn apply(cat: &mut Catalog, root: &Path, req: &Request) -> Result<Report> {
    let started = std::time::Instant::now();
    let (rws, not_applicable) = rewrites(cat, req.patterns, req.filter.clone(), req.value)?;
    let (targets, skipped) = targets::collect(req.targets, root)?;
    // A dry run searches sites and values where it can; --write applies what it is told.
    let search = req.search.as_ref().filter(|_| !req.write);
    let searched = |p: &Pattern, rw: &Rewrite, t: &Target| {
        search.is_some_and(|o| crate::ops::sitesearch::searchable(o.validator, p, rw, &t.rel, t.lang))
    };
    let per_file: Vec<FileOutcome> = targets.par_iter().map(|t| rewrite_file(t, &rws, req.write, &searched)).collect();
    let mut candidates = Vec::new();
    let mut dropped = Vec::new();
    let mut held_back = HeldBack::default();
    let mut searches = Vec::new();
    if let Some(o) = search {
        for t in &targets {
            let mut todo: Vec<_> = rws.iter().filter(|(p, rw)| p.language == t.lang && searched(p, rw, t)).collect();
            // a pattern in an older spelling of another's argument (`allow_tf32=False`) after the
            // others: what it measures, the current spelling's search has measured (sweep cache)
            todo.sort_by_key(|(p, rw)| {
                let values = crate::ops::sitesearch::values(p, req.value, rw.value());
                kidiom_rewriter::respelled(p.language, &p.after, &values).is_some()
            });
            for (p, rw) in todo {
                if !t.may_hold_kernels() {
                    continue;
                }
                let values = crate::ops::sitesearch::values(p, req.value, rw.value());
                if crate::ops::sitesearch::hint_op(p).is_some() {
                    match crate::ops::sitesearch::role_candidates(p, &values, &t.rel, &t.text) {
                        Ok(c) => candidates.extend(c),
                        Err(e) => dropped.push(Dropped {
                            pattern: p.id.clone(),
                            path: t.rel.clone(),
                            reason: format!("per-access hints failed: {e:#}"),
                        }),
                    }
                    continue;
                }
                // a search none of whose values changes anything is not run: every variant would
                // measure the kernel as it is (`out_dtype=tl.float32` is tl.dot's default)
                let nil: Vec<Held> = crate::ops::sitesearch::all_sites_texts(p, &values, &t.rel, &t.text)
                    .unwrap_or_default()
                    .iter()
                    .map(|r| vet(t.lang, &t.text, r))
                    .map_while(|h| h.filter(|h| matches!(h, Held::NilArgument(_))))
                    .collect();
                if !nil.is_empty()
                    && nil.len() == values.len()
                    && let Some(h) = nil.into_iter().next()
                {
                    dropped.push(Dropped { pattern: p.id.clone(), path: t.rel.clone(), reason: h.reason(&t.rel) });
                    held_back.count(&h);
                    continue;
                }
                match crate::ops::sitesearch::search_file(o, p, &values, &t.rel, &t.text) {
                    Ok(Some((s, c))) => {
                        candidates.extend(c);
                        searches.push(s);
                    }
                    Ok(None) => {}
                    Err(e) => dropped.push(Dropped {
                        pattern: p.id.clone(),
                        path: t.rel.clone(),
                        reason: format!("site search failed: {e:#}"),
                    }),
                }
            }
        }
    }
    let mut results: Vec<(usize, String)> = Vec::new(); // (target index, final text) for --write
    let mut not_searched = Vec::new();
    // the searched candidates (a dry run's only), held to what the others are
    candidates.retain(|c: &Candidate| {
        let Some(t) = targets.iter().find(|t| t.rel == c.path) else { return true };
        let Some(result) = kidiom_rewriter::patched(&t.text, &c.diff) else { return true };
        match vet(t.lang, &t.text, &result) {
            Some(h) => {
                dropped.push(Dropped { pattern: c.pattern_id.clone(), path: c.path.clone(), reason: h.reason(&t.rel) });
                held_back.count(&h);
                false
            }
            None => true,
        }
    });
    for (ti, (c, d, held, text)) in per_file.into_iter().enumerate() {
        if let Some(o) = search {
            let t = &targets[ti];
            for (p, rw) in rws.iter().filter(|(p, _)| c.iter().any(|c| c.pattern_id == p.id)) {
                if let Some(reason) = crate::ops::sitesearch::not_searched(o.validator, p, rw, &t.rel, t.lang) {
                    not_searched.push(Dropped { pattern: p.id.clone(), path: t.rel.clone(), reason });
                }
            }
        }
        candidates.extend(c);
        dropped.extend(d);
        held.iter().for_each(|h| held_back.count(h));
        if let Some(text) = text {
            results.push((ti, text));
        }
    }
    if req.write {
        // Check every file before writing any: nothing is half-written.
        for (ti, _) in &results {
            let t = &targets[*ti];
            if !req.force
                && let Some(status) = super::branch::uncommitted(root, Path::new(&t.rel)).ok().flatten()
            {
                return Err(kidiom_rewriter::Error::Uncommitted { path: t.abs.clone(), status }.into());
            }
            kidiom_rewriter::check_writable(&t.abs)?;
            let now = std::fs::read(&t.abs).with_context(|| format!("reading {}", t.abs.display()))?;
            let (expected, found) = (blob_id(t.text.as_bytes()), blob_id(&now));
            if expected != found {
                return Err(kidiom_rewriter::Error::Stale { path: t.abs.clone(), expected, found }.into());
            }
        }
        for (ti, text) in &results {
            kidiom_rewriter::atomic_write(&targets[*ti].abs, text.as_bytes())?;
        }
    }
    let (candidates, same_change) = one_per_change(candidates);
    held_back.same_change = same_change;
    cat.put_candidates(&candidates)?;
    Ok(Report {
        held_back,
        write: req.write,
        skipped,
        files: targets.len(),
        patterns: rws.len(),
        searches,
        not_searched,
        contracts_failed: Vec::new(),
        seconds: started.elapsed().as_secs_f64(),
        candidates,
        dropped,
        not_applicable,
    })
}

/// The validator settings a search uses (its compiles and interpreter runs; no GPU).
pub(crate) fn search_validator_options(cfg: &Config, timeout: std::time::Duration) -> super::validate::Options {
    super::validate::Options {
        device: kidiom_validator::Device::Cpu,
        timeout,
        seeds: 1,
        seed: None,
        consistency: false,
        python: None,
        // the search's compiles and interpreter runs stay here (their cache is local)
        executor: kidiom_validator::Executor::Local,
        static_limits: Some(cfg.validate.static_limits),
        // the search measures error and static cost only
        device_model: None,
        expected_errors: None,
        untrusted_bench: false,
        targets: cfg.targets(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kidiom_patterns::record::{SearchOrigin, SiteOrigin};

    fn cand(pattern: &str, score: f64, result: &str) -> Candidate {
        let mut p = Pattern::usage(pattern, Lang::Python, "a", "b", &[]);
        p.score = score;
        let diff = format!("diff of {pattern} to {result}");
        Candidate::new(pattern, "k.py", diff, ("base".into(), result.into()), Provenance::of_pattern(&p, None))
    }

    #[test]
    fn candidates_with_the_same_resulting_file_are_one_with_every_pattern() {
        let (out, folded) = one_per_change(vec![
            cand("weak", 1.0, "r1"),
            cand("strong", 5.0, "r1"),
            cand("other", 9.0, "r2"),
            cand("mid", 3.0, "r1"),
        ]);
        assert_eq!(folded, 2);
        let ids: Vec<&str> = out.iter().map(|c| c.pattern_id.as_str()).collect();
        assert_eq!(ids, ["strong", "other"], "the strongest pattern's candidate stands for the change");
        assert_eq!(out[0].provenance.patterns(), ["strong", "mid", "weak"]);
        assert!(out[1].provenance.also().is_empty());
        // the same file on another base is another change
        let mut moved = cand("weak", 1.0, "r1");
        moved.base_blob = "other-base".into();
        assert_eq!(one_per_change(vec![cand("strong", 5.0, "r1"), moved]).1, 0);
        // one diff reached twice is one row, not a change made by two patterns
        let (out, folded) = one_per_change(vec![cand("strong", 5.0, "r1"), cand("strong", 5.0, "r1")]);
        assert_eq!((out.len(), folded), (1, 0));
        assert!(out[0].provenance.also().is_empty());
    }

    #[test]
    fn a_searched_candidate_is_the_one_kept() {
        let mut searched = cand("searched", 0.5, "r1");
        searched.provenance = searched.provenance.with_search(SearchOrigin::Sites(SiteOrigin::default()));
        let (out, _) = one_per_change(vec![cand("strong", 5.0, "r1"), searched]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].provenance.patterns(), ["searched", "strong"]);
        assert!(out[0].provenance.search.is_some());
    }

    #[test]
    fn an_older_spelling_of_the_same_kernel_is_the_same_change_through_any_chain() {
        // `allow_tf32=False` everywhere: an edit rule's candidate (its file r-old), the
        // allow_tf32 search's (r-old, measured as r-new), the input_precision search's (r-new)
        let search = |c: &mut Candidate, measured: Option<&str>| {
            c.provenance = c.provenance.clone().with_search(SearchOrigin::Sites(SiteOrigin {
                measured_blob: measured.map(str::to_string),
                ..SiteOrigin::default()
            }));
        };
        let edit = cand("edit-allow-tf32", 9.0, "r-old");
        let mut old = cand("keyword-allow-tf32", 8.0, "r-old");
        search(&mut old, Some("r-new"));
        let mut new = cand("keyword-input-precision", 1.0, "r-new");
        search(&mut new, None);
        for order in [vec![edit.clone(), old.clone(), new.clone()], vec![new.clone(), edit.clone(), old.clone()]] {
            let (out, folded) = one_per_change(order);
            assert_eq!((out.len(), folded), (1, 2));
            assert_eq!(out[0].pattern_id, "keyword-input-precision", "the current spelling is kept");
            let mut also = out[0].provenance.patterns();
            also.sort();
            assert_eq!(also, ["edit-allow-tf32", "keyword-allow-tf32", "keyword-input-precision"]);
        }
        // a file measured as another is not the same change as an unrelated one
        assert_eq!(one_per_change(vec![old, cand("other", 1.0, "r-other")]).1, 0);
    }

    #[test]
    fn what_kidiom_knows_fails_or_does_nothing_is_held_back_and_counted() {
        let base = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x):\n    # exp(x) in words\n    a = tl.zeros([4], dtype=tl.float32)\n    tl.store(x, a.to(tl.float32) + tl.exp(a))\n";
        let unbound = vet(Lang::Python, base, &base.replace("tl.exp(a)", "exp(a)"));
        assert_eq!(unbound, Some(Held::Unbound(vec!["exp".into()])));
        let nil = vet(Lang::Python, base, &base.replace("a.to(tl.float32)", "a"));
        assert!(matches!(nil, Some(Held::Nil(_))), "{nil:?}");
        assert_eq!(vet(Lang::Python, base, &base.replace("tl.exp(a)", "tl.exp2(a)")), None);
        let default = vet(Lang::Python, base, &base.replace("tl.exp(a))", "tl.exp(a), eviction_policy=\"\")"));
        assert!(matches!(default, Some(Held::NilArgument(_))), "{default:?}");
        let mut held = HeldBack::default();
        for h in [unbound, nil, default].iter().flatten() {
            held.count(h);
        }
        held.same_change = 3;
        let line = held.line().expect("a line");
        assert!(line.starts_with("not proposed: 1 would use a name") && line.contains("1 would only cast"), "{line}");
        assert!(line.contains("3 made the same change"), "{line}");
        assert!(line.contains("1 would only pass an argument at its default"), "{line}");
        assert_eq!(HeldBack::default().line(), None);
    }
}
