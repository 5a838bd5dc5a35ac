//! Charts as hand-written SVG: TTFT and ITL distributions (one empirical
//! CDF per level, drawn as steps) and output throughput by level; `html.rs`
//! puts them in its page.

use super::report::Report;
use super::stats::percentile;
use std::fmt::Write;

const WIDTH: f64 = 760.0;
const PANEL: f64 = 300.0;
const MARGIN: (f64, f64, f64, f64) = (60.0, 20.0, 40.0, 50.0); // left, right, top, bottom
const COLOURS: [&str; 8] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
/// Most steps drawn per CDF; a larger sample is drawn through this many of
/// its order statistics (still as steps: nothing is interpolated).
const MAX_STEPS: usize = 1000;
/// Room right of a distribution's plot area for its legend.
const LEGEND: f64 = 170.0;

pub fn esc(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A round tick step giving about five ticks up to `max`.
fn tick_step(max: f64) -> f64 {
    let raw = (max / 5.0).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag)
}

/// One panel: axes with ticks, a title, and a plot area mapping data to pixels.
struct Panel {
    top: f64,
    x_max: f64,
    y_max: f64,
    /// Right of the plot area (a legend may stand beyond it).
    right: f64,
}

impl Panel {
    fn x(&self, v: f64) -> f64 {
        MARGIN.0 + v / self.x_max * (self.right - MARGIN.0)
    }

    fn y(&self, v: f64) -> f64 {
        self.top + PANEL - MARGIN.3 - v / self.y_max * (PANEL - MARGIN.2 - MARGIN.3)
    }

    /// `numbered_x`: tick numbers on the x axis (not for categories).
    fn axes(&self, out: &mut String, title: &str, x_label: &str, y_label: &str, y_ticks: f64, numbered_x: bool) {
        let (x0, y0) = (self.x(0.0), self.y(0.0));
        let _ = write!(
            out,
            r#"<text x="{}" y="{}" font-weight="bold">{}</text><line x1="{x0}" y1="{y0}" x2="{}" y2="{y0}" stroke="black"/><line x1="{x0}" y1="{y0}" x2="{x0}" y2="{}" stroke="black"/>"#,
            MARGIN.0,
            self.top + 24.0,
            esc(title),
            self.x(self.x_max),
            self.y(self.y_max)
        );
        // Categories are labelled by their caller: no numbers on that axis.
        let step = tick_step(self.x_max);
        for i in (0..=((self.x_max / step) as usize)).filter(|_| numbered_x) {
            let v = i as f64 * step;
            let _ =
                write!(out, r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#, self.x(v), y0 + 16.0, short(v));
        }
        for i in 0..=((self.y_max / y_ticks) as usize) {
            let (v, y) = (i as f64 * y_ticks, self.y(i as f64 * y_ticks));
            let _ = write!(
                out,
                r##"<text x="{}" y="{}" text-anchor="end">{}</text><line x1="{x0}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/>"##,
                x0 - 6.0,
                y + 4.0,
                short(v),
                self.x(self.x_max)
            );
        }
        let _ = write!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text><text x="14" y="{}" transform="rotate(-90 14 {3})" text-anchor="middle">{}</text>"#,
            (self.x(0.0) + self.x(self.x_max)) / 2.0,
            y0 + 36.0,
            esc(x_label),
            self.top + PANEL / 2.0,
            esc(y_label)
        );
    }
}

fn short(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}").trim_end_matches('0').to_owned()
    }
}

/// The step path of the empirical CDF of sorted `v`: at each sample the
/// fraction ≤ x rises (vertical), between samples it holds (horizontal).
/// Values past `x_max` are drawn at the edge.
fn cdf_steps(v: &[f64], x_max: f64) -> Vec<(f64, f64)> {
    let n = v.len();
    let step = n.div_ceil(MAX_STEPS).max(1);
    let mut points = vec![(v[0].min(x_max), 0.0)];
    // Order statistics step-1, 2·step-1, …, n-1: each rise is exact there.
    let mut i = step - 1;
    loop {
        let i_at = i.min(n - 1);
        let (x, reached) = (v[i_at].min(x_max), (i_at + 1) as f64 / n as f64);
        let (_, below) = points[points.len() - 1];
        points.push((x, below));
        points.push((x, reached));
        if i_at == n - 1 {
            break;
        }
        i += step;
    }
    points.push((x_max, 1.0));
    points
}

/// Empirical CDFs (x = value, y = fraction of samples ≤ x), one per series,
/// the legend beside the plot area.
fn distribution(out: &mut String, top: f64, title: &str, series: &[(String, Vec<f64>)]) {
    // The axis ends a little past the largest p99: a few stalls would otherwise squash every curve.
    let p99 = |v: &Vec<f64>| {
        let mut v = v.clone();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            0.0
        } else {
            percentile(&v, 99.0)
        }
    };
    let x_max = series.iter().map(|(_, v)| p99(v)).fold(0.0, f64::max).max(1e-3) * 1.25;
    let panel = Panel { top, x_max, y_max: 1.0, right: WIDTH - LEGEND };
    panel.axes(out, title, "milliseconds", "fraction ≤ x", 0.25, true);
    for (i, (label, values)) in series.iter().enumerate() {
        let mut v = values.clone();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            continue;
        }
        let points: Vec<String> =
            cdf_steps(&v, x_max).into_iter().map(|(x, q)| format!("{:.1},{:.1}", panel.x(x), panel.y(q))).collect();
        let colour = COLOURS[i % COLOURS.len()];
        let (lx, ly) = (WIDTH - LEGEND + 16.0, top + MARGIN.2 + 12.0 + 16.0 * i as f64);
        let _ = write!(
            out,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/><line x1="{lx}" y1="{}" x2="{}" y2="{1}" stroke="{colour}" stroke-width="2"/><text x="{}" y="{ly}" fill="{colour}">{}</text>"#,
            points.join(" "),
            ly - 4.0,
            lx + 14.0,
            lx + 20.0,
            esc(label)
        );
    }
}

fn throughput(out: &mut String, top: f64, r: &Report) {
    let n = r.levels.len();
    let y_max = r.levels.iter().map(|l| l.output_throughput).fold(0.0, f64::max).max(1e-3) * 1.1;
    let panel = Panel { top, x_max: (n + 1) as f64, y_max, right: WIDTH - MARGIN.1 };
    panel.axes(out, "Output throughput by level", "", "output tokens / s", tick_step(y_max), false);
    let points: Vec<(f64, f64)> =
        r.levels.iter().enumerate().map(|(i, l)| (panel.x((i + 1) as f64), panel.y(l.output_throughput))).collect();
    let line: Vec<String> = points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    let _ =
        write!(out, r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#, COLOURS[0], line.join(" "));
    for ((x, y), l) in points.iter().zip(&r.levels) {
        let _ = write!(
            out,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="{}"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{:.1}</text><text x="{x:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"#,
            COLOURS[0],
            y - 8.0,
            l.output_throughput,
            panel.y(0.0) + 30.0,
            esc(&l.label)
        );
    }
}

pub fn svg(r: &Report) -> String {
    let series = |f: fn(&super::report::RequestRow) -> Vec<f64>| -> Vec<(String, Vec<f64>)> {
        r.levels
            .iter()
            .enumerate()
            .map(|(i, l)| (l.label.clone(), r.requests.iter().filter(|q| q.level == i && q.ok).flat_map(f).collect()))
            .collect()
    };
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>"#,
        3.0 * PANEL
    );
    distribution(
        &mut out,
        0.0,
        "TTFT distribution (per request; axis to 1.25 × p99)",
        &series(|q| q.ttft_ms.into_iter().collect()),
    );
    distribution(
        &mut out,
        PANEL,
        "Inter-token latency distribution (every gap, pooled; axis to 1.25 × p99)",
        &series(|q| q.itl_ms.clone()),
    );
    throughput(&mut out, 2.0 * PANEL, r);
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cdf_is_steps() {
        let points = cdf_steps(&[1.0, 2.0, 2.0, 4.0], 5.0);
        assert_eq!(
            points,
            [
                (1.0, 0.0),
                (1.0, 0.0),
                (1.0, 0.25),
                (2.0, 0.25),
                (2.0, 0.5),
                (2.0, 0.5),
                (2.0, 0.75),
                (4.0, 0.75),
                (4.0, 1.0),
                (5.0, 1.0)
            ]
        );
        // Every segment is horizontal or vertical: no line between two samples.
        assert!(points.windows(2).all(|w| w[0].0 == w[1].0 || w[0].1 == w[1].1));
        // A large sample is drawn through at most MAX_STEPS rises, ending at 1.
        let many: Vec<f64> = (0..10_000).map(f64::from).collect();
        let points = cdf_steps(&many, 20_000.0);
        assert!(points.len() <= 2 * MAX_STEPS + 2, "{}", points.len());
        assert!(points.windows(2).all(|w| w[0].0 == w[1].0 || w[0].1 == w[1].1));
        assert_eq!(points[points.len() - 2], (9999.0, 1.0));
        // Past the axis: drawn at the edge.
        assert_eq!(cdf_steps(&[1.0, 9.0], 5.0)[4], (5.0, 1.0));
    }

    #[test]
    fn tick_steps_are_round() {
        assert_eq!(tick_step(100.0), 20.0);
        assert_eq!(tick_step(7.0), 2.0);
        assert_eq!(tick_step(0.9), 0.2);
        assert_eq!(tick_step(3000.0), 1000.0);
    }
}
