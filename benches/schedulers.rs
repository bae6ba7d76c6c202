//! The cost of an I/O scheduler per request: mq-deadline and BFQ against no elevator, one
//! thread.
//!
//! # Per-request cost
//!
//! One request is a [`RequestQueue::submit`] of a read of 8 sectors, its insertion into the
//! elevator (if any), its dispatch, the driver's [`Driver::queue_rq`] and its completion: the
//! driver ends each request inside `queue_rq` (`cx.queue().end_request(rq, Status::Ok)`), so
//! it has ended when `submit` returns. Bios are spaced so that no two touch (nothing merges:
//! every bio is one request, which [`Dev::settled`] checks from the elevator's counters). The
//! host has one CPU and one hardware queue with [`DEPTH`] tags; the cases:
//!
//! * `none`: [`QueueConfig::new`] (no elevator): the submission issues the request directly
//!   to the idle hardware queue;
//! * `deadline`: the same queue with [`Deadline`] ([`QueueConfig::elevator`]) and its default
//!   scheduler tags: the bio is offered for merging, gets a scheduler tag, is inserted, and
//!   the run of the hardware queue that follows dispatches it (taking a driver tag) and the
//!   completion finishes it in the elevator;
//! * `bfq`: the same with [`Bfq::new`] (its defaults: `low_latency` on), one issuer: each
//!   request activates the issuer's queue, which is selected, served and expired again
//!   (nothing else is queued, so it never idles);
//!
//! and, to see the elevator without the queue around it, over bare [`QueueTags`] with
//! scheduler tags and an [`ElvCx`] (as `crates/sched-deadline/tests/model.rs` drives it):
//!
//! * `bare_tags`: the floor: a scheduler tag allocated, the bio set on its request, and the
//!   request completed ([`QueueTags::complete`]);
//! * `bare_deadline`: the same with [`Elevator::insert_requests`],
//!   [`Elevator::dispatch_request`], [`Elevator::completed_request`] and
//!   [`Elevator::finish_request`] in between, one request at a time;
//! * `bare_deadline_q32`: as `bare_deadline`, but [`QUEUED`] requests at scattered sectors
//!   are inserted before they are all dispatched and finished, so the elevator sorts and
//!   dispatches from a populated queue;
//! * `bare_bfq`, `bare_bfq_q32`: the same two with BFQ.
//!
//! The targets: `deadline / none` at most [`TARGET`] (Linux documents about 0.7 µs per
//! request for mq-deadline), and `bfq / deadline` at most [`BFQ_TARGET`]: BFQ's per-request
//! cost at most 1.6 times mq-deadline's in the same run.
//!
//! # Output
//!
//! After the benchmarks, a summary gives the costs and ratios from criterion's medians. After
//! an unfiltered run, the ratios are measured again as paired comparisons (interleaved
//! rounds, the median of the per-round ratios), which a noisy machine disturbs far less;
//! beside that table, one line gives the two elevator-path figures:
//! `elevator: deadline/none = X.XX; bfq/deadline = Y.YY` (paired medians).
//!
//! What goes through [`black_box`]: each bio (its sector is a run-time value anyway). Every
//! timed step is `#[inline(never)]`, so criterion's loops and the paired ones run the same
//! machine code.
//!
//! `cargo bench --bench schedulers` runs everything (under a minute);
//! `cargo bench --bench schedulers -- bare` only the bare cases;
//! `cargo bench --bench schedulers -- paired` only the paired table.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use blkmq_core::{
    Alloc, Bio, Elevator, ElvCx, Host, IoPrioClass, IssuerId, Op, QueueConfig, QueueLimits,
    QueueTags, RequestQueue, Rq, Status, StdPlatform, TagSet,
};
use blkmq_sched_bfq::Bfq;
use blkmq_sched_deadline::Deadline;
use criterion::{Criterion, Throughput};

// One thread: the helpers that start threads together go unused here.
#[allow(dead_code)]
mod common;
#[path = "common/inline.rs"]
mod inline;

use common::{PAIRED_ROUNDS, config, criterion_median, paired_ratio, paired_wanted};
use inline::Inline;

/// Tags of the hardware queue (the elevator gets twice as many scheduler tags).
const DEPTH: usize = 64;

/// Bio positions the bench cycles through (a power of two).
const SLOTS: u64 = 4096;

/// Sectors from one bio position to the next: twice a bio, so no two bios touch.
const SLOT_SECTORS: u64 = 16;

/// Sectors of every bio.
const BIO_SECTORS: u32 = 8;

/// The device's size in sectors: every position.
const CAPACITY: u64 = SLOTS * SLOT_SECTORS;

/// Requests queued at once in `bare_deadline_q32`.
const QUEUED: usize = 32;

/// The most mq-deadline may cost per request, as a ratio of time over no elevator.
const TARGET: f64 = 2.0;

/// The most BFQ may cost per request, as a ratio of time over mq-deadline.
const BFQ_TARGET: f64 = 1.6;

/// Requests in one round of a paired comparison.
const PAIRED_IOS: u64 = 50_000;

/// The criterion group.
const GROUP: &str = "schedulers_1t";

/// The bio at position `slot` (taken modulo [`SLOTS`]).
#[inline(always)]
fn slot_bio(slot: u64) -> Bio {
    let sector = (slot & (SLOTS - 1)) * SLOT_SECTORS;
    black_box(Bio::new(Op::Read, sector, BIO_SECTORS))
}

// ----- through a request queue -----

/// A host of one CPU and one hardware queue, and one request queue on it.
struct Dev {
    host: Arc<Host<Inline>>,
    queue: Arc<RequestQueue<Inline>>,
    /// The next bio position.
    slot: u64,
}

/// The elevator of a [`Dev`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sched {
    None,
    Deadline,
    Bfq,
}

impl Sched {
    /// Its name, as the queue reports it.
    fn name(self) -> Option<&'static str> {
        match self {
            Sched::None => None,
            Sched::Deadline => Some("mq-deadline"),
            Sched::Bfq => Some("bfq"),
        }
    }
}

impl Dev {
    /// With `sched` as its elevator.
    fn new(sched: Sched) -> Self {
        let host = Host::new(TagSet::builder(DEPTH), StdPlatform::with_cpus(1), Inline)
            .expect("a valid host");
        let mut config = QueueConfig::new(QueueLimits::new(CAPACITY));
        match sched {
            Sched::None => {}
            Sched::Deadline => config = config.elevator(Box::new(Deadline::new())),
            Sched::Bfq => config = config.elevator(Box::new(Bfq::new())),
        }
        let queue = host.add_queue(config).expect("a valid queue");
        queue.platform().pin_current_thread(0);
        let dev = Self {
            host,
            queue,
            slot: 0,
        };
        assert_eq!(dev.queue.elevator_name(), sched.name());
        dev.settled();
        dev
    }

    /// One request: submitted, issued and ended.
    #[inline(never)]
    fn step(&mut self) {
        let bio = slot_bio(self.slot);
        self.slot = self.slot.wrapping_add(1);
        self.queue.submit(bio).expect("a free request");
    }

    /// `iters` requests; returns the time they took.
    fn run(&mut self, iters: u64) -> Duration {
        self.queue.platform().pin_current_thread(0);
        let start = Instant::now();
        for _ in 0..iters {
            self.step();
        }
        start.elapsed()
    }

    /// Every request so far ended, none merged, and nothing waits: no work, no tag in use,
    /// no kick asked for. With mq-deadline, its counters balance with nothing merged; with
    /// BFQ, it holds nothing and dispatched one request per bio.
    fn settled(&self) {
        let queue = &self.queue;
        assert!(!queue.has_work(0), "the hardware queue has work left");
        assert_eq!(self.host.set().busy(), 0);
        assert_eq!(self.host.in_driver(), 0);
        assert_eq!(queue.usage(), 0);
        assert!(queue.platform().take_kicks().is_empty());
        if let Some(stats) =
            queue.with_elevator(|dd: &mut Deadline| dd.stats(IoPrioClass::BestEffort))
        {
            assert_eq!(stats.merged, 0, "bios merged: {stats:?}");
            assert_eq!(stats.inserted, stats.dispatched, "{stats:?}");
            assert_eq!(stats.inserted, stats.completed, "{stats:?}");
            assert_eq!(stats.in_flight, 0, "{stats:?}");
        }
        if let Some((held, stats)) = queue
            .with_elevator(|bfq: &mut Bfq| (bfq.queued(), bfq.issuer_stats(IssuerId::default())))
        {
            assert_eq!(held, 0, "requests held");
            if let Some(stats) = stats {
                assert_eq!(stats.dispatched, self.slot, "{stats:?}");
            }
        }
    }
}

// ----- over bare tags -----

/// An elevator a [`Bare`] drives: how it shows that everything it was given went through.
trait Settled: Elevator {
    /// Checks that it holds nothing and merged nothing, `requests` having gone through.
    fn settled(&self, requests: u64);
}

impl Settled for Deadline {
    fn settled(&self, _requests: u64) {
        assert!(!self.has_work(0));
        let stats = self.stats(IoPrioClass::BestEffort);
        assert_eq!(stats.merged, 0, "bios merged: {stats:?}");
        assert_eq!(stats.inserted, stats.dispatched, "{stats:?}");
        assert_eq!(stats.inserted, stats.completed, "{stats:?}");
    }
}

impl Settled for Bfq {
    fn settled(&self, requests: u64) {
        assert!(!self.has_work(0));
        assert_eq!(self.queued(), 0);
        let dispatched = self
            .issuer_stats(IssuerId::default())
            .map_or(0, |s| s.dispatched);
        assert_eq!(dispatched, requests, "one request per bio");
    }
}

/// Scheduler tags of one request queue, with an elevator driven directly, or none.
struct Bare<E> {
    tags: QueueTags<(), StdPlatform>,
    limits: QueueLimits,
    dd: Option<E>,
    now: u64,
    slot: u64,
    /// Requests dispatched by `bare_deadline_q32`'s rounds, reused.
    out: Vec<Rq>,
}

impl<E: Settled> Bare<E> {
    /// With `elevator`, or none.
    fn new(elevator: Option<E>) -> Self {
        let set = TagSet::builder(DEPTH)
            .build(StdPlatform::with_cpus(1), |_| ())
            .expect("a valid tag set");
        let mut tags = set.attach().expect("a queue");
        tags.attach_scheduler(None, |_| ()).expect("scheduler tags");
        let dd = elevator.map(|mut dd| {
            dd.depth_updated(tags.nr_requests().expect("scheduler tags"), tags.nr_keys());
            let min = dd.min_shallow_depth().expect("a shallow limit");
            tags.set_min_shallow_depth(min)
                .expect("a valid shallow limit");
            dd
        });
        Self {
            tags,
            limits: QueueLimits::new(CAPACITY),
            dd,
            now: 0,
            slot: 0,
            out: Vec::with_capacity(QUEUED),
        }
    }

    /// A request of the next bio; `scatter` takes the positions out of order.
    #[inline(always)]
    fn request(&mut self, scatter: bool) -> Rq {
        let slot = if scatter {
            // An odd stride visits every position, far apart from one request to the next.
            self.slot.wrapping_mul(1_609)
        } else {
            self.slot
        };
        self.slot = self.slot.wrapping_add(1);
        let bio = slot_bio(slot);
        let mut alloc = Alloc::new(0, 0);
        alloc.shallow_depth = self
            .dd
            .as_ref()
            .and_then(|dd| dd.limit_depth(bio.op, bio.flags));
        let mut rq = self.tags.alloc(&alloc).expect("a free scheduler tag");
        self.tags.set_bio(&mut rq, bio).expect("our own request");
        rq
    }

    /// `bare_tags`: a request made and completed.
    #[inline(never)]
    fn step_tags(&mut self) {
        let rq = self.request(false);
        self.tags.complete(rq, Status::Ok).expect("our own request");
    }

    /// `bare_deadline`, `bare_bfq`: a request made, inserted, dispatched, finished and
    /// completed.
    #[inline(never)]
    fn step_elevator(&mut self) {
        let rq = self.request(false);
        self.now += 1_000;
        let dd = self.dd.as_mut().expect("an elevator");
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        dd.insert_requests(&cx, &mut std::iter::once(rq), false);
        let rq = dd
            .dispatch_request(&cx, 0)
            .expect("the request just inserted");
        dd.completed_request(&cx, &rq);
        dd.finish_request(&cx, &rq);
        self.tags.complete(rq, Status::Ok).expect("our own request");
    }

    /// `bare_deadline_q32`, `bare_bfq_q32`: `n` requests made and inserted, then all
    /// dispatched, finished and completed.
    #[inline(never)]
    fn round_elevator(&mut self, n: usize) {
        for _ in 0..n {
            let rq = self.request(true);
            self.now += 1_000;
            let dd = self.dd.as_mut().expect("an elevator");
            let cx = ElvCx::new(&self.tags, &self.limits, self.now);
            dd.insert_requests(&cx, &mut std::iter::once(rq), false);
        }
        let dd = self.dd.as_mut().expect("an elevator");
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        while let Some(rq) = dd.dispatch_request(&cx, 0) {
            self.out.push(rq);
        }
        assert_eq!(self.out.len(), n, "every request queued is dispatched");
        for rq in self.out.drain(..) {
            dd.completed_request(&cx, &rq);
            dd.finish_request(&cx, &rq);
            self.tags.complete(rq, Status::Ok).expect("our own request");
        }
    }

    /// `iters` requests of `bare_tags` (without an elevator), `bare_deadline` or
    /// `bare_bfq`.
    fn run(&mut self, iters: u64) -> Duration {
        let start = Instant::now();
        if self.dd.is_some() {
            for _ in 0..iters {
                self.step_elevator();
            }
        } else {
            for _ in 0..iters {
                self.step_tags();
            }
        }
        start.elapsed()
    }

    /// `iters` requests of `bare_deadline_q32` or `bare_bfq_q32`, in rounds of [`QUEUED`].
    fn run_queued(&mut self, iters: u64) -> Duration {
        let start = Instant::now();
        let mut left = iters;
        while left > 0 {
            let n = left.min(QUEUED as u64);
            self.round_elevator(n as usize);
            left -= n;
        }
        start.elapsed()
    }

    /// Nothing held, no tag in use, and the elevator settled.
    fn settled(&self) {
        assert_eq!(self.tags.sched_busy(), 0);
        if let Some(dd) = &self.dd {
            dd.settled(self.slot);
        }
    }
}

/// Every contender.
struct Contenders {
    none: Dev,
    deadline: Dev,
    bfq: Dev,
    bare_tags: Bare<Deadline>,
    bare_deadline: Bare<Deadline>,
    bare_queued: Bare<Deadline>,
    bare_bfq: Bare<Bfq>,
    bare_bfq_queued: Bare<Bfq>,
}

impl Contenders {
    fn new() -> Self {
        Self {
            none: Dev::new(Sched::None),
            deadline: Dev::new(Sched::Deadline),
            bfq: Dev::new(Sched::Bfq),
            bare_tags: Bare::new(None),
            bare_deadline: Bare::new(Some(Deadline::new())),
            bare_queued: Bare::new(Some(Deadline::new())),
            bare_bfq: Bare::new(Some(Bfq::new())),
            bare_bfq_queued: Bare::new(Some(Bfq::new())),
        }
    }

    fn settled(&self) {
        self.none.settled();
        self.deadline.settled();
        self.bfq.settled();
        self.bare_tags.settled();
        self.bare_deadline.settled();
        self.bare_queued.settled();
        self.bare_bfq.settled();
        self.bare_bfq_queued.settled();
    }
}

// ----- criterion -----

fn schedulers(c: &mut Criterion, all: &mut Contenders) {
    let mut g = c.benchmark_group(GROUP);
    // One iteration is one request.
    g.throughput(Throughput::Elements(1));
    g.bench_function("none", |b| b.iter_custom(|iters| all.none.run(iters)));
    g.bench_function("deadline", |b| {
        b.iter_custom(|iters| all.deadline.run(iters))
    });
    g.bench_function("bfq", |b| b.iter_custom(|iters| all.bfq.run(iters)));
    g.bench_function("bare_tags", |b| {
        b.iter_custom(|iters| all.bare_tags.run(iters))
    });
    g.bench_function("bare_deadline", |b| {
        b.iter_custom(|iters| all.bare_deadline.run(iters))
    });
    g.bench_function("bare_deadline_q32", |b| {
        b.iter_custom(|iters| all.bare_queued.run_queued(iters))
    });
    g.bench_function("bare_bfq", |b| {
        b.iter_custom(|iters| all.bare_bfq.run(iters))
    });
    g.bench_function("bare_bfq_q32", |b| {
        b.iter_custom(|iters| all.bare_bfq_queued.run_queued(iters))
    });
    g.finish();
    all.settled();
}

fn main() {
    let started = SystemTime::now();
    let paired = paired_wanted();
    // What `criterion_group!` and `criterion_main!` expand to, less the undocumented `pub fn`.
    let mut c = config().configure_from_args();
    let mut all = Contenders::new();
    schedulers(&mut c, &mut all);
    c.final_summary();
    summary(started);
    if paired {
        paired_summary(&mut all);
    }
}

// ----- tables -----

/// A ratio of time against `target`, starred when it misses it.
fn against(ratio: f64, target: f64) -> String {
    let miss = if ratio > target { "*" } else { " " };
    format!("{ratio:>5.2}{miss}")
}

/// The header of both ratio tables.
fn ratio_header() {
    println!(
        "| deadline / none (<= {TARGET}) | bfq / deadline (<= {BFQ_TARGET}) | bare_deadline / bare_tags | bare_deadline_q32 / bare_tags | bare_bfq / bare_deadline | bare_bfq_q32 / bare_deadline_q32 |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
}

/// Prints the costs and ratios from criterion's medians, if this run measured them all.
fn summary(started: SystemTime) {
    let m = |f: &str| criterion_median(started, GROUP, f);
    let (
        Some(none),
        Some(deadline),
        Some(bfq),
        Some(tags),
        Some(bare),
        Some(queued),
        Some(bare_bfq),
        Some(bfq_queued),
    ) = (
        m("none"),
        m("deadline"),
        m("bfq"),
        m("bare_tags"),
        m("bare_deadline"),
        m("bare_deadline_q32"),
        m("bare_bfq"),
        m("bare_bfq_q32"),
    )
    else {
        return;
    };
    println!();
    println!("Per request, one thread (criterion medians, ns per request; * misses its target):");
    println!(
        "| none ns | deadline ns | bfq ns | deadline - none ns | bfq - none ns | bare_tags ns | bare_deadline ns | bare_deadline_q32 ns | bare_bfq ns | bare_bfq_q32 ns | mq-deadline alone ns (bare_deadline - bare_tags) | BFQ alone ns (bare_bfq - bare_tags) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {none:>7.1} | {deadline:>7.1} | {bfq:>7.1} | {:>7.1} | {:>7.1} | {tags:>7.1} | {bare:>7.1} | {queued:>7.1} | {bare_bfq:>7.1} | {bfq_queued:>7.1} | {:>7.1} | {:>7.1} |",
        deadline - none,
        bfq - none,
        bare - tags,
        bare_bfq - tags,
    );
    println!();
    println!("Ratios of those medians:");
    ratio_header();
    println!(
        "| {} | {} | {:>5.2} | {:>5.2} | {:>5.2} | {:>5.2} |",
        against(deadline / none, TARGET),
        against(bfq / deadline, BFQ_TARGET),
        bare / tags,
        queued / tags,
        bare_bfq / bare,
        bfq_queued / queued,
    );
}

/// The ratios again, each measured as a paired comparison (see [`paired_ratio`]).
fn paired_summary(all: &mut Contenders) {
    let n = PAIRED_IOS;
    println!();
    println!(
        "Paired ratios per request (median of {PAIRED_ROUNDS} back-to-back rounds of {n} requests; * misses its target):"
    );
    ratio_header();
    let Contenders {
        none,
        deadline,
        bfq,
        bare_tags,
        bare_deadline,
        bare_queued,
        bare_bfq,
        bare_bfq_queued,
    } = all;
    let dd_none = paired_ratio(|| deadline.run(n), || none.run(n));
    let bfq_dd = paired_ratio(|| bfq.run(n), || deadline.run(n));
    let bare_ratio = paired_ratio(|| bare_deadline.run(n), || bare_tags.run(n));
    let queued_ratio = paired_ratio(|| bare_queued.run_queued(n), || bare_tags.run(n));
    let bare_bfq_ratio = paired_ratio(|| bare_bfq.run(n), || bare_deadline.run(n));
    let bfq_queued_ratio = paired_ratio(
        || bare_bfq_queued.run_queued(n),
        || bare_queued.run_queued(n),
    );
    println!(
        "| {} | {} | {bare_ratio:>5.2} | {queued_ratio:>5.2} | {bare_bfq_ratio:>5.2} | {bfq_queued_ratio:>5.2} |",
        against(dd_none, TARGET),
        against(bfq_dd, BFQ_TARGET),
    );
    println!();
    println!("elevator: deadline/none = {dd_none:.2}; bfq/deadline = {bfq_dd:.2}");
    all.settled();
}
