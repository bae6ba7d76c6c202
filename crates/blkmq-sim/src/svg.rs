//! Pictures of a run as self-contained SVG documents, for a person to look at rather than
//! read: a [`BarChart`] (a figure per set-up, against reference lines such as a seed's
//! BEFORE and AFTER), [`iozone_grids_svg`] (iozone grids side by side as tables, each
//! cell shaded by its ratio to a reference grid) and [`latency_histograms_svg`] (a queue's
//! latency histograms, one panel per set-up).
//!
//! Every figure drawn is also written as text in its picture (`<text class="value">`),
//! with the precision the caller gives it, so a picture carries the numbers of the report
//! it comes from. Titles and axis labels are text too; the root element carries a
//! `<title>` as well.

use std::fmt::Write as _;

use blkmq_core::{Latency, OpGroup};

use crate::{IOZONE_TESTS, IozoneGrid};

/// Colours of the series, in order (repeating past the last).
const COLOURS: [&str; 6] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
];

/// Escapes text for SVG (element content and attribute values).
pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The root element's opening, a white background, the `<title>` and the visible title.
fn open(width: f64, height: f64, title: &str) -> String {
    let title = escape(title);
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <title>{title}</title>\n\
         <rect width=\"{width}\" height=\"{height}\" fill=\"white\"/>\n\
         <text class=\"title\" x=\"{:.1}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{title}</text>\n",
        width / 2.0
    )
}

/// One bar of a [`BarChart`]: its series (colour and legend entry), its value and the
/// text written above it.
///
/// ```
/// use blkmq_sim::Bar;
/// let bar = Bar::new(0, 21.466, "21.466");
/// assert_eq!((bar.series, bar.text.as_str()), (0, "21.466"));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    /// The index of its series in [`BarChart::series`].
    pub series: usize,
    /// Its height in the value axis' unit.
    pub value: f64,
    /// The figure as written above the bar.
    pub text: String,
}

impl Bar {
    /// A bar of `series` at `value`, labelled `text`.
    ///
    /// ```
    /// use blkmq_sim::Bar;
    /// assert_eq!(Bar::new(1, 3.5, "3.50 s").value, 3.5);
    /// ```
    pub fn new(series: usize, value: f64, text: &str) -> Bar {
        Bar {
            series,
            value,
            text: text.into(),
        }
    }
}

/// A bar chart: groups of bars along the category axis, each bar labelled with its figure,
/// the value axis linear from zero or logarithmic, and dashed reference lines across.
///
/// ```
/// use blkmq_sim::{Bar, BarChart};
/// let svg = BarChart::new("dd, 1 GiB", "set-up", "MB/s")
///     .series(&["seed", "simulated"])
///     .group("BEFORE", vec![Bar::new(0, 21.431, "21.431")])
///     .group("none", vec![Bar::new(1, 21.466, "21.466")])
///     .reference("seed BEFORE", 21.431)
///     .to_svg();
/// assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
/// assert!(svg.contains("<text class=\"value\" x=\"") && svg.contains(">21.466</text>"));
/// assert_eq!(svg.matches("<rect class=\"bar\"").count(), 2);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BarChart {
    /// The title above the chart.
    pub title: String,
    /// The category axis' label (under the group labels).
    pub category_axis: String,
    /// The value axis' label, with its unit.
    pub value_axis: String,
    /// Whether the value axis is logarithmic (powers of ten); values must then be
    /// positive (others are drawn at the axis' foot).
    pub log: bool,
    /// The series' names, for the legend; a bar's series picks its colour.
    pub series: Vec<String>,
    /// The groups, in order: a label and its bars.
    pub groups: Vec<(String, Vec<Bar>)>,
    /// Dashed lines across the chart: a label and a value.
    pub references: Vec<(String, f64)>,
}

/// A round step for about `parts` steps up to `max`: 1, 2 or 5 times a power of ten.
fn nice_step(max: f64, parts: f64) -> f64 {
    let raw = (max / parts).max(f64::MIN_POSITIVE);
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * power)
}

/// A tick's label: `value` without a trailing `.0`, to the step's decimals.
fn tick_text(value: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    format!("{value:.decimals$}")
}

impl BarChart {
    /// An empty chart with its title and axis labels.
    ///
    /// ```
    /// use blkmq_sim::BarChart;
    /// let chart = BarChart::new("find", "set-up", "s");
    /// assert!(chart.groups.is_empty() && !chart.log);
    /// ```
    pub fn new(title: &str, category_axis: &str, value_axis: &str) -> BarChart {
        BarChart {
            title: title.into(),
            category_axis: category_axis.into(),
            value_axis: value_axis.into(),
            ..BarChart::default()
        }
    }

    /// The same chart with a logarithmic value axis.
    ///
    /// ```
    /// use blkmq_sim::BarChart;
    /// assert!(BarChart::new("start-up", "scheduler", "ms").log_scale().log);
    /// ```
    pub fn log_scale(mut self) -> BarChart {
        self.log = true;
        self
    }

    /// The same chart with these series names (the legend).
    ///
    /// ```
    /// use blkmq_sim::BarChart;
    /// let chart = BarChart::new("t", "x", "y").series(&["idle", "loaded"]);
    /// assert_eq!(chart.series, ["idle", "loaded"]);
    /// ```
    pub fn series(mut self, names: &[&str]) -> BarChart {
        self.series = names.iter().map(|n| (*n).into()).collect();
        self
    }

    /// The same chart with one more group of bars.
    ///
    /// ```
    /// use blkmq_sim::{Bar, BarChart};
    /// let chart = BarChart::new("t", "x", "y").group("bfq", vec![Bar::new(0, 1.0, "1")]);
    /// assert_eq!(chart.groups[0].0, "bfq");
    /// ```
    pub fn group(mut self, label: &str, bars: Vec<Bar>) -> BarChart {
        self.groups.push((label.into(), bars));
        self
    }

    /// The same chart with one more dashed line across it at `value`, labelled.
    ///
    /// ```
    /// use blkmq_sim::BarChart;
    /// let chart = BarChart::new("t", "x", "y").reference("seed AFTER", 16.9);
    /// assert_eq!(chart.references, [("seed AFTER".to_string(), 16.9)]);
    /// ```
    pub fn reference(mut self, label: &str, value: f64) -> BarChart {
        self.references.push((label.into(), value));
        self
    }

    /// The chart as a self-contained SVG document. Each bar's text is written above it as
    /// `<text class="value">`, in the groups' order; group labels are `class="group"`,
    /// axis ticks `class="tick"`, reference labels `class="reference"`.
    ///
    /// ```
    /// use blkmq_sim::{Bar, BarChart};
    /// let svg = BarChart::new("start-up", "scheduler", "ms")
    ///     .log_scale()
    ///     .series(&["idle card", "under writes"])
    ///     .group("bfq", vec![Bar::new(0, 82.0, "82.0"), Bar::new(1, 270.5, "270.5")])
    ///     .to_svg();
    /// assert_eq!(svg.matches("class=\"value\"").count(), 2);
    /// assert!(svg.contains(">1000</text>") && svg.contains(">10</text>"));
    /// ```
    pub fn to_svg(&self) -> String {
        const BAR: f64 = 52.0;
        const GAP: f64 = 6.0;
        const GROUP_GAP: f64 = 34.0;
        const LEFT: f64 = 80.0;
        const TOP: f64 = 64.0;
        // Room on the right for the reference lines' labels.
        let right = self
            .references
            .iter()
            .map(|(label, _)| 12.0 + 7.0 * label.chars().count() as f64)
            .fold(30.0, f64::max);
        const BOTTOM: f64 = 64.0;
        const PLOT_H: f64 = 300.0;
        let bars: usize = self.groups.iter().map(|(_, b)| b.len()).sum();
        let bars_w = bars as f64 * (BAR + GAP)
            + self.groups.len().saturating_sub(1) as f64 * GROUP_GAP
            + GROUP_GAP;
        let plot_w = bars_w
            .max(300.0)
            // Room for the title, at about 8 units a character of 15.
            .max(self.title.chars().count() as f64 * 8.0 + 40.0 - LEFT - right);
        let width = LEFT + plot_w + right;
        let height = TOP + PLOT_H + BOTTOM;
        let values = self
            .groups
            .iter()
            .flat_map(|(_, b)| b.iter().map(|bar| bar.value))
            .chain(self.references.iter().map(|(_, v)| *v));
        let foot = TOP + PLOT_H;
        let mut svg = open(width, height, &self.title);

        // The value axis: ticks, grid lines, a scale from value to height.
        let scale: Box<dyn Fn(f64) -> f64> = if self.log {
            let positive: Vec<f64> = values.filter(|v| *v > 0.0).collect();
            let lo = positive.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = positive.iter().copied().fold(0.0, f64::max);
            let (lo, hi) = if positive.is_empty() {
                (0, 1)
            } else {
                let lo = lo.log10().floor() as i32;
                (lo, (hi.log10().ceil() as i32).max(lo + 1))
            };
            for decade in lo..=hi {
                let value = 10f64.powi(decade);
                let step = if decade < 0 { value } else { 1.0 };
                let y = foot - f64::from(decade - lo) / f64::from(hi - lo) * PLOT_H;
                tick(&mut svg, LEFT, plot_w, y, &tick_text(value, step));
            }
            let (lo, hi) = (f64::from(lo), f64::from(hi));
            Box::new(move |v: f64| {
                let log = if v > 0.0 { v.log10().max(lo) } else { lo };
                (log - lo) / (hi - lo) * PLOT_H
            })
        } else {
            let max = values.fold(0.0, f64::max);
            let step = nice_step(if max > 0.0 { max } else { 1.0 }, 5.0);
            let top = (max / step).ceil().max(1.0) * step;
            let steps = (top / step).round() as u32;
            for i in 0..=steps {
                let value = step * f64::from(i);
                let y = foot - value / top * PLOT_H;
                tick(&mut svg, LEFT, plot_w, y, &tick_text(value, step));
            }
            Box::new(move |v: f64| v.max(0.0) / top * PLOT_H)
        };
        let _ = write!(
            svg,
            "<line x1=\"{LEFT}\" y1=\"{foot}\" x2=\"{:.1}\" y2=\"{foot}\" stroke=\"black\"/>\n\
             <line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{foot}\" stroke=\"black\"/>\n\
             <text class=\"axis\" x=\"18\" y=\"{:.1}\" text-anchor=\"middle\" \
             transform=\"rotate(-90 18 {:.1})\">{}</text>\n\
             <text class=\"axis\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            LEFT + plot_w,
            TOP + PLOT_H / 2.0,
            TOP + PLOT_H / 2.0,
            escape(&self.value_axis),
            LEFT + plot_w / 2.0,
            height - 14.0,
            escape(&self.category_axis)
        );

        // The legend, in a row under the title.
        let mut x = LEFT;
        for (s, name) in self.series.iter().enumerate() {
            let _ = writeln!(
                svg,
                "<rect x=\"{x:.1}\" y=\"36\" width=\"12\" height=\"12\" fill=\"{}\"/>\
                 <text class=\"legend\" x=\"{:.1}\" y=\"46\">{}</text>",
                COLOURS[s % COLOURS.len()],
                x + 16.0,
                escape(name)
            );
            x += 16.0 + 7.0 * name.chars().count() as f64 + 18.0;
        }

        // The bars, their figures above them, the group labels under them.
        // Centred where the plot is wider than its bars.
        let mut x = LEFT + GROUP_GAP / 2.0 + (plot_w - bars_w) / 2.0;
        for (label, group) in &self.groups {
            let start = x;
            for bar in group {
                let h = scale(bar.value);
                let _ = writeln!(
                    svg,
                    "<rect class=\"bar\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{BAR}\" height=\"{h:.1}\" \
                     fill=\"{}\"/>\n<text class=\"value\" x=\"{:.1}\" y=\"{:.1}\" \
                     text-anchor=\"middle\" font-size=\"11\">{}</text>",
                    foot - h,
                    COLOURS[bar.series % COLOURS.len()],
                    x + BAR / 2.0,
                    foot - h - 4.0,
                    escape(&bar.text)
                );
                x += BAR + GAP;
            }
            let _ = writeln!(
                svg,
                "<text class=\"group\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                (start + x - GAP) / 2.0,
                foot + 18.0,
                escape(label)
            );
            x += GROUP_GAP;
        }

        for (label, value) in &self.references {
            let y = foot - scale(*value);
            let _ = writeln!(
                svg,
                "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#555\" \
                 stroke-dasharray=\"6 4\"/>\n<text class=\"reference\" x=\"{:.1}\" y=\"{:.1}\" \
                 fill=\"#555\">{}</text>",
                LEFT + plot_w,
                LEFT + plot_w + 6.0,
                y + 4.0,
                escape(label)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }
}

/// A grid line across the plot at `y` and its tick label.
fn tick(svg: &mut String, left: f64, plot_w: f64, y: f64, text: &str) {
    let _ = writeln!(
        svg,
        "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\n\
         <text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{text}</text>",
        left + plot_w,
        left - 6.0,
        y + 4.0
    );
}

/// The ratio to the reference at which a cell's shade is full.
const FULL_SHADE: f64 = 1.25;

/// The shade of a cell at `ratio` to its reference: white at 1, green above, red below,
/// full at [`FULL_SHADE`] either way.
fn shade(ratio: f64) -> String {
    let strength = if ratio > 0.0 {
        (ratio.ln() / FULL_SHADE.ln()).clamp(-1.0, 1.0)
    } else {
        -1.0
    };
    let fade = |s: f64| (255.0 - 155.0 * s.abs()).round() as u8;
    let (r, g, b) = if strength >= 0.0 {
        (fade(strength), 255, fade(strength))
    } else {
        (255, fade(strength), fade(strength))
    };
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// iozone grids side by side as tables (four to a row), each under its title: a row per record size, a
/// column per test, each cell its kB/s as text (`<text class="value">`, grid by grid, row
/// by row) and shaded by its ratio to the same cell of `reference`, a title and a grid
/// (green faster, red slower, white equal or absent there).
///
/// ```
/// use blkmq_sim::{IozoneGrid, iozone_grids_svg};
/// let seed = IozoneGrid { file_kb: 20480, rows: vec![(4, [10, 10, 10, 10, 10, 10])] };
/// let sim = IozoneGrid { file_kb: 20480, rows: vec![(4, [20, 10, 5, 10, 10, 10])] };
/// let svg = iozone_grids_svg("iozone -I", ("BEFORE", &seed), &[("BEFORE", &seed), ("none", &sim)]);
/// assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
/// assert_eq!(svg.matches("class=\"value\"").count(), 12);
/// assert!(svg.contains(">none</text>") && svg.contains(">20</text>"));
/// ```
pub fn iozone_grids_svg(
    title: &str,
    reference: (&str, &IozoneGrid),
    grids: &[(&str, &IozoneGrid)],
) -> String {
    const CELL_W: f64 = 58.0;
    const RECLEN_W: f64 = 52.0;
    const CELL_H: f64 = 20.0;
    const PANEL_GAP: f64 = 24.0;
    const PER_ROW: usize = 4;
    const LEFT: f64 = 40.0;
    const TOP: f64 = 56.0;
    // A panel: its title, two lines of headers, its rows.
    const HEAD_H: f64 = 52.0;
    let (reference_name, reference) = reference;
    let panel_w = RECLEN_W + IOZONE_TESTS.len() as f64 * CELL_W;
    let rows = grids.iter().map(|(_, g)| g.rows.len()).max().unwrap_or(0);
    let panel_h = HEAD_H + rows as f64 * CELL_H + PANEL_GAP;
    let across = grids.len().clamp(1, PER_ROW);
    let down = grids.len().div_ceil(PER_ROW).max(1);
    let width = LEFT + across as f64 * (panel_w + PANEL_GAP);
    let height = TOP + down as f64 * panel_h + 30.0;
    let mut svg = open(width, height, title);
    let _ = writeln!(
        svg,
        "<text class=\"legend\" x=\"{:.1}\" y=\"42\" text-anchor=\"middle\">kB/s per record \
         size and test; green: faster than {}, red: slower (full at {FULL_SHADE}x or more)</text>\n\
         <text class=\"axis\" x=\"18\" y=\"{:.1}\" text-anchor=\"middle\" \
         transform=\"rotate(-90 18 {:.1})\">record size (kB)</text>\n\
         <text class=\"axis\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">test (kB/s)</text>",
        width / 2.0,
        escape(reference_name),
        TOP + down as f64 * panel_h / 2.0,
        TOP + down as f64 * panel_h / 2.0,
        width / 2.0,
        height - 12.0
    );
    for (p, (name, grid)) in grids.iter().enumerate() {
        let left = LEFT + (p % PER_ROW) as f64 * (panel_w + PANEL_GAP);
        let top = TOP + (p / PER_ROW) as f64 * panel_h;
        let _ = writeln!(
            svg,
            "<text class=\"panel\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" \
             font-size=\"14\">{}</text>",
            left + panel_w / 2.0,
            top + 16.0,
            escape(name)
        );
        let headers = std::iter::once("reclen").chain(IOZONE_TESTS.iter().map(|t| t.name()));
        for (c, header) in headers.enumerate() {
            let x = if c == 0 {
                left + RECLEN_W / 2.0
            } else {
                left + RECLEN_W + (c as f64 - 0.5) * CELL_W
            };
            // "random read" on two lines, as iozone prints it.
            let (upper, lower) = header.split_once(' ').unwrap_or(("", header));
            for (line, text) in [(0.0, upper), (1.0, lower)] {
                if !text.is_empty() {
                    let _ = writeln!(
                        svg,
                        "<text class=\"test\" x=\"{x:.1}\" y=\"{:.1}\" \
                         text-anchor=\"middle\" font-size=\"11\">{text}</text>",
                        top + HEAD_H - 20.0 + line * 13.0
                    );
                }
            }
        }
        for (r, (reclen, rates)) in grid.rows.iter().enumerate() {
            let y = top + HEAD_H + r as f64 * CELL_H;
            let _ = writeln!(
                svg,
                "<text class=\"reclen\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{reclen}</text>",
                left + RECLEN_W - 8.0,
                y + 14.0
            );
            for (t, (test, rate)) in IOZONE_TESTS.iter().zip(rates).enumerate() {
                let ratio = reference
                    .get(*reclen, *test)
                    .filter(|r| *r > 0)
                    .map_or(1.0, |r| *rate as f64 / r as f64);
                let x = left + RECLEN_W + t as f64 * CELL_W;
                let _ = writeln!(
                    svg,
                    "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{CELL_W}\" height=\"{CELL_H}\" \
                     fill=\"{}\" stroke=\"#ccc\"/>\n<text class=\"value\" x=\"{:.1}\" \
                     y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\">{rate}</text>",
                    shade(ratio),
                    x + CELL_W / 2.0,
                    y + 14.0
                );
            }
        }
    }
    svg.push_str("</svg>\n");
    svg
}

/// The name of an operation group's series in [`latency_histograms_svg`].
fn group_name(group: OpGroup) -> &'static str {
    match group {
        OpGroup::Read => "reads",
        OpGroup::Write => "writes",
        OpGroup::Discard => "discards",
        OpGroup::Flush => "flushes",
    }
}

/// A time in nanoseconds, short: `512 ns`, `4.1 us`, `131 us`, `16.8 ms`, `1.07 s`.
fn short_time(ns: u64) -> String {
    let ns = ns as f64;
    let (value, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "us")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    if value < 10.0 && unit != "ns" {
        format!("{value:.1} {unit}")
    } else if unit == "s" && value < 100.0 {
        format!("{value:.2} {unit}")
    } else {
        format!("{value:.0} {unit}")
    }
}

/// A queue's latency histograms ([`Latency`], from
/// [`RequestQueue::latency`](blkmq_core::RequestQueue::latency)), one panel per set-up, one
/// under another: a bar per log2 bucket and operation group (reads and writes always,
/// discards and flushes where any panel has some), every panel over the same buckets, from
/// the lowest to the highest any panel counted. Each bar's height is its share of its
/// panel's highest bar; its count is written above it (`<text class="value">`, only for
/// bars above zero, panel by panel, bucket by bucket, groups in [`OpGroup::ALL`]'s order),
/// with its group in the `data-op` attribute (`reads`, `writes`, ...). Under each panel's
/// name (`class="panel"`) a line (`class="count"`) gives each group's completions and the
/// buckets that hold its median and 99th percentile; each bucket's lower bound is written
/// under it (`class="bucket"`).
///
/// ```
/// use blkmq_core::{Latency, OpGroup};
/// use blkmq_sim::latency_histograms_svg;
/// let mut none = Latency::default();
/// none.buckets[OpGroup::Read as usize][17] = 40; // reads of 131 to 262 us
/// none.buckets[OpGroup::Write as usize][20] = 2; // writes of about 1 ms
/// let svg = latency_histograms_svg("iozone", &[("none", &none)]);
/// assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
/// assert_eq!(svg.matches("class=\"value\"").count(), 2);
/// assert!(svg.contains("data-op=\"reads\"") && svg.contains(">40</text>"));
/// assert!(svg.contains(">131 us</text>") && svg.contains(">none</text>"));
/// ```
pub fn latency_histograms_svg(title: &str, panels: &[(&str, &Latency)]) -> String {
    const BAR: f64 = 30.0;
    const BUCKET_GAP: f64 = 14.0;
    const LEFT: f64 = 50.0;
    const RIGHT: f64 = 30.0;
    const TOP: f64 = 60.0;
    // A panel: its name and count line, its bars, the bucket labels under them.
    const HEAD_H: f64 = 44.0;
    const PLOT_H: f64 = 150.0;
    const FOOT_H: f64 = 40.0;
    let groups: Vec<OpGroup> = OpGroup::ALL
        .into_iter()
        .filter(|g| {
            matches!(g, OpGroup::Read | OpGroup::Write)
                || panels.iter().any(|(_, l)| l.count(*g) > 0)
        })
        .collect();
    let counted = |i: usize| {
        panels
            .iter()
            .any(|(_, l)| l.buckets.iter().any(|group| group[i] > 0))
    };
    let buckets: Vec<usize> = match (
        (0..blkmq_core::LATENCY_BUCKETS).find(|i| counted(*i)),
        (0..blkmq_core::LATENCY_BUCKETS).rev().find(|i| counted(*i)),
    ) {
        (Some(lo), Some(hi)) => (lo..=hi).collect(),
        _ => Vec::new(),
    };
    let slot_w = groups.len() as f64 * BAR + BUCKET_GAP;
    let plot_w = (buckets.len() as f64 * slot_w)
        .max(400.0)
        .max(title.chars().count() as f64 * 8.0 + 40.0 - LEFT - RIGHT);
    let panel_h = HEAD_H + PLOT_H + FOOT_H;
    let width = LEFT + plot_w + RIGHT;
    let height = TOP + panels.len().max(1) as f64 * panel_h + 30.0;
    let mut svg = open(width, height, title);
    let _ = writeln!(
        svg,
        "<text class=\"axis\" x=\"18\" y=\"{:.1}\" text-anchor=\"middle\" \
         transform=\"rotate(-90 18 {:.1})\">completions (bar: share of the panel's highest)</text>\n\
         <text class=\"axis\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">time from \
         allocation to completion (log2 buckets, each from the time under it)</text>",
        TOP + panels.len() as f64 * panel_h / 2.0,
        TOP + panels.len() as f64 * panel_h / 2.0,
        LEFT + plot_w / 2.0,
        height - 12.0
    );
    let mut x = LEFT;
    for (s, group) in groups.iter().enumerate() {
        let name = group_name(*group);
        let _ = writeln!(
            svg,
            "<rect x=\"{x:.1}\" y=\"32\" width=\"12\" height=\"12\" fill=\"{}\"/>\
             <text class=\"legend\" x=\"{:.1}\" y=\"42\">{name}</text>",
            COLOURS[s % COLOURS.len()],
            x + 16.0
        );
        x += 16.0 + 7.0 * name.len() as f64 + 18.0;
    }
    for (p, (name, latency)) in panels.iter().enumerate() {
        let top = TOP + p as f64 * panel_h;
        let foot = top + HEAD_H + PLOT_H;
        let summary: Vec<String> = groups
            .iter()
            .map(|g| {
                let n = latency.count(*g);
                let mut text = format!("{n} {}", group_name(*g));
                if let (Some(p50), Some(p99)) = (
                    latency.percentile_ns(*g, 50.0),
                    latency.percentile_ns(*g, 99.0),
                ) {
                    let _ = write!(
                        text,
                        " (p50 under {}, p99 under {})",
                        short_time(p50),
                        short_time(p99)
                    );
                }
                text
            })
            .collect();
        let _ = writeln!(
            svg,
            "<text class=\"panel\" x=\"{LEFT}\" y=\"{:.1}\" font-size=\"14\">{}</text>\n\
             <text class=\"count\" x=\"{LEFT}\" y=\"{:.1}\">{}</text>\n\
             <line x1=\"{LEFT}\" y1=\"{foot:.1}\" x2=\"{:.1}\" y2=\"{foot:.1}\" stroke=\"black\"/>",
            top + 16.0,
            escape(name),
            top + 32.0,
            summary.join("; "),
            LEFT + plot_w
        );
        let highest = buckets
            .iter()
            .flat_map(|i| groups.iter().map(move |g| latency.buckets[*g as usize][*i]))
            .max()
            .unwrap_or(0)
            .max(1);
        for (b, i) in buckets.iter().enumerate() {
            let slot = LEFT + b as f64 * slot_w + BUCKET_GAP / 2.0;
            for (s, group) in groups.iter().enumerate() {
                let n = latency.buckets[*group as usize][*i];
                if n == 0 {
                    continue;
                }
                let h = n as f64 / highest as f64 * (PLOT_H - 16.0);
                let bx = slot + s as f64 * BAR;
                let _ = writeln!(
                    svg,
                    "<rect class=\"bar\" x=\"{bx:.1}\" y=\"{:.1}\" width=\"{BAR}\" \
                     height=\"{h:.1}\" fill=\"{}\"/>\n<text class=\"value\" data-op=\"{}\" \
                     x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">{n}</text>",
                    foot - h,
                    COLOURS[s % COLOURS.len()],
                    group_name(*group),
                    bx + BAR / 2.0,
                    foot - h - 3.0
                );
            }
            let _ = writeln!(
                svg,
                "<text class=\"bucket\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" \
                 font-size=\"10\">{}</text>",
                slot + groups.len() as f64 * BAR / 2.0,
                foot + 14.0,
                short_time(if *i == 0 { 0 } else { 1u64 << i })
            );
        }
    }
    svg.push_str("</svg>\n");
    svg
}
