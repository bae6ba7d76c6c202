//! Reports: what a run did ([`SimReport`]: per workload, per issuer with latency
//! percentiles), and the seeds' own output formats — `dd`'s result line, `time`'s `real`
//! line — and a way to set several reports side by side (one column per scheduler).
//! The iozone grid is [`IozoneGrid`](crate::IozoneGrid).

use std::fmt;

use blkmq_core::IssuerId;

/// Latency percentiles of a set of I/Os (nearest rank), in nanoseconds.
///
/// ```
/// use blkmq_sim::LatencyStats;
/// let samples: Vec<u64> = (1..=1000).collect();
/// let l = LatencyStats::from_samples(&samples);
/// assert_eq!((l.count, l.min_ns, l.max_ns), (1000, 1, 1000));
/// assert_eq!((l.p50_ns, l.p90_ns, l.p99_ns, l.p999_ns), (500, 900, 990, 999));
/// assert_eq!(l.mean_ns, 500); // 500.5, rounded down
/// assert_eq!(LatencyStats::from_samples(&[]), LatencyStats::default());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencyStats {
    /// How many I/Os.
    pub count: u64,
    /// The shortest.
    pub min_ns: u64,
    /// The mean, rounded down.
    pub mean_ns: u64,
    /// The median.
    pub p50_ns: u64,
    /// The 90th percentile.
    pub p90_ns: u64,
    /// The 99th percentile.
    pub p99_ns: u64,
    /// The 99.9th percentile.
    pub p999_ns: u64,
    /// The longest.
    pub max_ns: u64,
}

impl LatencyStats {
    /// The percentiles of `samples` (in any order).
    ///
    /// ```
    /// use blkmq_sim::LatencyStats;
    /// let l = LatencyStats::from_samples(&[30, 10, 20]);
    /// assert_eq!((l.min_ns, l.p50_ns, l.max_ns, l.mean_ns), (10, 20, 30, 20));
    /// ```
    pub fn from_samples(samples: &[u64]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let n = sorted.len() as u64;
        // Nearest rank: the smallest value with at least `per_mille / 1000` of the
        // samples at or below it.
        let at = |per_mille: u64| {
            let rank = (per_mille * n).div_ceil(1000).max(1);
            sorted[(rank - 1) as usize]
        };
        let sum: u128 = sorted.iter().map(|&s| u128::from(s)).sum();
        Self {
            count: n,
            min_ns: sorted[0],
            mean_ns: (sum / u128::from(n)) as u64,
            p50_ns: at(500),
            p90_ns: at(900),
            p99_ns: at(990),
            p999_ns: at(999),
            max_ns: sorted[sorted.len() - 1],
        }
    }
}

impl fmt::Display for LatencyStats {
    /// Microseconds: `n=… min/avg/max=…/…/… p50=… p90=… p99=… p99.9=…`.
    ///
    /// ```
    /// use blkmq_sim::LatencyStats;
    /// let l = LatencyStats::from_samples(&[1_000, 3_000]);
    /// assert_eq!(l.to_string(), "n=2 min/avg/max=1.0/2.0/3.0 us p50=1.0 p90=3.0 p99=3.0 p99.9=3.0");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = |ns: u64| ns as f64 / 1000.0;
        write!(
            f,
            "n={} min/avg/max={:.1}/{:.1}/{:.1} us p50={:.1} p90={:.1} p99={:.1} p99.9={:.1}",
            self.count,
            us(self.min_ns),
            us(self.mean_ns),
            us(self.max_ns),
            us(self.p50_ns),
            us(self.p90_ns),
            us(self.p99_ns),
            us(self.p999_ns)
        )
    }
}

/// Counters of a whole run.
///
/// ```
/// use blkmq_sim::SimStats;
/// let s = SimStats::default();
/// assert_eq!(s.bios_submitted, s.end_io_calls);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Bios the workloads submitted.
    pub bios_submitted: u64,
    /// Bio ends seen, each bio counted once.
    pub end_io_calls: u64,
    /// Ends of a bio already ended (a double completion: a bug somewhere).
    pub stale_end_io: u64,
    /// Ends of bios not of this simulation (should stay 0).
    pub foreign_end_io: u64,
    /// Bios that ended with an error.
    pub errors: u64,
    /// Submissions that found no free request and waited.
    pub bios_waited: u64,
    /// Interrupts handled.
    pub irqs: u64,
    /// Kicked queue runs.
    pub kick_runs: u64,
    /// Kicked runs that kicked again, deferred by [`SimConfig::kick_retry_ns`](crate::SimConfig::kick_retry_ns).
    pub kick_retries: u64,
    /// Elevator timer runs.
    pub timer_runs: u64,
    /// Requests timed out.
    pub timeouts: u64,
}

/// What one workload did.
///
/// ```
/// use blkmq_sim::{Dd, Ideal, IdealParams, Sim};
/// let (mut sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
/// sim.add_workload(queue, Dd::write(0, 1 << 20));
/// let w = &sim.run().unwrap().workloads[0];
/// assert_eq!((w.bytes_written, w.issued_bytes, w.claimed_bytes), (1 << 20, 1 << 20, 1 << 20));
/// assert!(w.finished && w.elapsed_ns() > 0);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadReport {
    /// Its name.
    pub name: String,
    /// The queue it ran on (its index).
    pub queue: usize,
    /// The CPU it submitted from.
    pub cpu: usize,
    /// When it started.
    pub start_ns: u64,
    /// When it finished (or the report's time, if it did not).
    pub end_ns: u64,
    /// Whether it finished.
    pub finished: bool,
    /// I/Os that ended.
    pub ios: u64,
    /// Bytes read by I/Os that ended well.
    pub bytes_read: u64,
    /// Bytes written by I/Os that ended well.
    pub bytes_written: u64,
    /// Bytes of other operations (discard, write-zeroes) that ended well.
    pub bytes_other: u64,
    /// Bytes of every I/O it submitted.
    pub issued_bytes: u64,
    /// The bytes it meant to move ([`Workload::claimed_bytes`](crate::Workload::claimed_bytes)).
    pub claimed_bytes: u64,
    /// I/Os that ended with an error.
    pub errors: u64,
}

impl WorkloadReport {
    /// From start to finish.
    ///
    /// ```
    /// use blkmq_sim::{Dd, Ideal, IdealParams, Sim};
    /// let params = IdealParams { latency_ns: 2_000, bandwidth: 0, ..Default::default() };
    /// let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
    /// sim.add_workload_on(queue, 0, 1_000, Dd::read(0, 4096));
    /// assert_eq!(sim.run().unwrap().workloads[0].elapsed_ns(), 2_000);
    /// ```
    pub fn elapsed_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }

    /// Bytes moved (read, written and other).
    ///
    /// ```
    /// # use blkmq_sim::{Dd, Ideal, IdealParams, Sim};
    /// # let (mut sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
    /// sim.add_workload(queue, Dd::read(0, 4096));
    /// assert_eq!(sim.run().unwrap().workloads[0].bytes(), 4096);
    /// ```
    pub fn bytes(&self) -> u64 {
        self.bytes_read + self.bytes_written + self.bytes_other
    }

    /// Bytes moved per second of its elapsed time (0 if none elapsed).
    ///
    /// ```
    /// # use blkmq_sim::{Dd, Ideal, IdealParams, Sim};
    /// let params = IdealParams { latency_ns: 1_000_000, bandwidth: 0, ..Default::default() };
    /// let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
    /// sim.add_workload(queue, Dd::read(0, 4096)); // one bio, 1 ms
    /// assert_eq!(sim.run().unwrap().workloads[0].bytes_per_sec(), 4_096_000.0);
    /// ```
    pub fn bytes_per_sec(&self) -> f64 {
        rate(self.bytes(), self.elapsed_ns())
    }
}

/// What one issuer's I/O did.
///
/// ```
/// use blkmq_core::IssuerId;
/// use blkmq_sim::{FioJob, Ideal, IdealParams, Pattern, Sim};
/// let (mut sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
/// sim.add_workload(queue, FioJob::new(IssuerId(7), Pattern::RandRead, 4096, 4, 100));
/// let report = sim.run().unwrap();
/// let issuer = &report.issuers[0];
/// assert_eq!((issuer.issuer, issuer.ios, issuer.bytes_read), (IssuerId(7), 100, 409_600));
/// assert_eq!(issuer.latency.count, 100);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuerReport {
    /// The issuer.
    pub issuer: IssuerId,
    /// I/Os that ended.
    pub ios: u64,
    /// Bytes read by I/Os that ended well.
    pub bytes_read: u64,
    /// Bytes written by I/Os that ended well.
    pub bytes_written: u64,
    /// Its first submission.
    pub first_ns: u64,
    /// Its last completion.
    pub last_ns: u64,
    /// Latencies from submission (waiting for a request included) to completion.
    pub latency: LatencyStats,
}

impl IssuerReport {
    /// Bytes read and written per second, from its first submission to its last completion.
    ///
    /// ```
    /// use blkmq_core::IssuerId;
    /// use blkmq_sim::{FioJob, Ideal, IdealParams, Pattern, Sim};
    /// let params = IdealParams { latency_ns: 1_000_000, bandwidth: 0, ..Default::default() };
    /// let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
    /// sim.add_workload(queue, FioJob::new(IssuerId(1), Pattern::RandRead, 4096, 1, 10));
    /// let report = sim.run().unwrap();
    /// assert_eq!(report.issuers[0].bytes_per_sec(), 4_096_000.0); // 4 KiB per ms
    /// ```
    pub fn bytes_per_sec(&self) -> f64 {
        rate(
            self.bytes_read + self.bytes_written,
            self.last_ns - self.first_ns,
        )
    }
}

/// What a run did.
///
/// Requests, merges and sectors are not counted here again: [`queues`](Self::queues) is
/// each queue's own I/O accounting, and the `queue N:` lines `Display` prints come from it.
/// What the simulation counts itself is what the queue cannot see: bios ([`SimStats`]: one
/// bio becomes part of a request or a request of its own), what each workload and issuer
/// moved, and the event loop's interrupts, kicks and timers. Over a run without splits the
/// two agree: each bio submitted is a request completed or a merge, and the bytes the
/// workloads moved are the sectors the queues completed (`tests/accounting.rs`).
///
/// ```
/// use blkmq_sim::{Dd, Ideal, IdealParams, Sim};
/// let (mut sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
/// sim.add_workload(queue, Dd::read(0, 1 << 20));
/// let report = sim.run().unwrap();
/// assert_eq!(report.stats.bios_submitted, 8); // 128 KiB bios
/// assert!(report.to_string().contains("dd read"));
/// let device = report.queues[0].unwrap(); // what the block layer counted
/// assert_eq!(device.op(blkmq_core::OpGroup::Read).sectors, 2048);
/// assert_eq!(device.in_flight_total(), 0);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimReport {
    /// The virtual time at the end.
    pub now_ns: u64,
    /// Events handled.
    pub events: u64,
    /// Counters.
    pub stats: SimStats,
    /// Per workload, in the order they were added.
    pub workloads: Vec<WorkloadReport>,
    /// Per issuer, by issuer id.
    pub issuers: Vec<IssuerReport>,
    /// Per request queue, in the order they were added, its I/O accounting
    /// ([`RequestQueue::stats`](blkmq_core::RequestQueue::stats)): requests, merges, sectors
    /// and times per operation as the block layer counted them; `None` where it is off.
    pub queues: Vec<Option<blkmq_core::IoStats>>,
}

impl fmt::Display for SimReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.stats;
        writeln!(
            f,
            "virtual time {:.6} s, {} events, {} interrupts, {} kicked runs",
            secs(self.now_ns),
            self.events,
            s.irqs,
            s.kick_runs
        )?;
        writeln!(
            f,
            "bios: {} submitted, {} ended, {} ended twice, {} errors, {} waited for a request",
            s.bios_submitted, s.end_io_calls, s.stale_end_io, s.errors, s.bios_waited
        )?;
        for (i, stats) in self.queues.iter().enumerate() {
            if let Some(stats) = stats {
                writeln!(
                    f,
                    "queue {i}: {} requests, {} merges; diskstats {stats}",
                    stats.ios(),
                    stats.merges()
                )?;
            }
        }
        writeln!(
            f,
            "{:<24} {:>3} {:>12} {:>12} {:>12} {:>12} {:>9} {:>10}",
            "workload", "cpu", "start s", "elapsed s", "read B", "written B", "ios", "MiB/s"
        )?;
        for w in &self.workloads {
            writeln!(
                f,
                "{:<24} {:>3} {:>12.6} {:>12.6} {:>12} {:>12} {:>9} {:>10.2}",
                w.name,
                w.cpu,
                secs(w.start_ns),
                secs(w.elapsed_ns()),
                w.bytes_read,
                w.bytes_written,
                w.ios,
                w.bytes_per_sec() / MIB
            )?;
        }
        f.write_str(&issuer_table(&self.issuers))
    }
}

const MIB: f64 = 1024.0 * 1024.0;

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn rate(bytes: u64, ns: u64) -> f64 {
    if ns == 0 {
        0.0
    } else {
        bytes as f64 * 1e9 / ns as f64
    }
}

/// A table of per-issuer bandwidth and latency percentiles (microseconds).
///
/// ```
/// use blkmq_core::IssuerId;
/// use blkmq_sim::{FioJob, Ideal, IdealParams, Pattern, Sim, issuer_table};
/// let (mut sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
/// sim.add_workload(queue, FioJob::new(IssuerId(1), Pattern::RandRead, 4096, 1, 10));
/// let table = issuer_table(&sim.run().unwrap().issuers);
/// assert!(table.lines().next().unwrap().starts_with("issuer"));
/// assert_eq!(table.lines().count(), 2);
/// ```
pub fn issuer_table(issuers: &[IssuerReport]) -> String {
    let mut out = format!(
        "{:<8} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
        "issuer", "ios", "MiB/s", "avg us", "p50 us", "p90 us", "p99 us", "p99.9 us", "max us"
    );
    for i in issuers {
        let us = |ns: u64| ns as f64 / 1000.0;
        out.push_str(&format!(
            "{:<8} {:>9} {:>10.2} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1}\n",
            i.issuer.0,
            i.ios,
            i.bytes_per_sec() / MIB,
            us(i.latency.mean_ns),
            us(i.latency.p50_ns),
            us(i.latency.p90_ns),
            us(i.latency.p99_ns),
            us(i.latency.p999_ns),
            us(i.latency.max_ns)
        ));
    }
    out
}

/// A size as busybox prints one (`make_human_readable_str`): scaled by 1024 to a unit
/// letter with one decimal, the decimal rounded from the last remainder.
///
/// ```
/// use blkmq_sim::busybox_size;
/// assert_eq!(busybox_size(1_073_741_824), "1.0G");
/// assert_eq!(busybox_size(22_471_597), "21.4M");
/// assert_eq!(busybox_size(1000), "1000");
/// assert_eq!(busybox_size(0), "0");
/// ```
pub fn busybox_size(value: u64) -> String {
    const UNITS: [char; 6] = ['K', 'M', 'G', 'T', 'P', 'E'];
    let mut val = value;
    let mut frac = 0;
    let mut unit = None;
    while val >= 1024 && unit.is_none_or(|u| u + 1 < UNITS.len()) {
        frac = ((val % 1024) * 10 + 512) / 1024;
        val /= 1024;
        unit = Some(unit.map_or(0, |u| u + 1));
    }
    if frac >= 10 {
        val += 1;
        frac = 0;
    }
    match unit {
        None => val.to_string(),
        Some(u) => format!("{val}.{frac}{}", UNITS[u]),
    }
}

/// `dd`'s result line (busybox): bytes, their size, seconds to the microsecond, and the
/// rate.
///
/// ```
/// use blkmq_sim::dd_line;
/// assert_eq!(
///     dd_line(1_073_741_824, 47_781_464_000),
///     "1073741824 bytes (1.0GB) copied, 47.781464 seconds, 21.4MB/s"
/// );
/// assert_eq!(
///     dd_line(1_073_741_824, 60_551_117_000),
///     "1073741824 bytes (1.0GB) copied, 60.551117 seconds, 16.9MB/s"
/// );
/// ```
pub fn dd_line(bytes: u64, elapsed_ns: u64) -> String {
    let seconds = secs(elapsed_ns);
    let per_sec = if elapsed_ns == 0 {
        0
    } else {
        (u128::from(bytes) * 1_000_000_000 / u128::from(elapsed_ns)) as u64
    };
    format!(
        "{bytes} bytes ({}B) copied, {seconds:.6} seconds, {}B/s",
        busybox_size(bytes),
        busybox_size(per_sec)
    )
}

/// `time`'s `real` line as the seed shows it (busybox), centiseconds truncated.
///
/// ```
/// use blkmq_sim::real_line;
/// assert_eq!(real_line(3_600_000_000), "real    0m 3.60s");
/// assert_eq!(real_line(60_561_117_000), "real    1m 0.56s");
/// ```
pub fn real_line(elapsed_ns: u64) -> String {
    let centis = elapsed_ns / 10_000_000;
    let secs = centis / 100;
    format!("real    {}m {}.{:02}s", secs / 60, secs % 60, centis % 100)
}

/// Sets text blocks side by side, each under its title, columns padded to the widest
/// line of each block, two spaces apart: one column per scheduler, say.
///
/// ```
/// use blkmq_sim::side_by_side;
/// let text = side_by_side(&[("none", "a\nbb"), ("mq-deadline", "ccc")]);
/// assert_eq!(text, "none  mq-deadline\na     ccc\nbb\n");
/// ```
pub fn side_by_side(blocks: &[(&str, &str)]) -> String {
    let columns: Vec<Vec<&str>> = blocks
        .iter()
        .map(|(title, text)| std::iter::once(*title).chain(text.lines()).collect())
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .map(|c| c.iter().map(|l| l.chars().count()).max().unwrap_or(0))
        .collect();
    let rows = columns.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = String::new();
    for row in 0..rows {
        let mut line = String::new();
        for (c, column) in columns.iter().enumerate() {
            let cell = column.get(row).copied().unwrap_or("");
            if c > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            let pad = widths[c] - cell.chars().count();
            line.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
