//! Block I/O as a submitter hands it in: [`Bio`], its operation, flags and priority, and the
//! [`Status`] it completes with.

use core::fmt;

use crate::error::ConfigError;
use crate::segment::{BioData, BioSegments, Segment};

/// What a [`Bio`] asks the device to do.
///
/// ```
/// use blkmq_core::{Bio, Op};
/// let flush = Bio::new(Op::Flush, 0, 0);
/// assert!(flush.op.is_write() && !flush.op.has_data());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Op {
    /// Read sectors into the bio's buffer.
    Read = 0,
    /// Write the bio's buffer to sectors.
    Write = 1,
    /// Flush the device's volatile cache; carries no data.
    Flush = 2,
    /// Tell the device that sectors no longer hold data.
    Discard = 3,
    /// Write zeroes to sectors without a data buffer.
    WriteZeroes = 4,
}

impl Op {
    /// Whether the operation changes the medium (everything but [`Op::Read`]).
    ///
    /// ```
    /// use blkmq_core::Op;
    /// assert!(!Op::Read.is_write());
    /// assert!(Op::Discard.is_write());
    /// ```
    pub const fn is_write(self) -> bool {
        !matches!(self, Op::Read)
    }

    /// Whether the operation moves data between memory and the device.
    ///
    /// ```
    /// use blkmq_core::Op;
    /// assert!(Op::Write.has_data());
    /// assert!(!Op::WriteZeroes.has_data());
    /// ```
    pub const fn has_data(self) -> bool {
        matches!(self, Op::Read | Op::Write)
    }
}

bitflags::bitflags! {
    /// Modifiers of a [`Bio`] (Linux's `REQ_*` flags).
    ///
    /// ```
    /// use blkmq_core::BioFlags;
    /// let flags = BioFlags::SYNC | BioFlags::FUA;
    /// assert!(flags.contains(BioFlags::SYNC));
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct BioFlags: u32 {
        /// Someone waits for this I/O (a synchronous read or an `O_DIRECT` write).
        const SYNC = 1 << 0;
        /// File system metadata.
        const META = 1 << 1;
        /// Forced unit access: on stable media before completing.
        const FUA = 1 << 2;
        /// Flush the volatile cache before this I/O.
        const PREFLUSH = 1 << 3;
        /// Never merge this bio with another.
        const NOMERGE = 1 << 4;
        /// The submitter expects more I/O right after this one (anticipation).
        const IDLE = 1 << 5;
        /// Readahead: may fail without harm.
        const RAHEAD = 1 << 6;
        /// Background work (writeback).
        const BACKGROUND = 1 << 7;
        /// Do not wait for a tag or any other resource: fail with [`Status::Again`].
        const NOWAIT = 1 << 8;
        /// Completion is polled for, not signalled by an interrupt.
        const POLLED = 1 << 9;
        /// A piece of a bio that was split to the queue's limits: its `private` names the
        /// piece's parent, which ends when its last piece does. Set by the request queue.
        const SPLIT = 1 << 10;
    }
}

/// I/O priority class, highest first (Linux's `IOPRIO_CLASS_*`).
///
/// ```
/// use blkmq_core::IoPrioClass;
/// assert!(IoPrioClass::RealTime < IoPrioClass::BestEffort);
/// assert_eq!(IoPrioClass::default(), IoPrioClass::BestEffort);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum IoPrioClass {
    /// Real time: served before everything else.
    RealTime = 1,
    /// Best effort: the default class.
    #[default]
    BestEffort = 2,
    /// Idle: served only when nothing else wants the device.
    Idle = 3,
}

/// An I/O priority: a class and a level within it, 0 (highest) to 7.
///
/// ```
/// use blkmq_core::{IoPrio, IoPrioClass};
///
/// let prio = IoPrio::new(IoPrioClass::RealTime, 0).unwrap();
/// assert_eq!(prio.class(), IoPrioClass::RealTime);
/// assert!(IoPrio::new(IoPrioClass::BestEffort, 8).is_err());
/// assert_eq!(IoPrio::default().level(), 4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IoPrio {
    class: IoPrioClass,
    level: u8,
}

impl IoPrio {
    /// The number of levels in a class.
    ///
    /// ```
    /// use blkmq_core::{IoPrio, IoPrioClass};
    /// assert!(IoPrio::new(IoPrioClass::Idle, IoPrio::LEVELS - 1).is_ok());
    /// assert!(IoPrio::new(IoPrioClass::Idle, IoPrio::LEVELS).is_err());
    /// ```
    pub const LEVELS: u8 = 8;

    /// A priority of `class` at `level`.
    ///
    /// # Errors
    /// [`ConfigError::BadPrioLevel`] when `level` is 8 or more.
    ///
    /// ```
    /// use blkmq_core::{ConfigError, IoPrio, IoPrioClass};
    /// assert_eq!(IoPrio::new(IoPrioClass::Idle, 7).unwrap().level(), 7);
    /// assert_eq!(
    ///     IoPrio::new(IoPrioClass::Idle, 8),
    ///     Err(ConfigError::BadPrioLevel { level: 8 })
    /// );
    /// ```
    pub const fn new(class: IoPrioClass, level: u8) -> Result<Self, ConfigError> {
        if level >= Self::LEVELS {
            return Err(ConfigError::BadPrioLevel { level });
        }
        Ok(Self { class, level })
    }

    /// The class.
    ///
    /// ```
    /// use blkmq_core::{IoPrio, IoPrioClass};
    /// let prio = IoPrio::new(IoPrioClass::Idle, 3).unwrap();
    /// assert_eq!(prio.class(), IoPrioClass::Idle);
    /// assert_eq!(IoPrio::default().class(), IoPrioClass::BestEffort);
    /// ```
    pub const fn class(self) -> IoPrioClass {
        self.class
    }

    /// The level within the class, 0 (highest) to 7.
    ///
    /// ```
    /// use blkmq_core::{IoPrio, IoPrioClass};
    /// let prio = IoPrio::new(IoPrioClass::RealTime, 2).unwrap();
    /// assert_eq!(prio.level(), 2);
    /// ```
    pub const fn level(self) -> u8 {
        self.level
    }
}

impl Default for IoPrio {
    /// Best effort at level 4, what Linux gives a process with no priority set.
    fn default() -> Self {
        Self {
            class: IoPrioClass::BestEffort,
            level: 4,
        }
    }
}

/// Who issued a bio: the "process" an I/O scheduler keeps apart from others.
///
/// ```
/// use blkmq_core::{Bio, IssuerId, Op};
/// let bio = Bio::new(Op::Read, 0, 8).issuer(IssuerId(7));
/// assert_ne!(bio.issuer, IssuerId::default());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IssuerId(pub u32);

/// How an I/O ended (Linux's `blk_status_t`).
///
/// ```
/// use blkmq_core::Status;
/// assert_eq!(Status::Medium.to_string(), "medium error");
/// assert!(!Status::Again.is_ok());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// The operation is not supported by the device.
    NotSupported,
    /// The I/O timed out.
    Timeout,
    /// Out of space (thin provisioning).
    NoSpace,
    /// A medium error: the data could not be read or written.
    Medium,
    /// A protection information check failed.
    Protection,
    /// The device is gone.
    Offline,
    /// The bio was outside the device, misaligned or empty.
    Invalid,
    /// A generic I/O error.
    IoErr,
    /// `NOWAIT` was set and the I/O would have had to wait.
    Again,
    /// The driver is out of a resource this request needs; retry after a completion.
    Resource,
    /// The device is out of a resource; retry after a completion on the device (or soon).
    DevResource,
}

impl Status {
    /// Every status, in the order of their numbers (`Status::ALL[s as usize] == s`).
    ///
    /// ```
    /// use blkmq_core::Status;
    /// assert_eq!(Status::ALL[0], Status::Ok);
    /// assert!(Status::ALL.iter().enumerate().all(|(i, &s)| s as usize == i));
    /// ```
    pub const ALL: [Status; 12] = [
        Status::Ok,
        Status::NotSupported,
        Status::Timeout,
        Status::NoSpace,
        Status::Medium,
        Status::Protection,
        Status::Offline,
        Status::Invalid,
        Status::IoErr,
        Status::Again,
        Status::Resource,
        Status::DevResource,
    ];

    /// Whether the status is [`Status::Ok`].
    ///
    /// ```
    /// use blkmq_core::Status;
    /// assert!(Status::Ok.is_ok());
    /// assert!(!Status::Medium.is_ok());
    /// ```
    pub const fn is_ok(self) -> bool {
        matches!(self, Status::Ok)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Status::Ok => "success",
            Status::NotSupported => "operation not supported",
            Status::Timeout => "timed out",
            Status::NoSpace => "no space left",
            Status::Medium => "medium error",
            Status::Protection => "protection information error",
            Status::Offline => "device offline",
            Status::Invalid => "invalid request",
            Status::IoErr => "I/O error",
            Status::Again => "would block",
            Status::Resource => "out of driver resources",
            Status::DevResource => "out of device resources",
        };
        f.write_str(text)
    }
}

/// The completion callback of a [`Bio`]: it gets the bio back, with its final status.
///
/// Handing the bio back lets the submitter recover its payload and reuse the bio, so a
/// completion allocates nothing.
///
/// # Reaching the submitter
///
/// The bio's [`private`](Bio::private) word is the submitter's context: a key, or the
/// address of something the submitter owns for the I/O's duration, cast to `u64` (a pointer
/// fits on every target). The callback finds its waiter from it, with no table. For that
/// to be sound, the submitter keeps what the address names alive, and in place, until the
/// callback has run; the block layer ends every bio it takes exactly once (a split bio once,
/// when its last piece ends); and the callback may run on any CPU, in whatever context the
/// driver ends requests from (an interrupt handler in a kernel), so it must not sleep or take
/// a lock the submitter may hold there. [`Completion`](crate::Completion) is such a context,
/// ready made: lock-free on the ending side, and
/// [`RequestQueue::submit_and_wait`](crate::RequestQueue::submit_and_wait) and
/// [`submit_async`](crate::RequestQueue::submit_async) use it safely.
///
/// ```
/// use blkmq_core::{Bio, EndIo, Op, Status};
///
/// fn done(bio: Bio, status: Status) {
///     assert_eq!((bio.payload, status), (3, Status::Ok));
/// }
/// let end_io: EndIo = done;
/// Bio::new(Op::Write, 0, 8).payload(3).end_io(end_io).complete(Status::Ok);
/// ```
pub type EndIo = fn(Bio, Status);

/// One block I/O as submitted: a range of sectors, an operation, and how to report the end.
///
/// The block layer never looks inside `payload` or `private`: the first is the driver's (a
/// buffer address, a descriptor index), the second the submitter's (what `end_io` needs to
/// find its waiter).
///
/// ```
/// use blkmq_core::{Bio, BioFlags, Op, Status};
///
/// fn done(bio: Bio, status: Status) {
///     assert_eq!(status, Status::Ok);
///     assert_eq!(bio.private, 7);
/// }
///
/// let bio = Bio::new(Op::Read, 2048, 8).flags(BioFlags::SYNC).private(7).end_io(done);
/// assert_eq!(bio.end_sector(), 2056);
/// assert_eq!(bio.bytes(), 4096);
/// bio.complete(Status::Ok);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Bio {
    /// First sector (512 bytes each).
    pub sector: u64,
    /// Length in sectors; zero for a flush.
    pub sectors: u32,
    /// The operation.
    pub op: Op,
    /// Modifiers.
    pub flags: BioFlags,
    /// I/O priority.
    pub prio: IoPrio,
    /// The issuer a scheduler sees.
    pub issuer: IssuerId,
    /// Opaque data for the driver.
    pub payload: u64,
    /// Where the bytes are: a buffer, a table of segments, or nothing named yet (see
    /// [`BioData`]); with the position a piece of a split bio starts at.
    pub data: BioData,
    /// Opaque data for the submitter's `end_io`: a key, or a context's address (see
    /// [`EndIo`] for what a context must promise).
    pub private: u64,
    /// Called once when the bio ends.
    pub end_io: Option<EndIo>,
}

/// Bytes in a sector, the unit of every [`Bio`] position and length.
///
/// ```
/// use blkmq_core::{Bio, Op, SECTOR_SIZE};
/// assert_eq!(SECTOR_SIZE, 512);
/// assert_eq!(Bio::new(Op::Read, 0, 8).bytes(), 4096);
/// ```
pub const SECTOR_SIZE: u64 = 512;

impl Bio {
    /// A bio of `sectors` sectors from `sector`, with no flags, default priority, issuer 0,
    /// zero payloads and no callback.
    ///
    /// ```
    /// use blkmq_core::{Bio, BioFlags, IoPrio, IssuerId, Op};
    /// let bio = Bio::new(Op::Write, 100, 16);
    /// assert_eq!((bio.op, bio.sector, bio.sectors), (Op::Write, 100, 16));
    /// assert_eq!(bio.flags, BioFlags::empty());
    /// assert_eq!((bio.prio, bio.issuer), (IoPrio::default(), IssuerId(0)));
    /// assert!(bio.end_io.is_none());
    /// ```
    pub const fn new(op: Op, sector: u64, sectors: u32) -> Self {
        Self {
            sector,
            sectors,
            op,
            flags: BioFlags::empty(),
            prio: IoPrio {
                class: IoPrioClass::BestEffort,
                level: 4,
            },
            issuer: IssuerId(0),
            payload: 0,
            data: BioData::NONE,
            private: 0,
            end_io: None,
        }
    }

    /// With `flags`.
    ///
    /// ```
    /// use blkmq_core::{Bio, BioFlags, Op};
    /// let bio = Bio::new(Op::Write, 0, 8).flags(BioFlags::SYNC | BioFlags::META);
    /// assert!(bio.flags.contains(BioFlags::META));
    /// assert!(bio.is_sync());
    /// ```
    pub const fn flags(mut self, flags: BioFlags) -> Self {
        self.flags = flags;
        self
    }

    /// With priority `prio`.
    ///
    /// ```
    /// use blkmq_core::{Bio, IoPrio, IoPrioClass, Op};
    /// let prio = IoPrio::new(IoPrioClass::RealTime, 0).unwrap();
    /// let bio = Bio::new(Op::Read, 0, 8).prio(prio);
    /// assert_eq!(bio.prio.class(), IoPrioClass::RealTime);
    /// ```
    pub const fn prio(mut self, prio: IoPrio) -> Self {
        self.prio = prio;
        self
    }

    /// With issuer `issuer`.
    ///
    /// ```
    /// use blkmq_core::{Bio, IssuerId, Op};
    /// let bio = Bio::new(Op::Read, 0, 8).issuer(IssuerId(42));
    /// assert_eq!(bio.issuer, IssuerId(42));
    /// ```
    pub const fn issuer(mut self, issuer: IssuerId) -> Self {
        self.issuer = issuer;
        self
    }

    /// With the driver's `payload`.
    ///
    /// ```
    /// use blkmq_core::{Bio, Op};
    /// let bio = Bio::new(Op::Write, 0, 8).payload(0xdead_0000);
    /// assert_eq!(bio.payload, 0xdead_0000);
    /// assert_eq!(bio.private, 0); // the submitter's value is separate
    /// ```
    pub const fn payload(mut self, payload: u64) -> Self {
        self.payload = payload;
        self
    }

    /// With its data in one contiguous buffer at `addr`, as long as the bio.
    ///
    /// The block layer never reads or writes the bytes; `addr` is handed to the driver as
    /// it is, so this is safe. The driver and the submitter agree on what it names.
    ///
    /// ```
    /// use blkmq_core::{Bio, Op, Segment};
    /// let bio = Bio::new(Op::Read, 0, 16).buffer(0x10_0000);
    /// assert_eq!(bio.segs().collect::<Vec<_>>(), [Segment::new(0x10_0000, 8192)]);
    /// ```
    pub const fn buffer(mut self, addr: u64) -> Self {
        self.data = BioData::contiguous(addr);
        self
    }

    /// With its data in the segments of `table`, front to back. Their lengths add up to the
    /// bio's bytes (a bio whose table does not ends with [`Status::Invalid`]).
    ///
    /// ```
    /// use blkmq_core::{Bio, Op, Segment};
    /// static TABLE: [Segment; 2] = [Segment::new(0x1000, 512), Segment::new(0x9000, 3584)];
    /// let bio = Bio::new(Op::Write, 0, 8).segments(&TABLE);
    /// assert_eq!(bio.segs().count(), 2);
    /// ```
    pub fn segments(self, table: &'static [Segment]) -> Self {
        // SAFETY: a `'static` table outlives every bio.
        unsafe { self.segments_raw(table) }
    }

    /// With its data in the segments of `table`, which the caller keeps alive and unchanged
    /// until the bio has ended.
    ///
    /// # Safety
    /// `table` must stay valid, in place and unmodified until the bio's `end_io` has run (or,
    /// for a bio that is never submitted, until its last copy is dropped): the block layer
    /// reads it while the bio or a piece of it is in flight, from any CPU. Submitting through
    /// [`RequestQueue::submit_and_wait`](crate::RequestQueue::submit_and_wait), which returns
    /// only after the bio ended, satisfies this for a table on the caller's stack.
    ///
    /// ```
    /// use blkmq_core::{Bio, Op, Segment};
    /// let table = [Segment::new(0x2000, 4096)];
    /// // SAFETY: the bio is dropped, never submitted, before `table`.
    /// let bio = unsafe { Bio::new(Op::Read, 0, 8).segments_raw(&table) };
    /// assert_eq!(bio.data.nr_segments(), 1);
    /// ```
    pub unsafe fn segments_raw(mut self, table: &[Segment]) -> Self {
        let nr = u32::try_from(table.len()).unwrap_or(u32::MAX);
        let start = core::ptr::NonNull::from(table).cast::<Segment>();
        // SAFETY: the caller keeps the table alive and unchanged for the bio's life; `nr` is
        // at most its length.
        self.data = unsafe { BioData::table(start, nr) };
        self
    }

    /// The bio's segments, front to back, from its position and as long as it is (Linux's
    /// `bio_for_each_segment`). A bio with no buffer named walks as one buffer laid out like
    /// its place on the device.
    ///
    /// ```
    /// use blkmq_core::{Bio, Op, Segment};
    /// static TABLE: [Segment; 2] = [Segment::new(0x1000, 2048), Segment::new(0x1800, 2048)];
    /// let bio = Bio::new(Op::Read, 0, 8).segments(&TABLE);
    /// let bytes: u64 = bio.segs().map(|s| u64::from(s.len)).sum();
    /// assert_eq!(bytes, bio.bytes());
    /// let unmapped = Bio::new(Op::Read, 2, 1);
    /// assert_eq!(unmapped.segs().collect::<Vec<_>>(), [Segment::new(1024, 512)]);
    /// ```
    pub fn segs(&self) -> BioSegments {
        if self.op.has_data() {
            BioSegments::new(self.data, self.bytes(), self.sector * SECTOR_SIZE)
        } else {
            BioSegments::new(self.data, 0, 0)
        }
    }

    /// With the submitter's `private` value.
    ///
    /// ```
    /// use blkmq_core::{Bio, Op};
    /// let bio = Bio::new(Op::Read, 0, 8).private(9);
    /// assert_eq!(bio.private, 9);
    /// assert_eq!(bio.payload, 0);
    /// ```
    pub const fn private(mut self, private: u64) -> Self {
        self.private = private;
        self
    }

    /// With the completion callback `end_io`.
    ///
    /// ```
    /// use blkmq_core::{Bio, Op, Status};
    ///
    /// fn done(bio: Bio, status: Status) {
    ///     assert_eq!((bio.sector, status), (64, Status::Medium));
    /// }
    /// let bio = Bio::new(Op::Read, 64, 8).end_io(done);
    /// assert!(bio.end_io.is_some());
    /// bio.complete(Status::Medium);
    /// ```
    pub const fn end_io(mut self, end_io: EndIo) -> Self {
        self.end_io = Some(end_io);
        self
    }

    /// The sector after the last one.
    ///
    /// ```
    /// use blkmq_core::{Bio, Op};
    /// assert_eq!(Bio::new(Op::Read, 100, 8).end_sector(), 108);
    /// assert_eq!(Bio::new(Op::Flush, 100, 0).end_sector(), 100);
    /// ```
    pub const fn end_sector(&self) -> u64 {
        self.sector + self.sectors as u64
    }

    /// Length in bytes.
    ///
    /// ```
    /// use blkmq_core::{Bio, Op, SECTOR_SIZE};
    /// assert_eq!(Bio::new(Op::Write, 0, 8).bytes(), 8 * SECTOR_SIZE);
    /// assert_eq!(Bio::new(Op::Flush, 0, 0).bytes(), 0);
    /// ```
    pub const fn bytes(&self) -> u64 {
        self.sectors as u64 * SECTOR_SIZE
    }

    /// Whether the submitter waits for it: reads always, writes when [`BioFlags::SYNC`]
    /// (or FUA / preflush) is set.
    ///
    /// ```
    /// use blkmq_core::{Bio, BioFlags, Op};
    /// assert!(Bio::new(Op::Read, 0, 8).is_sync());
    /// assert!(!Bio::new(Op::Write, 0, 8).is_sync());
    /// assert!(Bio::new(Op::Write, 0, 8).flags(BioFlags::FUA).is_sync());
    /// ```
    pub const fn is_sync(&self) -> bool {
        !self.op.is_write()
            || self.flags.intersects(
                BioFlags::SYNC
                    .union(BioFlags::FUA)
                    .union(BioFlags::PREFLUSH),
            )
    }

    /// Ends the bio: calls `end_io` (if any) with the bio and `status`.
    ///
    /// ```
    /// use blkmq_core::{Bio, Op, Status};
    /// use std::sync::atomic::{AtomicU64, Ordering};
    ///
    /// static ENDED: AtomicU64 = AtomicU64::new(0);
    /// fn done(bio: Bio, status: Status) {
    ///     assert_eq!(status, Status::Ok);
    ///     ENDED.fetch_add(bio.private, Ordering::Relaxed);
    /// }
    /// Bio::new(Op::Read, 0, 8).private(5).end_io(done).complete(Status::Ok);
    /// Bio::new(Op::Read, 0, 8).complete(Status::Ok); // no callback: nothing happens
    /// assert_eq!(ENDED.load(Ordering::Relaxed), 5);
    /// ```
    #[inline]
    pub fn complete(self, status: Status) {
        if let Some(end_io) = self.end_io {
            end_io(self, status);
        }
    }
}
