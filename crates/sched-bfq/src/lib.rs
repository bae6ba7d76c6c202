//! BFQ for blkmq: budget fair queueing over B-WF2Q+ (Linux's `block/bfq-iosched.c`).
//!
//! Every issuer ([`IssuerId`]) gets a queue for its sync I/O (reads, and writes someone
//! waits for); async writes share one queue per priority class and level within a group.
//! Each queue is a leaf of a B-WF2Q+ scheduler ([`wf2q`]) with a weight — `(8 - level) x
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
//! [`blkmq_core::sched_index`], in arrays sized by [`Elevator::depth_updated`]; queue
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
mod queue;
mod rate;
mod service;
mod slot_list;
mod tunables;
pub mod wf2q;

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::fmt;

use blkmq_core::sched_index::{KeyLists, SortedRequests};
use blkmq_core::{Bio, BioFlags, Elevator, ElvCx, IoPrio, IssuerId, MergeKind, Op, Rq, RqIo};

/// A tunable refused (shared by every scheduler).
pub use blkmq_core::TunableError;
use burst::Burst;
use queue::{NO_QUEUE, Queue, class_of, prio_weight};
use rate::PeakRate;
use slot_list::SlotList;
pub use tunables::{
    MAX_BACK_SEEK_KIB, MAX_BACK_SEEK_PENALTY, MAX_BUDGET, MAX_EXPIRE_NS, MAX_SLICE_IDLE_NS,
    Tunables,
};
use wf2q::{Class, EntityId, Wf2q};

/// The list of requeued requests, served before any queue.
const DISPATCH: usize = 0;
/// Async queues per group: one per class and level.
const ASYNC_SLOTS: usize = 3 * IoPrio::LEVELS as usize;

/// The weights a group or an issuer may be given.
///
/// ```
/// use blkmq_sched_bfq::{Bfq, BfqError, GroupId, MAX_GROUP_WEIGHT};
/// let mut bfq = Bfq::new();
/// assert!(bfq.add_group(GroupId::ROOT, MAX_GROUP_WEIGHT).is_ok());
/// assert_eq!(bfq.add_group(GroupId::ROOT, 1001), Err(BfqError::BadWeight(1001)));
/// ```
pub const MAX_GROUP_WEIGHT: u32 = 1000;

/// The weight of a group made without one (Linux's cgroup default).
///
/// ```
/// use blkmq_sched_bfq::DEFAULT_GROUP_WEIGHT;
/// assert_eq!(DEFAULT_GROUP_WEIGHT, 100);
/// ```
pub const DEFAULT_GROUP_WEIGHT: u32 = 100;

/// A group of queues (what a cgroup is to Linux's BFQ): it gets a share of its parent's
/// service by its weight, and shares it among its queues and subgroups.
///
/// ```
/// use blkmq_sched_bfq::{Bfq, GroupId};
/// let mut bfq = Bfq::new();
/// let g = bfq.add_group(GroupId::ROOT, 200).unwrap();
/// assert_ne!(g, GroupId::ROOT);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupId(u32);

impl GroupId {
    /// The root group: every issuer's queues are in it unless moved.
    ///
    /// ```
    /// use blkmq_core::IssuerId;
    /// use blkmq_sched_bfq::{Bfq, GroupId};
    /// let mut bfq = Bfq::new();
    /// assert!(bfq.set_issuer_group(IssuerId(1), GroupId::ROOT).is_ok());
    /// ```
    pub const ROOT: GroupId = GroupId(0);
}

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

/// The state of an issuer's sync queue.
///
/// ```
/// use blkmq_sched_bfq::QueueStats;
/// assert!(!QueueStats::default().raised);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// The weight in use, raising included.
    pub weight: u32,
    /// Whether it is weight-raised.
    pub raised: bool,
    /// Whether more than 4 of its last 32 requests were far (> 8 MiB) seeks.
    pub seeky: bool,
    /// The budget of its current turn, or of its next one when it is not backlogged
    /// (sectors).
    pub budget: u64,
    /// Sectors dispatched, as charged (lifetime).
    pub service_sectors: u64,
    /// Requests dispatched (lifetime).
    pub dispatched: u64,
    /// Turns its budget timeout ended (lifetime).
    pub budget_timeouts: u64,
}

/// Scheduler-wide counters and estimates.
///
/// ```
/// use blkmq_sched_bfq::Bfq;
/// let stats = Bfq::new().stats();
/// assert_eq!((stats.peak_rate, stats.max_budget), (0, 16_384));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BfqStats {
    /// The estimated peak rate in sectors per second; 0 until measured.
    pub peak_rate: u64,
    /// The maximum budget in use (sectors).
    pub max_budget: u64,
    /// Times the device was idled for the queue in service.
    pub idle_waits: u64,
    /// Requests dispatched from another queue while idling.
    pub injected: u64,
    /// Turns ended by the budget timeout.
    pub budget_timeouts: u64,
    /// Queues weight-raised now.
    pub raised_queues: usize,
    /// Bursts of queue creations that became large.
    pub large_bursts: u64,
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
}

impl Balance {
    fn asymmetric(&self) -> bool {
        let classes = self.per_class.iter().filter(|&&n| n > 0).count();
        u128::from(self.plain) * self.sum_sq != u128::from(self.sum) * u128::from(self.sum)
            || classes > 1
            || self.groups_active > 1
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

fn check_weight(weight: u32) -> Result<(), BfqError> {
    if (1..=MAX_GROUP_WEIGHT).contains(&weight) {
        Ok(())
    } else {
        Err(BfqError::BadWeight(weight))
    }
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

    /// BFQ with `tunables`.
    ///
    /// # Errors
    /// [`TunableError`] for the first tunable out of range.
    ///
    /// ```
    /// use blkmq_sched_bfq::{Bfq, TunableError, Tunables};
    /// let t = Tunables { slice_idle_ns: 0, ..Tunables::default() };
    /// assert_eq!(Bfq::with_tunables(t).unwrap().tunables().slice_idle_ns, 0);
    /// let bad = Tunables { back_seek_penalty: 0, ..Tunables::default() };
    /// let err = Bfq::with_tunables(bad).unwrap_err();
    /// assert_eq!(err, TunableError { name: "back_seek_penalty", value: 0 });
    /// ```
    pub fn with_tunables(tunables: Tunables) -> Result<Self, TunableError> {
        tunables.validate()?;
        let mut bfq = Self::new();
        bfq.tunables = tunables;
        Ok(bfq)
    }

    /// The tunables.
    ///
    /// ```
    /// use blkmq_sched_bfq::Bfq;
    /// assert!(Bfq::new().tunables().low_latency);
    /// ```
    pub fn tunables(&self) -> &Tunables {
        &self.tunables
    }

    /// Sets all tunables at once.
    ///
    /// # Errors
    /// [`TunableError`] for the first tunable out of range (nothing is changed then).
    ///
    /// ```
    /// use blkmq_sched_bfq::{Bfq, Tunables};
    /// let mut bfq = Bfq::new();
    /// let t = Tunables { low_latency: false, max_budget: 4096, ..Tunables::default() };
    /// bfq.set_tunables(t).unwrap();
    /// assert_eq!(bfq.stats().max_budget, 4096);
    /// let bad = Tunables { timeout_sync_ns: 0, ..t };
    /// assert!(bfq.set_tunables(bad).is_err());
    /// assert_eq!(*bfq.tunables(), t);
    /// ```
    pub fn set_tunables(&mut self, tunables: Tunables) -> Result<(), TunableError> {
        tunables.validate()?;
        let low_latency = tunables.low_latency;
        self.tunables = tunables;
        // Through the one path that also ends raising when it goes off.
        self.set_low_latency(low_latency);
        Ok(())
    }

    /// Sets `slice_idle` (0 to [`MAX_SLICE_IDLE_NS`]; 0 turns idling off).
    ///
    /// # Errors
    /// [`TunableError`] out of range.
    ///
    /// ```
    /// use blkmq_sched_bfq::{Bfq, TunableError};
    /// let mut bfq = Bfq::new();
    /// bfq.set_slice_idle(0).unwrap();
    /// let err = bfq.set_slice_idle(2_000_000_000).unwrap_err();
    /// assert_eq!(err, TunableError { name: "slice_idle", value: 2_000_000_000 });
    /// ```
    pub fn set_slice_idle(&mut self, ns: u64) -> Result<(), TunableError> {
        Tunables::check_slice_idle(ns)?;
        self.tunables.slice_idle_ns = ns;
        Ok(())
    }

    /// Sets `timeout_sync` (1 ms to [`MAX_EXPIRE_NS`]).
    ///
    /// # Errors
    /// [`TunableError`] out of range.
    ///
    /// ```
    /// use blkmq_sched_bfq::Bfq;
    /// let mut bfq = Bfq::new();
    /// bfq.set_timeout_sync(250_000_000).unwrap();
    /// assert!(bfq.set_timeout_sync(999_999).is_err());
    /// ```
    pub fn set_timeout_sync(&mut self, ns: u64) -> Result<(), TunableError> {
        Tunables::check_timeout_sync(ns)?;
        self.tunables.timeout_sync_ns = ns;
        Ok(())
    }

    /// Sets `max_budget` in sectors (up to [`MAX_BUDGET`]; 0: auto-tuned from the peak
    /// rate).
    ///
    /// # Errors
    /// [`TunableError`] out of range.
    ///
    /// ```
    /// use blkmq_sched_bfq::Bfq;
    /// let mut bfq = Bfq::new();
    /// bfq.set_max_budget(2048).unwrap();
    /// assert_eq!(bfq.stats().max_budget, 2048);
    /// bfq.set_max_budget(0).unwrap(); // auto: the default until the rate is measured
    /// assert_eq!(bfq.stats().max_budget, 16_384);
    /// ```
    pub fn set_max_budget(&mut self, sectors: u64) -> Result<(), TunableError> {
        Tunables::check_max_budget(sectors)?;
        self.tunables.max_budget = sectors;
        Ok(())
    }

    /// Sets `fifo_expire_sync` (0 to [`MAX_EXPIRE_NS`]).
    ///
    /// # Errors
    /// [`TunableError`] out of range.
    ///
    /// ```
    /// use blkmq_sched_bfq::{Bfq, MAX_EXPIRE_NS};
    /// let mut bfq = Bfq::new();
    /// bfq.set_fifo_expire_sync(10_000_000).unwrap();
    /// assert!(bfq.set_fifo_expire_sync(MAX_EXPIRE_NS + 1).is_err());
    /// ```
    pub fn set_fifo_expire_sync(&mut self, ns: u64) -> Result<(), TunableError> {
        Tunables::check_fifo_expire_sync(ns)?;
        self.tunables.fifo_expire_sync_ns = ns;
        Ok(())
    }

    /// Sets `fifo_expire_async` (0 to [`MAX_EXPIRE_NS`]).
    ///
    /// # Errors
    /// [`TunableError`] out of range.
    ///
    /// ```
    /// use blkmq_sched_bfq::{Bfq, MAX_EXPIRE_NS};
    /// let mut bfq = Bfq::new();
    /// bfq.set_fifo_expire_async(500_000_000).unwrap();
    /// assert!(bfq.set_fifo_expire_async(MAX_EXPIRE_NS + 1).is_err());
    /// ```
    pub fn set_fifo_expire_async(&mut self, ns: u64) -> Result<(), TunableError> {
        Tunables::check_fifo_expire_async(ns)?;
        self.tunables.fifo_expire_async_ns = ns;
        Ok(())
    }

    /// Sets `back_seek_max` in KiB (0 to [`MAX_BACK_SEEK_KIB`]; 0: never seek back while a
    /// request lies ahead).
    ///
    /// # Errors
    /// [`TunableError`] out of range.
    ///
    /// ```
    /// use blkmq_sched_bfq::{Bfq, MAX_BACK_SEEK_KIB};
    /// let mut bfq = Bfq::new();
    /// bfq.set_back_seek_max(0).unwrap();
    /// assert!(bfq.set_back_seek_max(MAX_BACK_SEEK_KIB + 1).is_err());
    /// ```
    pub fn set_back_seek_max(&mut self, kib: u64) -> Result<(), TunableError> {
        Tunables::check_back_seek_max(kib)?;
        self.tunables.back_seek_max_kib = kib;
        Ok(())
    }

    /// Sets `back_seek_penalty` (1 to [`MAX_BACK_SEEK_PENALTY`]).
    ///
    /// # Errors
    /// [`TunableError`] out of range.
    ///
    /// ```
    /// use blkmq_sched_bfq::{Bfq, TunableError};
    /// let mut bfq = Bfq::new();
    /// bfq.set_back_seek_penalty(1).unwrap();
    /// let err = bfq.set_back_seek_penalty(0).unwrap_err();
    /// assert_eq!(err, TunableError { name: "back_seek_penalty", value: 0 });
    /// ```
    pub fn set_back_seek_penalty(&mut self, n: u32) -> Result<(), TunableError> {
        Tunables::check_back_seek_penalty(n)?;
        self.tunables.back_seek_penalty = n;
        Ok(())
    }

    /// Turns low latency (weight raising, burst detection) on or off; off ends every
    /// raising at once.
    ///
    /// ```
    /// use blkmq_sched_bfq::Bfq;
    /// let mut bfq = Bfq::new();
    /// bfq.set_low_latency(false);
    /// assert!(!bfq.tunables().low_latency);
    /// ```
    pub fn set_low_latency(&mut self, on: bool) {
        self.tunables.low_latency = on;
        if !on {
            for q in 0..self.queues.len() as u32 {
                if self.queues[q as usize].live && self.queues[q as usize].wr_coeff > 1 {
                    self.end_raising(q, 0);
                }
            }
        }
    }

    /// Turns strict guarantees on or off: with them, every sync queue is idled for when it
    /// empties, and nothing is injected.
    ///
    /// ```
    /// use blkmq_sched_bfq::Bfq;
    /// let mut bfq = Bfq::new();
    /// bfq.set_strict_guarantees(true);
    /// assert!(bfq.tunables().strict_guarantees);
    /// ```
    pub fn set_strict_guarantees(&mut self, on: bool) {
        self.tunables.strict_guarantees = on;
    }

    /// A new group under `parent`, with `weight` (1 to [`MAX_GROUP_WEIGHT`]; Linux's
    /// default is [`DEFAULT_GROUP_WEIGHT`]).
    ///
    /// # Errors
    /// [`BfqError::NoSuchGroup`] for `parent`, [`BfqError::BadWeight`].
    ///
    /// ```
    /// use blkmq_sched_bfq::{Bfq, BfqError, GroupId};
    /// let mut bfq = Bfq::new();
    /// let g = bfq.add_group(GroupId::ROOT, 100).unwrap();
    /// let sub = bfq.add_group(g, 500).unwrap();
    /// assert_ne!(g, sub);
    /// assert_eq!(bfq.add_group(GroupId::ROOT, 0), Err(BfqError::BadWeight(0)));
    /// ```
    pub fn add_group(&mut self, parent: GroupId, weight: u32) -> Result<GroupId, BfqError> {
        check_weight(weight)?;
        let parent = self
            .groups
            .get(parent.0 as usize)
            .ok_or(BfqError::NoSuchGroup)?
            .entity;
        let entity = self
            .sched
            .add_group(parent, weight, Class::Be)
            .map_err(|_| BfqError::NoSuchGroup)?;
        self.groups.push(Group {
            entity,
            async_queues: [NO_QUEUE; ASYNC_SLOTS],
            active: 0,
        });
        Ok(GroupId(self.groups.len() as u32 - 1))
    }

    /// Sets a group's weight (1 to [`MAX_GROUP_WEIGHT`]); it applies from the group's next
    /// activation.
    ///
    /// # Errors
    /// [`BfqError::NoSuchGroup`], [`BfqError::BadWeight`].
    ///
    /// ```
    /// use blkmq_sched_bfq::{Bfq, BfqError, GroupId};
    /// let mut bfq = Bfq::new();
    /// let g = bfq.add_group(GroupId::ROOT, 100).unwrap();
    /// bfq.set_group_weight(g, 300).unwrap();
    /// assert_eq!(bfq.set_group_weight(g, 1001), Err(BfqError::BadWeight(1001)));
    /// ```
    pub fn set_group_weight(&mut self, group: GroupId, weight: u32) -> Result<(), BfqError> {
        check_weight(weight)?;
        if group == GroupId::ROOT {
            // The root shares nothing with a sibling: its weight is moot.
            return Ok(());
        }
        let entity = self
            .groups
            .get(group.0 as usize)
            .ok_or(BfqError::NoSuchGroup)?
            .entity;
        self.sched
            .set_weight(entity, weight)
            .map_err(|_| BfqError::NoSuchGroup)
    }

    /// Puts an issuer's queues in `group`: its async requests from now on, its sync queue
    /// when it is next idle.
    ///
    /// # Errors
    /// [`BfqError::NoSuchGroup`].
    ///
    /// ```
    /// use blkmq_core::IssuerId;
    /// use blkmq_sched_bfq::{Bfq, BfqError, GroupId};
    /// let mut bfq = Bfq::new();
    /// let g = bfq.add_group(GroupId::ROOT, 100).unwrap();
    /// bfq.set_issuer_group(IssuerId(3), g).unwrap();
    /// let other = Bfq::new().add_group(GroupId::ROOT, 100).unwrap();
    /// let mut fresh = Bfq::new();
    /// assert_eq!(fresh.set_issuer_group(IssuerId(3), other), Err(BfqError::NoSuchGroup));
    /// ```
    pub fn set_issuer_group(&mut self, issuer: IssuerId, group: GroupId) -> Result<(), BfqError> {
        if group.0 as usize >= self.groups.len() {
            return Err(BfqError::NoSuchGroup);
        }
        let entry = self.issuer_entry(issuer);
        entry.group = group.0;
        let q = entry.queue;
        if q != NO_QUEUE {
            // Its sync queue moves when next it becomes backlogged.
            self.queues[q as usize].next_group = group.0;
        }
        Ok(())
    }

    /// Overrides the weight the I/O priority gives an issuer's sync queue (1 to
    /// [`MAX_GROUP_WEIGHT`]). A queue with a weight set is never raised.
    ///
    /// # Errors
    /// [`BfqError::BadWeight`].
    ///
    /// ```
    /// use blkmq_core::IssuerId;
    /// use blkmq_sched_bfq::{Bfq, BfqError};
    /// let mut bfq = Bfq::new();
    /// bfq.set_issuer_weight(IssuerId(1), 400).unwrap();
    /// assert_eq!(bfq.set_issuer_weight(IssuerId(1), 1001), Err(BfqError::BadWeight(1001)));
    /// ```
    pub fn set_issuer_weight(&mut self, issuer: IssuerId, weight: u32) -> Result<(), BfqError> {
        check_weight(weight)?;
        let entry = self.issuer_entry(issuer);
        entry.weight = Some(weight);
        let q = entry.queue;
        if q != NO_QUEUE {
            let queue = &mut self.queues[q as usize];
            queue.orig_weight = weight;
            queue.explicit_weight = true;
            let (e, w) = (queue.entity, queue.weight());
            let _ = self.sched.set_weight(e, w);
            self.reaccount(q);
        }
        Ok(())
    }

    /// The state of an issuer's sync queue, once it has issued sync I/O.
    ///
    /// ```
    /// use blkmq_core::IssuerId;
    /// use blkmq_sched_bfq::Bfq;
    /// assert!(Bfq::new().issuer_stats(IssuerId(9)).is_none());
    /// ```
    pub fn issuer_stats(&self, issuer: IssuerId) -> Option<QueueStats> {
        let entry = self.issuers.get(&issuer)?;
        let mut stats = QueueStats {
            weight: entry
                .weight
                .unwrap_or(prio_weight(IoPrio::default().level())),
            raised: false,
            seeky: false,
            budget: 0,
            service_sectors: entry.service,
            dispatched: entry.dispatched,
            budget_timeouts: entry.budget_timeouts,
        };
        if entry.queue != NO_QUEUE {
            let q = &self.queues[entry.queue as usize];
            // Its queue's counts, not yet folded into the issuer's.
            stats.service_sectors += q.total_service;
            stats.dispatched += q.total_dispatched;
            stats.budget_timeouts += q.budget_timeouts;
            stats.weight = q.weight();
            stats.raised = q.wr_coeff > 1;
            stats.seeky = q.seeky();
            stats.budget = if self.sched.is_active(q.entity) {
                q.budget
            } else {
                q.max_budget
            };
        } else if entry.dispatched == 0 {
            return None;
        }
        Some(stats)
    }

    /// Scheduler-wide counters.
    ///
    /// ```
    /// use blkmq_sched_bfq::Bfq;
    /// assert_eq!(Bfq::new().stats().idle_waits, 0);
    /// ```
    pub fn stats(&self) -> BfqStats {
        BfqStats {
            peak_rate: self.rate.rate,
            max_budget: self.max_budget_now(),
            raised_queues: self.nr_raised,
            ..self.stats
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
    fn check_prio(&mut self, q: u32, prio: IoPrio) {
        let queue = &mut self.queues[q as usize];
        let class = class_of(prio.class());
        if queue.class == class && queue.level == prio.level() {
            return;
        }
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
        // A reinsert (a merge refused, a requeue) may still be on a list.
        self.unlink(key);
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

impl Elevator for Bfq {
    fn name(&self) -> &'static str {
        "bfq"
    }

    fn depth_updated(&mut self, nr_requests: usize, nr_keys: usize) {
        self.end_lone_wait(None, 0);
        self.nr_requests = nr_requests;
        if nr_keys != self.sorted.forest().nr_keys() {
            self.grow(nr_keys);
        }
    }

    fn min_shallow_depth(&self) -> Option<usize> {
        // The smallest of the limits: async I/O while a queue is raised.
        Some(((self.nr_requests * 3) >> 4).max(1))
    }

    fn limit_depth(&self, op: Op, flags: BioFlags) -> Option<usize> {
        let sync = is_sync(op, flags);
        if (sync && !op.is_write()) || self.nr_requests == 0 {
            return None;
        }
        let d = self.nr_requests;
        let limit = match (self.balance.raised > 0, sync) {
            (false, false) => d >> 1,
            (false, true) => (d * 3) >> 2,
            (true, false) => (d * 3) >> 4,
            (true, true) => (d * 6) >> 4,
        };
        Some(limit.max(1))
    }

    fn prepare_request(&mut self, cx: &ElvCx<'_>, rq: &mut Rq) {
        // Make the request's queue now, where allocating is expected, not at insertion.
        let Ok(io) = cx.io(rq) else {
            return;
        };
        let (sync, prio, issuer) = (is_sync(io.op(), io.flags()), io.prio(), io.issuer());
        if self.find_queue(issuer, sync, prio).is_none() {
            self.queue_for(issuer, sync, prio, cx.now_ns());
        }
    }

    fn insert_requests(
        &mut self,
        cx: &ElvCx<'_>,
        rqs: &mut dyn Iterator<Item = Rq>,
        at_head: bool,
    ) {
        let now = cx.now_ns();
        self.rotational = cx.limits().rotational;
        // A batch at the head keeps its own order.
        let mut prev: Option<usize> = None;
        for rq in rqs {
            if !at_head {
                self.insert_one(cx, rq, false, now);
                continue;
            }
            let key = cx.key(&rq);
            self.insert_one(cx, rq, at_head, now);
            if self.lists.list_of(key) == Some(DISPATCH) {
                if let Some(p) = prev {
                    if self.lists.same_list(p, key) {
                        self.lists.remove(key);
                        self.lists.insert_after(p, key);
                    }
                }
                prev = Some(key);
            }
        }
    }

    fn insert_request(&mut self, cx: &ElvCx<'_>, rq: Rq, at_head: bool) {
        let now = cx.now_ns();
        self.rotational = cx.limits().rotational;
        self.insert_one(cx, rq, at_head, now);
    }

    fn dispatch_request(&mut self, cx: &ElvCx<'_>, _hctx: usize) -> Option<Rq> {
        if self.lists.total() == 0 {
            return None;
        }
        let now = cx.now_ns();
        self.rotational = cx.limits().rotational;
        let (key, injected) = self.next_dispatch(now)?;
        let rq = self.sorted.take(key)?;
        let (sector, sectors) = cx.io(&rq).map_or((0, self.info[key].sectors), |io| {
            (io.sector(), io.sectors())
        });
        self.dispatched(key, sector, sectors, injected, now);
        Some(rq)
    }

    fn has_work(&self, _hctx: usize) -> bool {
        self.lists.total() != 0
    }

    fn allow_merge(&self, io: &RqIo, bio: &Bio) -> bool {
        // Merges stay within a queue: the same issuer's sync queue, or the same async one.
        let sync = is_sync(io.op(), io.flags());
        sync == bio.is_sync() && (!sync || io.issuer() == bio.issuer)
    }

    fn request_merge(&mut self, cx: &ElvCx<'_>, bio: &Bio) -> Option<(usize, MergeKind)> {
        if self.lists.total() == 0 {
            // Nothing queued to merge into (an idle device's common case).
            return None;
        }
        let q = self.find_queue(bio.issuer, bio.is_sync(), bio.prio)? as usize;
        self.sorted.request_merge(cx, bio, q, true, |_, t| t == q)
    }

    fn request(&self, key: usize) -> Option<&Rq> {
        self.sorted.request(key)
    }

    fn request_mut(&mut self, key: usize) -> Option<&mut Rq> {
        self.sorted.request_mut(key)
    }

    fn request_merged(&mut self, cx: &ElvCx<'_>, key: usize, kind: MergeKind) {
        if let Some(sectors) = self.sorted.request_merged(cx, key, kind) {
            self.info[key].sectors = sectors;
        }
    }

    fn next_request(&mut self, _cx: &ElvCx<'_>, key: usize, kind: MergeKind) -> Option<usize> {
        self.sorted.next_request(key, kind)
    }

    fn take_request(&mut self, key: usize) -> Option<Rq> {
        // Out of the sector order, but kept in the FIFO until `requests_merged` has handed
        // its place to the survivor (or the merge fails and it is inserted again).
        self.sorted.take_request(key)
    }

    fn requests_merged(&mut self, cx: &ElvCx<'_>, into: usize, from: usize) {
        if let Some(sectors) = self.sorted.requests_merged(cx, into) {
            self.info[into].sectors = sectors;
        }
        self.finish_merged(into, from);
    }

    fn completed_request(&mut self, cx: &ElvCx<'_>, rq: &Rq) {
        let key = cx.key(rq);
        if self.info.get(key).is_some_and(|i| i.dispatched) {
            self.complete_key(key, cx.now_ns());
        }
    }

    fn finish_request(&mut self, cx: &ElvCx<'_>, rq: &Rq) {
        let key = cx.key(rq);
        let Some(info) = self.info.get(key) else {
            return;
        };
        if info.dispatched {
            // Issued, but not reported completed: account for it here.
            self.complete_key(key, cx.now_ns());
        }
        if self.info[key].counted {
            self.info[key].counted = false;
            // Ended before dispatch (an error): no trace may stay in the orders.
            if self.sorted.request(key).is_some() || self.lists.contains(key) {
                self.unlink(key);
                let _ = self.sorted.take(key);
                let q = self.info[key].queue;
                if q != NO_QUEUE {
                    self.reaccount(q);
                }
            }
        }
    }

    fn requeue_request(&mut self, cx: &ElvCx<'_>, rq: &Rq) {
        let key = cx.key(rq);
        let Some(info) = self.info.get_mut(key) else {
            return;
        };
        if !info.dispatched {
            return;
        }
        info.dispatched = false;
        let injected = core::mem::take(&mut info.injected);
        let q = info.queue;
        self.in_flight = self.in_flight.saturating_sub(1);
        if q != NO_QUEUE {
            self.request_returned(q, injected);
        }
    }

    fn next_timer(&self) -> Option<u64> {
        if self.in_service == NO_QUEUE {
            return None;
        }
        self.idle_until
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
