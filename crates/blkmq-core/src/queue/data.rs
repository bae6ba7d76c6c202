//! A request's data for its driver: the segments across its bios, and their mapping into the
//! driver's scatter-gather table.

use crate::driver::Driver;
use crate::request::{Rq, RqSegments};
use crate::segment::{Segment, SgTooSmall};

use super::RequestQueue;

impl<D: Driver> RequestQueue<D> {
    /// The data segments of a request, across its bios front to back (Linux's
    /// `rq_for_each_segment`); `None` when `rq` is not this queue's.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Write, 0, 8).buffer(0x10000)).unwrap();
    /// let rq = host.driver().take().pop().unwrap();
    /// let segs: Vec<Segment> = queue.segments(&rq).unwrap().collect();
    /// assert_eq!(segs, [Segment::new(0x10000, 4096)]);
    /// queue.end_request(rq, Status::Ok).unwrap();
    /// ```
    pub fn segments<'a>(&'a self, rq: &'a Rq) -> Option<RqSegments<'a>> {
        self.tags().segments(rq).ok()
    }

    /// Maps a request's data into the driver's scatter-gather `table` within the queue's
    /// limits (Linux's `blk_rq_map_sg`): physically contiguous segments joined up to
    /// `max_segment_size` and within a `seg_boundary_mask` window. Returns the entries used,
    /// at most the request's [`segments`](crate::RqIo::segments) count; zero for a request
    /// with no data (or not this queue's).
    ///
    /// # Errors
    /// [`SgTooSmall`] when `table` cannot hold the mapping; the request is unchanged.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// static TABLE: [Segment; 2] = [Segment::new(0x1000, 2048), Segment::new(0x1800, 2048)];
    /// queue.submit(Bio::new(Op::Write, 0, 8).segments(&TABLE)).unwrap();
    /// let rq = host.driver().take().pop().unwrap();
    /// let mut sg = [Segment::default(); 4];
    /// assert_eq!(queue.map_sg(&rq, &mut sg), Ok(1)); // contiguous: one entry
    /// assert_eq!(sg[0], Segment::new(0x1000, 4096));
    /// queue.end_request(rq, Status::Ok).unwrap();
    /// ```
    pub fn map_sg(&self, rq: &Rq, table: &mut [Segment]) -> Result<usize, SgTooSmall> {
        match self.segments(rq) {
            Some(segs) => self.limits.map_segments(segs, table),
            None => Ok(0),
        }
    }
}
