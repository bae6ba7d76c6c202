//! Plugging: a submitter's batch of requests, and how a flushed plug is issued.

use core::fmt;

use crate::bio::{Bio, Op, Status};
use crate::driver::{Driver, Rejected, RqBatch};
use crate::platform::Platform;
use crate::queue_map::QueueType;
use crate::queue_tags::{Alloc, FreeBatch};
use crate::request::{Request, Rq};
use crate::sync::Ordering;
use crate::tagset::TagSetFlags;

use super::RequestQueue;
use super::dispatch::Issued;

/// A [`Plug`] holding this many requests flushes before it takes another.
///
/// ```
/// # use blkmq_core::*;
/// # use blkmq_core::testing::Null;
/// let host = Host::new(TagSet::builder(64), StdPlatform::new(), Null::new()).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1 << 20))).unwrap();
/// let mut plug = Plug::new();
/// for i in 0..=PLUG_MAX as u64 {
///     // 8 sectors every 16: no two requests merge.
///     queue.submit_plugged(&mut plug, Bio::new(Op::Read, i * 16, 8)).unwrap();
/// }
/// assert_eq!(plug.len(), 1); // the first PLUG_MAX went to the driver
/// ```
pub const PLUG_MAX: usize = 32;
/// What [`PLUG_MAX`] is for a [`Plug`] holding requests of several queues.
///
/// ```
/// # use blkmq_core::*;
/// # use blkmq_core::testing::Null;
/// let host = Host::new(TagSet::builder(128), StdPlatform::new(), Null::new()).unwrap();
/// let a = host.add_queue(QueueConfig::new(QueueLimits::new(1 << 20))).unwrap();
/// let b = host.add_queue(QueueConfig::new(QueueLimits::new(1 << 20))).unwrap();
/// let mut plug = Plug::new();
/// for i in 0..PLUG_MAX_MULTI as u64 {
///     let queue = if i % 2 == 0 { &a } else { &b };
///     queue.submit_plugged(&mut plug, Bio::new(Op::Read, i * 16, 8)).unwrap();
/// }
/// assert_eq!(plug.len(), PLUG_MAX_MULTI); // past PLUG_MAX: two queues
/// a.submit_plugged(&mut plug, Bio::new(Op::Read, 1 << 16, 8)).unwrap();
/// assert_eq!(plug.len(), 1);
/// ```
pub const PLUG_MAX_MULTI: usize = 64;
/// A [`Plug`] flushes before it takes a request after one of at least this many bytes
/// (bios still merge into that one).
///
/// ```
/// # use blkmq_core::*;
/// # use blkmq_core::testing::Null;
/// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1 << 20))).unwrap();
/// let sectors = (PLUG_FLUSH_BYTES / SECTOR_SIZE) as u32;
/// let mut plug = Plug::new();
/// queue.submit_plugged(&mut plug, Bio::new(Op::Write, 0, sectors)).unwrap();
/// queue.submit_plugged(&mut plug, Bio::new(Op::Write, sectors.into(), 8)).unwrap(); // merges
/// assert_eq!(plug.len(), 1);
/// queue.submit_plugged(&mut plug, Bio::new(Op::Read, 0, 8)).unwrap(); // flushes first
/// assert_eq!(plug.len(), 1);
/// assert_eq!(queue.usage(), 1); // only the read is left
/// ```
pub const PLUG_FLUSH_BYTES: u64 = 128 * 1024;

/// A submitter's batch of requests (Linux's `blk_plug`): requests gather here, a bio
/// merging into the newest request of its queue, until [`flush`](Self::flush) — when a new
/// request finds [`PLUG_MAX`] there ([`PLUG_MAX_MULTI`] across several queues) or follows
/// one of at least [`PLUG_FLUSH_BYTES`], or when the plug is dropped. A flush hands them
/// over in order: through [`Driver::queue_rqs`] when the driver has it, the queue has no
/// elevator and its tag set serves no other queue; else, with no elevator, straight to
/// each idle hardware queue through [`Driver::queue_rq`]; what is left through the
/// software queues or the elevator.
///
/// ```
/// use blkmq_core::testing::Hold; // holds what it is given until the test takes it
/// use blkmq_core::*;
///
/// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
/// let mut plug = Plug::new();
/// queue.submit_plugged(&mut plug, Bio::new(Op::Read, 0, 8)).unwrap();
/// queue.submit_plugged(&mut plug, Bio::new(Op::Read, 8, 8)).unwrap(); // merges
/// assert_eq!(plug.len(), 1);
/// assert!(host.driver().is_empty());
/// plug.flush();
/// let held = host.driver().take();
/// assert_eq!(queue.io(&held[0]).unwrap().sectors(), 16);
/// queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
/// ```
///
/// A plug keeps its requests in room of its own, [`PLUG_MAX_MULTI`] tokens inline:
/// starting one allocates nothing, so a plug per batch (as Linux code starts one with
/// `blk_start_plug`) costs no more than one reused.
///
/// A plug started with [`with_ios`](Self::with_ios) caches requests (Linux's
/// `plug->cached_rq`): see there.
pub struct Plug<'q, D: Driver> {
    /// `queues[i]` is the queue of `rqs[i]`; both are `Some` below `len`, `None` above.
    queues: [Option<&'q RequestQueue<D>>; PLUG_MAX_MULTI],
    rqs: [Option<Rq>; PLUG_MAX_MULTI],
    /// `issue_on[i]` is the hardware queue `rqs[i]` was made for, [`NO_HCTX`] for a flush
    /// (which never goes straight to the driver): noted when the request comes in, so a
    /// flush issues without looking a request up to learn where it goes.
    issue_on: [u32; PLUG_MAX_MULTI],
    /// `known[i]`, when set, is the request `rqs[i]` names, noted where the submission had
    /// it at hand, so its issue starts it without a look-up. The request holds a usage
    /// reference, so its queue's tags stay while it is here.
    known: [Option<&'q Request<D::Payload>>; PLUG_MAX_MULTI],
    len: usize,
    multiple_queues: bool,
    /// The sectors `[start, end)` of the last request, `rqs[len - 1]`, while `len` is not
    /// zero: a bio that neither starts at its end nor ends at its start cannot merge into
    /// it, which a merge attempt learns without looking the request up.
    last_range: (u64, u64),
    cache: RqCache<'q, D>,
}

/// What [`Plug`] notes as the hardware queue of a request that is not issued directly.
pub(super) const NO_HCTX: u32 = u32::MAX;

/// A plug's requests taken ahead, for one queue and hardware queue.
///
/// # Invariants
/// `rqs[..len]` are `Some`, requests of `queue` allocated for hardware queue `hctx` with
/// nothing on them and no usage reference, `rqs[len..]` are `None`; `queue` is set while
/// `len` is not zero. `left` is how many more requests the plug expects before it flushes.
struct RqCache<'q, D: Driver> {
    rqs: [Option<Rq>; PLUG_CACHE],
    len: usize,
    queue: Option<&'q RequestQueue<D>>,
    hctx: usize,
    /// Requests expected in each batch: 1 for no cache.
    nr_ios: usize,
    left: usize,
}

/// Requests a [`Plug`] caches at most; one batch allocation takes at most a bitmap word.
const PLUG_CACHE: usize = PLUG_MAX;

impl<'q, D: Driver> Default for Plug<'q, D> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'q, D: Driver> Plug<'q, D> {
    /// An empty plug. It allocates nothing: its room is inline.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// let plug: Plug<'_, Null<StdPlatform>> = Plug::new();
    /// assert!(plug.is_empty());
    /// ```
    pub const fn new() -> Self {
        Self::with_ios(1)
    }

    /// An empty plug that expects `nr_ios` requests before each flush (Linux's
    /// `blk_start_plug_nr_ios`). It allocates nothing; when a bio needs a new request and
    /// finds the plug's cache empty, the plug takes up to the requests it still expects
    /// (at most [`PLUG_MAX`], at most one bitmap word) in one batch allocation, and later
    /// bios of the same queue and hardware queue take theirs from it. What is left is given
    /// back, its tags in one batch, when the plug flushes (the count starts again) or drops.
    ///
    /// The cache serves a queue without an elevator whose tag set serves it alone; a bio
    /// of another queue or hardware queue, or with an elevator, takes the usual way. A
    /// cached request holds no usage reference until a bio takes it: [`RequestQueue::usage`]
    /// counts what is in use, and a freeze does not wait for a plug's cache. When tags run
    /// short the cache takes what it can.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// let host = Host::new(TagSet::builder(64), StdPlatform::with_cpus(1), Hold::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1 << 20))).unwrap();
    /// let mut plug = Plug::with_ios(8);
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert_eq!(host.set().busy(), 8); // seven wait in the cache
    /// assert_eq!(queue.usage(), 1); // which holds no usage
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Read, 64, 8)).unwrap();
    /// assert_eq!(host.set().busy(), 8);
    /// plug.flush(); // two to the driver, six tags back
    /// assert_eq!((host.set().busy(), queue.usage()), (2, 2));
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub const fn with_ios(nr_ios: usize) -> Self {
        let nr_ios = if nr_ios == 0 { 1 } else { nr_ios };
        Self {
            queues: [None; PLUG_MAX_MULTI],
            rqs: [const { None }; PLUG_MAX_MULTI],
            issue_on: [NO_HCTX; PLUG_MAX_MULTI],
            known: [None; PLUG_MAX_MULTI],
            len: 0,
            multiple_queues: false,
            last_range: (0, 0),
            cache: RqCache {
                rqs: [const { None }; PLUG_CACHE],
                len: 0,
                queue: None,
                hctx: 0,
                nr_ios,
                left: nr_ios,
            },
        }
    }

    /// Requests the plug holds in its cache, taken ahead and not yet used.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// let host = Host::new(TagSet::builder(64), StdPlatform::with_cpus(1), Null::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1 << 20))).unwrap();
    /// let mut plug = Plug::with_ios(4);
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert_eq!(plug.cached(), 3);
    /// drop(plug);
    /// assert_eq!(host.set().busy(), 0);
    /// ```
    pub fn cached(&self) -> usize {
        self.cache.len
    }

    /// A request for a bio of `queue` on hardware queue `hctx` (from `cpu`), from the cache,
    /// which is filled first when empty and the plug expects more than one request; `None`
    /// when the cache has none for it (another queue's or hardware queue's, or tags short).
    /// The caller holds a usage reference of `queue` and has checked it has no elevator.
    #[inline]
    pub(super) fn take_cached(
        &mut self,
        queue: &'q RequestQueue<D>,
        hctx: usize,
        cpu: usize,
    ) -> Option<Rq> {
        let cache = &mut self.cache;
        if cache.len == 0 {
            if cache.left <= 1 {
                return None;
            }
            cache.fill(queue, hctx, cpu);
        }
        if !cache.queue.is_some_and(|q| core::ptr::eq(q, queue)) || cache.hctx != hctx {
            return None;
        }
        cache.len = cache.len.checked_sub(1)?;
        cache.rqs[cache.len].take()
    }

    /// Forgets the cache without giving it back: its tokens name requests no longer ours
    /// (the queue's tags were replaced, and their drop freed them).
    #[cold]
    pub(super) fn forget_cache(&mut self) {
        self.cache.rqs[..self.cache.len]
            .iter_mut()
            .for_each(|rq| *rq = None);
        self.cache.len = 0;
        self.cache.queue = None;
    }

    /// Requests in the plug.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let mut plug = Plug::new();
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Write, 0, 8)).unwrap();
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Write, 8, 8)).unwrap(); // merges
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Write, 64, 8)).unwrap();
    /// assert_eq!(plug.len(), 2);
    /// # drop(plug);
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the plug is empty.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let mut plug = Plug::new();
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert!(!plug.is_empty());
    /// plug.flush();
    /// assert!(plug.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Merges `bio` into the plug's newest request of its queue, as Linux does: what a
    /// plug holds goes to the device in order, so a bio that can merge almost always
    /// follows the request it merges with, and one try per bio keeps the merge check from
    /// being the dearest step of a submission. Whether it did (else the bio is still the
    /// caller's).
    ///
    /// Every merge joins a bio to one end of the request (`merge_place`): with one queue in
    /// the plug, a bio that touches neither end of the last request fails here, inline,
    /// without a look-up.
    #[inline(always)]
    pub(super) fn try_merge(&mut self, queue: &RequestQueue<D>, bio: &Bio) -> bool {
        let (start, end) = self.last_range;
        if self.len == 0 || !self.multiple_queues && bio.sector != end && bio.end_sector() != start
        {
            return false;
        }
        self.try_merge_newest(queue, bio)
    }

    /// [`try_merge`](Self::try_merge) past its first test: the attempt itself.
    #[inline(never)]
    fn try_merge_newest(&mut self, queue: &RequestQueue<D>, bio: &Bio) -> bool {
        // One queue in the plug: its newest request is the last. Several: the newest of
        // this one.
        let is_ours = |q: &Option<&RequestQueue<D>>| q.is_some_and(|q| core::ptr::eq(q, queue));
        let queues = &self.queues[..self.len];
        let newest = if self.multiple_queues {
            queues.iter().rposition(is_ours)
        } else {
            queues.last().filter(|q| is_ours(q)).map(|_| self.len - 1)
        };
        let is_last = newest.is_some() && newest == self.len.checked_sub(1);
        let (start, end) = self.last_range;
        let back = bio.sector == end;
        if is_last && !back && bio.end_sector() != start {
            return false;
        }
        let Some(rq) = newest.and_then(|i| self.rqs[i].as_mut()) else {
            return false;
        };
        let tags = queue.tags();
        if queue.has_elevator.load(Ordering::Relaxed) && !queue.elevator_allows_merge(rq, bio) {
            return false;
        }
        let merged = crate::merge::merge_into(tags, &queue.limits, rq, bio);
        // A merge grows the request by the bio, at the end it touches (the back first,
        // as `merge_place` decides).
        if merged && is_last {
            self.last_range = if back {
                (start, bio.end_sector())
            } else {
                (bio.sector, end)
            };
        }
        merged && queue.traced_merge(rq, bio)
    }

    /// Adds a fresh request, flushing first when the plug is full or its last request large.
    pub(super) fn add(&mut self, queue: &'q RequestQueue<D>, rq: Rq) {
        // Not noted as known: a request through an elevator flushes through it.
        let (hctx, range) = match queue.tags().request_and_io(&rq) {
            Ok((request, io)) => {
                let hctx = if io.op() == Op::Flush {
                    NO_HCTX
                } else {
                    request.hctx() as u32
                };
                (hctx, (io.sector(), io.end_sector()))
            }
            Err(_) => (NO_HCTX, (0, 0)),
        };
        self.add_placed(queue, rq, hctx, range, None);
    }

    /// [`add`](Self::add) for a request made for hardware queue `hctx` ([`NO_HCTX`] for a
    /// flush) holding the sectors `range`, `[start, end)`; `known`, when given, is the
    /// request `rq` names.
    #[inline(always)]
    pub(super) fn add_placed(
        &mut self,
        queue: &'q RequestQueue<D>,
        rq: Rq,
        hctx: u32,
        range: (u64, u64),
        known: Option<&'q Request<D::Payload>>,
    ) {
        let max = if self.multiple_queues {
            PLUG_MAX_MULTI
        } else {
            PLUG_MAX
        };
        let (start, end) = self.last_range;
        let large = self.len != 0
            && end.saturating_sub(start) * crate::bio::SECTOR_SIZE >= PLUG_FLUSH_BYTES;
        if self.len >= max || large {
            self.flush_full();
        }
        self.last_range = range;
        // As Linux: several queues once a request follows one of another queue.
        match self.len.checked_sub(1).and_then(|i| self.queues[i]) {
            Some(last) if !core::ptr::eq(last, queue) => self.multiple_queues = true,
            Some(_) => {}
            None => Self::trace_start(queue),
        }
        // Flushed above when full: `len` is below `max`, at most `PLUG_MAX_MULTI`.
        self.queues[self.len] = Some(queue);
        self.rqs[self.len] = Some(rq);
        self.issue_on[self.len] = hctx;
        self.known[self.len] = known;
        self.len += 1;
        self.cache.left = self.cache.left.saturating_sub(1);
    }

    /// The first request of an empty plug: traced as the plug's start.
    #[inline(never)]
    fn trace_start(queue: &RequestQueue<D>) {
        queue.trace_plug(0);
    }

    /// [`flush`](Self::flush) before a request that would overfill the plug.
    #[inline(never)]
    fn flush_full(&mut self) {
        self.flush();
    }

    /// Hands every request to its queue, in the order they were made.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// let a = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let b = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let mut plug = Plug::new();
    /// a.submit_plugged(&mut plug, Bio::new(Op::Read, 64, 8)).unwrap();
    /// b.submit_plugged(&mut plug, Bio::new(Op::Read, 8, 8)).unwrap();
    /// a.submit_plugged(&mut plug, Bio::new(Op::Read, 0, 8)).unwrap();
    /// plug.flush();
    /// let held = host.driver().take();
    /// let sector = |rq: &Rq| a.io(rq).or_else(|| b.io(rq)).unwrap().sector();
    /// assert_eq!(held.iter().map(sector).collect::<Vec<_>>(), [64, 8, 0]);
    /// # for rq in held {
    /// #     let queue = if a.request(&rq).is_some() { &a } else { &b };
    /// #     queue.end_request(rq, Status::Ok).unwrap();
    /// # }
    /// ```
    pub fn flush(&mut self) {
        let mut start = 0;
        while start < self.len {
            let Some(queue) = self.queues[start] else {
                start += 1;
                continue;
            };
            // The run of requests of this queue, in order.
            let end = self.queues[start..self.len]
                .iter()
                .position(|q| !q.is_some_and(|q| core::ptr::eq(q, queue)))
                .map_or(self.len, |n| start + n);
            let run = &mut PlugRun::new(
                &mut self.rqs[start..end],
                &self.issue_on[start..end],
                &self.known[start..end],
            );
            queue.flush_plugged(run);
            // Taken: a flush that a panic interrupted goes on from here on drop.
            self.queues[start..end].fill(None);
            start = end;
        }
        self.len = 0;
        self.multiple_queues = false;
        self.cache.give_back();
    }
}

impl<'q, D: Driver> RqCache<'q, D> {
    /// Fills the empty cache for `queue`'s hardware queue `hctx` with one batch allocation
    /// of up to the requests the plug still expects; stays empty when tags are short or
    /// the queue's tags cannot allocate a batch.
    #[inline(never)]
    fn fill(&mut self, queue: &'q RequestQueue<D>, hctx: usize, cpu: usize) {
        let tags = queue.tags();
        if !tags.batch_allocates() {
            return;
        }
        let want = self.left.min(PLUG_CACHE);
        let got = tags.alloc_cached(&Alloc::new(hctx, cpu), &mut self.rqs[..want]);
        if got != 0 {
            self.len = got;
            self.queue = Some(queue);
            self.hctx = hctx;
        }
    }

    /// Gives the cached requests back, their tags in one batch, and starts the count of
    /// expected requests again.
    fn give_back(&mut self) {
        self.left = self.nr_ios;
        if self.len == 0 {
            return;
        }
        let rqs = &mut self.rqs[..self.len];
        self.len = 0;
        if let Some(queue) = self.queue.take() {
            queue.free_cached(rqs);
        }
    }
}

impl<D: Driver> Drop for RqCache<'_, D> {
    fn drop(&mut self) {
        self.give_back();
    }
}

impl<D: Driver> Drop for Plug<'_, D> {
    fn drop(&mut self) {
        self.flush();
    }
}

impl<D: Driver> fmt::Debug for Plug<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plug")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// A flushing plug's requests of one queue, taken from the front: the plug's own room, read
/// as a queue, so a flush allocates nothing.
///
/// # Invariants
/// `slots[..head]` are taken (`None`), `slots[head..]` are the requests still to hand over,
/// in order; whatever is put back at the front was just taken from it. `issue_on[i]` is
/// the hardware queue of `slots[i]`'s request, [`NO_HCTX`] for a flush.
struct PlugRun<'a, T> {
    slots: &'a mut [Option<Rq>],
    issue_on: &'a [u32],
    /// `known[i]`, when set, is the request `slots[i]` names.
    known: &'a [Option<&'a Request<T>>],
    head: usize,
}

impl<'a, T> PlugRun<'a, T> {
    /// The requests of `slots`, made for the hardware queues `issue_on`, `known` where
    /// noted, past those already taken (by a flush a panic interrupted).
    fn new(
        slots: &'a mut [Option<Rq>],
        issue_on: &'a [u32],
        known: &'a [Option<&'a Request<T>>],
    ) -> Self {
        debug_assert_eq!(slots.len(), issue_on.len());
        debug_assert_eq!(slots.len(), known.len());
        let head = slots
            .iter()
            .position(Option::is_some)
            .unwrap_or(slots.len());
        Self {
            slots,
            issue_on,
            known,
            head,
        }
    }

    /// The next request to hand over.
    fn front(&self) -> Option<&Rq> {
        self.slots.get(self.head).and_then(Option::as_ref)
    }

    /// The hardware queue the next request goes to directly; `None` when none is left or
    /// it is a flush.
    #[inline]
    fn front_hctx(&self) -> Option<usize> {
        self.front()?;
        let hctx = *self.issue_on.get(self.head)?;
        (hctx != NO_HCTX).then_some(hctx as usize)
    }

    /// Takes the requests at the front that go directly to `hctx`: their slots, to be
    /// emptied by the caller, and the requests known of them.
    #[inline]
    fn run_of(&mut self, hctx: usize) -> (&mut [Option<Rq>], &'a [Option<&'a Request<T>>]) {
        let start = self.head;
        let n = self.issue_on[start..]
            .iter()
            .zip(&self.slots[start..])
            .take_while(|(on, slot)| **on as usize == hctx && slot.is_some())
            .count();
        self.head += n;
        (
            &mut self.slots[start..start + n],
            &self.known[start..start + n],
        )
    }

    /// Takes the next request.
    fn pop_front(&mut self) -> Option<Rq> {
        let rq = self.slots.get_mut(self.head)?.take();
        if rq.is_some() {
            self.head += 1;
        }
        rq
    }

    /// Puts back the request just taken.
    fn push_front(&mut self, rq: Rq) {
        // Only a request taken from the front comes back, so there is room before `head`.
        self.head = self.head.saturating_sub(1);
        self.slots[self.head] = Some(rq);
    }
}

impl<D: Driver> RequestQueue<D> {
    /// Gives back a plug's unused cached requests (all of `rqs`, taken), their tags in one
    /// batch per bitmap word. Inside the queue for it even while frozen; while its tags are
    /// being replaced the tokens are dropped instead: the old tags' drop frees them.
    fn free_cached(&self, rqs: &mut [Option<Rq>]) {
        let Some(_usage) = self.enter_any() else {
            rqs.iter_mut().for_each(|rq| *rq = None);
            return;
        };
        let tags = self.tags();
        let mut freed = FreeBatch::new();
        for rq in rqs.iter_mut().filter_map(Option::take) {
            tags.free_into(rq, &mut freed);
        }
        freed.flush();
    }

    /// Takes a flushed plug's requests of this queue (all of `rqs`), in order.
    fn flush_plugged(&self, rqs: &mut PlugRun<'_, D::Payload>) {
        self.trace_unplug(rqs.slots.len() - rqs.head);
        let elevated = self.has_elevator.load(Ordering::Relaxed);
        if elevated {
            let mut last_hctx = usize::MAX;
            while let Some(rq) = rqs.pop_front() {
                let hctx = self.request(&rq).map_or(0, |r| r.hctx());
                // Flushes bypass the elevator.
                let flush = self.io(&rq).is_some_and(|io| io.op() == Op::Flush);
                self.insert(rq, hctx, !flush, false);
                if hctx != last_hctx && last_hctx != usize::MAX {
                    self.run_hw_queue(last_hctx);
                }
                last_hctx = hctx;
            }
            if last_hctx != usize::MAX {
                self.run_hw_queue(last_hctx);
            }
            return;
        }
        if D::QUEUE_RQS && !self.host.set.is_shared() {
            self.issue_list(rqs);
        }
        self.issue_plugged(rqs);
        // What could not go straight to its hardware queue: into the software queues,
        // then run each hardware queue touched once.
        let cpu = self.cpu();
        let mut last_hctx = usize::MAX;
        while let Some(rq) = rqs.pop_front() {
            let hctx = self.request(&rq).map_or(0, |r| r.hctx());
            let kind = self.io(&rq).map_or(QueueType::Default, |io| {
                self.maps.select(cpu, io.op(), io.flags()).0
            });
            if self.io(&rq).is_some_and(|io| io.op() == Op::Flush) {
                self.push_dispatch(hctx, rq, false);
            } else {
                self.push_ctx_for(cpu, kind, hctx, rq);
            }
            if hctx != last_hctx && last_hctx != usize::MAX {
                self.run_hw_queue(last_hctx);
            }
            last_hctx = hctx;
        }
        if last_hctx != usize::MAX {
            self.run_hw_queue(last_hctx);
        }
    }

    /// Issues a plug's requests straight to their hardware queues, one run of requests per
    /// hardware queue through [`Driver::queue_rq`], while the hardware queue is idle (as
    /// [`submit`](Self::submit) issues a lone request); stops at a flush or at the first
    /// hardware queue it cannot take, and what is left stays in `rqs`.
    ///
    /// Each run claims its hardware queue, arms the restart and finishes the run once for
    /// all its requests, and unless the driver may block, they share one read of the clock
    /// for their start, as the requests of one plug share it in Linux. Where each request
    /// goes the plug noted when it came in: nothing is looked up to learn it.
    fn issue_plugged(&self, rqs: &mut PlugRun<'_, D::Payload>) {
        let blocking = self.host.set.flags().contains(TagSetFlags::BLOCKING);
        while let Some(hctx) = rqs.front_hctx() {
            if !self.claim_idle(hctx) {
                return;
            }
            if self.halted(hctx) {
                self.finish_run(hctx);
                return;
            }
            self.arm_restart(hctx);
            let now = (!blocking).then(|| self.platform().coarse_now_ns());
            self.issue_run(hctx, rqs, now);
            self.finish_run(hctx);
        }
    }

    /// As `hctx`'s runner, issues the requests at the front of `rqs` made for `hctx`, in
    /// order, each through [`issue_one`](Self::issue_one) (`last` on the final one of the
    /// run, `commit_rqs` owed after one that was not), starting at `now` when given. When
    /// the hardware queue halts or the driver gives one back, it and the rest of the run go
    /// back to the hardware queue as a dispatch would leave them
    /// ([`put_back`](Self::put_back), [`give_up`](Self::give_up)).
    fn issue_run(&self, hctx: usize, rqs: &mut PlugRun<'_, D::Payload>, now: Option<u64>) {
        let (run, known) = rqs.run_of(hctx);
        // Without scheduler tags (as always here: a queue with an elevator flushes through
        // it) an issue only starts the request, which a request known needs no look-up for.
        let start_known = !self.tags().has_scheduler();
        // Whether a request was queued as not `last` since the last commit.
        let mut owed = false;
        for i in 0..run.len() {
            let Some(rq) = run[i].take() else { break };
            let last = i + 1 == run.len();
            if self.halted(hctx) {
                // Back on the dispatch list, with the rest of the run, for the run that
                // resumes the hardware queue.
                let mut batch = self.hctxs[hctx].run_batch.lock();
                batch.push_back(rq);
                batch.extend(run[i + 1..].iter_mut().filter_map(Option::take));
                self.put_back(hctx, &mut batch);
                self.commit_owed(hctx, owed);
                return;
            }
            let issued = match known[i] {
                Some(request) if start_known => self.issue_known(hctx, rq, request, last, now),
                _ => self.issue_one(hctx, hctx, rq, last, None, now),
            };
            match issued {
                Issued::Queued => owed = !last,
                Issued::Ended => {}
                Issued::GaveUp(rq, status) => {
                    // It and the rest of the run wait at the head, in order.
                    let mut batch = self.hctxs[hctx].run_batch.lock();
                    batch.push_back(rq);
                    batch.extend(run[i + 1..].iter_mut().filter_map(Option::take));
                    self.commit_owed(hctx, owed);
                    self.give_up(hctx, &mut batch, status);
                    return;
                }
            }
        }
        self.commit_owed(hctx, owed);
    }

    /// [`Driver::commit_rqs`] on `hctx` when `owed`: a request went to the driver as not
    /// `last` and nothing followed it.
    fn commit_owed(&self, hctx: usize, owed: bool) {
        if owed {
            self.driver().commit_rqs(&self.cx(hctx));
        }
    }

    /// Issues a plug's requests through [`Driver::queue_rqs`], hardware queue by hardware
    /// queue, while the hardware queue is idle; what is left stays in `rqs`.
    fn issue_list(&self, rqs: &mut PlugRun<'_, D::Payload>) {
        let tags = self.tags();
        let driver = self.driver();
        while let Some(first) = rqs.front() {
            let hctx = self.request(first).map_or(0, |r| r.hctx());
            let h = &self.hctxs[hctx];
            if !self.claim_idle(hctx) {
                return;
            }
            if self.halted(hctx) {
                self.finish_run(hctx);
                return;
            }
            let cx = self.cx(hctx);
            self.arm_restart(hctx);
            let mut batch = h.run_batch.lock();
            let mut no_budget = false;
            // Nothing runs between the starts: one read of the clock serves them all.
            let now = self.platform().coarse_now_ns();
            while rqs
                .front()
                .is_some_and(|rq| self.request(rq).is_some_and(|r| r.hctx() == hctx))
            {
                let Some(mut rq) = rqs.pop_front() else { break };
                if !driver.get_budget(&cx) {
                    rqs.push_front(rq);
                    no_budget = true;
                    break;
                }
                if tags.start(&mut rq, now).is_err() {
                    driver.put_budget(&cx);
                    self.end_unissued(rq, Status::IoErr);
                    continue;
                }
                self.trace_rq(crate::trace::Action::Issue, &rq);
                self.driver_in(hctx);
                batch.push_back(rq);
            }
            let mut driver_batch = RqBatch {
                rqs: &mut batch,
                rejected: None,
            };
            driver.queue_rqs(&cx, &mut driver_batch);
            let mut why = Status::Resource;
            if let Some(Rejected { rq, status }) = driver_batch.rejected.take() {
                batch.push_front(rq);
                why = status;
            }
            // What the driver left goes back to idle: the first with the driver's verdict.
            for _ in 0..batch.len() {
                let Some(mut rq) = batch.pop_front() else {
                    break;
                };
                self.driver_out(hctx);
                driver.put_budget(&cx);
                let _ = tags.requeue(&mut rq);
                if matches!(why, Status::Resource | Status::DevResource) {
                    self.trace_rq(crate::trace::Action::Requeue, &rq);
                    batch.push_back(rq);
                } else {
                    self.end_unissued(rq, if why.is_ok() { Status::IoErr } else { why });
                    why = Status::Resource;
                }
            }
            if !batch.is_empty() || no_budget {
                // The rest of this hardware queue's share waits at the head, behind them.
                while rqs
                    .front()
                    .is_some_and(|rq| self.request(rq).is_some_and(|r| r.hctx() == hctx))
                {
                    if let Some(rq) = rqs.pop_front() {
                        batch.push_back(rq);
                    }
                }
                self.give_up(hctx, &mut batch, why);
            }
            drop(batch);
            self.finish_run(hctx);
        }
    }
}
