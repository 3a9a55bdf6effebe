//! The search's five steps (see the module overview), one method of
//! [`Search`] each, over the memo of the variants measured so far.

use std::collections::HashMap;
use std::time::Instant;

use super::{Assignment, Attribution, Figures, Measure, Measured, Point, Request, Role, SiteSearch};
use crate::error::{Error, Result};

/// The search's memo of variants: every variant measured so far, by
/// assignment, and how many were measured, compiled and found cached.
struct VariantMemo<'m, F> {
    measure: &'m mut dyn Measure,
    text: F,
    seen: HashMap<Assignment, Measured>,
    interp_runs: usize,
    compiled: usize,
    cached: usize,
    /// Interpreter runs the search plans in all, as far as it knows (progress).
    planned: usize,
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
        self.measure.progress(self.interp_runs, self.planned);
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

    /// The (precise, cheap) pairs of fixing values worth mixing. Only for
    /// a full front: a mix costs at least the cheap value everywhere (a site
    /// given a costlier value never makes the kernel cheaper), which fixes
    /// and so is within the choice's bound; a mix can be on the front, never
    /// the choice.
    fn mixed_pairs(&mut self, fixing: &[usize]) -> Vec<(usize, usize)> {
        let pairs = self.worth_mixing(fixing);
        if !pairs.is_empty() && !self.req.rule.full_front {
            self.notes.push(format!(
                "{} mix{} of two values not measured: each costs at least its cheap value on every site, which already fixes, so none can be chosen ([search] full_front = true measures them for the front)",
                pairs.len(),
                if pairs.len() == 1 { "" } else { "es" }
            ));
            return Vec::new();
        }
        pairs
    }

    fn worth_mixing(&self, fixing: &[usize]) -> Vec<(usize, usize)> {
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

    /// Step 3: nested subsets in attribution order, measured in the
    /// interpreter, then compiled unless dominated (see [`dominated`]) or,
    /// for a front of what can be chosen, above the choice's bound.
    /// Returns the compiled subsets and those measured in the interpreter only.
    fn nested_subsets(
        &mut self,
        fixing: &[usize],
        pairs: &[(usize, usize)],
    ) -> Result<(Vec<Assignment>, Vec<Assignment>)> {
        let chains = self.chains(fixing, pairs);
        let subsets: Vec<Assignment> = chains.iter().flat_map(|c| c.members[1..].iter().cloned()).collect();
        self.memo.measure(&subsets, false)?;
        let skip = dominated(&self.memo, &chains);
        if !skip.is_empty() {
            self.notes.push(format!(
                "{} nested subset{} not compiled: each has no less error than a cheaper variant (a subset of its sites, or the same sites with a cheaper value), so it can be neither on the front nor chosen",
                skip.len(),
                if skip.len() == 1 { "" } else { "s" }
            ));
        }
        // beyond the choice's bound a subset can be on the front, never the choice: compiled
        // for a full front only, its error shown either way
        let bound = self.bound(fixing);
        let (kept, above): (Vec<Assignment>, Vec<Assignment>) = subsets
            .into_iter()
            .filter(|a| !skip.contains(a))
            .partition(|a| self.req.rule.full_front || self.memo.failed(a).is_some() || self.memo.error(a) <= bound);
        if !above.is_empty() {
            self.notes.push(format!(
                "{} nested subset{} not compiled: {} error is above the choice's bound ({bound:.2e}, {}x the loosest all-sites fix), so {} be chosen; shown with {} error only ([search] full_front = true compiles them)",
                above.len(),
                if above.len() == 1 { "" } else { "s" },
                if above.len() == 1 { "its" } else { "each one's" },
                self.req.rule.error_factor,
                if above.len() == 1 { "it cannot" } else { "none can" },
                if above.len() == 1 { "its" } else { "their" },
            ));
        }
        self.memo.measure(&kept, true)?;
        Ok((kept, above))
    }

    /// The choice's error bound: `error_factor` times the loosest all-sites fix.
    fn bound(&self, fixing: &[usize]) -> f64 {
        let (memo, sites) = (&self.memo, self.sites);
        let loosest = fixing.iter().map(|&v| memo.error(&sites.all(v))).filter(|e| e.is_finite()).fold(0.0, f64::max);
        self.req.rule.error_factor * loosest
    }

    /// The nested chains of step 3: per fixing value, the baseline then the
    /// k most important sites rewritten (k = 1..N-1); per pair, the cheap
    /// value everywhere then the precise one on the k sites it helps most.
    fn chains(&self, fixing: &[usize], pairs: &[(usize, usize)]) -> Vec<Chain> {
        let (n, sites, memo) = (self.sites.0, self.sites, &self.memo);
        let mut chains = Vec::new();
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
            let mut members = vec![sites.base()];
            for k in 1..n {
                let mut a: Assignment = vec![None; n];
                for &i in &order[..k] {
                    a[i] = Some(v);
                }
                members.push(a);
            }
            chains.push(Chain { value: Some(v), members });
        }
        for &(p, c) in pairs {
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| {
                memo.error(&sites.precise_at(p, c, a))
                    .total_cmp(&memo.error(&sites.precise_at(p, c, b)))
                    .then(a.cmp(&b))
            });
            let mut members = vec![sites.all(c)];
            for k in 1..n {
                let mut a: Assignment = vec![Some(c); n];
                for &i in &order[..k] {
                    a[i] = Some(p);
                }
                members.push(a);
            }
            chains.push(Chain { value: None, members });
        }
        chains
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

/// A nested chain of step 3: its first member is where it starts (the
/// baseline, or the cheap value everywhere), each next one rewrites one
/// more site (with `value`, or with a pair's precise value).
struct Chain {
    value: Option<usize>,
    members: Vec<Assignment>,
}

/// The subsets not worth compiling: those whose error (measured in the
/// interpreter) is no lower than that of a variant that costs no more.
/// What costs no more is known without compiling from how the chains are
/// built, assuming a site rewritten with a costlier value never makes the
/// kernel cheaper: an earlier member of the same chain (fewer sites
/// rewritten, or fewer with the precise value), and the same sites with a
/// value whose all-sites variant compiled to fewer instructions. A
/// dominated subset is on no front (a cheaper variant has less error) and
/// never the choice (the cheaper one is within any bound it is within).
/// Subsets whose interpreter run failed are kept, so their failure is shown.
fn dominated<F>(memo: &VariantMemo<'_, F>, chains: &[Chain]) -> Vec<Assignment>
where
    F: Fn(&Assignment) -> Result<String>,
{
    let fine = |a: &Assignment| memo.failed(a).is_none() && memo.error(a).is_finite();
    let all = |a: &Assignment, x: usize| memo.instructions(&a.iter().map(|_| Some(x)).collect());
    let mut out: Vec<Assignment> = Vec::new();
    for chain in chains {
        for (k, s) in chain.members.iter().enumerate().skip(1) {
            if !fine(s) {
                continue;
            }
            let e = memo.error(s);
            let earlier = chain.members[..k].iter().any(|t| fine(t) && memo.error(t) <= e);
            let cheaper_value = chain.value.is_some_and(|v| {
                chains.iter().filter_map(|c| c.value).filter(|&w| w != v).any(|w| {
                    let cheaper = matches!((all(s, w), all(s, v)), (Some(a), Some(b)) if a < b);
                    let same_sites: Assignment = s.iter().map(|x| x.map(|_| w)).collect();
                    cheaper && fine(&same_sites) && memo.error(&same_sites) <= e
                })
            });
            if (earlier || cheaper_value) && !out.contains(s) {
                out.push(s.clone());
            }
        }
    }
    out
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
    let memo =
        VariantMemo { measure, text, seen: HashMap::new(), interp_runs: 0, compiled: 0, cached: 0, planned: 1 + nv };
    let mut s = Search { req, memo, sites: Sites(n), notes: Vec::new() };
    let (first, first_wall) = s.extremes()?;
    let fixing = s.fixing();
    let pairs = if n > 1 { s.mixed_pairs(&fixing) } else { Vec::new() };
    let per_site = n > 1 && !fixing.is_empty() && s.per_site_fits(&first, first_wall, &fixing, pairs.len());
    if per_site {
        // steps 2 and 3: 2N runs per fixing value and N per pair, then N - 1 subsets each
        // (the subsets twice: in the interpreter, then compiled unless dominated)
        s.memo.planned += fixing.len() * 2 * n + pairs.len() * n + 2 * (fixing.len() + pairs.len()) * (n - 1);
    }
    let (attribution, (subsets, interpreted)) = if per_site {
        (s.attribute(&fixing, &pairs)?, s.nested_subsets(&fixing, &pairs)?)
    } else {
        (Vec::new(), (Vec::new(), Vec::new()))
    };
    // the points: what was compiled, then the subsets measured in the interpreter only
    let mut compiled = first;
    for a in subsets.into_iter().chain(interpreted) {
        if !compiled.contains(&a) {
            compiled.push(a);
        }
    }
    s.memo.measure.progress(s.memo.interp_runs, s.memo.interp_runs);
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
