//! The report on one screen, what the example prints by default: `dd` and `find` of every
//! set-up against the seed's BEFORE and AFTER, an iozone line per set-up (each test's
//! geometric mean against the seed's BEFORE), the responsiveness table and the checks
//! that failed. `--full` prints the whole [`report`](super::report::report) instead.

use std::fmt::Write as _;

use blkmq_sim::{IOZONE_TESTS, IozoneTest};

use super::Fallible;
use super::compare::{Calibration, Direction, calibration, directions, relative};
use super::figures::{Figure, Figures, SEED_AFTER, SEED_BEFORE};
use super::report::startup_table;
use super::scenario::{Expect, Results};
use super::startup::{STARTUP_READS, STARTUP_WRITERS};

/// Failed checks listed one per line before the rest are only counted.
const FAILED_SHOWN: usize = 8;

/// Every set-up of the summary, in print order, with its figures: the seed's BEFORE and
/// AFTER, the model's BEFORE, then the simulated columns.
pub(crate) fn setups<'a>(
    before: &'a Figures,
    after: &'a Figures,
    results: &'a Results,
) -> Vec<(&'a str, &'a Figures)> {
    let mut out = vec![
        ("seed BEFORE", before),
        ("seed AFTER", after),
        ("model BEFORE", &results.legacy),
    ];
    out.extend(results.columns.iter().map(|(c, f)| (c.name, f)));
    out
}

/// `value` against `reference` as a signed percentage, or blank where it is the reference.
fn against(value: f64, reference: f64, same: bool) -> String {
    if same {
        String::new()
    } else {
        format!("{:+.2}%", relative(value, reference) * 100.0)
    }
}

/// The geometric mean of `figures`' cells of `test` (all tests where `None`) over the seed
/// `before`'s, less one: `+0.05` is 5% faster. `None` when no cell is in both.
pub(crate) fn iozone_gain(
    figures: &Figures,
    before: &Figures,
    test: Option<IozoneTest>,
) -> Option<f64> {
    let (mut logs, mut cells) = (0.0, 0u32);
    for (reclen, rates) in &figures.grid.rows {
        for (t, rate) in IOZONE_TESTS.iter().zip(rates) {
            if test.is_some_and(|test| test != *t) {
                continue;
            }
            let Some(seed) = before.grid.get(*reclen, *t).filter(|s| *s > 0) else {
                continue;
            };
            if *rate > 0 {
                logs += (*rate as f64 / seed as f64).ln();
                cells += 1;
            }
        }
    }
    (cells > 0).then(|| (logs / f64::from(cells)).exp() - 1.0)
}

/// The `dd` and `find` table: every set-up's figure, against the seed's BEFORE and AFTER.
pub(crate) fn dd_find_table(
    setups: &[(&str, &Figures)],
    before: &Figures,
    after: &Figures,
) -> String {
    let mut out = format!(
        "{:<13} {:>8} {:>10} {:>10}  {:>8} {:>10} {:>10}\n",
        "set-up", "dd MB/s", "vs BEFORE", "vs AFTER", "find s", "vs BEFORE", "vs AFTER"
    );
    for (name, figures) in setups {
        let _ = write!(out, "{name:<13}");
        for (i, figure) in [Figure::Dd, Figure::Find].into_iter().enumerate() {
            let value = |f: &Figures| f.value(figure).unwrap_or(f64::NAN);
            let v = value(figures);
            let _ = write!(
                out,
                "{}{:>8} {:>10} {:>10}",
                if i == 0 { " " } else { "  " },
                figure.show(v),
                against(v, value(before), std::ptr::eq(*figures, before)),
                against(v, value(after), std::ptr::eq(*figures, after))
            );
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    }
    out
}

/// The iozone table: per set-up other than the seed's BEFORE, each test's geometric mean
/// against the seed's BEFORE, and all cells'.
pub(crate) fn iozone_table(setups: &[(&str, &Figures)], before: &Figures) -> String {
    let mut out = format!("{:<12}", "set-up");
    for test in IOZONE_TESTS {
        let _ = write!(out, " {:>12}", test.name());
    }
    let _ = writeln!(out, " {:>9}", "all");
    for (name, figures) in setups.iter().filter(|(_, f)| !std::ptr::eq(*f, before)) {
        let _ = write!(out, "{name:<12}");
        let tests = IOZONE_TESTS.iter().map(|t| Some(*t)).chain([None]);
        for (i, test) in tests.enumerate() {
            let width = if i < IOZONE_TESTS.len() { 12 } else { 9 };
            let gain = iozone_gain(figures, before, test)
                .map_or_else(|| "-".into(), |g| format!("{:+.2}%", g * 100.0));
            let _ = write!(out, " {gain:>width$}");
        }
        out.push('\n');
    }
    out
}

/// A failed calibration figure, on one line.
fn calibration_miss(c: &Calibration) -> String {
    format!(
        "MISS calibration: {} model {} against the seed's {}, {:+.2}% (limit {:.0}%)",
        c.figure.name(),
        c.figure.show(c.model),
        c.figure.show(c.seed),
        c.error * 100.0,
        c.figure.calibration_limit() * 100.0
    )
}

/// A failed direction check, on one line.
fn direction_miss(d: &Direction) -> String {
    let should = match d.expect {
        Expect::Regression => "worse than",
        Expect::NoWorse => "no worse than",
    };
    let mark = |ok: bool| if ok { "ok" } else { "MISS" };
    let line = format!(
        "MISS direction: {} {} {} (should be {should} BEFORE): seed's {} {}, model's {} {}  {}",
        d.column,
        d.figure.name(),
        d.figure.show(d.value),
        d.figure.show(d.seed),
        mark(d.vs_seed),
        d.figure.show(d.legacy),
        mark(d.vs_legacy),
        d.note()
    );
    line.trim_end().into()
}

/// The checks: a line per failed one (the first few), or that all hold.
pub(crate) fn checks(calibrations: &[Calibration], directions: &[Direction]) -> String {
    let failed: Vec<String> = calibrations
        .iter()
        .filter(|c| !c.ok)
        .map(calibration_miss)
        .chain(
            directions
                .iter()
                .filter(|d| !(d.vs_seed && d.vs_legacy))
                .map(direction_miss),
        )
        .collect();
    let total = calibrations.len() + directions.len();
    let what = format!(
        "{} calibration figures within their limits, {} direction checks",
        calibrations.len(),
        directions.len()
    );
    if failed.is_empty() {
        return format!("all {total} checks hold: {what}\n");
    }
    let mut out = format!("{} of {total} checks fail ({what}):\n", failed.len());
    for line in failed.iter().take(FAILED_SHOWN) {
        let _ = writeln!(out, "{line}");
    }
    if failed.len() > FAILED_SHOWN {
        let _ = writeln!(out, "... and {} more (--full)", failed.len() - FAILED_SHOWN);
    }
    out
}

/// The report on one screen.
pub(crate) fn summary(results: &Results) -> Fallible<String> {
    let before = Figures::parse_seed(SEED_BEFORE).ok_or("the seed's BEFORE does not parse")?;
    let after = Figures::parse_seed(SEED_AFTER).ok_or("the seed's AFTER does not parse")?;
    let setups = setups(&before, &after, results);
    let scale = results.scale;
    let rows = results.legacy.grid.rows.len();
    let mut out = String::new();
    out.push_str(
        "Seed 000, an SD card on Linux 4.9-rc2: BEFORE the legacy path, AFTER the naive switch \
         to blk-mq.\nThe model's BEFORE is the legacy path on the simulated card; below it, the \
         host driver's columns.\n`--full` prints every table, `--svg DIR` draws them.\n",
    );
    let _ = writeln!(
        out,
        "\ndd of {} MiB (higher is better) and find (lower is better), against the seed's BEFORE \
         and AFTER\n",
        scale.dd_bytes >> 20
    );
    out.push_str(&dd_find_table(&setups, &before, &after));
    let _ = writeln!(
        out,
        "\niozone, {rows} record sizes of {} to {} kB: each test's geometric mean against the \
         seed's BEFORE\n",
        scale.min_record >> 10,
        scale.max_record >> 10
    );
    out.push_str(&iozone_table(&setups, &before));
    let _ = writeln!(
        out,
        "\nResponsiveness: an application's {STARTUP_READS} reads of 4 KiB, on an idle card and \
         under {STARTUP_WRITERS} `dd` writers\n"
    );
    out.push_str(&startup_table(&results.startup));
    out.push('\n');
    out.push_str(&checks(
        &calibration(&before, &results.legacy),
        &directions(&before, results),
    ));
    Ok(out)
}
