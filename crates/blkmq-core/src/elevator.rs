//! The elevator (I/O scheduler) interface: what a request queue asks of a scheduler, and
//! what it offers the scheduler in return ([`ElvCx`]).

use crate::bio::{Bio, BioFlags, Op};
use crate::error::TagError;
use crate::limits::{MergeKind, QueueLimits};
use crate::platform::Platform;
use crate::queue_tags::QueueTags;
use crate::request::{Rq, RqIo};

/// What an elevator may do with the requests it holds: read and change their I/O, merge
/// bios and requests within the queue's limits, and free a request merged away. Handed to
/// every [`Elevator`] call.
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
    now_ns: u64,
}

/// The request operations an [`ElvCx`] forwards.
pub(crate) trait ElvBackend {
    fn io<'a>(&'a self, rq: &'a Rq) -> Result<&'a RqIo, TagError>;
    #[allow(clippy::mut_from_ref)] // the token is borrowed mutably: one `&mut RqIo` per request
    fn io_mut<'a>(&'a self, rq: &'a mut Rq) -> Result<&'a mut RqIo, TagError>;
    fn append(&self, rq: &mut Rq, bio: Bio) -> Result<Result<(), Bio>, TagError>;
    fn prepend(&self, rq: &mut Rq, bio: Bio) -> Result<Result<(), Bio>, TagError>;
    fn absorb(&self, into: &mut Rq, from: &mut Rq) -> Result<bool, TagError>;
    fn key(&self, rq: &Rq) -> usize;
    fn hctx(&self, rq: &Rq) -> usize;
    fn nr_keys(&self) -> usize;
    fn free_merged(&self, rq: Rq);
}

impl<T, P: Platform> ElvBackend for QueueTags<T, P> {
    fn io<'a>(&'a self, rq: &'a Rq) -> Result<&'a RqIo, TagError> {
        QueueTags::io(self, rq)
    }
    fn io_mut<'a>(&'a self, rq: &'a mut Rq) -> Result<&'a mut RqIo, TagError> {
        QueueTags::io_mut(self, rq)
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
    pub fn new<T, P: Platform>(
        tags: &'a QueueTags<T, P>,
        limits: &'a QueueLimits,
        now_ns: u64,
    ) -> Self {
        Self {
            backend: tags,
            limits,
            now_ns,
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
            now_ns,
        }
    }

    /// The platform's time when the call was made.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// The queue's limits.
    pub fn limits(&self) -> &QueueLimits {
        self.limits
    }

    /// The I/O of a request the elevator holds.
    ///
    /// # Errors
    /// [`TagError::ForeignRequest`] for a token of another queue.
    pub fn io<'b>(&'b self, rq: &'b Rq) -> Result<&'b RqIo, TagError> {
        self.backend.io(rq)
    }

    /// The I/O of a request the elevator holds, to change (its `sched_data`).
    ///
    /// # Errors
    /// [`TagError::ForeignRequest`] for a token of another queue.
    pub fn io_mut<'b>(&'b self, rq: &'b mut Rq) -> Result<&'b mut RqIo, TagError> {
        self.backend.io_mut(rq)
    }

    /// A dense index for the request, below [`nr_keys`](Self::nr_keys): elevators keep
    /// per-request data in arrays of that size, made in
    /// [`Elevator::depth_updated`].
    pub fn key(&self, rq: &Rq) -> usize {
        self.backend.key(rq)
    }

    /// The hardware queue a request was made for (where it will be issued).
    pub fn hctx(&self, rq: &Rq) -> usize {
        self.backend.hctx(rq)
    }

    /// How many distinct [`key`](Self::key)s the queue's requests can have.
    pub fn nr_keys(&self) -> usize {
        self.backend.nr_keys()
    }

    /// Merges `bio` into `rq` at whichever end it touches, if the limits allow; the bio
    /// comes back untouched otherwise.
    ///
    /// # Errors
    /// The bio, when it does not touch `rq`, the limits or the merge rules forbid it, or
    /// the bio pool is out of slots.
    pub fn merge_bio(&self, rq: &mut Rq, bio: Bio) -> Result<MergeKind, Bio> {
        let Ok(io) = self.backend.io(rq) else {
            return Err(bio);
        };
        let Some(kind) = self.limits.merge_kind(io, &bio) else {
            return Err(bio);
        };
        let segments = self.limits.segments(bio.op, bio.sector, bio.sectors);
        let done = match kind {
            MergeKind::Back => self.backend.append(rq, bio),
            MergeKind::Front => self.backend.prepend(rq, bio),
        };
        match done {
            Ok(Ok(())) => {
                if let Ok(io) = self.backend.io_mut(rq) {
                    io.segments += segments;
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
    pub fn merge_requests(&self, into: &mut Rq, mut from: Rq) -> Result<(), Rq> {
        let fits = match (self.backend.io(into), self.backend.io(&from)) {
            (Ok(a), Ok(b)) => self.limits.can_append(a, b),
            _ => false,
        };
        if !fits || !matches!(self.backend.absorb(into, &mut from), Ok(true)) {
            return Err(from);
        }
        self.backend.free_merged(from);
        Ok(())
    }

    /// Whether `rq`'s I/O could take the request `next` on its end, by the queue's rules.
    pub fn can_append(&self, rq: &Rq, next: &Rq) -> bool {
        match (self.backend.io(rq), self.backend.io(next)) {
            (Ok(a), Ok(b)) => self.limits.can_append(a, b),
            _ => false,
        }
    }
}

impl core::fmt::Debug for ElvCx<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ElvCx")
            .field("limits", self.limits)
            .field("now_ns", &self.now_ns)
            .finish_non_exhaustive()
    }
}

/// An I/O scheduler (Linux's `elevator_mq_ops`). The request queue calls it under one lock,
/// so `&mut self` is the whole queue's view; it owns the [`Rq`]s inserted into it until it
/// dispatches them or they merge away.
///
/// Keys: every request has a dense [key](ElvCx::key) below [`ElvCx::nr_keys`]; an elevator
/// keeps its requests in an array indexed by key and its orders (sorted trees, FIFOs) as
/// keys, which is how the queue names a request back to it
/// ([`request_mut`](Self::request_mut)).
///
/// Merging follows Linux: the queue asks [`request_merge`](Self::request_merge) for a
/// request that `bio` touches, merges it within the limits, reports
/// [`request_merged`](Self::request_merged), then tries to merge that request with its
/// neighbour ([`next_request`](Self::next_request)), reporting
/// [`requests_merged`](Self::requests_merged). [`bio_merge`](Self::bio_merge) runs that
/// sequence; an elevator may replace it.
///
/// ```
/// use blkmq_core::{ElvCx, Elevator, Rq};
/// use std::collections::VecDeque;
///
/// /// First in, first out; no merging.
/// struct Fifo(VecDeque<Rq>);
///
/// impl Elevator for Fifo {
///     fn name(&self) -> &'static str { "fifo" }
///     fn insert_requests(&mut self, _: &ElvCx<'_>, rqs: &mut dyn Iterator<Item = Rq>, at_head: bool) {
///         for rq in rqs {
///             if at_head { self.0.push_front(rq) } else { self.0.push_back(rq) }
///         }
///     }
///     fn dispatch_request(&mut self, _: &ElvCx<'_>, _hctx: usize) -> Option<Rq> {
///         self.0.pop_front()
///     }
///     fn has_work(&self, _hctx: usize) -> bool { !self.0.is_empty() }
/// }
///
/// let fifo = Fifo(VecDeque::new());
/// assert_eq!(fifo.name(), "fifo");
/// assert!(!fifo.has_work(0));
/// assert!(fifo.next_timer().is_none());
/// ```
pub trait Elevator: core::any::Any + Send {
    /// The scheduler's name (`"mq-deadline"`, `"bfq"`).
    fn name(&self) -> &'static str;

    /// The queue's scheduler depth (`nr_requests`) and number of request keys, when the
    /// elevator is attached and whenever `nr_requests` changes. Setup: allocate here.
    fn depth_updated(&mut self, nr_requests: usize, nr_keys: usize) {
        let _ = (nr_requests, nr_keys);
    }

    /// The smallest depth [`limit_depth`](Self::limit_depth) ever returns, so the tag wait
    /// queues batch wake-ups for it (Linux's `min_shallow_depth`). `None` when it never
    /// limits.
    fn min_shallow_depth(&self) -> Option<usize> {
        None
    }

    /// How deep into the scheduler tags a request of `op` with `flags` may go (`None`: all
    /// of them). mq-deadline's `async_depth`, BFQ's per-class limits.
    fn limit_depth(&self, op: Op, flags: BioFlags) -> Option<usize> {
        let _ = (op, flags);
        None
    }

    /// A request was allocated for the elevator and holds its first bio.
    fn prepare_request(&mut self, cx: &ElvCx<'_>, rq: &mut Rq) {
        let _ = (cx, rq);
    }

    /// Takes requests to schedule; `at_head` for requeued ones, to go before the rest.
    fn insert_requests(&mut self, cx: &ElvCx<'_>, rqs: &mut dyn Iterator<Item = Rq>, at_head: bool);

    /// The next request to issue on hardware queue `hctx`, if any.
    fn dispatch_request(&mut self, cx: &ElvCx<'_>, hctx: usize) -> Option<Rq>;

    /// Whether [`dispatch_request`](Self::dispatch_request) for `hctx` would return one
    /// now (or after a timer: see [`next_timer`](Self::next_timer)).
    fn has_work(&self, hctx: usize) -> bool;

    /// Whether `bio` may join the request holding `io`, by the scheduler's rules (BFQ
    /// keeps queues apart); the core's rules (contiguity, limits) are checked besides.
    fn allow_merge(&self, io: &RqIo, bio: &Bio) -> bool {
        let _ = (io, bio);
        true
    }

    /// A held request that `bio` touches (by key), and at which end.
    fn request_merge(&mut self, cx: &ElvCx<'_>, bio: &Bio) -> Option<(usize, MergeKind)> {
        let _ = (cx, bio);
        None
    }

    /// The held request with `key`.
    fn request(&self, key: usize) -> Option<&Rq> {
        let _ = key;
        None
    }

    /// The held request with `key`, to change.
    fn request_mut(&mut self, key: usize) -> Option<&mut Rq> {
        let _ = key;
        None
    }

    /// A bio merged into the request with `key` at the `kind` end (its start may have moved).
    fn request_merged(&mut self, cx: &ElvCx<'_>, key: usize, kind: MergeKind) {
        let _ = (cx, key, kind);
    }

    /// After a `kind` merge into `key`, the held request that may now merge with it: the
    /// next in sector order after a back merge, the previous one after a front merge.
    fn next_request(&mut self, cx: &ElvCx<'_>, key: usize, kind: MergeKind) -> Option<usize> {
        let _ = (cx, key, kind);
        None
    }

    /// Removes the request with `key` from every order and gives it back (it is about to
    /// merge into another).
    fn take_request(&mut self, key: usize) -> Option<Rq> {
        let _ = key;
        None
    }

    /// The request with key `from` (taken by [`take_request`](Self::take_request)) was
    /// appended to the one with key `into` and freed; per-key data of `from` is still the
    /// elevator's to read. mq-deadline keeps the earlier deadline here.
    fn requests_merged(&mut self, cx: &ElvCx<'_>, into: usize, from: usize) {
        let _ = (cx, into, from);
    }

    /// Tries to merge `bio` into a held request; gives it back when none takes it. The
    /// provided method runs Linux's sequence through the hooks above.
    fn bio_merge(&mut self, cx: &ElvCx<'_>, bio: Bio) -> Result<(), Bio> {
        let Some((key, kind)) = self.request_merge(cx, &bio) else {
            return Err(bio);
        };
        let allowed = match self.request(key).map(|rq| cx.io(rq)) {
            Some(Ok(io)) => self.allow_merge(io, &bio),
            _ => false,
        };
        if !allowed {
            return Err(bio);
        }
        let Some(rq) = self.request_mut(key) else {
            return Err(bio);
        };
        cx.merge_bio(rq, bio)?;
        self.request_merged(cx, key, kind);
        if let Some(other) = self.next_request(cx, key, kind) {
            let (into, from) = match kind {
                MergeKind::Back => (key, other),
                MergeKind::Front => (other, key),
            };
            merge_held(self, cx, into, from);
        }
        Ok(())
    }

    /// A request that went through the elevator is being freed (completed, or ended with
    /// an error before it was dispatched).
    fn finish_request(&mut self, cx: &ElvCx<'_>, rq: &Rq) {
        let _ = (cx, rq);
    }

    /// A dispatched request completed at `now_ns` (accounting: rates, think times).
    fn completed_request(&mut self, cx: &ElvCx<'_>, rq: &Rq, now_ns: u64) {
        let _ = (cx, rq, now_ns);
    }

    /// A dispatched request is coming back to be dispatched again (it is re-inserted
    /// through [`insert_requests`](Self::insert_requests) at the head next).
    fn requeue_request(&mut self, cx: &ElvCx<'_>, rq: &Rq) {
        let _ = (cx, rq);
    }

    /// When the elevator holds work back (idling), the platform time at which the queue
    /// should be run again.
    fn next_timer(&self) -> Option<u64> {
        None
    }
}

/// Appends held request `from` to held request `into` when the queue's rules allow,
/// through the hooks; `from` goes back to the elevator if the merge fails after all.
fn merge_held<E: Elevator + ?Sized>(elv: &mut E, cx: &ElvCx<'_>, into: usize, from: usize) {
    let fits = match (elv.request(into), elv.request(from)) {
        (Some(a), Some(b)) => cx.can_append(a, b),
        _ => false,
    };
    if !fits {
        return;
    }
    let Some(from_rq) = elv.take_request(from) else {
        return;
    };
    let back = match elv.request_mut(into) {
        Some(into_rq) => cx.merge_requests(into_rq, from_rq).err(),
        None => Some(from_rq),
    };
    match back {
        None => elv.requests_merged(cx, into, from),
        Some(rq) => elv.insert_requests(cx, &mut core::iter::once(rq), false),
    }
}
