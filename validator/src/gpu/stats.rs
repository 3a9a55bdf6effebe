//! The gate's timing figures, named as the harness's bench names them
//! (`median_us`, `p10_us`, `p90_us`, `achieved_gbps`, `fraction_of_peak_bw`,
//! `speedup`, `noise_floor`, `significant`): per variant over its timed calls,
//! and for the pair over the ABBA rounds.

use serde::{Deserialize, Deserializer, Serialize};

/// A figure read back from the gate's JSON line: JSON has no NaN or
/// infinity, so `serde_json` writes them as `null`, read here as NaN.
pub(crate) fn figure<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// Fewer timed calls per variant than this give no noise floor to trust: flagged.
pub const MIN_CALLS: usize = 5;

/// One variant's timed calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Timed calls.
    pub calls: usize,
    /// Median, microseconds.
    #[serde(deserialize_with = "figure")]
    pub median_us: f64,
    /// 10th percentile, microseconds.
    #[serde(deserialize_with = "figure")]
    pub p10_us: f64,
    /// 90th percentile, microseconds.
    #[serde(deserialize_with = "figure")]
    pub p90_us: f64,
    /// The manifest's floor bytes over the median time, GB/s (when a floor is known).
    pub achieved_gbps: Option<f64>,
    /// `achieved_gbps` over the device's peak.
    pub fraction_of_peak_bw: Option<f64>,
}

/// Baseline against candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// The baseline's calls.
    pub baseline: Summary,
    /// The candidate's calls.
    pub candidate: Summary,
    /// Baseline median over candidate median: above 1 is faster.
    #[serde(deserialize_with = "figure")]
    pub speedup: f64,
    /// The relative spread a speedup must leave to count: the larger of the
    /// variants' own spreads ((p90 - p10) / 2 median) and the spread of the
    /// ABBA rounds' candidate/baseline ratios.
    #[serde(deserialize_with = "figure")]
    pub noise_floor: f64,
    /// `|speedup - 1| > noise_floor`.
    pub significant: bool,
    /// Results that are not to be believed (beyond the peak, implausible,
    /// the two clocks disagreeing): never accepted.
    pub flags: Vec<String>,
    /// The same calls by the census's clock (CUPTI's kernel records), where
    /// the device has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub second_clock: Option<SecondClock>,
}

/// The timed calls by a second clock: the kernel's own start and end as the
/// device recorded them, beside the events around the launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SecondClock {
    /// The baseline's median, microseconds.
    #[serde(deserialize_with = "figure")]
    pub baseline_median_us: f64,
    /// The candidate's median, microseconds.
    #[serde(deserialize_with = "figure")]
    pub candidate_median_us: f64,
    /// Baseline median over candidate median by this clock.
    #[serde(deserialize_with = "figure")]
    pub speedup: f64,
}

/// The clocks may differ by launch overhead; their speedups may not differ by
/// more than this beyond the noise floor.
pub const CLOCKS_AGREE: f64 = 0.05;

/// Adds the second clock's figures to `timing`, and a flag when its speedup
/// disagrees with the events' by more than the noise floor plus [`CLOCKS_AGREE`]
/// (work the events saw and the kernel record did not, or the reverse).
pub fn second_clock(timing: &mut Timing, base_us: &[f64], cand_us: &[f64]) {
    let (b, c) = (quantile(base_us, 0.5), quantile(cand_us, 0.5));
    let speedup = b / c;
    let relative = (speedup / timing.speedup - 1.0).abs();
    if !relative.is_finite() || relative > timing.noise_floor + CLOCKS_AGREE {
        timing.flags.push(format!(
            "clocks-disagree: speedup {:.3}x by the events, {speedup:.3}x by the kernel records",
            timing.speedup
        ));
    }
    timing.second_clock = Some(SecondClock { baseline_median_us: b, candidate_median_us: c, speedup });
}

impl Timing {
    /// A significant speedup, unflagged.
    pub fn faster(&self) -> bool {
        self.significant && self.speedup > 1.0 && self.flags.is_empty()
    }
}

/// What the figures are judged against.
#[derive(Debug, Clone, PartialEq)]
pub struct Bounds {
    /// The manifest's floor bytes at this shape (what the kernel must move at least).
    pub floor_bytes: Option<f64>,
    /// The device's peak bandwidth, GB/s.
    pub peak_gbps: f64,
    /// A speedup beyond this is flagged as implausible for the change.
    pub implausible_speedup: f64,
}

/// The `q` quantile (0..=1) of `xs`, interpolated linearly (numpy's default).
pub fn quantile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// One variant's summary of its timed calls (microseconds).
pub fn summary(us: &[f64], bounds: &Bounds) -> Summary {
    let median_us = quantile(us, 0.5);
    let achieved_gbps = bounds.floor_bytes.map(|b| b / (median_us * 1e-6) / 1e9);
    Summary {
        calls: us.len(),
        median_us,
        p10_us: quantile(us, 0.1),
        p90_us: quantile(us, 0.9),
        achieved_gbps,
        fraction_of_peak_bw: achieved_gbps.map(|g| g / bounds.peak_gbps),
    }
}

fn spread(s: &Summary) -> f64 {
    (s.p90_us - s.p10_us) / (2.0 * s.median_us)
}

/// The pair's figures from the timed calls of each variant, round by round
/// (`base[i]` and `cand[i]` ran in the same ABBA round, on the same input set).
pub fn compare(base: &[f64], cand: &[f64], bounds: &Bounds) -> Timing {
    let (b, c) = (summary(base, bounds), summary(cand, bounds));
    let ratios: Vec<f64> = base.iter().zip(cand).map(|(b, c)| c / b).collect();
    let pair = (quantile(&ratios, 0.9) - quantile(&ratios, 0.1)) / (2.0 * quantile(&ratios, 0.5));
    let noise_floor = spread(&b).max(spread(&c)).max(pair);
    let speedup = b.median_us / c.median_us;
    let mut flags = Vec::new();
    for (name, s) in [("baseline", &b), ("candidate", &c)] {
        if let (Some(f), Some(g)) = (s.fraction_of_peak_bw, s.achieved_gbps)
            && f > 1.05
        {
            flags.push(format!(
                "{name}: {g:.0} GB/s is beyond the device's peak ({:.0} GB/s): timing or floor is wrong",
                bounds.peak_gbps
            ));
        }
    }
    if speedup > bounds.implausible_speedup {
        flags.push(format!(
            "speedup {speedup:.2}x is implausible for this change (more than {:.1}x): check the measurement",
            bounds.implausible_speedup
        ));
    }
    if b.calls.min(c.calls) < MIN_CALLS {
        flags.push(format!(
            "{} timed calls per variant are too few for a noise floor (at least {MIN_CALLS})",
            b.calls.min(c.calls)
        ));
    }
    if !speedup.is_finite() || !noise_floor.is_finite() {
        flags.push(format!("non-finite figures: speedup {speedup}, noise floor {noise_floor}"));
    }
    Timing {
        significant: (speedup - 1.0).abs() > noise_floor,
        baseline: b,
        candidate: c,
        speedup,
        noise_floor,
        flags,
        second_clock: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds() -> Bounds {
        Bounds { floor_bytes: None, peak_gbps: 4800.0, implausible_speedup: 4.0 }
    }

    #[test]
    fn quantiles_interpolate_like_numpy() {
        let xs = [4.0, 1.0, 3.0, 2.0, 5.0];
        assert_eq!(quantile(&xs, 0.5), 3.0);
        assert!((quantile(&xs, 0.1) - 1.4).abs() < 1e-12);
        assert!((quantile(&xs, 0.9) - 4.6).abs() < 1e-12);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn a_speedup_inside_the_noise_is_not_significant_and_outside_it_is() {
        let base = [10.0, 10.5, 9.5, 10.2, 9.8];
        let same = [10.1, 9.6, 10.4, 9.9, 10.0];
        let t = compare(&base, &same, &bounds());
        assert!(!t.significant && !t.faster(), "{t:?}");
        let half: Vec<f64> = base.iter().map(|b| b / 2.0).collect();
        let t = compare(&base, &half, &bounds());
        assert!((t.speedup - 2.0).abs() < 1e-9 && t.significant && t.faster(), "{t:?}");
    }

    #[test]
    fn beyond_the_peak_and_implausible_speedups_are_flagged_never_faster() {
        let b = Bounds { floor_bytes: Some(1e9), peak_gbps: 1000.0, implausible_speedup: 4.0 };
        // 1 GB in 500 us is 2000 GB/s: twice the peak
        let t = compare(&[2000.0; 5], &[500.0; 5], &b);
        assert_eq!(t.candidate.achieved_gbps, Some(2000.0));
        assert!(t.flags.iter().any(|f| f.starts_with("candidate: 2000 GB/s is beyond the device's peak")), "{t:?}");
        assert!(!t.flags.iter().any(|f| f.starts_with("baseline")), "{t:?}");
        assert!(t.significant && !t.faster());
        let t = compare(&[100.0; 5], &[10.0; 5], &bounds());
        assert!(t.flags.iter().any(|f| f.contains("implausible")) && !t.faster(), "{t:?}");
        let t = compare(&[10.0, 10.1], &[5.0, 5.1], &bounds());
        assert_eq!(t.flags, ["2 timed calls per variant are too few for a noise floor (at least 5)"]);
        assert!(!t.faster());
    }
}
