//! A request queue's use of a tag set: allocation, fair sharing, scheduler tags, freeing.
//!
//! This file holds the types, token resolution, the bios a request carries and its life
//! cycle (start, requeue, complete, free, driver tags); `allocation` allocates, `sharing`
//! holds fair sharing and the driver tags taken under it, `sched_tags` an elevator's own tags.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::ptr;

use crossbeam_utils::CachePadded;

use crate::bio::{Bio, Status};
use crate::error::{Misused, TagError};
use crate::platform::Platform;
use crate::request::{NO_TAG, Request, Rq, RqIo, RqSegments, RqState};
use crate::segment::SegSpan;
use crate::sync::{AtomicBool, AtomicUsize, Ordering};
use crate::tags::TagMap;
use crate::tagset::{BusyRq, TagSet};

mod allocation;
mod batch;
mod kept;
mod sched_tags;
mod sharing;

pub use allocation::AllocFuture;
pub(crate) use batch::FreeBatch;
pub(crate) use kept::{Kept, KeptSlot};

/// What to allocate: for which hardware queue, from which CPU, and with which limits.
///
/// ```
/// use blkmq_core::Alloc;
/// let alloc = Alloc::new(3, 1).shallow(16);
/// assert_eq!((alloc.hctx, alloc.cpu, alloc.shallow_depth), (3, 1, Some(16)));
/// assert!(Alloc::new(0, 0).reserved().reserved);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alloc {
    /// The hardware queue the request will be issued on.
    pub hctx: usize,
    /// The allocating CPU: picks the allocation hint, which the free writes back to.
    pub cpu: usize,
    /// Take a reserved tag (exempt from fair sharing; fails if the set has none).
    pub reserved: bool,
    /// At most this deep into the normal tags (an elevator's `limit_depth`).
    pub shallow_depth: Option<usize>,
}

impl Alloc {
    /// A normal allocation for `hctx` from `cpu`.
    ///
    /// ```
    /// use blkmq_core::Alloc;
    /// let alloc = Alloc::new(2, 5);
    /// assert_eq!((alloc.hctx, alloc.cpu), (2, 5));
    /// assert!(!alloc.reserved);
    /// assert_eq!(alloc.shallow_depth, None);
    /// ```
    pub const fn new(hctx: usize, cpu: usize) -> Self {
        Self {
            hctx,
            cpu,
            reserved: false,
            shallow_depth: None,
        }
    }

    /// As a reserved allocation.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagError, TagSet};
    ///
    /// let set = TagSet::builder(8).reserved(1).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let rq = queue.alloc(&Alloc::new(0, 0).reserved()).unwrap();
    /// assert_eq!(rq.tag(), 0);
    /// let again = queue.alloc(&Alloc::new(0, 0).reserved());
    /// assert_eq!(again.unwrap_err(), TagError::WouldBlock); // the only reserved tag is out
    /// queue.free(rq).unwrap();
    /// ```
    pub const fn reserved(mut self) -> Self {
        self.reserved = true;
        self
    }

    /// Limited to `depth` of the normal scheduler tags (an elevator's `limit_depth`). A
    /// limit below their number must not be below the minimum declared with
    /// [`QueueTags::set_min_shallow_depth`]. A queue without scheduler tags refuses any
    /// limit ([`TagError::NoScheduler`]), before anything changes.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagError, TagSet};
    ///
    /// let set = TagSet::builder(16).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut queue = set.attach().unwrap();
    /// queue.attach_scheduler(Some(16), |_| ()).unwrap();
    /// queue.set_min_shallow_depth(2).unwrap();
    /// let limited = Alloc::new(0, 0).shallow(2);
    /// let a = queue.alloc(&limited).unwrap();
    /// let b = queue.alloc(&limited).unwrap();
    /// assert_eq!(queue.alloc(&limited).unwrap_err(), TagError::WouldBlock);
    /// let c = queue.alloc(&Alloc::new(0, 0)).unwrap(); // unlimited: more are free
    /// for rq in [a, b, c] {
    ///     queue.free(rq).unwrap();
    /// }
    /// ```
    pub const fn shallow(mut self, depth: usize) -> Self {
        self.shallow_depth = Some(depth);
        self
    }
}

/// One request queue's standing on one driver tag map.
struct Activity {
    /// Counted in the map's `active_queues`.
    active: AtomicBool,
    /// Driver tags held that count towards the fair share.
    in_flight: AtomicUsize,
    /// This queue's waiters for normal driver tags while fair sharing is on. Its counted
    /// frees wake every waiter of the map when there are any: the bitmap's batched wake-ups
    /// go to whoever waits first, and a waiter of another queue over its own share would
    /// swallow one meant for ours.
    share_waiters: AtomicUsize,
}

/// Scheduler tags: the requests of a queue with an elevator, separate from driver tags.
struct SchedTags<T, R: lock_api::RawMutex> {
    id: u32,
    /// One per driver tag map, by the same index: a request of `maps[m]` takes its driver
    /// tags from the driver map `m`.
    maps: Box<[TagMap<T, R>]>,
}

impl<T, R: lock_api::RawMutex> SchedTags<T, R> {
    /// Whether `request`, the holder of a driver tag of driver map `m`, is one of ours.
    fn holds(&self, m: usize, request: *const Request<T>) -> bool {
        self.maps
            .get(m)
            .is_some_and(|map| map.requests.as_ptr_range().contains(&request))
    }
}

/// A request queue's handle on a [`TagSet`]: it allocates and frees this queue's requests.
///
/// Without scheduler tags a request is the driver tag's own preallocated request. With them
/// ([`attach_scheduler`](Self::attach_scheduler)) a request comes from the scheduler tags, and
/// takes a driver tag only when dispatched ([`get_driver_tag`](Self::get_driver_tag)), as in
/// Linux.
///
/// Dropping a `QueueTags` detaches the queue and frees every request it still has out:
/// their [`Rq`] tokens can name no other queue, so nothing leaks.
///
/// # Invariants
/// * `set_id`, `nr_hw_queues` and `maps` are copies of the set's fixed shape; `maps` points
///   at the set's maps, which `set` keeps alive and never moves.
/// * `activity[m].active` is set exactly while this queue is counted in map `m`'s
///   `active_queues`: set before the count goes up, cleared before it goes down.
/// * `activity[m].in_flight` is the number of driver tags of map `m` this queue holds whose
///   request says `counted`; each is uncounted once, when its tag is put back.
/// * `activity[m].share_waiters` counts this queue's [`AllocFuture`]s waiting for a normal
///   driver tag over their fair share.
/// * A request of `sched` map `m` takes its driver tag from driver map `m`; a driver map
///   slot pointing into `sched` is cleared before the tag goes back, and `sched` is dropped
///   only under the set's `iter_lock`, with no request of it out (the queue's drop reclaims
///   them first).
/// * Every request allocated to this queue (by its `id`) has its token out or is being
///   freed; dropping the queue frees them all.
///
/// ```
/// use blkmq_core::{Alloc, Bio, Op, StdPlatform, TagSet};
///
/// let set = TagSet::builder(32).build(StdPlatform::new(), |_| ()).unwrap();
/// let queue = set.attach().unwrap();
/// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
/// queue.set_bio(&mut rq, Bio::new(Op::Read, 0, 8)).unwrap();
/// queue.append_bio(&mut rq, Bio::new(Op::Read, 8, 8)).unwrap();
/// assert_eq!(queue.io(&rq).unwrap().sectors(), 16);
/// queue.start(&mut rq, 0).unwrap();
/// queue.complete(rq, blkmq_core::Status::Ok).unwrap();
/// ```
pub struct QueueTags<T, P: Platform> {
    set: Arc<TagSet<T, P>>,
    id: u32,
    // Copies of the set's fixed shape, read on every allocation and free.
    set_id: u32,
    nr_hw_queues: usize,
    /// `set.maps`, one pointer nearer: the fast paths start their chain of dependent loads
    /// here rather than at the `Arc`.
    maps: core::ptr::NonNull<[TagMap<T, P::RawMutex>]>,
    activity: Box<[CachePadded<Activity>]>,
    sched: Option<SchedTags<T, P::RawMutex>>,
    /// Requests one map spans in the key space (see `key_of`), kept up to date whenever
    /// the scheduler tags come or go, so a key is a multiply and an add.
    key_stride: usize,
}

/// A token resolved: which array owns the request, and the request.
type Resolved<'a, T, R> = (Owner<'a, T, R>, &'a Request<T>);

/// Which array a token names.
enum Owner<'a, T, R: lock_api::RawMutex> {
    Driver(usize, &'a TagMap<T, R>),
    Sched(usize, &'a TagMap<T, R>),
}

/// A request [`QueueTags::release_plain`] released: its map, its tag and the CPU it was
/// taken on.
type Released<'a, T, P> = (&'a TagMap<T, <P as Platform>::RawMutex>, usize, usize);

impl<T, P: Platform> QueueTags<T, P> {
    pub(crate) fn new(set: Arc<TagSet<T, P>>, id: u32) -> Self {
        let activity = (0..set.maps.len())
            .map(|_| {
                CachePadded::new(Activity {
                    active: AtomicBool::new(false),
                    in_flight: AtomicUsize::new(0),
                    share_waiters: AtomicUsize::new(0),
                })
            })
            .collect();
        let mut tags = Self {
            id,
            set_id: set.id,
            nr_hw_queues: set.nr_hw_queues(),
            maps: core::ptr::NonNull::from(&*set.maps),
            set,
            activity,
            sched: None,
            key_stride: 0,
        };
        tags.key_stride = tags.compute_key_stride();
        tags
    }

    /// The driver tag maps, through the cached pointer.
    #[inline(always)]
    fn maps(&self) -> &[TagMap<T, P::RawMutex>] {
        // SAFETY: `maps` is the set's boxed slice of maps, which `self.set` keeps alive; a
        // boxed slice never moves, and the set never mutates it.
        unsafe { self.maps.as_ref() }
    }

    /// The tag set.
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagSet};
    /// use std::sync::Arc;
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// assert!(Arc::ptr_eq(queue.set(), &set));
    /// ```
    pub fn set(&self) -> &Arc<TagSet<T, P>> {
        &self.set
    }

    /// This queue's identity (unique while the process runs).
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let (a, b) = (set.attach().unwrap(), set.attach().unwrap());
    /// assert_ne!(a.id(), b.id());
    /// ```
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Whether this queue counts as active on `hctx`'s map.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(64).build(StdPlatform::new(), |_| ()).unwrap();
    /// let (a, b) = (set.attach().unwrap(), set.attach().unwrap());
    /// assert!(!a.is_active(0));
    /// let rq = a.alloc(&Alloc::new(0, 0)).unwrap(); // allocating while shared: active
    /// assert!(a.is_active(0) && !b.is_active(0));
    /// a.free(rq).unwrap();
    /// assert!(a.mark_idle(0));
    /// assert!(!a.is_active(0));
    /// ```
    pub fn is_active(&self, hctx: usize) -> bool {
        self.set
            .map_of(hctx)
            .is_some_and(|m| self.activity[m].active.load(Ordering::Relaxed))
    }

    /// Driver tags this queue holds on `hctx`'s map that count towards its fair share.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(64).build(StdPlatform::new(), |_| ()).unwrap();
    /// let a = set.attach().unwrap();
    /// let alone = a.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!(a.in_flight(0), 0); // no sharing yet: nothing counts
    /// let b = set.attach().unwrap();
    /// let shared = a.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!(a.in_flight(0), 1);
    /// a.free(shared).unwrap();
    /// assert_eq!(a.in_flight(0), 0);
    /// a.free(alone).unwrap();
    /// ```
    pub fn in_flight(&self, hctx: usize) -> usize {
        self.set
            .map_of(hctx)
            .map_or(0, |m| self.activity[m].in_flight.load(Ordering::Relaxed))
    }

    fn check_hctx(&self, hctx: usize) -> Result<usize, TagError> {
        if hctx >= self.set.nr_hw_queues() {
            return Err(TagError::NoSuchHwQueue {
                hctx,
                nr_hw_queues: self.set.nr_hw_queues(),
            });
        }
        Ok(self.set.map_index(hctx))
    }

    // ----- token resolution -----

    #[inline(always)]
    fn owner(&self, rq: &Rq) -> Result<Resolved<'_, T, P::RawMutex>, TagError> {
        let m = rq.map();
        let tag = rq.index();
        let owner = if rq.pool() == self.set_id {
            Owner::Driver(m, self.maps().get(m).ok_or(TagError::ForeignRequest)?)
        } else {
            match &self.sched {
                Some(sched) if sched.id == rq.pool() => {
                    Owner::Sched(m, sched.maps.get(m).ok_or(TagError::ForeignRequest)?)
                }
                _ => return Err(TagError::ForeignRequest),
            }
        };
        let map = match owner {
            Owner::Driver(_, map) | Owner::Sched(_, map) => map,
        };
        let request = map.requests.get(tag).ok_or(TagError::ForeignRequest)?;
        if !request.is_owned_by(self.id, rq.generation()) {
            return Err(TagError::ForeignRequest);
        }
        Ok((owner, request))
    }

    /// The shared side of the request `rq` names.
    ///
    /// # Errors
    /// [`TagError::ForeignRequest`] when `rq` is not this queue's.
    ///
    /// ```
    /// use blkmq_core::{Alloc, RqState, StdPlatform, TagError, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let (a, b) = (set.attach().unwrap(), set.attach().unwrap());
    /// let rq = a.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!(a.request(&rq).unwrap().state(), RqState::Idle);
    /// assert_eq!(b.request(&rq).unwrap_err(), TagError::ForeignRequest);
    /// a.free(rq).unwrap();
    /// ```
    pub fn request(&self, rq: &Rq) -> Result<&Request<T>, TagError> {
        Ok(self.owner(rq)?.1)
    }

    /// The shared side of the request `rq` names and the I/O it carries.
    pub(crate) fn request_and_io<'a>(
        &'a self,
        rq: &'a Rq,
    ) -> Result<(&'a Request<T>, &'a RqIo), TagError> {
        let request = self.owner(rq)?.1;
        Ok((request, self.io_known(rq, request)))
    }

    /// The I/O `rq` carries.
    ///
    /// # Errors
    /// [`TagError::ForeignRequest`] when `rq` is not this queue's.
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, Op, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().nr_bios(), 0);
    /// queue.set_bio(&mut rq, Bio::new(Op::Write, 32, 8)).unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().op(), Op::Write);
    /// queue.free(rq).unwrap();
    /// ```
    ///
    /// The view borrows the token, so the request cannot change (or be freed and reused)
    /// while it is held:
    ///
    /// ```compile_fail
    /// use blkmq_core::{Alloc, Bio, Op, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// let view = queue.io(&rq).unwrap();
    /// queue.set_bio(&mut rq, Bio::new(Op::Read, 64, 8)).unwrap(); // error: `rq` is borrowed
    /// assert_eq!(view.sector(), 0);
    /// ```
    pub fn io<'a>(&'a self, rq: &'a Rq) -> Result<&'a RqIo, TagError> {
        Ok(self.request_and_io(rq)?.1)
    }

    /// The I/O `rq` carries, for changing it (the elevator's data, say).
    ///
    /// # Errors
    /// [`TagError::ForeignRequest`] when `rq` is not this queue's.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.io_mut(&mut rq).unwrap().sched_data[0] = 7;
    /// assert_eq!(queue.io(&rq).unwrap().sched_data, [7, 0]);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn io_mut<'a>(&'a self, rq: &'a mut Rq) -> Result<&'a mut RqIo, TagError> {
        let request = self.owner(rq)?.1;
        // SAFETY: we hold the unique token mutably for the result's lifetime.
        Ok(unsafe { request.io_mut() })
    }

    /// Makes `bio` the request's only bio, ending (with [`Status::IoErr`]) any it carried.
    ///
    /// # Errors
    /// [`TagError::ForeignRequest`] when `rq` is not this queue's.
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, Op, StdPlatform, Status, TagSet};
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// static FAILED: AtomicUsize = AtomicUsize::new(0);
    /// fn done(_bio: Bio, status: Status) {
    ///     if status == Status::IoErr {
    ///         FAILED.fetch_add(1, Ordering::Relaxed);
    ///     }
    /// }
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.set_bio(&mut rq, Bio::new(Op::Read, 0, 8).end_io(done)).unwrap();
    /// queue.set_bio(&mut rq, Bio::new(Op::Read, 64, 8)).unwrap(); // ends the first
    /// assert_eq!(FAILED.load(Ordering::Relaxed), 1);
    /// assert_eq!(queue.io(&rq).unwrap().sector(), 64);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn set_bio(&self, rq: &mut Rq, bio: Bio) -> Result<(), TagError> {
        let io = self.io_mut(rq)?;
        self.replace_bios(io, bio);
        Ok(())
    }

    /// Makes `bio` the only bio of `io`, ending any it carried.
    #[inline(always)]
    fn replace_bios(&self, io: &mut RqIo, bio: Bio) {
        if io.nr_bios() != 0 {
            io.end_bios(&self.set.bios, Status::IoErr);
        }
        io.set_bio(bio);
    }

    /// [`set_bio`](Self::set_bio) with the chain's data segments as the caller counted
    /// them, in one look-up of the request.
    #[inline]
    pub(crate) fn set_bio_segments(
        &self,
        rq: &mut Rq,
        bio: Bio,
        segments: SegSpan,
    ) -> Result<(), TagError> {
        let io = self.io_mut(rq)?;
        self.replace_bios(io, bio);
        io.set_span(segments);
        Ok(())
    }

    /// Calls `f` on each bio of the request, front to back.
    ///
    /// # Errors
    /// [`TagError::ForeignRequest`] when `rq` is not this queue's.
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, Op, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.set_bio(&mut rq, Bio::new(Op::Read, 8, 8)).unwrap();
    /// queue.append_bio(&mut rq, Bio::new(Op::Read, 16, 8)).unwrap().unwrap();
    /// queue.prepend_bio(&mut rq, Bio::new(Op::Read, 0, 8)).unwrap().unwrap();
    /// let mut sectors = Vec::new();
    /// queue.for_each_bio(&rq, |bio| sectors.push(bio.sector)).unwrap();
    /// assert_eq!(sectors, [0, 8, 16]);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn for_each_bio(&self, rq: &Rq, f: impl FnMut(&Bio)) -> Result<(), TagError> {
        self.io(rq)?.for_each_bio(&self.set.bios, f);
        Ok(())
    }

    /// The request's data segments, across its bios front to back ([`RqSegments`]).
    ///
    /// # Errors
    /// [`TagError::ForeignRequest`] when `rq` is not this queue's.
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, Op, Segment, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.set_bio(&mut rq, Bio::new(Op::Read, 0, 2).buffer(0x4000)).unwrap();
    /// assert_eq!(queue.segments(&rq).unwrap().next(), Some(Segment::new(0x4000, 1024)));
    /// queue.free(rq).unwrap();
    /// ```
    pub fn segments<'a>(&'a self, rq: &'a Rq) -> Result<RqSegments<'a>, TagError> {
        Ok(self.segments_of(self.io(rq)?))
    }

    /// The data segments of `io`, a request's I/O of these tags.
    #[inline]
    pub(crate) fn segments_of<'a>(&'a self, io: &'a RqIo) -> RqSegments<'a> {
        RqSegments::new(io, &self.set.bios)
    }

    // ----- life cycle -----

    /// Starts the request: in flight from `now_ns`, timing out after the set's timeout. Each
    /// start is a new dispatch, with a new [generation](Request::generation).
    ///
    /// # Errors
    /// [`TagError::ForeignRequest`] when `rq` is not this queue's;
    /// [`TagError::WrongState`] when it is not idle (already started, or completed).
    ///
    /// ```
    /// use blkmq_core::{Alloc, RqState, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).timeout_ns(1_000).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.start(&mut rq, 200).unwrap();
    /// let request = queue.request(&rq).unwrap();
    /// assert_eq!((request.state(), request.deadline_ns()), (RqState::InFlight, 1_200));
    /// assert_eq!(queue.io(&rq).unwrap().start_ns(), 200);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn start(&self, rq: &mut Rq, now_ns: u64) -> Result<(), TagError> {
        self.start_resolving(rq, now_ns).map(|_| ())
    }

    /// [`start`](Self::start), handing back the request `rq` names, which its look-up
    /// found (its issue's D is made from it, with no second look-up).
    #[inline]
    pub(crate) fn start_resolving(
        &self,
        rq: &mut Rq,
        now_ns: u64,
    ) -> Result<&Request<T>, TagError> {
        let request = self.owner(rq)?.1;
        self.start_resolved(request, now_ns)?;
        Ok(request)
    }

    /// The I/O of `request`, the request `rq` names, as a look-up of `rq` returned it while
    /// the caller held it: no second look-up.
    #[inline(always)]
    pub(crate) fn io_known<'a>(&self, rq: &'a Rq, request: &'a Request<T>) -> &'a RqIo {
        debug_assert!(
            self.owner(rq)
                .is_ok_and(|(_, named)| core::ptr::eq(named, request)),
            "the request its token names"
        );
        // SAFETY: `rq` is the request's unique token and the result borrows it, so no
        // `&mut RqIo` (which needs the token borrowed mutably) can exist meanwhile.
        unsafe { request.io_ref() }
    }

    /// [`start`](Self::start) for `request`, the request `rq` names, as a look-up of `rq`
    /// returned it while the caller held it (the caller keeps the two together: a plug
    /// notes the request when it takes the token).
    ///
    /// # Errors
    /// As [`start`](Self::start) when the request is not idle.
    #[inline]
    pub(crate) fn start_known(
        &self,
        rq: &mut Rq,
        request: &Request<T>,
        now_ns: u64,
    ) -> Result<(), TagError> {
        debug_assert!(
            self.owner(rq)
                .is_ok_and(|(_, named)| core::ptr::eq(named, request)),
            "the request its token names"
        );
        self.start_resolved(request, now_ns)
    }

    /// [`start`](Self::start) for a request the caller resolved from its token, which it
    /// holds mutably.
    #[inline]
    fn start_resolved(&self, request: &Request<T>, now_ns: u64) -> Result<(), TagError> {
        // SAFETY: the caller holds the unique token mutably.
        unsafe { request.io_mut() }.start_ns = now_ns;
        request.set_deadline(now_ns.saturating_add(self.set.timeout_ns()));
        request
            .start()
            .map_err(|state| TagError::WrongState { state })
    }

    /// Puts a started request back to idle, to be dispatched again (a requeue).
    ///
    /// # Errors
    /// [`TagError::ForeignRequest`] when `rq` is not this queue's;
    /// [`TagError::WrongState`] when it is not in flight (a racing
    /// [`Request::try_complete`] may have ended it: complete it instead).
    ///
    /// ```
    /// use blkmq_core::{Alloc, RqState, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.start(&mut rq, 0).unwrap();
    /// let dispatched = queue.request(&rq).unwrap().generation();
    /// queue.requeue(&mut rq).unwrap();
    /// let request = queue.request(&rq).unwrap();
    /// assert_eq!(request.snapshot(), (dispatched, RqState::Idle)); // back, not started
    /// queue.start(&mut rq, 0).unwrap();
    /// assert_ne!(request.generation(), dispatched); // a new dispatch
    /// queue.free(rq).unwrap();
    /// ```
    pub fn requeue(&self, rq: &mut Rq) -> Result<(), TagError> {
        let request = self.owner(rq)?.1;
        request
            .transition(RqState::InFlight, RqState::Idle)
            .map_err(|state| TagError::WrongState { state })
    }

    /// Ends every bio with `status` and frees the request and its tags.
    ///
    /// # Errors
    /// [`Misused`] with [`TagError::ForeignRequest`] when `rq` is not this queue's: nothing
    /// is ended or freed, and the token comes back in the error, still live, for the queue
    /// it belongs to.
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, Op, StdPlatform, Status, TagSet};
    ///
    /// fn done(bio: Bio, status: Status) {
    ///     assert_eq!((bio.sector, status), (0, Status::Timeout));
    /// }
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.set_bio(&mut rq, Bio::new(Op::Read, 0, 8).end_io(done)).unwrap();
    /// queue.start(&mut rq, 0).unwrap();
    /// queue.complete(rq, Status::Timeout).unwrap();
    /// assert_eq!(set.busy(), 0);
    /// ```
    ///
    /// A token of another queue comes back, its bios and tag untouched:
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, Op, StdPlatform, Status, TagError, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let (a, b) = (set.attach().unwrap(), set.attach().unwrap());
    /// let mut rq = a.alloc(&Alloc::new(0, 0)).unwrap();
    /// a.set_bio(&mut rq, Bio::new(Op::Read, 0, 8)).unwrap();
    /// let misused = b.complete(rq, Status::Ok).unwrap_err();
    /// assert_eq!(misused.error, TagError::ForeignRequest);
    /// assert_eq!((a.io(&misused.rq).unwrap().nr_bios(), set.busy()), (1, 1));
    /// a.complete(misused.rq, Status::Ok).unwrap();
    /// assert_eq!(set.busy(), 0);
    /// ```
    pub fn complete(&self, rq: Rq, status: Status) -> Result<(), Misused> {
        self.complete_with(rq, status, |_, _, _| true, Bio::complete)
            .map(|_| ())
    }

    /// Like [`complete`](Self::complete), each bio handed to `end` rather than its callback,
    /// and `first` shown the token, the request and its I/O before anything ends: one
    /// look-up of the request serves the hooks, the ending and the free. A refused token
    /// ([`TagError::ForeignRequest`]) comes back before `first` runs. When `first` says
    /// `false`, nothing ends and the token comes back, `Ok(Some(rq))`, untouched.
    #[inline]
    pub(crate) fn complete_with(
        &self,
        rq: Rq,
        status: Status,
        first: impl FnOnce(&Rq, &Request<T>, &RqIo) -> bool,
        end: impl FnMut(Bio, Status),
    ) -> Result<Option<Rq>, Misused> {
        self.complete_into(rq, status, first, end, None, |_| false)
    }

    /// [`complete_with`](Self::complete_with), the tag of our own normal driver request
    /// (the common case) offered to `keep` first (see [`Kept`]), and unless kept, going
    /// into `batch`, when given, to be put back with the tags of the requests ended next
    /// to it.
    #[inline(always)]
    pub(crate) fn complete_into<'a>(
        &'a self,
        rq: Rq,
        status: Status,
        first: impl FnOnce(&Rq, &Request<T>, &RqIo) -> bool,
        end: impl FnMut(Bio, Status),
        batch: Option<&mut FreeBatch<'a, T, P>>,
        keep: impl FnOnce(Kept) -> bool,
    ) -> Result<Option<Rq>, Misused> {
        let Ok((owner, request)) = self.owner(&rq) else {
            return Err(Misused::foreign(rq));
        };
        // SAFETY: we own the token; the shared view ends with `first`, before `io_mut`.
        if !first(&rq, request, unsafe { request.io_ref() }) {
            return Ok(Some(rq));
        }
        // From idle (ended before it was started) or in flight; already complete when a
        // racing `try_complete` won, which leaves the ending to us all the same. From here
        // no `try_complete` wins.
        request.mark_complete();
        // SAFETY: we own the token.
        let io = unsafe { request.io_mut() };
        io.end_bios_with(&self.set.bios, status, end);
        // The common case here: our own driver request, a normal tag, not counted towards a
        // fair share. The token was checked above and is ours to consume.
        if let Owner::Driver(_, map) = owner {
            let tag = rq.index();
            if tag >= map.nr_reserved && !io.counted {
                let cpu = io.alloc_cpu as usize;
                request.release();
                if keep(Kept::new(rq.map(), tag, cpu)) {
                    return Ok(None);
                }
                if let Some(batch) = batch {
                    batch.add(map, tag - map.nr_reserved, cpu);
                    return Ok(None);
                }
                return map
                    .put_normal(tag, cpu)
                    .map(|()| None)
                    .map_err(|error| Misused { rq, error });
            }
        }
        self.free_resolved(&rq, owner, request)
            .map(|()| None)
            .map_err(|error| Misused { rq, error })
    }

    /// Frees a request and its tags; a bio still on it ends with [`Status::IoErr`], so none
    /// is lost.
    ///
    /// # Errors
    /// [`Misused`] with [`TagError::ForeignRequest`] when `rq` is not this queue's: nothing
    /// is freed, and the token comes back in the error, still live, for the queue it belongs
    /// to.
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, Op, StdPlatform, Status, TagSet};
    ///
    /// fn done(_bio: Bio, status: Status) {
    ///     assert_eq!(status, Status::IoErr); // a bio left on a freed request fails
    /// }
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.set_bio(&mut rq, Bio::new(Op::Read, 0, 8).end_io(done)).unwrap();
    /// assert_eq!(set.busy(), 1);
    /// queue.free(rq).unwrap();
    /// assert_eq!(set.busy(), 0);
    /// ```
    ///
    /// A token of another tag set comes back, and can still be freed where it belongs:
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagError, TagSet};
    ///
    /// let (one, two) = (TagSet::builder(8), TagSet::builder(8));
    /// let one = one.build(StdPlatform::new(), |_| ()).unwrap();
    /// let two = two.build(StdPlatform::new(), |_| ()).unwrap();
    /// let (a, b) = (one.attach().unwrap(), two.attach().unwrap());
    /// let rq = a.alloc(&Alloc::new(0, 0)).unwrap();
    /// let misused = b.free(rq).unwrap_err();
    /// assert_eq!((misused.error, one.busy()), (TagError::ForeignRequest, 1));
    /// a.free(misused.rq).unwrap();
    /// assert_eq!(one.busy(), 0);
    /// ```
    #[inline(always)]
    pub fn free(&self, rq: Rq) -> Result<(), Misused> {
        if let Some((map, tag, cpu)) = self.release_plain(&rq) {
            return map
                .put_normal(tag, cpu)
                .map_err(|error| Misused { rq, error });
        }
        self.free_general(rq)
    }

    /// The common case of a free, inline: our own driver request on a normal tag, no bio
    /// left, not counted towards a fair share. Releases it and hands back its map, its tag
    /// and the CPU it was taken on, for the caller to put the tag; `None` (nothing done)
    /// for every other request.
    #[inline(always)]
    pub(super) fn release_plain(&self, rq: &Rq) -> Option<Released<'_, T, P>> {
        if rq.pool() != self.set_id {
            return None;
        }
        let map = self.maps().get(rq.map())?;
        let tag = rq.index();
        let request = map.requests.get(tag)?;
        if !request.is_owned_by(self.id, rq.generation()) || tag < map.nr_reserved {
            return None;
        }
        // SAFETY: the token is live and ours (just checked), and we own it: nobody else
        // reaches `io`.
        let io = unsafe { request.io_mut() };
        if io.nr_bios() != 0 || io.counted {
            return None;
        }
        let cpu = io.alloc_cpu as usize;
        request.release();
        Some((map, tag, cpu))
    }

    #[inline(never)]
    fn free_general(&self, rq: Rq) -> Result<(), Misused> {
        let Ok((owner, request)) = self.owner(&rq) else {
            return Err(Misused::foreign(rq));
        };
        self.free_resolved(&rq, owner, request)
            .map_err(|error| Misused { rq, error })
    }

    /// Frees the request `rq` names, which the caller resolved (to `owner` and `request`)
    /// from this very token, and consumes it: whatever this returns, the token names
    /// nothing afterwards.
    #[inline]
    fn free_resolved(
        &self,
        rq: &Rq,
        owner: Owner<'_, T, P::RawMutex>,
        request: &Request<T>,
    ) -> Result<(), TagError> {
        // SAFETY: we own the token, consumed here.
        let io = unsafe { request.io_mut() };
        if io.nr_bios() != 0 {
            self.end_leftover_bios(io);
        }
        let cpu = io.alloc_cpu as usize;
        match owner {
            Owner::Driver(m, _) => {
                let counted = io.counted;
                request.release();
                self.put_driver_tag_raw(m, rq.index(), cpu, counted)
            }
            Owner::Sched(m, map) => {
                let driver_tag = request.driver_tag();
                if driver_tag != NO_TAG {
                    self.release_driver_tag(m, driver_tag as usize, request, cpu)?;
                }
                request.release();
                map.put(rq.index(), cpu)
            }
        }
    }

    #[cold]
    fn end_leftover_bios(&self, io: &mut RqIo) {
        io.end_bios(&self.set.bios, Status::IoErr);
    }

    fn release_driver_tag(
        &self,
        m: usize,
        driver_tag: usize,
        request: &Request<T>,
        cpu: usize,
    ) -> Result<(), TagError> {
        // SAFETY: the caller holds the request's token.
        let counted = unsafe { request.io_mut() }.counted;
        // INVARIANT: the slot is cleared before the driver tag goes back, so it never points
        // at a request that no longer holds the tag.
        self.set.maps[m].rqs[driver_tag].store(ptr::null_mut(), Ordering::Release);
        request.set_driver_tag(NO_TAG);
        self.put_driver_tag_raw(m, driver_tag, cpu, counted)
    }

    /// Gives a scheduler request a driver tag for dispatch (Linux's
    /// `blk_mq_get_driver_tag`), with fair sharing; never waits. `Ok(false)` when none is
    /// free: the dispatch backs off and a completion restarts it. A request that has a
    /// driver tag (every request without scheduler tags) keeps it: `Ok(true)`.
    ///
    /// # Errors
    /// [`TagError::ForeignRequest`] when `rq` is not this queue's.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut queue = set.attach().unwrap();
    /// queue.attach_scheduler(None, |_| ()).unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!(queue.request(&rq).unwrap().unique_tag(), None);
    /// assert!(queue.get_driver_tag(&mut rq).unwrap());
    /// let unique = queue.request(&rq).unwrap().unique_tag().unwrap();
    /// assert!(queue.tag_to_rq(0, unique & 0xffff).is_some());
    /// queue.free(rq).unwrap();
    /// assert_eq!(set.busy(), 0);
    /// ```
    pub fn get_driver_tag(&self, rq: &mut Rq) -> Result<bool, TagError> {
        let (owner, request) = self.owner(rq)?;
        self.driver_tag_resolved(rq, owner, request)
    }

    /// [`get_driver_tag`](Self::get_driver_tag) and then [`start`](Self::start), with one
    /// look-up of the token: `Ok(false)`, nothing started, when no driver tag is free.
    pub(crate) fn tag_and_start(&self, rq: &mut Rq, now_ns: u64) -> Result<bool, TagError> {
        let (owner, request) = self.owner(rq)?;
        if !self.driver_tag_resolved(rq, owner, request)? {
            return Ok(false);
        }
        self.start_resolved(request, now_ns)?;
        Ok(true)
    }

    /// [`get_driver_tag`](Self::get_driver_tag) for the request `rq` names, which the
    /// caller resolved (to `owner` and `request`) from this very token, held mutably.
    #[inline]
    fn driver_tag_resolved(
        &self,
        rq: &mut Rq,
        owner: Owner<'_, T, P::RawMutex>,
        request: &Request<T>,
    ) -> Result<bool, TagError> {
        let Owner::Sched(m, sched_map) = owner else {
            return Ok(true);
        };
        if request.driver_tag() != NO_TAG {
            return Ok(true);
        }
        // SAFETY: the caller holds the token mutably.
        let io = unsafe { request.io_mut() };
        let reserved = rq.index() < sched_map.nr_reserved;
        let Some((tag, counted)) =
            self.get_driver_tag_raw(m, io.alloc_cpu as usize, reserved, None)?
        else {
            return Ok(false);
        };
        // INVARIANT: `counted` records whether `in_flight` counted this tag, for the free.
        io.counted = counted;
        self.set.maps[m].rqs[tag].store(ptr::from_ref(request).cast_mut(), Ordering::Release);
        request.set_driver_tag(tag as u32);
        Ok(true)
    }

    /// Gives back a scheduler request's driver tag (when dispatch puts it back). Requests
    /// without scheduler tags keep theirs.
    ///
    /// # Errors
    /// [`TagError::ForeignRequest`]; [`TagError::DriverTag`] when it holds none.
    ///
    /// ```
    /// use blkmq_core::{Alloc, NO_TAG, StdPlatform, TagError, TagSet};
    ///
    /// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut queue = set.attach().unwrap();
    /// queue.attach_scheduler(None, |_| ()).unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert!(queue.get_driver_tag(&mut rq).unwrap());
    /// assert_eq!(set.busy(), 1);
    /// queue.put_driver_tag(&mut rq).unwrap();
    /// assert_eq!((set.busy(), queue.request(&rq).unwrap().driver_tag()), (0, NO_TAG));
    /// assert_eq!(queue.put_driver_tag(&mut rq).unwrap_err(), TagError::DriverTag);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn put_driver_tag(&self, rq: &mut Rq) -> Result<(), TagError> {
        let (owner, request) = self.owner(rq)?;
        let Owner::Sched(m, _) = owner else {
            return Ok(());
        };
        let driver_tag = request.driver_tag();
        if driver_tag == NO_TAG {
            return Err(TagError::DriverTag);
        }
        // SAFETY: we hold the token mutably.
        let cpu = unsafe { request.io_mut() }.alloc_cpu as usize;
        self.release_driver_tag(m, driver_tag as usize, request, cpu)
    }

    /// This queue's request holding driver tag `tag` on `hctx`, if one does (Linux's
    /// `blk_mq_tag_to_rq`): how a driver maps a completion from its hardware back to the
    /// request. See the `request` module on why this is sound against a racing completion.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).hw_queues(2).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let rq = queue.alloc(&Alloc::new(1, 0)).unwrap();
    /// let tag = queue.request(&rq).unwrap().driver_tag();
    /// let found = queue.tag_to_rq(1, tag).unwrap();
    /// assert!(std::ptr::eq(found, queue.request(&rq).unwrap()));
    /// assert!(queue.tag_to_rq(0, tag).is_none()); // hardware queue 0 has its own tags
    /// queue.free(rq).unwrap();
    /// assert!(queue.tag_to_rq(1, tag).is_none());
    /// ```
    pub fn tag_to_rq(&self, hctx: usize, tag: u32) -> Option<&Request<T>> {
        let m = self.check_hctx(hctx).ok()?;
        let map = &self.set.maps[m];
        let tag = tag as usize;
        let slot = map.rqs.get(tag)?.load(Ordering::Acquire);
        let request = if slot.is_null() {
            &map.requests[tag]
        } else {
            // Only our own scheduler requests: their memory lives as long as `self`.
            if !self.sched.as_ref()?.holds(m, slot) {
                return None;
            }
            // SAFETY: `slot` points into our scheduler tags, which `&self` keeps alive.
            unsafe { &*slot }
        };
        (request.is_allocated_to(self.id) && request.driver_tag() == tag as u32).then_some(request)
    }

    /// Calls `f` once for each of this queue's requests holding a driver tag, on `hctx` only
    /// or on all, started or not; stops when `f` returns false (Linux's
    /// `blk_mq_queue_tag_busy_iter`). It promises what [`TagSet::for_each_busy`] does: each
    /// request at most once, and only those allocated (in flight, for the started ones) at
    /// one same moment of the walk, so it never reports more than the queue held then. As
    /// there, `f` runs under the set's iteration lock.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).hw_queues(2).build(StdPlatform::new(), |_| ()).unwrap();
    /// let (a, b) = (set.attach().unwrap(), set.attach().unwrap());
    /// let rqs = [
    ///     a.alloc(&Alloc::new(0, 0)).unwrap(),
    ///     a.alloc(&Alloc::new(1, 0)).unwrap(),
    /// ];
    /// let other = b.alloc(&Alloc::new(1, 0)).unwrap();
    /// let mut hctxs = Vec::new();
    /// a.for_each_busy(None, |busy| { hctxs.push(busy.hctx); true });
    /// assert_eq!(hctxs, [0, 1]); // only `a`'s requests
    /// let mut on_1 = 0;
    /// a.for_each_busy(Some(1), |_| { on_1 += 1; true });
    /// assert_eq!(on_1, 1);
    /// for rq in rqs {
    ///     a.free(rq).unwrap();
    /// }
    /// b.free(other).unwrap();
    /// ```
    pub fn for_each_busy(&self, hctx: Option<usize>, mut f: impl FnMut(BusyRq<'_, T>) -> bool) {
        self.set.busy_iter(hctx, Some(self.id), &mut f);
    }
}

// SAFETY: `maps` is a shared borrow of the set that `set` (an `Arc`) owns; sending or sharing
// a `QueueTags` is sending or sharing that `Arc`, which needs `TagSet: Send + Sync`, and that
// is what these bounds ask (the maps hold requests with payload `T`).
unsafe impl<T: Send + Sync, P: Platform> Send for QueueTags<T, P> where TagSet<T, P>: Send + Sync {}
// SAFETY: as for `Send`.
unsafe impl<T: Send + Sync, P: Platform> Sync for QueueTags<T, P> where TagSet<T, P>: Send + Sync {}

impl<T, P: Platform> Drop for QueueTags<T, P> {
    fn drop(&mut self) {
        let set = Arc::clone(&self.set);
        // Bios still on requests end with an error, but only once every tag is back and the
        // lock is released: a callback that panics (or iterates the set) then finds nothing
        // half done.
        let mut orphans: Vec<Bio> = Vec::new();
        {
            let _guard = set.iter_lock.lock();
            for (m, map) in set.maps.iter().enumerate() {
                map.for_each_busy_tag(|tag| {
                    self.reclaim(m, map, tag, &mut orphans);
                    true
                });
            }
            // Scheduler requests without a driver tag: take their bios too.
            if let Some(sched) = &self.sched {
                for map in sched.maps.iter() {
                    map.for_each_busy_tag(|tag| {
                        let request = &map.requests[tag];
                        if request.state() != RqState::Free {
                            // SAFETY: as in `reclaim`: the tokens are unusable without `self`.
                            let io = unsafe { request.io_mut() };
                            io.drain_bios(&self.set.bios, &mut orphans);
                        }
                        true
                    });
                }
            }
            // INVARIANT: scheduler tags go while the lock is held, every driver slot into
            // them cleared above: no iterator can be inside them.
            self.sched = None;
        }
        for m in 0..self.activity.len() {
            self.deactivate(m);
        }
        set.queues.fetch_sub(1, Ordering::AcqRel);
        for bio in orphans {
            bio.complete(Status::IoErr);
        }
    }
}

impl<T, P: Platform> QueueTags<T, P> {
    /// Frees driver tag `tag` of map `m` if one of our requests, whose token is now
    /// unusable, still holds it, moving its bios to `orphans`. The caller holds `iter_lock`
    /// and `&mut self`.
    fn reclaim(&self, m: usize, map: &TagMap<T, P::RawMutex>, tag: usize, orphans: &mut Vec<Bio>) {
        let slot = map.rqs[tag].load(Ordering::Acquire);
        let request = if slot.is_null() {
            &map.requests[tag]
        } else if let Some(sched) = &self.sched {
            if !sched.holds(m, slot) {
                return;
            }
            // SAFETY: the slot points into our scheduler tags, alive until the caller drops
            // them after this loop.
            unsafe { &*slot }
        } else {
            return;
        };
        // State first, then owner: a request another queue is claiming right now is not
        // taken for ours because of the owner its last free left behind.
        if !request.is_allocated_to(self.id) {
            return;
        }
        // SAFETY: the request is ours, and its token can only be used through `self` (every
        // other queue refuses it), which the caller holds mutably: nobody else touches `io`.
        let io = unsafe { request.io_mut() };
        io.drain_bios(&self.set.bios, orphans);
        let (cpu, counted) = (io.alloc_cpu as usize, io.counted);
        if !slot.is_null() {
            map.rqs[tag].store(ptr::null_mut(), Ordering::Release);
            request.set_driver_tag(NO_TAG);
        }
        request.release();
        // The tag is set (we are iterating set bits), so this cannot fail.
        let _ = self.put_driver_tag_raw(m, tag, cpu, counted);
    }
}

impl<T, P: Platform> fmt::Debug for QueueTags<T, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueTags")
            .field("id", &self.id)
            .field("scheduler", &self.sched.is_some())
            .finish_non_exhaustive()
    }
}
