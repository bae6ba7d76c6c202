//! I/O accounting of requests ended inside the submission that issued them (a driver that
//! ends them in `queue_rq`): where the submitter holds its CPU alone and the hardware queues
//! do not block, they end at the submission's coarse reading, read no clock, and a request
//! ended after the submission returned reads the clock again. Blocking hardware queues, and
//! a platform that promises no CPU to anyone, read the clock at every completion.

#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use blkmq_core::{
    Bio, Driver, HctxCx, Host, IO_TICK_NS, Op, OpGroup, Platform, QueueConfig, QueueLimits,
    Rejected, RequestInit, RequestQueue, Rq, Status, TagSet, TagSetFlags,
};

/// A one-CPU platform whose clock the test sets; with `exclusive`, it promises the (one)
/// test thread CPU 0 alone, as it is.
struct Manual {
    clock: AtomicU64,
    exclusive: bool,
    coarse_reads: AtomicU64,
    precise_reads: AtomicU64,
}

impl Platform for Manual {
    type RawMutex = spin::mutex::SpinMutex<()>;

    fn nr_cpus(&self) -> usize {
        1
    }

    fn current_cpu(&self) -> usize {
        0
    }

    fn exclusive_cpu(&self) -> Option<usize> {
        self.exclusive.then_some(0)
    }

    fn now_ns(&self) -> u64 {
        self.precise_reads.fetch_add(1, Ordering::SeqCst);
        self.clock.load(Ordering::SeqCst)
    }

    fn coarse_now_ns(&self) -> u64 {
        self.coarse_reads.fetch_add(1, Ordering::SeqCst);
        self.clock.load(Ordering::SeqCst)
    }

    fn kick(&self, _hctx: usize) {}
}

/// A driver whose `queue_rq` moves the clock on by `inside` ns (its work), then ends the
/// request it was given, or with `hold` keeps it; with `end_held`, it first ends every
/// request it kept.
#[derive(Default)]
struct Inline {
    inside: AtomicU64,
    hold: AtomicBool,
    end_held: AtomicBool,
    held: Mutex<Vec<Rq>>,
}

impl Driver for Inline {
    type Platform = Manual;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        let queue = cx.queue();
        queue
            .platform()
            .clock
            .fetch_add(self.inside.load(Ordering::SeqCst), Ordering::SeqCst);
        if self.end_held.load(Ordering::SeqCst) {
            for held in std::mem::take(&mut *self.held.lock().unwrap()) {
                queue.end_request(held, Status::Ok).unwrap();
            }
        }
        if self.hold.load(Ordering::SeqCst) {
            self.held.lock().unwrap().push(rq);
            return Ok(());
        }
        queue
            .end_request(rq, Status::Ok)
            .map_err(|misused| Rejected {
                rq: misused.rq,
                status: Status::IoErr,
            })
    }
}

type Queue = Arc<RequestQueue<Inline>>;

fn queue(exclusive: bool, flags: TagSetFlags) -> (Arc<Host<Inline>>, Queue) {
    queue_with(exclusive, flags, true)
}

fn queue_with(exclusive: bool, flags: TagSetFlags, accounting: bool) -> (Arc<Host<Inline>>, Queue) {
    let platform = Manual {
        clock: AtomicU64::new(0),
        exclusive,
        coarse_reads: AtomicU64::new(0),
        precise_reads: AtomicU64::new(0),
    };
    let host = Host::new(TagSet::builder(8).flags(flags), platform, Inline::default()).unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1024)).accounting(accounting))
        .unwrap();
    (host, queue)
}

fn coarse_reads(queue: &Queue) -> u64 {
    queue.platform().coarse_reads.load(Ordering::SeqCst)
}

/// The clock readings, coarse and precise, of one submission of a bio the driver ends
/// inside `queue_rq`.
fn readings_of_one_inline_io(queue: &Queue) -> (u64, u64) {
    let platform = queue.platform();
    let before = (
        platform.coarse_reads.load(Ordering::SeqCst),
        platform.precise_reads.load(Ordering::SeqCst),
    );
    queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    (
        platform.coarse_reads.load(Ordering::SeqCst) - before.0,
        platform.precise_reads.load(Ordering::SeqCst) - before.1,
    )
}

#[test]
fn accounting_adds_no_clock_reading_to_an_inline_io() {
    let (_off_host, off) = queue_with(true, TagSetFlags::empty(), false);
    let (_on_host, on) = queue_with(true, TagSetFlags::empty(), true);
    // Without accounting the request's start stamp (its timeout's base) is one coarse
    // reading; with it, that same reading is the accounting's start and end.
    assert_eq!(readings_of_one_inline_io(&off), (1, 0));
    assert_eq!(readings_of_one_inline_io(&on), (1, 0));
    assert_eq!(on.stats().unwrap().op(OpGroup::Read).ios, 1);
    assert!(off.stats().is_none());
}

#[test]
fn a_request_ended_inside_its_submission_ends_at_the_submissions_reading() {
    let (host, queue) = queue(true, TagSetFlags::empty());
    host.driver().inside.store(300, Ordering::SeqCst);
    queue
        .platform()
        .clock
        .store(5 * IO_TICK_NS, Ordering::SeqCst);
    let before = coarse_reads(&queue);
    queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    // One reading for the submission (the start stamp, the accounting's start and end).
    assert_eq!(coarse_reads(&queue) - before, 1);
    let stats = queue.stats().unwrap();
    let reads = stats.op(OpGroup::Read);
    assert_eq!((reads.ios, reads.sectors, reads.nsecs), (1, 8, 0));
    assert_eq!(stats.in_flight_total(), 0);
    assert_eq!(queue.latency().unwrap().buckets[0][0], 1);
}

#[test]
fn a_request_ended_after_its_submission_reads_the_clock() {
    let (host, queue) = queue(true, TagSetFlags::empty());
    host.driver().hold.store(true, Ordering::SeqCst);
    queue.platform().clock.store(1_000, Ordering::SeqCst);
    queue.submit(Bio::new(Op::Write, 0, 8)).unwrap();
    queue
        .platform()
        .clock
        .store(3 * IO_TICK_NS, Ordering::SeqCst);
    let held = host.driver().held.lock().unwrap().pop().unwrap();
    let before = coarse_reads(&queue);
    queue.end_request(held, Status::Ok).unwrap();
    assert_eq!(coarse_reads(&queue) - before, 1);
    let stats = queue.stats().unwrap();
    assert_eq!(stats.op(OpGroup::Write).nsecs, 3 * IO_TICK_NS - 1_000);
    assert_eq!(stats.io_ticks_ns, 3 * IO_TICK_NS);
}

#[test]
fn an_earlier_request_ended_inside_a_later_submission_ends_at_the_later_reading() {
    let (host, queue) = queue(true, TagSetFlags::empty());
    let driver = host.driver();
    driver.hold.store(true, Ordering::SeqCst);
    queue.platform().clock.store(2_000, Ordering::SeqCst);
    queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    // The next submission, 2 ticks on, ends the held request first, then its own.
    queue
        .platform()
        .clock
        .store(2 * IO_TICK_NS + 2_000, Ordering::SeqCst);
    driver.hold.store(false, Ordering::SeqCst);
    driver.end_held.store(true, Ordering::SeqCst);
    driver.inside.store(500, Ordering::SeqCst);
    queue.submit(Bio::new(Op::Read, 64, 8)).unwrap();
    let stats = queue.stats().unwrap();
    let reads = stats.op(OpGroup::Read);
    assert_eq!((reads.ios, reads.nsecs), (2, 2 * IO_TICK_NS));
    assert_eq!(stats.in_flight_total(), 0);
    assert_eq!(stats.io_ticks_ns, 2 * IO_TICK_NS);
}

#[test]
fn blocking_hardware_queues_read_the_clock_at_each_completion() {
    let (host, queue) = queue(true, TagSetFlags::BLOCKING);
    host.driver().inside.store(700, Ordering::SeqCst);
    queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    assert_eq!(queue.stats().unwrap().op(OpGroup::Read).nsecs, 700);
}

#[test]
fn a_platform_that_promises_no_cpu_reads_the_clock_at_each_completion() {
    let (host, queue) = queue(false, TagSetFlags::empty());
    host.driver().inside.store(900, Ordering::SeqCst);
    queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    queue.submit(Bio::new(Op::Read, 64, 8)).unwrap();
    let reads = *queue.stats().unwrap().op(OpGroup::Read);
    assert_eq!((reads.ios, reads.nsecs), (2, 1_800));
}
