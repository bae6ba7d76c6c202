//! Responsiveness: an application starting up (its first reads, one at a time, by an
//! issuer new to the queue) on an idle card and under background writers, for each column
//! with the pipelined driver.

use blkmq_core::IssuerId;
use blkmq_sim::{Dd, FioJob, Pattern};

use super::Fallible;
use super::scenario::{COLUMNS, Column, Expect, Setup, host_sim};

/// An application starting up: its first reads, 4 KiB each, one at a time, spread over
/// 64 MiB (libraries, configuration), by an issuer new to the queue.
pub(crate) const STARTUP_READS: u64 = 128;
/// When it starts: the background writers have filled the queue by then.
pub(crate) const STARTUP_AT_NS: u64 = 1_000_000_000;
/// Background writers: each a `dd` writing through the page cache, 16 bios of 128 KiB in
/// flight (writeback), far from the start-up's reads and from each other.
pub(crate) const STARTUP_WRITERS: u32 = 4;
/// What each writer writes.
pub(crate) const STARTUP_WRITE_BYTES: u64 = 48 << 20;

/// How long a column takes to serve the start-up burst, alone and under the writers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Startup {
    /// On an idle card.
    pub(crate) idle_ns: u64,
    /// Under the background writers.
    pub(crate) loaded_ns: u64,
    /// What the writers moved per second meanwhile (loaded run), in bytes.
    pub(crate) writers_bytes_per_sec: u64,
}

impl Startup {
    /// Loaded over idle.
    pub(crate) fn slowdown(&self) -> f64 {
        self.loaded_ns as f64 / self.idle_ns as f64
    }
}

/// The start-up burst on `column`, with the background writers when `loaded`: its time
/// from start to last completion, and the writers' rate over the run.
fn startup_run(column: &Column, setup: Setup, loaded: bool) -> Fallible<(u64, u64)> {
    let (mut sim, queue) = host_sim(column, setup)?;
    let mut writers = Vec::new();
    if loaded {
        for i in 0..STARTUP_WRITERS {
            let start = (u64::from(i) + 1) * (256 << 11); // 256 MiB apart, in sectors
            let dd = Dd::write(start, STARTUP_WRITE_BYTES)
                .issuer(IssuerId(100 + i))
                .window(16)
                .refill(8);
            writers.push(sim.add_workload(queue, dd));
        }
    }
    let burst = FioJob::new(IssuerId(1), Pattern::RandRead, 4096, 1, STARTUP_READS)
        .region(2 << 21, 64 << 11) // at 2 GiB, 64 MiB long
        .seed(7);
    let burst = sim.add_workload_on(queue, 0, STARTUP_AT_NS, burst);
    let report = sim.run()?;
    let ended = &report.workloads[burst.index()];
    if !ended.finished || ended.ios != STARTUP_READS {
        return Err(format!("{}: the start-up burst did not finish", column.name).into());
    }
    let written: u64 = writers
        .iter()
        .map(|w| report.workloads[w.index()].bytes_written)
        .sum();
    let span = writers
        .iter()
        .map(|w| report.workloads[w.index()].end_ns)
        .max()
        .unwrap_or(0);
    let rate = if span == 0 {
        0
    } else {
        (u128::from(written) * 1_000_000_000 / u128::from(span)) as u64
    };
    Ok((ended.elapsed_ns(), rate))
}

/// The start-up burst on `column`, idle and loaded.
pub(crate) fn run_startup(column: &Column, setup: Setup) -> Fallible<Startup> {
    let (idle_ns, _) = startup_run(column, setup, false)?;
    let (loaded_ns, writers_bytes_per_sec) = startup_run(column, setup, true)?;
    Ok(Startup {
        idle_ns,
        loaded_ns,
        writers_bytes_per_sec,
    })
}

/// The columns the responsiveness table compares: every one with the pipelined driver.
pub(crate) fn startup_columns() -> impl Iterator<Item = &'static Column> {
    COLUMNS.iter().filter(|c| c.expect == Expect::NoWorse)
}
