//! Dispatch through a request queue, against the bare bitmap under its tags, and completion
//! with one hardware queue against many sharing one tag space.
//!
//! # Per-I/O cost
//!
//! One I/O is a [`RequestQueue::submit`] of a bio of 8 sectors (its data one 4 KiB buffer,
//! one segment), the request it gets, the driver's [`Driver::queue_rq`] and
//! [`RequestQueue::end_request`]: no elevator, a driver that does no work, and bios spaced
//! so no two are adjacent (nothing merges: every bio is one request). The host has [`IO_CPUS`] CPUs and as many hardware queues, each with its
//! own tags, so thread `t` is CPU `t` on hardware queue `t`. The cases:
//!
//! * `raw`: one [`SbitmapQueue::get`] and [`SbitmapQueue::put`] of a bitmap of the same
//!   depth through a hint owned by the thread, as `benches/tags.rs` measures it: the floor;
//! * `io`: the driver ends each request inside `queue_rq`
//!   (`cx.queue().end_request(rq, Status::Ok)`), so the submission issues it directly to the
//!   idle hardware queue and it has ended when `submit` returns;
//! * `io_8seg`: as `io`, each bio's 4 KiB in a `'static` table of 8 segments of 512 bytes,
//!   none contiguous with the next: what counting, splitting and merging on real segments
//!   cost where the one-segment bio takes the shortcut;
//! * `io_plug`: the same bios through one [`Plug`] started with [`Plug::with_ios`] for
//!   [`PLUG_BATCH`] requests, reused and flushed every [`PLUG_BATCH`] requests: its requests
//!   come from its cache, taken in batch allocations, and the flush issues them to the idle
//!   hardware queue;
//! * `io_hold` and `io_hold_plug`: the driver keeps each request in a ring of its hardware
//!   queue, and the submitting thread ends it right after (after each `submit`, after each
//!   flush), as a driver ending requests from its completion path would.
//!
//! * `floor`: as `raw`, each thread with a bitmap of its own: nothing shared at all, the
//!   floor a second thread can scale against.
//!
//! Groups `dispatch_1t` (one thread) and `dispatch_2t` (two at once after a common start,
//! each doing the same number of I/Os; the time is the wall time for each thread to do one,
//! so it compares with the one-thread time). In `dispatch_2t` `raw` is one bitmap both
//! threads share while each thread has its own hardware queue and tags, so `io / raw` there
//! holds the layer against a harder floor. The target: `io / raw` at most [`IO_TARGET`] with
//! one thread.
//!
//! # Completion cost
//!
//! A host with [`TagSetFlags::SHARED_HOST_TAGS`] (one tag space for every hardware queue, as
//! a RAID HBA has) and [`COMPLETE_CPUS`] CPUs, with one hardware queue or
//! [`WIDE_HCTXS`] of them (the CPUs spread over them); the thread is pinned to the last CPU,
//! so it submits on the last hardware queue. Each round submits [`HELD`] requests, which the
//! driver holds, and then ends them: only the ending is timed, one
//! [`RequestQueue::end_request`] each (`end_request`) or one
//! [`RequestQueue::end_requests`] for the round (`end_requests`). The driver never turns a
//! request down and the tags never run out, so no hardware queue ever waits for a
//! completion: the completion's restart finds nothing to run, which must cost the same with
//! any number of hardware queues. [`Wide::settled`] checks after the runs that none waited
//! (nothing left queued on any hardware queue, no kick asked for). The target: the time with
//! [`WIDE_HCTXS`] at most [`COMPLETE_TARGET`] times that with one.
//!
//! # Output
//!
//! After the benchmarks, a summary gives the ratios from criterion's medians. After an
//! unfiltered run, the same ratios are measured again as paired comparisons (interleaved
//! rounds, the median of the per-round ratios), which a noisy machine disturbs far less,
//! with two more: the line `scale: io 2t/1t = X.XX; floor 2t/1t = Y.YY` (the time per I/O
//! of each thread with two threads over that with one, for `io` and for `floor`), and
//! `completions that submit, in a run batch / without` (a [`Reaped`] round of completions,
//! each submitting the next bio, run as the hardware queue's runner against the same round
//! without), `end_requests / end_request` on the one-hardware-queue host (the time per request of a
//! batched completion over single ones; the target at most [`BATCH_TARGET`]).
//! Then `tracer: set/none`: the `io` case on a queue with a [`blkmq_core::RingTracer`]
//! against one without a tracer (the target: at most [`TRACER_TARGET`]). Last,
//! `accounting: on/off`: the `io` case with [`QueueConfig::accounting`] on against off,
//! paired, at one thread and two (the target: at most [`ACCOUNTING_TARGET`]), beside
//! `off/off`, the same harness with accounting off on both sides (its own noise).
//!
//! Under the tracer's line, the `of which:` lines say where its cost goes, in the same run:
//! the queue's side alone (a tracer that keeps nothing), and the trace clock's two readings
//! per I/O alone (the `io` case plus two readings, see [`Clocked`]). A reading's cost is the
//! machine's (a virtual machine's time-stamp counter can cost tens of nanoseconds): the
//! ratio of the readings alone is a floor a tracer cannot go under on that machine, and a
//! line under them says so where it is over the target at both thread counts. The
//! accounting has no such line: it reads no clock the `io` case does not read already (its
//! reading is the one that stamps the request's start, which the queue takes anyway).
//!
//! What goes through [`black_box`]: each bio (its sector is a run-time value anyway) and the
//! raw bit between get and put. Every timed step is `#[inline(never)]`, so criterion's loops
//! and the paired ones run the same machine code.
//!
//! `cargo bench --bench dispatch` runs everything (about a minute);
//! `cargo bench --bench dispatch -- complete` only the completion group;
//! `cargo bench --bench dispatch -- paired` only the paired tables.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use blkmq_core::{
    Bio, BioFlags, Driver, HctxCx, Host, Op, PLUG_MAX, Plug, QueueConfig, QueueLimits, Rejected,
    RequestInit, RequestQueue, Rq, Segment, Status, StdPlatform, TagSet, TagSetFlags,
};
use blkmq_sbitmap::{AllocHint, SbitmapQueue};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput};
use crossbeam_queue::ArrayQueue;

mod common;
#[path = "common/inline.rs"]
mod inline;

use common::{
    PAIRED_ROUNDS, bind_to_cpu, config, criterion_median, paired_ratio, paired_wanted, rendezvous,
    wait_for,
};
use inline::Inline;

/// Tags of each hardware queue in the per-I/O cases, and the depth of the raw bitmap.
const IO_DEPTH: usize = 64;

/// CPUs of the per-I/O host, and its hardware queues: one per CPU.
const IO_CPUS: usize = 2;

/// The most threads any group runs.
const THREADS: usize = 2;

/// Requests a plug gathers before the bench flushes it (the plug's own limit).
const PLUG_BATCH: usize = PLUG_MAX;

/// Bio positions each thread cycles through (a power of two).
const SLOTS: u64 = 4096;

/// Sectors from one bio position to the next: twice a bio, so no two bios touch.
const SLOT_SECTORS: u64 = 16;

/// Sectors of every bio.
const BIO_SECTORS: u32 = 8;

/// The device's size in sectors: every position of every thread.
const CAPACITY: u64 = SLOTS * SLOT_SECTORS * THREADS as u64;

/// CPUs of the completion hosts.
const COMPLETE_CPUS: usize = 128;

/// Hardware queues of the wide completion host.
const WIDE_HCTXS: usize = 128;

/// Shared host tags of the completion hosts.
const COMPLETE_DEPTH: usize = 256;

/// Requests the driver holds, then ends, in each completion round.
const HELD: usize = 128;

/// The CPU the completion thread is pinned to: the last, so on the wide host it submits on
/// the last hardware queue.
const COMPLETE_CPU: usize = COMPLETE_CPUS - 1;

/// The most one I/O may cost, as a ratio of time over `raw` (one thread).
const IO_TARGET: f64 = 8.0;

/// The most a completion may cost with [`WIDE_HCTXS`] hardware queues, as a ratio of time
/// over one hardware queue.
const COMPLETE_TARGET: f64 = 1.10;

/// The most a request may cost ended in a batch, as a ratio of time over ending it alone.
const BATCH_TARGET: f64 = 0.85;

/// One side of a pair, `n` I/Os at `threads` threads, on `devs` in turn.
fn turns(devs: &[Dev<Inline>], threads: usize, n: u64) -> impl FnMut() -> Duration + '_ {
    let mut turn = 0usize;
    move || {
        turn += 1;
        timed(&Direct(&devs[turn % devs.len()]), threads, n)
    }
}

/// Queues each side of the accounting's pairs is spread over (see [`accounting_summary`]).
const PLACEMENTS: usize = 4;

/// The most one I/O may cost with accounting on, as a ratio of time over accounting off.
const ACCOUNTING_TARGET: f64 = 1.05;

/// The most one I/O may cost with a [`blkmq_core::RingTracer`] set, as a ratio of time over
/// no tracer.
const TRACER_TARGET: f64 = 1.15;

/// Requests in flight on each thread's hardware queue in a [`Reaped`] step, all of which it
/// ends and replaces.
const REAPED: usize = 32;

/// I/Os (or completions) per thread in one round of a paired comparison.
const PAIRED_IOS: u64 = 50_000;

/// Where the one-segment bios' buffers start (an address the null drivers never touch: the
/// block layer does not dereference one).
const ONE_SEGMENT: u64 = 0x1_0000_0000;

/// The data of every `io_8seg` bio: 8 segments of 512 bytes, a page apart.
static EIGHT_SEGMENTS: [Segment; 8] = [
    Segment::new(0x10_0000, 512),
    Segment::new(0x10_1000, 512),
    Segment::new(0x10_2000, 512),
    Segment::new(0x10_3000, 512),
    Segment::new(0x10_4000, 512),
    Segment::new(0x10_5000, 512),
    Segment::new(0x10_6000, 512),
    Segment::new(0x10_7000, 512),
];

// ----- drivers -----

/// A driver that keeps each request in a ring of its hardware queue until the submitter
/// ends it. Each ring has room for every tag, so it never turns a request down.
struct Hold {
    rings: Box<[ArrayQueue<Rq>]>,
}

impl Hold {
    fn new(hctxs: usize, depth: usize) -> Self {
        Self {
            rings: (0..hctxs).map(|_| ArrayQueue::new(depth)).collect(),
        }
    }
}

impl Driver for Hold {
    type Platform = StdPlatform;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        // Full cannot happen (a ring per hardware queue as deep as the tags); should it,
        // the request goes back the way a driver's does, and `settled` finds it waiting.
        self.rings[cx.hctx()].push(rq).map_err(|rq| Rejected {
            rq,
            status: Status::Resource,
        })
    }
}

/// The drivers of the per-I/O cases.
trait NullDriver: Driver<Platform = StdPlatform, Payload = ()> {
    /// A driver for `hctxs` hardware queues of `depth` tags each.
    fn make(hctxs: usize, depth: usize) -> Self;

    /// Ends whatever the driver holds on `hctx`.
    fn reap(queue: &RequestQueue<Self>, hctx: usize);

    /// Requests the driver holds on `hctx`.
    fn holding(&self, hctx: usize) -> usize;
}

impl NullDriver for Inline {
    fn make(_: usize, _: usize) -> Self {
        Inline
    }

    #[inline(always)]
    fn reap(_: &RequestQueue<Self>, _: usize) {}

    fn holding(&self, _: usize) -> usize {
        0
    }
}

impl NullDriver for Hold {
    fn make(hctxs: usize, depth: usize) -> Self {
        Hold::new(hctxs, depth)
    }

    #[inline(always)]
    fn reap(queue: &RequestQueue<Self>, hctx: usize) {
        while let Some(rq) = queue.driver().rings[hctx].pop() {
            queue.end_request(rq, Status::Ok).unwrap();
        }
    }

    fn holding(&self, hctx: usize) -> usize {
        self.rings[hctx].len()
    }
}

// ----- workloads -----

/// Something measured one step (one I/O, one tag) at a time, by one thread or two.
trait Workload: Sync {
    /// What each thread keeps for itself.
    type Local<'a>
    where
        Self: 'a;

    /// The state of thread number `thread` (its CPU), made on that thread (which it pins).
    fn local(&self, thread: usize) -> Self::Local<'_>;

    /// One step.
    fn step<'a>(&'a self, local: &mut Self::Local<'a>);

    /// Whatever is left to do after the last step (part of the time).
    fn finish<'a>(&'a self, local: &mut Self::Local<'a>) {
        let _ = local;
    }
}

/// The bitmap a tag map keeps its normal tags in, used directly.
struct Raw(SbitmapQueue);

impl Raw {
    fn new() -> Self {
        Self(SbitmapQueue::new(IO_DEPTH).expect("a valid depth"))
    }
}

impl Workload for Raw {
    type Local<'a> = AllocHint;

    fn local(&self, thread: usize) -> AllocHint {
        AllocHint::spread(thread, IO_CPUS)
    }

    #[inline(never)]
    fn step(&self, hint: &mut AllocHint) {
        let hint = black_box(&*hint);
        let bit = self.0.get(hint).expect("a free tag");
        self.0.put(black_box(bit), hint).expect("an allocated tag");
    }
}

/// A bitmap of [`Raw`]'s depth for each thread: get and put touch nothing another thread
/// touches.
struct Floor(Box<[Box<SbitmapQueue>]>);

impl Floor {
    fn new() -> Self {
        Self(
            (0..THREADS)
                .map(|_| Box::new(SbitmapQueue::new(IO_DEPTH).expect("a valid depth")))
                .collect(),
        )
    }
}

impl Workload for Floor {
    type Local<'a> = (&'a SbitmapQueue, AllocHint);

    fn local(&self, thread: usize) -> (&SbitmapQueue, AllocHint) {
        (&self.0[thread], AllocHint::spread(thread, IO_CPUS))
    }

    #[inline(never)]
    fn step(&self, local: &mut (&SbitmapQueue, AllocHint)) {
        let (map, hint) = (local.0, black_box(&local.1));
        let bit = map.get(hint).expect("a free tag");
        map.put(black_box(bit), hint).expect("an allocated tag");
    }
}

/// A host of [`IO_CPUS`] CPUs and hardware queues and one request queue on it.
struct Dev<D: NullDriver> {
    host: Arc<Host<D>>,
    queue: Arc<RequestQueue<D>>,
}

impl<D: NullDriver> Dev<D> {
    fn new() -> Self {
        let host = Host::new(
            TagSet::builder(IO_DEPTH).hw_queues(IO_CPUS),
            StdPlatform::with_cpus(IO_CPUS),
            D::make(IO_CPUS, IO_DEPTH),
        )
        .expect("a valid host");
        let queue = host
            .add_queue(QueueConfig::new(QueueLimits::new(CAPACITY)))
            .expect("a valid queue");
        let dev = Self { host, queue };
        dev.settled();
        dev
    }

    /// Nothing allocated, held, queued or kicked: every I/O so far ended, and no hardware
    /// queue waits.
    fn settled(&self) {
        let queue = &self.queue;
        for hctx in 0..queue.nr_hw_queues() {
            assert!(!queue.has_work(hctx), "hardware queue {hctx} has work left");
            assert_eq!(self.host.driver().holding(hctx), 0);
        }
        assert_eq!(self.host.set().busy(), 0);
        assert_eq!(self.host.in_driver(), 0);
        assert_eq!(queue.usage(), 0);
        assert!(queue.platform().take_kicks().is_empty());
    }
}

impl Dev<Hold> {
    /// Every bio of a plug's worth is a request of its own, made on the thread's hardware
    /// queue: nothing merged.
    fn check_no_merges(&self) {
        for thread in 0..THREADS {
            let mut sub = Submitter::new(self, thread);
            let mut plug = Plug::new();
            for _ in 0..PLUG_BATCH {
                self.queue
                    .submit_plugged(&mut plug, sub.bio())
                    .expect("a free request");
            }
            assert_eq!(plug.len(), PLUG_BATCH, "bios merged in the plug");
            plug.flush();
            assert_eq!(self.host.driver().holding(sub.hctx), PLUG_BATCH);
            Hold::reap(&self.queue, sub.hctx);
        }
        self.settled();
    }
}

/// A submitting thread: its hardware queue and where its next bio goes.
struct Submitter {
    hctx: usize,
    /// The thread's first bio position.
    base: u64,
    /// The next position after `base`, below [`SLOTS`].
    slot: u64,
}

impl Submitter {
    /// Pins the calling thread to CPU `thread` of `dev`.
    fn new<D: NullDriver>(dev: &Dev<D>, thread: usize) -> Self {
        dev.queue.platform().pin_current_thread(thread);
        let (_, hctx) = dev.queue.maps().select(thread, Op::Read, BioFlags::empty());
        assert_eq!(hctx, thread, "one hardware queue per CPU");
        Self {
            hctx,
            base: thread as u64 * SLOTS,
            slot: 0,
        }
    }

    /// The next bio: 8 sectors, 8 sectors clear of the one before and the one after, its
    /// data one 4 KiB buffer (one segment; the null drivers never touch it).
    #[inline(always)]
    fn bio(&mut self) -> Bio {
        let sector = (self.base + self.slot) * SLOT_SECTORS;
        self.slot = (self.slot + 1) & (SLOTS - 1);
        black_box(Bio::new(Op::Read, sector, BIO_SECTORS).buffer(ONE_SEGMENT + sector * 512))
    }

    /// The next bio, its data in [`EIGHT_SEGMENTS`].
    #[inline(always)]
    fn bio_8seg(&mut self) -> Bio {
        let sector = (self.base + self.slot) * SLOT_SECTORS;
        self.slot = (self.slot + 1) & (SLOTS - 1);
        black_box(Bio::new(Op::Read, sector, BIO_SECTORS).segments(&EIGHT_SEGMENTS))
    }
}

/// Every bio submitted on its own.
struct Direct<'d, D: NullDriver>(&'d Dev<D>);

impl<D: NullDriver> Workload for Direct<'_, D> {
    type Local<'a>
        = Submitter
    where
        Self: 'a;

    fn local(&self, thread: usize) -> Submitter {
        Submitter::new(self.0, thread)
    }

    #[inline(never)]
    fn step(&self, sub: &mut Submitter) {
        let queue = &*self.0.queue;
        queue.submit(sub.bio()).expect("a free request");
        D::reap(queue, sub.hctx);
    }
}

/// As [`Direct`] on a queue with neither accounting nor a tracer, and `reads` readings of
/// the trace clock ([`Platform::trace_now_ns`](blkmq_core::Platform::trace_now_ns), which a
/// queue with a tracer reads twice per I/O: its submission's events and its completion)
/// beside it: paired against [`Direct`], the share of an I/O those readings alone take on
/// this machine, a floor under what a tracer can cost.
struct Clocked<'d> {
    dev: &'d Dev<Inline>,
    platform: StdPlatform,
    reads: usize,
}

impl Workload for Clocked<'_> {
    type Local<'a>
        = Submitter
    where
        Self: 'a;

    fn local(&self, thread: usize) -> Submitter {
        Submitter::new(self.dev, thread)
    }

    #[inline(never)]
    fn step(&self, sub: &mut Submitter) {
        use blkmq_core::Platform;
        for _ in 0..self.reads {
            black_box(self.platform.trace_now_ns());
        }
        let queue = &*self.dev.queue;
        queue.submit(sub.bio()).expect("a free request");
        Inline::reap(queue, sub.hctx);
    }
}

/// As [`Direct`], every bio's data in 8 segments.
struct Direct8<'d, D: NullDriver>(&'d Dev<D>);

impl<D: NullDriver> Workload for Direct8<'_, D> {
    type Local<'a>
        = Submitter
    where
        Self: 'a;

    fn local(&self, thread: usize) -> Submitter {
        Submitter::new(self.0, thread)
    }

    #[inline(never)]
    fn step(&self, sub: &mut Submitter) {
        let queue = &*self.0.queue;
        queue.submit(sub.bio_8seg()).expect("a free request");
        D::reap(queue, sub.hctx);
    }
}

/// Every bio submitted into one plug, flushed every [`PLUG_BATCH`] requests.
struct Plugged<'d, D: NullDriver>(&'d Dev<D>);

/// A thread's plug and what is in it.
struct PlugLocal<'q, D: NullDriver> {
    sub: Submitter,
    plug: Plug<'q, D>,
    queued: usize,
}

impl<D: NullDriver> Workload for Plugged<'_, D> {
    type Local<'a>
        = PlugLocal<'a, D>
    where
        Self: 'a;

    fn local(&self, thread: usize) -> PlugLocal<'_, D> {
        PlugLocal {
            sub: Submitter::new(self.0, thread),
            plug: Plug::with_ios(PLUG_BATCH),
            queued: 0,
        }
    }

    #[inline(never)]
    fn step<'a>(&'a self, local: &mut PlugLocal<'a, D>) {
        let queue: &'a RequestQueue<D> = &self.0.queue;
        queue
            .submit_plugged(&mut local.plug, local.sub.bio())
            .expect("a free request");
        local.queued += 1;
        if local.queued == PLUG_BATCH {
            local.plug.flush();
            D::reap(queue, local.sub.hctx);
            local.queued = 0;
        }
    }

    fn finish<'a>(&'a self, local: &mut PlugLocal<'a, D>) {
        local.plug.flush();
        D::reap(&self.0.queue, local.sub.hctx);
        local.queued = 0;
    }
}

/// A driver's completion loop: [`REAPED`] requests in flight on the thread's hardware
/// queue, and each step ends all of them, one [`RequestQueue::end_request`] each, each
/// followed by the submission of the next bio (as a completion that submits the next I/O),
/// which the idle hardware queue issues at once. With `batch`, the step runs as the hardware
/// queue's runner ([`RequestQueue::run_batch`]), as a reaper of a batch of completions does.
struct Reaped<'d> {
    dev: &'d Dev<Hold>,
    batch: bool,
}

impl Workload for Reaped<'_> {
    type Local<'a>
        = Submitter
    where
        Self: 'a;

    fn local(&self, thread: usize) -> Submitter {
        let mut sub = Submitter::new(self.dev, thread);
        for _ in 0..REAPED {
            self.dev.queue.submit(sub.bio()).expect("a free request");
        }
        sub
    }

    #[inline(never)]
    fn step(&self, sub: &mut Submitter) {
        let queue = &*self.dev.queue;
        let hctx = sub.hctx;
        let ring = &self.dev.host.driver().rings[hctx];
        let mut round = || {
            for _ in 0..REAPED {
                let rq = ring.pop().expect("a request in flight");
                queue.end_request(rq, Status::Ok).unwrap();
                queue.submit(sub.bio()).expect("a free request");
            }
        };
        if self.batch {
            queue.run_batch(hctx, round);
        } else {
            round();
        }
        assert_eq!(ring.len(), REAPED, "a request was not issued");
    }

    fn finish(&self, sub: &mut Submitter) {
        Hold::reap(&self.dev.queue, sub.hctx);
    }
}

/// One thread (CPU 0) doing `iters` steps of `imp`; returns the time it took.
fn one_thread<W: Workload>(imp: &W, iters: u64) -> Duration {
    bind_to_cpu(0);
    let mut local = imp.local(0);
    let start = Instant::now();
    for _ in 0..iters {
        imp.step(&mut local);
    }
    imp.finish(&mut local);
    start.elapsed()
}

/// Two threads (CPUs 0 and 1) doing `iters` steps each of `imp` at the same time; returns
/// the wall time from their common start until both are done.
fn two_threads<W: Workload>(imp: &W, iters: u64) -> Duration {
    let ready = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let (ready, done) = (&ready, &done);
    thread::scope(|s| {
        // The second thread takes copies of what it needs: reading them through this
        // frame would share its cache lines with the first thread's state, which lives
        // here and changes on every step.
        let second = s.spawn(move || {
            bind_to_cpu(1);
            let mut local = imp.local(1);
            rendezvous(ready, THREADS);
            for _ in 0..iters {
                imp.step(&mut local);
            }
            imp.finish(&mut local);
            done.fetch_add(1, Ordering::AcqRel);
        });
        bind_to_cpu(0);
        let mut local = imp.local(0);
        rendezvous(ready, THREADS);
        let start = Instant::now();
        for _ in 0..iters {
            imp.step(&mut local);
        }
        imp.finish(&mut local);
        done.fetch_add(1, Ordering::AcqRel);
        wait_for(done, THREADS);
        let time = start.elapsed();
        // Joined, not left to the scope: a join waits until the thread is gone, its
        // thread-locals too, so the CPU it held alone on the platform is free again when
        // the next call's second thread asks for it (the scope alone returns before that).
        second.join().expect("the second thread");
        time
    })
}

/// `iters` steps of `imp` by one thread or by two at once.
fn timed<W: Workload>(imp: &W, threads: usize, iters: u64) -> Duration {
    if threads == 1 {
        one_thread(imp, iters)
    } else {
        two_threads(imp, iters)
    }
}

/// The per-I/O contenders.
struct IoContenders {
    raw: Raw,
    floor: Floor,
    inline: Dev<Inline>,
    hold: Dev<Hold>,
}

impl IoContenders {
    fn new() -> Self {
        let hold = Dev::<Hold>::new();
        hold.check_no_merges();
        Self {
            raw: Raw::new(),
            floor: Floor::new(),
            inline: Dev::new(),
            hold,
        }
    }

    fn settled(&self) {
        self.inline.settled();
        self.hold.settled();
    }
}

// ----- completion -----

/// A host of [`COMPLETE_CPUS`] CPUs with shared host tags over some hardware queues, one
/// request queue, and the hardware queue the pinned thread submits on.
struct Wide {
    host: Arc<Host<Hold>>,
    queue: Arc<RequestQueue<Hold>>,
    hctx: usize,
}

impl Wide {
    fn new(hctxs: usize) -> Self {
        let host = Host::new(
            TagSet::builder(COMPLETE_DEPTH)
                .hw_queues(hctxs)
                .flags(TagSetFlags::SHARED_HOST_TAGS),
            StdPlatform::with_cpus(COMPLETE_CPUS),
            // One tag space: any one hardware queue may hold every tag.
            Hold::new(hctxs, COMPLETE_DEPTH),
        )
        .expect("a valid host");
        assert_eq!(host.set().nr_maps(), 1);
        let queue = host
            .add_queue(QueueConfig::new(QueueLimits::new(CAPACITY)))
            .expect("a valid queue");
        assert_eq!(queue.nr_hw_queues(), hctxs);
        let (_, hctx) = queue
            .maps()
            .select(COMPLETE_CPU, Op::Read, BioFlags::empty());
        assert_eq!(hctx, hctxs - 1, "the last CPU on the last hardware queue");
        let wide = Self { host, queue, hctx };
        wide.check();
        wide
    }

    /// A round lands where it should: all of it held by the driver on the thread's hardware
    /// queue, nothing queued anywhere.
    fn check(&self) {
        self.queue.platform().pin_current_thread(COMPLETE_CPU);
        let mut slot = 0;
        for _ in 0..HELD {
            self.queue.submit(slot_bio(&mut slot)).expect("a free tag");
        }
        let driver = self.host.driver();
        for hctx in 0..self.queue.nr_hw_queues() {
            let want = if hctx == self.hctx { HELD } else { 0 };
            assert_eq!(driver.holding(hctx), want);
            assert!(!self.queue.has_work(hctx));
        }
        assert_eq!(self.host.in_driver(), HELD);
        Hold::reap(&self.queue, self.hctx);
        self.settled();
    }

    /// As [`Dev::settled`]: nothing was left waiting on any hardware queue.
    fn settled(&self) {
        for hctx in 0..self.queue.nr_hw_queues() {
            assert!(!self.queue.has_work(hctx), "hardware queue {hctx} waits");
            assert_eq!(self.host.driver().holding(hctx), 0);
        }
        assert_eq!(self.host.set().busy(), 0);
        assert_eq!(self.host.in_driver(), 0);
        assert_eq!(self.queue.usage(), 0);
        assert!(self.queue.platform().take_kicks().is_empty());
    }

    /// Ends `iters` requests the driver holds, in rounds of [`HELD`], one call each or one
    /// batch per round; returns the time spent ending them (the submissions are not timed).
    fn complete(&self, iters: u64, batch: bool) -> Duration {
        self.queue.platform().pin_current_thread(COMPLETE_CPU);
        let ring = &self.host.driver().rings[self.hctx];
        let mut held = Vec::with_capacity(HELD);
        let mut slot = 0;
        let mut left = iters;
        let mut spent = Duration::ZERO;
        while left > 0 {
            let n = left.min(HELD as u64) as usize;
            for _ in 0..n {
                self.queue.submit(slot_bio(&mut slot)).expect("a free tag");
            }
            while let Some(rq) = ring.pop() {
                held.push(rq);
            }
            assert_eq!(held.len(), n);
            let start = Instant::now();
            if batch {
                end_batch(&self.queue, &mut held);
            } else {
                end_each(&self.queue, &mut held);
            }
            spent += start.elapsed();
            left -= n as u64;
        }
        spent
    }
}

/// The next bio of the completion rounds, 8 sectors clear of its neighbours.
fn slot_bio(slot: &mut u64) -> Bio {
    let sector = (*slot & (SLOTS - 1)) * SLOT_SECTORS;
    *slot += 1;
    black_box(Bio::new(Op::Read, sector, BIO_SECTORS))
}

/// Ends every request of `held`, one [`RequestQueue::end_request`] each.
#[inline(never)]
fn end_each(queue: &RequestQueue<Hold>, held: &mut Vec<Rq>) {
    for rq in held.drain(..) {
        queue.end_request(rq, Status::Ok).unwrap();
    }
}

/// Ends every request of `held` with one [`RequestQueue::end_requests`].
#[inline(never)]
fn end_batch(queue: &RequestQueue<Hold>, held: &mut Vec<Rq>) {
    queue
        .end_requests(held.drain(..).map(|rq| (rq, Status::Ok)))
        .unwrap();
}

/// The completion hosts: one hardware queue and [`WIDE_HCTXS`].
struct CompleteContenders {
    one: Wide,
    wide: Wide,
}

impl CompleteContenders {
    fn new() -> Self {
        Self {
            one: Wide::new(1),
            wide: Wide::new(WIDE_HCTXS),
        }
    }

    fn settled(&self) {
        self.one.settled();
        self.wide.settled();
    }
}

// ----- criterion -----

fn dispatch(c: &mut Criterion, threads: usize) {
    fn one<W: Workload>(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, imp: &W, threads: usize) {
        g.bench_function(name, |b| b.iter_custom(|iters| timed(imp, threads, iters)));
    }
    let all = IoContenders::new();
    let mut g = c.benchmark_group(format!("dispatch_{threads}t"));
    // One iteration is one I/O on each thread.
    g.throughput(Throughput::Elements(threads as u64));
    one(&mut g, "raw", &all.raw, threads);
    one(&mut g, "floor", &all.floor, threads);
    one(&mut g, "io", &Direct(&all.inline), threads);
    one(&mut g, "io_8seg", &Direct8(&all.inline), threads);
    one(&mut g, "io_plug", &Plugged(&all.inline), threads);
    one(&mut g, "io_hold", &Direct(&all.hold), threads);
    one(&mut g, "io_hold_plug", &Plugged(&all.hold), threads);
    g.finish();
    all.settled();
}

fn complete(c: &mut Criterion) {
    let all = CompleteContenders::new();
    let mut g = c.benchmark_group("complete");
    g.throughput(Throughput::Elements(1));
    // Only the ending is timed: the submissions around it take about twice as long again,
    // so half the usual measuring time keeps the group's wall time in line with the others.
    g.measurement_time(Duration::from_secs(1));
    for (name, wide, batch) in [
        ("end_request_1hctx", &all.one, false),
        ("end_request_128hctx", &all.wide, false),
        ("end_requests_1hctx", &all.one, true),
        ("end_requests_128hctx", &all.wide, true),
    ] {
        g.bench_function(name, |b| b.iter_custom(|iters| wide.complete(iters, batch)));
    }
    g.finish();
    all.settled();
}

fn main() {
    let started = SystemTime::now();
    let paired = paired_wanted();
    // What `criterion_group!` and `criterion_main!` expand to, less the undocumented `pub fn`.
    let mut c = config().configure_from_args();
    dispatch(&mut c, 1);
    dispatch(&mut c, 2);
    complete(&mut c);
    c.final_summary();
    summary(started);
    if paired {
        paired_summary();
        paired_tracer();
        accounting_summary();
    }
}

// ----- tables -----

/// One ratio per thread count, from one thread up, each with `digits` decimals and starred
/// when over `target`: `1.234* (1t), 1.012 (2t)`.
fn per_threads(ratios: &[f64], digits: usize, target: f64) -> String {
    let shown: Vec<String> = ratios
        .iter()
        .zip(1..)
        .map(|(&ratio, threads)| {
            let miss = if ratio > target { "*" } else { "" };
            format!("{ratio:.digits$}{miss} ({threads}t)")
        })
        .collect();
    shown.join(", ")
}

/// A ratio of time against `target`, starred when it misses it.
fn against(ratio: f64, target: f64) -> String {
    let miss = if ratio > target { "*" } else { " " };
    format!("{ratio:>5.2}{miss}")
}

/// The header of both per-I/O tables, after the leading columns `lead`.
fn io_header(lead: &str, lead_align: &str) {
    println!(
        "| {lead} | io / raw (<= {IO_TARGET} at 1t) | io_8seg / io | io_plug / io | io_hold / raw | io_hold_plug / io_hold |"
    );
    println!("|{lead_align}---:|---:|---:|---:|---:|");
}

/// The header of both completion tables, after the leading columns `lead`.
fn complete_header(lead: &str, lead_align: &str) {
    println!("| {lead} | {WIDE_HCTXS} hctxs / 1 hctx (<= {COMPLETE_TARGET}) |");
    println!("|{lead_align}---:|");
}

/// Prints the ratios from criterion's medians, for every group this run measured.
fn summary(started: SystemTime) {
    let mut io_rows = Vec::new();
    for threads in 1..=THREADS {
        let group = format!("dispatch_{threads}t");
        let m = |f: &str| criterion_median(started, &group, f);
        let (Some(raw), Some(io), Some(seg8), Some(plug), Some(hold), Some(hold_plug)) = (
            m("raw"),
            m("io"),
            m("io_8seg"),
            m("io_plug"),
            m("io_hold"),
            m("io_hold_plug"),
        ) else {
            continue;
        };
        io_rows.push(format!(
            "| {threads} | {raw:>6.2} | {io:>7.2} | {seg8:>7.2} | {plug:>7.2} | {hold:>7.2} | {hold_plug:>7.2} | {} | {:>5.2} | {:>5.2} | {:>5.2} | {:>5.2} |",
            against(io / raw, if threads == 1 { IO_TARGET } else { f64::INFINITY }),
            seg8 / io,
            plug / io,
            hold / raw,
            hold_plug / hold,
        ));
    }
    if !io_rows.is_empty() {
        println!();
        println!(
            "Per I/O (criterion medians, ns per I/O and thread; ratios of time; * misses its target):"
        );
        io_header(
            "threads | raw ns | io ns | io_8seg ns | io_plug ns | io_hold ns | io_hold_plug ns",
            "---:|---:|---:|---:|---:|---:|---:|",
        );
        for row in io_rows {
            println!("{row}");
        }
    }
    let m = |f: &str| criterion_median(started, "complete", f);
    let mut complete_rows = Vec::new();
    for (name, one, wide) in [
        ("end_request", "end_request_1hctx", "end_request_128hctx"),
        ("end_requests", "end_requests_1hctx", "end_requests_128hctx"),
    ] {
        if let (Some(one), Some(wide)) = (m(one), m(wide)) {
            complete_rows.push(format!(
                "| {name} | {one:>6.2} | {wide:>6.2} | {} |",
                against(wide / one, COMPLETE_TARGET),
            ));
        }
    }
    if !complete_rows.is_empty() {
        println!();
        println!(
            "Completion with shared host tags (criterion medians, ns per request; rounds of {HELD}; * misses its target):"
        );
        complete_header(
            &format!("completion | 1 hctx ns | {WIDE_HCTXS} hctxs ns"),
            "---|---:|---:|",
        );
        for row in complete_rows {
            println!("{row}");
        }
    }
}

/// The ratios again, each measured as a paired comparison (see [`paired_ratio`]).
fn paired_summary() {
    let n = PAIRED_IOS;
    println!();
    println!(
        "Paired ratios per I/O (median of {PAIRED_ROUNDS} back-to-back rounds of {n} I/Os per thread; * misses its target):"
    );
    io_header("threads", "---:|");
    {
        let all = IoContenders::new();
        let raw = &all.raw;
        let (io, plug) = (&Direct(&all.inline), &Plugged(&all.inline));
        let seg8 = &Direct8(&all.inline);
        let (hold, hold_plug) = (&Direct(&all.hold), &Plugged(&all.hold));
        for threads in 1..=THREADS {
            let io_raw = paired_ratio(|| timed(io, threads, n), || timed(raw, threads, n));
            let seg8_io = paired_ratio(|| timed(seg8, threads, n), || timed(io, threads, n));
            let plug_io = paired_ratio(|| timed(plug, threads, n), || timed(io, threads, n));
            let hold_raw = paired_ratio(|| timed(hold, threads, n), || timed(raw, threads, n));
            let hold_plug_hold =
                paired_ratio(|| timed(hold_plug, threads, n), || timed(hold, threads, n));
            let target = if threads == 1 {
                IO_TARGET
            } else {
                f64::INFINITY
            };
            println!(
                "| {threads} | {} | {seg8_io:>5.2} | {plug_io:>5.2} | {hold_raw:>5.2} | {hold_plug_hold:>5.2} |",
                against(io_raw, target),
            );
        }
        let floor = &all.floor;
        let io_scale = paired_ratio(|| timed(io, 2, n), || timed(io, 1, n));
        let floor_scale = paired_ratio(|| timed(floor, 2, n), || timed(floor, 1, n));
        println!();
        println!("scale: io 2t/1t = {io_scale:.2}; floor 2t/1t = {floor_scale:.2}");
        let plain = Reaped {
            dev: &all.hold,
            batch: false,
        };
        let batched = Reaped {
            dev: &all.hold,
            batch: true,
        };
        // A step is a round of `REAPED` I/Os.
        let rounds = n / REAPED as u64;
        let reaped: Vec<String> = (1..=THREADS)
            .map(|threads| {
                let ratio = paired_ratio(
                    || timed(&batched, threads, rounds),
                    || timed(&plain, threads, rounds),
                );
                format!("{ratio:.2} ({threads}t)")
            })
            .collect();
        println!(
            "completions that submit, in a run batch / without (per I/O): {}",
            reaped.join(", ")
        );
        all.settled();
    }
    println!();
    println!(
        "Paired completion ratios (median of {PAIRED_ROUNDS} back-to-back rounds of {n} completions, in rounds of {HELD}; * misses its target):"
    );
    complete_header("completion", "---|");
    let all = CompleteContenders::new();
    for (name, batch) in [("end_request", false), ("end_requests", true)] {
        let ratio = paired_ratio(
            || all.wide.complete(n, batch),
            || all.one.complete(n, batch),
        );
        println!("| {name} | {} |", against(ratio, COMPLETE_TARGET));
    }
    let batched = paired_ratio(|| all.one.complete(n, true), || all.one.complete(n, false));
    println!();
    println!(
        "end_requests / end_request (1 hctx, per request; <= {BATCH_TARGET}) = {}",
        against(batched, BATCH_TARGET)
    );
    all.settled();
}

/// A [`RingTracer`](blkmq_core::RingTracer) set against none, per `io` (direct issue, the
/// driver ending each request inside `queue_rq`): four events per I/O (Q, G, D, C), in two
/// slots (the direct issue's Q, G and D in one, the C in the other), into rings with room
/// for a round's, drained between rounds, outside the time.
fn paired_tracer() {
    let n = PAIRED_IOS;
    let rings = Arc::new(blkmq_core::RingTracer::new(IO_CPUS, 1 << 18));
    let tags = TagSet::builder(IO_DEPTH).hw_queues(IO_CPUS);
    let host = Host::new(
        tags,
        StdPlatform::with_cpus(IO_CPUS),
        Inline::make(IO_CPUS, IO_DEPTH),
    )
    .expect("a valid host");
    let config = QueueConfig::new(QueueLimits::new(CAPACITY)).tracer(rings.clone());
    let queue = host.add_queue(config).expect("a valid queue");
    let (set, none) = (Dev { host, queue }, Dev::<Inline>::new());
    let ratios: Vec<f64> = (1..=THREADS)
        .map(|threads| {
            let traced = || {
                let time = timed(&Direct(&set), threads, n);
                assert_eq!(rings.dropped(), 0, "the rings hold a round");
                rings.drain(|e| {
                    black_box(e);
                });
                time
            };
            paired_ratio(traced, || timed(&Direct(&none), threads, n))
        })
        .collect();
    set.settled();
    none.settled();
    println!();
    println!(
        "tracer: set/none = {} (<= {TRACER_TARGET})",
        per_threads(&ratios, 2, TRACER_TARGET)
    );
    // Where that goes: the events the queue makes, handed to a tracer that keeps none,
    // and under them the clock readings alone.
    let host = Host::new(
        TagSet::builder(IO_DEPTH).hw_queues(IO_CPUS),
        StdPlatform::with_cpus(IO_CPUS),
        Inline::make(IO_CPUS, IO_DEPTH),
    )
    .expect("a valid host");
    let config = QueueConfig::new(QueueLimits::new(CAPACITY)).tracer(Arc::new(KeepsNone));
    let queue = host.add_queue(config).expect("a valid queue");
    let discarded = Dev { host, queue };
    let ratios: Vec<f64> = (1..=THREADS)
        .map(|threads| {
            paired_ratio(
                || timed(&Direct(&discarded), threads, n),
                || timed(&Direct(&none), threads, n),
            )
        })
        .collect();
    discarded.settled();
    println!(
        "  of which: io with a tracer that keeps nothing / io = {} (the events made)",
        per_threads(&ratios, 3, f64::INFINITY)
    );
    let floor = clock_floor(2, "the tracer's two trace clock readings");
    if floor.iter().all(|&ratio| ratio > TRACER_TARGET) {
        println!(
            "  (the readings alone are over {TRACER_TARGET} here: no tracer whose events carry their time meets it on this machine)"
        );
    }
}

/// A tracer that looks at each event and keeps none: what the queue's side of tracing
/// costs, without a ring's. It takes a direct issue's Q, G and D as one, as the ring does.
struct KeepsNone;

impl blkmq_core::Tracer for KeepsNone {
    fn event(&self, event: &blkmq_core::TraceEvent) {
        black_box(event);
    }

    fn direct_issue(&self, issue: &blkmq_core::TraceEvent) {
        black_box(issue);
    }
}

/// Prints what `reads` readings of the trace clock per I/O alone cost, paired against the
/// same I/O without them (see [`Clocked`]), at one thread and two; returns the ratios.
fn clock_floor(reads: usize, what: &str) -> Vec<f64> {
    let dev = Dev::<Inline>::new();
    let clocked = Clocked {
        dev: &dev,
        platform: dev.queue.platform().clone(),
        reads,
    };
    let n = PAIRED_IOS;
    let ratios: Vec<f64> = (1..=THREADS)
        .map(|threads| {
            paired_ratio(
                || timed(&clocked, threads, n),
                || timed(&Direct(&dev), threads, n),
            )
        })
        .collect();
    dev.settled();
    println!(
        "  of which: io with {what} / io = {} (nothing else added)",
        per_threads(&ratios, 3, f64::INFINITY)
    );
    ratios
}

/// I/O accounting on against off ([`QueueConfig::accounting`]), paired per I/O as `io`
/// (each request ended inside `queue_rq`), at one thread and two. The target: at most
/// [`ACCOUNTING_TARGET`] at both.
fn accounting_summary() {
    let dev = |accounting: bool| {
        let host = Host::new(
            TagSet::builder(IO_DEPTH).hw_queues(IO_CPUS),
            StdPlatform::with_cpus(IO_CPUS),
            Inline::make(IO_CPUS, IO_DEPTH),
        )
        .expect("a valid host");
        let config = QueueConfig::new(QueueLimits::new(CAPACITY)).accounting(accounting);
        let queue = host.add_queue(config).expect("a valid queue");
        let dev = Dev { host, queue };
        dev.settled();
        dev
    };
    // Where a queue's memory falls moves its time by a few percent from one process to the
    // next (the `off/off` line shows it): each side is spread over several queues, taken in
    // turn, round by round, so the ratio is not one placement's.
    let many = |accounting: bool| -> Vec<Dev<Inline>> {
        (0..PLACEMENTS).map(|_| dev(accounting)).collect()
    };
    let (on, off, off2) = (many(true), many(false), many(false));
    let n = PAIRED_IOS;
    let ratios: Vec<f64> = (1..=THREADS)
        .map(|threads| paired_ratio(turns(&on, threads, n), turns(&off, threads, n)))
        .collect();
    // The harness's own noise: queues alike, accounting off on both sides.
    let same: Vec<f64> = (1..=THREADS)
        .map(|threads| paired_ratio(turns(&off2, threads, n), turns(&off, threads, n)))
        .collect();
    for dev in on.iter().chain(&off).chain(&off2) {
        dev.settled();
    }
    let on = &on[0];
    let stats = on.queue.stats().expect("accounting on");
    assert_eq!(stats.in_flight_total(), 0, "requests left in flight");
    assert_eq!(stats.ios(), stats.op(blkmq_core::OpGroup::Read).ios);
    println!();
    println!(
        "accounting: on/off = {} (paired per I/O, median of {PAIRED_ROUNDS} rounds of {n}, over {PLACEMENTS} queues a side; <= {ACCOUNTING_TARGET})",
        per_threads(&ratios, 3, ACCOUNTING_TARGET)
    );
    println!(
        "accounting: off/off = {} (the same, two queues with accounting off: the noise)",
        per_threads(&same, 3, f64::INFINITY)
    );
}
