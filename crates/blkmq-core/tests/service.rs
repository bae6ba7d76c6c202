//! The service entry point and the std runtime: delayed reruns on a clock the test moves,
//! tag idling without a call from the user, and a worker that stops with its last host.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use blkmq_core::testing::Hold;
use blkmq_core::{
    Bio, Driver, HctxCx, Host, IDLE_INTERVAL_NS, Op, Platform, QueueConfig, QueueLimits,
    RESOURCE_DELAY_NS, Rejected, RequestInit, Rq, Status, StdPlatform, TagSet,
};

/// A platform with a clock the test moves, one CPU, and a count of delayed kicks asked.
#[derive(Clone, Default)]
struct Clock {
    now: Arc<AtomicU64>,
    delayed: Arc<AtomicUsize>,
}

impl Clock {
    fn set(&self, ns: u64) {
        self.now.store(ns, Ordering::SeqCst);
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
        self.now.load(Ordering::SeqCst)
    }
    fn kick(&self, _hctx: usize) {}
    fn kick_after(&self, _hctx: usize, _delay_ns: u64) {
        self.delayed.fetch_add(1, Ordering::SeqCst);
    }
}

/// Turns requests down with `Resource` until `open` is set, then ends them at once;
/// counts the requests it ended.
#[derive(Default)]
struct Gate {
    open: std::sync::atomic::AtomicBool,
    ended: AtomicUsize,
}

impl Driver for Gate {
    type Platform = Clock;
    type Payload = ();
    fn init_request(&self, _: RequestInit) {}
    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
        if !self.open.load(Ordering::SeqCst) {
            return Err(Rejected {
                rq,
                status: Status::Resource,
            });
        }
        self.ended.fetch_add(1, Ordering::SeqCst);
        assert!(
            cx.queue().end_request(rq, Status::Ok).is_ok(),
            "our own request"
        );
        Ok(())
    }
}

/// A `kick_after` rerun happens no sooner than its delay, and no later than the delay plus
/// the timer's granularity: the service asks to be called exactly at the delay's end, and
/// runs the queue on the first call at or after it.
#[test]
fn a_delayed_rerun_runs_at_its_time_never_sooner() {
    let clock = Clock::default();
    clock.set(1_000);
    let host = Host::new(TagSet::builder(8), clock.clone(), Gate::default()).unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(64)))
        .unwrap();
    queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    // Turned down with nothing in flight: a rerun asked for after the resource delay.
    assert_eq!(clock.delayed.load(Ordering::SeqCst), 1);
    let due = 1_000 + RESOURCE_DELAY_NS;
    host.driver().open.store(true, Ordering::SeqCst);

    // Every call before the delay's end: the queue does not run, and the service asks to
    // be called at exactly the delay's end (a timer of granularity g fires in [due, due + g)).
    for now in [1_000, 1_001, due / 2, due - 1] {
        clock.set(now);
        let next = host.service().expect("a rerun is pending");
        assert_eq!(next, due, "at {now}: the service wants the rerun's time");
        assert_eq!(
            host.driver().ended.load(Ordering::SeqCst),
            0,
            "ran at {now}, before {due}"
        );
        assert_eq!(queue.usage(), 1);
    }
    // The first call at the delay's end runs it.
    clock.set(due);
    host.service();
    assert_eq!(
        host.driver().ended.load(Ordering::SeqCst),
        1,
        "not run at {due}"
    );
    assert_eq!(queue.usage(), 0);
    // Done: no rerun is asked for any more (only the periodic timeout check, far later).
    let next = host.service().unwrap();
    assert!(next > due + 1_000_000, "{next}");
}

/// Two LUNs on one tag set of depth 24, stepped by hand on a clock the test moves: both
/// busy, each is capped at 12; with one quiet, the service idles it within two idle
/// intervals and the other reaches the whole depth.
#[test]
fn a_quiet_lun_gives_its_share_back_within_two_idle_intervals() {
    let clock = Clock::default();
    let host = Host::new(TagSet::builder(24), clock.clone(), Hold::<Clock>::new()).unwrap();
    let a = host
        .add_queue(QueueConfig::new(QueueLimits::new(1 << 20)))
        .unwrap();
    let b = host
        .add_queue(QueueConfig::new(QueueLimits::new(1 << 20)))
        .unwrap();
    for i in 0..12 {
        b.submit(Bio::new(Op::Read, i * 8, 8)).unwrap();
    }
    let held_b = host.driver().take();
    assert_eq!(held_b.len(), 12);
    let mut refused = None;
    for i in 0..24 {
        if let Err(bio) = a.submit(Bio::new(Op::Read, i * 8, 8)) {
            refused = Some(bio);
            break;
        }
    }
    assert_eq!(
        host.driver().len(),
        12,
        "both busy: a is capped at its share"
    );
    assert_eq!(host.set().fair_share(0), 12);
    // b goes quiet.
    assert!(
        b.end_requests(held_b.into_iter().map(|rq| (rq, Status::Ok)))
            .is_ok()
    );
    let mut bio = refused.expect("a was refused past its share");
    let start = clock.now_ns();
    let mut now = start;
    let mut sector = 1 << 12;
    loop {
        match a.submit(bio) {
            Ok(()) => {
                if host.driver().len() == 24 {
                    break;
                }
                sector += 8;
                bio = Bio::new(Op::Read, sector, 8);
            }
            Err(back) => {
                bio = back;
                // Nothing the user runs but the service, at the times it asks for.
                let next = host.service().expect("b's idling is pending");
                assert!(
                    next <= start + 2 * IDLE_INTERVAL_NS,
                    "the service waits past two idle intervals: {next}"
                );
                now = now.max(next);
                clock.set(now);
            }
        }
    }
    assert!(now - start <= 2 * IDLE_INTERVAL_NS, "{}", now - start);
    assert_eq!(host.set().fair_share(0), 24);
    assert!(
        a.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok)))
            .is_ok()
    );
}

/// The same with real threads on the default `StdPlatform`: nothing is called by the test
/// but `submit`; the worker idles the quiet LUN.
#[test]
fn a_quiet_lun_gives_its_share_back_on_the_std_runtime() {
    let host = Host::new(TagSet::builder(24), StdPlatform::new(), Hold::new()).unwrap();
    let a = host
        .add_queue(QueueConfig::new(QueueLimits::new(1 << 20)))
        .unwrap();
    let b = host
        .add_queue(QueueConfig::new(QueueLimits::new(1 << 20)))
        .unwrap();
    let submitter = {
        let b = Arc::clone(&b);
        std::thread::spawn(move || {
            for i in 0..12 {
                b.submit(Bio::new(Op::Read, i * 8, 8)).unwrap();
            }
        })
    };
    submitter.join().unwrap();
    let held_b = host.driver().take();
    assert_eq!(held_b.len(), 12);
    let mut bio = None;
    for i in 0..24 {
        if let Err(back) = a.submit(Bio::new(Op::Read, i * 8, 8)) {
            bio = Some(back);
            break;
        }
    }
    assert_eq!(
        host.driver().len(),
        12,
        "both busy: a is capped at its share"
    );
    assert!(
        b.end_requests(held_b.into_iter().map(|rq| (rq, Status::Ok)))
            .is_ok()
    );
    let mut bio = bio.expect("a was refused past its share");
    let bound = Duration::from_secs(60);
    let start = Instant::now();
    let mut sector = 1 << 12;
    while host.driver().len() < 24 {
        match a.submit(bio) {
            Ok(()) => {
                sector += 8;
                bio = Bio::new(Op::Read, sector, 8);
            }
            Err(back) => bio = back,
        }
        assert!(
            start.elapsed() < bound,
            "a quiet LUN kept its share for {bound:?}: a holds {} of 24 tags",
            host.driver().len()
        );
        std::thread::yield_now();
    }
    assert_eq!(host.set().fair_share(0), 24);
    assert!(
        a.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok)))
            .is_ok()
    );
}

/// Waits for the platform's worker to stop: at once when the last host goes, or, when the
/// worker was serving that host just then, once that service lets go of it (the worker drops
/// the host itself, and stops). Fails, rather than hangs, if it never stops.
fn worker_stops(platform: &StdPlatform) {
    let bound = Duration::from_secs(60);
    let start = Instant::now();
    while platform.has_worker() {
        assert!(
            start.elapsed() < bound,
            "the worker still runs {bound:?} after its last host went"
        );
        std::thread::yield_now();
    }
}

/// The worker starts with the first host of a platform and stops when the last one is
/// dropped, whichever thread drops it; a new host starts a new one.
#[test]
fn the_worker_stops_with_the_last_host() {
    let platform = StdPlatform::with_cpus(2);
    assert!(!platform.has_worker());
    let first = Host::new(TagSet::builder(8), platform.clone(), Hold::new()).unwrap();
    let second = Host::new(TagSet::builder(8), platform.clone(), Hold::new()).unwrap();
    assert!(platform.has_worker());
    drop(first);
    assert!(platform.has_worker(), "the second host still uses it");
    std::thread::spawn(move || drop(second)).join().unwrap();
    worker_stops(&platform);
    let again = Host::new(TagSet::builder(8), platform.clone(), Hold::new()).unwrap();
    assert!(platform.has_worker());
    drop(again);
    worker_stops(&platform);
    // A manual platform never has one.
    let manual = StdPlatform::manual_with_cpus(1);
    let host = Host::new(TagSet::builder(8), manual.clone(), Hold::new()).unwrap();
    assert!(!manual.has_worker());
    drop(host);
}
