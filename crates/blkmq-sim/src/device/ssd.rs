//! A flash SSD: `channels` NAND units working in parallel behind one host link.

use blkmq_core::{Op, QueueLimits, SECTOR_SIZE};

use super::{
    CmdId, Command, DeviceModel, DeviceStats, ParamError, Running, Timeline, require, transfer_ns,
};

/// The parameters of an [`Ssd`], with the sources of their defaults below.
///
/// ```
/// use blkmq_sim::SsdParams;
/// let p = SsdParams::default();
/// assert_eq!((p.channels, p.stripe_bytes, p.queue_depth), (8, 16 * 1024, 32));
/// ```
///
/// # Where the defaults come from
///
/// A 500 GB SATA SSD as its datasheet describes one (the figures of a Samsung 860 EVO
/// class drive): 976773168 sectors (the IDEMA count for 500 GB); the SATA 6 Gb/s link
/// carries about 550 MB/s, which caps sequential reads and writes (datasheet 550 / 520
/// MB/s); 8 channels of 400 MB/s with 16 KiB pages; a 4 KiB random read at queue depth 1
/// takes `15 + 75 + 10 + 7 = 108 µs` (datasheet: about 10K IOPS), and at depth 32 the
/// channels give `8 / 85 µs = 94K IOPS` (datasheet: 98K IOPS); writes are acknowledged
/// from the buffer after 5 µs of NAND time. NCQ holds 32 commands; requests are limited
/// to Linux's default 1280 KiB; TRIM is supported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SsdParams {
    /// Capacity in sectors (default 976773168: 500 GB).
    pub capacity_sectors: u64,
    /// Independent NAND units (default 8).
    pub channels: usize,
    /// The striping unit, a NAND page (default 16 KiB).
    pub stripe_bytes: u64,
    /// Controller and protocol time per command (default 15 µs).
    pub overhead_ns: u64,
    /// NAND read of one stripe (default 75 µs).
    pub read_ns: u64,
    /// NAND time of one stripe written into the buffer (default 5 µs).
    pub write_ns: u64,
    /// Bytes per second of one channel (default 400 MB/s).
    pub channel_bw: u64,
    /// Bytes per second of the host link (default 550 MB/s).
    pub host_bw: u64,
    /// Commands the drive holds (default 32).
    pub queue_depth: usize,
    /// The largest request in sectors (default 2560).
    pub max_sectors: u32,
    /// The largest discard in sectors (default 2^22: 2 GiB).
    pub max_discard_sectors: u32,
}

impl Default for SsdParams {
    fn default() -> Self {
        Self {
            capacity_sectors: 976_773_168,
            channels: 8,
            stripe_bytes: 16 * 1024,
            overhead_ns: 15_000,
            read_ns: 75_000,
            write_ns: 5_000,
            channel_bw: 400_000_000,
            host_bw: 550_000_000,
            queue_depth: 32,
            max_sectors: 2560,
            max_discard_sectors: 1 << 22,
        }
    }
}

/// A flash SSD with internal parallelism; the cost of a command is below.
///
/// ```
/// use blkmq_core::Op;
/// use blkmq_sim::{Command, DeviceModel, Ssd, SsdParams, transfer_ns};
///
/// let p = SsdParams::default();
/// let ssd = Ssd::new(p).unwrap();
/// let t = ssd.service_ns(0, &Command::new(Op::Read, 0, 8));
/// let expected = p.overhead_ns + p.read_ns + transfer_ns(4096, p.channel_bw)
///     + transfer_ns(4096, p.host_bw);
/// assert_eq!(t, expected);
/// ```
///
/// # The cost of a command
///
/// Data is striped over the channels in `stripe_bytes` units (stripe `k` lives on channel
/// `k mod channels`). Each channel serves its share of a command in arrival order: per
/// stripe touched, the NAND operation (`read_ns`, or `write_ns` for a write taken into
/// the drive's buffer), plus its bytes at `channel_bw`. The host link moves the whole
/// command's bytes at `host_bw`: after the channels for a read, before them for a write.
/// The link is shared: a transfer takes the earliest free stretch of it at or after its
/// data is ready. `overhead_ns` (controller and protocol) comes first. Flushes, discards
/// and write-zeroes cost the overhead only.
///
/// Garbage collection and the write buffer filling up are not modelled: sustained random
/// writes come out faster than on a real drive.
#[derive(Debug)]
pub struct Ssd {
    params: SsdParams,
    /// When each channel is free.
    free: Vec<u64>,
    link: Timeline,
    /// (end, arrival number, id) of each command in progress.
    running: Running,
    stats: DeviceStats,
    /// Scratch: (stripes, bytes) per channel of the command being placed.
    share: Vec<(u64, u64)>,
}

impl Ssd {
    /// An SSD with `params`.
    ///
    /// # Errors
    /// Zero channels, stripe, bandwidths, capacity or queue depth, or limits blkmq refuses.
    ///
    /// ```
    /// use blkmq_sim::{Ssd, SsdParams};
    /// assert!(Ssd::new(SsdParams::default()).is_ok());
    /// assert_eq!(Ssd::new(SsdParams { channels: 0, ..Default::default() }).unwrap_err().what, "channels");
    /// ```
    pub fn new(params: SsdParams) -> Result<Self, ParamError> {
        require(
            params.capacity_sectors > 0,
            "capacity_sectors",
            "must not be 0",
        )?;
        require(params.channels > 0, "channels", "must be at least 1")?;
        require(
            params.stripe_bytes >= SECTOR_SIZE && params.stripe_bytes % SECTOR_SIZE == 0,
            "stripe_bytes",
            "must be a whole number of sectors",
        )?;
        require(params.channel_bw > 0, "channel_bw", "must not be 0")?;
        require(params.host_bw > 0, "host_bw", "must not be 0")?;
        require(params.queue_depth > 0, "queue_depth", "must be at least 1")?;
        let ssd = Self {
            params,
            free: vec![0; params.channels],
            link: Timeline::default(),
            running: Running::default(),
            stats: DeviceStats::default(),
            share: vec![(0, 0); params.channels],
        };
        require(
            ssd.limits().validate().is_ok(),
            "max_sectors",
            "the request limits are not valid queue limits",
        )?;
        Ok(ssd)
    }

    /// The parameters.
    ///
    /// ```
    /// use blkmq_sim::{Ssd, SsdParams};
    /// assert_eq!(Ssd::new(SsdParams::default()).unwrap().params().channels, 8);
    /// ```
    pub fn params(&self) -> &SsdParams {
        &self.params
    }

    /// The channel that holds byte `offset` of the device.
    ///
    /// ```
    /// use blkmq_sim::{Ssd, SsdParams};
    /// let ssd = Ssd::new(SsdParams::default()).unwrap();
    /// assert_eq!(ssd.channel_of(0), 0);
    /// assert_eq!(ssd.channel_of(16 * 1024), 1);
    /// assert_eq!(ssd.channel_of(8 * 16 * 1024), 0); // wraps after 8 stripes
    /// ```
    pub fn channel_of(&self, offset: u64) -> usize {
        ((offset / self.params.stripe_bytes) % self.params.channels as u64) as usize
    }

    /// Fills `share` with each channel's (stripes, bytes) of `cmd`.
    fn split(&self, cmd: &Command, share: &mut [(u64, u64)]) {
        share.fill((0, 0));
        let stripe = self.params.stripe_bytes;
        let mut at = cmd.sector * SECTOR_SIZE;
        let end = cmd.end_sector() * SECTOR_SIZE;
        while at < end {
            let next = ((at / stripe) + 1) * stripe;
            let len = next.min(end) - at;
            let c = self.channel_of(at);
            share[c].0 += 1;
            share[c].1 += len;
            at += len;
        }
    }

    /// When `cmd` issued at `now` would end, given channel free times `free`; updates
    /// `free`, and the link when `link` is given (else only looks at it).
    fn place(
        &self,
        now: u64,
        cmd: &Command,
        share: &[(u64, u64)],
        free: &mut [u64],
        link: Option<&mut Timeline>,
    ) -> u64 {
        let p = &self.params;
        let t0 = now + p.overhead_ns;
        if !cmd.op.has_data() {
            return t0;
        }
        let xfer = transfer_ns(cmd.bytes(), p.host_bw);
        let op_ns = if cmd.op == Op::Read {
            p.read_ns
        } else {
            p.write_ns
        };
        let occupy =
            |(stripes, bytes): (u64, u64)| stripes * op_ns + transfer_ns(bytes, p.channel_bw);
        match cmd.op {
            Op::Read => {
                let mut ready = t0;
                for (c, &s) in share.iter().enumerate() {
                    if s.0 == 0 {
                        continue;
                    }
                    let end = t0.max(free[c]) + occupy(s);
                    free[c] = end;
                    ready = ready.max(end);
                }
                let start = match link {
                    Some(link) => link.reserve(ready, xfer),
                    None => self.link.find(ready, xfer),
                };
                start + xfer
            }
            _ => {
                let start = match link {
                    Some(link) => link.reserve(t0, xfer),
                    None => self.link.find(t0, xfer),
                };
                let data_in = start + xfer;
                let mut done = data_in;
                for (c, &s) in share.iter().enumerate() {
                    if s.0 == 0 {
                        continue;
                    }
                    let end = data_in.max(free[c]) + occupy(s);
                    free[c] = end;
                    done = done.max(end);
                }
                done
            }
        }
    }
}

impl DeviceModel for Ssd {
    fn name(&self) -> &'static str {
        "ssd"
    }

    fn capacity(&self) -> u64 {
        self.params.capacity_sectors
    }

    fn queue_depth(&self) -> usize {
        self.params.queue_depth
    }

    fn limits(&self) -> QueueLimits {
        QueueLimits {
            max_discard_sectors: self.params.max_discard_sectors,
            ..super::base_limits(self.params.capacity_sectors, self.params.max_sectors, 128)
        }
    }

    fn service_ns(&self, start_ns: u64, cmd: &Command) -> u64 {
        let mut share = vec![(0, 0); self.params.channels];
        self.split(cmd, &mut share);
        let mut free = self.free.clone();
        self.place(start_ns, cmd, &share, &mut free, None) - start_ns
    }

    fn submit(&mut self, now_ns: u64, id: CmdId, cmd: Command) -> Result<(), Command> {
        if self.running.len() >= self.params.queue_depth {
            return Err(cmd);
        }
        self.link.prune(now_ns);
        let mut share = std::mem::take(&mut self.share);
        let mut free = std::mem::take(&mut self.free);
        let mut link = std::mem::take(&mut self.link);
        self.split(&cmd, &mut share);
        let done = self.place(now_ns, &cmd, &share, &mut free, Some(&mut link));
        self.share = share;
        self.free = free;
        self.link = link;
        self.stats.count(&cmd);
        self.stats.busy_ns += done - now_ns;
        self.running.push(done, id);
        Ok(())
    }

    fn next_completion(&self) -> Option<u64> {
        self.running.next_end()
    }

    fn complete(&mut self, now_ns: u64, done: &mut Vec<CmdId>) {
        self.running.complete(now_ns, done);
    }

    fn in_flight(&self) -> usize {
        self.running.len()
    }

    fn stats(&self) -> DeviceStats {
        self.stats
    }
}
