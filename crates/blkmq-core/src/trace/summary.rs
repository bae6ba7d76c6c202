//! [`TraceSummary`]: `btt`'s latency table from a drained trace.
//!
//! As `btt` does, bios are followed by their sectors and requests by their identity:
//!
//! * A Q leaves the bio's range pending with its time. The G, M or F that takes a range
//!   (the first sector inside a pending range) gives Q2G for a G, and moves the range,
//!   with the Q's time, to the requests; what of the pending range is left (a split bio's
//!   later pieces) stays pending.
//! * G, I, D and C of one request share its hardware queue and tag: G2I is its first
//!   insertion after G, I2D its first issue after that insertion, D2C its completion after
//!   its last issue (a requeued request is issued again). A request issued directly, never
//!   inserted, has neither G2I nor I2D.
//! * A Q of the range and issuer of a Q still pending is a bio that came back and was
//!   submitted again: the first Q stands.
//! * A C ends every range the requests hold inside its own: Q2C for each, and a range per
//!   start sector, the oldest first. An empty range (a flush) counts as its one sector.
//!
//! Events must come in time order ([`RingTracer::drain_sorted`](super::RingTracer::drain_sorted)).

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;
use core::fmt;

use super::{Action, TraceEvent};
use crate::bio::IssuerId;

/// Figures of a set of durations, in nanoseconds; percentiles by nearest rank (the
/// smallest value with at least that share of the samples at or below it).
///
/// ```
/// use blkmq_core::Percentiles;
/// let p = Percentiles::from_samples(&[30, 10, 20]);
/// assert_eq!((p.count, p.min_ns, p.avg_ns, p.p50_ns, p.p99_ns, p.max_ns), (3, 10, 20, 20, 30, 30));
/// assert_eq!(Percentiles::from_samples(&[]).count, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Percentiles {
    /// How many.
    pub count: u64,
    /// The shortest.
    pub min_ns: u64,
    /// The mean, rounded down.
    pub avg_ns: u64,
    /// The median.
    pub p50_ns: u64,
    /// The 99th percentile.
    pub p99_ns: u64,
    /// The longest.
    pub max_ns: u64,
}

impl Percentiles {
    /// The figures of `samples`, in any order.
    ///
    /// ```
    /// use blkmq_core::Percentiles;
    /// let samples: Vec<u64> = (1..=100).collect();
    /// let p = Percentiles::from_samples(&samples);
    /// assert_eq!((p.p50_ns, p.p99_ns, p.avg_ns), (50, 99, 50));
    /// ```
    pub fn from_samples(samples: &[u64]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let n = sorted.len() as u64;
        let at = |per_mille: u64| sorted[((per_mille * n).div_ceil(1000).max(1) - 1) as usize];
        let sum: u128 = sorted.iter().map(|&s| u128::from(s)).sum();
        Self {
            count: n,
            min_ns: sorted[0],
            avg_ns: (sum / u128::from(n)) as u64,
            p50_ns: at(500),
            p99_ns: at(990),
            max_ns: sorted[sorted.len() - 1],
        }
    }
}

/// `btt`'s latency table of a trace: Q2G, G2I, I2D, D2C and Q2C, with Q2C per issuer too.
///
/// ```
/// use blkmq_core::testing::Null;
/// use blkmq_core::*;
/// use std::sync::Arc;
///
/// let rings = Arc::new(RingTracer::new(1, 64));
/// let host = Host::new(TagSet::builder(8), StdPlatform::with_cpus(1), Null::new()).unwrap();
/// let config = QueueConfig::new(QueueLimits::new(1024)).tracer(rings.clone());
/// let queue = host.add_queue(config).unwrap();
/// for i in 0..4 {
///     queue.submit(Bio::new(Op::Read, i * 8, 8).issuer(IssuerId(1))).unwrap();
/// }
/// let summary = TraceSummary::from_events(&rings.drain_sorted());
/// assert_eq!((summary.q2g.count, summary.d2c.count, summary.q2c.count), (4, 4, 4));
/// assert_eq!(summary.g2i.count, 0); // issued directly: never inserted
/// assert_eq!(summary.q2c_by_issuer[&IssuerId(1)].count, 4);
/// assert!(summary.to_string().starts_with("ALL "));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceSummary {
    /// Queued to request allocated.
    pub q2g: Percentiles,
    /// Request allocated to inserted.
    pub g2i: Percentiles,
    /// Inserted to issued.
    pub i2d: Percentiles,
    /// Issued to completed.
    pub d2c: Percentiles,
    /// Queued to completed.
    pub q2c: Percentiles,
    /// Queued to completed, per issuer.
    pub q2c_by_issuer: BTreeMap<IssuerId, Percentiles>,
    /// Bios queued whose completion the trace does not hold (in flight when it was drained,
    /// or their events dropped).
    pub unmatched: u64,
}

/// A range of a bio, with its Q's time and issuer.
#[derive(Clone, Copy)]
struct Range {
    end: u64,
    queued_ns: u64,
    issuer: IssuerId,
}

/// A request's times so far.
#[derive(Clone, Copy, Default)]
struct RqTimes {
    allocated_ns: Option<u64>,
    inserted_ns: Option<u64>,
    issued_ns: Option<u64>,
    i2d_counted: bool,
}

/// Ranges by start sector, oldest first at each.
type Ranges = BTreeMap<u64, VecDeque<Range>>;

/// The range holding `sector`, taken out; what of it lies around `[sector, end)` stays.
fn take_range(ranges: &mut Ranges, sector: u64, end: u64) -> Option<Range> {
    let (&start, list) = ranges.range_mut(..=sector).next_back()?;
    let at = list.iter().position(|r| r.end > sector)?;
    let range = list.remove(at)?;
    if list.is_empty() {
        ranges.remove(&start);
    }
    if start < sector {
        put_range(
            ranges,
            start,
            Range {
                end: sector,
                ..range
            },
        );
    }
    if end < range.end {
        put_range(ranges, end, range);
    }
    Some(range)
}

/// The end of an event's range as followed here: an empty one (a flush) covers its sector.
fn span_end(e: &TraceEvent) -> u64 {
    e.end_sector().max(e.sector + 1)
}

fn put_range(ranges: &mut Ranges, start: u64, range: Range) {
    ranges.entry(start).or_default().push_back(range);
}

impl TraceSummary {
    /// The table of `events`, in time order ([`SummaryBuilder`] one event at a time).
    ///
    /// ```
    /// use blkmq_core::{Action, TraceEvent, TraceSummary};
    /// let at = |action, t| TraceEvent { sector: 0, sectors: 8, hctx: 0, tag: 3,
    ///     ..TraceEvent::new(action, t) };
    /// let events = [
    ///     at(Action::Queue, 0), at(Action::GetRq, 10), at(Action::Insert, 15),
    ///     at(Action::Issue, 40), at(Action::Complete, 100),
    /// ];
    /// let s = TraceSummary::from_events(&events);
    /// let firsts = [s.q2g.min_ns, s.g2i.min_ns, s.i2d.min_ns, s.d2c.min_ns, s.q2c.min_ns];
    /// assert_eq!(firsts, [10, 5, 25, 60, 100]);
    /// ```
    pub fn from_events(events: &[TraceEvent]) -> Self {
        let mut builder = SummaryBuilder::default();
        events.iter().for_each(|e| builder.push(e));
        builder.finish()
    }
}

/// A [`TraceSummary`] made one event at a time, as a trace is drained: it keeps the
/// requests and bios in flight and one duration per figure.
///
/// ```
/// use blkmq_core::{Action, SummaryBuilder, TraceEvent};
/// let mut builder = SummaryBuilder::default();
/// builder.push(&TraceEvent { sectors: 8, ..TraceEvent::new(Action::Queue, 0) });
/// builder.push(&TraceEvent { sectors: 8, hctx: 0, tag: 1, ..TraceEvent::new(Action::GetRq, 5) });
/// let summary = builder.finish();
/// assert_eq!((summary.q2g.max_ns, summary.unmatched), (5, 1)); // never completed
/// ```
#[derive(Default)]
pub struct SummaryBuilder {
    pending: Ranges,
    in_requests: Ranges,
    rqs: BTreeMap<(u32, u32, u32), RqTimes>,
    q2g: Vec<u64>,
    g2i: Vec<u64>,
    i2d: Vec<u64>,
    d2c: Vec<u64>,
    q2c: Vec<u64>,
    by_issuer: BTreeMap<IssuerId, Vec<u64>>,
    queued: u64,
}

impl fmt::Debug for SummaryBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SummaryBuilder")
            .field("queued", &self.queued)
            .field("completed", &self.q2c.len())
            .finish_non_exhaustive()
    }
}

impl SummaryBuilder {
    /// The next event, in time order.
    ///
    /// ```
    /// use blkmq_core::{Action, SummaryBuilder, TraceEvent};
    /// let mut builder = SummaryBuilder::default();
    /// builder.push(&TraceEvent::new(Action::Plug, 0)); // no figure of its own
    /// assert_eq!(builder.finish().q2c.count, 0);
    /// ```
    pub fn push(&mut self, e: &TraceEvent) {
        let key = (e.queue, e.hctx, e.tag);
        let t = e.time_ns;
        let end = span_end(e);
        match e.action {
            Action::Queue => {
                let again = self
                    .pending
                    .get(&e.sector)
                    .is_some_and(|list| list.iter().any(|r| r.end == end && r.issuer == e.issuer));
                if !again {
                    self.queued += 1;
                    let range = Range {
                        end,
                        queued_ns: t,
                        issuer: e.issuer,
                    };
                    put_range(&mut self.pending, e.sector, range);
                }
            }
            Action::GetRq | Action::BackMerge | Action::FrontMerge => {
                if e.action == Action::GetRq {
                    self.rqs.insert(
                        key,
                        RqTimes {
                            allocated_ns: Some(t),
                            ..RqTimes::default()
                        },
                    );
                }
                if let Some(range) = take_range(&mut self.pending, e.sector, end) {
                    if e.action == Action::GetRq {
                        self.q2g.push(t - range.queued_ns);
                    }
                    let end = range.end.min(end);
                    put_range(&mut self.in_requests, e.sector, Range { end, ..range });
                }
            }
            Action::Insert => {
                let rq = self.rqs.entry(key).or_default();
                if rq.inserted_ns.is_none() {
                    if let Some(g) = rq.allocated_ns {
                        self.g2i.push(t - g);
                    }
                    rq.inserted_ns = Some(t);
                }
            }
            Action::Issue => {
                let rq = self.rqs.entry(key).or_default();
                if let (Some(i), false) = (rq.inserted_ns, rq.i2d_counted) {
                    self.i2d.push(t - i);
                    rq.i2d_counted = true;
                }
                rq.issued_ns = Some(t);
            }
            Action::Complete => self.complete(e),
            Action::Split | Action::Plug | Action::Unplug | Action::Requeue => {}
        }
    }

    /// A C: its request's D2C, and Q2C for every range it holds.
    fn complete(&mut self, e: &TraceEvent) {
        let t = e.time_ns;
        if let Some(rq) = self.rqs.remove(&(e.queue, e.hctx, e.tag)) {
            if let Some(d) = rq.issued_ns {
                self.d2c.push(t - d);
            }
        }
        let end = span_end(e);
        let mut at = e.sector;
        while let Some((&start, list)) = self.in_requests.range_mut(at..end).next() {
            at = start + 1;
            let Some(i) = list.iter().position(|r| r.end <= end) else {
                continue;
            };
            if let Some(range) = list.remove(i) {
                self.q2c.push(t - range.queued_ns);
                let by = self.by_issuer.entry(range.issuer).or_default();
                by.push(t - range.queued_ns);
            }
            if list.is_empty() {
                self.in_requests.remove(&start);
            }
        }
    }

    /// The table of the events pushed.
    ///
    /// ```
    /// assert_eq!(blkmq_core::SummaryBuilder::default().finish(), Default::default());
    /// ```
    pub fn finish(self) -> TraceSummary {
        TraceSummary {
            q2g: Percentiles::from_samples(&self.q2g),
            g2i: Percentiles::from_samples(&self.g2i),
            i2d: Percentiles::from_samples(&self.i2d),
            d2c: Percentiles::from_samples(&self.d2c),
            q2c: Percentiles::from_samples(&self.q2c),
            q2c_by_issuer: self
                .by_issuer
                .iter()
                .map(|(i, s)| (*i, Percentiles::from_samples(s)))
                .collect(),
            unmatched: self.queued.saturating_sub(self.q2c.len() as u64),
        }
    }
}

/// Seconds with nine decimals, as `btt` prints them.
struct Secs(u64);

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = alloc::format!("{}.{:09}", self.0 / 1_000_000_000, self.0 % 1_000_000_000);
        write!(f, "{s:>13}")
    }
}

impl fmt::Display for TraceSummary {
    /// `btt`'s table: a row per figure (`Q2G` … `Q2C`), then Q2C per issuer (`Q2C[7]`),
    /// columns MIN, AVG, P50, P99, MAX in seconds and N.
    ///
    /// ```
    /// use blkmq_core::TraceSummary;
    /// let table = TraceSummary::default().to_string();
    /// assert_eq!(table.lines().count(), 6);
    /// assert!(table.lines().nth(1).unwrap().starts_with("Q2G"));
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<8} {:>13} {:>13} {:>13} {:>13} {:>13} {:>8}",
            "ALL", "MIN", "AVG", "P50", "P99", "MAX", "N"
        )?;
        let row = |f: &mut fmt::Formatter<'_>, name: &str, p: &Percentiles| {
            writeln!(
                f,
                "{:<8} {} {} {} {} {} {:>8}",
                name,
                Secs(p.min_ns),
                Secs(p.avg_ns),
                Secs(p.p50_ns),
                Secs(p.p99_ns),
                Secs(p.max_ns),
                p.count
            )
        };
        row(f, "Q2G", &self.q2g)?;
        row(f, "G2I", &self.g2i)?;
        row(f, "I2D", &self.i2d)?;
        row(f, "D2C", &self.d2c)?;
        row(f, "Q2C", &self.q2c)?;
        for (issuer, p) in &self.q2c_by_issuer {
            row(f, &alloc::format!("Q2C[{}]", issuer.0), p)?;
        }
        Ok(())
    }
}
