//! `dd`: a sequential transfer of N bytes through the page cache — readahead-sized bios,
//! a window of them in flight, each refill submitted under a plug.

use std::fmt;

use blkmq_core::{BioFlags, IssuerId, Op, SECTOR_SIZE};

use super::{Cx, Done, Io, Workload};
use crate::report::dd_line;
use crate::sim::sectors_of;

/// A sequential read or write of `bytes` from a sector, as `dd` through the page cache
/// issues it.
///
/// The transfer goes in bios of `bio_bytes` (default 128 KiB: Linux's default
/// `read_ahead_kb`), keeping up to `window` of them in flight (default 2: the readahead
/// window being read and the one read ahead asynchronously). When the bios in flight fall
/// to `window - refill` (default `refill` = 1), the next `refill` go in under one plug, so
/// they may merge into one request. `block_bytes` (default 1 MiB, `bs=1M`) only sets the
/// "records" lines of the result.
///
/// ```
/// use blkmq_sim::{Dd, Ideal, IdealParams, Sim};
///
/// let params = IdealParams { latency_ns: 1_000_000, bandwidth: 0, ..Default::default() };
/// let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
/// let dd = sim.add_workload(queue, Dd::read(0, 1 << 20).window(4).refill(4));
/// sim.run().unwrap();
/// let result = sim.workload(dd).result().unwrap();
/// // 8 bios of 128 KiB, 4 at a time, each 4 merged by the plug into one request of 1 ms.
/// assert_eq!((result.bytes, result.elapsed_ns), (1 << 20, 2_000_000));
/// assert_eq!(
///     result.to_string(),
///     "1+0 records in\n1+0 records out\n1048576 bytes (1.0MB) copied, 0.002000 seconds, 500.0MB/s"
/// );
/// ```
#[derive(Clone, Debug)]
pub struct Dd {
    op: Op,
    start_sector: u64,
    total: u64,
    bio_bytes: u64,
    window: usize,
    refill: usize,
    block_bytes: u64,
    issuer: IssuerId,
    flags: BioFlags,
    issued: u64,
    moved: u64,
    in_flight: usize,
    errors: u64,
    started_ns: Option<u64>,
    last_ns: u64,
}

/// What a [`Dd`] did; displays as busybox `dd` reports it.
///
/// ```
/// use blkmq_sim::DdResult;
/// let r = DdResult { bytes: 1 << 30, elapsed_ns: 47_781_464_000, block_bytes: 1 << 20, errors: 0 };
/// assert_eq!(
///     r.to_string(),
///     "1024+0 records in\n1024+0 records out\n\
///      1073741824 bytes (1.0GB) copied, 47.781464 seconds, 21.4MB/s"
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DdResult {
    /// Bytes moved.
    pub bytes: u64,
    /// From the first submission to the last completion.
    pub elapsed_ns: u64,
    /// `dd`'s block size (for the records lines).
    pub block_bytes: u64,
    /// Bios that ended with an error.
    pub errors: u64,
}

impl fmt::Display for DdResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bs = self.block_bytes.max(1);
        let (full, partial) = (self.bytes / bs, u64::from(self.bytes % bs != 0));
        writeln!(f, "{full}+{partial} records in")?;
        writeln!(f, "{full}+{partial} records out")?;
        f.write_str(&dd_line(self.bytes, self.elapsed_ns))
    }
}

impl Dd {
    fn new(op: Op, start_sector: u64, bytes: u64) -> Self {
        Self {
            op,
            start_sector,
            total: sectors_of(bytes) * SECTOR_SIZE,
            bio_bytes: 128 * 1024,
            window: 2,
            refill: 1,
            block_bytes: 1 << 20,
            issuer: IssuerId(0),
            flags: BioFlags::empty(),
            issued: 0,
            moved: 0,
            in_flight: 0,
            errors: 0,
            started_ns: None,
            last_ns: 0,
        }
    }

    /// Reads `bytes` (rounded up to whole sectors) from `start_sector`.
    ///
    /// ```
    /// use blkmq_sim::{Dd, Workload};
    /// assert_eq!(Dd::read(0, 1000).claimed_bytes(), 1024);
    /// ```
    pub fn read(start_sector: u64, bytes: u64) -> Self {
        Self::new(Op::Read, start_sector, bytes)
    }

    /// Writes `bytes` (rounded up to whole sectors) from `start_sector`.
    ///
    /// ```
    /// use blkmq_sim::{Dd, Workload};
    /// assert_eq!(Dd::write(0, 4096).name(), "dd write");
    /// ```
    pub fn write(start_sector: u64, bytes: u64) -> Self {
        Self::new(Op::Write, start_sector, bytes)
    }

    /// With bios of `bytes` (rounded up to whole sectors, at least one, at most what a bio
    /// holds: `u32::MAX` sectors).
    ///
    /// ```
    /// use blkmq_sim::{Dd, Ideal, IdealParams, Sim};
    /// let (mut sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
    /// sim.add_workload(queue, Dd::read(0, 1 << 20).bio_bytes(4096));
    /// assert_eq!(sim.run().unwrap().stats.bios_submitted, 256);
    /// ```
    pub fn bio_bytes(mut self, bytes: u64) -> Self {
        self.bio_bytes = sectors_of(bytes).clamp(1, u64::from(u32::MAX)) * SECTOR_SIZE;
        self
    }

    /// With up to `bios` in flight (at least one; `refill` is capped to it).
    ///
    /// ```
    /// use blkmq_sim::Dd;
    /// let dd = Dd::read(0, 1 << 20).window(8).refill(4);
    /// # let _ = dd;
    /// ```
    pub fn window(mut self, bios: usize) -> Self {
        self.window = bios.max(1);
        self.refill = self.refill.min(self.window);
        self
    }

    /// Refilling `bios` at a time, under one plug (at least one, at most the window).
    ///
    /// ```
    /// use blkmq_sim::{Dd, Ideal, IdealParams, Sim};
    /// let (mut sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
    /// // Refilled 4 at a time, every 4 bios of 128 KiB merge into one 512 KiB request.
    /// sim.add_workload(queue, Dd::read(0, 4 << 20).window(4).refill(4));
    /// sim.run().unwrap();
    /// assert_eq!(sim.host().driver().with_model(|m| blkmq_sim::DeviceModel::stats(m).commands), 8);
    /// ```
    pub fn refill(mut self, bios: usize) -> Self {
        self.refill = bios.clamp(1, self.window);
        self
    }

    /// With `dd`'s block size `bytes`, for the records lines of the result.
    ///
    /// ```
    /// use blkmq_sim::{Dd, Ideal, IdealParams, Sim};
    /// let (mut sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
    /// let dd = sim.add_workload(queue, Dd::read(0, 3 << 19).block_bytes(1 << 20));
    /// sim.run().unwrap();
    /// assert!(sim.workload(dd).result().unwrap().to_string().starts_with("1+1 records in"));
    /// ```
    pub fn block_bytes(mut self, bytes: u64) -> Self {
        self.block_bytes = bytes.max(1);
        self
    }

    /// From `issuer`.
    ///
    /// ```
    /// use blkmq_core::IssuerId;
    /// use blkmq_sim::{Dd, Ideal, IdealParams, Sim};
    /// let (mut sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
    /// sim.add_workload(queue, Dd::read(0, 4096).issuer(IssuerId(5)));
    /// assert_eq!(sim.run().unwrap().issuers[0].issuer, IssuerId(5));
    /// ```
    pub fn issuer(mut self, issuer: IssuerId) -> Self {
        self.issuer = issuer;
        self
    }

    /// With these bio flags.
    ///
    /// ```
    /// use blkmq_core::BioFlags;
    /// use blkmq_sim::Dd;
    /// let dd = Dd::write(0, 1 << 20).flags(BioFlags::SYNC);
    /// # let _ = dd;
    /// ```
    pub fn flags(mut self, flags: BioFlags) -> Self {
        self.flags = flags;
        self
    }

    /// The result, once every byte has moved.
    ///
    /// ```
    /// use blkmq_sim::{Dd, Ideal, IdealParams, Sim};
    /// let (mut sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
    /// let dd = sim.add_workload(queue, Dd::write(0, 1 << 20));
    /// assert!(sim.workload(dd).result().is_none()); // not run yet
    /// sim.run().unwrap();
    /// let result = sim.workload(dd).result().unwrap();
    /// assert_eq!((result.bytes, result.errors), (1 << 20, 0));
    /// ```
    pub fn result(&self) -> Option<DdResult> {
        let started = self.started_ns?;
        (self.issued == self.total && self.in_flight == 0).then_some(DdResult {
            bytes: self.moved,
            elapsed_ns: self.last_ns - started,
            block_bytes: self.block_bytes,
            errors: self.errors,
        })
    }

    /// Submits up to `count` more bios under one plug.
    fn issue(&mut self, cx: &mut Cx<'_>, count: usize) {
        let mut ios = Vec::with_capacity(count);
        while ios.len() < count && self.issued < self.total {
            let len = self.bio_bytes.min(self.total - self.issued);
            let sector = self.start_sector + self.issued / SECTOR_SIZE;
            let io = Io::new(self.op, sector, (len / SECTOR_SIZE) as u32)
                .flags(self.flags)
                .issuer(self.issuer);
            ios.push(io);
            self.issued += len;
        }
        self.in_flight += ios.len();
        cx.submit_plugged(ios);
    }
}

impl Workload for Dd {
    fn name(&self) -> String {
        match self.op {
            Op::Read => "dd read".into(),
            _ => "dd write".into(),
        }
    }

    fn start(&mut self, cx: &mut Cx<'_>) {
        self.started_ns = Some(cx.now_ns());
        self.last_ns = cx.now_ns();
        self.issue(cx, self.window);
    }

    fn completed(&mut self, cx: &mut Cx<'_>, done: &Done) {
        self.in_flight -= 1;
        self.last_ns = done.completed_ns;
        if done.status.is_ok() {
            self.moved += done.bytes;
        } else {
            self.errors += 1;
        }
        if self.in_flight <= self.window - self.refill {
            self.issue(cx, self.window - self.in_flight);
        }
    }

    fn is_finished(&self) -> bool {
        self.started_ns.is_some() && self.issued == self.total
    }

    fn claimed_bytes(&self) -> u64 {
        self.total
    }
}
