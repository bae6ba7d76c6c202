//! The comparisons with the seed: the calibration (the card driven as the legacy path
//! drove it, against the seed's BEFORE, figure by figure) and the direction checks (each
//! column against the seed's BEFORE and the model's).

use blkmq_sim::{IOZONE_TESTS, IozoneGrid, IozoneTest};

use super::figures::{Figure, Figures};
use super::scenario::{Expect, Results};

/// `dd`, `find`, then every iozone cell of `grid`, row by row.
pub(crate) fn all_figures(grid: &IozoneGrid) -> Vec<Figure> {
    let mut out = vec![Figure::Dd, Figure::Find];
    for (reclen, _) in &grid.rows {
        out.extend(IOZONE_TESTS.iter().map(|&t| Figure::Iozone(*reclen, t)));
    }
    out
}

/// The figures an [`Expect`] speaks of: `dd` and `find`, and for [`Expect::NoWorse`] the
/// read, reread and random read cells of `grid`.
pub(crate) fn directed_figures(expect: Expect, grid: &IozoneGrid) -> Vec<Figure> {
    let mut out = vec![Figure::Dd, Figure::Find];
    if expect == Expect::NoWorse {
        for (reclen, _) in &grid.rows {
            for test in [IozoneTest::Read, IozoneTest::Reread, IozoneTest::RandomRead] {
                out.push(Figure::Iozone(*reclen, test));
            }
        }
    }
    out
}

/// `(value - reference) / reference`.
pub(crate) fn relative(value: f64, reference: f64) -> f64 {
    (value - reference) / reference
}

/// One line of the calibration: the model's legacy path against the seed's BEFORE.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Calibration {
    /// The figure.
    pub(crate) figure: Figure,
    /// The seed's BEFORE.
    pub(crate) seed: f64,
    /// The model's.
    pub(crate) model: f64,
    /// `(model - seed) / seed`.
    pub(crate) error: f64,
    /// Whether `|error|` is within the figure's limit.
    pub(crate) ok: bool,
}

/// The calibration of every figure the model ran that the seed has.
pub(crate) fn calibration(seed: &Figures, legacy: &Figures) -> Vec<Calibration> {
    all_figures(&legacy.grid)
        .into_iter()
        .filter_map(|figure| {
            let (s, m) = (seed.value(figure)?, legacy.value(figure)?);
            let error = relative(m, s);
            Some(Calibration {
                figure,
                seed: s,
                model: m,
                error,
                ok: error.abs() <= figure.calibration_limit(),
            })
        })
        .collect()
}

/// One direction check: a column's figure against the seed's BEFORE and against the
/// model's BEFORE (the legacy path on the same card).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Direction {
    /// The column.
    pub(crate) column: &'static str,
    /// What it should do.
    pub(crate) expect: Expect,
    /// The figure.
    pub(crate) figure: Figure,
    /// The column's value.
    pub(crate) value: f64,
    /// The seed's BEFORE.
    pub(crate) seed: f64,
    /// The model's BEFORE.
    pub(crate) legacy: f64,
    /// Whether the value goes the expected way against the seed's BEFORE.
    pub(crate) vs_seed: bool,
    /// Whether it goes the expected way against the model's BEFORE.
    pub(crate) vs_legacy: bool,
}

impl Direction {
    /// Whether the column's figure is exactly the model's BEFORE (the same card time).
    pub(crate) fn ties_legacy(&self) -> bool {
        self.value == self.legacy
    }

    /// Why a check misses, when the figures tell.
    pub(crate) fn note(&self) -> String {
        match (self.vs_seed, self.vs_legacy, self.ties_legacy()) {
            (false, true, true) => format!(
                "= model BEFORE, {:+.2}% off the seed",
                relative(self.legacy, self.seed) * 100.0
            ),
            (_, false, true) => "= model BEFORE: nothing to overlap or merge".into(),
            _ => String::new(),
        }
    }
}

/// Whether `value` goes the `expect`ed way against `reference` for `figure`.
fn goes(expect: Expect, figure: Figure, value: f64, reference: f64) -> bool {
    let no_worse = if figure.higher_is_better() {
        value >= reference
    } else {
        value <= reference
    };
    match expect {
        Expect::NoWorse => no_worse,
        Expect::Regression => !no_worse,
    }
}

/// Every direction check of every column.
pub(crate) fn directions(seed: &Figures, results: &Results) -> Vec<Direction> {
    let mut out = Vec::new();
    for (column, figures) in &results.columns {
        for figure in directed_figures(column.expect, &figures.grid) {
            let (Some(value), Some(s), Some(legacy)) = (
                figures.value(figure),
                seed.value(figure),
                results.legacy.value(figure),
            ) else {
                continue;
            };
            out.push(Direction {
                column: column.name,
                expect: column.expect,
                figure,
                value,
                seed: s,
                legacy,
                vs_seed: goes(column.expect, figure, value, s),
                vs_legacy: goes(column.expect, figure, value, legacy),
            });
        }
    }
    out
}
