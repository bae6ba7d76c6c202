//! What a user of the tag layer relies on: configuration checks, tag numbering, per-queue and
//! shared host tags, fair sharing, waiting, scheduler tags, bio chains, lookups, clean-up.

#![cfg(not(loom))]

use std::cell::RefCell;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use blkmq_core::{
    Alloc, Bio, ConfigError, MAX_DEPTH, MAX_HW_QUEUES, MAX_SCHED_DEPTH, NO_TAG, Op, QueueTags, Rq,
    RqState, Status, StdPlatform, TagError, TagSet, TagSetFlags, unique_tag_hwq, unique_tag_tag,
};

type Set = TagSet<usize, StdPlatform>;

fn set(depth: usize, hw: usize, flags: TagSetFlags) -> Arc<Set> {
    TagSet::builder(depth)
        .hw_queues(hw)
        .flags(flags)
        .build(StdPlatform::with_cpus(2), |init| init.tag)
        .unwrap()
}

fn alloc_all(queue: &QueueTags<usize, StdPlatform>, a: Alloc) -> Vec<Rq> {
    let mut held = Vec::new();
    while let Ok(rq) = queue.alloc(&a) {
        held.push(rq);
    }
    held
}

fn free_all(queue: &QueueTags<usize, StdPlatform>, held: Vec<Rq>) {
    for rq in held {
        queue.free(rq).unwrap();
    }
}

static_assertions::assert_impl_all!(TagSet<usize, StdPlatform>: Send, Sync);
static_assertions::assert_impl_all!(QueueTags<usize, StdPlatform>: Send, Sync);
static_assertions::assert_impl_all!(Rq: Send, Sync);
static_assertions::assert_not_impl_any!(Rq: Clone, Copy);
// Two words: a token moves from call to call in registers, not through memory.
static_assertions::assert_eq_size!(Rq, [u64; 2]);
// And so is a maybe-token, as an elevator's dispatch returns one.
static_assertions::assert_eq_size!(Option<Rq>, [u64; 2]);

#[test]
fn bad_configurations_are_errors() {
    let build = |b: blkmq_core::TagSetBuilder| b.build(StdPlatform::new(), |_| ()).map(|_| ());
    assert_eq!(build(TagSet::builder(0)), Err(ConfigError::ZeroDepth));
    assert_eq!(
        build(TagSet::builder(MAX_DEPTH + 1)),
        Err(ConfigError::DepthTooLarge {
            depth: MAX_DEPTH + 1,
            max: MAX_DEPTH
        })
    );
    assert!(build(TagSet::builder(MAX_DEPTH)).is_ok());
    assert_eq!(
        build(TagSet::builder(8).reserved(8)),
        Err(ConfigError::TooManyReserved {
            reserved: 8,
            depth: 8
        })
    );
    assert_eq!(
        build(TagSet::builder(8).hw_queues(0)),
        Err(ConfigError::ZeroHwQueues)
    );
    assert!(matches!(
        build(TagSet::builder(8).hw_queues(MAX_HW_QUEUES + 1)),
        Err(ConfigError::TooManyHwQueues { .. })
    ));
    assert_eq!(
        build(TagSet::builder(8).max_queues(0)),
        Err(ConfigError::ZeroQueues)
    );
    // Every error explains itself.
    assert!(ConfigError::ZeroDepth.to_string().contains("depth"));
}

#[test]
fn reserved_tags_are_numbered_first_and_only_on_request() {
    let set = TagSet::builder(8)
        .reserved(2)
        .build(StdPlatform::new(), |_| ())
        .unwrap();
    let queue = set.attach().unwrap();
    let normal: Vec<Rq> = (0..6)
        .map(|_| queue.alloc(&Alloc::new(0, 0)).unwrap())
        .collect();
    assert!(normal.iter().all(|rq| rq.tag() >= 2));
    assert_eq!(queue.alloc(&Alloc::new(0, 0)), Err(TagError::WouldBlock));
    let r0 = queue.alloc(&Alloc::new(0, 0).reserved()).unwrap();
    let r1 = queue.alloc(&Alloc::new(0, 0).reserved()).unwrap();
    let mut reserved = [r0.tag(), r1.tag()];
    reserved.sort();
    assert_eq!(reserved, [0, 1]);
    assert_eq!(
        queue.alloc(&Alloc::new(0, 0).reserved()),
        Err(TagError::WouldBlock)
    );
    assert_eq!(set.busy(), 8);
    for rq in normal.into_iter().chain([r0, r1]) {
        queue.free(rq).unwrap();
    }
    assert_eq!(set.busy(), 0);

    let none = set_without_reserved();
    let q = none.attach().unwrap();
    assert_eq!(
        q.alloc(&Alloc::new(0, 0).reserved()),
        Err(TagError::NoReservedTags)
    );
}

fn set_without_reserved() -> Arc<Set> {
    set(4, 1, TagSetFlags::empty())
}

#[test]
fn per_queue_tags_are_separate_and_shared_host_tags_are_one_space() {
    let per = set(4, 3, TagSetFlags::empty());
    assert_eq!(per.nr_maps(), 3);
    let queue = per.attach().unwrap();
    let held: Vec<Vec<Rq>> = (0..3)
        .map(|h| alloc_all(&queue, Alloc::new(h, 0)))
        .collect();
    assert!(
        held.iter().all(|h| h.len() == 4),
        "each hardware queue has its own 4 tags"
    );
    for h in held {
        free_all(&queue, h);
    }

    let shared = set(4, 3, TagSetFlags::SHARED_HOST_TAGS);
    assert_eq!(shared.nr_maps(), 1);
    let queue = shared.attach().unwrap();
    let mut held = alloc_all(&queue, Alloc::new(0, 0));
    assert_eq!(held.len(), 4);
    for h in 1..3 {
        assert_eq!(queue.alloc(&Alloc::new(h, 0)), Err(TagError::WouldBlock));
    }
    // A tag freed by any queue serves any other, and the request records its queue.
    queue.free(held.pop().unwrap()).unwrap();
    let rq = queue.alloc(&Alloc::new(2, 1)).unwrap();
    let request = queue.request(&rq).unwrap();
    assert_eq!(request.hctx(), 2);
    let unique = request.unique_tag().unwrap();
    assert_eq!(unique_tag_hwq(unique), 2);
    assert_eq!(unique_tag_tag(unique), rq.tag());
    held.push(rq);
    free_all(&queue, held);
    assert_eq!(shared.busy(), 0);
}

#[test]
fn a_hardware_queue_out_of_range_is_an_error() {
    let set = self::set(4, 2, TagSetFlags::empty());
    let queue = set.attach().unwrap();
    assert_eq!(
        queue.alloc(&Alloc::new(2, 0)),
        Err(TagError::NoSuchHwQueue {
            hctx: 2,
            nr_hw_queues: 2
        })
    );
    assert!(queue.tag_to_rq(5, 0).is_none());
}

#[test]
fn fair_sharing_caps_each_active_queue_and_idle_gives_the_share_back() {
    let set = self::set(64, 1, TagSetFlags::empty());
    let a = set.attach().unwrap();
    // Alone, a queue takes everything.
    let all = alloc_all(&a, Alloc::new(0, 0));
    assert_eq!(all.len(), 64);
    free_all(&a, all);

    let b = set.attach().unwrap();
    assert!(set.is_shared());
    let held_a = alloc_all(&a, Alloc::new(0, 0));
    assert_eq!(held_a.len(), 64, "only a is active yet");
    free_all(&a, held_a);
    let held_b = alloc_all(&b, Alloc::new(0, 0));
    assert_eq!(held_b.len(), 32, "a and b are active now: ceil(64 / 2)");
    assert_eq!(set.active_queues(0), 2);
    let held_a = alloc_all(&a, Alloc::new(0, 0));
    assert_eq!(held_a.len(), 32);
    assert_eq!(a.in_flight(0), 32);

    // A third active queue shrinks every share to ceil(64 / 3) = 22; the others are over it.
    let c = set.attach().unwrap();
    let one = c.alloc(&Alloc::new(0, 0));
    assert_eq!(one, Err(TagError::WouldBlock), "the bitmap is full");
    assert_eq!(set.active_queues(0), 3);
    assert_eq!(set.fair_share(0), 22);
    free_all(&a, held_a);
    assert!(a.mark_idle(0));
    assert!(!a.mark_idle(0), "already idle");
    assert_eq!(set.fair_share(0), 32);
    let held_c = alloc_all(&c, Alloc::new(0, 0));
    assert_eq!(held_c.len(), 32);
    // Reserved tags ignore the share.
    free_all(&b, held_b);
    free_all(&c, held_c);
    assert_eq!(set.busy(), 0);
}

#[test]
fn the_fair_share_is_never_below_four() {
    let set = self::set(8, 1, TagSetFlags::empty());
    let queues: Vec<_> = (0..4).map(|_| set.attach().unwrap()).collect();
    let mut held = Vec::new();
    for q in &queues {
        held.push(q.alloc(&Alloc::new(0, 0)).unwrap());
    }
    assert_eq!(set.active_queues(0), 4);
    assert_eq!(set.fair_share(0), 4, "ceil(8 / 4) = 2, raised to 4");
    for rq in held.drain(..) {
        let owner = queues.iter().find(|q| q.request(&rq).is_ok()).unwrap();
        owner.free(rq).unwrap();
    }
    let mine = alloc_all(&queues[0], Alloc::new(0, 0));
    assert_eq!(mine.len(), 4);
    free_all(&queues[0], mine);
}

#[test]
fn the_wake_batch_follows_the_number_of_active_queues() {
    let set = self::set(256, 1, TagSetFlags::empty());
    let a = set.attach().unwrap();
    let b = set.attach().unwrap();
    assert_eq!(set.wake_batch(0), 8);
    let ra = a.alloc(&Alloc::new(0, 0)).unwrap();
    let rb = b.alloc(&Alloc::new(0, 0)).unwrap();
    assert_eq!(set.active_queues(0), 2);
    assert_eq!(set.wake_batch(0), 8, "128 each: still 8");
    let queues: Vec<_> = (0..6).map(|_| set.attach().unwrap()).collect();
    let held: Vec<Rq> = queues
        .iter()
        .map(|q| q.alloc(&Alloc::new(0, 0)).unwrap())
        .collect();
    assert_eq!(set.active_queues(0), 8);
    assert_eq!(set.wake_batch(0), 4, "32 each: 32 / 8");
    for (q, rq) in queues.iter().zip(held) {
        q.free(rq).unwrap();
        assert!(q.mark_idle(0));
    }
    assert_eq!(set.wake_batch(0), 8);
    a.free(ra).unwrap();
    b.free(rb).unwrap();
}

struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_waiter_over_its_share_is_woken_by_its_own_queues_free() {
    let set = self::set(16, 1, TagSetFlags::empty());
    let a = set.attach().unwrap();
    let b = set.attach().unwrap();
    let held_b = b.alloc(&Alloc::new(0, 0)).unwrap();
    let mut held_a = alloc_all(&a, Alloc::new(0, 0));
    assert_eq!(held_a.len(), 8);
    assert!(set.busy() < 16, "the bitmap still has free tags");

    let count = Arc::new(CountingWaker(AtomicUsize::new(0)));
    let waker = Waker::from(Arc::clone(&count));
    let mut cx = Context::from_waker(&waker);
    let mut waiting = pin!(a.alloc_async(Alloc::new(0, 0)));
    assert!(waiting.as_mut().poll(&mut cx).is_pending());
    a.free(held_a.pop().unwrap()).unwrap();
    assert_eq!(count.0.load(Ordering::SeqCst), 1, "woken by the free");
    let Poll::Ready(Ok(rq)) = waiting.as_mut().poll(&mut cx) else {
        panic!("the share has room again");
    };
    held_a.push(rq);
    free_all(&a, held_a);
    b.free(held_b).unwrap();
}

#[test]
fn blocking_allocation_waits_for_a_free_on_another_thread() {
    let set = self::set(2, 1, TagSetFlags::empty());
    let queue = Arc::new(set.attach().unwrap());
    let held = alloc_all(&queue, Alloc::new(0, 0));
    let q = Arc::clone(&queue);
    let waiter = std::thread::spawn(move || {
        let rq = q.alloc_blocking(Alloc::new(0, 1)).unwrap();
        let tag = rq.tag();
        q.free(rq).unwrap();
        tag
    });
    let mut it = held.into_iter();
    let first = it.next().unwrap();
    let freed_tag = first.tag();
    queue.free(first).unwrap();
    assert_eq!(waiter.join().unwrap(), freed_tag);
    free_all(&queue, it.collect());
    assert_eq!(set.busy(), 0);
    // Errors come back at once, without waiting.
    assert_eq!(
        queue.alloc_blocking(Alloc::new(9, 0)).unwrap_err(),
        TagError::NoSuchHwQueue {
            hctx: 9,
            nr_hw_queues: 1
        }
    );
}

#[test]
fn batch_allocation_takes_several_tags_and_each_frees_alone() {
    let set = TagSet::builder(64)
        .build(StdPlatform::with_cpus(1), |_| ())
        .unwrap();
    let queue = set.attach().unwrap();
    let mut cache = Vec::new();
    let got = queue.alloc_batch(&Alloc::new(0, 0), 8, &mut cache).unwrap();
    assert_eq!(got, cache.len());
    assert!((2..=8).contains(&got), "one word gives several: {got}");
    let mut tags: Vec<u32> = cache.iter().map(Rq::tag).collect();
    tags.sort();
    tags.dedup();
    assert_eq!(tags.len(), got);
    assert_eq!(set.busy(), got);
    for rq in cache {
        assert_eq!(queue.request(&rq).unwrap().state(), RqState::Idle);
        queue.free(rq).unwrap();
    }
    assert_eq!(set.busy(), 0);
}

#[test]
fn a_token_only_works_on_its_own_queue() {
    let set = self::set(8, 1, TagSetFlags::empty());
    let other_set = self::set(8, 1, TagSetFlags::empty());
    let a = set.attach().unwrap();
    let b = set.attach().unwrap();
    let elsewhere = other_set.attach().unwrap();
    let rq = a.alloc(&Alloc::new(0, 0)).unwrap();
    assert_eq!(b.request(&rq).unwrap_err(), TagError::ForeignRequest);
    assert_eq!(
        elsewhere.request(&rq).unwrap_err(),
        TagError::ForeignRequest
    );
    // A refused free changes nothing, and the token can still be freed by its owner.
    assert_eq!(set.busy(), 1);
    a.free(rq).unwrap();
    assert_eq!(set.busy(), 0);
}

thread_local! {
    static ENDED: RefCell<Vec<(u64, Status)>> = const { RefCell::new(Vec::new()) };
}

fn record(bio: Bio, status: Status) {
    ENDED.with(|e| e.borrow_mut().push((bio.private, status)));
}

fn ended() -> Vec<(u64, Status)> {
    ENDED.with(|e| std::mem::take(&mut *e.borrow_mut()))
}

fn bio(sector: u64, id: u64) -> Bio {
    Bio::new(Op::Write, sector, 8).private(id).end_io(record)
}

#[test]
fn a_request_chains_merged_bios_and_ends_each_once_in_order() {
    let set = self::set(4, 1, TagSetFlags::empty());
    let queue = set.attach().unwrap();
    let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    queue.set_bio(&mut rq, bio(16, 2)).unwrap();
    queue.append_bio(&mut rq, bio(24, 3)).unwrap().unwrap();
    queue.prepend_bio(&mut rq, bio(8, 1)).unwrap().unwrap();
    queue.append_bio(&mut rq, bio(32, 4)).unwrap().unwrap();
    let io = queue.io(&rq).unwrap();
    assert_eq!((io.sector(), io.sectors(), io.nr_bios()), (8, 32, 4));
    assert_eq!(io.op(), Op::Write);
    let mut order = Vec::new();
    queue.for_each_bio(&rq, |b| order.push(b.private)).unwrap();
    assert_eq!(order, [1, 2, 3, 4]);
    assert_eq!(set.bio_slots_in_use(), 3);
    queue.start(&mut rq, 5).unwrap();
    assert_eq!(queue.request(&rq).unwrap().state(), RqState::InFlight);
    queue.complete(rq, Status::Medium).unwrap();
    assert_eq!(
        ended(),
        [1, 2, 3, 4].map(|id| (id, Status::Medium)).to_vec()
    );
    assert_eq!(set.bio_slots_in_use(), 0);
}

#[test]
fn freeing_a_request_with_bios_ends_them_with_an_error() {
    let set = self::set(4, 1, TagSetFlags::empty());
    let queue = set.attach().unwrap();
    let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    queue.set_bio(&mut rq, bio(0, 10)).unwrap();
    queue.append_bio(&mut rq, bio(8, 11)).unwrap().unwrap();
    queue.free(rq).unwrap();
    assert_eq!(ended(), [(10, Status::IoErr), (11, Status::IoErr)]);
    assert_eq!(set.bio_slots_in_use(), 0);
}

#[test]
fn a_merge_is_refused_when_the_bio_pool_is_empty() {
    let set = TagSet::builder(4)
        .bio_slots(1)
        .build(StdPlatform::new(), |_| ())
        .unwrap();
    let queue = set.attach().unwrap();
    let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    queue.set_bio(&mut rq, bio(0, 20)).unwrap();
    queue.append_bio(&mut rq, bio(8, 21)).unwrap().unwrap();
    let refused = queue.append_bio(&mut rq, bio(16, 22)).unwrap();
    assert_eq!(refused.map_err(|b| b.private), Err(22));
    assert_eq!(queue.io(&rq).unwrap().nr_bios(), 2);
    queue.complete(rq, Status::Ok).unwrap();
    assert_eq!(ended(), [(20, Status::Ok), (21, Status::Ok)]);
}

#[test]
fn merging_two_requests_moves_every_bio() {
    let set = self::set(4, 1, TagSetFlags::empty());
    let queue = set.attach().unwrap();
    let mut a = queue.alloc(&Alloc::new(0, 0)).unwrap();
    let mut b = queue.alloc(&Alloc::new(0, 0)).unwrap();
    queue.set_bio(&mut a, bio(0, 30)).unwrap();
    queue.append_bio(&mut a, bio(8, 31)).unwrap().unwrap();
    queue.set_bio(&mut b, bio(16, 32)).unwrap();
    queue.append_bio(&mut b, bio(24, 33)).unwrap().unwrap();
    assert!(queue.merge_requests(&mut a, &mut b).unwrap());
    assert_eq!(queue.io(&b).unwrap().nr_bios(), 0);
    let io = queue.io(&a).unwrap();
    assert_eq!((io.sector(), io.sectors(), io.nr_bios()), (0, 32, 4));
    queue.free(b).unwrap();
    assert!(ended().is_empty(), "b had no bio left to end");
    queue.complete(a, Status::Ok).unwrap();
    assert_eq!(
        ended().iter().map(|e| e.0).collect::<Vec<_>>(),
        [30, 31, 32, 33]
    );
    assert_eq!(set.bio_slots_in_use(), 0);
}

#[test]
fn the_generation_settles_a_completion_race() {
    let set = self::set(1, 1, TagSetFlags::empty());
    let queue = set.attach().unwrap();
    let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    queue.start(&mut rq, 0).unwrap();
    let request = queue.tag_to_rq(0, rq.tag()).unwrap();
    let (generation, state) = request.snapshot();
    assert_eq!(state, RqState::InFlight);
    assert_eq!(request.deadline_ns(), set.timeout_ns());
    queue.free(rq).unwrap();
    // A late timeout handler that saw the old generation cannot complete the new I/O.
    let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    queue.start(&mut rq, 0).unwrap();
    assert_ne!(request.generation(), generation);
    assert!(!request.try_complete(generation));
    assert!(request.try_complete(request.generation()));
    queue.free(rq).unwrap();
    assert!(
        queue.tag_to_rq(0, 0).is_none(),
        "a free tag maps to no request"
    );
}

#[test]
fn scheduler_requests_take_driver_tags_at_dispatch() {
    let set = self::set(4, 2, TagSetFlags::empty());
    let mut queue = set.attach().unwrap();
    assert_eq!(queue.nr_requests(), None);
    queue
        .attach_scheduler(None, |init| 1000 + init.tag)
        .unwrap();
    assert_eq!(queue.nr_requests(), Some(8), "2 x depth");
    let mut rqs = alloc_all(&queue, Alloc::new(1, 0));
    assert_eq!(rqs.len(), 8);
    assert_eq!(set.busy(), 0, "no driver tag yet");
    let mut dispatched = 0;
    for rq in rqs.iter_mut() {
        if queue.get_driver_tag(rq).unwrap() {
            dispatched += 1;
        }
    }
    assert_eq!(dispatched, 4, "only 4 driver tags on hctx 1");
    assert_eq!(set.busy(), 4);
    let mut busy = Vec::new();
    queue.for_each_busy(Some(1), |b| {
        busy.push((b.hctx, b.tag, *b.request.payload()));
        true
    });
    assert_eq!(busy.len(), 4);
    assert!(
        busy.iter()
            .all(|&(h, _, payload)| h == 1 && payload >= 1000)
    );
    for &(_, tag, payload) in &busy {
        assert_eq!(*queue.tag_to_rq(1, tag).unwrap().payload(), payload);
    }
    // Put one back, as a dispatch that found the driver busy does.
    let holder = rqs
        .iter_mut()
        .find(|rq| queue.request(rq).unwrap().driver_tag() != NO_TAG)
        .unwrap();
    queue.put_driver_tag(holder).unwrap();
    assert_eq!(queue.put_driver_tag(holder), Err(TagError::DriverTag));
    assert_eq!(set.busy(), 3);
    assert_eq!(queue.detach_scheduler(), Err(TagError::Busy));
    free_all(&queue, rqs);
    assert_eq!((set.busy(), queue.sched_busy()), (0, 0));
    queue.detach_scheduler().unwrap();
    assert_eq!(queue.detach_scheduler(), Err(TagError::NoScheduler));
    let rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    assert_eq!(set.busy(), 1, "driver tags again");
    queue.free(rq).unwrap();
}

#[test]
fn scheduler_tags_check_their_limits() {
    let set = self::set(4, 1, TagSetFlags::empty());
    let mut queue = set.attach().unwrap();
    assert!(matches!(
        queue.attach_scheduler(Some(0), |_| 0),
        Err(ConfigError::BadNrRequests { .. })
    ));
    assert!(matches!(
        queue.attach_scheduler(Some(MAX_SCHED_DEPTH + 1), |_| 0),
        Err(ConfigError::BadNrRequests { .. })
    ));
    assert!(
        queue.set_min_shallow_depth(1).is_err(),
        "no scheduler tags yet"
    );
    queue.attach_scheduler(Some(32), |_| 0).unwrap();
    assert!(queue.set_min_shallow_depth(0).is_err());
    assert!(queue.set_min_shallow_depth(33).is_err());
    // Shallow allocations need the limit declared first, so no wake-up is lost.
    assert!(matches!(
        queue.alloc(&Alloc::new(0, 0).shallow(2)),
        Err(TagError::Bitmap(_))
    ));
    queue.set_min_shallow_depth(2).unwrap();
    let shallow = alloc_all(&queue, Alloc::new(0, 0).shallow(2));
    assert!(
        shallow.len() <= 2,
        "a shallow caller stays within its limit"
    );
    free_all(&queue, shallow);
    queue.set_nr_requests(16).unwrap();
    assert_eq!(queue.nr_requests(), Some(16));
    assert!(queue.set_nr_requests(33).is_err());
    let held = alloc_all(&queue, Alloc::new(0, 0));
    assert_eq!(held.len(), 16);
    free_all(&queue, held);
}

#[test]
fn update_depth_stays_within_the_initial_depth() {
    let set = TagSet::builder(16)
        .reserved(2)
        .build(StdPlatform::new(), |_| ())
        .unwrap();
    let queue = set.attach().unwrap();
    set.update_depth(6).unwrap();
    let held: Vec<Rq> = std::iter::from_fn(|| queue.alloc(&Alloc::new(0, 0)).ok()).collect();
    assert_eq!(held.len(), 4, "6 minus 2 reserved");
    for rq in held {
        queue.free(rq).unwrap();
    }
    assert!(set.update_depth(2).is_err(), "no normal tag would be left");
    assert!(set.update_depth(17).is_err());
    set.update_depth(16).unwrap();
    assert_eq!(set.depth(), 16);
}

#[test]
fn busy_iteration_sees_each_queue_s_requests() {
    let set = self::set(8, 2, TagSetFlags::SHARED_HOST_TAGS);
    let a = set.attach().unwrap();
    let b = set.attach().unwrap();
    let ra: Vec<Rq> = (0..3)
        .map(|_| a.alloc(&Alloc::new(0, 0)).unwrap())
        .collect();
    let rb: Vec<Rq> = (0..2)
        .map(|_| b.alloc(&Alloc::new(1, 0)).unwrap())
        .collect();
    let mut all = 0;
    set.for_each_busy(|_| {
        all += 1;
        true
    });
    assert_eq!(all, 5);
    let mut of_b = Vec::new();
    b.for_each_busy(None, |busy| {
        of_b.push(busy.hctx);
        true
    });
    assert_eq!(of_b, [1, 1]);
    let mut first_only = 0;
    set.for_each_busy(|_| {
        first_only += 1;
        false
    });
    assert_eq!(first_only, 1, "stops when told");
    free_all(&a, ra);
    free_all(&b, rb);
}

#[test]
fn dropping_a_queue_frees_what_it_still_holds() {
    let set = self::set(8, 2, TagSetFlags::empty());
    let a = set.attach().unwrap();
    let mut b = set.attach().unwrap();
    b.attach_scheduler(Some(8), |_| 0).unwrap();
    let kept = a.alloc(&Alloc::new(0, 0)).unwrap();
    let forgotten = alloc_all(&a, Alloc::new(1, 0));
    let mut sched: Vec<Rq> = (0..3)
        .map(|_| b.alloc(&Alloc::new(0, 0)).unwrap())
        .collect();
    assert!(b.get_driver_tag(&mut sched[0]).unwrap());
    let mut with_bio = b.alloc(&Alloc::new(1, 0)).unwrap();
    b.set_bio(&mut with_bio, bio(0, 40)).unwrap();
    drop(forgotten); // tokens dropped without being freed
    drop(sched);
    drop(with_bio);
    assert!(set.busy() > 1);
    assert_eq!(set.nr_queues(), 2);
    drop(b);
    assert_eq!(set.nr_queues(), 1);
    assert_eq!(ended(), [(40, Status::IoErr)], "no bio is lost");
    drop(a);
    assert_eq!(set.busy(), 0, "every tag came back");
    assert_eq!(set.nr_queues(), 0);
    let _ = kept;
}

#[test]
fn attaching_beyond_the_limit_is_refused() {
    let set = TagSet::builder(8)
        .max_queues(2)
        .build(StdPlatform::new(), |_| ())
        .unwrap();
    let a = set.attach().unwrap();
    let b = set.attach().unwrap();
    assert_eq!(
        set.attach().unwrap_err(),
        TagError::TooManyQueues { max: 2 }
    );
    drop(b);
    let c = set.attach().unwrap();
    drop((a, c));
}

#[test]
fn threads_hammering_a_shared_set_never_share_a_tag() {
    let set = self::set(16, 4, TagSetFlags::SHARED_HOST_TAGS);
    let queues: Vec<Arc<QueueTags<usize, StdPlatform>>> =
        (0..2).map(|_| Arc::new(set.attach().unwrap())).collect();
    let owners: Arc<Vec<AtomicUsize>> = Arc::new((0..16).map(|_| AtomicUsize::new(0)).collect());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let queue = Arc::clone(&queues[t % 2]);
            let owners = Arc::clone(&owners);
            std::thread::spawn(move || {
                for i in 0..5000 {
                    let rq = queue.alloc_blocking(Alloc::new(t, t)).unwrap();
                    let tag = rq.tag() as usize;
                    assert_eq!(
                        owners[tag].swap(t + 1, Ordering::SeqCst),
                        0,
                        "tag {tag} held twice"
                    );
                    if i % 7 == 0 {
                        std::thread::yield_now();
                    }
                    owners[tag].store(0, Ordering::SeqCst);
                    queue.free(rq).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(set.busy(), 0);
}

#[test]
fn a_token_kept_past_its_queue_never_frees_a_later_request() {
    let set = self::set(1, 1, TagSetFlags::empty());
    let a = set.attach().unwrap();
    let stale = a.alloc(&Alloc::new(0, 0)).unwrap();
    drop(a); // frees the request behind `stale`
    assert_eq!(set.busy(), 0);
    let c = set.attach().unwrap();
    let mine = c.alloc(&Alloc::new(0, 0)).unwrap();
    assert_eq!(mine.tag(), stale.tag(), "the same request, allocated again");
    assert_eq!(c.request(&stale).unwrap_err(), TagError::ForeignRequest);
    assert_eq!(c.free(stale).unwrap_err().error, TagError::ForeignRequest);
    assert_eq!(set.busy(), 1, "the refused free changed nothing");
    c.free(mine).unwrap();
    assert_eq!(set.busy(), 0);
}

#[test]
fn limits_that_need_scheduler_tags_are_refused_without_them() {
    let set = TagSet::builder(8)
        .flags(TagSetFlags::NO_SCHED)
        .build(StdPlatform::new(), |_| ())
        .unwrap();
    let mut queue = set.attach().unwrap();
    assert_eq!(
        queue.attach_scheduler(None, |_| ()),
        Err(ConfigError::NoScheduler)
    );
    let other = set.attach().unwrap();
    assert_eq!(
        queue.alloc(&Alloc::new(0, 0).shallow(2)),
        Err(TagError::NoScheduler)
    );
    assert_eq!(set.active_queues(0), 0, "the refusal changed nothing");
    drop(other);
}

#[test]
fn a_hardware_queue_that_does_not_exist_has_no_standing() {
    let set = self::set(8, 2, TagSetFlags::SHARED_HOST_TAGS);
    let a = set.attach().unwrap();
    let b = set.attach().unwrap();
    let rq = a.alloc(&Alloc::new(0, 0)).unwrap();
    assert!(a.is_active(1), "one map serves both hardware queues");
    assert!(!a.is_active(2));
    assert_eq!(
        (a.in_flight(2), set.active_queues(2), set.fair_share(2)),
        (0, 0, 0)
    );
    assert_eq!(set.wake_batch(2), 0);
    a.free(rq).unwrap();
    assert!(!a.mark_idle(2), "no such hardware queue to idle");
    assert!(a.is_active(0));
    drop(b);
}

#[test]
fn a_bio_pool_of_no_slot_refuses_every_merge() {
    let set = TagSet::builder(2)
        .bio_slots(0)
        .build(StdPlatform::new(), |_| ())
        .unwrap();
    let queue = set.attach().unwrap();
    let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    queue.set_bio(&mut rq, bio(0, 50)).unwrap();
    let refused = queue.append_bio(&mut rq, bio(8, 51)).unwrap();
    assert_eq!(refused.map_err(|b| b.private), Err(51));
    assert_eq!(set.bio_slots_in_use(), 0);
    queue.complete(rq, Status::Ok).unwrap();
    assert_eq!(ended(), [(50, Status::Ok)]);
}

fn explode(_: Bio, _: Status) {
    panic!("a completion callback that panics");
}

#[test]
fn a_panicking_completion_leaves_the_request_consistent() {
    let set = self::set(4, 1, TagSetFlags::empty());
    let queue = set.attach().unwrap();
    let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    queue.set_bio(&mut rq, bio(0, 60)).unwrap();
    queue
        .append_bio(&mut rq, Bio::new(Op::Write, 8, 8).end_io(explode))
        .unwrap()
        .unwrap();
    queue.append_bio(&mut rq, bio(16, 62)).unwrap().unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        queue.set_bio(&mut rq, bio(24, 63)).unwrap();
    }));
    assert!(result.is_err());
    assert_eq!(
        ended(),
        [(60, Status::IoErr)],
        "the first bio ended before the panic"
    );
    // The exploded bio is gone; the third is still chained, with its slot.
    assert_eq!(queue.io(&rq).unwrap().nr_bios(), 1);
    assert_eq!(set.bio_slots_in_use(), 1);
    // Another request may take the freed slot; nothing is shared.
    let mut other = queue.alloc(&Alloc::new(0, 0)).unwrap();
    queue.set_bio(&mut other, bio(100, 70)).unwrap();
    queue.append_bio(&mut other, bio(108, 71)).unwrap().unwrap();
    queue.free(rq).unwrap();
    assert_eq!(ended(), [(62, Status::IoErr)]);
    queue.complete(other, Status::Ok).unwrap();
    assert_eq!(ended(), [(70, Status::Ok), (71, Status::Ok)]);
    assert_eq!(set.bio_slots_in_use(), 0);
    assert_eq!(set.busy(), 0);
}

#[test]
fn a_panicking_completion_while_a_queue_drops_leaves_the_set_whole() {
    let set = self::set(4, 1, TagSetFlags::empty());
    let mut queue = set.attach().unwrap();
    queue.attach_scheduler(Some(4), |_| 0).unwrap();
    let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    queue
        .set_bio(&mut rq, Bio::new(Op::Read, 0, 8).end_io(explode))
        .unwrap();
    assert!(queue.get_driver_tag(&mut rq).unwrap());
    let _leaked_token = rq;
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(queue)));
    assert!(dropped.is_err());
    // Every tag came back and nothing points into the freed scheduler tags.
    assert_eq!((set.busy(), set.nr_queues()), (0, 0));
    let mut seen = 0;
    set.for_each_busy(|_| {
        seen += 1;
        true
    });
    assert_eq!(seen, 0);
}

#[test]
fn a_queue_s_waiter_is_woken_though_another_queue_s_waiters_swallow_the_batch() {
    // Two queues at their shares of 64; many of B's waiters and one of A's. A frees its
    // whole share: the batched wake-ups go to B's waiters first (they are older), which
    // fail on B's share; A's waiter must be woken all the same.
    let set = self::set(64, 1, TagSetFlags::empty());
    let a = set.attach().unwrap();
    let b = set.attach().unwrap();
    let first_a = a.alloc(&Alloc::new(0, 0)).unwrap(); // A counts as active from here
    let held_b = alloc_all(&b, Alloc::new(0, 0));
    let mut held_a = alloc_all(&a, Alloc::new(0, 0));
    held_a.push(first_a);
    assert_eq!((held_a.len(), held_b.len()), (32, 32));

    let b_count = Arc::new(CountingWaker(AtomicUsize::new(0)));
    let b_waker = Waker::from(Arc::clone(&b_count));
    let mut b_cx = Context::from_waker(&b_waker);
    let mut b_waiting: Vec<_> = (0..40)
        .map(|_| Box::pin(b.alloc_async(Alloc::new(0, 0))))
        .collect();
    for w in &mut b_waiting {
        assert!(w.as_mut().poll(&mut b_cx).is_pending());
    }
    let a_count = Arc::new(CountingWaker(AtomicUsize::new(0)));
    let a_waker = Waker::from(Arc::clone(&a_count));
    let mut a_cx = Context::from_waker(&a_waker);
    let mut a_waiting = Box::pin(a.alloc_async(Alloc::new(0, 0)));
    assert!(a_waiting.as_mut().poll(&mut a_cx).is_pending());

    free_all(&a, held_a);
    assert!(
        a_count.0.load(Ordering::SeqCst) >= 1,
        "A's waiter was woken"
    );
    let Poll::Ready(Ok(rq)) = a_waiting.as_mut().poll(&mut a_cx) else {
        panic!("A is under its share and tags are free");
    };
    a.free(rq).unwrap();
    drop(b_waiting);
    free_all(&b, held_b);
    assert_eq!(set.busy(), 0);
}

#[test]
fn update_depth_keeps_the_wake_batch_of_a_shared_map() {
    let set = self::set(64, 1, TagSetFlags::empty());
    let queues: Vec<_> = (0..16).map(|_| set.attach().unwrap()).collect();
    let held: Vec<Rq> = queues
        .iter()
        .map(|q| q.alloc(&Alloc::new(0, 0)).unwrap())
        .collect();
    assert_eq!(set.active_queues(0), 16);
    let batch = set.wake_batch(0);
    assert_eq!(batch, 1, "a share of 4 wakes on every free");
    set.update_depth(64).unwrap();
    assert_eq!(set.wake_batch(0), batch);
    for (q, rq) in queues.iter().zip(held) {
        q.free(rq).unwrap();
    }
}

#[test]
fn a_round_robin_set_hands_out_batches_one_at_a_time() {
    let set = TagSet::builder(16)
        .flags(TagSetFlags::ROUND_ROBIN)
        .build(StdPlatform::with_cpus(1), |init| init.tag)
        .unwrap();
    let queue = set.attach().unwrap();
    let mut cache = Vec::new();
    assert_eq!(
        queue.alloc_batch(&Alloc::new(0, 0), 4, &mut cache).unwrap(),
        4
    );
    let tags: Vec<u32> = cache.iter().map(Rq::tag).collect();
    assert!(
        tags.windows(2).all(|w| w[1] == w[0] + 1),
        "in order: {tags:?}"
    );
    free_all(&queue, cache);
}

#[test]
fn the_owner_s_moves_lose_to_a_racing_completion() {
    let set = self::set(2, 1, TagSetFlags::empty());
    let queue = set.attach().unwrap();
    let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    assert_eq!(
        queue.requeue(&mut rq),
        Err(TagError::WrongState {
            state: RqState::Idle
        })
    );
    queue.start(&mut rq, 0).unwrap();
    assert_eq!(
        queue.start(&mut rq, 0),
        Err(TagError::WrongState {
            state: RqState::InFlight
        })
    );
    let request = queue.tag_to_rq(0, rq.tag()).unwrap();
    let first_dispatch = request.generation();
    // Requeued and started again: a handler still holding the first dispatch loses.
    queue.requeue(&mut rq).unwrap();
    queue.start(&mut rq, 10).unwrap();
    assert!(!request.try_complete(first_dispatch));
    // A timeout handler wins the second dispatch; the owner's requeue then fails.
    assert!(request.try_complete(request.generation()));
    assert_eq!(
        queue.requeue(&mut rq),
        Err(TagError::WrongState {
            state: RqState::Complete
        })
    );
    queue.complete(rq, Status::Timeout).unwrap();
    assert_eq!(set.busy(), 0);
}
