//! A request's data: its segments across every merged bio, front to back, and the segments
//! the request queue counted.

use crate::bio::{Bio, SECTOR_SIZE, Status};
use crate::request::{BACK_MAPPED, BioPool, NO_TAG, RqIo};
use crate::segment::{BioSegments, SegSpan, Segment};

/// The segments of a request, across its bios front to back, each bio's from its position
/// and as long as it is; what [`QueueTags::segments`](crate::QueueTags::segments) and
/// [`RequestQueue::segments`](crate::RequestQueue::segments) return. Neighbours are not
/// joined here ([`RequestQueue::map_sg`](crate::RequestQueue::map_sg) does that).
///
/// ```
/// use blkmq_core::{Alloc, Bio, Op, Segment, StdPlatform, TagSet};
///
/// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
/// let queue = set.attach().unwrap();
/// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
/// queue.set_bio(&mut rq, Bio::new(Op::Write, 0, 8).buffer(0x1000)).unwrap();
/// queue.append_bio(&mut rq, Bio::new(Op::Write, 8, 1).buffer(0x9000)).unwrap().unwrap();
/// let segs: Vec<Segment> = queue.segments(&rq).unwrap().collect();
/// assert_eq!(segs, [Segment::new(0x1000, 4096), Segment::new(0x9000, 512)]);
/// queue.free(rq).unwrap();
/// ```
pub struct RqSegments<'a> {
    pool: &'a BioPool,
    /// The bio being walked.
    current: BioSegments,
    /// The pool slot of the next bio (`NO_TAG` for none).
    next: u32,
}

impl<'a> RqSegments<'a> {
    pub(crate) fn new(io: &'a RqIo, pool: &'a BioPool) -> Self {
        let current = match &io.first {
            Some(bio) => bio.segs(),
            None => Bio::new(crate::bio::Op::Read, 0, 0).segs(),
        };
        Self {
            pool,
            current,
            next: if io.first.is_some() {
                io.chain_head
            } else {
                NO_TAG
            },
        }
    }
}

impl Iterator for RqSegments<'_> {
    type Item = Segment;

    fn next(&mut self) -> Option<Segment> {
        loop {
            if let Some(seg) = self.current.next() {
                return Some(seg);
            }
            if self.next == NO_TAG {
                return None;
            }
            // SAFETY: `next` is on the chain of the request `RqSegments` borrows (through
            // `&RqIo`, itself borrowed from the request's token for `'a`).
            let (bio, next) = unsafe { self.pool.bio_at(self.next) };
            self.current = bio.segs();
            self.next = next;
        }
    }
}

impl core::fmt::Debug for RqSegments<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RqSegments")
            .field("current", &self.current)
            .finish_non_exhaustive()
    }
}

impl RqIo {
    /// Bytes of data the request carries (zero for operations that move none).
    ///
    /// ```
    /// use blkmq_core::{Alloc, Bio, Op, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let mut rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// queue.set_bio(&mut rq, Bio::new(Op::Write, 0, 8)).unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().data_bytes(), 4096);
    /// queue.set_bio(&mut rq, Bio::new(Op::Discard, 0, 8)).unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().data_bytes(), 0);
    /// queue.free(rq).unwrap();
    /// ```
    pub fn data_bytes(&self) -> u64 {
        if self.op().has_data() {
            self.sectors() * SECTOR_SIZE
        } else {
            0
        }
    }
}

impl RqIo {
    /// Ends the first `sectors` sectors of the request (clamped to its length), front to
    /// back (the owner's half of Linux's `blk_update_request`): each bio they cover whole
    /// leaves the chain, then goes to `end` with `status`; a bio they cover in part is first
    /// shown to `keep` with `status`, and when `keep` says yes, advances past that part
    /// (sector, length and data position). Returns whether a bio remains.
    ///
    /// As in Linux, a bio of no sectors at the front ends even when `sectors` is zero, and
    /// the walk stops as soon as the sectors are used up.
    ///
    /// The request keeps its operation, flags, priority and issuer (the request's, as
    /// Linux's `cmd_flags`), and its segment count, which stays an upper bound: the bios
    /// left carry a part of the data that was counted. With no bio left it describes
    /// nothing: no sector, no segment, at the sector after the last one ended.
    pub(crate) fn update(
        &mut self,
        pool: &BioPool,
        sectors: u64,
        status: Status,
        mut end: impl FnMut(Bio, Status),
        keep: impl FnOnce(&mut Bio, Status) -> bool,
    ) -> bool {
        let mut left = sectors.min(self.sectors);
        let mut at = self.sector;
        while let Some(mut bio) = self.first {
            let len = u64::from(bio.sectors);
            if len <= left {
                // Off the chain before its callback runs, as in `end_bios_with`.
                self.take_first(pool);
                left -= len;
                at = bio.sector + len;
                end(bio, status);
                if left == 0 {
                    break;
                }
            } else {
                if left > 0 && keep(&mut bio, status) {
                    // `left < len <= u32::MAX`.
                    bio.sector += left;
                    bio.sectors -= left as u32;
                    bio.data.set_pos(bio.data.advanced(left * SECTOR_SIZE));
                    self.sectors -= left;
                    self.first = Some(bio);
                }
                break;
            }
        }
        match &self.first {
            Some(first) => {
                self.sector = first.sector;
                true
            }
            None => {
                // INVARIANT: no bio, so no sector and no segment left; the operation and
                // flags stay, for the hooks that run when the request is ended.
                self.sector = at;
                self.sectors = 0;
                self.set_span(crate::segment::SegSpan::EMPTY);
                false
            }
        }
    }

    /// [`update`](Self::update) for a request in a flush sequence, whose bios end with the
    /// sequence (Linux's `RQF_FLUSH_SEQ`): the first `sectors` of its first bio (a sequenced
    /// write carries one) are shown to `keep` with `status` and, when it says yes, passed
    /// over; a bio covered whole is left on the request at its end, with no sector, for the
    /// sequence to end. Returns whether any sector is left.
    pub(crate) fn update_in_sequence(
        &mut self,
        sectors: u64,
        status: Status,
        keep: impl FnOnce(&mut Bio, Status) -> bool,
    ) -> bool {
        let Some(mut bio) = self.first else {
            return false;
        };
        let done = sectors.min(u64::from(bio.sectors));
        if done == 0 {
            return self.sectors != 0;
        }
        if !keep(&mut bio, status) {
            return true;
        }
        // `done <= bio.sectors`, a `u32`.
        bio.sector += done;
        bio.sectors -= done as u32;
        bio.data.set_pos(bio.data.advanced(done * SECTOR_SIZE));
        self.sectors -= done;
        self.sector = bio.sector;
        self.first = Some(bio);
        self.sectors != 0
    }

    /// Takes the first bio off the chain; the bio after it (if any) becomes the first.
    fn take_first(&mut self, pool: &BioPool) -> Option<Bio> {
        let bio = self.first.take()?;
        self.nr_bios -= 1;
        self.sectors -= u64::from(bio.sectors);
        let slot = self.chain_head;
        if slot != NO_TAG {
            // SAFETY: `slot` is on our chain (`&mut self` owns it); we unlink it before
            // giving it back.
            let link = *unsafe { pool.link(slot) };
            self.chain_head = link.next;
            if link.next == NO_TAG {
                self.chain_tail = NO_TAG;
            }
            pool.give_back(slot);
            // INVARIANT: a chain exists only behind a first bio.
            self.first = Some(link.bio);
        }
        Some(bio)
    }
}

/// The request's data segments, as the request queue counted them.
impl RqIo {
    /// The chain's data segments as the request queue counted them: how many, and the first
    /// and the last.
    #[inline]
    pub(crate) fn span(&self) -> SegSpan {
        let Some(first) = &self.first else {
            return SegSpan::EMPTY;
        };
        let front_addr = first.data.start_addr(first.sector * SECTOR_SIZE);
        SegSpan::from_parts(
            Segment::new(front_addr, self.seg_front_len),
            Segment::new(self.seg_back_addr, self.seg_back_len),
            self.seg_nr & !BACK_MAPPED,
            first.data.is_mapped(),
            self.seg_nr & BACK_MAPPED != 0,
        )
    }

    /// Records the chain's data segments (`span`, whose first starts where the first bio's
    /// data does).
    #[inline(always)]
    pub(crate) fn set_span(&mut self, span: SegSpan) {
        let back = span.back();
        let mapped = if span.back_mapped() { BACK_MAPPED } else { 0 };
        self.seg_nr = span.nr().min(!BACK_MAPPED) | mapped;
        self.seg_front_len = span.front().len;
        self.seg_back_addr = back.addr;
        self.seg_back_len = back.len;
    }

    /// Data segments of the chain, as the request queue counted them against its limits:
    /// each bio's segments cut to the segment size and boundary, physically contiguous
    /// neighbours (within a bio, and across two merged bios) counted once. Never fewer than
    /// [`RequestQueue::map_sg`](crate::RequestQueue::map_sg) uses, so a table of
    /// `max_segments` entries always holds the request. Zero for a request built through
    /// [`QueueTags`](crate::QueueTags) alone.
    ///
    /// ```
    /// use blkmq_core::{Alloc, StdPlatform, TagSet};
    ///
    /// let set = TagSet::builder(4).build(StdPlatform::new(), |_| ()).unwrap();
    /// let queue = set.attach().unwrap();
    /// let rq = queue.alloc(&Alloc::new(0, 0)).unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().segments(), 0);
    /// queue.free(rq).unwrap();
    /// ```
    ///
    /// Through a request queue:
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let mut plug = Plug::new();
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Write, 0, 8).buffer(0x1_0000)).unwrap();
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Write, 8, 8).buffer(0x1_1000)).unwrap();
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Write, 16, 8).buffer(0x8_0000)).unwrap();
    /// drop(plug);
    /// let rq = host.driver().take().pop().unwrap();
    /// // The first two bios are contiguous: one segment; the third starts another.
    /// assert_eq!(queue.io(&rq).unwrap().segments(), 2);
    /// queue.end_request(rq, Status::Ok).unwrap();
    /// ```
    pub fn segments(&self) -> u32 {
        self.seg_nr & !BACK_MAPPED
    }

    /// The request's data as one device segment, where the request queue counted one, in a
    /// named buffer ([`segments`](Self::segments) is 1): where its bytes start now (past what
    /// a partial completion ended) and how many are left. `None` for any other request:
    /// several segments, no buffer named, no data. A driver maps the common request, one
    /// buffer, from it without a walk of the segments.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8).buffer(0x10_000)).unwrap();
    /// queue.submit(Bio::new(Op::Read, 64, 8)).unwrap(); // no buffer named
    /// let mut held = host.driver().take();
    /// let io = queue.io(&held[0]).unwrap();
    /// assert_eq!(io.single_segment(), Some(Segment::new(0x10_000, 4096)));
    /// assert_eq!(queue.io(&held[1]).unwrap().single_segment(), None);
    /// // Half of it done: the rest is one segment still.
    /// assert!(queue.update_request(&mut held[0], 2048, Status::Ok).unwrap());
    /// let io = queue.io(&held[0]).unwrap();
    /// assert_eq!(io.single_segment(), Some(Segment::new(0x10_800, 2048)));
    /// # queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    #[inline]
    pub fn single_segment(&self) -> Option<Segment> {
        if self.seg_nr != 1 | BACK_MAPPED {
            return None;
        }
        let first = self.first.as_ref()?;
        let addr = first.data.start_addr(first.sector * SECTOR_SIZE);
        // One segment holds at most `u32::MAX` bytes.
        let bytes = u32::try_from(self.sectors * SECTOR_SIZE).ok()?;
        Some(Segment::new(addr, bytes))
    }
}
