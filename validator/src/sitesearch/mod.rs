//! Per-site rewrite search: which sites of a kernel to rewrite, and with
//! which value, for the precision idioms (`tl.dot(..., input_precision=V)`).
//!
//! Rewriting every site with one value is rarely what upstream does: FLA
//! sets `"ieee"` only on chosen dots and `"tf32x3"` or `"bf16x3"` elsewhere.
//! Each site and value costs differently (an ieee dot leaves the tensor
//! cores; a split precision adds passes), and each site contributes its own
//! share of the error. The search measures, never guesses:
//!
//! 1. the baseline and the all-sites variant of each value (error curve at
//!    the CPU lengths under the TF32-faithful interpreter, and the sm_90
//!    compile's figures); values whose all-sites error is not `min_gain`
//!    times below the baseline's fix nothing and are dropped;
//! 2. per-site error attribution for each remaining value: the error with
//!    only site i rewritten and with all but site i (interpreter only);
//!    for each pair of values where one is more precise and the other
//!    cheaper (and not already within `error_factor` of the precise one),
//!    the error of "all cheap, site i precise";
//! 3. nested subsets in the order the attribution gives: the k most
//!    important sites rewritten (k = 1..N-1), and "precise value on the k
//!    sites it helps most, cheap value on the rest"; each compiled;
//! 4. the Pareto front of error at the longest CPU length against SASS
//!    instructions, over every compiled variant;
//! 5. the choice: the cheapest variant (instructions, then spill stores,
//!    then error) that is not predicted slower by the static limits and
//!    whose error is within `error_factor` of the reference, the all-sites
//!    error of the least precise value that still fixes. Each value is a
//!    precision level upstream chose somewhere; the loosest level that
//!    still cuts the error by `min_gain` is accurate enough, and anything
//!    at least that accurate may be chosen if it is cheaper.
//!
//! Variants are measured in batches by a [`Measure`] (the harness's
//! `sweep`, which caches by source bytes and runs variants in parallel).
//!
//! The search is linear in the sites: about `2N` interpreter runs per
//! fixing value and `N` per mixed pair, `N - 1` compiles each. When the
//! first batch's pace says steps 2 and 3 would not fit in the time left,
//! they are skipped (a note says so) and the choice is among the all-sites
//! variants. A baseline that cannot be measured (it fails to run in the
//! interpreter or to compile for sm_90) is an error: nothing could be
//! compared with it.

mod measure;

use std::collections::HashMap;
use std::ops::Range;
use std::time::Instant;

use serde::Serialize;

pub use measure::{Figures, HarnessMeasure, Measure, Measured};

use crate::error::{Error, Result};
use crate::gates::StaticLimits;

/// Per site, the index of the value it gets (`None`: left as it is).
pub type Assignment = Vec<Option<usize>>;

/// The choice rule's parameters (`kidiom.toml` `[search]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Rule {
    /// A variant may be chosen when its error is at most this many times
    /// the reference (the loosest all-sites fix).
    pub error_factor: f64,
    /// A value fixes the kernel when its all-sites error is at least this
    /// many times below the baseline's.
    pub min_gain: f64,
}

impl Default for Rule {
    fn default() -> Self {
        Rule { error_factor: 2.0, min_gain: 20.0 }
    }
}

/// A site of the pattern in the kernel source.
#[derive(Debug, Clone, Serialize)]
pub struct Site {
    /// 1-based line of the site's start.
    pub line: usize,
    /// Its bytes in the baseline source.
    #[serde(skip)]
    pub range: Range<usize>,
    /// The site's first line, trimmed (our kernel's own text).
    pub text: String,
}

/// What each site contributes to the error, for one value.
#[derive(Debug, Clone, Serialize)]
pub struct Attribution {
    /// The value (index into [`SiteSearch::values`]).
    pub value: usize,
    /// The site.
    pub site: usize,
    /// Error with only this site rewritten.
    pub only: f64,
    /// Error with every site but this one rewritten.
    pub all_but: f64,
}

/// Why a point is in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// The kernel as it is.
    Baseline,
    /// Every site with one value.
    AllSites,
    /// On the Pareto front.
    Front,
    /// The search's choice.
    Chosen,
}

/// A compiled variant.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// Its measurement.
    #[serde(flatten)]
    pub measured: Measured,
    /// Its roles (empty: measured, dominated).
    pub roles: Vec<Role>,
    /// Why the static limits predict it slower than the baseline (empty: not).
    pub predicted_slower: Vec<String>,
}

impl Point {
    /// Whether it has `role`.
    pub fn is(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }
}

/// The result of one search.
#[derive(Debug, Clone, Serialize)]
pub struct SiteSearch {
    /// The pattern searched.
    pub pattern: String,
    /// The kernel source, relative to the root.
    pub path: String,
    /// The kernel's manifest name.
    pub kernel: String,
    /// The values tried, as written into the source.
    pub values: Vec<String>,
    /// The values whose all-sites variant fixes the error (indices).
    pub fixing: Vec<usize>,
    /// The pattern's sites.
    pub sites: Vec<Site>,
    /// The CPU lengths the errors are at.
    pub lengths: Vec<i64>,
    /// Every compiled variant; the first is the baseline.
    pub points: Vec<Point>,
    /// Per-site error attribution.
    pub attribution: Vec<Attribution>,
    /// The reference error of the choice rule.
    pub reference_error: Option<f64>,
    /// The chosen point (index into `points`).
    pub chosen: Option<usize>,
    /// Why that point, or why none.
    pub why: String,
    /// What the search could not do, and why (values that failed, steps skipped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The rule.
    pub rule: Rule,
    /// Variants measured in all (interpreter runs), compiled, and found in the harness's cache.
    pub measured: usize,
    /// Variants compiled.
    pub compiled: usize,
    /// Variants the harness had cached.
    pub cached: usize,
    /// Wall time of the search.
    pub seconds: f64,
}

impl SiteSearch {
    /// The front, lowest error first.
    pub fn front(&self) -> Vec<usize> {
        let mut f: Vec<usize> = (0..self.points.len()).filter(|&i| self.points[i].is(Role::Front)).collect();
        f.sort_by(|&a, &b| self.points[a].measured.last_error().total_cmp(&self.points[b].measured.last_error()));
        f
    }

    /// A short description of an assignment: `all 8: "ieee"`, `1,3,5: "tf32x3"; 2: "ieee"`.
    pub fn describe(&self, a: &Assignment) -> String {
        Self::describe_with(&self.values, a)
    }

    /// [`SiteSearch::describe`] given the values.
    pub fn describe_with(values: &[String], a: &[Option<usize>]) -> String {
        let n = a.len();
        let mut by_value: Vec<(usize, Vec<usize>)> = Vec::new();
        for (site, v) in a.iter().enumerate() {
            if let Some(v) = v {
                match by_value.iter_mut().find(|(x, _)| x == v) {
                    Some((_, s)) => s.push(site + 1),
                    None => by_value.push((*v, vec![site + 1])),
                }
            }
        }
        if by_value.is_empty() {
            return "none (baseline)".into();
        }
        let value = |v: usize| values.get(v).map(String::as_str).unwrap_or("?");
        by_value
            .iter()
            .map(|(v, sites)| {
                if sites.len() == n {
                    format!("all {n}: {}", value(*v))
                } else {
                    let s: Vec<String> = sites.iter().map(usize::to_string).collect();
                    format!("{}: {}", s.join(","), value(*v))
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// What to search.
pub struct Request<'a> {
    /// The pattern id.
    pub pattern: &'a str,
    /// The kernel source, relative to the root, and its manifest name.
    pub path: &'a str,
    /// The kernel's manifest name.
    pub kernel: &'a str,
    /// The values, as written.
    pub values: Vec<String>,
    /// The sites.
    pub sites: Vec<Site>,
    /// The static limits (predicted slower).
    pub limits: StaticLimits,
    /// The choice rule.
    pub rule: Rule,
}

/// The search's memo of variants: every variant measured so far, by
/// assignment, and how many were measured, compiled and found cached.
struct VariantMemo<'m, F> {
    measure: &'m mut dyn Measure,
    text: F,
    seen: HashMap<Assignment, Measured>,
    interp_runs: usize,
    compiled: usize,
    cached: usize,
}

impl<F: Fn(&Assignment) -> Result<String>> VariantMemo<'_, F> {
    /// Measures the assignments not measured yet (with `compile`: not yet compiled).
    fn measure(&mut self, batch: &[Assignment], compile: bool) -> Result<()> {
        let mut todo: Vec<(Assignment, String)> = Vec::new();
        for a in batch {
            let done = self.seen.get(a).is_some_and(|m| !compile || m.figures.is_some() || m.failed.is_some());
            if done || todo.iter().any(|(b, _)| b == a) {
                continue;
            }
            todo.push((a.clone(), (self.text)(a)?));
        }
        if todo.is_empty() {
            return Ok(());
        }
        for m in self.measure.measure(&todo, compile)? {
            self.interp_runs += 1;
            self.compiled += usize::from(compile);
            self.cached += usize::from(m.cached);
            self.seen.insert(m.assignment.clone(), m);
        }
        Ok(())
    }

    fn error(&self, a: &Assignment) -> f64 {
        self.seen.get(a).map(Measured::last_error).unwrap_or(f64::INFINITY)
    }

    fn instructions(&self, a: &Assignment) -> Option<i64> {
        self.seen.get(a).and_then(|m| m.figures.as_ref()).map(|f| f.instructions)
    }

    fn failed(&self, a: &Assignment) -> Option<&str> {
        self.seen.get(a).and_then(|m| m.failed.as_deref())
    }
}

/// The assignments the search is made of, for `n` sites.
#[derive(Debug, Clone, Copy)]
struct Sites(usize);

impl Sites {
    /// No site rewritten: the kernel as it is.
    fn base(self) -> Assignment {
        vec![None; self.0]
    }

    /// Value `v` on every site.
    fn all(self, v: usize) -> Assignment {
        vec![Some(v); self.0]
    }

    /// Value `v` on site `i` only.
    fn only(self, v: usize, i: usize) -> Assignment {
        (0..self.0).map(|j| (j == i).then_some(v)).collect()
    }

    /// Value `v` on every site but `i`.
    fn all_but(self, v: usize, i: usize) -> Assignment {
        (0..self.0).map(|j| (j != i).then_some(v)).collect()
    }

    /// The cheap value `c` everywhere, the precise `p` on site `i`.
    fn precise_at(self, p: usize, c: usize, i: usize) -> Assignment {
        (0..self.0).map(|j| Some(if j == i { p } else { c })).collect()
    }
}

/// One search under way: the request, the memo, and what it has found.
struct Search<'r, 'm, F> {
    req: &'r Request<'r>,
    memo: VariantMemo<'m, F>,
    sites: Sites,
    notes: Vec<String>,
}

impl<F: Fn(&Assignment) -> Result<String>> Search<'_, '_, F> {
    /// Step 1: the baseline and every value on every site, compiled. Returns
    /// the batch and its wall time; `Err` when the baseline cannot be measured.
    fn extremes(&mut self) -> Result<(Vec<Assignment>, std::time::Duration)> {
        let (req, sites) = (self.req, self.sites);
        let mut first = vec![sites.base()];
        first.extend((0..req.values.len()).map(|v| sites.all(v)));
        let started = Instant::now();
        self.memo.measure(&first, true)?;
        let wall = started.elapsed();
        if let Some(why) = self.memo.failed(&sites.base()) {
            return Err(Error::Search(format!(
                "{} as it is cannot be measured, so no variant can be compared with it: {}",
                req.path,
                clip(why)
            )));
        }
        for v in 0..req.values.len() {
            if let Some(why) = self.memo.failed(&sites.all(v)) {
                self.notes.push(format!("{} on every site failed: {}", req.values[v], clip(why)));
            }
        }
        Ok((first, wall))
    }

    /// The values whose all-sites variant compiled and cuts the baseline's
    /// error by `min_gain`.
    fn fixing(&self) -> Vec<usize> {
        let (memo, sites, rule) = (&self.memo, self.sites, self.req.rule);
        let e_base = memo.error(&sites.base());
        (0..self.req.values.len())
            .filter(|&v| {
                let e = memo.error(&sites.all(v));
                e.is_finite() && memo.instructions(&sites.all(v)).is_some() && e * rule.min_gain <= e_base
            })
            .collect()
    }

    /// The (precise, cheap) pairs of fixing values worth mixing.
    fn mixed_pairs(&self, fixing: &[usize]) -> Vec<(usize, usize)> {
        let (memo, sites) = (&self.memo, self.sites);
        let mut pairs = Vec::new();
        for &p in fixing {
            for &c in fixing {
                let (ep, ec) = (memo.error(&sites.all(p)), memo.error(&sites.all(c)));
                let cheaper = matches!((memo.instructions(&sites.all(c)), memo.instructions(&sites.all(p))), (Some(a), Some(b)) if a < b);
                // a cheap value already within the band of the precise one leaves a mix
                // nothing to win that the choice could use
                if p != c && ep < ec && cheaper && ec > self.req.rule.error_factor * ep {
                    pairs.push((p, c));
                }
            }
        }
        pairs
    }

    /// Whether steps 2 and 3 fit in the time left, at the first batch's pace
    /// (compiled variants; an interpreter run alone takes about half as
    /// long). When they do not, a note says so.
    fn per_site_fits(
        &mut self,
        first: &[Assignment],
        first_wall: std::time::Duration,
        fixing: &[usize],
        pairs: usize,
    ) -> bool {
        let n = self.sites.0;
        let fresh = first.iter().filter(|a| self.memo.seen.get(*a).is_some_and(|m| !m.cached)).count();
        if fresh == 0 {
            return true;
        }
        let Some(left) = self.memo.measure.remaining() else { return true };
        let interp_runs = fixing.len() * 2 * n + pairs * n;
        let compiles = (fixing.len() + pairs) * (n - 1);
        let pace = first_wall.as_secs_f64() / fresh as f64;
        let need = pace * (interp_runs as f64 / 2.0 + compiles as f64);
        if need <= left.as_secs_f64() {
            return true;
        }
        self.notes.push(format!(
            "per-site attribution skipped: {n} sites x {} value{} need {interp_runs} interpreter runs and {compiles} compiles, about {need:.0}s at this kernel's pace ({pace:.1}s a variant), more than the {:.0}s left; the choice is among the all-sites variants (raise the time limit or pin one value with --value)",
            fixing.len(),
            if fixing.len() == 1 { "" } else { "s" },
            left.as_secs_f64()
        ));
        false
    }

    /// Step 2: per-site attribution in the interpreter (only i, all but i;
    /// for each pair, cheap everywhere but i).
    fn attribute(&mut self, fixing: &[usize], pairs: &[(usize, usize)]) -> Result<Vec<Attribution>> {
        let (n, sites) = (self.sites.0, self.sites);
        let mut batch = Vec::new();
        for &v in fixing {
            batch.extend((0..n).flat_map(|i| [sites.only(v, i), sites.all_but(v, i)]));
        }
        for &(p, c) in pairs {
            batch.extend((0..n).map(|i| sites.precise_at(p, c, i)));
        }
        self.memo.measure(&batch, false)?;
        let mut attribution = Vec::new();
        for &v in fixing {
            for i in 0..n {
                attribution.push(Attribution {
                    value: v,
                    site: i,
                    only: self.memo.error(&sites.only(v, i)),
                    all_but: self.memo.error(&sites.all_but(v, i)),
                });
            }
        }
        Ok(attribution)
    }

    /// Step 3: nested subsets in attribution order, compiled.
    fn nested_subsets(&mut self, fixing: &[usize], pairs: &[(usize, usize)]) -> Result<Vec<Assignment>> {
        let (n, sites, memo) = (self.sites.0, self.sites, &self.memo);
        let mut subsets: Vec<Assignment> = Vec::new();
        for &v in fixing {
            let e_all = memo.error(&sites.all(v));
            // how much error comes back when site i is left out (ties: how much it fixes alone)
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| {
                let key = |i: usize| {
                    (memo.error(&sites.all_but(v, i)) / e_all.max(f64::MIN_POSITIVE), -memo.error(&sites.only(v, i)))
                };
                let (ka, kb) = (key(a), key(b));
                kb.0.total_cmp(&ka.0).then(kb.1.total_cmp(&ka.1)).then(a.cmp(&b))
            });
            for k in 1..n {
                let mut a: Assignment = vec![None; n];
                for &i in &order[..k] {
                    a[i] = Some(v);
                }
                subsets.push(a);
            }
        }
        for &(p, c) in pairs {
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| {
                memo.error(&sites.precise_at(p, c, a))
                    .total_cmp(&memo.error(&sites.precise_at(p, c, b)))
                    .then(a.cmp(&b))
            });
            for k in 1..n {
                let mut a: Assignment = vec![Some(c); n];
                for &i in &order[..k] {
                    a[i] = Some(p);
                }
                subsets.push(a);
            }
        }
        self.memo.measure(&subsets, true)?;
        Ok(subsets)
    }

    /// Step 4: every compiled variant as a point, the Pareto front of error
    /// against instructions marked.
    fn front(&self, compiled: &[Assignment]) -> Vec<Point> {
        let memo = &self.memo;
        let base_metrics = memo.seen.get(&self.sites.base()).and_then(|m| m.figures.as_ref()).map(Figures::metrics);
        let mut points: Vec<Point> = compiled
            .iter()
            .filter_map(|a| memo.seen.get(a).cloned())
            .map(|m| {
                let predicted_slower = match (&base_metrics, &m.figures) {
                    (Some(b), Some(f)) => self.req.limits.regressions(b, &f.metrics()),
                    _ => Vec::new(),
                };
                let mut roles = Vec::new();
                if m.assignment.iter().all(Option::is_none) {
                    roles.push(Role::Baseline);
                } else if m.assignment.iter().all(|v| v.is_some() && *v == m.assignment[0]) {
                    roles.push(Role::AllSites);
                }
                Point { measured: m, roles, predicted_slower }
            })
            .collect();
        let mut by_error: Vec<usize> = (0..points.len()).filter(|&i| usable(&points[i])).collect();
        by_error.sort_by(|&a, &b| {
            points[a]
                .measured
                .last_error()
                .total_cmp(&points[b].measured.last_error())
                .then(cost(&points[a]).cmp(&cost(&points[b])))
        });
        let mut cheapest = i64::MAX;
        for &i in &by_error {
            let ins = cost(&points[i]).0;
            if ins < cheapest {
                cheapest = ins;
                points[i].roles.push(Role::Front);
            }
        }
        points
    }

    /// Step 5: the choice, why, and the reference error it was made against.
    fn choose(&self, points: &mut [Point], fixing: &[usize]) -> (Option<usize>, String, Option<f64>) {
        let (req, memo, sites) = (self.req, &self.memo, self.sites);
        let reference_error =
            fixing.iter().map(|&v| memo.error(&sites.all(v))).filter(|e| e.is_finite()).max_by(f64::total_cmp);
        let (chosen, why) = match reference_error {
            None => (
                None,
                format!(
                    "no value fixes the error: none of {} on every site brings it {}x below the baseline's {:.2e}{}",
                    req.values.join(", "),
                    req.rule.min_gain,
                    memo.error(&sites.base()),
                    match (0..req.values.len()).filter(|&v| memo.failed(&sites.all(v)).is_some()).count() {
                        0 => String::new(),
                        k => format!(" ({k} of them failed to measure: see the notes)"),
                    }
                ),
            ),
            Some(r) => {
                let bound = req.rule.error_factor * r;
                let pick = (0..points.len())
                    .filter(|&i| {
                        usable(&points[i])
                            && !points[i].is(Role::Baseline)
                            && points[i].predicted_slower.is_empty()
                            && points[i].measured.last_error() <= bound
                    })
                    .min_by(|&a, &b| {
                        cost(&points[a])
                            .cmp(&cost(&points[b]))
                            .then(points[a].measured.last_error().total_cmp(&points[b].measured.last_error()))
                    });
                match pick {
                    Some(i) => (
                        Some(i),
                        format!(
                            "the cheapest variant not predicted slower whose error ({:.2e}) is within {}x of the loosest all-sites fix ({r:.2e})",
                            points[i].measured.last_error(),
                            req.rule.error_factor
                        ),
                    ),
                    None => (
                        None,
                        format!(
                            "every variant within {}x of the loosest all-sites fix ({r:.2e}) is predicted slower",
                            req.rule.error_factor
                        ),
                    ),
                }
            }
        };
        if let Some(i) = chosen {
            points[i].roles.push(Role::Chosen);
        }
        (chosen, why, reference_error)
    }
}

/// Whether a point can be on the front or chosen: measured, compiled, finite.
fn usable(p: &Point) -> bool {
    p.measured.failed.is_none() && p.measured.figures.is_some() && p.measured.last_error().is_finite()
}

/// What a point costs: instructions, then spill stores.
fn cost(p: &Point) -> (i64, i64) {
    let f = p.measured.figures.as_ref();
    (f.map(|f| f.instructions).unwrap_or(i64::MAX), f.map(|f| f.spill_store_bytes).unwrap_or(i64::MAX))
}

/// Runs the search, the five steps of the module's overview in order.
/// `text` renders an assignment as the kernel source.
pub fn search<F: Fn(&Assignment) -> Result<String>>(
    req: &Request,
    measure: &mut dyn Measure,
    text: F,
) -> Result<SiteSearch> {
    let started = Instant::now();
    let (n, nv) = (req.sites.len(), req.values.len());
    if n == 0 || nv == 0 {
        return Err(Error::Search(format!("{} has no site or no value of {} to search", req.path, req.pattern)));
    }
    let lengths = measure.lengths();
    let memo = VariantMemo { measure, text, seen: HashMap::new(), interp_runs: 0, compiled: 0, cached: 0 };
    let mut s = Search { req, memo, sites: Sites(n), notes: Vec::new() };
    let (first, first_wall) = s.extremes()?;
    let fixing = s.fixing();
    let pairs = s.mixed_pairs(&fixing);
    let per_site = n > 1 && !fixing.is_empty() && s.per_site_fits(&first, first_wall, &fixing, pairs.len());
    let (attribution, subsets) = if per_site {
        (s.attribute(&fixing, &pairs)?, s.nested_subsets(&fixing, &pairs)?)
    } else {
        (Vec::new(), Vec::new())
    };
    let mut compiled = first;
    for a in subsets {
        if !compiled.contains(&a) {
            compiled.push(a);
        }
    }
    let mut points = s.front(&compiled);
    let (chosen, why, reference_error) = s.choose(&mut points, &fixing);
    Ok(SiteSearch {
        pattern: req.pattern.to_string(),
        path: req.path.to_string(),
        kernel: req.kernel.to_string(),
        values: req.values.clone(),
        fixing,
        sites: req.sites.clone(),
        lengths,
        points,
        attribution,
        reference_error,
        chosen,
        why,
        notes: s.notes,
        rule: req.rule,
        measured: s.memo.interp_runs,
        compiled: s.memo.compiled,
        cached: s.memo.cached,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// A failure's message, cut to a readable length.
fn clip(s: &str) -> String {
    // one line: a compiler's message spans several
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match s.char_indices().nth(400) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel of `n` sites where site i contributes `weight[i]` of the
    /// baseline error, value v leaves `residual[v]` of a site's share, and
    /// costs `cost[v][i]` instructions at site i.
    struct Model {
        weight: Vec<f64>,
        residual: Vec<f64>,
        cost: Vec<Vec<i64>>,
        calls: usize,
        compiles: usize,
        extra: Extra,
    }

    /// What a harder kernel adds: variants that fail, a time limit, a slow first batch.
    #[derive(Default)]
    struct Extra {
        fails: Option<fn(&Assignment) -> Option<String>>,
        remaining: Option<std::time::Duration>,
        first_batch: std::time::Duration,
        measured: usize,
    }

    impl Measure for Model {
        fn lengths(&self) -> Vec<i64> {
            vec![64, 256]
        }

        fn remaining(&self) -> Option<std::time::Duration> {
            self.extra.remaining
        }

        fn measure(&mut self, variants: &[(Assignment, String)], compile: bool) -> Result<Vec<Measured>> {
            self.calls += 1;
            self.extra.measured += variants.len();
            if self.calls == 1 {
                std::thread::sleep(self.extra.first_batch);
            }
            let fails = self.extra.fails;
            Ok(variants
                .iter()
                .map(|(a, _)| {
                    if let Some(why) = fails.and_then(|f| f(a)) {
                        return Measured {
                            assignment: a.clone(),
                            error: vec![],
                            figures: None,
                            failed: Some(why),
                            cached: false,
                        };
                    }
                    self.compiles += usize::from(compile);
                    let e: f64 = a
                        .iter()
                        .zip(&self.weight)
                        .map(|(v, w)| w * v.map(|v| self.residual[v]).unwrap_or(1.0))
                        .sum::<f64>()
                        + 1e-9;
                    let ins: i64 =
                        1000 + a.iter().enumerate().map(|(i, v)| v.map(|v| self.cost[v][i]).unwrap_or(0)).sum::<i64>();
                    Measured {
                        assignment: a.clone(),
                        error: vec![e / 2.0, e],
                        figures: compile.then_some(Figures {
                            instructions: ins,
                            local: 0,
                            tensor: 10,
                            registers: Some(128),
                            spill_store_bytes: 0,
                        }),
                        failed: None,
                        cached: false,
                    }
                })
                .collect())
        }
    }

    fn request(n: usize, values: &[&str]) -> Request<'static> {
        Request {
            pattern: "p",
            path: "k.py",
            kernel: "k",
            values: values.iter().map(|v| v.to_string()).collect(),
            sites: (0..n).map(|i| Site { line: i + 1, range: i..i + 1, text: format!("site {i}") }).collect(),
            limits: StaticLimits::default(),
            rule: Rule::default(),
        }
    }

    fn text(a: &Assignment) -> Result<String> {
        Ok(format!("{a:?}"))
    }

    #[test]
    fn chooses_the_cheapest_variant_within_the_band_and_keeps_the_front() {
        // values: 0 = exact but costly (2000 per site), 1 = precise-enough and cheap (50), 2 = no fix
        let mut m = Model {
            weight: vec![0.4, 0.3, 0.2, 0.1],
            residual: vec![0.0, 1e-3, 0.9],
            cost: vec![vec![2000; 4], vec![50; 4], vec![1; 4]],
            calls: 0,
            compiles: 0,
            extra: Extra::default(),
        };
        let s = search(&request(4, &["\"ieee\"", "\"bf16x3\"", "\"tf32\""]), &mut m, text).unwrap();
        assert_eq!(s.fixing, vec![0, 1], "the third value fixes nothing");
        let chosen = &s.points[s.chosen.unwrap()];
        assert_eq!(chosen.measured.assignment, vec![Some(1); 4], "{}", s.why);
        assert!(chosen.is(Role::Front) && chosen.is(Role::AllSites));
        // all-sites ieee: 4 x 2000 + 1000 = 9000 instructions > 2x 1000: predicted slower, never chosen
        let ieee = s.points.iter().find(|p| p.measured.assignment == vec![Some(0); 4]).unwrap();
        assert!(!ieee.predicted_slower.is_empty() && ieee.is(Role::Front) && !ieee.is(Role::Chosen));
        // the front is monotone: lower error costs more
        let f = s.front();
        for w in f.windows(2) {
            let (a, b) = (&s.points[w[0]], &s.points[w[1]]);
            assert!(a.measured.last_error() <= b.measured.last_error());
            assert!(
                a.measured.figures.as_ref().unwrap().instructions > b.measured.figures.as_ref().unwrap().instructions
            );
        }
        // attribution for both fixing values, every site
        assert_eq!(s.attribution.len(), 8);
        let a0 = s.attribution.iter().find(|a| a.value == 1 && a.site == 0).unwrap();
        assert!(a0.only > 0.59 && a0.all_but > 0.39 && a0.all_but < 0.41, "{a0:?}");
    }

    #[test]
    fn a_subset_wins_when_some_sites_do_not_matter() {
        // sites 2 and 3 contribute nothing: rewriting them only costs
        let mut m = Model {
            weight: vec![0.5, 0.5, 0.0, 0.0],
            residual: vec![1e-4],
            cost: vec![vec![100, 100, 300, 300]],
            calls: 0,
            compiles: 0,
            extra: Extra::default(),
        };
        let s = search(&request(4, &["\"ieee\""]), &mut m, text).unwrap();
        let chosen = &s.points[s.chosen.unwrap()];
        assert_eq!(chosen.measured.assignment, vec![Some(0), Some(0), None, None], "{}", s.why);
        assert!(chosen.is(Role::Front));
        // nested subsets follow the attribution: the first two sites first
        assert!(s.points.iter().any(|p| p.measured.assignment == vec![Some(0), None, None, None]
            || p.measured.assignment == vec![None, Some(0), None, None]));
    }

    #[test]
    fn mixes_values_where_a_precise_value_is_needed_on_few_sites() {
        // value 1 is cheap but leaves 10% of site 0's large share; value 0 is exact and costly
        let mut m = Model {
            weight: vec![0.9, 0.05, 0.05],
            residual: vec![0.0, 0.02],
            cost: vec![vec![400; 3], vec![20; 3]],
            calls: 0,
            compiles: 0,
            extra: Extra::default(),
        };
        let s = search(&request(3, &["\"ieee\"", "\"tf32x3\""]), &mut m, text).unwrap();
        let mix = s.points.iter().find(|p| p.measured.assignment == vec![Some(0), Some(1), Some(1)]);
        assert!(mix.is_some_and(|p| p.is(Role::Front)), "the mix with ieee on site 1 is measured and on the front");
        // nothing is measured twice
        let compiled: usize = s.points.len();
        assert!(m.compiles >= compiled);
        assert!(s.compiled == m.compiles);
    }

    #[test]
    fn values_within_the_band_of_each_other_are_not_mixed() {
        // value 1 is almost as precise as value 0 (1.2x its error) and much cheaper
        let mut m = Model {
            weight: vec![0.5, 0.5],
            residual: vec![1e-3, 1.2e-3],
            cost: vec![vec![500, 500], vec![10, 10]],
            calls: 0,
            compiles: 0,
            extra: Extra::default(),
        };
        let s = search(&request(2, &["\"ieee\"", "\"tf32x3\""]), &mut m, text).unwrap();
        assert!(
            !s.points
                .iter()
                .any(|p| p.measured.assignment == vec![Some(0), Some(1)]
                    || p.measured.assignment == vec![Some(1), Some(0)]),
            "no mixes measured"
        );
        assert_eq!(s.points[s.chosen.unwrap()].measured.assignment, vec![Some(1), Some(1)]);
    }

    #[test]
    fn no_fixing_value_means_no_choice_and_says_why() {
        let mut m = Model {
            weight: vec![0.5, 0.5],
            residual: vec![0.9],
            cost: vec![vec![1, 1]],
            calls: 0,
            compiles: 0,
            extra: Extra::default(),
        };
        let s = search(&request(2, &["\"tf32\""]), &mut m, text).unwrap();
        assert!(s.chosen.is_none());
        assert!(s.why.contains("no value fixes"), "{}", s.why);
        assert!(s.points.iter().any(|p| p.is(Role::Baseline)));
    }

    fn model(n: usize, extra: Extra) -> Model {
        // value 0 exact and costly, value 1 cheap and leaving 1% of each site's share
        Model {
            weight: (0..n).map(|i| 1.0 / (i + 1) as f64).collect(),
            residual: vec![0.0, 1e-2],
            cost: vec![vec![100; n], vec![20; n]],
            calls: 0,
            compiles: 0,
            extra,
        }
    }

    #[test]
    fn a_baseline_that_cannot_be_measured_is_an_error_with_its_reason() {
        let fails: fn(&Assignment) -> Option<String> =
            |a| a.iter().all(Option::is_none).then(|| "compile failed: static_assert(K < 128)".into());
        let mut m = model(3, Extra { fails: Some(fails), ..Extra::default() });
        let e = search(&request(3, &["\"ieee\"", "\"tf32x3\""]), &mut m, text).unwrap_err().to_string();
        assert!(e.contains("k.py as it is cannot be measured") && e.contains("static_assert(K < 128)"), "{e}");
        assert_eq!(m.calls, 1, "nothing measured after the baseline failed");
    }

    #[test]
    fn a_value_that_fails_everywhere_is_a_note_and_the_others_are_searched() {
        let fails: fn(&Assignment) -> Option<String> =
            |a| a.contains(&Some(1)).then(|| "ValueError: input_precision \"tf32x3\" unsupported".into());
        let mut m = model(3, Extra { fails: Some(fails), ..Extra::default() });
        let s = search(&request(3, &["\"ieee\"", "\"tf32x3\""]), &mut m, text).unwrap();
        assert_eq!(s.fixing, vec![0]);
        assert!(s.notes.iter().any(|n| n.starts_with("\"tf32x3\" on every site failed: ValueError")), "{:?}", s.notes);
        assert!(s.chosen.is_some(), "{}", s.why);
        // every value failing: no choice, and the reason says they failed
        let all: fn(&Assignment) -> Option<String> = |a| a.iter().any(Option::is_some).then(|| "boom".into());
        let mut m = model(3, Extra { fails: Some(all), ..Extra::default() });
        let s = search(&request(3, &["\"ieee\"", "\"tf32x3\""]), &mut m, text).unwrap();
        assert!(s.chosen.is_none() && s.why.contains("2 of them failed to measure"), "{}", s.why);
        assert_eq!(s.notes.len(), 2, "{:?}", s.notes);
    }

    #[test]
    fn the_search_is_linear_in_the_sites() {
        for n in [2, 8, 24, 40] {
            let mut m = model(n, Extra::default());
            let s = search(&request(n, &["\"ieee\"", "\"tf32x3\""]), &mut m, text).unwrap();
            // 3 + (2 values x 2n + 1 pair x n) interpreter runs + 3 x (n - 1) compiles
            assert!(m.extra.measured <= 3 + 5 * n + 3 * (n - 1), "{n} sites: {} variants", m.extra.measured);
            assert!(m.calls <= 3, "three batches");
            assert!(s.chosen.is_some());
        }
    }

    #[test]
    fn per_site_steps_that_cannot_fit_in_the_time_left_are_skipped_with_a_note() {
        let slow = Extra {
            remaining: Some(std::time::Duration::from_millis(200)),
            first_batch: std::time::Duration::from_millis(60),
            ..Extra::default()
        };
        let mut m = model(24, slow);
        let s = search(&request(24, &["\"ieee\"", "\"tf32x3\""]), &mut m, text).unwrap();
        assert!(
            s.notes.iter().any(|n| n.starts_with("per-site attribution skipped: 24 sites x 2 values")),
            "{:?}",
            s.notes
        );
        assert_eq!(m.calls, 1, "only the first batch ran");
        assert!(s.attribution.is_empty());
        let chosen = &s.points[s.chosen.expect("a choice among the all-sites variants")];
        assert!(chosen.is(Role::AllSites), "{chosen:?}");
        // with time enough, the same kernel is searched per site
        let mut m = model(24, Extra { remaining: Some(std::time::Duration::from_secs(3600)), ..Extra::default() });
        let s = search(&request(24, &["\"ieee\"", "\"tf32x3\""]), &mut m, text).unwrap();
        assert!(s.notes.is_empty() && !s.attribution.is_empty(), "{:?}", s.notes);
    }

    #[test]
    fn describes_assignments() {
        let s = SiteSearch {
            pattern: String::new(),
            path: String::new(),
            kernel: String::new(),
            values: vec!["\"ieee\"".into(), "\"tf32x3\"".into()],
            fixing: vec![],
            sites: vec![],
            lengths: vec![],
            points: vec![],
            attribution: vec![],
            reference_error: None,
            chosen: None,
            why: String::new(),
            notes: vec![],
            rule: Rule::default(),
            measured: 0,
            compiled: 0,
            cached: 0,
            seconds: 0.0,
        };
        assert_eq!(s.describe(&vec![Some(0); 3]), "all 3: \"ieee\"");
        assert_eq!(s.describe(&vec![Some(1), None, Some(0), Some(1)]), "1,4: \"tf32x3\"; 3: \"ieee\"");
        assert_eq!(s.describe(&vec![None, None]), "none (baseline)");
    }
}
