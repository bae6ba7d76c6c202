//! I/O accounting: the fields of `/proc/diskstats` per request queue and per hardware queue,
//! latency histograms per operation, and the arithmetic `iostat -x` does between two
//! readings (Linux's `block/blk-core.c` `blk_account_io_*`, `update_io_ticks`,
//! `part_stat_*`).
//!
//! Off unless [`QueueConfig::accounting`](crate::QueueConfig::accounting) turns it on (Linux's
//! `QUEUE_FLAG_IO_STAT`); off, a queue pays one predictable branch at each point below and
//! reads no clock for it.
//!
//! # What is counted, where
//!
//! * **A request made for a bio** (allocated and given the bio, Linux's
//!   `blk_account_io_start`): the time, kept in the request; one more made for its
//!   direction (reads; everything else); the busy time brought up to date (below).
//! * **A bio merged into a request**, in a plug, a software queue or an elevator, and a
//!   request merged into another (Linux's `blk_account_io_merge_bio` and
//!   `blk_account_io_merge_request`): merges plus one for the operation; a request merged
//!   away is counted as gone, so it leaves in flight.
//! * **A request completed** (Linux's `blk_account_io_done`): completions, sectors and the
//!   time from the request's allocation to now (Linux's `now - rq->start_time_ns`, whose stamp
//!   is set at allocation too), for its operation; the same time in the operation's latency
//!   histogram; the busy time. Each step of a flush sequence is the same request going on,
//!   not a completion: it is counted once, when the sequence ends it.
//!
//! Both times come from the platform's [coarse clock](crate::Platform::coarse_now_ns) (the
//! one the start stamp for timeouts is read from; on `StdPlatform` under Linux,
//! `CLOCK_MONOTONIC_COARSE`), one reading at each end: a precise reading costs several times
//! the rest of the accounting. So a single time has the coarse clock's resolution (a kernel
//! tick there, 1 to 4 ms), while sums and means over many requests stay exact on average (a
//! request's start and end fall at random within their ticks); a platform whose coarse
//! clock is its precise one (the default of [`Platform`](crate::Platform)) gives exact times.
//!
//! Operations group as Linux's `op_stat_group`: reads; writes and write-zeroes; discards;
//! flushes.
//!
//! # No line shared between CPUs written per I/O, no locked instruction
//!
//! Every counter is kept per CPU and per hardware queue, each CPU's on cache lines of its own,
//! and a reading sums the parts. Each part has two halves:
//!
//! * **Its own half**, written only by the context that holds the CPU's id alone
//!   ([`Platform::exclusive_cpu`](crate::Platform::exclusive_cpu): a kernel CPU with
//!   preemption off, or on `StdPlatform` the thread that claimed the slot first): a relaxed
//!   load and a relaxed store per counter, no locked read-modify-write. One writer at a
//!   time, and the next holder's acquire of the id sees the last one's stores, so no count
//!   is lost; a reading loads each counter whole.
//! * **Its shared half**, for everyone else on that CPU (a thread sharing a slot with the
//!   holder, a platform that promises nothing): a relaxed `fetch_add`, as exact from any
//!   number of writers.
//!
//! Each hook asks the platform once, and counts every counter of its step in the half it
//! got. A thread that moves between CPUs meanwhile only adds to another CPU's part, never
//! loses a count. In flight is the requests made (counted on the submitting CPU) less
//! those completed (counted on the completing one, by the completion counter it bumps
//! anyway) and merged away, so one CPU's part may be below zero; only the sum means
//! anything (Linux's `part_in_flight`). The latency histograms are per CPU, in the same two
//! halves.
//!
//! The start of a request issued at once shares its clock reading with the issue: the
//! request's start stamp (for timeouts) is the one accounting took at its allocation, a
//! moment before.
//!
//! # One clock reading per submission
//!
//! A driver that ends a request inside `queue_rq` (a RAM disk, a null device) ends it
//! inside the submission that read the clock for its start. Such a completion takes that
//! reading as its end and reads no clock, when the submitter holds its CPU alone and the
//! hardware queues do not block ([`TagSetFlags::BLOCKING`](crate::TagSetFlags::BLOCKING)
//! unset): the submission marks its CPU's part with its reading, and a completion by the
//! same holder (so on the same thread, inside that submission) before the mark is gone
//! uses it. Every request ended meanwhile, its own or one queued before it, ends between
//! the reading and the submission's return, a span of a `queue_rq` that may not sleep: well
//! within the coarse clock's tick, which is what the times are good to anyway. The end is
//! the later of the reading and the request's own start (one another CPU made after the
//! reading may be ended by this submission), so never before the start, and the busy
//! time's stamp only moves forward whatever it is given. The mark goes when the
//! submission returns or unwinds; a completion elsewhere (another thread, a later poll, a
//! blocking queue, a caller without its CPU alone) reads the clock as before.
//!
//! The busy time (`io_ticks`) follows Linux's `update_io_ticks`: a stamp of the last
//! [tick](IO_TICK_NS) anything looked, read at each point above and written at most once per
//! tick by whoever first sees the tick change; that one adds the ticks since the stamp when a
//! completion brings it or anything is in flight. So the busy time has the tick's resolution,
//! and the stamp's line is written once per tick, not per I/O. The stamp is kept as the
//! time its next tick starts, so a look within the tick is one comparison; the queue's is
//! looked at when a hardware queue's moves (a look within that one's tick would find the
//! queue's up to date too), so an I/O reads one stamp, not two.

use alloc::boxed::Box;
use core::fmt;

use crossbeam_utils::CachePadded;

use crate::bio::Op;
use crate::request::RqIo;
use crate::sync::{AtomicU64, Ordering};

/// The tick of the busy time (`io_ticks`), in nanoseconds: 1 ms (Linux's jiffy at `HZ=1000`).
pub const IO_TICK_NS: u64 = 1_000_000;

/// Buckets of a [`Latency`] histogram: bucket `i` holds times of at least `2^i` and below
/// `2^(i+1)` nanoseconds (bucket 0 also holds 0), the last everything from `2^39` ns (about
/// 9 minutes) up.
pub const LATENCY_BUCKETS: usize = 40;

/// How operations group in the counters (Linux's `enum stat_group`).
///
/// ```
/// use blkmq_core::{Op, OpGroup};
/// assert_eq!(OpGroup::of(Op::Read), OpGroup::Read);
/// assert_eq!(OpGroup::of(Op::WriteZeroes), OpGroup::Write);
/// assert_eq!(OpGroup::of(Op::Discard), OpGroup::Discard);
/// assert_eq!(OpGroup::of(Op::Flush) as usize, 3);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpGroup {
    /// Reads.
    Read = 0,
    /// Writes and write-zeroes.
    Write = 1,
    /// Discards.
    Discard = 2,
    /// Cache flushes.
    Flush = 3,
}

impl OpGroup {
    /// Every group, in index order.
    pub const ALL: [OpGroup; 4] = [
        OpGroup::Read,
        OpGroup::Write,
        OpGroup::Discard,
        OpGroup::Flush,
    ];

    /// The group `op` counts in.
    ///
    /// ```
    /// use blkmq_core::{Op, OpGroup};
    /// assert_eq!(OpGroup::of(Op::Write), OpGroup::Write);
    /// ```
    #[inline]
    pub const fn of(op: Op) -> OpGroup {
        match op {
            Op::Read => OpGroup::Read,
            Op::Write | Op::WriteZeroes => OpGroup::Write,
            Op::Discard => OpGroup::Discard,
            Op::Flush => OpGroup::Flush,
        }
    }
}

/// The counters of one operation group in an [`IoStats`].
///
/// ```
/// use blkmq_core::OpStats;
/// let reads = OpStats { ios: 2, merges: 1, sectors: 24, nsecs: 3_000_000 };
/// assert_eq!(reads.nsecs / reads.ios, 1_500_000); // 1.5 ms each on average
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpStats {
    /// Requests completed.
    pub ios: u64,
    /// Bios merged into a request, and requests merged into another.
    pub merges: u64,
    /// Sectors completed.
    pub sectors: u64,
    /// Time from each request's allocation to its completion, summed (ns).
    pub nsecs: u64,
}

/// A reading of a queue's (or a hardware queue's) counters: the fields of one
/// `/proc/diskstats` line, from [`RequestQueue::stats`](crate::RequestQueue::stats) or
/// [`RequestQueue::hctx_stats`](crate::RequestQueue::hctx_stats).
///
/// `Display` writes the line without its device numbers and name, times in milliseconds as
/// Linux does: reads (ios, merges, sectors, ms), writes (the same four), in flight, busy ms,
/// weighted ms, discards (four), flushes (ios, ms).
///
/// ```
/// use blkmq_core::{IoStats, OpStats};
/// let mut stats = IoStats::default();
/// stats.ops[0] = OpStats { ios: 4, merges: 1, sectors: 32, nsecs: 8_000_000 };
/// stats.in_flight = [1, 0];
/// stats.io_ticks_ns = 6_000_000;
/// assert_eq!(stats.time_in_queue_ns(), 8_000_000);
/// assert_eq!(stats.to_string(), "4 1 32 8 0 0 0 0 1 6 8 0 0 0 0 0 0");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Per [`OpGroup`], indexed by `OpGroup as usize`.
    pub ops: [OpStats; 4],
    /// Requests in flight (made, not yet completed nor merged away): reads, then everything
    /// else (Linux's sysfs `inflight`).
    pub in_flight: [u64; 2],
    /// Time with anything in flight (ns), to the [tick](IO_TICK_NS).
    pub io_ticks_ns: u64,
}

impl IoStats {
    /// The counters of `group`.
    ///
    /// ```
    /// use blkmq_core::{IoStats, OpGroup};
    /// assert_eq!(IoStats::default().op(OpGroup::Write).ios, 0);
    /// ```
    pub fn op(&self, group: OpGroup) -> &OpStats {
        &self.ops[group as usize]
    }

    /// Requests in flight, both directions.
    ///
    /// ```
    /// use blkmq_core::IoStats;
    /// let stats = IoStats { in_flight: [2, 3], ..IoStats::default() };
    /// assert_eq!(stats.in_flight_total(), 5);
    /// ```
    pub fn in_flight_total(&self) -> u64 {
        self.in_flight[0] + self.in_flight[1]
    }

    /// Requests completed, every group.
    ///
    /// ```
    /// use blkmq_core::{IoStats, OpStats};
    /// let mut stats = IoStats::default();
    /// stats.ops[1].ios = 3;
    /// stats.ops[3].ios = 1;
    /// assert_eq!(stats.ios(), 4);
    /// ```
    pub fn ios(&self) -> u64 {
        self.ops.iter().map(|o| o.ios).sum()
    }

    /// Merges, every group.
    ///
    /// ```
    /// use blkmq_core::IoStats;
    /// let mut stats = IoStats::default();
    /// stats.ops[0].merges = 2;
    /// assert_eq!(stats.merges(), 2);
    /// ```
    pub fn merges(&self) -> u64 {
        self.ops.iter().map(|o| o.merges).sum()
    }

    /// The weighted time in queue (ns): every request's time from allocation to completion,
    /// summed (Linux's `time_in_queue`, which since 5.0 is the sum of the groups' times).
    ///
    /// ```
    /// use blkmq_core::IoStats;
    /// let mut stats = IoStats::default();
    /// stats.ops[0].nsecs = 5;
    /// stats.ops[1].nsecs = 7;
    /// assert_eq!(stats.time_in_queue_ns(), 12);
    /// ```
    pub fn time_in_queue_ns(&self) -> u64 {
        self.ops.iter().map(|o| o.nsecs).sum()
    }

    /// The rates between `earlier` and this reading, `elapsed_ns` apart (what `iostat -x`
    /// prints). Counters that went back (a reading of another queue) count as no change.
    ///
    /// ```
    /// use blkmq_core::{IoStats, OpStats};
    /// let earlier = IoStats::default();
    /// let mut later = IoStats::default();
    /// later.ops[0] = OpStats { ios: 100, merges: 0, sectors: 800, nsecs: 200_000_000 };
    /// later.io_ticks_ns = 500_000_000;
    /// let rates = later.since(&earlier, 1_000_000_000);
    /// assert_eq!(rates.r_s, 100.0);
    /// assert_eq!(rates.rkb_s, 400.0);
    /// assert_eq!(rates.r_await_ms, 2.0);
    /// assert_eq!(rates.aqu_sz, 0.2);
    /// assert_eq!(rates.util_pct, 50.0);
    /// ```
    pub fn since(&self, earlier: &IoStats, elapsed_ns: u64) -> Rates {
        let secs = elapsed_ns as f64 / 1e9;
        let per_s = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        let delta = |g: OpGroup| {
            let (a, b) = (self.op(g), earlier.op(g));
            OpStats {
                ios: a.ios.saturating_sub(b.ios),
                merges: a.merges.saturating_sub(b.merges),
                sectors: a.sectors.saturating_sub(b.sectors),
                nsecs: a.nsecs.saturating_sub(b.nsecs),
            }
        };
        let await_ms = |d: &OpStats| {
            if d.ios == 0 {
                0.0
            } else {
                d.nsecs as f64 / 1e6 / d.ios as f64
            }
        };
        let (r, w, d, f) = (
            delta(OpGroup::Read),
            delta(OpGroup::Write),
            delta(OpGroup::Discard),
            delta(OpGroup::Flush),
        );
        let ratio = |n: u64| {
            if elapsed_ns == 0 {
                0.0
            } else {
                n as f64 / elapsed_ns as f64
            }
        };
        let queued = self
            .time_in_queue_ns()
            .saturating_sub(earlier.time_in_queue_ns());
        let busy = self.io_ticks_ns.saturating_sub(earlier.io_ticks_ns);
        Rates {
            r_s: per_s(r.ios),
            w_s: per_s(w.ios),
            d_s: per_s(d.ios),
            f_s: per_s(f.ios),
            rkb_s: per_s(r.sectors) / 2.0,
            wkb_s: per_s(w.sectors) / 2.0,
            dkb_s: per_s(d.sectors) / 2.0,
            rrqm_s: per_s(r.merges),
            wrqm_s: per_s(w.merges),
            r_await_ms: await_ms(&r),
            w_await_ms: await_ms(&w),
            d_await_ms: await_ms(&d),
            f_await_ms: await_ms(&f),
            aqu_sz: ratio(queued),
            util_pct: (ratio(busy) * 100.0).min(100.0),
        }
    }
}

impl fmt::Display for IoStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |ns: u64| ns / 1_000_000;
        let [r, w, d, fl] = &self.ops;
        write!(
            f,
            "{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}",
            r.ios,
            r.merges,
            r.sectors,
            ms(r.nsecs),
            w.ios,
            w.merges,
            w.sectors,
            ms(w.nsecs),
            self.in_flight_total(),
            ms(self.io_ticks_ns),
            ms(self.time_in_queue_ns()),
            d.ios,
            d.merges,
            d.sectors,
            ms(d.nsecs),
            fl.ios,
            ms(fl.nsecs),
        )
    }
}

/// What `iostat -x` prints for a device, between two [`IoStats`] readings
/// ([`IoStats::since`]).
///
/// ```
/// use blkmq_core::IoStats;
/// let rates = IoStats::default().since(&IoStats::default(), 1_000_000_000);
/// assert_eq!((rates.r_s, rates.util_pct), (0.0, 0.0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rates {
    /// Reads completed per second.
    pub r_s: f64,
    /// Writes completed per second.
    pub w_s: f64,
    /// Discards completed per second.
    pub d_s: f64,
    /// Flushes completed per second.
    pub f_s: f64,
    /// KiB read per second.
    pub rkb_s: f64,
    /// KiB written per second.
    pub wkb_s: f64,
    /// KiB discarded per second.
    pub dkb_s: f64,
    /// Read merges per second.
    pub rrqm_s: f64,
    /// Write merges per second.
    pub wrqm_s: f64,
    /// Mean time of a read, allocation to completion (ms).
    pub r_await_ms: f64,
    /// Mean time of a write (ms).
    pub w_await_ms: f64,
    /// Mean time of a discard (ms).
    pub d_await_ms: f64,
    /// Mean time of a flush (ms).
    pub f_await_ms: f64,
    /// Mean number of requests in the queue (`aqu-sz`): weighted time over elapsed time.
    pub aqu_sz: f64,
    /// Share of the time with anything in flight (`%util`), 0 to 100.
    pub util_pct: f64,
}

/// Latency histograms, one per [`OpGroup`], in log2 buckets of nanoseconds (see
/// [`LATENCY_BUCKETS`]), read from
/// [`RequestQueue::latency`](crate::RequestQueue::latency).
///
/// ```
/// use blkmq_core::{Latency, OpGroup};
/// let mut latency = Latency::default();
/// latency.buckets[0][Latency::bucket(1_000)] += 3; // three reads of 1 us
/// latency.buckets[0][Latency::bucket(1 << 20)] += 1; // one of about 1 ms
/// assert_eq!(Latency::bucket(1_000), 9); // 512 <= 1000 < 1024
/// assert_eq!(latency.count(OpGroup::Read), 4);
/// assert_eq!(latency.percentile_ns(OpGroup::Read, 50.0), Some(1 << 10));
/// assert_eq!(latency.percentile_ns(OpGroup::Read, 100.0), Some(1 << 21));
/// assert_eq!(latency.percentile_ns(OpGroup::Write, 50.0), None);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Latency {
    /// Completions per bucket, per group (`buckets[group as usize][bucket]`).
    pub buckets: [[u64; LATENCY_BUCKETS]; 4],
}

impl Default for Latency {
    fn default() -> Self {
        Self {
            buckets: [[0; LATENCY_BUCKETS]; 4],
        }
    }
}

impl Latency {
    /// The bucket a time of `ns` falls in.
    ///
    /// ```
    /// use blkmq_core::{LATENCY_BUCKETS, Latency};
    /// assert_eq!((Latency::bucket(0), Latency::bucket(1), Latency::bucket(2)), (0, 0, 1));
    /// assert_eq!(Latency::bucket(u64::MAX), LATENCY_BUCKETS - 1);
    /// ```
    #[inline]
    pub fn bucket(ns: u64) -> usize {
        let log = 63 - (ns | 1).leading_zeros() as usize;
        log.min(LATENCY_BUCKETS - 1)
    }

    /// Completions of `group` counted.
    ///
    /// ```
    /// use blkmq_core::{Latency, OpGroup};
    /// assert_eq!(Latency::default().count(OpGroup::Flush), 0);
    /// ```
    pub fn count(&self, group: OpGroup) -> u64 {
        self.buckets[group as usize].iter().sum()
    }

    /// The upper bound (ns, exclusive) of the bucket that holds the `pct` percentile of
    /// `group`'s times; `None` when none was counted.
    ///
    /// ```
    /// use blkmq_core::{Latency, OpGroup};
    /// let mut latency = Latency::default();
    /// latency.buckets[1][3] = 1; // one write of 8 to 15 ns
    /// assert_eq!(latency.percentile_ns(OpGroup::Write, 99.0), Some(16));
    /// ```
    pub fn percentile_ns(&self, group: OpGroup, pct: f64) -> Option<u64> {
        let total = self.count(group);
        if total == 0 {
            return None;
        }
        // The rank, rounded up (`f64::ceil` is not in `core`).
        let rank = (pct / 100.0) * total as f64;
        let mut want = rank as u64;
        if (want as f64) < rank {
            want += 1;
        }
        let want = want.max(1);
        let mut seen = 0;
        for (i, n) in self.buckets[group as usize].iter().enumerate() {
            seen += n;
            if seen >= want {
                return Some(1u64 << (i + 1));
            }
        }
        Some(1u64 << LATENCY_BUCKETS)
    }
}

// ----- the counters -----

/// One writer's counters for one hardware queue (one `/proc/diskstats` line's worth).
struct Counts {
    ios: [AtomicU64; 4],
    merges: [AtomicU64; 4],
    sectors: [AtomicU64; 4],
    nsecs: [AtomicU64; 4],
    /// Requests made, per direction (reads; everything else).
    started: [AtomicU64; 2],
    /// Requests merged away, per direction.
    gone: [AtomicU64; 2],
}

impl Counts {
    fn new() -> Self {
        Self {
            ios: core::array::from_fn(|_| AtomicU64::new(0)),
            merges: core::array::from_fn(|_| AtomicU64::new(0)),
            sectors: core::array::from_fn(|_| AtomicU64::new(0)),
            nsecs: core::array::from_fn(|_| AtomicU64::new(0)),
            started: core::array::from_fn(|_| AtomicU64::new(0)),
            gone: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// One CPU's counters for one hardware queue: the half the CPU id's sole holder writes with
/// plain stores, and the half everyone else adds to; and that holder's mark.
struct Part {
    own: Counts,
    shared: Counts,
    /// The coarse reading of the submission the CPU id's sole holder is in, while it is in
    /// one that may end requests at once and counted its request here ([`Issuing`]);
    /// [`NOT_ISSUING`] otherwise. Only that holder reads or writes it.
    issuing: AtomicU64,
}

impl Part {
    /// The half `writer` counts in.
    #[inline(always)]
    fn half(&self, writer: Writer) -> &Counts {
        if writer.own { &self.own } else { &self.shared }
    }

    fn halves(&self) -> [&Counts; 2] {
        [&self.own, &self.shared]
    }
}

/// One CPU's latency histograms, per group, in the same two halves as a [`Part`].
type Histograms = [[[AtomicU64; LATENCY_BUCKETS]; 4]; 2];

/// No submission in progress in a [`Part::issuing`] slot.
const NOT_ISSUING: u64 = u64::MAX;

/// What one CPU keeps besides its parts.
struct CpuPart {
    latency: Histograms,
}

/// Stamps `io`, a request just made, as started at `now_ns` and counted in flight in its
/// operation's group (what [`Accounting::started`] counts).
#[inline(always)]
pub(crate) fn stamp_start(io: &mut RqIo, now_ns: u64) {
    io.alloc_ns = now_ns;
    io.acct = OpGroup::of(io.op()) as u8 + 1;
}

/// Adds `n` to `counter`: a plain load and store for the sole writer of its half (`own`),
/// an atomic add otherwise.
#[inline(always)]
fn add(counter: &AtomicU64, n: u64, own: bool) {
    if own {
        counter.store(
            counter.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    } else {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// Who counts: the CPU whose part a count goes to, and whether the caller holds that CPU's
/// id alone ([`Platform::exclusive_cpu`](crate::Platform::exclusive_cpu)), so writes its
/// part's own half.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Writer {
    cpu: usize,
    own: bool,
}

/// A submission in progress on a CPU its caller holds alone, from
/// [`Accounting::started`]: requests of its hardware queue it ends meanwhile take its
/// coarse reading as their end. Dropped (at the submission's end, or by unwinding out of
/// it), the mark is gone.
pub(crate) struct Issuing<'a> {
    slot: &'a AtomicU64,
}

impl Drop for Issuing<'_> {
    #[inline]
    fn drop(&mut self) {
        self.slot.store(NOT_ISSUING, Ordering::Relaxed);
    }
}

impl Part {
    /// The coarse reading of the submission `writer` is in, if it holds this part's CPU
    /// alone and is in one that counted here.
    #[inline(always)]
    fn issued_at(&self, writer: Writer) -> Option<u64> {
        if !writer.own {
            return None;
        }
        match self.issuing.load(Ordering::Relaxed) {
            NOT_ISSUING => None,
            now => Some(now),
        }
    }
}

/// The busy time: the stamp of the last tick looked at, and the ticks counted busy.
struct Busy {
    /// Where the tick after the stamp's starts (ns): a reading below it is in the
    /// stamp's tick (or before), and changes nothing, found with one comparison.
    next_ns: AtomicU64,
    ticks: AtomicU64,
}

impl Busy {
    fn new(now_ns: u64) -> Self {
        Self {
            next_ns: AtomicU64::new(tick_end(now_ns / IO_TICK_NS)),
            ticks: AtomicU64::new(0),
        }
    }

    /// Linux's `update_io_ticks`: the first to see a new tick moves the stamp to it and,
    /// when this is a completion (`end`) or anything is in flight, counts the ticks since
    /// the stamp as busy. Written at most once per tick; read otherwise. Whether it moved
    /// the stamp.
    #[inline]
    fn update(&self, now_ns: u64, end: bool, busy: impl FnOnce() -> bool) -> bool {
        let next = self.next_ns.load(Ordering::Relaxed);
        now_ns >= next && self.advance(next, now_ns, end, busy)
    }

    /// The tick moved on: the one who moves the stamp counts the ticks between.
    #[cold]
    #[inline(never)]
    fn advance(&self, next: u64, now_ns: u64, end: bool, busy: impl FnOnce() -> bool) -> bool {
        let (stamp, now) = (next / IO_TICK_NS - 1, now_ns / IO_TICK_NS);
        let moved = self
            .next_ns
            .compare_exchange(next, tick_end(now), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok();
        if moved && (end || busy()) {
            self.ticks.fetch_add(now - stamp, Ordering::Relaxed);
        }
        moved
    }
}

/// Where the tick after tick `tick` starts (ns).
#[inline]
fn tick_end(tick: u64) -> u64 {
    (tick + 1).saturating_mul(IO_TICK_NS)
}

/// A request queue's accounting (present only when it is on).
pub(crate) struct Accounting {
    nr_hctxs: usize,
    nr_cpus: usize,
    /// Whether a submission may mark its part with its reading ([`started`](Self::started)):
    /// its hardware queues do not block.
    marks: bool,
    /// `parts[cpu * nr_hctxs + hctx]`, each on lines of its own.
    parts: Box<[CachePadded<Part>]>,
    /// Per CPU.
    cpus: Box<[CachePadded<CpuPart>]>,
    /// The queue's busy time.
    busy: CachePadded<Busy>,
    /// Each hardware queue's.
    hctx_busy: Box<[CachePadded<Busy>]>,
}

impl Accounting {
    /// Counters at zero for `nr_cpus` CPUs and `nr_hctxs` hardware queues, the busy stamps at
    /// `now_ns`; `blocking`: the hardware queues may block
    /// ([`TagSetFlags::BLOCKING`](crate::TagSetFlags::BLOCKING)), so no submission marks its
    /// CPU ([`issuing`](Self::issuing)).
    pub(crate) fn new(nr_cpus: usize, nr_hctxs: usize, now_ns: u64, blocking: bool) -> Self {
        let (nr_cpus, nr_hctxs) = (nr_cpus.max(1), nr_hctxs.max(1));
        Self {
            nr_hctxs,
            nr_cpus,
            marks: !blocking,
            parts: (0..nr_cpus * nr_hctxs)
                .map(|_| {
                    CachePadded::new(Part {
                        own: Counts::new(),
                        shared: Counts::new(),
                        issuing: AtomicU64::new(NOT_ISSUING),
                    })
                })
                .collect(),
            cpus: (0..nr_cpus)
                .map(|_| {
                    CachePadded::new(CpuPart {
                        latency: core::array::from_fn(|_| {
                            core::array::from_fn(|_| core::array::from_fn(|_| AtomicU64::new(0)))
                        }),
                    })
                })
                .collect(),
            busy: CachePadded::new(Busy::new(now_ns)),
            hctx_busy: (0..nr_hctxs)
                .map(|_| CachePadded::new(Busy::new(now_ns)))
                .collect(),
        }
    }

    /// Who counts for a caller that holds CPU `exclusive` alone (its own half, when the
    /// queue has that CPU: two ids folded onto one part would be two writers), or else is
    /// on CPU `cpu()` (its shared half).
    #[inline(always)]
    pub(crate) fn writer(&self, exclusive: Option<usize>, cpu: impl FnOnce() -> usize) -> Writer {
        match exclusive {
            Some(cpu) if cpu < self.nr_cpus => Writer { cpu, own: true },
            _ => Writer {
                cpu: cpu().min(self.nr_cpus - 1),
                own: false,
            },
        }
    }

    /// The half `writer` counts in for `hctx`.
    #[inline(always)]
    fn counts(&self, writer: Writer, hctx: usize) -> &Counts {
        self.counts_of(writer, hctx.min(self.nr_hctxs - 1))
    }

    /// [`counts`](Self::counts) for a `hctx` of the queue's.
    #[inline(always)]
    fn counts_of(&self, writer: Writer, hctx: usize) -> &Counts {
        self.part(writer, hctx).half(writer)
    }

    /// `writer`'s CPU's part for `hctx`, a hardware queue of the queue's.
    #[inline(always)]
    fn part(&self, writer: Writer, hctx: usize) -> &Part {
        debug_assert!(
            hctx < self.nr_hctxs,
            "hardware queue {hctx} of {}",
            self.nr_hctxs
        );
        &self.parts[writer.cpu * self.nr_hctxs + hctx]
    }

    /// In flight on `hctx` (`None`: the whole queue), summed over CPUs: made, less
    /// completed, less merged away. Each part is read made first, so a reading that races
    /// with I/O may see a completion whose start it missed: clamped at zero.
    fn in_flight(&self, hctx: Option<usize>) -> [u64; 2] {
        let mut sum = [0u64; 2];
        for (i, part) in self.parts.iter().enumerate() {
            if hctx.is_some_and(|h| i % self.nr_hctxs != h) {
                continue;
            }
            for counts in part.halves() {
                for (dir, s) in sum.iter_mut().enumerate() {
                    *s = s.wrapping_add(counts.started[dir].load(Ordering::Relaxed));
                    *s = s.wrapping_sub(counts.gone[dir].load(Ordering::Relaxed));
                }
                let ios = |g: OpGroup| counts.ios[g as usize].load(Ordering::Relaxed);
                sum[0] = sum[0].wrapping_sub(ios(OpGroup::Read));
                sum[1] = sum[1].wrapping_sub(
                    ios(OpGroup::Write)
                        .wrapping_add(ios(OpGroup::Discard))
                        .wrapping_add(ios(OpGroup::Flush)),
                );
            }
        }
        sum.map(|s| if (s as i64) < 0 { 0 } else { s })
    }

    fn any_in_flight(&self, hctx: Option<usize>) -> bool {
        let [r, w] = self.in_flight(hctx);
        r + w != 0
    }

    /// The busy stamps brought to `now_ns` on `hctx` (one of the queue's) and the queue.
    ///
    /// The queue's is looked at only when `hctx`'s moves: every move of a hardware queue's
    /// stamp is followed by a look at the queue's with the same reading, so the queue's
    /// stamp is never behind a hardware queue's for long, and a reading in `hctx`'s stamp's
    /// tick is one the queue's has seen too (or is about to, from the one who moved
    /// `hctx`'s). Linux's `update_io_ticks` for one device, once per I/O where Linux would
    /// look at it every time and find nothing to do.
    #[inline]
    fn tick(&self, hctx: usize, now_ns: u64, end: bool) {
        if self.hctx_busy[hctx].update(now_ns, end, || self.any_in_flight(Some(hctx))) {
            self.busy.update(now_ns, end, || self.any_in_flight(None));
        }
    }

    /// A request of `op` made by `writer` for `hctx` (one of the queue's) at `now_ns`.
    ///
    /// With it, unless `writer` shares its CPU or the hardware queues may block, the mark
    /// that `writer`'s submission is in progress with that reading, kept in the part it
    /// counted in until the [`Issuing`] returned is dropped: the requests of `hctx` the
    /// submission ends meanwhile take the reading as their end ([`done`](Self::done)).
    #[inline]
    pub(crate) fn started(
        &self,
        writer: Writer,
        hctx: usize,
        op: Op,
        now_ns: u64,
    ) -> Option<Issuing<'_>> {
        self.tick(hctx, now_ns, false);
        let part = self.part(writer, hctx);
        let dir = usize::from(op.is_write());
        add(&part.half(writer).started[dir], 1, writer.own);
        if !writer.own || !self.marks || now_ns == NOT_ISSUING {
            return None;
        }
        part.issuing.store(now_ns, Ordering::Relaxed);
        Some(Issuing {
            slot: &part.issuing,
        })
    }

    /// The coarse reading of the submission `writer` is in (see [`started`](Self::started)),
    /// if it holds its CPU alone and is in one that counted on `hctx`.
    #[cfg(test)]
    fn issued_at(&self, writer: Writer, hctx: usize) -> Option<u64> {
        self.part(writer, hctx).issued_at(writer)
    }

    /// A merge of `group` counted by `writer` on `hctx`; `merged_away` when a made request
    /// went with it.
    #[inline]
    pub(crate) fn merged(&self, writer: Writer, hctx: usize, group: OpGroup, merged_away: bool) {
        let counts = self.counts(writer, hctx);
        add(&counts.merges[group as usize], 1, writer.own);
        if merged_away {
            let dir = usize::from(group != OpGroup::Read);
            add(&counts.gone[dir], 1, writer.own);
        }
    }

    /// A request of `group` of `sectors`, made at `start_ns`, completed, counted by `writer`
    /// on `hctx` (one of the queue's). It ended at `now`'s reading; with none yet, at the
    /// coarse reading of the submission `writer` is in, if it counted on `hctx` (see
    /// [`started`](Self::started)), else at `clock()`'s; the reading is kept in `now` for the
    /// next completion of a batch. Never before its start: a submission's reading may
    /// predate a request another CPU made since.
    ///
    /// A reading from the mark skips the look at the busy stamps: the submission's start
    /// looked at `hctx`'s with it (and the request's start with its own), which left the
    /// stamp at its tick. Only where another CPU moved the stamp at that moment with a
    /// reading of the tick before (and so this start did not move it) does this end leave
    /// that tick to the next look, which counts it if it is a completion or finds anything
    /// in flight: as Linux's `update_io_ticks` leaves it when its compare-and-swap fails.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn done(
        &self,
        writer: Writer,
        hctx: usize,
        group: OpGroup,
        sectors: u64,
        start_ns: u64,
        now: &mut Option<u64>,
        clock: impl FnOnce() -> u64,
    ) {
        let part = self.part(writer, hctx);
        let now_ns = match *now {
            Some(now_ns) => self.ended_at(hctx, now_ns, start_ns),
            None => match part.issued_at(writer) {
                Some(mark) => {
                    *now = Some(mark);
                    mark.max(start_ns)
                }
                None => self.ended_at(hctx, *now.insert(clock()), start_ns),
            },
        };
        let took = now_ns - start_ns;
        let g = group as usize;
        let own = writer.own;
        let counts = part.half(writer);
        add(&counts.ios[g], 1, own);
        add(&counts.sectors[g], sectors, own);
        add(&counts.nsecs[g], took, own);
        let histogram = &self.cpus[writer.cpu].latency[usize::from(!own)][g];
        add(&histogram[Latency::bucket(took)], 1, own);
    }

    /// The end of a request of `hctx` made at `start_ns`, read at `now_ns` (never before
    /// its start), the busy stamps brought to it.
    #[inline(always)]
    fn ended_at(&self, hctx: usize, now_ns: u64, start_ns: u64) -> u64 {
        let now_ns = now_ns.max(start_ns);
        self.tick(hctx, now_ns, true);
        now_ns
    }

    /// A reading of `hctx` (`None`: the whole queue), the busy time brought to `now_ns`.
    pub(crate) fn read(&self, hctx: Option<usize>, now_ns: u64) -> IoStats {
        let busy = match hctx {
            Some(h) => {
                let h = h.min(self.nr_hctxs - 1);
                self.tick(h, now_ns, false);
                &*self.hctx_busy[h]
            }
            None => {
                self.busy.update(now_ns, false, || self.any_in_flight(None));
                &*self.busy
            }
        };
        let mut stats = IoStats::default();
        for (i, part) in self.parts.iter().enumerate() {
            if hctx.is_some_and(|h| i % self.nr_hctxs != h) {
                continue;
            }
            for counts in part.halves() {
                for (g, op) in stats.ops.iter_mut().enumerate() {
                    op.ios += counts.ios[g].load(Ordering::Relaxed);
                    op.merges += counts.merges[g].load(Ordering::Relaxed);
                    op.sectors += counts.sectors[g].load(Ordering::Relaxed);
                    op.nsecs += counts.nsecs[g].load(Ordering::Relaxed);
                }
            }
        }
        stats.in_flight = self.in_flight(hctx);
        stats.io_ticks_ns = busy.ticks.load(Ordering::Relaxed) * IO_TICK_NS;
        stats
    }

    /// The latency histograms, summed over CPUs.
    pub(crate) fn latency(&self) -> Latency {
        let mut latency = Latency::default();
        for half in self.cpus.iter().flat_map(|cpu| cpu.latency.iter()) {
            for (sum, part) in latency.buckets.iter_mut().zip(half.iter()) {
                for (s, n) in sum.iter_mut().zip(part) {
                    *s += n.load(Ordering::Relaxed);
                }
            }
        }
        latency
    }
}

impl fmt::Debug for Accounting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Accounting")
            .field("nr_cpus", &self.nr_cpus)
            .field("nr_hctxs", &self.nr_hctxs)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A writer on `cpu` that does not hold it alone.
    fn shared(cpu: usize) -> Writer {
        Writer { cpu, own: false }
    }

    /// The sole holder of `cpu`.
    fn own(cpu: usize) -> Writer {
        Writer { cpu, own: true }
    }

    #[test]
    fn both_halves_of_a_part_count_and_sum() {
        let acct = Accounting::new(2, 1, 0, false);
        acct.started(own(0), 0, Op::Read, 0);
        acct.started(shared(0), 0, Op::Read, 0);
        acct.started(own(1), 0, Op::Write, 0);
        acct.merged(shared(1), 0, OpGroup::Write, false);
        acct.done(
            shared(1),
            0,
            OpGroup::Read,
            8,
            0,
            &mut Some(10),
            || unreachable!(),
        );
        acct.done(
            own(0),
            0,
            OpGroup::Read,
            16,
            0,
            &mut Some(20),
            || unreachable!(),
        );
        let stats = acct.read(None, 20);
        assert_eq!(stats.in_flight, [0, 1]);
        assert_eq!(
            *stats.op(OpGroup::Read),
            OpStats {
                ios: 2,
                merges: 0,
                sectors: 24,
                nsecs: 30
            }
        );
        assert_eq!(stats.op(OpGroup::Write).merges, 1);
        assert_eq!(acct.latency().count(OpGroup::Read), 2);
    }

    #[test]
    fn a_writer_owns_its_half_only_on_a_cpu_of_the_queue() {
        let acct = Accounting::new(2, 1, 0, false);
        let w = acct.writer(Some(1), || unreachable!("the held CPU serves"));
        assert!(w.own && w.cpu == 1);
        // CPU 5 would fold onto part 1 with CPU 1's holder: the shared half.
        let w = acct.writer(Some(5), || 5);
        assert!(!w.own && w.cpu == 1);
        let w = acct.writer(None, || 0);
        assert!(!w.own && w.cpu == 0);
    }

    #[test]
    fn in_flight_moves_between_cpus_and_sums_to_zero() {
        let acct = Accounting::new(2, 2, 0, false);
        acct.started(shared(0), 1, Op::Write, 10);
        assert_eq!(acct.read(Some(1), 10).in_flight, [0, 1]);
        acct.done(
            shared(1),
            1,
            OpGroup::Write,
            8,
            10,
            &mut Some(40),
            || unreachable!(),
        );
        let stats = acct.read(None, 40);
        assert_eq!(stats.in_flight, [0, 0]);
        assert_eq!(
            *stats.op(OpGroup::Write),
            OpStats {
                ios: 1,
                merges: 0,
                sectors: 8,
                nsecs: 30
            }
        );
        assert_eq!(acct.read(Some(0), 40), IoStats::default());
        assert_eq!(acct.latency().buckets[1][Latency::bucket(30)], 1);
    }

    #[test]
    fn busy_time_counts_ticks_with_anything_in_flight() {
        let t = IO_TICK_NS;
        let acct = Accounting::new(1, 1, 0, false);
        acct.started(shared(0), 0, Op::Read, t / 2); // same tick: nothing to add
        acct.done(
            shared(0),
            0,
            OpGroup::Read,
            8,
            t / 2,
            &mut Some(3 * t + 1),
            || unreachable!(),
        ); // 3 ticks busy
        assert_eq!(acct.read(None, 3 * t + 1).io_ticks_ns, 3 * t);
        // Idle from tick 3 to 10: a start there adds nothing (nothing was in flight).
        acct.started(shared(0), 0, Op::Read, 10 * t);
        assert_eq!(acct.read(None, 10 * t).io_ticks_ns, 3 * t);
        // In flight from 10 to 12: a reading brings it up to date.
        assert_eq!(acct.read(None, 12 * t).io_ticks_ns, 5 * t);
        assert_eq!(acct.read(Some(0), 12 * t).io_ticks_ns, 5 * t);
    }

    #[test]
    fn a_submissions_mark_serves_its_holder_on_its_hardware_queue_until_dropped() {
        let acct = Accounting::new(2, 2, 0, false);
        assert!(acct.started(shared(0), 0, Op::Read, 5).is_none());
        let mark = acct.started(own(1), 1, Op::Read, 7).unwrap();
        assert_eq!(acct.issued_at(own(1), 1), Some(7));
        // Only the holder of the CPU marked reads it, and only on the hardware queue its
        // submission counted on.
        assert_eq!(
            (
                acct.issued_at(own(0), 1),
                acct.issued_at(shared(1), 1),
                acct.issued_at(own(1), 0)
            ),
            (None, None, None)
        );
        // A request the submission ends takes the mark's reading, and keeps it for the next
        // completion of a batch.
        let mut now = None;
        acct.done(own(1), 1, OpGroup::Read, 8, 3, &mut now, || unreachable!());
        assert_eq!(now, Some(7));
        assert_eq!(acct.read(Some(1), 7).op(OpGroup::Read).nsecs, 4);
        drop(mark);
        assert_eq!(acct.issued_at(own(1), 1), None);
        // Without the mark the clock is read.
        let mut now = None;
        acct.started(shared(0), 1, Op::Read, 8);
        acct.done(own(1), 1, OpGroup::Read, 8, 8, &mut now, || 11);
        assert_eq!(now, Some(11));
        // Of the three made, the two on hardware queue 1 ended (on another CPU's half than
        // one was made on): the first is the one in flight.
        assert_eq!(acct.read(Some(1), 11).in_flight, [0, 0]);
        assert_eq!(acct.read(Some(0), 11).in_flight, [1, 0]);
        // Hardware queues that may block: no submission marks its part.
        let blocking = Accounting::new(2, 1, 0, true);
        assert!(blocking.started(own(1), 0, Op::Read, 7).is_none());
        assert_eq!(blocking.issued_at(own(1), 0), None);
    }

    /// One step of a single-threaded run: a request started or ended on a hardware queue,
    /// or a reading of one, after the clock moved on by some ticks and nanoseconds.
    #[derive(Clone, Debug)]
    enum Step {
        Start(usize),
        End(usize),
        Read(Option<usize>),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = (Step, u64)> {
        use proptest::prelude::*;
        let action = prop_oneof![
            (0..3usize).prop_map(Step::Start),
            (0..3usize).prop_map(Step::End),
            proptest::option::of(0..3usize).prop_map(Step::Read),
        ];
        // Mostly within a tick, sometimes several ticks on.
        let advance = prop_oneof![0..IO_TICK_NS / 4, 0..4 * IO_TICK_NS];
        (action, advance)
    }

    proptest::proptest! {
        /// The queue's busy time, looked at only when a hardware queue's stamp moves, is
        /// Linux's `update_io_ticks` looked at on every start, end and reading: a
        /// reference stamp updated at each, with the same in-flight count.
        #[test]
        fn the_queues_busy_time_is_the_one_updated_at_every_look(
            steps in proptest::collection::vec(step(), 1..200)
        ) {
            let acct = Accounting::new(1, 3, 0, false);
            let reference = Busy::new(0);
            let mut in_flight = [0u64; 3];
            let mut now = 0u64;
            for (step, advance) in steps {
                now += advance;
                match step {
                    Step::Start(h) => {
                        let busy = in_flight.iter().sum::<u64>() != 0;
                        reference.update(now, false, || busy);
                        acct.started(shared(0), h, Op::Read, now);
                        in_flight[h] += 1;
                    }
                    Step::End(h) if in_flight[h] > 0 => {
                        reference.update(now, true, || true);
                        acct.done(shared(0), h, OpGroup::Read, 8, 0, &mut Some(now), || unreachable!());
                        in_flight[h] -= 1;
                    }
                    Step::End(_) => {}
                    Step::Read(h) => {
                        let busy = in_flight.iter().sum::<u64>() != 0;
                        reference.update(now, false, || busy);
                        let stats = acct.read(h, now);
                        if h.is_none() {
                            proptest::prop_assert_eq!(
                                stats.io_ticks_ns,
                                reference.ticks.load(Ordering::Relaxed) * IO_TICK_NS
                            );
                        }
                        if let Some(h) = h {
                            proptest::prop_assert_eq!(stats.in_flight[0], in_flight[h]);
                        }
                    }
                }
                // The queue's stamp as it stands, not brought up to date by a reading.
                proptest::prop_assert_eq!(
                    acct.busy.ticks.load(Ordering::Relaxed),
                    reference.ticks.load(Ordering::Relaxed)
                );
            }
        }
    }

    #[test]
    fn merged_away_requests_leave_in_flight() {
        let acct = Accounting::new(1, 1, 0, false);
        acct.started(shared(0), 0, Op::Read, 0);
        acct.started(shared(0), 0, Op::Read, 0);
        acct.merged(shared(0), 0, OpGroup::Read, true);
        acct.merged(shared(0), 0, OpGroup::Read, false);
        let stats = acct.read(None, 0);
        assert_eq!(
            (stats.op(OpGroup::Read).merges, stats.in_flight),
            (2, [1, 0])
        );
    }
}
