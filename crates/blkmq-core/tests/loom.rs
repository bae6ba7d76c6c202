//! Loom models of the tag set's waiting protocols.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p blkmq-core --release --test loom`.
//!
//! Two request queues share one tag set and race for its last tags while a third party waits.
//! A lost wake-up shows up as loom's "deadlock" failure (a thread blocked in
//! `loom::future::block_on` that nothing will wake); a tag handed out twice trips the
//! ownership flags.

#![cfg(loom)]

use std::sync::Arc as StdArc;

use blkmq_core::{Alloc, Platform, QueueTags, Rq, TagSet, TagSetFlags};
use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;

struct LoomPlatform;

impl Platform for LoomPlatform {
    type RawMutex = spin::mutex::SpinMutex<()>;

    fn nr_cpus(&self) -> usize {
        2
    }

    fn current_cpu(&self) -> usize {
        0
    }

    fn now_ns(&self) -> u64 {
        0
    }

    fn kick(&self, _hctx: usize) {}
}

type Queue = QueueTags<(), LoomPlatform>;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    let f = std::sync::Arc::new(f);
    builder.check(move || {
        // Building a tag set needs more than the model's default stack: run the body on a
        // thread with a larger one.
        let f = f.clone();
        thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(move || f())
            .unwrap()
            .join()
            .unwrap();
    });
}

/// Marks `rq`'s tag held; fails if it already was.
fn own(owned: &[AtomicBool], rq: &Rq) {
    let tag = rq.tag() as usize;
    assert!(!owned[tag].swap(true, Ordering::Relaxed), "tag {tag} twice");
}

fn disown(owned: &[AtomicBool], rq: &Rq) {
    owned[rq.tag() as usize].store(false, Ordering::Relaxed);
}

fn two_queues(depth: usize) -> (StdArc<TagSet<(), LoomPlatform>>, Arc<Queue>, Arc<Queue>) {
    let set = TagSet::builder(depth)
        .hw_queues(2)
        .flags(TagSetFlags::SHARED_HOST_TAGS)
        .build(LoomPlatform, |_| ())
        .unwrap();
    let a = Arc::new(set.attach().unwrap());
    let b = Arc::new(set.attach().unwrap());
    (set, a, b)
}

/// The tag space is full. Queue A waits for a tag; queue B frees its tag and at once races A
/// for it with a NOWAIT allocation (freeing what it wins). A must get a tag in the end, and
/// no tag is ever held twice.
#[test]
fn last_tag_race_with_a_waiter() {
    model(|| {
        let (set, a, b) = two_queues(2);
        let owned: Arc<[AtomicBool; 2]> =
            Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let held_a = a.alloc(&Alloc::new(0, 0)).unwrap();
        let held_b = b.alloc(&Alloc::new(1, 1)).unwrap();
        own(&owned[..], &held_a);
        own(&owned[..], &held_b);

        let waiter = {
            let (a, owned) = (a.clone(), owned.clone());
            thread::spawn(move || {
                let rq = loom::future::block_on(a.alloc_async(Alloc::new(0, 0))).unwrap();
                own(&owned[..], &rq);
                disown(&owned[..], &rq);
                a.free(rq).unwrap();
            })
        };
        let racer = {
            let (b, owned) = (b.clone(), owned.clone());
            thread::spawn(move || {
                disown(&owned[..], &held_b);
                b.free(held_b).unwrap();
                if let Ok(rq) = b.alloc(&Alloc::new(1, 1)) {
                    own(&owned[..], &rq);
                    disown(&owned[..], &rq);
                    b.free(rq).unwrap();
                }
            })
        };
        waiter.join().unwrap();
        racer.join().unwrap();
        disown(&owned[..], &held_a);
        a.free(held_a).unwrap();
        assert_eq!(set.busy(), 0);
    });
}

/// Fair sharing: with 8 tags and two active queues, each may hold 4. A holds 4 and waits for
/// a fifth — it is over its share although the bitmap has free tags. One of A's own tags is
/// freed while B races for the free ones. The free must wake A's waiter (the in-flight count
/// drops before the tag is freed, and the waiter re-reads it after registering).
#[test]
fn waiter_over_its_fair_share_is_woken_by_its_queues_free() {
    model(|| {
        let (set, a, b) = two_queues(8);
        let mut held_a: Vec<Rq> = (0..4)
            .map(|_| a.alloc(&Alloc::new(0, 0)).unwrap())
            .collect();
        let held_b = b.alloc(&Alloc::new(1, 1)).unwrap();
        assert_eq!(set.fair_share(0), 4);
        assert!(a.alloc(&Alloc::new(0, 0)).is_err(), "A is at its share");
        let freed = held_a.pop().unwrap();

        let waiter = {
            let a = a.clone();
            thread::spawn(move || {
                let rq = loom::future::block_on(a.alloc_async(Alloc::new(0, 0))).unwrap();
                a.free(rq).unwrap();
            })
        };
        let freer = {
            let a = a.clone();
            thread::spawn(move || a.free(freed).unwrap())
        };
        // B takes one of the free tags meanwhile, within its own share.
        let extra = b.alloc(&Alloc::new(1, 1)).unwrap();
        waiter.join().unwrap();
        freer.join().unwrap();
        b.free(extra).unwrap();
        b.free(held_b).unwrap();
        for rq in held_a {
            a.free(rq).unwrap();
        }
        assert_eq!(set.busy(), 0);
    });
}

/// A queue going idle gives its share back: a waiter of the other queue, over the smaller
/// share, must be woken by the idle transition alone (no tag of its own is freed).
#[test]
fn idle_queue_gives_its_share_back_to_a_waiter() {
    model(|| {
        let (set, a, b) = two_queues(8);
        let held_a: Vec<Rq> = (0..4)
            .map(|_| a.alloc(&Alloc::new(0, 0)).unwrap())
            .collect();
        let held_b = b.alloc(&Alloc::new(1, 1)).unwrap();
        assert_eq!(set.active_queues(0), 2);

        let waiter = {
            let a = a.clone();
            thread::spawn(move || {
                let rq = loom::future::block_on(a.alloc_async(Alloc::new(0, 0))).unwrap();
                a.free(rq).unwrap();
            })
        };
        b.free(held_b).unwrap();
        assert!(b.mark_idle(1));
        waiter.join().unwrap();
        for rq in held_a {
            a.free(rq).unwrap();
        }
        assert_eq!(set.busy(), 0);
    });
}

/// The restart protocol: a dispatcher that finds the shared resource taken puts its request
/// back, marks its hardware queue in a `RestartSet`, and looks at the resource again; a
/// completion gives the resource back and drains the set, running each queue it hands out.
/// Two hardware queues each queue a request while a third party holds the only unit of the
/// resource; every dispatched request "completes" at once (gives the unit back and drains).
/// In every interleaving both requests are dispatched: none is stranded. Run with the two
/// queues in one word (a one-level set) and in two words under a root (a two-level set).
#[test]
fn restart_set_strands_no_request() {
    use blkmq_core::RestartSet;
    use loom::sync::Mutex;
    use loom::sync::atomic::AtomicUsize;

    struct World {
        lists: [Mutex<Vec<u32>>; 2],
        /// Free units of the resource (a driver tag, say).
        free: AtomicUsize,
        waiting: RestartSet,
        dispatched: AtomicUsize,
        /// The two queues are `0` and `spacing`.
        spacing: usize,
    }

    impl World {
        fn take(&self) -> bool {
            let mut now = self.free.load(Ordering::SeqCst);
            while now > 0 {
                match self
                    .free
                    .compare_exchange(now, now - 1, Ordering::SeqCst, Ordering::SeqCst)
                {
                    Ok(_) => return true,
                    Err(seen) => now = seen,
                }
            }
            false
        }

        /// A completion: the unit goes back, then every waiting queue runs.
        fn complete(&self) {
            self.free.fetch_add(1, Ordering::SeqCst);
            self.waiting.drain(|hctx| self.run(hctx));
        }

        /// Runs hardware queue `hctx` until its list is empty or the resource is short.
        fn run(&self, hctx: usize) {
            let list = &self.lists[hctx / self.spacing];
            loop {
                let Some(rq) = list.lock().unwrap().pop() else {
                    return;
                };
                if self.take() {
                    self.dispatched.fetch_add(1, Ordering::SeqCst);
                    let _ = rq;
                    self.complete();
                    continue;
                }
                list.lock().unwrap().push(rq);
                self.waiting.mark(hctx);
                // The second look, after the mark.
                if self.free.load(Ordering::SeqCst) == 0 {
                    return;
                }
            }
        }
    }

    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    for spacing in [1, 64] {
        builder.check(move || {
            let world = Arc::new(World {
                lists: [Mutex::new(Vec::new()), Mutex::new(Vec::new())],
                free: AtomicUsize::new(0),
                waiting: RestartSet::new(2 * spacing).unwrap(),
                dispatched: AtomicUsize::new(0),
                spacing,
            });
            let submitters: Vec<_> = (0..2)
                .map(|i| {
                    let world = world.clone();
                    thread::spawn(move || {
                        world.lists[i].lock().unwrap().push(i as u32);
                        world.run(i * world.spacing);
                    })
                })
                .collect();
            // The holder of the only unit completes.
            world.complete();
            for s in submitters {
                s.join().unwrap();
            }
            assert_eq!(
                world.dispatched.load(Ordering::SeqCst),
                2,
                "a request was stranded: {:?}",
                world.waiting
            );
            assert!(world.lists.iter().all(|l| l.lock().unwrap().is_empty()));
        });
    }
}

/// A bio ends on another thread (the interrupt) while its submitter waits on the bio's
/// `Completion`: the waiter is always woken with the bio's status, and the completion can be
/// dropped as soon as the wait returns (the ending side touches nothing after waking it).
#[test]
fn a_completion_wakes_its_waiter_whenever_the_bio_ends() {
    use blkmq_core::{Bio, Completion, Op, Status};

    model(|| {
        let mut completion = Box::pin(Completion::new());
        // SAFETY: the bio is ended once, by the thread below.
        let bio = unsafe { completion.as_mut().attach(Bio::new(Op::Read, 0, 8)) };
        let interrupt = thread::spawn(move || bio.complete(Status::Medium));
        let status = loom::future::block_on(core::future::poll_fn(|cx| {
            completion.as_ref().poll_status(cx)
        }));
        assert_eq!(status, Status::Medium);
        drop(completion);
        interrupt.join().unwrap();
    });
}

/// Dropping a completion whose bio has not ended waits for the end instead of leaving the
/// bio pointing at freed memory.
#[test]
fn dropping_a_completion_waits_for_its_bio() {
    use blkmq_core::{Bio, Completion, Op, Status};

    model(|| {
        let ended = Arc::new(AtomicBool::new(false));
        let mut completion = Box::pin(Completion::new());
        // SAFETY: the bio is ended once, by the thread below.
        let bio = unsafe { completion.as_mut().attach(Bio::new(Op::Write, 0, 8)) };
        let interrupt = {
            let ended = ended.clone();
            thread::spawn(move || {
                ended.store(true, Ordering::SeqCst);
                bio.complete(Status::Ok);
            })
        };
        drop(completion);
        assert!(ended.load(Ordering::SeqCst));
        interrupt.join().unwrap();
    });
}

/// An event of the trace ring's models: `time_ns` names it.
fn trace_event(cpu: u32, time_ns: u64) -> blkmq_core::TraceEvent {
    blkmq_core::TraceEvent {
        cpu,
        ..blkmq_core::TraceEvent::new(blkmq_core::Action::Queue, time_ns)
    }
}

/// A direct issue's D of the trace ring's models (its Q and G with it): `time_ns` names it.
fn issue_event(cpu: u32, time_ns: u64) -> blkmq_core::TraceEvent {
    blkmq_core::TraceEvent {
        cpu,
        hctx: 0,
        tag: 1,
        ..blkmq_core::TraceEvent::new(blkmq_core::Action::Issue, time_ns)
    }
}

/// A writer publishes into a trace ring (a direct issue's three events in one slot, then
/// one event) while its reader drains it: every event is read once, whole and in order,
/// numbered in order, none lost, none dropped (the ring has room for them all).
#[test]
fn trace_ring_writer_against_its_reader() {
    use blkmq_core::{RingTracer, Tracer};
    model(|| {
        let rings = Arc::new(RingTracer::new(1, 2));
        let writer = {
            let rings = rings.clone();
            thread::spawn(move || {
                rings.direct_issue(&issue_event(0, 1));
                rings.event(&trace_event(0, 2));
            })
        };
        let mut seen = Vec::new();
        rings.drain(|e| seen.push((e.time_ns, e.seq, e.action.letter())));
        writer.join().unwrap();
        rings.drain(|e| seen.push((e.time_ns, e.seq, e.action.letter())));
        assert_eq!(seen, [(1, 0, 'Q'), (1, 1, 'G'), (1, 2, 'D'), (2, 3, 'Q')]);
        assert_eq!(rings.dropped(), 0);
    });
}

/// Two writers on one CPU's full ring while the reader frees one slot: each event is read
/// once or counted dropped, never both, never overwritten; each writer's in its order.
#[test]
fn trace_ring_two_writers_and_a_reader_on_a_full_ring() {
    use blkmq_core::{RingTracer, Tracer};
    model(|| {
        let rings = Arc::new(RingTracer::new(1, 2));
        rings.event(&trace_event(0, 10));
        rings.event(&trace_event(0, 11));
        let writers: Vec<_> = [20u64, 30]
            .into_iter()
            .map(|t| {
                let rings = rings.clone();
                thread::spawn(move || rings.event(&trace_event(0, t)))
            })
            .collect();
        let mut seen = Vec::new();
        let mut first = None;
        rings.drain(|e| {
            if first.is_none() {
                first = Some(e.time_ns);
            }
            seen.push(e.time_ns);
        });
        for w in writers {
            w.join().unwrap();
        }
        rings.drain(|e| seen.push(e.time_ns));
        assert_eq!(&seen[..2], [10, 11]);
        let mut rest = seen[2..].to_vec();
        rest.sort_unstable();
        rest.dedup();
        assert_eq!(rest.len(), seen.len() - 2, "an event read twice: {seen:?}");
        assert!(rest.iter().all(|t| [20, 30].contains(t)));
        assert_eq!(seen.len() as u64 - 2 + rings.dropped(), 2);
    });
}

/// Two readers drain one ring (a direct issue's three events in its first slot) while a
/// writer publishes: each event is read once and whole, by one of them, each reader's in
/// the ring's order, numbered once each, none dropped.
#[test]
fn trace_ring_two_readers_and_a_writer() {
    use blkmq_core::{RingTracer, Tracer};
    model(|| {
        let rings = Arc::new(RingTracer::new(1, 2));
        rings.direct_issue(&issue_event(0, 1));
        let writer = {
            let rings = rings.clone();
            thread::spawn(move || rings.event(&trace_event(0, 2)))
        };
        let reader = {
            let rings = rings.clone();
            thread::spawn(move || {
                let mut seen = Vec::new();
                rings.drain(|e| seen.push((e.time_ns, e.seq)));
                seen
            })
        };
        let mut mine = Vec::new();
        rings.drain(|e| mine.push((e.time_ns, e.seq)));
        writer.join().unwrap();
        let theirs = reader.join().unwrap();
        rings.drain(|e| mine.push((e.time_ns, e.seq)));
        for seen in [&mine, &theirs] {
            assert!(
                seen.windows(2).all(|w| w[0].1 < w[1].1),
                "out of order: {seen:?}"
            );
        }
        let mut all: Vec<_> = mine.iter().chain(&theirs).copied().collect();
        all.sort_unstable();
        assert_eq!(all, [(1, 0), (1, 1), (1, 2), (2, 3)]);
        assert_eq!(rings.dropped(), 0);
    });
}
