//! BFQ for blkmq: budget fair queueing over B-WF2Q+ (Linux's `block/bfq-iosched.c`).
//!
//! Every issuer ([`IssuerId`]) gets a queue for its sync I/O (reads, and writes someone
//! waits for); async writes share one queue per priority class and level within a group.
//! Each queue is a leaf of a B-WF2Q+ scheduler with a weight — `(8 - level) x
//! 10` from the I/O priority, or set with [`Bfq::set_issuer_weight`] — under a hierarchy of
//! groups ([`Bfq::add_group`]). The scheduler grants one queue at a time the device for a
//! *budget* of sectors; service is shared by sectors in proportion to the weights, so a
//! queue issuing large requests does not get more than its share by issuing fewer.
//!
//! The queue in service dispatches its requests in sector order from the head position
//! (backward seeks up to [`Tunables::back_seek_max_kib`] cost
//! [`Tunables::back_seek_penalty`] times their length), its FIFO head first if that waited
//! past [`Tunables::fifo_expire_sync_ns`] (checked once per turn). Its turn ends when:
//!
//! * the next request does not fit in what is left of its budget (*exhausted*: the next
//!   budget is 4x larger, up to the maximum);
//! * it has been served for [`Tunables::timeout_sync_ns`] (*timed out*: 2x; a queue that
//!   used less than two thirds of its budget is charged as if it had used the device for
//!   that time at the peak rate, so seeky queues share time, not sectors);
//! * it has nothing queued and idling would not pay (*emptied*: the next budget is what it
//!   used), or the idle wait ran out (*too idle*: it shrinks).
//!
//! When the queue in service empties, the device may be left idle for up to
//! [`Tunables::slice_idle_ns`] waiting for its next request ([`Elevator::next_timer`] gives
//! the deadline; [`Elevator::dispatch_request`] returns `None` meanwhile): for any sync queue
//! on a rotational device that does not queue commands itself (learnt from how many requests
//! it takes), for a sequential queue with a short think time on a rotational device or one
//! that does not queue (idling keeps the head where it is), and on any device when the active
//! queues are not symmetric (different weights, classes or groups, or raised queues), where
//! idling is what enforces the shares. Seeky queues are idled 2 ms at most, raised ones at
//! least 20 ms. While it idles for the shares alone, has nothing in flight and thinks longer
//! than an idle slice, one request of another queue may be *injected* (one in the device at a
//! time). A queue in service that empties with nothing else queued or in flight keeps its turn
//! for its own next request, if it comes within an idle slice.
//!
//! With [`Tunables::low_latency`], a new queue, or one idle for 2 s, is *weight-raised*
//! (x30) for a time scaled by the peak rate (3 s to 13 s) or until it has received 120000
//! sectors; a queue issuing little I/O at regular intervals is raised as soft real-time
//! (x3000, 300 ms); the idle class is never raised. A queue that becomes backlogged preempts
//! the queue in service when its class is higher, or the same and it is raised more.
//! Eight or more queues created within 180 ms of each other form a *large burst*, and get
//! no raising. Depth limits ([`Elevator::limit_depth`]) keep async I/O to half the
//! scheduler tags and sync writes to three quarters (less while a queue is raised).
//!
//! The maximum budget is auto-tuned from the measured peak rate as `peak_rate x
//! timeout_sync` ([`BfqStats`]), unless [`Tunables::max_budget`] fixes it. Async queues
//! always get the maximum budget and are charged three times their sectors.
//!
//! Requests are kept per queue in a sector-sorted tree and a FIFO from
//! [`blkmq_sched_index`], in arrays sized by [`Elevator::depth_updated`]; queue
//! state is allocated when an issuer's queue is first made and recycled after it has been
//! idle for 12 s. Nothing is allocated per request.
//!
//! ```
//! use blkmq_core::{Alloc, Bio, ElvCx, Elevator, IssuerId, Op, QueueLimits, StdPlatform, TagSet};
//! use blkmq_sched_bfq::Bfq;
//!
//! let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
//! let mut tags = set.attach().unwrap();
//! tags.attach_scheduler(None, |_| ()).unwrap();
//! let limits = QueueLimits::new(1 << 20);
//! let mut bfq = Bfq::new();
//! bfq.depth_updated(tags.nr_requests().unwrap(), tags.nr_keys());
//!
//! let cx = ElvCx::new(&tags, &limits, 0);
//! for sector in [800, 0] {
//!     let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
//!     tags.set_bio(&mut rq, Bio::new(Op::Read, sector, 8).issuer(IssuerId(1))).unwrap();
//!     bfq.insert_requests(&cx, &mut std::iter::once(rq), false);
//! }
//! // A bio of the same issuer touching the request at 0 merges into it.
//! assert!(bfq.bio_merge(&cx, Bio::new(Op::Read, 8, 8).issuer(IssuerId(1))).is_ok());
//! // The issuer's queue is served in sector order from the head: 0 (16 sectors), 800.
//! let first = bfq.dispatch_request(&cx, 0).unwrap();
//! assert_eq!(tags.io(&first).unwrap().sectors(), 16);
//! let second = bfq.dispatch_request(&cx, 0).unwrap();
//! assert_eq!(tags.io(&second).unwrap().sector(), 800);
//! assert!(!bfq.has_work(0));
//! for rq in [first, second] {
//!     bfq.completed_request(&cx, &rq);
//!     bfq.finish_request(&cx, &rq);
//!     tags.free(rq).unwrap();
//! }
//! let stats = bfq.issuer_stats(IssuerId(1)).unwrap();
//! assert_eq!((stats.dispatched, stats.service_sectors), (2, 24));
//! ```

#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![forbid(unsafe_code)]

extern crate alloc;

mod burst;
mod elevator;
mod groups;
mod queue;
mod rate;
mod service;
mod slot_list;
mod stats;
mod tunables;
mod wf2q;

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::fmt;

use blkmq_core::{BioFlags, Elevator, ElvCx, IoPrio, IssuerId, Op, Rq, RqIo};
use blkmq_sched_index::{KeyLists, SortedRequests};

/// A tunable refused (shared by every scheduler).
pub use blkmq_core::TunableError;
use burst::Burst;
pub use groups::{DEFAULT_GROUP_WEIGHT, GroupId, MAX_GROUP_WEIGHT};
use queue::{NO_QUEUE, Queue, class_of, prio_weight};
use rate::PeakRate;
use slot_list::SlotList;
pub use stats::{BfqStats, QueueStats};
pub use tunables::{
    MAX_BACK_SEEK_KIB, MAX_BACK_SEEK_PENALTY, MAX_BUDGET, MAX_EXPIRE_NS, MAX_SLICE_IDLE_NS,
    Tunables,
};
use wf2q::{Class, EntityId, Wf2q};

/// The list of requeued requests, served before any queue.
const DISPATCH: usize = 0;

/// In a request's `sched_data`: where [`Elevator::prepare_request`] notes its queue (plus
/// one; zero: none noted).
const SD_QUEUE: usize = 0;
/// Async queues per group: one per class and level.
const ASYNC_SLOTS: usize = 3 * IoPrio::LEVELS as usize;

/// A configuration call refused.
///
/// ```
/// use blkmq_core::IssuerId;
/// use blkmq_sched_bfq::{Bfq, BfqError};
/// let mut bfq = Bfq::new();
/// assert_eq!(bfq.set_issuer_weight(IssuerId(1), 0), Err(BfqError::BadWeight(0)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BfqError {
    /// The group does not exist.
    NoSuchGroup,
    /// A weight outside `1..=`[`MAX_GROUP_WEIGHT`].
    BadWeight(u32),
    /// A tunable out of range.
    Tunable(TunableError),
}

impl fmt::Display for BfqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BfqError::NoSuchGroup => f.write_str("no such group"),
            BfqError::BadWeight(w) => write!(f, "weight {w} outside 1..={MAX_GROUP_WEIGHT}"),
            BfqError::Tunable(e) => e.fmt(f),
        }
    }
}

impl core::error::Error for BfqError {}

impl From<TunableError> for BfqError {
    fn from(e: TunableError) -> Self {
        BfqError::Tunable(e)
    }
}

/// What the scheduler knows of one request key.
#[derive(Clone, Copy, Debug)]
struct KeyInfo {
    /// Its queue.
    queue: u32,
    /// The FIFO deadline.
    fifo_time: u64,
    /// Its size, as last seen (sectors).
    sectors: u64,
    /// Inserted and not yet finished.
    counted: bool,
    /// Dispatched and not back.
    dispatched: bool,
    /// Dispatched by injection.
    injected: bool,
}

impl Default for KeyInfo {
    fn default() -> Self {
        Self {
            queue: NO_QUEUE,
            fifo_time: 0,
            sectors: 0,
            counted: false,
            dispatched: false,
            injected: false,
        }
    }
}

/// A group: its scheduling entity and its async queues.
#[derive(Clone, Debug)]
struct Group {
    entity: EntityId,
    /// Async queues by class and level.
    async_queues: [u32; ASYNC_SLOTS],
    /// Its queues counted as active by the balance.
    active: u32,
}

/// What is set for an issuer, and the lifetime counters of its freed queues.
#[derive(Clone, Copy, Debug)]
struct Issuer {
    weight: Option<u32>,
    group: u32,
    queue: u32,
    service: u64,
    dispatched: u64,
    budget_timeouts: u64,
}

/// The active queues (with requests queued or in flight), for the idling decisions: are
/// they symmetric (same weight, class and group), and how many are raised.
#[derive(Clone, Copy, Debug, Default)]
struct Balance {
    /// Active queues.
    all: u64,
    /// Active queues not raised, and the sum and sum of squares of their weights: all
    /// weights are equal exactly when `plain x sum_sq == sum^2`.
    plain: u64,
    sum: u64,
    sum_sq: u128,
    raised: u64,
    per_class: [u32; 3],
    groups_active: u32,
    /// Whether the active queues differ in weight, class or group: what
    /// [`refresh`](Self::refresh) found at the last change of the counts.
    asymmetric: bool,
}

impl Balance {
    /// Whether the active queues differ in weight, class or group (read on every
    /// completion that may idle; worked out only when the counts change).
    fn asymmetric(&self) -> bool {
        self.asymmetric
    }

    /// Works out [`asymmetric`](Self::asymmetric) again after a change of the counts.
    fn refresh(&mut self) {
        let classes = self.per_class.iter().filter(|&&n| n > 0).count();
        self.asymmetric = u128::from(self.plain) * self.sum_sq
            != u128::from(self.sum) * u128::from(self.sum)
            || classes > 1
            || self.groups_active > 1;
    }
}

/// The BFQ elevator. See the crate documentation.
pub struct Bfq {
    tunables: Tunables,
    nr_requests: usize,
    rotational: bool,
    /// Requests, by key: sorted in a tree per queue slot.
    sorted: SortedRequests,
    info: Vec<KeyInfo>,
    /// The dispatch list ([`DISPATCH`]), then a FIFO per queue slot (`1 + slot`).
    lists: KeyLists,
    // Queues.
    sched: Wf2q,
    queues: Vec<Queue>,
    free_queues: Vec<u32>,
    /// Queues by entity id.
    entity_queue: Vec<u32>,
    /// Queues with requests queued (injection candidates, oldest first).
    busy: SlotList,
    /// Queues fully idle (recycling candidates, in the order they went idle).
    idle: SlotList,
    groups: Vec<Group>,
    issuers: BTreeMap<IssuerId, Issuer>,
    /// The sync queue the last preparation found: the next one, most often of the same
    /// issuer, checks it before looking the issuer up (see [`Bfq::sync_queue_of`]).
    last_sync: u32,
    balance: Balance,
    burst: Burst,
    // The turn.
    in_service: u32,
    budget_start: u64,
    budget_deadline: u64,
    /// The idle wait: when it started and when it ends.
    idle_start: u64,
    idle_until: Option<u64>,
    /// When the queue in service emptied with nothing else queued or in flight: its
    /// expiry waits for the next request, which, if its own and soon, continues its turn.
    lone_since: Option<u64>,
    // The device.
    in_flight: usize,
    /// Whether the device queues commands itself (NCQ): `None` until seen (Linux's
    /// `hw_tag`), from the most requests it held over 32 completions with enough around.
    hw_tag: Option<bool>,
    hw_tag_samples: u32,
    max_in_flight: usize,
    last_position: u64,
    rate: PeakRate,
    auto_max_budget: u64,
    /// Queue selections, smoothed x256 (Linux's `budgets_assigned`).
    budgets_assigned: u32,
    nr_raised: usize,
    stats: BfqStats,
}

impl Default for Bfq {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether an I/O is sync: reads always, writes when flagged (Linux's `op_is_sync`).
fn is_sync(op: Op, flags: BioFlags) -> bool {
    !op.is_write() || flags.intersects(BioFlags::SYNC | BioFlags::FUA | BioFlags::PREFLUSH)
}

fn async_slot(prio: IoPrio) -> usize {
    let class = match class_of(prio.class()) {
        Class::Rt => 0,
        Class::Be => 1,
        Class::Idle => 2,
    };
    class * IoPrio::LEVELS as usize + usize::from(prio.level())
}

impl Bfq {
    /// BFQ with the default tunables; its arrays are made by [`Elevator::depth_updated`],
    /// which the queue calls when attaching it.
    ///
    /// ```
    /// use blkmq_core::Elevator;
    /// use blkmq_sched_bfq::{Bfq, Tunables};
    /// let bfq = Bfq::new();
    /// assert_eq!((bfq.name(), *bfq.tunables()), ("bfq", Tunables::default()));
    /// ```
    pub fn new() -> Self {
        let root = Group {
            entity: Wf2q::ROOT,
            async_queues: [NO_QUEUE; ASYNC_SLOTS],
            active: 0,
        };
        Self {
            tunables: Tunables::default(),
            nr_requests: 0,
            rotational: false,
            sorted: SortedRequests::new(0, 0),
            info: Vec::new(),
            lists: KeyLists::new(1, 0),
            sched: Wf2q::new(),
            queues: Vec::new(),
            free_queues: Vec::new(),
            entity_queue: Vec::new(),
            busy: SlotList::new(),
            idle: SlotList::new(),
            groups: alloc::vec![root],
            issuers: BTreeMap::new(),
            last_sync: NO_QUEUE,
            balance: Balance::default(),
            burst: Burst::default(),
            in_service: NO_QUEUE,
            budget_start: 0,
            budget_deadline: 0,
            idle_start: 0,
            idle_until: None,
            lone_since: None,
            in_flight: 0,
            hw_tag: None,
            hw_tag_samples: 0,
            max_in_flight: 0,
            last_position: 0,
            rate: PeakRate::default(),
            auto_max_budget: 0,
            budgets_assigned: 0,
            nr_raised: 0,
            stats: BfqStats::default(),
        }
    }

    /// Requests held (queued, not dispatched).
    ///
    /// ```
    /// use blkmq_sched_bfq::Bfq;
    /// assert_eq!(Bfq::new().queued(), 0);
    /// ```
    pub fn queued(&self) -> usize {
        self.lists.total()
    }

    fn issuer_entry(&mut self, issuer: IssuerId) -> &mut Issuer {
        self.issuers.entry(issuer).or_insert(Issuer {
            weight: None,
            group: 0,
            queue: NO_QUEUE,
            service: 0,
            dispatched: 0,
            budget_timeouts: 0,
        })
    }

    /// The queue of a request of `issuer`, `sync` or not, at `prio`, if it exists.
    fn find_queue(&self, issuer: IssuerId, sync: bool, prio: IoPrio) -> Option<u32> {
        let entry = self.issuers.get(&issuer);
        let q = if sync {
            entry?.queue
        } else {
            let group = entry.map_or(0, |e| e.group);
            self.groups[group as usize].async_queues[async_slot(prio)]
        };
        (q != NO_QUEUE).then_some(q)
    }

    /// The sync queue that [`prepare_request`](Elevator::prepare_request) noted in `io`
    /// (`sched_data[SD_QUEUE]`), if it is still `issuer`'s: what
    /// [`find_queue`](Self::find_queue) would say. A live sync queue of an issuer is the one
    /// its entry names: the entry is set when the queue is made (the entry naming none) and
    /// cleared only when that queue is freed (no longer live).
    fn prepared_queue(&self, io: &RqIo, issuer: IssuerId, sync: bool) -> Option<u32> {
        if !sync {
            return None;
        }
        let q = u32::try_from(io.sched_data[SD_QUEUE].checked_sub(1)?).ok()?;
        self.sync_queue_of(q, issuer)
    }

    /// `q`, if it is a live sync queue of `issuer`: then it is the one the issuer's entry
    /// names, what [`find_queue`](Self::find_queue) would say (see
    /// [`prepared_queue`](Self::prepared_queue)).
    fn sync_queue_of(&self, q: u32, issuer: IssuerId) -> Option<u32> {
        let queue = self.queues.get(q as usize)?;
        (queue.live && queue.sync && queue.issuer == issuer.0).then_some(q)
    }

    /// The queue of a request, made if needed (setup: this may allocate).
    fn queue_for(&mut self, issuer: IssuerId, sync: bool, prio: IoPrio, now: u64) -> u32 {
        if let Some(q) = self.find_queue(issuer, sync, prio) {
            if sync {
                self.check_prio(q, prio);
            }
            return q;
        }
        self.reap(now);
        let class = class_of(prio.class());
        let entry = *self.issuer_entry(issuer);
        let weight = if sync {
            entry.weight.unwrap_or(prio_weight(prio.level()))
        } else {
            prio_weight(prio.level())
        };
        let q = self.alloc_queue(entry.group, sync, class, weight, now);
        let queue = &mut self.queues[q as usize];
        queue.level = prio.level();
        if sync {
            queue.issuer = issuer.0;
            queue.explicit_weight = entry.weight.is_some();
            self.issuer_entry(issuer).queue = q;
        } else {
            queue.async_slot = async_slot(prio) as u8;
            self.groups[entry.group as usize].async_queues[async_slot(prio)] = q;
        }
        q
    }

    /// A sync queue's issuer changed priority: new class and weight, applied from its next
    /// activation.
    #[inline]
    fn check_prio(&mut self, q: u32, prio: IoPrio) {
        let queue = &self.queues[q as usize];
        let class = class_of(prio.class());
        if queue.class == class && queue.level == prio.level() {
            // The common case (unchanged), inline: a test and a return.
            return;
        }
        self.change_prio(q, class, prio);
    }

    /// [`check_prio`](Self::check_prio) when the priority changed, out of line.
    #[inline(never)]
    fn change_prio(&mut self, q: u32, class: Class, prio: IoPrio) {
        let queue = &mut self.queues[q as usize];
        queue.class = class;
        queue.level = prio.level();
        if !queue.explicit_weight {
            queue.orig_weight = prio_weight(prio.level());
        }
        let (e, w) = (queue.entity, queue.weight());
        let _ = self.sched.set_class(e, class);
        let _ = self.sched.set_weight(e, w);
        self.reaccount(q);
    }

    /// Makes a queue slot (reusing a recycled one when there is one).
    fn alloc_queue(&mut self, group: u32, sync: bool, class: Class, weight: u32, now: u64) -> u32 {
        let parent = self.groups[group as usize].entity;
        let entity = match self.sched.add_leaf(parent, weight, class) {
            Ok(e) => e,
            // Only a bad weight could fail, and weights are checked on the way in.
            Err(_) => self
                .sched
                .add_leaf(
                    parent,
                    weight.clamp(wf2q::MIN_WEIGHT, wf2q::MAX_WEIGHT),
                    class,
                )
                .unwrap_or(Wf2q::ROOT),
        };
        let mut queue = Queue::new(entity, sync, class, weight, now);
        queue.group = group;
        queue.next_group = group;
        queue.max_budget = 2 * self.max_budget_now() / 3;
        queue.soft_rt_next_start = now;
        let q = if let Some(q) = self.free_queues.pop() {
            self.queues[q as usize] = queue;
            q
        } else {
            self.queues.push(queue);
            let q = self.queues.len() as u32 - 1;
            self.sorted.add_tree();
            self.lists.add_list();
            self.busy.grow(self.queues.len());
            self.idle.grow(self.queues.len());
            // Recycling must never allocate: room for every slot on the free list.
            self.free_queues
                .reserve(self.queues.len() - self.free_queues.len());
            q
        };
        let e = entity.0 as usize;
        if self.entity_queue.len() <= e {
            self.entity_queue.resize(e + 1, NO_QUEUE);
        }
        self.entity_queue[e] = q;
        q
    }

    /// Frees queues idle for longer than [`service::REAP_NS`] (at most all of them).
    fn reap(&mut self, now: u64) {
        while let Some(q) = self.idle.front() {
            let queue = &self.queues[q as usize];
            if now.saturating_sub(queue.idle_since) < service::REAP_NS {
                break;
            }
            self.idle.remove(q);
            let reapable = queue.live
                && queue.dispatched == 0
                && self.lists.is_empty(q as usize + 1)
                && self.in_service != q
                && !self.sched.is_active(queue.entity)
                && !self.info.iter().any(|i| i.queue == q && i.counted);
            if reapable && self.sched.remove(queue.entity).is_ok() {
                self.free_queue(q);
            }
        }
    }

    fn free_queue(&mut self, q: u32) {
        let queue = &self.queues[q as usize];
        if queue.sync {
            if let Some(entry) = self.issuers.get_mut(&IssuerId(queue.issuer)) {
                if entry.queue == q {
                    entry.queue = NO_QUEUE;
                    entry.service += queue.total_service;
                    entry.dispatched += queue.total_dispatched;
                    entry.budget_timeouts += queue.budget_timeouts;
                }
            }
        } else {
            let slot =
                &mut self.groups[queue.group as usize].async_queues[queue.async_slot as usize];
            if *slot == q {
                *slot = NO_QUEUE;
            }
        }
        if queue.wr_coeff > 1 {
            self.nr_raised -= 1;
        }
        let e = queue.entity.0 as usize;
        if self.entity_queue.get(e) == Some(&q) {
            self.entity_queue[e] = NO_QUEUE;
        }
        self.burst.forget(q);
        self.queues[q as usize].live = false;
        self.free_queues.push(q);
    }

    fn fifo(q: u32) -> usize {
        q as usize + 1
    }

    /// Requests queued in `q`.
    fn queued_in(&self, q: u32) -> usize {
        self.lists.len(Self::fifo(q))
    }

    /// Takes `key` out of its tree, FIFO or dispatch list and the end hash.
    fn unlink(&mut self, key: usize) {
        self.sorted.unlink(key);
        self.lists.remove(key);
        let q = self.info[key].queue;
        if q != NO_QUEUE && self.lists.is_empty(Self::fifo(q)) {
            self.busy.remove(q);
        }
    }

    /// [`Elevator::bio_merge`] with requests held: the merge sequence, kept out of line so
    /// that the common call, with none held, is a test and a return.
    #[inline(never)]
    fn bio_merge_held(
        &mut self,
        cx: &ElvCx<'_>,
        bio: blkmq_core::Bio,
    ) -> Result<(), blkmq_core::Bio> {
        blkmq_sched_index::bio_merge(self, cx, bio)
    }

    fn grow(&mut self, nr_keys: usize) {
        self.sorted.resize(self.queues.len(), nr_keys);
        let nr_keys = self.sorted.forest().nr_keys();
        self.info.resize(nr_keys, KeyInfo::default());
        self.lists = KeyLists::new(1 + self.queues.len(), nr_keys);
        // Held requests (none, when the queue resizes us frozen) go to the dispatch list.
        for key in self.sorted.held_keys() {
            self.lists.push_back(DISPATCH, key);
        }
        for q in 0..self.queues.len() as u32 {
            self.busy.remove(q);
        }
    }

    /// Queues `rq` in its queue (or at the head of the dispatch list), first trying to
    /// append it to a queued request of the same queue that it continues.
    fn insert_one(&mut self, cx: &ElvCx<'_>, rq: Rq, at_head: bool, now: u64) {
        let key = cx.key(&rq);
        if key >= self.sorted.forest().nr_keys() {
            // Keys come from the queue's arrays, sized by `depth_updated`; be safe anyway.
            self.grow(key + 1);
        }
        let Ok(io) = cx.io(&rq) else {
            // Not a request of this queue: nothing to schedule it by; keep it anyway.
            self.unlink(key);
            self.info[key].counted = true;
            self.lists.push_front(DISPATCH, key);
            self.sorted.hold(key, rq);
            return;
        };
        let (sector, end, sectors) = (io.sector(), io.end_sector(), io.sectors());
        let sync = is_sync(io.op(), io.flags());
        let prio = io.prio();
        let issuer = io.issuer();
        // A reinsert (a merge refused, a requeue) may still be on a list; a request not
        // counted in is on none (what is uncounted was unlinked first), and its key's
        // queue, if any, is not busy (a queue is busy only while its FIFO holds some).
        if self.info[key].counted {
            self.unlink(key);
        }
        if at_head {
            self.end_lone_wait(None, now);
        }
        if at_head && self.info[key].counted {
            // A requeued request goes first, outside any queue's budget.
            self.lists.push_front(DISPATCH, key);
            self.sorted.hold(key, rq);
            return;
        }
        let q = if self.info[key].counted && self.info[key].queue != NO_QUEUE {
            self.info[key].queue
        } else if let Some(q) = self.prepared_queue(io, issuer, sync) {
            self.check_prio(q, prio);
            q
        } else {
            self.queue_for(issuer, sync, prio, now)
        };
        if !self.info[key].counted {
            let expire = if sync {
                self.tunables.fifo_expire_sync_ns
            } else {
                self.tunables.fifo_expire_async_ns
            };
            self.info[key] = KeyInfo {
                queue: q,
                fifo_time: now.saturating_add(expire),
                sectors,
                counted: true,
                dispatched: false,
                injected: false,
            };
        }
        self.info[key].sectors = sectors;
        if at_head {
            self.lists.push_front(DISPATCH, key);
            self.sorted.hold(key, rq);
            return;
        }
        // An insert merge: a queued request of the same queue ending where this starts.
        let tree = q as usize;
        let rq = match self.sorted.insert_merge(cx, rq, sector, |_, t| t == tree) {
            Ok(into) => return self.requests_merged(cx, into, key),
            Err(rq) => rq,
        };
        self.add_to_queue(q, key, rq, sector, end, now);
    }

    /// Puts a new request of `q` in its tree and FIFO, and makes `q` backlogged if it was
    /// not.
    fn add_to_queue(&mut self, q: u32, key: usize, rq: Rq, sector: u64, end: u64, now: u64) {
        self.end_lone_wait(Some(q), now);
        let was_empty = self.lists.is_empty(Self::fifo(q));
        let (slice_idle, rotational) = (self.tunables.slice_idle_ns, self.rotational);
        let sectors = self.info[key].sectors;
        let queue = &mut self.queues[q as usize];
        if queue.sync && was_empty && queue.dispatched == 0 {
            queue.update_think_time(now, slice_idle);
        }
        queue.update_seek(sector, sectors, rotational);
        self.sorted.hold_sorted(q as usize, key, rq, sector, end);
        self.lists.push_back(Self::fifo(q), key);
        self.busy.push_back(q);
        self.idle.remove(q);
        if !self.sched.is_active(self.queues[q as usize].entity) {
            self.idle_to_busy(q, now);
        } else if q == self.in_service && self.idle_until.is_some() {
            // The request idling waited for: serve it at once.
            self.idle_until = None;
        }
        self.reaccount(q);
    }

    /// The request `from` merged into `into` (same queue): `into` keeps the earlier
    /// deadline and FIFO place, `from` is gone.
    fn finish_merged(&mut self, into: usize, from: usize) {
        let (fi, ii) = (self.info[from], self.info[into]);
        if fi.counted && fi.fifo_time < ii.fifo_time && self.lists.contains(into) {
            if self.lists.contains(from) {
                self.lists.remove(into);
                self.lists.insert_before(from, into);
            }
            self.info[into].fifo_time = fi.fifo_time;
        }
        self.unlink(from);
        let _ = self.sorted.take(from);
        self.info[from].counted = false;
    }

    /// Ends a dispatched request's time in the device.
    fn complete_key(&mut self, key: usize, now: u64) {
        let info = &mut self.info[key];
        if !info.dispatched {
            return;
        }
        info.dispatched = false;
        let injected = core::mem::take(&mut info.injected);
        let q = info.queue;
        self.update_hw_tag(q);
        self.in_flight = self.in_flight.saturating_sub(1);
        self.rate.last_completion = now;
        if q == NO_QUEUE {
            return;
        }
        self.request_done(q, now, injected);
    }
}

impl fmt::Debug for Bfq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bfq")
            .field("tunables", &self.tunables)
            .field("queued", &self.queued())
            .field("in_flight", &self.in_flight)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}
