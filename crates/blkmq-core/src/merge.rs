//! Every merge rule: which bios and requests may merge, at the back or the front, in a
//! plug, a software queue or through an elevator (Linux's `blk-merge.c`).
//!
//! * [`mergeable`]: whether I/O of an operation with its flags may merge at all.
//! * [`QueueLimits::merge_kind`]: whether a bio may join a request, and at which end;
//!   [`QueueLimits::can_append`]: whether two requests may join.
//! * [`merge_into`]: a bio into one request, checked and done. A plug tries the newest
//!   request of its queue (`Plug::try_merge`, after the elevator's `allow_merge` when the
//!   queue has one); without an elevator, a submission tries the newest requests of its
//!   CPU's software queue (`RequestQueue::ctx_merge_locked`); an elevator merges through
//!   [`ElvCx::merge_bio`], by the same rules.
//! * [`QueueTags::append_bio`], [`QueueTags::prepend_bio`] and
//!   [`QueueTags::merge_requests`]: the merges themselves, once a rule allowed them.

use crate::bio::{Bio, BioFlags, Op};
use crate::elevator::ElvCx;
use crate::error::TagError;
use crate::limits::QueueLimits;
use crate::platform::Platform;
use crate::queue_tags::QueueTags;
use crate::request::{Rq, RqIo};
use crate::segment::SegSpan;

/// How a bio joins a request.
///
/// ```
/// use blkmq_core::MergeKind;
/// assert_ne!(MergeKind::Back, MergeKind::Front);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MergeKind {
    /// At the end: the bio starts where the request ends.
    Back,
    /// At the start: the bio ends where the request starts.
    Front,
}

/// Whether I/O of `op` with `flags` may merge at all (Linux's `rq_mergeable` plus the
/// bio-side flags).
pub(crate) fn mergeable(op: Op, flags: BioFlags) -> bool {
    op != Op::Flush && !flags.intersects(BioFlags::NOMERGE | BioFlags::PREFLUSH | BioFlags::FUA)
}

impl QueueLimits {
    /// Whether `bio` may join a request holding `io` (same operation, priority and
    /// direction, neither barred from merging, no flush, the result within the limits), and
    /// at which end. The segments are those of the two together: the last of the front part
    /// and the first of the back part count as one when they join (physically contiguous,
    /// within the segment size and a boundary window; Linux's physical merge), and a merge
    /// that would leave a virt boundary gap between them is refused (Linux's
    /// `ll_back_merge_fn` and `ll_front_merge_fn`).
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, BioFlags, MergeKind, Op, QueueLimits, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.set_bio(&mut rq, Bio::new(Op::Write, 8, 8)).unwrap();
    /// let io = queue.io(&rq).unwrap();
    /// let limits = QueueLimits::new(1 << 20);
    /// assert_eq!(limits.merge_kind(io, &Bio::new(Op::Write, 16, 8)), Some(MergeKind::Back));
    /// assert_eq!(limits.merge_kind(io, &Bio::new(Op::Write, 0, 8)), Some(MergeKind::Front));
    /// assert_eq!(limits.merge_kind(io, &Bio::new(Op::Read, 16, 8)), None);
    /// let nomerge = Bio::new(Op::Write, 16, 8).flags(BioFlags::NOMERGE);
    /// assert_eq!(limits.merge_kind(io, &nomerge), None);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn merge_kind(&self, io: &RqIo, bio: &Bio) -> Option<MergeKind> {
        self.merge_span(io, bio).map(|(kind, _)| kind)
    }

    /// [`merge_kind`](Self::merge_kind), with the segments of the request the merge makes.
    pub(crate) fn merge_span(&self, io: &RqIo, bio: &Bio) -> Option<(MergeKind, SegSpan)> {
        let kind = self.merge_place(io, bio)?;
        let span = self.bio_span(bio);
        let merged = match kind {
            MergeKind::Back => self.join(&io.span(), &span),
            MergeKind::Front => self.join(&span, &io.span()),
        }?;
        (merged.nr() <= self.max_segments).then_some((kind, merged))
    }

    /// [`merge_kind`](Self::merge_kind) but for the segments: the few steps most attempts
    /// fail in.
    #[inline]
    pub(crate) fn merge_place(&self, io: &RqIo, bio: &Bio) -> Option<MergeKind> {
        if io.nr_bios() == 0 || !mergeable(io.op(), io.flags()) || !mergeable(bio.op, bio.flags) {
            return None;
        }
        if io.op() != bio.op || io.prio() != bio.prio {
            return None;
        }
        let kind = if io.end_sector() == bio.sector {
            MergeKind::Back
        } else if bio.end_sector() == io.sector() {
            MergeKind::Front
        } else {
            return None;
        };
        let sectors = io.sectors() + u64::from(bio.sectors);
        if sectors > u64::from(self.max_for(bio.op)) {
            return None;
        }
        let start = io.sector().min(bio.sector);
        if u64::from(self.chunk_left(start)) < sectors {
            return None;
        }
        Some(kind)
    }

    /// The segments of `front` followed by `back`, or `None` when the virt boundary forbids
    /// them in one request (Linux's `bio_will_gap`): the front part's first segment starts
    /// off a boundary, or its last segment and the back part's first neither join nor meet
    /// on boundaries. The count may pass `max_segments`; the caller checks.
    pub(crate) fn join(&self, front: &SegSpan, back: &SegSpan) -> Option<SegSpan> {
        if front.nr() == 0 || back.nr() == 0 {
            return Some(SegSpan::then(front, back, None));
        }
        let (last, first) = (front.back(), back.front());
        let joined = (front.back_mapped() && back.front_mapped() && self.joins(&last, &first))
            .then(|| crate::segment::Segment::new(last.addr, last.len + first.len));
        let mask = self.virt_boundary_mask;
        if mask != 0
            && (front.front().addr & mask != 0
                || (joined.is_none() && (last.end() | first.addr) & mask != 0))
        {
            return None;
        }
        Some(SegSpan::then(front, back, joined))
    }

    /// The segments of the request `next` appended to the one holding `io`, if
    /// [`can_append`](Self::can_append) allows it.
    pub(crate) fn append_span(&self, io: &RqIo, next: &RqIo) -> Option<SegSpan> {
        if !self.append_place(io, next) {
            return None;
        }
        self.join(&io.span(), &next.span())
            .filter(|span| span.nr() <= self.max_segments)
    }

    /// Whether the request holding `next` may be appended to the one holding `io` (two
    /// requests merging), by the same rules as [`merge_kind`](Self::merge_kind) (Linux's
    /// `ll_merge_requests_fn`).
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, Op, QueueLimits, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut a = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// let mut b = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.set_bio(&mut a, Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.set_bio(&mut b, Bio::new(Op::Read, 8, 8)).unwrap();
    /// let limits = QueueLimits::new(1 << 20);
    /// assert!(limits.can_append(queue.io(&a).unwrap(), queue.io(&b).unwrap()));
    /// assert!(!limits.can_append(queue.io(&b).unwrap(), queue.io(&a).unwrap()));
    /// queue.free(a).unwrap();
    /// queue.free(b).unwrap();
    /// ```
    pub fn can_append(&self, io: &RqIo, next: &RqIo) -> bool {
        self.append_span(io, next).is_some()
    }

    /// [`can_append`](Self::can_append) but for the segments.
    fn append_place(&self, io: &RqIo, next: &RqIo) -> bool {
        if io.nr_bios() == 0 || next.nr_bios() == 0 {
            return false;
        }
        if !mergeable(io.op(), io.flags()) || !mergeable(next.op(), next.flags()) {
            return false;
        }
        if io.op() != next.op() || io.prio() != next.prio() || io.end_sector() != next.sector() {
            return false;
        }
        let sectors = io.sectors() + next.sectors();
        sectors <= u64::from(self.max_for(io.op()))
            && u64::from(self.chunk_left(io.sector())) >= sectors
    }
}

/// Merges `bio` into `rq` if the limits allow; true when it did.
pub(crate) fn merge_into<T, P: Platform>(
    tags: &QueueTags<T, P>,
    limits: &QueueLimits,
    rq: &mut Rq,
    bio: &Bio,
) -> bool {
    // Most attempts fail on position or kind, decided here in a few steps; the elevator's
    // merge, whose back end is a trait object, is the one merge that does it: the same
    // checks, the same segment count.
    if !tags
        .io(rq)
        .is_ok_and(|io| limits.merge_place(io, bio).is_some())
    {
        return false;
    }
    ElvCx::new(tags, limits, 0).merge_bio(rq, *bio).is_ok()
}

/// The merges themselves, on a request queue's tags: a bio joining a request at its back or
/// its front, and two requests joining (what the rules above allow).
impl<T, P: Platform> QueueTags<T, P> {
    /// Appends `bio` to the request's chain (a back merge); `Ok(Err(bio))` when the bio
    /// pool is exhausted and the merge must be refused. The caller decides whether the bio
    /// fits (adjacency, limits).
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
    /// queue.set_bio(&mut rq, Bio::new(Op::Write, 0, 8)).unwrap();
    /// queue.append_bio(&mut rq, Bio::new(Op::Write, 8, 8)).unwrap().unwrap();
    /// let io = queue.io(&rq).unwrap();
    /// assert_eq!((io.nr_bios(), io.sector(), io.end_sector()), (2, 0, 16));
    /// queue.free(rq).unwrap();
    /// ```
    pub fn append_bio(&self, rq: &mut Rq, bio: Bio) -> Result<Result<(), Bio>, TagError> {
        let bios = &self.set().bios;
        Ok(self.io_mut(rq)?.append(bios, bio))
    }

    /// Puts `bio` in front of the request's chain (a front merge); `Ok(Err(bio))` when the
    /// bio pool is exhausted.
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
    /// queue.set_bio(&mut rq, Bio::new(Op::Write, 8, 8)).unwrap();
    /// queue.prepend_bio(&mut rq, Bio::new(Op::Write, 0, 8)).unwrap().unwrap();
    /// let io = queue.io(&rq).unwrap();
    /// assert_eq!((io.nr_bios(), io.sector(), io.end_sector()), (2, 0, 16));
    /// assert_eq!(io.first_bio().unwrap().sector, 0);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn prepend_bio(&self, rq: &mut Rq, bio: Bio) -> Result<Result<(), Bio>, TagError> {
        let bios = &self.set().bios;
        Ok(self.io_mut(rq)?.prepend(bios, bio))
    }

    /// Moves every bio of `from` to the end of `into`'s chain (two requests merging);
    /// `from` is left without bios. Refused (`Ok(false)`, nothing moved) when the bio pool
    /// lacks room.
    ///
    /// # Errors
    /// [`TagError::ForeignRequest`] when either token is not this queue's.
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, Op, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut into = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// let mut from = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.set_bio(&mut into, Bio::new(Op::Write, 0, 8)).unwrap();
    /// queue.set_bio(&mut from, Bio::new(Op::Write, 8, 8)).unwrap();
    /// assert!(queue.merge_requests(&mut into, &mut from).unwrap());
    /// assert_eq!(queue.io(&into).unwrap().sectors(), 16);
    /// assert_eq!(queue.io(&from).unwrap().nr_bios(), 0);
    /// queue.free(from).unwrap();
    /// queue.free(into).unwrap();
    /// ```
    pub fn merge_requests(&self, into: &mut Rq, from: &mut Rq) -> Result<bool, TagError> {
        let bios = &self.set().bios;
        let from_io = self.io_mut(from)?;
        let into_io = self.io_mut(into)?;
        Ok(into_io.absorb(bios, from_io))
    }
}
