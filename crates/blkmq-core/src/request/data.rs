//! A request's data: its segments across every merged bio, front to back.

use crate::bio::{Bio, SECTOR_SIZE};
use crate::request::{BioPool, NO_TAG, RqIo};
use crate::segment::{BioSegments, Segment};

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
