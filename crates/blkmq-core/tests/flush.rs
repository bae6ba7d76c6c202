//! Flush sequencing against a device that keeps a volatile write cache: the command
//! streams Linux's `blk-flush.c` produces, requeues in every step, teardown, no allocation
//! per flushed write, and a proptest that cuts the power after random writes, flushes and
//! completions and finds every write that was promised stable.

#![cfg(not(loom))]

#[path = "common/counting.rs"]
mod counting;
#[path = "common/fifo.rs"]
mod fifo;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use blkmq_core::{
    Bio, BioFlags, Driver, FLUSH_PENDING_TIMEOUT_NS, HctxCx, Host, Op, Platform, QueueConfig,
    QueueLimits, Rejected, RequestInit, RequestQueue, Rq, Status, TagSet,
};
use proptest::prelude::*;

/// A platform of one CPU whose clock the test sets; kicks are left to the test.
#[derive(Clone, Default)]
struct Clock(Arc<AtomicU64>);

impl Clock {
    fn advance(&self, ns: u64) {
        self.0.fetch_add(ns, Ordering::Relaxed);
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
        self.0.load(Ordering::Relaxed)
    }

    fn kick(&self, _hctx: usize) {}
}

thread_local! {
    /// The test's clock of events: submissions, commands issued and ended, acknowledgements.
    static NOW: Cell<u64> = const { Cell::new(0) };
    /// Acknowledgements: the bio's `private` (its data), its status, when.
    static ACKS: RefCell<Vec<(u64, Status, u64)>> = const { RefCell::new(Vec::new()) };
}

fn tick() -> u64 {
    NOW.with(|n| {
        n.set(n.get() + 1);
        n.get()
    })
}

fn acked(bio: Bio, status: Status) {
    let at = tick();
    ACKS.with(|a| a.borrow_mut().push((bio.private, status, at)));
}

fn acks() -> Vec<(u64, Status)> {
    ACKS.with(|a| a.borrow().iter().map(|&(d, s, _)| (d, s)).collect())
}

fn reset() {
    NOW.with(|n| n.set(0));
    ACKS.with(|a| a.borrow_mut().clear());
}

/// A command as the device saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmd {
    Flush,
    Write { sector: u64, fua: bool },
}

use Cmd::Flush as FLUSH;

fn w(sector: u64) -> Cmd {
    Cmd::Write { sector, fua: false }
}

fn w_fua(sector: u64) -> Cmd {
    Cmd::Write { sector, fua: true }
}

#[derive(Default)]
struct DiskState {
    held: Vec<Rq>,
    log: Vec<Cmd>,
    /// Turn the next command down with `Status::Resource`.
    reject_next: bool,
    /// The data of every write submitted with PREFLUSH, and when it was submitted.
    preflush_at: BTreeMap<u64, u64>,
    /// Flushes issued: when, and when they ended well (by the tag).
    flushes: Vec<(u64, Option<u64>)>,
    flush_by_tag: BTreeMap<u32, (usize, u64)>,
    /// Writes the device executed but has not made stable: (sector, data, when done).
    cache: Vec<(u64, u64, u64)>,
    stable: BTreeMap<u64, u64>,
    /// Commands the device has ended well so far.
    executed: u64,
    /// What went wrong, said when the test looks.
    violations: Vec<String>,
}

/// A device with a volatile write cache (unless `write_cache` is off), FUA honoured when
/// `fua`, that records the commands it is given and executes each when the test ends it.
struct Disk {
    write_cache: bool,
    fua: bool,
    state: Mutex<DiskState>,
}

impl Disk {
    fn new(write_cache: bool, fua: bool) -> Self {
        Self {
            write_cache,
            fua,
            state: Mutex::new(DiskState::default()),
        }
    }

    fn log(&self) -> Vec<Cmd> {
        self.state.lock().unwrap().log.clone()
    }

    fn held(&self) -> usize {
        self.state.lock().unwrap().held.len()
    }

    fn take(&self, pick: usize) -> Option<Rq> {
        let mut st = self.state.lock().unwrap();
        if st.held.is_empty() {
            return None;
        }
        let i = pick % st.held.len();
        Some(st.held.remove(i))
    }

    /// Executes the `pick`-th command held and ends it with `status`.
    fn complete(&self, queue: &RequestQueue<Self>, pick: usize, status: Status) -> bool {
        let Some(rq) = self.take(pick) else {
            return false;
        };
        self.execute(queue, &rq, status);
        queue.end_request(rq, status).unwrap();
        true
    }

    fn execute(&self, queue: &RequestQueue<Self>, rq: &Rq, status: Status) {
        let io = queue.io(rq).unwrap();
        let now = tick();
        let mut st = self.state.lock().unwrap();
        let flush = st.flush_by_tag.remove(&rq.tag());
        if !status.is_ok() {
            return;
        }
        match io.op() {
            Op::Flush => {
                let (index, executed_then) = flush.expect("a flush the device was given");
                st.flushes[index].1 = Some(now);
                // A weak device: what it had done when the flush came is stable now.
                let (old, new): (Vec<_>, Vec<_>) = st
                    .cache
                    .drain(..)
                    .partition(|&(_, _, at)| at < executed_then);
                st.cache = new;
                for (sector, data, _) in old {
                    st.stable.insert(sector, data);
                }
            }
            Op::Write => {
                let fua = io.flags().contains(BioFlags::FUA);
                let mut bios = Vec::new();
                queue.for_each_bio(rq, |bio| bios.push((bio.sector, bio.private)));
                let executed = st.executed;
                for (sector, data) in bios {
                    if !self.write_cache || (fua && self.fua) {
                        st.stable.insert(sector, data);
                    } else {
                        st.cache.push((sector, data, executed));
                    }
                }
            }
            op => st.violations.push(format!("unexpected {op:?}")),
        }
        st.executed += 1;
    }

    /// Drops the cache.
    fn cut_power(&self) -> BTreeMap<u64, u64> {
        let mut st = self.state.lock().unwrap();
        st.cache.clear();
        st.stable.clone()
    }

    fn violations(&self) -> Vec<String> {
        self.state.lock().unwrap().violations.clone()
    }
}

impl Driver for Disk {
    type Platform = Clock;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        let queue = cx.queue();
        let now = tick();
        let mut st = self.state.lock().unwrap();
        if st.reject_next {
            st.reject_next = false;
            return Err(Rejected {
                rq,
                status: Status::Resource,
            });
        }
        let io = queue.io(&rq).unwrap();
        match io.op() {
            Op::Flush => {
                if io.sectors() != 0 {
                    st.violations.push("a flush with data".into());
                }
                st.log.push(Cmd::Flush);
                let index = st.flushes.len();
                st.flushes.push((now, None));
                let executed = st.executed;
                st.flush_by_tag.insert(rq.tag(), (index, executed));
            }
            Op::Write => {
                let flags = io.flags();
                if flags.contains(BioFlags::PREFLUSH) {
                    st.violations.push("the driver saw PREFLUSH".into());
                }
                if flags.contains(BioFlags::FUA) && !(self.write_cache && self.fua) {
                    st.violations
                        .push("the driver saw FUA it cannot honour".into());
                }
                st.log.push(Cmd::Write {
                    sector: io.sector(),
                    fua: flags.contains(BioFlags::FUA),
                });
                let mut datas = Vec::new();
                queue.for_each_bio(&rq, |bio| datas.push(bio.private));
                // Without a cache there is nothing to flush first.
                for data in datas.into_iter().filter(|_| self.write_cache) {
                    let Some(&submitted) = st.preflush_at.get(&data) else {
                        continue;
                    };
                    // The data goes only after a flush issued since it came ended well.
                    let flushed = st
                        .flushes
                        .iter()
                        .any(|&(issued, ended)| issued > submitted && ended.is_some());
                    if !flushed {
                        st.violations
                            .push(format!("write {data} issued before its preflush ended"));
                    }
                }
            }
            op => st.violations.push(format!("unexpected {op:?}")),
        }
        st.held.push(rq);
        Ok(())
    }
}

type Q = Arc<RequestQueue<Disk>>;

fn setup(
    write_cache: bool,
    fua: bool,
    depth: usize,
    elevator: bool,
) -> (Arc<Host<Disk>>, Q, Clock) {
    reset();
    let clock = Clock::default();
    let host = Host::new(
        TagSet::builder(depth),
        clock.clone(),
        Disk::new(write_cache, fua),
    )
    .unwrap();
    let limits = QueueLimits {
        write_cache,
        fua,
        ..QueueLimits::new(1 << 20)
    };
    let mut config = QueueConfig::new(limits);
    if elevator {
        config = config.elevator(Box::new(fifo::Fifo::new()));
    }
    let queue = host.add_queue(config).unwrap();
    (host, queue, clock)
}

/// A write of 8 sectors at `sector` whose data is `sector` (its `private`).
fn write(sector: u64, flags: BioFlags) -> Bio {
    Bio::new(Op::Write, sector, 8)
        .flags(flags)
        .private(sector)
        .end_io(acked)
}

fn flush(data: u64) -> Bio {
    Bio::new(Op::Flush, 0, 0).private(data).end_io(acked)
}

fn submit(host: &Host<Disk>, queue: &Q, bio: Bio) {
    let at = tick();
    if bio.flags.contains(BioFlags::PREFLUSH) {
        host.driver()
            .state
            .lock()
            .unwrap()
            .preflush_at
            .insert(bio.private, at);
    }
    queue.submit(bio).unwrap();
}

/// Ends the oldest command held, well.
fn next(host: &Host<Disk>, queue: &Q) {
    assert!(host.driver().complete(queue, 0, Status::Ok), "nothing held");
}

fn drain(host: &Host<Disk>, queue: &Q) {
    while host.driver().complete(queue, 0, Status::Ok) {}
}

fn clean(host: &Host<Disk>, queue: &Q) {
    assert_eq!(host.driver().violations(), Vec::<String>::new());
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}

const PF: BioFlags = BioFlags::PREFLUSH;
const FUA: BioFlags = BioFlags::FUA;

#[test]
fn preflush_fua_with_device_fua_is_a_flush_then_a_fua_write() {
    let (host, queue, _) = setup(true, true, 8, false);
    submit(&host, &queue, write(0, PF | FUA));
    assert_eq!(host.driver().log(), [FLUSH]); // the data waits for its preflush
    next(&host, &queue);
    assert_eq!(host.driver().log(), [FLUSH, w_fua(0)]);
    assert!(acks().is_empty());
    next(&host, &queue);
    assert_eq!(acks(), [(0, Status::Ok)]);
    assert_eq!(host.driver().log(), [FLUSH, w_fua(0)]);
    clean(&host, &queue);
}

#[test]
fn preflush_fua_without_device_fua_is_flush_write_flush() {
    let (host, queue, _) = setup(true, false, 8, false);
    submit(&host, &queue, write(0, PF | FUA));
    next(&host, &queue);
    next(&host, &queue);
    assert_eq!(host.driver().log(), [FLUSH, w(0), FLUSH]);
    assert!(acks().is_empty(), "acknowledged only after the postflush");
    next(&host, &queue);
    assert_eq!(acks(), [(0, Status::Ok)]);
    clean(&host, &queue);
}

#[test]
fn each_flag_alone_makes_the_steps_linux_makes() {
    // FUA honoured: an ordinary request, FUA kept.
    let (host, queue, _) = setup(true, true, 8, false);
    submit(&host, &queue, write(0, FUA));
    drain(&host, &queue);
    assert_eq!(host.driver().log(), [w_fua(0)]);
    clean(&host, &queue);
    // FUA emulated: the write, then a flush.
    let (host, queue, _) = setup(true, false, 8, false);
    submit(&host, &queue, write(0, FUA));
    drain(&host, &queue);
    assert_eq!(host.driver().log(), [w(0), FLUSH]);
    clean(&host, &queue);
    // PREFLUSH alone: a flush, then the write.
    let (host, queue, _) = setup(true, false, 8, false);
    submit(&host, &queue, write(0, PF));
    drain(&host, &queue);
    assert_eq!(host.driver().log(), [FLUSH, w(0)]);
    // An empty flush: a flush.
    submit(&host, &queue, flush(7));
    drain(&host, &queue);
    assert_eq!(host.driver().log(), [FLUSH, w(0), FLUSH]);
    assert_eq!(acks(), [(0, Status::Ok), (7, Status::Ok)]);
    clean(&host, &queue);
}

#[test]
fn without_a_write_cache_flags_drop_and_empty_flushes_end_at_once() {
    for fua in [false, true] {
        let (host, queue, _) = setup(false, fua, 8, false);
        submit(&host, &queue, write(0, PF | FUA));
        assert_eq!(host.driver().log(), [w(0)]);
        submit(&host, &queue, flush(9));
        assert_eq!(acks(), [(9, Status::Ok)], "ended at once");
        assert_eq!(host.driver().held(), 1);
        drain(&host, &queue);
        assert_eq!(host.driver().log(), [w(0)]);
        assert_eq!(acks(), [(9, Status::Ok), (0, Status::Ok)]);
        clean(&host, &queue);
    }
}

#[test]
fn without_a_write_cache_writes_with_dropped_flags_merge() {
    let (host, queue, _) = setup(false, false, 8, false);
    queue.quiesce();
    submit(&host, &queue, write(0, PF));
    submit(&host, &queue, write(8, FUA));
    queue.unquiesce();
    assert_eq!(host.driver().log(), [w(0)]); // one request of both
    drain(&host, &queue);
    assert_eq!(acks(), [(0, Status::Ok), (8, Status::Ok)]);
    clean(&host, &queue);
}

#[test]
fn two_preflush_writes_pending_together_share_one_flush() {
    let (host, queue, _) = setup(true, false, 8, false);
    submit(&host, &queue, flush(100));
    assert_eq!(host.driver().log(), [FLUSH]);
    // Both come while that flush is in flight: they wait for the next, together.
    submit(&host, &queue, write(0, PF));
    submit(&host, &queue, write(8, PF));
    assert_eq!(host.driver().log(), [FLUSH]);
    next(&host, &queue);
    assert_eq!(acks(), [(100, Status::Ok)]);
    assert_eq!(host.driver().log(), [FLUSH, FLUSH]);
    next(&host, &queue);
    assert_eq!(host.driver().log(), [FLUSH, FLUSH, w(0), w(8)]);
    drain(&host, &queue);
    assert_eq!(
        acks(),
        [(100, Status::Ok), (0, Status::Ok), (8, Status::Ok)]
    );
    clean(&host, &queue);
}

#[test]
fn a_flush_arriving_while_one_is_in_flight_waits_for_the_next() {
    let (host, queue, _) = setup(true, true, 8, false);
    submit(&host, &queue, flush(1));
    submit(&host, &queue, flush(2));
    assert_eq!(host.driver().log(), [FLUSH]);
    next(&host, &queue);
    assert_eq!(
        acks(),
        [(1, Status::Ok)],
        "the second was not served by the first"
    );
    assert_eq!(host.driver().log(), [FLUSH, FLUSH]);
    next(&host, &queue);
    assert_eq!(acks(), [(1, Status::Ok), (2, Status::Ok)]);
    clean(&host, &queue);
}

#[test]
fn a_flush_is_held_while_data_is_in_flight_so_a_postflush_serves_a_preflush() {
    let (host, queue, _) = setup(true, false, 8, false);
    submit(&host, &queue, write(0, FUA)); // data, then a postflush
    submit(&host, &queue, write(8, PF)); // a preflush, held for that data
    assert_eq!(host.driver().log(), [w(0)]);
    next(&host, &queue); // the data ends: one flush for both
    assert_eq!(host.driver().log(), [w(0), FLUSH]);
    next(&host, &queue);
    assert_eq!(acks(), [(0, Status::Ok)]);
    assert_eq!(host.driver().log(), [w(0), FLUSH, w(8)]);
    next(&host, &queue);
    assert_eq!(acks(), [(0, Status::Ok), (8, Status::Ok)]);
    clean(&host, &queue);
}

#[test]
fn a_held_flush_goes_once_its_waiters_waited_the_pending_timeout() {
    let (host, queue, clock) = setup(true, false, 8, false);
    submit(&host, &queue, write(0, FUA));
    submit(&host, &queue, flush(1)); // held: data in flight
    assert_eq!(host.driver().log(), [w(0)]);
    clock.advance(FLUSH_PENDING_TIMEOUT_NS - 1);
    submit(&host, &queue, flush(2)); // not yet
    assert_eq!(host.driver().log(), [w(0)]);
    clock.advance(1);
    submit(&host, &queue, flush(3)); // the oldest waited long enough
    assert_eq!(host.driver().log(), [w(0), FLUSH]);
    let flush_first = host.driver().complete(&queue, 1, Status::Ok);
    assert!(flush_first);
    assert_eq!(acks(), [(1, Status::Ok), (2, Status::Ok), (3, Status::Ok)]);
    drain(&host, &queue); // the data, then its own postflush
    assert_eq!(host.driver().log(), [w(0), FLUSH, FLUSH]);
    assert_eq!(acks().last(), Some(&(0, Status::Ok)));
    clean(&host, &queue);
}

#[test]
fn a_failed_preflush_ends_the_write_with_its_error_and_no_data() {
    let (host, queue, _) = setup(true, false, 8, false);
    submit(&host, &queue, write(0, PF | FUA));
    assert!(host.driver().complete(&queue, 0, Status::Medium));
    assert_eq!(acks(), [(0, Status::Medium)]);
    assert_eq!(host.driver().log(), [FLUSH]);
    clean(&host, &queue);
    // A failed data step: no postflush.
    let (host, queue, _) = setup(true, false, 8, false);
    submit(&host, &queue, write(0, PF | FUA));
    next(&host, &queue);
    assert!(host.driver().complete(&queue, 0, Status::IoErr));
    assert_eq!(acks(), [(0, Status::IoErr)]);
    assert_eq!(host.driver().log(), [FLUSH, w(0)]);
    clean(&host, &queue);
    // A failed postflush: the error of the request.
    let (host, queue, _) = setup(true, false, 8, false);
    submit(&host, &queue, write(0, FUA));
    next(&host, &queue);
    assert!(host.driver().complete(&queue, 0, Status::Timeout));
    assert_eq!(acks(), [(0, Status::Timeout)]);
    clean(&host, &queue);
}

#[test]
fn a_request_requeued_in_each_step_resumes_it() {
    for elevator in [false, true] {
        let (host, queue, _) = setup(true, false, 8, elevator);
        submit(&host, &queue, write(0, PF | FUA));
        for _ in 0..3 {
            // Handed back by the driver, then turned down once: issued a third time.
            let rq = host.driver().take(0).unwrap();
            host.driver().state.lock().unwrap().reject_next = true;
            queue.requeue_request(rq, true).unwrap();
            queue.run_hw_queues();
            next(&host, &queue);
        }
        assert_eq!(
            host.driver().log(),
            [FLUSH, FLUSH, w(0), w(0), FLUSH, FLUSH]
        );
        assert_eq!(acks(), [(0, Status::Ok)]);
        clean(&host, &queue);
    }
}

#[test]
fn with_an_elevator_sequenced_requests_go_around_it() {
    let (host, queue, _) = setup(true, false, 4, true);
    submit(&host, &queue, write(64, BioFlags::empty()));
    submit(&host, &queue, write(0, PF | FUA));
    drain(&host, &queue);
    assert_eq!(host.driver().log(), [w(64), FLUSH, w(0), FLUSH]);
    assert_eq!(acks(), [(64, Status::Ok), (0, Status::Ok)]);
    clean(&host, &queue);
}

#[test]
fn every_tag_taken_by_flush_waiters_still_flushes() {
    for elevator in [false, true] {
        let (host, queue, _) = setup(true, false, 2, elevator);
        submit(&host, &queue, flush(1)); // in flight
        submit(&host, &queue, write(0, PF)); // every tag taken now
        next(&host, &queue);
        drain(&host, &queue);
        assert_eq!(host.driver().log(), [FLUSH, FLUSH, w(0)]);
        assert_eq!(acks(), [(1, Status::Ok), (0, Status::Ok)]);
        clean(&host, &queue);
    }
}

#[test]
fn teardown_ends_every_pending_sequence_once_with_an_error() {
    // Quiesced: the flush waits on the dispatch list, its I/O held aside.
    let (host, queue, _) = setup(true, false, 8, false);
    queue.quiesce();
    submit(&host, &queue, write(0, PF | FUA));
    submit(&host, &queue, write(8, PF));
    submit(&host, &queue, flush(5));
    drop(queue);
    let mut ended = acks();
    ended.sort_unstable_by_key(|&(d, _)| d);
    assert_eq!(
        ended,
        [(0, Status::IoErr), (5, Status::IoErr), (8, Status::IoErr)]
    );
    assert!(host.driver().log().is_empty());
    assert_eq!(host.set().busy(), 0);

    // The driver holds the flush: those it serves and the one it was end with an error.
    let (host, queue, _) = setup(true, false, 8, false);
    submit(&host, &queue, write(0, PF)); // issued as the flush
    submit(&host, &queue, write(8, PF)); // waiting for the next
    assert_eq!(host.driver().held(), 1);
    drop(queue);
    let mut ended = acks();
    ended.sort_unstable_by_key(|&(d, _)| d);
    assert_eq!(ended, [(0, Status::IoErr), (8, Status::IoErr)]);
    let _never_ended = host.driver().take(0);
}

/// Holds what it is given in room made once.
struct Pool {
    held: Mutex<Vec<Rq>>,
}

impl Driver for Pool {
    type Platform = Clock;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        self.held.lock().unwrap().push(rq);
        Ok(())
    }
}

static ENDED: AtomicUsize = AtomicUsize::new(0);

fn count(_: Bio, status: Status) {
    assert_eq!(status, Status::Ok);
    ENDED.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn a_flushed_write_allocates_nothing() {
    for (fua, elevator) in [(false, false), (true, false), (false, true)] {
        let host = Host::new(
            TagSet::builder(8),
            Clock::default(),
            Pool {
                held: Mutex::new(Vec::with_capacity(64)),
            },
        )
        .unwrap();
        let limits = QueueLimits {
            write_cache: true,
            fua,
            ..QueueLimits::new(1 << 20)
        };
        let mut config = QueueConfig::new(limits);
        if elevator {
            config = config.elevator(Box::new(fifo::Fifo::new()));
        }
        let queue = host.add_queue(config).unwrap();
        let run = |n: u64| {
            for i in 0..n {
                let flags = [PF | FUA, PF, FUA][i as usize % 3];
                queue
                    .submit(
                        Bio::new(Op::Write, i % 64 * 8, 8)
                            .flags(flags)
                            .end_io(count),
                    )
                    .unwrap();
                queue
                    .submit(Bio::new(Op::Flush, 0, 0).end_io(count))
                    .unwrap();
                loop {
                    let rq = host.driver().held.lock().unwrap().pop();
                    let Some(rq) = rq else { break };
                    queue.end_request(rq, Status::Ok).unwrap();
                }
            }
        };
        run(16);
        let before = ENDED.load(Ordering::Relaxed);
        counting::assert_no_alloc("flushed writes", || run(1_000));
        assert_eq!(ENDED.load(Ordering::Relaxed) - before, 2_000);
        assert_eq!((host.set().busy(), queue.usage()), (0, 0));
    }
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Write { preflush: bool, fua: bool },
    Flush,
    Complete { pick: usize, ok: bool },
    Requeue { pick: usize },
    Reject,
    Wait,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (any::<bool>(), any::<bool>()).prop_map(|(preflush, fua)| Step::Write { preflush, fua }),
        2 => Just(Step::Flush),
        6 => (any::<usize>(), prop::bool::weighted(0.9)).prop_map(|(pick, ok)| Step::Complete { pick, ok }),
        1 => any::<usize>().prop_map(|pick| Step::Requeue { pick }),
        1 => Just(Step::Reject),
        1 => Just(Step::Wait),
    ]
}

/// What the submitter knows of a bio: its flags, when it went in, its acknowledgement.
struct Sent {
    flush: bool,
    fua: bool,
    submitted: u64,
}

fn durability(
    write_cache: bool,
    fua: bool,
    elevator: bool,
    depth: usize,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let (host, queue, clock) = setup(write_cache, fua, depth, elevator);
    let disk = host.driver();
    let mut sent: BTreeMap<u64, Sent> = BTreeMap::new();
    let mut next_write = 0u64;
    let mut next_flush = 1u64 << 40;
    for step in steps {
        match *step {
            Step::Write { preflush, fua } => {
                let mut flags = BioFlags::empty();
                if preflush {
                    flags |= PF;
                }
                if fua {
                    flags |= FUA;
                }
                let sector = next_write;
                next_write += 8;
                let at = tick();
                let bio = write(sector, flags);
                if preflush {
                    disk.state.lock().unwrap().preflush_at.insert(sector, at);
                }
                if queue.submit(bio).is_ok() {
                    let record = Sent {
                        flush: preflush,
                        fua,
                        submitted: at,
                    };
                    sent.insert(sector, record);
                }
            }
            Step::Flush => {
                let data = next_flush;
                next_flush += 1;
                let at = tick();
                if queue.submit(flush(data)).is_ok() {
                    let record = Sent {
                        flush: true,
                        fua: false,
                        submitted: at,
                    };
                    sent.insert(data, record);
                }
            }
            Step::Complete { pick, ok } => {
                let status = if ok { Status::Ok } else { Status::IoErr };
                disk.complete(&queue, pick, status);
            }
            Step::Requeue { pick } => {
                if let Some(rq) = disk.take(pick) {
                    queue.requeue_request(rq, true).unwrap();
                }
            }
            Step::Reject => disk.state.lock().unwrap().reject_next = true,
            Step::Wait => {
                clock.advance(FLUSH_PENDING_TIMEOUT_NS);
                queue.run_hw_queues();
            }
        }
    }
    // The power goes.
    let stable = disk.cut_power();
    let all = ACKS.with(|a| a.borrow().clone());
    let ack_of = |data: u64| {
        all.iter()
            .find(|&&(d, _, _)| d == data)
            .map(|&(_, s, at)| (s, at))
    };
    for (&data, record) in sent.iter().filter(|(d, _)| **d < 1 << 40) {
        let Some((Status::Ok, acked_at)) = ack_of(data) else {
            continue;
        };
        // No cache, or FUA: stable when acknowledged; else once a flush came after it.
        let promised = record.fua
            || !write_cache
            || sent.iter().any(|(&f, r)| {
                r.flush && r.submitted > acked_at && matches!(ack_of(f), Some((Status::Ok, _)))
            });
        if promised {
            prop_assert_eq!(
                stable.get(&data),
                Some(&data),
                "write {} acknowledged at {} lost",
                data,
                acked_at
            );
        }
    }
    prop_assert_eq!(disk.violations(), Vec::<String>::new());
    // Everything ends, exactly once.
    disk.state.lock().unwrap().reject_next = false;
    for _ in 0..10_000 {
        queue.run_hw_queues();
        if !disk.complete(&queue, 0, Status::Ok) {
            break;
        }
    }
    let all = ACKS.with(|a| a.borrow().clone());
    prop_assert_eq!(all.len(), sent.len(), "every bio ended once: {:?}", all);
    let mut seen: Vec<u64> = all.iter().map(|&(d, _, _)| d).collect();
    seen.sort_unstable();
    seen.dedup();
    prop_assert_eq!(seen.len(), sent.len());
    prop_assert_eq!((host.set().busy(), queue.usage()), (0, 0));
    prop_assert_eq!(disk.violations(), Vec::<String>::new());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn acknowledged_writes_survive_a_power_cut(
        write_cache in prop::bool::weighted(0.8),
        fua in any::<bool>(),
        elevator in any::<bool>(),
        depth in 2usize..6,
        steps in prop::collection::vec(step(), 1..60),
    ) {
        durability(write_cache, fua, elevator, depth, &steps)?;
    }
}
