//! The figures of one set-up ([`Figures`]: `dd`, `find`, iozone, what the driver did and
//! what the queue counted), read from the seed's text or measured, and the names, units
//! and limits of each single [`Figure`].

use blkmq_core::{IoStats, Latency};
use blkmq_sim::{DdResult, IozoneGrid, IozoneTest, SimStats, real_line};

use super::driver::HostStats;

/// The figures of one set-up: `dd`, `find`, iozone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Figures {
    /// `dd if=/dev/mmcblk0 of=/dev/null bs=1M`.
    pub(crate) dd: DdResult,
    /// `time`'s real time of the `dd`.
    pub(crate) dd_real_ns: u64,
    /// `time find . > /dev/null`.
    pub(crate) find_ns: u64,
    /// `iozone -az -i0 -i1 -i2 -s 20m -I`.
    pub(crate) grid: IozoneGrid,
    /// What the host driver and the queue did over the three runs (simulated columns only).
    pub(crate) activity: Option<Activity>,
    /// The queue's I/O accounting over the iozone run (simulated set-ups only).
    pub(crate) counters: Option<Counters>,
}

/// What the queue's I/O accounting counted over one run: its `/proc/diskstats` fields
/// ([`RequestQueue::stats`](blkmq_core::RequestQueue::stats)) and its latency histograms
/// ([`RequestQueue::latency`](blkmq_core::RequestQueue::latency)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Counters {
    /// Requests, merges, sectors and times per operation.
    pub(crate) stats: IoStats,
    /// Completions per log2 bucket of their time from allocation to completion.
    pub(crate) latency: Latency,
}

/// What the host driver and the queue did, summed over a column's runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Activity {
    /// The driver's own counts.
    pub(crate) host: HostStats,
    /// Queue runs the simulation had to kick (a queue that turned a request away with
    /// nothing in flight to restart it).
    pub(crate) kick_runs: u64,
    /// Bios that found no free request and waited for one.
    pub(crate) bios_waited: u64,
}

impl Activity {
    pub(crate) fn add(&mut self, host: HostStats, sim: &SimStats) {
        let h = &mut self.host;
        h.started_idle += host.started_idle;
        h.prepared_behind += host.prepared_behind;
        h.resource_busy += host.resource_busy;
        h.interrupts += host.interrupts;
        h.started_from_irq += host.started_from_irq;
        self.kick_runs += sim.kick_runs;
        self.bios_waited += sim.bios_waited;
    }
}

/// The seed's text before and after the naive switch to blk-mq, as posted.
pub(crate) use blkmq_sim::{SEED_000_AFTER as SEED_AFTER, SEED_000_BEFORE as SEED_BEFORE};

/// `47.781464` as nanoseconds.
fn parse_seconds(text: &str) -> Option<u64> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if frac.len() > 9 {
        return None;
    }
    let frac_ns: u64 = format!("{frac:0<9}").parse().ok()?;
    Some(whole.parse::<u64>().ok()? * 1_000_000_000 + frac_ns)
}

/// `real    1m 0.56s` as nanoseconds.
fn parse_real(line: &str) -> Option<u64> {
    let rest = line.strip_prefix("real")?.trim();
    let (minutes, seconds) = rest.split_once('m')?;
    let seconds = seconds.trim().strip_suffix('s')?;
    Some(minutes.trim().parse::<u64>().ok()? * 60_000_000_000 + parse_seconds(seconds)?)
}

impl Figures {
    /// Reads the figures from the seed's text: the `dd` result line, the two `real` lines
    /// (`dd`'s, then `find`'s) and the iozone grid.
    pub(crate) fn parse_seed(text: &str) -> Option<Figures> {
        let copied = text.lines().find(|l| l.contains(" copied, "))?;
        let bytes = copied.split_whitespace().next()?.parse().ok()?;
        let (_, after) = copied.split_once(" copied, ")?;
        let elapsed_ns = parse_seconds(after.split_whitespace().next()?)?;
        let mut reals = text.lines().filter_map(parse_real);
        let dd_real_ns = reals.next()?;
        let find_ns = reals.next()?;
        Some(Figures {
            dd: DdResult {
                bytes,
                elapsed_ns,
                block_bytes: 1 << 20,
                errors: 0,
            },
            dd_real_ns,
            find_ns,
            grid: IozoneGrid::parse(text)?,
            activity: None,
            counters: None,
        })
    }

    /// The `dd` block as the seed shows it (without `user` and `sys`).
    pub(crate) fn dd_text(&self) -> String {
        format!("{}\n{}", self.dd, real_line(self.dd_real_ns))
    }

    /// The `find` line as the seed shows it.
    pub(crate) fn find_text(&self) -> String {
        real_line(self.find_ns)
    }
}

/// One figure of the seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Figure {
    /// `dd`'s rate.
    Dd,
    /// `find`'s real time.
    Find,
    /// An iozone cell: record size in kB, test.
    Iozone(u64, IozoneTest),
}

impl Figure {
    /// Its name and unit in the tables.
    pub(crate) fn name(self) -> String {
        match self {
            Figure::Dd => "dd (MB/s)".into(),
            Figure::Find => "find (s)".into(),
            Figure::Iozone(reclen, test) => format!("iozone {reclen} kB {} (kB/s)", test.name()),
        }
    }

    /// Whether a larger value is better (rates), or a smaller one (times).
    pub(crate) fn higher_is_better(self) -> bool {
        !matches!(self, Figure::Find)
    }

    /// How far the model may be from the seed in the calibration (a fraction).
    pub(crate) fn calibration_limit(self) -> f64 {
        match self {
            Figure::Dd => 0.05,
            Figure::Find => 0.10,
            Figure::Iozone(..) => 0.20,
        }
    }

    /// The value as the tables print it.
    pub(crate) fn show(self, value: f64) -> String {
        match self {
            Figure::Dd => format!("{value:.3}"),
            Figure::Find => format!("{value:.4}"),
            Figure::Iozone(..) => format!("{value:.0}"),
        }
    }
}

impl Figures {
    /// The value of `figure`: `dd` in MB/s as busybox counts them (2^20 bytes), `find` in
    /// seconds, iozone in kB/s.
    pub(crate) fn value(&self, figure: Figure) -> Option<f64> {
        match figure {
            Figure::Dd => {
                let seconds = self.dd.elapsed_ns.max(1) as f64 / 1e9;
                Some(self.dd.bytes as f64 / seconds / f64::from(1 << 20))
            }
            Figure::Find => Some(self.find_ns as f64 / 1e9),
            Figure::Iozone(reclen, test) => self.grid.get(reclen, test).map(|v| v as f64),
        }
    }
}
