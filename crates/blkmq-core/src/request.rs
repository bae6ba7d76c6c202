//! Requests: preallocated per tag, owned through an [`Rq`] token, observed by anyone.
//!
//! # Ownership
//!
//! Every request lives in an array that is allocated when its tags are created and freed
//! with them; a request is never moved or freed while anyone can name it. A request has two
//! sides:
//!
//! * the **owner's side** ([`RqIo`]: the bio chain, position, length, scheduler data), reached
//!   only through the [`Rq`] token that allocation returns. An `Rq` cannot be cloned or made
//!   up, and freeing consumes it, so at most one `&mut RqIo` exists per request;
//! * the **shared side** ([`Request`]: state, generation, tags, deadline, the driver's
//!   payload), readable through `&Request` by anyone — a busy-tag iterator, a timeout
//!   handler, an interrupt completing by tag. It holds only atomics and the driver payload
//!   `T: Sync`, so a reader racing the owner sees stale values, never torn memory.
//!
//! # Lookup against a racing completion
//!
//! A tag -> request lookup ([`crate::QueueTags::tag_to_rq`], busy iteration) returns a
//! `&Request` whose memory is valid for as long as the tags live, which the borrow enforces.
//! What may be stale is *which* I/O the request carries: it may complete and be reused while a
//! timeout handler looks at it, or be requeued and dispatched again. The
//! [generation](Request::generation) settles that: it changes on every allocation and every
//! start, and [`Request::try_complete`] moves a request from in flight to complete only if
//! the generation is still the one the caller saw. Of a timeout handler and an interrupt
//! racing to end the same dispatch, exactly one wins; the other learns it lost and leaves the
//! request alone. A requeue, the owner's move out of flight, is a compare-exchange too, so
//! one that loses to a `try_complete` fails instead of undoing it. The owner's start (from
//! idle, which no `try_complete` touches) and its end (to complete, the word a winning
//! `try_complete` writes as well) are plain stores.

use core::cell::UnsafeCell;
use core::fmt;

use crate::bio::{Bio, BioFlags, IoPrio, IssuerId, Op, Status};
use crate::segment::SegSpan;
use crate::sync::{AtomicU32, AtomicU64, Ordering};

mod data;
pub(crate) mod flush;
mod pool;
mod token;

pub(crate) use pool::BioPool;

pub use data::RqSegments;

pub use token::Rq;

/// No tag: the value of a tag field that holds none.
///
/// ```
/// use blkmq_core::{Alloc, NO_TAG, StdPlatform, TagSet};
///
/// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
/// let mut queue = set.attach().unwrap();
/// queue.attach_scheduler(None, |_| ()).unwrap();
/// let rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
/// // A scheduler request has no driver tag until it is dispatched.
/// assert_eq!(queue.request(&rq).unwrap().driver_tag(), NO_TAG);
/// queue.free(rq).unwrap();
/// ```
pub const NO_TAG: u32 = u32::MAX;

/// Where a request is in its life.
///
/// ```text
///            alloc            start              complete              free
///   Free ----------> Idle ----------> InFlight ------------> Complete -------> Free
///                     ^                  |  requeue
///                     +------------------+
/// ```
///
/// # Invariants
/// * `Free -> Idle` happens only in allocation, by whoever the tag bitmap just gave the
///   tag, and begins a new allocation (a new [generation](Request::generation)).
/// * `Idle -> InFlight` (a start, which begins a new generation too) and
///   `InFlight -> Idle` (a requeue) are the owner's alone: whoever holds the request's
///   [`Rq`].
/// * `InFlight -> Complete` is the one move anyone may make without the token, by
///   [`Request::try_complete`] with the generation they saw; it is a compare-exchange, so of
///   several attempts (and the owner's own moves out of `InFlight`) exactly one wins.
/// * Any state `-> Free` happens only when the owner frees the request, after its bios
///   ended or moved, and before its tag goes back to the bitmap: a request whose tag is free
///   is `Free`.
///
/// ```
/// use blkmq_core::{Alloc, RqState, StdPlatform, TagSet};
///
/// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
/// let queue = set.attach().unwrap();
/// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
/// let request = queue.request(&rq).unwrap();
/// assert_eq!(request.state(), RqState::Idle);
/// queue.start(&mut rq, 0).unwrap();
/// assert_eq!(request.state(), RqState::InFlight);
/// queue.free(rq).unwrap();
/// assert_eq!(request.state(), RqState::Free);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum RqState {
    /// Not allocated.
    Free = 0,
    /// Allocated (or requeued), not yet handed to the driver.
    Idle = 1,
    /// Handed to the driver, which has not completed it.
    InFlight = 2,
    /// Completed; its tags are about to be freed.
    Complete = 3,
}

const STATE_BITS: u32 = 2;
const STATE_MASK: u64 = (1 << STATE_BITS) - 1;
/// Bits of the state word below the allocation count: the state and the starts.
const ALLOC_SHIFT: u32 = 24;
/// One start, in the state word.
const START_ONE: u64 = 1 << STATE_BITS;
/// The starts of the current allocation, in the state word.
const START_MASK: u64 = ((1 << ALLOC_SHIFT) - 1) & !STATE_MASK;

fn decode_state(word: u64) -> RqState {
    match word & STATE_MASK {
        0 => RqState::Free,
        1 => RqState::Idle,
        2 => RqState::InFlight,
        _ => RqState::Complete,
    }
}

/// A request as everyone may see it: its state, tags and deadline, and the driver's payload.
///
/// # Invariants
/// * `state` packs an allocation count (upper 40 bits), a count of starts within the
///   allocation (22 bits) and an [`RqState`] (lower 2 bits). The allocation count changes
///   only on allocation (`Free -> Idle`), the starts only on `Idle -> InFlight`; the
///   [generation](Self::generation) is both together. An [`Rq`] records the allocation
///   count, so a stale token never matches a later allocation.
/// * Only the holder of the request's [`Rq`] moves it out of `Free`, `Idle` or `Complete`;
///   `InFlight -> Complete` is a compare-exchange that anyone holding the generation may
///   attempt ([`try_complete`](Self::try_complete)), and exactly one attempt succeeds. The
///   holder's moves out of `InFlight` are compare-exchanges as well, and fail when such an
///   attempt won.
/// * `io` is touched only by the holder of the `Rq` (see the module documentation).
///
/// ```
/// use blkmq_core::{Alloc, RqState, StdPlatform, TagSet};
///
/// let set = TagSet::builder(4).build(StdPlatform::new(), |init| init.tag * 100).unwrap();
/// let queue = set.attach().unwrap();
/// let rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
/// let request = queue.request(&rq).unwrap();
/// assert_eq!(*request.payload(), request.tag() as usize * 100);
/// assert_eq!(request.state(), RqState::Idle);
/// queue.free(rq).unwrap();
/// ```
// Laid out by hand, cache-line aligned: what allocating and freeing touch (the state, the
// owner, the bookkeeping at the head of `io`) sits in the first line.
#[repr(C, align(64))]
pub struct Request<T> {
    state: AtomicU64,
    queue: AtomicU32,
    hctx: AtomicU32,
    driver_tag: AtomicU32,
    /// The request's own tag in the array that owns it.
    tag: u32,
    io: UnsafeCell<RqIo>,
    deadline_ns: AtomicU64,
    payload: T,
}

// SAFETY: the shared side is atomics and `T: Sync`; `io` is reached only through the unique
// `Rq` token (a `&mut Rq` borrow), so no two threads touch it at once, and `RqIo` is `Send`.
unsafe impl<T: Sync> Sync for Request<T> {}

impl<T> Request<T> {
    /// A free request numbered `tag`. A driver-tag request's driver tag is its own tag, for
    /// good; a scheduler request takes one at dispatch.
    pub(crate) fn new(tag: u32, driver: bool, payload: T) -> Self {
        Self {
            state: AtomicU64::new(RqState::Free as u64),
            deadline_ns: AtomicU64::new(0),
            hctx: AtomicU32::new(0),
            queue: AtomicU32::new(u32::MAX),
            driver_tag: AtomicU32::new(if driver { tag } else { NO_TAG }),
            tag,
            io: UnsafeCell::new(RqIo::EMPTY),
            payload,
        }
    }

    /// The driver's per-request data, made by its `init_request` when the tags were created.
    ///
    /// Shared: an interrupt or a timeout handler may read it while the owner works, so
    /// mutable parts need their own synchronisation (atomics, a lock).
    ///
    /// ```
    /// use blkmq_core::{Alloc, RequestInit, StdPlatform, TagSet};
    ///
    /// let name = |init: RequestInit| format!("rq{}", init.tag);
    /// let set = TagSet::builder(4).build(StdPlatform::new(), name).unwrap();
    /// let queue = set.attach().unwrap();
    /// let rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// let request = queue.request(&rq).unwrap();
    /// assert_eq!(*request.payload(), format!("rq{}", request.tag()));
    /// queue.free(rq).unwrap();
    /// ```
    pub fn payload(&self) -> &T {
        &self.payload
    }

    /// The current state.
    ///
    /// ```
    /// use blkmq_core::{Alloc, RqState, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!(queue.request(&rq).unwrap().state(), RqState::Idle);
    /// queue.start(&mut rq, 0).unwrap();
    /// assert_eq!(queue.request(&rq).unwrap().state(), RqState::InFlight);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn state(&self) -> RqState {
        decode_state(self.state.load(Ordering::Acquire))
    }

    /// The generation: changes each time the request is allocated and each time it is
    /// started (a requeued request started again is a new dispatch).
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(1).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// let request = queue.request(&rq).unwrap();
    /// let first = request.generation();
    /// queue.free(rq).unwrap();
    /// let rq = queue.alloc(&Alloc::new(0, 0)).unwrap(); // the only request, again
    /// assert!(std::ptr::eq(queue.request(&rq).unwrap(), request));
    /// assert_ne!(request.generation(), first);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn generation(&self) -> u64 {
        self.state.load(Ordering::Acquire) >> STATE_BITS
    }

    /// Moves the state from `from` to `to` (the owner's transitions but a start, which is
    /// [`start`](Self::start)). Fails, changing nothing, when the state is not `from`: a
    /// racing [`try_complete`](Self::try_complete) may have won.
    pub(crate) fn transition(&self, from: RqState, to: RqState) -> Result<(), RqState> {
        debug_assert_ne!(to, RqState::InFlight, "a start counts itself: `start`");
        let mut word = self.state.load(Ordering::Acquire);
        loop {
            if decode_state(word) != from {
                return Err(decode_state(word));
            }
            let next = (word & !STATE_MASK) | to as u64;
            match self
                .state
                .compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(()),
                Err(now) => word = now,
            }
        }
    }

    /// `Idle -> InFlight`, counting a start: the owner's alone. Nothing else writes the
    /// state of an idle request (a racing [`try_complete`](Self::try_complete) only takes
    /// one in flight), so a store does what a compare-exchange would, without the locked
    /// operation. Fails, changing nothing, when the request is not idle.
    #[inline]
    pub(crate) fn start(&self) -> Result<(), RqState> {
        let word = self.state.load(Ordering::Acquire);
        if decode_state(word) != RqState::Idle {
            return Err(decode_state(word));
        }
        let starts = (word & START_MASK).wrapping_add(START_ONE) & START_MASK;
        let next = (word & !(START_MASK | STATE_MASK)) | starts | RqState::InFlight as u64;
        // Release: whoever sees it in flight sees its deadline and start stamp.
        self.state.store(next, Ordering::Release);
        Ok(())
    }

    /// `Idle` or `InFlight` -> `Complete`: the owner's end of the request (from idle when it
    /// ends before it was started); nothing when it is complete already.
    ///
    /// A load and a store, not a compare-exchange (a locked operation per I/O): the only
    /// other writer of the state, a racing [`try_complete`](Self::try_complete), moves it
    /// from in flight to complete within the same generation, so it writes the very word this
    /// stores. A `try_complete` that wins read the start's store, so it comes right after
    /// that store in the state's modification order, before this one; one that comes later
    /// reads complete and loses. Either way no `try_complete` wins after this store, and the
    /// owner's next store (the release) is the last.
    #[inline(always)]
    pub(crate) fn mark_complete(&self) {
        #[cfg(not(loom))]
        {
            let word = self.state.load(Ordering::Acquire);
            if matches!(decode_state(word), RqState::Idle | RqState::InFlight) {
                let next = (word & !STATE_MASK) | RqState::Complete as u64;
                self.state.store(next, Ordering::Release);
            }
        }
        // Loom orders a plain store only after what its thread has seen, so it lets the store
        // and a racing read-modify-write both follow the start's store, which the total
        // modification order above rules out: under loom, the same move as one
        // read-modify-write.
        #[cfg(loom)]
        {
            let _ = self
                .state
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                    matches!(decode_state(word), RqState::Idle | RqState::InFlight)
                        .then_some((word & !STATE_MASK) | RqState::Complete as u64)
                });
        }
    }

    /// The generation and state read together.
    ///
    /// ```
    /// use blkmq_core::{Alloc, RqState, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// let request = queue.request(&rq).unwrap();
    /// queue.start(&mut rq, 0).unwrap();
    /// assert_eq!(request.snapshot(), (request.generation(), RqState::InFlight));
    /// queue.free(rq).unwrap();
    /// ```
    pub fn snapshot(&self) -> (u64, RqState) {
        let word = self.state.load(Ordering::Acquire);
        (word >> STATE_BITS, decode_state(word))
    }

    /// The request's tag in the tags that own it: the driver tag without a scheduler, the
    /// scheduler tag with one.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).reserved(2).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let normal = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// let reserved = queue.alloc(&Alloc::new(0, 0).reserved()).unwrap();
    /// assert!(queue.request(&normal).unwrap().tag() >= 2); // after the reserved ones
    /// assert!(queue.request(&reserved).unwrap().tag() < 2);
    /// queue.free(normal).unwrap();
    /// queue.free(reserved).unwrap();
    /// ```
    pub fn tag(&self) -> u32 {
        self.tag
    }

    /// The driver tag: a request without scheduler tags always has its own; a scheduler
    /// request has one from dispatch until it is freed or put back, else [`NO_TAG`].
    ///
    /// ```
    /// use blkmq_core::{Alloc, NO_TAG, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut queue = set.attach().unwrap();
    /// let plain = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// let request = queue.request(&plain).unwrap();
    /// assert_eq!(request.driver_tag(), request.tag());
    /// queue.free(plain).unwrap();
    ///
    /// queue.attach_scheduler(None, |_| ()).unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!(queue.request(&rq).unwrap().driver_tag(), NO_TAG);
    /// assert!(queue.get_driver_tag(&mut rq).unwrap());
    /// assert_ne!(queue.request(&rq).unwrap().driver_tag(), NO_TAG);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn driver_tag(&self) -> u32 {
        self.driver_tag.load(Ordering::Acquire)
    }

    /// The hardware queue the request was allocated for.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).hw_queues(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let rq = queue.alloc(&Alloc::new(3, 0)).unwrap();
    /// assert_eq!(queue.request(&rq).unwrap().hctx(), 3);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn hctx(&self) -> usize {
        self.hctx.load(Ordering::Relaxed) as usize
    }

    /// `(hctx << 16) | driver tag`, the tag a driver with several hardware queues gives its
    /// hardware; `None` without a driver tag.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet, unique_tag_hwq, unique_tag_tag};
    ///
    /// let set = TagSet::builder(8).hw_queues(2).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let rq = queue.alloc(&Alloc::new(1, 0)).unwrap();
    /// let request = queue.request(&rq).unwrap();
    /// let unique = request.unique_tag().unwrap();
    /// assert_eq!(unique_tag_hwq(unique), 1);
    /// assert_eq!(unique_tag_tag(unique), request.driver_tag());
    /// queue.free(rq).unwrap();
    /// ```
    pub fn unique_tag(&self) -> Option<u32> {
        match self.driver_tag() {
            NO_TAG => None,
            tag => Some(unique_tag(self.hctx(), tag)),
        }
    }

    /// When the request times out, in the platform's nanoseconds: set when it starts and
    /// meaningful while it is in flight (0 before a request's first start; later, a
    /// request not yet started again keeps the deadline of its last start).
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).timeout_ns(1_000).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.start(&mut rq, 500).unwrap();
    /// assert_eq!(queue.request(&rq).unwrap().deadline_ns(), 1_500);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn deadline_ns(&self) -> u64 {
        self.deadline_ns.load(Ordering::Relaxed)
    }

    /// Moves the request from in flight to complete if it is still generation `generation`.
    /// Returns whether this call did it: of several racing callers (an interrupt and a
    /// timeout handler), exactly one gets `true`.
    ///
    /// ```
    /// use blkmq_core::{Alloc, RqState, TagSet};
    ///
    /// let set = TagSet::builder(4).build(blkmq_core::StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.start(&mut rq, 1_000).unwrap();
    /// let request = queue.request(&rq).unwrap();
    /// let seen = request.generation();
    /// assert!(request.try_complete(seen));
    /// assert!(!request.try_complete(seen)); // the loser of the race
    /// assert_eq!(request.state(), RqState::Complete);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn try_complete(&self, generation: u64) -> bool {
        let from = (generation << STATE_BITS) | RqState::InFlight as u64;
        let to = (generation << STATE_BITS) | RqState::Complete as u64;
        self.state
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    // Owner-side transitions (the caller holds the `Rq`).

    /// `Free -> Idle` with a new generation, publishing where it belongs.
    #[inline(always)]
    pub(crate) fn claim(&self, hctx: u32, queue: u32) -> u64 {
        // Stores only on change: a request mostly goes back to the queue and hardware queue
        // it came from, and a store before the next locked operation delays it.
        if self.hctx.load(Ordering::Relaxed) != hctx {
            self.hctx.store(hctx, Ordering::Relaxed);
        }
        if self.queue.load(Ordering::Relaxed) != queue {
            self.queue.store(queue, Ordering::Relaxed);
        }
        // INVARIANT: a new allocation count, no start yet: a token of an earlier allocation
        // no longer matches.
        let allocation = (self.state.load(Ordering::Relaxed) >> ALLOC_SHIFT).wrapping_add(1);
        // Release: a reader that sees the new generation sees `hctx` and `queue`.
        self.state.store(
            (allocation << ALLOC_SHIFT) | RqState::Idle as u64,
            Ordering::Release,
        );
        allocation
    }

    /// Whether the request is allocated, at allocation count `allocation` (what its token
    /// recorded).
    #[inline(always)]
    pub(crate) fn is_live_at(&self, allocation: u64) -> bool {
        let word = self.state.load(Ordering::Acquire);
        word >> ALLOC_SHIFT == allocation && word & STATE_MASK != RqState::Free as u64
    }

    /// The current allocation count (what a token made now records).
    #[inline(always)]
    pub(crate) fn allocation(&self) -> u64 {
        self.state.load(Ordering::Relaxed) >> ALLOC_SHIFT
    }

    /// Any state -> `Free`, keeping the generation.
    #[inline(always)]
    pub(crate) fn release(&self) {
        // INVARIANT: `Free` before the tag goes back (the callers put it after this), so a
        // request whose tag is free is `Free`.
        let word = self.state.load(Ordering::Relaxed);
        self.state.store(word & !STATE_MASK, Ordering::Release);
    }

    pub(crate) fn set_deadline(&self, deadline_ns: u64) {
        self.deadline_ns.store(deadline_ns, Ordering::Relaxed);
    }

    /// Moves the deadline from `from` to `to` if no one changed it meanwhile: a timeout
    /// handler claiming an expired dispatch (`to` = `u64::MAX`), or re-arming one it claimed.
    pub(crate) fn swap_deadline(&self, from: u64, to: u64) -> bool {
        self.deadline_ns
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    pub(crate) fn set_driver_tag(&self, tag: u32) {
        self.driver_tag.store(tag, Ordering::Release);
    }

    pub(crate) fn queue_id(&self) -> u32 {
        self.queue.load(Ordering::Relaxed)
    }

    /// The owner's side.
    ///
    /// # Safety
    /// The caller holds this request's `Rq` borrowed mutably for the returned lifetime (or
    /// owns it, as allocation and freeing do), so no other reference to `io` exists.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn io_mut(&self) -> &mut RqIo {
        // SAFETY: exclusive access is the caller's contract.
        unsafe { &mut *self.io.get() }
    }

    /// The owner's side, to read.
    ///
    /// # Safety
    /// The caller holds this request's `Rq` borrowed (at least shared) for the returned
    /// lifetime, so no `&mut RqIo` exists meanwhile (those need the token borrowed mutably).
    #[inline(always)]
    pub(crate) unsafe fn io_ref(&self) -> &RqIo {
        // SAFETY: no writer while the token is borrowed is the caller's contract.
        unsafe { &*self.io.get() }
    }

    /// Whether the request is allocated to queue `queue` at `generation`. The state is read
    /// first: an allocation publishes its queue before its state (release), so a queue read
    /// after a state of the same allocation is that allocation's.
    #[inline(always)]
    pub(crate) fn is_owned_by(&self, queue: u32, generation: u64) -> bool {
        self.is_live_at(generation) && self.queue.load(Ordering::Relaxed) == queue
    }

    /// Whether the request is allocated (in any state but `Free`) to queue `queue`, reading
    /// the state first (see [`is_owned_by`](Self::is_owned_by)).
    #[inline]
    pub(crate) fn is_allocated_to(&self, queue: u32) -> bool {
        self.state() != RqState::Free && self.queue.load(Ordering::Relaxed) == queue
    }
}

impl<T: fmt::Debug> fmt::Debug for Request<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (generation, state) = self.snapshot();
        f.debug_struct("Request")
            .field("tag", &self.tag)
            .field("state", &state)
            .field("generation", &generation)
            .field("hctx", &self.hctx())
            .field("driver_tag", &self.driver_tag())
            .field("payload", &self.payload)
            .finish()
    }
}

/// `(hctx << 16) | tag`: a tag that also names its hardware queue.
///
/// ```
/// use blkmq_core::{unique_tag, unique_tag_hwq, unique_tag_tag};
/// let t = unique_tag(3, 17);
/// assert_eq!((unique_tag_hwq(t), unique_tag_tag(t)), (3, 17));
/// ```
pub const fn unique_tag(hctx: usize, tag: u32) -> u32 {
    ((hctx as u32) << 16) | (tag & 0xffff)
}

/// The hardware queue of a [`unique_tag`].
///
/// ```
/// use blkmq_core::{unique_tag, unique_tag_hwq};
/// assert_eq!(unique_tag_hwq(unique_tag(5, 9)), 5);
/// assert_eq!(unique_tag_hwq(0x0002_0010), 2);
/// ```
pub const fn unique_tag_hwq(unique: u32) -> usize {
    (unique >> 16) as usize
}

/// The tag of a [`unique_tag`].
///
/// ```
/// use blkmq_core::{unique_tag, unique_tag_tag};
/// assert_eq!(unique_tag_tag(unique_tag(5, 9)), 9);
/// assert_eq!(unique_tag_tag(0x0002_0010), 0x10);
/// ```
pub const fn unique_tag_tag(unique: u32) -> u32 {
    unique & 0xffff
}

/// In `RqIo::seg_nr`: the chain's last data segment lies in a named buffer.
const BACK_MAPPED: u32 = 1 << 31;

/// The owner's side of a request: the I/O it carries.
///
/// The first bio is held inline; bios merged after or before it are linked through slots of
/// the tag set's bio pool, allocated when the tag set was created, so merging allocates
/// nothing.
///
/// # Invariants
/// Between the owner's calls:
/// * `nr_bios` counts `first` and the pool slots linked from `chain_head` to `chain_tail`
///   (both `NO_TAG` for no chain); a chain exists only behind a `first`, and each slot is
///   on one chain at most.
/// * `op`, `flags`, `prio`, `issuer` and `sector` are the first bio's; `sectors` is the sum
///   over the chain.
/// * A free request carries no bio and describes nothing: every path that frees a request
///   ends or moves its bios first, so a bio is neither lost nor ended twice.
/// * `alloc_cpu` and `counted` are set when the request is allocated (or takes a driver
///   tag) and read when it is freed: its tag goes back through the hint it came from, and
///   a tag counted towards a fair share is uncounted exactly once.
///
/// ```
/// use blkmq_core::{Alloc, Bio, Op, StdPlatform, TagSet};
///
/// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
/// let queue = set.attach().unwrap();
/// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
/// queue.set_bio(&mut rq, Bio::new(Op::Write, 0, 8)).unwrap();
/// queue.append_bio(&mut rq, Bio::new(Op::Write, 8, 8)).unwrap().unwrap();
/// let io = queue.io(&rq).unwrap();
/// assert_eq!((io.sector(), io.sectors(), io.nr_bios()), (0, 16, 2));
/// assert_eq!(set.bio_slots_in_use(), 1); // the first bio is held inline
/// queue.free(rq).unwrap();
/// ```
#[derive(Debug)]
#[repr(C)]
pub struct RqIo {
    // Read by every free: first.
    nr_bios: u32,
    pub(crate) alloc_cpu: u32,
    /// Whether the driver tag counts towards its queue's fair share.
    pub(crate) counted: bool,
    op: Op,
    /// Where the request is in a flush sequence (`request/flush.rs`); zero outside one.
    flush: u8,
    /// Accounted (`stats.rs`): its `OpGroup` plus one when a request queue counted it in
    /// flight at allocation, else zero. Bookkeeping, as `alloc_ns`: set at allocation.
    pub(crate) acct: u8,
    prio: IoPrio,
    flags: BioFlags,
    issuer: IssuerId,
    /// Pool slots of the bios after `first`, as a list.
    chain_head: u32,
    chain_tail: u32,
    /// Length of the chain's last data segment (see [`span`](Self::span)).
    seg_back_len: u32,
    sector: u64,
    sectors: u64,
    /// When the request was started (platform nanoseconds).
    pub(crate) start_ns: u64,
    /// When an accounting request queue made it (platform nanoseconds; see `acct`).
    pub(crate) alloc_ns: u64,
    /// The chain's data segments as the request queue counts them against its limits (see
    /// [`span`](Self::span)), kept in the room the fields around them leave: how many, with
    /// [`BACK_MAPPED`] set when the last lies in a named buffer.
    seg_nr: u32,
    /// Length of the chain's first data segment, which starts where the first bio's data
    /// does.
    seg_front_len: u32,
    /// Where the chain's last data segment starts.
    seg_back_addr: u64,
    /// Free for the elevator that holds the request (Linux's `rq->elv.priv`); zero when a
    /// request is allocated from scheduler tags.
    pub sched_data: [u64; 2],
    first: Option<Bio>,
}

impl RqIo {
    const EMPTY: RqIo = RqIo {
        op: Op::Read,
        flush: 0,
        flags: BioFlags::empty(),
        prio: IoPrio::DEFAULT,
        issuer: IssuerId(0),
        sector: 0,
        sectors: 0,
        nr_bios: 0,
        first: None,
        chain_head: NO_TAG,
        chain_tail: NO_TAG,
        start_ns: 0,
        alloc_ns: 0,
        acct: 0,
        seg_nr: 0,
        seg_front_len: 0,
        seg_back_addr: 0,
        seg_back_len: 0,
        alloc_cpu: 0,
        counted: false,
        sched_data: [0; 2],
    };

    /// Readies the request for a new owner. Ending or moving the bios left the description
    /// of the I/O empty (see `clear`), so only the bookkeeping is set here: these stores come
    /// before the next locked operation, which waits for them.
    #[inline(always)]
    pub(crate) fn reset(&mut self, cpu: u32, counted: bool) {
        debug_assert!(self.first.is_none() && self.chain_head == NO_TAG && self.nr_bios == 0);
        self.alloc_cpu = cpu;
        self.counted = counted;
        self.acct = 0;
    }

    /// Forgets the I/O: no bio, nothing described.
    fn clear(&mut self) {
        self.first = None;
        self.chain_head = NO_TAG;
        self.chain_tail = NO_TAG;
        self.nr_bios = 0;
        self.sectors = 0;
        self.sector = 0;
        self.op = Op::Read;
        self.flags = BioFlags::empty();
        self.prio = IoPrio::DEFAULT;
        self.issuer = IssuerId(0);
        self.start_ns = 0;
        self.set_span(SegSpan::EMPTY);
    }

    /// The operation (that of the first bio).
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, Op, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.set_bio(&mut rq, Bio::new(Op::Discard, 0, 64)).unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().op(), Op::Discard);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn op(&self) -> Op {
        self.op
    }

    /// The flags of the first bio.
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, BioFlags, Op, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.set_bio(&mut rq, Bio::new(Op::Write, 0, 8).flags(BioFlags::FUA)).unwrap();
    /// queue.append_bio(&mut rq, Bio::new(Op::Write, 8, 8)).unwrap().unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().flags(), BioFlags::FUA);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn flags(&self) -> BioFlags {
        self.flags
    }

    /// The priority of the first bio.
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, IoPrio, IoPrioClass, Op, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// let prio = IoPrio::new(IoPrioClass::RealTime, 1).unwrap();
    /// queue.set_bio(&mut rq, Bio::new(Op::Read, 0, 8).prio(prio)).unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().prio(), prio);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn prio(&self) -> IoPrio {
        self.prio
    }

    /// The issuer of the first bio.
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, IssuerId, Op, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.set_bio(&mut rq, Bio::new(Op::Read, 8, 8).issuer(IssuerId(1))).unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().issuer(), IssuerId(1));
    /// queue.prepend_bio(&mut rq, Bio::new(Op::Read, 0, 8).issuer(IssuerId(2))).unwrap().unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().issuer(), IssuerId(2)); // the new first bio's
    /// queue.free(rq).unwrap();
    /// ```
    pub fn issuer(&self) -> IssuerId {
        self.issuer
    }

    /// First sector.
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, Op, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.set_bio(&mut rq, Bio::new(Op::Read, 16, 8)).unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().sector(), 16);
    /// queue.prepend_bio(&mut rq, Bio::new(Op::Read, 8, 8)).unwrap().unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().sector(), 8);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn sector(&self) -> u64 {
        self.sector
    }

    /// Length in sectors, over every bio.
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, Op, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.set_bio(&mut rq, Bio::new(Op::Write, 0, 8)).unwrap();
    /// queue.append_bio(&mut rq, Bio::new(Op::Write, 8, 24)).unwrap().unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().sectors(), 32);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn sectors(&self) -> u64 {
        self.sectors
    }

    /// The sector after the last.
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, Op, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.set_bio(&mut rq, Bio::new(Op::Write, 100, 8)).unwrap();
    /// queue.append_bio(&mut rq, Bio::new(Op::Write, 108, 4)).unwrap().unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().end_sector(), 112);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn end_sector(&self) -> u64 {
        self.sector + self.sectors
    }

    /// How many bios the request carries.
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, Op, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().nr_bios(), 0);
    /// queue.set_bio(&mut rq, Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.append_bio(&mut rq, Bio::new(Op::Read, 8, 8)).unwrap().unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().nr_bios(), 2);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn nr_bios(&self) -> u32 {
        self.nr_bios
    }

    /// When the request was started, in platform nanoseconds. A request queue stamps it
    /// from the platform's [coarse clock](crate::Platform::coarse_now_ns) (or a precise
    /// reading it already had), so it may be early by up to that clock's lag.
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, Op, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.set_bio(&mut rq, Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.start(&mut rq, 1_234).unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().start_ns(), 1_234);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }

    /// The first bio, if any.
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, Op, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert!(queue.io(&rq).unwrap().first_bio().is_none());
    /// queue.set_bio(&mut rq, Bio::new(Op::Read, 8, 8)).unwrap();
    /// queue.prepend_bio(&mut rq, Bio::new(Op::Read, 0, 8)).unwrap().unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().first_bio().unwrap().sector, 0);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn first_bio(&self) -> Option<&Bio> {
        self.first.as_ref()
    }
}

impl IoPrio {
    pub(crate) const DEFAULT: IoPrio = match IoPrio::new(crate::IoPrioClass::BestEffort, 4) {
        Ok(p) => p,
        Err(_) => unreachable!(),
    };
}

impl RqIo {
    /// Makes `bio` the request's only bio.
    pub(crate) fn set_bio(&mut self, bio: Bio) {
        self.op = bio.op;
        self.flags = bio.flags;
        self.prio = bio.prio;
        self.issuer = bio.issuer;
        self.sector = bio.sector;
        self.sectors = u64::from(bio.sectors);
        self.nr_bios = 1;
        self.first = Some(bio);
    }

    /// Appends `bio` (a back merge). Gives it back when the pool has no slot.
    pub(crate) fn append(&mut self, pool: &BioPool, bio: Bio) -> Result<(), Bio> {
        if self.first.is_none() {
            self.set_bio(bio);
            return Ok(());
        }
        let sectors = u64::from(bio.sectors);
        let slot = pool.take(bio)?;
        if self.chain_tail == NO_TAG {
            self.chain_head = slot;
        } else {
            // SAFETY: the tail slot is on our chain.
            unsafe { pool.link(self.chain_tail) }.next = slot;
        }
        self.chain_tail = slot;
        self.sectors += sectors;
        self.nr_bios += 1;
        Ok(())
    }

    /// Puts `bio` in front (a front merge). Gives it back when the pool has no slot.
    pub(crate) fn prepend(&mut self, pool: &BioPool, bio: Bio) -> Result<(), Bio> {
        let Some(old_first) = self.first else {
            self.set_bio(bio);
            return Ok(());
        };
        let slot = pool.take(old_first).map_err(|_| bio)?;
        // SAFETY: `slot` is ours, fresh from the pool.
        unsafe { pool.link(slot) }.next = self.chain_head;
        self.chain_head = slot;
        if self.chain_tail == NO_TAG {
            self.chain_tail = slot;
        }
        let sectors = self.sectors + u64::from(bio.sectors);
        let nr_bios = self.nr_bios + 1;
        self.set_bio(bio);
        self.sectors = sectors;
        self.nr_bios = nr_bios;
        Ok(())
    }

    /// Moves every bio of `other` to the end of this chain, relinking its slots; only its
    /// first bio needs a new slot. Returns false, moving nothing, when none is free.
    pub(crate) fn absorb(&mut self, pool: &BioPool, other: &mut RqIo) -> bool {
        let Some(other_first) = other.first else {
            return true;
        };
        if self.first.is_none() {
            core::mem::swap(self, other);
            // Keep our own bookkeeping; only the I/O moved.
            core::mem::swap(&mut self.alloc_cpu, &mut other.alloc_cpu);
            core::mem::swap(&mut self.counted, &mut other.counted);
            core::mem::swap(&mut self.start_ns, &mut other.start_ns);
            core::mem::swap(&mut self.alloc_ns, &mut other.alloc_ns);
            core::mem::swap(&mut self.acct, &mut other.acct);
            core::mem::swap(&mut self.sched_data, &mut other.sched_data);
            return true;
        }
        let Ok(slot) = pool.take(other_first) else {
            return false;
        };
        // SAFETY: `slot` is fresh and ours; `other`'s chain is handed to us whole.
        unsafe { pool.link(slot) }.next = other.chain_head;
        if self.chain_tail == NO_TAG {
            self.chain_head = slot;
        } else {
            // SAFETY: our tail slot is on our chain.
            unsafe { pool.link(self.chain_tail) }.next = slot;
        }
        self.chain_tail = if other.chain_tail == NO_TAG {
            slot
        } else {
            other.chain_tail
        };
        self.sectors += other.sectors;
        self.nr_bios += other.nr_bios;
        // Counted here without the limits: a request queue that merges requests counts the
        // two ends that meet again (`QueueLimits::append_span`).
        self.set_span(SegSpan::then(&self.span(), &other.span(), None));
        let start_ns = other.start_ns;
        other.clear();
        other.start_ns = start_ns;
        true
    }

    /// Calls `f` on every bio, front to back.
    pub(crate) fn for_each_bio(&self, pool: &BioPool, mut f: impl FnMut(&Bio)) {
        if let Some(first) = &self.first {
            f(first);
        }
        let mut slot = self.chain_head;
        while slot != NO_TAG {
            // SAFETY: `slot` is on our chain, which `&self` holds shared.
            let link = unsafe { pool.link_ref(slot) };
            f(&link.bio);
            slot = link.next;
        }
    }

    /// Ends every bio with `status`, front to back, and returns their slots to the pool.
    /// Returns how many bios ended.
    ///
    /// Each bio leaves the chain (and its slot goes back) before its callback runs, so a
    /// callback that panics leaves a consistent, shorter chain behind.
    pub(crate) fn end_bios(&mut self, pool: &BioPool, status: Status) -> u32 {
        self.end_bios_with(pool, status, Bio::complete)
    }

    /// Like [`end_bios`](Self::end_bios), each bio handed to `end` instead of its callback.
    #[inline]
    pub(crate) fn end_bios_with(
        &mut self,
        pool: &BioPool,
        status: Status,
        mut end: impl FnMut(Bio, Status),
    ) -> u32 {
        let mut ended = 0;
        // The first bio straight from its field, not through an `Option` of it: moving the
        // `Option` copies the bio in overlapping pieces that stall the copy after it.
        if let Some(bio) = self.first {
            self.first = None;
            self.nr_bios -= 1;
            self.sectors -= u64::from(bio.sectors);
            end(bio, status);
            ended += 1;
        }
        while let Some(bio) = self.pop_front(pool) {
            end(bio, status);
            ended += 1;
        }
        // INVARIANT: no bio and nothing described, as a request to be freed must be.
        self.clear();
        ended
    }

    /// Takes the first bio off the request.
    #[inline]
    fn pop_front(&mut self, pool: &BioPool) -> Option<Bio> {
        if let Some(first) = self.first.take() {
            self.nr_bios -= 1;
            self.sectors -= u64::from(first.sectors);
            return Some(first);
        }
        let slot = self.chain_head;
        if slot == NO_TAG {
            return None;
        }
        // SAFETY: `slot` is on our chain; we unlink it before giving it back.
        let link = *unsafe { pool.link(slot) };
        self.chain_head = link.next;
        if link.next == NO_TAG {
            self.chain_tail = NO_TAG;
        }
        self.nr_bios -= 1;
        self.sectors -= u64::from(link.bio.sectors);
        pool.give_back(slot);
        Some(link.bio)
    }

    /// Takes every bio off the request, without ending them, into `out`; the request
    /// leaves any flush sequence too (its queue is gone).
    pub(crate) fn drain_bios(&mut self, pool: &BioPool, out: &mut impl Extend<Bio>) {
        while let Some(bio) = self.pop_front(pool) {
            out.extend(core::iter::once(bio));
        }
        self.clear();
        self.flush = 0;
    }
}
