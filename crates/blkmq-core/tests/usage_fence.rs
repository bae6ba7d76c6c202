//! The usage count kept by CPUs' sole holders with plain stores, on platforms that fence
//! all ([`Platform::can_fence_all`]): every freeze fences once, a nested one too, a
//! platform that cannot is never asked, and references taken by sole holders and let go
//! by anyone (another sole holder, a thread sharing a CPU) sum exactly, on `StdPlatform`
//! with real threads as on a platform the test controls; the platform's worker, which
//! serves every CPU's queues, takes no CPU from them; a new queue asks whether the platform
//! fences (a set-up that may wait for every CPU) holding no lock. The races themselves are the loom
//! models' (`loom_queue.rs`, the `_sole_holders` twins).

#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use blkmq_core::testing::Hold;
use blkmq_core::{
    Bio, Driver, HctxCx, Host, Op, Platform, QueueConfig, QueueLimits, Rejected, RequestInit,
    RequestQueue, Rq, Status, StdPlatform, TagSet,
};

/// One CPU, held alone by whoever asks (the test runs one thread), fencing all when `can`,
/// and counting the fences.
struct Fencing {
    can: bool,
    fences: AtomicUsize,
}

impl Platform for Fencing {
    type RawMutex = spin::mutex::SpinMutex<()>;

    fn nr_cpus(&self) -> usize {
        1
    }

    fn current_cpu(&self) -> usize {
        0
    }

    fn exclusive_cpu(&self) -> Option<usize> {
        Some(0)
    }

    fn can_fence_all(&self) -> bool {
        self.can
    }

    fn fence_all(&self) {
        assert!(
            self.can,
            "fence_all asked of a platform that said it cannot"
        );
        self.fences.fetch_add(1, Ordering::SeqCst);
    }

    fn now_ns(&self) -> u64 {
        0
    }

    fn kick(&self, _hctx: usize) {}
}

/// A host over a [`Fencing`] platform, its driver holding what it takes, and its queue.
type World = (Arc<Host<Hold<Fencing>>>, Arc<RequestQueue<Hold<Fencing>>>);

fn fencing(can: bool) -> World {
    let platform = Fencing {
        can,
        fences: AtomicUsize::new(0),
    };
    let host = Host::new(TagSet::builder(8), platform, Hold::new()).unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1024)))
        .unwrap();
    (host, queue)
}

#[test]
fn each_freeze_fences_all_once_where_the_platform_can_and_never_where_it_cannot() {
    for can in [true, false] {
        let (host, queue) = fencing(can);
        let fences = || host.set().platform().fences.load(Ordering::SeqCst);
        queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
        queue.submit(Bio::new(Op::Read, 64, 8)).unwrap();
        assert_eq!(queue.usage(), 2, "can: {can}");
        assert_eq!(fences(), 0, "no fence before a freeze");
        queue.freeze_start();
        assert_eq!(fences(), usize::from(can), "the freeze's one fence");
        queue.freeze_start();
        assert_eq!(fences(), 2 * usize::from(can), "a nested freeze fences too");
        assert!(!queue.is_drained());
        let held = host.driver().take();
        queue
            .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
            .unwrap();
        assert!(queue.is_drained());
        queue.unfreeze();
        queue.unfreeze();
        queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
        assert_eq!(queue.usage(), 1);
        queue.freeze_start();
        assert_eq!(fences(), 3 * usize::from(can), "a new freeze fences again");
        let held = host.driver().take();
        queue
            .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
            .unwrap();
        assert!(queue.is_drained());
        // A refused submission takes nothing.
        assert!(queue.submit(Bio::new(Op::Read, 0, 8)).is_err());
        assert_eq!(queue.usage(), 0);
        queue.unfreeze();
    }
}

/// On `StdPlatform`: requests taken by CPU 0's sole holder and ended by a thread sharing
/// CPU 0 (its counts on the shared half) and by CPU 1's sole holder (on CPU 1's own half):
/// the usage count follows each step exactly, and a freeze drains to zero.
#[test]
fn references_of_sole_holders_let_go_by_anyone_sum_exactly() {
    let platform = StdPlatform::with_cpus(2);
    let host = Host::new(TagSet::builder(64), platform, Hold::new()).unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1 << 20)))
        .unwrap();
    let fences = host.set().platform().can_fence_all();
    let (submitted, taken) = mpsc::channel::<()>();
    let (finish, finished) = mpsc::channel::<()>();
    let queue = &queue;
    thread::scope(|s| {
        let taker = s.spawn(move || {
            queue.platform().pin_current_thread(0);
            assert_eq!(
                queue.platform().exclusive_cpu(),
                Some(0),
                "CPU 0 is the taker's"
            );
            for i in 0..48u64 {
                queue.submit(Bio::new(Op::Write, i * 16, 8)).unwrap();
            }
            assert_eq!(queue.usage(), 48);
            submitted.send(()).unwrap();
            // Held on: CPU 0 stays the taker's (a claim lasts the thread's life) while
            // the others run.
            finished.recv().unwrap();
        });
        taken.recv().unwrap();
        assert_eq!(host.driver().len(), 48);
        let mut held = host.driver().take();
        let second = held.split_off(24);
        s.spawn(|| {
            queue.platform().pin_current_thread(0);
            assert_eq!(queue.platform().exclusive_cpu(), None, "CPU 0 is taken");
            for rq in held {
                queue.end_request(rq, Status::Ok).unwrap();
            }
        })
        .join()
        .unwrap();
        assert_eq!(queue.usage(), 24);
        s.spawn(|| {
            queue.platform().pin_current_thread(1);
            assert_eq!(queue.platform().exclusive_cpu(), Some(1));
            queue.submit(Bio::new(Op::Read, 1 << 19, 8)).unwrap();
            assert_eq!(queue.usage(), 25);
            for rq in second {
                queue.end_request(rq, Status::Ok).unwrap();
            }
            assert_eq!(queue.usage(), 1);
        })
        .join()
        .unwrap();
        queue.freeze_start();
        assert!(!queue.is_drained(), "one request is still in the driver");
        let last = host.driver().take();
        assert_eq!(last.len(), 1);
        queue
            .end_requests(last.into_iter().map(|rq| (rq, Status::Ok)))
            .unwrap();
        assert!(queue.is_drained());
        assert_eq!(queue.usage(), 0);
        queue.unfreeze();
        finish.send(()).unwrap();
        taker.join().unwrap();
    });
    // Where the kernel lets the process register for `membarrier`, the sole holders
    // counted with plain stores; the sums were exact either way.
    eprintln!("fences all: {fences}");
}

/// Turns every request down while `refuse` is set (the queue, with nothing in flight, has
/// the platform's worker run it again a little later), then ends each inside `queue_rq`.
struct Refusing {
    refuse: AtomicBool,
}

impl Driver for Refusing {
    type Platform = StdPlatform;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        if self.refuse.load(Ordering::SeqCst) {
            return Err(Rejected {
                rq,
                status: Status::Resource,
            });
        }
        cx.queue().end_request(rq, Status::Ok).unwrap();
        Ok(())
    }
}

static WORKER_ENDED: AtomicBool = AtomicBool::new(false);

fn worker_ended(_: Bio, status: Status) {
    assert_eq!(status, Status::Ok);
    WORKER_ENDED.store(true, Ordering::SeqCst);
}

/// The platform's worker ends a request (and lets go of its usage reference) on CPU 0,
/// free at that moment, yet does not take it: a thread pinned there afterwards holds it.
#[test]
fn the_platforms_worker_never_holds_a_cpu() {
    let platform = StdPlatform::with_cpus(1);
    let driver = Refusing {
        refuse: AtomicBool::new(true),
    };
    let host = Host::new(TagSet::builder(4), platform, driver).unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1024)))
        .unwrap();
    // Submitted on a thread that ends (and gives CPU 0 back) before the driver takes it.
    thread::scope(|s| {
        s.spawn(|| {
            queue.platform().pin_current_thread(0);
            queue
                .submit(Bio::new(Op::Read, 0, 8).end_io(worker_ended))
                .unwrap();
        })
        .join()
        .unwrap();
    });
    host.driver().refuse.store(false, Ordering::SeqCst);
    // The worker's next run ends it; the usage count goes back to zero after it looked
    // at CPU 0 for its let-go.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(WORKER_ENDED.load(Ordering::SeqCst) && queue.usage() == 0) {
        assert!(Instant::now() < deadline, "the worker never ran the queue");
        thread::yield_now();
    }
    let theirs = thread::scope(|s| {
        s.spawn(|| {
            queue.platform().pin_current_thread(0);
            queue.platform().exclusive_cpu()
        })
        .join()
        .unwrap()
    });
    assert_eq!(theirs, Some(0), "the worker took CPU 0");
}

std::thread_local! {
    /// Locks of [`Counted`] this thread holds.
    static HELD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The library's lock, counting on each thread the locks it holds.
struct Counted(spin::mutex::SpinMutex<()>);

// SAFETY: a spin lock's own protocol; the count beside it is the locking thread's.
unsafe impl lock_api::RawMutex for Counted {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Counted(<spin::mutex::SpinMutex<()> as lock_api::RawMutex>::INIT);
    type GuardMarker = lock_api::GuardNoSend;

    fn lock(&self) {
        lock_api::RawMutex::lock(&self.0);
        HELD.with(|held| held.set(held.get() + 1));
    }

    fn try_lock(&self) -> bool {
        let locked = lock_api::RawMutex::try_lock(&self.0);
        if locked {
            HELD.with(|held| held.set(held.get() + 1));
        }
        locked
    }

    unsafe fn unlock(&self) {
        HELD.with(|held| held.set(held.get() - 1));
        // SAFETY: the caller holds the lock (the trait's contract).
        unsafe { lock_api::RawMutex::unlock(&self.0) }
    }
}

/// A platform whose fence is set up on its first question (as `membarrier`'s registration,
/// which waits for every CPU), noting the most library locks the asking thread held.
struct SlowToSetUp {
    asked: AtomicUsize,
    most_held: AtomicUsize,
}

impl Platform for SlowToSetUp {
    type RawMutex = Counted;

    fn nr_cpus(&self) -> usize {
        1
    }

    fn current_cpu(&self) -> usize {
        0
    }

    fn can_fence_all(&self) -> bool {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.most_held
            .fetch_max(HELD.with(|held| held.get()), Ordering::SeqCst);
        true
    }

    fn fence_all(&self) {}

    fn now_ns(&self) -> u64 {
        0
    }

    fn kick(&self, _hctx: usize) {}
}

/// The fence's set-up may wait for every CPU: a new queue asks for it holding none of the
/// library's locks, so the worker, which takes the host's registry of queues, never waits
/// on it.
#[test]
fn a_new_queue_asks_whether_the_platform_fences_holding_no_lock() {
    let platform = SlowToSetUp {
        asked: AtomicUsize::new(0),
        most_held: AtomicUsize::new(0),
    };
    let host = Host::new(TagSet::builder(8), platform, Hold::new()).unwrap();
    let queues: Vec<_> = (0..2)
        .map(|_| {
            host.add_queue(QueueConfig::new(QueueLimits::new(1024)))
                .unwrap()
        })
        .collect();
    let platform = host.set().platform();
    assert!(platform.asked.load(Ordering::SeqCst) >= queues.len());
    assert_eq!(
        platform.most_held.load(Ordering::SeqCst),
        0,
        "asked with a lock held"
    );
    // The count sees a lock held.
    let lock = lock_api::Mutex::<Counted, ()>::new(());
    let guard = lock.lock();
    assert_eq!(HELD.with(|held| held.get()), 1);
    drop(guard);
    assert_eq!(HELD.with(|held| held.get()), 0);
}
