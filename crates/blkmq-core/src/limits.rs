//! Queue limits: what one request may hold, and how bios are checked and split to fit
//! (when a bio or a request may merge into another is in `merge.rs`).

use crate::bio::{Bio, Op, SECTOR_SIZE, Status};
use crate::error::ConfigError;
use crate::segment::{SegSpan, Segment};

// Where the elevator interface and the models name it.
pub(crate) use crate::merge::MergeKind;

/// What a device accepts in one request (Linux's `queue_limits`), and its size.
///
/// Data segments are counted on a bio's real segments ([`Bio::segs`]): each is cut at every
/// `seg_boundary_mask + 1` boundary and into pieces of at most `max_segment_size` (a bio
/// with no data named walks as one buffer laid out like its place on the device). Within a
/// request, the last segment of one bio and the first of the next count as one when they
/// are physically contiguous and the two together stay within both limits; a bio with no
/// data named never shares a segment with another.
///
/// ```
/// use blkmq_core::QueueLimits;
/// let limits = QueueLimits::new(1 << 21); // 1 GiB
/// assert_eq!((limits.max_sectors, limits.max_segments), (2560, 128));
/// assert!(limits.validate().is_ok());
/// assert!(QueueLimits { max_segments: 0, ..limits }.validate().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLimits {
    /// The device's size in sectors; an I/O past it fails with [`Status::IoErr`].
    pub capacity: u64,
    /// The smallest unit the device addresses, in bytes (a power of two, 512 to 65536);
    /// I/O not aligned to it fails with [`Status::Invalid`].
    pub logical_block_size: u32,
    /// Most sectors in one request (default 2560, Linux's 1280 KiB).
    pub max_sectors: u32,
    /// Most data segments in one request (default 128).
    pub max_segments: u32,
    /// Largest data segment in bytes (default 65536).
    pub max_segment_size: u32,
    /// A data segment never crosses a multiple of `seg_boundary_mask + 1` bytes (default
    /// `0xffff_ffff`; the mask is a power of two minus one, at least 4095).
    pub seg_boundary_mask: u64,
    /// When non-zero (a power of two), no request crosses a multiple of this many sectors:
    /// the stripe unit of a RAID volume, for one.
    pub chunk_sectors: u32,
    /// Most sectors of one discard; zero when the device cannot discard.
    pub max_discard_sectors: u32,
    /// Most sectors of one write-zeroes; zero when the device cannot.
    pub max_write_zeroes_sectors: u32,
    /// The device seeks (a spinning disk): schedulers keep I/O sequential on it, at the cost
    /// of some latency (default `false`, as for flash; Linux's `BLK_FEAT_ROTATIONAL`).
    pub rotational: bool,
    /// The alignment, as a mask, of every data segment's address and length (a power of two
    /// minus one, at most 4095). A bio whose data breaks it ends with [`Status::Invalid`];
    /// bios with no data named are not checked. The default, 0, takes any address, as a
    /// driver that copies with the CPU can (a RAM disk, a user-space back end); a driver
    /// whose DMA engine needs aligned buffers sets its need (Linux's default for a queue is
    /// 511, and `O_DIRECT` buffers off it fail there with `EINVAL`).
    pub dma_alignment: u32,
    /// When non-zero (a power of two minus one, at least `dma_alignment`, at most
    /// `seg_boundary_mask`), the rule of devices whose segment lists are page lists (NVMe's
    /// PRP): between two segments of one request, the earlier ends and the later starts on
    /// a multiple of `virt_boundary_mask + 1`, so only the first segment may start and only
    /// the last may end off one. A bio that breaks it is split before the segment that
    /// would; a merge that would is refused, and so, as in Linux, is any merge behind a
    /// request whose first segment starts off a boundary. Physically contiguous segments
    /// leave no gap.
    pub virt_boundary_mask: u64,
    /// Discard ranges per request (default 1; between 1 and 65535). Discards merge only
    /// when adjacent, into one range, so a request holds one range whatever this says.
    pub max_discard_segments: u32,
    /// The device keeps written data in a volatile cache until it is flushed (Linux's
    /// `BLK_FEAT_WRITE_CACHE`; default `false`). With it, [`Op::Flush`] bios and writes
    /// with [`BioFlags::PREFLUSH`](crate::BioFlags::PREFLUSH) or
    /// [`BioFlags::FUA`](crate::BioFlags::FUA) run as a sequence of flushes and the write
    /// (see the request queue's flush sequence); without it those flags are dropped and an
    /// empty flush ends at once, reaching no driver.
    ///
    /// ```
    /// use blkmq_core::testing::Hold;
    /// use blkmq_core::*;
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// let limits = QueueLimits { write_cache: true, ..QueueLimits::new(1024) };
    /// let queue = host.add_queue(QueueConfig::new(limits)).unwrap();
    /// let durable = BioFlags::PREFLUSH | BioFlags::FUA;
    /// queue.submit(Bio::new(Op::Write, 0, 8).flags(durable)).unwrap();
    /// let mut commands = Vec::new();
    /// loop {
    ///     let held = host.driver().take(); // one step at a time
    ///     let Some(rq) = held.into_iter().next() else { break };
    ///     commands.push(queue.io(&rq).unwrap().op());
    ///     queue.end_request(rq, Status::Ok).unwrap();
    /// }
    /// // A preflush, the data, and a postflush for the FUA the device does not honour.
    /// assert_eq!(commands, [Op::Flush, Op::Write, Op::Flush]);
    /// ```
    pub write_cache: bool,
    /// The device honours [`BioFlags::FUA`](crate::BioFlags::FUA) on writes (Linux's
    /// `BLK_FEAT_FUA`; default `false`): the driver sees FUA on the write, and no flush
    /// follows it. Without it FUA is emulated by a flush after the write. Meaningless
    /// without [`write_cache`](Self::write_cache).
    pub fua: bool,
}

/// The largest device, in sectors: byte offsets must fit in 64 bits.
///
/// ```
/// use blkmq_core::{MAX_CAPACITY, QueueLimits, SECTOR_SIZE};
/// assert!(MAX_CAPACITY.checked_mul(SECTOR_SIZE).is_some());
/// assert!((MAX_CAPACITY + 1).checked_mul(SECTOR_SIZE).is_none());
/// assert!(QueueLimits::new(MAX_CAPACITY).validate().is_ok());
/// assert!(QueueLimits::new(MAX_CAPACITY + 1).validate().is_err());
/// ```
pub const MAX_CAPACITY: u64 = u64::MAX >> 9;

impl QueueLimits {
    /// Linux's defaults for a device of `capacity` sectors: 512-byte blocks, 2560 sectors and
    /// 128 segments of up to 64 KiB per request, no virt boundary, no chunks, no discard or
    /// write-zeroes; segments at any address (no DMA alignment).
    ///
    /// ```
    /// use blkmq_core::QueueLimits;
    /// let limits = QueueLimits::new(8);
    /// assert_eq!((limits.capacity, limits.logical_block_size), (8, 512));
    /// assert_eq!((limits.dma_alignment, limits.virt_boundary_mask), (0, 0));
    /// assert_eq!(limits.max_discard_segments, 1);
    /// assert!(!limits.rotational);
    /// assert!(!limits.write_cache && !limits.fua); // no volatile cache
    /// ```
    pub const fn new(capacity: u64) -> Self {
        Self {
            capacity,
            logical_block_size: 512,
            max_sectors: 2560,
            max_segments: 128,
            max_segment_size: 65536,
            seg_boundary_mask: 0xffff_ffff,
            chunk_sectors: 0,
            max_discard_sectors: 0,
            max_write_zeroes_sectors: 0,
            rotational: false,
            dma_alignment: 0,
            virt_boundary_mask: 0,
            max_discard_segments: 1,
            write_cache: false,
            fua: false,
        }
    }

    /// Checks the limits hang together.
    ///
    /// # Errors
    /// [`ConfigError::BadLimits`] naming the first field that does not.
    ///
    /// ```
    /// use blkmq_core::{ConfigError, QueueLimits};
    /// let bad = QueueLimits { logical_block_size: 1000, ..QueueLimits::new(64) };
    /// assert_eq!(bad.validate(), Err(ConfigError::BadLimits { what: "logical_block_size" }));
    /// let bad = QueueLimits { virt_boundary_mask: 4000, ..QueueLimits::new(64) };
    /// assert_eq!(bad.validate(), Err(ConfigError::BadLimits { what: "virt_boundary_mask" }));
    /// let nvme = QueueLimits { virt_boundary_mask: 4095, ..QueueLimits::new(64) };
    /// assert_eq!(nvme.validate(), Ok(()));
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |what| Err(ConfigError::BadLimits { what });
        let lbs = self.logical_block_size;
        if !lbs.is_power_of_two() || !(512..=65536).contains(&lbs) {
            return bad("logical_block_size");
        }
        let block_sectors = lbs / SECTOR_SIZE as u32;
        if self.max_sectors < block_sectors.max(8) || self.max_sectors % block_sectors != 0 {
            return bad("max_sectors");
        }
        if self.max_segments == 0 || self.max_segments > 65535 {
            return bad("max_segments");
        }
        if self.max_segment_size < 4096 || self.max_segment_size < lbs {
            return bad("max_segment_size");
        }
        if self.seg_boundary_mask < 4095
            || self.seg_boundary_mask < u64::from(lbs - 1)
            || !(self.seg_boundary_mask.wrapping_add(1)).is_power_of_two()
        {
            return bad("seg_boundary_mask");
        }
        if self.chunk_sectors != 0
            && (!self.chunk_sectors.is_power_of_two() || self.chunk_sectors < block_sectors)
        {
            return bad("chunk_sectors");
        }
        if self.max_discard_sectors % block_sectors != 0 {
            return bad("max_discard_sectors");
        }
        if self.max_write_zeroes_sectors % block_sectors != 0 {
            return bad("max_write_zeroes_sectors");
        }
        if self.capacity > MAX_CAPACITY || self.capacity % u64::from(block_sectors) != 0 {
            return bad("capacity");
        }
        if self.dma_alignment > 4095 || !(self.dma_alignment + 1).is_power_of_two() {
            return bad("dma_alignment");
        }
        let virt = self.virt_boundary_mask;
        if virt != 0
            && (!virt.wrapping_add(1).is_power_of_two()
                || virt < u64::from(self.dma_alignment)
                || virt > self.seg_boundary_mask)
        {
            return bad("virt_boundary_mask");
        }
        if self.max_discard_segments == 0 || self.max_discard_segments > 65535 {
            return bad("max_discard_segments");
        }
        Ok(())
    }

    /// The status a bio ends with at once, if it cannot be served as it is: zero length
    /// (but for a flush), past the capacity, misaligned (its sectors to the logical block,
    /// its segments to `dma_alignment`), or an operation the device lacks.
    ///
    /// ```
    /// use blkmq_core::{Bio, Op, QueueLimits, Status};
    /// let limits = QueueLimits { logical_block_size: 4096, ..QueueLimits::new(64) };
    /// assert_eq!(limits.check(&Bio::new(Op::Read, 0, 8)), None);
    /// assert_eq!(limits.check(&Bio::new(Op::Read, 0, 0)), Some(Status::Invalid));
    /// assert_eq!(limits.check(&Bio::new(Op::Read, 4, 8)), Some(Status::Invalid));
    /// assert_eq!(limits.check(&Bio::new(Op::Read, 64, 8)), Some(Status::IoErr));
    /// assert_eq!(limits.check(&Bio::new(Op::Discard, 0, 8)), Some(Status::NotSupported));
    /// assert_eq!(limits.check(&Bio::new(Op::Flush, 0, 0)), None);
    /// let dma = QueueLimits { dma_alignment: 511, ..limits };
    /// assert_eq!(dma.check(&Bio::new(Op::Read, 0, 8).buffer(0x1000)), None);
    /// assert_eq!(dma.check(&Bio::new(Op::Read, 0, 8).buffer(0x1004)), Some(Status::Invalid));
    /// ```
    pub fn check(&self, bio: &Bio) -> Option<Status> {
        if bio.op == Op::Flush {
            return (bio.sectors != 0 || bio.data.is_mapped()).then_some(Status::Invalid);
        }
        match bio.op {
            Op::Discard if self.max_discard_sectors == 0 => return Some(Status::NotSupported),
            Op::WriteZeroes if self.max_write_zeroes_sectors == 0 => {
                return Some(Status::NotSupported);
            }
            _ => {}
        }
        // Data only where the operation moves data, a table exactly as long as the bio, and
        // segments aligned as the device needs.
        if bio.op.has_data() {
            // Unmapped data is never checked against the DMA alignment (Linux fails
            // misaligned segments with `EINVAL`).
            let mask = if bio.data.is_mapped() {
                u64::from(self.dma_alignment)
            } else {
                0
            };
            let bad = match bio.data.table_walk() {
                Some((bytes, bits)) => bytes != bio.bytes() || bits & mask != 0,
                None => (bio.data.start_addr(0) | bio.bytes()) & mask != 0,
            };
            if bad {
                return Some(Status::Invalid);
            }
        } else if bio.data.is_mapped() {
            return Some(Status::Invalid);
        }
        let block_sectors = u64::from(self.logical_block_size) / SECTOR_SIZE;
        if bio.sectors == 0
            || bio.sector % block_sectors != 0
            || u64::from(bio.sectors) % block_sectors != 0
        {
            return Some(Status::Invalid);
        }
        match bio.sector.checked_add(u64::from(bio.sectors)) {
            Some(end) if end <= self.capacity => None,
            _ => Some(Status::IoErr),
        }
    }

    /// Whether `bio` is a read or write that [`check`](Self::check) passes and that fits one
    /// request whole ([`split_len`](Self::split_len) is its length), decided in a few steps
    /// for the common case: aligned, within the device, the request size and a chunk, in one
    /// data segment (no data named, one buffer, or a table of one segment; its address
    /// aligned and its bytes within one segment's size and boundary window). `false` says
    /// only that the full checks must decide. For limits that pass
    /// [`validate`](Self::validate), as a request queue's do: it leans on the powers of two
    /// and the bounds that checks.
    #[inline]
    pub(crate) fn fits_whole(&self, bio: &Bio) -> bool {
        debug_assert!(self.validate().is_ok());
        let block = u64::from(self.logical_block_size) / SECTOR_SIZE;
        let (sector, sectors) = (bio.sector, u64::from(bio.sectors));
        let chunk = u64::from(self.chunk_sectors);
        let bytes = sectors * SECTOR_SIZE;
        // Within the device, at most `MAX_CAPACITY` sectors: the byte offsets below fit.
        let within = sector
            .checked_add(sectors)
            .is_some_and(|end| end <= self.capacity);
        if !(matches!(bio.op, Op::Read | Op::Write)
            && sectors != 0
            && within
            && (sector | sectors) & (block - 1) == 0
            && sectors <= u64::from(self.max_sectors)
            && (chunk == 0 || (sector & (chunk - 1)) + sectors <= chunk)
            && bytes <= u64::from(self.max_segment_size))
        {
            return false;
        }
        let Some(addr) = bio.data.single_run(sector * SECTOR_SIZE, bytes) else {
            return false;
        };
        // Unmapped data is never checked against the DMA alignment.
        let dma = if bio.data.is_mapped() {
            u64::from(self.dma_alignment)
        } else {
            0
        };
        (addr | bytes) & dma == 0
            && addr | self.seg_boundary_mask
                == addr.wrapping_add(bytes - 1) | self.seg_boundary_mask
    }

    /// The one device segment of a bio that [`fits_whole`](Self::fits_whole) admitted.
    #[inline(always)]
    pub(crate) fn whole_span(&self, bio: &Bio) -> SegSpan {
        let addr = bio.data.start_addr(bio.sector * SECTOR_SIZE);
        SegSpan::one(Segment::new(addr, bio.bytes() as u32), bio.data.is_mapped())
    }

    /// Bytes of the longest device segment that starts at `at` and has `left` bytes to go:
    /// within `max_segment_size` and the boundary window (Linux's `get_max_segment_size`).
    #[inline(always)]
    fn piece(&self, at: u64, left: u64) -> u64 {
        let window = (at | self.seg_boundary_mask)
            .wrapping_sub(at)
            .saturating_add(1);
        left.min(u64::from(self.max_segment_size)).min(window)
    }

    /// Whether `next` after `prev` breaks the virt boundary rule (Linux's
    /// `bvec_gap_to_prev`): `prev` ends or `next` starts off a boundary, and they are not
    /// one contiguous run.
    #[inline]
    pub(crate) fn gap(&self, prev: &Segment, next: &Segment) -> bool {
        let mask = self.virt_boundary_mask;
        mask != 0 && !prev.is_contiguous_with(next) && (prev.end() | next.addr) & mask != 0
    }

    /// The device segments of `bio`: each of its segments cut into pieces within
    /// `max_segment_size` and the boundary windows, and physically contiguous pieces joined
    /// while they stay within both (as [`map_segments`](Self::map_segments) maps them); none
    /// for an operation without data.
    pub(crate) fn bio_span(&self, bio: &Bio) -> SegSpan {
        let mut span = SegSpan::EMPTY;
        if !bio.op.has_data() {
            return span;
        }
        let mapped = bio.data.is_mapped();
        // The device segment being built.
        let mut open: Option<Segment> = None;
        for seg in bio.segs() {
            let (mut at, mut left) = (seg.addr, u64::from(seg.len));
            while left > 0 {
                let step = self.piece(at, left);
                let piece = Segment::new(at, step as u32);
                open = match open {
                    Some(prev) if mapped && self.joins(&prev, &piece) => {
                        Some(Segment::new(prev.addr, prev.len + piece.len))
                    }
                    Some(prev) => {
                        span.push(prev, mapped);
                        Some(piece)
                    }
                    None => Some(piece),
                };
                at = at.wrapping_add(step);
                left -= step;
            }
        }
        if let Some(last) = open {
            span.push(last, mapped);
        }
        span
    }

    /// Data segments of `bio` as this type documents them: its segments cut at
    /// `max_segment_size` and the `seg_boundary_mask` windows, contiguous neighbours joined
    /// within both (none without data). For a bio with no data named, what
    /// [`segments`](Self::segments) counts.
    ///
    /// ```
    /// use blkmq_core::{Bio, Op, QueueLimits, Segment};
    /// let limits = QueueLimits { max_segment_size: 4096, ..QueueLimits::new(1 << 20) };
    /// static TABLE: [Segment; 2] = [Segment::new(0x1000, 512), Segment::new(0x8000, 7680)];
    /// assert_eq!(limits.bio_segments(&Bio::new(Op::Write, 0, 16).segments(&TABLE)), 3);
    /// static JOINED: [Segment; 2] = [Segment::new(0x1000, 512), Segment::new(0x1200, 512)];
    /// assert_eq!(limits.bio_segments(&Bio::new(Op::Write, 0, 2).segments(&JOINED)), 1);
    /// assert_eq!(limits.bio_segments(&Bio::new(Op::Write, 0, 16)), 2);
    /// assert_eq!(limits.bio_segments(&Bio::new(Op::Discard, 0, 16)), 0);
    /// ```
    pub fn bio_segments(&self, bio: &Bio) -> u32 {
        self.bio_span(bio).nr()
    }

    /// Most sectors one request of `op` may hold.
    pub(crate) fn max_for(&self, op: Op) -> u32 {
        match op {
            Op::Discard => self.max_discard_sectors,
            Op::WriteZeroes => self.max_write_zeroes_sectors,
            _ => self.max_sectors,
        }
    }

    /// Sectors left to the next chunk boundary from `sector` (`u32::MAX` without chunks).
    pub(crate) fn chunk_left(&self, sector: u64) -> u32 {
        if self.chunk_sectors == 0 {
            return u32::MAX;
        }
        let chunk = u64::from(self.chunk_sectors);
        (chunk - (sector & (chunk - 1))) as u32
    }

    /// Data segments of `sectors` sectors from `sector` of a bio with no data named, as this
    /// type documents them ([`bio_segments`](Self::bio_segments) counts any bio's);
    /// operations without data have none.
    ///
    /// ```
    /// use blkmq_core::{Op, QueueLimits};
    /// let limits = QueueLimits { seg_boundary_mask: 4095, ..QueueLimits::new(1 << 20) };
    /// assert_eq!(limits.segments(Op::Read, 0, 8), 1);
    /// assert_eq!(limits.segments(Op::Read, 4, 8), 2); // crosses a 4 KiB boundary
    /// assert_eq!(limits.segments(Op::Read, 0, 256), 32);
    /// assert_eq!(limits.segments(Op::Discard, 0, 64), 0);
    /// ```
    pub fn segments(&self, op: Op, sector: u64, sectors: u32) -> u32 {
        if !op.has_data() {
            return 0;
        }
        let mut at = sector * SECTOR_SIZE;
        let end = at + u64::from(sectors) * SECTOR_SIZE;
        if end == at {
            return 0;
        }
        // One segment, the common case: within one boundary window and one segment's size.
        if end - at <= u64::from(self.max_segment_size)
            && (at | self.seg_boundary_mask) == ((end - 1) | self.seg_boundary_mask)
        {
            return 1;
        }
        let mut count = 0;
        while at < end {
            let boundary = (at | self.seg_boundary_mask) + 1;
            let step = (end.min(boundary) - at).min(u64::from(self.max_segment_size));
            at += step;
            count += 1;
        }
        count
    }

    /// Sectors of the longest first piece of `bio` that fits one request (Linux's
    /// `bio_split_rw_at`): within the operation's maximum and the chunk boundary, and for
    /// data, ending where the segment count reaches `max_segments` and before a segment
    /// that leaves a virt boundary gap; in whole logical blocks. Equal to `bio.sectors` when
    /// the bio needs no split; zero when not even one logical block fits (a table of tiny
    /// segments), which a request queue ends with [`Status::Invalid`].
    ///
    /// ```
    /// use blkmq_core::{Bio, Op, QueueLimits, Segment};
    /// let (max_sectors, chunk_sectors) = (64, 128);
    /// let limits = QueueLimits { max_sectors, chunk_sectors, ..QueueLimits::new(1 << 20) };
    /// assert_eq!(limits.split_len(&Bio::new(Op::Read, 0, 32)), 32);
    /// assert_eq!(limits.split_len(&Bio::new(Op::Read, 0, 200)), 64);
    /// assert_eq!(limits.split_len(&Bio::new(Op::Read, 100, 64)), 28); // chunk ends at 128
    ///
    /// // Two segments a page apart: the second starts a new page list.
    /// static TABLE: [Segment; 2] = [Segment::new(0x1000, 2048), Segment::new(0x9000, 2048)];
    /// let nvme = QueueLimits { virt_boundary_mask: 4095, ..QueueLimits::new(1 << 20) };
    /// assert_eq!(nvme.split_len(&Bio::new(Op::Read, 0, 8).segments(&TABLE)), 4);
    /// ```
    pub fn split_len(&self, bio: &Bio) -> u32 {
        if bio.op == Op::Flush {
            return bio.sectors;
        }
        let block_sectors = self.logical_block_size / SECTOR_SIZE as u32;
        let mut len = bio
            .sectors
            .min(self.max_for(bio.op))
            .min(self.chunk_left(bio.sector));
        if bio.op.has_data() {
            len = self.data_split(bio, len);
        }
        len - len % block_sectors
    }

    /// Sectors of the first `len` of `bio` that its segments allow in one request: up to
    /// `max_segments` device segments (counted as [`bio_segments`](Self::bio_segments)
    /// counts them), and not past a virt boundary gap.
    fn data_split(&self, bio: &Bio, len: u32) -> u32 {
        let max_bytes = u64::from(len) * SECTOR_SIZE;
        let mapped = bio.data.is_mapped();
        let mut bytes = 0u64;
        let mut nsegs = 0u32;
        // The segment of the table before, and the device segment being built.
        let mut prev: Option<Segment> = None;
        let mut open: Option<Segment> = None;
        'walk: for seg in bio.segs() {
            if prev.is_some_and(|prev| self.gap(&prev, &seg)) {
                break;
            }
            let (mut at, mut left) = (seg.addr, u64::from(seg.len));
            while left > 0 {
                if bytes >= max_bytes {
                    break 'walk;
                }
                let step = self.piece(at, left).min(max_bytes - bytes);
                let piece = Segment::new(at, step as u32);
                open = match open {
                    Some(o) if mapped && self.joins(&o, &piece) => {
                        Some(Segment::new(o.addr, o.len + piece.len))
                    }
                    Some(o) if nsegs == self.max_segments => {
                        // The last segment takes what of this piece still joins it (as
                        // Linux's `bvec_split_segs` splits inside a bvec).
                        if mapped && o.is_contiguous_with(&piece) {
                            let room = u64::from(self.max_segment_size - o.len);
                            let window = (o.addr | self.seg_boundary_mask)
                                .wrapping_sub(at)
                                .wrapping_add(1);
                            bytes += step.min(room).min(window);
                        }
                        break 'walk;
                    }
                    _ if nsegs == self.max_segments => break 'walk,
                    _ => {
                        nsegs += 1;
                        Some(piece)
                    }
                };
                bytes += step;
                at = at.wrapping_add(step);
                left -= step;
            }
            prev = Some(seg);
        }
        (bytes / SECTOR_SIZE) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Segments by walking every boundary window and segment-size step.
    fn walked(limits: &QueueLimits, sector: u64, sectors: u32) -> u32 {
        let mut at = sector * SECTOR_SIZE;
        let end = at + u64::from(sectors) * SECTOR_SIZE;
        let mut count = 0;
        while at < end {
            let boundary = (at | limits.seg_boundary_mask) + 1;
            at += (end.min(boundary) - at).min(u64::from(limits.max_segment_size));
            count += 1;
        }
        count
    }

    proptest! {
        /// The shortcut never admits a bio the full checks would fail or split, and admits
        /// the common one.
        #[test]
        fn fits_whole_agrees_with_the_checks(
            op in prop_oneof![Just(Op::Read), Just(Op::Write), Just(Op::Flush), Just(Op::Discard)],
            block_shift in 0u32..4,
            chunk_shift in prop_oneof![Just(None), (3u32..12).prop_map(Some)],
            boundary_shift in 12u32..20,
            sector in 0u64..1 << 20,
            sectors in 0u32..600,
            capacity in 1u64..1 << 21,
        ) {
            let block = 1u64 << block_shift;
            let limits = QueueLimits {
                logical_block_size: 512 << block_shift,
                chunk_sectors: chunk_shift.map_or(0, |s| (1u32 << s).max(block as u32)),
                seg_boundary_mask: (1u64 << boundary_shift) - 1,
                max_sectors: 256,
                max_discard_sectors: 256,
                ..QueueLimits::new(capacity / block * block)
            };
            prop_assume!(limits.validate().is_ok());
            let bio = Bio::new(op, sector, sectors);
            let whole = limits.check(&bio).is_none() && limits.split_len(&bio) == bio.sectors;
            if limits.fits_whole(&bio) {
                prop_assert!(whole, "admitted {:?}", bio);
            } else if matches!(op, Op::Read | Op::Write) && whole {
                // Only a bio over several data segments may miss the shortcut.
                prop_assert!(limits.segments(op, sector, sectors) > 1, "missed {:?}", bio);
            }
        }

        /// The shortcut agrees with the full checks on bios with data named too: one buffer,
        /// or a table of one segment or more, aligned or not.
        #[test]
        fn fits_whole_agrees_on_mapped_data(
            op in prop_oneof![Just(Op::Read), Just(Op::Write)],
            kind in 0u8..3,
            boundary_shift in 12u32..20,
            dma_shift in 0u32..13,
            addr in 0u64..1 << 24,
            sector in 0u64..1 << 16,
            sectors in 1u32..300,
            cut in 0u32..300,
        ) {
            let limits = QueueLimits {
                seg_boundary_mask: (1u64 << boundary_shift) - 1,
                dma_alignment: (1u32 << dma_shift) - 1,
                max_sectors: 256,
                ..QueueLimits::new(1 << 17)
            };
            prop_assume!(limits.validate().is_ok());
            let bytes = u64::from(sectors) * SECTOR_SIZE;
            let bio = Bio::new(op, sector, sectors);
            let bio = match kind {
                0 => bio.buffer(addr),
                _ if kind == 1 || sectors == 1 => bio.segments(alloc::boxed::Box::leak(
                    alloc::boxed::Box::new([Segment::new(addr, bytes as u32)]),
                )),
                _ => {
                    let first = u64::from(cut % (sectors - 1) + 1) * SECTOR_SIZE;
                    let segs = alloc::vec![
                        Segment::new(addr, first as u32),
                        Segment::new(addr + (1 << 30), (bytes - first) as u32),
                    ];
                    bio.segments(alloc::vec::Vec::leak(segs))
                }
            };
            let whole = limits.check(&bio).is_none() && limits.split_len(&bio) == bio.sectors;
            if limits.fits_whole(&bio) {
                prop_assert!(whole, "admitted {:?}", bio);
                prop_assert_eq!(limits.bio_segments(&bio), 1);
                prop_assert_eq!(limits.whole_span(&bio), limits.bio_span(&bio));
            } else if whole {
                // Only a bio over several data segments may miss the shortcut.
                prop_assert!(limits.bio_segments(&bio) > 1, "missed {:?}", bio);
            }
        }

        /// The one-segment shortcut counts what the walk counts.
        #[test]
        fn segments_match_the_walk(
            boundary_shift in 9u32..20,
            segment_kib in 1u32..1024,
            sector in 0u64..1 << 24,
            sectors in 0u32..4096,
        ) {
            let limits = QueueLimits {
                seg_boundary_mask: (1u64 << boundary_shift) - 1,
                max_segment_size: segment_kib * 1024,
                ..QueueLimits::new(1 << 30)
            };
            prop_assert_eq!(
                limits.segments(Op::Write, sector, sectors),
                walked(&limits, sector, sectors)
            );
        }
    }
}
