//! The std runtime runs itself: on the default `StdPlatform`, with two submitting threads
//! and nothing run by the test (no kick, no timer, no service call), every bio ends —
//! through BFQ (which idles and asks for delayed runs), mq-deadline and none.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use blkmq::bfq::Bfq;
use blkmq::deadline::Deadline;
use blkmq::testing::Null;
use blkmq::{
    Bio, Elevator, EndIo, Host, IoPrio, IoPrioClass, IssuerId, Op, QueueConfig, QueueLimits,
    StdPlatform, TagSet,
};

const PER_THREAD: usize = 300;

/// How long a bio may take to end before the test calls it stranded (generous: each ends
/// in microseconds, or after one BFQ idling slice).
const BOUND: Duration = Duration::from_secs(60);

/// Waits until `count` reaches `want`, failing with `what` after [`BOUND`].
fn wait_for(count: &AtomicUsize, want: usize, what: &str) {
    let start = Instant::now();
    while count.load(Ordering::Acquire) < want {
        assert!(
            start.elapsed() < BOUND,
            "{what}: {} of {want} bios ended after {BOUND:?}; the runtime left requests behind",
            count.load(Ordering::Acquire)
        );
        std::thread::yield_now();
    }
}

/// Two threads, two issuers of unequal priority: each submits `PER_THREAD` reads one at a time and waits for
/// each to end before the next (sync I/O with think time: what makes BFQ idle for the
/// issuer in service while the other's request waits). `ended[t]` counts issuer `t + 1`'s.
fn run(elevator: Option<Box<dyn Elevator>>, end_io: EndIo, ended: &'static [AtomicUsize; 2]) {
    let host = Host::new(TagSet::builder(16), StdPlatform::new(), Null::new()).unwrap();
    let mut config = QueueConfig::new(QueueLimits::new(1 << 20));
    if let Some(elevator) = elevator {
        config = config.elevator(elevator);
    }
    let queue = host.add_queue(config).unwrap();
    let threads: Vec<_> = (0..2u32)
        .map(|thread| {
            let queue = queue.clone();
            // Best effort at levels 0 and 7: unequal weights, so BFQ idles for the issuer
            // in service when it empties, holding the other's request back meanwhile.
            let prio = IoPrio::new(IoPrioClass::BestEffort, thread as u8 * 7).unwrap();
            std::thread::spawn(move || {
                for i in 0..PER_THREAD {
                    let sector = u64::from(thread) * (1 << 16) + i as u64 * 8;
                    let mut bio = Bio::new(Op::Read, sector, 8)
                        .issuer(IssuerId(thread + 1))
                        .prio(prio)
                        .end_io(end_io);
                    while let Err(back) = queue.submit(bio) {
                        bio = back;
                        std::thread::yield_now();
                    }
                    wait_for(&ended[thread as usize], i + 1, "a submitter's own bio");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    for count in ended {
        wait_for(count, PER_THREAD, "every bio");
    }
    assert_eq!(host.in_driver(), 0);
}

/// Counts a bio's end for its issuer (1 or 2) in `ended`.
fn count(ended: &[AtomicUsize; 2], bio: &Bio, status: blkmq::Status) {
    assert!(status.is_ok());
    ended[bio.issuer.0 as usize - 1].fetch_add(1, Ordering::Release);
}

#[test]
fn bfq_on_the_default_platform_ends_every_bio() {
    static ENDED: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
    fn done(bio: Bio, status: blkmq::Status) {
        count(&ENDED, &bio, status);
    }
    run(Some(Box::new(Bfq::new())), done, &ENDED);
}

#[test]
fn mq_deadline_on_the_default_platform_ends_every_bio() {
    static ENDED: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
    fn done(bio: Bio, status: blkmq::Status) {
        count(&ENDED, &bio, status);
    }
    run(Some(Box::new(Deadline::new())), done, &ENDED);
}

#[test]
fn none_on_the_default_platform_ends_every_bio() {
    static ENDED: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
    fn done(bio: Bio, status: blkmq::Status) {
        count(&ENDED, &bio, status);
    }
    run(None, done, &ENDED);
}

/// BFQ with strict guarantees idles for every sync issuer that empties: the other's
/// request waits for the idling timer, which only the runtime's delayed run serves.
#[test]
fn bfq_idling_on_the_default_platform_ends_every_bio() {
    static ENDED: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
    fn done(bio: Bio, status: blkmq::Status) {
        count(&ENDED, &bio, status);
    }
    let mut bfq = Bfq::new();
    bfq.set_strict_guarantees(true);
    run(Some(Box::new(bfq)), done, &ENDED);
}
