//! I/O accounting through a request queue, on a platform whose clock and CPU the test sets:
//! the time of each completion from its allocation, the busy time to the tick, in flight
//! across CPUs, merges of requests in an elevator, a sequenced write counted once, and the
//! `iostat -x` arithmetic between two readings, with figures worked out by hand.

#![cfg(not(loom))]

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use blkmq_core::testing::Hold;
use blkmq_core::{
    Bio, BioFlags, Elevator, ElvCx, Host, IO_TICK_NS, IoStats, Latency, Op, OpGroup, OpStats,
    Platform, QueueConfig, QueueLimits, RequestQueue, Rq, Status, TagSet,
};

/// A platform whose CPU and clock the test sets.
#[derive(Default)]
struct Manual {
    cpu: AtomicUsize,
    clock: AtomicU64,
}

impl Platform for Manual {
    type RawMutex = spin::mutex::SpinMutex<()>;

    fn nr_cpus(&self) -> usize {
        2
    }

    fn current_cpu(&self) -> usize {
        self.cpu.load(Ordering::SeqCst)
    }

    fn now_ns(&self) -> u64 {
        self.clock.load(Ordering::SeqCst)
    }

    fn kick(&self, _hctx: usize) {}
}

type Queue = Arc<RequestQueue<Hold<Manual>>>;

fn queue_with(config: QueueConfig) -> (Arc<Host<Hold<Manual>>>, Queue) {
    let host = Host::new(TagSet::builder(8), Manual::default(), Hold::new()).unwrap();
    let queue = host.add_queue(config.accounting(true)).unwrap();
    (host, queue)
}

fn set_clock(queue: &Queue, ns: u64) {
    queue.platform().clock.store(ns, Ordering::SeqCst);
}

fn set_cpu(queue: &Queue, cpu: usize) {
    queue.platform().cpu.store(cpu, Ordering::SeqCst);
}

/// Ends everything the driver holds, until it holds nothing.
fn end_all(host: &Host<Hold<Manual>>, queue: &Queue) {
    loop {
        let held = host.driver().take();
        if held.is_empty() {
            return;
        }
        queue
            .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
            .unwrap();
    }
}

#[test]
fn a_completion_counts_its_time_from_allocation_and_the_busy_ticks() {
    let (host, queue) = queue_with(QueueConfig::new(QueueLimits::new(1024)));
    set_clock(&queue, 1_000);
    queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    set_clock(&queue, 2_000);
    queue.submit(Bio::new(Op::Write, 64, 16)).unwrap();
    let mut held = host.driver().take().into_iter();
    assert_eq!(queue.stats().unwrap().in_flight, [1, 1]);
    // The read ends 3 ms after its allocation, the write 5 ms after its own.
    set_clock(&queue, 3_001_000);
    queue.end_request(held.next().unwrap(), Status::Ok).unwrap();
    set_clock(&queue, 5_002_000);
    queue
        .end_request(held.next().unwrap(), Status::IoErr)
        .unwrap();
    let stats = queue.stats().unwrap();
    assert_eq!(
        stats.ops[OpGroup::Read as usize],
        OpStats {
            ios: 1,
            merges: 0,
            sectors: 8,
            nsecs: 3_000_000
        }
    );
    assert_eq!(
        *stats.op(OpGroup::Write),
        OpStats {
            ios: 1,
            merges: 0,
            sectors: 16,
            nsecs: 5_000_000
        }
    );
    assert_eq!(stats.in_flight, [0, 0]);
    // Busy from tick 0 to tick 5: ticks 0-3 counted by the read's end, 3-5 by the write's.
    assert_eq!(stats.io_ticks_ns, 5 * IO_TICK_NS);
    assert_eq!(stats.time_in_queue_ns(), 8_000_000);
    assert_eq!(stats.to_string(), "1 0 8 3 1 0 16 5 0 5 8 0 0 0 0 0 0");
    // Idle since: a reading later adds nothing.
    set_clock(&queue, 9_000_000);
    assert_eq!(queue.stats().unwrap().io_ticks_ns, 5 * IO_TICK_NS);
    let latency = queue.latency().unwrap();
    assert_eq!(latency.buckets[0][Latency::bucket(3_000_000)], 1);
    assert_eq!(latency.buckets[1][Latency::bucket(5_000_000)], 1);
    assert_eq!(Latency::bucket(3_000_000), 21); // 2^21 <= 3e6 < 2^22
    assert_eq!(latency.percentile_ns(OpGroup::Write, 50.0), Some(1 << 23));
}

#[test]
fn in_flight_is_summed_over_the_cpus_that_submit_and_complete() {
    let (host, queue) = queue_with(QueueConfig::new(QueueLimits::new(1024)));
    set_cpu(&queue, 0);
    queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    queue.submit(Bio::new(Op::Read, 64, 8)).unwrap();
    set_cpu(&queue, 1);
    let mut held = host.driver().take().into_iter();
    queue.end_request(held.next().unwrap(), Status::Ok).unwrap();
    assert_eq!(queue.stats().unwrap().in_flight, [1, 0]);
    queue.end_request(held.next().unwrap(), Status::Ok).unwrap();
    let stats = queue.stats().unwrap();
    assert_eq!((stats.in_flight, stats.op(OpGroup::Read).ios), ([0, 0], 2));
    assert_eq!(queue.hctx_stats(0).unwrap(), stats);
}

/// First in, first out, merging each request into the one before when they touch (as
/// mq-deadline's `elv_attempt_insert_merge`).
#[derive(Default)]
struct Merging(VecDeque<Rq>);

impl Elevator for Merging {
    fn name(&self) -> &'static str {
        "merging"
    }

    fn insert_requests(&mut self, cx: &ElvCx<'_>, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
        for rq in rqs {
            let rq = match self.0.back_mut() {
                Some(last) => match cx.merge_requests(last, rq) {
                    Ok(()) => continue,
                    Err(rq) => rq,
                },
                None => rq,
            };
            self.0.push_back(rq);
        }
    }

    fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
        self.0.pop_front()
    }

    fn has_work(&self, _: usize) -> bool {
        !self.0.is_empty()
    }
}

#[test]
fn a_request_merged_into_another_is_a_merge_and_leaves_in_flight() {
    let config = QueueConfig::new(QueueLimits::new(1024)).elevator(Box::new(Merging::default()));
    let (host, queue) = queue_with(config);
    queue.quiesce();
    queue.submit(Bio::new(Op::Write, 0, 8)).unwrap();
    queue.submit(Bio::new(Op::Write, 8, 8)).unwrap();
    let stats = queue.stats().unwrap();
    assert_eq!(
        (stats.op(OpGroup::Write).merges, stats.in_flight),
        (1, [0, 1])
    );
    queue.unquiesce();
    end_all(&host, &queue);
    let stats = queue.stats().unwrap();
    assert_eq!(
        *stats.op(OpGroup::Write),
        OpStats {
            ios: 1,
            merges: 1,
            sectors: 16,
            nsecs: 0
        }
    );
    assert_eq!(stats.in_flight, [0, 0]);
}

#[test]
fn a_bio_merged_into_a_waiting_request_is_a_merge() {
    let limits = QueueLimits {
        max_discard_sectors: 64,
        ..QueueLimits::new(1024)
    };
    let (host, queue) = queue_with(QueueConfig::new(limits));
    queue.quiesce();
    queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    queue.submit(Bio::new(Op::Read, 8, 8)).unwrap(); // a back merge in the software queue
    queue.submit(Bio::new(Op::Discard, 64, 8)).unwrap();
    queue.unquiesce();
    end_all(&host, &queue);
    let stats = queue.stats().unwrap();
    assert_eq!(
        (
            *stats.op(OpGroup::Read),
            stats.op(OpGroup::Discard).ios,
            stats.op(OpGroup::Discard).sectors
        ),
        (
            OpStats {
                ios: 1,
                merges: 1,
                sectors: 16,
                nsecs: 0
            },
            1,
            8
        )
    );
    assert_eq!(stats.merges(), 1);
}

#[test]
fn a_sequenced_write_counts_once_and_a_flush_as_a_flush() {
    let limits = QueueLimits {
        write_cache: true,
        fua: false,
        ..QueueLimits::new(1024)
    };
    let (host, queue) = queue_with(QueueConfig::new(limits));
    let bio = Bio::new(Op::Write, 0, 8).flags(BioFlags::PREFLUSH | BioFlags::FUA);
    queue.submit(bio).unwrap();
    end_all(&host, &queue); // preflush, data, postflush: three ends in the driver
    let stats = queue.stats().unwrap();
    assert_eq!(
        (
            stats.op(OpGroup::Write).ios,
            stats.op(OpGroup::Write).sectors
        ),
        (1, 8)
    );
    assert_eq!((stats.op(OpGroup::Flush).ios, stats.in_flight), (0, [0, 0]));
    queue.submit(Bio::new(Op::Flush, 0, 0)).unwrap();
    end_all(&host, &queue);
    let stats = queue.stats().unwrap();
    assert_eq!((stats.op(OpGroup::Flush).ios, stats.ios()), (1, 2));
    assert_eq!(stats.in_flight, [0, 0]);
}

#[test]
fn accounting_off_reads_nothing() {
    let host = Host::new(TagSet::builder(8), Manual::default(), Hold::new()).unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1024)))
        .unwrap();
    queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    end_all(&host, &queue);
    assert!(!queue.accounting());
    assert!(queue.stats().is_none() && queue.hctx_stats(0).is_none());
    assert!(queue.latency().is_none());
}

// ----- the `iostat -x` arithmetic -----

fn reading(read: OpStats, write: OpStats, io_ticks_ns: u64) -> IoStats {
    let mut stats = IoStats::default();
    stats.ops[0] = read;
    stats.ops[1] = write;
    stats.io_ticks_ns = io_ticks_ns;
    stats
}

#[test]
fn rates_between_two_readings_are_what_iostat_prints() {
    let earlier = reading(
        OpStats {
            ios: 1_000,
            merges: 10,
            sectors: 8_000,
            nsecs: 2_000_000_000,
        },
        OpStats {
            ios: 500,
            merges: 0,
            sectors: 4_000,
            nsecs: 1_000_000_000,
        },
        3_000_000_000,
    );
    // Two seconds later: 400 more reads of 8 sectors (3200 sectors, 1600 KiB) taking 1.2 s
    // in all, 100 more writes of 64 sectors (6400 sectors, 3200 KiB) taking 0.5 s, 20 read
    // merges and 6 write merges, busy 1.5 s of the 2.
    let later = reading(
        OpStats {
            ios: 1_400,
            merges: 30,
            sectors: 11_200,
            nsecs: 3_200_000_000,
        },
        OpStats {
            ios: 600,
            merges: 6,
            sectors: 10_400,
            nsecs: 1_500_000_000,
        },
        4_500_000_000,
    );
    let rates = later.since(&earlier, 2_000_000_000);
    assert_eq!((rates.r_s, rates.w_s), (200.0, 50.0));
    assert_eq!((rates.rkb_s, rates.wkb_s), (800.0, 1_600.0));
    assert_eq!((rates.rrqm_s, rates.wrqm_s), (10.0, 3.0));
    assert_eq!(rates.r_await_ms, 3.0); // 1200 ms over 400 reads
    assert_eq!(rates.w_await_ms, 5.0); // 500 ms over 100 writes
    assert_eq!(rates.aqu_sz, 0.85); // (1.2 s + 0.5 s) of time in queue over 2 s
    assert_eq!(rates.util_pct, 75.0); // 1.5 s busy of 2
    assert_eq!((rates.d_s, rates.f_s, rates.d_await_ms), (0.0, 0.0, 0.0));
}

#[test]
fn rates_without_time_or_completions_are_zero() {
    let stats = reading(
        OpStats {
            ios: 5,
            merges: 0,
            sectors: 40,
            nsecs: 10,
        },
        OpStats::default(),
        7,
    );
    let rates = stats.since(&stats, 1_000_000_000);
    assert_eq!(rates, blkmq_core::Rates::default());
    let rates = stats.since(&IoStats::default(), 0);
    assert_eq!((rates.r_s, rates.aqu_sz, rates.util_pct), (0.0, 0.0, 0.0));
    assert_eq!(rates.r_await_ms, 10.0 / 1e6 / 5.0);
    // A reading that went back (another queue's) counts as no change.
    let rates = IoStats::default().since(&stats, 1_000_000_000);
    assert_eq!(rates, blkmq_core::Rates::default());
}
