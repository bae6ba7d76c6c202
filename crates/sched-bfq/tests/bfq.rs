//! Behaviour of BFQ, driven directly over scheduler tags with a virtual clock: budgets and
//! their feedback, sector order and FIFO expiry, idling and injection, weight raising and
//! bursts, depth limits, merging, requeues, tunables and statistics.
//!
//! Every expected value follows from the scheduler's rules; nothing depends on wall-clock
//! time.

use blkmq_core::{
    Alloc, Bio, BioFlags, Elevator, ElvCx, IoPrio, IoPrioClass, IssuerId, Op, QueueLimits,
    QueueTags, Rq, Status, StdPlatform, TagSet,
};
use blkmq_sched_bfq::{
    Bfq, BfqError, GroupId, MAX_BACK_SEEK_KIB, MAX_BACK_SEEK_PENALTY, MAX_BUDGET, MAX_EXPIRE_NS,
    MAX_SLICE_IDLE_NS, TunableError, Tunables,
};

const MS: u64 = 1_000_000;

/// A sync read of `issuer` that never merges with another.
fn read(issuer: u32, sector: u64, sectors: u32) -> Bio {
    Bio::new(Op::Read, sector, sectors)
        .issuer(IssuerId(issuer))
        .flags(BioFlags::NOMERGE)
}

/// A scheduler over bare scheduler tags, with a virtual clock.
struct Rig {
    tags: QueueTags<(), StdPlatform>,
    limits: QueueLimits,
    bfq: Bfq,
    now: u64,
}

impl Rig {
    /// Low latency off unless a test turns it on: raising would change every weight.
    fn new(rotational: bool) -> Self {
        let mut bfq = Bfq::new();
        bfq.set_low_latency(false);
        Self::with(bfq, rotational)
    }

    fn with(mut bfq: Bfq, rotational: bool) -> Self {
        let set = TagSet::builder(16)
            .build(StdPlatform::new(), |_| ())
            .unwrap();
        let mut tags = set.attach().unwrap();
        tags.attach_scheduler(Some(64), |_| ()).unwrap();
        bfq.depth_updated(tags.nr_requests().unwrap(), tags.nr_keys());
        let limits = QueueLimits {
            rotational,
            ..QueueLimits::new(1 << 32)
        };
        Self {
            tags,
            limits,
            bfq,
            now: 0,
        }
    }

    fn insert(&mut self, bio: Bio) {
        let mut rq = self.tags.alloc(&Alloc::new(0, 0)).unwrap();
        self.tags.set_bio(&mut rq, bio).unwrap();
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        self.bfq.prepare_request(&cx, &mut rq);
        self.bfq
            .insert_requests(&cx, &mut std::iter::once(rq), false);
    }

    fn merge(&mut self, bio: Bio) -> Result<(), Bio> {
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        self.bfq.bio_merge(&cx, bio)
    }

    fn dispatch(&mut self) -> Option<Rq> {
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        self.bfq.dispatch_request(&cx, 0)
    }

    /// Dispatches one request, returning (issuer, sector) and the request.
    fn take(&mut self) -> (u32, u64, Rq) {
        let rq = self.dispatch().expect("a request to dispatch");
        let io = self.tags.io(&rq).unwrap();
        (io.issuer().0, io.sector(), rq)
    }

    fn complete(&mut self, rq: Rq) {
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        self.bfq.completed_request(&cx, &rq);
        self.bfq.finish_request(&cx, &rq);
        self.tags.complete(rq, Status::Ok).unwrap();
    }

    /// Dispatches and completes one request at once, returning (issuer, sector).
    fn serve(&mut self) -> (u32, u64) {
        let (issuer, sector, rq) = self.take();
        self.complete(rq);
        (issuer, sector)
    }

    fn budget(&self, issuer: u32) -> u64 {
        self.bfq.issuer_stats(IssuerId(issuer)).unwrap().budget
    }
}

#[test]
fn a_queue_is_served_for_its_budget_while_another_waits() {
    let mut rig = Rig::new(false);
    rig.bfq.set_max_budget(64).unwrap(); // new queues start at 2/3: 42 sectors
    for i in 0..10 {
        rig.insert(read(1, i * 64, 8));
    }
    for i in 0..10 {
        rig.insert(read(2, (1 << 30) + i * 64, 8));
    }
    let order: Vec<u32> = (0..10).map(|_| rig.serve().0).collect();
    // Five requests of 8 sectors fit in 42; the sixth would not.
    assert_eq!(order, [1, 1, 1, 1, 1, 2, 2, 2, 2, 2]);
    // Both exhausted their budgets: the next is 4x larger, capped at the maximum.
    assert_eq!(rig.budget(1), 64);
    let rest: Vec<u32> = (0..10).map(|_| rig.serve().0).collect();
    assert_eq!(rest, [1, 1, 1, 1, 1, 2, 2, 2, 2, 2]);
    assert!(rig.dispatch().is_none());
    // Issuer 2 emptied its queue with nothing else waiting: its turn ends when a request of
    // someone else comes (or one of its own, later than an idle slice), with its next
    // budget the 40 sectors it used.
    assert_eq!(rig.budget(2), 64);
    rig.insert(read(1, 1 << 20, 8));
    assert_eq!(rig.budget(2), 40);
    let stats = rig.bfq.issuer_stats(IssuerId(1)).unwrap();
    assert_eq!((stats.dispatched, stats.service_sectors), (10, 80));
}

#[test]
fn budget_feedback_exhausted_emptied_timed_out_too_idle() {
    // Exhausted: x4 up to the maximum.
    let mut rig = Rig::new(false);
    rig.bfq.set_max_budget(1024).unwrap(); // first budget 682, min budget 32
    for i in 0..8 {
        rig.insert(read(1, i * 1024, 128));
    }
    for _ in 0..5 {
        assert_eq!(rig.serve().0, 1);
    }
    assert_eq!(rig.budget(1), 682);
    rig.insert(read(2, 1 << 30, 8)); // someone to hand over to
    assert_eq!(rig.serve().0, 2); // 640 + 128 > 682: issuer 1's turn ended
    assert_eq!(rig.budget(1), 1024); // min(682 x 4, 1024)

    // Emptied: the budget becomes the service used; then timed out: x2.
    let mut rig = Rig::new(false);
    rig.bfq.set_max_budget(4096).unwrap(); // min budget 128
    rig.insert(read(1, 0, 256));
    rig.serve();
    assert!(rig.dispatch().is_none()); // nothing queued (and no idling here)
    rig.now += 9 * MS; // its next request comes later than an idle slice: the turn ended
    for i in 1..4 {
        rig.insert(read(1, i * 1024, 64));
    }
    assert_eq!(rig.budget(1), 256);
    rig.serve();
    rig.now += 126 * MS; // past timeout_sync
    rig.insert(read(2, 1 << 30, 8));
    assert_eq!(rig.serve().0, 2); // issuer 1 timed out
    assert_eq!(rig.budget(1), 512); // min(256 x 2, 4096)
    assert_eq!(rig.bfq.stats().budget_timeouts, 1);

    // Too idle, with nothing in flight: the budget shrinks by 4 min budgets.
    let mut rig = Rig::new(true);
    rig.bfq.set_max_budget(4096).unwrap(); // first budget 2730
    rig.insert(read(1, 0, 8));
    rig.insert(read(2, 1 << 30, 8));
    let (issuer, _, rq) = rig.take();
    assert_eq!(issuer, 1);
    rig.now = MS;
    rig.complete(rq);
    rig.now = 9 * MS; // the idle wait (8 ms) ran out
    assert_eq!(rig.serve().0, 2);
    assert_eq!(rig.budget(1), 2730 - 4 * 128);
}

#[test]
fn sector_order_from_the_head_and_fifo_expiry() {
    let mut rig = Rig::new(false);
    rig.insert(read(1, 1000, 8));
    rig.now = 10 * MS;
    rig.insert(read(1, 0, 8));
    rig.insert(read(1, 8, 8));
    let order: Vec<u64> = (0..3).map(|_| rig.serve().1).collect();
    assert_eq!(order, [0, 8, 1000]); // nothing expired: by sector

    let mut rig = Rig::new(false);
    rig.insert(read(1, 1000, 8));
    rig.now = 10 * MS;
    rig.insert(read(1, 0, 8));
    rig.insert(read(1, 8, 8));
    rig.now = 126 * MS; // the request at 1000 waited past fifo_expire_sync
    let order: Vec<u64> = (0..3).map(|_| rig.serve().1).collect();
    // The FIFO head first; then the closest from the head at 1008, counting backward
    // seeks twice: 8 (cost 2000) before 0 (cost 2016).
    assert_eq!(order, [1000, 8, 0]);
}

#[test]
fn back_seeks_within_back_seek_max_cost_the_penalty() {
    let pick = |behind: u64, ahead: u64, back_max_kib: u64| {
        let mut rig = Rig::new(false);
        rig.bfq.set_back_seek_max(back_max_kib).unwrap();
        rig.insert(read(1, 100_000, 8));
        let (_, _, first) = rig.take(); // the head is now at 100_008
        rig.insert(read(1, behind, 8));
        rig.insert(read(1, ahead, 8));
        let (_, sector, rq) = rig.take();
        rig.complete(first);
        rig.complete(rq);
        sector
    };
    // 1008 back costs 2016: more than 1992 ahead, less than 2992.
    assert_eq!(pick(99_000, 102_000, 16_384), 102_000);
    assert_eq!(pick(99_000, 103_000, 16_384), 99_000);
    // Beyond back_seek_max (here 256 KiB = 512 sectors) a request behind waits its turn.
    assert_eq!(pick(99_000, 103_000, 256), 103_000);
    assert_eq!(pick(99_600, 103_000, 256), 99_600);
}

#[test]
fn async_queues_are_shared_per_priority() {
    let mut rig = Rig::new(false);
    let write = |issuer: u32, sector: u64| Bio::new(Op::Write, sector, 8).issuer(IssuerId(issuer));
    rig.insert(write(1, 0));
    // Another issuer's async write continues it: the same queue, so they merge.
    assert!(rig.merge(write(2, 8)).is_ok());
    // At another priority level it is another queue.
    let low = IoPrio::new(IoPrioClass::BestEffort, 7).unwrap();
    assert!(rig.merge(write(2, 16).prio(low)).is_err());
    // Sync reads of different issuers never merge; of the same issuer they do.
    let sync = |issuer: u32, sector: u64| Bio::new(Op::Read, sector, 8).issuer(IssuerId(issuer));
    rig.insert(sync(1, 4096));
    assert!(rig.merge(sync(2, 4104)).is_err());
    assert!(rig.merge(sync(1, 4104)).is_ok());
    assert_eq!(rig.bfq.queued(), 2);
    // Async queues have no issuer statistics; the sync one has.
    assert!(rig.bfq.issuer_stats(IssuerId(2)).is_none());
    assert_eq!(rig.bfq.issuer_stats(IssuerId(1)).unwrap().weight, 40);
}

#[test]
fn idling_holds_the_device_for_the_queue_in_service() {
    let mut rig = Rig::new(true);
    rig.insert(read(1, 0, 8));
    rig.insert(read(2, 1 << 30, 8));
    let (issuer, _, rq) = rig.take();
    assert_eq!(issuer, 1);
    // Issuer 1 is sequential on a rotational disk: wait for its next request.
    assert!(rig.dispatch().is_none());
    assert_eq!(rig.bfq.next_timer(), None); // waiting for its request in flight
    rig.now = MS;
    rig.complete(rq);
    assert_eq!(rig.bfq.next_timer(), Some(MS + 8 * MS));
    assert_eq!(rig.bfq.stats().idle_waits, 1);
    rig.now = 5 * MS;
    assert!(rig.dispatch().is_none());
    assert!(rig.bfq.has_work(0));
    // Its next request is served at once.
    rig.insert(read(1, 8, 8));
    assert_eq!(rig.bfq.next_timer(), None);
    let (issuer, sector, rq) = rig.take();
    assert_eq!((issuer, sector), (1, 8));
    rig.now = 6 * MS;
    rig.complete(rq);
    assert_eq!(rig.bfq.next_timer(), Some(14 * MS));
    rig.now = 13 * MS;
    assert!(rig.dispatch().is_none());
    // The wait runs out: the other queue gets the device.
    rig.now = 14 * MS;
    assert_eq!(rig.serve().0, 2);
    assert_eq!(rig.bfq.stats().idle_waits, 3);
    assert_eq!(rig.bfq.stats().injected, 0);
}

#[test]
fn no_idling_for_symmetric_queues_on_flash() {
    let mut rig = Rig::new(false);
    rig.insert(read(1, 0, 8));
    rig.insert(read(2, 1 << 30, 8));
    let (issuer, _, rq) = rig.take();
    assert_eq!(issuer, 1);
    // Same weights, not rotational: issuer 1's turn ends when it empties.
    assert_eq!(rig.take().0, 2);
    rig.complete(rq);
    assert_eq!(rig.bfq.stats().idle_waits, 0);
}

#[test]
fn injection_while_idling_for_the_shares() {
    let mut rig = Rig::new(false);
    rig.bfq.set_issuer_weight(IssuerId(1), 200).unwrap();
    rig.bfq.set_issuer_weight(IssuerId(2), 100).unwrap();
    rig.insert(read(1, 0, 8));
    rig.insert(read(2, 1 << 30, 8));
    rig.insert(read(2, (1 << 30) + 64, 8));
    let (issuer, _, rq) = rig.take();
    assert_eq!(issuer, 1);
    rig.now = MS;
    rig.complete(rq);
    // Different weights: the device idles for issuer 1 ...
    assert_eq!(rig.bfq.next_timer(), Some(9 * MS));
    // ... and, its think time being short as far as anyone knows (it is new), nothing is
    // injected: its next read may come at once.
    assert!(rig.dispatch().is_none());
    assert_eq!(rig.bfq.stats().injected, 0);
    // It comes after 16 ms instead, three times: its think time is now longer than the
    // idle slice.
    for i in 1..4u64 {
        rig.now += 16 * MS;
        rig.insert(read(1, 8 * i, 8));
        let (issuer, _, rq) = rig.take();
        assert_eq!(issuer, 1);
        rig.complete(rq);
    }
    let idle_ends = rig.now + 8 * MS;
    assert_eq!(rig.bfq.next_timer(), Some(idle_ends));
    // Now, with nothing of its own in flight, one request of issuer 2 may go meanwhile.
    let (issuer, _, injected) = rig.take();
    assert_eq!(issuer, 2);
    assert_eq!(rig.bfq.stats().injected, 1);
    assert!(rig.dispatch().is_none()); // one in the device at a time
    rig.now += MS;
    rig.complete(injected);
    assert_eq!(rig.bfq.next_timer(), Some(idle_ends)); // still idling for issuer 1
    // Strict guarantees: no injection.
    rig.bfq.set_strict_guarantees(true);
    assert!(rig.dispatch().is_none());
}

#[test]
fn a_new_queue_is_weight_raised_until_its_time_runs_out() {
    let mut bfq = Bfq::new();
    bfq.set_max_budget(4096).unwrap();
    let mut rig = Rig::with(bfq, false);
    rig.insert(read(1, 0, 8));
    rig.insert(read(1, 64, 8));
    let stats = rig.bfq.issuer_stats(IssuerId(1)).unwrap();
    assert!(stats.raised);
    assert_eq!(stats.weight, 40 * 30);
    assert_eq!(rig.bfq.stats().raised_queues, 1);
    rig.serve();
    // Raising lasts 2.5 s at the reference rate off rotational disks, at least 3 s.
    rig.now = 2_999 * MS;
    rig.serve();
    assert!(rig.bfq.issuer_stats(IssuerId(1)).unwrap().raised);
    rig.insert(read(1, 128, 8));
    rig.now = 3_000 * MS;
    rig.serve();
    let stats = rig.bfq.issuer_stats(IssuerId(1)).unwrap();
    assert!(!stats.raised);
    assert_eq!(stats.weight, 40);
    assert_eq!(rig.bfq.stats().raised_queues, 0);
}

#[test]
fn a_raised_queue_preempts_and_lowers_the_depth_limits() {
    let mut rig = Rig::with(Bfq::new(), false);
    rig.bfq.set_issuer_weight(IssuerId(1), 100).unwrap(); // explicit: never raised
    for i in 0..4 {
        rig.insert(read(1, i * 64, 8));
    }
    assert_eq!(rig.serve().0, 1);
    assert_eq!(rig.bfq.limit_depth(Op::Write, BioFlags::empty()), Some(32));
    rig.insert(read(2, 1 << 30, 8)); // new: raised, takes the device
    assert_eq!(rig.serve().0, 2);
    assert!(rig.bfq.issuer_stats(IssuerId(2)).unwrap().raised);
    assert!(!rig.bfq.issuer_stats(IssuerId(1)).unwrap().raised);
    // While a raised queue is active: ~18% for async, ~37% for sync writes.
    rig.insert(read(2, (1 << 30) + 64, 8));
    assert_eq!(rig.bfq.limit_depth(Op::Write, BioFlags::empty()), Some(12));
    assert_eq!(rig.bfq.limit_depth(Op::Write, BioFlags::SYNC), Some(24));
}

#[test]
fn a_large_burst_gets_no_raising() {
    let mut rig = Rig::with(Bfq::new(), false);
    for issuer in 0..7u32 {
        rig.now = u64::from(issuer) * 100 * MS;
        rig.insert(read(issuer, u64::from(issuer) << 20, 8));
    }
    assert_eq!(rig.bfq.stats().raised_queues, 7);
    rig.now = 700 * MS;
    rig.insert(read(7, 7 << 20, 8)); // the eighth within 180 ms of the previous
    let stats = rig.bfq.stats();
    assert_eq!((stats.raised_queues, stats.large_bursts), (0, 1));
    rig.now = 800 * MS;
    rig.insert(read(8, 8 << 20, 8)); // the burst goes on
    assert!(!rig.bfq.issuer_stats(IssuerId(8)).unwrap().raised);
    rig.now = 1_000 * MS;
    rig.insert(read(9, 9 << 20, 8)); // 200 ms later: a new start
    assert!(rig.bfq.issuer_stats(IssuerId(9)).unwrap().raised);
    assert_eq!(rig.bfq.stats().large_bursts, 1);
}

#[test]
fn depth_limits() {
    let rig = Rig::new(false);
    let bfq = &rig.bfq;
    assert_eq!(bfq.limit_depth(Op::Read, BioFlags::empty()), None);
    assert_eq!(bfq.limit_depth(Op::Write, BioFlags::empty()), Some(32));
    assert_eq!(bfq.limit_depth(Op::Write, BioFlags::SYNC), Some(48));
    assert_eq!(bfq.limit_depth(Op::Write, BioFlags::FUA), Some(48));
    assert_eq!(bfq.min_shallow_depth(), Some(12));
}

#[test]
fn bios_and_requests_merge_within_a_queue() {
    let mut rig = Rig::new(false);
    let sync = |sector: u64| Bio::new(Op::Read, sector, 8).issuer(IssuerId(1));
    rig.insert(sync(0));
    rig.insert(sync(16));
    assert_eq!(rig.bfq.queued(), 2);
    // Front merge into the request at 16, then back merge into the one at 0 which now
    // touches the other: they become one request.
    assert!(rig.merge(sync(8)).is_ok());
    assert_eq!(rig.bfq.queued(), 1);
    let (_, sector, rq) = rig.take();
    assert_eq!((sector, rig.tags.io(&rq).unwrap().sectors()), (0, 24));
    rig.complete(rq);
    // An insert that continues a queued request of its queue is appended to it.
    rig.insert(sync(100));
    rig.insert(sync(108));
    assert_eq!(rig.bfq.queued(), 1);
    let (_, _, rq) = rig.take();
    assert_eq!(rig.tags.io(&rq).unwrap().sectors(), 16);
    rig.complete(rq);
    assert_eq!(
        rig.bfq.issuer_stats(IssuerId(1)).unwrap().service_sectors,
        40
    );
}

#[test]
fn a_requeued_request_goes_first() {
    let mut rig = Rig::new(false);
    rig.insert(read(1, 0, 8));
    rig.insert(read(2, 1 << 30, 8));
    let (issuer, _, rq) = rig.take();
    assert_eq!(issuer, 1);
    let cx = ElvCx::new(&rig.tags, &rig.limits, rig.now);
    rig.bfq.requeue_request(&cx, &rq);
    rig.bfq.insert_requests(&cx, &mut std::iter::once(rq), true);
    assert_eq!(rig.bfq.queued(), 2);
    assert_eq!(rig.serve(), (1, 0));
    assert_eq!(rig.serve().0, 2);
    assert!(!rig.bfq.has_work(0));
    // Charged once.
    let stats = rig.bfq.issuer_stats(IssuerId(1)).unwrap();
    assert_eq!((stats.dispatched, stats.service_sectors), (1, 8));
}

#[test]
fn groups_and_weights_are_validated() {
    let mut bfq = Bfq::new();
    let g = bfq.add_group(GroupId::ROOT, 100).unwrap();
    assert!(bfq.add_group(g, 1000).is_ok());
    assert_eq!(bfq.add_group(g, 0), Err(BfqError::BadWeight(0)));
    assert_eq!(
        bfq.set_group_weight(g, 1001),
        Err(BfqError::BadWeight(1001))
    );
    assert!(bfq.set_group_weight(g, 1).is_ok());
    assert!(bfq.set_issuer_group(IssuerId(1), g).is_ok());
    let mut other = Bfq::new();
    assert_eq!(
        other.set_issuer_group(IssuerId(1), g),
        Err(BfqError::NoSuchGroup)
    );
    assert_eq!(other.add_group(g, 100), Err(BfqError::NoSuchGroup));
    assert_eq!(other.set_group_weight(g, 100), Err(BfqError::NoSuchGroup));
}

#[test]
fn groups_share_by_their_weights() {
    let mut rig = Rig::new(false);
    rig.bfq.set_max_budget(64).unwrap();
    let heavy = rig.bfq.add_group(GroupId::ROOT, 300).unwrap();
    let light = rig.bfq.add_group(GroupId::ROOT, 100).unwrap();
    rig.bfq.set_issuer_group(IssuerId(1), heavy).unwrap();
    rig.bfq.set_issuer_group(IssuerId(2), light).unwrap();
    let mut next = [0u64; 2];
    for issuer in 1..=2 {
        for _ in 0..24 {
            let i = issuer as usize - 1;
            rig.insert(read(issuer, ((i as u64) << 30) + next[i] * 64, 8));
            next[i] += 1;
        }
    }
    let mut served = [0u32; 2];
    for _ in 0..400 {
        let issuer = rig.serve().0;
        let i = issuer as usize - 1;
        served[i] += 1;
        // Both stay backlogged.
        rig.insert(read(issuer, ((i as u64) << 30) + next[i] * 64, 8));
        next[i] += 1;
    }
    // 3:1 within one maximum budget (8 requests) either way.
    assert!(served[0].abs_diff(3 * served[1]) <= 3 * 8, "{served:?}");
}

#[test]
fn tunables_are_validated() {
    let mut bfq = Bfq::new();
    let err = |name, value| Err(TunableError { name, value });
    assert_eq!(
        bfq.set_slice_idle(MAX_SLICE_IDLE_NS + 1),
        err("slice_idle", MAX_SLICE_IDLE_NS + 1)
    );
    assert_eq!(bfq.set_timeout_sync(0), err("timeout_sync", 0));
    assert_eq!(
        bfq.set_timeout_sync(MAX_EXPIRE_NS + 1),
        err("timeout_sync", MAX_EXPIRE_NS + 1)
    );
    assert_eq!(
        bfq.set_max_budget(MAX_BUDGET + 1),
        err("max_budget", MAX_BUDGET + 1)
    );
    assert_eq!(
        bfq.set_fifo_expire_sync(MAX_EXPIRE_NS + 1),
        err("fifo_expire_sync", MAX_EXPIRE_NS + 1)
    );
    assert_eq!(
        bfq.set_fifo_expire_async(MAX_EXPIRE_NS + 1),
        err("fifo_expire_async", MAX_EXPIRE_NS + 1)
    );
    assert_eq!(
        bfq.set_back_seek_max(MAX_BACK_SEEK_KIB + 1),
        err("back_seek_max", MAX_BACK_SEEK_KIB + 1)
    );
    assert_eq!(bfq.set_back_seek_penalty(0), err("back_seek_penalty", 0));
    assert_eq!(
        bfq.set_back_seek_penalty(MAX_BACK_SEEK_PENALTY + 1),
        err("back_seek_penalty", u64::from(MAX_BACK_SEEK_PENALTY) + 1)
    );
    // Nothing refused was applied.
    assert_eq!(*bfq.tunables(), Tunables::default());
    // Valid values are.
    bfq.set_slice_idle(0).unwrap();
    bfq.set_timeout_sync(MS).unwrap();
    bfq.set_max_budget(MAX_BUDGET).unwrap();
    bfq.set_fifo_expire_sync(0).unwrap();
    bfq.set_fifo_expire_async(MAX_EXPIRE_NS).unwrap();
    bfq.set_back_seek_max(0).unwrap();
    bfq.set_back_seek_penalty(MAX_BACK_SEEK_PENALTY).unwrap();
    bfq.set_low_latency(false);
    bfq.set_strict_guarantees(true);
    let t = *bfq.tunables();
    assert_eq!(
        t,
        Tunables {
            slice_idle_ns: 0,
            timeout_sync_ns: MS,
            max_budget: MAX_BUDGET,
            fifo_expire_sync_ns: 0,
            fifo_expire_async_ns: MAX_EXPIRE_NS,
            back_seek_max_kib: 0,
            back_seek_penalty: MAX_BACK_SEEK_PENALTY,
            low_latency: false,
            strict_guarantees: true,
        }
    );
    let bad = Tunables {
        timeout_sync_ns: 0,
        ..t
    };
    assert_eq!(Bfq::with_tunables(bad).unwrap_err().name, "timeout_sync");
    assert_eq!(bfq.set_tunables(bad).unwrap_err().name, "timeout_sync");
}

#[test]
fn stats_count_and_the_peak_rate_is_measured() {
    let mut rig = Rig::new(false);
    // One sequential stream, back to back: 64 sectors every 100 us.
    let mut sector = 0;
    for _ in 0..20_001 {
        rig.insert(read(1, sector, 64));
        let (_, _, rq) = rig.take();
        rig.now += 100_000;
        rig.complete(rq);
        sector += 64;
    }
    let stats = rig.bfq.stats();
    assert!(stats.peak_rate > 0);
    // The maximum budget follows it only after enough turns; here every request is a turn.
    assert_eq!(stats.max_budget, stats.peak_rate * 125 / 1000);
    let q = rig.bfq.issuer_stats(IssuerId(1)).unwrap();
    assert_eq!((q.dispatched, q.service_sectors), (20_001, 20_001 * 64));
    assert!(!q.seeky);
}

#[test]
fn seeky_queues_are_detected() {
    let mut rig = Rig::new(true);
    for i in 0..6u64 {
        rig.insert(read(1, (i + 1) * (1 << 24), 8));
        rig.serve();
    }
    assert!(rig.bfq.issuer_stats(IssuerId(1)).unwrap().seeky);
}

#[test]
fn the_idle_class_waits_for_the_others() {
    let mut rig = Rig::new(false);
    let idle = IoPrio::new(IoPrioClass::Idle, 4).unwrap();
    for i in 0..3 {
        rig.insert(read(1, i * 64, 8).prio(idle));
    }
    for i in 0..3 {
        rig.insert(read(2, (1 << 30) + i * 64, 8));
    }
    let order: Vec<u32> = (0..3).map(|_| rig.serve().0).collect();
    assert_eq!(order, [2, 2, 2]);
    // Two classes active: the device idles for the best-effort queue (and injects nothing
    // of the idle class) ...
    assert!(rig.dispatch().is_none());
    assert_eq!(rig.bfq.next_timer(), Some(8 * MS));
    // ... until the wait runs out.
    rig.now = 8 * MS;
    let order: Vec<u32> = (0..3).map(|_| rig.serve().0).collect();
    assert_eq!(order, [1, 1, 1]);
}

#[test]
fn a_turn_serves_its_first_request_even_beyond_the_budget() {
    // A budget of one sector, and an expired FIFO head the budget was not sized for: the
    // turn serves it rather than ending unserved with the same budget again.
    let mut rig = Rig::new(false);
    rig.bfq.set_max_budget(1).unwrap();
    rig.insert(read(1, 3801, 38));
    rig.insert(read(1, 2503, 31));
    rig.now = 130 * MS; // past the sync FIFO expiry
    rig.insert(read(1, 2600, 3));
    let mut served = Vec::new();
    while let Some(rq) = rig.dispatch() {
        served.push(rig.tags.io(&rq).unwrap().sector());
        rig.complete(rq);
    }
    served.sort_unstable();
    assert_eq!(served, [2503, 2600, 3801]);
    assert_eq!(rig.bfq.queued(), 0);
}

#[test]
fn turning_low_latency_off_through_set_tunables_ends_raising() {
    let mut rig = Rig::with(Bfq::new(), false);
    rig.insert(read(1, 0, 8));
    assert!(rig.bfq.issuer_stats(IssuerId(1)).unwrap().raised);
    let tunables = Tunables {
        low_latency: false,
        ..*rig.bfq.tunables()
    };
    rig.bfq.set_tunables(tunables).unwrap();
    assert!(!rig.bfq.issuer_stats(IssuerId(1)).unwrap().raised);
    assert_eq!(rig.bfq.stats().raised_queues, 0);
}

#[test]
fn a_lone_queue_that_empties_keeps_its_turn_for_its_next_request() {
    let mut rig = Rig::new(false);
    rig.bfq.set_max_budget(64).unwrap(); // a first budget of 42 sectors
    // Alone, one request at a time, the next sent as the last ends: one turn.
    for i in 0..5 {
        rig.insert(read(1, i * 8, 8));
        assert_eq!(rig.serve().0, 1);
        assert!(rig.dispatch().is_none());
        assert_eq!(rig.budget(1), 42); // still the first turn's budget
    }
    // The sixth does not fit what is left (2 sectors): the turn ends exhausted (x4).
    rig.insert(read(1, 40, 8));
    assert_eq!(rig.serve().0, 1);
    assert_eq!(rig.budget(1), 64);
    // Another issuer's request ends the lone wait: issuer 1's turn ends as it emptied.
    assert!(rig.dispatch().is_none());
    rig.insert(read(2, 1 << 30, 8));
    assert_eq!(rig.budget(1), 8); // the service it used, at least the minimum (2)
    assert_eq!(rig.serve().0, 2);
}
