//! The `raid_hba` example's RAID HBA under each tag layout, CPU-bound: seed 001's 8-drive
//! RAID-0 volume, 4 KiB random reads at iodepth 128, no scheduler.
//!
//! One submitter thread keeps 128 reads in flight and completes them inline (no completion
//! threads: it reaps the reply queue of its hardware queue whenever it waits, as an
//! interrupt on the submitting CPU would), and the members complete at once, so every
//! cycle of an I/O is on one thread and the time per I/O is its CPU cost. One iteration is
//! one read; the time is the wall time of a run of `iters` reads (threads already started
//! are not part of it: see `Rig::run`). The modes, each a host of its own built once:
//!
//! * `single`: one hardware queue holding the whole depth (4096 tags);
//! * `per_hctx`: the depth split over 128 hardware queues, 32 tags each;
//! * `shared`: shared host tags over 128 hardware queues;
//! * `naive`: shared host tags, plus a scan of every hardware queue (`has_work`, and a run
//!   of those that have) after each completion.
//!
//! The targets: `shared` at least [`SHARED_TARGET`] times `single`'s IOPS (so its time at
//! most the inverse), `naive` at most [`NAIVE_TARGET`] times `single`'s IOPS, and `shared`'s
//! completion time per read at most [`COMPLETE_TARGET`] times `single`'s.
//!
//! After the benchmarks a summary gives the IOPS ratios from criterion's medians; after an
//! unfiltered run, the same ratios again as paired comparisons (interleaved rounds, the
//! median of the per-round ratios), with the completion-time ratio, which is measured
//! inside the run and so only paired.
//!
//! `cargo bench --bench hba` runs everything (under a minute).

#[path = "../examples/raid_hba/hba.rs"]
#[allow(dead_code)]
mod hba;

use std::time::SystemTime;

use criterion::{Criterion, Throughput};
use hba::{Config, Mode, Rig};

#[allow(dead_code)]
mod common;
use common::{PAIRED_ROUNDS, config, criterion_median, paired_ratio, paired_wanted};

/// The least `shared` may reach of `single`'s IOPS.
const SHARED_TARGET: f64 = 0.97;

/// The most `naive` may reach of `single`'s IOPS.
const NAIVE_TARGET: f64 = 0.90;

/// The most a completion may cost with `shared`, as a ratio of time over `single`.
const COMPLETE_TARGET: f64 = 1.10;

/// Reads in one round of a paired comparison.
const PAIRED_IOS: u64 = 20_000;

/// The bench's hosts: CPU-bound, completions inline.
fn rigs() -> Vec<(&'static str, Rig)> {
    let cfg = Config {
        completers: 0,
        ..Config::default()
    };
    [
        ("single", Mode::Single),
        ("per_hctx", Mode::PerHctx),
        ("shared", Mode::Shared),
        ("naive", Mode::Naive),
    ]
    .into_iter()
    .map(|(name, mode)| (name, Rig::new(mode, &cfg)))
    .collect()
}

fn modes(c: &mut Criterion, rigs: &[(&'static str, Rig)]) {
    let mut g = c.benchmark_group("hba");
    g.throughput(Throughput::Elements(1));
    for (name, rig) in rigs {
        g.bench_function(*name, |b| b.iter_custom(|iters| rig.run(iters).wall));
        assert!(rig.is_idle(), "{name}: host not idle");
    }
    g.finish();
}

/// IOPS ratio `a / b` from the times per read, marked against a target.
fn mark(ratio: f64, pass: bool) -> String {
    format!("{ratio:>5.3} {}", if pass { "pass" } else { "MISS" })
}

fn summary(started: SystemTime) {
    let m = |f: &str| criterion_median(started, "hba", f);
    let names = ["single", "per_hctx", "shared", "naive"];
    let medians: Vec<_> = names.iter().map(|n| (*n, m(n))).collect();
    let Some(single) = medians[0].1 else {
        return;
    };
    println!();
    println!("Per read, CPU-bound (criterion medians; IOPS ratios over single):");
    println!("| mode | ns per read | IOPS | IOPS / single |");
    println!("|---|---:|---:|---:|");
    for (name, median) in &medians {
        let Some(ns) = median else { continue };
        let ratio = single / ns;
        let target = match *name {
            "shared" => mark(ratio, ratio >= SHARED_TARGET),
            "naive" => mark(ratio, ratio <= NAIVE_TARGET),
            _ => format!("{ratio:>5.3}"),
        };
        println!("| {name} | {ns:>7.1} | {:>9.0} | {target} |", 1e9 / ns);
    }
}

fn paired_summary(rigs: &[(&'static str, Rig)]) {
    let rig = |name: &str| &rigs.iter().find(|(n, _)| *n == name).expect("a rig").1;
    let (single, shared, naive) = (rig("single"), rig("shared"), rig("naive"));
    println!();
    println!(
        "Paired ratios (median of {PAIRED_ROUNDS} back-to-back rounds of {PAIRED_IOS} reads):"
    );
    let shared_iops = 1.0
        / paired_ratio(
            || shared.run(PAIRED_IOS).wall,
            || single.run(PAIRED_IOS).wall,
        );
    let naive_iops = 1.0
        / paired_ratio(
            || naive.run(PAIRED_IOS).wall,
            || single.run(PAIRED_IOS).wall,
        );
    let complete = paired_ratio(
        || shared.run(PAIRED_IOS).complete_busy,
        || single.run(PAIRED_IOS).complete_busy,
    );
    println!("| ratio | measured | target |");
    println!("|---|---:|---:|");
    println!(
        "| shared IOPS / single | {} | >= {SHARED_TARGET} |",
        mark(shared_iops, shared_iops >= SHARED_TARGET)
    );
    println!(
        "| naive IOPS / single | {} | <= {NAIVE_TARGET} |",
        mark(naive_iops, naive_iops <= NAIVE_TARGET)
    );
    println!(
        "| shared completion time / single | {} | <= {COMPLETE_TARGET} |",
        mark(complete, complete <= COMPLETE_TARGET)
    );
}

fn main() {
    let started = SystemTime::now();
    let paired = paired_wanted();
    let rigs = rigs();
    // What `criterion_group!` and `criterion_main!` expand to, less the undocumented `pub fn`.
    let mut c = config().configure_from_args();
    modes(&mut c, &rigs);
    c.final_summary();
    summary(started);
    if paired {
        paired_summary(&rigs);
    }
}
