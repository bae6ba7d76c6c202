//! Device models: what a command costs given the device's state, and how many commands
//! the device takes at once.
//!
//! Every model implements [`DeviceModel`]; [`ModelDriver`](crate::ModelDriver) turns any
//! of them into a blkmq driver. The models:
//!
//! * [`MmcCard`]: an eMMC/SD card — one command on the bus, at most one more prepared
//!   (Linux's "depth 2"), per-command overhead, separate read and write bandwidths, slow
//!   small random writes. It also has a start / prepare / interrupt interface for a
//!   driver written against the card itself.
//! * [`Disk`]: a rotational disk — seek by distance, rotational position, media transfer,
//!   and an optional internal queue that reorders (NCQ).
//! * [`Ssd`]: a flash SSD with `channels` independent NAND units behind one host link.
//! * [`Raid0`]: N members of any model, striped by chunk.
//! * [`Ideal`]: a fixed latency and bandwidth with no state, for tests.
//!
//! Each model's parameters are a plain `pub` struct with the sources of its defaults, so a
//! caller can calibrate them.

mod card;
mod disk;
mod ideal;
mod raid;
mod ssd;

pub use card::{CardParams, LegacyMmc, MmcCard, QUEUE_THREAD_WAKE_NS, Transfer};
pub use disk::{Disk, DiskParams};
pub use ideal::{Ideal, IdealParams};
pub use raid::{Raid0, Raid0Params};
pub use ssd::{Ssd, SsdParams};

use std::collections::VecDeque;
use std::fmt;

use blkmq_core::{BioFlags, Op, QueueLimits, SECTOR_SIZE};

/// A command's identity, chosen by whoever submits it to a model.
///
/// ```
/// use blkmq_core::Op;
/// use blkmq_sim::{CmdId, Command, DeviceModel, Ideal, IdealParams};
/// let mut dev = Ideal::new(IdealParams::default()).unwrap();
/// let id: CmdId = 42;
/// dev.submit(0, id, Command::new(Op::Read, 0, 8)).unwrap();
/// let mut done = Vec::new();
/// dev.complete(u64::MAX, &mut done);
/// assert_eq!(done, [42]);
/// ```
pub type CmdId = u64;

/// One command as a device sees it.
///
/// ```
/// use blkmq_core::Op;
/// use blkmq_sim::Command;
///
/// let cmd = Command::new(Op::Read, 2048, 256);
/// assert_eq!((cmd.bytes(), cmd.end_sector()), (128 * 1024, 2304));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Command {
    /// What to do.
    pub op: Op,
    /// The first sector (512 bytes each).
    pub sector: u64,
    /// How many sectors (0 for a flush).
    pub sectors: u64,
    /// The request's flags (FUA, sync, ...).
    pub flags: BioFlags,
}

impl Command {
    /// A command with no flags.
    ///
    /// ```
    /// use blkmq_core::{BioFlags, Op};
    /// use blkmq_sim::Command;
    /// let cmd = Command::new(Op::Write, 8, 8);
    /// assert_eq!(cmd.flags, BioFlags::empty());
    /// ```
    pub const fn new(op: Op, sector: u64, sectors: u64) -> Self {
        Self {
            op,
            sector,
            sectors,
            flags: BioFlags::empty(),
        }
    }

    /// Its length in bytes.
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::Command;
    /// assert_eq!(Command::new(Op::Read, 0, 8).bytes(), 4096);
    /// ```
    pub const fn bytes(&self) -> u64 {
        self.sectors * SECTOR_SIZE
    }

    /// The sector just past its end.
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::Command;
    /// assert_eq!(Command::new(Op::Read, 100, 8).end_sector(), 108);
    /// ```
    pub const fn end_sector(&self) -> u64 {
        self.sector + self.sectors
    }
}

/// What a device has done so far.
///
/// ```
/// use blkmq_core::Op;
/// use blkmq_sim::{Command, DeviceModel, Ideal, IdealParams};
///
/// let mut dev = Ideal::new(IdealParams::default()).unwrap();
/// dev.submit(0, 1, Command::new(Op::Write, 0, 8)).unwrap();
/// let mut done = Vec::new();
/// dev.complete(dev.next_completion().unwrap(), &mut done);
/// let stats = dev.stats();
/// assert_eq!((stats.commands, stats.bytes_written, stats.bytes_read), (1, 4096, 0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Commands started.
    pub commands: u64,
    /// Bytes read by the commands started.
    pub bytes_read: u64,
    /// Bytes written by the commands started.
    pub bytes_written: u64,
    /// Writes that paid a random-write (garbage collection) penalty.
    pub random_writes: u64,
    /// The summed service times of the commands started (for a device that runs one
    /// command at a time, the time it was busy).
    pub busy_ns: u64,
}

impl DeviceStats {
    /// Counts a command started.
    pub(crate) fn count(&mut self, cmd: &Command) {
        self.commands += 1;
        match cmd.op {
            Op::Read => self.bytes_read += cmd.bytes(),
            Op::Write => self.bytes_written += cmd.bytes(),
            _ => {}
        }
    }
}

/// A device model: the cost of a command given the device's state, and how many commands
/// it takes at once.
///
/// The driver offers commands with [`submit`](Self::submit) (refused when the device
/// holds [`queue_depth`](Self::queue_depth) already), asks when the next one ends
/// ([`next_completion`](Self::next_completion)), and at that virtual time collects what
/// ended ([`complete`](Self::complete)). Models are deterministic: the same calls give the
/// same times.
///
/// ```
/// use blkmq_core::Op;
/// use blkmq_sim::{Command, DeviceModel, Ideal, IdealParams};
///
/// let params = IdealParams { latency_ns: 1_000, bandwidth: 0, queue_depth: 1, ..Default::default() };
/// let mut dev = Ideal::new(params).unwrap();
/// dev.submit(0, 7, Command::new(Op::Read, 0, 8)).unwrap();
/// assert!(dev.submit(0, 8, Command::new(Op::Read, 8, 8)).is_err()); // full
/// assert_eq!(dev.next_completion(), Some(1_000));
/// let mut done = Vec::new();
/// dev.complete(1_000, &mut done);
/// assert_eq!(done, [7]);
/// assert_eq!(dev.in_flight(), 0);
/// ```
pub trait DeviceModel: Send + 'static {
    /// A short name for reports.
    ///
    /// ```
    /// use blkmq_sim::{DeviceModel, Disk, DiskParams};
    /// assert_eq!(Disk::new(DiskParams::default()).unwrap().name(), "disk");
    /// ```
    fn name(&self) -> &'static str;

    /// The capacity in sectors.
    ///
    /// ```
    /// use blkmq_sim::{CardParams, DeviceModel, MmcCard};
    /// let card = MmcCard::new(CardParams::default()).unwrap();
    /// assert_eq!(card.capacity(), CardParams::default().capacity_sectors);
    /// ```
    fn capacity(&self) -> u64;

    /// How many commands the device holds at once (executing and queued inside it).
    ///
    /// ```
    /// use blkmq_sim::{CardParams, DeviceModel, MmcCard};
    /// assert_eq!(MmcCard::new(CardParams::default()).unwrap().queue_depth(), 2);
    /// ```
    fn queue_depth(&self) -> usize;

    /// The queue limits a driver of this device sets.
    ///
    /// ```
    /// use blkmq_sim::{CardParams, DeviceModel, MmcCard};
    /// let card = MmcCard::new(CardParams::default()).unwrap();
    /// assert_eq!(card.limits().max_sectors, 1024); // 512 KiB, as sdhci hosts allow
    /// assert!(card.limits().validate().is_ok());
    /// ```
    fn limits(&self) -> QueueLimits;

    /// How long `cmd` would take if it started at `start_ns` on the device as it is now
    /// (its head position, the last write, its busy units), without changing anything.
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::{Command, DeviceModel, Ideal, IdealParams};
    /// let dev = Ideal::new(IdealParams { latency_ns: 100, bandwidth: 1_000_000_000, ..Default::default() }).unwrap();
    /// assert_eq!(dev.service_ns(0, &Command::new(Op::Read, 0, 2)), 100 + 1_024);
    /// ```
    fn service_ns(&self, start_ns: u64, cmd: &Command) -> u64;

    /// Offers `cmd` at `now_ns`; gives it back when the device is full.
    ///
    /// # Errors
    /// The command, untouched, when the device holds [`queue_depth`](Self::queue_depth)
    /// commands already.
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::{CardParams, Command, DeviceModel, MmcCard};
    /// let mut card = MmcCard::new(CardParams::default()).unwrap();
    /// card.submit(0, 1, Command::new(Op::Read, 0, 8)).unwrap(); // on the bus
    /// card.submit(0, 2, Command::new(Op::Read, 8, 8)).unwrap(); // prepared
    /// assert!(card.submit(0, 3, Command::new(Op::Read, 16, 8)).is_err());
    /// ```
    fn submit(&mut self, now_ns: u64, id: CmdId, cmd: Command) -> Result<(), Command>;

    /// When the device next needs its driver: the next command's end, or for a device
    /// made of others (a volume), the next end of any part of a command. `None` when
    /// nothing is in progress.
    ///
    /// ```
    /// use blkmq_sim::{DeviceModel, Disk, DiskParams};
    /// assert_eq!(Disk::new(DiskParams::default()).unwrap().next_completion(), None);
    /// ```
    fn next_completion(&self) -> Option<u64>;

    /// Collects, in `done`, every command that ended by `now_ns`, in the order they ended,
    /// and starts whatever the device had waiting.
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::{Command, DeviceModel, Ideal, IdealParams};
    /// let mut dev = Ideal::new(IdealParams { latency_ns: 10, bandwidth: 0, ..Default::default() }).unwrap();
    /// dev.submit(0, 1, Command::new(Op::Read, 0, 8)).unwrap();
    /// let mut done = Vec::new();
    /// dev.complete(9, &mut done);
    /// assert!(done.is_empty()); // not yet
    /// dev.complete(10, &mut done);
    /// assert_eq!(done, [1]);
    /// ```
    fn complete(&mut self, now_ns: u64, done: &mut Vec<CmdId>);

    /// Commands held (executing or waiting inside the device).
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::{Command, DeviceModel, Disk, DiskParams};
    /// let mut disk = Disk::new(DiskParams::default()).unwrap();
    /// disk.submit(0, 1, Command::new(Op::Read, 0, 8)).unwrap();
    /// assert_eq!(disk.in_flight(), 1);
    /// ```
    fn in_flight(&self) -> usize;

    /// What the device has done so far.
    ///
    /// ```
    /// use blkmq_sim::{DeviceModel, Ssd, SsdParams};
    /// assert_eq!(Ssd::new(SsdParams::default()).unwrap().stats().commands, 0);
    /// ```
    fn stats(&self) -> DeviceStats;
}

/// A parameter a model refuses: which one, and why.
///
/// ```
/// use blkmq_sim::{DiskParams, Disk};
/// let err = Disk::new(DiskParams { rpm: 0, ..DiskParams::default() }).unwrap_err();
/// assert_eq!(err.what, "rpm");
/// assert!(err.to_string().contains("rpm"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamError {
    /// The parameter.
    pub what: &'static str,
    /// What is wrong with it.
    pub why: &'static str,
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad device parameter `{}`: {}", self.what, self.why)
    }
}

impl std::error::Error for ParamError {}

/// `Err(ParamError)` unless `ok`.
pub(crate) fn require(ok: bool, what: &'static str, why: &'static str) -> Result<(), ParamError> {
    if ok {
        Ok(())
    } else {
        Err(ParamError { what, why })
    }
}

/// The time `bytes` take at `bytes_per_sec`, in nanoseconds, rounded down (0 when the
/// rate is 0, meaning "no transfer cost").
///
/// ```
/// use blkmq_sim::transfer_ns;
/// assert_eq!(transfer_ns(4096, 4_096_000_000), 1_000);
/// assert_eq!(transfer_ns(1, 3_000_000_000), 0); // a third of a nanosecond, rounded down
/// assert_eq!(transfer_ns(1 << 20, 0), 0);
/// ```
pub fn transfer_ns(bytes: u64, bytes_per_sec: u64) -> u64 {
    if bytes_per_sec == 0 {
        return 0;
    }
    (u128::from(bytes) * 1_000_000_000 / u128::from(bytes_per_sec)) as u64
}

/// The limits every model starts from: Linux's defaults, `capacity` sectors.
pub(crate) fn base_limits(capacity: u64, max_sectors: u32, max_segments: u32) -> QueueLimits {
    QueueLimits {
        max_sectors,
        max_segments,
        ..QueueLimits::new(capacity)
    }
}

/// A resource busy over disjoint intervals of time (a host link): reservations fill the
/// earliest gap that fits, so a transfer ready early does not queue behind one ready late.
#[derive(Clone, Debug, Default)]
pub(crate) struct Timeline {
    /// Busy intervals `[start, end)`, sorted and disjoint.
    busy: VecDeque<(u64, u64)>,
}

impl Timeline {
    /// The earliest start at or after `earliest` with `len` free after it.
    pub(crate) fn find(&self, earliest: u64, len: u64) -> u64 {
        let mut at = earliest;
        for &(start, end) in &self.busy {
            if end <= at {
                continue;
            }
            if at + len <= start {
                break;
            }
            at = at.max(end);
        }
        at
    }

    /// Reserves `len` from the earliest fitting start at or after `earliest`; returns it.
    pub(crate) fn reserve(&mut self, earliest: u64, len: u64) -> u64 {
        let at = self.find(earliest, len);
        if len > 0 {
            let pos = self.busy.partition_point(|&(start, _)| start < at);
            self.busy.insert(pos, (at, at + len));
        }
        at
    }

    /// Forgets intervals over by `now`.
    pub(crate) fn prune(&mut self, now: u64) {
        while self.busy.front().is_some_and(|&(_, end)| end <= now) {
            self.busy.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Timeline;

    #[test]
    fn timeline_fills_gaps_in_order() {
        let mut t = Timeline::default();
        assert_eq!(t.reserve(100, 10), 100);
        assert_eq!(t.reserve(0, 10), 0); // fits before
        assert_eq!(t.reserve(5, 10), 10); // after [0, 10)
        assert_eq!(t.reserve(15, 80), 20); // [20, 100) is free
        assert_eq!(t.reserve(15, 1), 110); // everything to 110 is taken
        t.prune(100); // [100, 110) and [110, 111) are left
        assert_eq!(t.find(100, 1), 111);
        assert_eq!(t.find(0, 100), 0); // the past is forgotten
    }
}

/// Commands in a device that serves them in parallel, by when each ends (ties in arrival
/// order): what [`DeviceModel::next_completion`] and [`DeviceModel::complete`] read.
#[derive(Debug, Default)]
pub(crate) struct Running {
    heap: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u64, CmdId)>>,
    arrivals: u64,
}

impl Running {
    /// `id`, ending at `end_ns`.
    pub(crate) fn push(&mut self, end_ns: u64, id: CmdId) {
        self.heap
            .push(std::cmp::Reverse((end_ns, self.arrivals, id)));
        self.arrivals += 1;
    }

    /// When the first of them ends.
    pub(crate) fn next_end(&self) -> Option<u64> {
        self.heap.peek().map(|std::cmp::Reverse((end, _, _))| *end)
    }

    /// Moves those ended by `now_ns` to `done`, in order.
    pub(crate) fn complete(&mut self, now_ns: u64, done: &mut Vec<CmdId>) {
        while let Some(&std::cmp::Reverse((end, _, id))) = self.heap.peek() {
            if end > now_ns {
                break;
            }
            self.heap.pop();
            done.push(id);
        }
    }

    /// How many there are.
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}
