//! The site's charts as inline SVG, drawn with plotters' SVG backend (which
//! escapes its text): error against length (log scale), grouped bars
//! (instruction classes, a value histogram), the distribution of speed
//! samples, and a site search's front. Each returns `None` when there is
//! nothing to draw.

use plotters::prelude::*;

use super::markup::Markup;

type Drawn = Result<(), Box<dyn std::error::Error>>;

const BASELINE: RGBColor = RGBColor(107, 114, 128);
const CANDIDATE: RGBColor = RGBColor(217, 119, 6);
const ACCENT: RGBColor = RGBColor(37, 99, 235);
const FONT: &str = "sans-serif";

/// One named series of a chart.
pub(crate) struct Series {
    pub(crate) name: String,
    pub(crate) points: Vec<(f64, f64)>,
}

fn svg(
    width: u32,
    height: u32,
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, plotters::coord::Shift>) -> Drawn,
) -> Option<Markup> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (width, height)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        draw(&root).ok()?;
        root.present().ok()?;
    }
    Some(Markup::trusted(out))
}

/// A tick label: whole numbers from 100 up, else three decimals without
/// trailing zeros; scientific notation outside [0.001, 1e6).
fn tick(x: &f64) -> String {
    let a = x.abs();
    if a >= 1e6 || (a > 0.0 && a < 1e-3) {
        return format!("{x:.1e}");
    }
    if a >= 100.0 {
        return format!("{x:.0}");
    }
    let t = format!("{x:.3}");
    let t = t.trim_end_matches('0').trim_end_matches('.');
    if t == "-0" { "0".into() } else { t.to_string() }
}

/// The largest magnitude a chart draws: past it (and at NaN, inf) a value
/// is left out, so that padding a range or giving a log axis headroom stays
/// finite whatever the evidence holds.
const LIMIT: f64 = 1e300;

/// A value a linear axis can show.
fn drawable(x: f64) -> bool {
    x.is_finite() && x.abs() <= LIMIT
}

/// A value a log axis can show: within 150 decades of 1, so that the ratio
/// of an axis's ends stays finite (plotters counts the decades between them
/// from that ratio; an infinite one never ends its loop).
fn loggable(x: f64) -> bool {
    x.is_finite() && (1e-150..=1e150).contains(&x)
}

/// At most `n` of `xs`, evenly spread (first and last kept): a chart of a
/// few hundred points reads the same as one of a million, and stays small.
fn thin<T: Copy>(xs: &[T], n: usize) -> Vec<T> {
    if xs.len() <= n || n < 2 {
        return xs.iter().copied().take(n).collect();
    }
    (0..n).map(|i| xs[i * (xs.len() - 1) / (n - 1)]).collect()
}

/// Points per series, samples per row, categories per chart, axis ticks.
const MAX_POINTS: usize = 400;
const MAX_SAMPLES: usize = 1000;
const MAX_CATEGORIES: usize = 24;
const MAX_TICKS: usize = 12;

/// A label cut to `n` characters.
fn short(label: &str, n: usize) -> String {
    if label.chars().count() > n {
        format!("{}…", label.chars().take(n - 1).collect::<String>())
    } else {
        label.into()
    }
}

fn colour(i: usize) -> RGBColor {
    [BASELINE, CANDIDATE, ACCENT, RGBColor(22, 163, 74)][i % 4]
}

/// The range of `xs` padded by 5% (a single value gets a window around it);
/// values no linear axis can show are left out.
fn padded(xs: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (lo, hi) =
        xs.filter(|x| drawable(*x)).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| (lo.min(x), hi.max(x)));
    if !lo.is_finite() || !hi.is_finite() {
        return None;
    }
    let pad = if hi > lo { (hi - lo) * 0.05 } else { lo.abs().max(1.0) * 0.1 };
    Some((lo - pad, hi + pad))
}

/// Error against length: each series a line with points, y on a log scale
/// (and x too, lengths double). Non-positive and non-finite values are left
/// out, and a long series is thinned.
pub(crate) fn log_curve(series: &[Series], x_label: &str, y_label: &str) -> Option<Markup> {
    let clean: Vec<(&str, Vec<(f64, f64)>)> = series
        .iter()
        .map(|s| {
            let mut pts: Vec<(f64, f64)> =
                s.points.iter().copied().filter(|(x, y)| loggable(*x) && loggable(*y)).collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            (s.name.as_str(), thin(&pts, MAX_POINTS))
        })
        .filter(|(_, p): &(&str, Vec<(f64, f64)>)| !p.is_empty())
        .collect();
    if clean.is_empty() {
        return None;
    }
    let all = || clean.iter().flat_map(|(_, p)| p.iter().copied());
    let (xlo, xhi) = all().fold((f64::INFINITY, 0.0f64), |(lo, hi), (x, _)| (lo.min(x), hi.max(x)));
    let (ylo, yhi) = all().fold((f64::INFINITY, 0.0f64), |(lo, hi), (_, y)| (lo.min(y), hi.max(y)));
    let (xlo, xhi) = (xlo / 1.3, xhi * 1.3);
    // headroom above the curves for the legend
    let (ylo, yhi) = (ylo / 2.0, yhi * 12.0);
    let mut ticks: Vec<f64> = all().map(|(x, _)| x).collect();
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();
    let ticks = thin(&ticks, MAX_TICKS);
    let n_ticks = ticks.len();
    svg(640, 320, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((xlo..xhi).log_scale().with_key_points(ticks), (ylo..yhi).log_scale())?;
        chart
            .configure_mesh()
            .x_labels(n_ticks)
            .light_line_style(WHITE)
            .x_desc(x_label)
            .y_desc(y_label)
            .x_label_formatter(&|x| if *x < 1e6 { format!("{x:.0}") } else { format!("{x:.0e}") })
            .y_label_formatter(&|y| format!("{y:.0e}"))
            .label_style((FONT, 12))
            .draw()?;
        for (i, (name, pts)) in clean.iter().enumerate() {
            let c = colour(i);
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))?
                .label(*name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .border_style(BLACK.mix(0.3))
            .background_style(WHITE.mix(0.9))
            .label_font((FONT, 12))
            .draw()?;
        Ok(())
    })
}

/// Horizontal grouped bars: one group per category (top to bottom, the
/// first [`MAX_CATEGORIES`]), one bar per series in it (`values[s][c]`).
/// Negative values and values no axis can show are left out.
pub(crate) fn bars(categories: &[String], series: &[(String, Vec<f64>)], x_label: &str) -> Option<Markup> {
    let categories: Vec<String> = categories.iter().take(MAX_CATEGORIES).map(|c| short(c, 40)).collect();
    let n = categories.len();
    let series: Vec<(String, Vec<f64>)> = series
        .iter()
        .take(4)
        .map(|(name, v)| {
            let v = v.iter().take(n).map(|&x| if drawable(x) && x > 0.0 { x } else { 0.0 }).collect();
            (short(name, 40), v)
        })
        .collect();
    let max = series.iter().flat_map(|(_, v)| v.iter().copied()).fold(0.0f64, f64::max);
    if n == 0 || series.is_empty() || max <= 0.0 {
        return None;
    }
    let k = series.len() as f64;
    let height = (n as u32 * (10 + 12 * series.len() as u32)).clamp(120, 1400) + 70;
    let label_width = categories.iter().map(|c| c.chars().count()).max().unwrap_or(4).clamp(4, 40) as u32 * 7 + 16;
    svg(640, height, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(label_width)
            .build_cartesian_2d(0.0..max * 1.08, -0.5..(n as f64 - 0.5))?;
        let names = categories.clone();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n.max(2) * 2 + 1)
            .y_label_formatter(&move |y| {
                let i = y.round();
                if (y - i).abs() > 1e-6 || i < 0.0 {
                    return String::new();
                }
                // category 0 sits at the top
                names.get(n.saturating_sub(1 + i as usize)).cloned().filter(|_| (i as usize) < n).unwrap_or_default()
            })
            .x_desc(x_label)
            .x_labels(8)
            .x_label_formatter(&tick)
            .light_line_style(WHITE)
            .label_style((FONT, 12))
            .draw()?;
        let band = 0.8 / k;
        for (s, (name, values)) in series.iter().enumerate() {
            let c = colour(s);
            chart
                .draw_series(values.iter().enumerate().filter(|(_, v)| **v > 0.0).map(|(ci, &v)| {
                    let centre = (n - 1 - ci) as f64;
                    let top = centre + 0.4 - band * s as f64;
                    Rectangle::new([(0.0, top), (v, top - band * 0.9)], c.filled())
                }))?
                .label(name.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        if series.len() > 1 {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .border_style(BLACK.mix(0.3))
                .background_style(WHITE.mix(0.9))
                .label_font((FONT, 12))
                .draw()?;
        }
        Ok(())
    })
}

/// One row of a distribution chart: its samples and, where the harness
/// reported them, its 10th percentile, median and 90th percentile.
pub(crate) struct Distribution {
    pub(crate) name: String,
    pub(crate) samples: Vec<f64>,
    pub(crate) summary: Option<(f64, f64, f64)>,
}

/// Samples as dots on one row per variant (at most [`MAX_SAMPLES`] of them,
/// evenly spread over the sorted samples), with the p10-p90 range as a bar
/// and the median as a tick.
pub(crate) fn distribution(rows: &[Distribution], x_label: &str) -> Option<Markup> {
    let rows: Vec<Distribution> = rows
        .iter()
        .take(8)
        .map(|r| {
            let mut xs: Vec<f64> = r.samples.iter().copied().filter(|x| drawable(*x)).collect();
            xs.sort_by(f64::total_cmp);
            let summary = r.summary.filter(|(a, b, c)| drawable(*a) && drawable(*b) && drawable(*c));
            Distribution { name: short(&r.name, 40), samples: thin(&xs, MAX_SAMPLES), summary }
        })
        .collect();
    let values = rows
        .iter()
        .flat_map(|r| r.samples.iter().copied().chain(r.summary.into_iter().flat_map(|(a, b, c)| [a, b, c])));
    let (lo, hi) = padded(values)?;
    let n = rows.len();
    let height = 60 + 56 * n as u32;
    svg(640, height, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(90)
            .build_cartesian_2d(lo..hi, -0.5..(n as f64 - 0.5))?;
        let names: Vec<String> = rows.iter().map(|r| r.name.clone()).collect();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n.max(2) * 2 + 1)
            .y_label_formatter(&move |y| {
                let i = y.round();
                if (y - i).abs() > 1e-6 || i < 0.0 || i as usize >= n {
                    return String::new();
                }
                names.get(n - 1 - i as usize).cloned().unwrap_or_default()
            })
            .x_desc(x_label)
            .x_labels(8)
            .x_label_formatter(&tick)
            .light_line_style(WHITE)
            .label_style((FONT, 12))
            .draw()?;
        for (ri, r) in rows.iter().enumerate() {
            let y = (n - 1 - ri) as f64;
            let c = colour(ri);
            if let Some((p10, med, p90)) = r.summary {
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(p10, y - 0.12), (p90, y + 0.12)],
                    c.mix(0.25).filled(),
                )))?;
                chart.draw_series(std::iter::once(PathElement::new(
                    vec![(med, y - 0.3), (med, y + 0.3)],
                    c.stroke_width(3),
                )))?;
            }
            // samples spread over the row's height in a fixed pattern (no randomness)
            let n_s = r.samples.len().max(1) as f64;
            chart.draw_series(r.samples.iter().enumerate().map(|(i, &v)| {
                let jitter = ((i as f64 * 0.618_034) % 1.0 - 0.5) * 0.4 * (n_s.min(50.0) / 50.0).max(0.3);
                Circle::new((v, y + jitter), 3, c.filled())
            }))?;
        }
        Ok(())
    })
}

/// One point of a search's front.
pub(crate) struct FrontPoint {
    pub(crate) instructions: f64,
    pub(crate) error: f64,
    pub(crate) label: String,
    /// This page's candidate.
    pub(crate) this: bool,
}

/// Error at the longest length (log scale) against SASS instructions: the
/// front's points, the baseline and all-sites variants, this candidate ringed.
pub(crate) fn front(points: &[FrontPoint], y_label: &str) -> Option<Markup> {
    let pts: Vec<&FrontPoint> = points.iter().filter(|p| drawable(p.instructions) && loggable(p.error)).collect();
    let pts = thin(&pts, MAX_POINTS);
    if pts.is_empty() {
        return None;
    }
    let (xlo, xhi) = padded(pts.iter().map(|p| p.instructions))?;
    let (ylo, yhi) = pts.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), p| (lo.min(p.error), hi.max(p.error)));
    svg(640, 340, |root| {
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(xlo..xhi, (ylo / 2.0..yhi * 2.0).log_scale())?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .x_desc("SASS instructions")
            .y_desc(y_label)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0e}"))
            .label_style((FONT, 12))
            .draw()?;
        chart.draw_series(pts.iter().map(|p| {
            let c = if p.label.contains("baseline") { BASELINE } else { ACCENT };
            Circle::new((p.instructions, p.error), 4, c.filled())
        }))?;
        chart.draw_series(
            pts.iter().filter(|p| p.this).map(|p| Circle::new((p.instructions, p.error), 9, CANDIDATE.stroke_width(3))),
        )?;
        // labels a little right of and above their points
        chart.draw_series(pts.iter().filter(|p| !p.label.is_empty()).map(|p| {
            EmptyElement::at((p.instructions, p.error))
                + Text::new(short(&p.label, 40), (10, -16), (FONT, 12).into_font().color(&BLACK.mix(0.8)))
        }))?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curves_draw_on_a_log_scale_and_skip_what_a_log_cannot_show() {
        let s = vec![
            Series { name: "baseline".into(), points: vec![(64.0, 5e-4), (128.0, 6e-4), (256.0, 0.0)] },
            Series { name: "<candidate>".into(), points: vec![(64.0, 1e-6), (128.0, f64::NAN), (256.0, 2e-6)] },
        ];
        let svg = log_curve(&s, "T", "rel_l2").expect("drawn");
        assert!(svg.as_str().starts_with("<svg"), "{}", &svg.as_str()[..80]);
        assert!(svg.as_str().contains("&lt;candidate&gt;"), "plotters escapes legend text");
        assert!(!svg.as_str().contains("<candidate>"));
        assert!(log_curve(&[Series { name: "x".into(), points: vec![(64.0, 0.0)] }], "T", "e").is_none());
    }

    #[test]
    fn bars_label_every_category() {
        let cats: Vec<String> = (0..16).map(|i| format!("class{i}")).collect();
        let svg = bars(&cats, &[("before".into(), vec![10.0; 16]), ("after".into(), vec![12.0; 16])], "instructions")
            .expect("drawn");
        for c in &cats {
            assert!(
                svg.as_str().contains(&format!(">\n{c}\n<")) || svg.as_str().contains(&format!(">{c}<")),
                "{c} missing"
            );
        }
        assert!(bars(&cats, &[("before".into(), vec![0.0; 16])], "x").is_none(), "nothing to draw");
    }

    #[test]
    fn ticks_keep_the_digits_that_matter() {
        assert_eq!(tick(&10500.0), "10500");
        assert_eq!(tick(&2.5), "2.5");
        assert_eq!(tick(&0.05), "0.05");
        assert_eq!(tick(&0.0), "0");
        assert_eq!(tick(&0.15), "0.15");
        assert_eq!(tick(&-0.0001), "-1.0e-4");
        assert_eq!(tick(&2e-5), "2.0e-5");
    }

    #[test]
    fn distributions_and_fronts() {
        let rows = vec![
            Distribution { name: "baseline".into(), samples: vec![0.5, 0.55, 0.6], summary: Some((0.5, 0.55, 0.6)) },
            Distribution { name: "candidate".into(), samples: vec![], summary: Some((0.01, 0.02, 0.03)) },
        ];
        assert!(distribution(&rows, "gap").is_some());
        assert!(distribution(&[], "gap").is_none());
        let pts = vec![
            FrontPoint { instructions: 6960.0, error: 5e-4, label: "baseline".into(), this: false },
            FrontPoint { instructions: 10120.0, error: 8e-6, label: String::new(), this: true },
        ];
        assert!(front(&pts, "err").is_some());
    }

    /// Every chart, fed the numbers evidence can hold (JSON has no NaN, but
    /// the validator writes `"inf"`, and a hand-made record anything): no
    /// panic, no endless loop, and a chart whenever one value is drawable.
    #[test]
    fn extreme_numbers_draw_or_are_left_out() {
        const ODD: &[f64] = &[
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            -1.0,
            5e-324,
            f64::MIN_POSITIVE,
            1e-300,
            1e300,
            1e308,
            f64::MAX,
            -f64::MAX,
        ];
        let started = std::time::Instant::now();
        for &a in ODD {
            for &b in ODD {
                let pts = vec![(64.0, a), (b, 1e-3), (a, b), (128.0, 2e-3)];
                let s = [Series { name: "b".into(), points: pts.clone() }, Series { name: "c".into(), points: pts }];
                assert!(log_curve(&s, "T", "e").is_some(), "{a} {b}: the two good points draw");
                let only = [Series { name: "x".into(), points: vec![(a, b)] }];
                assert_eq!(log_curve(&only, "T", "e").is_some(), loggable(a) && loggable(b), "{a} {b}");
                let cats = vec!["x".to_string(), "y".to_string()];
                let drawn = bars(&cats, &[("s".into(), vec![a, b])], "n").is_some();
                assert_eq!(drawn, [a, b].iter().any(|v| drawable(*v) && *v > 0.0), "bars {a} {b}");
                let rows = [
                    Distribution { name: "b".into(), samples: vec![a, b, 1.0], summary: Some((a, 1.0, b)) },
                    Distribution { name: "c".into(), samples: vec![b], summary: Some((0.5, a, 2.0)) },
                ];
                assert!(distribution(&rows, "us").is_some(), "{a} {b}");
                let pts = [
                    FrontPoint { instructions: a, error: b, label: "baseline".into(), this: false },
                    FrontPoint { instructions: 7000.0, error: 1e-4, label: String::new(), this: true },
                ];
                assert!(front(&pts, "e").is_some(), "{a} {b}");
            }
        }
        assert!(started.elapsed().as_secs() < 60, "{:?}", started.elapsed());
    }

    #[test]
    fn long_inputs_are_thinned() {
        let many: Vec<f64> = (0..1_000_000).map(f64::from).collect();
        let rows = [Distribution { name: "b".into(), samples: many.clone(), summary: None }];
        let svg = distribution(&rows, "us").expect("drawn");
        assert!(
            svg.as_str().matches("<circle").count() <= MAX_SAMPLES,
            "{} circles",
            svg.as_str().matches("<circle").count()
        );
        let pts: Vec<(f64, f64)> = many.iter().map(|&x| (x + 1.0, 1e-3)).collect();
        let svg = log_curve(&[Series { name: "b".into(), points: pts }], "T", "e").expect("drawn");
        assert!(svg.as_str().len() < 200_000, "{} bytes", svg.as_str().len());
        let cats: Vec<String> = (0..5000).map(|i| format!("class{i}")).collect();
        let svg = bars(&cats, &[("n".into(), vec![1.0; 5000])], "n").expect("drawn");
        assert!(!svg.as_str().contains(&format!(">{}<", cats[MAX_CATEGORIES])));
        assert_eq!(thin(&[1, 2, 3, 4, 5], 3), [1, 3, 5]);
        assert_eq!(thin(&[1, 2], 5), [1, 2]);
        assert!(thin(&[1, 2], 0).is_empty());
    }
}
