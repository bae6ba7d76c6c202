//! What an elevator is handed with every call ([`ElvCx`]): the requests' I/O, the queue's
//! limits and merge operations, and the time, read once per call.

use core::cell::Cell;

use crate::bio::Bio;
use crate::error::TagError;
use crate::limits::{MergeKind, QueueLimits};
use crate::platform::Platform;
use crate::queue_tags::QueueTags;
use crate::request::{Rq, RqIo};

/// What an elevator may do with the requests it holds: read and change their I/O, merge
/// bios and requests within the queue's limits, and free a request merged away. Handed to
/// every [`Elevator`](crate::Elevator) call.
///
/// A request queue makes one for each call; [`ElvCx::new`] makes one over bare
/// [`QueueTags`], to drive an elevator directly (tests, simulations).
///
/// ```
/// use blkmq_core::{Alloc, Bio, ElvCx, MergeKind, Op, QueueLimits, StdPlatform, TagSet};
///
/// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
/// let mut queue = set.attach().unwrap();
/// queue.attach_scheduler(None, |_| ()).unwrap();
/// let limits = QueueLimits::new(1 << 20);
/// let cx = ElvCx::new(&queue, &limits, 5);
/// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
/// queue.set_bio(&mut rq, Bio::new(Op::Read, 0, 8)).unwrap();
/// assert_eq!(cx.merge_bio(&mut rq, Bio::new(Op::Read, 8, 8)).unwrap(), MergeKind::Back);
/// assert_eq!(cx.io(&rq).unwrap().sectors(), 16);
/// assert!(cx.key(&rq) < cx.nr_keys());
/// assert_eq!(cx.now_ns(), 5);
/// queue.free(rq).unwrap();
/// ```
pub struct ElvCx<'a> {
    backend: &'a dyn ElvBackend,
    limits: &'a QueueLimits,
    /// The time given, or [`ASK_BACKEND`] until the first [`ElvCx::now_ns`] reads it.
    now_ns: Cell<u64>,
    /// The coarse time, or [`ASK_BACKEND`] until the first [`ElvCx::coarse_now_ns`] that
    /// found no time above reads it.
    coarse_ns: Cell<u64>,
}

/// The request operations an [`ElvCx`] forwards.
pub(crate) trait ElvBackend {
    /// The request's I/O; `None` for a token of another queue (one pointer, returned in a
    /// register).
    fn io<'a>(&'a self, rq: &'a Rq) -> Option<&'a RqIo>;
    #[allow(clippy::mut_from_ref)] // the token is borrowed mutably: one `&mut RqIo` per request
    fn io_mut<'a>(&'a self, rq: &'a mut Rq) -> Option<&'a mut RqIo>;
    fn append(&self, rq: &mut Rq, bio: Bio) -> Result<Result<(), Bio>, TagError>;
    fn prepend(&self, rq: &mut Rq, bio: Bio) -> Result<Result<(), Bio>, TagError>;
    fn absorb(&self, into: &mut Rq, from: &mut Rq) -> Result<bool, TagError>;
    fn key(&self, rq: &Rq) -> usize;
    /// The platform's time (read only when an elevator asks for it).
    fn now_ns(&self) -> u64 {
        0
    }
    /// The platform's coarse time ([`Platform::coarse_now_ns`]).
    fn coarse_now_ns(&self) -> u64 {
        self.now_ns()
    }
    fn hctx(&self, rq: &Rq) -> usize;
    fn nr_keys(&self) -> usize;
    fn free_merged(&self, rq: Rq);
}

impl<T, P: Platform> ElvBackend for QueueTags<T, P> {
    fn io<'a>(&'a self, rq: &'a Rq) -> Option<&'a RqIo> {
        self.elv_io(rq)
    }
    fn io_mut<'a>(&'a self, rq: &'a mut Rq) -> Option<&'a mut RqIo> {
        self.elv_io_mut(rq)
    }
    fn append(&self, rq: &mut Rq, bio: Bio) -> Result<Result<(), Bio>, TagError> {
        self.append_bio(rq, bio)
    }
    fn prepend(&self, rq: &mut Rq, bio: Bio) -> Result<Result<(), Bio>, TagError> {
        self.prepend_bio(rq, bio)
    }
    fn absorb(&self, into: &mut Rq, from: &mut Rq) -> Result<bool, TagError> {
        self.merge_requests(into, from)
    }
    fn key(&self, rq: &Rq) -> usize {
        self.key_of(rq)
    }
    fn hctx(&self, rq: &Rq) -> usize {
        self.request(rq).map_or(0, |r| r.hctx())
    }
    fn nr_keys(&self) -> usize {
        self.nr_keys()
    }
    fn free_merged(&self, rq: Rq) {
        // A request merged away has no bios left: freeing it cannot fail for our own.
        let _ = self.free(rq);
    }
}

impl<'a> ElvCx<'a> {
    /// A context over bare tags, with `limits` for merging and `now_ns` as the time.
    ///
    /// ```
    /// use blkmq_core::{ElvCx, QueueLimits, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut tags = set.attach().unwrap();
    /// tags.attach_scheduler(None, |_| ()).unwrap(); // as a queue with an elevator has
    /// let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 1_000);
    /// assert_eq!((cx.now_ns(), cx.limits(), cx.nr_keys()), (1_000, &limits, tags.nr_keys()));
    /// ```
    pub fn new<T, P: Platform>(
        tags: &'a QueueTags<T, P>,
        limits: &'a QueueLimits,
        now_ns: u64,
    ) -> Self {
        Self {
            backend: tags,
            limits,
            now_ns: Cell::new(now_ns),
            coarse_ns: Cell::new(ASK_BACKEND),
        }
    }

    pub(crate) fn with_backend(
        backend: &'a dyn ElvBackend,
        limits: &'a QueueLimits,
        now_ns: u64,
    ) -> Self {
        Self {
            backend,
            limits,
            now_ns: Cell::new(now_ns),
            coarse_ns: Cell::new(ASK_BACKEND),
        }
    }

    /// The platform's time when the call was made.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let tags = set.attach().unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 5_000);
    /// assert_eq!(cx.now_ns(), 5_000); // a queue passes its platform's `now_ns()`
    /// ```
    #[inline]
    pub fn now_ns(&self) -> u64 {
        // Read once per context: the calls of one queue run share it.
        cached(&self.now_ns).unwrap_or_else(|| {
            let now = self.backend.now_ns();
            self.now_ns.set(now);
            now
        })
    }

    /// The platform's coarse time ([`Platform::coarse_now_ns`]): never ahead of
    /// [`now_ns`](Self::now_ns), behind it by at most the platform's tick, and cheaper to
    /// read. For times that need no finer grain than the tick, as Linux's mq-deadline
    /// counts its expiries in jiffies. A context given a time, or one whose `now_ns` was
    /// read, answers with that time.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let tags = set.attach().unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 5_000);
    /// assert_eq!(cx.coarse_now_ns(), 5_000);
    /// ```
    #[inline]
    pub fn coarse_now_ns(&self) -> u64 {
        // Read once per context, as `now_ns`.
        self.stamp_read().unwrap_or_else(|| {
            let coarse = self.backend.coarse_now_ns();
            self.coarse_ns.set(coarse);
            coarse
        })
    }

    /// The time [`now_ns`](Self::now_ns) gave, if anything asked for it yet.
    #[inline]
    pub(crate) fn time_read(&self) -> Option<u64> {
        cached(&self.now_ns)
    }

    /// The freshest time this context read, precise or coarse, if it read one: good for a
    /// request's start stamp, which needs only the coarse clock.
    #[inline]
    pub(crate) fn stamp_read(&self) -> Option<u64> {
        self.time_read().or_else(|| cached(&self.coarse_ns))
    }

    /// The queue's limits.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let tags = set.attach().unwrap();
    /// let limits = QueueLimits { max_sectors: 64, ..QueueLimits::new(1 << 20) };
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// assert_eq!(cx.limits().max_sectors, 64);
    /// ```
    #[inline]
    pub fn limits(&self) -> &QueueLimits {
        self.limits
    }

    /// The I/O of a request the elevator holds.
    ///
    /// # Errors
    /// [`TagError::ForeignRequest`] for a token of another queue.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let tags = set.attach().unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
    /// tags.set_bio(&mut rq, Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert_eq!(cx.io(&rq).unwrap().sector(), 0);
    /// let other = set.attach().unwrap();
    /// let foreign = other.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!(cx.io(&foreign).unwrap_err(), TagError::ForeignRequest);
    /// # other.free(foreign).unwrap();
    /// # tags.free(rq).unwrap();
    /// ```
    #[inline]
    pub fn io<'b>(&'b self, rq: &'b Rq) -> Result<&'b RqIo, TagError> {
        self.backend.io(rq).ok_or(TagError::ForeignRequest)
    }

    /// The I/O of a request the elevator holds, to change (its `sched_data`).
    ///
    /// # Errors
    /// [`TagError::ForeignRequest`] for a token of another queue.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let tags = set.attach().unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
    /// tags.set_bio(&mut rq, Bio::new(Op::Read, 0, 8)).unwrap();
    /// cx.io_mut(&mut rq).unwrap().sched_data[1] = 9; // the elevator's own data
    /// assert_eq!(cx.io(&rq).unwrap().sched_data, [0, 9]);
    /// # tags.free(rq).unwrap();
    /// ```
    #[inline]
    pub fn io_mut<'b>(&'b self, rq: &'b mut Rq) -> Result<&'b mut RqIo, TagError> {
        self.backend.io_mut(rq).ok_or(TagError::ForeignRequest)
    }

    /// A dense index for the request, below [`nr_keys`](Self::nr_keys): elevators keep
    /// per-request data in arrays of that size, made in
    /// [`Elevator::depth_updated`](crate::Elevator::depth_updated).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let tags = set.attach().unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// let a = tags.alloc(&Alloc::new(0, 0)).unwrap();
    /// let b = tags.alloc(&Alloc::new(0, 0)).unwrap();
    /// let mut held: Vec<Option<Rq>> = (0..cx.nr_keys()).map(|_| None).collect();
    /// let (ka, kb) = (cx.key(&a), cx.key(&b));
    /// assert!(ka != kb && ka < cx.nr_keys() && kb < cx.nr_keys());
    /// held[ka] = Some(a);
    /// held[kb] = Some(b);
    /// # for rq in held.into_iter().flatten() {
    /// #     tags.free(rq).unwrap();
    /// # }
    /// ```
    #[inline]
    pub fn key(&self, rq: &Rq) -> usize {
        self.backend.key(rq)
    }

    /// The hardware queue a request was made for (where it will be issued).
    ///
    /// ```
    /// use blkmq_core::*;
    ///
    /// let set = TagSet::builder(8).hw_queues(2).build(StdPlatform::new(), |_| ()).unwrap();
    /// let tags = set.attach().unwrap();
    /// let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// let rq = tags.alloc(&Alloc::new(1, 0)).unwrap(); // for hardware queue 1
    /// assert_eq!(cx.hctx(&rq), 1);
    /// # tags.free(rq).unwrap();
    /// ```
    #[inline]
    pub fn hctx(&self, rq: &Rq) -> usize {
        self.backend.hctx(rq)
    }

    /// How many distinct [`key`](Self::key)s the queue's requests can have.
    ///
    /// ```
    /// use blkmq_core::*;
    ///
    /// let set = TagSet::builder(4).hw_queues(2).build(StdPlatform::new(), |_| ()).unwrap();
    /// let tags = set.attach().unwrap();
    /// let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// assert_eq!(cx.nr_keys(), 8); // 4 requests on each hardware queue
    /// ```
    #[inline]
    pub fn nr_keys(&self) -> usize {
        self.backend.nr_keys()
    }

    /// Merges `bio` into `rq` at whichever end it touches, if the limits allow; the bio
    /// comes back untouched otherwise.
    ///
    /// # Errors
    /// The bio, when it does not touch `rq`, the limits or the merge rules forbid it, or
    /// the bio pool is out of slots.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let tags = set.attach().unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
    /// tags.set_bio(&mut rq, Bio::new(Op::Write, 8, 8)).unwrap();
    /// assert_eq!(cx.merge_bio(&mut rq, Bio::new(Op::Write, 16, 8)).unwrap(), MergeKind::Back);
    /// assert_eq!(cx.merge_bio(&mut rq, Bio::new(Op::Write, 0, 8)).unwrap(), MergeKind::Front);
    /// let apart = cx.merge_bio(&mut rq, Bio::new(Op::Write, 64, 8)).unwrap_err();
    /// assert_eq!(apart.sector, 64); // does not touch: back, untouched
    /// let io = cx.io(&rq).unwrap();
    /// assert_eq!((io.sector(), io.sectors(), io.nr_bios()), (0, 24, 3));
    /// # tags.free(rq).unwrap();
    /// ```
    pub fn merge_bio(&self, rq: &mut Rq, bio: Bio) -> Result<MergeKind, Bio> {
        let Some(io) = self.backend.io(rq) else {
            return Err(bio);
        };
        let Some((kind, span)) = self.limits.merge_span(io, &bio) else {
            return Err(bio);
        };
        let done = match kind {
            MergeKind::Back => self.backend.append(rq, bio),
            MergeKind::Front => self.backend.prepend(rq, bio),
        };
        match done {
            Ok(Ok(())) => {
                if let Some(io) = self.backend.io_mut(rq) {
                    io.set_span(span);
                }
                Ok(kind)
            }
            Ok(Err(bio)) => Err(bio),
            Err(_) => Err(bio),
        }
    }

    /// Appends the request `from` to `into` (they must be contiguous and within the
    /// limits), then frees `from`; it comes back untouched when they cannot merge.
    ///
    /// # Errors
    /// `from`, when the requests do not touch, the limits forbid it, or the bio pool is out
    /// of slots.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let tags = set.attach().unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// let mut rqs = Vec::new();
    /// for sector in [0, 8, 64] {
    ///     let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
    ///     tags.set_bio(&mut rq, Bio::new(Op::Read, sector, 8)).unwrap();
    ///     rqs.push(rq);
    /// }
    /// let (far, next, mut first) = (rqs.pop().unwrap(), rqs.pop().unwrap(), rqs.pop().unwrap());
    /// cx.merge_requests(&mut first, next).unwrap(); // `next` is freed
    /// assert_eq!((cx.io(&first).unwrap().sectors(), set.busy()), (16, 2));
    /// let far = cx.merge_requests(&mut first, far).unwrap_err(); // not contiguous: back
    /// # tags.free(far).unwrap();
    /// # tags.free(first).unwrap();
    /// ```
    pub fn merge_requests(&self, into: &mut Rq, mut from: Rq) -> Result<(), Rq> {
        let span = match (self.backend.io(into), self.backend.io(&from)) {
            (Some(a), Some(b)) => self.limits.append_span(a, b),
            _ => None,
        };
        let Some(span) = span else {
            return Err(from);
        };
        if !matches!(self.backend.absorb(into, &mut from), Ok(true)) {
            return Err(from);
        }
        if let Some(io) = self.backend.io_mut(into) {
            io.set_span(span);
        }
        self.backend.free_merged(from);
        Ok(())
    }

    /// Whether `rq`'s I/O could take the request `next` on its end, by the queue's rules.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let tags = set.attach().unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// let mut a = tags.alloc(&Alloc::new(0, 0)).unwrap();
    /// let mut b = tags.alloc(&Alloc::new(0, 0)).unwrap();
    /// tags.set_bio(&mut a, Bio::new(Op::Read, 0, 8)).unwrap();
    /// tags.set_bio(&mut b, Bio::new(Op::Read, 8, 8)).unwrap();
    /// assert!(cx.can_append(&a, &b));
    /// assert!(!cx.can_append(&b, &a)); // `a` does not start where `b` ends
    /// # tags.free(a).unwrap();
    /// # tags.free(b).unwrap();
    /// ```
    pub fn can_append(&self, rq: &Rq, next: &Rq) -> bool {
        match (self.backend.io(rq), self.backend.io(next)) {
            (Some(a), Some(b)) => self.limits.can_append(a, b),
            _ => false,
        }
    }
}

impl core::fmt::Debug for ElvCx<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ElvCx")
            .field("limits", self.limits)
            .field("now_ns", &self.now_ns.get())
            .finish_non_exhaustive()
    }
}

/// `ElvCx::now_ns` reads the time from the backend (a queue's platform) when asked.
pub(crate) const ASK_BACKEND: u64 = u64::MAX;

/// The time a context's `cell` holds, unless it still says [`ASK_BACKEND`].
#[inline]
fn cached(cell: &Cell<u64>) -> Option<u64> {
    let time = cell.get();
    (time != ASK_BACKEND).then_some(time)
}
