//! Where a bio's bytes live: [`Segment`]s (an address and a length), held by a bio as
//! [`BioData`], walked with [`BioSegments`] from a position that split pieces advance
//! (Linux's `bio_vec` and `bvec_iter`).
//!
//! The block layer never dereferences a segment's address: it is a number the platform and
//! the driver agree on (a DMA or physical address in a kernel, a pointer in user space). It
//! reads only the segment table, so the only promise it asks of a submitter is that the
//! table stays alive and unchanged until the bio ends.

use core::fmt;
use core::ptr::NonNull;

/// One contiguous piece of a bio's data: `len` bytes at `addr` (Linux's `bio_vec`).
///
/// What `addr` means is the platform's and the driver's choice; the block layer only
/// compares addresses (two segments are physically contiguous when one ends where the next
/// begins) and checks them against the queue's alignment and boundary limits.
///
/// ```
/// use blkmq_core::Segment;
/// let a = Segment::new(0x1000, 4096);
/// assert_eq!(a.end(), 0x2000);
/// assert!(a.is_contiguous_with(&Segment::new(0x2000, 512)));
/// assert!(!a.is_contiguous_with(&Segment::new(0x3000, 512)));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct Segment {
    /// Where the bytes start.
    pub addr: u64,
    /// How many bytes.
    pub len: u32,
}

impl Segment {
    /// `len` bytes at `addr`.
    ///
    /// ```
    /// use blkmq_core::Segment;
    /// let seg = Segment::new(64, 512);
    /// assert_eq!((seg.addr, seg.len), (64, 512));
    /// ```
    pub const fn new(addr: u64, len: u32) -> Self {
        Self { addr, len }
    }

    /// The address after the last byte.
    ///
    /// ```
    /// use blkmq_core::Segment;
    /// assert_eq!(Segment::new(100, 28).end(), 128);
    /// ```
    pub const fn end(&self) -> u64 {
        self.addr.wrapping_add(self.len as u64)
    }

    /// Whether `next` starts where this segment ends.
    ///
    /// ```
    /// use blkmq_core::Segment;
    /// assert!(Segment::new(0, 512).is_contiguous_with(&Segment::new(512, 512)));
    /// assert!(!Segment::new(512, 512).is_contiguous_with(&Segment::new(0, 512)));
    /// ```
    pub const fn is_contiguous_with(&self, next: &Segment) -> bool {
        self.end() == next.addr
    }
}

/// Where a walk of a bio's segments starts: the segment, and the bytes of it already
/// behind (Linux's `bvec_iter`). A bio as submitted starts at zero; a piece of a split bio
/// starts where the piece before it ended.
///
/// ```
/// use blkmq_core::DataPos;
/// assert_eq!(DataPos::default(), DataPos { seg: 0, skip: 0 });
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DataPos {
    /// Index of the segment the data starts in.
    pub seg: u32,
    /// Bytes of that segment before the data starts.
    pub skip: u32,
}

/// What the data of a bio is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// No buffer given: segments are counted as if the data were contiguous and laid out
    /// like its place on the device, and never contiguous with another bio's.
    Unmapped,
    /// One contiguous buffer at `base`, as long as the bio.
    Contiguous,
    /// A table of `nr` segments at `base`.
    Table,
}

/// The buffer's address (contiguous, `addr`) or the table's (`table`); `kind` says which.
#[derive(Clone, Copy)]
union Base {
    addr: u64,
    table: *const Segment,
}

/// The data of a [`Bio`](crate::Bio): nothing yet, one contiguous buffer, or a table of
/// segments the submitter owns; and the position the bio's bytes start at.
///
/// The table is the submitter's for the bio's whole life: it must stay where it is and
/// unchanged until the bio has ended (its `end_io` has run). Split pieces read the same
/// table from their own positions; nothing is copied. A safe way in is a `'static` table
/// ([`Bio::segments`](crate::Bio::segments)), one contiguous buffer
/// ([`Bio::buffer`](crate::Bio::buffer), no table at all), or a call that waits for the I/O
/// while it borrows the table
/// ([`RequestQueue::submit_and_wait`](crate::RequestQueue::submit_and_wait) under `std`);
/// a kernel that manages the table's life itself uses
/// [`Bio::segments_raw`](crate::Bio::segments_raw).
///
/// ```
/// use blkmq_core::{Bio, Op, Segment};
///
/// static TABLE: [Segment; 2] = [Segment::new(0x1000, 2048), Segment::new(0x8000, 2048)];
/// let bio = Bio::new(Op::Write, 0, 8).segments(&TABLE);
/// assert_eq!(bio.data.nr_segments(), 2);
/// let segs: Vec<Segment> = bio.segs().collect();
/// assert_eq!(segs, TABLE);
/// ```
#[derive(Clone, Copy)]
pub struct BioData {
    kind: Kind,
    base: Base,
    /// Segments in the table (one for a contiguous buffer, none unmapped).
    nr: u32,
    pos: DataPos,
}

// SAFETY: `BioData` holds the address of a table of plain numbers that its maker promised
// stays alive and unchanged for the bio's life (see `Bio::segments_raw`); reading it from any
// thread is sound under that promise.
unsafe impl Send for BioData {}
// SAFETY: as for `Send`: shared access only ever reads the table.
unsafe impl Sync for BioData {}

impl BioData {
    /// No buffer: what [`Bio::new`](crate::Bio::new) starts with.
    ///
    /// ```
    /// use blkmq_core::BioData;
    /// assert!(!BioData::NONE.is_mapped());
    /// assert_eq!(BioData::NONE.nr_segments(), 0);
    /// ```
    pub const NONE: BioData = BioData {
        kind: Kind::Unmapped,
        base: Base { addr: 0 },
        nr: 0,
        pos: DataPos { seg: 0, skip: 0 },
    };

    pub(crate) const fn contiguous(addr: u64) -> Self {
        Self {
            kind: Kind::Contiguous,
            base: Base { addr },
            nr: 1,
            pos: DataPos { seg: 0, skip: 0 },
        }
    }

    /// # Safety
    /// As [`Bio::segments_raw`](crate::Bio::segments_raw).
    pub(crate) const unsafe fn table(table: NonNull<Segment>, nr: u32) -> Self {
        Self {
            kind: Kind::Table,
            base: Base {
                table: table.as_ptr(),
            },
            nr,
            pos: DataPos { seg: 0, skip: 0 },
        }
    }

    /// Whether the bio names where its bytes are (a buffer or a table).
    ///
    /// ```
    /// use blkmq_core::{Bio, Op};
    /// assert!(!Bio::new(Op::Read, 0, 8).data.is_mapped());
    /// assert!(Bio::new(Op::Read, 0, 8).buffer(0x1000).data.is_mapped());
    /// ```
    pub const fn is_mapped(&self) -> bool {
        !matches!(self.kind, Kind::Unmapped)
    }

    /// Whether the data is one contiguous buffer ([`Bio::buffer`](crate::Bio::buffer)).
    ///
    /// ```
    /// use blkmq_core::{Bio, Op};
    /// assert!(Bio::new(Op::Read, 0, 8).buffer(0).data.is_contiguous());
    /// assert!(!Bio::new(Op::Read, 0, 8).data.is_contiguous());
    /// ```
    pub const fn is_contiguous(&self) -> bool {
        matches!(self.kind, Kind::Contiguous)
    }

    /// Segments in the table as submitted (one for a contiguous buffer, none unmapped); a
    /// piece of a split bio reaches only some of them.
    ///
    /// ```
    /// use blkmq_core::{Bio, Op, Segment};
    /// static TABLE: [Segment; 3] = [Segment::new(0, 512); 3];
    /// assert_eq!(Bio::new(Op::Read, 0, 3).segments(&TABLE).data.nr_segments(), 3);
    /// assert_eq!(Bio::new(Op::Read, 0, 3).buffer(0).data.nr_segments(), 1);
    /// ```
    pub const fn nr_segments(&self) -> u32 {
        self.nr
    }

    /// Where the bio's bytes start in its data.
    ///
    /// ```
    /// use blkmq_core::{Bio, DataPos, Op};
    /// assert_eq!(Bio::new(Op::Read, 0, 8).buffer(0).data.pos(), DataPos::default());
    /// ```
    pub const fn pos(&self) -> DataPos {
        self.pos
    }

    /// Segment `index` of the table, whole. Only for a table, and `index < nr`.
    #[inline]
    pub(crate) fn table_segment(&self, index: u32) -> Segment {
        debug_assert!(self.kind == Kind::Table && index < self.nr);
        // SAFETY: a table's `base` is `table` (`kind` says so).
        let table = unsafe { self.base.table };
        // SAFETY: `Bio::segments_raw`'s contract: `nr` segments live at `base`, unchanged,
        // until the bio ends, and the bio has not ended while it is walked; `index < nr`, as
        // every caller walks within the table.
        unsafe { table.add(index as usize).read() }
    }

    /// The contiguous buffer's address (zero for other kinds).
    fn addr(&self) -> u64 {
        match self.kind {
            // SAFETY: a contiguous buffer's `base` is `addr` (`kind` says so).
            Kind::Contiguous => unsafe { self.base.addr },
            _ => 0,
        }
    }

    /// The position `bytes` further on.
    pub(crate) fn advanced(&self, bytes: u64) -> DataPos {
        match self.kind {
            Kind::Contiguous | Kind::Unmapped => DataPos {
                seg: 0,
                skip: (u64::from(self.pos.skip) + bytes) as u32,
            },
            Kind::Table => {
                let mut pos = self.pos;
                let mut left = bytes;
                while left > 0 && pos.seg < self.nr {
                    let seg = self.table_segment(pos.seg);
                    let here = u64::from(seg.len.saturating_sub(pos.skip));
                    if left < here {
                        pos.skip += left as u32;
                        return pos;
                    }
                    left -= here;
                    pos = DataPos {
                        seg: pos.seg + 1,
                        skip: 0,
                    };
                }
                pos
            }
        }
    }

    pub(crate) fn set_pos(&mut self, pos: DataPos) {
        self.pos = pos;
    }

    /// Bytes the table holds from the bio's position on (`None` when there is no table).
    pub(crate) fn table_bytes(&self) -> Option<u64> {
        if self.kind != Kind::Table {
            return None;
        }
        let total: u64 = (self.pos.seg..self.nr)
            .map(|i| u64::from(self.table_segment(i).len))
            .sum();
        Some(total.saturating_sub(u64::from(self.pos.skip)))
    }
}

impl fmt::Debug for BioData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Kind::Unmapped => f.write_str("Unmapped"),
            Kind::Contiguous => write!(f, "Contiguous({:#x}, {:?})", self.addr(), self.pos),
            Kind::Table => write!(f, "Table({} segments, {:?})", self.nr, self.pos),
        }
    }
}

/// The segments of one bio, front to back, cut to the bio's length and starting at its
/// position: what [`Bio::segs`](crate::Bio::segs) returns (Linux's
/// `bio_for_each_segment`).
///
/// ```
/// use blkmq_core::{Bio, Op, Segment};
/// let bio = Bio::new(Op::Read, 0, 8).buffer(0x4000);
/// assert_eq!(bio.segs().collect::<Vec<_>>(), [Segment::new(0x4000, 4096)]);
/// ```
#[derive(Clone, Debug)]
pub struct BioSegments {
    data: BioData,
    /// Bytes still to walk.
    left: u64,
    /// The device byte of the next segment's first byte (for unmapped data).
    device_byte: u64,
}

impl BioSegments {
    pub(crate) fn new(data: BioData, bytes: u64, device_byte: u64) -> Self {
        Self {
            data,
            left: bytes,
            device_byte,
        }
    }
}

impl Iterator for BioSegments {
    type Item = Segment;

    #[inline]
    fn next(&mut self) -> Option<Segment> {
        loop {
            if self.left == 0 {
                return None;
            }
            let pos = self.data.pos;
            let (addr, avail) = match self.data.kind {
                Kind::Table => {
                    if pos.seg >= self.data.nr {
                        return None;
                    }
                    let seg = self.data.table_segment(pos.seg);
                    let skip = pos.skip.min(seg.len);
                    (
                        seg.addr.wrapping_add(u64::from(skip)),
                        u64::from(seg.len - skip),
                    )
                }
                Kind::Contiguous => (
                    self.data.addr().wrapping_add(u64::from(pos.skip)),
                    u64::from(u32::MAX),
                ),
                Kind::Unmapped => (self.device_byte, u64::from(u32::MAX)),
            };
            let len = avail.min(self.left);
            self.left -= len;
            self.device_byte += len;
            self.data.pos = if len == avail && self.data.kind == Kind::Table {
                DataPos {
                    seg: pos.seg + 1,
                    skip: 0,
                }
            } else {
                DataPos {
                    seg: pos.seg,
                    skip: pos.skip + len as u32,
                }
            };
            // A zero-length segment in a table is passed over.
            if len != 0 {
                return Some(Segment::new(addr, len as u32));
            }
        }
    }
}

/// A scatter-gather table too small for a request's segments: what
/// [`QueueLimits::map_segments`](crate::QueueLimits::map_segments) and
/// [`RequestQueue::map_sg`](crate::RequestQueue::map_sg) return instead of a partial
/// mapping. Nothing was lost: the request is as it was, and `needed` entries would hold it.
///
/// ```
/// use blkmq_core::{QueueLimits, Segment, SgTooSmall};
/// let segs = [Segment::new(0, 512), Segment::new(4096, 512)];
/// let mut table = [Segment::default(); 1];
/// let limits = QueueLimits::new(1 << 20);
/// assert_eq!(limits.map_segments(segs, &mut table), Err(SgTooSmall { needed: 2 }));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SgTooSmall {
    /// Entries the mapping needs.
    pub needed: usize,
}

impl fmt::Display for SgTooSmall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "scatter-gather table too small: {} entries needed",
            self.needed
        )
    }
}

impl crate::limits::QueueLimits {
    /// Maps `segs` into `table` as a device takes them (Linux's `blk_rq_map_sg`): a segment
    /// longer than `max_segment_size` or crossing a `seg_boundary_mask` boundary is cut
    /// there, and physically contiguous neighbours are joined while the result stays within
    /// both. Returns the entries used.
    ///
    /// # Errors
    /// [`SgTooSmall`] when `table` cannot hold them, with the number it would need; what
    /// was written to `table` is then meaningless.
    ///
    /// ```
    /// use blkmq_core::{QueueLimits, Segment};
    /// let limits = QueueLimits { max_segment_size: 8192, ..QueueLimits::new(1 << 20) };
    /// let segs = [Segment::new(0, 4096), Segment::new(4096, 4096), Segment::new(8192, 4096)];
    /// let mut table = [Segment::default(); 4];
    /// assert_eq!(limits.map_segments(segs, &mut table), Ok(2));
    /// assert_eq!(table[..2], [Segment::new(0, 8192), Segment::new(8192, 4096)]);
    /// ```
    pub fn map_segments(
        &self,
        segs: impl IntoIterator<Item = Segment>,
        table: &mut [Segment],
    ) -> Result<usize, SgTooSmall> {
        let mut used = 0usize;
        // The entry being built, not yet in `table`.
        let mut open: Option<Segment> = None;
        let mut put = |seg: Segment, used: &mut usize| {
            if let Some(slot) = table.get_mut(*used) {
                *slot = seg;
            }
            *used += 1;
        };
        for seg in segs {
            let mut at = seg.addr;
            let mut left = u64::from(seg.len);
            while left > 0 {
                // The longest piece from `at`: the segment size and the boundary window.
                let window = (at | self.seg_boundary_mask)
                    .wrapping_sub(at)
                    .saturating_add(1);
                let step = left.min(u64::from(self.max_segment_size)).min(window);
                let piece = Segment::new(at, step as u32);
                open = match open {
                    Some(prev) if self.joins(&prev, &piece) => {
                        Some(Segment::new(prev.addr, prev.len + piece.len))
                    }
                    Some(prev) => {
                        put(prev, &mut used);
                        Some(piece)
                    }
                    None => Some(piece),
                };
                at = at.wrapping_add(step);
                left -= step;
            }
        }
        if let Some(prev) = open {
            put(prev, &mut used);
        }
        if used > table.len() {
            return Err(SgTooSmall { needed: used });
        }
        Ok(used)
    }

    /// Whether `next` may join `prev` in one device segment: contiguous, within the segment
    /// size and one boundary window (Linux's `biovec_phys_mergeable` plus the size).
    pub(crate) fn joins(&self, prev: &Segment, next: &Segment) -> bool {
        let len = u64::from(prev.len) + u64::from(next.len);
        prev.is_contiguous_with(next)
            && len <= u64::from(self.max_segment_size)
            && (prev.addr | self.seg_boundary_mask)
                == (next.end().wrapping_sub(1) | self.seg_boundary_mask)
    }
}
