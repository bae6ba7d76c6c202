//! A megaraid-like RAID HBA on blkmq, run on real threads: seed 001's setup (an 8-drive
//! RAID-0 volume, 4 KiB random reads at iodepth 128, no scheduler) with the host's tags laid
//! out four ways, side by side.
//!
//! ```text
//! cargo run --release --example raid_hba                       # 300,000 reads per mode
//! cargo run --release --example raid_hba -- --ios 1000000      # the seed's scale, longer
//! cargo run --release --example raid_hba -- --verify           # check every read's data
//! cargo run --release --example raid_hba -- --latency-us 80 --modes shared,naive
//! ```
//!
//! Options: `--ios N` (reads per mode), `--hctxs N` (default 128), `--depth N` (host-wide
//! tags, default 4096), `--budget N` (the volume's queue depth, default 256), `--iodepth N`
//! (reads in flight per submitter, default 128), `--submitters N` (default 1),
//! `--completers N` (completion threads; 0 completes inline on the submitting thread; by
//! default both 1 and 0, one table each), `--latency-us N` (each member's service time;
//! default 0, CPU-bound), `--modes a,b` (of `single`, `per-hctx`, `shared`, `naive`),
//! `--rounds N` (default 9: the modes take turns, `ios / N` reads each per round; the
//! figures are the medians of the rounds), `--verify` (each run first writes a pattern
//! over the volume's first 16 MiB through multi-segment bios; the members keep the
//! bytes, and every read's bytes are compared with what was written; the figures then
//! include the copies and the compares).
//!
//! The modes: `single` is one hardware queue holding the whole depth (seed 001's before);
//! `per-hctx` splits the depth evenly over the hardware queues, each with its own tags (so a
//! submitter on one CPU sees only its share); `shared` is shared host tags over every
//! hardware queue; `naive` is shared host tags whose completion thread also asks every
//! hardware queue `has_work()` after each completion and runs those that have (seed 001's
//! after, the cost the fix removed; done in this example's completion thread, not in the
//! library).
//!
//! The driver (`Hba` in `raid_hba/driver.rs`, with its hardware and each `Driver` method
//! explained there) takes a unit of the volume's budget per command, maps each request to
//! its member drive and posts it on the reply queue of its hardware queue; the completion
//! threads (or, inline, the submitters) take what is due there and end it in one batch.
//! The load around it is in `raid_hba/rig.rs`.
//!
//! What is measured. IOPS is reads over the wall time from the common start to the last
//! completion. CPU time is busy time measured with `Instant` around the work of each thread
//! (each `submit` call; each completion batch from pop to end), not the OS's thread CPU
//! time: spinning while waiting for a completion or for due commands is not counted, and
//! the timing itself adds a little to every figure. `complete ns/io` is the completion
//! threads' busy time per read, `scan ns/io` the part of it spent in the naive scan.
//! Latency is from just before `submit` to the start of the completion batch that ends the
//! read. On a machine with fewer cores than threads the figures include preemption.
//!
//! The targets printed at the end of each table: `shared` IOPS at least 0.97x `single`;
//! `naive` at most 0.90x `single`; `shared`'s completion CPU per read at most 1.10x
//! `single`'s. They are about CPU cost, so they are judged where the run is CPU-bound:
//! completions inline on the submitting thread, or a core for every thread. With
//! completion threads spinning on fewer cores, IOPS follow how the threads share the cores,
//! and the ratios are printed as information only; so they are with `--verify`, whose
//! reads also copy and compare their bytes.

#[path = "raid_hba/hba.rs"]
mod hba;

use hba::driver::MEMBERS;
use hba::rig::CPUS;
use hba::stats::{Stats, targets};
use hba::{Config, Mode, Rig};

fn usage(msg: &str) -> ! {
    eprintln!("raid_hba: {msg} (see the example's documentation for the options)");
    std::process::exit(2);
}

fn main() {
    let mut cfg = Config::default();
    let mut ios: u64 = 300_000;
    let mut rounds: u64 = 9;
    let mut completers = None;
    let mut modes = Mode::ALL.to_vec();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut num = |name: &str| -> u64 {
            args.next()
                .and_then(|v| v.replace('_', "").parse().ok())
                .unwrap_or_else(|| usage(&format!("{name} takes a number")))
        };
        match arg.as_str() {
            "--ios" => ios = num("--ios").max(1),
            "--hctxs" => cfg.hctxs = num("--hctxs").clamp(1, 1024) as usize,
            "--depth" => cfg.depth = num("--depth").max(1) as usize,
            "--budget" => cfg.budget = num("--budget").max(1) as usize,
            "--iodepth" => cfg.iodepth = num("--iodepth").max(1) as usize,
            "--submitters" => cfg.submitters = num("--submitters").clamp(1, 64) as usize,
            "--completers" => completers = Some(num("--completers").min(64) as usize),
            "--latency-us" => cfg.latency_ns = num("--latency-us") * 1000,
            "--rounds" => rounds = num("--rounds").max(1),
            "--verify" => cfg.verify = true,
            "--modes" => {
                let list = args.next().unwrap_or_else(|| usage("--modes takes a list"));
                modes = list
                    .split(',')
                    .map(|m| Mode::parse(m).unwrap_or_else(|| usage(&format!("no mode {m}"))))
                    .collect();
            }
            other => usage(&format!("unknown option {other}")),
        }
    }
    cfg.reply_queues = cfg.hctxs;
    let setups: Vec<usize> = match completers {
        Some(n) => vec![n],
        None => vec![1, 0],
    };
    let mut failed = false;
    for (i, n) in setups.into_iter().enumerate() {
        if i > 0 {
            println!();
        }
        let cfg = Config {
            completers: n,
            ..cfg.clone()
        };
        failed |= table(&cfg, &modes, ios, rounds);
    }
    if failed {
        eprintln!("raid_hba: errors found, or a host not idle after its run");
        std::process::exit(1);
    }
}

/// Runs every mode of `modes` under `cfg` and prints their table and targets; returns
/// whether any found an error or left its host busy.
fn table(cfg: &Config, modes: &[Mode], ios: u64, rounds: u64) -> bool {
    let mut failed = false;
    println!(
        "RAID-0 over {} drives, 4 KiB random reads, {} submitter(s) x iodepth {}, {}, \
         host depth {}, volume budget {}, {} hctxs over {} CPU slots, member latency {} us, {} reads per mode in {} rounds{}",
        MEMBERS,
        cfg.submitters,
        cfg.iodepth,
        if cfg.completers == 0 {
            "completions inline on the submitting thread (CPU-bound)".to_string()
        } else {
            format!("{} completion thread(s)", cfg.completers)
        },
        cfg.depth,
        cfg.budget,
        cfg.hctxs,
        CPUS,
        cfg.latency_ns / 1000,
        ios,
        rounds,
        if cfg.verify { ", verifying" } else { "" },
    );
    println!();
    println!(
        "| mode | hctxs | IOPS | CPU ns/io | complete ns/io | scan ns/io | p50 us | p99 us | retries | errors |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let rigs: Vec<Rig> = modes.iter().map(|&m| Rig::new(m, cfg)).collect();
    let per_round = (ios / rounds).max(1);
    // A short warm-up run each, so every mode starts with its caches and allocations made.
    for rig in &rigs {
        rig.run((per_round / 10).max(1000));
    }
    // The modes take turns, round after round, so a change in the machine's load falls on
    // all of them alike; IOPS and latencies are the medians of the rounds.
    let mut runs: Vec<Vec<Stats>> = vec![Vec::new(); rigs.len()];
    for _ in 0..rounds {
        for (rig, runs) in rigs.iter().zip(&mut runs) {
            runs.push(rig.run(per_round));
        }
    }
    let mut results: Vec<(Mode, Stats)> = Vec::new();
    for (rig, runs) in rigs.iter().zip(&runs) {
        let st = Stats::combine(runs);
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {} | {} |",
            rig.mode.name(),
            rig.queue.nr_hw_queues(),
            st.iops(),
            st.cpu_ns_per_io(),
            st.complete_ns_per_io(),
            st.scan_ns_per_io(),
            st.p50_ns as f64 / 1000.0,
            st.p99_ns as f64 / 1000.0,
            st.submit_retries,
            st.errors,
        );
        if st.errors != 0 || !rig.is_idle() {
            failed = true;
        }
        results.push((rig.mode, st));
    }
    let spread: Vec<_> = rigs
        .iter()
        .map(|r| (r.mode, r.host.driver().member_ios()))
        .collect();
    println!();
    // The same seed gives every mode the same reads: the spread over the members is the
    // same for each unless a command went astray.
    if spread.windows(2).all(|w| w[0].1 == w[1].1) {
        if let Some((_, ios)) = spread.first() {
            println!("Commands per member drive (every mode alike, warm-up included): {ios:?}");
        }
    } else {
        println!("Commands per member drive (warm-up included):");
        for (mode, ios) in spread {
            println!("  {:<8} {ios:?}", mode.name());
        }
    }
    if cfg.verify {
        let wrong: u64 = rigs.iter().map(Rig::members_wrong).sum();
        failed |= wrong > 0;
        println!(
            "Member data (every mode): {} sectors not where RAID-0 chunking puts them",
            wrong
        );
    }
    println!();
    // The targets are about CPU cost. With completion threads on fewer cores than there are
    // threads, IOPS follow how the spinning threads share the cores instead: the ratios are
    // printed, not judged.
    let threads = cfg.submitters + cfg.completers;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let judged = !cfg.verify && (cfg.completers == 0 || cores > threads);
    if judged {
        println!("Targets:");
    } else if cfg.verify {
        println!(
            "Targets (not judged: verifying, every read also copies and compares its 4 KiB; \
             run without --verify to measure the block layer's cost):"
        );
    } else {
        println!(
            "Targets (not judged: {threads} spinning threads on {cores} CPUs measure how they \
             share the cores, not CPU cost; see the inline table):"
        );
    }
    for (name, ratio, pass) in targets(&results) {
        let mark = match (judged, pass) {
            (false, _) => "info",
            (true, true) => "pass",
            (true, false) => "FAIL",
        };
        println!("  [{mark}] {name}: {ratio:.3}");
    }
    failed
}
