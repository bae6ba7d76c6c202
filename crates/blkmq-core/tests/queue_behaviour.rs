//! The request queue's behaviour, one property per test: merging and where merging stops,
//! splitting, bad bios, plugging, timeouts, quiesce, freeze, restart, requeue, hardware
//! queue deactivation, run-time changes and completion.
//!
//! Every test builds its own host on its own platform. The driver, [`Disk`], records what
//! it is given and holds it until the test ends it (or ends it inline, or pushes back with
//! [`Status::Resource`]). Bio completions go to one table keyed by a per-test [`Log`] id,
//! carried in the upper half of each bio's `private`, so tests running in parallel never
//! see each other's ends.

#![cfg(not(loom))]

#[path = "common/fifo.rs"]
mod fifo;

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};

use blkmq_core::*;
use fifo::Fifo;

// ----- completions -----

/// Every bio end of every test: log id -> (bio number, status), in the order they ended.
static ENDS: Mutex<BTreeMap<u32, Vec<(u32, Status)>>> = Mutex::new(BTreeMap::new());
static NEXT_LOG: AtomicU32 = AtomicU32::new(1);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The `end_io` of every bio made by a [`Log`].
fn record(bio: Bio, status: Status) {
    let log = (bio.private >> 32) as u32;
    lock(&ENDS)
        .entry(log)
        .or_default()
        .push((bio.private as u32, status));
}

/// One test's completions: makes its bios and reads back how they ended.
struct Log(u32);

impl Log {
    fn new() -> Self {
        Self(NEXT_LOG.fetch_add(1, Ordering::Relaxed))
    }

    /// The `private` of bio number `n`.
    fn key(&self, n: u32) -> u64 {
        (u64::from(self.0) << 32) | u64::from(n)
    }

    /// Bio number `n`: `sectors` sectors of `op` from `sector`, ending into this log.
    fn bio(&self, n: u32, op: Op, sector: u64, sectors: u32) -> Bio {
        self.tag(n, Bio::new(op, sector, sectors))
    }

    /// `bio` as bio number `n` of this log.
    fn tag(&self, n: u32, bio: Bio) -> Bio {
        bio.private(self.key(n)).end_io(record)
    }

    /// The ends so far, in the order they came.
    fn ends(&self) -> Vec<(u32, Status)> {
        lock(&ENDS).get(&self.0).cloned().unwrap_or_default()
    }

    /// The ends so far, by bio number.
    fn sorted(&self) -> Vec<(u32, Status)> {
        let mut ends = self.ends();
        ends.sort_by_key(|e| e.0);
        ends
    }
}

/// Bios `0..n`, each ended once with `Ok`.
fn all_ok(n: u32) -> Vec<(u32, Status)> {
    (0..n).map(|i| (i, Status::Ok)).collect()
}

// ----- the driver -----

/// A request as the driver was given it.
#[derive(Clone, Debug)]
struct Seen {
    /// The request queue's address.
    queue: usize,
    hctx: usize,
    tag: u32,
    op: Op,
    sector: u64,
    sectors: u64,
    nr_bios: u32,
    bios: Vec<Bio>,
}

impl Seen {
    fn of<D: Driver>(cx: &HctxCx<'_, D>, rq: &Rq) -> Self {
        let io = cx.io(rq).expect("a request given to the driver has I/O");
        let mut bios = Vec::new();
        cx.for_each_bio(rq, |bio| bios.push(*bio));
        Self {
            queue: addr(cx.queue()),
            hctx: cx.hctx(),
            tag: rq.tag(),
            op: io.op(),
            sector: io.sector(),
            sectors: io.sectors(),
            nr_bios: io.nr_bios(),
            bios,
        }
    }

    /// `(sector, sectors)` of each bio, in the request's order.
    fn ranges(&self) -> Vec<(u64, u32)> {
        self.bios.iter().map(|b| (b.sector, b.sectors)).collect()
    }

    /// The bios' numbers in their log, in the request's order.
    fn numbers(&self) -> Vec<u32> {
        self.bios.iter().map(|b| b.private as u32).collect()
    }

    /// Checks the request's I/O agrees with its bios: contiguous, in order, counted.
    fn check(&self) {
        assert_eq!(self.nr_bios as usize, self.bios.len(), "{self:?}");
        let mut at = self.sector;
        for bio in &self.bios {
            assert_eq!(bio.sector, at, "bios out of order or with a gap: {self:?}");
            assert_eq!(bio.op, self.op);
            at += u64::from(bio.sectors);
        }
        assert_eq!(at - self.sector, self.sectors, "{self:?}");
    }
}

/// A request the driver holds.
#[derive(Debug)]
struct Held {
    queue: usize,
    hctx: usize,
    sector: u64,
    tag: u32,
    rq: Rq,
}

/// A driver that records every request it is given and holds it until the test ends it,
/// or (`inline`) ends it from inside `queue_rq`. It pushes back with `Resource` while it
/// holds `cap` requests, or on a hardware queue told to `refuse`; it has `budget` units of
/// budget. `BATCH` turns on `queue_rqs`, which rejects its request number `reject_at` once.
struct Disk<P, const BATCH: bool = false> {
    seen: Mutex<Vec<Seen>>,
    held: Mutex<Vec<Held>>,
    /// `queue_rq` calls per hardware queue, those pushed back included.
    calls: Box<[AtomicUsize]>,
    refuse: Box<[AtomicBool]>,
    cap: AtomicUsize,
    budget: AtomicUsize,
    inline: bool,
    reset_timer: AtomicBool,
    /// Tags of the requests whose timeout fired, in order.
    timed_out: Mutex<Vec<u32>>,
    /// The sectors of each `queue_rqs` batch the driver took.
    batches: Mutex<Vec<Vec<u64>>>,
    reject_at: AtomicUsize,
    platform: PhantomData<fn() -> P>,
}

/// Budget enough never to run out.
const PLENTY: usize = 1 << 40;

type StdDisk = Disk<StdPlatform>;
type Queue = RequestQueue<StdDisk>;

impl<P: Platform, const BATCH: bool> Disk<P, BATCH> {
    fn new(nr_hw_queues: usize) -> Self {
        Self {
            seen: Mutex::new(Vec::new()),
            held: Mutex::new(Vec::new()),
            calls: (0..nr_hw_queues).map(|_| AtomicUsize::new(0)).collect(),
            refuse: (0..nr_hw_queues).map(|_| AtomicBool::new(false)).collect(),
            cap: AtomicUsize::new(usize::MAX),
            budget: AtomicUsize::new(PLENTY),
            inline: false,
            reset_timer: AtomicBool::new(false),
            timed_out: Mutex::new(Vec::new()),
            batches: Mutex::new(Vec::new()),
            reject_at: AtomicUsize::new(usize::MAX),
            platform: PhantomData,
        }
    }

    /// A driver that ends every request inside `queue_rq`.
    fn inline(nr_hw_queues: usize) -> Self {
        Self {
            inline: true,
            ..Self::new(nr_hw_queues)
        }
    }

    fn seen(&self) -> Vec<Seen> {
        lock(&self.seen).clone()
    }

    fn calls(&self) -> Vec<usize> {
        self.calls
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .collect()
    }

    /// The first sector of every held request, in the order they were taken.
    fn held_sectors(&self) -> Vec<u64> {
        lock(&self.held).iter().map(|h| h.sector).collect()
    }

    /// Takes the held requests `f` picks, in order.
    fn take_where(&self, f: impl Fn(&Held) -> bool) -> Vec<Held> {
        let mut held = lock(&self.held);
        let (taken, kept): (Vec<Held>, Vec<Held>) = held.drain(..).partition(|h| f(h));
        *held = kept;
        taken
    }

    fn take_all(&self) -> Vec<Held> {
        self.take_where(|_| true)
    }

    /// Takes the one held request starting at `sector`.
    fn take_at(&self, sector: u64) -> Held {
        let mut taken = self.take_where(|h| h.sector == sector);
        assert_eq!(taken.len(), 1, "one held request at {sector}");
        taken.remove(0)
    }

    fn accept(&self, cx: &HctxCx<'_, Self>, rq: Rq) {
        let seen = Seen::of(cx, &rq);
        let held = Held {
            queue: seen.queue,
            hctx: seen.hctx,
            sector: seen.sector,
            tag: seen.tag,
            rq,
        };
        lock(&self.seen).push(seen);
        if self.inline {
            cx.queue().end_request(held.rq, Status::Ok).unwrap();
        } else {
            lock(&self.held).push(held);
        }
    }
}

impl<P: Platform, const BATCH: bool> Driver for Disk<P, BATCH> {
    type Platform = P;
    type Payload = ();
    const QUEUE_RQS: bool = BATCH;

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        self.calls[cx.hctx()].fetch_add(1, Ordering::SeqCst);
        let full = lock(&self.held).len() >= self.cap.load(Ordering::SeqCst);
        if full || self.refuse[cx.hctx()].load(Ordering::SeqCst) {
            return Err(Rejected {
                rq,
                status: Status::Resource,
            });
        }
        self.accept(cx, rq);
        Ok(())
    }

    fn queue_rqs(&self, cx: &HctxCx<'_, Self>, batch: &mut RqBatch<'_>) {
        let reject_at = self.reject_at.swap(usize::MAX, Ordering::SeqCst);
        let mut taken = Vec::new();
        while let Some(rq) = batch.next() {
            if taken.len() == reject_at {
                batch.reject(Rejected {
                    rq,
                    status: Status::Resource,
                });
                break;
            }
            taken.push(cx.io(&rq).map_or(u64::MAX, |io| io.sector()));
            self.accept(cx, rq);
        }
        lock(&self.batches).push(taken);
    }

    fn get_budget(&self, _: &HctxCx<'_, Self>) -> bool {
        self.budget
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(1))
            .is_ok()
    }

    fn put_budget(&self, _: &HctxCx<'_, Self>) {
        self.budget.fetch_add(1, Ordering::SeqCst);
    }

    fn timeout(&self, _: &HctxCx<'_, Self>, request: &Request<()>) -> TimeoutAction {
        lock(&self.timed_out).push(request.tag());
        if self.reset_timer.load(Ordering::SeqCst) {
            TimeoutAction::ResetTimer
        } else {
            TimeoutAction::Done
        }
    }
}

/// The address that names a request queue in [`Seen`] and [`Held`].
fn addr<D: Driver>(queue: &RequestQueue<D>) -> usize {
    std::ptr::from_ref(queue) as usize
}

/// Ends every request the driver holds for `queue` with `Ok`, again until none is left (an
/// end may let more in); returns how many.
fn finish<P: Platform, const B: bool>(queue: &RequestQueue<Disk<P, B>>) -> usize {
    let me = addr(queue);
    let mut ended = 0;
    loop {
        let mine = queue.driver().take_where(|h| h.queue == me);
        if mine.is_empty() {
            return ended;
        }
        ended += mine.len();
        queue
            .end_requests(mine.into_iter().map(|h| (h.rq, Status::Ok)))
            .unwrap();
    }
}

/// Writes bios `0..n` of `log` into `plug`: bio `k` is 8 sectors at `100 * k`, so none
/// merges with another.
fn plug_writes<'q, D: Driver>(
    queue: &'q RequestQueue<D>,
    plug: &mut Plug<'q, D>,
    log: &Log,
    n: u32,
) {
    for k in 0..n {
        queue
            .submit_plugged(plug, log.bio(k, Op::Write, u64::from(k) * 100, 8))
            .unwrap();
    }
}

/// The start stamps of the requests the driver holds, in the order it took them.
fn held_starts<P: Platform, const B: bool>(queue: &RequestQueue<Disk<P, B>>) -> Vec<u64> {
    lock(&queue.driver().held)
        .iter()
        .map(|h| queue.io(&h.rq).unwrap().start_ns())
        .collect()
}

// ----- hosts and platforms -----

/// A 1 GiB-ish device with Linux's default limits.
fn limits() -> QueueLimits {
    QueueLimits::new(1 << 21)
}

/// [`limits`] of a device with a volatile write cache that honours FUA: flushes reach the
/// driver (without a cache they end at once, and PREFLUSH and FUA are dropped).
fn cached() -> QueueLimits {
    QueueLimits {
        write_cache: true,
        fua: true,
        ..limits()
    }
}

/// A host on a `StdPlatform` of `cpus` CPUs in manual mode (the test runs what is kicked);
/// the calling thread is CPU 0.
fn host_with(tags: TagSetBuilder, cpus: usize, disk: StdDisk) -> Arc<Host<StdDisk>> {
    let platform = StdPlatform::manual_with_cpus(cpus);
    platform.pin_current_thread(0);
    Host::new(tags, platform, disk).unwrap()
}

/// One queue of 64 tags on one CPU and one hardware queue.
fn single(config: QueueConfig) -> (Arc<Host<StdDisk>>, Arc<Queue>) {
    let host = host_with(TagSet::builder(64), 1, StdDisk::new(1));
    let queue = host.add_queue(config).unwrap();
    (host, queue)
}

/// A platform with a clock the test moves; one CPU; kicks ignored.
#[derive(Clone, Default)]
struct Clock(Arc<AtomicU64>);

impl Clock {
    fn set(&self, ns: u64) {
        self.0.store(ns, Ordering::SeqCst);
    }
}

impl Platform for Clock {
    type RawMutex = spin::mutex::SpinMutex<()>;

    fn nr_cpus(&self) -> usize {
        1
    }

    fn current_cpu(&self) -> usize {
        0
    }

    fn now_ns(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    fn kick(&self, _hctx: usize) {}
}

type ClockDisk = Disk<Clock>;

/// A [`Clock`] whose coarse reading lags by ticks of [`TICK_NS`], as jiffies do.
#[derive(Clone, Default)]
struct TickClock(Clock);

/// The tick of a [`TickClock`]'s coarse reading.
const TICK_NS: u64 = 4_000;

impl Platform for TickClock {
    type RawMutex = spin::mutex::SpinMutex<()>;

    fn nr_cpus(&self) -> usize {
        1
    }

    fn current_cpu(&self) -> usize {
        0
    }

    fn now_ns(&self) -> u64 {
        self.0.now_ns()
    }

    fn coarse_now_ns(&self) -> u64 {
        self.0.now_ns() / TICK_NS * TICK_NS
    }

    fn kick(&self, _hctx: usize) {}
}

/// A queue on a [`Clock`] whose requests time out `timeout_ns` after they start.
fn clocked(timeout_ns: u64) -> (Clock, Arc<RequestQueue<ClockDisk>>) {
    let clock = Clock::default();
    let host = Host::new(
        TagSet::builder(8).timeout_ns(timeout_ns),
        clock.clone(),
        ClockDisk::new(1),
    )
    .unwrap();
    let queue = host.add_queue(QueueConfig::new(limits())).unwrap();
    (clock, queue)
}

// ----- 1. merges -----

/// Bios queued behind a quiesced queue merge in the software queue, at the back and at the
/// front, into one request whose bios run in sector order.
#[test]
fn software_queue_merges_back_and_front_into_one_range() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(limits()));
    queue.quiesce();
    queue.submit(log.bio(0, Op::Write, 8, 8)).unwrap();
    queue.submit(log.bio(1, Op::Write, 16, 8)).unwrap(); // back
    queue.submit(log.bio(2, Op::Write, 0, 8)).unwrap(); // front
    queue.submit(log.bio(3, Op::Write, 24, 16)).unwrap(); // back again
    assert_eq!(host.driver().calls(), [0]);
    assert_eq!(host.set().busy(), 1, "one request holds them all");
    queue.unquiesce();

    let seen = host.driver().seen();
    assert_eq!(seen.len(), 1);
    seen[0].check();
    assert_eq!(
        (seen[0].op, seen[0].sector, seen[0].sectors, seen[0].nr_bios),
        (Op::Write, 0, 40, 4)
    );
    assert_eq!(seen[0].ranges(), [(0, 8), (8, 8), (16, 8), (24, 16)]);
    assert_eq!(seen[0].numbers(), [2, 0, 1, 3]);
    assert!(log.ends().is_empty());
    assert_eq!(finish(&queue), 1);
    assert_eq!(log.sorted(), all_ok(4));
}

/// Behind a driver that said `Resource`, new bios wait in the software queue and merge
/// there; the request that was pushed back waits on the dispatch list and takes none.
#[test]
fn bios_behind_a_busy_driver_merge_in_the_software_queue() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(limits()));
    let disk = host.driver();
    disk.cap.store(1, Ordering::SeqCst);
    queue.submit(log.bio(0, Op::Read, 1000, 8)).unwrap(); // held
    queue.submit(log.bio(1, Op::Read, 0, 8)).unwrap(); // pushed back
    queue.submit(log.bio(2, Op::Read, 8, 8)).unwrap(); // queued
    queue.submit(log.bio(3, Op::Read, 16, 8)).unwrap(); // merges into 2
    queue.submit(log.bio(4, Op::Read, 100, 8)).unwrap(); // merges into nothing
    queue.submit(log.bio(5, Op::Read, 92, 8)).unwrap(); // front-merges into 4
    assert_eq!(disk.held_sectors(), [1000]);
    disk.cap.store(usize::MAX, Ordering::SeqCst);
    let first = disk.take_at(1000);
    queue.end_request(first.rq, Status::Ok).unwrap();

    let seen = disk.seen();
    let ranges: Vec<_> = seen.iter().map(Seen::ranges).collect();
    assert_eq!(
        ranges,
        [
            vec![(1000, 8)],
            vec![(0, 8)],
            vec![(8, 8), (16, 8)],
            vec![(92, 8), (100, 8)]
        ]
    );
    seen.iter().for_each(Seen::check);
    assert_eq!(seen[3].numbers(), [5, 4]);
    assert_eq!(finish(&queue), 3);
    assert_eq!(log.sorted(), all_ok(6));
}

/// A plug merges at both ends too, and hands the one request over when it flushes.
#[test]
fn a_plug_merges_back_and_front() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(limits()));
    let mut plug = Plug::new();
    queue
        .submit_plugged(&mut plug, log.bio(0, Op::Read, 64, 8))
        .unwrap();
    queue
        .submit_plugged(&mut plug, log.bio(1, Op::Read, 72, 8))
        .unwrap();
    queue
        .submit_plugged(&mut plug, log.bio(2, Op::Read, 56, 8))
        .unwrap();
    assert_eq!(plug.len(), 1);
    assert!(host.driver().seen().is_empty());
    plug.flush();
    assert!(plug.is_empty());
    let seen = host.driver().seen();
    assert_eq!(seen.len(), 1);
    seen[0].check();
    assert_eq!((seen[0].sector, seen[0].sectors), (56, 24));
    assert_eq!(seen[0].ranges(), [(56, 8), (64, 8), (72, 8)]);
    assert_eq!(seen[0].numbers(), [2, 0, 1]);
    drop(plug);
    assert_eq!(finish(&queue), 1);
    assert_eq!(log.sorted(), all_ok(3));
}

/// A bio merges only into the plug's newest request of its queue (as Linux since 5.16):
/// one adjacent to an older request stays a request of its own.
#[test]
fn a_plug_merges_only_into_its_newest_request_of_the_queue() {
    let log = Log::new();
    let host = host_with(TagSet::builder(64), 1, StdDisk::new(1));
    let a = host.add_queue(QueueConfig::new(limits())).unwrap();
    let b = host.add_queue(QueueConfig::new(limits())).unwrap();
    let mut plug = Plug::new();
    let bio = |n: u32, sector: u64| log.bio(n, Op::Read, sector, 8);
    // One queue: 8 follows 0, but 800 came between: no merge. 16 follows 8, the newest.
    for (n, sector) in [(0, 0), (1, 800), (2, 8), (3, 16)] {
        a.submit_plugged(&mut plug, bio(n, sector)).unwrap();
    }
    assert_eq!(plug.len(), 3);
    // Two queues: the newest request of `a` is behind one of `b`, and 24 still merges.
    b.submit_plugged(&mut plug, bio(4, 4000)).unwrap();
    a.submit_plugged(&mut plug, bio(5, 24)).unwrap();
    assert_eq!(plug.len(), 4);
    plug.flush();
    let seen = host.driver().seen();
    let got: Vec<(usize, Vec<(u64, u32)>)> = seen
        .iter()
        .map(|s| {
            s.check();
            (s.queue, s.ranges())
        })
        .collect();
    let (qa, qb) = (addr(&a), addr(&b));
    assert_eq!(
        got,
        [
            (qa, vec![(0, 8)]),
            (qa, vec![(800, 8)]),
            (qa, vec![(8, 8), (16, 8), (24, 8)]),
            (qb, vec![(4000, 8)]),
        ]
    );
    drop(plug);
    assert_eq!(finish(&a) + finish(&b), 4);
    assert_eq!(log.sorted(), all_ok(6));
}

/// The test FIFO elevator has no merge hooks: adjacent bios queued in it stay apart, while
/// the plug in front of it still merges them.
#[test]
fn the_fifo_elevator_does_not_merge_but_the_plug_in_front_of_it_does() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(limits()).elevator(Box::new(Fifo::new())));
    assert_eq!(queue.elevator_name(), Some("fifo"));
    queue.quiesce();
    for n in 0..3 {
        queue
            .submit(log.bio(n, Op::Write, u64::from(n) * 8, 8))
            .unwrap();
    }
    assert_eq!(host.driver().calls(), [0]);
    queue.unquiesce();
    let ranges: Vec<_> = host.driver().seen().iter().map(Seen::ranges).collect();
    assert_eq!(ranges, [vec![(0, 8)], vec![(8, 8)], vec![(16, 8)]]);
    assert_eq!(finish(&queue), 3);

    let mut plug = Plug::new();
    for (n, sector) in [(3, 100), (4, 108), (5, 92)] {
        queue
            .submit_plugged(&mut plug, log.bio(n, Op::Write, sector, 8))
            .unwrap();
    }
    assert_eq!(plug.len(), 1);
    plug.flush();
    let seen = host.driver().seen();
    assert_eq!(seen.len(), 4);
    seen[3].check();
    assert_eq!(seen[3].ranges(), [(92, 8), (100, 8), (108, 8)]);
    assert_eq!(seen[3].numbers(), [5, 3, 4]);
    drop(plug);
    assert_eq!(finish(&queue), 1);
    assert_eq!(log.sorted(), all_ok(6));
}

// ----- 2. where merging stops -----

/// Submits `bios` (numbered in order) to a quiesced queue with `limits`, lets them through
/// and returns what the driver got; checks every bio then ends once, with `Ok`.
fn requests_of(limits: QueueLimits, bios: &[Bio]) -> Vec<Seen> {
    requests_and_all_of(limits, bios).0
}

/// [`requests_of`], and every request the driver got, those it got while they ended too.
fn requests_and_all_of(limits: QueueLimits, bios: &[Bio]) -> (Vec<Seen>, Vec<Seen>) {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(limits));
    queue.quiesce();
    for (n, bio) in bios.iter().enumerate() {
        queue.submit(log.tag(n as u32, *bio)).unwrap();
    }
    assert_eq!(host.driver().calls(), [0]);
    queue.unquiesce();
    let seen = host.driver().seen();
    seen.iter().for_each(Seen::check);
    finish(&queue);
    assert_eq!(log.sorted(), all_ok(bios.len() as u32));
    let all = host.driver().seen();
    all.iter().for_each(Seen::check);
    (seen, all)
}

fn ranges(seen: &[Seen]) -> Vec<Vec<(u64, u32)>> {
    seen.iter().map(Seen::ranges).collect()
}

/// A flush never merges, with a flush or anything else; it is issued ahead of the data
/// queued before it, which still merges around it. (The second flush came while the first
/// was on its way: it waits for the first to end, then goes alone.)
#[test]
fn flushes_never_merge() {
    let (seen, all) = requests_and_all_of(
        cached(),
        &[
            Bio::new(Op::Write, 0, 8),
            Bio::new(Op::Flush, 8, 0),
            Bio::new(Op::Flush, 8, 0),
            Bio::new(Op::Write, 8, 8),
        ],
    );
    let ops: Vec<Op> = seen.iter().map(|s| s.op).collect();
    assert_eq!(ops, [Op::Flush, Op::Write]);
    assert_eq!(ranges(&seen), [vec![(8, 0)], vec![(0, 8), (8, 8)]]);
    assert_eq!(seen[0].numbers(), [1]);
    let ops: Vec<Op> = all.iter().map(|s| s.op).collect();
    assert_eq!(ops, [Op::Flush, Op::Write, Op::Flush]);
    assert_eq!(ranges(&all[2..]), [vec![(8, 0)]]);
    assert_eq!(all[2].numbers(), [2]);
}

/// `NOMERGE`, `PREFLUSH` and `FUA` bios merge with nothing, in either direction.
#[test]
fn nomerge_preflush_and_fua_never_merge() {
    for flag in [BioFlags::NOMERGE, BioFlags::PREFLUSH, BioFlags::FUA] {
        // 8 would join 0 at its back, 16 would join 8; 32 would join 40 at its front.
        let (seen, all) = requests_and_all_of(
            cached(),
            &[
                Bio::new(Op::Write, 0, 8),
                Bio::new(Op::Write, 8, 8).flags(flag),
                Bio::new(Op::Write, 16, 8),
                Bio::new(Op::Write, 40, 8).flags(flag),
                Bio::new(Op::Write, 32, 8),
            ],
        );
        let apart = [
            vec![(0, 8)],
            vec![(8, 8)],
            vec![(16, 8)],
            vec![(40, 8)],
            vec![(32, 8)],
        ];
        if flag == BioFlags::PREFLUSH {
            // Each waits for a flush of its own first; every write still goes alone.
            let writes: Vec<Seen> = all.into_iter().filter(|s| s.op == Op::Write).collect();
            let mut got = ranges(&writes);
            got.sort_unstable();
            let mut want = apart.to_vec();
            want.sort_unstable();
            assert_eq!(got, want, "{flag:?}");
            continue;
        }
        assert_eq!(ranges(&seen), apart, "{flag:?}");
        assert_eq!(all.len(), seen.len());
    }
    // Other flags do not stop a merge: the same bios, one request.
    let plain = requests_of(
        limits(),
        &[
            Bio::new(Op::Write, 0, 8),
            Bio::new(Op::Write, 8, 8).flags(BioFlags::SYNC | BioFlags::META),
            Bio::new(Op::Write, 16, 8),
        ],
    );
    assert_eq!(ranges(&plain), [vec![(0, 8), (8, 8), (16, 8)]]);
}

/// A read never merges with a write, nor bios of different I/O priorities.
#[test]
fn different_ops_or_priorities_never_merge() {
    let seen = requests_of(
        limits(),
        &[
            Bio::new(Op::Write, 0, 8),
            Bio::new(Op::Read, 8, 8),
            Bio::new(Op::Read, 0, 8).flags(BioFlags::SYNC),
        ],
    );
    assert_eq!(ranges(&seen), [vec![(0, 8)], vec![(0, 8), (8, 8)]]);
    let ops: Vec<Op> = seen.iter().map(|s| s.op).collect();
    assert_eq!(ops, [Op::Write, Op::Read]);

    let rt = IoPrio::new(IoPrioClass::RealTime, 0).unwrap();
    let be0 = IoPrio::new(IoPrioClass::BestEffort, 0).unwrap();
    let seen = requests_of(
        limits(),
        &[
            Bio::new(Op::Read, 0, 8),
            Bio::new(Op::Read, 8, 8).prio(rt),
            Bio::new(Op::Read, 16, 8).prio(rt),
            Bio::new(Op::Read, 24, 8).prio(be0),
        ],
    );
    assert_eq!(
        ranges(&seen),
        [vec![(0, 8)], vec![(8, 8), (16, 8)], vec![(24, 8)]]
    );
}

/// A merge never makes a request longer than `max_sectors`, at either end, in the software
/// queue or in a plug.
#[test]
fn merges_stop_at_max_sectors() {
    let limits = QueueLimits {
        max_sectors: 16,
        ..limits()
    };
    let seen = requests_of(
        limits,
        &[
            Bio::new(Op::Read, 8, 8),
            Bio::new(Op::Read, 16, 8),
            Bio::new(Op::Read, 0, 8),
            Bio::new(Op::Read, 24, 8),
        ],
    );
    assert_eq!(
        ranges(&seen),
        [vec![(8, 8), (16, 8)], vec![(0, 8)], vec![(24, 8)]]
    );

    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(limits));
    let mut plug = Plug::new();
    for n in 0..3 {
        queue
            .submit_plugged(&mut plug, log.bio(n, Op::Read, u64::from(n) * 8, 8))
            .unwrap();
    }
    assert_eq!(plug.len(), 2);
    drop(plug);
    let ranges: Vec<_> = host.driver().seen().iter().map(Seen::ranges).collect();
    assert_eq!(ranges, [vec![(0, 8), (8, 8)], vec![(16, 8)]]);
    assert_eq!(finish(&queue), 2);
    assert_eq!(log.sorted(), all_ok(3));
}

/// Segments as `QueueLimits` counts them: each bio is cut at every `seg_boundary_mask + 1`
/// bytes and the bios of a request share none. A merge that would need more than
/// `max_segments` is refused.
#[test]
fn merges_stop_at_max_segments() {
    let small = QueueLimits {
        max_segments: 2,
        seg_boundary_mask: 4095,
        ..limits()
    };
    assert_eq!(small.segments(Op::Read, 0, 8), 1);
    assert_eq!(small.segments(Op::Read, 4, 8), 2);
    let seen = requests_of(
        small,
        &[
            Bio::new(Op::Read, 0, 8),
            Bio::new(Op::Read, 8, 8),
            Bio::new(Op::Read, 16, 8),
        ],
    );
    assert_eq!(ranges(&seen), [vec![(0, 8), (8, 8)], vec![(16, 8)]]);

    // Two bios of two segments each: 4 do not fit in 3, do in 4.
    let unaligned = [Bio::new(Op::Read, 4, 8), Bio::new(Op::Read, 12, 8)];
    let three = QueueLimits {
        max_segments: 3,
        ..small
    };
    assert_eq!(
        ranges(&requests_of(three, &unaligned)),
        [vec![(4, 8)], vec![(12, 8)]]
    );
    let four = QueueLimits {
        max_segments: 4,
        ..small
    };
    assert_eq!(
        ranges(&requests_of(four, &unaligned)),
        [vec![(4, 8), (12, 8)]]
    );
}

/// No merge makes a request cross a multiple of `chunk_sectors`, at the back or the front;
/// merges within a chunk still happen.
#[test]
fn merges_never_cross_a_chunk_boundary() {
    let limits = QueueLimits {
        chunk_sectors: 16,
        ..limits()
    };
    let seen = requests_of(
        limits,
        &[
            Bio::new(Op::Read, 0, 8),
            Bio::new(Op::Read, 8, 8),
            Bio::new(Op::Read, 16, 8),
        ],
    );
    assert_eq!(ranges(&seen), [vec![(0, 8), (8, 8)], vec![(16, 8)]]);
    let seen = requests_of(
        limits,
        &[Bio::new(Op::Read, 16, 8), Bio::new(Op::Read, 8, 8)],
    );
    assert_eq!(ranges(&seen), [vec![(16, 8)], vec![(8, 8)]]);
    let seen = requests_of(
        limits,
        &[Bio::new(Op::Read, 24, 8), Bio::new(Op::Read, 16, 8)],
    );
    assert_eq!(ranges(&seen), [vec![(16, 8), (24, 8)]]);
}

// ----- 3. splits -----

/// `(sector, sectors, offset)` of each one-bio request the driver got, after checking each
/// is a split piece of `op` carrying `payload`.
fn pieces(seen: &[Seen], op: Op, payload: u64) -> Vec<(u64, u32, u32)> {
    seen.iter()
        .map(|s| {
            assert_eq!((s.nr_bios, s.op), (1, op), "{s:?}");
            let bio = s.bios[0];
            assert!(bio.flags.contains(BioFlags::SPLIT), "{bio:?}");
            assert_eq!(bio.payload, payload);
            (bio.sector, bio.sectors, bio.data.pos().skip / 512)
        })
        .collect()
}

/// A bio over `max_sectors` goes to the driver as pieces of at most `max_sectors`, each
/// with its place in the parent's buffer; the parent ends once, after the last piece.
#[test]
fn a_bio_over_max_sectors_is_split_into_exact_pieces() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(QueueLimits {
        max_sectors: 16,
        ..limits()
    }));
    queue
        .submit(log.bio(0, Op::Write, 64, 40).payload(0xabc))
        .unwrap();
    let seen = host.driver().seen();
    assert_eq!(
        pieces(&seen, Op::Write, 0xabc),
        [(64, 16, 0), (80, 16, 16), (96, 8, 32)]
    );
    assert!(log.ends().is_empty());
    assert_eq!(finish(&queue), 3);
    assert_eq!(log.ends(), [(0, Status::Ok)]);
}

/// A bio crossing multiples of `chunk_sectors` is cut at each of them.
#[test]
fn a_bio_crossing_chunk_boundaries_is_split_at_them() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(QueueLimits {
        chunk_sectors: 16,
        ..limits()
    }));
    queue
        .submit(log.bio(0, Op::Read, 8, 40).payload(7))
        .unwrap();
    assert_eq!(
        pieces(&host.driver().seen(), Op::Read, 7),
        [(8, 8, 0), (16, 16, 8), (32, 16, 24)]
    );
    assert_eq!(finish(&queue), 3);
    assert_eq!(log.ends(), [(0, Status::Ok)]);
}

/// The parent of split pieces ends once, when its last piece ends, with the first error
/// a piece ended with.
#[test]
fn a_split_parent_ends_after_its_last_piece_with_the_first_error() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(QueueLimits {
        max_sectors: 16,
        ..limits()
    }));
    queue.submit(log.bio(0, Op::Read, 0, 48)).unwrap();
    let disk = host.driver();
    assert_eq!(disk.held_sectors(), [0, 16, 32]);
    queue.end_request(disk.take_at(32).rq, Status::Ok).unwrap();
    assert!(log.ends().is_empty());
    queue
        .end_request(disk.take_at(16).rq, Status::Medium)
        .unwrap();
    assert!(log.ends().is_empty());
    queue
        .end_request(disk.take_at(0).rq, Status::IoErr)
        .unwrap();
    assert_eq!(log.ends(), [(0, Status::Medium)]);

    // The slot is free again: a second split bio ends on its own.
    queue.submit(log.bio(1, Op::Read, 0, 48)).unwrap();
    assert_eq!(finish(&queue), 3);
    assert_eq!(log.ends(), [(0, Status::Medium), (1, Status::Ok)]);
}

/// When tags run out part way through a split, `submit` hands back the rest as one piece;
/// submitted again once tags are free, it completes the parent, once.
#[test]
fn a_piece_handed_back_when_tags_run_out_can_be_resubmitted() {
    let log = Log::new();
    let host = host_with(TagSet::builder(2), 1, StdDisk::new(1));
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits {
            max_sectors: 16,
            ..limits()
        }))
        .unwrap();
    let back = queue.submit(log.bio(0, Op::Write, 0, 64)).unwrap_err();
    assert_eq!(
        (back.sector, back.sectors, back.data.pos().skip / 512),
        (32, 32, 32)
    );
    assert!(back.flags.contains(BioFlags::SPLIT));
    assert_eq!(
        pieces(&host.driver().seen(), Op::Write, 0),
        [(0, 16, 0), (16, 16, 16)]
    );
    assert_eq!(finish(&queue), 2);
    assert!(log.ends().is_empty(), "half the parent is still to come");

    queue.submit(back).unwrap();
    assert_eq!(
        pieces(&host.driver().seen(), Op::Write, 0),
        [(0, 16, 0), (16, 16, 16), (32, 16, 32), (48, 16, 48)]
    );
    assert_eq!(finish(&queue), 2);
    assert_eq!(log.ends(), [(0, Status::Ok)]);
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}

/// A bio that needs a split but cannot go in at all (the queue is frozen) comes back
/// untouched, as `submit` documents: the caller's `private` and `end_io` intact.
#[test]
fn a_split_bio_refused_whole_comes_back_untouched() {
    let log = Log::new();
    let (_host, queue) = single(QueueConfig::new(QueueLimits {
        max_sectors: 16,
        ..limits()
    }));
    queue.freeze_start();
    let bio = log.bio(0, Op::Write, 0, 64);
    let back = queue.submit(bio).unwrap_err();
    assert_eq!(
        (
            back.sector,
            back.sectors,
            back.data.pos().skip / 512,
            back.private
        ),
        (0, 64, 0, bio.private)
    );
    assert_eq!(back.flags, BioFlags::empty());
    assert!(back.end_io.is_some());
    queue.unfreeze();
    queue.submit(back).unwrap();
    finish(&queue);
    assert_eq!(log.ends(), [(0, Status::Ok)]);
}

// ----- 4. bad bios -----

/// Bad bios end at once with the status that says why, and never reach the driver; a flush
/// of no sectors is fine.
#[test]
fn bad_bios_end_with_a_status() {
    let log = Log::new();
    let capacity = 1 << 20;
    let (host, queue) = single(QueueConfig::new(QueueLimits {
        logical_block_size: 4096,
        // A cache to flush: the flush below reaches the driver.
        write_cache: true,
        ..QueueLimits::new(capacity)
    }));
    let cases = [
        (Op::Read, 0, 0, Status::Invalid),
        (Op::Write, 8, 0, Status::Invalid),
        (Op::Read, capacity - 8, 16, Status::IoErr),
        (Op::Write, capacity, 8, Status::IoErr),
        (Op::Read, u64::MAX - 7, 8, Status::IoErr),
        (Op::Read, 4, 8, Status::Invalid),
        (Op::Write, 8, 4, Status::Invalid),
        (Op::Discard, 0, 8, Status::NotSupported),
        (Op::WriteZeroes, 0, 8, Status::NotSupported),
        (Op::Flush, 0, 8, Status::Invalid),
    ];
    for (n, &(op, sector, sectors, _)) in cases.iter().enumerate() {
        queue
            .submit(log.bio(n as u32, op, sector, sectors))
            .unwrap();
    }
    let want: Vec<(u32, Status)> = cases
        .iter()
        .enumerate()
        .map(|(n, c)| (n as u32, c.3))
        .collect();
    assert_eq!(log.ends(), want);
    assert_eq!(host.driver().calls(), [0]);
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));

    let n = cases.len() as u32;
    queue.submit(log.bio(n, Op::Flush, 0, 0)).unwrap();
    let seen = host.driver().seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].op, seen[0].sectors, seen[0].nr_bios),
        (Op::Flush, 0, 1)
    );
    assert_eq!(finish(&queue), 1);
    assert_eq!(log.ends().last(), Some(&(n, Status::Ok)));
}

// ----- 5. plugs -----

/// A plug's flush hands requests over in the order they were submitted.
#[test]
fn a_plug_flushes_in_submission_order() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(limits()));
    let order = [800, 0, 400, 1600, 200, 24];
    let mut plug = Plug::new();
    for (n, &sector) in order.iter().enumerate() {
        queue
            .submit_plugged(&mut plug, log.bio(n as u32, Op::Write, sector, 8))
            .unwrap();
    }
    assert_eq!(plug.len(), order.len());
    assert!(host.driver().seen().is_empty());
    plug.flush();
    let sectors: Vec<u64> = host.driver().seen().iter().map(|s| s.sector).collect();
    assert_eq!(sectors, order);
    drop(plug);
    assert_eq!(finish(&queue), order.len());
    assert_eq!(log.sorted(), all_ok(order.len() as u32));
}

/// A plug of one queue flushes when a request would join `PLUG_MAX` of them; dropping it
/// flushes the rest.
#[test]
fn a_plug_flushes_at_plug_max_and_when_dropped() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(limits()));
    let disk = host.driver();
    let bio = |n: u32| log.bio(n, Op::Read, u64::from(n) * 16, 8);
    {
        let mut plug = Plug::new();
        for n in 0..PLUG_MAX as u32 {
            queue.submit_plugged(&mut plug, bio(n)).unwrap();
        }
        assert_eq!(plug.len(), PLUG_MAX);
        assert!(disk.seen().is_empty());
        queue
            .submit_plugged(&mut plug, bio(PLUG_MAX as u32))
            .unwrap();
        assert_eq!(plug.len(), 1);
        let sectors: Vec<u64> = disk.seen().iter().map(|s| s.sector).collect();
        let want: Vec<u64> = (0..PLUG_MAX as u64).map(|n| n * 16).collect();
        assert_eq!(sectors, want);
        queue
            .submit_plugged(&mut plug, bio(PLUG_MAX as u32 + 1))
            .unwrap();
        assert_eq!(plug.len(), 2);
        assert_eq!(disk.seen().len(), PLUG_MAX);
    }
    let total = PLUG_MAX + 2;
    assert_eq!(disk.seen().len(), total);
    assert_eq!(finish(&queue), total);
    assert_eq!(log.sorted(), all_ok(total as u32));
}

/// A plug holding requests of two queues of one host flushes at `PLUG_MAX_MULTI`, in
/// submission order across the queues.
#[test]
fn a_plug_of_two_queues_flushes_at_plug_max_multi() {
    let log = Log::new();
    let host = host_with(TagSet::builder(256), 1, StdDisk::new(1));
    let a = host.add_queue(QueueConfig::new(limits())).unwrap();
    let b = host.add_queue(QueueConfig::new(limits())).unwrap();
    let queues = [&a, &b];
    let mut plug = Plug::new();
    let mut want = Vec::new();
    for n in 0..=PLUG_MAX_MULTI as u32 {
        let queue = queues[n as usize % 2];
        let sector = u64::from(n) * 16;
        queue
            .submit_plugged(&mut plug, log.bio(n, Op::Write, sector, 8))
            .unwrap();
        want.push((addr(queue), sector));
        if n as usize == PLUG_MAX {
            assert_eq!(plug.len(), PLUG_MAX + 1, "two queues: no flush at PLUG_MAX");
        }
    }
    want.pop();
    assert_eq!(plug.len(), 1);
    let got: Vec<(usize, u64)> = host
        .driver()
        .seen()
        .iter()
        .map(|s| (s.queue, s.sector))
        .collect();
    assert_eq!(got.len(), PLUG_MAX_MULTI);
    assert_eq!(got, want);
    drop(plug);
    assert_eq!(finish(&a) + finish(&b), PLUG_MAX_MULTI + 1);
    assert_eq!(log.sorted(), all_ok(PLUG_MAX_MULTI as u32 + 1));
}

/// A plug flushes before it takes a new request after one of `PLUG_FLUSH_BYTES`; one just
/// smaller does not.
#[test]
fn a_plug_flushes_before_a_request_after_a_large_one() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(limits()));
    let disk = host.driver();
    let large = (PLUG_FLUSH_BYTES / SECTOR_SIZE) as u32;
    let mut plug = Plug::new();
    queue
        .submit_plugged(&mut plug, log.bio(0, Op::Write, 0, large - 8))
        .unwrap();
    queue
        .submit_plugged(&mut plug, log.bio(1, Op::Write, 10_000, 8))
        .unwrap();
    assert_eq!(plug.len(), 2);
    assert!(disk.seen().is_empty());
    queue
        .submit_plugged(&mut plug, log.bio(2, Op::Write, 20_000, large))
        .unwrap();
    assert_eq!(plug.len(), 3);
    assert!(disk.seen().is_empty());
    queue
        .submit_plugged(&mut plug, log.bio(3, Op::Write, 40_000, 8))
        .unwrap();
    assert_eq!(plug.len(), 1);
    let seen: Vec<(u64, u64)> = disk.seen().iter().map(|s| (s.sector, s.sectors)).collect();
    assert_eq!(
        seen,
        [
            (0, u64::from(large) - 8),
            (10_000, 8),
            (20_000, u64::from(large))
        ]
    );
    drop(plug);
    assert_eq!(finish(&queue), 4);
    assert_eq!(log.sorted(), all_ok(4));
}

type BatchDisk = Disk<StdPlatform, true>;

fn batch_queue() -> (Arc<Host<BatchDisk>>, Arc<RequestQueue<BatchDisk>>) {
    let platform = StdPlatform::manual_with_cpus(1);
    platform.pin_current_thread(0);
    let host = Host::new(TagSet::builder(16), platform, BatchDisk::new(1)).unwrap();
    let queue = host.add_queue(QueueConfig::new(limits())).unwrap();
    (host, queue)
}

/// With `QUEUE_RQS`, a flushed plug reaches the driver as one `queue_rqs` batch, in order,
/// without a `queue_rq` call.
#[test]
fn queue_rqs_takes_a_flushed_plug_as_one_batch() {
    let log = Log::new();
    let (host, queue) = batch_queue();
    let mut plug = Plug::new();
    plug_writes(&queue, &mut plug, &log, 4);
    drop(plug);
    let disk = host.driver();
    assert_eq!(*lock(&disk.batches), [vec![0, 100, 200, 300]]);
    assert_eq!(disk.calls(), [0]);
    assert_eq!(disk.held_sectors(), [0, 100, 200, 300]);
    assert_eq!(host.in_driver(), 4);
    assert_eq!(finish(&queue), 4);
    assert_eq!(log.sorted(), all_ok(4));
}

/// A platform that counts the reads of its clock, which moves 1 µs each read; one CPU.
#[derive(Clone, Default)]
struct CountingClock(Arc<AtomicU64>);

impl CountingClock {
    fn reads(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl Platform for CountingClock {
    type RawMutex = spin::mutex::SpinMutex<()>;

    fn nr_cpus(&self) -> usize {
        1
    }

    fn current_cpu(&self) -> usize {
        0
    }

    fn now_ns(&self) -> u64 {
        (self.0.fetch_add(1, Ordering::SeqCst) + 1) * 1_000
    }

    fn kick(&self, _hctx: usize) {}
}

type CountedDisk = Disk<CountingClock>;

/// One queue on a [`CountingClock`] with one hardware queue of `tags`.
fn counted(
    tags: TagSetBuilder,
) -> (
    CountingClock,
    Arc<Host<CountedDisk>>,
    Arc<RequestQueue<CountedDisk>>,
) {
    let clock = CountingClock::default();
    let host = Host::new(tags, clock.clone(), CountedDisk::new(1)).unwrap();
    let queue = host.add_queue(QueueConfig::new(limits())).unwrap();
    (clock, host, queue)
}

/// Without `queue_rqs`, a flushed plug goes straight to its idle hardware queue through
/// `queue_rq`, in order, nothing left in the software queues, and its requests share one
/// read of the clock for their start; a lone submission reads the clock for its own.
#[test]
fn a_flushed_plug_is_issued_directly_with_one_clock_read() {
    let log = Log::new();
    let (clock, host, queue) = counted(TagSet::builder(64));
    let mut plug = Plug::new();
    plug_writes(&queue, &mut plug, &log, 5);
    let before = clock.reads();
    plug.flush();
    assert_eq!(clock.reads() - before, 1, "one read for the whole plug");
    let disk = host.driver();
    assert_eq!(disk.calls(), [5]);
    assert_eq!(disk.held_sectors(), [0, 100, 200, 300, 400]);
    assert!(!queue.has_work(0));
    let starts = held_starts(&queue);
    assert_eq!(starts, [before * 1_000 + 1_000; 5]);
    queue.submit(log.bio(5, Op::Write, 900, 8)).unwrap();
    assert_eq!(clock.reads() - before, 2, "a lone submission reads its own");
    drop(plug);
    assert_eq!(finish(&queue), 6);
    assert_eq!(log.sorted(), all_ok(6));
}

/// A tag set whose `queue_rq` may block reads the clock for each plugged request's start:
/// a batch may sleep between two of them.
#[test]
fn a_blocking_set_reads_the_clock_for_each_plugged_request() {
    let log = Log::new();
    let (clock, host, queue) = counted(TagSet::builder(64).flags(TagSetFlags::BLOCKING));
    let mut plug = Plug::new();
    plug_writes(&queue, &mut plug, &log, 5);
    let before = clock.reads();
    plug.flush();
    assert_eq!(clock.reads() - before, 5);
    let disk = host.driver();
    assert_eq!(disk.held_sectors(), [0, 100, 200, 300, 400]);
    let starts = held_starts(&queue);
    assert!(starts.windows(2).all(|w| w[0] < w[1]), "{starts:?}");
    drop(plug);
    assert_eq!(finish(&queue), 5);
    assert_eq!(log.sorted(), all_ok(5));
}

/// A plug over two hardware queues goes to each in the plug's order; a stopped one keeps
/// its requests (through the software queues) until it is started, while the other goes.
#[test]
fn a_flushed_plug_goes_to_each_hardware_queue_and_waits_for_a_stopped_one() {
    let log = Log::new();
    let host = host_with(TagSet::builder(16).hw_queues(2), 2, StdDisk::new(2));
    let queue = host.add_queue(QueueConfig::new(limits())).unwrap();
    let platform = host.set().platform();
    let plugged = |first: u32| {
        let mut plug = Plug::new();
        for (n, cpu) in [(0, 0), (1, 0), (2, 1), (3, 1), (4, 0)] {
            platform.pin_current_thread(cpu);
            let n = first + n;
            queue
                .submit_plugged(&mut plug, log.bio(n, Op::Read, u64::from(n) * 100, 8))
                .unwrap();
        }
        platform.pin_current_thread(0);
        assert_eq!(
            host.driver().seen().len(),
            first as usize,
            "all in the plug"
        );
        plug.flush();
    };
    let seen = |from: usize| -> Vec<(usize, u64)> {
        host.driver().seen()[from..]
            .iter()
            .map(|s| (s.hctx, s.sector))
            .collect()
    };
    plugged(0);
    assert_eq!(seen(0), [(0, 0), (0, 100), (1, 200), (1, 300), (0, 400)]);
    assert_eq!(finish(&queue), 5);

    queue.stop_hw_queue(0);
    plugged(5);
    assert_eq!(seen(5), [(1, 700), (1, 800)]);
    assert!(queue.has_work(0));
    queue.start_hw_queue(0);
    assert_eq!(seen(5), [(1, 700), (1, 800), (0, 500), (0, 600), (0, 900)]);
    assert_eq!(finish(&queue), 5);
    assert_eq!(log.sorted(), all_ok(10));
}

/// A plug flushed into a quiesced queue issues nothing until the queue is unquiesced,
/// then everything, in order.
#[test]
fn a_flushed_plug_on_a_quiesced_queue_waits_for_unquiesce() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(limits()));
    queue.quiesce();
    let mut plug = Plug::new();
    for n in 0..3 {
        queue
            .submit_plugged(&mut plug, log.bio(n, Op::Read, u64::from(n) * 100, 8))
            .unwrap();
    }
    plug.flush();
    assert_eq!(host.driver().calls(), [0]);
    assert!(queue.has_work(0));
    queue.unquiesce();
    assert_eq!(host.driver().held_sectors(), [0, 100, 200]);
    drop(plug);
    assert_eq!(finish(&queue), 3);
    assert_eq!(log.sorted(), all_ok(3));
}

/// A flushed plug that finds the driver full stops there: the rest wait, and go in order
/// as completions free the driver. Nothing is lost.
#[test]
fn a_flushed_plug_that_fills_the_driver_waits_for_completions() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(limits()));
    let disk = host.driver();
    disk.cap.store(2, Ordering::SeqCst);
    let mut plug = Plug::new();
    plug_writes(&queue, &mut plug, &log, 5);
    drop(plug);
    assert_eq!(disk.held_sectors(), [0, 100]);
    assert_eq!(disk.calls(), [3], "the third was turned down");
    assert!(queue.has_work(0));
    queue.end_request(disk.take_at(0).rq, Status::Ok).unwrap();
    assert_eq!(disk.held_sectors(), [100, 200]);
    queue.end_request(disk.take_at(100).rq, Status::Ok).unwrap();
    assert_eq!(disk.held_sectors(), [200, 300]);
    disk.cap.store(usize::MAX, Ordering::SeqCst);
    assert_eq!(finish(&queue), 3);
    assert_eq!(log.sorted(), all_ok(5));
    assert_eq!((host.set().busy(), host.in_driver()), (0, 0));
}

/// A `Resource` reject inside `queue_rqs` ends the batch: the rejected request and the rest
/// wait, and go through `queue_rq` in order after the next completion. Nothing is lost.
#[test]
fn a_queue_rqs_reject_puts_the_rest_back_for_later() {
    let log = Log::new();
    let (host, queue) = batch_queue();
    let disk = host.driver();
    disk.reject_at.store(2, Ordering::SeqCst);
    let mut plug = Plug::new();
    plug_writes(&queue, &mut plug, &log, 5);
    drop(plug);
    assert_eq!(*lock(&disk.batches), [vec![0, 100]]);
    assert_eq!(disk.calls(), [0]);
    assert_eq!(disk.held_sectors(), [0, 100]);
    assert_eq!(host.in_driver(), 2);
    assert_eq!(host.set().busy(), 5, "the rest wait with their tags");

    queue.end_request(disk.take_at(0).rq, Status::Ok).unwrap();
    assert_eq!(disk.calls(), [3]);
    assert_eq!(disk.held_sectors(), [100, 200, 300, 400]);
    assert_eq!(lock(&disk.batches).len(), 1);
    assert_eq!(finish(&queue), 4);
    assert_eq!(log.sorted(), all_ok(5));
    assert_eq!((host.set().busy(), host.in_driver()), (0, 0));
}

// ----- 6. timeouts -----

/// A request times out at its deadline exactly once per dispatch when the driver says
/// `Done`; dispatched again it gets a new deadline; `timeouts()` counts.
#[test]
fn a_timeout_fires_once_per_dispatch_when_done() {
    let log = Log::new();
    let (clock, queue) = clocked(1000);
    let disk = queue.driver();
    assert_eq!(queue.check_timeouts(u64::MAX), 0, "nothing in flight");
    clock.set(100);
    queue.submit(log.bio(0, Op::Read, 0, 8)).unwrap();
    let tag = lock(&disk.held)[0].tag;
    assert_eq!(queue.check_timeouts(1099), 0);
    assert_eq!(queue.check_timeouts(1100), 1);
    assert_eq!(*lock(&disk.timed_out), [tag]);
    assert_eq!(queue.check_timeouts(1100), 0);
    assert_eq!(queue.check_timeouts(1 << 40), 0);
    assert_eq!(queue.timed_out(), 1);

    clock.set(5000);
    let held = disk.take_all();
    queue
        .requeue_request(held.into_iter().next().unwrap().rq, true)
        .unwrap();
    assert_eq!(disk.held_sectors(), [0]);
    assert_eq!(queue.check_timeouts(5999), 0);
    assert_eq!(queue.check_timeouts(6000), 1);
    assert_eq!(queue.check_timeouts(1 << 40), 0);
    assert_eq!(queue.timed_out(), 2);
    assert_eq!(lock(&disk.timed_out).len(), 2);

    queue
        .end_request(disk.take_at(0).rq, Status::Timeout)
        .unwrap();
    assert_eq!(log.ends(), [(0, Status::Timeout)]);
    assert_eq!(queue.check_timeouts(u64::MAX), 0);
    assert_eq!(queue.timed_out(), 2);
}

/// A request's start stamp, and so its deadline, come from the platform's coarse clock:
/// the tick before the precise time, never after it.
#[test]
fn a_request_is_stamped_from_the_coarse_clock() {
    let log = Log::new();
    let clock = TickClock::default();
    let host = Host::new(
        TagSet::builder(8).timeout_ns(1_000),
        clock.clone(),
        Disk::<TickClock>::new(1),
    )
    .unwrap();
    let queue = host.add_queue(QueueConfig::new(limits())).unwrap();
    clock.0.set(10_500);
    queue.submit(log.bio(2, Op::Read, 900, 8)).unwrap();
    let mut plug = Plug::new();
    plug_writes(&queue, &mut plug, &log, 2);
    clock.0.set(13_900);
    plug.flush();
    assert_eq!(held_starts(&queue), [8_000, 12_000, 12_000]);
    let deadlines: Vec<u64> = lock(&host.driver().held)
        .iter()
        .map(|h| queue.request(&h.rq).unwrap().deadline_ns())
        .collect();
    assert_eq!(deadlines, [9_000, 13_000, 13_000]);
    assert_eq!(queue.check_timeouts(8_999), 0);
    assert_eq!(
        queue.check_timeouts(9_000),
        1,
        "a tick early against the precise start"
    );
    assert_eq!(queue.check_timeouts(13_000), 2);
    assert_eq!(finish(&queue), 3);
    assert_eq!(log.sorted(), all_ok(3));
}

/// `ResetTimer` gives the request another full timeout from the check that fired.
#[test]
fn reset_timer_rearms_for_a_full_timeout() {
    let log = Log::new();
    let (clock, queue) = clocked(1000);
    let disk = queue.driver();
    disk.reset_timer.store(true, Ordering::SeqCst);
    clock.set(0);
    queue.submit(log.bio(0, Op::Write, 0, 8)).unwrap();
    assert_eq!(queue.check_timeouts(1000), 1);
    assert_eq!(queue.check_timeouts(1999), 0);
    assert_eq!(queue.check_timeouts(2000), 1);
    assert_eq!(queue.check_timeouts(2000), 0);
    assert_eq!(queue.check_timeouts(2999), 0);
    assert_eq!(queue.check_timeouts(3500), 1);
    assert_eq!(queue.check_timeouts(4499), 0);
    assert_eq!(queue.check_timeouts(4500), 1);
    assert_eq!(queue.timed_out(), 4);
    assert_eq!(finish(&queue), 1);
    assert_eq!(queue.check_timeouts(u64::MAX), 0);
    assert_eq!(queue.timed_out(), 4);
    assert_eq!(log.ends(), [(0, Status::Ok)]);
}

/// Only requests in flight time out: not one completed, not one still queued.
#[test]
fn completed_and_queued_requests_never_time_out() {
    let log = Log::new();
    let (clock, queue) = clocked(1000);
    let disk = queue.driver();
    clock.set(0);
    queue.submit(log.bio(0, Op::Read, 0, 8)).unwrap();
    queue.submit(log.bio(1, Op::Read, 100, 8)).unwrap();
    let kept = lock(&disk.held)[1].tag;
    queue.end_request(disk.take_at(0).rq, Status::Ok).unwrap();
    queue.quiesce();
    queue.submit(log.bio(2, Op::Read, 200, 8)).unwrap();
    assert_eq!(queue.check_timeouts(u64::MAX - 1), 1);
    assert_eq!(*lock(&disk.timed_out), [kept]);
    queue
        .end_request(disk.take_at(100).rq, Status::Timeout)
        .unwrap();
    assert_eq!(
        queue.check_timeouts(u64::MAX - 1),
        0,
        "the queued one is not in flight"
    );
    queue.unquiesce();
    assert_eq!(finish(&queue), 1);
    assert_eq!(queue.check_timeouts(u64::MAX - 1), 0);
    assert_eq!(queue.timed_out(), 1);
    assert_eq!(
        log.sorted(),
        [(0, Status::Ok), (1, Status::Timeout), (2, Status::Ok)]
    );
}

// ----- 7. quiesce and stopped hardware queues -----

/// A quiesced queue calls no `queue_rq` (nesting counted); bios queue up and go when the
/// last quiesce is undone.
#[test]
fn quiesce_holds_dispatch_until_unquiesce() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(limits()));
    queue.quiesce();
    queue.quiesce();
    assert!(queue.is_quiesced());
    for n in 0..3 {
        queue
            .submit(log.bio(n, Op::Read, u64::from(n) * 100, 8))
            .unwrap();
    }
    assert_eq!(host.driver().calls(), [0]);
    queue.unquiesce();
    assert!(queue.is_quiesced());
    assert_eq!(host.driver().calls(), [0]);
    queue.unquiesce();
    assert!(!queue.is_quiesced());
    assert_eq!(host.driver().held_sectors(), [0, 100, 200]);
    assert_eq!(finish(&queue), 3);
    assert_eq!(log.sorted(), all_ok(3));
}

/// `Host::quiesce` quiesces every queue of the host; `Host::unquiesce` runs them all.
#[test]
fn host_quiesce_covers_every_queue() {
    let log = Log::new();
    let host = host_with(TagSet::builder(32), 1, StdDisk::new(1));
    let a = host.add_queue(QueueConfig::new(limits())).unwrap();
    let b = host.add_queue(QueueConfig::new(limits())).unwrap();
    host.quiesce();
    assert!(host.is_quiesced() && a.is_quiesced() && b.is_quiesced());
    a.submit(log.bio(0, Op::Write, 0, 8)).unwrap();
    b.submit(log.bio(1, Op::Write, 0, 8)).unwrap();
    b.submit(log.bio(2, Op::Write, 64, 8)).unwrap();
    assert_eq!(host.driver().calls(), [0]);
    host.unquiesce();
    assert!(!a.is_quiesced() && !b.is_quiesced());
    let got: Vec<(usize, u64)> = host
        .driver()
        .seen()
        .iter()
        .map(|s| (s.queue, s.sector))
        .collect();
    assert_eq!(got, [(addr(&a), 0), (addr(&b), 0), (addr(&b), 64)]);
    assert_eq!(finish(&a) + finish(&b), 3);
    assert_eq!(log.sorted(), all_ok(3));
}

/// A stopped hardware queue dispatches nothing while the others go on; starting it runs it.
#[test]
fn a_stopped_hardware_queue_waits_for_start() {
    let log = Log::new();
    let host = host_with(TagSet::builder(16).hw_queues(2), 2, StdDisk::new(2));
    let queue = host.add_queue(QueueConfig::new(limits())).unwrap();
    let platform = host.set().platform();
    queue.stop_hw_queue(0);
    platform.pin_current_thread(0);
    queue.submit(log.bio(0, Op::Read, 0, 8)).unwrap();
    queue.submit(log.bio(1, Op::Read, 100, 8)).unwrap();
    platform.pin_current_thread(1);
    queue.submit(log.bio(2, Op::Read, 200, 8)).unwrap();
    assert_eq!(host.driver().calls(), [0, 1]);
    queue.start_hw_queue(0);
    assert_eq!(host.driver().calls(), [2, 1]);
    let got: Vec<(usize, u64)> = host
        .driver()
        .seen()
        .iter()
        .map(|s| (s.hctx, s.sector))
        .collect();
    assert_eq!(got, [(1, 200), (0, 0), (0, 100)]);
    assert_eq!(finish(&queue), 3);
    assert_eq!(log.sorted(), all_ok(3));
}

// ----- 8. freeze -----

/// A freeze hands new bios back, drains only when the held requests end, and `freeze()`
/// returns only after another thread ends them; unfreezing lets I/O in again.
#[test]
fn freeze_waits_for_held_requests_ended_elsewhere() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(limits()));
    let disk = host.driver();
    queue.submit(log.bio(0, Op::Read, 0, 8)).unwrap();
    queue.submit(log.bio(1, Op::Read, 100, 8)).unwrap();
    assert_eq!(queue.usage(), 2);

    queue.freeze_start();
    assert!(queue.is_frozen() && !queue.is_drained());
    let back = queue.submit(log.bio(2, Op::Read, 200, 8)).unwrap_err();
    assert_eq!((back.sector, back.private), (200, log.key(2)));
    assert_eq!(disk.calls(), [2]);
    queue.unfreeze();
    assert!(!queue.is_frozen());

    let (done, frozen) = mpsc::channel();
    std::thread::scope(|s| {
        let q = &queue;
        s.spawn(move || {
            q.freeze();
            done.send(()).unwrap();
        });
        while !queue.is_frozen() {
            std::thread::yield_now();
        }
        assert!(frozen.try_recv().is_err(), "two requests held");
        let mut held = disk.take_all();
        let (second, first) = (held.pop().unwrap(), held.pop().unwrap());
        queue.end_request(first.rq, Status::Ok).unwrap();
        assert!(!queue.is_drained());
        assert!(frozen.try_recv().is_err(), "one request held");
        queue.end_request(second.rq, Status::Ok).unwrap();
        frozen.recv().unwrap();
    });
    assert!(queue.is_frozen() && queue.is_drained());
    let back = queue.submit(back).unwrap_err();
    queue.unfreeze();
    queue.submit(back).unwrap();
    assert_eq!(disk.held_sectors(), [200]);
    assert_eq!(finish(&queue), 1);
    assert_eq!(log.sorted(), all_ok(3));
}

// ----- 9. restart -----

/// A request pushed back with `Resource` while another is held is issued by the held one's
/// completion, with no run asked for and no kick.
#[test]
fn a_completion_reissues_a_request_pushed_back_with_resource() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(limits()));
    let disk = host.driver();
    disk.cap.store(1, Ordering::SeqCst);
    queue.submit(log.bio(0, Op::Write, 0, 8)).unwrap();
    queue.submit(log.bio(1, Op::Write, 100, 8)).unwrap();
    assert_eq!(disk.calls(), [2]);
    assert_eq!(disk.held_sectors(), [0]);
    queue.end_request(disk.take_at(0).rq, Status::Ok).unwrap();
    assert_eq!(disk.calls(), [3]);
    assert_eq!(disk.held_sectors(), [100]);
    assert!(host.set().platform().take_kicks().is_empty());
    assert_eq!(finish(&queue), 1);
    assert_eq!(log.sorted(), all_ok(2));
}

/// With nothing in flight to complete, a `Resource` push-back asks the platform for a kick,
/// and `run_kicked` issues the request.
#[test]
fn with_nothing_in_flight_a_push_back_kicks() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(limits()));
    let disk = host.driver();
    disk.cap.store(0, Ordering::SeqCst);
    queue.submit(log.bio(0, Op::Write, 0, 8)).unwrap();
    assert_eq!(disk.calls(), [1]);
    assert_eq!(host.set().platform().take_kicks(), [0]);
    assert!(disk.held_sectors().is_empty());
    disk.cap.store(usize::MAX, Ordering::SeqCst);
    assert_eq!(host.run_kicked(), 1);
    assert_eq!(disk.held_sectors(), [0]);
    assert_eq!(host.run_kicked(), 0);
    assert_eq!(finish(&queue), 1);
    assert_eq!(log.sorted(), all_ok(1));
}

/// Out of budget, a request waits for a completion (which returns budget), or with nothing
/// in flight for a kick: as with `Resource`, and without calling `queue_rq` meanwhile.
#[test]
fn budget_exhaustion_waits_like_resource() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(limits()));
    let disk = host.driver();
    disk.budget.store(1, Ordering::SeqCst);
    queue.submit(log.bio(0, Op::Read, 0, 8)).unwrap();
    queue.submit(log.bio(1, Op::Read, 100, 8)).unwrap();
    assert_eq!(disk.calls(), [1]);
    assert_eq!(disk.held_sectors(), [0]);
    queue.end_request(disk.take_at(0).rq, Status::Ok).unwrap();
    assert_eq!(disk.calls(), [2]);
    assert_eq!(disk.held_sectors(), [100]);
    assert!(host.set().platform().take_kicks().is_empty());
    assert_eq!(finish(&queue), 1);
    assert_eq!(
        disk.budget.load(Ordering::SeqCst),
        1,
        "every unit given back"
    );

    disk.budget.store(0, Ordering::SeqCst);
    queue.submit(log.bio(2, Op::Read, 200, 8)).unwrap();
    assert_eq!(disk.calls(), [2]);
    assert_eq!(host.set().platform().take_kicks(), [0]);
    disk.budget.store(1, Ordering::SeqCst);
    assert_eq!(host.run_kicked(), 1);
    assert_eq!(disk.held_sectors(), [200]);
    assert_eq!(finish(&queue), 1);
    assert_eq!(log.sorted(), all_ok(3));
}

/// Two queues with the FIFO elevator share the host's driver tags; queue A holds them all.
/// Queue B's request waits for a driver tag, and a completion on A runs B.
#[test]
fn a_completion_on_one_queue_reruns_another_waiting_for_a_driver_tag() {
    let log = Log::new();
    let host = host_with(
        TagSet::builder(4)
            .hw_queues(2)
            .flags(TagSetFlags::SHARED_HOST_TAGS),
        2,
        StdDisk::new(2),
    );
    let elv = || QueueConfig::new(limits()).elevator(Box::new(Fifo::new()));
    let a = host.add_queue(elv()).unwrap();
    let b = host.add_queue(elv()).unwrap();
    let disk = host.driver();
    for n in 0..4 {
        a.submit(log.bio(n, Op::Read, u64::from(n) * 100, 8))
            .unwrap();
    }
    assert_eq!(host.set().busy(), 4);
    b.submit(log.bio(4, Op::Read, 100_000, 8)).unwrap();
    assert_eq!(disk.calls(), [4, 0]);
    assert_eq!(b.queue_tags().sched_busy(), 1);
    assert_eq!(disk.held_sectors(), [0, 100, 200, 300]);

    a.end_request(disk.take_at(200).rq, Status::Ok).unwrap();
    assert_eq!(disk.calls(), [5, 0]);
    let last = disk.seen().pop().unwrap();
    assert_eq!((last.queue, last.sector), (addr(&b), 100_000));
    assert_eq!(disk.held_sectors(), [0, 100, 300, 100_000]);
    assert!(host.set().platform().take_kicks().is_empty());
    assert_eq!(finish(&a) + finish(&b), 4);
    assert_eq!(log.sorted(), all_ok(5));
}

/// Of 128 hardware queues, one waits after a push-back; a completion on another reruns
/// exactly that one.
#[test]
fn a_completion_reruns_exactly_the_waiting_hardware_queue_of_128() {
    const NR: usize = 128;
    let log = Log::new();
    let host = host_with(TagSet::builder(2).hw_queues(NR), NR, StdDisk::new(NR));
    let queue = host.add_queue(QueueConfig::new(limits())).unwrap();
    let platform = host.set().platform();
    let disk = host.driver();
    for (n, hctx) in [3u32, 64, 127].into_iter().enumerate() {
        platform.pin_current_thread(hctx as usize);
        queue
            .submit(log.bio(n as u32, Op::Read, u64::from(hctx) * 64, 8))
            .unwrap();
    }
    disk.refuse[90].store(true, Ordering::SeqCst);
    platform.pin_current_thread(90);
    queue.submit(log.bio(3, Op::Read, 90 * 64, 8)).unwrap();
    disk.refuse[90].store(false, Ordering::SeqCst);
    let mut want = vec![0; NR];
    for hctx in [3, 64, 127] {
        want[hctx] = 1;
    }
    // Refused twice: a first give-up on a host of several hardware queues goes round once
    // more, marked for the restart (a completion of another hardware queue in between
    // would not show otherwise).
    want[90] = 2;
    assert_eq!(disk.calls(), want);
    let held: Vec<usize> = lock(&disk.held).iter().map(|h| h.hctx).collect();
    assert_eq!(held, [3, 64, 127]);

    queue
        .end_request(disk.take_at(64 * 64).rq, Status::Ok)
        .unwrap();
    want[90] = 3;
    assert_eq!(disk.calls(), want);
    let held: Vec<usize> = lock(&disk.held).iter().map(|h| h.hctx).collect();
    assert_eq!(held, [3, 127, 90]);
    assert!(platform.take_kicks().is_empty());
    assert_eq!(finish(&queue), 3);
    assert_eq!(
        disk.calls(),
        want,
        "completions with nobody waiting rerun nothing"
    );
    assert_eq!(log.sorted(), all_ok(4));
}

// ----- 10. requeue -----

/// A requeued request waits on the requeue list until it is kicked, then goes before the
/// requests queued meanwhile; requeued with a kick it goes at once.
#[test]
fn requeue_waits_for_a_kick_then_goes_first() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(limits()));
    let disk = host.driver();
    queue.submit(log.bio(0, Op::Write, 0, 8)).unwrap();
    queue.requeue_request(disk.take_at(0).rq, false).unwrap();
    assert_eq!(queue.requeued(), 1);
    assert_eq!(host.in_driver(), 0);
    assert_eq!(disk.calls(), [1]);

    queue.submit(log.bio(1, Op::Write, 100, 8)).unwrap();
    assert_eq!(queue.requeued(), 1, "new I/O does not take it off the list");
    assert_eq!(disk.held_sectors(), [100]);

    queue.quiesce();
    queue.submit(log.bio(2, Op::Write, 200, 8)).unwrap();
    queue.submit(log.bio(3, Op::Write, 300, 8)).unwrap();
    queue.kick_requeue_list();
    assert_eq!(queue.requeued(), 0);
    assert_eq!(disk.calls(), [2]);
    queue.unquiesce();
    let sectors: Vec<u64> = disk.seen().iter().map(|s| s.sector).collect();
    assert_eq!(sectors, [0, 100, 0, 200, 300]);
    assert!(log.ends().is_empty());

    queue.requeue_request(disk.take_at(200).rq, true).unwrap();
    assert_eq!(queue.requeued(), 0);
    let sectors: Vec<u64> = disk.seen().iter().map(|s| s.sector).collect();
    assert_eq!(sectors, [0, 100, 0, 200, 300, 200]);
    assert_eq!(disk.held_sectors(), [100, 0, 300, 200]);
    assert_eq!(finish(&queue), 4);
    assert_eq!(log.sorted(), all_ok(4));
}

/// Requests requeued through an elevator and left on the requeue list while the elevator
/// is switched away (to none) are not lost: the switch sends them back to dispatch and
/// waits for them, every bio ends, and no tag is left held.
#[test]
fn requeued_requests_survive_switching_the_elevator_away() {
    let log = Log::new();
    let config = QueueConfig::new(cached()).elevator(Box::new(Fifo::new()));
    let (host, queue) = single(config);
    let disk = host.driver();
    queue.submit(log.bio(0, Op::Read, 0, 8)).unwrap();
    queue.submit(log.bio(1, Op::Read, 100, 8)).unwrap();
    queue.submit(log.bio(2, Op::Flush, 0, 0)).unwrap();
    for held in disk.take_all() {
        queue.requeue_request(held.rq, false).unwrap();
    }
    assert_eq!((queue.requeued(), host.in_driver()), (3, 0));

    let (result, switched) = mpsc::channel();
    std::thread::scope(|s| {
        let q = &queue;
        s.spawn(move || result.send(q.switch_elevator(None, None)).unwrap());
        // The switch kicks the requeue list while it drains: end what comes back.
        let mut ended = 0;
        while ended < 3 {
            ended += finish(&queue);
            std::thread::yield_now();
        }
        assert_eq!(switched.recv().unwrap(), Ok(()));
    });
    assert_eq!(queue.elevator_name(), None);
    assert_eq!(queue.requeued(), 0);
    assert_eq!(log.sorted(), all_ok(3));
    assert_eq!(
        (host.set().busy(), host.in_driver(), queue.usage()),
        (0, 0, 0)
    );
    // And the queue works on without one.
    queue.submit(log.bio(3, Op::Write, 200, 8)).unwrap();
    assert_eq!(finish(&queue), 1);
    assert_eq!(log.sorted(), all_ok(4));
}

// ----- 11. hardware queue deactivation -----

/// A deactivated hardware queue gets no new requests (its CPUs' bios go to another), is
/// drained once its held requests end, and takes bios again once activated.
#[test]
fn a_deactivated_hardware_queue_sends_bios_elsewhere_and_drains() {
    let log = Log::new();
    let host = host_with(TagSet::builder(8).hw_queues(2), 2, StdDisk::new(2));
    let queue = host.add_queue(QueueConfig::new(limits())).unwrap();
    let platform = host.set().platform();
    let disk = host.driver();
    platform.pin_current_thread(1);
    queue.submit(log.bio(0, Op::Read, 0, 8)).unwrap();
    assert!(!queue.deactivate_hctx(1));
    assert!(!queue.is_hctx_drained(1));

    queue.submit(log.bio(1, Op::Read, 100, 8)).unwrap();
    queue.submit(log.bio(2, Op::Read, 200, 8)).unwrap();
    let hctxs: Vec<(u64, usize)> = disk.seen().iter().map(|s| (s.sector, s.hctx)).collect();
    assert_eq!(hctxs, [(0, 1), (100, 0), (200, 0)]);
    assert!(!queue.is_hctx_drained(1));
    queue.end_request(disk.take_at(0).rq, Status::Ok).unwrap();
    assert!(queue.is_hctx_drained(1));
    assert!(!queue.is_hctx_drained(0));

    queue.activate_hctx(1);
    queue.submit(log.bio(3, Op::Read, 300, 8)).unwrap();
    assert_eq!(
        disk.seen().last().map(|s| (s.sector, s.hctx)),
        Some((300, 1))
    );
    assert_eq!(finish(&queue), 3);
    assert!(queue.is_hctx_drained(0) && queue.is_hctx_drained(1));
    assert_eq!(log.sorted(), all_ok(4));
}

/// A bio from a CPU of a deactivated hardware queue, sent to another that is busy, is
/// issued once that one's work completes, without anybody running the inactive queue.
#[test]
fn a_rerouted_bio_is_issued_when_the_busy_hardware_queue_drains() {
    let log = Log::new();
    let host = host_with(TagSet::builder(8).hw_queues(2), 2, StdDisk::new(2));
    let queue = host.add_queue(QueueConfig::new(limits())).unwrap();
    let platform = host.set().platform();
    let disk = host.driver();
    assert!(queue.deactivate_hctx(1));
    platform.pin_current_thread(0);
    queue.submit(log.bio(0, Op::Read, 0, 8)).unwrap();
    disk.refuse[0].store(true, Ordering::SeqCst);
    queue.submit(log.bio(1, Op::Read, 100, 8)).unwrap(); // pushed back: hctx 0 is busy
    disk.refuse[0].store(false, Ordering::SeqCst);
    platform.pin_current_thread(1);
    queue.submit(log.bio(2, Op::Read, 200, 8)).unwrap(); // for hctx 0, from CPU 1
    assert_eq!(finish(&queue), 3, "every request reaches the driver");
    assert!(queue.is_hctx_drained(1));
    assert_eq!(log.sorted(), all_ok(3));
}

// ----- 12. run-time changes -----

/// The elevator changes at run time, to the FIFO and back, while I/O is held: the switch
/// waits for it, bios submitted meanwhile come back, and nothing is lost. The change shows:
/// adjacent bios merge without an elevator and not with the FIFO.
#[test]
fn switching_the_elevator_at_run_time_loses_nothing() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(limits()));
    let disk = host.driver();
    assert_eq!(queue.elevator_name(), None);
    queue.submit(log.bio(0, Op::Write, 0, 8)).unwrap();

    let (result, switched) = mpsc::channel();
    let back = std::thread::scope(|s| {
        let q = &queue;
        s.spawn(move || {
            result
                .send(q.switch_elevator(Some(Box::new(Fifo::new())), None))
                .unwrap();
        });
        while !queue.is_frozen() {
            std::thread::yield_now();
        }
        let back = queue.submit(log.bio(1, Op::Write, 8, 8)).unwrap_err();
        assert!(switched.try_recv().is_err(), "a request is held");
        assert_eq!(finish(&queue), 1);
        assert_eq!(switched.recv().unwrap(), Ok(()));
        back
    });
    assert_eq!(queue.elevator_name(), Some("fifo"));
    assert!(queue.queue_tags().has_scheduler());
    assert!(!queue.is_frozen() && !queue.is_quiesced());
    queue.submit(back).unwrap();
    assert_eq!(disk.held_sectors(), [8]);
    assert_eq!(finish(&queue), 1);
    queue.quiesce();
    queue.submit(log.bio(2, Op::Write, 100, 8)).unwrap();
    queue.submit(log.bio(3, Op::Write, 108, 8)).unwrap();
    queue.unquiesce();
    assert_eq!(finish(&queue), 2, "the FIFO does not merge");

    queue.switch_elevator(None, None).unwrap();
    assert_eq!(queue.elevator_name(), None);
    assert!(!queue.queue_tags().has_scheduler());
    queue.quiesce();
    queue.submit(log.bio(4, Op::Write, 200, 8)).unwrap();
    queue.submit(log.bio(5, Op::Write, 208, 8)).unwrap();
    queue.unquiesce();
    assert_eq!(finish(&queue), 1, "the software queue merges");
    assert_eq!(log.sorted(), all_ok(6));
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}

/// `set_nr_requests` changes the scheduler depth within the one the tags were made with,
/// and the new depth bounds the requests; outside it is an error and nothing changes.
#[test]
fn set_nr_requests_within_limits() {
    let log = Log::new();
    let host = host_with(TagSet::builder(16), 1, StdDisk::new(1));
    let queue = host
        .add_queue(QueueConfig::new(limits()).elevator(Box::new(Fifo::new())))
        .unwrap();
    assert_eq!(queue.queue_tags().nr_requests(), Some(32));
    queue.set_nr_requests(8).unwrap();
    assert_eq!(queue.queue_tags().nr_requests(), Some(8));
    for n in 0..8 {
        queue
            .submit(log.bio(n, Op::Read, u64::from(n) * 100, 8))
            .unwrap();
    }
    let back = queue.submit(log.bio(8, Op::Read, 800, 8)).unwrap_err();
    assert_eq!(back.sector, 800);
    assert_eq!(host.driver().held_sectors().len(), 8);
    assert_eq!(finish(&queue), 8);

    assert_eq!(
        queue.set_nr_requests(33),
        Err(ConfigError::BadDepthUpdate {
            depth: 33,
            min: 1,
            max: 32
        })
    );
    assert!(queue.set_nr_requests(0).is_err());
    assert_eq!(queue.queue_tags().nr_requests(), Some(8));
    queue.set_nr_requests(32).unwrap();
    assert_eq!(queue.queue_tags().nr_requests(), Some(32));
    queue.submit(back).unwrap();
    assert_eq!(finish(&queue), 1);
    assert_eq!(log.sorted(), all_ok(9));
    assert!(!queue.is_frozen() && !queue.is_quiesced());
}

/// Without an elevator there are no scheduler tags to resize.
#[test]
fn set_nr_requests_without_an_elevator_is_refused() {
    let (_host, queue) = single(QueueConfig::new(limits()));
    assert!(queue.set_nr_requests(8).is_err());
    assert!(!queue.is_frozen() && !queue.is_quiesced());
}

/// `RequestQueue::set_nr_requests` documents `ConfigError::NoScheduler` for a queue without
/// an elevator.
#[test]
fn set_nr_requests_without_an_elevator_is_no_scheduler() {
    let (_host, queue) = single(QueueConfig::new(limits()));
    assert_eq!(queue.set_nr_requests(8), Err(ConfigError::NoScheduler));
}

/// An elevator on a `NO_SCHED` set is a configuration error, at creation or at run time;
/// the queue works on without one.
#[test]
fn an_elevator_on_a_no_sched_set_is_a_config_error() {
    let log = Log::new();
    let host = host_with(
        TagSet::builder(8).flags(TagSetFlags::NO_SCHED),
        1,
        StdDisk::new(1),
    );
    let err = host
        .add_queue(QueueConfig::new(limits()).elevator(Box::new(Fifo::new())))
        .unwrap_err();
    assert_eq!(err, ConfigError::NoScheduler);
    assert_eq!(host.set().nr_queues(), 0);
    let queue = host.add_queue(QueueConfig::new(limits())).unwrap();
    assert_eq!(
        queue.switch_elevator(Some(Box::new(Fifo::new())), None),
        Err(ConfigError::NoScheduler)
    );
    assert_eq!(queue.elevator_name(), None);
    assert!(!queue.is_frozen() && !queue.is_quiesced());
    queue.submit(log.bio(0, Op::Read, 0, 8)).unwrap();
    assert_eq!(finish(&queue), 1);
    assert_eq!(log.sorted(), all_ok(1));
}

/// Limits that do not hang together are `ConfigError::BadLimits`, naming the field, and
/// leave nothing attached.
#[test]
fn bad_limits_are_config_errors() {
    let host = host_with(TagSet::builder(8), 1, StdDisk::new(1));
    let cases = [
        (
            QueueLimits {
                logical_block_size: 1000,
                ..limits()
            },
            "logical_block_size",
        ),
        (
            QueueLimits {
                max_sectors: 4,
                ..limits()
            },
            "max_sectors",
        ),
        (
            QueueLimits {
                max_segments: 0,
                ..limits()
            },
            "max_segments",
        ),
        (
            QueueLimits {
                max_segment_size: 512,
                ..limits()
            },
            "max_segment_size",
        ),
        (
            QueueLimits {
                seg_boundary_mask: 4096,
                ..limits()
            },
            "seg_boundary_mask",
        ),
        (
            QueueLimits {
                chunk_sectors: 24,
                ..limits()
            },
            "chunk_sectors",
        ),
        (
            QueueLimits {
                logical_block_size: 4096,
                ..QueueLimits::new(1001)
            },
            "capacity",
        ),
    ];
    for (limits, what) in cases {
        assert_eq!(
            host.add_queue(QueueConfig::new(limits)).unwrap_err(),
            ConfigError::BadLimits { what }
        );
    }
    assert_eq!(host.set().nr_queues(), 0);
    assert!(host.add_queue(QueueConfig::new(limits())).is_ok());
}

// ----- 13. completion -----

/// `end_requests` ends each request with its own status, and its one restart pass issues a
/// request that was waiting.
#[test]
fn batched_completion_ends_each_with_its_status_and_restarts() {
    let log = Log::new();
    let (host, queue) = single(QueueConfig::new(limits()));
    let disk = host.driver();
    disk.cap.store(5, Ordering::SeqCst);
    for n in 0..6 {
        queue
            .submit(log.bio(n, Op::Write, u64::from(n) * 100, 8))
            .unwrap();
    }
    assert_eq!(disk.held_sectors(), [0, 100, 200, 300, 400]);
    disk.cap.store(usize::MAX, Ordering::SeqCst);
    let statuses = [
        Status::Ok,
        Status::Medium,
        Status::Ok,
        Status::IoErr,
        Status::NoSpace,
    ];
    let held = disk.take_all();
    queue
        .end_requests(held.into_iter().zip(statuses).map(|(h, s)| (h.rq, s)))
        .unwrap();
    let want: Vec<(u32, Status)> = (0..5).zip(statuses).collect();
    assert_eq!(log.ends(), want);
    assert_eq!(disk.held_sectors(), [500]);
    assert_eq!(finish(&queue), 1);
    assert_eq!(log.ends().len(), 6);
    assert_eq!(log.ends()[5], (5, Status::Ok));
    assert_eq!(
        (host.set().busy(), host.in_driver(), queue.usage()),
        (0, 0, 0)
    );
}

/// A driver that ends each request inside `queue_rq` ends every bio once: plain, merged
/// in a plug, and split.
#[test]
fn inline_completion_from_queue_rq_ends_every_bio_once() {
    let log = Log::new();
    let host = host_with(TagSet::builder(8), 1, StdDisk::inline(1));
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits {
            max_sectors: 64,
            ..limits()
        }))
        .unwrap();
    for n in 0..50 {
        queue
            .submit(log.bio(n, Op::Read, u64::from(n) * 1000, 8))
            .unwrap();
    }
    {
        let mut plug = Plug::new();
        for n in 50..60 {
            let sector = 100_000 + u64::from(n - 50) * 8;
            queue
                .submit_plugged(&mut plug, log.bio(n, Op::Write, sector, 8))
                .unwrap();
        }
        assert_eq!(plug.len(), 2, "64 sectors to a request");
    }
    queue.submit(log.bio(60, Op::Write, 200_000, 200)).unwrap();
    assert_eq!(log.sorted(), all_ok(61));
    let seen = host.driver().seen();
    assert_eq!(seen.len(), 50 + 2 + 4);
    assert_eq!(
        seen.iter().map(|s| s.sectors).sum::<u64>(),
        50 * 8 + 10 * 8 + 200
    );
    assert_eq!(
        (host.set().busy(), host.in_driver(), queue.usage()),
        (0, 0, 0)
    );
}

/// Two threads submit many bios to one hardware queue whose driver ends them inline:
/// every bio ends exactly once, and nothing is left behind.
#[test]
fn inline_completion_with_two_submitting_threads_ends_every_bio_once() {
    const PER_THREAD: u32 = 2000;
    let log = Log::new();
    let host = host_with(TagSet::builder(8), 2, StdDisk::inline(1));
    let queue = host.add_queue(QueueConfig::new(limits())).unwrap();
    std::thread::scope(|s| {
        for t in 0..2u32 {
            let (queue, log, platform) = (&queue, &log, host.set().platform());
            s.spawn(move || {
                platform.pin_current_thread(t as usize);
                for i in 0..PER_THREAD {
                    let n = t * PER_THREAD + i;
                    queue.submit_wait(log.bio(n, Op::Write, u64::from(n) * 8, 8));
                }
            });
        }
    });
    assert_eq!(log.sorted(), all_ok(2 * PER_THREAD));
    let seen = host.driver().seen();
    seen.iter().for_each(Seen::check);
    assert_eq!(
        seen.iter().map(|s| u64::from(s.nr_bios)).sum::<u64>(),
        u64::from(2 * PER_THREAD)
    );
    assert_eq!(
        (host.set().busy(), host.in_driver(), queue.usage()),
        (0, 0, 0)
    );
}
