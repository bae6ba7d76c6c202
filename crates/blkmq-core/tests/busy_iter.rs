//! Busy iteration while requests come and go: each request at most once per walk, never a
//! request allocated or started after the walk read its tag, so never more requests than
//! were held (or in flight) at one moment; and the owning queue of each, in the set's walk.
//! Deterministically (the walk's callback changes the tags), as a property over random
//! changes, and under real threads.

#![cfg(not(loom))]

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use blkmq_core::{Alloc, QueueTags, Rq, RqState, StdPlatform, TagSet, TagSetFlags};
use proptest::prelude::*;

type Set = TagSet<(), StdPlatform>;
type Tags = QueueTags<(), StdPlatform>;

fn set(depth: usize, hw: usize, flags: TagSetFlags) -> Arc<Set> {
    TagSet::builder(depth)
        .hw_queues(hw)
        .flags(flags)
        .build(StdPlatform::with_cpus(4), |_| ())
        .unwrap()
}

/// What one walk reported: (request address, state), in order.
fn walk(tags: &Tags, f: &mut dyn FnMut(&blkmq_core::BusyRq<'_, ()>)) -> Vec<(usize, RqState)> {
    let mut seen = Vec::new();
    tags.for_each_busy(None, |busy| {
        assert_eq!(busy.queue, tags.id());
        assert_eq!(busy.request.snapshot(), (busy.generation, busy.state));
        seen.push((std::ptr::from_ref(busy.request).addr(), busy.state));
        f(&busy);
        true
    });
    seen
}

fn free_all(tags: &Tags, rqs: Vec<Rq>) {
    for rq in rqs {
        tags.free(rq).unwrap();
    }
}

#[test]
fn a_walk_reports_no_request_allocated_or_started_after_it_read_the_tags() {
    let set = set(16, 1, TagSetFlags::empty());
    let tags = set.attach().unwrap();
    let mut rqs: Vec<Rq> = (0..4)
        .map(|_| {
            let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
            tags.start(&mut rq, 0).unwrap();
            rq
        })
        .collect();
    let mut first = true;
    let seen = walk(&tags, &mut |busy| {
        if !std::mem::take(&mut first) {
            return;
        }
        // The first one seen ends, and two new ones start on tags the walk has not passed.
        let at = rqs.iter().position(|rq| rq.tag() == busy.tag).unwrap();
        tags.free(rqs.swap_remove(at)).unwrap();
        for _ in 0..2 {
            let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
            tags.start(&mut rq, 0).unwrap();
            rqs.push(rq);
        }
    });
    assert_eq!(
        seen.len(),
        4,
        "the four in flight when the walk began: {seen:?}"
    );
    assert!(seen.iter().all(|&(_, state)| state == RqState::InFlight));
    assert_eq!(rqs.len(), 5);
    free_all(&tags, rqs);
}

#[test]
fn a_walk_reports_no_request_requeued_or_restarted_before_it_got_there() {
    let set = set(16, 1, TagSetFlags::empty());
    let tags = set.attach().unwrap();
    let mut rqs: Vec<Rq> = (0..3)
        .map(|_| {
            let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
            tags.start(&mut rq, 0).unwrap();
            rq
        })
        .collect();
    let mut first = true;
    let seen = walk(&tags, &mut |_| {
        if std::mem::take(&mut first) {
            // The last one is requeued and started again: another dispatch.
            let last = rqs.last_mut().unwrap();
            tags.requeue(last).unwrap();
            tags.start(last, 1).unwrap();
        }
    });
    assert_eq!(
        seen.len(),
        2,
        "the restarted one is not the dispatch the walk saw"
    );
    free_all(&tags, rqs);
}

#[test]
fn the_set_s_walk_names_each_request_s_queue() {
    let set = set(16, 2, TagSetFlags::empty());
    let a = set.attach().unwrap();
    let b = set.attach().unwrap();
    let ra = a.alloc(&Alloc::new(1, 0)).unwrap();
    let mut rb = b.alloc(&Alloc::new(1, 0)).unwrap();
    b.start(&mut rb, 0).unwrap();
    let mut owners = Vec::new();
    set.for_each_busy(|busy| {
        owners.push((busy.hctx, busy.queue, busy.state));
        true
    });
    owners.sort_unstable_by_key(|o| o.1);
    let mut expected = vec![(1, a.id(), RqState::Idle), (1, b.id(), RqState::InFlight)];
    expected.sort_unstable_by_key(|o| o.1);
    assert_eq!(owners, expected);
    a.free(ra).unwrap();
    b.free(rb).unwrap();
}

/// A change made to the tags while a walk runs.
#[derive(Clone, Copy, Debug)]
enum Change {
    Alloc {
        hctx: u8,
    },
    Start {
        index: u8,
    },
    Requeue {
        index: u8,
    },
    Free {
        index: u8,
    },
    /// A scheduler request gives its driver tag back and takes one again (maybe another).
    Move {
        index: u8,
    },
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        any::<u8>().prop_map(|hctx| Change::Alloc { hctx }),
        any::<u8>().prop_map(|index| Change::Start { index }),
        any::<u8>().prop_map(|index| Change::Requeue { index }),
        any::<u8>().prop_map(|index| Change::Free { index }),
        any::<u8>().prop_map(|index| Change::Move { index }),
    ]
}

/// Requests the queue holds, by token, with whether each has a driver tag (always, without
/// scheduler tags) and whether it is started.
struct Held {
    rqs: Vec<(Rq, bool, bool)>,
}

impl Held {
    fn apply(&mut self, tags: &Tags, hw: usize, sched: bool, change: Change) {
        let n = self.rqs.len();
        let pick = |index: u8| (n > 0).then(|| usize::from(index) % n);
        match change {
            Change::Alloc { hctx } => {
                let hctx = usize::from(hctx) % hw;
                if let Ok(mut rq) = tags.alloc(&Alloc::new(hctx, 0)) {
                    let driver = !sched || tags.get_driver_tag(&mut rq).unwrap();
                    self.rqs.push((rq, driver, false));
                }
            }
            Change::Start { index } => {
                if let Some((rq, true, started @ false)) = pick(index).map(|i| &mut self.rqs[i]) {
                    tags.start(rq, 0).unwrap();
                    *started = true;
                }
            }
            Change::Requeue { index } => {
                if let Some((rq, _, started @ true)) = pick(index).map(|i| &mut self.rqs[i]) {
                    tags.requeue(rq).unwrap();
                    *started = false;
                }
            }
            Change::Free { index } => {
                if let Some(i) = pick(index) {
                    tags.free(self.rqs.swap_remove(i).0).unwrap();
                }
            }
            Change::Move { index } => {
                if let Some((rq, driver, _)) = pick(index).map(|i| &mut self.rqs[i]) {
                    if sched && *driver {
                        tags.put_driver_tag(rq).unwrap();
                        *driver = tags.get_driver_tag(rq).unwrap();
                    }
                }
            }
        }
    }

    /// Requests holding a driver tag, and those of them started.
    fn counts(&self) -> (usize, usize) {
        let holding = self.rqs.iter().filter(|r| r.1).count();
        let started = self.rqs.iter().filter(|r| r.1 && r.2).count();
        (holding, started)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the walk's callback changes, a walk reports each request at most once,
    /// never more than held a driver tag when it began, nor more started ones than were in
    /// flight then, and only requests that held one then.
    #[test]
    fn a_walk_never_reports_more_than_was_held(
        sched in any::<bool>(),
        hw in 1usize..3,
        before in prop::collection::vec(change(), 0..40),
        during in prop::collection::vec(prop::collection::vec(change(), 0..4), 0..16),
    ) {
        let set = set(12, hw, TagSetFlags::empty());
        let mut tags = set.attach().unwrap();
        if sched {
            tags.attach_scheduler(Some(16), |_| ()).unwrap();
        }
        let mut held = Held { rqs: Vec::new() };
        for c in before {
            held.apply(&tags, hw, sched, c);
        }
        let (holding, started) = held.counts();
        let there: HashSet<usize> = held
            .rqs
            .iter()
            .filter(|r| r.1)
            .map(|r| std::ptr::from_ref(tags.request(&r.0).unwrap()).addr())
            .collect();
        let mut during = during.into_iter();
        let seen = walk(&tags, &mut |_| {
            for c in during.next().unwrap_or_default() {
                held.apply(&tags, hw, sched, c);
            }
        });
        let distinct: HashSet<usize> = seen.iter().map(|s| s.0).collect();
        prop_assert_eq!(distinct.len(), seen.len(), "a request reported twice: {:?}", seen);
        prop_assert!(seen.len() <= holding, "{} reported, {} held", seen.len(), holding);
        let in_flight = seen.iter().filter(|s| s.1 == RqState::InFlight).count();
        prop_assert!(in_flight <= started, "{} reported started, {} were", in_flight, started);
        prop_assert!(distinct.is_subset(&there), "reported what the walk began without");
        for (rq, _, _) in held.rqs.drain(..) {
            tags.free(rq).unwrap();
        }
    }
}

/// Submitters on threads of their own, each holding at most `PER_THREAD` requests, and a
/// walker: no walk reports more than they can hold together, or a request twice.
fn threads_never_exceed_what_is_held(sched: bool) {
    const THREADS: usize = 3;
    const PER_THREAD: usize = 4;
    const ROUNDS: usize = 20_000;
    let set = set(24, 1, TagSetFlags::empty());
    let mut a = set.attach().unwrap();
    // A second queue, busy too: fair sharing caps each at 12, as the submitters' bound.
    let b = set.attach().unwrap();
    let other = b.alloc(&Alloc::new(0, 0)).unwrap();
    if sched {
        a.attach_scheduler(Some(24), |_| ()).unwrap();
    }
    let done = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let walks = AtomicUsize::new(0);
    // Everyone starts together, so the walks overlap the submissions.
    let start = Barrier::new(THREADS + 1);
    std::thread::scope(|s| {
        for cpu in 0..THREADS {
            let (a, start, done) = (&a, &start, &done);
            s.spawn(move || {
                start.wait();
                let mut mine: Vec<Rq> = Vec::with_capacity(PER_THREAD);
                for round in 0..ROUNDS {
                    if mine.len() == PER_THREAD {
                        // The oldest ends; the newest ones stay, at higher tags or lower.
                        a.free(mine.remove(round % PER_THREAD)).unwrap();
                    }
                    let Ok(mut rq) = a.alloc(&Alloc::new(0, cpu)) else {
                        continue;
                    };
                    if sched {
                        if !a.get_driver_tag(&mut rq).unwrap() {
                            a.free(rq).unwrap();
                            continue;
                        }
                        // Back and again: maybe another driver tag, the same request.
                        a.put_driver_tag(&mut rq).unwrap();
                        if !a.get_driver_tag(&mut rq).unwrap() {
                            a.free(rq).unwrap();
                            continue;
                        }
                    }
                    a.start(&mut rq, 0).unwrap();
                    mine.push(rq);
                }
                for rq in mine {
                    a.free(rq).unwrap();
                }
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        s.spawn(|| {
            start.wait();
            // Bounded: until the submitters are done (at least once), and at most this many.
            for walk in 0..200_000 {
                if walk > 0 && done.load(Ordering::SeqCst) == THREADS || stop.load(Ordering::SeqCst)
                {
                    break;
                }
                let mut seen = HashSet::new();
                let mut count = 0;
                a.for_each_busy(None, |busy| {
                    assert_eq!(busy.queue, a.id());
                    count += 1;
                    assert!(
                        seen.insert(std::ptr::from_ref(busy.request).addr()),
                        "a request reported twice in one walk"
                    );
                    // A slow callback: room for the submitters to end and start requests.
                    for _ in 0..2_000 {
                        std::hint::spin_loop();
                    }
                    true
                });
                assert!(
                    count <= THREADS * PER_THREAD,
                    "{count} reported, at most {} held",
                    THREADS * PER_THREAD
                );
                let mut of_a = 0;
                set.for_each_busy(|busy| {
                    of_a += usize::from(busy.queue == a.id());
                    true
                });
                assert!(
                    of_a <= THREADS * PER_THREAD,
                    "{of_a} of a's in the set's walk"
                );
                walks.fetch_add(1, Ordering::Relaxed);
            }
        });
    });
    stop.store(true, Ordering::SeqCst);
    assert!(walks.load(Ordering::Relaxed) > 0);
    b.free(other).unwrap();
    assert_eq!(set.busy(), 0);
}

#[test]
fn walks_under_threads_never_exceed_what_is_held() {
    threads_never_exceed_what_is_held(false);
}

#[test]
fn walks_under_threads_never_exceed_what_is_held_with_scheduler_tags() {
    threads_never_exceed_what_is_held(true);
}
