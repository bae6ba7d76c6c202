//! Waiting for one's own I/O: `submit_and_wait` and `submit_async` give every status to
//! the waiter that asked for it (a split bio's first error included), sleep while the queue
//! has no room (no tag, frozen) and wake when it has, with the driver ending requests from
//! another thread; and `submit_wait` sleeps until a frozen queue thaws.

#![cfg(not(loom))]

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use blkmq_core::testing::Hold;
use blkmq_core::{
    Bio, BioFlags, Host, Op, QueueConfig, QueueLimits, RequestQueue, Status, StdPlatform, TagSet,
};

type Queue = RequestQueue<Hold<StdPlatform>>;

fn host(depth: usize) -> Arc<Host<Hold<StdPlatform>>> {
    Host::new(TagSet::builder(depth), StdPlatform::new(), Hold::new()).unwrap()
}

/// The driver's interrupt, on a thread of its own: ends every request it is given with
/// `status(first sector)`, until `stop`.
fn serve(queue: &Queue, stop: &AtomicBool, status: impl Fn(u64) -> Status) {
    while !stop.load(Ordering::Acquire) {
        let held = queue.driver().take();
        if held.is_empty() {
            thread::yield_now();
            continue;
        }
        for rq in held {
            let sector = queue.io(&rq).unwrap().sector();
            queue.end_request(rq, status(sector)).unwrap();
        }
    }
}

/// Sets its flag when dropped: the driver thread stops even when a check fails.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Waits until the driver holds `n` requests, and takes them.
fn take(queue: &Queue, n: usize) -> Vec<blkmq_core::Rq> {
    let mut held = Vec::new();
    while held.len() < n {
        held.extend(queue.driver().take());
        thread::yield_now();
    }
    held
}

#[test]
fn every_status_reaches_the_waiter() {
    let host = host(8);
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1024)))
        .unwrap();
    let statuses = [
        Status::Ok,
        Status::IoErr,
        Status::Medium,
        Status::Timeout,
        Status::NoSpace,
    ];
    thread::scope(|s| {
        let waiters: Vec<_> = statuses
            .iter()
            .enumerate()
            .map(|(i, _)| {
                let queue = &queue;
                s.spawn(move || queue.submit_and_wait(Bio::new(Op::Read, i as u64 * 16, 8)))
            })
            .collect();
        for rq in take(&queue, statuses.len()) {
            let sector = queue.io(&rq).unwrap().sector();
            queue
                .end_request(rq, statuses[(sector / 16) as usize])
                .unwrap();
        }
        let got: Vec<Status> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
        assert_eq!(got, statuses);
    });
    // Invalid: past the end, ended at once with no driver involved.
    assert_eq!(
        queue.submit_and_wait(Bio::new(Op::Write, 1024, 8)),
        Status::IoErr
    );
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}

static OWN_ENDS: Mutex<Vec<(u64, u64, Status)>> = Mutex::new(Vec::new());

fn own_end(bio: Bio, status: Status) {
    OWN_ENDS
        .lock()
        .unwrap()
        .push((bio.sector, bio.private, status));
}

#[test]
fn a_split_bio_gives_its_waiter_the_first_error_and_its_own_callback_still_runs() {
    let host = host(8);
    let limits = QueueLimits {
        max_sectors: 8,
        ..QueueLimits::new(1024)
    };
    let queue = host.add_queue(QueueConfig::new(limits)).unwrap();
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            let bio = Bio::new(Op::Write, 64, 32).private(77).end_io(own_end);
            queue.submit_and_wait(bio)
        });
        let mut held = take(&queue, 4);
        held.sort_by_key(|rq| queue.io(rq).unwrap().sector());
        // In sector order: the second piece fails first, the third after it.
        let ends = [Status::Ok, Status::Medium, Status::IoErr, Status::Ok];
        for (rq, status) in held.into_iter().zip(ends) {
            queue.end_request(rq, status).unwrap();
        }
        assert_eq!(waiter.join().unwrap(), Status::Medium);
    });
    // The bio's own callback ran once, on the whole bio, with its own private word.
    assert_eq!(*OWN_ENDS.lock().unwrap(), [(64, 77, Status::Medium)]);
}

#[test]
fn two_threads_wait_for_their_own_io_while_the_driver_ends_it_elsewhere() {
    const PER_THREAD: u64 = 500;
    // One tag: the two submitters take turns, each sleeping for the tag in between.
    let host = host(1);
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1 << 20)))
        .unwrap();
    let stop = AtomicBool::new(false);
    let failed = AtomicU64::new(0);
    thread::scope(|s| {
        let driver = s.spawn(|| {
            // Every fifth I/O fails: each waiter must get its own I/O's status.
            serve(&queue, &stop, |sector| {
                if (sector / 8) % 5 == 0 {
                    Status::IoErr
                } else {
                    Status::Ok
                }
            })
        });
        let stop_driver = StopOnDrop(&stop);
        let submitters: Vec<_> = (0..2u64)
            .map(|t| {
                let (queue, failed) = (&queue, &failed);
                s.spawn(move || {
                    for i in 0..PER_THREAD {
                        let n = t * PER_THREAD + i;
                        let status = queue.submit_and_wait(Bio::new(Op::Write, n * 8, 8));
                        let expected = if n % 5 == 0 {
                            Status::IoErr
                        } else {
                            Status::Ok
                        };
                        assert_eq!(status, expected, "I/O {n}");
                        failed.fetch_add(u64::from(!status.is_ok()), Ordering::Relaxed);
                    }
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
    assert_eq!(failed.load(Ordering::Relaxed), 2 * PER_THREAD / 5);
    assert_eq!(
        (host.set().busy(), host.in_driver(), queue.usage()),
        (0, 0, 0)
    );
}

/// A waker that unparks the thread that made it, counting its wake-ups.
struct Unpark {
    thread: Thread,
    wakes: AtomicU64,
}

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::Relaxed);
        self.thread.unpark();
    }
}

/// A tiny executor: polls every future in turn until all are ready, parking the thread
/// while none can make progress. Returns their outputs in order.
fn run_all<F: Future>(futures: Vec<Pin<&mut F>>, waker: &Waker) -> Vec<F::Output> {
    let mut cx = Context::from_waker(waker);
    let mut futures: Vec<Option<Pin<&mut F>>> = futures.into_iter().map(Some).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    while outputs.iter().any(Option::is_none) {
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if let Some(f) = future {
                if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
                    *output = Some(out);
                    *future = None;
                }
            }
        }
        if outputs.iter().any(Option::is_none) {
            thread::park();
        }
    }
    outputs.into_iter().map(Option::unwrap).collect()
}

#[test]
fn async_submissions_on_a_tiny_executor_wait_for_tags_and_their_ends() {
    // Eight submissions, two tags: six wait for a tag, woken through the waker.
    let host = host(2);
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1024)))
        .unwrap();
    let stop = AtomicBool::new(false);
    let unpark = Arc::new(Unpark {
        thread: thread::current(),
        wakes: AtomicU64::new(0),
    });
    let waker = Waker::from(unpark.clone());
    thread::scope(|s| {
        let driver = s.spawn(|| {
            serve(&queue, &stop, |sector| {
                if sector == 24 {
                    Status::Medium
                } else {
                    Status::Ok
                }
            })
        });
        let stop_driver = StopOnDrop(&stop);
        let mut futures: Vec<_> = (0..8u64)
            .map(|i| Box::pin(queue.submit_async(Bio::new(Op::Read, i * 8, 8))))
            .collect();
        let outputs = run_all(futures.iter_mut().map(|f| f.as_mut()).collect(), &waker);
        let mut expected = vec![Status::Ok; 8];
        expected[3] = Status::Medium;
        drop(stop_driver);
        driver.join().unwrap();
        assert_eq!(outputs, expected);
    });
    assert!(unpark.wakes.load(Ordering::Relaxed) > 0);
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}

#[test]
fn a_noop_waker_future_resolves_once_the_driver_ends_the_bio() {
    let host = host(1);
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1024)))
        .unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    let mut first = pin!(queue.submit_async(Bio::new(Op::Write, 0, 8)));
    let mut second = pin!(queue.submit_async(Bio::new(Op::Write, 64, 8)));
    assert!(first.as_mut().poll(&mut cx).is_pending()); // in the driver
    assert!(second.as_mut().poll(&mut cx).is_pending()); // waiting for the one tag
    assert_eq!(host.driver().len(), 1);
    queue
        .end_request(host.driver().take().pop().unwrap(), Status::Ok)
        .unwrap();
    assert_eq!(first.as_mut().poll(&mut cx), Poll::Ready(Status::Ok));
    assert!(second.as_mut().poll(&mut cx).is_pending()); // now in the driver
    let rq = host.driver().take().pop().unwrap();
    assert_eq!(queue.io(&rq).unwrap().sector(), 64);
    queue.end_request(rq, Status::Protection).unwrap();
    assert_eq!(
        second.as_mut().poll(&mut cx),
        Poll::Ready(Status::Protection)
    );
}

static DROPPED: Mutex<Vec<(u64, Status)>> = Mutex::new(Vec::new());

fn dropped_end(bio: Bio, status: Status) {
    DROPPED.lock().unwrap().push((bio.sector, status));
}

#[test]
fn a_frozen_queue_puts_waiters_to_sleep_until_it_thaws() {
    let host = host(4);
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1024)))
        .unwrap();
    queue.freeze_start();
    // NOWAIT: refused at once with `Again`, nothing waits.
    let nowait = Bio::new(Op::Read, 0, 8).flags(BioFlags::NOWAIT);
    assert_eq!(queue.submit_and_wait(nowait), Status::Again);
    // A future dropped while it waits for the thaw ends its bio with `Again`.
    {
        let mut cx = Context::from_waker(Waker::noop());
        let mut waiting = pin!(queue.submit_async(Bio::new(Op::Read, 8, 8).end_io(dropped_end)));
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
    }
    assert_eq!(*DROPPED.lock().unwrap(), [(8, Status::Again)]);
    let woken = AtomicU64::new(0);
    thread::scope(|s| {
        let sleeper = s.spawn(|| {
            queue.submit_wait(Bio::new(Op::Write, 16, 8));
            woken.fetch_add(1, Ordering::SeqCst);
        });
        let waiter = s.spawn(|| queue.submit_and_wait(Bio::new(Op::Write, 32, 8)));
        thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(woken.load(Ordering::SeqCst), 0); // still frozen: asleep
        assert!(host.driver().is_empty());
        queue.unfreeze();
        sleeper.join().unwrap();
        for rq in take(&queue, 2) {
            queue.end_request(rq, Status::Ok).unwrap();
        }
        assert_eq!(waiter.join().unwrap(), Status::Ok);
    });
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}
