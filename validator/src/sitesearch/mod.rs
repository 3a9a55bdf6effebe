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
mod steps;

use std::ops::Range;

use serde::Serialize;

pub use measure::{Figures, HarnessMeasure, Measure, Measured, Progress};
pub use steps::search;

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
    /// Compile every point of the front, not only the variants that can be
    /// chosen: the mixes of two values, and the nested subsets whose error is
    /// above the choice's bound (their error is measured either way).
    pub full_front: bool,
}

impl Default for Rule {
    fn default() -> Self {
        Rule { error_factor: 2.0, min_gain: 20.0, full_front: false }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Result;

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
        /// What `progress` was told, in order.
        progress: Vec<(usize, usize)>,
    }

    impl Measure for Model {
        fn lengths(&self) -> Vec<i64> {
            vec![64, 256]
        }

        fn remaining(&self) -> Option<std::time::Duration> {
            self.extra.remaining
        }

        fn progress(&mut self, done: usize, planned: usize) {
            self.extra.progress.push((done, planned));
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

    /// The request with every point of the front compiled.
    fn full_front(mut r: Request<'static>) -> Request<'static> {
        r.rule.full_front = true;
        r
    }

    fn text(a: &Assignment) -> Result<String> {
        Ok(format!("{a:?}"))
    }

    /// Four sites; values: 0 = exact but costly (2000 per site), 1 = precise-enough and cheap (50), 2 = no fix.
    fn three_values() -> Model {
        Model {
            weight: vec![0.4, 0.3, 0.2, 0.1],
            residual: vec![0.0, 1e-3, 0.9],
            cost: vec![vec![2000; 4], vec![50; 4], vec![1; 4]],
            calls: 0,
            compiles: 0,
            extra: Extra::default(),
        }
    }

    #[test]
    fn chooses_the_cheapest_variant_within_the_band_and_keeps_the_front() {
        // values: 0 = exact but costly (2000 per site), 1 = precise-enough and cheap (50), 2 = no fix
        let mut m = three_values();
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
    fn a_subset_wins_when_some_sites_do_not_matter_and_dominated_subsets_are_not_compiled() {
        // sites 2 and 3 contribute nothing: rewriting them only costs
        let mut m = Model {
            weight: vec![0.5, 0.5, 0.0, 0.0],
            residual: vec![1e-4],
            cost: vec![vec![100, 100, 300, 300]],
            calls: 0,
            compiles: 0,
            extra: Extra::default(),
        };
        let s = search(&full_front(request(4, &["\"ieee\""])), &mut m, text).unwrap();
        let chosen = &s.points[s.chosen.unwrap()];
        assert_eq!(chosen.measured.assignment, vec![Some(0), Some(0), None, None], "{}", s.why);
        assert!(chosen.is(Role::Front));
        // nested subsets follow the attribution: the first two sites first
        assert!(s.points.iter().any(|p| p.measured.assignment == vec![Some(0), None, None, None]
            || p.measured.assignment == vec![None, Some(0), None, None]));
        // a subset adding site 2 or 3 has the same error and costs more: dominated, not compiled
        assert!(s.notes.iter().any(|n| n.starts_with("1 nested subset not compiled")), "{:?}", s.notes);
        // baseline and all-sites, then the subsets of 1 and 2 sites; the third is dominated
        assert_eq!(m.compiles, 4);
        assert_eq!(s.points.len(), 4);
        assert!(s.points.iter().all(|p| p.measured.figures.is_some()), "only compiled variants are points");
        let three = s.points.iter().filter(|p| p.measured.assignment.iter().flatten().count() == 3).count();
        assert_eq!(three, 0, "the three-site subset was not compiled");
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
        let s = search(&full_front(request(3, &["\"ieee\"", "\"tf32x3\""])), &mut m, text).unwrap();
        let mix = s.points.iter().find(|p| p.measured.assignment == vec![Some(0), Some(1), Some(1)]);
        assert!(mix.is_some_and(|p| p.is(Role::Front)), "the mix with ieee on site 1 is measured and on the front");
        // nothing is measured twice
        let compiled: usize = s.points.len();
        assert!(m.compiles >= compiled);
        assert!(s.compiled == m.compiles);
        // by default a mix, which costs at least its cheap value everywhere (a fix), is not measured:
        // it cannot be chosen, and the choice is the same
        let full_measured = m.extra.measured;
        let mut d = Model { calls: 0, compiles: 0, extra: Extra::default(), ..m };
        let by_default = search(&request(3, &["\"ieee\"", "\"tf32x3\""]), &mut d, text).unwrap();
        assert!(by_default.points.iter().all(|p| {
            let vals: std::collections::BTreeSet<_> = p.measured.assignment.iter().flatten().collect();
            vals.len() <= 1
        }));
        assert!(
            by_default.notes.iter().any(|n| n.starts_with("1 mix of two values not measured")),
            "{:?}",
            by_default.notes
        );
        assert_eq!(
            by_default.points[by_default.chosen.unwrap()].measured.assignment,
            s.points[s.chosen.unwrap()].measured.assignment
        );
        assert!(d.extra.measured < full_measured);
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
            // 3 + (2 values x 2n + 1 pair x n) interpreter runs + 3 x (n - 1) subsets, each sent twice
            // (the interpreter, then the compile of those not dominated, whose curve the harness has cached)
            assert!(m.extra.measured <= 3 + 5 * n + 6 * (n - 1), "{n} sites: {} variants", m.extra.measured);
            assert!(m.compiles <= 3 + 3 * (n - 1), "{n} sites: {} compiles", m.compiles);
            assert!(m.calls <= 4, "four batches");
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
        assert!(!s.attribution.is_empty(), "{:?}", s.notes);
        assert!(s.notes.iter().all(|n| !n.starts_with("per-site attribution skipped")), "{:?}", s.notes);
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
    #[test]
    fn progress_counts_up_to_what_was_measured() {
        let mut m = three_values();
        let s = search(&request(4, &["\"ieee\"", "\"bf16x3\"", "\"tf32\""]), &mut m, text).unwrap();
        let p = &m.extra.progress;
        assert!(p.len() >= 3, "after each batch and at the end: {p:?}");
        assert_eq!(p[0], (4, 4), "the first batch: the baseline and three all-sites variants");
        assert!(p[1].1 > 4, "then the per-site plan: {p:?}");
        assert!(p.windows(2).all(|w| w[0].0 <= w[1].0), "never backwards: {p:?}");
        assert!(p.iter().all(|(d, n)| d <= n), "{p:?}");
        assert_eq!(*p.last().unwrap(), (s.measured, s.measured), "ends full at what was measured");
    }
    #[test]
    fn a_subset_better_than_its_predecessors_is_compiled() {
        // every site matters: each subset lowers the error, so none is dominated
        let mut m = Model {
            weight: vec![0.4, 0.3, 0.2, 0.1],
            residual: vec![1e-4],
            cost: vec![vec![100; 4]],
            calls: 0,
            compiles: 0,
            extra: Extra::default(),
        };
        let s = search(&full_front(request(4, &["\"ieee\""])), &mut m, text).unwrap();
        assert!(s.notes.iter().all(|n| !n.contains("not compiled")), "{:?}", s.notes);
        assert_eq!(s.points.len(), 2 + 3, "baseline, all sites, and the subsets of 1, 2 and 3 sites");
        assert!(s.points.iter().all(|p| p.measured.figures.is_some()));
    }

    #[test]
    fn by_default_only_what_can_be_chosen_is_compiled_and_the_choice_is_the_full_fronts() {
        for (weights, residual) in [(vec![0.4, 0.3, 0.2, 0.1], 1e-4), (vec![0.5, 0.5, 0.0, 0.0], 1e-4)] {
            let model = || Model {
                weight: weights.clone(),
                residual: vec![residual],
                cost: vec![vec![100; 4]],
                calls: 0,
                compiles: 0,
                extra: Extra::default(),
            };
            let (mut full, mut lean) = (model(), model());
            let f = search(&full_front(request(4, &["\"ieee\""])), &mut full, text).unwrap();
            let l = search(&request(4, &["\"ieee\""]), &mut lean, text).unwrap();
            let chosen = |s: &SiteSearch| s.points[s.chosen.unwrap()].measured.assignment.clone();
            assert_eq!(chosen(&l), chosen(&f), "{}", l.why);
            assert!(lean.compiles < full.compiles, "{} vs {}", lean.compiles, full.compiles);
            // the subsets above the bound are points with their error and no figures, never on the front
            let bound = 2.0 * l.reference_error.unwrap();
            let interpreted: Vec<_> = l.points.iter().filter(|p| p.measured.figures.is_none()).collect();
            assert!(!interpreted.is_empty());
            for p in &interpreted {
                assert!(p.measured.last_error() > bound && p.roles.is_empty(), "{p:?}");
            }
            assert!(l.notes.iter().any(|n| n.contains("above the choice's bound")), "{:?}", l.notes);
            // every compiled subset is within the bound
            for p in l.points.iter().filter(|p| p.measured.figures.is_some() && p.roles.is_empty()) {
                assert!(p.measured.last_error() <= bound, "{p:?}");
            }
        }
    }
}
