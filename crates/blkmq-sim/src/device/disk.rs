//! A rotational disk: controller overhead, a seek that grows with the distance, the
//! rotational position of the platter, the media transfer, and an optional internal
//! queue that reorders commands (SATA NCQ).

use blkmq_core::QueueLimits;

use super::{CmdId, Command, DeviceModel, DeviceStats, ParamError, require};

/// The parameters of a [`Disk`], with the sources of their defaults below.
///
/// ```
/// use blkmq_sim::DiskParams;
/// let p = DiskParams::default();
/// assert_eq!((p.rpm, p.queue_depth), (7200, 1));
/// assert_eq!(p.period_ns(), 8_333_333);
/// assert_eq!(DiskParams::ncq().queue_depth, 32);
/// ```
///
/// # Where the defaults come from
///
/// A 1 TB 7200 rpm SATA drive as datasheets describe one: 1953525168 sectors (the IDEMA
/// LBA count for 1 TB); 2048 sectors per track, which at 7200 rpm streams 125.8 MB/s
/// (datasheets give 125-150 MB/s sustained); track-to-track seek 1 ms and full stroke
/// 15 ms, whose square-root curve averages `1 + 14 * 8/15 = 8.47 ms` over random pairs of
/// tracks (datasheets: "average seek 8.5 ms"); 0.1 ms of controller overhead. The queue
/// limits are Linux's defaults (1280 KiB requests, 128 segments). NCQ is off; turn it on
/// with [`DiskParams::ncq`] (32 commands, the SATA maximum).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskParams {
    /// Capacity in sectors (default 1953525168: 1 TB).
    pub capacity_sectors: u64,
    /// Spindle speed (default 7200).
    pub rpm: u32,
    /// Sectors on every track (default 2048).
    pub sectors_per_track: u32,
    /// Seek to the next track (default 1 ms).
    pub track_to_track_ns: u64,
    /// Seek across the whole disk (default 15 ms).
    pub full_stroke_ns: u64,
    /// Controller time per command (default 0.1 ms).
    pub overhead_ns: u64,
    /// Commands the drive holds (default 1: no internal queue).
    pub queue_depth: usize,
    /// With an internal queue, the longest a command is passed over (default 250 ms).
    pub max_wait_ns: u64,
    /// The largest request in sectors (default 2560: Linux's default).
    pub max_sectors: u32,
    /// Segments per request (default 128).
    pub max_segments: u32,
}

impl Default for DiskParams {
    fn default() -> Self {
        Self {
            capacity_sectors: 1_953_525_168,
            rpm: 7200,
            sectors_per_track: 2048,
            track_to_track_ns: 1_000_000,
            full_stroke_ns: 15_000_000,
            overhead_ns: 100_000,
            queue_depth: 1,
            max_wait_ns: 250_000_000,
            max_sectors: 2560,
            max_segments: 128,
        }
    }
}

impl DiskParams {
    /// The defaults with NCQ on: 32 commands reordered inside the drive.
    ///
    /// ```
    /// use blkmq_sim::DiskParams;
    /// assert_eq!(DiskParams::ncq().rpm, DiskParams::default().rpm);
    /// ```
    pub fn ncq() -> Self {
        Self {
            queue_depth: 32,
            ..Self::default()
        }
    }

    /// One turn of the platter, in nanoseconds (rounded down).
    ///
    /// ```
    /// use blkmq_sim::DiskParams;
    /// assert_eq!(DiskParams { rpm: 6000, ..DiskParams::default() }.period_ns(), 10_000_000);
    /// ```
    pub fn period_ns(&self) -> u64 {
        60_000_000_000 / u64::from(self.rpm.max(1))
    }

    /// How many tracks the disk has.
    ///
    /// ```
    /// use blkmq_sim::DiskParams;
    /// let p = DiskParams { capacity_sectors: 8_000, sectors_per_track: 1_000, ..DiskParams::default() };
    /// assert_eq!(p.tracks(), 8);
    /// ```
    pub fn tracks(&self) -> u64 {
        self.capacity_sectors
            .div_ceil(u64::from(self.sectors_per_track.max(1)))
    }

    /// The seek across `distance` tracks.
    ///
    /// ```
    /// use blkmq_sim::DiskParams;
    /// let p = DiskParams { capacity_sectors: 8_000, sectors_per_track: 1_000, ..DiskParams::default() };
    /// assert_eq!(p.seek_ns(0), 0);
    /// assert_eq!(p.seek_ns(2), 1_000_000 + 14_000_000 / 2); // sqrt(2 / 8) = 1/2
    /// assert_eq!(p.seek_ns(8), 15_000_000);
    /// ```
    pub fn seek_ns(&self, distance: u64) -> u64 {
        if distance == 0 {
            return 0;
        }
        let tracks = u128::from(self.tracks().max(1));
        let fraction = ((u128::from(distance.min(self.tracks())) << 32) / tracks) as u64;
        let root = fraction.isqrt(); // out of 1 << 16
        let span = self.full_stroke_ns.saturating_sub(self.track_to_track_ns);
        self.track_to_track_ns + ((u128::from(span) * u128::from(root)) >> 16) as u64
    }
}

/// A command waiting in the drive's queue.
#[derive(Clone, Copy, Debug)]
struct Queued {
    id: CmdId,
    cmd: Command,
    arrival: u64,
}

/// A rotational disk with an optional internal queue; the cost of a command is below.
///
/// ```
/// use blkmq_core::Op;
/// use blkmq_sim::{Command, DeviceModel, Disk, DiskParams};
///
/// let p = DiskParams::default();
/// let disk = Disk::new(p).unwrap();
/// // Sector 0 at time 0: no seek, no rotation, just the overhead and the transfer.
/// let t = disk.service_ns(0, &Command::new(Op::Read, 0, 2048));
/// assert_eq!(t, p.overhead_ns + p.period_ns());
/// ```
///
/// # The cost of a command
///
/// A command that starts where the last one ended streams: `overhead_ns` and the
/// transfer only (the drive's read-ahead and write buffer hide positioning). Any other
/// command pays:
///
/// * a seek across `d` of the disk's `T` tracks: 0 on the same track, else
///   `track_to_track_ns + (full_stroke_ns - track_to_track_ns) * sqrt(d / T)` (the
///   square-root curve of arm acceleration, as in Ruemmler and Wilkes, "An introduction to
///   disk drive modeling", 1994);
/// * the rotational latency: the platter turns at `rpm`, sector `s` passes under the head
///   at angle `(s mod sectors_per_track) / sectors_per_track` of a turn, and the platter
///   is at angle 0 at time 0 — so the wait is exact, not an average;
/// * the transfer, `sectors / sectors_per_track` of a turn.
///
/// Every track holds `sectors_per_track` sectors (no zones). With an internal queue
/// (`queue_depth` above 1) the drive serves next the queued command with the shortest
/// positioning time, unless the oldest has waited `max_wait_ns`, which then goes first.
#[derive(Debug)]
pub struct Disk {
    params: DiskParams,
    /// The sector after the last command: where the head is.
    head: u64,
    busy: Option<(CmdId, u64)>,
    queue: Vec<Queued>,
    stats: DeviceStats,
}

impl Disk {
    /// A disk with `params`.
    ///
    /// # Errors
    /// A zero capacity, speed, track length or queue depth, a full stroke shorter than a
    /// track-to-track seek, or limits blkmq refuses.
    ///
    /// ```
    /// use blkmq_sim::{Disk, DiskParams};
    /// assert!(Disk::new(DiskParams::ncq()).is_ok());
    /// let bad = DiskParams { full_stroke_ns: 1, ..DiskParams::default() };
    /// assert_eq!(Disk::new(bad).unwrap_err().what, "full_stroke_ns");
    /// ```
    pub fn new(params: DiskParams) -> Result<Self, ParamError> {
        require(
            params.capacity_sectors > 0,
            "capacity_sectors",
            "must not be 0",
        )?;
        require(params.rpm > 0, "rpm", "must not be 0")?;
        require(
            params.sectors_per_track > 0,
            "sectors_per_track",
            "must not be 0",
        )?;
        require(params.queue_depth > 0, "queue_depth", "must be at least 1")?;
        require(
            params.full_stroke_ns >= params.track_to_track_ns,
            "full_stroke_ns",
            "must be at least track_to_track_ns",
        )?;
        let disk = Self {
            params,
            head: 0,
            busy: None,
            queue: Vec::new(),
            stats: DeviceStats::default(),
        };
        require(
            disk.limits().validate().is_ok(),
            "max_sectors",
            "the request limits are not valid queue limits",
        )?;
        Ok(disk)
    }

    /// The parameters.
    ///
    /// ```
    /// use blkmq_sim::{Disk, DiskParams};
    /// assert_eq!(Disk::new(DiskParams::default()).unwrap().params().rpm, 7200);
    /// ```
    pub fn params(&self) -> &DiskParams {
        &self.params
    }

    /// Where the head is: the sector after the last command started.
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::{Command, DeviceModel, Disk, DiskParams};
    /// let mut disk = Disk::new(DiskParams::default()).unwrap();
    /// disk.submit(0, 1, Command::new(Op::Read, 5_000, 8)).unwrap();
    /// assert_eq!(disk.head(), 5_008);
    /// ```
    pub fn head(&self) -> u64 {
        self.head
    }

    /// The rotational wait, from `at_ns`, for `sector` to come under the head.
    ///
    /// ```
    /// use blkmq_sim::{Disk, DiskParams};
    /// let p = DiskParams { rpm: 6000, sectors_per_track: 1_000, ..DiskParams::default() };
    /// let disk = Disk::new(p).unwrap();
    /// assert_eq!(disk.rotation_ns(0, 500), 5_000_000); // half a turn ahead
    /// assert_eq!(disk.rotation_ns(6_000_000, 500), 9_000_000); // just passed: nearly a turn
    /// ```
    pub fn rotation_ns(&self, at_ns: u64, sector: u64) -> u64 {
        let period = self.params.period_ns();
        let spt = u64::from(self.params.sectors_per_track);
        let target = (u128::from(sector % spt) * u128::from(period) / u128::from(spt)) as u64;
        let angle = at_ns % period;
        (target + period - angle) % period
    }

    /// The media transfer of `sectors`.
    fn transfer_ns(&self, sectors: u64) -> u64 {
        let period = u128::from(self.params.period_ns());
        (u128::from(sectors) * period / u128::from(self.params.sectors_per_track)) as u64
    }

    fn start(&mut self, at_ns: u64, id: CmdId, cmd: Command) {
        let service = self.service_ns(at_ns, &cmd);
        if cmd.op.has_data() {
            self.head = cmd.end_sector();
        }
        self.stats.count(&cmd);
        self.stats.busy_ns += service;
        self.busy = Some((id, at_ns + service));
    }

    /// The queued command to serve next at `at_ns`: the oldest if it waited too long, else
    /// the one that is quickest to reach.
    fn pick(&self, at_ns: u64) -> Option<usize> {
        let oldest = self.queue.first()?;
        if at_ns.saturating_sub(oldest.arrival) >= self.params.max_wait_ns {
            return Some(0);
        }
        let mut best = 0;
        let mut best_ns = u64::MAX;
        for (i, q) in self.queue.iter().enumerate() {
            let ns = self.service_ns(at_ns, &q.cmd);
            if ns < best_ns {
                best = i;
                best_ns = ns;
            }
        }
        Some(best)
    }
}

impl DeviceModel for Disk {
    fn name(&self) -> &'static str {
        "disk"
    }

    fn capacity(&self) -> u64 {
        self.params.capacity_sectors
    }

    fn queue_depth(&self) -> usize {
        self.params.queue_depth
    }

    fn limits(&self) -> QueueLimits {
        QueueLimits {
            rotational: true,
            ..super::base_limits(
                self.params.capacity_sectors,
                self.params.max_sectors,
                self.params.max_segments,
            )
        }
    }

    fn service_ns(&self, start_ns: u64, cmd: &Command) -> u64 {
        let p = &self.params;
        if !cmd.op.has_data() {
            return p.overhead_ns;
        }
        let xfer = self.transfer_ns(cmd.sectors);
        if cmd.sector == self.head {
            return p.overhead_ns + xfer;
        }
        let spt = u64::from(p.sectors_per_track);
        let distance = (cmd.sector / spt).abs_diff(self.head / spt);
        let seek = p.seek_ns(distance);
        let rotation = self.rotation_ns(start_ns + p.overhead_ns + seek, cmd.sector);
        p.overhead_ns + seek + rotation + xfer
    }

    fn submit(&mut self, now_ns: u64, id: CmdId, cmd: Command) -> Result<(), Command> {
        if self.in_flight() >= self.params.queue_depth {
            return Err(cmd);
        }
        if self.busy.is_none() {
            self.start(now_ns, id, cmd);
        } else {
            self.queue.push(Queued {
                id,
                cmd,
                arrival: now_ns,
            });
        }
        Ok(())
    }

    fn next_completion(&self) -> Option<u64> {
        self.busy.map(|(_, done)| done)
    }

    fn complete(&mut self, now_ns: u64, done: &mut Vec<CmdId>) {
        while let Some((id, end)) = self.busy {
            if end > now_ns {
                break;
            }
            self.busy = None;
            done.push(id);
            if let Some(i) = self.pick(end) {
                let next = self.queue.remove(i);
                self.start(end, next.id, next.cmd);
            }
        }
    }

    fn in_flight(&self) -> usize {
        usize::from(self.busy.is_some()) + self.queue.len()
    }

    fn stats(&self) -> DeviceStats {
        self.stats
    }
}
