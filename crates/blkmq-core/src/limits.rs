//! Queue limits: what one request may hold, and how bios are checked and split to fit
//! (when a bio or a request may merge into another is in `merge.rs`).

use crate::bio::{Bio, Op, SECTOR_SIZE, Status};
use crate::error::ConfigError;

// Where the elevator interface and the models name it.
pub(crate) use crate::merge::MergeKind;

/// What a device accepts in one request (Linux's `queue_limits`), and its size.
///
/// A [`Bio`] carries no scatter list, so data segments are counted as if each bio's buffer
/// were contiguous and laid out like its place on the device: a bio of `n` bytes at byte
/// `b` is cut at every `seg_boundary_mask + 1` boundary and into pieces of at most
/// `max_segment_size`; the bios of a request never share a segment.
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
    /// The device keeps written data in a volatile cache until it is flushed (Linux's
    /// `BLK_FEAT_WRITE_CACHE`; default `false`). With it, [`Op::Flush`] bios and writes
    /// with [`BioFlags::PREFLUSH`](crate::BioFlags::PREFLUSH) or
    /// [`BioFlags::FUA`](crate::BioFlags::FUA) run as a sequence of flushes and the write
    /// (see the request queue's flush sequence); without it those flags are dropped and an
    /// empty flush ends at once, reaching no driver.
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
    /// 128 segments of up to 64 KiB per request, no chunks, no discard or write-zeroes.
    ///
    /// ```
    /// use blkmq_core::QueueLimits;
    /// let limits = QueueLimits::new(8);
    /// assert_eq!((limits.capacity, limits.logical_block_size), (8, 512));
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
        Ok(())
    }

    /// The status a bio ends with at once, if it cannot be served as it is: zero length
    /// (but for a flush), past the capacity, misaligned, or an operation the device lacks.
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
        // Data only where the operation moves data, and a table exactly as long as the bio.
        if bio.op.has_data() {
            if bio
                .data
                .table_bytes()
                .is_some_and(|bytes| bytes != bio.bytes())
            {
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
    /// data segment. `false` says only that the full checks must decide. For limits that
    /// pass [`validate`](Self::validate), as a request queue's do: it leans on the powers of
    /// two and the bounds that checks.
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
        matches!(bio.op, Op::Read | Op::Write)
            && !bio.data.is_mapped()
            && sectors != 0
            && within
            && (sector | sectors) & (block - 1) == 0
            && sectors <= u64::from(self.max_sectors)
            && (chunk == 0 || (sector & (chunk - 1)) + sectors <= chunk)
            && bytes <= u64::from(self.max_segment_size)
            && (sector * SECTOR_SIZE) | self.seg_boundary_mask
                == (sector * SECTOR_SIZE + bytes - 1) | self.seg_boundary_mask
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

    /// Data segments of `sectors` sectors from `sector`, as this type documents them;
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

    /// Sectors of the longest first piece of `bio` that fits one request: within the
    /// operation's maximum, the segment limit and the chunk boundary, in whole logical
    /// blocks. Equal to `bio.sectors` when the bio needs no split.
    ///
    /// ```
    /// use blkmq_core::{Bio, Op, QueueLimits};
    /// let (max_sectors, chunk_sectors) = (64, 128);
    /// let limits = QueueLimits { max_sectors, chunk_sectors, ..QueueLimits::new(1 << 20) };
    /// assert_eq!(limits.split_len(&Bio::new(Op::Read, 0, 32)), 32);
    /// assert_eq!(limits.split_len(&Bio::new(Op::Read, 0, 200)), 64);
    /// assert_eq!(limits.split_len(&Bio::new(Op::Read, 100, 64)), 28); // chunk ends at 128
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
        if bio.op.has_data() && self.segments(bio.op, bio.sector, len) > self.max_segments {
            // Walk the segments: the piece ends where the segment limit is reached.
            let start = bio.sector * SECTOR_SIZE;
            let mut at = start;
            for _ in 0..self.max_segments {
                let boundary = (at | self.seg_boundary_mask) + 1;
                at = boundary.min(at + u64::from(self.max_segment_size));
            }
            len = len.min(((at - start) / SECTOR_SIZE) as u32);
        }
        len - len % block_sectors
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
