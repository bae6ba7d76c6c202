//! The whole report, what the example prints with `--full`: the seed's figures, the simulated columns with what
//! their drivers did, the calibration, the direction checks and the responsiveness table,
//! each section in the seed's formats where it has one.

use std::fmt::Write as _;

use blkmq_sim::side_by_side;

use super::Fallible;
use super::compare::{Calibration, Direction, calibration, directions};
use super::figures::{Figures, SEED_AFTER, SEED_BEFORE};
use super::scenario::{Column, Expect, Results};
use super::startup::{STARTUP_AT_NS, STARTUP_READS, STARTUP_WRITE_BYTES, STARTUP_WRITERS, Startup};

fn mark(ok: bool) -> &'static str {
    if ok { "ok" } else { "MISS" }
}

/// Blocks side by side under a header line.
fn section(header: &str, blocks: &[(&str, String)]) -> String {
    let refs: Vec<(&str, &str)> = blocks.iter().map(|(t, b)| (*t, b.as_str())).collect();
    format!("{header}\n{}", side_by_side(&refs))
}

/// The three benchmarks of several set-ups side by side, in the seed's formats.
pub(crate) fn side_by_side_figures(columns: &[(&str, &Figures)]) -> String {
    let block = |f: fn(&Figures) -> String| -> Vec<(&str, String)> {
        columns
            .iter()
            .map(|(t, figures)| (*t, f(figures)))
            .collect()
    };
    let count = columns.first().map_or(0, |(_, f)| f.dd.bytes >> 20);
    [
        section(
            &format!("time dd if=/dev/mmcblk0 of=/dev/null bs=1M count={count}"),
            &block(Figures::dd_text),
        ),
        section("time find . > /dev/null", &block(Figures::find_text)),
        section(
            "iozone -az -i0 -i1 -i2 -s 20m -I -f /mnt/foo.test",
            &block(|f| f.grid.to_string()),
        ),
    ]
    .join("\n")
}

/// What each column's driver and queue did.
pub(crate) fn activity_table(results: &Results) -> String {
    let mut out = format!(
        "{:<12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
        "column", "started", "prepared", "from irq", "busy", "irqs", "kicked", "waited"
    );
    for (column, figures) in &results.columns {
        let a = figures.activity.unwrap_or_default();
        let h = a.host;
        let _ = writeln!(
            out,
            "{:<12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            column.name,
            h.started_idle,
            h.prepared_behind,
            h.started_from_irq,
            h.resource_busy,
            h.interrupts,
            a.kick_runs,
            a.bios_waited
        );
    }
    out
}

/// The calibration table: every figure, the seed's BEFORE, the model's, the error, its
/// limit and a mark.
pub(crate) fn calibration_table(rows: &[Calibration]) -> String {
    let mut out = format!(
        "{:<34} {:>12} {:>12} {:>8} {:>6}\n",
        "figure", "seed BEFORE", "model", "error", "limit"
    );
    for c in rows {
        let _ = writeln!(
            out,
            "{:<34} {:>12} {:>12} {:>+7.2}% {:>5.0}%  {}",
            c.figure.name(),
            c.figure.show(c.seed),
            c.figure.show(c.model),
            c.error * 100.0,
            c.figure.calibration_limit() * 100.0,
            mark(c.ok)
        );
    }
    let missed = rows.iter().filter(|c| !c.ok).count();
    let worst = rows.iter().map(|c| c.error.abs()).fold(0.0_f64, f64::max);
    let _ = writeln!(
        out,
        "{} of {} figures within their limits; largest error {:.2}%",
        rows.len() - missed,
        rows.len(),
        worst * 100.0
    );
    out
}

/// The direction table: per column and figure, the value, the seed's BEFORE and the
/// model's, a mark against each, and why a check misses where the figures tell.
pub(crate) fn direction_table(rows: &[Direction]) -> String {
    let mut out = format!(
        "{:<12} {:<3} {:<34} {:>10} {:>11} {:<4} {:>12} {:<4}  note\n",
        "column", "", "figure", "value", "seed BEFORE", "", "model BEFORE", ""
    );
    for d in rows {
        let expect = match (d.expect, d.figure.higher_is_better()) {
            (Expect::Regression, true) => "<",
            (Expect::Regression, false) => ">",
            (Expect::NoWorse, true) => ">=",
            (Expect::NoWorse, false) => "<=",
        };
        let line = format!(
            "{:<12} {:<3} {:<34} {:>10} {:>11} {:<4} {:>12} {:<4}  {}",
            d.column,
            expect,
            d.figure.name(),
            d.figure.show(d.value),
            d.figure.show(d.seed),
            mark(d.vs_seed),
            d.figure.show(d.legacy),
            mark(d.vs_legacy),
            d.note()
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let seed_misses: Vec<&Direction> = rows.iter().filter(|d| !d.vs_seed).collect();
    let ties = seed_misses.iter().filter(|d| d.ties_legacy()).count();
    let _ = writeln!(
        out,
        "{} checks: {} miss against the model's BEFORE; {} miss against the seed's BEFORE, \
         {} of them ties with the model's BEFORE",
        rows.len(),
        rows.iter().filter(|d| !d.vs_legacy).count(),
        seed_misses.len(),
        ties
    );
    out
}

/// The responsiveness table.
pub(crate) fn startup_table(rows: &[(Column, Startup)]) -> String {
    let mut out = format!(
        "{:<12} {:>12} {:>14} {:>10} {:>14}\n",
        "column", "idle card", "under writes", "slowdown", "writers MB/s"
    );
    for (column, s) in rows {
        let _ = writeln!(
            out,
            "{:<12} {:>10.1}ms {:>12.1}ms {:>9.2}x {:>14.2}",
            column.name,
            s.idle_ns as f64 / 1e6,
            s.loaded_ns as f64 / 1e6,
            s.slowdown(),
            s.writers_bytes_per_sec as f64 / 1e6
        );
    }
    out
}

/// The whole report: the seed's figures, the simulated columns with what their drivers
/// did, the calibration, the direction checks and the responsiveness table.
pub(crate) fn report(results: &Results) -> Fallible<String> {
    let before = Figures::parse_seed(SEED_BEFORE).ok_or("the seed's BEFORE does not parse")?;
    let after = Figures::parse_seed(SEED_AFTER).ok_or("the seed's AFTER does not parse")?;
    let scale = results.scale;
    let columns: Vec<(&str, &Figures)> = results.columns.iter().map(|(c, f)| (c.name, f)).collect();
    let mut out = String::new();
    out.push_str(
        "=== 1. Seed 000: SD card, Linux 4.9-rc2: legacy path (BEFORE), naive blk-mq (AFTER)\n\n",
    );
    out.push_str(&side_by_side_figures(&[
        ("BEFORE", &before),
        ("AFTER", &after),
    ]));
    let _ = writeln!(
        out,
        "\n=== 2. Simulated: the card behind the host driver (dd {} MiB, iozone records {} to {} kB)\n",
        scale.dd_bytes >> 20,
        scale.min_record >> 10,
        scale.max_record >> 10
    );
    out.push_str(&side_by_side_figures(&columns));
    out.push_str(
        "\nThe drivers over the three runs: requests started on an idle card, prepared behind \
         the one on the bus,\nstarted by the interrupt, turned away busy (Resource); interrupts; \
         kicked queue runs; bios that waited for a request.\n",
    );
    out.push_str(&activity_table(results));
    out.push_str(
        "\n=== 3. Calibration: the card driven as the legacy path drove it (the model's BEFORE) \
         against the seed's BEFORE\n\n",
    );
    out.push_str(&calibration_table(&calibration(&before, &results.legacy)));
    out.push_str(
        "\n=== 4. Directions: naive should be worse than BEFORE (<, >), none and mq-deadline \
         no worse (>=, <=)\n\n",
    );
    out.push_str(&direction_table(&directions(&before, results)));
    out.push_str(
        "A tie is a column's figure equal to the model's BEFORE to the last digit: where that \
         misses the seed's\nBEFORE, the miss is the calibration's residual (section 3), not a \
         slower path. `time` truncates to 10 ms:\nthe seed's find of 3.60 s is 3.600 to 3.609 s.\n",
    );
    let _ = writeln!(
        out,
        "\n=== 5. Responsiveness: an application starting up ({STARTUP_READS} reads of 4 KiB, one \
         at a time, over 64 MiB)\n    at {} s, on an idle card and under {STARTUP_WRITERS} `dd` \
         writers of {} MiB each (16 bios of 128 KiB in flight)\n",
        STARTUP_AT_NS / 1_000_000_000,
        STARTUP_WRITE_BYTES >> 20
    );
    out.push_str(&startup_table(&results.startup));
    Ok(out)
}
