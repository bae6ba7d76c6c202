//! Waiting for one's own I/O allocates nothing: once warmed up, 10,000 I/Os through
//! `submit_and_wait` (two threads sharing one tag, so they sleep for it in turn) and through
//! `submit_async` (four futures at a time on a tiny executor, two tags) touch no heap on the
//! submitting threads, with and without an elevator, while a driver thread ends every request.
//! Measured with a counting allocator on each submitting thread.
//!
//! Set `ALLOC_BACKTRACE=1` to have a failing run print where its first allocation came
//! from.

#![cfg(not(loom))]

#[path = "common/counting.rs"]
mod counting;
#[path = "common/fifo.rs"]
mod fifo;

use counting::assert_no_alloc;

use std::collections::VecDeque;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use blkmq_core::{
    Alloc, Bio, Driver, HctxCx, Host, Op, Platform, QueueConfig, QueueLimits, Rejected,
    RequestInit, RequestQueue, Rq, Status, TagSet,
};

/// I/Os counted per configuration.
const IOS: u64 = 10_000;

/// I/Os run before counting.
const WARM_UP: u64 = 1_000;

/// A platform of one CPU, a clock that ticks on each read, and no kicks expected.
struct Fixed {
    clock: AtomicU64,
}

impl Platform for Fixed {
    type RawMutex = spin::mutex::SpinMutex<()>;

    fn nr_cpus(&self) -> usize {
        1
    }

    fn current_cpu(&self) -> usize {
        0
    }

    fn now_ns(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    fn kick(&self, _hctx: usize) {}
}

/// A driver whose "interrupt" is another thread: it keeps what it is given (in room made
/// once) for [`serve`] to end.
struct Irq {
    held: Mutex<VecDeque<Rq>>,
}

impl Driver for Irq {
    type Platform = Fixed;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        self.held.lock().unwrap().push_back(rq);
        Ok(())
    }
}

type Queue = RequestQueue<Irq>;

/// A host of `depth` tags and a queue on it, with the FIFO elevator if `elevator`.
fn build(depth: usize, elevator: bool) -> (Arc<Host<Irq>>, Arc<Queue>) {
    let platform = Fixed {
        clock: AtomicU64::new(0),
    };
    let driver = Irq {
        held: Mutex::new(VecDeque::with_capacity(64)),
    };
    let host = Host::new(TagSet::builder(depth), platform, driver).unwrap();
    let mut config = QueueConfig::new(QueueLimits::new(1 << 21));
    if elevator {
        config = config.elevator(Box::new(fifo::Fifo::new()));
    }
    let queue = host.add_queue(config).unwrap();
    (host, queue)
}

/// Sets its flag when dropped: the driver thread stops even when a check fails.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// The driver's interrupt: ends every request it was given with `Ok`, until `stop`.
fn serve(queue: &Queue, stop: &AtomicBool) {
    while !stop.load(Ordering::Acquire) {
        let next = queue.driver().held.lock().unwrap().pop_front();
        match next {
            Some(rq) => queue.end_request(rq, Status::Ok).unwrap(),
            None => thread::yield_now(),
        }
    }
}

/// Fills the tag bitmap's wait queues once, four waiters each (more than these tests ever
/// have at once), so their storage is made before counting: which wait queue a waiter lands
/// on goes round robin, and a warm-up that happens not to wait much might miss one.
fn warm_wait_queues(queue: &Queue) {
    let tags = queue.queue_tags();
    let alloc = Alloc::new(0, 0);
    let mut held = Vec::new();
    while let Ok(rq) = tags.alloc(&alloc) {
        held.push(rq);
    }
    let mut cx = Context::from_waker(Waker::noop());
    let mut waiting: Vec<_> = (0..4 * blkmq_sbitmap::WAIT_QUEUES)
        .map(|_| Box::pin(tags.alloc_async(alloc)))
        .collect();
    for waiter in &mut waiting {
        assert!(waiter.as_mut().poll(&mut cx).is_pending());
    }
    drop(waiting);
    for rq in held {
        tags.free(rq).unwrap();
    }
}

/// A bio of 8 sectors for the `i`-th I/O, far from its neighbours so nothing merges.
fn bio(i: u64) -> Bio {
    Bio::new(
        if i % 2 == 0 { Op::Read } else { Op::Write },
        (i * 4096) % (1 << 20),
        8,
    )
}

fn waiting_submit_allocates_nothing(elevator: bool) {
    let (host, queue) = build(1, elevator);
    warm_wait_queues(&queue);
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        let driver = s.spawn(|| serve(&queue, &stop));
        let stop_driver = StopOnDrop(&stop);
        let submitters: Vec<_> = (0..2u64)
            .map(|t| {
                let queue = &queue;
                s.spawn(move || {
                    let run = |from: u64, n: u64| {
                        for i in from..from + n {
                            assert_eq!(queue.submit_and_wait(bio(2 * i + t)), Status::Ok);
                        }
                    };
                    run(0, WARM_UP);
                    assert_no_alloc("submit_and_wait", || run(WARM_UP, IOS / 2));
                })
            })
            .collect();
        let joined: Vec<_> = submitters.into_iter().map(|s| s.join()).collect();
        drop(stop_driver);
        driver.join().unwrap();
        for submitter in joined {
            submitter.unwrap();
        }
    });
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}

#[test]
fn waiting_submit_allocates_nothing_per_io() {
    waiting_submit_allocates_nothing(false);
}

#[test]
fn waiting_submit_allocates_nothing_per_io_with_an_elevator() {
    waiting_submit_allocates_nothing(true);
}

/// A waker that unparks the thread that made it.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls the four futures in turn until all have resolved to `Ok`, parking in between.
fn run_four<F: Future<Output = Status>>(futures: [Pin<&mut F>; 4], cx: &mut Context<'_>) {
    let mut futures = futures.map(Some);
    while futures.iter().any(Option::is_some) {
        for slot in futures.iter_mut() {
            if let Some(future) = slot {
                if let Poll::Ready(status) = future.as_mut().poll(cx) {
                    assert_eq!(status, Status::Ok);
                    *slot = None;
                }
            }
        }
        if futures.iter().any(Option::is_some) {
            thread::park();
        }
    }
}

fn async_submit_allocates_nothing(elevator: bool) {
    let (host, queue) = build(2, elevator);
    warm_wait_queues(&queue);
    let stop = AtomicBool::new(false);
    // The executor's waker, made once before counting.
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    thread::scope(|s| {
        let driver = s.spawn(|| serve(&queue, &stop));
        let stop_driver = StopOnDrop(&stop);
        let mut cx = Context::from_waker(&waker);
        let mut run = |from: u64, n: u64| {
            for batch in (from..from + n).step_by(4) {
                let a = pin!(queue.submit_async(bio(batch)));
                let b = pin!(queue.submit_async(bio(batch + 1)));
                let c = pin!(queue.submit_async(bio(batch + 2)));
                let d = pin!(queue.submit_async(bio(batch + 3)));
                run_four([a, b, c, d], &mut cx);
            }
        };
        run(0, WARM_UP);
        assert_no_alloc("submit_async", || run(WARM_UP, IOS));
        drop(stop_driver);
        driver.join().unwrap();
    });
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}

#[test]
fn async_submit_allocates_nothing_per_io() {
    async_submit_allocates_nothing(false);
}

#[test]
fn async_submit_allocates_nothing_per_io_with_an_elevator() {
    async_submit_allocates_nothing(true);
}
