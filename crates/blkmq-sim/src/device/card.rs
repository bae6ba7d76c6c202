//! An eMMC/SD card: one command on the bus, at most one more prepared by the host while it
//! runs (Linux's MMC "depth 2"), a per-command cost, a read and a write bandwidth, and the
//! flash translation layer's slow small random writes.

use blkmq_core::{Op, QueueLimits};

use super::{CmdId, Command, DeviceModel, DeviceStats, ParamError, require, transfer_ns};

/// One direction's cost on the card: a fixed command time, then the bytes at a bandwidth.
///
/// ```
/// use blkmq_sim::Transfer;
/// let read = Transfer { command_ns: 195_000, bandwidth: 23_290_000 };
/// assert_eq!(read.time_ns(131_072), 195_000 + 5_627_823);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// The card's time per command (command, response, access latency).
    pub command_ns: u64,
    /// Bytes per second once data moves.
    pub bandwidth: u64,
}

impl Transfer {
    /// The card's time for a command of `bytes`.
    ///
    /// ```
    /// use blkmq_sim::Transfer;
    /// let t = Transfer { command_ns: 100, bandwidth: 1_000_000_000 };
    /// assert_eq!(t.time_ns(0), 100);
    /// assert_eq!(t.time_ns(1_000), 1_100);
    /// ```
    pub fn time_ns(&self, bytes: u64) -> u64 {
        self.command_ns + transfer_ns(bytes, self.bandwidth)
    }
}

/// The parameters of an [`MmcCard`], with the sources of their defaults below.
///
/// ```
/// use blkmq_sim::CardParams;
/// let p = CardParams::default();
/// assert_eq!(p.read.bandwidth, 23_290_000);
/// assert_eq!(p.write.bandwidth, 7_535_000);
/// assert_eq!(p.alloc_unit_bytes, 512 * 1024);
/// ```
///
/// # Where the defaults come from
///
/// From the seed's "BEFORE" figures (an SD card on Linux 4.9's legacy MMC path, iozone with
/// direct I/O at queue depth 1, and a 1 GiB `dd` through 128 KiB readahead with two
/// requests in flight), taking out what the legacy path's queue thread added
/// ([`QUEUE_THREAD_WAKE_NS`], see [`LegacyMmc`]):
///
/// * iozone reads from 4 KiB to 128 KiB lie on `0.455 ms + 0.0523 ms/KiB`: the host's
///   preparation and the card's command, unhidden at depth 1, plus two wake-ups of the
///   queue thread (one to take the request, one to see its interrupt);
/// * `dd`, whose preparations hide behind the previous transfer, gives 21.4 MiB/s, that is
///   5.833 ms per 128 KiB from one command's start to the next's, one wake-up of the
///   thread (the interrupt to the next command's start) included;
/// * a 16 MiB direct read (32 requests of 512 KiB, pipelined) gives 22399 kB/s.
///
/// Solved together: the card reads at 23.29 MB/s after a 195 µs command, and the host
/// prepares in 240 µs + 8.3 µs/KiB (123 MB/s); the thread's 10 µs wake-ups make up the
/// rest. The write column, with the same preparation, gives 7.535 MB/s after a 213 µs
/// command; 4 KiB writes cost 0.84 ms more than the line (a partial 8 KiB page); random
/// writes cost 100 ms at 4 KiB falling to nothing at 512 KiB (3048 kB/s at 256 KiB,
/// 7228 kB/s at 512 KiB): `random_write_ns` 98.9 ms over a 512 KiB allocation unit.
/// Random reads match sequential ones in the seed (6025 vs 6052 kB/s at 4 KiB), so
/// `random_read_ns` is 0. The capacity is an "8 GB" SDHC card as Linux reports one
/// (7.40 GiB, 15523840 sectors); the request limits are those of an sdhci host (512 KiB
/// requests, 128 segments of at most 64 KiB).
///
/// Driven as the legacy path drove it ([`LegacyMmc`] behind
/// [`ModelDriver`](crate::ModelDriver)), the defaults give the seed's `dd` in 47.79 s
/// (seed: 47.78 s), its `find` ([`FindParams`](crate::FindParams) defaults) in 3.61 s
/// (3.60 s), and every iozone figure within 16% of the seed's (the crate's `seed_mmc`
/// example prints them side by side).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CardParams {
    /// Capacity in sectors (default 15523840: an "8 GB" SDHC card).
    pub capacity_sectors: u64,
    /// The host's fixed preparation time per request (default 240 µs).
    pub prepare_ns: u64,
    /// The host's preparation rate per byte (default 123 MB/s: 8.3 µs per KiB).
    pub prepare_bw: u64,
    /// Reads on the card (default 195 µs + 23.29 MB/s).
    pub read: Transfer,
    /// Writes on the card (default 213 µs + 7.535 MB/s).
    pub write: Transfer,
    /// Extra time of a read not following the last command (default 0).
    pub random_read_ns: u64,
    /// The flash page (default 8 KiB): shorter writes pay `partial_page_ns`.
    pub write_page_bytes: u64,
    /// Extra time of a write shorter than a page (default 0.84 ms).
    pub partial_page_ns: u64,
    /// The allocation unit the translation layer rewrites (default 512 KiB).
    pub alloc_unit_bytes: u64,
    /// Extra time of a tiny random write, falling to 0 at a whole allocation unit
    /// (default 98.9 ms).
    pub random_write_ns: u64,
    /// A cache flush on top of a write command's time (default 0: SD cards have no
    /// cache to flush).
    pub flush_ns: u64,
    /// The largest request in sectors (default 1024: 512 KiB).
    pub max_sectors: u32,
    /// Segments per request (default 128).
    pub max_segments: u32,
    /// The largest segment in bytes (default 64 KiB).
    pub max_segment_size: u32,
}

impl Default for CardParams {
    fn default() -> Self {
        Self {
            capacity_sectors: 15_523_840,
            prepare_ns: 240_000,
            prepare_bw: 123_000_000,
            read: Transfer {
                command_ns: 195_000,
                bandwidth: 23_290_000,
            },
            write: Transfer {
                command_ns: 213_000,
                bandwidth: 7_535_000,
            },
            random_read_ns: 0,
            write_page_bytes: 8 * 1024,
            partial_page_ns: 840_000,
            alloc_unit_bytes: 512 * 1024,
            random_write_ns: 98_900_000,
            flush_ns: 0,
            max_sectors: 1024,
            max_segments: 128,
            max_segment_size: 64 * 1024,
        }
    }
}

/// The command on the bus.
#[derive(Clone, Copy, Debug)]
struct OnBus {
    id: CmdId,
    done_at: u64,
}

/// The command the host prepared.
#[derive(Clone, Copy, Debug)]
struct Prepared {
    id: CmdId,
    cmd: Command,
    ready_at: u64,
}

/// An eMMC/SD card: one command on the bus, at most one more prepared by the host while it
/// runs (Linux's MMC "depth 2"), and the flash translation layer's slow small random
/// writes; the cost of a command is below.
///
/// As a [`DeviceModel`] it starts a command at once when idle, prepares one more while
/// busy, and starts the prepared one when the bus frees. A driver written against the
/// card itself uses the same steps directly: [`prepare`](Self::prepare),
/// [`start_prepared`](Self::start_prepared) (or [`start`](Self::start) for both), and at
/// the completion time [`finish`](Self::finish), as an interrupt handler would.
///
/// ```
/// use blkmq_core::Op;
/// use blkmq_sim::{CardParams, Command, MmcCard};
///
/// let p = CardParams::default();
/// let mut card = MmcCard::new(p).unwrap();
/// let read = Command::new(Op::Read, 0, 256); // 128 KiB
/// let done = card.start(0, 1, read).unwrap();
/// assert_eq!(done, p.prepare_ns + 1_065_626 + p.read.time_ns(128 * 1024));
/// card.prepare(0, 2, Command::new(Op::Read, 256, 256)).unwrap(); // while 1 is on the bus
/// assert_eq!(card.finish(done), Some(1)); // the interrupt
/// let next = card.start_prepared(done).unwrap(); // preparation already done
/// assert_eq!(next, done + p.read.time_ns(128 * 1024));
/// ```
///
/// # The cost of a command
///
/// A command costs the host a preparation (building the command, mapping the buffers for
/// DMA, cache maintenance): `prepare_ns + bytes / prepare_bw`. The card then takes
/// `command_ns + bytes / bandwidth` of its read or write [`Transfer`], plus:
///
/// * reads not starting where the last command ended: `random_read_ns`;
/// * writes shorter than `write_page_bytes`: `partial_page_ns` (the card programs a whole
///   page, reading back the part it keeps);
/// * writes not starting where the last write ended: `random_write_ns` scaled by how much
///   of an allocation unit the write leaves unwritten, `(1 - min(bytes, au) / au)`. A
///   small random write makes the card copy the rest of an allocation unit (garbage
///   collection); a write of a whole unit costs nothing extra.
///
/// A command prepared while another is on the bus has its preparation hidden behind that
/// one: it starts when the bus frees, or when its preparation ends if that is later.
#[derive(Debug)]
pub struct MmcCard {
    params: CardParams,
    on_bus: Option<OnBus>,
    prepared: Option<Prepared>,
    /// The sector after the last command started.
    last_end: u64,
    /// The sector after the last write started.
    last_write_end: u64,
    stats: DeviceStats,
}

impl MmcCard {
    /// A card with `params`.
    ///
    /// # Errors
    /// A zero capacity, bandwidth, page or allocation unit, or limits that blkmq refuses.
    ///
    /// ```
    /// use blkmq_sim::{CardParams, MmcCard, Transfer};
    /// assert!(MmcCard::new(CardParams::default()).is_ok());
    /// let bad = CardParams { write: Transfer { command_ns: 0, bandwidth: 0 }, ..CardParams::default() };
    /// assert_eq!(MmcCard::new(bad).unwrap_err().what, "write.bandwidth");
    /// ```
    pub fn new(params: CardParams) -> Result<Self, ParamError> {
        require(
            params.capacity_sectors > 0,
            "capacity_sectors",
            "must not be 0",
        )?;
        require(params.prepare_bw > 0, "prepare_bw", "must not be 0")?;
        require(params.read.bandwidth > 0, "read.bandwidth", "must not be 0")?;
        require(
            params.write.bandwidth > 0,
            "write.bandwidth",
            "must not be 0",
        )?;
        require(
            params.write_page_bytes > 0,
            "write_page_bytes",
            "must not be 0",
        )?;
        require(
            params.alloc_unit_bytes > 0,
            "alloc_unit_bytes",
            "must not be 0",
        )?;
        let card = Self {
            params,
            on_bus: None,
            prepared: None,
            last_end: 0,
            last_write_end: 0,
            stats: DeviceStats::default(),
        };
        require(
            card.limits().validate().is_ok(),
            "max_sectors",
            "the request limits are not valid queue limits",
        )?;
        Ok(card)
    }

    /// The parameters.
    ///
    /// ```
    /// use blkmq_sim::{CardParams, MmcCard};
    /// let card = MmcCard::new(CardParams::default()).unwrap();
    /// assert_eq!(card.params().prepare_ns, 240_000);
    /// ```
    pub fn params(&self) -> &CardParams {
        &self.params
    }

    /// The host's preparation time for a command of `bytes`.
    ///
    /// ```
    /// use blkmq_sim::{CardParams, MmcCard};
    /// let card = MmcCard::new(CardParams::default()).unwrap();
    /// assert_eq!(card.prepare_ns(0), 240_000);
    /// assert_eq!(card.prepare_ns(123_000), 240_000 + 1_000_000);
    /// ```
    pub fn prepare_ns(&self, bytes: u64) -> u64 {
        self.params.prepare_ns + transfer_ns(bytes, self.params.prepare_bw)
    }

    /// The card's time for `cmd` if it started now (after the commands started so far),
    /// preparation not included.
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::{CardParams, Command, MmcCard};
    /// let p = CardParams::default();
    /// let card = MmcCard::new(p).unwrap();
    /// // A 4 KiB write at sector 80: shorter than a page, and random (the last write
    /// // "ended" at sector 0), leaving 508 of 512 KiB of its allocation unit.
    /// let t = card.card_ns(&Command::new(Op::Write, 80, 8));
    /// assert_eq!(t, p.write.time_ns(4096) + 840_000 + 98_900_000 * 508 / 512);
    /// ```
    pub fn card_ns(&self, cmd: &Command) -> u64 {
        let p = &self.params;
        let bytes = cmd.bytes();
        match cmd.op {
            Op::Read => {
                let random = if cmd.sector == self.last_end {
                    0
                } else {
                    p.random_read_ns
                };
                p.read.time_ns(bytes) + random
            }
            Op::Write => {
                let mut t = p.write.time_ns(bytes);
                if bytes < p.write_page_bytes {
                    t += p.partial_page_ns;
                }
                if cmd.sector != self.last_write_end {
                    let au = p.alloc_unit_bytes;
                    let left = au - bytes.min(au);
                    t += (u128::from(p.random_write_ns) * u128::from(left) / u128::from(au)) as u64;
                }
                t
            }
            Op::Flush => p.write.command_ns + p.flush_ns,
            Op::Discard | Op::WriteZeroes => p.write.command_ns,
        }
    }

    /// Whether nothing is on the bus.
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::{CardParams, Command, MmcCard};
    /// let mut card = MmcCard::new(CardParams::default()).unwrap();
    /// assert!(card.is_idle());
    /// card.start(0, 1, Command::new(Op::Read, 0, 8)).unwrap();
    /// assert!(!card.is_idle());
    /// ```
    pub fn is_idle(&self) -> bool {
        self.on_bus.is_none()
    }

    /// The command on the bus and when it ends.
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::{CardParams, Command, MmcCard};
    /// let mut card = MmcCard::new(CardParams::default()).unwrap();
    /// let done = card.start(0, 9, Command::new(Op::Read, 0, 8)).unwrap();
    /// assert_eq!(card.on_bus(), Some((9, done)));
    /// ```
    pub fn on_bus(&self) -> Option<(CmdId, u64)> {
        self.on_bus.map(|b| (b.id, b.done_at))
    }

    /// The prepared command, if any.
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::{CardParams, Command, MmcCard};
    /// let mut card = MmcCard::new(CardParams::default()).unwrap();
    /// card.prepare(0, 4, Command::new(Op::Write, 0, 8)).unwrap();
    /// assert_eq!(card.prepared(), Some(4));
    /// ```
    pub fn prepared(&self) -> Option<CmdId> {
        self.prepared.map(|p| p.id)
    }

    /// Prepares `cmd` on the host from `now_ns` (ready after its preparation time), to be
    /// started with [`start_prepared`](Self::start_prepared).
    ///
    /// # Errors
    /// The command back when one is prepared already.
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::{CardParams, Command, MmcCard};
    /// let mut card = MmcCard::new(CardParams::default()).unwrap();
    /// card.prepare(0, 1, Command::new(Op::Read, 0, 8)).unwrap();
    /// assert!(card.prepare(0, 2, Command::new(Op::Read, 8, 8)).is_err());
    /// ```
    pub fn prepare(&mut self, now_ns: u64, id: CmdId, cmd: Command) -> Result<(), Command> {
        if self.prepared.is_some() {
            return Err(cmd);
        }
        let ready_at = now_ns + self.prepare_ns(cmd.bytes());
        self.prepared = Some(Prepared { id, cmd, ready_at });
        Ok(())
    }

    /// Starts the prepared command on an idle bus, when its preparation is done or now,
    /// whichever is later; returns when it ends (when the interrupt comes). `None` when
    /// the bus is busy or nothing is prepared.
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::{CardParams, Command, MmcCard};
    /// let p = CardParams::default();
    /// let mut card = MmcCard::new(p).unwrap();
    /// assert_eq!(card.start_prepared(0), None);
    /// card.prepare(0, 1, Command::new(Op::Read, 0, 0)).unwrap();
    /// assert_eq!(card.start_prepared(0), Some(p.prepare_ns + p.read.command_ns));
    /// ```
    pub fn start_prepared(&mut self, now_ns: u64) -> Option<u64> {
        if self.on_bus.is_some() {
            return None;
        }
        let prepared = self.prepared.take()?;
        let start = now_ns.max(prepared.ready_at);
        let cmd = prepared.cmd;
        let card = self.card_ns(&cmd);
        self.last_end = cmd.end_sector();
        if cmd.op == Op::Write {
            if cmd.sector != self.last_write_end && cmd.bytes() < self.params.alloc_unit_bytes {
                self.stats.random_writes += 1;
            }
            self.last_write_end = cmd.end_sector();
        }
        self.stats.count(&cmd);
        self.stats.busy_ns += card;
        let done_at = start + card;
        self.on_bus = Some(OnBus {
            id: prepared.id,
            done_at,
        });
        Some(done_at)
    }

    /// Prepares and starts `cmd` on an idle card with nothing prepared; returns when it
    /// ends.
    ///
    /// # Errors
    /// The command back when the bus is busy or another command is prepared.
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::{CardParams, Command, MmcCard};
    /// let mut card = MmcCard::new(CardParams::default()).unwrap();
    /// card.start(0, 1, Command::new(Op::Read, 0, 8)).unwrap();
    /// assert!(card.start(0, 2, Command::new(Op::Read, 8, 8)).is_err());
    /// ```
    pub fn start(&mut self, now_ns: u64, id: CmdId, cmd: Command) -> Result<u64, Command> {
        if self.on_bus.is_some() {
            return Err(cmd);
        }
        self.prepare(now_ns, id, cmd)?;
        Ok(self.start_prepared(now_ns).unwrap_or(now_ns))
    }

    /// The interrupt: ends the command on the bus if it is done by `now_ns`, and returns
    /// it. The prepared command, if any, waits for [`start_prepared`](Self::start_prepared).
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::{CardParams, Command, MmcCard};
    /// let mut card = MmcCard::new(CardParams::default()).unwrap();
    /// let done = card.start(0, 5, Command::new(Op::Read, 0, 8)).unwrap();
    /// assert_eq!(card.finish(done - 1), None);
    /// assert_eq!(card.finish(done), Some(5));
    /// assert!(card.is_idle());
    /// ```
    pub fn finish(&mut self, now_ns: u64) -> Option<CmdId> {
        let on_bus = self.on_bus?;
        if on_bus.done_at > now_ns {
            return None;
        }
        self.on_bus = None;
        Some(on_bus.id)
    }
}

impl DeviceModel for MmcCard {
    fn name(&self) -> &'static str {
        "mmc"
    }

    fn capacity(&self) -> u64 {
        self.params.capacity_sectors
    }

    fn queue_depth(&self) -> usize {
        2
    }

    fn limits(&self) -> QueueLimits {
        QueueLimits {
            max_segment_size: self.params.max_segment_size,
            ..super::base_limits(
                self.params.capacity_sectors,
                self.params.max_sectors,
                self.params.max_segments,
            )
        }
    }

    /// Preparation plus the card's time, as for a command started on an idle card.
    fn service_ns(&self, _start_ns: u64, cmd: &Command) -> u64 {
        self.prepare_ns(cmd.bytes()) + self.card_ns(cmd)
    }

    fn submit(&mut self, now_ns: u64, id: CmdId, cmd: Command) -> Result<(), Command> {
        self.prepare(now_ns, id, cmd)?;
        self.start_prepared(now_ns);
        Ok(())
    }

    fn next_completion(&self) -> Option<u64> {
        self.on_bus.map(|b| b.done_at)
    }

    fn complete(&mut self, now_ns: u64, done: &mut Vec<CmdId>) {
        while let Some(id) = self.finish(now_ns) {
            done.push(id);
            self.start_prepared(now_ns);
        }
    }

    fn in_flight(&self) -> usize {
        usize::from(self.on_bus.is_some()) + usize::from(self.prepared.is_some())
    }

    fn stats(&self) -> DeviceStats {
        self.stats
    }
}

/// How long Linux's legacy MMC queue thread (`mmcqd`) takes from being woken to acting: from
/// the request or the interrupt that wakes it to the command it starts or the request it
/// ends (10 µs).
///
/// About one wake-up and context switch of a kernel thread on the seed's class of machine
/// (an ARM SoC of 2016 at about 1 GHz), where an interrupt-to-thread wake-up alone is
/// usually measured in tens of microseconds: a low estimate. The `mmc_host` example's
/// tests check its comparisons with 3 µs and 40 µs as well, the card's defaults refitted
/// for each.
pub const QUEUE_THREAD_WAKE_NS: u64 = 10_000;

/// An [`MmcCard`] driven as Linux's legacy MMC path drove it, from a kernel thread: the
/// set-up the seed's BEFORE figures were measured with, and [`CardParams`]' defaults
/// fitted against.
///
/// The thread (`mmc_queue_thread()`) takes every request and starts every command itself,
/// so each start and each completion waits for it to wake:
///
/// * a request reaching an idle thread is prepared and started `wake_ns` after it
///   arrives;
/// * the card's interrupt wakes the thread, which `wake_ns` later ends the request and
///   starts the command it prepared meanwhile: the card idles `wake_ns` between two
///   commands, however many are waiting.
///
/// A driver that starts the prepared command from the interrupt and takes requests in the
/// submitter's context (as blk-mq lets it) pays neither.
///
/// ```
/// use blkmq_core::Op;
/// use blkmq_sim::{CardParams, Command, DeviceModel, LegacyMmc, MmcCard};
///
/// let p = CardParams::default();
/// let wake = 10_000;
/// let mut legacy = LegacyMmc::new(MmcCard::new(p).unwrap(), wake);
/// let read = Command::new(Op::Read, 0, 256); // 128 KiB
/// legacy.submit(0, 1, read).unwrap();
/// let first = wake + p.prepare_ns + 1_065_626 + p.read.time_ns(128 * 1024);
/// assert_eq!(legacy.next_completion(), Some(first + wake)); // the thread sees it
/// legacy.submit(0, 2, Command::new(Op::Read, 256, 256)).unwrap(); // prepared meanwhile
/// let mut done = Vec::new();
/// legacy.complete(first + wake, &mut done);
/// assert_eq!(done, [1]);
/// // The next command started when the thread did, not when the card finished.
/// assert_eq!(legacy.next_completion(), Some(first + wake + p.read.time_ns(128 * 1024) + wake));
/// ```
#[derive(Debug)]
pub struct LegacyMmc {
    card: MmcCard,
    wake_ns: u64,
}

impl LegacyMmc {
    /// `card` behind a queue thread that takes `wake_ns` to wake
    /// ([`QUEUE_THREAD_WAKE_NS`] for the seed's).
    ///
    /// ```
    /// use blkmq_sim::{CardParams, LegacyMmc, MmcCard, QUEUE_THREAD_WAKE_NS};
    /// let legacy = LegacyMmc::new(MmcCard::new(CardParams::default()).unwrap(), QUEUE_THREAD_WAKE_NS);
    /// assert_eq!(legacy.wake_ns(), 10_000);
    /// ```
    pub fn new(card: MmcCard, wake_ns: u64) -> Self {
        Self { card, wake_ns }
    }

    /// The card.
    ///
    /// ```
    /// use blkmq_sim::{CardParams, LegacyMmc, MmcCard};
    /// let legacy = LegacyMmc::new(MmcCard::new(CardParams::default()).unwrap(), 0);
    /// assert!(legacy.card().is_idle());
    /// ```
    pub fn card(&self) -> &MmcCard {
        &self.card
    }

    /// The thread's wake-up time.
    ///
    /// ```
    /// use blkmq_sim::{CardParams, LegacyMmc, MmcCard};
    /// let legacy = LegacyMmc::new(MmcCard::new(CardParams::default()).unwrap(), 7);
    /// assert_eq!(legacy.wake_ns(), 7);
    /// ```
    pub fn wake_ns(&self) -> u64 {
        self.wake_ns
    }
}

impl DeviceModel for LegacyMmc {
    fn name(&self) -> &'static str {
        "mmc (legacy thread)"
    }

    fn capacity(&self) -> u64 {
        self.card.capacity()
    }

    fn queue_depth(&self) -> usize {
        self.card.queue_depth()
    }

    fn limits(&self) -> QueueLimits {
        self.card.limits()
    }

    /// The card's time on an idle card, and the thread's two wake-ups (to start the
    /// command, to see it end).
    fn service_ns(&self, start_ns: u64, cmd: &Command) -> u64 {
        self.card.service_ns(start_ns, cmd) + 2 * self.wake_ns
    }

    /// The thread takes the request once woken: it prepares it then, and starts it at
    /// once on an idle card.
    fn submit(&mut self, now_ns: u64, id: CmdId, cmd: Command) -> Result<(), Command> {
        self.card.submit(now_ns + self.wake_ns, id, cmd)
    }

    /// When the thread, woken by the card's interrupt, sees the command done.
    fn next_completion(&self) -> Option<u64> {
        self.card.next_completion().map(|t| t + self.wake_ns)
    }

    /// The thread ends what the card finished and starts the prepared command, now.
    fn complete(&mut self, now_ns: u64, done: &mut Vec<CmdId>) {
        self.card.complete(now_ns, done);
    }

    fn in_flight(&self) -> usize {
        self.card.in_flight()
    }

    fn stats(&self) -> DeviceStats {
        self.card.stats()
    }
}
