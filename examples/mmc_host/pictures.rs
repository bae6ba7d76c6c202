//! The pictures `--svg DIR` writes: `dd` and `find` as bars against the seed's BEFORE and
//! AFTER, the iozone grids side by side, the responsiveness bars, and the latency
//! histograms the queue's I/O accounting kept over each set-up's iozone run. Each writes
//! its figures as text, as the [summary](super::summary) prints them.

use std::path::{Path, PathBuf};

use blkmq_sim::{Bar, BarChart, iozone_grids_svg, latency_histograms_svg};

use super::Fallible;
use super::figures::{Figure, Figures, SEED_AFTER, SEED_BEFORE};
use super::scenario::Results;
use super::startup::{STARTUP_READS, STARTUP_WRITERS};
use super::summary::setups;

/// The series of a `dd` or `find` bar: the seed's, the model's BEFORE, a simulated column.
fn series(name: &str) -> usize {
    match name {
        "seed BEFORE" | "seed AFTER" => 0,
        "model BEFORE" => 1,
        _ => 2,
    }
}

/// `figure` of every set-up as bars, the seed's BEFORE and AFTER as dashed lines.
fn bars(
    title: &str,
    unit: &str,
    figure: Figure,
    setups: &[(&str, &Figures)],
    seed: [&Figures; 2],
) -> Fallible<String> {
    let value = |f: &Figures| f.value(figure).ok_or("a figure the set-up lacks");
    let mut chart = BarChart::new(title, "set-up", unit).series(&[
        "the seed",
        "the model's BEFORE",
        "simulated",
    ]);
    for (name, figures) in setups {
        let v = value(figures)?;
        chart = chart.group(name, vec![Bar::new(series(name), v, &figure.show(v))]);
    }
    for (name, figures) in ["seed BEFORE", "seed AFTER"].into_iter().zip(seed) {
        let v = value(figures)?;
        chart = chart.reference(&format!("{name} {}", figure.show(v)), v);
    }
    Ok(chart.to_svg())
}

/// Every picture: a file name and its SVG document.
pub(crate) fn pictures(results: &Results) -> Fallible<Vec<(&'static str, String)>> {
    let before = Figures::parse_seed(SEED_BEFORE).ok_or("the seed's BEFORE does not parse")?;
    let after = Figures::parse_seed(SEED_AFTER).ok_or("the seed's AFTER does not parse")?;
    let setups = setups(&before, &after, results);
    let seed = [&before, &after];
    let dd = bars(
        &format!(
            "dd if=/dev/mmcblk0 of=/dev/null bs=1M count={}",
            results.scale.dd_bytes >> 20
        ),
        "MB/s (higher is better)",
        Figure::Dd,
        &setups,
        seed,
    )?;
    let find = bars(
        "time find . > /dev/null",
        "s (lower is better)",
        Figure::Find,
        &setups,
        seed,
    )?;
    let grids: Vec<(&str, &blkmq_sim::IozoneGrid)> =
        setups.iter().map(|(name, f)| (*name, &f.grid)).collect();
    let iozone = iozone_grids_svg(
        "iozone -az -i0 -i1 -i2 -s 20m -I -f /mnt/foo.test",
        ("the seed's BEFORE", &before.grid),
        &grids,
    );
    let title = format!(
        "An application starting up: {STARTUP_READS} reads of 4 KiB, on an idle card and \
         under {STARTUP_WRITERS} dd writers"
    );
    let mut startup = BarChart::new(
        &title,
        "scheduler (slowdown under the writers)",
        "ms (log scale, lower is better)",
    )
    .log_scale()
    .series(&["idle card", "under writes"]);
    for (column, s) in &results.startup {
        let ms = |ns: u64| ns as f64 / 1e6;
        let (idle, loaded) = (ms(s.idle_ns), ms(s.loaded_ns));
        startup = startup.group(
            &format!("{} ({:.2}x)", column.name, s.slowdown()),
            vec![
                Bar::new(0, idle, &format!("{idle:.1}")),
                Bar::new(1, loaded, &format!("{loaded:.1}")),
            ],
        );
    }
    // The set-ups whose queue counted (the model's BEFORE and the simulated columns).
    let counted: Vec<(&str, &blkmq_core::Latency)> = setups
        .iter()
        .filter_map(|(name, f)| f.counters.as_ref().map(|c| (*name, &c.latency)))
        .collect();
    let latency = latency_histograms_svg(
        &format!(
            "Request latency over iozone -az -i0 -i1 -i2 -s 20m -I, records of {} KiB to {} MiB",
            results.scale.min_record >> 10,
            results.scale.max_record >> 20
        ),
        &counted,
    );
    Ok(vec![
        ("dd.svg", dd),
        ("find.svg", find),
        ("iozone.svg", iozone),
        ("startup.svg", startup.to_svg()),
        ("latency.svg", latency),
    ])
}

/// Writes every picture into `dir` (made if missing) and returns their paths.
pub(crate) fn write_pictures(results: &Results, dir: &Path) -> Fallible<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut paths = Vec::new();
    for (name, svg) in pictures(results)? {
        let path = dir.join(name);
        std::fs::write(&path, svg)?;
        paths.push(path);
    }
    Ok(paths)
}
