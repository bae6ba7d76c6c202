//! Tag sets: the tag space of a host, per hardware queue or shared by all of them.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cmp::Reverse;
use core::fmt;
use core::sync::atomic::AtomicU32 as IdCounter;

use crate::error::{ConfigError, TagError};
use crate::platform::Platform;
use crate::request::{BioPool, NO_TAG, Request, RqState};
use crate::sync::{AtomicUsize, Ordering};
use crate::tags::{MapParams, RequestInit, TagMap};

/// The deepest a tag set may be (Linux's `BLK_MQ_MAX_DEPTH`).
///
/// ```
/// use blkmq_core::{MAX_DEPTH, TagSet};
/// assert!(TagSet::builder(MAX_DEPTH).validate().is_ok());
/// assert!(TagSet::builder(MAX_DEPTH + 1).validate().is_err());
/// ```
pub const MAX_DEPTH: usize = 10240;
/// The most hardware queues a tag set may have: a [`unique_tag`](crate::unique_tag) keeps 16
/// bits for the queue.
///
/// ```
/// use blkmq_core::{MAX_HW_QUEUES, TagSet};
/// assert!(TagSet::builder(8).hw_queues(MAX_HW_QUEUES).validate().is_ok());
/// assert!(TagSet::builder(8).hw_queues(MAX_HW_QUEUES + 1).validate().is_err());
/// ```
pub const MAX_HW_QUEUES: usize = 1 << 16;
/// The deepest scheduler tags may be (Linux's `MAX_SCHED_RQ`).
///
/// ```
/// use blkmq_core::{MAX_SCHED_DEPTH, StdPlatform, TagSet};
///
/// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
/// let mut queue = set.attach().unwrap();
/// assert!(queue.attach_scheduler(Some(MAX_SCHED_DEPTH + 1), |_| ()).is_err());
/// assert!(queue.attach_scheduler(Some(MAX_SCHED_DEPTH), |_| ()).is_ok());
/// ```
pub const MAX_SCHED_DEPTH: usize = 2048;
/// The default request timeout: 30 s.
///
/// ```
/// use blkmq_core::{DEFAULT_TIMEOUT_NS, StdPlatform, TagSet};
/// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
/// assert_eq!(set.timeout_ns(), DEFAULT_TIMEOUT_NS);
/// ```
pub const DEFAULT_TIMEOUT_NS: u64 = 30_000_000_000;
/// The default limit on request queues sharing one tag set.
///
/// ```
/// use blkmq_core::{DEFAULT_MAX_QUEUES, StdPlatform, TagSet};
///
/// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
/// let queues: Vec<_> = (0..DEFAULT_MAX_QUEUES).map(|_| set.attach().unwrap()).collect();
/// assert_eq!(set.nr_queues(), DEFAULT_MAX_QUEUES);
/// assert!(set.attach().is_err());
/// ```
pub const DEFAULT_MAX_QUEUES: usize = 1024;

bitflags::bitflags! {
    /// How a tag set behaves (Linux's `BLK_MQ_F_*`).
    ///
    /// ```
    /// use blkmq_core::TagSetFlags;
    /// let flags = TagSetFlags::SHARED_HOST_TAGS | TagSetFlags::BLOCKING;
    /// assert!(flags.contains(TagSetFlags::SHARED_HOST_TAGS));
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct TagSetFlags: u32 {
        /// One tag space and one request array for every hardware queue of the set.
        const SHARED_HOST_TAGS = 1 << 0;
        /// The driver's `queue_rq` may sleep.
        const BLOCKING = 1 << 1;
        /// Queues of this set never get an I/O scheduler.
        const NO_SCHED = 1 << 2;
        /// Tags are handed out in strict round-robin order (some ATA hosts need it).
        const ROUND_ROBIN = 1 << 3;
    }
}

/// Hands out tag-set and scheduler-tag identities; `Rq` tokens carry them.
static NEXT_POOL_ID: IdCounter = IdCounter::new(1);

/// Hands out request-queue identities; requests record their queue's.
pub(crate) static NEXT_QUEUE_ID: IdCounter = IdCounter::new(0);

/// The next identity from `counter`, never one handed out before: `None` once all 2^32 are
/// used (a token names its tags and queue by identity, so one must never be reused).
pub(crate) fn next_id(counter: &IdCounter) -> Option<u32> {
    counter
        .fetch_update(
            core::sync::atomic::Ordering::Relaxed,
            core::sync::atomic::Ordering::Relaxed,
            |id| id.checked_add(1),
        )
        .ok()
}

pub(crate) fn next_pool_id() -> Option<u32> {
    next_id(&NEXT_POOL_ID)
}

/// Builds a [`TagSet`]; every parameter is checked by [`build`](Self::build).
///
/// ```
/// use blkmq_core::{StdPlatform, TagSet, TagSetFlags};
///
/// let set = TagSet::builder(256)
///     .hw_queues(8)
///     .reserved(2)
///     .flags(TagSetFlags::SHARED_HOST_TAGS)
///     .build(StdPlatform::new(), |init| init.tag as u32)
///     .unwrap();
/// assert_eq!(set.nr_maps(), 1); // one tag space for all eight queues
/// assert_eq!(set.depth(), 256);
///
/// assert!(TagSet::builder(0).build(StdPlatform::new(), |_| ()).is_err());
/// ```
#[derive(Clone, Debug)]
pub struct TagSetBuilder {
    depth: usize,
    nr_hw_queues: usize,
    reserved: usize,
    flags: TagSetFlags,
    max_queues: usize,
    timeout_ns: u64,
    bio_slots: Option<usize>,
}

impl TagSetBuilder {
    /// With `nr` hardware queues (default 1).
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(16).hw_queues(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// assert_eq!(set.nr_hw_queues(), 4);
    /// assert_eq!(set.nr_maps(), 4); // per-queue tags: one map each
    /// assert!(TagSet::builder(16).hw_queues(0).validate().is_err());
    /// ```
    pub fn hw_queues(mut self, nr: usize) -> Self {
        self.nr_hw_queues = nr;
        self
    }

    /// With `nr` reserved tags (default 0): numbered first, allocated only on request, never
    /// subject to fair sharing.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(16).reserved(2).build(StdPlatform::new(), |_| ()).unwrap();
    /// assert_eq!(set.reserved(), 2);
    /// let queue = set.attach().unwrap();
    /// let rq = queue.alloc(&Alloc::new(0, 0).reserved()).unwrap();
    /// assert!(rq.tag() < 2);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn reserved(mut self, nr: usize) -> Self {
        self.reserved = nr;
        self
    }

    /// With `flags` (default none).
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagSet, TagSetFlags};
    ///
    /// let set = TagSet::builder(16)
    ///     .hw_queues(4)
    ///     .flags(TagSetFlags::SHARED_HOST_TAGS)
    ///     .build(StdPlatform::new(), |_| ())
    ///     .unwrap();
    /// assert!(set.flags().contains(TagSetFlags::SHARED_HOST_TAGS));
    /// assert_eq!(set.nr_maps(), 1);
    /// ```
    pub fn flags(mut self, flags: TagSetFlags) -> Self {
        self.flags = flags;
        self
    }

    /// At most `max` request queues may share the set (default [`DEFAULT_MAX_QUEUES`]).
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagError, TagSet};
    ///
    /// let set = TagSet::builder(16).max_queues(1).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// assert_eq!(set.attach().unwrap_err(), TagError::TooManyQueues { max: 1 });
    /// drop(queue);
    /// assert!(set.attach().is_ok());
    /// ```
    pub fn max_queues(mut self, max: usize) -> Self {
        self.max_queues = max;
        self
    }

    /// Requests time out `timeout_ns` after they start (default [`DEFAULT_TIMEOUT_NS`]).
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(16).timeout_ns(5_000).build(StdPlatform::new(), |_| ()).unwrap();
    /// assert_eq!(set.timeout_ns(), 5_000);
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.start(&mut rq, 100).unwrap();
    /// assert_eq!(queue.request(&rq).unwrap().deadline_ns(), 5_100);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn timeout_ns(mut self, timeout_ns: u64) -> Self {
        self.timeout_ns = timeout_ns;
        self
    }

    /// Room for `slots` merged bios in all, shared by every request of the set (a request's
    /// first bio needs none; default 4 x depth). A merge that finds no room is refused, and
    /// the bio gets a request of its own.
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, Op, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).bio_slots(1).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.set_bio(&mut rq, Bio::new(Op::Write, 0, 8)).unwrap();
    /// assert!(queue.append_bio(&mut rq, Bio::new(Op::Write, 8, 8)).unwrap().is_ok());
    /// let refused = queue.append_bio(&mut rq, Bio::new(Op::Write, 16, 8)).unwrap();
    /// assert_eq!(refused.unwrap_err().sector, 16); // the bio comes back
    /// queue.free(rq).unwrap();
    /// ```
    pub fn bio_slots(mut self, slots: usize) -> Self {
        self.bio_slots = Some(slots);
        self
    }

    /// Checks the parameters without building.
    ///
    /// # Errors
    /// The [`ConfigError`] `build` would return.
    ///
    /// ```
    /// use blkmq_core::{ConfigError, TagSet};
    ///
    /// assert!(TagSet::builder(8).reserved(7).validate().is_ok());
    /// assert_eq!(
    ///     TagSet::builder(8).reserved(8).validate(),
    ///     Err(ConfigError::TooManyReserved { reserved: 8, depth: 8 })
    /// );
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.depth == 0 {
            return Err(ConfigError::ZeroDepth);
        }
        if self.depth > MAX_DEPTH {
            return Err(ConfigError::DepthTooLarge {
                depth: self.depth,
                max: MAX_DEPTH,
            });
        }
        if self.reserved >= self.depth {
            return Err(ConfigError::TooManyReserved {
                reserved: self.reserved,
                depth: self.depth,
            });
        }
        if self.nr_hw_queues == 0 {
            return Err(ConfigError::ZeroHwQueues);
        }
        if self.nr_hw_queues > MAX_HW_QUEUES {
            return Err(ConfigError::TooManyHwQueues {
                nr_hw_queues: self.nr_hw_queues,
                max: MAX_HW_QUEUES,
            });
        }
        if self.max_queues == 0 {
            return Err(ConfigError::ZeroQueues);
        }
        Ok(())
    }

    /// Builds the set on `platform`, calling `init_request` once per preallocated request
    /// (Linux's `init_request`) to make the driver's payload.
    ///
    /// Per-queue tags allocate `nr_hw_queues` tag maps of `depth` requests each; shared host
    /// tags allocate one, whatever the number of hardware queues.
    ///
    /// # Errors
    /// [`ConfigError`]: a depth of 0 or above [`MAX_DEPTH`], reserved tags leaving no normal
    /// tag, 0 or more than [`MAX_HW_QUEUES`] hardware queues, a `max_queues` of 0, a
    /// platform with no CPU.
    ///
    /// ```
    /// use blkmq_core::{ConfigError, StdPlatform, TagSet, TagSetFlags};
    ///
    /// let mut made = Vec::new();
    /// let set = TagSet::builder(8)
    ///     .hw_queues(2)
    ///     .build(StdPlatform::new(), |init| made.push((init.map, init.tag)))
    ///     .unwrap();
    /// assert_eq!(made.len(), 16); // 8 requests for each of the 2 queues
    /// assert_eq!(set.busy(), 0);
    ///
    /// let mut made = 0;
    /// let shared = TagSet::builder(8).hw_queues(2).flags(TagSetFlags::SHARED_HOST_TAGS);
    /// shared.build(StdPlatform::new(), |_| made += 1).unwrap();
    /// assert_eq!(made, 8); // one map for both
    ///
    /// let err = TagSet::builder(8).max_queues(0).build(StdPlatform::new(), |_| ());
    /// assert_eq!(err.unwrap_err(), ConfigError::ZeroQueues);
    /// ```
    pub fn build<T, P: Platform>(
        self,
        platform: P,
        mut init_request: impl FnMut(RequestInit) -> T,
    ) -> Result<Arc<TagSet<T, P>>, ConfigError> {
        self.validate()?;
        let nr_cpus = platform.nr_cpus();
        if nr_cpus == 0 {
            return Err(ConfigError::ZeroCpus);
        }
        let shared = self.flags.contains(TagSetFlags::SHARED_HOST_TAGS);
        let nr_maps = if shared { 1 } else { self.nr_hw_queues };
        let maps = (0..nr_maps)
            .map(|map| {
                let params = MapParams {
                    depth: self.depth,
                    reserved: self.reserved,
                    nr_cpus,
                    round_robin: self.flags.contains(TagSetFlags::ROUND_ROBIN),
                    driver: true,
                    map,
                    min_shallow_depth: None,
                };
                TagMap::new(&params, &mut init_request)
            })
            .collect::<Result<Box<[_]>, _>>()?;
        let bios = BioPool::new(self.bio_slots.unwrap_or(4 * self.depth))?;
        // Room for every driver tag, made here: a busy walk allocates nothing.
        let seen = Vec::with_capacity(maps.iter().map(|m| m.requests.len()).sum());
        let id = next_pool_id().ok_or(ConfigError::IdentitiesExhausted)?;
        Ok(Arc::new(TagSet {
            id,
            nr_hw_queues: self.nr_hw_queues,
            depth: AtomicUsize::new(self.depth),
            reserved: self.reserved,
            flags: self.flags,
            max_queues: self.max_queues,
            timeout_ns: self.timeout_ns,
            nr_cpus,
            maps,
            bios,
            queues: AtomicUsize::new(0),
            iter_lock: lock_api::Mutex::new(seen),
            platform,
        }))
    }
}

/// The tags and requests of a host: per hardware queue, or one set shared by all of them.
///
/// Request queues (LUNs, namespaces) use a tag set through a [`QueueTags`](crate::QueueTags)
/// from [`attach`](Self::attach). While more than one is attached, each queue that allocates
/// counts itself active, and a queue may hold at most `max(ceil(depth / active), 4)` normal
/// tags of a map (reserved tags are exempt); a queue marked idle gives its share back.
///
/// # Invariants
/// * `maps` has one entry with [`TagSetFlags::SHARED_HOST_TAGS`], else one per hardware
///   queue; each holds `depth` preallocated requests, allocated here and freed with the set.
/// * A map's `rqs[tag]` is non-null only while a scheduler request holds driver tag `tag`,
///   and then points into scheduler tags that are freed only under `iter_lock` after their
///   slots are cleared.
/// * `iter_lock` holds the busy walk's room: capacity for one entry per driver tag of the
///   maps' initial depths, empty outside a walk.
/// * `id` (and every scheduler-tag identity) is handed out once while the process runs, so
///   an [`Rq`](crate::Rq) names requests of one set or of none.
/// * `queues` counts the attached [`QueueTags`](crate::QueueTags): made by `attach`,
///   uncounted by their drop, which first frees every request they still had out.
/// * Each bio-pool slot is on the chain of at most one request, touched only by that
///   request's owner.
///
/// ```
/// use blkmq_core::{Alloc, StdPlatform, TagSet};
///
/// let set = TagSet::builder(64).hw_queues(2).build(StdPlatform::new(), |_| ()).unwrap();
/// let queue = set.attach().unwrap();
/// let rq = queue.alloc(&Alloc::new(1, 0)).unwrap();
/// assert_eq!(set.busy(), 1);
/// queue.free(rq).unwrap();
/// assert_eq!(set.busy(), 0);
/// ```
pub struct TagSet<T, P: Platform> {
    pub(crate) id: u32,
    nr_hw_queues: usize,
    depth: AtomicUsize,
    reserved: usize,
    flags: TagSetFlags,
    max_queues: usize,
    timeout_ns: u64,
    nr_cpus: usize,
    pub(crate) maps: Box<[TagMap<T, P::RawMutex>]>,
    pub(crate) bios: BioPool,
    /// Attached request queues; above one, fair sharing is on.
    pub(crate) queues: AtomicUsize,
    /// Held by busy iteration and by whoever frees scheduler tags (see the invariants); it
    /// holds the busy walk's room.
    pub(crate) iter_lock: lock_api::Mutex<P::RawMutex, Vec<Seen>>,
    pub(crate) platform: P,
}

/// A request seen by busy-tag iteration ([`TagSet::for_each_busy`],
/// [`QueueTags::for_each_busy`](crate::QueueTags::for_each_busy)).
///
/// ```
/// use blkmq_core::{Alloc, RqState, StdPlatform, TagSet};
///
/// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
/// let (a, b) = (set.attach().unwrap(), set.attach().unwrap());
/// let rq = a.alloc(&Alloc::new(0, 0)).unwrap();
/// let mut other = b.alloc(&Alloc::new(0, 0)).unwrap();
/// b.start(&mut other, 0).unwrap();
/// let mut seen = Vec::new();
/// set.for_each_busy(|busy| {
///     assert_eq!((busy.hctx, busy.tag), (0, busy.request.tag()));
///     seen.push((busy.queue, busy.state));
///     true
/// });
/// assert_eq!(seen, [(a.id(), RqState::Idle), (b.id(), RqState::InFlight)]);
/// a.free(rq).unwrap();
/// b.free(other).unwrap();
/// ```
#[derive(Debug)]
pub struct BusyRq<'a, T> {
    /// The hardware queue.
    pub hctx: usize,
    /// The driver tag.
    pub tag: u32,
    /// The request queue that owns the request: its [`QueueTags::id`](crate::QueueTags::id)
    /// (and [`RequestQueue::id`](crate::RequestQueue::id)).
    pub queue: u32,
    /// The request's state and [generation](Request::generation) when the walk saw it,
    /// both found again just before `f` was called: [`RqState::InFlight`] for a started
    /// request, [`RqState::Idle`] for one allocated and not (or no longer) started,
    /// [`RqState::Complete`] for one whose tags are being freed.
    pub state: RqState,
    /// See [`state`](Self::state): compare it with [`Request::snapshot`] before acting on
    /// the request outside the walk.
    pub generation: u64,
    /// The request.
    pub request: &'a Request<T>,
}

/// One request a busy walk found while reading the maps, looked at again before it is
/// reported.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seen {
    /// The request's address (compared only, never followed).
    addr: usize,
    generation: u64,
    state: RqState,
    map: u32,
    tag: u16,
}

impl TagSet<(), crate::platform::NoPlatform> {
    /// A builder for a tag set of `depth` tags per map (including reserved ones).
    ///
    /// ```
    /// use blkmq_core::{DEFAULT_TIMEOUT_NS, StdPlatform, TagSet, TagSetFlags};
    ///
    /// let set = TagSet::builder(32).build(StdPlatform::new(), |_| ()).unwrap();
    /// assert_eq!((set.depth(), set.nr_hw_queues(), set.reserved()), (32, 1, 0));
    /// assert_eq!(set.flags(), TagSetFlags::empty());
    /// assert_eq!(set.timeout_ns(), DEFAULT_TIMEOUT_NS);
    /// ```
    pub fn builder(depth: usize) -> TagSetBuilder {
        TagSetBuilder {
            depth,
            nr_hw_queues: 1,
            reserved: 0,
            flags: TagSetFlags::empty(),
            max_queues: DEFAULT_MAX_QUEUES,
            timeout_ns: DEFAULT_TIMEOUT_NS,
            bio_slots: None,
        }
    }
}

impl<T, P: Platform> TagSet<T, P> {
    /// Number of hardware queues.
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagSet};
    /// let set = TagSet::builder(8).hw_queues(3).build(StdPlatform::new(), |_| ()).unwrap();
    /// assert_eq!(set.nr_hw_queues(), 3);
    /// ```
    pub fn nr_hw_queues(&self) -> usize {
        self.nr_hw_queues
    }

    /// Number of tag maps: 1 with shared host tags, else one per hardware queue.
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagSet, TagSetFlags};
    ///
    /// let builder = TagSet::builder(8).hw_queues(3);
    /// let per_queue = builder.clone().build(StdPlatform::new(), |_| ()).unwrap();
    /// assert_eq!(per_queue.nr_maps(), 3);
    /// let shared = builder.flags(TagSetFlags::SHARED_HOST_TAGS);
    /// assert_eq!(shared.build(StdPlatform::new(), |_| ()).unwrap().nr_maps(), 1);
    /// ```
    pub fn nr_maps(&self) -> usize {
        self.maps.len()
    }

    /// Tags per map, reserved included (as last set by [`update_depth`](Self::update_depth)).
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagSet};
    /// let set = TagSet::builder(32).reserved(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// assert_eq!(set.depth(), 32);
    /// set.update_depth(8).unwrap();
    /// assert_eq!(set.depth(), 8);
    /// ```
    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    /// Reserved tags per map.
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagSet};
    /// let set = TagSet::builder(32).reserved(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// assert_eq!(set.reserved(), 4);
    /// ```
    pub fn reserved(&self) -> usize {
        self.reserved
    }

    /// The flags.
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagSet, TagSetFlags};
    /// let flags = TagSetFlags::BLOCKING | TagSetFlags::NO_SCHED;
    /// let set = TagSet::builder(8).flags(flags).build(StdPlatform::new(), |_| ()).unwrap();
    /// assert_eq!(set.flags(), flags);
    /// ```
    pub fn flags(&self) -> TagSetFlags {
        self.flags
    }

    /// The request timeout in nanoseconds.
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagSet};
    /// let set = TagSet::builder(8).timeout_ns(1_000).build(StdPlatform::new(), |_| ()).unwrap();
    /// assert_eq!(set.timeout_ns(), 1_000);
    /// ```
    pub fn timeout_ns(&self) -> u64 {
        self.timeout_ns
    }

    /// CPUs of the platform, as the set was built.
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagSet};
    /// let set = TagSet::builder(8).build(StdPlatform::with_cpus(6), |_| ()).unwrap();
    /// assert_eq!(set.nr_cpus(), 6);
    /// ```
    pub fn nr_cpus(&self) -> usize {
        self.nr_cpus
    }

    /// The platform.
    ///
    /// ```
    /// use blkmq_core::{Platform, StdPlatform, TagSet};
    /// let set = TagSet::builder(8).build(StdPlatform::with_cpus(2), |_| ()).unwrap();
    /// set.platform().kick(0);
    /// assert_eq!(set.platform().take_kicks(), vec![0]);
    /// ```
    pub fn platform(&self) -> &P {
        &self.platform
    }

    /// Request queues attached now.
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// assert_eq!(set.nr_queues(), 0);
    /// let queue = set.attach().unwrap();
    /// assert_eq!(set.nr_queues(), 1);
    /// drop(queue);
    /// assert_eq!(set.nr_queues(), 0);
    /// ```
    pub fn nr_queues(&self) -> usize {
        self.queues.load(Ordering::Relaxed)
    }

    /// How many request queues may share the set at once.
    ///
    /// ```
    /// use blkmq_core::{DEFAULT_MAX_QUEUES, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// assert_eq!(set.max_queues(), DEFAULT_MAX_QUEUES);
    /// ```
    pub fn max_queues(&self) -> usize {
        self.max_queues
    }

    /// Whether fair sharing is on (more than one request queue attached).
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let a = set.attach().unwrap();
    /// assert!(!set.is_shared());
    /// let b = set.attach().unwrap();
    /// assert!(set.is_shared());
    /// drop(b);
    /// assert!(!set.is_shared());
    /// ```
    #[inline(always)]
    pub fn is_shared(&self) -> bool {
        self.queues.load(Ordering::Relaxed) > 1
    }

    /// The tag map serving `hctx`.
    #[inline(always)]
    pub(crate) fn map_index(&self, hctx: usize) -> usize {
        if self.maps.len() == 1 { 0 } else { hctx }
    }

    /// Queues counted active on the map of `hctx` (0 for a hardware queue that does not
    /// exist).
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(64).build(StdPlatform::new(), |_| ()).unwrap();
    /// let (a, b) = (set.attach().unwrap(), set.attach().unwrap());
    /// assert_eq!(set.active_queues(0), 0); // attached, not yet allocating
    /// let rq_a = a.alloc(&Alloc::new(0, 0)).unwrap();
    /// let rq_b = b.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!(set.active_queues(0), 2);
    /// a.free(rq_a).unwrap();
    /// b.free(rq_b).unwrap();
    /// ```
    pub fn active_queues(&self, hctx: usize) -> usize {
        self.map_of(hctx)
            .map_or(0, |m| self.maps[m].active_queues.load(Ordering::Relaxed))
    }

    /// The map serving `hctx`, if `hctx` exists.
    pub(crate) fn map_of(&self, hctx: usize) -> Option<usize> {
        (hctx < self.nr_hw_queues).then(|| self.map_index(hctx))
    }

    /// The most normal tags of `hctx`'s map one active queue may hold now (0 for a hardware
    /// queue that does not exist).
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(64).reserved(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let a = set.attach().unwrap();
    /// assert_eq!(set.fair_share(0), 60); // alone: every normal tag
    /// let b = set.attach().unwrap();
    /// let rq_a = a.alloc(&Alloc::new(0, 0)).unwrap();
    /// let rq_b = b.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!(set.fair_share(0), 30); // two active queues
    /// a.free(rq_a).unwrap();
    /// b.free(rq_b).unwrap();
    /// ```
    pub fn fair_share(&self, hctx: usize) -> usize {
        self.map_of(hctx).map(|m| &self.maps[m]).map_or(0, |m| {
            if self.is_shared() {
                m.fair_share(m.active_queues.load(Ordering::Relaxed))
            } else {
                m.normal.depth()
            }
        })
    }

    /// The wake-up batch of `hctx`'s normal tags: how many frees wake a waiter. It shrinks
    /// as more queues share the map, so a queue waiting on its small share is still woken.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(64).build(StdPlatform::new(), |_| ()).unwrap();
    /// assert_eq!(set.wake_batch(0), 8);
    /// let (a, b) = (set.attach().unwrap(), set.attach().unwrap());
    /// let rq_a = a.alloc(&Alloc::new(0, 0)).unwrap();
    /// let rq_b = b.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!(set.wake_batch(0), 4); // 32 tags each
    /// a.free(rq_a).unwrap();
    /// b.free(rq_b).unwrap();
    /// ```
    pub fn wake_batch(&self, hctx: usize) -> usize {
        self.map_of(hctx)
            .map_or(0, |m| self.maps[m].normal.wake_batch())
    }

    /// Driver tags allocated, over every map.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).hw_queues(2).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let a = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// let b = queue.alloc(&Alloc::new(1, 0)).unwrap();
    /// assert_eq!(set.busy(), 2);
    /// queue.free(a).unwrap();
    /// assert_eq!(set.busy(), 1);
    /// queue.free(b).unwrap();
    /// ```
    pub fn busy(&self) -> usize {
        self.maps.iter().map(TagMap::busy).sum()
    }

    /// Merged-bio slots in use.
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, Op, StdPlatform, Status, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.set_bio(&mut rq, Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert_eq!(set.bio_slots_in_use(), 0);
    /// queue.append_bio(&mut rq, Bio::new(Op::Read, 8, 8)).unwrap().unwrap();
    /// assert_eq!(set.bio_slots_in_use(), 1);
    /// queue.complete(rq, Status::Ok).unwrap();
    /// assert_eq!(set.bio_slots_in_use(), 0);
    /// ```
    pub fn bio_slots_in_use(&self) -> usize {
        self.bios.in_use()
    }

    /// Changes the depth of every map, within the depth the set was built with (Linux's
    /// `blk_mq_tag_update_depth` for driver tags); reserved tags keep their number. Tags
    /// above a lowered depth that are in use stay valid until freed.
    ///
    /// # Errors
    /// [`ConfigError::BadDepthUpdate`] outside `reserved + 1 ..= initial depth`.
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagSet};
    /// let set = TagSet::builder(64).build(StdPlatform::new(), |_| ()).unwrap();
    /// set.update_depth(16).unwrap();
    /// assert_eq!(set.depth(), 16);
    /// assert!(set.update_depth(65).is_err());
    /// ```
    pub fn update_depth(&self, depth: usize) -> Result<(), ConfigError> {
        for map in self.maps.iter() {
            map.resize(depth)?;
            // A resize sizes the wake batch for one user; the active queues share the map.
            map.users_changed(map.active_queues.load(Ordering::SeqCst));
        }
        self.depth.store(depth, Ordering::Relaxed);
        Ok(())
    }

    /// Calls `f` once for each request holding a driver tag, map by map, reserved tags first,
    /// started or not ([`BusyRq::state`] says which); stops when `f` returns false (Linux's
    /// `blk_mq_tagset_busy_iter`).
    ///
    /// What a walk promises while requests come and go around it (Linux takes a reference
    /// to each request and checks it again; this walk reads every map first, then checks
    /// each request it found again just before calling `f`):
    /// * each request at most once per walk, though a tag may be freed and taken again, or
    ///   a scheduler request move from one driver tag to another, while the walk runs;
    /// * only requests that were there at one and the same moment of the walk (between
    ///   reading the maps and the first call to `f`), in the same allocation and the same
    ///   state they are reported in: a request allocated or started after the walk read its
    ///   tag, or ended, freed or requeued before `f` would see it, is not reported. So a walk
    ///   never reports more requests than were allocated at that moment, nor more started
    ///   ones ([`RqState::InFlight`]) than were in flight then.
    ///
    /// A request reported may still complete while `f` runs: compare its
    /// [generation](Request::generation) with [`BusyRq::generation`] before acting on it
    /// after the walk (see the `request` module).
    ///
    /// The set's iteration lock is held while `f` runs: `f` must not iterate the set again,
    /// drop one of its queues or detach scheduler tags, which take the same lock. The walk
    /// allocates nothing (its room is made with the set).
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).hw_queues(2).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let a = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// let b = queue.alloc(&Alloc::new(1, 0)).unwrap();
    /// let mut seen = Vec::new();
    /// set.for_each_busy(|busy| { seen.push(busy.hctx); true });
    /// assert_eq!(seen, [0, 1]);
    /// queue.free(a).unwrap();
    /// queue.free(b).unwrap();
    /// ```
    pub fn for_each_busy(&self, mut f: impl FnMut(BusyRq<'_, T>) -> bool) {
        self.busy_iter(None, None, &mut f);
    }

    /// Busy iteration, optionally only one hardware queue and one request queue, with the
    /// promises of [`for_each_busy`](Self::for_each_busy).
    pub(crate) fn busy_iter(
        &self,
        hctx: Option<usize>,
        queue: Option<u32>,
        f: &mut dyn FnMut(BusyRq<'_, T>) -> bool,
    ) {
        let mut seen = self.iter_lock.lock();
        seen.clear();
        let wanted = |request: &Request<T>| {
            queue.is_none_or(|q| q == request.queue_id())
                && hctx.is_none_or(|h| h == request.hctx())
        };
        // Read the maps: what holds a driver tag, in which allocation and state.
        let mut moved = false;
        for (index, map) in self.maps.iter().enumerate() {
            if self.maps.len() > 1 && hctx.is_some_and(|h| h != index) {
                continue;
            }
            map.for_each_busy_tag(|tag| {
                let Some((request, from_slot)) = self.busy_request(map, tag) else {
                    return true;
                };
                let (generation, state) = request.snapshot();
                // Room for every tag was made with the set, and each tag is read once.
                if wanted(request) && seen.len() < seen.capacity() {
                    // Found through a slot into scheduler tags: such a request may move
                    // between driver tags while the maps are read.
                    moved |= from_slot;
                    seen.push(Seen {
                        addr: core::ptr::from_ref(request).addr(),
                        generation,
                        state,
                        map: index as u32,
                        tag: tag as u16,
                    });
                }
                true
            });
        }
        if moved {
            // A scheduler request may have moved to a later driver tag while the maps were
            // read: keep only the last place each was seen, then put them back in order.
            seen.sort_unstable_by_key(|s| (s.addr, Reverse((s.map, s.tag))));
            seen.dedup_by_key(|s| s.addr);
            seen.sort_unstable_by_key(|s| (s.map, s.tag));
        }
        // Report what is still where, and as, it was.
        for s in seen.iter() {
            let map = &self.maps[s.map as usize];
            let Some((request, _)) = self.busy_request(map, usize::from(s.tag)) else {
                continue;
            };
            if core::ptr::from_ref(request).addr() != s.addr
                || request.snapshot() != (s.generation, s.state)
                || !wanted(request)
            {
                continue;
            }
            let go_on = f(BusyRq {
                hctx: request.hctx(),
                tag: u32::from(s.tag),
                queue: request.queue_id(),
                state: s.state,
                generation: s.generation,
                request,
            });
            if !go_on {
                break;
            }
        }
        seen.clear();
    }

    /// The request holding driver tag `tag` of `map`, if a request holds it, and whether it
    /// was found through the map's slot into scheduler tags. Callers hold `iter_lock`.
    fn busy_request<'a>(
        &'a self,
        map: &'a TagMap<T, P::RawMutex>,
        tag: usize,
    ) -> Option<(&'a Request<T>, bool)> {
        let slot = map.rqs[tag].load(Ordering::Acquire);
        let request = if slot.is_null() {
            &map.requests[tag]
        } else {
            // SAFETY: a non-null slot points into scheduler tags that are freed only under
            // `iter_lock`, which our caller holds, after the slot is cleared (the type's
            // invariant); so the request is alive for the lock's duration.
            unsafe { &*slot }
        };
        match request.state() {
            RqState::Free => None,
            _ if request.driver_tag() != tag as u32 && request.driver_tag() != NO_TAG => None,
            _ => Some((request, !slot.is_null())),
        }
    }
}

impl<T, P: Platform + fmt::Debug> fmt::Debug for TagSet<T, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TagSet")
            .field("nr_hw_queues", &self.nr_hw_queues)
            .field("depth", &self.depth())
            .field("reserved", &self.reserved)
            .field("flags", &self.flags)
            .field("queues", &self.nr_queues())
            .field("busy", &self.busy())
            .finish_non_exhaustive()
    }
}

impl<T, P: Platform> TagSet<T, P> {
    /// Attaches a request queue; the second one turns fair sharing on.
    ///
    /// # Errors
    /// [`TagError::TooManyQueues`] beyond the set's `max_queues`.
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).max_queues(2).build(StdPlatform::new(), |_| ()).unwrap();
    /// let a = set.attach().unwrap();
    /// let b = set.attach().unwrap();
    /// assert_ne!(a.id(), b.id());
    /// assert!(set.is_shared());
    /// assert!(set.attach().is_err());
    /// ```
    pub fn attach(self: &Arc<Self>) -> Result<crate::QueueTags<T, P>, TagError> {
        let id = next_id(&NEXT_QUEUE_ID).ok_or(TagError::IdentitiesExhausted)?;
        let mut now = self.queues.load(Ordering::Relaxed);
        loop {
            if now >= self.max_queues {
                return Err(TagError::TooManyQueues {
                    max: self.max_queues,
                });
            }
            match self.queues.compare_exchange_weak(
                now,
                now + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(seen) => now = seen,
            }
        }
        Ok(crate::QueueTags::new(Arc::clone(self), id))
    }
}
