//! A request's data for its driver: the segments across its bios, their mapping into the
//! driver's scatter-gather table, and the end of part of it.

use crate::bio::{SECTOR_SIZE, Status};
use crate::driver::Driver;
use crate::error::TagError;
use crate::request::{Rq, RqSegments, RqState};
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
    #[inline]
    pub fn segments<'a>(&'a self, rq: &'a Rq) -> Option<RqSegments<'a>> {
        // Made in place from the I/O found, not moved out of a `Result` into an `Option`.
        let tags = self.tags();
        tags.io(rq).ok().map(|io| tags.segments_of(io))
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

    /// Ends the first `bytes` of a request the driver holds in flight, and leaves it
    /// describing the rest (Linux's `blk_update_request`). Returns `Ok(true)` when part of
    /// the request remains, `Ok(false)` when nothing does.
    ///
    /// * `bytes` counts from the request's first byte and is clamped to its length: its
    ///   [`sectors`](crate::RqIo::sectors) times 512, for operations without data too. The
    ///   device ends whole logical blocks: a partial block at the end is not ended (`bytes`
    ///   is rounded down to a multiple of
    ///   [`logical_block_size`](crate::QueueLimits::logical_block_size)).
    /// * Each bio those bytes cover whole leaves the request and ends with `status` (a
    ///   piece of a split bio counts towards its parent, which ends once, with the first
    ///   error of its pieces). A bio they cover in part advances past that part (its
    ///   sector, length and data position) and stays first; it ends later, once, with the
    ///   first error of its parts. For that a bio ended in part with an error, when it is
    ///   not a piece already, is parked as a split parent of one piece and comes back to
    ///   its `end_io` as it stood at that call; if every split slot is taken, the ending
    ///   stops at that bio's first sector instead, the bio whole and still first.
    /// * A request in a flush sequence (a write with PREFLUSH or FUA on a device with a
    ///   write cache, or a flush) ends no bio here, as in Linux: its one bio advances past
    ///   the part ended (with the status kept, as above), to its end when all of it is, and
    ///   stays on the request, with no sector left, until
    ///   [`end_request`](Self::end_request) lets the sequence go on and the sequence's
    ///   last step ends it. Its write is acknowledged only once the sequence (a postflush,
    ///   say) has made it durable.
    /// * The request then starts at the first byte not ended. Its operation, flags,
    ///   priority and issuer stay the request's; its [`segments`](crate::RqIo::segments)
    ///   count stays what it was, an upper bound of the rest's (zero once nothing remains).
    ///
    /// After `Ok(true)` the driver carries on with the rest, ends it with
    /// [`end_request`](Self::end_request) (which ends only what remains), or sends it back
    /// with [`requeue_request`](Self::requeue_request) (only the rest is dispatched again).
    /// After `Ok(false)` the request holds no sector (and no bio, but in a flush sequence),
    /// and the driver still frees it with [`end_request`](Self::end_request), which ends
    /// nothing more (in a flush sequence, it lets the sequence go on). Either way the request
    /// stays the driver's: no tag, budget or count changes here, and nothing is allocated.
    ///
    /// # Errors
    /// Nothing changes, and:
    /// * [`TagError::ForeignRequest`] when `rq` is not this queue's;
    /// * [`TagError::WrongState`] when it is not in flight: not started (the driver did
    ///   not get it from `queue_rq`), or already ended by a racing
    ///   [`Request::try_complete`](crate::Request::try_complete).
    ///
    /// A driver ends 4 KiB of an 8 KiB request, then the rest:
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # use std::sync::Mutex;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// static ENDED: Mutex<Vec<(u64, u32, Status)>> = Mutex::new(Vec::new());
    /// fn done(bio: Bio, status: Status) {
    ///     ENDED.lock().unwrap().push((bio.private, bio.sectors, status));
    /// }
    /// queue.quiesce(); // the two bios merge into one request
    /// queue.submit(Bio::new(Op::Read, 0, 8).buffer(0x10000).private(1).end_io(done)).unwrap();
    /// queue.submit(Bio::new(Op::Read, 8, 8).buffer(0x20000).private(2).end_io(done)).unwrap();
    /// queue.unquiesce();
    /// let mut rq = host.driver().take().pop().unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().data_bytes(), 8192);
    ///
    /// // The device read the first 4 KiB, then failed: the first bio ends, with its status.
    /// assert_eq!(queue.update_request(&mut rq, 4096, Status::Ok), Ok(true));
    /// assert_eq!(*ENDED.lock().unwrap(), [(1, 8, Status::Ok)]);
    /// let io = queue.io(&rq).unwrap();
    /// assert_eq!((io.sector(), io.sectors(), io.nr_bios()), (8, 8, 1));
    /// let segs: Vec<Segment> = queue.segments(&rq).unwrap().collect();
    /// assert_eq!(segs, [Segment::new(0x20000, 4096)]);
    ///
    /// // The rest, and the request is freed.
    /// queue.end_request(rq, Status::Medium).unwrap();
    /// assert_eq!(*ENDED.lock().unwrap(), [(1, 8, Status::Ok), (2, 8, Status::Medium)]);
    /// assert_eq!((host.in_driver(), queue.usage()), (0, 0));
    /// ```
    ///
    /// Within one bio, the bio advances; a request no longer in flight is refused:
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Write, 0, 16).buffer(0x10000)).unwrap();
    /// let mut rq = host.driver().take().pop().unwrap();
    /// assert_eq!(queue.update_request(&mut rq, 4096 + 100, Status::Ok), Ok(true));
    /// let bio = *queue.io(&rq).unwrap().first_bio().unwrap();
    /// assert_eq!((bio.sector, bio.sectors), (8, 8)); // the 100 bytes are not ended
    /// assert_eq!(bio.segs().next(), Some(Segment::new(0x11000, 4096)));
    /// assert_eq!(queue.update_request(&mut rq, u64::MAX, Status::Ok), Ok(false));
    /// assert_eq!(queue.io(&rq).unwrap().nr_bios(), 0);
    /// queue.end_request(rq, Status::Ok).unwrap(); // frees it; nothing more ends
    ///
    /// queue.submit(Bio::new(Op::Write, 64, 8)).unwrap();
    /// let mut rq = host.driver().take().pop().unwrap();
    /// let request = queue.request(&rq).unwrap();
    /// assert!(request.try_complete(request.generation())); // a timeout handler won
    /// let state = RqState::Complete;
    /// let refused = queue.update_request(&mut rq, 512, Status::Ok);
    /// assert_eq!(refused, Err(TagError::WrongState { state }));
    /// assert_eq!(queue.io(&rq).unwrap().sectors(), 8); // nothing changed
    /// queue.end_request(rq, Status::Timeout).unwrap();
    /// ```
    pub fn update_request(
        &self,
        rq: &mut Rq,
        bytes: u64,
        status: Status,
    ) -> Result<bool, TagError> {
        let tags = self.tags();
        let state = tags.request(rq)?.state();
        if state != RqState::InFlight {
            return Err(TagError::WrongState { state });
        }
        let block = u64::from(self.limits.logical_block_size);
        let sectors = bytes / block * (block / SECTOR_SIZE);
        let pool = &tags.set().bios;
        let splits = &self.splits;
        let io = tags.io_mut(rq)?;
        if io.flush_state() != 0 {
            // In a flush sequence (Linux's `RQF_FLUSH_SEQ`): its bio ends with the sequence,
            // after a postflush if it needs one, never here.
            return Ok(io.update_in_sequence(sectors, status, |bio, status| {
                splits.keep_status(bio, status)
            }));
        }
        Ok(io.update(
            pool,
            sectors,
            status,
            |bio, status| splits.end(bio, status),
            |bio, status| splits.keep_status(bio, status),
        ))
    }
}
