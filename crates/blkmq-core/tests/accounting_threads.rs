//! I/O accounting under threads on [`StdPlatform`]: more threads than CPUs, some holding their
//! CPU alone ([`Platform::exclusive_cpu`]) and counting with plain stores, others sharing it
//! and counting with atomic adds, threads ending and others taking their CPU over, and
//! completions on threads other than the submitters'. Every count must come out exact.

#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use blkmq_core::testing::{Hold, Null};
use blkmq_core::{
    Bio, Host, IoStats, Op, OpGroup, Platform, QueueConfig, QueueLimits, Status, StdPlatform,
    TagSet,
};

/// CPUs of the platform, and hardware queues of the host.
const CPUS: usize = 2;

/// I/Os per thread and round.
const IOS: u64 = 5_000;

/// Sectors per bio.
const SECTORS: u32 = 8;

/// A bio of thread `thread`'s `i`-th I/O: reads and writes in turn, far apart (nothing
/// merges).
fn bio(thread: u64, i: u64) -> Bio {
    let op = if i % 2 == 0 { Op::Read } else { Op::Write };
    Bio::new(op, (thread * IOS + i) * 64, SECTORS)
}

/// What `ios` I/Os of [`bio`] leave in a reading, half reads and half writes.
fn check(stats: &IoStats, ios: u64) {
    let (reads, writes) = (stats.op(OpGroup::Read), stats.op(OpGroup::Write));
    assert_eq!((reads.ios, writes.ios), (ios / 2, ios / 2));
    assert_eq!(reads.sectors, ios / 2 * u64::from(SECTORS));
    assert_eq!(writes.sectors, ios / 2 * u64::from(SECTORS));
    assert_eq!(stats.in_flight, [0, 0]);
    assert_eq!(stats.merges(), 0);
}

#[test]
fn more_threads_than_cpus_count_every_io() {
    let platform = StdPlatform::with_cpus(CPUS);
    let tags = TagSet::builder(64).hw_queues(CPUS);
    let host = Host::new(tags, platform, Null::new()).unwrap();
    let config = QueueConfig::new(QueueLimits::new(1 << 30)).accounting(true);
    let queue = host.add_queue(config).unwrap();
    // This thread holds CPU 0 alone, the whole test long.
    queue.platform().pin_current_thread(0);
    assert_eq!(queue.platform().exclusive_cpu(), Some(0));
    let mut total = 0;
    for round in 0..3u64 {
        let busy = AtomicBool::new(true);
        thread::scope(|s| {
            // Five threads on two CPUs: at most the first on CPU 1 to ask (once the last
            // round's holder ended) holds it alone; the rest share.
            for t in 0..5u64 {
                let queue = &queue;
                s.spawn(move || {
                    queue.platform().pin_current_thread(t as usize % CPUS);
                    for i in 0..IOS {
                        queue.submit_wait(bio(1 + round * 8 + t, i));
                    }
                });
            }
            let mut i = 0;
            while busy.load(Ordering::Relaxed) || i < IOS {
                queue.submit_wait(bio(round * 8, i % IOS));
                i += 1;
                if i == IOS {
                    busy.store(false, Ordering::Relaxed);
                }
            }
            total += i;
        });
        total += 5 * IOS;
        let stats = queue.stats().unwrap();
        check(&stats, total);
        let per_hctx: u64 = (0..CPUS).map(|h| queue.hctx_stats(h).unwrap().ios()).sum();
        assert_eq!(per_hctx, total);
        let latency = queue.latency().unwrap();
        assert_eq!(
            latency.count(OpGroup::Read) + latency.count(OpGroup::Write),
            total
        );
    }
    assert_eq!(queue.platform().exclusive_cpu(), Some(0));
}

#[test]
fn completions_on_other_threads_count_every_io() {
    let platform = StdPlatform::with_cpus(CPUS);
    let tags = TagSet::builder(16).hw_queues(CPUS);
    let host = Host::new(tags, platform, Hold::new()).unwrap();
    let config = QueueConfig::new(QueueLimits::new(1 << 30)).accounting(true);
    let queue = host.add_queue(config).unwrap();
    let submitted = AtomicBool::new(false);
    let mut ended = 0u64;
    thread::scope(|s| {
        let submitters: Vec<_> = (0..3u64)
            .map(|t| {
                let queue = &queue;
                s.spawn(move || {
                    queue.platform().pin_current_thread(t as usize % CPUS);
                    for i in 0..IOS {
                        // A full tag set waits for the completer to end some.
                        queue.submit_wait(bio(t, i));
                    }
                })
            })
            .collect();
        let done = &submitted;
        s.spawn(move || {
            for submitter in submitters {
                submitter.join().unwrap();
            }
            done.store(true, Ordering::Release);
        });
        // The completer shares CPU 1 with a submitter.
        queue.platform().pin_current_thread(1);
        loop {
            let last = submitted.load(Ordering::Acquire);
            let held = host.driver().take();
            ended += held.len() as u64;
            queue
                .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
                .unwrap();
            if last && host.in_driver() == 0 {
                break;
            }
            thread::yield_now();
        }
    });
    assert_eq!(ended, 3 * IOS);
    check(&queue.stats().unwrap(), 3 * IOS);
}

#[test]
fn a_cpu_held_alone_passes_to_the_next_thread_when_its_holder_ends_or_moves() {
    let platform = StdPlatform::with_cpus(CPUS);
    let first = platform.clone();
    let held = thread::spawn(move || {
        first.pin_current_thread(1);
        let held = first.exclusive_cpu();
        (held, first.exclusive_cpu())
    });
    assert_eq!(held.join().unwrap(), (Some(1), Some(1)));
    platform.pin_current_thread(1);
    assert_eq!(platform.exclusive_cpu(), Some(1));
    // Another platform's CPU 1 is another id: held apart.
    let other = StdPlatform::with_cpus(CPUS);
    assert_eq!(other.exclusive_cpu(), Some(1));
    let shared = platform.clone();
    let theirs = thread::spawn(move || {
        shared.pin_current_thread(1);
        shared.exclusive_cpu()
    });
    assert_eq!(theirs.join().unwrap(), None);
    // A thread pinned elsewhere holds there what nobody holds, gives back what it held,
    // and finds a slot another thread holds shared.
    platform.pin_current_thread(0);
    assert_eq!(platform.exclusive_cpu(), Some(0));
    // A thread of its own pinned to CPU 1, then 0, then 1 again: what it holds at each.
    let moves = |platform: &StdPlatform| {
        let moving = platform.clone();
        thread::spawn(move || {
            moving.pin_current_thread(1);
            let on_1 = moving.exclusive_cpu();
            moving.pin_current_thread(0);
            let on_0 = moving.exclusive_cpu();
            moving.pin_current_thread(1);
            (on_1, on_0, moving.exclusive_cpu())
        })
        .join()
        .unwrap()
    };
    // CPU 1 came back when this thread moved to 0, which it holds: the other thread takes
    // 1, shares 0, and takes 1 again (it gave it back on its move to 0).
    assert_eq!(moves(&platform), (Some(1), None, Some(1)));
    let free = StdPlatform::with_cpus(CPUS);
    assert_eq!(moves(&free), (Some(1), Some(0), Some(1)));
    // Both of its slots came back when it ended.
    assert_eq!(free.exclusive_cpu(), Some(0));
}
