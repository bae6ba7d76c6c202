//! A request queue's use of a tag set: allocation, fair sharing, scheduler tags, freeing.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::ptr;
use core::task::{Context, Poll};

use blkmq_sbitmap::{SbitmapQueue, Waiter};
use crossbeam_utils::CachePadded;

use crate::bio::{Bio, Op, Status};
use crate::error::{ConfigError, TagError};
use crate::platform::Platform;
use crate::request::{NO_TAG, Request, Rq, RqIo, RqState};
use crate::sync::{AtomicBool, AtomicUsize, Ordering};
use crate::tags::{MapParams, RequestInit, TagMap};
use crate::tagset::{BusyRq, MAX_SCHED_DEPTH, TagSet, TagSetFlags, next_pool_id};

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
}

/// A token resolved: which array owns the request, and the request.
type Resolved<'a, T, R> = (Owner<'a, T, R>, &'a Request<T>);

/// Which array a token names.
enum Owner<'a, T, R: lock_api::RawMutex> {
    Driver(usize, &'a TagMap<T, R>),
    Sched(usize, &'a TagMap<T, R>),
}

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
        Self {
            id,
            set_id: set.id,
            nr_hw_queues: set.nr_hw_queues(),
            maps: core::ptr::NonNull::from(&*set.maps),
            set,
            activity,
            sched: None,
        }
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

    // ----- fair sharing -----

    /// Counts this queue active on map `m` (Linux's `blk_mq_tag_busy`).
    #[inline]
    fn mark_active(&self, m: usize) {
        let activity = &self.activity[m];
        if activity.active.load(Ordering::Relaxed) || activity.active.swap(true, Ordering::AcqRel) {
            return;
        }
        let map = &self.set.maps[m];
        let users = map.active_queues.fetch_add(1, Ordering::SeqCst) + 1;
        map.users_changed(users);
    }

    /// Marks this queue idle on `hctx`'s map if it holds no counted tag there, giving its
    /// share back to the other queues (Linux's `blk_mq_tag_idle`, run from the timeout
    /// work). Returns whether it went idle.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(64).build(StdPlatform::new(), |_| ()).unwrap();
    /// let a = set.attach().unwrap();
    /// let b = set.attach().unwrap();
    /// let rq = a.alloc(&Alloc::new(0, 0)).unwrap();
    /// let other = b.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!(set.fair_share(0), 32); // two active queues share 64 tags
    /// b.free(other).unwrap();
    /// assert!(b.mark_idle(0));
    /// assert_eq!(set.fair_share(0), 64);
    /// a.free(rq).unwrap();
    /// ```
    pub fn mark_idle(&self, hctx: usize) -> bool {
        let Some(m) = self.set.map_of(hctx) else {
            return false;
        };
        if self.activity[m].in_flight.load(Ordering::SeqCst) != 0 {
            return false;
        }
        self.deactivate(m)
    }

    fn deactivate(&self, m: usize) -> bool {
        if !self.activity[m].active.swap(false, Ordering::AcqRel) {
            return false;
        }
        let map = &self.set.maps[m];
        let users = map.active_queues.fetch_sub(1, Ordering::SeqCst) - 1;
        map.users_changed(users);
        // Waiters of other queues may fit in the larger share now.
        map.normal.wake_all();
        true
    }

    /// Whether this queue may take one more normal driver tag of map `m` (Linux's
    /// `hctx_may_queue`).
    #[inline(always)]
    fn may_queue(&self, m: usize) -> bool {
        let map = &self.set.maps[m];
        let users = map.active_queues.load(Ordering::SeqCst);
        if users <= 1 {
            return true;
        }
        self.activity[m].in_flight.load(Ordering::SeqCst) < map.fair_share(users)
    }

    /// Takes a driver tag of map `m`, with fair sharing; `Ok(None)` when none may be had.
    /// Returns the tag and whether it counts towards the fair share.
    #[inline(always)]
    fn get_driver_tag_raw(
        &self,
        m: usize,
        cpu: usize,
        reserved: bool,
        shallow: Option<usize>,
    ) -> Result<Option<(usize, bool)>, TagError> {
        let map = &self.set.maps[m];
        if reserved {
            return Ok(map.get_reserved()?.map(|tag| (tag, false)));
        }
        if !self.set.is_shared() {
            return Ok(map.get_normal(cpu, shallow)?.map(|tag| (tag, false)));
        }
        self.mark_active(m);
        if !self.may_queue(m) {
            return Ok(None);
        }
        let Some(tag) = map.get_normal(cpu, shallow)? else {
            return Ok(None);
        };
        self.activity[m].in_flight.fetch_add(1, Ordering::SeqCst);
        Ok(Some((tag, true)))
    }

    /// Frees driver tag `tag` of map `m`.
    #[inline(always)]
    fn put_driver_tag_raw(
        &self,
        m: usize,
        tag: usize,
        cpu: usize,
        counted: bool,
    ) -> Result<(), TagError> {
        if !counted {
            return self.set.maps[m].put(tag, cpu);
        }
        // SeqCst, before the tag is freed: a waiter over its share that misses this
        // decrement registered first (`share_waiters`, then the bitmap's `ws_active`), and
        // the free's loads below see it (the bitmap's Dekker pair, fenced inside `put`).
        self.activity[m].in_flight.fetch_sub(1, Ordering::SeqCst);
        let freed = self.set.maps[m].put(tag, cpu);
        if self.activity[m].share_waiters.load(Ordering::SeqCst) != 0 {
            self.set.maps[m].normal.wake_all();
        }
        freed
    }

    // ----- allocation -----

    /// Allocates a request without waiting (NOWAIT).
    ///
    /// # Errors
    /// [`TagError::WouldBlock`] when no tag is free or this queue's fair share is used up;
    /// [`TagError::NoSuchHwQueue`], [`TagError::NoReservedTags`], or a bitmap error for a
    /// shallow limit below the declared minimum.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagError, TagSet};
    ///
    /// let set = TagSet::builder(2).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let a = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// let b = queue.alloc(&Alloc::new(0, 1)).unwrap();
    /// assert_ne!(a.tag(), b.tag());
    /// assert_eq!(queue.alloc(&Alloc::new(0, 0)).unwrap_err(), TagError::WouldBlock);
    /// let bad = queue.alloc(&Alloc::new(1, 0)).unwrap_err();
    /// assert_eq!(bad, TagError::NoSuchHwQueue { hctx: 1, nr_hw_queues: 1 });
    /// queue.free(a).unwrap();
    /// queue.free(b).unwrap();
    /// ```
    #[inline(always)]
    pub fn alloc(&self, alloc: &Alloc) -> Result<Rq, TagError> {
        if !self.is_plain(alloc) {
            return self.alloc_general(alloc);
        }
        self.alloc_plain(alloc).map(|(rq, _)| rq)
    }

    /// Allocates a request that carries `bio` (with `segments` data segments) from the
    /// start: in the common case the bio goes in through the allocation's own reach into
    /// the request, with no second look-up of the token. The bio comes back with the error.
    #[inline(always)]
    pub(crate) fn alloc_with_bio(
        &self,
        alloc: &Alloc,
        bio: Bio,
        segments: u32,
    ) -> Result<Rq, (TagError, Bio)> {
        if self.is_plain(alloc) {
            let (rq, request) = self.alloc_plain(alloc).map_err(|e| (e, bio))?;
            // SAFETY: `rq`, made just now, is the request's only token and is ours here:
            // nobody else reaches `io`.
            let io = unsafe { request.io_mut() };
            io.set_bio(bio);
            io.segments = segments;
            return Ok(rq);
        }
        let mut rq = self.alloc_general(alloc).map_err(|e| (e, bio))?;
        match self.set_bio_segments(&mut rq, bio, segments) {
            Ok(()) => Ok(rq),
            // Our own fresh request: cannot happen. Should it, nothing is lost.
            Err(e) => {
                let _ = self.free(rq);
                Err((e, bio))
            }
        }
    }

    /// Whether `alloc` is the common case, done inline by
    /// [`alloc_plain`](Self::alloc_plain): a normal driver tag with no sharing, no limit,
    /// no scheduler.
    #[inline(always)]
    fn is_plain(&self, alloc: &Alloc) -> bool {
        !alloc.reserved
            && alloc.shallow_depth.is_none()
            && self.sched.is_none()
            && alloc.hctx < self.nr_hw_queues
            && !self.set.is_shared()
    }

    /// The common case of an allocation (see [`is_plain`](Self::is_plain)), inline: the
    /// token and the request it names.
    #[inline(always)]
    fn alloc_plain(&self, alloc: &Alloc) -> Result<(Rq, &Request<T>), TagError> {
        let maps = self.maps();
        let m = if maps.len() == 1 { 0 } else { alloc.hctx };
        let map = &maps[m];
        let Some(bit) = map.normal.get(map.hint(alloc.cpu)) else {
            return Err(TagError::WouldBlock);
        };
        let tag = bit + map.nr_reserved;
        let request = &map.requests[tag];
        // SAFETY: we hold the tag just allocated, so nobody else reaches `io`.
        unsafe { request.io_mut() }.reset(alloc.cpu as u32, false);
        let generation = request.claim(alloc.hctx as u32, self.id);
        Ok((Rq::new(self.set_id, m, tag, generation), request))
    }

    #[inline(never)]
    fn alloc_general(&self, alloc: &Alloc) -> Result<Rq, TagError> {
        self.try_alloc(alloc)?.ok_or(TagError::WouldBlock)
    }

    /// One allocation attempt: `Ok(None)` when it would have to wait.
    #[inline(always)]
    fn try_alloc(&self, alloc: &Alloc) -> Result<Option<Rq>, TagError> {
        let m = self.check_hctx(alloc.hctx)?;
        let cpu = alloc.cpu;
        match &self.sched {
            None => {
                // Shallow limits are an elevator's, on scheduler tags.
                if alloc.shallow_depth.is_some() {
                    return Err(TagError::NoScheduler);
                }
                let Some((tag, counted)) = self.get_driver_tag_raw(m, cpu, alloc.reserved, None)?
                else {
                    return Ok(None);
                };
                let request = &self.set.maps[m].requests[tag];
                // SAFETY: we hold the tag just allocated, so nobody else reaches `io`.
                let io = unsafe { request.io_mut() };
                io.reset(cpu as u32, counted);
                let generation = request.claim(alloc.hctx as u32, self.id);
                Ok(Some(Rq::new(self.set.id, m, tag, generation)))
            }
            Some(sched) => {
                let map = &sched.maps[m];
                let tag = if alloc.reserved {
                    map.get_reserved()?
                } else {
                    map.get_normal(cpu, alloc.shallow_depth)?
                };
                let Some(tag) = tag else {
                    return Ok(None);
                };
                let request = &map.requests[tag];
                // SAFETY: we hold the tag just allocated.
                let io = unsafe { request.io_mut() };
                io.reset(cpu as u32, false);
                io.sched_data = [0; 2];
                let generation = request.claim(alloc.hctx as u32, self.id);
                Ok(Some(Rq::new(sched.id, m, tag, generation)))
            }
        }
    }

    /// The bitmap an allocation like `alloc` waits on.
    fn wait_queue(&self, alloc: &Alloc) -> Result<&SbitmapQueue<P::RawMutex>, TagError> {
        let m = self.check_hctx(alloc.hctx)?;
        let map = match &self.sched {
            None => &self.set.maps[m],
            Some(sched) => &sched.maps[m],
        };
        if alloc.reserved {
            map.reserved.as_ref().ok_or(TagError::NoReservedTags)
        } else {
            Ok(&map.normal)
        }
    }

    /// Allocates a request, waiting (asynchronously, on any executor) while no tag is free
    /// or this queue is over its fair share.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    /// use std::future::Future;
    /// use std::pin::pin;
    /// use std::task::{Context, Poll, Waker};
    ///
    /// let set = TagSet::builder(1).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let held = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// let mut cx = Context::from_waker(Waker::noop());
    /// let mut waiting = pin!(queue.alloc_async(Alloc::new(0, 0)));
    /// assert!(waiting.as_mut().poll(&mut cx).is_pending());
    /// queue.free(held).unwrap();
    /// let Poll::Ready(Ok(rq)) = waiting.as_mut().poll(&mut cx) else { panic!() };
    /// queue.free(rq).unwrap();
    /// ```
    pub fn alloc_async(&self, alloc: Alloc) -> AllocFuture<'_, T, P> {
        AllocFuture {
            queue: self,
            alloc,
            waiter: None,
            share_map: None,
        }
    }

    /// Allocates a request, parking the thread while it has to wait (`std`).
    ///
    /// # Errors
    /// As [`alloc`](Self::alloc), except that it waits instead of
    /// [`TagError::WouldBlock`].
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(1).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let held = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// std::thread::scope(|s| {
    ///     let waiter = s.spawn(|| queue.alloc_blocking(Alloc::new(0, 0)).unwrap());
    ///     queue.free(held).unwrap(); // wakes the waiter, whether it waits yet or not
    ///     let rq = waiter.join().unwrap();
    ///     queue.free(rq).unwrap();
    /// });
    /// assert_eq!(set.busy(), 0);
    /// ```
    #[cfg(all(feature = "std", not(loom)))]
    pub fn alloc_blocking(&self, alloc: Alloc) -> Result<Rq, TagError> {
        if let Some(rq) = self.try_alloc(&alloc)? {
            return Ok(rq);
        }
        blkmq_sbitmap::block_on(self.alloc_async(alloc))
    }

    /// Allocates up to `nr` requests at once, pushing them into `out` (a plug's request
    /// cache); returns how many. Without a shallow limit, a reserved request or fair sharing
    /// in force, the tags come from one bitmap word with one atomic operation.
    ///
    /// # Errors
    /// As [`alloc`](Self::alloc), except that running short returns fewer, not an error.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(64).build(StdPlatform::with_cpus(1), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut cache = Vec::new();
    /// let got = queue.alloc_batch(&Alloc::new(0, 0), 8, &mut cache).unwrap();
    /// assert!(got >= 1 && got == cache.len());
    /// for rq in cache { queue.free(rq).unwrap(); }
    /// ```
    pub fn alloc_batch(
        &self,
        alloc: &Alloc,
        nr: usize,
        out: &mut impl Extend<Rq>,
    ) -> Result<usize, TagError> {
        let m = self.check_hctx(alloc.hctx)?;
        // One at a time where a batch cannot honour the rules: reserved tags, a shallow
        // limit, a fair share, or strict round-robin order (which batches do not keep).
        let single = alloc.reserved
            || alloc.shallow_depth.is_some()
            || (self.sched.is_none()
                && (self.set.is_shared() || self.set.flags().contains(TagSetFlags::ROUND_ROBIN)));
        if single {
            let mut got = 0;
            while got < nr {
                let Some(rq) = self.try_alloc(alloc)? else {
                    break;
                };
                out.extend(core::iter::once(rq));
                got += 1;
            }
            return Ok(got);
        }
        let (map, pool) = match &self.sched {
            None => (&self.set.maps[m], self.set.id),
            Some(sched) => (&sched.maps[m], sched.id),
        };
        let Some(batch) = map.get_batch(alloc.cpu, nr) else {
            return Ok(0);
        };
        // Claim every request before handing any out: should `out` panic, the rest are
        // ours already, and dropping the queue frees them.
        for bit in batch.iter() {
            let request = &map.requests[bit + map.nr_reserved];
            // SAFETY: the batch gave us this tag alone.
            let io = unsafe { request.io_mut() };
            io.reset(alloc.cpu as u32, false);
            if self.sched.is_some() {
                io.sched_data = [0; 2];
            }
            request.claim(alloc.hctx as u32, self.id);
        }
        out.extend(batch.iter().map(|bit| {
            let tag = bit + map.nr_reserved;
            let request = &map.requests[tag];
            Rq::new(pool, m, tag, request.allocation())
        }));
        Ok(batch.len())
    }

    // ----- token resolution -----

    #[inline(always)]
    fn owner(&self, rq: &Rq) -> Result<Resolved<'_, T, P::RawMutex>, TagError> {
        let m = rq.map();
        let tag = rq.index();
        let owner = if rq.pool() == self.set.id {
            Owner::Driver(m, self.set.maps.get(m).ok_or(TagError::ForeignRequest)?)
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

    /// The hardware queue `rq` was allocated for and its operation, in one look-up.
    pub(crate) fn hctx_and_op(&self, rq: &Rq) -> Option<(usize, Op)> {
        let (request, io) = self.request_and_io(rq).ok()?;
        Some((request.hctx(), io.op()))
    }

    /// The shared side of the request `rq` names and the I/O it carries.
    pub(crate) fn request_and_io<'a>(
        &'a self,
        rq: &'a Rq,
    ) -> Result<(&'a Request<T>, &'a RqIo), TagError> {
        let request = self.owner(rq)?.1;
        // SAFETY: `rq` is the request's unique token and the result borrows it, so no
        // `&mut RqIo` (which needs the token borrowed mutably) can exist meanwhile.
        Ok((request, unsafe { request.io_ref() }))
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
        segments: u32,
    ) -> Result<(), TagError> {
        let io = self.io_mut(rq)?;
        self.replace_bios(io, bio);
        io.segments = segments;
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
        let request = self.owner(rq)?.1;
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
    /// [`TagError::ForeignRequest`] when `rq` is not this queue's (nothing is freed).
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
    pub fn complete(&self, rq: Rq, status: Status) -> Result<(), TagError> {
        self.complete_with(rq, status, |_, _, _| {}, Bio::complete)
    }

    /// Like [`complete`](Self::complete), each bio handed to `end` rather than its callback,
    /// and `first` shown the token, the request and its I/O before anything ends: one
    /// look-up of the request serves the hooks, the ending and the free.
    #[inline]
    pub(crate) fn complete_with(
        &self,
        rq: Rq,
        status: Status,
        first: impl FnOnce(&Rq, &Request<T>, &RqIo),
        end: impl FnMut(Bio, Status),
    ) -> Result<(), TagError> {
        let (owner, request) = self.owner(&rq)?;
        // SAFETY: we own the token; the shared view ends with `first`, before `io_mut`.
        first(&rq, request, unsafe { request.io_ref() });
        // From idle (ended before it was started) or in flight; already complete when a
        // racing `try_complete` won, which leaves the ending to us all the same.
        let _ = request
            .transition(RqState::InFlight, RqState::Complete)
            .or_else(|_| request.transition(RqState::Idle, RqState::Complete));
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
                return map.put_normal(tag, cpu);
            }
        }
        self.free_resolved(rq, owner, request)
    }

    /// Frees a request and its tags; a bio still on it ends with [`Status::IoErr`], so none
    /// is lost.
    ///
    /// # Errors
    /// [`TagError::ForeignRequest`] when `rq` is not this queue's (nothing is freed).
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
    #[inline(always)]
    pub fn free(&self, rq: Rq) -> Result<(), TagError> {
        // The common case inline: our own driver request, normal tag, no bio left, not
        // counted towards a fair share.
        if rq.pool() == self.set_id {
            if let Some(map) = self.maps().get(rq.map()) {
                let tag = rq.index();
                if let Some(request) = map.requests.get(tag) {
                    if request.is_owned_by(self.id, rq.generation()) && tag >= map.nr_reserved {
                        // SAFETY: the token is live and ours (just checked), and we own it:
                        // nobody else reaches `io`.
                        let io = unsafe { request.io_mut() };
                        if io.nr_bios() == 0 && !io.counted {
                            let cpu = io.alloc_cpu as usize;
                            request.release();
                            return map.put_normal(tag, cpu);
                        }
                    }
                }
            }
        }
        self.free_general(rq)
    }

    #[inline(never)]
    fn free_general(&self, rq: Rq) -> Result<(), TagError> {
        let (owner, request) = self.owner(&rq)?;
        self.free_resolved(rq, owner, request)
    }

    /// Frees the request `rq` names, which the caller resolved (to `owner` and `request`)
    /// from this very token.
    #[inline]
    fn free_resolved(
        &self,
        rq: Rq,
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

    /// Calls `f` for each of this queue's requests holding a driver tag, on `hctx` only or
    /// on all; stops when `f` returns false (Linux's `blk_mq_queue_tag_busy_iter`). As for
    /// [`TagSet::for_each_busy`], `f` runs under the set's iteration lock.
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

    // ----- scheduler tags -----

    /// Gives the queue scheduler tags of `nr_requests` (default `2 * min(depth, 128)`, as
    /// Linux) per map, preallocating their requests with `init_request`. From now on
    /// requests come from them, and take driver tags at dispatch.
    ///
    /// # Errors
    /// [`ConfigError::BadNrRequests`] for 0 or above [`MAX_SCHED_DEPTH`], or not above the
    /// reserved tags; [`ConfigError::NoScheduler`] when the set was made with
    /// [`TagSetFlags::NO_SCHED`]; [`ConfigError::SchedulerBusy`] when scheduler tags the
    /// queue already has still have requests out (they stay). Replacing idle scheduler tags
    /// frees them.
    ///
    /// ```
    /// use blkmq_core::{Alloc, ConfigError, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(32).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut queue = set.attach().unwrap();
    /// queue.attach_scheduler(None, |init| assert!(init.scheduler)).unwrap();
    /// assert_eq!(queue.nr_requests(), Some(64)); // 2 x depth
    /// let rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!((queue.sched_busy(), set.busy()), (1, 0)); // no driver tag yet
    /// queue.free(rq).unwrap();
    /// let err = queue.attach_scheduler(Some(0), |_| ()).unwrap_err();
    /// assert!(matches!(err, ConfigError::BadNrRequests { nr_requests: 0, .. }));
    /// ```
    pub fn attach_scheduler(
        &mut self,
        nr_requests: Option<usize>,
        mut init_request: impl FnMut(RequestInit) -> T,
    ) -> Result<(), ConfigError> {
        if self.set.flags().contains(TagSetFlags::NO_SCHED) {
            return Err(ConfigError::NoScheduler);
        }
        let depth = self.set.depth();
        let nr_requests = nr_requests.unwrap_or(2 * depth.min(128));
        if nr_requests == 0 || nr_requests > MAX_SCHED_DEPTH || nr_requests <= self.set.reserved() {
            return Err(ConfigError::BadNrRequests {
                nr_requests,
                max: MAX_SCHED_DEPTH,
            });
        }
        // Checked before anything is made: scheduler tags with requests out stay.
        if self.sched_busy() != 0 {
            return Err(ConfigError::SchedulerBusy);
        }
        let id = next_pool_id().ok_or(ConfigError::IdentitiesExhausted)?;
        let maps = (0..self.set.maps.len())
            .map(|map| {
                let params = MapParams {
                    depth: nr_requests,
                    reserved: self.set.reserved(),
                    nr_cpus: self.set.nr_cpus(),
                    round_robin: false,
                    driver: false,
                    map,
                    // Declared by the elevator (`set_min_shallow_depth`) before it limits.
                    min_shallow_depth: None,
                };
                TagMap::new(&params, &mut init_request)
            })
            .collect::<Result<Box<[_]>, _>>()?;
        if self.sched.is_some() {
            // Idle (checked above): freeing them needs only the iteration lock.
            let _guard = self.set.iter_lock.lock();
            self.sched = None;
        }
        self.sched = Some(SchedTags { id, maps });
        Ok(())
    }

    /// Requests one map spans in the key space: the larger of the driver and scheduler
    /// arrays.
    fn key_stride(&self) -> usize {
        let driver = self.maps().first().map_or(0, |m| m.requests.len());
        let sched = self
            .sched
            .as_ref()
            .and_then(|s| s.maps.first())
            .map_or(0, |m| m.requests.len());
        driver.max(sched)
    }

    /// A dense index of the request `rq` names, below [`nr_keys`](Self::nr_keys): its map
    /// times the largest array, plus its tag.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).hw_queues(2).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let rq = queue.alloc(&Alloc::new(1, 0)).unwrap();
    /// assert_eq!(queue.key_of(&rq), 4 + rq.tag() as usize);
    /// assert_eq!(queue.nr_keys(), 8);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn key_of(&self, rq: &Rq) -> usize {
        rq.map() * self.key_stride() + rq.index()
    }

    /// How many distinct [`key_of`](Self::key_of) values this queue's requests can have.
    pub fn nr_keys(&self) -> usize {
        self.maps().len() * self.key_stride()
    }

    /// Frees the scheduler tags; requests come from driver tags again.
    ///
    /// # Errors
    /// [`TagError::NoScheduler`] without scheduler tags; [`TagError::Busy`] while any of
    /// their requests is out.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagError, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut queue = set.attach().unwrap();
    /// assert_eq!(queue.detach_scheduler().unwrap_err(), TagError::NoScheduler);
    /// queue.attach_scheduler(None, |_| ()).unwrap();
    /// let rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!(queue.detach_scheduler().unwrap_err(), TagError::Busy);
    /// queue.free(rq).unwrap();
    /// queue.detach_scheduler().unwrap();
    /// assert!(!queue.has_scheduler());
    /// ```
    pub fn detach_scheduler(&mut self) -> Result<(), TagError> {
        let sched = self.sched.as_ref().ok_or(TagError::NoScheduler)?;
        if sched.maps.iter().any(|m| m.busy() != 0) {
            return Err(TagError::Busy);
        }
        let _guard = self.set.iter_lock.lock();
        self.sched = None;
        Ok(())
    }

    /// Whether the queue has scheduler tags.
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut queue = set.attach().unwrap();
    /// assert!(!queue.has_scheduler());
    /// queue.attach_scheduler(None, |_| ()).unwrap();
    /// assert!(queue.has_scheduler());
    /// ```
    pub fn has_scheduler(&self) -> bool {
        self.sched.is_some()
    }

    /// Scheduler requests per map (`nr_requests`), when there are scheduler tags.
    ///
    /// ```
    /// use blkmq_core::{StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut queue = set.attach().unwrap();
    /// assert_eq!(queue.nr_requests(), None);
    /// queue.attach_scheduler(Some(24), |_| ()).unwrap();
    /// assert_eq!(queue.nr_requests(), Some(24));
    /// ```
    pub fn nr_requests(&self) -> Option<usize> {
        self.sched.as_ref().map(|s| s.maps[0].depth())
    }

    /// Changes `nr_requests` within the depth the scheduler tags were made with.
    ///
    /// # Errors
    /// [`ConfigError::BadDepthUpdate`] outside it; [`ConfigError::BadNrRequests`] without
    /// scheduler tags.
    ///
    /// ```
    /// use blkmq_core::{ConfigError, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut queue = set.attach().unwrap();
    /// assert!(matches!(queue.set_nr_requests(4), Err(ConfigError::BadNrRequests { .. })));
    /// queue.attach_scheduler(Some(32), |_| ()).unwrap();
    /// queue.set_nr_requests(8).unwrap();
    /// assert_eq!(queue.nr_requests(), Some(8));
    /// assert!(queue.set_nr_requests(33).is_err()); // beyond the depth they were made with
    /// ```
    pub fn set_nr_requests(&self, nr_requests: usize) -> Result<(), ConfigError> {
        let sched = self.sched.as_ref().ok_or(ConfigError::BadNrRequests {
            nr_requests,
            max: MAX_SCHED_DEPTH,
        })?;
        for map in sched.maps.iter() {
            map.resize(nr_requests)?;
        }
        Ok(())
    }

    /// Declares the smallest shallow limit allocations will use on the scheduler tags (an
    /// elevator's `depth_updated`), which sizes the wake-up batch so none is lost.
    ///
    /// # Errors
    /// [`ConfigError::BadNrRequests`] without scheduler tags; [`ConfigError::BadShallowDepth`]
    /// for 0 or beyond the normal scheduler tags (`nr_requests` less the reserved ones).
    ///
    /// ```
    /// use blkmq_core::{ConfigError, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(16).reserved(2).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut queue = set.attach().unwrap();
    /// assert!(queue.set_min_shallow_depth(4).is_err()); // no scheduler tags
    /// queue.attach_scheduler(Some(16), |_| ()).unwrap();
    /// queue.set_min_shallow_depth(4).unwrap();
    /// let err = queue.set_min_shallow_depth(15).unwrap_err(); // 14 normal tags
    /// assert_eq!(err, ConfigError::BadShallowDepth { shallow_depth: 15, depth: 14 });
    /// ```
    pub fn set_min_shallow_depth(&self, depth: usize) -> Result<(), ConfigError> {
        let sched = self.sched.as_ref().ok_or(ConfigError::BadNrRequests {
            nr_requests: 0,
            max: MAX_SCHED_DEPTH,
        })?;
        let limit = sched.maps[0].normal.depth();
        if depth == 0 || depth > limit {
            return Err(ConfigError::BadShallowDepth {
                shallow_depth: depth,
                depth: limit,
            });
        }
        for map in sched.maps.iter() {
            map.normal.set_min_shallow_depth(depth);
        }
        Ok(())
    }

    /// Scheduler requests out, over every map.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).hw_queues(2).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut queue = set.attach().unwrap();
    /// assert_eq!(queue.sched_busy(), 0);
    /// queue.attach_scheduler(None, |_| ()).unwrap();
    /// let a = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// let b = queue.alloc(&Alloc::new(1, 0)).unwrap();
    /// assert_eq!(queue.sched_busy(), 2);
    /// queue.free(a).unwrap();
    /// queue.free(b).unwrap();
    /// assert_eq!(queue.sched_busy(), 0);
    /// ```
    pub fn sched_busy(&self) -> usize {
        self.sched
            .as_ref()
            .map_or(0, |s| s.maps.iter().map(TagMap::busy).sum())
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
            // Scheduler tags go while the lock is held: no iterator can be inside them.
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

/// The future of [`QueueTags::alloc_async`].
///
/// ```
/// use blkmq_core::{Alloc, StdPlatform, TagSet};
/// use std::future::Future;
/// use std::pin::pin;
/// use std::task::{Context, Poll, Waker};
///
/// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
/// let queue = set.attach().unwrap();
/// let future = pin!(queue.alloc_async(Alloc::new(0, 0)));
/// let Poll::Ready(Ok(rq)) = future.poll(&mut Context::from_waker(Waker::noop())) else {
///     panic!("a tag is free");
/// };
/// queue.free(rq).unwrap();
/// ```
pub struct AllocFuture<'q, T, P: Platform> {
    queue: &'q QueueTags<T, P>,
    alloc: Alloc,
    waiter: Option<Waiter<'q, P::RawMutex>>,
    /// The map on whose `share_waiters` this future counts, while it does.
    share_map: Option<usize>,
}

impl<T, P: Platform> AllocFuture<'_, T, P> {
    fn stop_sharing(&mut self) {
        if let Some(m) = self.share_map.take() {
            self.queue.activity[m]
                .share_waiters
                .fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl<T, P: Platform> Drop for AllocFuture<'_, T, P> {
    fn drop(&mut self) {
        self.stop_sharing();
    }
}

impl<T, P: Platform> Future for AllocFuture<'_, T, P> {
    type Output = Result<Rq, TagError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let queue = this.queue;
        let alloc = this.alloc;
        if this.waiter.is_none() {
            // Errors (a bad queue index, no reserved tags) come back at once, not after a wait.
            if let Some(rq) = queue.try_alloc(&alloc)? {
                return Poll::Ready(Ok(rq));
            }
            let wait_queue = queue.wait_queue(&alloc)?;
            let m = queue.set.map_index(alloc.hctx);
            if queue.sched.is_none() && !alloc.reserved && queue.set.is_shared() {
                // Before the waiter's attempts: see `Activity::share_waiters`.
                queue.activity[m]
                    .share_waiters
                    .fetch_add(1, Ordering::SeqCst);
                this.share_map = Some(m);
            }
            let hint = match &queue.sched {
                None => queue.set.maps[m].hint(alloc.cpu),
                Some(sched) => sched.maps[m].hint(alloc.cpu),
            };
            this.waiter = Some(wait_queue.waiter(hint));
        }
        let waiter = this.waiter.as_mut().expect("set above");
        let polled = waiter.poll_get_with(cx, || match queue.try_alloc(&alloc) {
            Ok(Some(rq)) => Some(Ok(rq)),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        });
        if polled.is_ready() {
            this.stop_sharing();
        }
        polled
    }
}

impl<T, P: Platform> fmt::Debug for AllocFuture<'_, T, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AllocFuture")
            .field("alloc", &self.alloc)
            .field("waiting", &self.waiter.is_some())
            .finish()
    }
}
