//! `RequestQueue::run_batch`: a thread that holds its CPU alone ends a batch of completions
//! as its hardware queue's runner. What the batch submits is issued at once; what others
//! submit meanwhile waits for the batch's end and is issued then, and what the batch submits
//! after that queues with it; the driver is never called twice at once nor from inside its own
//! `queue_rq`; without a CPU held alone, or once the batch has ended (a panic included),
//! nothing is held.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use blkmq_core::testing::Hold;
use blkmq_core::*;

#[path = "common/fifo.rs"]
mod fifo;
use fifo::Fifo;

type Held = Hold<StdPlatform>;

/// A host of two CPUs over one hardware queue whose driver holds what it takes.
fn holding() -> (StdPlatform, Arc<Host<Held>>, Arc<RequestQueue<Held>>) {
    let platform = StdPlatform::with_cpus(2);
    let host = Host::new(TagSet::builder(16), platform.clone(), Hold::new()).unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1 << 20)))
        .unwrap();
    (platform, host, queue)
}

/// The sectors of the requests the driver holds, in the order it took them.
fn held_sectors(host: &Host<Held>, queue: &RequestQueue<Held>) -> Vec<u64> {
    let held = host.driver().take();
    let sectors = held
        .iter()
        .map(|rq| queue.io(rq).unwrap().sector())
        .collect();
    queue
        .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
        .unwrap();
    sectors
}

/// Nothing left anywhere.
fn settled(host: &Host<Held>, queue: &RequestQueue<Held>) {
    assert!(!queue.has_work(0));
    assert_eq!(host.in_driver(), 0);
    assert_eq!(queue.usage(), 0);
    assert_eq!(host.set().busy(), 0);
}

/// Submits a read of 8 sectors at `sector` from a new thread on `cpu`, and waits for it.
fn submit_from(platform: &StdPlatform, queue: &Arc<RequestQueue<Held>>, cpu: usize, sector: u64) {
    let (platform, queue) = (platform.clone(), queue.clone());
    std::thread::spawn(move || {
        platform.pin_current_thread(cpu);
        queue.submit(Bio::new(Op::Read, sector, 8)).unwrap();
    })
    .join()
    .unwrap();
}

#[test]
fn what_a_batch_submits_is_issued_at_once() {
    let (platform, host, queue) = holding();
    platform.pin_current_thread(0);
    let seen: Vec<usize> = queue.run_batch(0, || {
        (0..4)
            .map(|i| {
                queue.submit(Bio::new(Op::Read, 64 * i, 8)).unwrap();
                host.driver().len()
            })
            .collect()
    });
    assert_eq!(seen, [1, 2, 3, 4]);
    assert_eq!(held_sectors(&host, &queue), [0, 64, 128, 192]);
    settled(&host, &queue);
}

#[test]
fn another_thread_submitting_during_a_batch_is_issued_at_its_end() {
    let (platform, host, queue) = holding();
    platform.pin_current_thread(0);
    let during = queue.run_batch(0, || {
        queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
        // CPU 1 feeds the same hardware queue: the runner is taken, so its request queues
        // and asks for a run.
        submit_from(&platform, &queue, 1, 64);
        let before = host.driver().len();
        // A run is asked for: this one queues too, rather than go to the driver ahead of
        // what the run is for.
        queue.submit(Bio::new(Op::Read, 128, 8)).unwrap();
        (before, host.driver().len(), queue.has_work(0))
    });
    assert_eq!(during, (1, 1, true));
    // The run at the batch's end takes the software queues in turn (CPU 0's first): no
    // order between CPUs, as between any two CPUs' queued requests.
    let mut sectors = held_sectors(&host, &queue);
    assert_eq!(sectors[0], 0);
    sectors.sort_unstable();
    assert_eq!(sectors, [0, 64, 128]);
    settled(&host, &queue);
}

#[test]
fn a_batch_without_a_cpu_held_alone_holds_nothing() {
    let (platform, host, queue) = holding();
    platform.pin_current_thread(0);
    // Another thread holds CPU 0 first: this one shares it, and is promised nothing.
    let holder = {
        let platform = platform.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            platform.pin_current_thread(0);
            tx.send(platform.exclusive_cpu()).unwrap();
            let _ = done_rx.recv();
        });
        assert_eq!(rx.recv().unwrap(), Some(0));
        (handle, done_tx)
    };
    assert_eq!(platform.exclusive_cpu(), None);
    let during = queue.run_batch(0, || {
        submit_from(&platform, &queue, 1, 64);
        host.driver().len()
    });
    assert_eq!(
        during, 1,
        "the other thread's request waited for a batch never held"
    );
    drop(holder.1);
    holder.0.join().unwrap();
    assert_eq!(held_sectors(&host, &queue), [64]);
    settled(&host, &queue);
}

#[test]
fn a_batch_that_panics_lets_the_runner_go() {
    let (platform, host, queue) = holding();
    platform.pin_current_thread(0);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        queue.run_batch(0, || {
            submit_from(&platform, &queue, 1, 64);
            panic!("the batch fails");
        })
    }));
    assert!(caught.is_err());
    // The request queued during the batch went at its end, and the runner is free.
    assert_eq!(host.driver().len(), 1);
    submit_from(&platform, &queue, 1, 128);
    assert_eq!(host.driver().len(), 2);
    assert_eq!(held_sectors(&host, &queue), [64, 128]);
    settled(&host, &queue);
}

#[test]
fn a_bad_hardware_queue_just_runs_the_batch() {
    let (platform, host, queue) = holding();
    platform.pin_current_thread(0);
    assert_eq!(queue.run_batch(7, || 5), 5);
    submit_from(&platform, &queue, 1, 0);
    assert_eq!(held_sectors(&host, &queue), [0]);
    settled(&host, &queue);
}

/// Ends each request inside `queue_rq`, and counts the calls under way.
struct Sync {
    issuing: AtomicUsize,
    most: AtomicUsize,
}

impl Driver for Sync {
    type Platform = StdPlatform;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        let now = self.issuing.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        cx.queue().end_request(rq, Status::Ok).unwrap();
        self.issuing.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Where a chain of bios submits the next from its end.
struct Chain {
    queue: Mutex<Option<Arc<RequestQueue<Sync>>>>,
    left: AtomicUsize,
    ended: AtomicUsize,
}

static CHAIN: Chain = Chain {
    queue: Mutex::new(None),
    left: AtomicUsize::new(0),
    ended: AtomicUsize::new(0),
};

fn next_in_chain(bio: Bio, status: Status) {
    assert_eq!(status, Status::Ok);
    CHAIN.ended.fetch_add(1, Ordering::SeqCst);
    if CHAIN.left.fetch_sub(1, Ordering::SeqCst) > 1 {
        let queue = CHAIN.queue.lock().unwrap().clone().unwrap();
        queue
            .submit(Bio::new(Op::Read, bio.sector + 8, 8).end_io(next_in_chain))
            .unwrap();
    }
}

#[test]
fn a_driver_ending_inside_queue_rq_is_not_called_again_from_within() {
    let platform = StdPlatform::with_cpus(1);
    let driver = Sync {
        issuing: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
    };
    let host = Host::new(TagSet::builder(8), platform.clone(), driver).unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1 << 20)))
        .unwrap();
    *CHAIN.queue.lock().unwrap() = Some(queue.clone());
    CHAIN.left.store(10, Ordering::SeqCst);
    platform.pin_current_thread(0);
    queue.run_batch(0, || {
        queue
            .submit(Bio::new(Op::Read, 0, 8).end_io(next_in_chain))
            .unwrap();
    });
    assert_eq!(CHAIN.ended.load(Ordering::SeqCst), 10);
    assert_eq!(host.driver().most.load(Ordering::SeqCst), 1);
    assert_eq!((host.in_driver(), queue.usage()), (0, 0));
    *CHAIN.queue.lock().unwrap() = None;
}

/// The driver tag of the request `rq` names.
fn tag_of(queue: &RequestQueue<Held>, rq: &Rq) -> u32 {
    queue.request(rq).unwrap().tag()
}

#[test]
fn the_next_request_of_a_batch_takes_the_tag_its_completion_kept() {
    let (platform, host, queue) = holding();
    platform.pin_current_thread(0);
    queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    let first = host.driver().take().pop().unwrap();
    let tag = tag_of(&queue, &first);
    queue.run_batch(0, || {
        queue.end_request(first, Status::Ok).unwrap();
        // Ended and out of the queue, its tag kept: still set in the bitmap. It counts
        // out of the driver when the batch ends.
        assert_eq!(
            (queue.usage(), host.in_driver(), host.set().busy()),
            (0, 1, 1)
        );
        for sector in [64, 128, 192] {
            queue.submit(Bio::new(Op::Read, sector, 8)).unwrap();
            let next = host.driver().take().pop().unwrap();
            assert_eq!(tag_of(&queue, &next), tag, "a fresh tag, with one kept");
            assert_eq!(queue.io(&next).unwrap().sector(), sector);
            // In the driver in the place of the one ended.
            assert_eq!((host.set().busy(), host.in_driver()), (1, 1));
            queue.end_request(next, Status::Ok).unwrap();
        }
    });
    // The batch's end put the kept tag back and counted the last out.
    assert_eq!((host.set().busy(), host.in_driver()), (0, 0));
    settled(&host, &queue);
}

#[test]
fn a_kept_tag_nobody_took_goes_back_when_the_batch_ends() {
    let (platform, host, queue) = holding();
    platform.pin_current_thread(0);
    for sector in [0, 64] {
        queue.submit(Bio::new(Op::Read, sector, 8)).unwrap();
    }
    let held = host.driver().take();
    queue.run_batch(0, || {
        for rq in held {
            queue.end_request(rq, Status::Ok).unwrap();
        }
        // One tag kept (room for one), the other put back.
        assert_eq!(host.set().busy(), 1);
    });
    assert_eq!(host.set().busy(), 0);
    settled(&host, &queue);
}

#[test]
fn a_queue_with_an_elevator_keeps_no_tag() {
    let platform = StdPlatform::with_cpus(2);
    let host = Host::new(TagSet::builder(16), platform.clone(), Hold::new()).unwrap();
    let config = QueueConfig::new(QueueLimits::new(1 << 20)).elevator(Box::new(Fifo::new()));
    let queue = host.add_queue(config).unwrap();
    platform.pin_current_thread(0);
    queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    let first = host.driver().take().pop().unwrap();
    queue.run_batch(0, || {
        queue.end_request(first, Status::Ok).unwrap();
        assert_eq!(host.set().busy(), 0, "a driver tag kept with an elevator");
        queue.submit(Bio::new(Op::Read, 64, 8)).unwrap();
    });
    assert_eq!(held_sectors(&host, &queue), [64]);
    settled(&host, &queue);
}

#[test]
fn a_submitter_waiting_for_the_kept_tag_gets_it_when_the_batch_ends() {
    let platform = StdPlatform::with_cpus(2);
    let host = Host::new(TagSet::builder(1), platform.clone(), Hold::new()).unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1 << 20)))
        .unwrap();
    platform.pin_current_thread(0);
    queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    let first = host.driver().take().pop().unwrap();
    let waiter = queue.run_batch(0, || {
        queue.end_request(first, Status::Ok).unwrap();
        // The one tag is kept: another thread's submission has to wait for it.
        assert_eq!(host.set().busy(), 1);
        let (platform, queue) = (platform.clone(), queue.clone());
        std::thread::spawn(move || {
            platform.pin_current_thread(1);
            queue.submit_wait(Bio::new(Op::Read, 128, 8));
        })
    });
    waiter.join().unwrap();
    assert_eq!(held_sectors(&host, &queue), [128]);
    settled(&host, &queue);
}

/// Holds what it takes, and turns everything down ("not now") while `refuse` is set.
struct Picky {
    refuse: std::sync::atomic::AtomicBool,
    held: Mutex<Vec<Rq>>,
}

impl Driver for Picky {
    type Platform = StdPlatform;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        if self.refuse.load(Ordering::SeqCst) {
            return Err(Rejected {
                rq,
                status: Status::Resource,
            });
        }
        self.held.lock().unwrap().push(rq);
        Ok(())
    }
}

#[test]
fn a_request_turned_down_in_a_batch_leaves_the_count_of_requests_in_the_driver_right() {
    let platform = StdPlatform::with_cpus(1);
    let driver = Picky {
        refuse: std::sync::atomic::AtomicBool::new(false),
        held: Mutex::new(Vec::new()),
    };
    let host = Host::new(TagSet::builder(8), platform.clone(), driver).unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1 << 20)))
        .unwrap();
    platform.pin_current_thread(0);
    queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    let first = host.driver().held.lock().unwrap().pop().unwrap();
    queue.run_batch(0, || {
        queue.end_request(first, Status::Ok).unwrap();
        host.driver().refuse.store(true, Ordering::SeqCst);
        // Goes to the driver in the place of the one ended, is turned down, and waits.
        queue.submit(Bio::new(Op::Read, 64, 8)).unwrap();
        assert!(host.driver().held.lock().unwrap().is_empty());
        assert_eq!(host.in_driver(), 1, "the ended one, counted out at the end");
        host.driver().refuse.store(false, Ordering::SeqCst);
    });
    // The batch's end counted the ended one out, and its restart ran what waited.
    let held: Vec<Rq> = std::mem::take(&mut *host.driver().held.lock().unwrap());
    assert_eq!(held.len(), 1);
    assert_eq!(queue.io(&held[0]).unwrap().sector(), 64);
    assert_eq!(host.in_driver(), 1);
    queue
        .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
        .unwrap();
    assert!(!queue.has_work(0));
    assert_eq!(
        (host.in_driver(), queue.usage(), host.set().busy()),
        (0, 0, 0)
    );
}

/// One CPU, held alone by whoever runs (the test's one thread), and a clock the test sets,
/// which counts its readings.
#[derive(Clone, Default)]
struct Clocked {
    now: Arc<AtomicU64>,
    reads: Arc<AtomicUsize>,
}

impl Platform for Clocked {
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

    fn now_ns(&self) -> u64 {
        self.coarse_now_ns()
    }

    fn coarse_now_ns(&self) -> u64 {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.now.load(Ordering::SeqCst)
    }

    fn kick(&self, _hctx: usize) {}
}

/// Holds what it takes.
#[derive(Default)]
struct Keep(Mutex<Vec<Rq>>);

impl Driver for Keep {
    type Platform = Clocked;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        self.0.lock().unwrap().push(rq);
        Ok(())
    }
}

#[test]
fn a_batch_reads_the_clock_once_for_what_it_starts_and_ends() {
    for accounting in [false, true] {
        let platform = Clocked::default();
        platform.now.store(1_000, Ordering::SeqCst);
        let host = Host::new(TagSet::builder(8), platform.clone(), Keep::default()).unwrap();
        let config = QueueConfig::new(QueueLimits::new(1 << 20)).accounting(accounting);
        let queue = host.add_queue(config).unwrap();
        queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
        let first = host.driver().0.lock().unwrap().pop().unwrap();
        platform.now.store(5_000, Ordering::SeqCst);
        let reads = platform.reads.load(Ordering::SeqCst);
        let started = queue.run_batch(0, || {
            platform.now.store(9_000, Ordering::SeqCst);
            queue.end_request(first, Status::Ok).unwrap();
            (0..3)
                .map(|i| {
                    queue.submit(Bio::new(Op::Read, 64 * (i + 1), 8)).unwrap();
                    let rq = host.driver().0.lock().unwrap().pop().unwrap();
                    let start = queue.io(&rq).unwrap().start_ns();
                    queue.end_request(rq, Status::Ok).unwrap();
                    start
                })
                .collect::<Vec<u64>>()
        });
        // Started at the batch's reading, not the clock's later value, and read once.
        assert_eq!(started, [5_000; 3], "accounting {accounting}");
        assert_eq!(platform.reads.load(Ordering::SeqCst) - reads, 1);
        if accounting {
            let stats = queue.stats().unwrap();
            assert_eq!(stats.op(OpGroup::Read).ios, 4);
        }
        assert_eq!(
            (host.in_driver(), queue.usage(), host.set().busy()),
            (0, 0, 0)
        );
    }
}
